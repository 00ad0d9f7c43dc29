//! `sprat serve`: accepts connections, authenticates them, and runs push and pull sessions
//! confined to the exports the client's credential reaches (see [`super::exports`]).
//!
//! A session is opened by one connection (the control connection) and joined by the others of
//! the same client; all of them carry batches. Push: each connection's batches go to one
//! writer pool and are acknowledged after they are written; `Commit` on the control connection
//! applies directory attributes and returns the totals. Pull: every connection takes batches
//! from one source pipeline until it is drained, then sends `End`.

use super::exports::{Exports, ExportsConfig, Reach};
use super::requests;
use crate::config::TransferOptions;
use crate::error::{code_for, TransferError};
use crate::net::{self, Conn};
use crate::pipeline::receive::{self, Flow, ReceiveLane, Take};
use crate::pipeline::send::{self, Next};
use crate::pipeline::sink::{BatchOutcome, WriteJob, WriterPool};
use crate::pipeline::skip::{digest_from_bytes, DestIndex, SkipCounts, SkipRule};
use crate::pipeline::source::{self, Skip, SourceHandle};
use crate::report::Counts;
use crate::session::registry::{Registry, SessionId, Taken};
use crate::sync::{lock, unpoisoned};
use crossbeam_channel::{unbounded, Receiver, Sender};
use sprat_proto::auth::{Credential, TokenKey};
use sprat_proto::namespace::Request;
use sprat_proto::session::server::{Event, ServerStream};
use sprat_proto::session::{Direction, JOIN_PATIENCE};
use sprat_proto::{Batch, DestCheck, ErrorCode, Operation, RemoteStats, Totals};
use sprat_store::{display_path, StoreError, TreeWriter};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
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
    /// batch in memory).
    pub max_connections: usize,
}

/// A bound, not yet running server.
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

struct Shared {
    exports: Exports,
    tls: net::ServerTls,
    options: TransferOptions,
    sessions: Registry<Session>,
    /// The trees push sessions are writing.
    claims: Arc<crate::session::claims::Claims>,
    max_connections: usize,
    /// Authenticated connections being served.
    connections: AtomicUsize,
    /// Connections still in the handshake.
    handshaking: Mutex<Handshaking>,
    tickets: Mutex<Vec<Ticket>>,
    next_ticket: AtomicU64,
}

enum Session {
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
}

/// The streams of a push session still receiving. A client may send `Commit` as soon as its
/// control connection's own stream ends; the server answers once every stream has ended.
#[derive(Default)]
struct Receiving {
    streams: Mutex<usize>,
    none_left: Condvar,
}

impl Receiving {
    /// Counts a stream in, before it is announced (`Opened`, `Joined`), so that a `Commit`
    /// racing with a new stream waits for it.
    fn enter(&self) -> ReceivingStream<'_> {
        *lock(&self.streams) += 1;
        ReceivingStream(self)
    }

    fn wait_until_none(&self) {
        let mut streams = lock(&self.streams);
        while *streams > 0 {
            streams = unpoisoned(self.none_left.wait(streams));
        }
    }
}

/// A stream counted in [`Receiving`] until dropped.
struct ReceivingStream<'a>(&'a Receiving);

impl Drop for ReceivingStream<'_> {
    fn drop(&mut self) {
        *lock(&self.0.streams) -= 1;
        self.0.none_left.notify_all();
    }
}

struct PullSession {
    batches: Receiver<Batch>,
    source: Mutex<Option<SourceHandle>>,
    root_is_dir: bool,
    /// What the client's destination had (a checked pull), reported with `Done`.
    skipped: Arc<SkipCounts>,
}

/// Most entries a pulling client's index of its destination may hold (memory for what a peer
/// sends is bounded: about 100 bytes each).
const MAX_PULL_INDEX: usize = 4_000_000;

/// Reads a checked pull's index of the client's destination (`Entries` up to `ReplyEnd`,
/// each read within the handshake's patience).
fn read_index(served: &mut Served, check: DestCheck) -> Result<DestIndex, (ErrorCode, String)> {
    let protocol = |why: String| (ErrorCode::Protocol, why);
    served
        .machine
        .expect_index(check == DestCheck::Checksum)
        .map_err(|e| protocol(e.to_string()))?;
    let _ = served
        .conn
        .stream
        .set_read_timeout(Some(sprat_proto::session::HANDSHAKE_TIMEOUT));
    let mut index = DestIndex::default().written_by_peer();
    let mut summed = Vec::new();
    loop {
        let msg = served
            .conn
            .recv_control_raw()
            .map_err(|e| (ErrorCode::Io, e.to_string()))?;
        match served.machine.on_message(msg, Instant::now()) {
            Ok(Event::IndexPart(entries)) => {
                if index.len() + entries.len() > MAX_PULL_INDEX {
                    return Err((
                        ErrorCode::BadRequest,
                        format!(
                            "the destination's index has more than {MAX_PULL_INDEX} files; \
                             pull with --ignore-times"
                        ),
                    ));
                }
                entries.into_iter().for_each(|e| index.insert_listed(e));
            }
            // `--checksum`: digests of the files listed (before or after them); one of a path
            // not (yet) listed is kept until the end, within the same bound.
            Ok(Event::IndexSums(sums)) => {
                if summed.len() + sums.len() > MAX_PULL_INDEX {
                    return Err((
                        ErrorCode::BadRequest,
                        format!("the destination's index has more than {MAX_PULL_INDEX} digests"),
                    ));
                }
                for (path, bytes) in sums {
                    let digest = digest_from_bytes(&bytes).ok_or_else(|| {
                        protocol(format!("a digest of {} bytes, not 16", bytes.len()))
                    })?;
                    summed.push((path, digest));
                }
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
                max_connections: config.max_connections,
                connections: AtomicUsize::new(0),
                handshaking: Mutex::default(),
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

    /// Accepts connections forever, one thread each.
    pub fn run(self) -> Result<(), TransferError> {
        for stream in self.listener.incoming() {
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
            let shared = self.shared.clone();
            // Connections still authenticating are bounded separately (and must finish within
            // a few seconds), in all and per client address, so idle strangers cannot take the
            // places of real clients.
            let admitted = lock(&shared.handshaking).admit(ip);
            if let Err(why) = admitted {
                eprintln!("sprat serve: refusing {peer}: {why}");
                continue;
            }
            let spawned = std::thread::Builder::new()
                .name("sprat-conn".into())
                .spawn(move || handle_connection(&shared, Conn::new(stream, peer), ip));
            if let Err(e) = spawned {
                lock(&self.shared.handshaking).end(ip);
                eprintln!("sprat serve: cannot start a connection thread: {e}");
            }
        }
        Ok(())
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

/// Places among `max` connections that joins may not take (kept for `Open`s and requests).
fn reserved_for_opens(max: usize) -> usize {
    max.div_ceil(8).clamp(1, 8).min(max)
}

/// Most connections authenticating at once.
const MAX_HANDSHAKING: usize = 1024;
/// Most connections authenticating at once from one client address (a client opens up to 64
/// streams at once, and several clients may share a host or a NAT).
const MAX_HANDSHAKING_PER_ADDRESS: usize = 256;

/// The connections still authenticating, in all and by client address.
#[derive(Default)]
struct Handshaking {
    all: usize,
    by_addr: HashMap<IpAddr, usize>,
}

impl Handshaking {
    /// Counts a new connection from `ip` in, unless a limit is reached.
    fn admit(&mut self, ip: Option<IpAddr>) -> Result<(), &'static str> {
        if self.all >= MAX_HANDSHAKING {
            return Err("too many unauthenticated connections");
        }
        if let Some(ip) = ip {
            let n = self.by_addr.entry(ip).or_default();
            if *n >= MAX_HANDSHAKING_PER_ADDRESS {
                return Err("too many unauthenticated connections from this address");
            }
            *n += 1;
        }
        self.all += 1;
        Ok(())
    }

    /// Counts a connection from `ip` out (authenticated, or gone).
    fn end(&mut self, ip: Option<IpAddr>) {
        self.all -= 1;
        if let Some(ip) = ip {
            if let Some(n) = self.by_addr.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    self.by_addr.remove(&ip);
                }
            }
        }
    }
}

/// Holds one place among the authenticated connections while it lives.
struct Admitted<'a>(&'a AtomicUsize);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
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
    expires: Instant,
    /// The push session opened with it; the ticket dies with that session.
    session: Option<[u8; 16]>,
}

/// How long an unused ticket stays valid.
const TICKET_LIFETIME: Duration = Duration::from_secs(60);
/// Most tickets outstanding at once.
const MAX_TICKETS: usize = 256;

/// What an authenticated connection may do: name the exports its credential reaches, and
/// with a ticket only what the ticket was issued for (see [`ticket_allows`]).
struct Access {
    reach: Reach,
    ticket: Option<u64>,
}

fn issue_ticket(shared: &Shared, path: Vec<u8>, export: usize) -> ([u8; 32], Duration) {
    let secret: [u8; 32] = net::random();
    let mut tickets = lock(&shared.tickets);
    let now = Instant::now();
    tickets.retain(|t| t.session.is_some() || t.expires > now);
    if tickets.len() >= MAX_TICKETS {
        tickets.remove(0);
    }
    tickets.push(Ticket {
        id: shared.next_ticket.fetch_add(1, Ordering::Relaxed),
        key: TokenKey::from_token(&secret),
        path,
        export,
        expires: now + TICKET_LIFETIME,
        session: None,
    });
    (secret, TICKET_LIFETIME)
}

fn handle_connection(shared: &Shared, mut conn: Conn, ip: Option<IpAddr>) {
    let (ids, keys): (Vec<(u64, usize)>, Vec<TokenKey>) = {
        let now = Instant::now();
        let mut tickets = lock(&shared.tickets);
        tickets.retain(|t| t.session.is_some() || t.expires > now);
        tickets
            .iter()
            .filter(|t| t.expires > now || t.session.is_some())
            .map(|t| ((t.id, t.export), t.key.clone()))
            .unzip()
    };
    let authenticated = net::accept(&mut conn, &shared.exports.keys, keys, &shared.tls);
    let (machine, access) = match authenticated {
        Ok((m, Credential::Ticket(i))) => {
            let Some(&(id, export)) = ids.get(i) else {
                lock(&shared.handshaking).end(ip);
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
        Err(e) => {
            lock(&shared.handshaking).end(ip);
            eprintln!("sprat serve: {e}");
            return;
        }
    };
    let mut served = Served { conn, machine };
    // The first message travels with the authentication; it says what the connection is for
    // (read under the machine's deadline, which `accept` set).
    let first = served.conn.recv_control_raw();
    lock(&shared.handshaking).end(ip);
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
    // Only an `Open` may take the last places: a client dials its joins, and the listing of
    // its destination (a request), at the same moment as its control connection, and they
    // must not crowd it out, nor keep a new client from starting. A refused join costs a
    // session only that stream (the client sends what went on it over its other streams); a
    // refused listing only the check of what the destination has (everything is sent).
    let limit = match event {
        Event::Open { .. } => shared.max_connections,
        _ => shared.max_connections - reserved_for_opens(shared.max_connections),
    };
    if shared.connections.fetch_add(1, Ordering::SeqCst) >= limit {
        shared.connections.fetch_sub(1, Ordering::SeqCst);
        let text = format!(
            "server busy: {} connections already, try again later",
            shared.max_connections
        );
        eprintln!("sprat serve: refusing {}: {text}", served.conn.peer);
        // Its joins, which may have been admitted, must not wait for it.
        if let Event::Open { session, .. } = &event {
            shared.sessions.abandon(session);
        }
        return served.refuse(ErrorCode::Busy, text);
    }
    let _admitted = Admitted(&shared.connections);
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
            open_session(shared, served, session, op, path, selection, &access);
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
            let _ = announce_and_serve(served, &found, false);
        }
        Event::Request(mut req) => {
            let issue = |path: Vec<u8>, export: usize| issue_ticket(shared, path, export);
            let ctx = requests::Context {
                exports: &shared.exports,
                reach: &access.reach,
                options: &shared.options,
                issue_ticket: &issue,
            };
            // Several requests may follow one another on one connection.
            loop {
                if requests::answer(&ctx, &mut served.conn, req).is_err() {
                    return;
                }
                let next = match served.conn.recv_control_raw() {
                    Ok(msg) => served.machine.on_message(msg, Instant::now()),
                    Err(_) => return,
                };
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
        }
        // The machine hands out nothing else for a first message.
        _ => served.refuse(
            ErrorCode::Protocol,
            "expected Open, Join or a request".into(),
        ),
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
        Event::Open {
            op: Operation::Push { .. },
            path,
            ..
        } => t.session.is_none() && *path == t.path,
        Event::Join { session } => t.session == Some(*session) || (pending && t.session.is_none()),
        // The source server of a third-party copy lists the destination before it pushes,
        // and removes the temporary names a killed writer left below it (nothing else).
        Event::Request(Request::List { path, .. }) => *path == t.path,
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

fn open_session(
    shared: &Shared,
    mut served: Served,
    id: SessionId,
    op: Operation,
    path: Vec<u8>,
    selection: sprat_proto::Selection,
    access: &Access,
) {
    let ticket = access.ticket;
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
    let session = match op {
        Operation::Push {
            source_is_dir,
            durable,
            discard,
        } => {
            let (root, rel) = match &place {
                Some((export, _, rel)) => {
                    if let Err((code, text)) = export.writable("write", rel) {
                        return served.refuse(code, text);
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
                Some(export) if source_is_dir => export
                    .root
                    .mkdir_all(rel)
                    .map(|r| Some(TreeWriter::for_dir(r, !rel.is_empty(), tag))),
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
            let writer = match writer {
                Ok(w) => w.map(|w| {
                    let w = match claim {
                        Some(claim) => w.holding(Box::new(claim)),
                        None => w,
                    };
                    let w = w
                        .publishing(shared.options.publish)
                        .keep_setid(shared.options.keep_setid);
                    Arc::new(w.durable(durable || shared.options.durable))
                }),
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
            Session::Push(PushSession {
                writer,
                jobs: Mutex::new(Some(pool.sender())),
                pool: Mutex::new(Some(pool)),
                counts: Mutex::new(Counts::default()),
                received: Box::default(),
                network_ns: AtomicU64::new(0),
                connections: AtomicUsize::new(0),
                receiving: Receiving::default(),
                root_is_dir: source_is_dir,
            })
        }
        Operation::Pull { check } => {
            // A checked pull's index of the client's destination comes right behind the Open.
            let index = match check {
                DestCheck::None => None,
                _ => match read_index(&mut served, check) {
                    Ok(index) => Some(index),
                    Err((code, text)) => return served.refuse(code, text),
                },
            };
            let Some((export, _, rel)) = &place else {
                return served.refuse(ErrorCode::BadRequest, "a pull needs an export".into());
            };
            let src = match export.root.source(rel) {
                Ok(s) => s,
                // A source below a regular file does not exist either.
                Err(e) if e.errno() == Some(rustix::io::Errno::NOTDIR) => {
                    return served.refuse(ErrorCode::NotFound, e.to_string())
                }
                Err(e) => return served.refuse_store(&e),
            };
            let selection = match crate::config::selection_from_wire(selection) {
                Ok(s) => s,
                Err(e) => return served.refuse(ErrorCode::BadRequest, e.to_string()),
            };
            let counts = Arc::new(SkipCounts::default());
            let skip = index.map(|index| Skip {
                index: Box::new(move || Ok(index)),
                rule: SkipRule::from_check(check),
                counts: counts.clone(),
            });
            let options = TransferOptions {
                selection,
                ..shared.options.clone()
            };
            let handle = match source::start(src, &options, skip) {
                Ok(h) => h,
                Err(e) => return served.refuse(ErrorCode::Io, e.to_string()),
            };
            Session::Pull(PullSession {
                batches: handle.batches.clone(),
                root_is_dir: handle.root_is_dir,
                source: Mutex::new(Some(handle)),
                skipped: counts,
            })
        }
    };
    let session = Arc::new(session);
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
                lock(&self.0.tickets).retain(|t| t.id != tid);
            }
        }
    }
    let _forget = Forget(shared, id, ticket);
    let peer = served.conn.peer.clone();
    tracing::info!(%peer, ?op, path = %display_path(&path), "session opened");
    if let Err(e) = announce_and_serve(served, &session, true) {
        eprintln!("sprat serve: session for {peer} ended: {e}");
    } else {
        tracing::info!(%peer, "session committed");
    }
}

/// Announces the connection (`Opened` on the control connection, `Joined` on the others) and
/// serves the session on it. A push stream is counted in before it is announced (see
/// [`Receiving::enter`]).
fn announce_and_serve(
    mut served: Served,
    session: &Session,
    control: bool,
) -> Result<(), TransferError> {
    let (direction, root_is_dir) = match session {
        Session::Push(p) => (Direction::Push, p.root_is_dir),
        Session::Pull(p) => (Direction::Pull, p.root_is_dir),
    };
    let announcement = if control {
        served.machine.accept_open(direction, root_is_dir)
    } else {
        served.machine.accept_join(direction)
    };
    let announcement = announcement.map_err(|e| served.conn.session_error(e))?;
    match session {
        Session::Push(p) => {
            let receiving = p.receiving.enter();
            served.conn.send(&announcement)?;
            serve_push(served, p, receiving, control)
        }
        Session::Pull(p) => {
            served.conn.send(&announcement)?;
            serve_pull(served, p, control)
        }
    }
}

/// Receives batches on one connection of a push session (the receive stage, each frame
/// checked by the connection's machine) and acknowledges them once written. On the control
/// connection, then waits for `Commit` and, once every stream has ended, finishes the session.
fn serve_push(
    served: Served,
    session: &PushSession,
    receiving: ReceivingStream<'_>,
    control: bool,
) -> Result<(), TransferError> {
    let Served { mut conn, machine } = served;
    let machine = Mutex::new(machine);
    session.connections.fetch_add(1, Ordering::Relaxed);
    let (reply_tx, reply_rx) = unbounded::<BatchOutcome>();
    let mut ack_conn = conn.try_clone()?;
    let received = AtomicU64::new(0);
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
                };
                receive::receive(
                    &mut conn,
                    &lane,
                    |conn| {
                        let mut m = lock(&machine);
                        m.on_batch().map_err(|e| conn.session_error(e))?;
                        // After a fatal error on this connection, what still comes is dropped.
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
    if !control {
        return Ok(());
    }
    let commit = conn.recv_control_raw()?;
    let event = lock(&machine).on_message(commit, Instant::now());
    let sent = match event.map_err(|e| conn.session_error(e))? {
        Event::Commit(sent) => sent,
        other => return Err(conn.protocol(format!("unexpected {other:?} where Commit was due"))),
    };
    // The other streams' last batches may still be on their way (or their acknowledgements
    // being counted): the totals are final once all have ended.
    session.receiving.wait_until_none();
    lock(&session.jobs).take();
    let write_busy = lock(&session.pool)
        .take()
        .map(|p| p.finish())
        .unwrap_or_default();
    // Every batch is written: a large file still waiting for chunks never gets them in this
    // session (its partial file stays, for a later one to resume).
    let incomplete = session
        .writer
        .as_ref()
        .map(|w| w.take_incomplete())
        .unwrap_or_default();
    let dir_errors = session
        .writer
        .as_ref()
        .map(|w| w.finish())
        .unwrap_or_default();
    let mut counts = lock(&session.counts).clone();
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
        let failures: Vec<(Vec<u8>, String)> = dir_errors
            .iter()
            .map(|e| (e.path.clone().into_bytes(), e.to_string()))
            .chain(incomplete.into_iter().map(|(path, missing)| {
                let text = incomplete_text(&path, missing);
                (path, text)
            }))
            .collect();
        for (p, t) in &failures {
            counts.add_failure(p, t);
        }
        let reply = machine
            .dir_failures(failures)
            .map_err(|e| conn.session_error(e))?;
        conn.send(&reply)?;
    }
    let streams = session.connections.load(Ordering::Relaxed).max(1) as u64;
    let done = machine.done(RemoteStats {
        files: counts.files,
        dirs: counts.dirs,
        symlinks: counts.symlinks,
        bytes: counts.bytes,
        failures: counts.failed,
        read_busy_ns: 0,
        network_busy_ns: session.network_ns.load(Ordering::Relaxed) / streams,
        write_busy_ns: write_busy.as_nanos() as u64,
        syncs: session.writer.as_ref().map_or(0, |w| w.sync_count()),
        totals: received,
        ..RemoteStats::default()
    });
    conn.send(&done.map_err(|e| conn.session_error(e))?)
}

/// The failure of a large file left incomplete when its transfer ended.
pub(crate) fn incomplete_text(path: &[u8], missing: u64) -> String {
    format!(
        "'{}': incomplete, {missing} bytes never arrived: not put in place (kept to resume)",
        display_path(path)
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
        let ack = lock(machine).ack(o.seq, o.files as u32, o.bytes, o.failures);
        conn.send(&ack.map_err(|e| conn.session_error(e))?)?;
    }
    let end_ack = lock(machine).end_ack();
    conn.send(&end_ack.map_err(|e| conn.session_error(e))?)
}

/// Sends batches from the session's source until it is drained (the send stage); the control
/// connection then answers `Commit` with the read stage's busy time.
fn serve_pull(served: Served, session: &PullSession, control: bool) -> Result<(), TransferError> {
    let Served {
        mut conn,
        mut machine,
    } = served;
    let end = |machine: &mut ServerStream| match machine.end() {
        Ok(end) => Next::End(end, ()),
        Err(_) => Next::Stop(()),
    };
    let mut next = || match session.batches.recv() {
        Ok(batch) => Next::Batch(batch),
        Err(_) => end(&mut machine),
    };
    send::send(&mut conn, &mut next, |_, sent| sent.map(|()| None))?;
    if !control {
        return Ok(());
    }
    let commit = conn.recv_control_raw()?;
    match machine
        .on_message(commit, Instant::now())
        .map_err(|e| conn.session_error(e))?
    {
        Event::Commit(_) => {}
        other => return Err(conn.protocol(format!("unexpected {other:?} where Commit was due"))),
    }
    let source = lock(&session.source).take();
    // Final: every connection took its last batch from the source before its `End`.
    let totals = source.as_ref().map(|h| h.totals.get()).unwrap_or_default();
    let read_busy = source.map(|h| h.finish()).unwrap_or_default();
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
