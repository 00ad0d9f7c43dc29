//! A local destination or source as the copying roles need it: opening the source, the tree
//! writer for the destination (the tree, or one file), and what a writer's outcomes mean for
//! the transfer. Shared by the local copy, the push (its source) and the pull.

use crate::config::{Selection, TransferOptions};
use crate::error::TransferError;
use crate::net;
use crate::pipeline::digest;
use crate::pipeline::sink::BatchOutcome;
use crate::pipeline::skip::{
    digest_bytes, DestIndex, PartialEntry, SkipCounts, SkipRule, Superseded,
};
use crate::pipeline::source::Skip;
use crate::report::Counts;
use rustix::io::Errno;
use sprat_proto::namespace::{entry_wire_size, NsEntry, NsKind, NsOwner, PathDigest};
use sprat_store::partial;
use sprat_store::{EntryType, ScanEntry, ScanOptions};
use sprat_store::{Root, Source, TreeWriter};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::Arc;

/// A new writer's tag for its temporary names, `sprat-` and 8 hex digits (the form
/// `sprat_store::write::is_leftover_temp` recognises).
pub(crate) fn temp_tag() -> String {
    format!("sprat-{:08x}", u32::from_le_bytes(net::random()))
}

pub(crate) fn open_source(path: &Path) -> Result<Source, TransferError> {
    Root::open_local_source(path).map_err(|e| {
        if e.errno() == Some(rustix::io::Errno::NOENT) {
            // A dangling symlink is there; what it points to is not.
            let shown = path.display();
            match std::fs::read_link(path) {
                Ok(target) => TransferError::Usage(format!(
                    "source '{shown}' is a symbolic link to '{}', which does not exist",
                    target.display()
                )),
                Err(_) => TransferError::Usage(format!("source '{shown}' does not exist")),
            }
        } else {
            TransferError::Store(e)
        }
    })
}

/// Whether `dst` (which may not exist yet) is `src` or lies below it: whether the device
/// and inode of `src` are those of a directory on `dst`'s way up to `/`, from the nearest
/// one that exists (so that a bind mount, which shows one directory under two paths, or a
/// symlink cannot hide it; see `sprat_store::ancestry`).
pub(crate) fn is_inside(dst: &Path, src: &Path) -> bool {
    use sprat_store::ancestry::of_local;
    match (of_local(dst), of_local(src)) {
        (Ok(d), Ok(s)) => d.is_within(&s),
        _ => false,
    }
}

/// The writer for a local destination: the tree itself, or one file when the source is a file.
/// `from_peer`: the content comes from a network peer (a pull), whose setuid and setgid bits
/// are cleared unless `options.keep_setid`; a local copy keeps them.
pub(crate) fn local_writer(
    dst: &Path,
    root_is_dir: bool,
    from_peer: bool,
    options: &TransferOptions,
) -> Result<Arc<TreeWriter>, TransferError> {
    let writer = if root_is_dir {
        // As cp -r and rsync refuse it: a usage mistake, not an I/O failure.
        if std::fs::metadata(dst).is_ok_and(|m| !m.is_dir()) {
            return Err(TransferError::Usage(format!(
                "destination '{0}' is a file, and a directory cannot be copied onto a file: \
                 name another destination, or remove '{0}' first",
                dst.display()
            )));
        }
        TreeWriter::for_dir(Root::create_local(dst)?, true, temp_tag())
    } else {
        let parent = parent_dir(dst);
        let name = dst
            .file_name()
            .map(|n| n.to_os_string().into_vec())
            .ok_or_else(|| {
                TransferError::Usage(format!(
                    "destination '{}' is not a file name",
                    dst.display()
                ))
            })?;
        TreeWriter::for_file(Root::create_local(parent)?, name, temp_tag())
    };
    let keep_setid = !from_peer || options.keep_setid;
    // The data goes to disk while the copy runs, not all in the final sync (see
    // docs/performance.md, "Time until the data is on disk"): see [`to_disk_early`] and
    // [`early_writeback`].
    Ok(Arc::new(
        to_disk_early(writer)
            .publishing(options.publish)
            .durable(options.durable)
            .early_writeback(early_writeback())
            .keep_setid(keep_setid)
            .devices(!from_peer || options.keep_devices)
            .keep_existing(options.keeps_existing())
            .owners(options.owners)
            // A local copy's source and destination share one user database: the ids are
            // the same whichever way they are found.
            .numeric_ids(options.numeric_ids || !from_peer),
    ))
}

/// `writer` sending its data to the disk while the copy runs, as every destination does (local
/// and pulled copies, and a server receiving a push): large files' chunks with `O_DIRECT`
/// where the file system allows, and each whole file of 256 KiB or more started on its way
/// as soon as it is written (see `sprat_store::writeback::start_file`). `SPRAT_DIRECT_CHUNKS=0`
/// and `SPRAT_FILE_WRITEBACK=0` turn them off, to measure what they gain.
pub(crate) fn to_disk_early(writer: TreeWriter) -> TreeWriter {
    let on = |var: &str| std::env::var_os(var).is_none_or(|v| v != "0");
    writer
        .direct_chunks(on("SPRAT_DIRECT_CHUNKS"))
        .file_writeback(on("SPRAT_FILE_WRITEBACK"))
}

/// Whether a destination (local, pulled, or a server receiving a push) starts the writeback
/// of its file system while the copy goes on (`sprat_store::writeback`: a `syncfs` nobody
/// waits for, after batches once 16 MiB of small files are left in the page cache and they
/// are a quarter of the bytes written since the last one). A durable writer never has it
/// (`TreeWriter::durable`: it syncs and waits anyway); `SPRAT_EARLY_WRITEBACK=0` turns it
/// off, to measure what it gains.
pub(crate) fn early_writeback() -> bool {
    std::env::var_os("SPRAT_EARLY_WRITEBACK").is_none_or(|v| v != "0")
}

/// Calls `each` for every entry of the local tree `dst` (nothing if it is not a directory
/// yet), scanned in parallel.
pub(crate) fn scan_local(
    dst: &Path,
    options: &TransferOptions,
    each: impl FnMut(ScanEntry),
) -> Result<(), TransferError> {
    scan_local_summed(dst, options, &Selection::default(), false, each).map(|_| ())
}

/// [`scan_local`] of a source: what the transfer's selection selects of it.
pub(crate) fn scan_local_source(
    src: &Path,
    options: &TransferOptions,
    each: impl FnMut(ScanEntry),
) -> Result<(), TransferError> {
    scan_local_summed(src, options, &options.selection, false, each).map(|_| ())
}

fn file_path(p: &Vec<u8>) -> &[u8] {
    p
}

/// [`scan_local`], and with `digests` the XXH3-128 of every regular file too, computed by a
/// pool of threads while the scan goes on (`--checksum`); returned at the end, by path (a
/// file that cannot be read has none).
pub(crate) fn scan_local_summed(
    dst: &Path,
    options: &TransferOptions,
    selection: &Selection,
    digests: bool,
    each: impl FnMut(ScanEntry),
) -> Result<Vec<(Vec<u8>, u128)>, TransferError> {
    scan_local_summed_while(dst, options, selection, digests, || true, each).map(|(s, _)| s)
}

/// [`scan_local_source`], returning how many entries could not be examined or listed (an
/// unreadable directory: what is below it is missing from the scan).
pub(crate) fn scan_local_source_counting_errors(
    src: &Path,
    options: &TransferOptions,
    each: impl FnMut(ScanEntry),
) -> Result<u64, TransferError> {
    let selection = &options.selection;
    scan_local_summed_while(src, options, selection, false, || true, each).map(|(_, e)| e)
}

/// Digests of files by path.
type Summed = Vec<(Vec<u8>, u128)>;

/// [`scan_local_summed`] that stops scanning (what it has not listed yet is left out) once
/// `go_on` says false, checked between listings; also returns how many entries failed. An
/// entry that could not be examined (a directory that could not be listed: nothing below it
/// is given) is given to `each` too, its `error` set.
fn scan_local_summed_while(
    dst: &Path,
    options: &TransferOptions,
    selection: &Selection,
    digests: bool,
    go_on: impl Fn() -> bool,
    mut each: impl FnMut(ScanEntry),
) -> Result<(Summed, u64), TransferError> {
    let root = match Root::open(dst) {
        Ok(root) => root,
        Err(e) if matches!(e.errno(), Some(Errno::NOENT | Errno::NOTDIR)) => {
            // A single file's destination: the file there is the root entry, with its digest
            // (`--checksum`: without one, an unchanged file would be sent again every time).
            let Some(file) = single_file(dst) else {
                return Ok((Vec::new(), 0));
            };
            let summed = match (digests, parent_and_name(dst)) {
                (true, Some((parent, name))) => digest::file_digest(&parent, name)
                    .map(|d| (Vec::new(), d))
                    .into_iter()
                    .collect(),
                _ => Vec::new(),
            };
            each(file);
            return Ok((summed, 0));
        }
        Err(e) => return Err(e.into()),
    };
    let (tx, rx) = crossbeam_channel::bounded(64);
    let scan_options = ScanOptions {
        threads: options.scan_threads,
        ..ScanOptions::default()
    };
    let threads = if digests { options.read_threads } else { 0 };
    let mut summed = Vec::new();
    let mut errors = 0u64;
    std::thread::scope(|s| {
        s.spawn(|| sprat_store::scan_selected(&root, scan_options, selection, tx));
        digest::with_pool(&root, threads, file_path, |mut pool| {
            // Leaving the loop drops the receiver: the scanning threads stop at their next
            // listing.
            for listing in rx {
                if !go_on() {
                    break;
                }
                for e in listing {
                    if e.error.is_some() {
                        errors += 1;
                    } else if digests && e.kind == EntryType::File {
                        pool.submit(e.path.clone());
                    }
                    each(e);
                }
                pool.flush();
                summed.extend(pool.ready().filter_map(|(p, d)| Some((p, d?))));
            }
            summed.extend(pool.finish().filter_map(|(p, d)| Some((p, d?))));
        });
    });
    Ok((summed, errors))
}

/// The destination's files for the check (see `pipeline::skip`): a scan of the local tree
/// `dst`, empty if it is not a directory yet; with `--checksum`, with their digests.
pub(crate) fn local_index(
    dst: &Path,
    options: &TransferOptions,
) -> Result<DestIndex, TransferError> {
    let mut index = DestIndex::default();
    if options.owners && sprat_store::owner::running_as_root() {
        // A local copy as root gives files their source's ids (see `local_writer`).
        index = index.comparing_owners();
    }
    let digests = options.skip == SkipRule::Checksum;
    let mut logs = Vec::new();
    let summed = scan_local_summed(dst, options, &Selection::default(), digests, |e| {
        if is_partial_log(&e) {
            logs.push(e.path.clone());
        }
        index.insert_scanned(e)
    })?;
    for (path, digest) in summed {
        index.set_digest(&path, digest);
    }
    for (path, partial) in local_partials(dst, logs) {
        index.insert_partial(path, partial);
    }
    Ok(index)
}

/// The local destination's index for a copy into it: as [`local_index`], and the temporary
/// names a killed writer left in it are removed (see [`remove_local_leftovers`]).
pub(crate) fn local_index_cleaned(
    dst: &Path,
    options: &TransferOptions,
) -> Result<DestIndex, TransferError> {
    let mut index = local_index(dst, options)?;
    remove_local_leftovers(dst, &index.take_leftovers());
    Ok(index)
}

/// Removes `leftovers` (temporary names a killed writer left, relative to `dst`) from the
/// local destination `dst`, confined to it and never following a symlink; what cannot be
/// removed is logged and left (the copy does not depend on it).
pub(crate) fn remove_local_leftovers(dst: &Path, leftovers: &[Vec<u8>]) {
    if leftovers.is_empty() {
        return;
    }
    let root = match Root::open(dst) {
        Ok(root) => root,
        Err(e) => {
            return tracing::warn!(e = %crate::text::printable(&e.to_string()), "cannot remove leftover temporary files")
        }
    };
    for rel in leftovers {
        match sprat_store::namespace::remove(&root, rel, false) {
            Ok(_) => {
                tracing::info!(path = %crate::text::printable(&sprat_store::display_path(rel)), "removed a leftover temporary file")
            }
            Err(e) => {
                tracing::warn!(e = %crate::text::printable(&e.to_string()), "cannot remove a leftover temporary file")
            }
        }
    }
}

/// Removes, through `writer`, the partial copies an interrupted copy left of `files` (paths
/// as written below the local destination `dst`), for a copy into `dst` that succeeded
/// without them (see `TreeWriter::discard_partials`), and logs each.
pub(crate) fn discard_partials(writer: &TreeWriter, dst: &Path, files: &[Superseded]) {
    told_discarded(dst, writer.discard_partials(files));
}

/// Logs the partial copies removed of `files` (paths below the local destination `dst`, the
/// empty path for `dst` itself).
pub(crate) fn told_discarded(dst: &Path, files: impl IntoIterator<Item = Vec<u8>>) {
    for file in files {
        let shown = match file.is_empty() {
            true => dst.to_path_buf(),
            false => dst.join(std::ffi::OsStr::from_bytes(&file)),
        };
        tracing::info!(path = %shown.display(), "removed the partial copy an interrupted copy left of a file now complete");
    }
}

/// A piece of a pulling client's index of its destination, as [`local_entries`] makes them,
/// each of at most [`PIECE_BYTES`] encoded (a piece is one message, and a control message
/// stays well under its 1 MiB frame).
pub(crate) enum IndexPiece {
    Entries(Vec<NsEntry>),
    Sums(Vec<PathDigest>),
}

/// Encoded bytes of entries or digests in one [`IndexPiece`].
const PIECE_BYTES: usize = 256 << 10;

/// Gathers items into pieces of at most [`PIECE_BYTES`] encoded (an item larger than that
/// alone makes one).
struct Pieces<T> {
    items: Vec<T>,
    bytes: usize,
}

impl<T> Pieces<T> {
    fn new() -> Pieces<T> {
        Pieces {
            items: Vec::new(),
            bytes: 0,
        }
    }

    /// Adds `item` of `size` encoded bytes; returns the piece it did not fit in, if any.
    fn push(&mut self, item: T, size: usize) -> Option<Vec<T>> {
        let full = self.bytes + size > PIECE_BYTES && !self.items.is_empty();
        let piece = full.then(|| {
            self.bytes = 0;
            std::mem::take(&mut self.items)
        });
        self.bytes += size;
        self.items.push(item);
        piece
    }

    /// The last piece, unless it is empty.
    fn rest(self) -> Option<Vec<T>> {
        (!self.items.is_empty()).then_some(self.items)
    }
}

/// The local destination's regular files as a pulling client sends them to the server (what
/// the check needs: path, size, mode, mtime), then its partial files, and with `--checksum`
/// their digests: handed to `each` in pieces as the scan goes, so that the index of a tree
/// of millions of files is never whole in memory (`each` returns false when it wants no
/// more: the scan stops soon after, and what it has not given is never given). Temporary
/// names a killed writer left are removed, not listed. Returns the paths of the files whose
/// partial copies it listed, with those copies' source identities.
pub(crate) fn local_entries(
    dst: &Path,
    options: &TransferOptions,
    mut each: impl FnMut(IndexPiece) -> bool,
) -> Result<Vec<Superseded>, TransferError> {
    let wanted = std::cell::Cell::new(true);
    let mut give = |piece: IndexPiece| {
        if wanted.get() {
            wanted.set(each(piece));
        }
    };
    let mut pieces = Pieces::new();
    let digests = options.skip == SkipRule::Checksum;
    let mut logs = Vec::new();
    let mut leftovers = Vec::new();
    // Owners, when this pull sets them (it runs as root): the server compares them, by
    // name unless `--numeric-ids` (then no name travels).
    let mut names = (options.owners && sprat_store::owner::running_as_root())
        .then(sprat_store::owner::NameCache::default);
    let numeric = options.numeric_ids;
    let mut owner_of = |attrs: &sprat_store::Attrs| {
        names.as_mut().map(|names| {
            let name = |n: Option<&[u8]>| match n {
                Some(n) if !numeric => n.to_vec(),
                _ => Vec::new(),
            };
            let user = name(names.user(attrs.uid));
            let group = name(names.group(attrs.gid));
            NsOwner {
                uid: attrs.uid,
                gid: attrs.gid,
                user,
                group,
            }
        })
    };
    let mut add = |e: NsEntry| {
        let size = entry_wire_size(&e);
        if let Some(piece) = pieces.push(e, size) {
            give(IndexPiece::Entries(piece));
        }
    };
    let go_on = || wanted.get();
    let (summed, _) =
        scan_local_summed_while(dst, options, &Selection::default(), digests, go_on, |e| {
            if is_partial_log(&e) {
                logs.push(e.path.clone());
            }
            if crate::pipeline::skip::is_leftover(&e.path) {
                leftovers.push(e.path);
            } else if let Some(error) = e.error {
                // A directory this pull cannot list (a `0000` one of its own): the server
                // sends what goes below it for the writer here to check.
                add(NsEntry::failed(e.path, error));
            } else if e.kind == EntryType::Symlink {
                // With its target: the server does not send a symlink the destination has
                // (`--ignore-existing`: any symlink there).
                add(NsEntry {
                    owner: owner_of(&e.attrs),
                    path: e.path,
                    kind: NsKind::Symlink,
                    size: 0,
                    mode: e.attrs.mode,
                    mtime_sec: e.attrs.mtime_sec,
                    mtime_nsec: e.attrs.mtime_nsec,
                    target: e.link_target.unwrap_or_default(),
                });
            } else if e.kind != EntryType::File && options.skip == SkipRule::IgnoreExisting {
                // `--ignore-existing` leaves whatever is at a path alone, not only files.
                add(NsEntry {
                    path: e.path,
                    kind: match e.kind {
                        EntryType::Dir => NsKind::Dir,
                        _ => NsKind::Special,
                    },
                    size: 0,
                    mode: e.attrs.mode,
                    mtime_sec: e.attrs.mtime_sec,
                    mtime_nsec: e.attrs.mtime_nsec,
                    target: Vec::new(),
                    owner: None,
                });
            } else if e.kind == EntryType::File {
                add(NsEntry {
                    owner: owner_of(&e.attrs),
                    path: e.path,
                    kind: NsKind::File,
                    size: e.size,
                    mode: e.attrs.mode,
                    mtime_sec: e.attrs.mtime_sec,
                    mtime_nsec: e.attrs.mtime_nsec,
                    target: Vec::new(),
                });
            }
        })?;
    remove_local_leftovers(dst, &leftovers);
    let mut partial_files = Vec::new();
    for (path, partial) in local_partials(dst, logs) {
        partial_files.push((path.clone(), partial.seen()));
        add(partial.to_listed(path));
    }
    if let Some(piece) = pieces.rest() {
        give(IndexPiece::Entries(piece));
    }
    let mut sums = Pieces::new();
    for (path, digest) in summed {
        let size = path.len() + 16 + 8;
        if let Some(piece) = sums.push((path, digest_bytes(digest)), size) {
            give(IndexPiece::Sums(piece));
        }
    }
    if let Some(piece) = sums.rest() {
        give(IndexPiece::Sums(piece));
    }
    Ok(partial_files)
}

/// Whether a scanned entry is the journal of a partial file (see `sprat_store::partial`).
fn is_partial_log(e: &ScanEntry) -> bool {
    e.kind == EntryType::File && partial::is_log_path(&e.path)
}

/// The parent of local path `dst` open as a root, and `dst`'s name in it.
pub(crate) fn parent_and_name(dst: &Path) -> Option<(Root, &[u8])> {
    use std::os::unix::ffi::OsStrExt;
    let name = dst.file_name()?.as_bytes();
    Some((Root::open(parent_dir(dst)).ok()?, name))
}

/// The directory a local path `dst` names an entry of (`.` for a bare name).
fn parent_dir(dst: &Path) -> &Path {
    match dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The regular file at `dst` (a single file's destination), as a root entry (empty path).
fn single_file(dst: &Path) -> Option<ScanEntry> {
    let (parent, name) = parent_and_name(dst)?;
    let e = sprat_store::stat_root_file(&parent, name);
    (e.error.is_none() && e.kind == EntryType::File).then_some(e)
}

/// The partial files whose journals are at `logs` below the local tree `dst`; for a `dst`
/// that is no directory (a single file's destination), the partial file beside it.
fn local_partials(dst: &Path, logs: Vec<Vec<u8>>) -> Vec<(Vec<u8>, PartialEntry)> {
    if !dst.is_dir() {
        return parent_and_name(dst)
            .and_then(|(parent, name)| {
                let (id, present) = partial::describe_file(&parent, name)?;
                let journal_ino = partial::journal_ino(&parent, name);
                let entry = PartialEntry {
                    id,
                    present,
                    journal_ino,
                };
                Some((Vec::new(), entry))
            })
            .into_iter()
            .collect();
    }
    if logs.is_empty() {
        return Vec::new();
    }
    let Ok(root) = Root::open(dst) else {
        return Vec::new();
    };
    logs.iter()
        .filter_map(|log| partial::describe(&root, log))
        .map(|(path, id, present)| {
            let journal_ino = partial::journal_ino(&root, &path);
            let entry = PartialEntry {
                id,
                present,
                journal_ino,
            };
            (path, entry)
        })
        .collect()
}

/// The skip a source gets for a copy into a destination indexed by `index`, which runs as
/// soon as the source starts (none when the user asked for everything). For a single file
/// the index holds the file at the destination and its partial file as the root entry.
pub(crate) fn skip_for(
    options: &TransferOptions,
    index: impl FnOnce() -> Result<DestIndex, TransferError> + Send + 'static,
) -> Option<Skip> {
    if options.skip == SkipRule::Never {
        return None;
    }
    Some(Skip {
        index: Box::new(index),
        rule: options.skip,
        counts: Arc::new(SkipCounts::with_progress(options.progress.clone())),
        early: false,
    })
}

/// The error that stops a transfer when writing into local destination `dst` failed fatally.
pub(crate) fn fatal_outcome(o: &BatchOutcome, dst: &Path) -> Option<TransferError> {
    o.fatal
        .as_ref()
        .map(|(_, text)| TransferError::Local(format!("{}: {text}", dst.display())))
}

/// Once every batch is written: a large file still waiting for chunks never gets them in
/// this run (it is counted as failed, by name; its partial file stays for a later run to
/// resume), and what arrived must be what the sender said
/// it sent (`sent`; `peer` names the sender for the error).
pub(crate) fn check_complete(
    writer: &TreeWriter,
    counts: &mut Counts,
    sent: &sprat_proto::Totals,
    peer: &str,
) -> Result<(), TransferError> {
    let unfinished = writer.take_incomplete();
    for (path, missing) in unfinished.incomplete {
        counts.add_failure(&path, &super::server::incomplete_text(&path, missing));
    }
    // Large files another writer of the same files finished at once: done here too.
    counts.files += unfinished.completed_by_another;
    super::push::check_totals(sent, &counts.received, peer)
}

/// Applies directory attributes once every batch is written, counting what failed.
pub(crate) fn finish_dirs(writer: &TreeWriter, counts: &mut Counts) {
    let (errors, more) = writer.finish();
    for e in errors {
        counts.add_failure(e.path.as_bytes(), &e.to_string());
    }
    counts.failed += more;
}
