//! Storage errors: the operation, the path it concerned, and the system error.

use rustix::io::Errno;
use std::fmt;

/// A failed storage operation on one path.
#[derive(Debug, thiserror::Error)]
pub struct StoreError {
    pub op: &'static str,
    /// Path relative to the tree being read or written (or as the user gave it).
    pub path: String,
    #[source]
    pub source: std::io::Error,
}

impl StoreError {
    pub fn new(op: &'static str, path: &[u8], source: impl Into<std::io::Error>) -> StoreError {
        StoreError {
            op,
            path: crate::relpath::display_path(path),
            source: source.into(),
        }
    }

    /// An error not caused by the operating system (e.g. a checksum mismatch).
    pub fn other(op: &'static str, path: &[u8], text: &str) -> StoreError {
        StoreError::new(op, path, std::io::Error::other(text.to_string()))
    }

    /// Errors after which no further file can be written either: stop the whole transfer.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self.source.raw_os_error().map(Errno::from_raw_os_error),
            Some(
                Errno::NOSPC | Errno::DQUOT | Errno::ROFS | Errno::IO | Errno::NOMEM | Errno::MFILE
            )
        )
    }

    pub fn is_no_space(&self) -> bool {
        matches!(
            self.source.raw_os_error().map(Errno::from_raw_os_error),
            Some(Errno::NOSPC | Errno::DQUOT)
        )
    }

    pub fn errno(&self) -> Option<Errno> {
        self.source.raw_os_error().map(Errno::from_raw_os_error)
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} '{}': {}", self.op, self.path, self.source)
    }
}
