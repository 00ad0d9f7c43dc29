//! A push spread over several servers that export the same shared file system
//! (`sprat cp SRC sprat://a:7400,b:7400,c:7400/PATH`): one session per server, all fed by one
//! source. A dispatcher hands each batch to the server that will be done soonest with what it
//! holds (see [`load`]), so that each server takes a share in proportion to how fast it
//! writes; the chunks of a large file all go to the server that took its first chunk (a
//! partial file is one writer's).
//!
//! Directories and hard links are held back by the source (see
//! `Planner::deferring_namespace`) and go to the first server once every other server has
//! written its share and answered its `Commit`: the first server then makes the links and
//! sets the directories' modes and mtimes after every file is in place, as a single receiver
//! does when it finishes. The directories files land in are made by whichever server writes
//! there first. The destination's listing (what is up to date) comes from the first server.
//!
//! The reverse, a pull from several servers ([`pull`]): the client lists the source once
//! (first server) and its own destination, cuts what it lacks into pieces (path lists of
//! about equal bytes), and each server pulls piece after piece from one shared queue, so that
//! a faster server takes more of them; a last ordinary pull from the first server, with
//! everything already in place, sets the directories' modes and mtimes and fetches anything
//! that changed meanwhile.

mod load;

use super::destination::open_source;
use super::endpoint::Endpoint;
use super::push::{
    push_operation, run_session, start_source, PushInput, SessionRun, SessionTarget,
};
use super::remote;
use crate::config::TransferOptions;
use crate::error::TransferError;
use crate::measurement::acked::SessionAcks;
use crate::net::Credentials;
use crate::pipeline::skip::SkipRule;
use crate::pipeline::source::SentTotals;
use crate::report::{Counts, Report, ServerShare, Stages};
use crate::sync::{lock, Abort};
use crossbeam_channel::{
    bounded, Receiver, RecvTimeoutError, Select, SendTimeoutError, Sender, TrySendError,
};
use sprat_proto::batch::EntryKind;
use sprat_proto::namespace::{NsKind, Request};
use sprat_proto::Batch;
use sprat_store::Source;
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Batches waiting for each server's streams: few, so that a batch goes to a server only
/// when one of its streams is about to send.
const QUEUE_DEPTH: usize = 2;

/// How often a blocked dispatcher looks whether the transfer failed.
const POLL: Duration = Duration::from_millis(100);

/// Pushes the tree or file at `src` to `path` through every server of `servers` (the first
/// one is where the destination is listed and where directories and links go).
pub(crate) fn push(
    src: &Path,
    servers: &[&str],
    path: &[u8],
    key: &Credentials,
    options: &TransferOptions,
    src_ep: &Endpoint,
    dst_ep: &Endpoint,
) -> Result<Report, TransferError> {
    let started = Instant::now();
    let options = &options.for_one_transfer();
    let source = open_source(src)?;
    let within = match source {
        Source::Dir(_) => path,
        Source::File { .. } => sprat_store::split_parent(path).0,
    };
    refuse_separate_trees(servers, within, key)?;
    let input = PushInput::Source(source);
    let op = push_operation(&input, options);
    let (handle, skipped) = start_source(
        input,
        (servers[0], path),
        key,
        options,
        true,
        &std::sync::Arc::default(),
    )?;
    let n = servers.len();
    let (queues, shares): (Vec<Sender<Batch>>, Vec<Receiver<Batch>>) =
        (0..n).map(|_| bounded(QUEUE_DEPTH)).unzip();
    let sent: Vec<SentTotals> = (0..n).map(|_| SentTotals::default()).collect();
    let acked: Vec<SessionAcks> = (0..n).map(|_| SessionAcks::default()).collect();
    let aborts: Vec<Abort> = (0..n).map(|_| Abort::default()).collect();
    let moved = || aborts.iter().map(Abort::moved).sum::<u64>();
    let failure = Failure::default();
    // Disconnected once every server but the first has finished its share.
    let (others_done_tx, others_done) = bounded::<()>(0);
    let runs: Vec<Option<SessionRun>> = std::thread::scope(|s| {
        let dispatcher = Dispatcher {
            queues,
            load: load::Load::new(&sent, &acked),
            failure: &failure,
            pinned: HashMap::new(),
        };
        let (batches, deferred) = (&handle.batches, &handle.deferred);
        s.spawn(move || dispatcher.run(batches, deferred, &others_done));
        let sessions: Vec<_> = (0..n)
            .map(|i| {
                let done = (i > 0).then(|| others_done_tx.clone());
                let (share, abort, moved) = (&shares[i], &aborts[i], &moved);
                let totals = (&sent[i], &acked[i]);
                let failure = &failure;
                let aborts = &aborts;
                s.spawn(move || {
                    let target = SessionTarget {
                        addr: servers[i],
                        key,
                        op,
                        path,
                        useful_streams: None,
                    };
                    let run = run_session(&target, options, abort, share, totals, Some(moved));
                    // A failure is recorded before the dispatcher can see this server done.
                    let run = run.map_err(|e| failure.set(servers[i], e, aborts)).ok();
                    drop(done);
                    run
                })
            })
            .collect();
        drop(others_done_tx);
        sessions
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect()
    });
    let index_failure = handle.index_failure();
    let read_busy = handle.finish();
    index_failure.check()?;
    let failed = lock(&failure.first).take();
    if let Some(e) = failed {
        return Err(e);
    }
    let runs = runs
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| TransferError::Local("a session's thread failed".into()))?;
    let mut counts = Counts::default();
    let mut shares = Vec::new();
    let seconds = started.elapsed().as_secs_f64();
    let (mut network_ns, mut write_ns, mut streams) = (0u64, 0u64, 0usize);
    for (run, server) in runs.iter().zip(servers) {
        counts.absorb(&run.counts);
        network_ns = network_ns.max(run.remote.network_busy_ns);
        write_ns = write_ns.max(run.remote.write_busy_ns);
        streams += run.streams_max;
        let (n, rtt_ms) = (run.streams_max, run.path.rtt_ms);
        shares.push(ServerShare::new(server, &run.counts, n, rtt_ms, seconds));
    }
    let stages = Stages {
        scan_read_s: read_busy.as_secs_f64(),
        network_s: Some(Duration::from_nanos(network_ns).as_secs_f64()),
        write_s: Duration::from_nanos(write_ns).as_secs_f64(),
    };
    let mut path_report = runs[0].path.clone();
    path_report.streams_max = streams;
    let report = spread_report("push", (src_ep, dst_ep), &counts, started, streams, stages);
    // Partial copies an interrupted copy left of files this one sent whole or found up to
    // date (listed through the first server, as the index was).
    if counts.failed == 0 {
        let superseded = skipped.take_superseded();
        super::remote::remove_superseded_partials(
            servers[0],
            key,
            path,
            superseded.iter().map(|(rel, _)| rel),
        );
    }
    Ok(Report {
        servers: shares,
        ..report
            .with_durable(options.durable)
            .with_skipped(&skipped)
            .with_path(path_report)
    })
}

/// Refuses servers that do not show one tree at `dir` (made if missing): a directory made there
/// through the first server is looked for through every other one, then removed. Servers
/// that write to separate file systems (one that lost its shared mount, node-local scratch)
/// would each hold part of the copy, and the report would count it whole.
fn refuse_separate_trees(
    servers: &[&str],
    dir: &[u8],
    key: &Credentials,
) -> Result<(), TransferError> {
    let first = servers[0];
    let existed = remote::stat(first, key, dir).is_ok();
    remote::simple(
        first,
        key,
        Request::Mkdir {
            path: dir.to_vec(),
            parents: true,
        },
    )?;
    // The name of a writer's probe, which a later copy removes if this one is killed here.
    let probe_name = format!(".sprat-probe-{}", super::destination::temp_tag());
    let probe = sprat_store::join(dir, probe_name.as_bytes());
    remote::simple(
        first,
        key,
        Request::Mkdir {
            path: probe.clone(),
            parents: false,
        },
    )?;
    let seen: Vec<Result<bool, TransferError>> = std::thread::scope(|s| {
        let looks: Vec<_> = servers[1..]
            .iter()
            .map(|addr| {
                let probe = &probe;
                s.spawn(move || match remote::stat(addr, key, probe) {
                    Ok(e) => Ok(e.kind == NsKind::Dir),
                    Err(TransferError::Remote {
                        code: sprat_proto::ErrorCode::NotFound,
                        ..
                    }) => Ok(false),
                    Err(e) => Err(e),
                })
            })
            .collect();
        looks
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(TransferError::Local("a look failed".into())))
            })
            .collect()
    });
    let removed = remote::simple(
        first,
        key,
        Request::Remove {
            path: probe,
            recursive: false,
        },
    );
    for (addr, seen) in servers[1..].iter().zip(seen) {
        if !seen? {
            if !existed {
                // The directory this check made (not its parents, which a copy would make
                // too), as a refused copy leaves nothing.
                let _ = remote::simple(
                    first,
                    key,
                    Request::Remove {
                        path: dir.to_vec(),
                        recursive: false,
                    },
                );
            }
            return Err(TransferError::Usage(format!(
                "servers {first} and {addr} do not show one tree at '{}': a directory made \
                 there through {first} is not there through {addr}; a copy spread over several \
                 servers needs them all to export one shared file system (is it mounted on \
                 {addr}?)",
                crate::text::printable(&sprat_store::display_path(dir))
            )));
        }
    }
    removed
}

/// Pulls `path` from every server of `servers` (which export the same file system) into
/// `dst` (see the module comment). `-c` and `-H` pull from the first server alone: pieces
/// would compare whole files by their sizes and break link groups.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pull(
    servers: &[&str],
    path: &[u8],
    dst: &Path,
    key: &Credentials,
    options: &TransferOptions,
    src_ep: &Endpoint,
    dst_ep: &Endpoint,
) -> Result<Report, TransferError> {
    let started = Instant::now();
    let alone = match options.skip {
        _ if options.hard_links => Some("-H"),
        SkipRule::Checksum => Some("-c"),
        SkipRule::SizeOnly => Some("--size-only"),
        SkipRule::Update => Some("--update"),
        // What another server wrote in this run would be "existing" for the last pull from
        // the first server, which could then not fetch it again where it was stale.
        SkipRule::IgnoreExisting => Some("--ignore-existing"),
        _ => None,
    };
    if let Some(option) = alone {
        eprintln!(
            "sprat: {option} pulls from the first server alone ({})",
            servers[0]
        );
        return super::pull::pull(servers[0], path, dst, key, options, src_ep, dst_ep);
    }
    let Some(plan) = plan_pieces(servers[0], path, dst, key, options, servers.len())? else {
        // A single file: nothing to spread.
        return super::pull::pull(servers[0], path, dst, key, options, src_ep, dst_ep);
    };
    tracing::info!(
        pieces = plan.pieces.len(),
        dirs = plan.dirs,
        after_s = started.elapsed().as_secs_f64(),
        "pull planned"
    );
    options.progress.set_totals(plan.files, plan.bytes);
    // The destination as planned: where its partial copies are removed once every piece
    // is in (not looked up by name again).
    let planned_dst = sprat_store::Root::open(dst).ok();
    let queue = Mutex::new(plan.pieces);
    let stop = crate::sync::Cancel::default();
    let failure: Mutex<Option<TransferError>> = Mutex::new(None);
    let shares: Vec<Mutex<PulledShare>> = servers
        .iter()
        .map(|_| Mutex::new(Default::default()))
        .collect();
    let workers_done = AtomicBool::new(false);
    std::thread::scope(|s| {
        // The pieces run under `stop`; a stop asked from outside reaches them through it.
        let (stop, workers_done) = (&stop, &workers_done);
        s.spawn(move || {
            while !workers_done.load(Ordering::SeqCst) {
                if options.cancel.is_cancelled() {
                    return stop.cancel();
                }
                std::thread::sleep(POLL);
            }
        });
        // Two pieces at a time per server: one's set-up and end overlap the other's data,
        // and the server's link does not idle between pieces.
        let workers: Vec<_> = (0..servers.len() * PIECES_AT_ONCE)
            .map(|w| {
                let i = w % servers.len();
                let server = servers[i];
                let (queue, failure, share) = (&queue, &failure, &shares[i]);
                s.spawn(move || loop {
                    let next = lock(queue).pop_front();
                    let Some(piece) = next else { return };
                    if stop.is_cancelled() {
                        return;
                    }
                    let mut piece_options = options.clone();
                    piece_options.selection = crate::config::Selection {
                        filter: options.selection.filter.clone(),
                        files_from: Some(piece.into()),
                        one_file_system: false,
                    };
                    piece_options.skip = SkipRule::Never;
                    piece_options.delete = false;
                    piece_options.cancel = stop.clone();
                    match super::pull::pull(server, path, dst, key, &piece_options, src_ep, dst_ep)
                    {
                        Ok(r) => lock(share).add(&without_missing(r)),
                        Err(e) => {
                            lock(failure).get_or_insert(e);
                            stop.cancel();
                            return;
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            let _ = worker.join();
        }
        workers_done.store(true, Ordering::SeqCst);
    });
    let failed = lock(&failure).take();
    if let Some(e) = failed {
        return Err(e);
    }
    tracing::info!(after_s = started.elapsed().as_secs_f64(), "pieces pulled");
    // Every file is in place: an ordinary pull from the first server then finds what another
    // server had in another version (a stale copy where the shared mount was lost), or what
    // changed at the source since its piece was pulled, by the quick check, and sends it
    // again; it sets the directories' modes and mtimes after the last write into them.
    let mut last_options = options.clone();
    last_options.progress = Default::default();
    last_options.file_log = None;
    let last = super::pull::pull(servers[0], path, dst, key, &last_options, src_ep, dst_ep)?;
    let mut counts = Counts::default();
    let seconds = started.elapsed().as_secs_f64();
    let mut lines = Vec::new();
    let mut streams = 0;
    let mut stages = Stages::default();
    for (i, (server, share)) in servers.iter().zip(&shares).enumerate() {
        let mut share = lock(share);
        if i == 0 {
            share.add(&last);
        }
        // Each server's pieces ran one after the other; the servers at the same time.
        stages.scan_read_s = stages.scan_read_s.max(share.stages.scan_read_s);
        stages.write_s = stages.write_s.max(share.stages.write_s);
        let net = |s: &Stages| s.network_s.unwrap_or(0.0);
        stages.network_s = Some(net(&stages).max(net(&share.stages)));
        counts.absorb(&share.counts);
        streams += share.streams;
        let (n, rtt_ms) = (share.streams, share.rtt_ms);
        lines.push(ServerShare::new(server, &share.counts, n, rtt_ms, seconds));
    }
    counts.dirs = last.dirs;
    if let (0, Some(root)) = (counts.failed, &planned_dst) {
        let removed = plan
            .superseded
            .iter()
            .filter(|(file, seen)| sprat_store::partial::discard_at(root, file, Some(seen)))
            .map(|(file, _)| file.clone());
        super::destination::told_discarded(dst, removed);
    }
    let report = spread_report("pull", (src_ep, dst_ep), &counts, started, streams, stages);
    Ok(Report {
        path: last.path.clone(),
        servers: lines,
        ..report
            .with_durable(options.durable)
            .with_not_sent(plan.same_files, 0, plan.same_bytes)
    })
}

/// The report of a transfer spread over several servers, from its counts summed over them.
fn spread_report(
    direction: &'static str,
    (src_ep, dst_ep): (&Endpoint, &Endpoint),
    counts: &Counts,
    started: Instant,
    streams: usize,
    stages: Stages,
) -> Report {
    let (src, dst) = (src_ep.to_string(), dst_ep.to_string());
    Report::new(
        direction,
        src,
        dst,
        counts,
        started.elapsed(),
        streams,
        stages,
    )
}

/// What one server's pieces of a pull did, summed.
#[derive(Default)]
struct PulledShare {
    counts: Counts,
    /// Most streams of one of its pieces.
    streams: usize,
    rtt_ms: f64,
    stages: Stages,
}

impl PulledShare {
    /// Adds what the report of one of its pulls counted.
    fn add(&mut self, r: &Report) {
        self.counts.absorb_report(r);
        self.streams = self.streams.max(r.streams);
        if let Some(p) = &r.path {
            self.rtt_ms = p.rtt_ms;
        }
        self.stages.scan_read_s += r.stages.scan_read_s;
        self.stages.write_s += r.stages.write_s;
        let net = r.stages.network_s.unwrap_or(0.0);
        self.stages.network_s = Some(self.stages.network_s.unwrap_or(0.0) + net);
    }
}

/// A piece's report without the failures of paths its server did not have (a server whose
/// view lags the first one's): the last pull, from the first server, fetches them, or finds
/// them gone from the source. Counted failures beyond those listed are taken for such too
/// when every listed one is.
fn without_missing(mut r: Report) -> Report {
    let missing =
        |f: &crate::report::Failure| f.error.ends_with(sprat_store::scan::LISTED_NOT_FOUND);
    let listed = r.failures.len() as u64;
    let listed_missing = r.failures.iter().filter(|f| missing(f)).count() as u64;
    let gone = if listed > 0 && listed_missing == listed {
        r.failed
    } else {
        listed_missing
    };
    r.failures.retain(|f| !missing(f));
    r.failed = r.failed.saturating_sub(gone);
    r
}

/// Most paths in one piece, and most bytes of their names (a piece travels as a
/// `--files-from` list, whose wire size is capped).
const PIECE_FILES: usize = 8192;
const PIECE_NAME_BYTES: usize = 512 << 10;
/// Pieces a server works on at the same time.
const PIECES_AT_ONCE: usize = 2;
/// Fewest bytes in a piece (unless less is left): its session's set-up is a few round trips.
const MIN_PIECE_BYTES: u64 = 4 << 20;

/// What a pull from several servers fetches.
struct PullPlan {
    /// Path lists of about equal bytes, to be pulled one by one.
    pieces: VecDeque<Vec<Vec<u8>>>,
    /// Directories of the source (made as their files arrive; the last pull sets them).
    dirs: u64,
    /// Regular files of the source and their bytes.
    files: u64,
    bytes: u64,
    /// Of those, what the destination has already.
    same_files: u64,
    same_bytes: u64,
    /// Paths of the source whose partial copies the destination holds (see
    /// `SkipCounts::supersedes`).
    superseded: Vec<crate::pipeline::skip::Superseded>,
}

/// What a pull from `servers` servers must fetch, cut into pieces: the source's files and
/// symlinks (listed by the server at `addr`) that `dst` lacks or has with another size,
/// mtime or mode (all of them with `--ignore-times`; only missing ones with
/// `--ignore-existing`). `None` when the source is a single file.
fn plan_pieces(
    addr: &str,
    path: &[u8],
    dst: &Path,
    key: &Credentials,
    options: &TransferOptions,
    servers: usize,
) -> Result<Option<PullPlan>, TransferError> {
    let mut listed = Vec::new();
    super::remote::list_summed(addr, key, path, true, &options.selection, None, |e| {
        listed.push(e)
    })?;
    if listed
        .iter()
        .any(|e| e.path.is_empty() && e.kind != NsKind::Dir)
    {
        return Ok(None);
    }
    let mut have: HashMap<Vec<u8>, (u64, i64, u32, u32)> = HashMap::new();
    // The destination's symlinks: target and mtime.
    let mut links: HashMap<Vec<u8>, (Vec<u8>, i64, u32)> = HashMap::new();
    let mut partials = HashMap::new();
    if dst.is_dir() {
        let mut local = options.clone();
        local.skip = SkipRule::QuickCheck;
        partials = super::destination::local_entries(dst, &local, |piece| {
            if let super::destination::IndexPiece::Entries(entries) = piece {
                for e in entries {
                    match e.kind {
                        NsKind::File => {
                            have.insert(e.path, (e.size, e.mtime_sec, e.mtime_nsec, e.mode));
                        }
                        NsKind::Symlink => {
                            links.insert(e.path, (e.target, e.mtime_sec, e.mtime_nsec));
                        }
                        _ => {}
                    }
                }
            }
            true
        })?
        .into_iter()
        .collect();
    }
    let (mut files, mut bytes, mut same_files, mut same_bytes) = (0, 0, 0, 0);
    let mut needed: Vec<(Vec<u8>, u64)> = Vec::new();
    let mut dirs = 0;
    // Partial copies an interrupted copy left of what the source has: of no more use once
    // this pull put it in place or found it there (every piece pulls its files whole).
    let mut superseded = Vec::new();
    for e in listed {
        if let Some(id) = partials.get(&e.path) {
            superseded.push((e.path.clone(), *id));
        }
        match e.kind {
            NsKind::File => {
                files += 1;
                bytes += e.size;
                let up_to_date = match (options.skip, have.get(&e.path)) {
                    (SkipRule::Never, _) | (_, None) => false,
                    (SkipRule::IgnoreExisting, Some(_)) => true,
                    // A mode to fix travels with its file (the pieces send every file).
                    (_, Some(&(size, sec, nsec, mode))) => {
                        size == e.size
                            && (sec, nsec) == (e.mtime_sec, e.mtime_nsec)
                            && mode_matches(mode, e.mode, options.keep_setid)
                    }
                };
                if up_to_date {
                    same_files += 1;
                    same_bytes += e.size;
                } else {
                    needed.push((e.path, e.size));
                }
            }
            // A symlink the destination has with the same target and mtime is left, as a
            // single server's pull leaves it (see `DestIndex::verdict`).
            NsKind::Symlink
                if options.skip != SkipRule::Never
                    && links.get(&e.path).is_some_and(|(target, sec, nsec)| {
                        (target, *sec, *nsec) == (&e.target, e.mtime_sec, e.mtime_nsec)
                    }) => {}
            NsKind::Symlink | NsKind::Special => needed.push((e.path, 0)),
            NsKind::Dir if !e.path.is_empty() => dirs += 1,
            _ => {}
        }
    }
    options.progress.add_skipped(same_files, same_bytes);
    // Guided: each piece a quarter of an even share of what is left, so that pieces shrink
    // towards the end and the servers finish together; none so small that its session's
    // set-up dominates.
    let mut left: u64 = needed.iter().map(|n| n.1).sum();
    let share =
        |left: u64| (left / (servers * PIECES_AT_ONCE * 4) as u64).clamp(MIN_PIECE_BYTES, 1 << 30);
    let mut piece_bytes = share(left);
    let mut pieces = VecDeque::new();
    let (mut piece, mut piece_size, mut names) = (Vec::new(), 0u64, 0usize);
    for (p, size) in needed {
        let full = !piece.is_empty()
            && (piece_size + size > piece_bytes
                || piece.len() >= PIECE_FILES
                || names + p.len() + 1 > PIECE_NAME_BYTES);
        if full {
            pieces.push_back(std::mem::take(&mut piece));
            left -= piece_size;
            piece_bytes = share(left);
            (piece_size, names) = (0, 0);
        }
        piece_size += size;
        names += p.len() + 1;
        piece.push(p);
    }
    if !piece.is_empty() {
        pieces.push_back(piece);
    }
    Ok(Some(PullPlan {
        pieces,
        dirs,
        files,
        bytes,
        same_files,
        same_bytes,
        superseded,
    }))
}

/// Whether a local file's `have` mode is what a pull of a source file of mode `source`
/// leaves: the same permission bits, setuid and setgid cleared unless kept.
fn mode_matches(have: u32, source: u32, keep_setid: bool) -> bool {
    let cleared = if keep_setid { 0 } else { 0o6000 };
    have & 0o7777 == source & 0o7777 & !cleared
}

/// The first failure of any server's session, which stops the others.
#[derive(Default)]
struct Failure {
    first: Mutex<Option<TransferError>>,
}

impl Failure {
    /// Records `e` (from the session with `server`) if it is the first, and fails every
    /// session: their connections shut down and their streams end.
    fn set(&self, server: &str, e: TransferError, aborts: &[Abort]) {
        {
            let mut first = lock(&self.first);
            if first.is_some() {
                return;
            }
            *first = Some(e);
        }
        for abort in aborts {
            abort.fail(TransferError::Local(format!(
                "stopped: the transfer failed with server {server}"
            )));
        }
    }

    fn is_set(&self) -> bool {
        lock(&self.first).is_some()
    }
}

/// Hands the source's batches to the servers' queues.
struct Dispatcher<'a> {
    queues: Vec<Sender<Batch>>,
    load: load::Load<'a>,
    failure: &'a Failure,
    /// Large files whose chunks went to a server, by path: the rest follow.
    pinned: HashMap<Vec<u8>, usize>,
}

impl Dispatcher<'_> {
    /// Hands out every batch, then (once every server but the first has finished, which
    /// `others_done` says by disconnecting) the held-back directories and links to the
    /// first. Returns early if the transfer fails.
    fn run(
        mut self,
        batches: &Receiver<Batch>,
        deferred: &Receiver<Batch>,
        others_done: &Receiver<()>,
    ) {
        loop {
            match batches.recv_timeout(POLL) {
                Ok(batch) => {
                    if !self.hand_out(batch) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) if self.failure.is_set() => return,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        tracing::debug!(held_work = ?self.load.held(), "every batch handed out");
        // The other servers' streams end once their queues are drained.
        self.queues.truncate(1);
        loop {
            match others_done.recv_timeout(POLL) {
                Err(RecvTimeoutError::Disconnected) => break,
                _ if self.failure.is_set() => return,
                _ => {}
            }
        }
        if self.failure.is_set() {
            return;
        }
        for batch in deferred.iter() {
            if !self.send_to(0, batch) {
                return;
            }
        }
    }

    /// Sends `batch` to the server its large file is pinned to, or else to the server that
    /// will be done soonest with what it holds, among those that may hold more (see
    /// [`load`]) and whose queue has room. False if the transfer failed meanwhile.
    fn hand_out(&mut self, mut batch: Batch) -> bool {
        let chunked = chunk_paths(&batch);
        if let Some(&to) = chunked.iter().find_map(|p| self.pinned.get(p)) {
            // The batch's other large files go with it: their next chunks follow them there
            // (before, they went wherever there was room, and two servers each wrote a part).
            for path in chunked {
                self.pinned.entry(path).or_insert(to);
            }
            return self.send_to(to, batch);
        }
        loop {
            let candidates = self.load.candidates(&batch.totals);
            for &to in &candidates {
                let totals = batch.totals;
                match self.queues[to].try_send(batch) {
                    Ok(()) => {
                        self.load.given(to, &totals);
                        for path in chunked {
                            self.pinned.insert(path, to);
                        }
                        return true;
                    }
                    Err(TrySendError::Full(back)) => batch = back,
                    Err(TrySendError::Disconnected(_)) => return false,
                }
            }
            if self.failure.is_set() {
                return false;
            }
            // Wait until a candidate's queue has room, or (no candidate) for acknowledgements.
            if candidates.is_empty() {
                std::thread::sleep(load::RECHECK);
            } else {
                let mut select = Select::new();
                for &to in &candidates {
                    select.send(&self.queues[to]);
                }
                let _ = select.ready_timeout(load::RECHECK);
            }
        }
    }

    /// Sends `batch` to server `to`, waiting for room. False if the transfer failed.
    fn send_to(&self, to: usize, mut batch: Batch) -> bool {
        self.load.given(to, &batch.totals);
        loop {
            match self.queues[to].send_timeout(batch, POLL) {
                Ok(()) => return true,
                Err(SendTimeoutError::Timeout(b)) if !self.failure.is_set() => batch = b,
                Err(_) => return false,
            }
        }
    }
}

/// The paths of the large files whose chunks `batch` carries.
fn chunk_paths(batch: &Batch) -> Vec<Vec<u8>> {
    if batch.totals.chunks == 0 {
        return Vec::new();
    }
    let Ok(view) = batch.view() else {
        return Vec::new();
    };
    let mut paths: Vec<Vec<u8>> = Vec::new();
    for e in &view.entries {
        if matches!(e.kind, EntryKind::Chunk { .. }) && !paths.iter().any(|p| p == e.path) {
            paths.push(e.path.to_vec());
        }
    }
    paths
}
