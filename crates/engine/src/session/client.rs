//! The client side of a session's connections: opens the control connection (estimating the
//! round trip from the server's hello, then measuring it on the `Opened`) while the first
//! joining connections join beside it (the client chooses the session id, so they need not
//! wait for `Opened`), sizes socket buffers and the starting number of streams from that
//! round trip and the host's TCP limits, joins further streams in parallel (at the start and
//! while the transfer runs), grows them while throughput grows, and records when each stream
//! ran out of data (the tail).
//!
//! Each connection carries its own state machine (`sprat_proto::session::client`); the
//! session-wide rules, when `Commit` may go ([`CommitGate`]) and whether the `Open` was
//! accepted, are kept here under one lock.

use crate::config::TransferOptions;
use crate::error::TransferError;
use crate::net::Credentials;
use crate::net::{self, SessionConn};
use crate::report::PathReport;
use crate::sync::{lock, unpoisoned};
use crate::tune::{self, Adapter, StartPlan, Step, TcpLimits};
use crossbeam_channel::{bounded, unbounded, Receiver, Sender, TryRecvError};
use sprat_proto::session::client::CommitGate;
use sprat_proto::session::{Direction, Role};
use sprat_proto::{Message, Operation};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// An open session: what it needs to join more streams and what it measured.
pub(crate) struct Session {
    addr: String,
    key: Credentials,
    id: [u8; 16],
    direction: Direction,
    /// Whether the source is a directory (a pull's `Opened` says; false for a push).
    pub root_is_dir: bool,
    /// Where a pull's source directory is on the server's kernel (its `Opened` says; zeros
    /// for a push), for the pull to refuse a destination inside it.
    pub source: sprat_proto::SourceId,
    /// A push's server put its single file at the path's parent (its `Opened` says; see
    /// `sprat_proto::Operation::Push`'s `or_parent`).
    to_parent: AtomicBool,
    /// Half the time from `connect` to the server's hello (see [`net::dial`]).
    rtt_estimate: Duration,
    /// When the `Open` was sent, and the round trip to its `Opened` in nanoseconds (0 until it
    /// arrived): one round trip plus the server's work, and unlike the estimate, not slowed
    /// by connection set-up on a busy host.
    open_sent: Instant,
    rtt_opened: AtomicU64,
    /// The least round trip of a probe on a connection of its own, in nanoseconds (0 until
    /// one came): a session that started wide measures one (see [`Session::adapt`]).
    rtt_probed: AtomicU64,
    pub plan: StartPlan,
    /// The host's TCP limits and the user's `--tcp-buffer`, to plan again once the round
    /// trip is measured.
    limits: TcpLimits,
    tcp_buffer: Option<u64>,
    /// Streams are chosen and adapted by sprat (no `--streams`).
    pub auto: bool,
    /// Most streams an automatic session starts or grows to: what its data can keep busy
    /// when that is known before it opens (see [`open`]), else [`tune::MAX_AUTO_STREAMS`].
    most_streams: usize,
    /// Connections joining while the session opened.
    joining: Mutex<Vec<JoinHandle<Result<SessionConn, TransferError>>>>,
    /// Connections that joined (the control connection not counted).
    joined: AtomicUsize,
    /// The session-wide state, and a wake-up for those waiting on it.
    state: Mutex<SessionState>,
    changed: Condvar,
    /// Disconnected once the commit gate opened (to wait for it in a `select!`).
    gate_open_tx: Mutex<Option<Sender<()>>>,
    gate_open: Receiver<()>,
}

struct SessionState {
    gate: CommitGate,
    /// A push's control connection: `Some(true)` once its `Opened` arrived, `Some(false)` once
    /// it failed before that.
    opened: Option<bool>,
}

/// A session's control connection dialled ahead (see [`dial_ahead`]), and what it was
/// dialled for.
pub(crate) struct DialledAhead {
    addr: String,
    buffer: Option<u64>,
    direction: Direction,
    since: Instant,
    dialled: Receiver<Result<net::DialedSession, TransferError>>,
    /// Whether a session took the connection, or its dialling thread closed it unused.
    claim: Arc<Mutex<Claim>>,
}

/// What became of a connection dialled ahead (see [`dial_spare`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Claim {
    Waiting,
    /// A session took it: its thread hands it over whenever it is ready.
    Taken,
    /// Its thread closed it, unused for [`AHEAD_KEPT`].
    Closed,
}

static AHEAD: Mutex<Option<DialledAhead>> = Mutex::new(None);

/// How long a connection dialled ahead may wait for its session: well within the time a
/// server gives a new connection for its first message (`sprat_proto::session::
/// CLIENT_HELLO_PATIENCE`, 5 s); a session opened later dials its own.
const AHEAD_FRESH: Duration = Duration::from_secs(3);
/// How long a connection dialled ahead is kept open for a session that may take it: a little
/// beyond [`AHEAD_FRESH`], and closed (quietly, by the client) before the server's patience
/// with a connection that has not proved itself runs out (which it would log).
const AHEAD_KEPT: Duration = Duration::from_secs(4);

/// Starts dialling the control connection of a push to `addr` now, for the next session
/// [`open`]s there: a push of a single file first asks the server whether its destination
/// is a directory (three round trips on a connection of its own), and the session's connect
/// and hellos (two) overlap them instead of following. One connection is held at a time; one
/// never used is closed when the next is dialled or the process ends.
pub(crate) fn dial_ahead(addr: &str, key: &Credentials, tcp_buffer: Option<u64>) {
    hold_ahead(dial_spare(addr, key, tcp_buffer, Direction::Push));
}

/// Starts dialling a control connection to `addr` for a session moving data `direction`,
/// which the caller holds until it knows whether a session will want it ([`hold_ahead`]).
pub(crate) fn dial_spare(
    addr: &str,
    key: &Credentials,
    tcp_buffer: Option<u64>,
    direction: Direction,
) -> DialledAhead {
    let (_, buffer) = TcpLimits::read().buffers(tcp_buffer);
    let since = Instant::now();
    let claim = Arc::new(Mutex::new(Claim::Waiting));
    // Handed over only when a session receives it, so that one nobody takes can be closed.
    let (tx, dialled) = bounded(0);
    let (owner, addr_owned, key) = (claim.clone(), addr.to_string(), key.clone());
    std::thread::spawn(move || {
        let conn = net::dial_session(&addr_owned, &key, buffer, direction, Role::Control);
        let left = AHEAD_KEPT.saturating_sub(since.elapsed());
        if let Err(crossbeam_channel::SendTimeoutError::Timeout(conn)) = tx.send_timeout(conn, left)
        {
            let mut claim = lock(&owner);
            match *claim {
                Claim::Taken => {
                    drop(claim);
                    let _ = tx.send(conn);
                }
                _ => *claim = Claim::Closed,
            }
        }
    });
    DialledAhead {
        addr: addr.to_string(),
        buffer,
        direction,
        since,
        dialled,
        claim,
    }
}

/// Holds `spare` for the next session [`open`]ed to its address in its direction (while
/// fresh), in place of any held before.
pub(crate) fn hold_ahead(spare: DialledAhead) {
    *lock(&AHEAD) = Some(spare);
}

/// Dials a session's control connection on a thread of its own; the connection, or why it
/// failed, comes on the receiver.
fn dial_control(
    addr: &str,
    key: &Credentials,
    buffer: Option<u64>,
    direction: Direction,
) -> Receiver<Result<net::DialedSession, TransferError>> {
    let (tx, dialled) = bounded(1);
    let (addr, key) = (addr.to_string(), key.clone());
    std::thread::spawn(move || {
        let conn = net::dial_session(&addr, &key, buffer, direction, Role::Control);
        // The receiver is gone only once nobody wants the connection; nothing to tell then.
        let _ = tx.send(conn);
    });
    dialled
}

/// The connection dialled ahead for a session like this one, if there is one and it is
/// fresh (anything else dialled ahead is dropped).
fn take_ahead(
    addr: &str,
    buffer: Option<u64>,
    direction: Direction,
) -> Option<Receiver<Result<net::DialedSession, TransferError>>> {
    let ahead = lock(&AHEAD).take()?;
    let same = ahead.addr == addr && ahead.buffer == buffer && ahead.direction == direction;
    if !same || ahead.since.elapsed() >= AHEAD_FRESH {
        return None;
    }
    let mut claim = lock(&ahead.claim);
    if *claim == Claim::Closed {
        return None;
    }
    *claim = Claim::Taken;
    drop(claim);
    Some(ahead.dialled)
}

/// Opens a session (`Open` on a control connection, then what `after_open` sends behind it)
/// and plans its streams. Returns the session and the control connection; the transfer starts on it at once and joins the other
/// planned streams ([`Session::join_planned`]) while the first data already flows.
///
/// A push does not wait for `Opened` (nor its joining streams for `Joined`): its first
/// batches travel right behind the `Open`, two round trips after `connect`, and each push
/// stream reads the server's announcement before its acknowledgements. A pull waits for
/// `Opened`, which says what the source is.
///
/// `useful_streams`: the most streams the data can keep busy, when the caller knows it (one
/// for a single small file's push): an automatic session neither starts nor grows beyond it,
/// where a slow hello would otherwise open a wide start's dozens of connections, and wait
/// for every one of them to join before it commits, for one small file. A `--streams N`
/// session opens no more than that either: the rest would carry nothing (a pull's server
/// refuses them).
pub(crate) fn open(
    addr: &str,
    key: &Credentials,
    (op, path): (Operation, &[u8]),
    options: &TransferOptions,
    useful_streams: Option<usize>,
    after_open: impl FnOnce(&mut SessionConn) -> Result<(), TransferError>,
) -> Result<(Session, SessionConn), TransferError> {
    let mut most_streams = useful_streams.map_or(tune::MAX_AUTO_STREAMS, |n| {
        n.clamp(1, tune::MAX_AUTO_STREAMS)
    });
    // The user's streams, at most as many as the data can keep busy.
    let fixed_streams = options
        .streams
        .map(|n| useful_streams.map_or(n, |useful| n.min(useful.max(1))));
    let limits = TcpLimits::read();
    // Buffers do not depend on the round trip, so the control connection gets them too.
    let (_, buffer) = limits.buffers(options.tcp_buffer);
    let direction = match op {
        Operation::Push { .. } => Direction::Push,
        Operation::Pull { .. } => Direction::Pull,
    };
    // The streams every session will have join beside the control connection, under the
    // session id chosen here: the server holds their `Join` until it has served the `Open`.
    // A push's joins send at once; a pull's wait for `Joined` before they count.
    let id: [u8; 16] = net::random();
    let join_beside = || {
        let (addr, key) = (addr.to_string(), key.clone());
        let wait = direction == Direction::Pull;
        std::thread::spawn(move || join_one(&addr, &key, id, buffer, direction, wait))
    };
    let ahead = fixed_streams
        .unwrap_or(tune::MIN_AUTO_STREAMS.min(most_streams))
        .saturating_sub(1);
    let mut joining: Vec<_> = (0..ahead).map(|_| join_beside()).collect();
    // A long path's streams all start at once (see `tune::WIDE_START_STREAMS`).
    let start_wide = |joining: &mut Vec<_>| {
        let wide = tune::WIDE_START_STREAMS.min(most_streams).saturating_sub(1);
        joining.extend((joining.len()..wide).map(|_| join_beside()));
    };
    let mut taken_ahead = take_ahead(addr, buffer, direction);
    let mut dialled_ahead = taken_ahead.is_some();
    let control = loop {
        let dialled = taken_ahead
            .take()
            .unwrap_or_else(|| dial_control(addr, key, buffer, direction));
        let control = match dialled.recv_timeout(tune::HELLO_GRACE) {
            Ok(control) => control,
            Err(_) => {
                // No hello yet: a long path, where streams starting now rather than two round
                // trips later (once the hello tells how long) shorten slow start the most.
                if options.streams.is_none() {
                    start_wide(&mut joining);
                }
                dialled
                    .recv()
                    .map_err(|_| TransferError::Local("the connecting thread failed".into()))?
            }
        };
        match control {
            // A connection dialled ahead that failed, or that the server closed while it
            // waited (a server that restarted, say), is dialled again, once, rather than
            // failing the run.
            Err(
                TransferError::ConnectionLost { .. }
                | TransferError::ClosedBeforeHandshake { .. }
                | TransferError::Connect { .. },
            ) if dialled_ahead => {
                dialled_ahead = false;
            }
            Ok(control) if dialled_ahead && control.hung_up() => dialled_ahead = false,
            control => break control?,
        }
    };
    // A server that proved itself (or showed its pinned key) on a connection dialled before
    // this run began proved itself to this run: a run that then fails is retried as one
    // whose own connection got that far (see `retry::retrying`).
    if dialled_ahead {
        net::server_proved(addr);
    }
    // The server's hello came two round trips after the dialling began (the TCP handshake,
    // then the hellos): the streams a path this long wants join now, beside the `Open`.
    let rtt = control.rtt();
    // A connection dialled ahead comes with its round trip known: a long path starts as wide
    // as when its hello is still awaited (see `tune::streams_at_start`).
    if options.streams.is_none() && rtt * 2 > tune::HELLO_GRACE {
        start_wide(&mut joining);
    }
    let mut plan = tune::start_plan(&limits, rtt, fixed_streams, options.tcp_buffer);
    if options.streams.is_none() {
        plan.streams = plan.streams.min(most_streams);
    }
    joining.extend((joining.len() + 1..plan.streams).map(|_| join_beside()));
    // Streams that joined early all run, and count as started.
    plan.streams = plan.streams.max(joining.len() + 1);
    // A pull's server scans the source, so it applies the selection; a push's client did.
    let selection = match op {
        Operation::Pull { .. } => crate::config::wire_selection(&options.selection),
        Operation::Push { .. } => sprat_proto::Selection::default(),
    };
    let open = Message::Open {
        session: id,
        op,
        path: path.to_vec(),
        selection,
    };
    let mut control = control.authenticate(open)?;
    // What follows the `Open` before the server answers (a checked pull's index).
    after_open(&mut control)?;
    let open_sent = Instant::now();
    let rtt_opened = AtomicU64::new(0);
    let announced = match direction {
        Direction::Push => net::Announcement::default(),
        Direction::Pull => {
            let announced = control.await_announcement()?;
            rtt_opened.store(nanos(open_sent.elapsed()), Ordering::Relaxed);
            announced.unwrap_or(net::Announcement {
                root_is_dir: true,
                ..Default::default()
            })
        }
    };
    let net::Announcement {
        root_is_dir,
        source,
        one_stream,
    } = announced;
    // A pull of one file that travels whole: the server sends it on the control connection
    // and refuses the joins, which nobody waits for (their threads end with the refusal).
    if one_stream {
        joining.clear();
        plan.streams = 1;
        most_streams = 1;
    }
    tracing::info!(
        server = addr,
        ?direction,
        rtt_ms = rtt.as_secs_f64() * 1e3,
        streams = plan.streams,
        tcp_buffer = ?plan.tcp_buffer,
        "session opened"
    );
    let (gate_open_tx, gate_open) = bounded(0);
    let session = Session {
        addr: addr.to_string(),
        key: key.clone(),
        id,
        direction,
        root_is_dir,
        source,
        to_parent: AtomicBool::new(false),
        rtt_estimate: rtt,
        open_sent,
        rtt_opened,
        rtt_probed: AtomicU64::new(0),
        plan,
        limits,
        tcp_buffer: options.tcp_buffer,
        auto: options.streams.is_none(),
        most_streams,
        joining: Mutex::new(joining),
        joined: AtomicUsize::new(0),
        state: Mutex::new(SessionState {
            gate: CommitGate::new(),
            opened: None,
        }),
        changed: Condvar::new(),
        gate_open_tx: Mutex::new(Some(gate_open_tx)),
        gate_open,
    };
    Ok((session, control))
}

impl Session {
    /// Joins the streams planned beyond the control connection, handing each to
    /// `on_joined` as soon as it has joined; the commit gate knows every planned stream once
    /// this returns.
    pub fn join_planned(&self, on_joined: impl FnMut(SessionConn)) -> Result<(), TransferError> {
        let joined = self.join(self.plan.streams.saturating_sub(1), on_joined);
        lock(&self.state).gate.all_started();
        self.gate_changed();
        joined
    }

    /// A stream not announced yet holds the commit gate until it is announced or refused, or
    /// has run out of batches holding none unannounced ([`Session::settled`]). Called for
    /// the control connection and the planned streams of a push, before
    /// [`Session::join_planned`] returns.
    pub fn expect_announcement(&self) {
        lock(&self.state).gate.joining();
    }

    /// A stream that held the commit gate was announced or refused, or can lose nothing
    /// (see `roles::push`'s `Lanes::next`).
    pub fn settled(&self) {
        lock(&self.state).gate.settled();
        self.gate_changed();
    }

    fn gate_changed(&self) {
        if lock(&self.state).gate.open() {
            lock(&self.gate_open_tx).take();
        }
    }

    /// Sends a push's `Commit` on the control connection (`conn` and its machine) as soon as
    /// its own stream has ended, while the other streams finish: the server's totals then
    /// come back without a round trip of their own. Waits for the commit gate first: the
    /// server forgets the session once it answers, and a join that carried batches must have
    /// been announced by then. `totals` is what the client sent in all, which the server
    /// checks. (A pull's `Commit` goes right behind its `Open`, see `roles::pull`.)
    pub fn commit(
        &self,
        conn: &mut net::Conn,
        machine: &Mutex<sprat_proto::session::client::ClientStream>,
        totals: sprat_proto::Totals,
    ) -> Result<(), TransferError> {
        self.wait_planned();
        tracing::debug!(server = self.addr, "commit");
        let commit = lock(machine)
            .commit(totals)
            .map_err(|e| conn.session_error(e))?;
        conn.send(&commit)
    }

    /// Waits until the planned streams have joined and each push stream among them that sent
    /// batches has read its `Joined` or been refused (and handed back what it sent).
    pub fn wait_planned(&self) {
        let _ = self.gate_open.recv();
    }

    /// Disconnected once [`Session::wait_planned`] would return (to wait in a `select!`).
    pub fn planned(&self) -> &Receiver<()> {
        &self.gate_open
    }

    /// The path's round trip: the least of the estimate from the hello, the round trip to the
    /// `Opened` once it arrived, and a probe's once one came.
    pub fn rtt(&self) -> Duration {
        [&self.rtt_opened, &self.rtt_probed]
            .into_iter()
            .map(|m| m.load(Ordering::Relaxed))
            .filter(|&n| n != 0)
            .fold(self.rtt_estimate, |least, n| {
                least.min(Duration::from_nanos(n))
            })
    }

    /// What the push's `Opened` said of where its file went (see [`Session::to_parent`]).
    pub fn set_to_parent(&self, to_parent: bool) {
        self.to_parent.store(to_parent, Ordering::Relaxed);
    }

    /// Whether the push's server put its single file at the path's parent.
    pub fn to_parent(&self) -> bool {
        self.to_parent.load(Ordering::Relaxed)
    }

    /// Records whether a push's control connection read `Opened` (true) or failed first.
    pub fn set_opened(&self, opened: bool) {
        if opened {
            let took = nanos(self.open_sent.elapsed()).max(1);
            let _ = self
                .rtt_opened
                .compare_exchange(0, took, Ordering::Relaxed, Ordering::Relaxed);
        }
        lock(&self.state).opened.get_or_insert(opened);
        self.changed.notify_all();
    }

    /// Whether a push's control connection read `Opened`, once it is known. A joining stream
    /// refused before its `Joined` asks this first: if the `Open` failed, the control
    /// connection reports why, and the join's refusal is only a consequence.
    pub fn wait_opened(&self) -> bool {
        let guard = lock(&self.state);
        let (guard, _) = unpoisoned(
            self.changed
                .wait_timeout_while(guard, OPENED_PATIENCE, |s| s.opened.is_none()),
        );
        guard.opened.unwrap_or(true)
    }

    /// Joins `n` more connections to the session, in parallel (those that joined while the
    /// session opened count first), and hands each to `on_joined` as soon as it has joined.
    /// Returns the first failure, once every attempt has ended.
    pub fn join(
        &self,
        n: usize,
        mut on_joined: impl FnMut(SessionConn),
    ) -> Result<(), TransferError> {
        let early = std::mem::take(&mut *lock(&self.joining));
        let fresh = n.saturating_sub(early.len());
        let (done_tx, done) = unbounded::<Result<SessionConn, TransferError>>();
        std::thread::scope(|s| {
            for handle in early {
                let done_tx = done_tx.clone();
                s.spawn(move || {
                    let joined = handle.join().unwrap_or_else(|_| {
                        Err(TransferError::Local("a connecting thread failed".into()))
                    });
                    let _ = done_tx.send(joined);
                });
            }
            for _ in 0..fresh {
                let done_tx = done_tx.clone();
                s.spawn(move || {
                    // Streams added later wait for `Joined`: a join that arrives after the
                    // session ended must fail before it takes any data.
                    let _ = done_tx.send(join_one(
                        &self.addr,
                        &self.key,
                        self.id,
                        self.plan.tcp_buffer,
                        self.direction,
                        true,
                    ));
                });
            }
            drop(done_tx);
            let mut failed: Option<TransferError> = None;
            for joined in done {
                match joined {
                    Ok(conn) => {
                        self.joined.fetch_add(1, Ordering::Relaxed);
                        on_joined(conn)
                    }
                    // A machine that is not the server is the failure to report, whatever
                    // else failed.
                    Err(e) if failed.as_ref().is_none_or(|f| !f.is_authentication()) => {
                        failed = Some(e)
                    }
                    Err(_) => {}
                }
            }
            failed.map_or(Ok(()), Err)
        })
    }

    /// The streams that carried the session, at most `most` at once: the control connection
    /// and those that joined, less the `refused` joins the server turned away after they
    /// had started (a push's, which sends before its `Joined`).
    pub fn streams_used(&self, most: usize, refused: usize) -> usize {
        let started = 1 + self.joined.load(Ordering::Relaxed);
        most.min(started.saturating_sub(refused)).max(1)
    }

    /// Grows the session's streams while throughput grows (hill climbing, see
    /// [`tune::Adapter`]), until `finished` says the data ran out or the transfer failed.
    /// `progress` counts bytes delivered; `apply` starts streams on new connections or
    /// retires the newest ones. A push that started wide retires what the path does not need
    /// at the first step that finds the path short, by its own round trips or by `probe`'s
    /// (measured on a connection of its own). Returns the most streams open at once.
    pub fn adapt(
        &self,
        progress: &AtomicU64,
        finished: impl Fn() -> bool,
        probe: Option<&Receiver<Duration>>,
        mut apply: impl FnMut(Change),
    ) -> usize {
        let mut adapter = Adapter::new(self.plan.streams, self.most_streams);
        let mut most = self.plan.streams;
        let interval = tune::adapt_interval(self.rtt());
        // Measure only the later part of each interval: new streams first leave slow start.
        let settle = interval.mul_f64(0.4);
        // Only a push can end one of its streams early (a pull's server sends on every stream
        // until its data runs out). Decided once the path is known short, or known long from
        // both the `Opened` and the probe (or the probe failed).
        let mut wide_start_open = self.direction == Direction::Push && self.started_wide();
        let mut probe = probe;
        while !adapter.settled() {
            if !sleep_unless(settle, &finished) {
                break;
            }
            if wide_start_open {
                match self.review_wide_start(&mut probe, adapter.streams()) {
                    WideStart::Retire(surplus) => {
                        tracing::debug!(
                            surplus,
                            rtt_ms = self.rtt().as_secs_f64() * 1e3,
                            "late hello on a short path: retiring the wide start's surplus"
                        );
                        adapter = Adapter::new(adapter.streams() - surplus, self.most_streams);
                        apply(Change::Retire(surplus));
                        wide_start_open = false;
                    }
                    WideStart::Keep => wide_start_open = false,
                    WideStart::Undecided => {}
                }
            }
            let (from, at) = (progress.load(Ordering::Relaxed), Instant::now());
            if !sleep_unless(interval - settle, &finished) {
                break;
            }
            let delivered = progress.load(Ordering::Relaxed).saturating_sub(from);
            let rate = delivered as f64 / at.elapsed().as_secs_f64().max(1e-6);
            let bound = (adapter.streams() as u64 * self.plan.window) as f64
                / self.rtt().as_secs_f64().max(1e-6);
            let step = adapter.observe(rate, bound);
            tracing::debug!(
                rate_mb_s = rate / 1e6,
                streams = adapter.streams(),
                ?step,
                "adapt"
            );
            match step {
                Step::Add(n) => {
                    let joined = self.join(n, |conn| apply(Change::Grow(Box::new(conn))));
                    most = most.max(adapter.streams());
                    // The transfer goes on with the streams it has, unless what answered a
                    // join was not the server (which no longer matters once the transfer has
                    // finished on the streams that did join).
                    if let Err(e) = joined {
                        if e.is_authentication() && !finished() {
                            apply(Change::Failed(e));
                        }
                        break;
                    }
                }
                Step::Retire(n) => apply(Change::Retire(n)),
                Step::Hold => {}
            }
        }
        most
    }

    /// Streams an automatic session wants on a path of round trip `rtt`.
    fn wanted_streams(&self, rtt: Duration) -> usize {
        tune::start_plan(&self.limits, rtt, None, self.tcp_buffer).streams
    }

    /// Whether the session started wide: its hello came late, so it opened more streams than
    /// the round trip it then estimated calls for (see [`tune::WIDE_START_STREAMS`]).
    pub fn started_wide(&self) -> bool {
        self.auto && self.plan.streams > self.wanted_streams(self.rtt_estimate)
    }

    /// One adapting step's look at a session that started wide, with `open` streams: takes the
    /// probe's round trip if it came (then forgets the probe, as when it failed), and says
    /// whether the path proved short, so the streams beyond what it wants go; long (the
    /// `Opened` and the probe both in), so they stay; or neither yet. Short means the hello,
    /// two round trips after `connect`, would have come within [`tune::HELLO_GRACE`]: it came
    /// late because the server or this host was busy, not because the path is long. On a long
    /// path the early streams are what shortens slow start.
    fn review_wide_start(&self, probe: &mut Option<&Receiver<Duration>>, open: usize) -> WideStart {
        match probe.map(|p| p.try_recv()) {
            Some(Ok(rtt)) => {
                self.rtt_probed.store(nanos(rtt).max(1), Ordering::Relaxed);
                *probe = None;
            }
            Some(Err(TryRecvError::Disconnected)) => *probe = None,
            Some(Err(TryRecvError::Empty)) | None => {}
        }
        let rtt = self.rtt();
        let surplus = open.saturating_sub(self.wanted_streams(rtt));
        if rtt * 2 < tune::HELLO_GRACE && surplus > 0 {
            WideStart::Retire(surplus)
        } else if probe.is_none() && self.rtt_opened.load(Ordering::Relaxed) != 0 {
            WideStart::Keep
        } else {
            WideStart::Undecided
        }
    }

    /// The report's account of the path: measurements, choices and the tail.
    pub fn report(&self, streams_max: usize, streams_end: usize, tail: &Tail) -> PathReport {
        let (tail_s, tail_idle_s) = tail.summary();
        PathReport {
            rtt_ms: self.rtt().as_secs_f64() * 1e3,
            auto_streams: self.auto,
            streams_start: self.plan.streams,
            streams_max,
            streams_end,
            tcp_buffer: self.plan.tcp_buffer,
            window_bytes: self.plan.window,
            covered_bytes_per_s: (streams_max as u64 * self.plan.window) as f64
                / self.rtt().as_secs_f64().max(1e-6),
            tail_s,
            tail_idle_s,
        }
    }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// How long a refused join waits to learn whether its session's `Open` succeeded.
const OPENED_PATIENCE: Duration = Duration::from_secs(30);

/// Connects a stream to the session `id`: authenticates and sends `Join`; with `wait`, also
/// reads `Joined`, else leaves it to be read (its machine is not announced yet).
fn join_one(
    addr: &str,
    key: &Credentials,
    id: [u8; 16],
    tcp_buffer: Option<u64>,
    direction: Direction,
    wait: bool,
) -> Result<SessionConn, TransferError> {
    let dialed = net::dial_session(addr, key, tcp_buffer, direction, Role::Joining)?;
    let mut c = dialed.authenticate(Message::Join { session: id })?;
    if wait {
        c.await_announcement()?;
    }
    Ok(c)
}

/// What [`Session::adapt`] asks of the transfer.
pub(crate) enum Change {
    /// Start a stream on this newly joined connection.
    Grow(Box<SessionConn>),
    /// End this many of the most recently started streams.
    Retire(usize),
    /// Stop the transfer: a join found a machine that is not the server.
    Failed(TransferError),
}

/// What an adapting step makes of a wide start (see [`Session::review_wide_start`]).
enum WideStart {
    /// The path is short: retire this many streams.
    Retire(usize),
    /// The path is long: keep them.
    Keep,
    /// Not known yet.
    Undecided,
}

/// Sleeps `d` in short slices; false as soon as `finished` holds.
fn sleep_unless(d: Duration, finished: &impl Fn() -> bool) -> bool {
    let until = Instant::now() + d;
    loop {
        if finished() {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(10)));
    }
}

/// When each stream that carried data to the end ran out of it.
#[derive(Default)]
pub(crate) struct Tail {
    ends: Mutex<Vec<Instant>>,
}

impl Tail {
    pub fn record(&self) {
        lock(&self.ends).push(Instant::now());
    }

    /// (last end - first end, mean of last end - each end), in seconds.
    pub fn summary(&self) -> (f64, f64) {
        let ends = lock(&self.ends);
        let (Some(first), Some(last)) = (ends.iter().min(), ends.iter().max()) else {
            return (0.0, 0.0);
        };
        let idle: f64 =
            ends.iter().map(|e| (*last - *e).as_secs_f64()).sum::<f64>() / ends.len() as f64;
        ((*last - *first).as_secs_f64(), idle)
    }
}
