//! Live progress of a transfer, for a display or an event stream: the roles add what each
//! written (or acknowledged) batch held and what the destination already had, and a count of
//! the source running beside the copy ([`count_source`]) sets the totals. A retry starts the
//! counts of what is done again (each run is a re-sync of the whole tree).

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
    files_total: AtomicU64,
    bytes_total: AtomicU64,
    totals_known: AtomicBool,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Regular files done: written, or found up to date at the destination.
    pub files_done: u64,
    pub bytes_done: u64,
    /// The source's regular files and their bytes, once counted.
    pub files_total: Option<u64>,
    pub bytes_total: Option<u64>,
}

impl Progress {
    /// Counts `files` whole files and `bytes` bytes as done.
    pub fn add(&self, files: u64, bytes: u64) {
        self.0.files.fetch_add(files, Ordering::Relaxed);
        self.0.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A new run of the transfer (a retry) starts: nothing of it is done yet.
    pub fn restart(&self) {
        self.0.files.store(0, Ordering::Relaxed);
        self.0.bytes.store(0, Ordering::Relaxed);
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
        Snapshot {
            files_done: self.0.files.load(Ordering::Relaxed),
            bytes_done: self.0.bytes.load(Ordering::Relaxed),
            files_total: total(&self.0.files_total),
            bytes_total: total(&self.0.bytes_total),
        }
    }
}

/// The regular files below `src` that `selection` selects, and their bytes: a parallel scan
/// of a local source, one `du` request (counted on the server) for a remote one.
pub fn count_source(
    src: &Endpoint,
    key: &Credentials,
    selection: &Selection,
) -> Result<(u64, u64), TransferError> {
    match src {
        Endpoint::Remote { addr, path } => {
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
                std::thread::scope(|s| {
                    s.spawn(|| {
                        sprat_store::scan_selected(&root, ScanOptions::default(), selection, tx)
                    });
                    for e in rx.iter().flatten() {
                        if e.kind == EntryType::File && e.error.is_none() {
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
