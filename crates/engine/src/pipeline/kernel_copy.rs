//! The kernel-copy stage of a local copy: a pool of threads that each put whole large files
//! at the destination with the store's copy inside the kernel
//! ([`WriterCursor::copy_in_kernel`]), beside the batches. The planning thread hands such a
//! file over instead of planning it into batches ([`KernelCopyPool::offer`]). Each thread
//! shows each file it completes at once (progress, `-v`), and collects what became of its files
//! in a [`BatchOutcome`] that the role counts and reports like a written batch's once the pool
//! is finished.
//!
//! Several threads, because one `copy_file_range` at a time leaves the disk waiting on each
//! file's reads: on the development machine four of them copied 1 MiB files from and to the
//! ext4 disk in 0.76 of the time of the batches (docs/performance.md).

use crate::error::TransferError;
use crate::measurement::listing::FileLog;
use crate::measurement::progress::Progress;
use crate::pipeline::sink::BatchOutcome;
use crossbeam_channel::{bounded, Sender};
use sprat_proto::ErrorCode;
use sprat_store::clone::CloneSource;
use sprat_store::write::Placed;
use sprat_store::{ScanEntry, TreeWriter, WriterCursor};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A file handed to the pool: its directory at the source, its name there, and its entry.
struct Job {
    dir: OwnedFd,
    name: Vec<u8>,
    entry: ScanEntry,
}

/// A running pool of kernel-copy threads.
pub(crate) struct KernelCopyPool {
    jobs: Sender<Job>,
    threads: Vec<JoinHandle<BatchOutcome>>,
    busy_ns: Arc<AtomicU64>,
    in_kernel: Arc<AtomicU64>,
}

/// Where a thread shows each file it completes as it does.
#[derive(Clone)]
pub(crate) struct Shown {
    pub(crate) progress: Progress,
    pub(crate) file_log: Option<FileLog>,
}

/// What the pool did, once finished.
pub(crate) struct KernelCopied {
    /// Files all of whose bytes were copied inside the kernel.
    pub(crate) files: u64,
    /// The stage's busy time, summed over its threads.
    pub(crate) busy: Duration,
    /// What became of the files, one outcome per thread (`files`, `bytes`, failures, the
    /// first fatal error).
    pub(crate) outcomes: Vec<BatchOutcome>,
}

/// A handle the planning thread offers files with (once every handle and the pool's own are
/// dropped, the threads finish what they hold and stop).
#[derive(Clone)]
pub(crate) struct Offer {
    jobs: Sender<Job>,
}

impl KernelCopyPool {
    /// Starts `threads` threads copying into `writer`, showing each completed file in `shown`.
    /// The first fatal error (disk full) sets `abort`, after which the files still queued are
    /// dropped unwritten (as batches are).
    pub(crate) fn start(
        writer: Arc<TreeWriter>,
        threads: usize,
        shown: Shown,
        abort: Arc<AtomicBool>,
    ) -> Result<KernelCopyPool, TransferError> {
        let threads = threads.max(1);
        let (jobs, rx) = bounded::<Job>(threads * 2);
        let busy_ns = Arc::new(AtomicU64::new(0));
        let in_kernel = Arc::new(AtomicU64::new(0));
        let threads = (0..threads)
            .map(|i| {
                let (rx, writer, shown) = (rx.clone(), writer.clone(), shown.clone());
                let (abort, busy_ns) = (abort.clone(), busy_ns.clone());
                let in_kernel = in_kernel.clone();
                std::thread::Builder::new()
                    .name(format!("sprat-kcopy-{i}"))
                    .spawn(move || {
                        let mut cursor = writer.cursor();
                        let mut outcome = BatchOutcome::default();
                        for job in rx {
                            if abort.load(Ordering::Relaxed) {
                                continue;
                            }
                            let started = Instant::now();
                            if copy_one(&mut cursor, &job, &shown, &mut outcome) {
                                in_kernel.fetch_add(1, Ordering::Relaxed);
                            }
                            busy_ns
                                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                            if outcome.fatal.is_some() {
                                abort.store(true, Ordering::SeqCst);
                            }
                        }
                        outcome
                    })
                    .map_err(|e| {
                        TransferError::Local(format!("cannot start a kernel-copy thread: {e}"))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(KernelCopyPool {
            jobs,
            threads,
            busy_ns,
            in_kernel,
        })
    }

    /// A handle for the planning thread.
    pub(crate) fn offer(&self) -> Offer {
        Offer {
            jobs: self.jobs.clone(),
        }
    }

    /// Waits until every file handed over is done (every [`Offer`] must be dropped first);
    /// returns what it did.
    pub(crate) fn finish(self) -> KernelCopied {
        drop(self.jobs);
        let outcomes = self
            .threads
            .into_iter()
            .map(|t| {
                t.join().unwrap_or_else(|_| BatchOutcome {
                    fatal: Some((ErrorCode::Io, "a kernel-copy thread panicked".into())),
                    ..BatchOutcome::default()
                })
            })
            .collect();
        KernelCopied {
            files: self.in_kernel.load(Ordering::Relaxed),
            busy: Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed)),
            outcomes,
        }
    }
}

impl Offer {
    /// Hands over the file `name` in the source directory `dir` (`entry` as the scan saw it):
    /// whether it was taken (not once the pool is gone). Waits while the pool is busy, which
    /// holds the planning back as a full batch queue does. The caller asks
    /// [`TreeWriter::may_copy_in_kernel`] first.
    pub(crate) fn take(&self, dir: OwnedFd, name: &[u8], entry: &ScanEntry) -> bool {
        let job = Job {
            dir,
            name: name.to_vec(),
            entry: entry.clone(),
        };
        self.jobs.send(job).is_ok()
    }
}

/// Copies one file, shows it in `shown` once it is complete and adds what became of it to
/// `outcome` (a fatal error only if it is the first); whether all of its bytes were copied
/// inside the kernel.
fn copy_one(
    cursor: &mut WriterCursor<'_>,
    job: &Job,
    shown: &Shown,
    outcome: &mut BatchOutcome,
) -> bool {
    let entry = &job.entry;
    let source = CloneSource {
        dir: job.dir.as_fd(),
        name: &job.name,
        scanned: crate::pipeline::source::scanned(entry),
    };
    match cursor.copy_in_kernel(source, &entry.path, &entry.attrs) {
        // Appeared after the planning looked: `--ignore-existing` keeps it.
        Ok((_, Placed::KeptExisting)) => {
            // Counted as a file done with the report's, as every file the writer kept.
            outcome.kept += 1;
            outcome.kept_bytes += entry.size;
            shown.progress.add(0, entry.size);
            false
        }
        Ok((all, Placed::Written)) => {
            outcome.files += 1;
            outcome.bytes += entry.size;
            // As the write stage does (see `sink`): a time outside 32 bits may be more than
            // the destination's file system holds.
            let (sec, nsec) = (entry.attrs.mtime_sec, entry.attrs.mtime_nsec);
            if i32::try_from(sec).is_err()
                && cursor.mtime_at(&entry.path) != Some((sec, nsec as i64))
            {
                outcome.not_kept.mtimes += 1;
            }
            shown.progress.add(1, entry.size);
            if let Some(log) = &shown.file_log {
                log.completed(&entry.path);
            }
            all
        }
        // A source that cannot be read fails alone, as in a batch; the destination's errors
        // that no file can get past (disk full) stop the copy.
        Err(e) if e.is_fatal() && e.op != "read" => {
            let code = crate::error::code_for(&e);
            outcome.fatal.get_or_insert_with(|| (code, e.to_string()));
            false
        }
        Err(e) => {
            outcome.fail(&entry.path, e.to_string());
            false
        }
    }
}
