//! The kernel-copy stage of a local copy: a pool of threads that each put whole large files
//! at the destination with the store's copy inside the kernel
//! ([`WriterCursor::copy_in_kernel`]), beside the batches. The planning thread hands such a
//! file over instead of planning it into batches ([`KernelCopyPool::offer`]); what became of
//! each goes back on the reply channel the writers use, as a one-file [`BatchOutcome`], so the
//! role counts, lists and reports it like any written batch.
//!
//! Several threads, because one `copy_file_range` at a time leaves the disk waiting on each
//! file's reads: on the development machine four of them copied 1 MiB files from and to the
//! ext4 disk in 0.76 of the time of the batches (docs/performance.md).

use crate::error::TransferError;
use crate::pipeline::sink::BatchOutcome;
use crossbeam_channel::{bounded, Sender};
use sprat_store::batch_read::Scanned;
use sprat_store::clone::CloneSource;
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
    threads: Vec<JoinHandle<()>>,
    busy_ns: Arc<AtomicU64>,
    in_kernel: Arc<AtomicU64>,
}

/// What the pool did, once finished.
pub(crate) struct KernelCopied {
    /// Files all of whose bytes were copied inside the kernel.
    pub(crate) files: u64,
    /// The stage's busy time, summed over its threads.
    pub(crate) busy: Duration,
}

/// A handle the planning thread offers files with (it may outlive nothing: once every handle
/// and the pool's own are dropped, the threads finish what they hold and stop).
#[derive(Clone)]
pub(crate) struct Offer {
    jobs: Sender<Job>,
    writer: Arc<TreeWriter>,
}

impl KernelCopyPool {
    /// Starts `threads` threads copying into `writer`; each file's outcome goes to `reply`
    /// (naming the file in `completed` when `list`). The first fatal error (disk full) sets
    /// `abort`, after which the files still queued are dropped unwritten.
    pub(crate) fn start(
        writer: Arc<TreeWriter>,
        threads: usize,
        reply: Sender<BatchOutcome>,
        abort: Arc<AtomicBool>,
        list: bool,
    ) -> Result<KernelCopyPool, TransferError> {
        let threads = threads.max(1);
        let (jobs, rx) = bounded::<Job>(threads * 2);
        let busy_ns = Arc::new(AtomicU64::new(0));
        let in_kernel = Arc::new(AtomicU64::new(0));
        let threads = (0..threads)
            .map(|i| {
                let (rx, writer, reply) = (rx.clone(), writer.clone(), reply.clone());
                let (abort, busy_ns) = (abort.clone(), busy_ns.clone());
                let in_kernel = in_kernel.clone();
                std::thread::Builder::new()
                    .name(format!("sprat-kcopy-{i}"))
                    .spawn(move || {
                        let mut cursor = writer.cursor();
                        for job in rx {
                            if abort.load(Ordering::Relaxed) {
                                continue;
                            }
                            let started = Instant::now();
                            let (outcome, all_in_kernel) = copy_one(&mut cursor, &job, list);
                            if all_in_kernel {
                                in_kernel.fetch_add(1, Ordering::Relaxed);
                            }
                            busy_ns
                                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                            let fatal = outcome.fatal.is_some();
                            let _ = reply.send(outcome);
                            if fatal {
                                abort.store(true, Ordering::SeqCst);
                            }
                        }
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
    pub(crate) fn offer(&self, writer: Arc<TreeWriter>) -> Offer {
        Offer {
            jobs: self.jobs.clone(),
            writer,
        }
    }

    /// Waits until every file handed over is done (every [`Offer`] must be dropped first);
    /// returns what it did.
    pub(crate) fn finish(self) -> KernelCopied {
        drop(self.jobs);
        for t in self.threads {
            let _ = t.join();
        }
        KernelCopied {
            files: self.in_kernel.load(Ordering::Relaxed),
            busy: Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed)),
        }
    }
}

impl Offer {
    /// Hands over the file `name` in the source directory `dir` (`entry` as the scan saw it)
    /// unless copies inside the kernel stopped (the file systems refused): whether it was
    /// taken. Waits while the pool is busy, which holds the planning back as a full batch
    /// queue does.
    pub(crate) fn take(&self, dir: OwnedFd, name: &[u8], entry: &ScanEntry) -> bool {
        if !self.writer.may_copy_in_kernel() {
            return false;
        }
        let job = Job {
            dir,
            name: name.to_vec(),
            entry: entry.clone(),
        };
        self.jobs.send(job).is_ok()
    }
}

/// Copies one file; its outcome as a one-file batch's, and whether all of its bytes were
/// copied inside the kernel.
fn copy_one(cursor: &mut WriterCursor<'_>, job: &Job, list: bool) -> (BatchOutcome, bool) {
    let entry = &job.entry;
    let source = CloneSource {
        dir: job.dir.as_fd(),
        name: &job.name,
        scanned: Scanned {
            size: entry.size,
            mtime_sec: entry.attrs.mtime_sec,
            mtime_nsec: entry.attrs.mtime_nsec,
        },
    };
    let mut out = BatchOutcome::default();
    let mut in_kernel = false;
    match cursor.copy_in_kernel(source, &entry.path, &entry.attrs) {
        Ok(all) => {
            in_kernel = all;
            out.files = 1;
            out.bytes = entry.size;
            if list {
                out.completed.push(entry.path.clone());
            }
        }
        Err(e) if e.is_fatal() => out.fatal = Some((crate::error::code_for(&e), e.to_string())),
        Err(e) => out.fail(&entry.path, e.to_string()),
    }
    (out, in_kernel)
}
