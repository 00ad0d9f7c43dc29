//! The planner: turns scanned entries into batch plans.
//!
//! Small files, directories and symlinks are packed into batches of about `batch_size` bytes
//! and at most `batch_files` entries; files above `small_file_threshold` are cut into chunks of
//! `chunk_size` bytes that travel in batches of their own, so a large file is spread over every
//! stream. The first batches, one for each stream a session may start at once, are smaller
//! ([`OPENING_BATCH_SIZE`]): small first batches are ready for every stream sooner.
//!
//! Over a network they grow as TCP's slow start lets a new connection send: a connection
//! sends only 14.5 KB in its first round trip, so a larger first batch waits round trips on
//! one stream while the others stand idle. The opening batches then come in rounds of one
//! batch per stream. The first round's batches hold what that first round trip carries
//! ([`FIRST_OPENING_BATCH_SIZE`]); each later round's hold what a stream that took one batch
//! of every earlier round may send: the first round's size plus the smallest batch of each
//! earlier round (slow start's window grows by what was acknowledged). The rounds end once
//! that reaches [`RAMP_END`]. On a long path a stream takes no more than its first round
//! trip carries before its first acknowledgement (see `session::opening`); later rounds'
//! small batches still spread over the streams that have room for them.
//!
//! Pure logic: no I/O.

use crate::config::TransferOptions;
use sprat_proto::KeepRule;
use sprat_store::{EntryType, ScanEntry};
use std::collections::HashMap;
use std::sync::Arc;

/// One thing a batch will carry.
#[derive(Debug, Clone)]
pub enum PlanItem {
    File(ScanEntry),
    /// A whole file sent before the destination's listing was in: the receiver keeps what
    /// it has at the path if the rule holds (see [`KeepRule`]).
    EarlyFile(ScanEntry, KeepRule),
    /// A piece of a large file; `whole`: the file is sent whole (see
    /// [`sprat_proto::EntryKind::Chunk`]), not resumed.
    Chunk {
        entry: Arc<ScanEntry>,
        offset: u64,
        len: u64,
        whole: bool,
        /// Of a file sent whole for the receiver to check (see
        /// [`sprat_proto::EntryKind::Chunk`]).
        unless: Option<KeepRule>,
    },
    Dir(ScanEntry),
    Symlink(ScanEntry),
    /// A FIFO, socket or device ([`ScanEntry::special`] says which).
    Special(ScanEntry),
    Failed {
        path: Vec<u8>,
        text: String,
    },
    /// A file whose content the destination has: its attributes only.
    Attrs(ScanEntry),
    /// `-H`: a hard link of the file at `target`, which an earlier item carries.
    HardLink {
        path: Vec<u8>,
        target: Vec<u8>,
    },
}

/// The items of one batch and the bytes of file data it will hold.
#[derive(Debug, Default)]
pub struct BatchPlan {
    pub seq: u64,
    pub items: Vec<PlanItem>,
    pub data_bytes: u64,
    /// Data plus an estimate of the entry headers.
    pub budget_bytes: u64,
    /// Directories and hard links held back until every file is written (see
    /// [`Planner::deferring_namespace`]).
    pub deferred: bool,
}

/// Header bytes of an entry besides its path (an upper bound).
const ENTRY_OVERHEAD: u64 = 64;

impl PlanItem {
    pub fn path(&self) -> &[u8] {
        match self {
            PlanItem::File(e)
            | PlanItem::EarlyFile(e, _)
            | PlanItem::Dir(e)
            | PlanItem::Symlink(e)
            | PlanItem::Special(e)
            | PlanItem::Attrs(e) => &e.path,
            PlanItem::Chunk { entry, .. } => &entry.path,
            PlanItem::Failed { path, .. } | PlanItem::HardLink { path, .. } => path,
        }
    }
}

/// Most entries of a batch whose entries carry extended attributes (see `Planner::new`).
pub const MAX_XATTR_BATCH_FILES: usize = 1024;

/// Size of the opening batches (see the module comment).
pub const OPENING_BATCH_SIZE: u64 = 128 << 10;
/// Data and entry headers of the first round of opening batches over a network: what one
/// connection's first round trip carries (TCP's initial window, 14,480 bytes, less the
/// frame's and the TLS record's headers; entry headers are over-counted, see
/// `ENTRY_OVERHEAD`). Three files of 4 KiB fit.
pub const FIRST_OPENING_BATCH_SIZE: u64 = 14_000;
/// A stream's window at which the opening rounds end over a network: twice the largest
/// opening batch.
pub const RAMP_END: u64 = 2 * OPENING_BATCH_SIZE;

/// The opening rounds over a network (see the module comment).
#[derive(Debug)]
struct Ramp {
    /// What a stream may send when it takes this round's batch: this round's batches' size.
    window: u64,
    /// The smallest batch of this round so far that was filled to half the window or more
    /// (a batch cut short because the next entry did not fit, a directory before a large
    /// file, says nothing of the window).
    smallest: u64,
    /// Rounds made.
    rounds: u64,
}

/// Most opening rounds over a network, however small their batches came out (five take
/// files of 4 KiB to [`RAMP_END`]).
const MAX_RAMP_ROUNDS: u64 = 6;

/// `-H`'s table: by (device, inode), the first name seen and how many names are to come.
type LinkTable = HashMap<(u64, u64), (Vec<u8>, u32)>;

/// Packs entries into batch plans.
pub struct Planner {
    batch_size: u64,
    /// Batches in one round of opening batches (one per stream that may start at once).
    opening_batches: u64,
    /// Over a network, the opening rounds (until they end); `None`: one round at
    /// [`OPENING_BATCH_SIZE`].
    ramp: Option<Ramp>,
    /// Whether the opening batches are made in rounds that grow (over a network).
    slow_start: bool,
    /// The path's round trip, once known: on a short path the rounds stop.
    path_rtt: crate::tune::PathRtt,
    batch_files: usize,
    threshold: u64,
    chunk_size: u64,
    next_seq: u64,
    current: BatchPlan,
    /// `-H`: the first path seen of each (device, inode) with more than one name, and how
    /// many of its names are still to come (forgotten once all came).
    links: Option<LinkTable>,
    /// `-X`/`-A`: a file the destination has is still sent as attributes, so that the
    /// receiver compares and fixes its extended attributes (listings do not carry them).
    recheck_xattrs: bool,
    /// Groups of hard links (device, inode) whose first name was left as the destination
    /// has it (see [`Planner::keep_link_group`]).
    kept_link_groups: std::collections::HashSet<(u64, u64)>,
    /// The batch of held-back directories and hard links being filled, when they are held
    /// back (see [`Planner::deferring_namespace`]).
    deferred: Option<BatchPlan>,
}

impl Planner {
    pub fn new(options: &TransferOptions) -> Planner {
        Planner {
            batch_size: options.batch_size,
            opening_batches: options.opening_batches() as u64,
            ramp: options.slow_start_opening.then_some(Ramp {
                window: FIRST_OPENING_BATCH_SIZE,
                smallest: u64::MAX,
                rounds: 0,
            }),
            slow_start: options.slow_start_opening,
            path_rtt: options.path_rtt.clone(),
            // `-X`/`-A`: each entry may carry up to 64 KiB of attributes in the batch's
            // headers, which the planner does not see; 1024 entries keep the largest batch
            // (64 MiB of data, 64 MiB of attributes, the paths) below a frame's limit.
            batch_files: if options.xattrs || options.acls {
                options.batch_files.min(MAX_XATTR_BATCH_FILES)
            } else {
                options.batch_files
            },
            threshold: options.small_file_threshold,
            chunk_size: options.chunk_size,
            next_seq: 1,
            current: BatchPlan::default(),
            links: options.hard_links.then(HashMap::new),
            recheck_xattrs: options.xattrs || options.acls,
            kept_link_groups: Default::default(),
            deferred: None,
        }
    }

    /// Puts directories and hard links in batches of their own, marked `deferred`, instead of
    /// among the files: for a push spread over several servers, where they must reach one
    /// server once every file is written (that server then makes the links and sets the
    /// directories' attributes last, as a single receiver does when it finishes). The
    /// directories files land in are made by the writers as they need them.
    pub fn deferring_namespace(mut self) -> Planner {
        self.deferred = Some(BatchPlan {
            deferred: true,
            ..BatchPlan::default()
        });
        self
    }

    /// With `-H`, for a regular or special file with more than one name: `None` for the first
    /// of its names seen (which travels as a file), the path of that first one for the others
    /// (which travel as links to it).
    pub fn link_target(&mut self, entry: &ScanEntry) -> Option<Vec<u8>> {
        let links = self.links.as_mut()?;
        // Regular files, and FIFOs, sockets and devices (as rsync -H keeps them).
        let linkable = matches!(entry.kind, EntryType::File | EntryType::Special);
        if !linkable || entry.nlink < 2 || entry.error.is_some() {
            return None;
        }
        let key = (entry.dev, entry.ino);
        match links.get_mut(&key) {
            Some((first, left)) => {
                let target = first.clone();
                *left = left.saturating_sub(1);
                if *left == 0 {
                    links.remove(&key);
                }
                Some(target)
            }
            None => {
                links.insert(key, (entry.path.clone(), entry.nlink - 1));
                None
            }
        }
    }

    /// Records that the first name of `entry`'s group of hard links was left as the
    /// destination has it (see [`Planner::link_group_kept`]).
    pub fn keep_link_group(&mut self, entry: &ScanEntry) {
        if self.links.is_some() {
            self.kept_link_groups.insert((entry.dev, entry.ino));
        }
    }

    /// Makes `entry`, a name of a group whose first name was left as the destination has it
    /// and which travels as the source's file, the name the group's next names link to.
    pub fn relink_group(&mut self, entry: &ScanEntry) {
        let key = (entry.dev, entry.ino);
        if let Some((first, _)) = self.links.as_mut().and_then(|links| links.get_mut(&key)) {
            *first = entry.path.clone();
            self.kept_link_groups.remove(&key);
        }
    }

    /// Whether the first name of `entry`'s group of hard links was left as the destination
    /// has it: then `entry` is not made a link to that.
    pub fn link_group_kept(&self, entry: &ScanEntry) -> bool {
        self.kept_link_groups.contains(&(entry.dev, entry.ino))
    }

    /// Whether up-to-date files still travel as attributes (see `recheck_xattrs`).
    pub fn rechecks_xattrs(&self) -> bool {
        self.recheck_xattrs
    }

    /// Adds a hard link of `target` at `path` (see [`Planner::link_target`]).
    pub fn push_link(&mut self, path: Vec<u8>, target: Vec<u8>, emit: &mut impl FnMut(BatchPlan)) {
        let bytes = target.len() as u64;
        self.add(PlanItem::HardLink { path, target }, 0, emit);
        if self.deferred.is_none() {
            self.current.budget_bytes += bytes;
        }
    }

    /// Whether `entry` would travel as one whole file (not in chunks, not failed).
    pub fn is_whole_file(&self, entry: &ScanEntry) -> bool {
        entry.error.is_none() && entry.kind == EntryType::File && entry.size <= self.threshold
    }

    /// Adds a whole file ([`Planner::is_whole_file`]) sent before the destination's listing
    /// is in, which the receiver leaves out if `rule` holds there.
    pub fn push_early_file(
        &mut self,
        entry: ScanEntry,
        rule: KeepRule,
        emit: &mut impl FnMut(BatchPlan),
    ) {
        let size = entry.size;
        self.add(PlanItem::EarlyFile(entry, rule), size, emit)
    }

    /// Bytes an entry of `data` bytes at `path` counts against a batch's size (its header
    /// too: a batch of many long paths stays as bounded as a batch of data).
    pub fn entry_bytes(path: &[u8], data: u64) -> u64 {
        data + path.len() as u64 + ENTRY_OVERHEAD
    }

    /// Adds one entry; completed batch plans are handed to `emit`.
    pub fn push(&mut self, entry: ScanEntry, emit: &mut impl FnMut(BatchPlan)) {
        if let Some(text) = entry.error.clone() {
            return self.add(
                PlanItem::Failed {
                    path: entry.path,
                    text,
                },
                0,
                emit,
            );
        }
        match entry.kind {
            EntryType::File if entry.size > self.threshold => {
                let size = entry.size;
                self.push_chunks(&Arc::new(entry), (0, size), (true, None), emit);
            }
            EntryType::File => {
                let size = entry.size;
                self.add(PlanItem::File(entry), size, emit)
            }
            EntryType::Dir => self.add(PlanItem::Dir(entry), 0, emit),
            EntryType::Symlink => self.add(PlanItem::Symlink(entry), 0, emit),
            EntryType::Special if entry.special.is_some() => {
                self.add(PlanItem::Special(entry), 0, emit)
            }
            EntryType::Special => {
                let item = PlanItem::Failed {
                    path: entry.path,
                    text: "of a type sprat does not know (not a file, directory, symlink, \
                           FIFO, socket or device): not copied"
                        .into(),
                };
                self.add(item, 0, emit)
            }
        }
    }

    /// Adds a large file the destination has part of (`present`, in a partial file of this
    /// very source file): only the missing ranges travel, in chunks. When nothing is missing
    /// its last byte travels again, so that the destination opens the partial file, verifies
    /// it and puts it in place. Returns the bytes not sent.
    pub fn push_resumed(
        &mut self,
        entry: ScanEntry,
        present: &sprat_store::partial::Coverage,
        emit: &mut impl FnMut(BatchPlan),
    ) -> u64 {
        let size = entry.size;
        if size <= self.threshold || size == 0 {
            self.push(entry, emit);
            return 0;
        }
        let mut missing = present.missing(size);
        if missing.is_empty() {
            missing.push((size - 1, 1));
        }
        let sent: u64 = missing.iter().map(|&(_, len)| len).sum();
        let entry = Arc::new(entry);
        for (start, len) in missing {
            self.push_chunks(&entry, (start, start + len), (false, None), emit);
        }
        size - sent
    }

    /// Adds the bytes `[start, end)` of a large file as chunks (`whole`: of a file sent whole).
    fn push_chunks(
        &mut self,
        entry: &Arc<ScanEntry>,
        (start, end): (u64, u64),
        (whole, unless): (bool, Option<KeepRule>),
        emit: &mut impl FnMut(BatchPlan),
    ) {
        // Spread over several servers (`deferring_namespace`), a batch holds the chunks of one
        // large file alone: each such file goes whole to the server its first batch went to,
        // whatever order the batches are read in (before, a batch holding the end of one file
        // and the start of the next could tie them to two servers, and each wrote a part).
        let alone = self.deferred.is_some();
        if alone {
            self.flush_current(emit);
        }
        let mut offset = start;
        while offset < end {
            let mut len = self.chunk_size_now(&entry.path).min(end - offset);
            // A chunk that is not the last ends on a block boundary: the writer leaves a run of
            // zeros as a hole only in whole blocks, so a boundary inside a block of zeros
            // (after an opening-sized chunk) left one allocated block every chunk.
            let block = sprat_store::sparse::HOLE_BLOCK as u64;
            let aligned_end = (offset + len) / block * block;
            if offset + len < end && aligned_end > offset {
                len = aligned_end - offset;
            }
            let item = PlanItem::Chunk {
                entry: entry.clone(),
                offset,
                len,
                whole,
                unless,
            };
            self.add(item, len, emit);
            offset += len;
        }
        if alone {
            self.flush_current(emit);
        }
    }

    /// Adds a file for the receiver to check as `rule` says before it writes it (a file the
    /// sender cannot check against the destination's listing): a whole file as one entry, a
    /// large one as chunks, each carrying the rule.
    pub fn push_checked(
        &mut self,
        entry: ScanEntry,
        rule: KeepRule,
        emit: &mut impl FnMut(BatchPlan),
    ) {
        if entry.kind != EntryType::File || entry.size <= self.threshold {
            return self.push_early_file(entry, rule, emit);
        }
        let size = entry.size;
        self.push_chunks(&Arc::new(entry), (0, size), (true, Some(rule)), emit);
    }

    /// Adds a file whose content the destination already has: only its attributes travel.
    pub fn push_attrs(&mut self, entry: ScanEntry, emit: &mut impl FnMut(BatchPlan)) {
        self.add(PlanItem::Attrs(entry), 0, emit)
    }

    /// `size`, capped while batch `seq` is an opening batch: over a network at the current
    /// round's window while the rounds last, otherwise at [`OPENING_BATCH_SIZE`] in the one
    /// opening round (a local copy, or a path known to be short).
    fn sized_for(&self, seq: u64, size: u64) -> u64 {
        if self.opening_batches == 0 {
            return size;
        }
        match self.rounds_now() {
            Some(ramp) => size.min(ramp.window),
            None if seq <= self.opening_batches
                && (!self.slow_start || self.path_rtt.is_short()) =>
            {
                size.min(OPENING_BATCH_SIZE)
            }
            None => size,
        }
    }

    /// The opening rounds, while they last and the path is not known to be short.
    fn rounds_now(&self) -> Option<&Ramp> {
        self.ramp.as_ref().filter(|_| !self.path_rtt.is_short())
    }

    /// Batch `plan` is made: the opening rounds move on (see the module comment).
    fn made(&mut self, plan: &BatchPlan) {
        let Some(ramp) = &mut self.ramp else {
            return;
        };
        if plan.budget_bytes >= ramp.window / 2 {
            ramp.smallest = ramp.smallest.min(plan.budget_bytes);
        }
        if plan.seq % self.opening_batches.max(1) == 0 {
            // No batch filled: the window doubles, as slow start's does.
            ramp.window += ramp.smallest.min(ramp.window);
            ramp.smallest = u64::MAX;
            ramp.rounds += 1;
            if ramp.window >= RAMP_END || ramp.rounds >= MAX_RAMP_ROUNDS {
                self.ramp = None;
            }
        }
    }

    /// Chunks are opening-sized too while the opening batches are made (a chunk starts the
    /// next batch when the current one holds something); in a round shaped by slow start,
    /// with room for the chunk's entry header (of `path`) in the window.
    fn chunk_size_now(&self, path: &[u8]) -> u64 {
        let seq = self.next_seq + u64::from(!self.current.items.is_empty());
        let size = self.sized_for(seq, self.chunk_size);
        if self.rounds_now().is_some() && size < self.chunk_size {
            size.saturating_sub(Planner::entry_bytes(path, 0)).max(4096)
        } else {
            size
        }
    }

    fn add(&mut self, item: PlanItem, data: u64, emit: &mut impl FnMut(BatchPlan)) {
        if let Some(deferred) = &mut self.deferred {
            if matches!(item, PlanItem::Dir(_) | PlanItem::HardLink { .. }) {
                let target = match &item {
                    PlanItem::HardLink { target, .. } => target.len() as u64,
                    _ => 0,
                };
                let bytes = item.path().len() as u64 + target + ENTRY_OVERHEAD;
                let full = !deferred.items.is_empty()
                    && (deferred.budget_bytes + bytes > self.batch_size
                        || deferred.items.len() >= self.batch_files);
                if full {
                    self.flush_deferred(emit);
                }
                if let Some(deferred) = &mut self.deferred {
                    deferred.items.push(item);
                    deferred.budget_bytes += bytes;
                }
                return;
            }
        }
        let bytes = Planner::entry_bytes(item.path(), data);
        let batch_size = self.sized_for(self.next_seq, self.batch_size);
        let full = !self.current.items.is_empty()
            && (self.current.budget_bytes + bytes > batch_size
                || self.current.items.len() >= self.batch_files);
        if full {
            self.flush_current(emit);
        }
        self.current.items.push(item);
        self.current.data_bytes += data;
        self.current.budget_bytes += bytes;
    }

    /// Emits the batches being filled, if any (the files' first, then held-back
    /// directories and links).
    pub fn flush(&mut self, emit: &mut impl FnMut(BatchPlan)) {
        self.flush_current(emit);
        self.flush_deferred(emit);
    }

    fn flush_current(&mut self, emit: &mut impl FnMut(BatchPlan)) {
        if self.current.items.is_empty() {
            return;
        }
        let mut plan = std::mem::take(&mut self.current);
        plan.seq = self.next_seq;
        self.next_seq += 1;
        self.made(&plan);
        emit(plan);
    }

    fn flush_deferred(&mut self, emit: &mut impl FnMut(BatchPlan)) {
        let Some(deferred) = &mut self.deferred else {
            return;
        };
        if deferred.items.is_empty() {
            return;
        }
        let mut plan = std::mem::replace(
            deferred,
            BatchPlan {
                deferred: true,
                ..BatchPlan::default()
            },
        );
        plan.seq = self.next_seq;
        self.next_seq += 1;
        self.made(&plan);
        emit(plan);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprat_store::Attrs;

    fn file(path: &str, size: u64) -> ScanEntry {
        ScanEntry {
            path: path.as_bytes().to_vec(),
            kind: EntryType::File,
            size,
            attrs: Attrs::default(),
            ino: 0,
            dev: 0,
            nlink: 1,
            version: 0,
            link_target: None,
            special: None,
            error: None,
        }
    }

    fn plan(entries: Vec<ScanEntry>, options: &TransferOptions) -> Vec<BatchPlan> {
        let mut out = Vec::new();
        let mut p = Planner::new(options);
        for e in entries {
            p.push(e, &mut |b| out.push(b));
        }
        p.flush(&mut |b| out.push(b));
        out
    }

    #[test]
    fn small_files_are_packed_up_to_the_batch_size() {
        let options = TransferOptions {
            batch_size: 10_000,
            ..TransferOptions::default()
        };
        let plans = plan(
            (0..10).map(|i| file(&format!("f{i}"), 4000)).collect(),
            &options,
        );
        assert_eq!(
            plans.iter().map(|p| p.items.len()).collect::<Vec<_>>(),
            [2, 2, 2, 2, 2]
        );
        assert!(plans.iter().all(|p| p.data_bytes <= 10_000));
        assert_eq!(
            plans.iter().map(|p| p.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
    }

    #[test]
    fn large_files_become_chunks_covering_every_byte() {
        let options = TransferOptions {
            batch_size: 1 << 20,
            small_file_threshold: 1 << 20,
            chunk_size: 1 << 20,
            // One opening batch (a local copy's): the first chunk is 128 KiB.
            streams: Some(1),
            slow_start_opening: false,
            ..TransferOptions::default()
        };
        let size = (5 << 20) + 123;
        let plans = plan(vec![file("big", size), file("small", 10)], &options);
        let mut covered = 0;
        for p in &plans {
            for item in &p.items {
                if let PlanItem::Chunk { offset, len, .. } = item {
                    assert_eq!(*offset, covered);
                    covered += len;
                }
            }
        }
        assert_eq!(covered, size);
        // An opening chunk of 128 KiB, four full ones, then the tail chunk (896 KiB + 123
        // bytes) shares a batch with the small file.
        assert_eq!(plans.len(), 6);
        assert_eq!(plans[0].data_bytes, OPENING_BATCH_SIZE);
    }

    #[test]
    fn every_chunk_but_a_files_last_ends_on_a_block_boundary() {
        // Opening chunks sized by slow start's window less an entry header, and a configured
        // chunk size that is no multiple of a block: the boundaries still fall between
        // blocks, so that a sparse file's zero runs stay holes at the destination.
        let options = TransferOptions {
            chunk_size: 1_000_000,
            small_file_threshold: 1 << 20,
            ..TransferOptions::default()
        };
        let size = (64 << 20) + 5;
        let plans = plan(vec![file("big", size)], &options);
        let mut covered = 0;
        let mut chunks = 0;
        for p in &plans {
            for item in &p.items {
                if let PlanItem::Chunk { offset, len, .. } = item {
                    assert_eq!(*offset, covered);
                    assert_eq!(offset % 4096, 0, "a chunk at {offset}");
                    covered += len;
                    chunks += 1;
                }
            }
        }
        assert_eq!(covered, size);
        assert!(chunks > 64, "{chunks} chunks");
        let first = plans[0].data_bytes;
        assert!(
            first < options.chunk_size,
            "an opening chunk of {first} bytes"
        );
    }

    #[test]
    fn the_first_batches_are_small_ones_for_every_stream_that_may_start() {
        let options = TransferOptions {
            slow_start_opening: false,
            ..TransferOptions::default()
        };
        let files = 40 * (options.batch_size / 4096) as usize;
        let plans = plan(
            (0..files).map(|i| file(&format!("f{i}"), 4096)).collect(),
            &options,
        );
        let opening = options.opening_batches();
        assert!(opening >= crate::tune::WIDE_START_STREAMS);
        let (first, rest) = plans.split_at(opening);
        assert!(first
            .iter()
            .all(|p| p.budget_bytes <= OPENING_BATCH_SIZE && p.data_bytes >= 64 << 10));
        assert!(
            rest[..rest.len() - 1]
                .iter()
                .all(|p| p.data_bytes > options.batch_size / 2
                    && p.budget_bytes <= options.batch_size)
        );
    }

    #[test]
    fn over_a_network_the_opening_batches_grow_as_a_window_in_slow_start() {
        let options = TransferOptions::default();
        assert!(options.slow_start_opening);
        let streams = options.opening_batches();
        // Files of 4,000 bytes (entries of 4,068 counted) and some of 10,000.
        let files = (0..20_000)
            .map(|i| file(&format!("{i:05}"), if i % 7 == 3 { 10_000 } else { 4000 }))
            .collect();
        let plans = plan(files, &options);
        // Each round's batches fit the window of a stream that took one batch of every
        // earlier round: the first round's size plus the smallest batch of each.
        let mut window = FIRST_OPENING_BATCH_SIZE;
        let mut rounds = 0;
        for round in plans.chunks(streams) {
            if window >= RAMP_END {
                break;
            }
            assert!(
                round.iter().all(|p| p.budget_bytes <= window),
                "round {rounds}: batches over {window}"
            );
            // Full enough: no batch smaller than the window less one entry.
            assert!(round.iter().all(|p| p.budget_bytes + 10_100 > window));
            window += round.iter().map(|p| p.budget_bytes).min().unwrap_or(0);
            rounds += 1;
        }
        assert_eq!(
            plans[0].items.len(),
            3,
            "three files in the first round trip"
        );
        assert!(
            (4..=6).contains(&rounds),
            "{rounds} rounds before {RAMP_END}"
        );
        // Then batches of the configured size.
        let after = &plans[rounds * streams..plans.len() - 1];
        assert!(!after.is_empty());
        assert!(
            after
                .iter()
                .all(|p| p.budget_bytes <= options.batch_size
                    && p.data_bytes > options.batch_size / 2)
        );
        // A large file's first chunks are opening-sized too.
        let big = plan(vec![file("big", 8 << 20)], &options);
        assert!(big[0].data_bytes <= FIRST_OPENING_BATCH_SIZE);
        assert_eq!(big.iter().map(|p| p.data_bytes).sum::<u64>(), 8 << 20);
    }

    #[test]
    fn the_opening_rounds_end_even_when_their_batches_are_cut_short() {
        // A directory before each file too large to share its batch: every other batch holds
        // one directory entry of a few dozen bytes.
        let options = TransferOptions::default();
        let dir = |path: &str| ScanEntry {
            kind: EntryType::Dir,
            ..file(path, 0)
        };
        let mut entries = Vec::new();
        for i in 0..200 {
            entries.push(dir(&format!("d{i:03}")));
            entries.push(file(&format!("d{i:03}/img"), 600_000));
        }
        entries.extend((0..10_000).map(|i| file(&format!("s/{i:05}"), 4000)));
        let plans = plan(entries, &options);
        // The pairs alone make more batches than the rounds may take (200 dir-file pairs,
        // 32 batches a round): once they are planned, the small files go in batches of the
        // configured size.
        let small: Vec<&BatchPlan> = plans
            .iter()
            .filter(|p| p.items.iter().all(|i| i.path().starts_with(b"s/")))
            .collect();
        assert!(small.len() >= 10, "{} batches of small files", small.len());
        assert!(small[..small.len() - 1]
            .iter()
            .all(|p| p.data_bytes > options.batch_size / 2));
    }

    #[test]
    fn with_hard_links_later_names_of_an_inode_become_links_to_the_first() {
        let options = TransferOptions {
            hard_links: true,
            ..TransferOptions::default()
        };
        let linked = |path: &str, ino: u64, nlink: u32| ScanEntry {
            ino,
            dev: 7,
            nlink,
            ..file(path, 10)
        };
        let mut p = Planner::new(&options);
        let mut out = Vec::new();
        for e in [
            linked("a", 1, 3),
            linked("solo", 2, 1),
            linked("b", 1, 3),
            linked("other", 3, 2),
            linked("c", 1, 3),
        ] {
            match p.link_target(&e) {
                Some(target) => p.push_link(e.path, target, &mut |b| out.push(b)),
                None => p.push(e, &mut |b| out.push(b)),
            }
        }
        p.flush(&mut |b| out.push(b));
        let items: Vec<String> = out
            .iter()
            .flat_map(|b| &b.items)
            .map(|i| match i {
                PlanItem::File(e) => String::from_utf8_lossy(&e.path).into_owned(),
                PlanItem::HardLink { path, target } => format!(
                    "{} -> {}",
                    String::from_utf8_lossy(path),
                    String::from_utf8_lossy(target)
                ),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(items, ["a", "solo", "b -> a", "other", "c -> a"]);
        // Every name of inode 1 came: it is forgotten; inode 3 waits for its second name.
        assert_eq!(p.links.as_ref().unwrap().len(), 1);
        // Without -H each name is a file.
        let mut p = Planner::new(&TransferOptions::default());
        assert!(p.link_target(&linked("a", 1, 3)).is_none());
        assert!(p.link_target(&linked("b", 1, 3)).is_none());
    }

    #[test]
    fn held_back_directories_and_links_travel_last_in_batches_of_their_own() {
        let options = TransferOptions {
            hard_links: true,
            batch_files: 2,
            ..TransferOptions::default()
        };
        let dir = |path: &str| ScanEntry {
            kind: EntryType::Dir,
            ..file(path, 0)
        };
        let mut p = Planner::new(&options).deferring_namespace();
        let mut out = Vec::new();
        for e in [
            dir(""),
            dir("d"),
            file("d/a", 10),
            dir("e"),
            file("e/b", 10),
        ] {
            p.push(e, &mut |b| out.push(b));
        }
        p.push_link(b"e/c".to_vec(), b"d/a".to_vec(), &mut |b| out.push(b));
        p.flush(&mut |b| out.push(b));
        let shape: Vec<(bool, Vec<String>)> = out
            .iter()
            .map(|b| {
                let paths = b.items.iter();
                let paths = paths.map(|i| String::from_utf8_lossy(i.path()).into_owned());
                (b.deferred, paths.collect())
            })
            .collect();
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shape,
            [
                (true, names(&["", "d"])),
                (false, names(&["d/a", "e/b"])),
                (true, names(&["e", "e/c"])),
            ]
        );
        let seqs: Vec<u64> = out.iter().map(|b| b.seq).collect();
        assert_eq!(seqs, [1, 2, 3], "one sequence for both kinds");
        assert!(out.iter().all(|b| b.data_bytes == 0 || !b.deferred));
    }

    #[test]
    fn entry_count_is_capped() {
        let options = TransferOptions {
            batch_files: 3,
            ..TransferOptions::default()
        };
        let plans = plan(
            (0..7).map(|i| file(&format!("f{i}"), 0)).collect(),
            &options,
        );
        assert_eq!(
            plans.iter().map(|p| p.items.len()).collect::<Vec<_>>(),
            [3, 3, 1]
        );
    }
}
