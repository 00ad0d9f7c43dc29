//! The wire form of what a transfer selects of its source: include/exclude rules as the user
//! gave them (`--include`, `--exclude` and their files) and a `--files-from` list, sent to the
//! server that scans the source (a pull's `Open`, `SendTo`, `List`, `Du`).
//!
//! Only the encoding and its bounds live here; the rules' meaning (rsync's pattern matching)
//! is the store's, which compiles them where the scan runs.
//!
//! ```text
//! u32 rules bytes (<= MAX_RULES_BYTES), then rules: u8 kind (1 include, 2 exclude), u16 len
//!     + pattern (non-empty, no NUL)
//! u8 has list (0 or 1); if 1: u32 list bytes (<= MAX_LIST_BYTES), then paths: u16 len + path
//!     (a valid relative path, not empty)
//! u8 has base (0 or 1; from protocol 23); if 1: u16 len + name (one component, at most 255
//!     bytes, not `.` or `..`): the rules see the source's root as `name`, its entries as
//!     `name/PATH` (rsync's `SRC DST/`)
//! ```

use crate::codec::{put_bytes16, DecodeError, Reader};
use crate::path::{self, MAX_PATH};

/// Most bytes of encoded rules.
pub const MAX_RULES_BYTES: usize = 64 << 10;
/// Most bytes of an encoded `--files-from` list (the rest of a control frame's 1 MiB is left
/// for the message around it).
pub const MAX_LIST_BYTES: usize = 768 << 10;

/// One rule: include (`true`) or exclude, and its pattern.
pub type WireRule = (bool, Vec<u8>);

/// Rules and list, as sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub rules: Vec<WireRule>,
    pub files_from: Option<Vec<Vec<u8>>>,
    /// The name the rules see the source's root as, its entries being `base/PATH` (rsync's
    /// `SRC DST/`, whose transfer root is SRC's parent; from protocol 23). `None`: the
    /// rules are matched against paths relative to the source's root.
    pub base: Option<Vec<u8>>,
}

/// Whether `name` may be a [`Selection::base`]: one path component.
pub fn is_valid_base(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.contains(&b'/')
        && !name.contains(&0)
        && name != b"."
        && name != b".."
}

/// Why a selection cannot be sent: it is larger than the protocol allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TooLarge {
    #[error("the include/exclude rules take {0} bytes, more than the {MAX_RULES_BYTES} a server accepts")]
    Rules(usize),
    #[error(
        "the --files-from list takes {0} bytes, more than the {MAX_LIST_BYTES} a server accepts"
    )]
    List(usize),
}

impl Selection {
    /// Everything selected: no rules, no list.
    pub fn is_all(&self) -> bool {
        self.rules.is_empty() && self.files_from.is_none()
    }

    /// Checks the bounds the decoder will check.
    pub fn check(&self) -> Result<(), TooLarge> {
        let rules: usize = self.rules.iter().map(|(_, p)| 3 + p.len()).sum();
        if rules > MAX_RULES_BYTES {
            return Err(TooLarge::Rules(rules));
        }
        let list: usize = self.files_from.iter().flatten().map(|p| 2 + p.len()).sum();
        if list > MAX_LIST_BYTES {
            return Err(TooLarge::List(list));
        }
        Ok(())
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        for (include, pattern) in &self.rules {
            out.push(if *include { 1 } else { 2 });
            put_bytes16(out, pattern);
        }
        let len = (out.len() - at - 4) as u32;
        out[at..at + 4].copy_from_slice(&len.to_le_bytes());
        match &self.files_from {
            None => out.push(0),
            Some(list) => {
                out.push(1);
                let at = out.len();
                out.extend_from_slice(&[0; 4]);
                for p in list {
                    put_bytes16(out, p);
                }
                let len = (out.len() - at - 4) as u32;
                out[at..at + 4].copy_from_slice(&len.to_le_bytes());
            }
        }
        match &self.base {
            None => out.push(0),
            Some(name) => {
                out.push(1);
                put_bytes16(out, name);
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Selection, DecodeError> {
        let len = bounded(r, "rules length", MAX_RULES_BYTES)?;
        let mut rules_bytes = Reader::new(r.take(len, "rules")?);
        let mut rules = Vec::new();
        while rules_bytes.remaining() > 0 {
            let include = match rules_bytes.u8("rule kind")? {
                1 => true,
                2 => false,
                other => {
                    return Err(DecodeError::Unknown {
                        what: "rule kind",
                        value: other as u64,
                    })
                }
            };
            let pattern = rules_bytes.bytes16("pattern", MAX_RULES_BYTES)?;
            if pattern.is_empty() || pattern.contains(&0) {
                return Err(DecodeError::Invalid {
                    what: "pattern",
                    why: "empty or holds a NUL byte",
                });
            }
            rules.push((include, pattern.to_vec()));
        }
        let files_from = match r.u8("list flag")? {
            0 => None,
            1 => {
                let len = bounded(r, "list length", MAX_LIST_BYTES)?;
                let mut list_bytes = Reader::new(r.take(len, "list")?);
                let mut list = Vec::new();
                while list_bytes.remaining() > 0 {
                    let p = path::validate(list_bytes.bytes16("listed path", MAX_PATH)?)?;
                    if p.is_empty() {
                        return Err(DecodeError::Invalid {
                            what: "listed path",
                            why: "empty",
                        });
                    }
                    list.push(p.to_vec());
                }
                Some(list)
            }
            _ => {
                return Err(DecodeError::Invalid {
                    what: "list flag",
                    why: "not 0 or 1",
                })
            }
        };
        let base = match r.u8("base flag")? {
            0 => None,
            1 => {
                let name = r.bytes16("base", 255)?;
                if !is_valid_base(name) {
                    return Err(DecodeError::Invalid {
                        what: "base",
                        why: "not one path component",
                    });
                }
                Some(name.to_vec())
            }
            _ => {
                return Err(DecodeError::Invalid {
                    what: "base flag",
                    why: "not 0 or 1",
                })
            }
        };
        Ok(Selection {
            rules,
            files_from,
            base,
        })
    }
}

/// A u32 length, at most `limit`.
fn bounded(r: &mut Reader<'_>, what: &'static str, limit: usize) -> Result<usize, DecodeError> {
    let len = r.u32(what)? as usize;
    if len > limit {
        return Err(DecodeError::TooLong {
            what,
            len: len as u64,
            limit: limit as u64,
        });
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(s: &Selection) -> Result<Selection, DecodeError> {
        let mut out = Vec::new();
        s.encode(&mut out);
        let mut r = Reader::new(&out);
        let back = Selection::decode(&mut r)?;
        r.finish()?;
        Ok(back)
    }

    #[test]
    fn selections_roundtrip() {
        for s in [
            Selection::default(),
            Selection {
                rules: vec![(true, b"keep.log".to_vec()), (false, b"*.log".to_vec())],
                files_from: None,
                base: None,
            },
            Selection {
                rules: Vec::new(),
                files_from: Some(Vec::new()),
                base: None,
            },
            Selection {
                rules: vec![(false, b"/a/***".to_vec())],
                files_from: Some(vec![b"a/b".to_vec(), b"c".to_vec()]),
                base: None,
            },
            Selection {
                rules: vec![(false, b"/src/keep".to_vec())],
                files_from: None,
                base: Some(b"src".to_vec()),
            },
        ] {
            assert_eq!(roundtrip(&s).unwrap(), s);
        }
    }

    #[test]
    fn oversized_or_bad_selections_are_refused() {
        let big = Selection {
            rules: (0..30_000).map(|_| (false, b"x".to_vec())).collect(),
            files_from: None,
            base: None,
        };
        assert_eq!(big.check(), Err(TooLarge::Rules(120_000)));
        assert!(matches!(
            roundtrip(&big),
            Err(DecodeError::TooLong {
                what: "rules length",
                ..
            })
        ));
        let escaping = Selection {
            rules: Vec::new(),
            files_from: Some(vec![b"../etc/passwd".to_vec()]),
            base: None,
        };
        assert!(roundtrip(&escaping).is_err());
        let empty = Selection {
            rules: vec![(true, Vec::new())],
            files_from: None,
            base: None,
        };
        assert!(roundtrip(&empty).is_err());
        for base in [&b""[..], b"a/b", b".", b"..", b"a\0b"] {
            let base = Selection {
                rules: Vec::new(),
                files_from: None,
                base: Some(base.to_vec()),
            };
            assert!(roundtrip(&base).is_err(), "{base:?}");
        }
        // A rule whose length runs past the rules' own length is truncated, not read beyond.
        let mut out = Vec::new();
        Selection {
            rules: vec![(false, b"abc".to_vec())],
            files_from: None,
            base: None,
        }
        .encode(&mut out);
        out[0] = 4;
        assert!(Selection::decode(&mut Reader::new(&out)).is_err());
    }
}
