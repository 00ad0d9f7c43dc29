//! A copy between two local paths: the same scan, read and write stages as over the network,
//! with batches handed from readers to writers in memory.

use super::destination::{
    check_complete, fatal_outcome, finish_dirs, is_inside, local_index_cleaned, local_writer,
    open_source, skip_for,
};
use super::endpoint::Endpoint;
use crate::config::TransferOptions;
use crate::error::TransferError;
use crate::pipeline::sink::{Incoming, WriteJob, WriterPool};
use crate::pipeline::source;
use crate::report::{Counts, Report, Stages};
use crossbeam_channel::unbounded;
use sprat_store::batch_read::Scanned;
use sprat_store::clone::CloneSource;
use sprat_store::{Root, ScanEntry, Source, TreeWriter};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub(crate) fn copy(
    src: &Path,
    dst: &Path,
    options: &TransferOptions,
    src_ep: &Endpoint,
    dst_ep: &Endpoint,
) -> Result<Report, TransferError> {
    let started = Instant::now();
    let source = open_source(src)?;
    if matches!(source, Source::Dir(_)) && is_inside(dst, src) {
        return Err(TransferError::Usage(format!(
            "destination '{}' is inside the source '{}'",
            dst.display(),
            src.display()
        )));
    }
    let skip = {
        let (dst, opts) = (dst.to_path_buf(), options.clone());
        skip_for(options, move || local_index_cleaned(&dst, &opts))
    };
    let skipped = skip.as_ref().map(|s| s.counts.clone());
    let writer = local_writer(dst, matches!(source, Source::Dir(_)), false, options)?;
    let cloned = Arc::new(Cloned::default());
    let handle = if clones_files(options) {
        writer.allow_cloning(true);
        let take = cloner(writer.clone(), cloned.clone(), options);
        source::start_cloning(source, options, skip, take)?
    } else {
        source::start(source, options, skip)?
    };
    let abort = Arc::new(AtomicBool::new(false));
    let pool = WriterPool::start(Some(writer.clone()), options.write_threads, abort.clone())?;
    let (reply_tx, reply_rx) = unbounded();
    let jobs = pool.sender();
    let mut counts = Counts::default();
    let mut fatal = None;
    for batch in handle.batches.iter() {
        if let Some(pace) = &options.bwlimit {
            pace.take(batch.payload_len() as u64);
        }
        let job = WriteJob {
            incoming: Incoming::Local(batch),
            reply: reply_tx.clone(),
            charge: crate::budget::Charge::none(),
            list: options.file_log.is_some(),
        };
        if abort.load(Ordering::Relaxed) || jobs.send(job).is_err() {
            break;
        }
        for o in reply_rx.try_iter() {
            fatal = fatal.or_else(|| fatal_outcome(&o, dst));
            counts.add_outcome(&o);
            options.progress.add(o.files, o.bytes);
            report_completed(options, &o);
        }
    }
    drop((jobs, reply_tx));
    let write_busy = pool.finish();
    let sent = handle.totals.clone();
    let read_busy = handle.finish();
    for o in reply_rx.iter() {
        fatal = fatal.or_else(|| fatal_outcome(&o, dst));
        counts.add_outcome(&o);
        options.progress.add(o.files, o.bytes);
        report_completed(options, &o);
    }
    if let Some(e) = fatal {
        return Err(e);
    }
    check_complete(&writer, &mut counts, &sent.get(), "the local source")?;
    let cloned_files = cloned.files.load(Ordering::Relaxed);
    counts.files += cloned_files;
    counts.bytes += cloned.bytes.load(Ordering::Relaxed);
    finish_dirs(&writer, &mut counts);
    counts.syncs = writer.sync_count();
    let stages = Stages {
        scan_read_s: read_busy.as_secs_f64(),
        network_s: None,
        write_s: write_busy.as_secs_f64(),
    };
    Ok(Report::new(
        "copy",
        src_ep.to_string(),
        dst_ep.to_string(),
        &counts,
        started.elapsed(),
        1,
        stages,
    )
    .with_durable(options.durable)
    .with_skipped(&skipped.unwrap_or_default())
    .with_cloned(cloned_files))
}

/// Large files a local copy cloned (see [`cloner`]).
#[derive(Default)]
struct Cloned {
    files: AtomicU64,
    bytes: AtomicU64,
}

/// Whether a local copy with `options` tries to clone large files: not with `--reflink
/// never`, nor where the ordinary copy does more than a clone can (`-X`/`-A` set extended
/// attributes and ACLs as the writers apply them; `--bwlimit` paces data a clone does not
/// move).
fn clones_files(options: &TransferOptions) -> bool {
    options.reflink && !options.xattrs && !options.acls && options.bwlimit.is_none()
}

/// What the planning thread offers each large file to: a clone of it at the destination,
/// counted in `cloned` (and as written: progress, `-v`) when the file systems share blocks.
fn cloner(
    writer: Arc<TreeWriter>,
    cloned: Arc<Cloned>,
    options: &TransferOptions,
) -> Arc<source::TakeWholeFile> {
    let (progress, file_log) = (options.progress.clone(), options.file_log.clone());
    Arc::new(
        move |root: &Root, file_name: Option<&[u8]>, entry: &ScanEntry| {
            if !writer.may_clone() {
                return false;
            }
            let opened;
            let (dir, name) = match file_name {
                Some(name) => (root.fd(), name),
                None => {
                    let (parent, name) = sprat_store::split_parent(&entry.path);
                    match root.open_dir(parent) {
                        Ok(fd) => opened = fd,
                        Err(_) => return false,
                    }
                    (opened.as_fd(), name)
                }
            };
            let from = CloneSource {
                dir,
                name,
                scanned: Scanned {
                    size: entry.size,
                    mtime_sec: entry.attrs.mtime_sec,
                    mtime_nsec: entry.attrs.mtime_nsec,
                },
            };
            // An error puts nothing in place: the ordinary copy then meets and reports it.
            match writer.cursor().clone_file(from, &entry.path, &entry.attrs) {
                Ok(sprat_store::clone::Cloned::Done) => {
                    cloned.files.fetch_add(1, Ordering::Relaxed);
                    cloned.bytes.fetch_add(entry.size, Ordering::Relaxed);
                    progress.add(1, entry.size);
                    if let Some(log) = &file_log {
                        log.completed(&entry.path);
                    }
                    true
                }
                Ok(sprat_store::clone::Cloned::No) | Err(_) => false,
            }
        },
    )
}

/// Tells the transfer's file log (`cp -v`), if it has one, what a batch completed.
fn report_completed(options: &TransferOptions, o: &crate::pipeline::sink::BatchOutcome) {
    if let Some(log) = &options.file_log {
        o.completed.iter().for_each(|p| log.completed(p));
    }
}
