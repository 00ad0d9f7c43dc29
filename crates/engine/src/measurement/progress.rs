//! Live progress of a transfer, for a display or an event stream: the roles add what each
//! written (or acknowledged) batch held, and apart from it what the destination already had
//! (skipped: done without being copied, so that a re-sync reaches its total and a time-left
//! estimate does not take skipped files for copy work); a count of the source running beside
//! the copy ([`count_source`]) sets the totals. Where the copying side is a server (a pull's
//! check, a third-party copy), its `Progress` messages set the counts ([`Progress::set_skipped`],
//! [`Progress::set_copied`]). A retry starts the counts of what is done again (each run is a
//! re-sync of the whole tree).

use crate::error::TransferError;
use crate::net::Credentials;
use crate::roles::endpoint::Endpoint;
use sprat_store::{EntryType, Root, ScanOptions, Selection, Source};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A transfer's progress counters, shared by the transfer and its observers.
#[derive(Debug, Clone, Default)]
pub struct Progress(Arc<Counters>);

#[derive(Debug, Default)]
struct Counters {
    files: AtomicU64,
    bytes: AtomicU64,
    skipped_files: AtomicU64,
    skipped_bytes: AtomicU64,
    files_total: AtomicU64,
    bytes_total: AtomicU64,
    totals_known: AtomicBool,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Regular files done: written, or found up to date at the destination (skipped).
    pub files_done: u64,
    pub bytes_done: u64,
    /// Of those done, the files the destination had already and the bytes not sent (theirs,
    /// those of files whose attributes alone were set, what a resumed file had).
    pub files_skipped: u64,
    pub bytes_skipped: u64,
    /// The source's regular files and their bytes, once counted.
    pub files_total: Option<u64>,
    pub bytes_total: Option<u64>,
}

impl Progress {
    /// Counts `files` whole files and `bytes` bytes as copied.
    pub fn add(&self, files: u64, bytes: u64) {
        self.0.files.fetch_add(files, Ordering::Relaxed);
        self.0.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts `files` whole files and `bytes` bytes as done without being copied (the
    /// destination had them).
    pub fn add_skipped(&self, files: u64, bytes: u64) {
        self.0.skipped_files.fetch_add(files, Ordering::Relaxed);
        self.0.skipped_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Sets what was skipped so far, as a server that checks the destination tells it (on
    /// any of a session's connections: an older word arriving late is not taken back).
    pub fn set_skipped(&self, files: u64, bytes: u64) {
        self.0.skipped_files.fetch_max(files, Ordering::Relaxed);
        self.0.skipped_bytes.fetch_max(bytes, Ordering::Relaxed);
    }

    /// Sets what was copied so far (as a third-party copy's source server tells it).
    pub fn set_copied(&self, files: u64, bytes: u64) {
        self.0.files.store(files, Ordering::Relaxed);
        self.0.bytes.store(bytes, Ordering::Relaxed);
    }

    /// A new run of the transfer (a retry) starts: nothing of it is done yet.
    pub fn restart(&self) {
        self.set_copied(0, 0);
        self.0.skipped_files.store(0, Ordering::Relaxed);
        self.0.skipped_bytes.store(0, Ordering::Relaxed);
    }

    /// Sets what the whole transfer holds.
    pub fn set_totals(&self, files: u64, bytes: u64) {
        self.0.files_total.store(files, Ordering::Relaxed);
        self.0.bytes_total.store(bytes, Ordering::Relaxed);
        self.0.totals_known.store(true, Ordering::Release);
    }

    pub fn snapshot(&self) -> Snapshot {
        let known = self.0.totals_known.load(Ordering::Acquire);
        let total = |n: &AtomicU64| known.then(|| n.load(Ordering::Relaxed));
        let skipped_files = self.0.skipped_files.load(Ordering::Relaxed);
        let skipped_bytes = self.0.skipped_bytes.load(Ordering::Relaxed);
        Snapshot {
            files_done: self.0.files.load(Ordering::Relaxed) + skipped_files,
            bytes_done: self.0.bytes.load(Ordering::Relaxed) + skipped_bytes,
            files_skipped: skipped_files,
            bytes_skipped: skipped_bytes,
            files_total: total(&self.0.files_total),
            bytes_total: total(&self.0.bytes_total),
        }
    }
}

/// The regular files below `src` that `selection` selects, and their bytes: a parallel scan
/// of a local source, one `du` request (counted on the server) for a remote one. With
/// `hard_links` (`-H`), the names of one file of a local source count once, as the copy sends
/// it once (a server's count has every name).
pub fn count_source(
    src: &Endpoint,
    key: &Credentials,
    selection: &Selection,
    hard_links: bool,
) -> Result<(u64, u64), TransferError> {
    match src {
        Endpoint::Remote { addr, path, .. } => {
            let du = crate::roles::remote::du_selected(addr, key, path, selection)?;
            Ok((du.files, du.bytes))
        }
        Endpoint::Local(path) => match Root::open_local_source(path)? {
            Source::File { parent, name } => {
                let e = sprat_store::stat_root_file(&parent, &name);
                Ok(((e.kind == EntryType::File) as u64, e.size))
            }
            Source::Dir(root) => {
                let (tx, rx) = crossbeam_channel::bounded(64);
                let mut counted = (0, 0);
                let mut linked = std::collections::HashSet::new();
                std::thread::scope(|s| {
                    s.spawn(|| {
                        sprat_store::scan_selected(&root, ScanOptions::default(), selection, tx)
                    });
                    for e in rx.iter().flatten() {
                        let another_name =
                            hard_links && e.nlink > 1 && !linked.insert((e.dev, e.ino));
                        if e.kind == EntryType::File && e.error.is_none() && !another_name {
                            counted.0 += 1;
                            counted.1 += e.size;
                        }
                    }
                });
                Ok(counted)
            }
        },
    }
}
