//! The sending side's stages: scan, plan and read, ending in a bounded queue of encoded batches.
//!
//! One scanner (itself parallel), one planner and `read_threads` readers run on their own
//! threads; each reader fills a whole batch (file data read straight into the batch buffer,
//! checksum computed as it is read). Memory is bounded by the queue capacities times the batch
//! size, whatever the size of the tree.

use crate::config::TransferOptions;
use crate::error::TransferError;
use crate::pipeline::digest;
use crate::pipeline::plan::{BatchPlan, PlanItem, Planner};
use crate::pipeline::skip::{DestIndex, SkipCounts, SkipRule, There, Verdict};
use crate::sync::lock;
use crossbeam_channel::{bounded, unbounded, Receiver};
use sprat_proto::{Batch, ChunkOf, FileMeta, KeepRule, Totals};
use sprat_store::batch_read::{BatchReader, ReadItem, Scanned};
use sprat_store::owner::NameCache;
use sprat_store::{Attrs, Root, ScanOptions, Source, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running source pipeline.
pub struct SourceHandle {
    /// Encoded batches, ready for the network or a local writer.
    pub batches: Receiver<Batch>,
    /// Whether the source root is a directory (false: a single file).
    pub root_is_dir: bool,
    /// What the batches handed to `batches` held, summed; final once `batches` is
    /// disconnected (every batch made was queued before the last sender went away).
    pub totals: SentTotals,
    /// Batches of directories and hard links held back until every file is written, when
    /// the source was started with [`start_deferring`] (empty otherwise); counted in
    /// `totals` too. Final once `batches` is disconnected.
    pub deferred: Receiver<Batch>,
    /// Why the destination's index could not be made, once the source is drained: the
    /// source then sent nothing (see [`Skip::index`]).
    index_failure: IndexFailure,
    join: JoinHandle<Duration>,
}

/// Why a destination's index could not be made (see [`SourceHandle::index_failure`]).
#[derive(Clone, Default)]
pub struct IndexFailure(Arc<Mutex<Option<TransferError>>>);

impl IndexFailure {
    /// The failure, if the index could not be made: the transfer stops with it.
    pub fn check(&self) -> Result<(), TransferError> {
        lock(&self.0).take().map_or(Ok(()), Err)
    }
}

/// A source's running totals, shared with whoever ends the stream (see [`SourceHandle::totals`]).
#[derive(Clone, Default)]
pub struct SentTotals(Arc<Mutex<Totals>>);

impl SentTotals {
    /// Counts a batch about to be queued.
    pub fn count(&self, batch: &Batch) {
        self.add(&batch.totals);
    }

    /// Counts a batch with `totals`, queued or about to be.
    pub fn add(&self, totals: &Totals) {
        lock(&self.0).add(totals);
    }

    /// What was counted so far.
    pub fn get(&self) -> Totals {
        *lock(&self.0)
    }
}

impl SourceHandle {
    /// Why the destination's index could not be made (to check once the source is drained).
    pub fn index_failure(&self) -> IndexFailure {
        self.index_failure.clone()
    }

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
        uid: a.uid,
        gid: a.gid,
    }
}

/// What the destination has, for a source to leave out (see [`crate::pipeline::skip`]).
pub struct Skip {
    /// Made when the source starts (a listing costs round trips): by the planner before the
    /// scan of a tree starts, on a thread of its own for a single file (see `early`). A
    /// destination that cannot be listed stops the source: nothing more is sent (sending
    /// everything would overwrite what `-u` or `--ignore-existing` keep, and lose what a
    /// re-run skips or resumes), and [`SourceHandle::index_failure`] says why.
    pub index: Box<dyn FnOnce() -> Result<DestIndex, TransferError> + Send>,
    pub rule: SkipRule,
    pub counts: Arc<SkipCounts>,
    /// Whether a single small file may travel before the index is in, for the receiver to
    /// check (a push: its listing answers a round trip after the session could take data).
    pub early: bool,
}

/// Largest file a source sends before the destination's index is in ([`Skip::early`]), data
/// and entry header: what one stream carries in its first round trip (TCP starts with 10
/// segments, 14.5 KB, less the hellos). A push of one small file then ends a round trip
/// sooner, and a re-run that finds it up to date costs nothing more. More would take more
/// round trips of slow start than the listing saves (512 KiB of a tree's first files made a
/// 100-file re-run through 100 ms 1.7x slower); the first files of a tree do not go early
/// either: planning a tree while its listing comes measured slower on loopback.
pub const EARLY_BYTES: u64 = 12 << 10;

/// Whether a regular file of `size` bytes, the source itself, is small enough to go before
/// the index is in (when its copy lets it: [`Skip::early`], and a rule the receiver can
/// check alone).
pub(crate) fn fits_early(size: u64, options: &TransferOptions) -> bool {
    size <= options.small_file_threshold && Planner::entry_bytes(b"", size) <= EARLY_BYTES
}

/// A destination's index on its way (see [`Skip::begin`]).
struct PendingIndex {
    index: Receiver<DestIndex>,
    rule: SkipRule,
    counts: Arc<SkipCounts>,
    /// How the receiver checks a file sent before the index is in (`None`: none may go).
    early: Option<KeepRule>,
}

impl Skip {
    /// Makes the index on the caller's thread (`None`: it failed, said in `failure`).
    fn resolve(self, failure: &IndexFailure) -> Option<Resolved> {
        Some((made(self.index, failure)?, self.rule, self.counts))
    }

    /// Starts making the index on a thread of its own; the thread is returned too, for the
    /// source to wait for once it ends (what the listing found, an impostor, must be known
    /// by then even when the file went before it was in).
    fn begin(self, failure: &IndexFailure) -> (PendingIndex, Option<JoinHandle<()>>) {
        let (tx, index) = bounded(1);
        let make = self.index;
        let failed = failure.clone();
        let listing = std::thread::Builder::new()
            .name("sprat-dest-index".into())
            .spawn(move || {
                if let Some(index) = made(make, &failed) {
                    let _ = tx.send(index);
                }
            })
            .inspect_err(|e| {
                // No index will come: nothing is sent, and the transfer says why.
                let why = format!("cannot start the listing of the destination: {e}");
                lock(&failure.0).get_or_insert(TransferError::Local(why));
            })
            .ok();
        let early = match self.early {
            true => receiver_keeps(self.rule),
            false => None,
        };
        let pending = PendingIndex {
            index,
            rule: self.rule,
            counts: self.counts,
            early,
        };
        (pending, listing)
    }
}

/// How a receiver checks alone a file sent before the index is in, under `rule` (`None`:
/// it cannot, and none may go early).
pub(crate) fn receiver_keeps(rule: SkipRule) -> Option<KeepRule> {
    match rule {
        SkipRule::QuickCheck => Some(KeepRule::SameSizeAndTime),
        SkipRule::IgnoreExisting => Some(KeepRule::Present),
        _ => None,
    }
}

/// Runs `make`, an index of the destination; `None` if it cannot be made, why in `failure`.
fn made(
    make: Box<dyn FnOnce() -> Result<DestIndex, TransferError> + Send>,
    failure: &IndexFailure,
) -> Option<DestIndex> {
    match make() {
        Ok(index) => Some(index),
        Err(e) => {
            tracing::info!(e = %crate::text::printable(&e.to_string()), "cannot list the destination: sending nothing");
            lock(&failure.0).get_or_insert(e);
            None
        }
    }
}

impl PendingIndex {
    /// Waits for the index (`None` if it could not be made, or its thread could not start).
    fn wait(self) -> Option<Resolved> {
        Some((self.index.recv().ok()?, self.rule, self.counts))
    }
}

/// A source's resolved skip: the index, the rule and what it spared.
type Resolved = (DestIndex, SkipRule, Arc<SkipCounts>);

/// Plans one scanned entry, leaving out what `skip` says the destination has; a file whose
/// content must be compared (`--checksum`) goes to the digest pool instead, and is planned
/// once its digest is back ([`plan_compared`]).
fn plan_entry(
    planner: &mut Planner,
    skip: Option<&Resolved>,
    entry: sprat_store::ScanEntry,
    emit: &mut impl FnMut(BatchPlan),
    digests: &mut digest::Pool<'_, sprat_store::ScanEntry>,
    take_whole: TakeWhole<'_>,
) {
    // `-H`: a second name of a file travels as a link to the first, whatever the
    // destination has at that name (the link replaces it unless it is that link already),
    // except a name whose content a rule that keeps what the destination has leaves there
    // (`-u`, `--ignore-existing`, `--size-only`).
    if let Some(target) = planner.link_target(&entry) {
        let kept = skip
            .filter(|(_, rule, _)| rule.keeps_destination_content())
            .map(|(index, rule, counts)| (index.verdict(&entry, *rule), (index, counts)))
            // Below a directory the destination cannot list, what is there is unknown: the
            // name is sent as a file for the writer to check, or failed (`-u`), never linked
            // over what may be there.
            .filter(|(verdict, _)| {
                matches!(
                    verdict,
                    Verdict::Skip | Verdict::Kept | Verdict::FixAttrs | Verdict::Unknown { .. }
                )
            });
        return match (kept, skip) {
            (Some((verdict, (index, counts))), _) => {
                apply(planner, (index, counts), verdict, entry, emit, take_whole)
            }
            // The first name was left as the destination has it (another content, maybe):
            // this one travels as the source's file, as rsync sends it, not as a link to that.
            (None, Some((index, rule, counts))) if planner.link_group_kept(&entry) => {
                let verdict = index.verdict(&entry, *rule);
                // Sent whole, it is what the group's next names link to.
                if matches!(verdict, Verdict::Send) {
                    planner.relink_group(&entry);
                }
                apply(planner, (index, counts), verdict, entry, emit, take_whole)
            }
            (None, skip) => {
                // Made a link to the group's first name: a partial copy of this name is of
                // no more use (see `apply`).
                if let Some((index, _, counts)) = skip.filter(|_| entry.error.is_none()) {
                    supersede(index, counts, &entry.path);
                }
                planner.push_link(entry.path, target, emit)
            }
        };
    }
    let Some((index, rule, counts)) = skip else {
        return push_or_take(planner, entry, emit, take_whole);
    };
    match index.verdict(&entry, *rule) {
        Verdict::Compare => digests.submit(entry),
        verdict => {
            // The first name of a group of hard links that a rule keeping the destination's
            // content leaves there: its other names must not become links to that.
            let left_there = matches!(
                verdict,
                Verdict::Skip | Verdict::Kept | Verdict::FixAttrs | Verdict::Unknown { .. }
            );
            if left_there && rule.keeps_destination_content() && entry.nlink > 1 {
                planner.keep_link_group(&entry);
            }
            apply(planner, (index, counts), verdict, entry, emit, take_whole)
        }
    }
}

/// Directories left out of a copy with everything below them (see [`left_out_dir`]).
#[derive(Default)]
struct LeftOut(std::collections::HashSet<Vec<u8>>);

impl LeftOut {
    fn add(&mut self, dir: Vec<u8>) {
        self.0.insert(dir);
    }

    /// Whether `path` lies below a directory left out.
    fn holds(&self, path: &[u8]) -> bool {
        if self.0.is_empty() {
            return false;
        }
        let mut at = path;
        while !at.is_empty() {
            at = sprat_store::split_parent(at).0;
            if self.0.contains(at) {
                return true;
            }
        }
        false
    }
}

/// Why the source's directory `entry` is left out of the copy with everything below it, if
/// it is: `--ignore-existing` and the destination has something else than a directory there
/// (which the directory would replace); or it is named as the partial copy (or journal) of a
/// large file beside it, where the destination keeps that file's partial copy.
fn left_out_dir(
    root: &sprat_store::Root,
    options: &TransferOptions,
    skip: Option<&Resolved>,
    entry: &sprat_store::ScanEntry,
) -> Option<String> {
    if entry.kind != sprat_store::EntryType::Dir || entry.path.is_empty() {
        return None;
    }
    if let Some((index, SkipRule::IgnoreExisting, _)) = skip {
        if matches!(index.at(&entry.path), Some(There::File | There::Other)) {
            return Some(
                "not copied: the destination has a file or link there, which --ignore-existing \
                 leaves as it is"
                    .into(),
            );
        }
    }
    let named = sprat_store::partial::final_name_of_hidden(entry.name()).is_some();
    if named {
        let mut as_file = entry.clone();
        as_file.kind = sprat_store::EntryType::File;
        return held_back(root, options, as_file).error;
    }
    None
}

/// Whether `entry` is named as sprat names the partial copy of a large file, or its journal
/// (`.NAME.sprat-part`, `.NAME.sprat-part.log`), and is not a directory: a symlink, FIFO or
/// device under such a name would take the place of NAME's partial copy at the destination.
fn is_partial_file_name(entry: &sprat_store::ScanEntry) -> bool {
    entry.kind != sprat_store::EntryType::Dir
        && entry.error.is_none()
        && sprat_store::partial::final_name_of_hidden(
            sprat_store::relpath::split_parent(&entry.path).1,
        )
        .is_some()
}

/// A file named as the partial copy (or journal) of a file NAME beside it: failed, by name,
/// when NAME is a file that travels in chunks. The destination keeps NAME's partial copy
/// under that very name and removes it once NAME is whole, so the two cannot both arrive;
/// such a file is almost always what an interrupted copy left in the tree. Otherwise it is
/// copied as any other.
fn held_back(
    root: &sprat_store::Root,
    options: &TransferOptions,
    mut entry: sprat_store::ScanEntry,
) -> sprat_store::ScanEntry {
    let (dir, hidden) = sprat_store::relpath::split_parent(&entry.path);
    let Some(name) = sprat_store::partial::final_name_of_hidden(hidden) else {
        return entry;
    };
    let sibling = sprat_store::relpath::join(dir, name);
    let chunked = sprat_store::scan::stat_path(root, &sibling).is_ok_and(|e| {
        e.kind == sprat_store::EntryType::File && e.size > options.small_file_threshold
    });
    if chunked {
        entry.error = Some(format!(
            "not copied: sprat keeps the partial copy of '{}' and its journal under such \
             names while it arrives (a file an interrupted copy left?)",
            crate::text::printable(&String::from_utf8_lossy(name))
        ));
    }
    entry
}

/// Plans a source that is a single file, with what the destination has: the file goes
/// before the index is in if it may ([`Skip::early`]) and is small enough, else once it is.
///
/// Returns the index still to come when the file went before it (for the source to look at
/// once every batch is queued).
fn plan_root_file(
    planner: &mut Planner,
    pending: Option<PendingIndex>,
    (entry, digest): (sprat_store::ScanEntry, &dyn Fn() -> Option<u128>),
    emit: &mut impl FnMut(BatchPlan),
    take_whole: TakeWhole<'_>,
) -> Option<PendingIndex> {
    let Some(pending) = pending else {
        push_or_take(planner, entry, emit, take_whole);
        return None;
    };
    if let Some(rule) = pending.early {
        let bytes = Planner::entry_bytes(&entry.path, entry.size);
        if planner.is_whole_file(&entry) && bytes <= EARLY_BYTES {
            planner.push_early_file(entry, rule, emit);
            return Some(pending);
        }
    }
    // No index (it could not be made): nothing is sent.
    let (index, rule, counts) = pending.wait()?;
    match index.verdict(&entry, rule) {
        // `--checksum`: the file's own digest against the destination's, read here (before,
        // a single file was sent whatever the digests said).
        Verdict::Compare => match index.compared(&entry, digest()) {
            Verdict::Send => push_or_take(planner, entry, emit, take_whole),
            verdict => apply(planner, (&index, &counts), verdict, entry, emit, take_whole),
        },
        verdict => apply(planner, (&index, &counts), verdict, entry, emit, take_whole),
    }
    None
}

/// Puts a regular file at the destination another way than in batches (a local copy's clone
/// or copy inside the kernel, see [`start_cloning`]): whether it did or will (then the file
/// is not planned). Called from the planning thread, which it may hold up.
pub type TakeWholeFile =
    dyn Fn(&Root, Option<&[u8]>, &sprat_store::ScanEntry) -> bool + Send + Sync;

/// [`TakeWholeFile`] bound to the source's root and file name, if any.
type TakeWhole<'a> = Option<&'a dyn Fn(&sprat_store::ScanEntry) -> bool>;

/// Plans `entry`, unless it is a regular file that `take_whole` puts at the destination itself.
fn push_or_take(
    planner: &mut Planner,
    entry: sprat_store::ScanEntry,
    emit: &mut impl FnMut(BatchPlan),
    take_whole: TakeWhole<'_>,
) {
    if let Some(take) = take_whole {
        let regular = entry.error.is_none() && entry.kind == sprat_store::EntryType::File;
        if regular && take(&entry) {
            return;
        }
    }
    planner.push(entry, emit)
}

/// Plans a file whose digest came back from the pool.
fn plan_compared(
    planner: &mut Planner,
    skip: Option<&Resolved>,
    (entry, digest): digest::Digested<sprat_store::ScanEntry>,
    emit: &mut impl FnMut(BatchPlan),
    take_whole: TakeWhole<'_>,
) {
    match skip {
        Some((index, _, counts)) => {
            let verdict = index.compared(&entry, digest);
            apply(planner, (index, counts), verdict, entry, emit, take_whole)
        }
        None => push_or_take(planner, entry, emit, take_whole),
    }
}

/// Notes the partial copy `index` lists at `path`, if any, as one this copy does not finish
/// the file from (see [`SkipCounts::supersedes`]).
fn supersede(index: &DestIndex, counts: &SkipCounts, path: &[u8]) {
    if let Some(seen) = index.partial_at(path) {
        counts.supersedes(path, seen);
    }
}

fn apply(
    planner: &mut Planner,
    (index, counts): (&DestIndex, &SkipCounts),
    verdict: Verdict,
    entry: sprat_store::ScanEntry,
    emit: &mut impl FnMut(BatchPlan),
    take_whole: TakeWhole<'_>,
) {
    // A partial copy this copy does not finish the file from is one to remove once it
    // succeeded; not one below an unlisted directory (what is there is not known), nor that
    // of a large file sent (its writer writes over it itself).
    let resumed_or_unknown = matches!(verdict, Verdict::Resume(_) | Verdict::Unknown { .. });
    let sent_large = matches!(verdict, Verdict::Send | Verdict::Compare)
        && entry.kind == sprat_store::EntryType::File
        && !planner.is_whole_file(&entry);
    if !resumed_or_unknown && !sent_large && entry.error.is_none() {
        supersede(index, counts, &entry.path);
    }
    match verdict {
        Verdict::Send | Verdict::Compare => push_or_take(planner, entry, emit, take_whole),
        // Counted among the files left alone (a symlink or special file kept is not one).
        Verdict::Kept if entry.kind == sprat_store::EntryType::File => counts.skipped(entry.size),
        Verdict::Kept => {}
        // A symlink the destination has already: nothing to count; made again only for its
        // attributes (`-X`), as a file's are sent again.
        Verdict::Skip if entry.kind == sprat_store::EntryType::Symlink => {
            if planner.rechecks_xattrs() {
                push_or_take(planner, entry, emit, take_whole)
            }
        }
        Verdict::Skip => {
            counts.skipped(entry.size);
            if planner.rechecks_xattrs() {
                planner.push_attrs(entry, emit)
            }
        }
        Verdict::FixAttrs => {
            counts.fixed(entry.size);
            planner.push_attrs(entry, emit)
        }
        Verdict::Resume(present) => {
            let kept = planner.push_resumed(entry, &present, emit);
            counts.resumed(kept);
        }
        // Below a directory the destination's side could not list: the writer checks the
        // file itself (a large one in each chunk, until one decides).
        Verdict::Unknown {
            rule: Some(rule), ..
        } => planner.push_checked(entry, rule, emit),
        Verdict::Unknown { dir, rule: None } => {
            let asked = "whether the file there is newer (-u)";
            let mut entry = entry;
            entry.error = Some(format!(
                "not sent: the destination's directory '{}' cannot be listed, so {asked} is \
                 unknown",
                crate::text::printable(&sprat_store::display_path(&dir))
            ));
            planner.push(entry, emit)
        }
    }
}

/// Starts scanning and reading `source` (what `options.selection` selects of a directory),
/// leaving out of a directory's files what `skip` says the destination has.
pub fn start(
    source: Source,
    options: &TransferOptions,
    skip: Option<Skip>,
) -> Result<SourceHandle, TransferError> {
    start_with(source, options, skip, false, None)
}

/// [`start`], offering each regular file to `take_whole` before it is planned: a file it takes
/// is neither read nor sent (a local copy clones it, or copies it inside the kernel).
pub fn start_cloning(
    source: Source,
    options: &TransferOptions,
    skip: Option<Skip>,
    take_whole: Arc<TakeWholeFile>,
) -> Result<SourceHandle, TransferError> {
    start_with(source, options, skip, false, Some(take_whole))
}

/// [`start`], with directories and hard links in batches of their own on
/// [`SourceHandle::deferred`] (see [`Planner::deferring_namespace`]).
pub fn start_deferring(
    source: Source,
    options: &TransferOptions,
    skip: Option<Skip>,
) -> Result<SourceHandle, TransferError> {
    start_with(source, options, skip, true, None)
}

fn start_with(
    source: Source,
    options: &TransferOptions,
    skip: Option<Skip>,
    defer_namespace: bool,
    take_whole_file: Option<Arc<TakeWholeFile>>,
) -> Result<SourceHandle, TransferError> {
    let options = options.clone();
    let (batch_tx, batches) = bounded::<Batch>(options.ready_batches());
    // Held back until the end: unbounded, a few hundred bytes per directory or link.
    let (deferred_tx, deferred) = unbounded::<Batch>();
    let root_is_dir = matches!(source, Source::Dir(_));
    let totals = SentTotals::default();
    let counted = totals.clone();
    let index_failure = IndexFailure::default();
    let failure = index_failure.clone();
    let join = std::thread::Builder::new()
        .name("sprat-source".into())
        .spawn(move || {
            let failure = &failure;
            let (root, file_name) = match source {
                Source::Dir(root) => (root, None),
                Source::File { parent, name } => (parent, Some(name)),
            };
            let (plan_tx, plan_rx) = bounded::<BatchPlan>(options.read_threads * 2);
            let busy_ns = AtomicU64::new(0);
            let failed_large = FailedLarge::default();
            // A single file may go before the destination's index is in (see `Skip::early`):
            // the index is then made on a thread of its own. A tree's planner makes it
            // first, before the scan starts (planning alongside measured slower: the scan
            // and the listing share the CPUs).
            let (pending, listing, skip) = match skip {
                Some(skip) if file_name.is_some() => {
                    let (pending, listing) = skip.begin(failure);
                    (Some(pending), listing, None)
                }
                skip => (None, None, skip),
            };
            let early_pending = std::thread::scope(|s| {
                let root = &root;
                let file_name = file_name.as_deref();
                let options = &options;
                let planning = s.spawn(move || {
                    let mut planner = Planner::new(options);
                    if defer_namespace {
                        planner = planner.deferring_namespace();
                    }
                    let take = take_whole_file
                        .as_deref()
                        .map(|t| move |entry: &sprat_store::ScanEntry| t(root, file_name, entry));
                    let take_whole: TakeWhole<'_> = take.as_ref().map(|t| t as _);
                    let receivers_gone = std::cell::Cell::new(false);
                    let mut emit = |p: BatchPlan| {
                        if plan_tx.send(p).is_err() {
                            receivers_gone.set(true);
                        }
                    };
                    let early_pending = match file_name {
                        Some(name) => {
                            let entry = sprat_store::stat_root_file(root, name);
                            let digest = || digest::file_digest(root, name);
                            let root_file = (entry, &digest as &dyn Fn() -> Option<u128>);
                            plan_root_file(&mut planner, pending, root_file, &mut emit, take_whole)
                        }
                        None => {
                            let (scan_tx, scan_rx) = bounded(64);
                            let scan_options = ScanOptions {
                                threads: options.scan_threads,
                                ..ScanOptions::default()
                            };
                            let skip = match skip.map(|s| s.resolve(failure)) {
                                Some(None) => return None, // no index: nothing is sent
                                resolved => resolved.flatten(),
                            };
                            // `--checksum`: the source's digests of files the destination has
                            // with the same size, computed by threads of their own while the
                            // scan and the planning go on.
                            let digest_threads = match &skip {
                                Some((_, SkipRule::Checksum, _)) => options.read_threads,
                                _ => 0,
                            };
                            std::thread::scope(|inner| {
                                let selection = &options.selection;
                                inner.spawn(move || {
                                    sprat_store::scan_selected(
                                        root,
                                        scan_options,
                                        selection,
                                        scan_tx,
                                    )
                                });
                                digest::with_pool(
                                    root,
                                    digest_threads,
                                    digest::scanned_path,
                                    |mut digests| {
                                        let skip = skip.as_ref();
                                        // Files named as a partial file of another (rare):
                                        // planned once the scan is over (see `held_back`).
                                        let mut held = Vec::new();
                                        // Directories left out with all they hold (see
                                        // `left_out_dir`): the scan lists a directory before
                                        // what it holds.
                                        let mut left_out = LeftOut::default();
                                        for listing in scan_rx {
                                            for entry in listing {
                                                if left_out.holds(&entry.path) {
                                                    continue;
                                                }
                                                if is_partial_file_name(&entry) {
                                                    held.push(entry);
                                                    continue;
                                                }
                                                if let Some(why) =
                                                    left_out_dir(root, options, skip, &entry)
                                                {
                                                    left_out.add(entry.path.clone());
                                                    let mut entry = entry;
                                                    entry.error = Some(why);
                                                    planner.push(entry, &mut emit);
                                                    continue;
                                                }
                                                plan_entry(
                                                    &mut planner,
                                                    skip,
                                                    entry,
                                                    &mut emit,
                                                    &mut digests,
                                                    take_whole,
                                                );
                                            }
                                            digests.flush();
                                            for done in digests.ready() {
                                                plan_compared(
                                                    &mut planner,
                                                    skip,
                                                    done,
                                                    &mut emit,
                                                    take_whole,
                                                );
                                            }
                                            if receivers_gone.get() {
                                                // Nobody reads any more: stop the scan too.
                                                return;
                                            }
                                        }
                                        for entry in held {
                                            let entry = held_back(root, options, entry);
                                            if entry.error.is_some() {
                                                planner.push(entry, &mut emit);
                                                continue;
                                            }
                                            plan_entry(
                                                &mut planner,
                                                skip,
                                                entry,
                                                &mut emit,
                                                &mut digests,
                                                take_whole,
                                            );
                                        }
                                        for done in digests.finish() {
                                            plan_compared(
                                                &mut planner,
                                                skip,
                                                done,
                                                &mut emit,
                                                take_whole,
                                            );
                                        }
                                    },
                                );
                            });
                            None
                        }
                    };
                    planner.flush(&mut emit);
                    early_pending
                });
                for _ in 0..options.read_threads {
                    let plan_rx = plan_rx.clone();
                    let batch_tx = batch_tx.clone();
                    let deferred_tx = deferred_tx.clone();
                    let busy_ns = &busy_ns;
                    let counted = &counted;
                    let failed_large = &failed_large;
                    s.spawn(move || {
                        let mut reader = BatchReader::new(
                            root,
                            file_name,
                            options.read_order,
                            options.io_backend,
                        )
                        .with_max_open(open_files_per_reader(options.read_threads));
                        let mut names = NameCache::default();
                        let xattrs = XattrSource {
                            root,
                            file_name,
                            scope: options.xattr_scope(),
                        };
                        for plan in plan_rx {
                            let started = Instant::now();
                            let deferred = plan.deferred;
                            let batch =
                                read_batch(&mut reader, &mut names, plan, &xattrs, failed_large);
                            busy_ns
                                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                            counted.count(&batch);
                            let queue = if deferred { &deferred_tx } else { &batch_tx };
                            if queue.send(batch).is_err() {
                                break;
                            }
                        }
                    });
                }
                drop(batch_tx);
                drop(deferred_tx);
                // Once the readers are gone (the batches' receiver was dropped), the planner's
                // sends fail and it stops; a plan receiver kept here would block it for ever.
                drop(plan_rx);
                planning.join().ok().flatten()
            });
            // Every batch is queued: whether the listing failed (an impostor) is known once its
            // thread ends, even when every file went before it was in.
            if let Some(listing) = listing {
                let _ = listing.join();
            }
            // A single file that went before the index was in, whole: a partial copy of it at
            // the destination (of a large version an interrupted copy left) is of no more use.
            if let Some((index, _, counts)) = early_pending.and_then(PendingIndex::wait) {
                supersede(&index, &counts, b"");
            }
            Duration::from_nanos(busy_ns.load(Ordering::Relaxed) / options.read_threads as u64)
        })
        .map_err(|e| TransferError::Local(format!("cannot start the source pipeline: {e}")))?;
    Ok(SourceHandle {
        batches,
        root_is_dir,
        totals,
        deferred,
        index_failure,
        join,
    })
}

/// What the scan saw of a file, for the reader's check that it did not change.
pub(crate) fn scanned(e: &sprat_store::ScanEntry) -> Scanned {
    Scanned {
        size: e.size,
        mtime_sec: e.attrs.mtime_sec,
        mtime_nsec: e.attrs.mtime_nsec,
        version: e.version,
    }
}

/// Where a reader finds the extended attributes it sends (`-X`, `-A`).
struct XattrSource<'a> {
    root: &'a sprat_store::Root,
    /// The source's name in `root` when it is a single file (its transfer path is empty).
    file_name: Option<&'a [u8]>,
    /// What is read (see [`TransferOptions::xattr_scope`]); 0: nothing.
    scope: u8,
}

impl XattrSource<'_> {
    /// The attributes of the item at transfer path `path` (a file or a directory), read
    /// on the item itself, opened without following a symlink; of a `special` file (a FIFO,
    /// socket or device), read without opening it.
    fn read(&self, path: &[u8], special: bool) -> Result<sprat_store::xattr::Xattrs, String> {
        use rustix::fs::OFlags;
        let rel = match self.file_name {
            Some(name) if path.is_empty() => name,
            _ => path,
        };
        let flags = match special {
            true => OFlags::PATH | OFlags::NOFOLLOW,
            false => OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY,
        };
        let fd = self.root.open_beneath(rel, flags).map_err(|e| {
            StoreError::new(
                "read extended attributes of",
                path,
                sprat_store::root::escape_error(e),
            )
            .to_string()
        })?;
        let read = match special {
            true => sprat_store::xattr::read(&sprat_store::xattr::Unopened::new(fd), self.scope),
            false => sprat_store::xattr::read(&fd, self.scope),
        };
        read.map_err(|e| match e {
            sprat_store::xattr::ReadError::Os(e) => {
                StoreError::new("read extended attributes of", path, e).to_string()
            }
            sprat_store::xattr::ReadError::TooLarge(n) => format!(
                "read extended attributes of '{}': {n} bytes or more, over the {} KiB a copy \
                 carries for one file",
                sprat_store::display_path(path),
                sprat_proto::batch::MAX_XATTR_BYTES >> 10
            ),
        })
    }
}

/// Large files a chunk of which could not be read (changed while being read, unreadable),
/// with that error: their other chunks are not read or sent, only failed with it. Few entries:
/// one per large file that failed.
#[derive(Default)]
struct FailedLarge(std::sync::Mutex<std::collections::HashMap<Vec<u8>, String>>);

impl FailedLarge {
    fn error_of(&self, path: &[u8]) -> Option<String> {
        crate::sync::lock(&self.0).get(path).cloned()
    }

    fn note(&self, path: &[u8], error: &str) {
        crate::sync::lock(&self.0)
            .entry(path.to_vec())
            .or_insert_with(|| error.to_string());
    }
}

/// Reads every item of `plan` into one batch (all its data read together by the batch
/// reader); items that cannot be read become failure entries, and so do the chunks of a large
/// file another chunk of which failed (see [`FailedLarge`]).
/// The batch ends with the names of the owners and groups its entries use.
fn read_batch(
    reader: &mut BatchReader<'_>,
    names: &mut NameCache,
    mut plan: BatchPlan,
    xattrs: &XattrSource<'_>,
    failed_large: &FailedLarge,
) -> Batch {
    let mut batch = Batch::with_data(plan.seq, Vec::new());
    for item in plan.items.iter_mut() {
        if let PlanItem::Chunk { entry, .. } = item {
            if let Some(text) = failed_large.error_of(&entry.path) {
                let path = entry.path.clone();
                *item = PlanItem::Failed { path, text };
            }
        }
    }
    // `-X`/`-A`: each item's attributes, read first: an item whose attributes cannot be
    // read (or are too many) fails whole, and its data is not read.
    let mut attrs_of: Vec<Option<sprat_store::xattr::Xattrs>> = Vec::new();
    if xattrs.scope != 0 {
        for item in plan.items.iter_mut() {
            let (path, special) = match item {
                PlanItem::File(e)
                | PlanItem::EarlyFile(e, _)
                | PlanItem::Dir(e)
                | PlanItem::Attrs(e) => (&e.path, false),
                PlanItem::Special(e) => (&e.path, true),
                PlanItem::Chunk { entry, .. } => (&entry.path, false),
                _ => {
                    attrs_of.push(None);
                    continue;
                }
            };
            match xattrs.read(path, special) {
                Ok(list) => attrs_of.push(Some(list)),
                Err(text) => {
                    let path = path.clone();
                    *item = PlanItem::Failed { path, text };
                    attrs_of.push(None);
                }
            }
        }
    }
    let mut attrs_of = attrs_of.into_iter();
    let items: Vec<ReadItem<'_>> = plan
        .items
        .iter()
        .filter_map(|item| match item {
            PlanItem::File(e) | PlanItem::EarlyFile(e, _) => Some(ReadItem {
                path: &e.path,
                offset: 0,
                len: e.size,
                whole: true,
                scanned: scanned(e),
            }),
            PlanItem::Chunk {
                entry, offset, len, ..
            } => Some(ReadItem {
                path: &entry.path,
                offset: *offset,
                len: *len,
                whole: false,
                scanned: scanned(entry),
            }),
            _ => None,
        })
        .collect();
    // Read over a spare buffer's stale bytes rather than into a zeroed one: zeroing every
    // batch's data first was 3% of a pull's CPU (both sides) in a profile of 2 GiB of mixed
    // sizes. The batch's data is then the data read, as if pushed one file after another.
    let mut data = crate::spare::buffer(plan.data_bytes as usize);
    let mut results = reader.read_over(&items, &mut data).into_iter();
    batch.data = data;
    drop(items);
    let mut next = |path: &[u8]| {
        let read = results
            .next()
            .unwrap_or_else(|| Err(StoreError::other("read", path, "not read")));
        // A single file's transfer path is empty: its error names the file, not '.'.
        read.map_err(|mut e| {
            if let Some(name) = xattrs.file_name.filter(|_| path.is_empty()) {
                e.path = sprat_store::display_path(name);
            }
            e
        })
    };
    let mut uids = Vec::new();
    let mut gids = Vec::new();
    for item in plan.items {
        if let Some(Some(list)) = attrs_of.next() {
            // Checked when read: within the cap, names in the scope.
            batch.push_xattrs(item.path(), xattrs.scope, &list);
        }
        let attrs = match &item {
            PlanItem::File(e)
            | PlanItem::EarlyFile(e, _)
            | PlanItem::Dir(e)
            | PlanItem::Symlink(e)
            | PlanItem::Special(e)
            | PlanItem::Attrs(e) => Some(&e.attrs),
            PlanItem::Chunk { entry, .. } => Some(&entry.attrs),
            PlanItem::Failed { .. } | PlanItem::HardLink { .. } => None,
        };
        if let Some(a) = attrs {
            if !uids.contains(&a.uid) {
                uids.push(a.uid);
            }
            if !gids.contains(&a.gid) {
                gids.push(a.gid);
            }
        }
        match item {
            PlanItem::File(e) => match next(&e.path) {
                Ok((len, hash)) => batch.push_file(&e.path, &meta(&e.attrs), len, hash),
                Err(err) => batch.push_failed(&e.path, &err.to_string()),
            },
            PlanItem::EarlyFile(e, rule) => match next(&e.path) {
                Ok((len, hash)) => {
                    batch.push_file_unless(&e.path, &meta(&e.attrs), len, hash, Some(rule))
                }
                Err(err) => batch.push_failed(&e.path, &err.to_string()),
            },
            PlanItem::Chunk {
                entry,
                offset,
                len,
                whole,
                unless,
            } => match next(&entry.path) {
                Ok((_, hash)) => {
                    let of = ChunkOf {
                        file_size: entry.size,
                        version: entry.version,
                        whole,
                        unless,
                    };
                    batch.push_chunk(&entry.path, &meta(&entry.attrs), of, offset, len, hash)
                }
                Err(err) => {
                    let text = err.to_string();
                    failed_large.note(&entry.path, &text);
                    batch.push_failed(&entry.path, &text)
                }
            },
            PlanItem::Dir(e) => batch.push_dir(&e.path, &meta(&e.attrs)),
            PlanItem::Symlink(e) => {
                let target = e.link_target.as_deref().unwrap_or_default();
                batch.push_symlink(&e.path, &meta(&e.attrs), target)
            }
            PlanItem::Special(e) => match e.special {
                Some(special) => {
                    let (kind, number) = crate::pipeline::special::to_wire(special);
                    batch.push_special(&e.path, &meta(&e.attrs), kind, number)
                }
                None => batch.push_failed(&e.path, "not a special file"),
            },
            PlanItem::Failed { path, text } => batch.push_failed(&path, &text),
            PlanItem::Attrs(e) => batch.push_attrs(&e.path, &meta(&e.attrs), e.size),
            PlanItem::HardLink { path, target } => batch.push_hard_link(&path, &target),
        }
    }
    for uid in uids {
        if let Some(name) = names.user(uid) {
            batch.push_user_name(uid, name);
        }
    }
    for gid in gids {
        if let Some(name) = names.group(gid) {
            batch.push_group_name(gid, name);
        }
    }
    batch
}

/// Starts a source of synthetic files of `sizes` (incompressible bytes made up in memory,
/// named `f0`, `f1`, ...), packed into batches as real files would be, by `read_threads`
/// threads: for measuring the network and protocol without storage. The read stage's busy
/// time is the time spent making the batches.
pub fn synthetic(
    sizes: Vec<u64>,
    options: &TransferOptions,
) -> Result<SourceHandle, TransferError> {
    use rand::{RngCore, SeedableRng};
    let options = options.clone();
    let (batch_tx, batches) = bounded::<Batch>(options.ready_batches());
    let totals = SentTotals::default();
    let counted = totals.clone();
    let join = std::thread::Builder::new()
        .name("sprat-synthetic".into())
        .spawn(move || {
            // One pool of random bytes; files take windows of it.
            let mut pool = vec![0u8; 8 << 20];
            rand::rngs::SmallRng::seed_from_u64(1).fill_bytes(&mut pool);
            let threads = options.read_threads.max(1);
            let per_thread = sizes.len().div_ceil(threads).max(1);
            let next_seq = AtomicU64::new(1);
            let busy_ns = AtomicU64::new(0);
            std::thread::scope(|s| {
                for (k, part) in sizes.chunks(per_thread).enumerate() {
                    let (pool, next_seq, busy_ns, options) = (&pool, &next_seq, &busy_ns, &options);
                    let batch_tx = batch_tx.clone();
                    let counted = &counted;
                    s.spawn(move || {
                        let started = Instant::now();
                        let mut maker = SyntheticBatches {
                            counted,
                            pool,
                            options,
                            next_seq,
                            batch: Batch::new(next_seq.fetch_add(1, Ordering::Relaxed), 0),
                            entries: 0,
                            hashes: std::collections::HashMap::new(),
                        };
                        let first = k * per_thread;
                        for (j, &size) in part.iter().enumerate() {
                            if !maker.add(first + j, size, &batch_tx) {
                                break;
                            }
                        }
                        if maker.entries > 0 {
                            let _ = batch_tx.send(maker.take());
                        }
                        busy_ns.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    });
                }
            });
            Duration::from_nanos(busy_ns.load(Ordering::Relaxed) / threads as u64)
        })
        .map_err(|e| TransferError::Local(format!("cannot start the synthetic source: {e}")))?;
    Ok(SourceHandle {
        batches,
        root_is_dir: true,
        totals,
        deferred: unbounded().1,
        index_failure: IndexFailure::default(),
        join,
    })
}

/// One thread's batches of synthetic files.
struct SyntheticBatches<'a> {
    counted: &'a SentTotals,
    pool: &'a [u8],
    options: &'a TransferOptions,
    next_seq: &'a AtomicU64,
    batch: Batch,
    entries: usize,
    /// Checksums by (pool offset, length): 64 windows of the pool per size.
    hashes: std::collections::HashMap<(usize, u64), u128>,
}

impl SyntheticBatches<'_> {
    /// The batch made so far (counted as queued), replaced by a new one.
    fn take(&mut self) -> Batch {
        self.entries = 0;
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let batch = std::mem::replace(
            &mut self.batch,
            Batch::with_data(seq, crate::spare::empty(self.options.batch_size as usize)),
        );
        self.counted.count(&batch);
        batch
    }

    /// Adds file number `i` of `size` bytes (as chunks when large); false when nobody
    /// takes batches any more.
    fn add(&mut self, i: usize, size: u64, out: &crossbeam_channel::Sender<Batch>) -> bool {
        let meta = FileMeta {
            mode: 0o644,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 0,
            uid: 0,
            gid: 0,
        };
        let path = format!("f{i}").into_bytes();
        let whole = size <= self.options.small_file_threshold;
        // A synthetic file has no version: it is never resumed.
        let of = ChunkOf {
            file_size: size,
            version: 0,
            whole: true,
            unless: None,
        };
        let mut offset = 0;
        loop {
            let len = if whole {
                size
            } else {
                (size - offset).min(self.options.chunk_size)
            };
            let full = self.batch.data.len() as u64 + len > self.options.batch_size
                || self.entries >= self.options.batch_files;
            if self.entries > 0 && full && out.send(self.take()).is_err() {
                return false;
            }
            self.entries += 1;
            let start = self.batch.data.len();
            let first_at = ((i % 64) * 4099 + offset as usize) % self.pool.len();
            let (mut at, mut left) = (first_at, len as usize);
            while left > 0 {
                let n = left.min(self.pool.len() - at);
                self.batch.data.extend_from_slice(&self.pool[at..at + n]);
                left -= n;
                at = 0;
            }
            let data = &self.batch.data[start..];
            let hash = *self
                .hashes
                .entry((first_at, len))
                .or_insert_with(|| sprat_store::checksum(data));
            if whole {
                self.batch.push_file(&path, &meta, len, hash);
                return true;
            }
            self.batch.push_chunk(&path, &meta, of, offset, len, hash);
            offset += len;
            if offset >= size {
                return true;
            }
        }
    }
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
