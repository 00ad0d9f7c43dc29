//! The receiving side's write stage: a pool of writer threads applying batches to a tree.
//!
//! Batches arrive as wire payloads (from a socket) or as encoded batches (the local memory
//! hand-off); either way each is decoded, each file's checksum is verified against its data,
//! and the store's tree writer puts it in place (or, for a network-only measurement, a pool
//! without a tree writer counts it and drops it). Each batch's outcome goes back on the reply
//! channel that came with it, which is how a server acknowledges a batch only once it is
//! written.

use crate::budget::Charge;
use crate::error::TransferError;
use crate::sync::lock;
use crossbeam_channel::{bounded, Sender};
use sprat_proto::message::MAX_ACK_FAILURES;
use sprat_proto::{
    Batch, BatchView, EntryKind, ErrorCode, FileMeta, KeepRule, KeptEntries, NotKept, Totals,
};
use sprat_store::write::{ChunkOutcome, Placed, QuickCheck};
use sprat_store::{Attrs, TreeWriter, WriterCursor};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A batch to write.
pub enum Incoming {
    Local(Batch),
    /// The payload of a batch frame as received.
    Wire(Vec<u8>),
}

/// A batch and where to report what became of it.
pub struct WriteJob {
    pub incoming: Incoming,
    pub reply: Sender<BatchOutcome>,
    /// The memory the batch holds, given back once it is written (see `crate::budget`).
    pub charge: Charge,
    /// Name the files the batch completes in its outcome (`completed`), for `cp -v`.
    pub list: bool,
}

/// What writing one batch achieved.
#[derive(Debug, Default, Clone)]
pub struct BatchOutcome {
    pub seq: u64,
    /// Files now complete at their final name (a chunked file counts once, with its last chunk).
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// FIFOs, sockets and devices made.
    pub specials: u64,
    pub bytes: u64,
    /// Files whose content the destination had already: only their attributes were set.
    pub attrs_fixed: u64,
    /// Files sent before the sender had the destination's listing that the destination had
    /// already: kept, not written (see [`sprat_proto::KeepRule`]).
    pub kept: u64,
    /// Of those, files whose mode or owner alone differed: only their attributes were set.
    pub kept_fixed: u64,
    /// The bytes of both (they crossed the network: the acknowledgement counts them).
    pub kept_bytes: u64,
    /// Which of the batch's entries were kept (both kinds, and files `--ignore-existing`
    /// kept), for a pushing client's `-v` (see [`KeptEntries`]).
    pub kept_entries: KeptEntries,
    /// Items that failed, with the reason (the first [`MAX_ACK_FAILURES`]); the transfer
    /// goes on.
    pub failures: Vec<(Vec<u8>, String)>,
    /// Failures beyond those listed, counted only: what a batch costs a receiver in memory
    /// stays bounded however many of its entries fail.
    pub unlisted: u64,
    /// An error that stops the whole transfer (disk full, malformed batch...).
    pub fatal: Option<(ErrorCode, String)>,
    /// What the batch held (whatever became of it), for the check against the sender's totals.
    pub got: Totals,
    /// The regular files now complete at their final name, when the job asked (`list`).
    pub completed: Vec<Vec<u8>>,
    /// What the writer wrote without all that came with it, by its own rule (see
    /// [`sprat_proto::NotKept`]).
    pub not_kept: NotKept,
}

/// What a writer leaves out of what is sent to it, by its own rule, looked up once a batch.
struct Leaves {
    /// Regular files' setuid and setgid bits.
    setid: bool,
    /// `trusted.*` and `security.*` attributes.
    system_xattrs: bool,
    /// Owners and groups that were sent: items stay owned by `own`.
    owners: bool,
    own: (u32, u32),
}

impl Leaves {
    fn of(writer: &TreeWriter) -> Leaves {
        let owners = writer.owners_asked() && !writer.sets_owners();
        Leaves {
            setid: !writer.keeps_setid(),
            system_xattrs: writer.xattrs() & sprat_store::xattr::SYSTEM == 0,
            owners,
            // Asked of the kernel only where they are compared.
            own: match owners {
                true => (
                    rustix::process::geteuid().as_raw(),
                    rustix::process::getegid().as_raw(),
                ),
                false => (0, 0),
            },
        }
    }

    /// Counts in `n` what of a regular file written with `meta` was left (nothing without a
    /// writer).
    fn count_in(leaves: &Option<Leaves>, n: &mut NotKept, meta: &FileMeta) {
        let Some(l) = leaves else { return };
        if l.setid && meta.mode & sprat_store::write::SETID_BITS != 0 {
            n.setid += 1;
        }
        if l.owners && (meta.uid, meta.gid) != l.own {
            n.owners += 1;
        }
    }
}

impl BatchOutcome {
    /// Records one failed item: listed while fewer than [`MAX_ACK_FAILURES`] are, counted
    /// after that.
    pub fn fail(&mut self, path: &[u8], text: impl Into<String>) {
        if self.failures.len() < MAX_ACK_FAILURES {
            self.failures.push((path.to_vec(), text.into()));
        } else {
            self.unlisted += 1;
        }
    }

    /// Records that the writer kept the batch's entry `index` as the destination had it (its
    /// `bytes` crossed the network all the same); the caller counts the file.
    fn kept_entry(&mut self, index: usize, bytes: u64) {
        self.kept_bytes += bytes;
        self.kept_entries.mark(index);
    }

    /// The failures as an acknowledgement carries them: those listed, and how many more.
    pub fn ack_failures(&mut self) -> (Vec<(Vec<u8>, String)>, u32) {
        let unlisted = self.unlisted.min(u32::MAX as u64) as u32;
        (std::mem::take(&mut self.failures), unlisted)
    }
}

/// The check a sender left to this writer (see [`KeepRule`]) of what is at `path`, for a file
/// of `size` bytes with `attrs`. Attributes sent with it (`-X`, `-A`) are made exact on a file
/// kept as it is, as an Attrs entry would make them.
fn check_here(
    c: &mut WriterCursor<'_>,
    rule: KeepRule,
    path: &[u8],
    attrs: &sprat_store::Attrs,
    size: u64,
) -> QuickCheck {
    match rule {
        KeepRule::SameSizeAndTime => match c.quick_check(path, attrs, size) {
            // Attributes sent with it (`-X`, `-A`) that it lacks are set.
            QuickCheck::Same if c.next_xattrs_differ(path) => QuickCheck::SameContent,
            check => check,
        },
        KeepRule::Present if c.has_anything(path) => QuickCheck::Same,
        KeepRule::Present => QuickCheck::Differs,
    }
}

/// A running pool of writer threads.
pub struct WriterPool {
    jobs: Sender<WriteJob>,
    threads: Vec<JoinHandle<()>>,
    busy_ns: Arc<AtomicU64>,
}

impl WriterPool {
    /// Starts `threads` writers for `writer` (`None`: verify, count and drop every batch);
    /// `abort` is set by the first fatal error.
    pub fn start(
        writer: Option<Arc<TreeWriter>>,
        threads: usize,
        abort: Arc<AtomicBool>,
    ) -> Result<WriterPool, TransferError> {
        Self::start_busy(writer, threads, abort, Arc::default())
    }

    /// [`WriterPool::start`], adding the nanoseconds the writers are busy to `busy_ns` after
    /// every batch (an observer sees the pool's progress there).
    pub fn start_busy(
        writer: Option<Arc<TreeWriter>>,
        threads: usize,
        abort: Arc<AtomicBool>,
        busy_ns: Arc<AtomicU64>,
    ) -> Result<WriterPool, TransferError> {
        let threads = threads.max(1);
        let (jobs, rx) = bounded::<WriteJob>(threads * 2);
        // The first fatal error, which batches refused after it carry too: every stream of a
        // transfer then reports the cause (e.g. disk full, with the path), whichever the client
        // reads first.
        let cause: Arc<Mutex<Option<(ErrorCode, String)>>> = Arc::default();
        let threads = (0..threads)
            .map(|i| {
                let rx = rx.clone();
                let writer = writer.clone();
                let abort = abort.clone();
                let cause = cause.clone();
                let busy_ns = busy_ns.clone();
                std::thread::Builder::new()
                    .name(format!("sprat-write-{i}"))
                    .spawn(move || {
                        let mut cursor = writer.as_deref().map(TreeWriter::cursor);
                        for job in rx {
                            let started = Instant::now();
                            let outcome = if abort.load(Ordering::Relaxed) {
                                let first = lock(&cause);
                                BatchOutcome {
                                    fatal: Some(first.clone().unwrap_or_else(|| {
                                        (ErrorCode::Io, "transfer aborted".into())
                                    })),
                                    ..BatchOutcome::default()
                                }
                            } else {
                                write_batch(cursor.as_mut(), &job.incoming, job.list)
                            };
                            let fatal = outcome.fatal.is_some();
                            if let Some(f) = &outcome.fatal {
                                lock(&cause).get_or_insert_with(|| f.clone());
                            }
                            // At least 1: every batch shows as progress.
                            let busy = (started.elapsed().as_nanos() as u64).max(1);
                            busy_ns.fetch_add(busy, Ordering::Relaxed);
                            let WriteJob {
                                incoming,
                                reply,
                                charge,
                                ..
                            } = job;
                            crate::spare::give_back(match incoming {
                                Incoming::Wire(payload) => payload,
                                Incoming::Local(batch) => batch.data,
                            });
                            drop(charge);
                            let _ = reply.send(outcome);
                            // Only after the reply: on a shared reply channel the cause (e.g.
                            // disk full) then comes before the "transfer aborted" of others.
                            if fatal {
                                abort.store(true, Ordering::SeqCst);
                            }
                        }
                    })
                    .map_err(|e| TransferError::Local(format!("cannot start a writer thread: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(WriterPool {
            jobs,
            threads,
            busy_ns,
        })
    }

    /// A handle to submit batches with.
    pub fn sender(&self) -> Sender<WriteJob> {
        self.jobs.clone()
    }

    /// Waits until every submitted batch is written (all other senders must be dropped first);
    /// returns the write stage's busy time divided by the number of writers.
    pub fn finish(self) -> Duration {
        let n = self.threads.len() as u64;
        drop(self.jobs);
        for t in self.threads {
            let _ = t.join();
        }
        Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed) / n)
    }
}

/// The sender's names of the owners and groups a batch's entries use (its `UserName` and
/// `GroupName` entries), for the writer to map to local ids.
#[derive(Default)]
struct OwnerNames<'a> {
    users: HashMap<u32, &'a [u8]>,
    groups: HashMap<u32, &'a [u8]>,
}

impl<'a> OwnerNames<'a> {
    fn of(view: &BatchView<'a>) -> OwnerNames<'a> {
        let mut names = OwnerNames::default();
        for e in &view.entries {
            match e.kind {
                EntryKind::UserName { id, name } => {
                    names.users.insert(id, name);
                }
                EntryKind::GroupName { id, name } => {
                    names.groups.insert(id, name);
                }
                _ => {}
            }
        }
        names
    }

    /// The local (uid, gid) for a sent pair, through `cursor`'s writer (when it sets owners).
    fn local(&self, cursor: Option<&WriterCursor<'_>>, uid: u32, gid: u32) -> (u32, u32) {
        match cursor.map(|c| c.tree()) {
            Some(w) if w.sets_owners() => w.local_owner(
                uid,
                self.users.get(&uid).copied(),
                gid,
                self.groups.get(&gid).copied(),
            ),
            _ => (uid, gid),
        }
    }

    fn attrs(&self, cursor: Option<&WriterCursor<'_>>, m: &FileMeta) -> Attrs {
        let (uid, gid) = self.local(cursor, m.uid, m.gid);
        Attrs {
            mode: m.mode,
            mtime_sec: m.mtime_sec,
            mtime_nsec: m.mtime_nsec,
            uid,
            gid,
        }
    }
}

/// Writes every entry of one batch (with no cursor: verifies and counts them only); with
/// `list`, the outcome names the files completed.
pub fn write_batch(
    mut cursor: Option<&mut WriterCursor<'_>>,
    incoming: &Incoming,
    list: bool,
) -> BatchOutcome {
    let view = match incoming {
        Incoming::Local(b) => b.view(),
        Incoming::Wire(payload) => BatchView::decode(payload),
    };
    let view = match view {
        Ok(v) => v,
        Err(e) => {
            return BatchOutcome {
                fatal: Some((ErrorCode::Protocol, format!("malformed batch: {e}"))),
                ..BatchOutcome::default()
            }
        }
    };
    let mut out = BatchOutcome {
        seq: view.seq,
        got: view.totals(),
        ..BatchOutcome::default()
    };
    let last_path = view.entries.last().map(|e| e.path).unwrap_or_default();
    let names = OwnerNames::of(&view);
    let leaves = cursor.as_deref().map(|c| Leaves::of(c.tree()));
    let mut not_kept = NotKept::default();
    // The last entry was a list of attributes of which the writer sets no `trusted.*` or
    // `security.*` ones (see `EntryKind::Xattrs` below).
    let mut dropping_xattrs = false;
    for (index, entry) in view.entries.iter().enumerate() {
        let attrs = |cursor: &Option<&mut WriterCursor<'_>>, m: &FileMeta| {
            names.attrs(cursor.as_deref(), m)
        };
        let path = entry.path;
        let xattrs_dropped = std::mem::take(&mut dropping_xattrs);
        // A list of attributes is for the entry right behind it, of its path, only.
        if !matches!(entry.kind, EntryKind::Xattrs { .. }) {
            if let Some(c) = cursor.as_deref_mut() {
                c.forget_xattrs_unless(Some(path));
            }
        }
        // The attributes of the regular file this entry wrote, or whose mode and mtime it set.
        let mut wrote: Option<FileMeta> = None;
        let result = match &entry.kind {
            EntryKind::File {
                meta,
                hash,
                data,
                unless,
            } => {
                if sprat_store::checksum(data) != *hash {
                    out.fail(
                        path,
                        format!("checksum mismatch: {}", crate::report::CORRUPTED_IN_TRANSIT),
                    );
                    continue;
                }
                let a = attrs(&cursor, meta);
                let size = data.len() as u64;
                // A file sent before the sender had the listing: the sender's check, made here.
                let check = match (unless, cursor.as_deref_mut()) {
                    (Some(rule), Some(c)) => check_here(c, *rule, path, &a, size),
                    _ => QuickCheck::Differs,
                };
                match (check, cursor.as_deref_mut()) {
                    (QuickCheck::Same, _) => {
                        out.kept += 1;
                        out.kept_entry(index, size);
                        Ok(())
                    }
                    // As if the sender had sent its attributes alone.
                    (QuickCheck::SameContent, Some(c)) => {
                        c.set_file_attrs(path, &a, size).map(|()| {
                            wrote = Some(*meta);
                            out.kept_fixed += 1;
                            out.kept_entry(index, size);
                        })
                    }
                    (_, c) => c
                        .map_or(Ok(Placed::Written), |c| c.write_file(path, &a, data))
                        .map(|placed| match placed {
                            Placed::Written => {
                                wrote = Some(*meta);
                                out.files += 1;
                                out.bytes += size;
                                if list {
                                    out.completed.push(path.to_vec());
                                }
                            }
                            // Appeared after the sender looked (or where it could not):
                            // `--ignore-existing` keeps it, as the sender would have.
                            Placed::KeptExisting => {
                                out.kept += 1;
                                out.kept_entry(index, size);
                            }
                        }),
                }
            }
            EntryKind::Chunk {
                meta,
                file_size,
                version,
                offset,
                hash,
                data,
                whole,
                unless,
            } => {
                if sprat_store::checksum(data) != *hash {
                    out.fail(
                        path,
                        format!(
                            "checksum mismatch in the chunk at offset {offset}: {}",
                            crate::report::CORRUPTED_IN_TRANSIT
                        ),
                    );
                    continue;
                }
                let a = attrs(&cursor, meta);
                // A file the sender could not check against the destination's listing: the
                // check, made here on each of its chunks (the destination's file does not
                // change while the new one is written beside it, so each finds the same).
                let kept_here = match (unless, cursor.as_deref_mut()) {
                    (Some(rule), Some(c)) => {
                        match check_here(c, *rule, path, &a, *file_size) {
                            QuickCheck::Differs => None,
                            // The first chunk to find it counts the file (and fixes its mode).
                            _ if !c.tree().keep_large(path) => Some(Ok(())),
                            QuickCheck::SameContent => {
                                Some(c.set_file_attrs(path, &a, *file_size).map(|()| {
                                    wrote = Some(*meta);
                                    out.kept_fixed += 1;
                                }))
                            }
                            QuickCheck::Same => {
                                out.kept += 1;
                                Some(Ok(()))
                            }
                        }
                    }
                    _ => None,
                };
                if let Some(kept) = kept_here {
                    out.kept_entry(index, data.len() as u64);
                    kept
                } else {
                    match cursor.as_deref_mut() {
                        Some(c) => {
                            let piece = sprat_store::write::Piece {
                                file_size: *file_size,
                                version: *version,
                                offset: *offset,
                                data,
                                hash: *hash,
                                whole: *whole,
                            };
                            c.write_piece(path, &a, piece)
                        }
                        // Discarding: the chunk that ends the file counts it.
                        None if *offset + data.len() as u64 >= *file_size => {
                            Ok(ChunkOutcome::Completed)
                        }
                        None => Ok(ChunkOutcome::Partial),
                    }
                    .map(|done| match done {
                        ChunkOutcome::Partial => out.bytes += data.len() as u64,
                        ChunkOutcome::Completed => {
                            wrote = Some(*meta);
                            out.bytes += data.len() as u64;
                            out.files += 1;
                            if list {
                                out.completed.push(path.to_vec());
                            }
                        }
                        ChunkOutcome::Kept => {
                            out.kept += 1;
                            out.kept_entry(index, data.len() as u64);
                        }
                        ChunkOutcome::Dropped => {}
                    })
                }
            }
            EntryKind::Dir { meta } => {
                let a = attrs(&cursor, meta);
                match cursor.as_deref_mut() {
                    Some(c) => c.make_dir(path, &a),
                    None => Ok(()),
                }
                .map(|()| out.dirs += 1)
            }
            EntryKind::Symlink {
                mtime_sec,
                mtime_nsec,
                uid,
                gid,
                target,
            } => {
                let meta = FileMeta {
                    mode: 0o777,
                    mtime_sec: *mtime_sec,
                    mtime_nsec: *mtime_nsec,
                    uid: *uid,
                    gid: *gid,
                };
                let a = attrs(&cursor, &meta);
                match cursor.as_deref_mut() {
                    Some(c) => c.make_symlink(path, target, &a),
                    None => Ok(()),
                }
                .map(|()| out.symlinks += 1)
            }
            EntryKind::Special {
                meta,
                kind,
                major,
                minor,
            } => {
                let special = crate::pipeline::special::from_wire(*kind, *major, *minor);
                let a = attrs(&cursor, meta);
                match cursor.as_deref_mut() {
                    // Left out by this writer's rule (see `TreeWriter::devices`): counted.
                    Some(c) if special.is_device() && !c.tree().makes_devices() => {
                        not_kept.devices += 1;
                        continue;
                    }
                    Some(c) => c.make_special(path, special, &a),
                    None => Ok(()),
                }
                .map(|()| out.specials += 1)
            }
            EntryKind::Attrs { meta, size } => {
                let a = attrs(&cursor, meta);
                match cursor.as_deref_mut() {
                    Some(c) => c.set_file_attrs(path, &a, *size),
                    None => Ok(()),
                }
                .map(|()| out.attrs_fixed += 1)
            }
            // Read before the entries (see `OwnerNames`).
            EntryKind::UserName { .. } | EntryKind::GroupName { .. } => continue,
            EntryKind::Xattrs { scope, list } => {
                let system = sprat_store::xattr::SYSTEM;
                // Counted once the file they are for is written (a re-check that writes
                // nothing leaves nothing out).
                dropping_xattrs = leaves.as_ref().is_some_and(|l| l.system_xattrs)
                    && scope & system != 0
                    && list
                        .iter()
                        .any(|(n, _)| sprat_store::xattr::scope_of(n) == system);
                // For the next entry, of the same path.
                if let Some(c) = cursor.as_deref_mut() {
                    let list = list.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
                    let update = sprat_store::write::XattrUpdate {
                        scope: *scope,
                        list,
                    };
                    c.set_next_xattrs(path, update);
                }
                continue;
            }
            EntryKind::HardLink { target } => match cursor.as_deref_mut() {
                // Made once every file is written (`TreeWriter::finish`).
                Some(c) => c.hard_link(path, target),
                None => Ok(()),
            },
            EntryKind::Failed { text } => {
                // A large file of which a chunk could not be read (or changed while it was)
                // is dropped: its other chunks never make a file under its name.
                if let Some(c) = cursor.as_deref_mut() {
                    c.tree().drop_large(path);
                }
                out.fail(path, String::from_utf8_lossy(text));
                continue;
            }
        };
        if let Err(e) = result {
            if e.is_fatal() {
                out.fatal = Some((crate::error::code_for(&e), e.to_string()));
                return out;
            }
            out.fail(path, e.to_string());
            continue;
        }
        if let Some(c) = cursor.as_deref_mut() {
            // What is now at the path whole (or kept there complete): a partial copy an
            // interrupted copy left of it is of no more use (see `TreeWriter::watch_partials`).
            let whole = matches!(
                entry.kind,
                EntryKind::File { .. }
                    | EntryKind::Dir { .. }
                    | EntryKind::Symlink { .. }
                    | EntryKind::Special { .. }
                    | EntryKind::Attrs { .. }
                    | EntryKind::HardLink { .. }
            );
            if whole {
                c.tree().placed_whole(path);
            }
        }
        if let (Some(meta), Some(c)) = (wrote, cursor.as_deref_mut()) {
            Leaves::count_in(&leaves, &mut not_kept, &meta);
            not_kept.xattrs += u64::from(xattrs_dropped);
            // A time outside 32 bits may be more than the file system holds: it then sets the
            // nearest it can (ext4: 1901 to 2446), which only reading it back shows.
            if i32::try_from(meta.mtime_sec).is_err()
                && c.mtime_at(path) != Some((meta.mtime_sec, meta.mtime_nsec as i64))
            {
                not_kept.mtimes += 1;
            }
        }
    }
    if let Some(c) = cursor.as_deref_mut() {
        c.forget_xattrs_unless(None);
    }
    out.not_kept = not_kept;
    if let Some(writer) = cursor.map(|c| c.tree()) {
        if writer.is_durable() {
            // Nothing of this batch counts as written until it is on stable storage.
            if let Err(e) = writer.sync(last_path) {
                out.fatal = Some((crate::error::code_for(&e), e.to_string()));
            }
        } else {
            writer.batch_written();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A wire batch of one file owned by the sender's uid and gid 5000, named `daemon` and
    /// `adm` on the sender (ids that differ from this machine's).
    fn named_batch() -> Vec<u8> {
        let meta = FileMeta {
            mode: 0o644,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 0,
            uid: 5000,
            gid: 5000,
        };
        let mut b = Batch::new(1, 0);
        b.data.extend_from_slice(b"x");
        b.push_file(b"f", &meta, 1, sprat_store::checksum(b"x"));
        b.push_user_name(5000, b"daemon");
        b.push_group_name(5000, b"adm");
        let mut out = b.frame_prefix()[sprat_proto::FRAME_HEADER_LEN..].to_vec();
        out.extend_from_slice(&b.header);
        out.extend_from_slice(&b.data);
        out
    }

    fn id_of(db: &str, name: &str) -> u32 {
        let text = std::fs::read_to_string(db).unwrap();
        text.lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f[0] == name).then(|| f[2].parse().unwrap())
            })
            .unwrap()
    }

    /// Writes [`named_batch`] with a writer that sets owners; returns the file's (uid, gid).
    fn written_owner(numeric: bool) -> (u32, u32) {
        let dir = tempfile::tempdir().unwrap();
        let root = sprat_store::Root::create_local(dir.path()).unwrap();
        let writer = TreeWriter::for_dir(root, false, "sprat-0000abcd".into())
            .owners(true)
            .numeric_ids(numeric);
        let mut cursor = writer.cursor();
        let out = write_batch(Some(&mut cursor), &Incoming::Wire(named_batch()), false);
        assert!(out.failures.is_empty() && out.fatal.is_none(), "{out:?}");
        assert_eq!(out.files, 1);
        let m = std::fs::metadata(dir.path().join("f")).unwrap();
        (m.uid(), m.gid())
    }

    #[test]
    fn owners_are_mapped_by_the_names_sent_unless_numeric() {
        if !sprat_store::owner::running_as_root() {
            return;
        }
        let local = (id_of("/etc/passwd", "daemon"), id_of("/etc/group", "adm"));
        assert_eq!(written_owner(false), local);
        assert_eq!(written_owner(true), (5000, 5000));
    }
}
