//! Relative paths inside a tree, as bytes (names need not be UTF-8): splitting off the final
//! name, joining, and rendering for messages. Paths here are already confined (validated by
//! whoever received them); this module only composes them.

/// Renders a relative path for messages (lossy for non-UTF-8 names; `.` for the root).
pub fn display_path(rel: &[u8]) -> String {
    if rel.is_empty() {
        ".".to_string()
    } else {
        String::from_utf8_lossy(rel).into_owned()
    }
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
