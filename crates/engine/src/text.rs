//! Text that came from elsewhere (a peer's error, a file name, a path in a URL), made safe to
//! print on a terminal or in a log: [`printable`] escapes control characters, which could
//! otherwise move the cursor, recolour or clear the screen, rewrite the title, or start a
//! line that looks like one of sprat's own. The one function every human-readable output of
//! sprat goes through for such text (reports, failure lines, errors, listings, the server's
//! log). Not for JSON output, which is escaped by its encoder and kept exact.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control character escaped: C0 (U+0000 to U+001F, newline and tab
/// included) and DEL as `\xNN`, C1 (U+0080 to U+009F) as `\u{NN}`. Everything else,
/// backslashes included, is unchanged, and text without control characters is not copied.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c as u32 {
            n @ (0..=0x1f | 0x7f) => {
                let _ = write!(out, "\\x{n:02x}");
            }
            n @ 0x80..=0x9f => {
                let _ = write!(out, "\\u{{{n:x}}}");
            }
            _ => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn is_control(c: char) -> bool {
    matches!(c as u32, 0..=0x1f | 0x7f..=0x9f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_is_kept() {
        assert!(matches!(printable("plain/dir/file.txt"), Cow::Borrowed(_)));
        assert_eq!(printable("é ü 日本 \\ 'x'"), "é ü 日本 \\ 'x'");
        assert_eq!(
            printable("a\x1b[31mred\nline\t\r"),
            "a\\x1b[31mred\\x0aline\\x09\\x0d"
        );
        assert_eq!(printable("\0\x7f"), "\\x00\\x7f");
        assert_eq!(printable("x\u{9b}2Jy\u{85}"), "x\\u{9b}2Jy\\u{85}");
        // The first character past C1 is printable.
        assert_eq!(printable("\u{a0}"), "\u{a0}");
    }
}
