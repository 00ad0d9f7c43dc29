//! A push: the local source stages feed the send stage of every stream of a session, and each
//! stream's replies (its announcement, acknowledgements, `EndAck`) are read beside it. Also
//! what a server runs for a third-party copy (it pushes its own tree to another server) and
//! what `sprat bench network` runs (synthetic files, discarded by the server).
//!
//! Per stream, one sender thread runs [`send::send`] with batches from the shared queue (and
//! those of refused streams, sent again), and one receiver thread feeds the stream's state
//! machine what the server says. The machine, shared by the two under a lock, keeps what the
//! stream sent before the server announced it, and hands it back if the server refuses the
//! stream: the transfer goes on with the streams it has.

use super::destination::{open_source, skip_for};
use super::endpoint::Endpoint;
use super::remote;
use crate::config::TransferOptions;
use crate::error::TransferError;
use crate::measurement::acked::SessionAcks;
use crate::measurement::listing::PushListing;
use crate::measurement::pace::Pace;
use crate::net::Credentials;
use crate::net::{Conn, Frame, SessionConn};
use crate::pipeline::send::{self, Next};
use crate::pipeline::sink::BatchOutcome;
use crate::pipeline::source;
use crate::report::{Counts, PathReport, Report, Stages};
use crate::session::client::{self as session, Change, Session, Tail};
use crate::session::opening::FirstRoundTrip;
use crate::session::stall;
use crate::sync::{lock, unpoisoned, Abort, Signal};
use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};
use sprat_proto::session::client::{ClientStream, Event, Sent};
use sprat_proto::{Batch, Operation, RemoteStats, SourceId};
use sprat_store::Source;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) fn push(
    src: &Path,
    addr: &str,
    path: &[u8],
    key: &Credentials,
    options: &TransferOptions,
    src_ep: &Endpoint,
    dst_ep: &Endpoint,
) -> Result<Report, TransferError> {
    let source = open_source(src)?;
    // Sent to `DST/NAME` as a single file (see `or_parent`): a source that became a
    // directory since would be copied there whatever DST is.
    if options.dst_or_parent && !matches!(source, Source::File { .. }) {
        return Err(TransferError::Local(format!(
            "'{}' became a directory as the copy began: run it again",
            src.display()
        )));
    }
    // A file whose data waits for the listing anyway: DST is asked first, as before protocol
    // 22, on a connection the listing then takes (a server of one place serves both in turn).
    if options.dst_or_parent && !goes_before_listing(&source, options) {
        drop(source);
        let parent = sprat_store::split_parent(path).0;
        let inside = remote::stat_keeping(addr, key, parent)
            .is_ok_and(|e| e.kind == sprat_proto::namespace::NsKind::Dir);
        let asked = TransferOptions {
            dst_or_parent: false,
            no_link_at_dst: inside,
            ..options.clone()
        };
        return match inside {
            true => push(src, addr, path, key, &asked, src_ep, dst_ep),
            false => push(
                src,
                addr,
                parent,
                key,
                &asked,
                src_ep,
                &dst_ep.remote_parent(),
            ),
        };
    }
    let labels = (src_ep.to_string(), dst_ep.to_string());
    let Pushed {
        mut report,
        skipped,
        to_parent,
    } = push_counting(PushInput::Source(source), addr, path, key, options, labels)?;
    // A single file its server put at `DST` itself, not in it (see `or_parent`).
    let path = match to_parent {
        true => {
            let parent = sprat_store::split_parent(path).0;
            report.destination = dst_ep.remote_parent().to_string();
            parent
        }
        false => path,
    };
    // Partial copies an interrupted push left of files this one sent whole or found up to
    // date: of no more use once it succeeded.
    if report.failed == 0 {
        let superseded = skipped.take_superseded();
        remote::remove_superseded_partials(addr, key, path, superseded.iter().map(|(rel, _)| rel));
    }
    Ok(report)
}

/// What a push did ([`push_counting`]).
pub(crate) struct Pushed {
    pub report: Report,
    /// What the check spared.
    pub skipped: Arc<crate::pipeline::skip::SkipCounts>,
    /// A single file its server put at the path's parent, `DST` (see [`or_parent`]).
    pub to_parent: bool,
}

/// What a push sends.
pub enum PushInput {
    /// A tree or file read from storage.
    Source(Source),
    /// Files of these sizes made up in memory, which the server verifies and drops: the
    /// network (and protocol) alone, for `sprat bench network`.
    Synthetic(Vec<u64>),
}

/// What the streams of one push share.
struct Push<'a> {
    session: &'a Session,
    /// The transfer's live counters (see `measurement::progress`).
    progress: &'a crate::measurement::progress::Progress,
    /// Batches from the source's readers (a push over several servers: this server's share).
    batches: &'a Receiver<Batch>,
    /// What was queued on `batches` in all: final once `batches` is drained, sent with
    /// `Commit`.
    sent: source::SentTotals,
    /// Batches of refused streams, to be sent again by the others.
    again: Receiver<Batch>,
    resend: Sender<Batch>,
    /// Set when the transfer fails.
    cancel: Signal,
    abort: &'a Abort,
    counts: Mutex<Counts>,
    /// What the server acknowledged (its bytes are what the stream adapter measures).
    acked: &'a SessionAcks,
    /// A stream ran out of batches.
    drained: AtomicBool,
    /// Set by the first stream that finds the source drained: wakes the streams that wait
    /// for their first round trip's acknowledgement (their `End` goes behind their last batch
    /// at once).
    source_ended: Signal,
    tail: Tail,
    refused_streams: AtomicUsize,
    /// What each batch in flight held, when files are reported as they complete (`cp -v`).
    listing: Option<PushListing>,
    /// The rate the streams together keep to (`cp --bwlimit`).
    pace: Option<&'a Pace>,
}

impl Push<'_> {
    fn fail(&self, e: TransferError) {
        self.cancel.set();
        self.abort.fail(e);
    }
}

/// The operation a push of `input` opens its sessions with.
pub(crate) fn push_operation(input: &PushInput, options: &TransferOptions) -> Operation {
    match input {
        PushInput::Source(source) => {
            let or_parent = or_parent(source, options);
            Operation::Push {
                source_is_dir: matches!(source, Source::Dir(_)),
                durable: options.durable,
                discard: false,
                owners: options.owners,
                numeric_ids: options.numeric_ids,
                keep_existing: options.keeps_existing(),
                no_link_at_path: options.no_link_at_dst && !or_parent,
                or_parent,
                source: source_id(source),
            }
        }
        PushInput::Synthetic(_) => Operation::Push {
            source_is_dir: true,
            durable: false,
            discard: true,
            owners: false,
            numeric_ids: false,
            keep_existing: false,
            no_link_at_path: false,
            or_parent: false,
            source: SourceId::default(),
        },
    }
}

/// Whether a push's single small file may go before the listing is in, for the server to
/// check it itself, unless the server's check would differ from this side's: extended
/// attributes (which listings do not carry), a list of the files written (`-v`: the server
/// does not say which it kept). (Nor in a push over several servers.)
fn may_go_early(options: &TransferOptions) -> bool {
    options.xattr_scope() == 0 && options.file_log.is_none()
}

/// Whether `source`, a single file, goes before its destination's listing is in (see
/// `source::Skip::early`): only then does leaving its place to the server (`or_parent`) save
/// a round trip; otherwise its data waits for the listing anyway.
fn goes_before_listing(source: &Source, options: &TransferOptions) -> bool {
    let Source::File { parent, name } = source else {
        return false;
    };
    // As the planner finds it (`source::plan_root_file`): a regular file, not a link to one
    // nor a FIFO, whose data would wait for the listing.
    let name = std::ffi::OsStr::from_bytes(name);
    let small = rustix::fs::statat(parent.fd(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
                && source::fits_early(st.st_size.max(0) as u64, options)
        });
    small
        && may_go_early(options)
        && !options.list_first
        && source::receiver_keeps(options.skip).is_some()
}

/// Whether a push of `source` leaves it to its server to put the file in `DST` or at `DST`
/// itself (see [`TransferOptions::dst_or_parent`]): a single file's only.
fn or_parent(source: &Source, options: &TransferOptions) -> bool {
    options.dst_or_parent && matches!(source, Source::File { .. })
}

/// Whether `source` is a single file small enough to travel whole, on one stream: the most a
/// push of it can keep busy. (A tree's size is known only once it is scanned; a large file's
/// opening chunks are cut as small as slow start's window, so that even a file of a few
/// chunks keeps many streams busy on a long path.)
pub(crate) fn travels_whole_alone(source: &Source, options: &TransferOptions) -> bool {
    let Source::File { parent, name } = source else {
        return false;
    };
    let name = std::ffi::OsStr::from_bytes(name);
    rustix::fs::statat(parent.fd(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| st.st_size.max(0) as u64 <= options.small_file_threshold)
}

/// Where a pushed directory is on this host, for the server to refuse a destination inside
/// it (unknown for a single file, which cannot hold its destination).
pub(crate) fn source_id(source: &Source) -> SourceId {
    let Source::Dir(root) = source else {
        return SourceId::default();
    };
    let (Some(host), Ok(st)) = (
        sprat_store::ancestry::boot_id(),
        rustix::fs::fstat(root.fd()),
    ) else {
        return SourceId::default();
    };
    SourceId {
        host,
        dev: st.st_dev,
        ino: st.st_ino,
    }
}

/// Starts reading `input`, leaving out what the destination (`path` on `addr`, from one
/// listing) has already; with `defer_namespace`, directories and hard links come on
/// [`source::SourceHandle::deferred`]. Also returns what the check spared. A destination that
/// cannot be listed (what answered was not the server, or a full server refused) stops the
/// source: the caller checks [`source::SourceHandle::index_failure`] once it is drained.
pub(crate) fn start_source(
    input: PushInput,
    (addr, path): (&str, &[u8]),
    key: &Credentials,
    options: &TransferOptions,
    defer_namespace: bool,
    listed_to_parent: &Arc<std::sync::OnceLock<bool>>,
) -> Result<(source::SourceHandle, Arc<crate::pipeline::skip::SkipCounts>), TransferError> {
    let mut skipped = Arc::default();
    let handle = match input {
        PushInput::Source(source) => {
            let (a, k, p) = (addr.to_string(), key.clone(), path.to_vec());
            let digests = options.skip == crate::config::SkipRule::Checksum;
            let owners = options.owners.then_some(!options.numeric_ids);
            let or_parent = or_parent(&source, options);
            let listed_to_parent = listed_to_parent.clone();
            let skip = skip_for(options, move || {
                // A single file its server puts in `DST` or at `DST`: whichever it is, as
                // found beside the listing (see `remote::index_or_parent`).
                let (mut index, to_parent) = index_patiently(|| match or_parent {
                    true => remote::index_or_parent(&a, &k, &p, digests, owners),
                    false => remote::index(&a, &k, &p, digests, owners).map(|i| (i, false)),
                })?;
                let _ = listed_to_parent.set(to_parent);
                let p = match to_parent {
                    true => sprat_store::split_parent(&p).0,
                    false => &p[..],
                };
                remote::remove_leftovers(&a, &k, p, &index.take_leftovers());
                Ok(index)
            });
            // A single small file goes before the listing is in, for the server to check it
            // itself, unless the server's check would differ from this side's: extended
            // attributes (which listings do not carry), a list of the files written (`-v`:
            // the server does not say which it kept), a push over several servers.
            let early = may_go_early(options) && !defer_namespace;
            let skip = skip.map(|s| match options.list_first {
                // Listed now, before the session takes its connection.
                true => {
                    let listed = (s.index)();
                    source::Skip {
                        index: Box::new(move || listed),
                        early,
                        ..s
                    }
                }
                false => source::Skip { early, ..s },
            });
            match &skip {
                Some(s) => skipped = s.counts.clone(),
                // No listing: the connection that asked what DST is goes (see
                // `remote::stat_keeping`), its place free for the session.
                None => remote::release_kept(addr),
            }
            if defer_namespace {
                source::start_deferring(source, options, skip)?
            } else {
                source::start(source, options, skip)?
            }
        }
        PushInput::Synthetic(sizes) => source::synthetic(sizes, options)?,
    };
    Ok((handle, skipped))
}

/// Pushes `input` (a local tree, a server's own tree in a third-party transfer, or synthetic
/// files) to `path` on the server at `addr`.
pub fn push_input(
    input: PushInput,
    addr: &str,
    path: &[u8],
    key: &Credentials,
    options: &TransferOptions,
    src_label: String,
    dst_label: String,
) -> Result<Report, TransferError> {
    push_counting(input, addr, path, key, options, (src_label, dst_label)).map(|p| p.report)
}

/// [`push_input`], also returning what the check spared and where a single file went.
pub(crate) fn push_counting(
    input: PushInput,
    addr: &str,
    path: &[u8],
    key: &Credentials,
    options: &TransferOptions,
    (src_label, dst_label): (String, String),
) -> Result<Pushed, TransferError> {
    let started = Instant::now();
    // This transfer's own record of its path's round trip (the caller's options may serve
    // other transfers at once: a server's third-party copies).
    let options = &options.for_one_transfer();
    let op = push_operation(&input, options);
    let useful_streams =
        matches!(&input, PushInput::Source(s) if travels_whole_alone(s, options)).then_some(1);
    // What the destination has, from one listing; then reading starts before the session
    // opens, so the first batches are ready when it is.
    let listed_to_parent = Arc::default();
    let (handle, skipped) =
        start_source(input, (addr, path), key, options, false, &listed_to_parent)?;
    let abort = Abort::default();
    let target = SessionTarget {
        addr,
        key,
        op,
        path,
        useful_streams,
    };
    let ran = run_session(
        &target,
        options,
        &abort,
        &handle.batches,
        (&handle.totals, &SessionAcks::default()),
        None,
    );
    let index_failure = handle.index_failure();
    let read_busy = handle.finish();
    // The destination could not be listed (an impostor answered, or a full server refused):
    // nothing was sent, and the transfer fails (a busy server's refusal is retried, with the
    // listing first and alone).
    index_failure.check()?;
    let run = ran?;
    // The server found `DST` as the listing did, or what the listing told the check was
    // not where the file went.
    if let Some(&listed) = listed_to_parent.get() {
        if listed != run.to_parent {
            let dst = crate::text::printable(&sprat_store::display_path(
                sprat_store::split_parent(path).0,
            ))
            .into_owned();
            return Err(TransferError::Local(format!(
                "'{dst}' on the server changed while the copy began (a directory to one side, \
                 not to the other): the file was checked against the wrong destination; run \
                 the copy again"
            )));
        }
    }
    // Files sent before the listing was in that the server had already.
    skipped.kept_by_destination(run.remote.up_to_date, run.remote.attrs_fixed);
    let stages = Stages {
        scan_read_s: read_busy.as_secs_f64(),
        network_s: Some(Duration::from_nanos(run.remote.network_busy_ns).as_secs_f64()),
        write_s: Duration::from_nanos(run.remote.write_busy_ns).as_secs_f64(),
    };
    let report = Report::new(
        "push",
        src_label,
        dst_label,
        &run.counts,
        started.elapsed(),
        run.streams_max,
        stages,
    )
    .with_durable(options.durable)
    .with_skipped(&skipped)
    .with_path(run.path);
    Ok(Pushed {
        report,
        skipped,
        to_parent: run.to_parent,
    })
}

/// Where one session of a push goes.
pub(crate) struct SessionTarget<'a> {
    pub addr: &'a str,
    pub key: &'a Credentials,
    pub op: Operation,
    pub path: &'a [u8],
    /// Most streams its data can keep busy, if known before it opens (see `session::open`).
    pub useful_streams: Option<usize>,
}

/// What one session of a push did.
pub(crate) struct SessionRun {
    /// The server's totals and stage times.
    pub remote: RemoteStats,
    /// What was acknowledged, with the server's counts of what it wrote.
    pub counts: Counts,
    pub streams_max: usize,
    pub path: PathReport,
    /// The server put a single file at the path's parent (see [`or_parent`]).
    pub to_parent: bool,
}

/// Opens a session with `target` and sends it every batch of `batches` (and what refused
/// streams hand back) over as many streams as pay, then commits: `sent` is what was queued
/// on `batches`, which the server's totals must match. Failures go to `abort` (whose
/// connections a failure elsewhere shuts down). `moved`: what the stall watchdog counts, all
/// of `abort`'s connections when `None`.
pub(crate) fn run_session(
    target: &SessionTarget,
    options: &TransferOptions,
    abort: &Abort,
    batches: &Receiver<Batch>,
    (sent, acked): (&source::SentTotals, &SessionAcks),
    moved: Option<&(dyn Fn() -> u64 + Sync)>,
) -> Result<SessionRun, TransferError> {
    let addr = target.addr;
    let (session, control) = session::open(
        addr,
        target.key,
        (target.op, target.path),
        options,
        target.useful_streams,
        |_| Ok(()),
    )?;
    acked.set_rtt(session.rtt());
    options.path_rtt.set(session.rtt());
    let (resend, again) = unbounded();
    let push = Push {
        session: &session,
        progress: &options.progress,
        batches,
        sent: sent.clone(),
        again,
        resend,
        cancel: Signal::default(),
        abort,
        counts: Mutex::new(Counts::default()),
        acked,
        drained: AtomicBool::new(false),
        source_ended: Signal::default(),
        tail: Tail::default(),
        refused_streams: AtomicUsize::new(0),
        listing: options.file_log.clone().map(PushListing::new),
        pace: options.bwlimit.as_ref(),
    };
    let mut retirements = Vec::new();
    let mut streams_max = session.plan.streams;
    let mut control_end = None;
    let streams = || {
        std::thread::scope(|s| {
            let (retire, control_conn, control_machine) = start_stream(s, &push, control, true);
            retirements.push(retire);
            control_end = Some((control_conn, control_machine));
            // The control connection already carries data while the others join. A stream that
            // could not join carried nothing: the transfer goes on with the streams it has (the
            // control connection reports what is wrong with the server itself), unless what
            // answered it was not the server.
            let joined =
                session.join_planned(|c| retirements.push(start_stream(s, &push, c, false).0));
            match joined {
                Err(e) if e.is_authentication() => push.fail(e),
                _ => {}
            }
            if session.auto {
                let finished = || push.drained.load(Ordering::SeqCst) || push.abort.is_set();
                let probe = session.started_wide().then(|| probe_path(addr, target.key));
                let mut added = Vec::new();
                streams_max = session.adapt(
                    &push.acked.bytes,
                    finished,
                    probe.as_ref(),
                    |change| match change {
                        Change::Grow(new) => added.push(start_stream(s, &push, *new, false).0),
                        // The newest first: streams the adapter added, then those that joined at
                        // the start (a wide start's surplus), never the control connection's.
                        Change::Failed(e) => push.fail(e),
                        Change::Retire(n) => {
                            for _ in 0..n {
                                if added.pop().is_none() && retirements.len() > 1 {
                                    drop(retirements.pop());
                                }
                            }
                        }
                    },
                );
                retirements.extend(added);
            }
        })
    };
    let limits = (options.stall_timeout, "--stall-timeout", &options.cancel);
    match moved {
        Some(moved) => stall::watched_by(abort, moved, limits, addr, streams),
        None => stall::watched(abort, limits, addr, streams),
    }
    let refused = push.refused_streams.load(Ordering::SeqCst);
    let streams_end = retirements.len().saturating_sub(refused);
    let streams_max = session.streams_used(streams_max, refused);
    drop(retirements);
    let Push {
        counts,
        tail,
        listing,
        ..
    } = push;
    if abort.is_set() {
        return Err(abort.take().unwrap_or_else(|| {
            TransferError::Local("the transfer failed (its error was reported elsewhere)".into())
        }));
    }
    let mut counts = unpoisoned(counts.into_inner());
    let Some((Ok(mut control), machine)) = control_end else {
        return Err(TransferError::Local(
            "cannot duplicate the control connection's socket".into(),
        ));
    };
    let remote = await_done(&mut control, &machine, &mut counts, &mut |_| {})?;
    // The server checked what it received against the `Commit`; its answer says what that
    // was, which must be what was sent.
    check_totals(&sent.get(), &remote.totals, &control.peer)?;
    if let Some(listing) = &listing {
        listing.finish();
    }
    // The server's totals are authoritative for what it wrote.
    counts.files = remote.files;
    counts.dirs = remote.dirs;
    counts.symlinks = remote.symlinks;
    counts.specials = remote.specials;
    counts.bytes = remote.bytes;
    counts.syncs = remote.syncs;
    counts.not_kept = remote.not_kept;
    Ok(SessionRun {
        counts,
        streams_max,
        path: session.report(streams_max, streams_end, &tail),
        remote,
        to_parent: session.to_parent(),
    })
}

/// How long a push asks again for a listing that failed on its connection.
const LIST_PATIENCE: Duration = Duration::from_secs(5);

/// The destination's listing from `list`, asked again (1 s apart, for [`LIST_PATIENCE`])
/// while it fails on its connection once a server has proved itself in this process (a
/// retry): a server coming back after a restart must not find a push that took its
/// destination for empty and sends everything. If the server stays away, the session cannot
/// open either and the transfer fails (and is retried) anyway; a first run fails at once. A
/// listing that failed by waiting out its connection's deadline (a stalled path) is not
/// asked again: each ask would wait as long.
fn index_patiently<T>(
    mut list: impl FnMut() -> Result<T, TransferError>,
) -> Result<T, TransferError> {
    let started = Instant::now();
    loop {
        match list() {
            Err(e)
                if e.is_retryable()
                    && crate::net::servers_proved() > 0
                    && started.elapsed() < LIST_PATIENCE =>
            {
                tracing::info!(e = %crate::text::printable(&e.to_string()), "cannot list the destination yet: trying again");
                std::thread::sleep(Duration::from_secs(1));
            }
            listed => return listed,
        }
    }
}

/// The server's totals, which end a session: they answer the `Commit` the control
/// connection's stream sent when it ended ([`Session::commit`]).
pub(crate) fn await_done(
    control: &mut Conn,
    machine: &Mutex<ClientStream>,
    counts: &mut Counts,
    superseded: &mut dyn FnMut(Vec<Vec<u8>>),
) -> Result<RemoteStats, TransferError> {
    loop {
        let msg = control.recv_control_raw()?;
        let event = lock(machine).on_message(msg, Instant::now());
        match event.map_err(|e| control.session_error(e))? {
            // A pull's server: partial copies it did not resume (a push never gets these).
            Event::Superseded(paths) => superseded(paths),
            Event::DirFailures(failures, unlisted) => {
                for (p, t) in failures {
                    counts.add_failure(&p, &t);
                }
                counts.failed += u64::from(unlisted);
            }
            Event::Done(stats) => return Ok(stats),
            Event::Refused { code, text, .. } => {
                return Err(TransferError::Remote {
                    peer: control.peer.clone(),
                    code,
                    text,
                })
            }
            other => return Err(control.protocol(format!("unexpected {other:?}"))),
        }
    }
}

/// An error unless `received` is what was `sent` (`peer`: the other side, for the error).
pub(crate) fn check_totals(
    sent: &sprat_proto::Totals,
    received: &sprat_proto::Totals,
    peer: &str,
) -> Result<(), TransferError> {
    if sent == received {
        return Ok(());
    }
    Err(TransferError::Incomplete(format!(
        "the transfer is incomplete: {sent} sent, {received} received (with {peer})"
    )))
}

/// The round trip to the server at `addr`, measured on a connection of its own (the least of
/// three small requests) in a thread that nothing waits for; the receiver gets nothing if it
/// fails. A session that started wide learns from it whether its path is short.
fn probe_path(addr: &str, key: &Credentials) -> Receiver<Duration> {
    let (tx, rx) = bounded(1);
    let (addr, key) = (addr.to_string(), key.clone());
    std::thread::spawn(move || {
        // The last three are the requests' (a first one may be the connection's estimate).
        if let Some(least) = remote::probe_rtt(&addr, &key, 3)
            .ok()
            .and_then(|rtts| rtts.into_iter().rev().take(3).min())
        {
            let _ = tx.send(least);
        }
    });
    rx
}

/// Why a stream stopped sending.
enum Ended {
    /// No batches are left.
    Drained,
    /// The adapter retired it.
    Retired,
    /// The transfer failed elsewhere.
    Cancelled,
    /// The server refused the stream; what it sent went back to the others.
    Refused,
}

/// Holds a push session's commit gate while a stream awaits its announcement; released
/// when the server announces or refuses it, when the stream has nothing left to send and
/// holds no batch unannounced (see [`Lanes::next`]), or when it ends otherwise. Shared by
/// the stream's sender and receiver; the first release counts.
struct GateHold<'a> {
    session: &'a Session,
    held: AtomicBool,
}

impl<'a> GateHold<'a> {
    fn new(session: &'a Session) -> GateHold<'a> {
        session.expect_announcement();
        GateHold {
            session,
            held: AtomicBool::new(true),
        }
    }

    fn release(&self) {
        if self.held.swap(false, Ordering::SeqCst) {
            self.session.settled();
        }
    }
}

impl Drop for GateHold<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

/// Starts a sender and a receiver on `stream`; dropping the returned sender retires the
/// stream (it ends after its current batch). The control connection's stream commits as soon
/// as it has sent its last batch. Also returns a handle on the socket and the stream's state
/// machine (the control connection reads `Done` with them at the end).
fn start_stream<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    push: &'s Push<'s>,
    stream: SessionConn,
    control: bool,
) -> (
    Sender<()>,
    Result<Conn, TransferError>,
    Arc<Mutex<ClientStream>>,
) {
    let SessionConn { conn, machine } = stream;
    push.abort.watch(&conn);
    let session = push.session;
    // A stream that has not read the server's `Opened` or `Joined` yet holds back the commit
    // until it has (see `Session::commit`).
    let gate = (!machine.announced()).then(|| Arc::new(GateHold::new(session)));
    let sender_gate = gate.clone();
    let machine = Arc::new(Mutex::new(machine));
    let (retire_tx, retire) = bounded::<()>(0);
    let (Ok(mut tx), Ok(mut rx), handle) = (conn.try_clone(), conn.try_clone(), conn.try_clone())
    else {
        push.fail(conn.protocol("cannot duplicate the socket".into()));
        return (retire_tx, Err(conn.protocol("no socket".into())), machine);
    };
    let retired = Arc::new(AtomicBool::new(false));
    let ack_retired = retired.clone();
    // Dropped by the receiver to stop the sender of a refused stream; dropped by the sender
    // when it ends.
    let (stop_tx, stop) = bounded::<()>(0);
    let (ended_tx, ended_rx) = bounded::<()>(0);
    let sender_machine = machine.clone();
    let opening = Arc::new(FirstRoundTrip::new(session.rtt()));
    let acks_opening = opening.clone();
    s.spawn(move || {
        let _ended = ended_tx;
        let lanes = Lanes {
            push,
            machine: &sender_machine,
            opening: &opening,
            control,
            gate: sender_gate.as_deref(),
            cancel: push.cancel.receiver(),
            retire: &retire,
            stop: &stop,
        };
        // A failed send means a broken connection; the receiving side of the same socket
        // reports it, with the server's own error if it sent one first.
        let sent = send::send(
            &mut tx,
            || lanes.next(),
            |batch, sent| lanes.after(batch, sent),
        );
        match sent {
            Ok(Ended::Drained) => {
                push.drained.store(true, Ordering::SeqCst);
                let sent = push.sent.get();
                if control && session.commit(&mut tx, &sender_machine, sent).is_err() {
                    tx.shutdown_write();
                }
            }
            Ok(Ended::Retired) => retired.store(true, Ordering::SeqCst),
            Ok(Ended::Cancelled | Ended::Refused) => {}
            Err(_) => tx.shutdown_write(),
        }
    });
    let receiver_machine = machine.clone();
    s.spawn(move || {
        let replies = receive_acks(
            &mut rx,
            push,
            (&receiver_machine, &acks_opening),
            gate.as_deref(),
            control,
        );
        let Refused { error, announced } = match replies {
            Ok(()) if !ack_retired.load(Ordering::SeqCst) => return push.tail.record(),
            Ok(()) => return,
            Err(refusal) => refusal,
        };
        // A server that failed to prove the token (or whose key is wrong) is no refusal: what
        // went on this stream went to a machine that is not the server, and the copy stops.
        if control || announced || error.is_authentication() {
            if control && !announced {
                session.set_opened(false);
            }
            return push.fail(error);
        }
        // A join refused because the `Open` was: the control connection says why.
        if !session.wait_opened() {
            return;
        }
        // A join refused on its own (a full server): the server read none of what went on
        // it, which goes to the other streams; the transfer goes on without this one. The
        // commit waits (`gate`) until all of it is handed back.
        let held = lock(&receiver_machine).take_held();
        tracing::info!(error = %crate::text::printable(&error.to_string()), batches = held.len(), "stream refused; its batches go on the others");
        for batch in held {
            let _ = push.resend.send(batch);
        }
        push.refused_streams.fetch_add(1, Ordering::SeqCst);
        drop(stop_tx);
        rx.shutdown();
        let _ = ended_rx.recv();
        if let Some(gate) = &gate {
            gate.release();
        }
    });
    (retire_tx, handle, machine)
}

/// Where a push stream's sender takes batches from and hears when to stop.
struct Lanes<'a> {
    push: &'a Push<'a>,
    machine: &'a Mutex<ClientStream>,
    /// What the stream may take in its first round trip.
    opening: &'a FirstRoundTrip,
    /// The control connection (which sends the `Commit` behind its own `End`).
    control: bool,
    /// The stream's hold on the commit gate, until its announcement.
    gate: Option<&'a GateHold<'a>>,
    cancel: &'a Receiver<()>,
    retire: &'a Receiver<()>,
    /// Disconnected when the server refused this stream.
    stop: &'a Receiver<()>,
}

impl Lanes<'_> {
    /// The stream's next batch: one handed back by a refused stream, else the source's next.
    /// A stream that runs out waits until every planned stream that holds batches is
    /// announced or refused, and sends what refused streams handed back, before it ends. One
    /// that runs out holding no batch unannounced (or the control connection, whose batches
    /// reach the server before its `Commit`) settles its part of the gate at once: a push
    /// whose data fit on the streams already announced, or on the control connection alone
    /// (one small file), commits right behind it instead of a round trip later. Such a
    /// stream, still unannounced, takes nothing handed back: the server may refuse it once
    /// the session ended.
    fn next(&self) -> Next<Ended> {
        let push = self.push;
        let end = |why| {
            let end = lock(self.machine).end();
            match end {
                Ok(end) => Next::End(end, why),
                Err(_) => Next::Stop(Ended::Cancelled),
            }
        };
        // In flight from before the write: its acknowledgement may overtake the writer.
        let send = |batch: Batch| {
            if let Some(pace) = push.pace {
                pace.take(batch.payload_len() as u64);
            }
            if let Some(listing) = &push.listing {
                listing.sending(&batch);
            }
            push.acked.sending(batch.seq, &batch.totals);
            self.opening.sending(batch.seq, batch.payload_len() as u64);
            lock(self.machine).sending(batch.seq);
            Next::Batch(batch)
        };
        loop {
            // On a long path, no batch beyond what the stream's first round trip carries
            // until it is acknowledged: the others take it (see `session::opening`).
            if !self.opening.may_take() && !push.source_ended.is_set() {
                select! {
                    recv(self.opening.woken()) -> _ => continue,
                    recv(push.source_ended.receiver()) -> _ => continue,
                    recv(self.retire) -> _ => return end(Ended::Retired),
                    recv(self.stop) -> _ => return Next::Stop(Ended::Refused),
                    recv(self.cancel) -> _ => return Next::Stop(Ended::Cancelled),
                }
            }
            select! {
                recv(push.again) -> b => if let Ok(batch) = b { return send(batch) },
                recv(push.batches) -> b => match b {
                    Ok(batch) => return send(batch),
                    Err(_) => {
                        push.source_ended.set();
                        let settles = self.control || !lock(self.machine).holds_unannounced();
                        if let (true, Some(gate)) = (settles, self.gate) {
                            gate.release();
                        }
                        // Still hears `stop`: a refused stream's receiver waits for this sender.
                        select! {
                            recv(push.session.planned()) -> _ => {}
                            recv(self.stop) -> _ => return Next::Stop(Ended::Refused),
                            recv(self.cancel) -> _ => return Next::Stop(Ended::Cancelled),
                        }
                        let takes_back = self.control || lock(self.machine).announced();
                        return match takes_back.then(|| push.again.try_recv().ok()).flatten() {
                            Some(batch) => send(batch),
                            None => end(Ended::Drained),
                        };
                    }
                },
                recv(self.retire) -> _ => return end(Ended::Retired),
                recv(self.stop) -> _ => return Next::Stop(Ended::Refused),
                recv(self.cancel) -> _ => return Next::Stop(Ended::Cancelled),
            }
        }
    }

    /// Once `batch` went out (or failed to): the machine keeps it until the announcement, or
    /// hands it back if the stream was refused meanwhile. A stream the server holds (its
    /// session not open yet) sends no more than `HELD_LIMIT` until it is announced.
    fn after(
        &self,
        batch: Batch,
        sent: Result<(), TransferError>,
    ) -> Result<Option<Ended>, TransferError> {
        let what = lock(self.machine).sent(batch);
        match what {
            Sent::Refused(back) => {
                let _ = self.push.resend.send(back);
                return Ok(Some(Ended::Refused));
            }
            Sent::Held => {}
            Sent::Done(batch) => crate::spare::give_back(batch.data),
        }
        sent?;
        while lock(self.machine).over_limit() {
            select! {
                recv(self.stop) -> _ => return Ok(Some(Ended::Refused)),
                recv(self.cancel) -> _ => return Ok(Some(Ended::Cancelled)),
                default(Duration::from_millis(5)) => {}
            }
        }
        Ok(None)
    }
}

/// Why a push stream's acknowledgements stopped, and whether the server had announced the
/// stream (`Opened` or `Joined`) by then.
struct Refused {
    error: TransferError,
    announced: bool,
}

/// Reads a push stream's replies into its state machine: its announcement first if it is
/// still due (then the gate hold is released), then acknowledgements until `EndAck`.
fn receive_acks(
    conn: &mut Conn,
    push: &Push,
    (machine, opening): (&Mutex<ClientStream>, &FirstRoundTrip),
    gate: Option<&GateHold>,
    control: bool,
) -> Result<(), Refused> {
    loop {
        let msg = match conn.recv() {
            Ok(Frame::Control(msg)) => msg,
            Ok(Frame::Batch(..)) => {
                let mut m = lock(machine);
                let announced = m.announced();
                let error = m.on_batch().err().map(|e| conn.session_error(e));
                let error = error.unwrap_or_else(|| conn.protocol("unexpected batch".into()));
                return Err(Refused { error, announced });
            }
            Err(e) => {
                // A passed deadline (no announcement in time) says what was awaited. A stream
                // given up before its announcement hands back what it sent, as a refused one.
                let mut m = lock(machine);
                let announced = m.announced();
                let error = match m.on_timeout(Instant::now()) {
                    Err(timed_out) => conn.session_error(timed_out),
                    Ok(()) => e,
                };
                m.lost();
                return Err(Refused { error, announced });
            }
        };
        let event = lock(machine).on_message(msg, Instant::now());
        let event = event.map_err(|e| Refused {
            error: conn.session_error(e),
            announced: true,
        })?;
        match event {
            Event::Announced { to_parent, .. } => {
                if control {
                    push.session.set_to_parent(to_parent);
                    push.session.set_opened(true);
                }
                if let Some(g) = gate {
                    g.release();
                }
                conn.read_until(None);
            }
            Event::Acked {
                seq,
                files,
                bytes,
                kept,
                failures,
                unlisted,
            } => {
                push.acked.acked(seq, bytes);
                opening.acked(seq);
                push.progress.add(files as u64, bytes);
                if let Some(listing) = &push.listing {
                    listing.acked(seq, &kept, &failures);
                }
                let o = BatchOutcome {
                    seq,
                    files: files as u64,
                    bytes,
                    failures,
                    unlisted: unlisted.into(),
                    ..BatchOutcome::default()
                };
                lock(&push.counts).add_outcome(&o);
            }
            Event::EndAcked => return Ok(()),
            Event::Refused {
                code,
                text,
                announced,
            } => {
                let error = TransferError::Remote {
                    peer: conn.peer.clone(),
                    code,
                    text,
                };
                return Err(Refused { error, announced });
            }
            other => {
                return Err(Refused {
                    error: conn.protocol(format!("unexpected {other:?}")),
                    announced: true,
                })
            }
        }
    }
}
