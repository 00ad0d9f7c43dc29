//! What the destination already has. Before a copy sends anything, the destination's entries
//! (a listing streamed by the server in one reply, or a scan of a local destination) are
//! indexed by path; every regular file of the source is then checked against it, as rsync's
//! quick check does: a file of the same size and mtime (to the nanosecond where the file
//! system keeps it) is not sent; if only its mode differs, just its attributes are set.
//! `--ignore-existing` skips every file the destination has at all; `--ignore-times` checks
//! nothing and sends everything. Directories and symlinks always travel (they cost no data).
//! Pure logic, no I/O: the roles build the index.

use sprat_proto::namespace::{NsEntry, NsKind};
use sprat_proto::DestCheck;
use sprat_store::{EntryType, ScanEntry};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// How a copy decides what the destination already has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SkipRule {
    /// Skip regular files of the same size and mtime (the default, like `rsync -a`).
    #[default]
    QuickCheck,
    /// Skip every file the destination has, whatever its size and mtime.
    IgnoreExisting,
    /// Send everything.
    Never,
}

/// What the destination has at one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestEntry {
    pub is_file: bool,
    pub size: u64,
    pub mode: u32,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
}

/// What to do with one source entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Send,
    /// The destination has it already: send nothing.
    Skip,
    /// The destination has its content: set its mode and mtime only.
    FixAttrs,
}

/// The destination's entries by path (relative to the copy's root).
#[derive(Debug, Default)]
pub struct DestIndex {
    entries: HashMap<Vec<u8>, DestEntry>,
    /// Temporary names left by a writer that was killed (see
    /// [`sprat_store::write::is_leftover_temp`]): not entries, but debris to remove.
    leftovers: Vec<Vec<u8>>,
}

impl DestIndex {
    fn insert(&mut self, path: Vec<u8>, entry: DestEntry) {
        if is_leftover(&path) {
            self.leftovers.push(path);
            return;
        }
        self.entries.insert(path, entry);
    }

    /// The leftover temporary names found (paths relative to the copy's root), sorted; the
    /// index forgets them.
    pub fn take_leftovers(&mut self) -> Vec<Vec<u8>> {
        let mut out = std::mem::take(&mut self.leftovers);
        out.sort();
        out
    }

    /// Adds an entry of a scan of the destination.
    pub fn insert_scanned(&mut self, e: ScanEntry) {
        let entry = DestEntry {
            is_file: e.kind == EntryType::File,
            size: e.size,
            mode: e.attrs.mode,
            mtime_sec: e.attrs.mtime_sec,
            mtime_nsec: e.attrs.mtime_nsec,
        };
        self.insert(e.path, entry);
    }

    /// Adds what a listing (or a pulling client's index) says is there.
    pub fn insert_listed(&mut self, e: NsEntry) {
        let entry = DestEntry {
            is_file: e.kind == NsKind::File,
            size: e.size,
            mode: e.mode,
            mtime_sec: e.mtime_sec,
            mtime_nsec: e.mtime_nsec,
        };
        self.insert(e.path, entry);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Decides for one scanned source entry.
    pub fn verdict(&self, e: &ScanEntry, rule: SkipRule) -> Verdict {
        if e.kind != EntryType::File
            || e.error.is_some()
            || rule == SkipRule::Never
            || self.entries.is_empty()
        {
            return Verdict::Send;
        }
        let Some(d) = self.entries.get(&e.path) else {
            return Verdict::Send;
        };
        match rule {
            SkipRule::IgnoreExisting => Verdict::Skip,
            SkipRule::Never => Verdict::Send,
            SkipRule::QuickCheck => {
                let same_content = d.is_file
                    && d.size == e.size
                    && d.mtime_sec == e.attrs.mtime_sec
                    && d.mtime_nsec == e.attrs.mtime_nsec;
                if !same_content {
                    Verdict::Send
                } else if d.mode & 0o7777 == e.attrs.mode & 0o7777 {
                    Verdict::Skip
                } else {
                    Verdict::FixAttrs
                }
            }
        }
    }
}

/// Whether the last component of `path` is a temporary name left by a killed writer.
pub fn is_leftover(path: &[u8]) -> bool {
    sprat_store::write::is_leftover_temp(sprat_store::split_parent(path).1)
}

impl SkipRule {
    /// How a pulling client asks the server for this rule.
    pub fn as_check(self) -> DestCheck {
        match self {
            SkipRule::QuickCheck => DestCheck::QuickCheck,
            SkipRule::IgnoreExisting => DestCheck::IgnoreExisting,
            SkipRule::Never => DestCheck::None,
        }
    }

    /// The rule a pulling client asked for.
    pub fn from_check(check: DestCheck) -> SkipRule {
        match check {
            DestCheck::QuickCheck => SkipRule::QuickCheck,
            DestCheck::IgnoreExisting => SkipRule::IgnoreExisting,
            DestCheck::None => SkipRule::Never,
        }
    }
}

/// What the check spared a copy (counted on the sending side).
#[derive(Debug, Default)]
pub struct SkipCounts {
    files: AtomicU64,
    bytes: AtomicU64,
    attrs_fixed: AtomicU64,
}

impl SkipCounts {
    pub fn skipped(&self, bytes: u64) {
        self.files.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn fixed(&self, bytes: u64) {
        self.attrs_fixed.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// (files not sent because up to date, their bytes plus those of fixed files, files whose
    /// attributes alone were set).
    pub fn totals(&self) -> (u64, u64, u64) {
        (
            self.files.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
            self.attrs_fixed.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprat_store::Attrs;

    fn file(path: &[u8], size: u64, mode: u32, sec: i64, nsec: u32) -> ScanEntry {
        ScanEntry {
            path: path.to_vec(),
            kind: EntryType::File,
            size,
            attrs: Attrs {
                mode,
                mtime_sec: sec,
                mtime_nsec: nsec,
            },
            ino: 1,
            link_target: None,
            error: None,
        }
    }

    fn index() -> DestIndex {
        let mut i = DestIndex::default();
        let d = |size, mode, sec, nsec| DestEntry {
            is_file: true,
            size,
            mode,
            mtime_sec: sec,
            mtime_nsec: nsec,
        };
        i.insert(b"same".to_vec(), d(10, 0o644, 5, 7));
        i.insert(b"mode".to_vec(), d(10, 0o600, 5, 7));
        i.insert(b"newer".to_vec(), d(10, 0o644, 6, 0));
        i.insert(b"nsec".to_vec(), d(10, 0o644, 5, 8));
        i.insert(
            b"dir".to_vec(),
            DestEntry {
                is_file: false,
                ..d(10, 0o755, 5, 7)
            },
        );
        i
    }

    #[test]
    fn the_quick_check_compares_size_and_mtime_to_the_nanosecond() {
        let i = index();
        let q = SkipRule::QuickCheck;
        assert_eq!(i.verdict(&file(b"same", 10, 0o644, 5, 7), q), Verdict::Skip);
        assert_eq!(
            i.verdict(&file(b"mode", 10, 0o644, 5, 7), q),
            Verdict::FixAttrs
        );
        assert_eq!(
            i.verdict(&file(b"newer", 10, 0o644, 5, 7), q),
            Verdict::Send
        );
        assert_eq!(i.verdict(&file(b"nsec", 10, 0o644, 5, 7), q), Verdict::Send);
        assert_eq!(i.verdict(&file(b"same", 11, 0o644, 5, 7), q), Verdict::Send);
        assert_eq!(i.verdict(&file(b"dir", 10, 0o755, 5, 7), q), Verdict::Send);
        assert_eq!(
            i.verdict(&file(b"absent", 10, 0o644, 5, 7), q),
            Verdict::Send
        );
    }

    #[test]
    fn ignore_existing_skips_any_file_present_and_never_skips_nothing() {
        let i = index();
        let newer = file(b"newer", 99, 0o644, 1, 0);
        assert_eq!(i.verdict(&newer, SkipRule::IgnoreExisting), Verdict::Skip);
        assert_eq!(i.verdict(&newer, SkipRule::Never), Verdict::Send);
        let same = file(b"same", 10, 0o644, 5, 7);
        assert_eq!(i.verdict(&same, SkipRule::Never), Verdict::Send);
    }
}
