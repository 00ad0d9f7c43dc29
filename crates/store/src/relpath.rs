//! Relative paths inside a tree, as bytes (names need not be UTF-8): splitting off the final
//! name, joining, and rendering for messages. Paths here are already confined (validated by
//! whoever received them); this module only composes them.

/// Renders a relative path for messages (`.` for the root; see [`display_bytes`]).
pub fn display_path(rel: &[u8]) -> String {
    if rel.is_empty() {
        ".".to_string()
    } else {
        display_bytes(rel).into_owned()
    }
}

/// A name or path as text: its UTF-8 as it is, each byte that is not UTF-8 as `\xNN`, so
/// that two names that differ print differently (a lossy conversion printed both
/// `bad\xff\xfe` and `bad\xfe\xff` as `bad��`). A UTF-8 name stays exact (JSON carries it
/// as it is); a name holding the text `\xff` prints as one holding that byte would.
pub fn display_bytes(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Splits a relative path into its parent directory and final name.
pub fn split_parent(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&[], rel),
    }
}

/// Joins two relative paths (either may be empty).
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(dir.len() + 1 + name.len());
    out.extend_from_slice(dir);
    if !dir.is_empty() && !name.is_empty() {
        out.push(b'/');
    }
    out.extend_from_slice(name);
    out
}

/// The directories `rel` lies in, outermost first (`a`, `a/b` for `a/b/c`; none for `c`).
pub fn ancestors(rel: &[u8]) -> impl Iterator<Item = &[u8]> {
    rel.iter()
        .enumerate()
        .filter(|&(_, &b)| b == b'/')
        .map(move |(i, _)| &rel[..i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_utf8_print_apart() {
        assert_eq!(display_bytes(b"plain/\xc3\xa9"), "plain/\u{e9}");
        assert_eq!(display_bytes(b"bad\xff\xfe"), "bad\\xff\\xfe");
        assert_ne!(display_bytes(b"bad\xff\xfe"), display_bytes(b"bad\xfe\xff"));
        // A UTF-8 name, backslashes included, stays exact.
        assert_eq!(display_bytes(b"a\\b"), "a\\b");
        assert_eq!(display_path(b""), ".");
    }

    #[test]
    fn splits_and_joins() {
        assert_eq!(split_parent(b"a/b/c"), (&b"a/b"[..], &b"c"[..]));
        assert_eq!(split_parent(b"c"), (&b""[..], &b"c"[..]));
        assert_eq!(join(b"", b"c"), b"c");
        assert_eq!(join(b"a", b""), b"a");
        assert_eq!(join(b"a/b", b"c/d"), b"a/b/c/d");
        assert_eq!(display_path(b""), ".");
        let up: Vec<&[u8]> = ancestors(b"a/b/c").collect();
        assert_eq!(up, [&b"a"[..], b"a/b"]);
        assert_eq!(ancestors(b"c").count(), 0);
    }
}
