//! `sprat serve`: accepts connections, authenticates them, and runs push and pull sessions
//! confined to the exports the client's credential reaches (see [`super::exports`]).
//!
//! A session is opened by one connection (the control connection) and joined by the others of
//! the same client; all of them carry batches. Push: each connection's batches go to one
//! writer pool and are acknowledged after they are written; `Commit` on the control connection
//! applies directory attributes and returns the totals. Pull: every connection takes batches
//! from one source pipeline until it is drained, then sends `End`.
//!
//! Against hostile or broken clients: places are bounded in all and per client address
//! (`session::admission`), while authenticating and after; what clients' data takes in memory
//! is charged to one budget (`crate::budget`; `super::bound` bounds the whole server); a
//! session whose connections move no byte for the idle timeout is closed by the stall
//! watchdog (`session::stall`), and so is a namespace connection that sends no request for as
//! long; a write that moves nothing for as long fails (the socket's send timeout), and TCP
//! keepalive finds peers that vanished.

use super::exports::{Exports, ExportsConfig, Reach};
use super::requests;
use crate::budget::{Budget, Charge, Refused};
use crate::config::TransferOptions;
use crate::error::{code_for, TransferError};
use crate::host_memory;
use crate::net::{self, Conn};
use crate::pipeline::receive::{self, Flow, ReceiveLane, Take};
use crate::pipeline::send::{self, Next};
use crate::pipeline::sink::{BatchOutcome, WriteJob, WriterPool};
use crate::pipeline::skip::{digest_from_bytes, DestIndex, SkipCounts, SkipRule};
use crate::pipeline::source::{self, Skip, SourceHandle};
use crate::report::Counts;
use crate::session::admission::{Full, HandshakeSlot, Handshakes, Places, Use};
use crate::session::opening::FirstRoundTrip;
use crate::session::registry::{Registry, SessionId, Taken};
use crate::session::stall;
use crate::sync::{lock, unpoisoned, Abort, Cancel, Signal};
use crate::text::printable;
use crossbeam_channel::{bounded, Receiver, Sender};
use sprat_proto::auth::{Credential, TokenKey};
use sprat_proto::namespace::Request;
use sprat_proto::session::server::{Event, ServerStream};
use sprat_proto::session::{Direction, JOIN_PATIENCE};
use sprat_proto::{Batch, DestCheck, ErrorCode, Operation, RemoteStats, Totals, TransferProgress};
use sprat_store::{display_path, StoreError, TreeWriter};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Settings of a server.
pub struct ServerConfig {
    /// What it exports, and to which tokens.
    pub exports: ExportsConfig,
    /// The server's key and whether plain (unencrypted) connections are allowed too.
    pub tls: net::ServerTls,
    pub options: TransferOptions,
    /// Most authenticated connections served at once; more are refused (each may hold a
    /// batch in memory). The streams of third-party copies this server makes count too.
    pub max_connections: usize,
    /// Most of those from one client address (at least 1, at most `max_connections`).
    pub max_connections_per_address: usize,
    /// Most bytes of clients' data held in memory at once (see `super::bound`); at least
    /// [`MIN_CLIENT_MEMORY`].
    pub max_client_memory: u64,
    /// A session whose connections move no byte for this long, or a connection of namespace
    /// requests that sends none for this long, is closed; a write that moves nothing for this
    /// long fails. Zero: never.
    pub idle_timeout: Duration,
    /// Whether clients may ask this server to push to another one (`SendTo`, a third-party
    /// copy).
    pub third_party: bool,
}

/// Default of [`ServerConfig::idle_timeout`]: far beyond any pause of a working client (a
/// client's own stall timeout is 60 s by default).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Default of [`ServerConfig::max_client_memory`] on a machine of at most 8 GiB (larger ones
/// get an eighth of their memory, see [`default_client_memory`]).
pub const DEFAULT_CLIENT_MEMORY: u64 = 1 << 30;

/// Default of [`ServerConfig::max_client_memory`]: an eighth of this machine's memory (or of
/// its control group's limit, if lower), at least [`DEFAULT_CLIENT_MEMORY`]. A pulling
/// client's index takes about 200 bytes a file in the budget, so a fixed 1 GiB refused
/// re-syncs of more than a few million files on servers that had memory to spare for them.
pub fn default_client_memory() -> u64 {
    let total = host_memory::meminfo_bytes("MemTotal").unwrap_or(0);
    // A server in a container may use no more than its control group allows.
    let allowed = host_memory::cgroup_limit().map_or(total, |limit| limit.min(total));
    (allowed / 8).max(DEFAULT_CLIENT_MEMORY)
}

/// Least [`ServerConfig::max_client_memory`]: one address may hold half of it, which must
/// take the largest batch frame the protocol allows.
pub const MIN_CLIENT_MEMORY: u64 = 2 * sprat_proto::frame::MAX_BATCH_PAYLOAD as u64;

/// How long an `Open` or a request waits for a place when none is free, before the server
/// answers that it is busy.
const PLACE_PATIENCE: Duration = Duration::from_millis(500);

/// Default of [`ServerConfig::max_connections_per_address`] for `max_connections`: three
/// quarters, so that one client host (or all its sessions together) leaves a quarter of the
/// places to the others.
pub fn default_connections_per_address(max_connections: usize) -> usize {
    (max_connections * 3 / 4).max(1)
}

/// A bound, not yet running server.
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

/// Stops a running [`Server`] from another thread (on SIGTERM, say): no new connection is
/// accepted ([`Server::run`] returns), and the transfers running may finish.
pub struct StopHandle {
    /// The listening socket (a duplicate of the server's): shut down, it wakes the accept.
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl StopHandle {
    /// Accepts no new connection from now on: [`Server::run`] returns. Returns how many
    /// connections are being served (those of transfers running, and namespace requests).
    pub fn stop_accepting(&self) -> usize {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // A listening socket shut down makes a blocked `accept` fail at once.
        let _ = socket2::SockRef::from(&self.listener).shutdown(std::net::Shutdown::Both);
        self.connections()
    }

    /// The connections being served now (authenticated; third-party copies' streams too).
    pub fn connections(&self) -> usize {
        self.shared.places.held()
    }

    /// Waits until no connection is served any more, or `grace` has passed; returns how
    /// many are still served.
    pub fn wait_drained(&self, grace: Duration) -> usize {
        self.shared.places.wait_none_held(Instant::now() + grace)
    }
}

struct Shared {
    exports: Exports,
    tls: net::ServerTls,
    options: TransferOptions,
    sessions: Registry<Session>,
    /// The trees push sessions are writing.
    claims: Arc<crate::session::claims::Claims>,
    /// Authenticated connections being served (and third-party copies' streams).
    places: Places,
    /// Connections still in the handshake.
    handshakes: Handshakes,
    /// Set once the server stops accepting connections ([`StopHandle`]).
    stopping: AtomicBool,
    /// The log of failed handshakes (a wrong token, no hello, not TLS...), at most a line a
    /// second: a flood of strangers must not flood the log.
    failed_handshakes: Mutex<RefusalLog>,
    /// What clients' data may take in memory.
    budget: Arc<Budget>,
    idle_timeout: Duration,
    third_party: bool,
    tickets: Mutex<Vec<Ticket>>,
    next_ticket: AtomicU64,
}

/// An open session, registered by the id its client chose.
struct Session {
    /// Watches every connection of the session: shuts them all down when the session fails
    /// or none of them moves a byte for the idle timeout (see `session::stall`).
    watch: Abort,
    kind: SessionKind,
}

enum SessionKind {
    Push(PushSession),
    Pull(PullSession),
}

struct PushSession {
    /// `None`: a discarding push (batches verified and counted, nothing written).
    writer: Option<Arc<TreeWriter>>,
    jobs: Mutex<Option<Sender<WriteJob>>>,
    pool: Mutex<Option<WriterPool>>,
    counts: Mutex<Counts>,
    /// What the written batches held, checked against the `Commit`'s totals.
    received: Box<Mutex<Totals>>,
    network_ns: AtomicU64,
    connections: AtomicUsize,
    receiving: Receiving,
    /// What the client said it sends (a tree or one file).
    root_is_dir: bool,
    /// A single file the client left to this server to put in `DST` or at `DST` itself went
    /// to `DST` (see [`resolve_or_parent`]); said in `Opened`.
    to_parent: bool,
}

/// The streams of a push session still receiving. A client may send `Commit` as soon as its
/// control connection's own stream ends; the server answers once every stream has ended.
/// A client does not wait for the announcement of a stream that sent no batch before it
/// commits (protocol 13): such a stream's `Join` may come once every stream has ended, and
/// is refused (the session is closed to new streams from then on).
#[derive(Default)]
struct Receiving {
    /// Streams receiving, and whether the session is closed to new ones.
    streams: Mutex<(usize, bool)>,
    none_left: Condvar,
}

impl Receiving {
    /// Counts a stream in, before it is announced (`Opened`, `Joined`), so that a `Commit`
    /// racing with a new stream waits for it; `None` once the session is closed.
    fn enter(&self) -> Option<ReceivingStream<'_>> {
        let mut streams = lock(&self.streams);
        if streams.1 {
            return None;
        }
        streams.0 += 1;
        Some(ReceivingStream(self))
    }

    /// Waits until every stream has ended, then closes the session to new ones.
    fn wait_until_none(&self) {
        let mut streams = lock(&self.streams);
        while streams.0 > 0 {
            streams = unpoisoned(self.none_left.wait(streams));
        }
        streams.1 = true;
    }
}

/// A stream counted in [`Receiving`] until dropped.
struct ReceivingStream<'a>(&'a Receiving);

impl Drop for ReceivingStream<'_> {
    fn drop(&mut self) {
        lock(&self.0.streams).0 -= 1;
        self.0.none_left.notify_all();
    }
}

struct PullSession {
    batches: Receiver<Batch>,
    source: Mutex<Option<SourceHandle>>,
    root_is_dir: bool,
    /// Where the source directory is on this host (told in `Opened`).
    source_id: sprat_proto::SourceId,
    /// The source is one file that travels whole: the control connection carries it, and
    /// the session's joins are refused (told in `Opened`, so that the client waits for none).
    one_stream: bool,
    /// What the client's destination had (a checked pull), reported with `Done`.
    skipped: Arc<SkipCounts>,
    /// The memory its index takes, until the session ends.
    _index: Charge,
    /// When the session last told the client what was skipped, and what.
    told: Mutex<(Option<Instant>, (u64, u64))>,
    /// Set by the first connection that finds the source drained: wakes the connections
    /// holding in their first round trip (their `End` goes behind their last batch at once).
    source_ended: Signal,
}

impl PullSession {
    /// The `Progress` one of the session's connections is to send now, between batches: the
    /// client counts what it writes itself, but not what the check spared. When that changed,
    /// at most once per [`PROGRESS_EVERY`] for the whole session (the first time at once),
    /// on whichever connection comes first (one may be busy sending a large batch).
    fn progress_due(&self) -> Option<TransferProgress> {
        let (files, bytes, _) = self.skipped.totals();
        let mut told = lock(&self.told);
        let due = told.0.is_none_or(|at| at.elapsed() >= PROGRESS_EVERY);
        if !due || told.1 == (files, bytes) {
            return None;
        }
        *told = (Some(Instant::now()), (files, bytes));
        Some(TransferProgress {
            skipped_files: files,
            skipped_bytes: bytes,
            ..TransferProgress::default()
        })
    }
}

/// Most entries a pulling client's index of its destination may hold (the clients' memory
/// budget, which the index is charged to as it arrives, most often ends it before).
const MAX_PULL_INDEX: usize = 64_000_000;
/// Bytes a digest of a pulling client's index takes in memory beyond its path, charged to the
/// clients' budget as it arrives (kept in a list until the index is complete, then in a table
/// by the entry's position).
const INDEX_DIGEST_COST: u64 = 96;

/// Reads a checked pull's index of the client's destination (`Entries` up to `ReplyEnd`,
/// each read within the handshake's patience), charging what it takes to `charge`.
fn read_index(
    served: &mut Served,
    check: DestCheck,
    charge: &mut Charge,
    only: Option<&[u8]>,
) -> Result<DestIndex, (ErrorCode, String)> {
    // A single file pulled into the client's directory (`into_dir`): of the index of that
    // directory, only the entries of NAME matter, as the file's own (the empty path).
    let kept = |path: &mut Vec<u8>| match only {
        None => true,
        Some(name) if path.as_slice() == name => {
            path.clear();
            true
        }
        Some(_) => false,
    };
    let mut charged = |bytes: u64| {
        charge.try_grow(bytes).map_err(|why| {
            let code = match why {
                Refused::Full => ErrorCode::Busy,
                _ => ErrorCode::BadRequest,
            };
            let text = format!(
                "the server cannot hold the destination's index: {why}; a server with a \
                 larger --max-client-memory can, or pull with --ignore-times (every file is \
                 sent again)"
            );
            (code, text)
        })
    };
    let mut listed = 0usize;
    let protocol = |why: String| (ErrorCode::Protocol, why);
    served
        .machine
        .expect_index(check == DestCheck::Checksum)
        .map_err(|e| protocol(e.to_string()))?;
    let _ = served
        .conn
        .stream
        .set_read_timeout(Some(sprat_proto::session::HANDSHAKE_TIMEOUT));
    // The client sends its files' owners when it sets them (by name, or by id without
    // names with `--numeric-ids`): a file whose owner alone differs gets its attributes.
    let mut index = DestIndex::default()
        .written_by_peer()
        .comparing_owners_by_name(true);
    let mut summed = Vec::new();
    let mut sums_read = 0usize;
    loop {
        let msg = served
            .conn
            .recv_control_raw()
            .map_err(|e| (ErrorCode::Io, e.to_string()))?;
        match served.machine.on_message(msg, Instant::now()) {
            Ok(Event::IndexPart(entries)) => {
                listed += entries.len();
                if listed > MAX_PULL_INDEX {
                    return Err((
                        ErrorCode::BadRequest,
                        format!(
                            "the destination's index has more than {MAX_PULL_INDEX} files; \
                             pull with --ignore-times (every file is sent again)"
                        ),
                    ));
                }
                let mut entries = entries;
                entries.retain_mut(|e| kept(&mut e.path));
                let bytes = entries.iter().map(|e| index.listed_cost(e)).sum();
                charged(bytes)?;
                entries.into_iter().for_each(|e| index.insert_listed(e));
            }
            // `--checksum`: digests of the files listed (before or after them); one of a path
            // not (yet) listed is kept until the end, within the same bound.
            Ok(Event::IndexSums(sums)) => {
                // Every digest read counts toward the bound (it bounds the reading); only
                // those kept are charged.
                sums_read += sums.len();
                if sums_read > MAX_PULL_INDEX {
                    return Err((
                        ErrorCode::BadRequest,
                        format!("the destination's index has more than {MAX_PULL_INDEX} digests"),
                    ));
                }
                let mut kept_sums = Vec::new();
                for (mut path, bytes) in sums {
                    let digest = digest_from_bytes(&bytes).ok_or_else(|| {
                        protocol(format!("a digest of {} bytes, not 16", bytes.len()))
                    })?;
                    if kept(&mut path) {
                        kept_sums.push((path, digest));
                    }
                }
                let bytes = kept_sums
                    .iter()
                    .map(|(path, _)| path.len() as u64 + INDEX_DIGEST_COST)
                    .sum();
                charged(bytes)?;
                summed.extend(kept_sums);
            }
            Ok(Event::IndexEnd) => break,
            Ok(other) => return Err(protocol(format!("unexpected {other:?} in an index"))),
            Err(e) => return Err(protocol(e.to_string())),
        }
    }
    served.conn.read_until(None);
    for (path, digest) in summed {
        index.set_digest(&path, digest);
    }
    Ok(index)
}

impl Server {
    /// Opens the exports' roots and binds the listening socket.
    pub fn bind(config: ServerConfig, addr: &str) -> Result<Server, TransferError> {
        let bound = super::bound::MemoryBound::of(&config);
        tracing::info!(
            mib = bound.whole_server() >> 20,
            "most memory the server holds, whatever its clients send"
        );
        let exports = Exports::open(config.exports)?;
        let (_, buffer) = crate::tune::TcpLimits::read().buffers(config.options.tcp_buffer);
        let listener = net::listen(addr, buffer)
            .map_err(|e| TransferError::Local(format!("cannot listen on {addr}: {e}")))?;
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                exports,
                tls: config.tls,
                options: config.options,
                sessions: Registry::default(),
                claims: Arc::default(),
                places: Places::new(
                    config.max_connections.max(1),
                    config.max_connections_per_address,
                ),
                handshakes: Handshakes::default(),
                stopping: AtomicBool::new(false),
                failed_handshakes: Mutex::new(RefusalLog::new(
                    "failed authentications, for any reason,",
                )),
                budget: Budget::new(config.max_client_memory.max(MIN_CLIENT_MEMORY)),
                idle_timeout: config.idle_timeout,
                third_party: config.third_party,
                tickets: Mutex::new(Vec::new()),
                next_ticket: AtomicU64::new(1),
            }),
        })
    }

    pub fn local_addr(&self) -> Result<SocketAddr, TransferError> {
        self.listener
            .local_addr()
            .map_err(|e| TransferError::Local(format!("cannot read the listening address: {e}")))
    }

    /// A handle that stops this server from another thread.
    pub fn stop_handle(&self) -> Result<StopHandle, TransferError> {
        let listener = self.listener.try_clone().map_err(|e| {
            TransferError::Local(format!("cannot duplicate the listening socket: {e}"))
        })?;
        Ok(StopHandle {
            listener,
            shared: self.shared.clone(),
        })
    }

    /// Accepts connections, one thread each, until its [`StopHandle`] stops it (the
    /// connections being served go on in their threads).
    pub fn run(self) -> Result<(), TransferError> {
        // Refusals are logged at most once a second, with how many went unlogged: a flood of
        // connections must not flood the log too.
        let mut refusals = RefusalLog::new("connections refused");
        for stream in self.listener.incoming() {
            if self.shared.stopping.load(Ordering::SeqCst) {
                return Ok(());
            }
            let stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("sprat serve: accept failed: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    continue;
                }
            };
            let addr = stream.peer_addr().ok();
            let peer = addr.map_or_else(|| "unknown peer".into(), |a| a.to_string());
            let ip = addr.map(|a| a.ip());
            // Connections still authenticating are bounded separately (and must finish within
            // a few seconds), in all and per client address, so idle strangers cannot take the
            // places of real clients. The place is given back when the slot is dropped: by the
            // connection's thread once authenticated (or failed, or panicked), or here with
            // the thread's closure if the thread cannot be started.
            // A connection authenticating for long may be closed for a newcomer: its handle.
            let slot = match self.shared.handshakes.admit(ip, stream.try_clone().ok()) {
                Ok((slot, evicted)) => {
                    if let Some(e) = evicted {
                        let from = e
                            .from
                            .map_or_else(|| "unknown peer".into(), |ip| ip.to_string());
                        let closed = format!("{from} (its oldest connection still authenticating, closed for {peer})");
                        refusals.refused(&closed, e.why);
                    }
                    slot
                }
                Err(why) => {
                    refusals.refused(&peer, why);
                    continue;
                }
            };
            guard_socket(&stream, self.shared.idle_timeout);
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new()
                .name("sprat-conn".into())
                .spawn(move || handle_connection(&shared, Conn::new(stream, peer), ip, slot));
            if let Err(e) = spawned {
                eprintln!("sprat serve: cannot start a connection thread: {e}");
            }
        }
        Ok(())
    }
}

/// How long TCP waits on a silent connection before it probes the peer, between probes, and
/// how many unanswered probes close it: a peer that vanished (powered off, cable pulled) is
/// found within about two minutes even where no idle timeout is set.
const KEEPALIVE: (Duration, Duration, u32) = (Duration::from_secs(60), Duration::from_secs(10), 6);

/// Sets TCP keepalive on an accepted socket, and a send timeout of `idle`: a write that moves
/// no byte for that long (a client that stopped reading, its window shut) fails instead of
/// holding its thread for ever. A session's connection drops it once announced: the
/// session's watchdog bounds it then (see `announce_and_serve`).
fn guard_socket(stream: &TcpStream, idle: Duration) {
    let socket = socket2::SockRef::from(stream);
    let (time, interval, retries) = KEEPALIVE;
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(time)
        .with_interval(interval)
        .with_retries(retries);
    let _ = socket.set_tcp_keepalive(&keepalive);
    if !idle.is_zero() {
        let _ = stream.set_write_timeout(Some(idle));
    }
}

/// A connection being served and its state machine.
struct Served {
    conn: Conn,
    machine: ServerStream,
}

impl Served {
    /// Refuses what the connection asked for: the machine drops what still arrives, and the
    /// socket lingers so that the client reads why (see [`Conn::refuse`]).
    fn refuse(&mut self, code: ErrorCode, text: String) {
        let error = self.machine.refuse(code, text);
        self.conn.refuse_with(&error);
    }

    /// Refuses with the error of its store.
    fn refuse_store(&mut self, e: &StoreError) {
        self.refuse(code_for(e), e.to_string());
    }
}

/// What a client is told when no place is free for it.
fn busy_text(places: &Places, full: Full) -> String {
    match full {
        Full::Server => format!(
            "server busy: {} connections already, try again later",
            places.max()
        ),
        Full::Address => format!(
            "server busy: this client address has {} connections already (sprat serve \
             --max-connections-per-address), try again later",
            places.per_address()
        ),
    }
}

/// A one-time credential for pushing one tree to this server (third-party transfers).
struct Ticket {
    id: u64,
    key: TokenKey,
    /// As the client named it (with the export's name, if the server has named exports).
    path: Vec<u8>,
    /// The export `path` lies in (the only one the ticket reaches).
    export: usize,
    /// Until when an unused ticket is valid, or (once `ended`) until when it still
    /// authenticates what set out while its session ran.
    expires: Instant,
    /// The push session opened with it: the ticket opens no other.
    session: Option<[u8; 16]>,
    /// The address that asked for it, whose unused tickets are counted against
    /// [`MAX_UNUSED_TICKETS_PER_ADDRESS`].
    issuer: Option<IpAddr>,
    /// Its session has ended. Until it expires, the ticket still authenticates what came
    /// late: a stream is told the session has ended, a listing (which may go after a single
    /// small file was sent) is answered. It opens no other session.
    ended: bool,
}

impl Ticket {
    /// Whether the ticket still authenticates anything at `now`.
    fn valid(&self, now: Instant) -> bool {
        (self.session.is_some() && !self.ended) || self.expires > now
    }
}

/// How long an unused ticket stays valid.
const TICKET_LIFETIME: Duration = Duration::from_secs(60);
/// How long what set out while a session opened with a ticket ran can still authenticate
/// with the ticket once the session has ended: a stream added late is then told the session
/// has ended, as a stream joining by token is, which the client takes in its stride; the
/// listing of the destination, which a single small file does not wait for, is answered.
/// An authentication failure would fail the copy that had just succeeded.
const ENDED_TICKET_GRACE: Duration = Duration::from_secs(30);
/// Most tickets outstanding at once: beyond, the oldest whose session has ended goes, else a
/// new one is refused as busy (the client tries again). An issued ticket that may still be
/// used is never taken back: a copy would fail with it.
const MAX_TICKETS: usize = 256;
/// Most unused tickets one address may hold: one client cannot fill the table and keep
/// everyone else's third-party copies out.
const MAX_UNUSED_TICKETS_PER_ADDRESS: usize = 64;

/// What an authenticated connection may do: name the exports its credential reaches, and
/// with a ticket only what the ticket was issued for (see [`ticket_allows`]).
struct Access {
    reach: Reach,
    ticket: Option<u64>,
}

/// A new ticket for a push to `path` in export `export`, asked for from `issuer`; refused
/// as busy when the table or the issuer's share of it is full.
fn issue_ticket(
    shared: &Shared,
    path: Vec<u8>,
    export: usize,
    issuer: Option<IpAddr>,
) -> Result<requests::IssuedTicket, (ErrorCode, String)> {
    let secret: [u8; 32] = net::random();
    let mut tickets = lock(&shared.tickets);
    let now = Instant::now();
    tickets.retain(|t| t.valid(now));
    let unused_of_issuer = tickets
        .iter()
        .filter(|t| t.session.is_none() && t.issuer == issuer)
        .count();
    if unused_of_issuer >= MAX_UNUSED_TICKETS_PER_ADDRESS {
        return Err((
            ErrorCode::Busy,
            format!(
                "this address holds {MAX_UNUSED_TICKETS_PER_ADDRESS} third-party tickets not used \
                 yet; try again once its copies have started"
            ),
        ));
    }
    if tickets.len() >= MAX_TICKETS {
        match tickets.iter().position(|t| t.ended) {
            Some(oldest_ended) => {
                tickets.remove(oldest_ended);
            }
            None => {
                return Err((
                    ErrorCode::Busy,
                    format!(
                        "{MAX_TICKETS} third-party copies are starting or running; try again later"
                    ),
                ))
            }
        }
    }
    tickets.push(Ticket {
        id: shared.next_ticket.fetch_add(1, Ordering::Relaxed),
        key: TokenKey::from_token(&secret),
        path,
        export,
        expires: now + TICKET_LIFETIME,
        session: None,
        issuer,
        ended: false,
    });
    Ok((secret, TICKET_LIFETIME))
}

/// Serves one connection from `ip`, which holds `slot` among those authenticating until it
/// has said what it is for.
fn handle_connection(shared: &Shared, mut conn: Conn, ip: Option<IpAddr>, slot: HandshakeSlot) {
    let (ids, keys): (Vec<(u64, usize)>, Vec<TokenKey>) = {
        let now = Instant::now();
        let mut tickets = lock(&shared.tickets);
        tickets.retain(|t| t.valid(now));
        tickets
            .iter()
            .map(|t| ((t.id, t.export), t.key.clone()))
            .unzip()
    };
    let authenticated = net::accept(&mut conn, &shared.exports.keys, keys, &shared.tls);
    let (machine, access) = match authenticated {
        Ok((m, Credential::Ticket(i))) => {
            let Some(&(id, export)) = ids.get(i) else {
                return;
            };
            let access = Access {
                reach: Reach::one(export),
                ticket: Some(id),
            };
            (m, access)
        }
        Ok((m, credential)) => {
            let access = Access {
                reach: shared.exports.reach_of(credential),
                ticket: None,
            };
            (m, access)
        }
        // A client that closed the connection before it proved anything changed its mind
        // (a connection dialled ahead for a session that did not need it, or a join its
        // session no longer waited for): not a failed authentication.
        Err(e) if e.is_peer_closed() => {
            tracing::debug!(%e, "closed by the client before it authenticated");
            return;
        }
        Err(e) => {
            lock(&shared.failed_handshakes).log(|| printable(&e.to_string()).into_owned());
            return;
        }
    };
    let mut served = Served { conn, machine };
    // The first message travels with the authentication; it says what the connection is for
    // (read under the machine's deadline, which `accept` set).
    let first = served.conn.recv_control_raw();
    let Ok(first) = first else { return };
    served.conn.read_until(None);
    let event = match served.machine.on_message(first, Instant::now()) {
        Ok(event) => event,
        Err(_) => {
            return served.refuse(
                ErrorCode::Protocol,
                "expected Open, Join or a request".into(),
            )
        }
    };
    // A join may not take the last places (see `Use::Stream`), nor wait for one: its session
    // goes on without it. An `Open` or a request waits a moment for a place the client may
    // be giving back (its listing just ended). The wait counts as the handshake's.
    let (r#for, patience) = match event {
        Event::Join { .. } => (Use::Stream, Duration::ZERO),
        _ => (Use::OpenOrRequest, PLACE_PATIENCE),
    };
    let place = shared.places.take_within(ip, 1, r#for, patience);
    drop(slot);
    let _place = match place {
        Ok(place) => place,
        Err(full) => {
            let text = busy_text(&shared.places, full);
            eprintln!("sprat serve: refusing {}: {text}", served.conn.peer);
            // Its joins, which may have been admitted, must not wait for it.
            if let Event::Open { session, .. } = &event {
                shared.sessions.abandon(session);
            }
            return served.refuse(ErrorCode::Busy, text);
        }
    };
    let ticket = access.ticket;
    // A join may arrive before the `Open` of its session has been served (the client sends
    // both at once): it waits for the session, and a ticket's join is checked again then.
    if let Err((code, text)) = ticket_allows(shared, ticket, &event, true) {
        if let Event::Open { session, .. } = &event {
            shared.sessions.abandon(session);
        }
        return served.refuse(code, text);
    }
    match event {
        Event::Open {
            session,
            op,
            path,
            selection,
        } => {
            let opened = Opened {
                id: session,
                op,
                path,
                selection,
                access: &access,
                ip,
            };
            open_session(shared, served, opened);
            // Joins waiting for a session that could not be opened fail now.
            shared.sessions.abandon(&session);
        }
        Event::Join { session } => {
            let Some(found) = shared.sessions.wait(&session, JOIN_PATIENCE) else {
                return served.refuse(ErrorCode::UnknownSession, "no such session".into());
            };
            if let Err((code, text)) =
                ticket_allows(shared, ticket, &Event::Join { session }, false)
            {
                return served.refuse(code, text);
            }
            let _ = announce_and_serve(shared, served, &found, ip, false);
        }
        Event::Request(mut req) => {
            let issue = |path: Vec<u8>, export: usize| issue_ticket(shared, path, export, ip);
            // A third-party copy's streams take places too (the client's address's).
            let places = |wanted: usize| shared.places.take(ip, wanted, Use::Stream).ok();
            let ctx = requests::Context {
                exports: &shared.exports,
                reach: &access.reach,
                options: &shared.options,
                issue_ticket: &issue,
                third_party: shared.third_party,
                places: &places,
            };
            let idle = shared.idle_timeout;
            // While a request is answered, a second handle says `Working` every
            // `WORKING_EVERY` (review 2026-11-30 of sprat in scripts, F1: a client could only
            // wait for ever).
            let beat = served.conn.try_clone().ok();
            std::thread::scope(|s| {
                let (busy, working) = crossbeam_channel::unbounded::<bool>();
                if let Some(beat) = beat {
                    s.spawn(move || say_working(beat, &working, WORKING_EVERY));
                }
                // Several requests may follow one another on one connection, each within the
                // idle timeout of the answer to the one before.
                loop {
                    let _ = busy.send(true);
                    let answered = requests::answer(&ctx, &mut served.conn, req);
                    let _ = busy.send(false);
                    if answered.is_err() {
                        return;
                    }
                    served
                        .conn
                        .read_until((!idle.is_zero()).then(|| Instant::now() + idle));
                    let next = match served.conn.recv_control_raw() {
                        Ok(msg) => served.machine.on_message(msg, Instant::now()),
                        Err(e) => {
                            tracing::info!(peer = %served.conn.peer, %e, "namespace connection closed");
                            return;
                        }
                    };
                    served.conn.read_until(None);
                    req = match next {
                        Ok(Event::Request(r)) => r,
                        _ => return,
                    };
                    let asked = Event::Request(req);
                    if let Err((code, text)) = ticket_allows(shared, ticket, &asked, false) {
                        return served.refuse(code, text);
                    }
                    let Event::Request(r) = asked else { return };
                    req = r;
                }
            });
        }
        // The machine hands out nothing else for a first message.
        _ => served.refuse(
            ErrorCode::Protocol,
            "expected Open, Join or a request".into(),
        ),
    }
}

/// How often a server still at a request says `Working` on its connection: well within a
/// client's patience (`remote::ANSWER_PATIENCE`).
pub(crate) const WORKING_EVERY: Duration = Duration::from_secs(10);

/// Says `Working` on `conn` (a second handle on a request's connection) each time a request
/// has been answered for `every` ([`WORKING_EVERY`]) with no change: `busy` says when an
/// answer starts (`true`) and ends; it closing ends this.
fn say_working(mut conn: Conn, busy: &crossbeam_channel::Receiver<bool>, every: Duration) {
    let mut answering = false;
    loop {
        match busy.recv_timeout(every) {
            Ok(now) => answering = now,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                if answering && conn.send(&sprat_proto::Message::Working).is_err() {
                    return;
                }
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// What a connection authenticated by `ticket` may send: an `Open` of a push to the ticket's
/// path while the ticket is unused, a `Join` of the session it opened (with `pending`, also
/// while that session is not open yet), or a listing of the ticket's path (every request on
/// the connection is checked). `Ok` without a ticket.
fn ticket_allows(
    shared: &Shared,
    ticket: Option<u64>,
    first: &Event,
    pending: bool,
) -> Result<(), (ErrorCode, String)> {
    let Some(id) = ticket else { return Ok(()) };
    let tickets = lock(&shared.tickets);
    let Some(t) = tickets.iter().find(|t| t.id == id) else {
        return Err((ErrorCode::AuthFailed, "the ticket has expired".into()));
    };
    let allowed = match first {
        // Exactly there: not a push that the server may put at the path's parent.
        Event::Open {
            op: Operation::Push {
                or_parent: false, ..
            },
            path,
            ..
        } => t.session.is_none() && *path == t.path,
        Event::Join { session } => t.session == Some(*session) || (pending && t.session.is_none()),
        // The source server of a third-party copy lists the destination before it pushes,
        // and removes the temporary names a killed writer left below it (nothing else).
        Event::Request(Request::List {
            path,
            or_parent: false,
            ..
        }) => *path == t.path,
        Event::Request(Request::Remove {
            path,
            recursive: false,
        }) => {
            let below = t.path.is_empty()
                || (path.starts_with(&t.path) && path.get(t.path.len()) == Some(&b'/'));
            below && crate::pipeline::skip::is_leftover(path)
        }
        _ => false,
    };
    if allowed {
        Ok(())
    } else {
        Err((
            ErrorCode::PermissionDenied,
            "a ticket only allows the push it was issued for".into(),
        ))
    }
}

/// What an `Open` asked for, and who asked.
struct Opened<'a> {
    id: SessionId,
    op: Operation,
    path: Vec<u8>,
    selection: sprat_proto::Selection,
    access: &'a Access,
    ip: Option<IpAddr>,
}

/// Where a push `or_parent` of a single file goes (see `sprat_proto::Operation::Push`): to
/// its path, `DST/NAME`, if `DST` is a directory here (not a symlink to one: as `Stat`
/// describes it), then refused at a symlink there as with `no_link_at_path`; else to `DST`
/// itself. Returns the push to that place (without `or_parent`), its path, and whether it is
/// `DST`. Any other `Open` is returned as it came.
fn resolve_or_parent(
    shared: &Shared,
    access: &Access,
    mut op: Operation,
    path: Vec<u8>,
) -> Result<(Operation, Vec<u8>, bool), (ErrorCode, String)> {
    let Operation::Push {
        or_parent: true,
        source_is_dir,
        discard,
        ..
    } = op
    else {
        return Ok((op, path, false));
    };
    if source_is_dir || discard {
        return Err((
            ErrorCode::BadRequest,
            "a push to a directory or its own name is of a single file, to DST/NAME".into(),
        ));
    }
    let (path, to_parent) = shared
        .exports
        .path_or_parent(&access.reach, path, "push to")?;
    if let Operation::Push {
        no_link_at_path,
        or_parent,
        ..
    } = &mut op
    {
        *no_link_at_path = !to_parent;
        *or_parent = false;
    }
    Ok((op, path, to_parent))
}

/// The target of the symlink at `rel` below `root`, if that is one (its own name, not
/// followed; the way to it is, as a push's would be).
fn link_at(root: &sprat_store::Root, rel: &[u8]) -> Option<Vec<u8>> {
    let entry = sprat_store::stat_path(root, rel).ok()?;
    (entry.kind == sprat_store::EntryType::Symlink).then(|| entry.link_target.unwrap_or_default())
}

fn open_session(shared: &Shared, mut served: Served, opened: Opened<'_>) {
    let Opened {
        id,
        op,
        path,
        selection,
        access,
        ip,
    } = opened;
    let ticket = access.ticket;
    // A single file to `DST/NAME` or `DST`: from here on, a push to the one this server found.
    let (op, path, to_parent) = match resolve_or_parent(shared, access, op, path) {
        Ok(resolved) => resolved,
        Err((code, text)) => return served.refuse(code, text),
    };
    // The export and the path below its root; a discarding push writes nothing anywhere, so
    // it needs none.
    let what = match op {
        Operation::Push { discard: true, .. } => None,
        Operation::Push { .. } => Some("push to"),
        Operation::Pull { .. } => Some("pull"),
    };
    let place = match what.map(|w| shared.exports.place_in_export(&access.reach, &path, w)) {
        None => None,
        Some(Ok(place)) => Some(place),
        Some(Err((code, text))) => return served.refuse(code, text),
    };
    let kind = match op {
        Operation::Push {
            source_is_dir,
            durable,
            discard,
            owners,
            numeric_ids,
            keep_existing,
            no_link_at_path,
            or_parent: _,
            source,
        } => {
            let (root, rel) = match &place {
                Some((export, _, rel)) => {
                    if let Err((code, text)) = export.writable("write", rel) {
                        return served.refuse(code, text);
                    }
                    // `DST/NAME`: the client left it to this server to refuse a symlink there.
                    let link = no_link_at_path
                        .then(|| link_at(&export.root, rel))
                        .flatten();
                    if let Some(target) = link {
                        let shown = printable(&display_path(&path)).into_owned();
                        let text = super::endpoint::link_not_followed(&shown, &target);
                        return served.refuse(ErrorCode::BadRequest, text);
                    }
                    let below = || sprat_store::ancestry::below(&export.root, rel);
                    if super::overlap::passes_through(source, below) {
                        return served.refuse(
                            ErrorCode::BadRequest,
                            format!(
                                "the destination '{}' is the pushed source or inside it (the \
                                 same directory on this host): the copy would read what it writes",
                                crate::text::printable(&sprat_store::display_path(&path))
                            ),
                        );
                    }
                    (Some(*export), rel.as_slice())
                }
                None => (None, &[][..]),
            };
            // The same form as every writer's (its leftovers are recognised by it).
            let tag = super::destination::temp_tag();
            // Held by the writer, so until every write of this session is over.
            let progress = crate::session::claims::Progress::default();
            let claim = (!discard).then(|| {
                let patience = crate::session::claims::CLAIM_PATIENCE;
                shared.claims.claim(&path, progress.clone(), patience)
            });
            let writer = match root {
                None => Ok(None),
                Some(export) if source_is_dir => {
                    // `DST/NAME`: NAME is opened without following a link made there since
                    // the check above (below an export of `/` the way to it follows links,
                    // as `mkdir -p` does; the directory made below it is confined).
                    let made = match no_link_at_path {
                        true => {
                            let (parent, name) = sprat_store::split_parent(rel);
                            export
                                .root
                                .mkdir_all(parent)
                                .and_then(|p| p.mkdir_all(name))
                        }
                        false => export.root.mkdir_all(rel),
                    };
                    made.map(|r| Some(TreeWriter::for_dir(r, !rel.is_empty(), tag)))
                }
                Some(root) if rel.is_empty() => {
                    return served.refuse(
                        ErrorCode::BadRequest,
                        format!("a single file cannot replace {}", root.describe()),
                    )
                }
                Some(export) => {
                    let (parent, name) = sprat_store::split_parent(rel);
                    export
                        .root
                        .mkdir_all(parent)
                        .map(|r| Some(TreeWriter::for_file(r, name.to_vec(), tag)))
                }
            };
            // The directories it must remember until the commit take clients' memory.
            let dirs = Mutex::new(Charge::empty(&shared.budget, ip));
            let remember = move |bytes: usize| lock(&dirs).try_grow(bytes as u64).is_ok();
            let writer = match writer {
                Ok(w) => w.map(|w| {
                    let w = match claim {
                        Some(claim) => w.holding(Box::new(claim)),
                        None => w,
                    };
                    // As a client's own destination: its data on the way to the disk as it comes.
                    let w = super::destination::to_disk_early(w)
                        .publishing(shared.options.publish)
                        .keep_setid(shared.options.keep_setid)
                        .devices(shared.options.keep_devices)
                        .owners(owners && shared.options.owners && root.is_some_and(|e| e.owners))
                        .owners_sent(owners)
                        .numeric_ids(numeric_ids || shared.options.numeric_ids)
                        .keep_existing(keep_existing);
                    let w = w.remembering(Box::new(remember));
                    let early = super::destination::early_writeback();
                    Arc::new(
                        w.durable(durable || shared.options.durable)
                            .early_writeback(early),
                    )
                }),
                // A tree onto a file: the client's mistake, said as a local copy says it.
                Err(e) if source_is_dir && e.errno() == Some(rustix::io::Errno::NOTDIR) => {
                    let shown = printable(&display_path(&path)).into_owned();
                    return served.refuse(
                        ErrorCode::BadRequest,
                        format!(
                            "destination '{shown}' is a file, and a directory cannot be copied \
                             onto a file: name another destination"
                        ),
                    );
                }
                Err(e) => return served.refuse_store(&e),
            };
            // The pool's busy time grows with every batch written: the claim's progress.
            let pool = WriterPool::start_busy(
                writer.clone(),
                shared.options.write_threads,
                Arc::new(AtomicBool::new(false)),
                progress,
            );
            let pool = match pool {
                Ok(p) => p,
                Err(e) => return served.refuse(ErrorCode::Io, e.to_string()),
            };
            SessionKind::Push(PushSession {
                writer,
                jobs: Mutex::new(Some(pool.sender())),
                pool: Mutex::new(Some(pool)),
                counts: Mutex::new(Counts::default()),
                received: Box::default(),
                network_ns: AtomicU64::new(0),
                connections: AtomicUsize::new(0),
                receiving: Receiving::default(),
                root_is_dir: source_is_dir,
                to_parent,
            })
        }
        Operation::Pull {
            check,
            meta,
            into_dir,
        } => {
            // The source is opened first: a single file pulled into the client's directory
            // (`into_dir`) goes to `DST/NAME`, whose entries alone of the index are kept.
            let source = place
                .as_ref()
                .map(|(export, _, rel)| export.root.source(rel));
            let only = match (&source, into_dir) {
                (Some(Ok(sprat_store::Source::File { name, .. })), true) => Some(name.clone()),
                _ => None,
            };
            // A checked pull's index of the client's destination comes right behind the Open.
            let mut charge = Charge::empty(&shared.budget, ip);
            let index = match check {
                DestCheck::None => None,
                _ => match read_index(&mut served, check, &mut charge, only.as_deref()) {
                    Ok(index) => Some(index),
                    Err((code, text)) => return served.refuse(code, text),
                },
            };
            let Some(source) = source else {
                return served.refuse(ErrorCode::BadRequest, "a pull needs an export".into());
            };
            let src = match source {
                Ok(s) => s,
                // A source below a regular file does not exist either.
                Err(e) if e.errno() == Some(rustix::io::Errno::NOTDIR) => {
                    return served.refuse(ErrorCode::NotFound, e.to_string())
                }
                Err(e) => return served.refuse_store(&e),
            };
            // Told in `Opened` (a single file's source id is zeros; its size is the same
            // against this server's threshold whatever the client selects).
            let source_id = super::push::source_id(&src);
            let one_stream = super::push::travels_whole_alone(&src, &shared.options);
            let counts = Arc::new(SkipCounts::default());
            let selection = match crate::config::selection_from_wire(selection) {
                Ok(s) => s,
                Err(e) => return served.refuse(ErrorCode::BadRequest, e.to_string()),
            };
            let skip = index.map(|index| Skip {
                index: Box::new(move || Ok(index)),
                rule: SkipRule::from_check(check),
                counts: counts.clone(),
                early: false,
            });
            let options = TransferOptions {
                selection,
                ..shared.options.for_one_transfer().with_meta(meta)
            };
            // The opening batches take the shape of slow start on a long path (the round
            // trip of the control connection's TLS handshake; without TLS none is measured,
            // and the path is taken as short).
            options
                .path_rtt
                .set(served.conn.rtt.unwrap_or(Duration::ZERO));
            let handle = match source::start(src, &options, skip) {
                Ok(h) => h,
                Err(e) => return served.refuse(ErrorCode::Io, e.to_string()),
            };
            SessionKind::Pull(PullSession {
                batches: handle.batches.clone(),
                root_is_dir: handle.root_is_dir,
                source_id,
                one_stream,
                source: Mutex::new(Some(handle)),
                skipped: counts,
                _index: charge,
                told: Mutex::new((None, (0, 0))),
                source_ended: Signal::default(),
            })
        }
    };
    let session = Arc::new(Session {
        watch: Abort::default(),
        kind,
    });
    // A ticket is spent on the session it opened. It is bound under the tickets' lock
    // together with the registration, so that a join by ticket, checked under that lock once
    // it sees the session, sees the binding too; and only if the registration succeeds.
    let registered = {
        let mut tickets = lock(&shared.tickets);
        let spent = ticket.and_then(|tid| tickets.iter_mut().find(|t| t.id == tid));
        match spent {
            Some(t) if t.session.is_some() => Err("belongs to a ticket already spent"),
            spent => match shared.sessions.insert(id, session.clone()) {
                Ok(()) => {
                    if let Some(t) = spent {
                        t.session = Some(id);
                    }
                    Ok(())
                }
                Err(Taken::Open) => Err("is in use"),
                Err(Taken::Ended) => Err("was used by a session that has ended"),
            },
        }
    };
    if let Err(why) = registered {
        return served.refuse(ErrorCode::BadRequest, format!("the session id {why}"));
    }
    // The session lives as long as its control connection.
    struct Forget<'a>(&'a Shared, SessionId, Option<u64>);
    impl Drop for Forget<'_> {
        fn drop(&mut self) {
            self.0.sessions.end(&self.1);
            if let Some(tid) = self.2 {
                let mut tickets = lock(&self.0.tickets);
                if let Some(t) = tickets.iter_mut().find(|t| t.id == tid) {
                    t.ended = true;
                    t.expires = Instant::now() + ENDED_TICKET_GRACE;
                }
            }
        }
    }
    let _forget = Forget(shared, id, ticket);
    let peer = served.conn.peer.clone();
    let shown = printable(&display_path(&path)).into_owned();
    tracing::info!(%peer, ?op, path = %shown, "session opened");
    if let Err(e) = announce_and_serve(shared, served, &session, ip, true) {
        // Why it failed first (a watchdog's verdict rather than the sockets it shut); and
        // every other connection of the session is shut down now, so that no thread stays
        // blocked on one.
        let e = session.watch.take().unwrap_or(e);
        session
            .watch
            .fail(TransferError::Local("the session is over".into()));
        eprintln!(
            "sprat serve: session for {peer} ended: {}",
            printable(&e.to_string())
        );
    } else {
        // Every transfer is logged whatever the verbosity: who, which way, where.
        let way = match op {
            Operation::Push { .. } => "push into",
            Operation::Pull { .. } => "pull from",
        };
        eprintln!("sprat serve: {peer}: {way} '{shown}' done");
    }
}

/// A log of connections refused or failed before authentication, at most a line a second.
struct RefusalLog {
    /// What it counts, for the line that says how many were not written ("failed
    /// authentications": whatever the reason each failed for, not only the one written).
    kind: &'static str,
    /// When the last line was written.
    last: Option<Instant>,
    /// Refusals since then that were not written.
    unlogged: u64,
}

impl RefusalLog {
    fn new(kind: &'static str) -> RefusalLog {
        RefusalLog {
            kind,
            last: None,
            unlogged: 0,
        }
    }

    fn refused(&mut self, peer: &str, why: &str) {
        self.log(|| format!("refusing {peer}: {why}"));
    }

    /// Writes the line `line` makes (after `sprat serve: `) unless a line was written less
    /// than a second ago; then counts it (the line is not even made), and the next line
    /// written says how many went unwritten.
    fn log(&mut self, line: impl FnOnce() -> String) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.unlogged += 1;
            return;
        }
        let more = match std::mem::take(&mut self.unlogged) {
            0 => String::new(),
            n => format!(
                " ({n} more {} since the last such line, not logged)",
                self.kind
            ),
        };
        eprintln!("sprat serve: {}{more}", line());
        self.last = Some(now);
    }
}

/// Announces the connection (`Opened` on the control connection, `Joined` on the others) and
/// serves the session on it. A push stream is counted in before it is announced (see
/// [`Receiving::enter`]); every connection is watched by the session's watchdog from then on.
fn announce_and_serve(
    shared: &Shared,
    mut served: Served,
    session: &Session,
    ip: Option<IpAddr>,
    control: bool,
) -> Result<(), TransferError> {
    let (direction, root_is_dir, source, one_stream, to_parent) = match &session.kind {
        SessionKind::Push(p) => (
            Direction::Push,
            p.root_is_dir,
            Default::default(),
            false,
            p.to_parent,
        ),
        SessionKind::Pull(p) => (
            Direction::Pull,
            p.root_is_dir,
            p.source_id,
            p.one_stream,
            false,
        ),
    };
    // A push stream counts in before its announcement; a join after every stream ended
    // finds the session closed (its client committed without waiting for it).
    let serving = match &session.kind {
        SessionKind::Push(p) => match p.receiving.enter() {
            Some(receiving) => Serving::Push(p, receiving),
            None => {
                served.refuse(ErrorCode::UnknownSession, "the session has ended".into());
                return Ok(());
            }
        },
        SessionKind::Pull(p) if p.one_stream && !control => {
            served.refuse(
                ErrorCode::UnknownSession,
                "this session's one file travels on its first connection alone".into(),
            );
            return Ok(());
        }
        SessionKind::Pull(p) => Serving::Pull(p),
    };
    let announcement = if control {
        served
            .machine
            .accept_open(direction, root_is_dir, source, (one_stream, to_parent))
    } else {
        served.machine.accept_join(direction)
    };
    let announcement = announcement.map_err(|e| served.conn.session_error(e))?;
    // A connection joining a session that has failed is shut down at once.
    session.watch.watch(&served.conn);
    // The session's watchdog bounds its connections from now on, all together: one of them
    // may go unread for long while the session moves (a client pacing `--bwlimit` reads its
    // streams in turn), which a socket's own send timeout would take for a client gone.
    served.conn.clear_write_timeout();
    let stream = Stream {
        shared,
        session,
        ip,
        control,
    };
    match serving {
        Serving::Push(p, receiving) => {
            served.conn.send(&announcement)?;
            serve_push(&stream, served, p, receiving)
        }
        Serving::Pull(p) => {
            served.conn.send(&announcement)?;
            serve_pull(&stream, served, p)
        }
    }
}

/// What a connection of a session serves: a push's, counted in among its receiving streams,
/// or a pull's.
enum Serving<'a> {
    Push(&'a PushSession, ReceivingStream<'a>),
    Pull(&'a PullSession),
}

/// One connection of a session, as its serving needs it.
struct Stream<'a> {
    shared: &'a Shared,
    session: &'a Session,
    ip: Option<IpAddr>,
    /// The control connection (the session's first, which commits it).
    control: bool,
}

impl Stream<'_> {
    /// Runs `body`, the part of serving that waits on the client: on the control connection
    /// under the session's watchdog, which shuts every connection of the session down once
    /// none has moved a byte for the idle timeout (a client gone silent, or one that stopped
    /// reading). The other connections run under the control connection's watchdog.
    fn waiting_on_client<T>(&self, peer: &str, body: impl FnOnce() -> T) -> T {
        if !self.control {
            return body();
        }
        let never = Cancel::default();
        let idle = self.shared.idle_timeout;
        let patience = (idle, "sprat serve --idle-timeout", &never);
        stall::watched(&self.session.watch, patience, peer, body)
    }

    /// A batch of `len` bytes about to be read from `conn`: it waits for room in the
    /// clients' memory budget (the bytes stay in the socket meanwhile, which slows the
    /// client down), unless the session fails meanwhile.
    fn admit(&self, conn: &Conn, len: u32) -> Result<Charge, TransferError> {
        let watch = &self.session.watch;
        let charged = self
            .shared
            .budget
            .charge(self.ip, len.into(), &|| watch.is_set());
        charged.map_err(|why| match why {
            Refused::GaveUp => TransferError::ConnectionLost {
                peer: conn.peer.clone(),
                why: "the session was closed".into(),
            },
            why => conn.protocol(why.to_string()),
        })
    }
}

/// Acknowledgements of written batches waiting to be sent, per connection: a client that
/// does not read them holds up the session's writers, not the server's memory.
pub(crate) const ACKS_QUEUED: usize = 4;

/// Receives batches on one connection of a push session (the receive stage, each frame
/// checked by the connection's machine) and acknowledges them once written. On the control
/// connection, then waits for `Commit` and, once every stream has ended, finishes the session.
fn serve_push(
    stream: &Stream<'_>,
    served: Served,
    session: &PushSession,
    receiving: ReceivingStream<'_>,
) -> Result<(), TransferError> {
    let Served { mut conn, machine } = served;
    let machine = Mutex::new(machine);
    session.connections.fetch_add(1, Ordering::Relaxed);
    let peer = conn.peer.clone();
    let mut ack_conn = conn.try_clone()?;
    let sent = stream.waiting_on_client(&peer, || {
        let (reply_tx, reply_rx) = bounded::<BatchOutcome>(ACKS_QUEUED);
        let received = AtomicU64::new(0);
        let admit = |conn: &Conn, len: u32| stream.admit(conn, len);
        let acker = std::thread::scope(|s| {
            let acker = s.spawn(|| acknowledge(&mut ack_conn, &machine, reply_rx, session));
            // Cloned in a statement of its own: a guard in a `match` scrutinee would hold the
            // session's lock for the whole loop, and the session's streams would take turns.
            let jobs = lock(&session.jobs).clone();
            let result = match jobs {
                Some(jobs) => {
                    let lane = ReceiveLane {
                        jobs,
                        reply: reply_tx,
                        network_ns: &session.network_ns,
                        received: &received,
                        admit: Some(&admit),
                        list: false,
                        pace: None,
                    };
                    receive::receive(
                        &mut conn,
                        &lane,
                        |conn| {
                            let mut m = lock(&machine);
                            m.on_batch().map_err(|e| conn.session_error(e))?;
                            // After a fatal error on this connection, what still comes is
                            // dropped.
                            Ok(if m.refusing() {
                                Take::Drop
                            } else {
                                Take::Write
                            })
                        },
                        |conn, msg| {
                            let event = lock(&machine).on_message(msg, Instant::now());
                            match event.map_err(|e| conn.session_error(e))? {
                                Event::Ended => Ok(Flow::Over),
                                Event::Dropped => Ok(Flow::More),
                                other => Err(conn.protocol(format!("unexpected {other:?}"))),
                            }
                        },
                        |conn| conn.protocol("session already committed".into()),
                    )
                }
                None => {
                    drop(reply_tx);
                    Err(conn.protocol("batch after end of stream".into()))
                }
            };
            if result.is_err() {
                conn.shutdown();
            }
            let acked = acker.join().unwrap_or(Ok(()));
            result.and(acked)
        });
        drop(receiving);
        acker?;
        if !stream.control {
            return Ok(None);
        }
        let commit = conn.recv_control_raw()?;
        let event = lock(&machine).on_message(commit, Instant::now());
        let sent = match event.map_err(|e| conn.session_error(e))? {
            Event::Commit(sent) => sent,
            other => {
                return Err(conn.protocol(format!("unexpected {other:?} where Commit was due")))
            }
        };
        // The other streams' last batches may still be on their way (or their
        // acknowledgements being counted): the totals are final once all have ended.
        session.receiving.wait_until_none();
        Ok(Some(sent))
    })?;
    let Some(sent) = sent else { return Ok(()) };
    lock(&session.jobs).take();
    let write_busy = lock(&session.pool)
        .take()
        .map(|p| p.finish())
        .unwrap_or_default();
    // Every batch is written: a large file still waiting for chunks never gets them in this
    // session (its partial file stays, for a later one to resume).
    let unfinished = session
        .writer
        .as_ref()
        .map(|w| w.take_incomplete())
        .unwrap_or_default();
    let incomplete = unfinished.incomplete;
    let (dir_errors, more_dir_errors) = session
        .writer
        .as_ref()
        .map(|w| w.finish())
        .unwrap_or_default();
    let mut counts = lock(&session.counts).clone();
    // Large files another session finished at once with this one (the same source pushed
    // twice): done here too.
    counts.files += unfinished.completed_by_another;
    let mut machine = unpoisoned(machine.into_inner());
    let received = *lock(&session.received);
    if received != sent {
        // Something the client sent never arrived here (or more did): no success.
        let text = format!(
            "the transfer is incomplete: the client sent {sent}, the server received {received}"
        );
        let error = machine.refuse(ErrorCode::Io, text.clone());
        let _ = conn.send(&error);
        return Err(TransferError::Incomplete(text));
    }
    if !dir_errors.is_empty() || !incomplete.is_empty() {
        let mut failed = BatchOutcome {
            unlisted: more_dir_errors,
            ..BatchOutcome::default()
        };
        for e in &dir_errors {
            failed.fail(e.path.as_bytes(), e.to_string());
        }
        for (path, missing) in incomplete {
            failed.fail(&path, incomplete_text(&path, missing));
        }
        counts.add_outcome(&failed);
        let reply = machine
            .dir_failures(failed.ack_failures())
            .map_err(|e| conn.session_error(e))?;
        conn.send(&reply)?;
    }
    let streams = session.connections.load(Ordering::Relaxed).max(1) as u64;
    let done = machine.done(RemoteStats {
        files: counts.files,
        dirs: counts.dirs,
        symlinks: counts.symlinks,
        specials: counts.specials,
        bytes: counts.bytes,
        failures: counts.failed,
        read_busy_ns: 0,
        network_busy_ns: session.network_ns.load(Ordering::Relaxed) / streams,
        write_busy_ns: write_busy.as_nanos() as u64,
        syncs: session.writer.as_ref().map_or(0, |w| w.sync_count()),
        up_to_date: counts.kept,
        attrs_fixed: counts.kept_fixed,
        totals: received,
        not_kept: counts.not_kept,
        streams,
        ..RemoteStats::default()
    });
    conn.send(&done.map_err(|e| conn.session_error(e))?)
}

/// The failure of a large file left incomplete when its transfer ended.
pub(crate) fn incomplete_text(path: &[u8], missing: u64) -> String {
    format!(
        "'{}': incomplete, {missing} bytes missing (not sent, or found damaged in its partial \
         file): {}",
        display_path(path),
        crate::report::KEPT_TO_RESUME
    )
}

/// Sends one acknowledgement per written batch, then `EndAck`; a fatal outcome ends the
/// connection with an `Error` instead.
fn acknowledge(
    conn: &mut Conn,
    machine: &Mutex<ServerStream>,
    outcomes: Receiver<BatchOutcome>,
    session: &PushSession,
) -> Result<(), TransferError> {
    for o in outcomes {
        if let Some((code, text)) = o.fatal {
            // Say why, then stop sending; the reader drains what the client still sends so
            // that closing the socket does not reset the connection before it reads this.
            let error = lock(machine).refuse(code, text.clone());
            let _ = conn.send(&error);
            conn.shutdown_write();
            return Err(TransferError::Remote {
                peer: conn.peer.clone(),
                code,
                text,
            });
        }
        lock(&session.counts).add_outcome(&o);
        lock(&session.received).add(&o.got);
        let mut o = o;
        // Files kept because the destination had them (sent before the client had its
        // listing) count with their bytes, not as files written.
        let bytes = o.bytes + o.kept_bytes;
        let kept = std::mem::take(&mut o.kept_entries);
        let ack = lock(machine).ack(o.seq, o.files as u32, bytes, kept, o.ack_failures());
        conn.send(&ack.map_err(|e| conn.session_error(e))?)?;
    }
    let end_ack = lock(machine).end_ack();
    conn.send(&end_ack.map_err(|e| conn.session_error(e))?)
}

/// How often at most a pull's control connection sends `Progress`.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Sends batches from the session's source until it is drained (the send stage); the control
/// connection then answers `Commit` with the read stage's busy time.
fn serve_pull(
    stream: &Stream<'_>,
    served: Served,
    session: &PullSession,
) -> Result<(), TransferError> {
    let Served {
        mut conn,
        mut machine,
    } = served;
    let peer = conn.peer.clone();
    let committed = stream.waiting_on_client(&peer, || {
        let end = |machine: &mut ServerStream| match machine.end() {
            Ok(end) => Next::End(end, ()),
            Err(_) => Next::Stop(()),
        };
        // On a long path, no batch beyond what this connection's first round trip carries
        // until that round trip is over: the session's other connections take it (see
        // `session::opening`).
        let first = FirstRoundTrip::timed(conn.rtt);
        let mut next = || loop {
            if let Some(progress) = session.progress_due() {
                if let Ok(msg) = machine.progress(progress) {
                    return Next::Control(msg);
                }
            }
            if !first.may_take() && !session.source_ended.is_set() {
                let left = first.left().unwrap_or(PROGRESS_EVERY).min(PROGRESS_EVERY);
                let _ = session.source_ended.receiver().recv_timeout(left);
                continue;
            }
            match session.batches.recv_timeout(PROGRESS_EVERY) {
                Ok(batch) => {
                    first.sending(batch.seq, batch.payload_len() as u64);
                    return Next::Batch(batch);
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    session.source_ended.set();
                    return end(&mut machine);
                }
            }
        };
        send::send(&mut conn, &mut next, |batch, sent| {
            crate::spare::give_back(batch.data);
            sent.map(|()| None)
        })?;
        if !stream.control {
            return Ok(false);
        }
        let commit = conn.recv_control_raw()?;
        match machine
            .on_message(commit, Instant::now())
            .map_err(|e| conn.session_error(e))?
        {
            Event::Commit(_) => Ok(true),
            other => Err(conn.protocol(format!("unexpected {other:?} where Commit was due"))),
        }
    })?;
    if !committed {
        return Ok(());
    }
    let source = lock(&session.source).take();
    // Final: every connection took its last batch from the source before its `End`.
    let totals = source.as_ref().map(|h| h.totals.get()).unwrap_or_default();
    let read_busy = source.map(|h| h.finish()).unwrap_or_default();
    // The partial copies of the client's destination this pull did not resume: the source
    // has finished, so the list is whole.
    let superseded: Vec<Vec<u8>> = session
        .skipped
        .take_superseded()
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    for piece in superseded_pieces(superseded) {
        let told = machine.superseded(piece);
        conn.send(&told.map_err(|e| conn.session_error(e))?)?;
    }
    let (up_to_date, bytes_not_sent, attrs_fixed) = session.skipped.totals();
    let done = machine.done(RemoteStats {
        read_busy_ns: read_busy.as_nanos() as u64,
        up_to_date,
        attrs_fixed,
        bytes_not_sent,
        totals,
        ..RemoteStats::default()
    });
    conn.send(&done.map_err(|e| conn.session_error(e))?)
}

/// Bytes of paths one `Superseded` message carries at most (well within a control frame).
const SUPERSEDED_PIECE_BYTES: usize = 256 << 10;

/// `paths` in pieces of at most [`sprat_proto::MAX_SUPERSEDED`] paths and about
/// [`SUPERSEDED_PIECE_BYTES`] (a path of the longest length alone makes one).
pub(crate) fn superseded_pieces(paths: Vec<Vec<u8>>) -> Vec<Vec<Vec<u8>>> {
    let mut pieces: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut bytes = 0;
    for path in paths {
        let full = pieces.last().is_none_or(|p| {
            p.len() >= sprat_proto::MAX_SUPERSEDED || bytes + path.len() > SUPERSEDED_PIECE_BYTES
        });
        if full {
            pieces.push(Vec::new());
            bytes = 0;
        }
        bytes += path.len() + 2;
        if let Some(piece) = pieces.last_mut() {
            piece.push(path);
        }
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superseded_paths_go_in_pieces_that_fit_a_message() {
        assert!(superseded_pieces(Vec::new()).is_empty());
        let many = vec![b"a/b".to_vec(); 2500];
        let sizes: Vec<usize> = superseded_pieces(many).iter().map(Vec::len).collect();
        assert_eq!(sizes, [1024, 1024, 452]);
        let long = vec![vec![b'x'; 4000]; 100];
        for piece in superseded_pieces(long) {
            let bytes: usize = piece.iter().map(|p| p.len() + 2).sum();
            assert!(bytes <= SUPERSEDED_PIECE_BYTES + 4002, "{bytes}");
            let encoded = sprat_proto::Message::Superseded(piece).encode();
            assert!(encoded.len() < sprat_proto::frame::MAX_CONTROL_PAYLOAD as usize);
        }
    }

    /// A loopback TCP pair as two plain connections: (the server's end, the client's).
    fn conn_pair() -> (Conn, Conn) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (
            Conn::new(server, "client".into()),
            Conn::new(client, "server".into()),
        )
    }

    /// A request answered for longer than the client's patience: the server's `Working`
    /// keeps the client waiting (it skips them) until the answer comes; a server that says
    /// nothing is given up after the patience, as stalled. Over real loopback sockets.
    #[test]
    fn a_busy_server_says_it_is_working_and_a_silent_one_is_given_up() {
        let (server, mut client) = conn_pair();
        client.wait_for_answers_within(Duration::from_millis(400));
        let (busy, working) = crossbeam_channel::unbounded::<bool>();
        let mut answer = server.try_clone().unwrap();
        std::thread::scope(|s| {
            let beat = server.try_clone().unwrap();
            s.spawn(move || say_working(beat, &working, Duration::from_millis(100)));
            busy.send(true).unwrap();
            s.spawn(move || {
                // An answer after three times the client's patience.
                std::thread::sleep(Duration::from_millis(1200));
                answer.send(&sprat_proto::Message::ReplyEnd).unwrap();
                drop(busy);
            });
            let started = Instant::now();
            let got = client.recv_control();
            assert!(matches!(got, Ok(sprat_proto::Message::ReplyEnd)), "{got:?}");
            assert!(started.elapsed() >= Duration::from_millis(1100));
        });
        // Nothing more comes: given up after the patience, as stalled.
        let started = Instant::now();
        let e = client.recv_control().unwrap_err();
        assert!(matches!(e, TransferError::Stalled { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(server);
    }

    /// A TCP relay to `to`, for the connections through it to be cut at once (`cut`), and
    /// whose first `refused` connections are closed as soon as they come.
    struct CuttableRelay {
        addr: String,
        conns: Arc<Mutex<Vec<TcpStream>>>,
    }

    impl CuttableRelay {
        fn start(to: String, refused: usize) -> CuttableRelay {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
            let held = conns.clone();
            std::thread::spawn(move || {
                for (i, client) in listener.incoming().enumerate() {
                    let Ok(client) = client else { continue };
                    if i < refused {
                        continue;
                    }
                    let server = TcpStream::connect(&to).unwrap();
                    let pipe = |mut from: TcpStream, mut to: TcpStream| {
                        std::thread::spawn(move || {
                            let _ = std::io::copy(&mut from, &mut to);
                            let _ = to.shutdown(std::net::Shutdown::Both);
                        })
                    };
                    lock(&held).extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                    pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                    pipe(server, client);
                }
            });
            CuttableRelay { addr, conns }
        }

        fn cut(&self) {
            for c in lock(&self.conns).drain(..) {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// A pull session opened on a control connection dialled ahead (see
    /// `session::client::dial_spare`), after `spoil` did what it does to it.
    fn open_on_a_spare(relay: &CuttableRelay, key: &net::Credentials, spoil: impl FnOnce()) {
        use crate::session::client as session;
        let options = TransferOptions {
            streams: Some(1),
            ..TransferOptions::default()
        };
        let op = Operation::Pull {
            check: DestCheck::None,
            meta: Default::default(),
            into_dir: false,
        };
        let spare = session::dial_spare(&relay.addr, key, None, Direction::Pull);
        std::thread::sleep(Duration::from_millis(300));
        spoil();
        session::hold_ahead(spare);
        let opened = session::open(&relay.addr, key, (op, b"src"), &options, None, |_| Ok(()));
        assert!(opened.is_ok(), "{:?}", opened.err());
    }

    /// A control connection dialled ahead that the server closed before a session took it
    /// (its dial failed, or it was lost while it waited) is dialled again: the session opens.
    #[test]
    fn a_session_opens_where_the_connection_dialled_ahead_for_it_was_lost() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("root/src")).unwrap();
        std::fs::write(dir.path().join("root/src/f"), b"x").unwrap();
        let (server, key) = serve(&dir.path().join("root"), &[5; 32]);
        // Every try of the dial closed at once (it tries again by itself a few times).
        let failed_dial = CuttableRelay::start(server.clone(), net::HANDSHAKE_RETRIES.len() + 1);
        open_on_a_spare(&failed_dial, &key, || {});
        let lost = CuttableRelay::start(server, 0);
        open_on_a_spare(&lost, &key, || {
            lost.cut();
            std::thread::sleep(Duration::from_millis(100));
        });
    }

    /// A server on loopback exporting `root` to `token`, running on a thread of its own.
    fn serve(root: &std::path::Path, token: &[u8; 32]) -> (String, net::Credentials) {
        serve_idle(root, token, DEFAULT_IDLE_TIMEOUT)
    }

    /// [`serve`] with the idle timeout `idle_timeout`.
    fn serve_idle(
        root: &std::path::Path,
        token: &[u8; 32],
        idle_timeout: Duration,
    ) -> (String, net::Credentials) {
        let identity = net::ServerIdentity::ephemeral().unwrap();
        let tls = net::ServerTls::new(&identity, false).unwrap();
        let config = ServerConfig {
            exports: ExportsConfig::Default {
                root: root.to_path_buf(),
                read_only: false,
                key: Some(TokenKey::from_token(token)),
            },
            tls,
            options: TransferOptions::default(),
            max_connections: 64,
            max_connections_per_address: 64,
            max_client_memory: DEFAULT_CLIENT_MEMORY,
            idle_timeout,
            third_party: true,
        };
        let server = Server::bind(config, "127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap().to_string();
        std::thread::spawn(move || server.run());
        let trust = net::Trust::pinned(identity.fingerprint);
        (
            addr,
            net::Credentials::new(Some(TokenKey::from_token(token)), trust),
        )
    }

    /// A server exporting `root/` with an empty `dst/`, beside the file `small` to push.
    struct Fixture {
        dir: tempfile::TempDir,
        addr: String,
        owner: net::Credentials,
    }

    impl Fixture {
        fn new(token: &[u8; 32]) -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("root/dst")).unwrap();
            std::fs::write(dir.path().join("small"), b"one small file").unwrap();
            let (addr, owner) = serve(&dir.path().join("root"), token);
            Fixture { dir, addr, owner }
        }

        /// A ticket for a push to `path`.
        fn delegate(&self, path: &[u8]) -> Result<[u8; 32], TransferError> {
            let request = Request::Delegate {
                path: path.to_vec(),
                check_only: false,
            };
            let mut conn = super::super::remote::request(&self.addr, &self.owner, request)?;
            match conn.recv_control()? {
                sprat_proto::Message::Ticket { ticket, .. } => Ok(ticket),
                other => panic!("not a ticket: {other:?}"),
            }
        }

        /// The credentials of a holder of `ticket`.
        fn holder(&self, ticket: &[u8; 32]) -> net::Credentials {
            net::Credentials::new(Some(TokenKey::from_token(ticket)), self.owner.trust.clone())
        }

        /// Pushes `small` to `dst/small` with `key`: the files written, or why not.
        fn push(&self, key: &net::Credentials) -> Result<u64, TransferError> {
            self.push_with(key, &TransferOptions::default())
        }

        /// [`Fixture::push`] with `options`.
        fn push_with(
            &self,
            key: &net::Credentials,
            options: &TransferOptions,
        ) -> Result<u64, TransferError> {
            let src = sprat_store::Root::open_local_source(&self.dir.path().join("small"))?;
            let input = super::super::push::PushInput::Source(src);
            let (from, to) = ("small".to_string(), "dst/small".to_string());
            let path = b"dst/small";
            let report =
                super::super::push::push_input(input, &self.addr, path, key, options, from, to)?;
            assert_eq!(report.failed, 0, "{:?}", report.failures);
            Ok(report.files)
        }
    }

    /// One address may hold 64 unused tickets: the next is refused as busy (retried by a
    /// client), and no ticket already issued is taken back to make room.
    #[test]
    fn one_address_holds_at_most_64_unused_tickets_and_none_is_taken_back() {
        let f = Fixture::new(&[9; 32]);
        let first = f.delegate(b"dst/small").unwrap();
        for _ in 1..MAX_UNUSED_TICKETS_PER_ADDRESS {
            f.delegate(b"dst/other").unwrap();
        }
        match f.delegate(b"dst/more") {
            Err(TransferError::Remote { code, text, .. }) => {
                assert_eq!(code, ErrorCode::Busy, "{text}");
                assert!(text.contains("try again"), "{text}");
            }
            other => panic!("not refused as busy: {:?}", other.map(|_| ())),
        }
        // The first ticket still pushes.
        assert_eq!(f.push(&f.holder(&first)).unwrap(), 1);
    }

    /// A third-party copy's source server lists the destination with its ticket beside the
    /// push of a single small file, which does not wait for the listing: the listing may
    /// come once the push's session has ended. It is answered then (the copy succeeded), but
    /// the ticket opens no second session.
    #[test]
    fn a_spent_tickets_listing_is_answered_after_its_session_and_opens_nothing() {
        let f = Fixture::new(&[7; 32]);
        let holder = f.holder(&f.delegate(b"dst/small").unwrap());
        assert_eq!(f.push(&holder).unwrap(), 1);
        // The session has ended; a listing with its ticket is still answered.
        let listed = super::super::remote::index(&f.addr, &holder, b"dst/small", false, None);
        assert!(listed.is_ok(), "{:?}", listed.err());
        // A second push with the spent ticket is refused.
        let again = f.push(&holder);
        assert!(again.is_err(), "{again:?}");
        let pushed = std::fs::read(f.dir.path().join("root/dst/small")).unwrap();
        assert_eq!(pushed, b"one small file");
    }

    /// A ticket allows a push to its path only, not one its server may put at the path's
    /// parent (`or_parent`, protocol 22), nor such a listing: both are refused, and the
    /// ticket still serves the push it was issued for.
    #[test]
    fn a_ticket_does_not_allow_a_push_its_server_may_put_at_the_parent() {
        let f = Fixture::new(&[5; 32]);
        let holder = f.holder(&f.delegate(b"dst/small").unwrap());
        // Unchecked, so that the `Open` is what the ticket is checked on (a ticket allows
        // no `Stat`, which the check's listing would ask first).
        let or_parent = TransferOptions {
            dst_or_parent: true,
            skip: crate::config::SkipRule::Never,
            ..TransferOptions::default()
        };
        match f.push_with(&holder, &or_parent) {
            Err(TransferError::Remote { code, text, .. }) => {
                assert_eq!(code, ErrorCode::PermissionDenied, "{text}");
            }
            other => panic!("not refused: {other:?}"),
        }
        assert!(!f.dir.path().join("root/dst/small").exists());
        let listed =
            super::super::remote::index_or_parent(&f.addr, &holder, b"dst/small", false, None);
        assert!(listed.is_err(), "a listing or the parent allowed");
        assert_eq!(f.push(&holder).unwrap(), 1);
        // The owner's own goes there (`dst` is a directory).
        std::fs::remove_file(f.dir.path().join("root/dst/small")).unwrap();
        assert_eq!(f.push_with(&f.owner, &or_parent).unwrap(), 1);
        assert!(f.dir.path().join("root/dst/small").is_file());
    }

    /// Thousands of partial copies removed on one connection (a third-party copy's source
    /// server may name that many): the requests go a window ahead of the replies, so neither
    /// side's buffers fill while both write. Before, the client sent every request first,
    /// and with 5,000 paths it mostly hung (review 2026-11-30 of protocol 22, M1).
    #[test]
    fn thousands_of_removals_on_one_connection_end() {
        let f = Fixture::new(&[4; 32]);
        let dst = f.dir.path().join("root/dst");
        std::fs::write(dst.join(".f7.sprat-part"), b"partial").unwrap();
        std::fs::write(dst.join(".f7.sprat-part.log"), b"").unwrap();
        let names: Vec<Vec<u8>> = (0..5000).map(|i| format!("f{i}").into_bytes()).collect();
        let (addr, owner) = (f.addr.clone(), f.owner.clone());
        let (done, ended) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            super::super::remote::remove_superseded_partials(&addr, &owner, b"dst", &names);
            let _ = done.send(());
        });
        let waited = ended.recv_timeout(Duration::from_secs(120));
        assert!(waited.is_ok(), "10,000 removals did not end");
        assert!(!dst.join(".f7.sprat-part").exists());
        assert!(!dst.join(".f7.sprat-part.log").exists());
    }

    /// A client that asks and stops reading, over TLS: the server's answer, once the socket
    /// is full, waits no longer than its idle timeout, and the connection (a place, a
    /// thread) is given up. Before, a TLS write waited for room without a bound (the socket
    /// is non-blocking, so its send timeout did not apply), for ever (review 2026-11-30 of
    /// protocol 22).
    #[test]
    fn a_tls_answer_nobody_reads_gives_up_after_the_idle_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("root/tree");
        std::fs::create_dir_all(&tree).unwrap();
        for i in 0..2000 {
            std::fs::write(tree.join(format!("a-file-with-a-longish-name-{i:05}")), b"").unwrap();
        }
        let (addr, key) = serve_idle(&dir.path().join("root"), &[3; 32], Duration::from_secs(1));
        let list = || Request::List {
            path: b"tree".to_vec(),
            recursive: true,
            digests: false,
            selection: Default::default(),
            owners: sprat_proto::namespace::ListOwners::No,
            or_parent: false,
        };
        const ASKED: usize = 300;
        let mut conn = super::super::remote::request(&addr, &key, list()).unwrap();
        // Asked on a thread of its own: once the server stops reading, so does this.
        let mut asking = conn.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 1..ASKED {
                if asking.send(&sprat_proto::Message::Request(list())).is_err() {
                    return;
                }
            }
        });
        std::thread::sleep(Duration::from_secs(4));
        let mut answered = 0;
        while let Ok(m) = conn.recv_control() {
            if m == sprat_proto::Message::ReplyEnd {
                answered += 1;
            }
        }
        assert!(answered < ASKED, "every answer came: the server waited");
    }

    #[test]
    fn the_default_client_memory_is_an_eighth_of_the_machine_at_least_1_gib() {
        let here = default_client_memory();
        let total = host_memory::meminfo_bytes("MemTotal").unwrap();
        let allowed = host_memory::cgroup_limit().map_or(total, |l| l.min(total));
        assert_eq!(here, (allowed / 8).max(DEFAULT_CLIENT_MEMORY));
        assert!(here <= (total / 8).max(DEFAULT_CLIENT_MEMORY));
    }
}
