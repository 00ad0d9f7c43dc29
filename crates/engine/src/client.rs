//! `sprat cp`: local to local (memory hand-off), push (local to server) and pull (server to
//! local), each one pipeline of scan, read, network and write stages.

use crate::config::TransferOptions;
use crate::error::TransferError;
use crate::net::{self, Conn, Frame};
use crate::report::{Counts, Report, Stages};
use crate::sink::{BatchOutcome, Incoming, WriteJob, WriterPool};
use crate::source;
use crate::streams::{self, Change, Tail};
use crate::unannounced::Unannounced;
use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};
use sprat_proto::auth::TokenKey;
use sprat_proto::{path as wire_path, Message, Operation, RemoteStats};
use sprat_store::{Root, Source, TreeWriter};
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Local(PathBuf),
    /// `sprat://HOST:PORT/PATH`, `path` relative to the server's root.
    Remote {
        addr: String,
        path: Vec<u8>,
    },
}

impl Endpoint {
    /// Parses a command-line argument: a `sprat://` URL or a local path.
    pub fn parse(arg: &std::ffi::OsStr) -> Result<Endpoint, TransferError> {
        let bytes = arg.as_bytes();
        let Some(rest) = bytes.strip_prefix(b"sprat://") else {
            if bytes.is_empty() {
                return Err(TransferError::Usage("empty path".into()));
            }
            return Ok(Endpoint::Local(PathBuf::from(arg)));
        };
        let bad = |why: &str| {
            TransferError::Usage(format!("invalid URL '{}': {why}", arg.to_string_lossy()))
        };
        let slash = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        let addr = std::str::from_utf8(&rest[..slash]).map_err(|_| bad("the host is not UTF-8"))?;
        let port_ok = addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(bad("expected sprat://HOST:PORT/PATH"));
        }
        let path = wire_path::normalize_user_path(&rest[slash..]);
        wire_path::validate(&path).map_err(|e| {
            bad(&format!(
                "{e}; paths are relative to the server's root and may not leave it"
            ))
        })?;
        Ok(Endpoint::Remote {
            addr: addr.to_string(),
            path,
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Local(p) => write!(f, "{}", p.display()),
            Endpoint::Remote { addr, path } => {
                write!(f, "sprat://{addr}/{}", String::from_utf8_lossy(path))
            }
        }
    }
}

/// Copies `src` to `dst`; afterwards `dst` holds the contents of `src`.
pub fn copy(
    src: &Endpoint,
    dst: &Endpoint,
    key: Option<&TokenKey>,
    options: &TransferOptions,
) -> Result<Report, TransferError> {
    options.validate().map_err(TransferError::Usage)?;
    match (src, dst) {
        (Endpoint::Local(s), Endpoint::Local(d)) => local_copy(s, d, options, src, dst),
        (Endpoint::Local(s), Endpoint::Remote { addr, path }) => {
            push(s, addr, path, key, options, src, dst)
        }
        (Endpoint::Remote { addr, path }, Endpoint::Local(d)) => {
            pull(addr, path, d, key, options, src, dst)
        }
        (
            Endpoint::Remote {
                addr: src_addr,
                path: src_path,
            },
            Endpoint::Remote {
                addr: dst_addr,
                path: dst_path,
            },
        ) if src_addr == dst_addr && wire_path::is_within(dst_path, src_path) => Err(
            TransferError::Usage(format!("destination '{dst}' is the source or inside it")),
        ),
        (
            Endpoint::Remote {
                addr: src_addr,
                path: src_path,
            },
            Endpoint::Remote {
                addr: dst_addr,
                path: dst_path,
            },
        ) => crate::remote::third_party(
            src_addr,
            src_path,
            dst_addr,
            dst_path,
            key,
            options,
            src.to_string(),
            dst.to_string(),
        ),
    }
}

fn temp_tag() -> String {
    format!("sprat-{:08x}", u32::from_le_bytes(net::random()))
}

fn open_source(path: &Path) -> Result<Source, TransferError> {
    Root::open_local_source(path).map_err(|e| {
        if e.errno() == Some(rustix::io::Errno::NOENT) {
            TransferError::Usage(format!("source '{}' does not exist", path.display()))
        } else {
            TransferError::Store(e)
        }
    })
}

/// Whether `dst` (which may not exist yet) is `src` or lies below it.
fn is_inside(dst: &Path, src: &Path) -> bool {
    let Ok(src) = src.canonicalize() else {
        return false;
    };
    let mut existing = dst.to_path_buf();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = if parent.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    parent.to_path_buf()
                };
            }
            _ => return false,
        }
    }
    let Ok(mut full) = existing.canonicalize() else {
        return false;
    };
    full.extend(rest.iter().rev());
    full.starts_with(&src)
}

/// The writer for a local destination: the tree itself, or one file when the source is a file.
fn local_writer(
    dst: &Path,
    root_is_dir: bool,
    durable: bool,
) -> Result<Arc<TreeWriter>, TransferError> {
    let writer = if root_is_dir {
        TreeWriter::for_dir(Root::create_local(dst)?, true, temp_tag())
    } else {
        let parent = match dst.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
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
    Ok(Arc::new(writer.durable(durable)))
}

/// The first fatal error of a transfer; later ones (often consequences) are dropped.
#[derive(Default)]
struct FirstError {
    error: Mutex<Option<TransferError>>,
    set: AtomicBool,
}

impl FirstError {
    fn record(&self, e: TransferError) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
            self.set.store(true, Ordering::SeqCst);
        }
    }
    fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }
    fn take(&self) -> Option<TransferError> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The error that stops a transfer when writing into local destination `dst` failed fatally.
fn fatal_outcome(o: &BatchOutcome, dst: &Path) -> Option<TransferError> {
    o.fatal
        .as_ref()
        .map(|(_, text)| TransferError::Local(format!("{}: {text}", dst.display())))
}

fn local_copy(
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
    let writer = local_writer(dst, matches!(source, Source::Dir(_)), options.durable)?;
    let handle = source::start(source, options)?;
    let abort = Arc::new(AtomicBool::new(false));
    let pool = WriterPool::start(Some(writer.clone()), options.write_threads, abort.clone())?;
    let (reply_tx, reply_rx) = unbounded();
    let jobs = pool.sender();
    let mut counts = Counts::default();
    let mut fatal = None;
    for batch in handle.batches.iter() {
        let job = WriteJob {
            incoming: Incoming::Local(batch),
            reply: reply_tx.clone(),
        };
        if abort.load(Ordering::Relaxed) || jobs.send(job).is_err() {
            break;
        }
        for o in reply_rx.try_iter() {
            fatal = fatal.or_else(|| fatal_outcome(&o, dst));
            counts.add_outcome(&o);
        }
    }
    drop((jobs, reply_tx));
    let write_busy = pool.finish();
    let read_busy = handle.finish();
    for o in reply_rx.iter() {
        fatal = fatal.or_else(|| fatal_outcome(&o, dst));
        counts.add_outcome(&o);
    }
    if let Some(e) = fatal {
        return Err(e);
    }
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
    .with_durable(options.durable))
}

fn finish_dirs(writer: &TreeWriter, counts: &mut Counts) {
    for e in writer.finish() {
        counts.add_failure(e.path.as_bytes(), &e.to_string());
    }
}

/// Shuts every connection down so that no thread stays blocked after a fatal error.
fn abort_all(conns: &Mutex<Vec<Conn>>, first: &FirstError, e: TransferError) {
    first.record(e);
    for c in conns.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        c.shutdown();
    }
}

/// Adds a second handle on `conn` to those [`abort_all`] shuts down.
fn keep_for_shutdown(handles: &Mutex<Vec<Conn>>, conn: &Conn) {
    if let Ok(c) = conn.try_clone() {
        handles.lock().unwrap_or_else(|p| p.into_inner()).push(c);
    }
}

/// The server's totals, which end a session: they answer the `Commit` the control
/// connection's stream sent when it ended ([`streams::Session::commit`]).
fn await_done(control: &mut Conn, counts: &mut Counts) -> Result<RemoteStats, TransferError> {
    loop {
        match control.recv_control()? {
            Message::BatchAck { failures, .. } => {
                for (p, t) in failures {
                    counts.add_failure(&p, &t);
                }
            }
            Message::Done(stats) => return Ok(stats),
            other => return Err(control.protocol(format!("expected Done, got {other:?}"))),
        }
    }
}

fn push(
    src: &Path,
    addr: &str,
    path: &[u8],
    key: Option<&TokenKey>,
    options: &TransferOptions,
    src_ep: &Endpoint,
    dst_ep: &Endpoint,
) -> Result<Report, TransferError> {
    let source = open_source(src)?;
    push_input(
        PushInput::Source(source),
        addr,
        path,
        key,
        options,
        src_ep.to_string(),
        dst_ep.to_string(),
    )
}

/// What a push sends.
pub enum PushInput {
    /// A tree or file read from storage.
    Source(Source),
    /// Files of these sizes made up in memory, which the server verifies and drops: the
    /// network (and protocol) alone, for `sprat bench network`.
    Synthetic(Vec<u64>),
}

/// Pushes `input` (a local tree, a server's own tree in a third-party transfer, or synthetic
/// files) to `path` on the server at `addr`.
pub fn push_input(
    input: PushInput,
    addr: &str,
    path: &[u8],
    key: Option<&TokenKey>,
    options: &TransferOptions,
    src_label: String,
    dst_label: String,
) -> Result<Report, TransferError> {
    let started = Instant::now();
    let op = match &input {
        PushInput::Source(source) => Operation::Push {
            source_is_dir: matches!(source, Source::Dir(_)),
            durable: options.durable,
            discard: false,
        },
        PushInput::Synthetic(_) => Operation::Push {
            source_is_dir: true,
            durable: false,
            discard: true,
        },
    };
    // Reading starts before the session opens: the first batches are ready when it is.
    let handle = match input {
        PushInput::Source(source) => source::start(source, options)?,
        PushInput::Synthetic(sizes) => source::synthetic(sizes, options)?,
    };
    let (session, control) = match streams::open(addr, key, op, path, options) {
        Ok(opened) => opened,
        Err(e) => {
            handle.finish();
            return Err(e);
        }
    };
    let first = FirstError::default();
    let counts = Mutex::new(Counts::default());
    let acked = AtomicU64::new(0);
    let drained = AtomicBool::new(false);
    let tail = Tail::default();
    let (cancel_tx, cancel_rx) = bounded::<()>(0);
    let cancel_tx = Mutex::new(Some(cancel_tx));
    let shutdown = Mutex::new(Vec::new());
    let fail = |e: TransferError| {
        cancel_tx.lock().unwrap_or_else(|p| p.into_inner()).take();
        abort_all(&shutdown, &first, e);
    };
    let mut retirements = Vec::new();
    let mut streams_max = session.plan.streams;
    // Batches of refused streams, sent again by the others.
    let (again_tx, again) = unbounded::<sprat_proto::Batch>();
    let refused_streams = AtomicUsize::new(0);
    std::thread::scope(|s| {
        // Starts a sender and an acknowledgement receiver on `conn`; dropping the returned
        // sender retires the stream (it ends after its current batch).
        // The control connection's stream commits as soon as it has sent its last batch.
        let start = |conn: &Conn, control: bool| {
            keep_for_shutdown(&shutdown, conn);
            let (retire_tx, retire_rx) = bounded::<()>(0);
            let (Ok(mut tx), Ok(mut rx)) = (conn.try_clone(), conn.try_clone()) else {
                fail(conn.protocol("cannot duplicate the socket".into()));
                return retire_tx;
            };
            let retired = Arc::new(AtomicBool::new(false));
            let ack_retired = retired.clone();
            let (batches, cancel_rx) = (&handle.batches, cancel_rx.clone());
            let (fail, counts, acked, drained, tail) = (&fail, &counts, &acked, &drained, &tail);
            let (session, refused_streams) = (&session, &refused_streams);
            let held = Arc::new(Unannounced::new(conn.awaiting_announcement));
            let sender_held = held.clone();
            // Dropped by the receiver to stop the sender of a refused stream; dropped by the
            // sender when it ends.
            let (stop_tx, stop_rx) = bounded::<()>(0);
            let (ended_tx, ended_rx) = bounded::<()>(0);
            let (again, resend) = (&again, again_tx.clone());
            s.spawn(move || {
                let _ended = ended_tx;
                let lanes = Lanes {
                    batches,
                    again,
                    resend: &resend,
                    cancel: &cancel_rx,
                    retire: &retire_rx,
                    stop: &stop_rx,
                };
                // A failed send means a broken connection; the receiving side of the same
                // socket reports it, with the server's own error if it sent one first.
                match send_batches(&mut tx, &lanes, &sender_held, session) {
                    Ok(Ended::Drained) => {
                        drained.store(true, Ordering::SeqCst);
                        if control && session.commit(&mut tx).is_err() {
                            tx.shutdown_write();
                        }
                    }
                    Ok(Ended::Retired) => retired.store(true, Ordering::SeqCst),
                    Ok(Ended::Cancelled | Ended::Refused) => {}
                    Err(_) => tx.shutdown_write(),
                }
            });
            // A stream that has not read the server's `Opened` or `Joined` yet holds back the
            // commit until it has (see `Session::commit`).
            let hold = rx
                .awaiting_announcement
                .then(|| session.hold_commit())
                .flatten();
            let resend = again_tx.clone();
            s.spawn(move || {
                let mut hold = hold;
                let replies = receive_acks(&mut rx, counts, acked, &held, &mut hold, session);
                let refusal = match replies {
                    Ok(()) if !ack_retired.load(Ordering::SeqCst) => return tail.record(),
                    Ok(()) => return,
                    Err(refusal) => refusal,
                };
                let Refused { error, announced } = refusal;
                if control || announced {
                    if control && !announced {
                        session.set_opened(false);
                    }
                    return fail(error);
                }
                // A join refused because the `Open` was: the control connection says why.
                if !session.wait_opened() {
                    return;
                }
                // A join refused on its own (a full server): the server read none of what
                // went on it, which goes to the other streams; the transfer goes on without
                // this one. The commit waits (`hold`) until all of it is handed back.
                for batch in held.refused() {
                    let _ = resend.send(batch);
                }
                refused_streams.fetch_add(1, Ordering::SeqCst);
                drop(stop_tx);
                rx.shutdown();
                let _ = ended_rx.recv();
                drop(hold);
            });
            retire_tx
        };
        retirements.push(start(&control, true));
        // The control connection already carries data while the others join. A stream that
        // could not join carried nothing: the transfer goes on with the streams it has (the
        // control connection reports what is wrong with the server itself).
        let _ = session.join_planned(|c| retirements.push(start(&c, false)));
        if session.auto {
            let finished = || drained.load(Ordering::SeqCst) || first.is_set();
            let mut added = Vec::new();
            streams_max = session.adapt(&acked, finished, |change| match change {
                Change::Grow(new) => added.push(start(&new, false)),
                Change::Retire(n) => {
                    for _ in 0..n {
                        drop(added.pop());
                    }
                }
            });
            retirements.extend(added);
        }
    });
    let streams_end = retirements.len() - refused_streams.load(Ordering::SeqCst);
    drop(retirements);
    if let Some(e) = first.take() {
        handle.finish();
        return Err(e);
    }
    let mut control = control;
    let mut counts = counts.into_inner().unwrap_or_else(|p| p.into_inner());
    let remote = await_done(&mut control, &mut counts)?;
    // The server's totals are authoritative for what it wrote.
    counts.files = remote.files;
    counts.dirs = remote.dirs;
    counts.symlinks = remote.symlinks;
    counts.bytes = remote.bytes;
    counts.syncs = remote.syncs;
    let read_busy = handle.finish();
    let stages = Stages {
        scan_read_s: read_busy.as_secs_f64(),
        network_s: Some(Duration::from_nanos(remote.network_busy_ns).as_secs_f64()),
        write_s: Duration::from_nanos(remote.write_busy_ns).as_secs_f64(),
    };
    Ok(Report::new(
        "push",
        src_label,
        dst_label,
        &counts,
        started.elapsed(),
        streams_max,
        stages,
    )
    .with_durable(options.durable)
    .with_path(session.report(streams_max, streams_end, &tail)))
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

/// Where a push stream's sender takes batches from and hears when to stop.
struct Lanes<'a> {
    batches: &'a Receiver<sprat_proto::Batch>,
    /// Batches of refused streams, to be sent again.
    again: &'a Receiver<sprat_proto::Batch>,
    resend: &'a Sender<sprat_proto::Batch>,
    cancel: &'a Receiver<()>,
    retire: &'a Receiver<()>,
    /// Disconnected when the server refused this stream.
    stop: &'a Receiver<()>,
}

/// Sends batches on one push stream until none are left, then `End`. Batches sent before the
/// stream is announced stay in `held` (see [`Unannounced`]). A stream that runs out waits until
/// every planned stream is announced or refused, and sends what refused streams handed back.
fn send_batches(
    conn: &mut Conn,
    lanes: &Lanes,
    held: &Unannounced,
    session: &streams::Session,
) -> Result<Ended, TransferError> {
    let ended = loop {
        let batch = select! {
            recv(lanes.again) -> b => match b {
                Ok(batch) => batch,
                Err(_) => continue,
            },
            recv(lanes.batches) -> b => match b {
                Ok(batch) => batch,
                Err(_) => {
                    // Still hears `stop`: a refused stream's receiver waits for this sender.
                    select! {
                        recv(session.planned()) -> _ => {}
                        recv(lanes.stop) -> _ => return Ok(Ended::Refused),
                        recv(lanes.cancel) -> _ => return Ok(Ended::Cancelled),
                    }
                    match lanes.again.try_recv() {
                        Ok(batch) => batch,
                        Err(_) => break Ended::Drained,
                    }
                }
            },
            recv(lanes.retire) -> _ => break Ended::Retired,
            recv(lanes.stop) -> _ => return Ok(Ended::Refused),
            recv(lanes.cancel) -> _ => return Ok(Ended::Cancelled),
        };
        let sent = conn.send_batch(&batch);
        if let Some(back) = held.sent(batch) {
            let _ = lanes.resend.send(back);
            return Ok(Ended::Refused);
        }
        sent?;
        // A stream the server holds (its session not open yet) sends no more than
        // `HELD_LIMIT` until it is announced: what it sent is kept in memory meanwhile.
        while held.over_limit() {
            select! {
                recv(lanes.stop) -> _ => return Ok(Ended::Refused),
                recv(lanes.cancel) -> _ => return Ok(Ended::Cancelled),
                default(Duration::from_millis(5)) => {}
            }
        }
    };
    conn.send(&Message::End)?;
    Ok(ended)
}

/// Why a push stream's acknowledgements stopped, and whether the server had announced the
/// stream (`Opened` or `Joined`) by then.
struct Refused {
    error: TransferError,
    announced: bool,
}

/// Reads a push stream's replies: its announcement first if it is still due (then what the
/// stream sent is no longer `held`, and its `hold` on [`streams::Session::wait_planned`] is
/// released), then acknowledgements until `EndAck`.
fn receive_acks(
    conn: &mut Conn,
    counts: &Mutex<Counts>,
    acked: &AtomicU64,
    held: &Unannounced,
    hold: &mut Option<Sender<()>>,
    session: &streams::Session,
) -> Result<(), Refused> {
    let mut announced = !conn.awaiting_announcement;
    let refused = |error, announced| Refused { error, announced };
    if !announced {
        // A server holds a join up to 10 s for its session; one that says nothing at all is
        // not waited for forever.
        let _ = conn.stream.set_read_timeout(Some(net::HANDSHAKE_TIMEOUT));
    }
    loop {
        let frame = conn.recv().map_err(|e| refused(e, announced))?;
        match frame {
            Frame::Control(Message::Opened { .. } | Message::Joined) if !announced => {
                announced = true;
                if matches!(frame, Frame::Control(Message::Opened { .. })) {
                    session.set_opened(true);
                }
                held.announced();
                hold.take();
                let _ = conn.stream.set_read_timeout(None);
            }
            Frame::Control(Message::BatchAck {
                seq,
                files,
                bytes,
                failures,
            }) if announced => {
                acked.fetch_add(bytes, Ordering::Relaxed);
                let o = BatchOutcome {
                    seq,
                    files: files as u64,
                    bytes,
                    failures,
                    ..BatchOutcome::default()
                };
                counts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .add_outcome(&o);
            }
            Frame::Control(Message::EndAck) if announced => return Ok(()),
            Frame::Control(Message::Error { code, text }) => {
                let error = TransferError::Remote {
                    peer: conn.peer.clone(),
                    code,
                    text,
                };
                return Err(refused(error, announced));
            }
            Frame::Control(other) => {
                let error = conn.protocol(format!("unexpected {other:?}"));
                return Err(refused(error, announced));
            }
            Frame::Batch(..) => {
                return Err(refused(conn.protocol("unexpected batch".into()), announced))
            }
        }
    }
}

fn pull(
    addr: &str,
    path: &[u8],
    dst: &Path,
    key: Option<&TokenKey>,
    options: &TransferOptions,
    src_ep: &Endpoint,
    dst_ep: &Endpoint,
) -> Result<Report, TransferError> {
    let started = Instant::now();
    let (session, mut control) = streams::open(addr, key, Operation::Pull, path, options)?;
    let writer = local_writer(dst, session.root_is_dir, options.durable)?;
    let abort = Arc::new(AtomicBool::new(false));
    let pool = WriterPool::start(Some(writer.clone()), options.write_threads, abort)?;
    let first = FirstError::default();
    let network_ns = AtomicU64::new(0);
    let received = AtomicU64::new(0);
    let drained = AtomicBool::new(false);
    let tail = Tail::default();
    let mut counts = Counts::default();
    let shutdown = Mutex::new(Vec::new());
    let fail = |e: TransferError| abort_all(&shutdown, &first, e);
    let (reply_tx, reply_rx) = unbounded::<BatchOutcome>();
    let mut streams_max = session.plan.streams;
    std::thread::scope(|s| {
        // The control connection commits as soon as its own stream ended: the server's
        // totals then come back while the other streams and the writes finish.
        let start = |conn: &Conn, reply: Sender<BatchOutcome>, control: bool| {
            keep_for_shutdown(&shutdown, conn);
            let Ok(mut rx) = conn.try_clone() else {
                fail(conn.protocol("cannot duplicate the socket".into()));
                return;
            };
            let jobs = pool.sender();
            let (fail, network_ns, received, drained, tail, first) =
                (&fail, &network_ns, &received, &drained, &tail, &first);
            let session = &session;
            s.spawn(move || {
                let progress = Progress {
                    network_ns,
                    received,
                };
                match receive_batches(&mut rx, &jobs, &reply, progress, first) {
                    Ok(()) => {
                        drained.store(true, Ordering::SeqCst);
                        tail.record();
                        if control && !first.is_set() {
                            if let Err(e) = session.commit(&mut rx) {
                                fail(e);
                            }
                        }
                    }
                    Err(e) => fail(e),
                }
            });
        };
        start(&control, reply_tx.clone(), true);
        // The server already sends on the control connection while the others join. A join
        // the server refused (a full server) received nothing: the pull goes on without it.
        // Any other failure may have lost a batch the server sent on it after `Joined`.
        match session.join_planned(|c| start(&c, reply_tx.clone(), false)) {
            Ok(()) | Err(TransferError::Remote { .. }) => {}
            Err(e) => fail(e),
        }
        // Collect outcomes as they come so that a fatal local error stops the transfer at once.
        let collector = s.spawn(|| {
            let mut counts = Counts::default();
            for o in reply_rx.iter() {
                if let Some(e) = fatal_outcome(&o, dst) {
                    fail(e);
                }
                counts.add_outcome(&o);
            }
            counts
        });
        if session.auto {
            let finished = || drained.load(Ordering::SeqCst) || first.is_set();
            // A pulling client cannot ask the server to stop one stream early: a growth
            // that did not pay stays.
            streams_max = session.adapt(&received, finished, |change| {
                if let Change::Grow(new) = change {
                    start(&new, reply_tx.clone(), false);
                }
            });
        }
        drop(reply_tx);
        counts = collector.join().unwrap_or_default();
    });
    let write_busy = pool.finish();
    if let Some(e) = first.take() {
        return Err(e);
    }
    finish_dirs(&writer, &mut counts);
    counts.syncs = writer.sync_count();
    let remote = await_done(&mut control, &mut counts)?;
    let stages = Stages {
        scan_read_s: Duration::from_nanos(remote.read_busy_ns).as_secs_f64(),
        network_s: Some(
            Duration::from_nanos(network_ns.load(Ordering::Relaxed) / streams_max as u64)
                .as_secs_f64(),
        ),
        write_s: write_busy.as_secs_f64(),
    };
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
    .with_path(session.report(streams_max, streams_max, &tail)))
}

/// What a pulling stream counts as it receives.
#[derive(Clone, Copy)]
struct Progress<'a> {
    network_ns: &'a AtomicU64,
    received: &'a AtomicU64,
}

fn receive_batches(
    conn: &mut Conn,
    jobs: &Sender<WriteJob>,
    reply: &Sender<BatchOutcome>,
    progress: Progress,
    first: &FirstError,
) -> Result<(), TransferError> {
    loop {
        match conn.recv() {
            Ok(Frame::Batch(payload, took)) => {
                progress
                    .network_ns
                    .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
                progress
                    .received
                    .fetch_add(payload.len() as u64, Ordering::Relaxed);
                let job = WriteJob {
                    incoming: Incoming::Wire(payload),
                    reply: reply.clone(),
                };
                if jobs.send(job).is_err() {
                    return Ok(());
                }
            }
            Ok(Frame::Control(Message::End)) => return Ok(()),
            Ok(Frame::Control(Message::Error { code, text })) => {
                return Err(TransferError::Remote {
                    peer: conn.peer.clone(),
                    code,
                    text,
                })
            }
            Ok(Frame::Control(other)) => return Err(conn.protocol(format!("unexpected {other:?}"))),
            // After our own abort the socket is shut down: that is not a new error.
            Err(_) if first.is_set() => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}
