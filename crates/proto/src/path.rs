//! Relative paths as they travel on the wire: raw bytes (names need not be UTF-8), `/`-separated,
//! never absolute, never containing `.`, `..`, empty components or NUL. The empty path means the
//! root of the transfer itself.

use crate::codec::DecodeError;

/// Longest relative path accepted from a peer (Linux PATH_MAX).
pub const MAX_PATH: usize = 4096;
/// Longest single name (Linux NAME_MAX).
pub const MAX_NAME: usize = 255;

/// Checks that `path` is a safe relative path; returns it unchanged.
pub fn validate(path: &[u8]) -> Result<&[u8], DecodeError> {
    if path.len() > MAX_PATH {
        return Err(DecodeError::TooLong {
            what: "path",
            len: path.len() as u64,
            limit: MAX_PATH as u64,
        });
    }
    if path.is_empty() {
        return Ok(path);
    }
    if path.contains(&0) {
        return Err(invalid("contains a NUL byte"));
    }
    if path[0] == b'/' {
        return Err(invalid("is absolute"));
    }
    for component in path.split(|&b| b == b'/') {
        match component {
            b"" => return Err(invalid("has an empty component")),
            b"." | b".." => return Err(invalid("has a . or .. component")),
            c if c.len() > MAX_NAME => return Err(invalid("has a name longer than 255 bytes")),
            _ => {}
        }
    }
    Ok(path)
}

fn invalid(why: &'static str) -> DecodeError {
    DecodeError::Invalid { what: "path", why }
}

/// Whether relative path `inner` is `outer` or lies below it (component-wise).
pub fn is_within(inner: &[u8], outer: &[u8]) -> bool {
    outer.is_empty()
        || inner == outer
        || (inner.starts_with(outer) && inner.get(outer.len()) == Some(&b'/'))
}

/// Normalises a user-given path (from a URL): drops empty and `.` components and leading
/// slashes, keeps `..` so that [`validate`] refuses it.
pub fn normalize_user_path(path: &[u8]) -> Vec<u8> {
    let parts: Vec<&[u8]> = path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect();
    parts.join(&b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_relative_paths() {
        assert!(validate(b"").is_ok());
        assert!(validate(b"a/b c/\xff\n").is_ok());
    }

    #[test]
    fn refuses_escapes_and_malformed_paths() {
        for bad in [
            &b"/etc"[..],
            b"..",
            b"a/../b",
            b"a//b",
            b"a/",
            b"./a",
            b"a\0b",
        ] {
            assert!(validate(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate(&vec![b'a'; 256]).is_err());
        assert!(validate(&vec![b'a'; MAX_PATH + 1]).is_err());
    }

    #[test]
    fn within_compares_whole_components() {
        assert!(is_within(b"a/b", b"a"));
        assert!(is_within(b"a", b"a"));
        assert!(is_within(b"x", b""));
        assert!(!is_within(b"ab", b"a"));
        assert!(!is_within(b"a", b"a/b"));
    }

    #[test]
    fn normalizes_user_paths_but_keeps_dotdot() {
        assert_eq!(normalize_user_path(b"/a//./b/"), b"a/b");
        assert_eq!(normalize_user_path(b"a/../b"), b"a/../b");
        assert_eq!(normalize_user_path(b"/"), b"");
    }
}
