//! A push spread over several servers that export the same shared file system
//! (`sprat cp SRC sprat://a:7400,b:7400,c:7400/PATH`): one session per server, all fed by one
//! source. A dispatcher hands each batch to whichever server's queue has room first, so that
//! each server takes a share in proportion to how fast it drains; the chunks of a large file
//! all go to the server that took its first chunk (a partial file is one writer's).
//!
//! Directories and hard links are held back by the source (see
//! `Planner::deferring_namespace`) and go to the first server once every other server has
//! written its share and answered its `Commit`: the first server then makes the links and
//! sets the directories' modes and mtimes after every file is in place, as a single receiver
//! does when it finishes. The directories files land in are made by whichever server writes
//! there first. The destination's listing (what is up to date) comes from the first server.

use super::destination::open_source;
use super::endpoint::Endpoint;
use super::push::{
    push_operation, run_session, start_source, PushInput, SessionRun, SessionTarget,
};
use crate::config::TransferOptions;
use crate::error::TransferError;
use crate::net::Credentials;
use crate::pipeline::source::SentTotals;
use crate::report::{Counts, Report, ServerShare, Stages, MAX_LISTED_FAILURES};
use crate::sync::{lock, Abort};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Select, SendTimeoutError, Sender};
use sprat_proto::batch::EntryKind;
use sprat_proto::Batch;
use std::collections::HashMap;
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
    let input = PushInput::Source(open_source(src)?);
    let op = push_operation(&input, options);
    let (handle, skipped) = start_source(input, (servers[0], path), key, options, true)?;
    let n = servers.len();
    let (queues, shares): (Vec<Sender<Batch>>, Vec<Receiver<Batch>>) =
        (0..n).map(|_| bounded(QUEUE_DEPTH)).unzip();
    let sent: Vec<SentTotals> = (0..n).map(|_| SentTotals::default()).collect();
    let aborts: Vec<Abort> = (0..n).map(|_| Abort::default()).collect();
    let moved = || aborts.iter().map(Abort::moved).sum::<u64>();
    let failure = Failure::default();
    // Disconnected once every server but the first has finished its share.
    let (others_done_tx, others_done) = bounded::<()>(0);
    let runs: Vec<Option<SessionRun>> = std::thread::scope(|s| {
        let dispatcher = Dispatcher {
            queues,
            sent: &sent,
            failure: &failure,
            pinned: HashMap::new(),
        };
        let (batches, deferred) = (&handle.batches, &handle.deferred);
        s.spawn(move || dispatcher.run(batches, deferred, &others_done));
        let sessions: Vec<_> = (0..n)
            .map(|i| {
                let done = (i > 0).then(|| others_done_tx.clone());
                let (share, sent, abort, moved) = (&shares[i], &sent[i], &aborts[i], &moved);
                let failure = &failure;
                let aborts = &aborts;
                s.spawn(move || {
                    let target = SessionTarget {
                        addr: servers[i],
                        key,
                        op,
                        path,
                    };
                    let run = run_session(&target, options, abort, share, sent, Some(moved));
                    drop(done);
                    run.map_err(|e| failure.set(servers[i], e, aborts)).ok()
                })
            })
            .collect();
        drop(others_done_tx);
        sessions
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect()
    });
    let read_busy = handle.finish();
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
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    let (mut network_ns, mut write_ns, mut streams) = (0u64, 0u64, 0usize);
    for (run, server) in runs.iter().zip(servers) {
        let c = &run.counts;
        counts.files += c.files;
        counts.dirs += c.dirs;
        counts.symlinks += c.symlinks;
        counts.bytes += c.bytes;
        counts.syncs += c.syncs;
        counts.failed += c.failed;
        let room = MAX_LISTED_FAILURES.saturating_sub(counts.failures.len());
        counts
            .failures
            .extend(c.failures.iter().take(room).cloned());
        network_ns = network_ns.max(run.remote.network_busy_ns);
        write_ns = write_ns.max(run.remote.write_busy_ns);
        streams += run.streams_max;
        shares.push(ServerShare {
            server: server.to_string(),
            files: c.files,
            bytes: c.bytes,
            mb_per_s: c.bytes as f64 / seconds / 1e6,
            streams: run.streams_max,
            rtt_ms: run.path.rtt_ms,
        });
    }
    let stages = Stages {
        scan_read_s: read_busy.as_secs_f64(),
        network_s: Some(Duration::from_nanos(network_ns).as_secs_f64()),
        write_s: Duration::from_nanos(write_ns).as_secs_f64(),
    };
    let mut path_report = runs[0].path.clone();
    path_report.streams_max = streams;
    let mut report = Report::new(
        "push",
        src_ep.to_string(),
        dst_ep.to_string(),
        &counts,
        started.elapsed(),
        streams,
        stages,
    )
    .with_durable(options.durable)
    .with_skipped(&skipped)
    .with_path(path_report);
    report.servers = shares;
    Ok(report)
}

/// The first failure of any server's session, which stops the others.
#[derive(Default)]
struct Failure {
    first: Mutex<Option<TransferError>>,
    set: AtomicBool,
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
            self.set.store(true, Ordering::SeqCst);
        }
        for abort in aborts {
            abort.fail(TransferError::Local(format!(
                "stopped: the transfer failed with server {server}"
            )));
        }
    }

    fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }
}

/// Hands the source's batches to the servers' queues.
struct Dispatcher<'a> {
    queues: Vec<Sender<Batch>>,
    sent: &'a [SentTotals],
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

    /// Sends `batch` to the server its large file is pinned to, or to whichever server
    /// takes it first. False if the transfer failed meanwhile.
    fn hand_out(&mut self, batch: Batch) -> bool {
        let chunked = chunk_paths(&batch);
        if let Some(&to) = chunked.iter().find_map(|p| self.pinned.get(p)) {
            return self.send_to(to, batch);
        }
        let mut select = Select::new();
        for q in &self.queues {
            select.send(q);
        }
        loop {
            let Ok(op) = select.select_timeout(POLL) else {
                if self.failure.is_set() {
                    return false;
                }
                continue;
            };
            let to = op.index();
            self.sent[to].count(&batch);
            if op.send(&self.queues[to], batch).is_err() {
                return false;
            }
            for path in chunked {
                self.pinned.insert(path, to);
            }
            return true;
        }
    }

    /// Sends `batch` to server `to`, waiting for room. False if the transfer failed.
    fn send_to(&self, to: usize, mut batch: Batch) -> bool {
        self.sent[to].count(&batch);
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
