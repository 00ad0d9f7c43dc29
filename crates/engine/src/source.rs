//! The sending side's stages: scan, plan and read, ending in a bounded queue of encoded batches.
//!
//! One scanner (itself parallel), one planner and `read_threads` readers run on their own
//! threads; each reader fills a whole batch (file data read straight into the batch buffer,
//! checksum computed as it is read). Memory is bounded by the queue capacities times the batch
//! size, whatever the size of the tree.

use crate::config::TransferOptions;
use crate::error::TransferError;
use crate::plan::{BatchPlan, PlanItem, Planner};
use crossbeam_channel::{bounded, Receiver};
use sprat_proto::{Batch, FileMeta};
use sprat_store::batch_read::{BatchReader, ReadItem};
use sprat_store::{Attrs, Root, ScanOptions, Source, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running source pipeline.
pub struct SourceHandle {
    /// Encoded batches, ready for the network or a local writer.
    pub batches: Receiver<Batch>,
    /// Whether the source root is a directory (false: a single file).
    pub root_is_dir: bool,
    join: JoinHandle<Duration>,
}

impl SourceHandle {
    /// Waits for the pipeline's threads; returns the read stage's busy time (summed over
    /// readers, divided by their number).
    pub fn finish(self) -> Duration {
        // Dropping our receiver first lets readers still sending give up.
        drop(self.batches);
        self.join.join().unwrap_or_default()
    }
}

pub(crate) fn meta(a: &Attrs) -> FileMeta {
    FileMeta {
        mode: a.mode,
        mtime_sec: a.mtime_sec,
        mtime_nsec: a.mtime_nsec,
    }
}

/// Starts scanning and reading `source`.
pub fn start(source: Source, options: &TransferOptions) -> Result<SourceHandle, TransferError> {
    let options = options.clone();
    let (batch_tx, batches) = bounded::<Batch>(options.read_threads.max(options.streams));
    let root_is_dir = matches!(source, Source::Dir(_));
    let join = std::thread::Builder::new()
        .name("sprat-source".into())
        .spawn(move || {
            let (root, file_name) = match source {
                Source::Dir(root) => (root, None),
                Source::File { parent, name } => (parent, Some(name)),
            };
            let (plan_tx, plan_rx) = bounded::<BatchPlan>(options.read_threads * 2);
            let busy_ns = AtomicU64::new(0);
            std::thread::scope(|s| {
                let root = &root;
                let file_name = file_name.as_deref();
                let options = &options;
                s.spawn(move || {
                    let mut planner = Planner::new(options);
                    let receivers_gone = std::cell::Cell::new(false);
                    let mut emit = |p: BatchPlan| {
                        if plan_tx.send(p).is_err() {
                            receivers_gone.set(true);
                        }
                    };
                    match file_name {
                        Some(name) => {
                            planner.push(sprat_store::stat_root_file(root, name), &mut emit)
                        }
                        None => {
                            let (scan_tx, scan_rx) = bounded(64);
                            let scan_options = ScanOptions {
                                threads: options.scan_threads,
                                ..ScanOptions::default()
                            };
                            std::thread::scope(|inner| {
                                inner.spawn(move || sprat_store::scan(root, scan_options, scan_tx));
                                for listing in scan_rx {
                                    for entry in listing {
                                        planner.push(entry, &mut emit);
                                    }
                                    if receivers_gone.get() {
                                        // Nobody reads any more: stop the scan too.
                                        break;
                                    }
                                }
                            });
                        }
                    }
                    planner.flush(&mut emit);
                });
                for _ in 0..options.read_threads {
                    let plan_rx = plan_rx.clone();
                    let batch_tx = batch_tx.clone();
                    let busy_ns = &busy_ns;
                    s.spawn(move || {
                        let mut reader = BatchReader::new(
                            root,
                            file_name,
                            options.read_order,
                            options.io_backend,
                        )
                        .with_max_open(open_files_per_reader(options.read_threads));
                        for plan in plan_rx {
                            let started = Instant::now();
                            let batch = read_batch(&mut reader, plan);
                            busy_ns
                                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                            if batch_tx.send(batch).is_err() {
                                break;
                            }
                        }
                    });
                }
                drop(batch_tx);
            });
            Duration::from_nanos(busy_ns.load(Ordering::Relaxed) / options.read_threads as u64)
        })
        .map_err(|e| TransferError::Local(format!("cannot start the source pipeline: {e}")))?;
    Ok(SourceHandle {
        batches,
        root_is_dir,
        join,
    })
}

/// Reads every item of `plan` into one batch (all its data read together by the batch
/// reader); items that cannot be read become failure entries.
fn read_batch(reader: &mut BatchReader<'_>, plan: BatchPlan) -> Batch {
    let mut batch = Batch::new(plan.seq, plan.data_bytes as usize);
    let items: Vec<ReadItem<'_>> = plan
        .items
        .iter()
        .filter_map(|item| match item {
            PlanItem::File(e) => Some(ReadItem {
                path: &e.path,
                offset: 0,
                len: e.size,
                whole: true,
            }),
            PlanItem::Chunk { entry, offset, len } => Some(ReadItem {
                path: &entry.path,
                offset: *offset,
                len: *len,
                whole: false,
            }),
            _ => None,
        })
        .collect();
    let mut results = reader.read(&items, &mut batch.data).into_iter();
    drop(items);
    let mut next = |path: &[u8]| {
        results
            .next()
            .unwrap_or_else(|| Err(StoreError::other("read", path, "not read")))
    };
    for item in plan.items {
        match item {
            PlanItem::File(e) => match next(&e.path) {
                Ok((len, hash)) => batch.push_file(&e.path, &meta(&e.attrs), len, hash),
                Err(err) => batch.push_failed(&e.path, &err.to_string()),
            },
            PlanItem::Chunk { entry, offset, len } => match next(&entry.path) {
                Ok((_, hash)) => batch.push_chunk(
                    &entry.path,
                    &meta(&entry.attrs),
                    entry.size,
                    offset,
                    len,
                    hash,
                ),
                Err(err) => batch.push_failed(&entry.path, &err.to_string()),
            },
            PlanItem::Dir(e) => batch.push_dir(&e.path, &meta(&e.attrs)),
            PlanItem::Symlink(e) => {
                let target = e.link_target.as_deref().unwrap_or_default();
                batch.push_symlink(&e.path, e.attrs.mtime_sec, e.attrs.mtime_nsec, target)
            }
            PlanItem::Failed { path, text } => batch.push_failed(&path, &text),
        }
    }
    batch
}

/// Files each reader may hold open at once: half of the process's open-file limit shared by
/// the readers (the rest is for writers, sockets and directories), at most the batch reader's
/// default.
fn open_files_per_reader(readers: usize) -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1024);
    let share = (limit / 2) as usize / readers.max(1);
    share.clamp(1, sprat_store::batch_read::DEFAULT_MAX_OPEN)
}

/// Opens a local source path given by the user.
pub fn open_local(path: &std::path::Path) -> Result<Source, sprat_store::StoreError> {
    Root::open_local_source(path)
}
