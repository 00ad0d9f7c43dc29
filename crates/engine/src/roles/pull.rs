//! A pull: the server's source feeds the session's streams; on this side each stream runs the
//! receive stage into one writer pool, its state machine checking every frame. The control
//! connection's `Commit` goes right behind its `Open` (and index), so that the server's
//! `Done` follows its last batch there without a round trip of its own.

use super::destination::{
    check_complete, fatal_outcome, finish_dirs, local_entries, local_writer, IndexPiece,
};
use super::endpoint::Endpoint;
use super::push::await_done;
use crate::config::TransferOptions;
use crate::error::TransferError;
use crate::measurement::progress::Progress;
use crate::net::Credentials;
use crate::net::{Conn, SessionConn};
use crate::pipeline::receive::{self, Flow, ReceiveLane, Take};
use crate::pipeline::sink::{BatchOutcome, WriterPool};
use crate::report::{Counts, Report, Stages};
use crate::session::client::{self as session, Change, Tail};
use crate::session::stall;
use crate::sync::{lock, Abort};
use crossbeam_channel::{unbounded, Sender};
use sprat_proto::namespace::NsKind;
use sprat_proto::session::client::{ClientStream, Event};
use sprat_proto::{DestCheck, Message, Operation};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `DST/NAME` for a file of remote path `path` pulled into `dst`, when `dst` is an existing
/// directory (or a symlink to one) and `DST/NAME` is not one too (that one the writer refuses).
fn file_inside_directory(dst: &Path, path: &[u8]) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let name = path
        .rsplit(|&b| b == b'/')
        .next()
        .filter(|n| !n.is_empty())?;
    let inside = dst.join(std::ffi::OsStr::from_bytes(name));
    let is_dir = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_dir());
    (is_dir(dst) && !is_dir(&inside)).then_some(inside)
}

/// A flag set once the server says that `path` is a regular file, asked on a connection of
/// its own beside the pull's (a failure to ask leaves it unset: the pull finds out anyway).
fn source_is_file(addr: &str, key: &Credentials, path: &[u8]) -> Arc<AtomicBool> {
    let is_file = Arc::new(AtomicBool::new(false));
    let (flag, addr, key, path) = (
        is_file.clone(),
        addr.to_string(),
        key.clone(),
        path.to_vec(),
    );
    std::thread::spawn(move || {
        if let Ok(entry) = super::remote::stat(&addr, &key, &path) {
            flag.store(entry.kind == NsKind::File, Ordering::SeqCst);
        }
    });
    is_file
}

/// Runs `body`, which reads the control connection `conn` to the session's end, under the
/// transfer's stall timeout: a server gone silent before its `Done` does not hold the client
/// for ever.
fn to_the_end<T>(
    conn: &mut Conn,
    addr: &str,
    options: &TransferOptions,
    body: impl FnOnce(&mut Conn) -> Result<T, TransferError>,
) -> Result<T, TransferError> {
    let abort = Abort::default();
    abort.watch(conn);
    let patience = (options.stall_timeout, "--stall-timeout", &options.cancel);
    let ended = stall::watched(&abort, patience, addr, || body(conn));
    // The watchdog's verdict rather than the socket it shut.
    abort.take().map_or(ended, Err)
}

/// Pieces of the destination's index the scan may make ahead of the connection sending them.
const INDEX_PIECES_AHEAD: usize = 4;

/// A pull of `path` to `dst` in one session; a single file pulled into an existing directory
/// goes to `DST/NAME` in it too, or, when the client stopped its scan of a large directory on
/// hearing the source is a file, in a second one for `DST/NAME`.
pub(crate) fn pull(
    addr: &str,
    path: &[u8],
    dst: &Path,
    key: &Credentials,
    options: &TransferOptions,
    src_ep: &Endpoint,
    dst_ep: &Endpoint,
) -> Result<Report, TransferError> {
    let started = Instant::now();
    // Into an existing directory: decided once, the server is told `into_dir` from it, and a
    // file it finds goes to this `DST/NAME` in the same session (whatever the destination
    // became meanwhile: the writer checks). (A pull of a list of files, `--files-from` or a
    // piece of a pull over several servers, is of a directory.)
    let inside = match options.selection.files_from {
        None => file_inside_directory(dst, path),
        Some(_) => None,
    };
    // A symlink at that `DST/NAME`, a name the user did not type: refused if the source is a
    // file, as into `DST/` (see `endpoint::into_directory`); before, the file replaced it.
    // Only this rare case asks the server first.
    if let Some(at) = &inside {
        if let Ok(target) = std::fs::read_link(at) {
            if super::remote::stat(addr, key, path).is_ok_and(|e| e.kind != NsKind::Dir) {
                use std::os::unix::ffi::OsStrExt;
                return Err(TransferError::Usage(super::endpoint::link_not_followed(
                    &at.display().to_string(),
                    target.as_os_str().as_bytes(),
                )));
            }
        }
    }
    // A checked pull sends what the destination has right behind its `Open`; the local scan
    // starts while the session's connection is dialled, and its pieces go as they come (a
    // few held while the dial goes on).
    let check = options.skip.as_check();
    // Into an existing directory, the source may be a single file that goes inside it: then
    // the index of the whole directory is of no use, and asking the server on a connection
    // of its own stops the scan of a large one (say a home directory) early.
    let file_source = match check != DestCheck::None && inside.is_some() {
        true => source_is_file(addr, key, path),
        false => Arc::default(),
    };
    // The files whose partial copies the index lists (an interrupted copy's).
    let partial_files: Arc<Mutex<Vec<crate::pipeline::skip::Superseded>>> = Arc::default();
    let scan = (check != DestCheck::None).then(|| {
        let (dst, options) = (dst.to_path_buf(), options.clone());
        let partial_files = partial_files.clone();
        let (pieces, scanned) = crossbeam_channel::bounded(INDEX_PIECES_AHEAD);
        let file_source = file_source.clone();
        let scan = std::thread::spawn(move || {
            let wanted =
                |piece| !file_source.load(Ordering::SeqCst) && pieces.send(Ok(piece)).is_ok();
            let done =
                local_entries(&dst, &options, wanted).map(|listed| *lock(&partial_files) = listed);
            // A scan cut short must not end the index as if it were whole.
            let done = match file_source.load(Ordering::SeqCst) {
                true => Err(TransferError::Local(
                    "the source is a file: the destination's scan was stopped".into(),
                )),
                false => done,
            };
            if let Err(e) = done {
                let _ = pieces.send(Err(e));
            }
        });
        (scanned, scan)
    });
    let send_index = |c: &mut SessionConn| -> Result<(), TransferError> {
        let Some((scanned, scan)) = scan else {
            return Ok(());
        };
        let mut proven = false;
        for piece in &scanned {
            // The names and digests of the destination's files go only to a server that
            // proved the token (not merely one whose key the client knew); an empty
            // destination's empty index tells nothing and goes at once.
            if !proven {
                c.conn.check_server_proof()?;
                proven = true;
            }
            let part = match piece? {
                IndexPiece::Entries(entries) => c.machine.index_part(entries),
                // `--checksum`: the digests of those files, behind them in the same index.
                IndexPiece::Sums(sums) => c.machine.index_sums(sums),
            };
            c.conn.send(&part.map_err(|e| c.conn.session_error(e))?)?;
        }
        // A scan that ended without its last word sent only part of the index.
        scan.join()
            .map_err(|_| TransferError::Local("the scan of the destination failed".into()))?;
        let end = c.machine.index_end();
        c.conn.send(&end.map_err(|e| c.conn.session_error(e))?)
    };
    let op = Operation::Pull {
        check,
        meta: options.meta_flags(),
        into_dir: inside.is_some(),
    };
    // The `Commit` goes right behind the `Open` and the index: the server reads it once it
    // has sent its last batch, and answers with `Done` at once.
    let send_index_and_commit = |c: &mut SessionConn| -> Result<(), TransferError> {
        send_index(c)?;
        let commit = c.machine.commit(sprat_proto::Totals::default());
        c.conn.send(&commit.map_err(|e| c.conn.session_error(e))?)
    };
    let opened = session::open(addr, key, (op, path), options, None, send_index_and_commit);
    // A directory whose scan stopped on hearing the source is a file (a large one): the
    // session for `DST/NAME`, whose index is that file's, follows.
    if opened.is_err() && file_source.load(Ordering::SeqCst) {
        if let Some(inside) = &inside {
            return pull(addr, path, inside, key, options, src_ep, dst_ep);
        }
    }
    let (session, control) = opened?;
    super::overlap::refuse_a_pull_into_its_source(session.source, dst, &dst_ep.to_string())?;
    // The index was sent whole (its scan ended) before the session opened.
    let mut partials = std::mem::take(&mut *lock(&partial_files));
    // A single file into an existing directory goes inside it, under its own name, as with
    // cp (known from the server's answer): its server checked it against the index's entries
    // of NAME alone, as the file's own (`into_dir`, protocol 22), and so is a partial copy of
    // it the index listed (the one of NAME).
    let dst = match (&inside, session.root_is_dir) {
        (Some(inside), false) => {
            use std::os::unix::ffi::OsStrExt;
            let name = inside
                .file_name()
                .map(OsStrExt::as_bytes)
                .unwrap_or_default();
            partials.retain_mut(|(path, _)| {
                let its = path.as_slice() == name;
                path.clear();
                its
            });
            inside.as_path()
        }
        _ => dst,
    };
    let writer = local_writer(dst, session.root_is_dir, true, options)?;
    writer.watch_partials(partials);
    let pool = WriterPool::start(
        Some(writer.clone()),
        options.write_threads,
        Arc::new(AtomicBool::new(false)),
    )?;
    let abort = Abort::default();
    let network_ns = AtomicU64::new(0);
    let received = AtomicU64::new(0);
    let drained = AtomicBool::new(false);
    let tail = Tail::default();
    let mut counts = Counts::default();
    let (reply_tx, reply_rx) = unbounded::<BatchOutcome>();
    let mut streams_max = session.plan.streams;
    let SessionConn {
        conn: control_conn,
        machine: control_machine,
    } = control;
    let control_machine = Arc::new(Mutex::new(control_machine));
    stall::watched(
        &abort,
        (options.stall_timeout, "--stall-timeout", &options.cancel),
        addr,
        || {
            std::thread::scope(|s| {
                // The server's totals come behind the control connection's last batch, while
                // the other streams and the writes finish.
                let start = |conn: &Conn,
                             machine: Arc<Mutex<ClientStream>>,
                             reply: Sender<BatchOutcome>| {
                    abort.watch(conn);
                    let Ok(mut rx) = conn.try_clone() else {
                        abort.fail(conn.protocol("cannot duplicate the socket".into()));
                        return;
                    };
                    let lane = ReceiveLane {
                        jobs: pool.sender(),
                        reply,
                        network_ns: &network_ns,
                        received: &received,
                        admit: None,
                        list: options.file_log.is_some(),
                        pace: options.bwlimit.as_ref(),
                    };
                    let (abort, drained, tail) = (&abort, &drained, &tail);
                    s.spawn(move || {
                        let received = receive::receive(
                            &mut rx,
                            &lane,
                            |conn| {
                                let checked = lock(&machine).on_batch();
                                checked
                                    .map(|()| Take::Write)
                                    .map_err(|e| conn.session_error(e))
                            },
                            |conn, msg| on_control(conn, &machine, msg, &options.progress),
                            |conn| conn.protocol("the writers stopped".into()),
                        );
                        match received {
                            Ok(()) => {
                                drained.store(true, Ordering::SeqCst);
                                tail.record();
                            }
                            // After our own abort the socket is shut down: that is not a new error.
                            Err(_) if abort.is_set() => {}
                            Err(e) => abort.fail(e),
                        }
                    });
                };
                start(&control_conn, control_machine.clone(), reply_tx.clone());
                let start_joined = |c: SessionConn| {
                    let SessionConn { conn, machine } = c;
                    start(&conn, Arc::new(Mutex::new(machine)), reply_tx.clone());
                };
                // The server already sends on the control connection while the others join. A join
                // the server refused (a full server) received nothing: the pull goes on without it.
                // Any other failure may have lost a batch the server sent on it after `Joined`.
                match session.join_planned(start_joined) {
                    Ok(()) | Err(TransferError::Remote { .. }) => {}
                    Err(e) => abort.fail(e),
                }
                // Collect outcomes as they come so that a fatal local error stops the transfer at once.
                let collector = s.spawn(|| {
                    let mut counts = Counts::default();
                    for o in reply_rx.iter() {
                        if let Some(e) = fatal_outcome(&o, dst) {
                            abort.fail(e);
                        }
                        counts.add_outcome(&o);
                        // Files this writer kept (see `BatchOutcome::kept`) are done too.
                        let kept = o.kept + o.kept_fixed;
                        options.progress.add(o.files + kept, o.bytes + o.kept_bytes);
                        if let Some(log) = &options.file_log {
                            o.completed.iter().for_each(|p| log.completed(p));
                        }
                    }
                    counts
                });
                if session.auto {
                    let finished = || drained.load(Ordering::SeqCst) || abort.is_set();
                    // A pulling client cannot ask the server to stop one stream early: a growth
                    // that did not pay stays.
                    streams_max = session.adapt(&received, finished, None, |change| match change {
                        Change::Grow(new) => start_joined(*new),
                        Change::Failed(e) => abort.fail(e),
                        Change::Retire(_) => {}
                    });
                }
                drop(reply_tx);
                counts = collector.join().unwrap_or_default();
            })
        },
    );
    let write_busy = pool.finish();
    if let Some(e) = abort.take() {
        return Err(e);
    }
    let mut control_conn = control_conn;
    // The partial copies the server did not resume (the file up to date here, or arriving
    // whole) go with those of files put in place whole, once the pull succeeded.
    let mut not_resumed = |paths: Vec<Vec<u8>>| paths.iter().for_each(|p| writer.placed_whole(p));
    let remote = to_the_end(&mut control_conn, addr, options, |conn| {
        await_done(conn, &control_machine, &mut counts, &mut not_resumed)
    })?;
    // `Done` says what the server's source sent: all of it must have arrived here. (Before
    // the directories' attributes: removing what arrived of an incomplete file changes its
    // directory.)
    // The server's last `Progress` may be a second old: its final counts.
    options
        .progress
        .set_skipped(remote.up_to_date, remote.bytes_not_sent);
    check_complete(&writer, &mut counts, &remote.totals, &control_conn.peer)?;
    finish_dirs(&writer, &mut counts);
    counts.syncs = writer.sync_count();
    // A join the server refused carried nothing.
    let streams_max = session.streams_used(streams_max, 0);
    let stages = Stages {
        scan_read_s: Duration::from_nanos(remote.read_busy_ns).as_secs_f64(),
        network_s: Some(
            Duration::from_nanos(network_ns.load(Ordering::Relaxed) / streams_max as u64)
                .as_secs_f64(),
        ),
        write_s: write_busy.as_secs_f64(),
    };
    // Partial copies an interrupted copy left of files this pull put in place whole (or
    // found complete), and of those the server did not resume (its `Superseded`, from
    // protocol 21): of no more use once it succeeded.
    if counts.failed == 0 {
        let placed = writer.placed_over_partials();
        super::destination::discard_partials(&writer, dst, &placed);
    }
    Ok(Report::new(
        "pull",
        src_ep.to_string(),
        dst_ep.to_string(),
        &counts,
        started.elapsed(),
        streams_max,
        stages,
    )
    .with_durable(options.durable)
    // With what this writer kept: up to date at the destination, which the server could not
    // see (below directories this side could not list) or that appeared meanwhile.
    .with_not_sent(
        remote.up_to_date + counts.kept,
        remote.attrs_fixed + counts.kept_fixed,
        remote.bytes_not_sent,
    )
    .with_path(session.report(streams_max, streams_max, &tail)))
}

/// What a control message means to a pull stream: its `End`, the server's refusal, or how
/// much of the destination the server's check found up to date so far (counted as done in
/// `progress`).
fn on_control(
    conn: &Conn,
    machine: &Mutex<ClientStream>,
    msg: Message,
    progress: &Progress,
) -> Result<Flow, TransferError> {
    let event = lock(machine).on_message(msg, Instant::now());
    match event.map_err(|e| conn.session_error(e))? {
        Event::Ended => Ok(Flow::Over),
        Event::Progress(p) => {
            progress.set_skipped(p.skipped_files, p.skipped_bytes);
            Ok(Flow::More)
        }
        Event::Refused { code, text, .. } => Err(TransferError::Remote {
            peer: conn.peer.clone(),
            code,
            text,
        }),
        other => Err(conn.protocol(format!("unexpected {other:?}"))),
    }
}
