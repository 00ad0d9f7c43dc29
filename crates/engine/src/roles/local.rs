//! A copy between two local paths: the same scan, read and write stages as over the network,
//! with batches handed from readers to writers in memory.

use super::destination::{
    check_complete, fatal_outcome, finish_dirs, is_inside, local_index_cleaned, local_writer,
    open_source, skip_for,
};
use super::endpoint::Endpoint;
use crate::config::TransferOptions;
use crate::error::TransferError;
use crate::pipeline::kernel_copy::{KernelCopyPool, Offer, Shown};
use crate::pipeline::sink::{Incoming, WriteJob, WriterPool};
use crate::pipeline::source;
use crate::report::{Counts, Report, Stages};
use crossbeam_channel::unbounded;
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
    let abort = Arc::new(AtomicBool::new(false));
    let (reply_tx, reply_rx) = unbounded();
    let mut kernel_copies = None;
    // No network between the stages: the opening batches need not grow as slow start does.
    let source_options = TransferOptions {
        slow_start_opening: false,
        ..options.clone()
    };
    let handle = if takes_whole_files(options) {
        writer.allow_cloning(options.reflink);
        let offer = if copies_in_kernel(options) {
            writer.allow_kernel_copy(true);
            let shown = Shown {
                progress: options.progress.clone(),
                file_log: options.file_log.clone(),
            };
            let (w, threads) = (writer.clone(), options.write_threads);
            let pool = KernelCopyPool::start(w, threads, shown, abort.clone())?;
            let offer = pool.offer();
            kernel_copies = Some(pool);
            Some(offer)
        } else {
            None
        };
        let take = take_whole_files(writer.clone(), cloned.clone(), offer, options);
        source::start_cloning(source, &source_options, skip, take)?
    } else {
        source::start(source, &source_options, skip)?
    };
    let pool = WriterPool::start(Some(writer.clone()), options.write_threads, abort.clone())?;
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
            options.progress.add(o.files, o.bytes + o.kept_bytes);
            report_completed(options, &o);
        }
    }
    drop((jobs, reply_tx));
    let mut write_busy = pool.finish();
    let sent = handle.totals.clone();
    let index_failure = handle.index_failure();
    let read_busy = handle.finish();
    // The planning is over (no file is offered any more): wait for the last kernel copies.
    let mut kernel_copied = 0;
    if let Some(pool) = kernel_copies {
        let done = pool.finish();
        write_busy += done.busy / options.write_threads.max(1) as u32;
        kernel_copied = done.files;
        for o in &done.outcomes {
            fatal = fatal.or_else(|| fatal_outcome(o, dst));
            counts.add_outcome(o);
        }
    }
    for o in reply_rx.iter() {
        fatal = fatal.or_else(|| fatal_outcome(&o, dst));
        counts.add_outcome(&o);
        options.progress.add(o.files, o.bytes + o.kept_bytes);
        report_completed(options, &o);
    }
    if let Some(e) = fatal {
        return Err(e);
    }
    index_failure.check()?;
    check_complete(&writer, &mut counts, &sent.get(), "the local source")?;
    let cloned_files = cloned.files.load(Ordering::Relaxed);
    counts.files += cloned_files;
    counts.bytes += cloned.bytes.load(Ordering::Relaxed);
    counts.kept += cloned.kept.load(Ordering::Relaxed);
    // Files the writer kept (see `BatchOutcome::kept`) were not copied: up to date, for the
    // report.
    if let Some(s) = &skipped {
        s.kept_by_destination(counts.kept, counts.kept_fixed);
    }
    finish_dirs(&writer, &mut counts);
    counts.syncs = writer.sync_count();
    let stages = Stages {
        scan_read_s: read_busy.as_secs_f64(),
        network_s: None,
        write_s: write_busy.as_secs_f64(),
    };
    let skipped = skipped.unwrap_or_default();
    // Partial copies an interrupted copy left of files this one wrote whole or found up to
    // date: of no more use once it succeeded.
    if counts.failed == 0 {
        super::destination::discard_partials(&writer, dst, &skipped.take_superseded());
    }
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
    .with_skipped(&skipped)
    .with_cloned(cloned_files)
    .with_kernel_copied(kernel_copied))
}

/// Large files a local copy cloned (see [`take_whole_files`]).
#[derive(Default)]
struct Cloned {
    files: AtomicU64,
    bytes: AtomicU64,
    /// Files `--ignore-existing` kept: their names were taken after the planning looked.
    kept: AtomicU64,
}

/// Files this large or larger are copied inside the kernel by a local copy, not in batches
/// (see `pipeline::kernel_copy`). Smaller ones go faster in batches: ten thousand 64 KiB
/// files took 1.6 times as long with four threads copying each inside the kernel.
pub(crate) const KERNEL_COPY_MIN: u64 = 1 << 20;

/// Files larger than this are not copied inside the kernel but in chunks, whose journal lets a
/// copy cut in the middle resume (a copy inside the kernel has no checksums to journal, so an
/// interrupted one starts its file again): at most this much per kernel-copy thread is copied
/// again after an interruption.
pub(crate) const KERNEL_COPY_MAX: u64 = 64 << 20;

/// Whether a local copy with `options` puts large files in place itself, cloned or copied
/// inside the kernel: not where the ordinary copy does more than that can (`-X`/`-A` set
/// extended attributes and ACLs as the writers apply them; `--bwlimit` paces data these do
/// not move).
fn takes_whole_files(options: &TransferOptions) -> bool {
    !options.xattrs && !options.acls && options.bwlimit.is_none()
}

/// Whether a local copy that puts large files in place itself ([`takes_whole_files`]) copies
/// them inside the kernel: by default, unless `SPRAT_KERNEL_COPY=0` (to measure what it
/// gains); not with `--reflink never`, since XFS and Btrfs answer `copy_file_range` with a
/// clone.
fn copies_in_kernel(options: &TransferOptions) -> bool {
    options.reflink && std::env::var_os("SPRAT_KERNEL_COPY").is_none_or(|v| v != "0")
}

/// What the planning thread offers each regular file to: a clone of it at the destination
/// (`--reflink auto`, for files past the batch threshold), counted in `cloned` (and as
/// written: progress, `-v`) when the file systems share blocks; else, for a file of
/// [`KERNEL_COPY_MIN`] to [`KERNEL_COPY_MAX`] bytes, the kernel-copy pool (`offer`), which
/// reports it itself.
fn take_whole_files(
    writer: Arc<TreeWriter>,
    cloned: Arc<Cloned>,
    offer: Option<Offer>,
    options: &TransferOptions,
) -> Arc<source::TakeWholeFile> {
    let (progress, file_log) = (options.progress.clone(), options.file_log.clone());
    let (clone_past, hard_links) = (options.small_file_threshold, options.hard_links);
    Arc::new(
        move |root: &Root, file_name: Option<&[u8]>, entry: &ScanEntry| {
            let clone = entry.size > clone_past && writer.may_clone();
            // `-H`: a file's other names are linked to it as soon as it is planned, so it must
            // be in place by then (a clone is made here and now; a kernel copy is not).
            let copy = offer.is_some()
                && (KERNEL_COPY_MIN..=KERNEL_COPY_MAX).contains(&entry.size)
                && !(hard_links && entry.nlink > 1)
                && writer.may_copy_in_kernel();
            if !clone && !copy {
                return false;
            }
            let (dir, name) = match file_name {
                Some(name) => match root.fd().try_clone_to_owned() {
                    Ok(fd) => (fd, name),
                    Err(_) => return false,
                },
                None => {
                    let (parent, name) = sprat_store::split_parent(&entry.path);
                    match root.open_dir(parent) {
                        Ok(fd) => (fd, name),
                        Err(_) => return false,
                    }
                }
            };
            if clone {
                let from = CloneSource {
                    dir: dir.as_fd(),
                    name,
                    scanned: source::scanned(entry),
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
                        return true;
                    }
                    Ok(sprat_store::clone::Cloned::Kept) => {
                        // Counted as a file done with the report's (see below).
                        cloned.kept.fetch_add(1, Ordering::Relaxed);
                        progress.add(0, entry.size);
                        return true;
                    }
                    _ => {}
                }
            }
            match &offer {
                Some(offer) if copy => offer.take(dir, name, entry),
                _ => false,
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
