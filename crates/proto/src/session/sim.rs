//! Client and server state machines run against each other in memory, through a simulated
//! network with a virtual clock: each connection has its own one-way delay (so messages of
//! different connections arrive in another order than sent, while each connection keeps its
//! order, as TCP does), a connection can be cut, one message can be duplicated. The small
//! drivers here do what the engine's do (round-robin senders, a commit gate, a server that
//! holds early joins and refuses when full or read-only), so push, pull, refusals and commit
//! are checked in milliseconds and without a process.

use super::client::{self, ClientStream, CommitGate};
use super::server::{self, ServerStream};
use super::{Direction, Role, SessionError, JOIN_PATIENCE};
use crate::auth::TokenKey;
use crate::{Batch, ErrorCode, Message, Operation, RemoteStats};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
enum Frame {
    Msg(Message),
    Batch(Batch),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum To {
    Client,
    Server,
}

/// The network: deliveries ordered by arrival time (ties by sending order).
struct Net {
    now: Instant,
    queue: BTreeMap<(Instant, u64), (usize, To, Frame)>,
    sent: u64,
    /// One-way delay of each connection.
    delays: Vec<Duration>,
    /// Cut connections deliver nothing more.
    cut: Vec<bool>,
    /// Deliver the first message of this name to the client on this connection twice.
    duplicate: Option<(usize, &'static str)>,
}

impl Net {
    fn new(delays: Vec<Duration>) -> Net {
        Net {
            now: Instant::now(),
            queue: BTreeMap::new(),
            sent: 0,
            cut: vec![false; delays.len()],
            delays,
            duplicate: None,
        }
    }

    fn send(&mut self, conn: usize, to: To, frame: Frame) {
        if self.cut[conn] {
            return;
        }
        let copies = match (&frame, self.duplicate) {
            (Frame::Msg(m), Some((c, name)))
                if c == conn && to == To::Client && m.name() == name =>
            {
                self.duplicate = None;
                2
            }
            _ => 1,
        };
        for _ in 0..copies {
            let at = self.now + self.delays[conn];
            self.queue
                .insert((at, self.sent), (conn, to, frame.clone()));
            self.sent += 1;
        }
    }

    fn next(&mut self) -> Option<(usize, To, Frame)> {
        let ((at, _), delivery) = self.queue.pop_first()?;
        self.now = self.now.max(at);
        Some(delivery)
    }

    fn cut(&mut self, conn: usize) {
        self.cut[conn] = true;
        self.queue.retain(|_, (c, _, _)| *c != conn);
    }
}

/// Batches a connection has unacknowledged at most (the simulated TCP window).
const WINDOW: usize = 4;

fn batch(seq: u64) -> Batch {
    let mut b = Batch::new(seq, 100);
    b.data = vec![seq as u8; 100];
    b
}

/// A client's session driver, as the engine's: one machine per connection, batches sent
/// round robin on every connection that may send, refused connections' batches sent again.
struct SimClient {
    direction: Direction,
    session: [u8; 16],
    streams: Vec<ClientStream>,
    gate: CommitGate,
    /// Which joins still hold the gate (until announced, refused, or settled with nothing
    /// held once nothing is left to send).
    holding: Vec<bool>,
    to_send: VecDeque<Batch>,
    again: VecDeque<Batch>,
    sent_on: Vec<Vec<u64>>,
    acked: Vec<u64>,
    received: Vec<u64>,
    done: Option<RemoteStats>,
    refused: Option<(ErrorCode, String)>,
    error: Option<SessionError>,
    committed_at: Option<Instant>,
    done_at: Option<Instant>,
    /// How many batches had arrived when `Done` did (a pull).
    received_at_done: usize,
    /// When the control connection's `End` arrived (a pull).
    control_ended_at: Option<Instant>,
    announced_at: Vec<Option<Instant>>,
}

impl SimClient {
    fn start(net: &mut Net, direction: Direction, key: &TokenKey, batches: u64) -> SimClient {
        let n = net.delays.len();
        let mut gate = CommitGate::new();
        let mut streams = Vec::new();
        for i in 0..n {
            let role = if i == 0 { Role::Control } else { Role::Joining };
            let (s, hello) =
                ClientStream::new(direction, role, Some(key.clone()), [i as u8; 32], net.now);
            net.send(i, To::Server, Frame::Msg(hello));
            if role == Role::Joining {
                gate.joining();
            }
            streams.push(s);
        }
        gate.all_started();
        SimClient {
            direction,
            session: [9; 16],
            holding: (0..n).map(|i| i > 0).collect(),
            streams,
            gate,
            to_send: (1..=batches).map(batch).collect(),
            again: VecDeque::new(),
            sent_on: vec![Vec::new(); n],
            acked: Vec::new(),
            received: Vec::new(),
            done: None,
            refused: None,
            error: None,
            committed_at: None,
            done_at: None,
            received_at_done: 0,
            control_ended_at: None,
            announced_at: vec![None; n],
        }
    }

    fn on_frame(&mut self, net: &mut Net, conn: usize, frame: Frame) -> Result<(), SessionError> {
        let stream = &mut self.streams[conn];
        let msg = match frame {
            Frame::Batch(b) => {
                stream.on_batch()?;
                self.received.push(b.seq);
                return Ok(());
            }
            Frame::Msg(m) => m,
        };
        match stream.on_message(msg, net.now)? {
            client::Event::ServerProved => {
                let first = match stream.role() {
                    Role::Control => Message::Open {
                        session: self.session,
                        op: match self.direction {
                            Direction::Push => Operation::Push {
                                source_is_dir: true,
                                durable: false,
                                discard: false,
                                owners: true,
                                numeric_ids: false,
                                keep_existing: false,
                                no_link_at_path: false,
                                source: Default::default(),
                                or_parent: false,
                            },
                            Direction::Pull => Operation::Pull {
                                check: crate::DestCheck::None,
                                meta: Default::default(),
                                into_dir: false,
                            },
                        },
                        path: b"dst".to_vec(),
                        selection: Default::default(),
                    },
                    Role::Joining => Message::Join {
                        session: self.session,
                    },
                };
                for m in stream.open(first, net.now)? {
                    net.send(conn, To::Server, Frame::Msg(m));
                }
            }
            client::Event::Announced { .. } => {
                self.announced_at[conn] = Some(net.now);
                if std::mem::take(&mut self.holding[conn]) {
                    self.gate.settled();
                }
            }
            client::Event::Acked { seq, .. } => self.acked.push(seq),
            client::Event::Ended if conn == 0 => self.control_ended_at = Some(net.now),
            client::Event::EndAcked
            | client::Event::Ended
            | client::Event::DirFailures(..)
            | client::Event::Superseded(_)
            | client::Event::Progress(_) => {}
            client::Event::Done(stats) => {
                self.done = Some(stats);
                self.done_at = Some(net.now);
                self.received_at_done = self.received.len();
            }
            client::Event::Refused {
                code,
                text,
                announced,
            } => {
                if stream.role() == Role::Control || announced {
                    self.refused.get_or_insert((code, text));
                }
                if !announced && stream.role() == Role::Joining {
                    self.again.extend(stream.take_held());
                    if std::mem::take(&mut self.holding[conn]) {
                        self.gate.settled();
                    }
                }
            }
        }
        Ok(())
    }

    /// One round of sending: a batch on each connection that may send one, `End` on those
    /// with nothing left once the gate is open, and the control connection's `Commit`. As
    /// the engine's: a join with nothing left to send that holds no batch unannounced settles
    /// its part of the gate, and takes no batch handed back unless announced.
    fn pump(&mut self, net: &mut Net) -> Result<(), SessionError> {
        if self.refused.is_some() {
            return Ok(());
        }
        for (i, stream) in self.streams.iter().enumerate() {
            let idle = stream.may_send_batch() && self.to_send.is_empty();
            if idle && !stream.holds_unannounced() && self.holding[i] {
                self.holding[i] = false;
                self.gate.settled();
            }
        }
        for (i, stream) in self.streams.iter_mut().enumerate() {
            if self.direction == Direction::Push && stream.may_send_batch() {
                // A window per connection, as TCP's: a few batches unacknowledged at most.
                if stream.over_limit() || stream.unacknowledged().len() >= WINDOW {
                    continue;
                }
                let takes_back = i == 0 || stream.announced() || self.holding[i];
                let again = takes_back.then(|| self.again.pop_front()).flatten();
                if let Some(b) = again.or_else(|| self.to_send.pop_front()) {
                    stream.sending(b.seq);
                    net.send(i, To::Server, Frame::Batch(b.clone()));
                    self.sent_on[i].push(b.seq);
                    if let super::client::Sent::Refused(back) = stream.sent(b) {
                        self.again.push_back(back);
                    }
                } else if self.gate.open() && (takes_back || !stream.holds_unannounced()) {
                    net.send(i, To::Server, Frame::Msg(stream.end()?));
                }
            }
            // A pull's `Commit` goes right behind its `Open`; a push's waits for the gate.
            let gate_open = self.direction == Direction::Pull || self.gate.open();
            if stream.may_commit() && gate_open && self.committed_at.is_none() {
                net.send(
                    i,
                    To::Server,
                    Frame::Msg(stream.commit(crate::Totals::default())?),
                );
                self.committed_at = Some(net.now);
            }
        }
        Ok(())
    }
}

struct ServerConn {
    stream: ServerStream,
    session: Option<[u8; 16]>,
}

struct SimSession {
    direction: Direction,
    control: usize,
    /// Connections announced and not ended (push).
    receiving: usize,
    files: u64,
    bytes: u64,
    commit_waiting: bool,
    pull_conns: Vec<usize>,
}

/// A server's driver, as the engine's: sessions by id, early joins held for their `Open`,
/// joins refused beyond `join_places`, pushes refused when read-only.
struct SimServer {
    conns: Vec<ServerConn>,
    sessions: HashMap<[u8; 16], SimSession>,
    join_places: usize,
    read_only: bool,
    waiting: Vec<(usize, [u8; 16], Instant)>,
    /// What arrived on a held join, unread until the server decided on it (as a real server
    /// reads nothing from a connection meanwhile).
    backlog: HashMap<usize, VecDeque<Frame>>,
    /// What arrived on a pull's control connection after its `Open`, unread until the server
    /// has sent its `End` there (as a real server reads the `Commit` only then).
    after_end: HashMap<usize, VecDeque<Frame>>,
    /// Pull connections whose `End` is sent.
    pull_ended: Vec<usize>,
    refused_ids: Vec<[u8; 16]>,
    /// Sessions answered and forgotten: a join for one is refused at once.
    ended_ids: Vec<[u8; 16]>,
    written: Vec<u64>,
    pull_source: VecDeque<Batch>,
}

impl SimServer {
    fn new(key: &TokenKey, conns: usize, now: Instant) -> SimServer {
        SimServer {
            conns: (0..conns)
                .map(|i| ServerConn {
                    stream: ServerStream::new(
                        Some(key.clone()),
                        Vec::new(),
                        [100 + i as u8; 32],
                        now,
                    ),
                    session: None,
                })
                .collect(),
            sessions: HashMap::new(),
            join_places: usize::MAX,
            read_only: false,
            waiting: Vec::new(),
            backlog: HashMap::new(),
            after_end: HashMap::new(),
            pull_ended: Vec::new(),
            refused_ids: Vec::new(),
            ended_ids: Vec::new(),
            written: Vec::new(),
            pull_source: VecDeque::new(),
        }
    }

    fn admit(&mut self, net: &mut Net, conn: usize, id: [u8; 16]) -> Result<(), SessionError> {
        let Some(session) = self.sessions.get_mut(&id) else {
            let refusal = self.conns[conn]
                .stream
                .refuse(ErrorCode::UnknownSession, "no such session".into());
            net.send(conn, To::Client, Frame::Msg(refusal));
            return Ok(());
        };
        let joined = self.conns[conn].stream.accept_join(session.direction)?;
        self.conns[conn].session = Some(id);
        session.receiving += 1;
        if session.direction == Direction::Pull {
            session.pull_conns.push(conn);
        }
        net.send(conn, To::Client, Frame::Msg(joined));
        Ok(())
    }

    /// Reads what waited on a connection the server has now decided on.
    fn replay(&mut self, net: &mut Net, conn: usize) -> Result<(), SessionError> {
        for frame in self.backlog.remove(&conn).unwrap_or_default() {
            self.on_frame(net, conn, frame)?;
        }
        Ok(())
    }

    fn on_frame(&mut self, net: &mut Net, conn: usize, frame: Frame) -> Result<(), SessionError> {
        if self.waiting.iter().any(|w| w.0 == conn) {
            self.backlog.entry(conn).or_default().push_back(frame);
            return Ok(());
        }
        let pull_control = self.conns[conn]
            .session
            .and_then(|id| self.sessions.get(&id))
            .is_some_and(|s| s.direction == Direction::Pull && s.control == conn);
        if pull_control && !self.pull_ended.contains(&conn) {
            self.after_end.entry(conn).or_default().push_back(frame);
            return Ok(());
        }
        let msg = match frame {
            Frame::Batch(b) => {
                self.conns[conn].stream.on_batch()?;
                let Some(id) = self.conns[conn].session else {
                    return Ok(()); // refused: read and dropped
                };
                self.written.push(b.seq);
                if let Some(s) = self.sessions.get_mut(&id) {
                    s.files += 1;
                    s.bytes += b.data.len() as u64;
                }
                let ack = self.conns[conn].stream.ack(
                    b.seq,
                    1,
                    b.data.len() as u64,
                    Default::default(),
                    (Vec::new(), 0),
                )?;
                net.send(conn, To::Client, Frame::Msg(ack));
                return Ok(());
            }
            Frame::Msg(m) => m,
        };
        let event = self.conns[conn].stream.on_message(msg, net.now)?;
        match event {
            server::Event::Reply(r)
            | server::Event::Greeted { reply: r, .. }
            | server::Event::Unprovable(r) => net.send(conn, To::Client, Frame::Msg(r)),
            server::Event::Authenticated(_) | server::Event::Dropped => {}
            server::Event::Open { session, op, .. } => {
                let direction = match op {
                    Operation::Push { .. } => Direction::Push,
                    Operation::Pull { .. } => Direction::Pull,
                };
                if self.read_only && direction == Direction::Push {
                    let refusal = self.conns[conn]
                        .stream
                        .refuse(ErrorCode::ReadOnly, "the server is read-only".into());
                    net.send(conn, To::Client, Frame::Msg(refusal));
                    self.refused_ids.push(session);
                } else {
                    let opened = self.conns[conn].stream.accept_open(
                        direction,
                        true,
                        Default::default(),
                        (false, false),
                    )?;
                    self.conns[conn].session = Some(session);
                    self.sessions.insert(
                        session,
                        SimSession {
                            direction,
                            control: conn,
                            receiving: 1,
                            files: 0,
                            bytes: 0,
                            commit_waiting: false,
                            pull_conns: if direction == Direction::Pull {
                                vec![conn]
                            } else {
                                Vec::new()
                            },
                        },
                    );
                    net.send(conn, To::Client, Frame::Msg(opened));
                }
                // Joins held for this session are answered now.
                let (ready, still): (Vec<_>, Vec<_>) = self
                    .waiting
                    .drain(..)
                    .partition(|(_, id, _)| *id == session);
                self.waiting = still;
                for (c, id, _) in ready {
                    self.admit(net, c, id)?;
                    self.replay(net, c)?;
                }
            }
            server::Event::Join { session } => {
                let admitted = self.conns.iter().filter(|c| c.session.is_some()).count();
                if admitted + self.waiting.len() >= self.join_places {
                    let refusal = self.conns[conn]
                        .stream
                        .refuse(ErrorCode::Io, "server busy".into());
                    net.send(conn, To::Client, Frame::Msg(refusal));
                } else if self.sessions.contains_key(&session)
                    || self.refused_ids.contains(&session)
                    || self.ended_ids.contains(&session)
                {
                    self.admit(net, conn, session)?;
                } else {
                    self.waiting.push((conn, session, net.now));
                }
            }
            server::Event::Request(_)
            | server::Event::IndexPart(_)
            | server::Event::IndexSums(_)
            | server::Event::IndexEnd => {
                return Err(SessionError::Unexpected {
                    state: "in the simulation",
                    got: "a request or an index",
                })
            }
            server::Event::Ended => {
                let Some(id) = self.conns[conn].session else {
                    return Ok(());
                };
                let end_ack = self.conns[conn].stream.end_ack()?;
                net.send(conn, To::Client, Frame::Msg(end_ack));
                if let Some(s) = self.sessions.get_mut(&id) {
                    s.receiving -= 1;
                    if s.commit_waiting && s.receiving == 0 {
                        self.finish(net, id)?;
                    }
                }
            }
            server::Event::Commit(_) => {
                let Some(id) = self.conns[conn].session else {
                    return Ok(());
                };
                let ready = self
                    .sessions
                    .get(&id)
                    .is_some_and(|s| s.direction == Direction::Pull || s.receiving == 0);
                if ready {
                    self.finish(net, id)?;
                } else if let Some(s) = self.sessions.get_mut(&id) {
                    s.commit_waiting = true;
                }
            }
        }
        Ok(())
    }

    /// Answers the session's `Commit` with its totals and forgets it.
    fn finish(&mut self, net: &mut Net, id: [u8; 16]) -> Result<(), SessionError> {
        let Some(s) = self.sessions.remove(&id) else {
            return Ok(());
        };
        self.ended_ids.push(id);
        let done = self.conns[s.control].stream.done(RemoteStats {
            files: s.files,
            bytes: s.bytes,
            ..RemoteStats::default()
        })?;
        net.send(s.control, To::Client, Frame::Msg(done));
        Ok(())
    }

    /// One round of a pull: a batch (or `End`) on each of the session's connections.
    fn pump(&mut self, net: &mut Net) -> Result<(), SessionError> {
        let conns: Vec<usize> = self
            .sessions
            .values()
            .flat_map(|s| s.pull_conns.clone())
            .collect();
        for c in conns {
            let stream = &mut self.conns[c].stream;
            if !stream.may_send_batch() {
                continue;
            }
            match self.pull_source.pop_front() {
                Some(b) => net.send(c, To::Client, Frame::Batch(b)),
                None => {
                    net.send(c, To::Client, Frame::Msg(stream.end()?));
                    self.pull_ended.push(c);
                    for frame in self.after_end.remove(&c).unwrap_or_default() {
                        self.on_frame(net, c, frame)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Joins whose session did not open within the patience are refused.
    fn expire(&mut self, net: &mut Net) -> Result<(), SessionError> {
        let now = net.now;
        let (late, still): (Vec<_>, Vec<_>) = self
            .waiting
            .drain(..)
            .partition(|(_, _, since)| now >= *since + JOIN_PATIENCE);
        self.waiting = still;
        for (c, _, _) in late {
            let refusal = self.conns[c]
                .stream
                .refuse(ErrorCode::UnknownSession, "no such session".into());
            net.send(c, To::Client, Frame::Msg(refusal));
            self.replay(net, c)?;
        }
        Ok(())
    }
}

/// Runs a session to its end; `cut_after` cuts connection `.0` at step `.1`.
/// Panics if the run does not settle (a hang).
fn run(
    net: &mut Net,
    client: &mut SimClient,
    server: &mut SimServer,
    cut_after: Option<(usize, usize)>,
) {
    for step in 0..1_000_000 {
        if let Some((conn, after)) = cut_after {
            if step == after && !net.cut[conn] {
                net.cut(conn);
            }
        }
        if client.error.is_none() {
            if let Err(e) = client.pump(net) {
                client.error = Some(e);
            }
        }
        server
            .pump(net)
            .expect("the server's driver follows the rules");
        match net.next() {
            Some((conn, To::Server, frame)) => {
                // A server that sees a broken rule drops the connection, as the engine does.
                if server.on_frame(net, conn, frame).is_err() {
                    net.cut(conn);
                }
            }
            Some((conn, To::Client, frame)) => {
                if let Err(e) = client.on_frame(net, conn, frame) {
                    client.error.get_or_insert(e);
                }
            }
            None => {
                if client.done.is_some() || client.refused.is_some() {
                    return;
                }
                // Nothing in flight: time moves on to the next deadline of either side.
                let client_next = client.streams.iter().filter_map(|s| s.deadline()).min();
                let server_next = server.waiting.iter().map(|w| w.2 + JOIN_PATIENCE).min();
                let Some(at) = client_next.into_iter().chain(server_next).min() else {
                    return;
                };
                net.now = net.now.max(at);
                server
                    .expire(net)
                    .expect("the server's driver follows the rules");
                for s in &mut client.streams {
                    if let Err(e) = s.on_timeout(net.now) {
                        client.error.get_or_insert(e);
                    }
                }
                if client.error.is_some() && net.queue.is_empty() {
                    return;
                }
            }
        }
    }
    panic!("the session did not settle");
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn setup(delays: &[u64], direction: Direction, batches: u64) -> (Net, SimClient, SimServer) {
    let key = TokenKey::from_token(b"sim");
    let mut net = Net::new(delays.iter().map(|&d| ms(d)).collect());
    let server = SimServer::new(&key, delays.len(), net.now);
    let client = SimClient::start(&mut net, direction, &key, batches);
    (net, client, server)
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

#[test]
fn a_push_over_streams_of_different_delays_writes_and_acknowledges_each_batch_once() {
    let (mut net, mut client, mut server) = setup(&[1, 7, 30, 50], Direction::Push, 400);
    let started = net.now;
    run(&mut net, &mut client, &mut server, None);
    assert_eq!(client.error, None);
    let all: Vec<u64> = (1..=400).collect();
    assert_eq!(
        sorted(server.written.clone()),
        all,
        "each batch written once"
    );
    assert_eq!(
        sorted(client.acked.clone()),
        all,
        "each batch acknowledged once"
    );
    let done = client.done.expect("Done arrives");
    assert_eq!((done.files, done.bytes), (400, 40_000));
    // Every connection carried data, and the commit went only once all were announced.
    assert!(client.sent_on.iter().all(|s| !s.is_empty()));
    let committed = client.committed_at.expect("committed");
    assert!(client
        .announced_at
        .iter()
        .all(|a| a.is_some_and(|a| a <= committed)));
    // Virtual time: a few round trips of the slowest connection, not a real wait.
    assert!(net.now - started < ms(2000));
}

#[test]
fn a_pull_over_reordered_streams_delivers_every_batch_then_done() {
    let (mut net, mut client, mut server) = setup(&[2, 40, 9], Direction::Pull, 0);
    server.pull_source = (1..=400).map(batch).collect();
    run(&mut net, &mut client, &mut server, None);
    assert_eq!(client.error, None);
    assert_eq!(
        sorted(client.received.clone()),
        (1..=400).collect::<Vec<_>>()
    );
    assert!(
        client.received.windows(2).any(|w| w[0] > w[1]),
        "batches arrive out of order"
    );
    assert!(client.done.is_some());
    // The `Commit` went right behind the `Open`, before the session was announced.
    let committed = client.committed_at.expect("committed");
    assert!(client.announced_at[0].is_some_and(|a| committed < a));
}

#[test]
fn a_pulls_early_commit_is_answered_after_the_control_connections_last_batch() {
    // One connection: the server reads the `Commit` (sent with the `Open`) only once it has
    // sent its `End`, so `Done` comes behind every batch and right behind the `End`, not a
    // round trip later.
    let (mut net, mut client, mut server) = setup(&[10], Direction::Pull, 0);
    server.pull_source = (1..=30).map(batch).collect();
    let started = net.now;
    run(&mut net, &mut client, &mut server, None);
    assert_eq!(client.error, None);
    assert_eq!(client.received, (1..=30).collect::<Vec<_>>());
    assert_eq!(
        client.received_at_done, 30,
        "Done came after the last batch"
    );
    let committed = client.committed_at.map(|c| c - started);
    assert_eq!(committed, Some(ms(20)), "behind the Open, after the hellos");
    assert_eq!(
        client.done_at, client.control_ended_at,
        "Done right behind End"
    );
}

#[test]
fn a_small_push_commits_behind_its_data_without_waiting_for_joins_that_sent_nothing() {
    // One batch: the control connection carries it; the joins carry nothing, so the commit
    // goes right behind the data, before they are announced. The last join's path is a
    // little longer: its `Join` reaches the server after the session ended, and is refused.
    let (mut net, mut client, mut server) = setup(&[10, 10, 10, 12], Direction::Push, 1);
    let started = net.now;
    run(&mut net, &mut client, &mut server, None);
    assert_eq!(client.error, None);
    assert_eq!(client.refused, None, "a late join does not fail the push");
    assert_eq!(server.written, vec![1]);
    assert_eq!(client.acked, vec![1]);
    assert_eq!(client.done.map(|d| d.files), Some(1));
    assert_eq!(
        client.sent_on[0],
        vec![1],
        "the control connection carried it"
    );
    let committed = client.committed_at.expect("committed");
    assert!(
        client.announced_at[1..]
            .iter()
            .all(|a| a.is_none_or(|a| a > committed)),
        "the commit did not wait for the joins"
    );
    assert!(!client.streams[3].announced(), "the late join was refused");
    // The commit left once the last join had sent its `Join` (24 ms) and `Done` came one
    // round trip of the control connection later; waiting for every `Joined` would have
    // taken until 68 ms.
    let done_at = client.done_at.expect("done") - started;
    assert!(done_at <= ms(44), "{done_at:?}");
}

#[test]
fn batches_of_joins_a_full_server_refused_go_on_the_other_streams() {
    let (mut net, mut client, mut server) = setup(&[5, 1, 1, 1], Direction::Push, 40);
    // The joins arrive before the `Open`; only one finds a place.
    server.join_places = 1;
    run(&mut net, &mut client, &mut server, None);
    assert_eq!(client.error, None);
    assert_eq!(client.refused, None, "refused joins do not fail the push");
    let refused = client.streams.iter().filter(|s| !s.announced()).count();
    assert_eq!(refused, 2, "two joins found no place");
    assert!(
        client.sent_on[2].len() + client.sent_on[3].len() > 0,
        "they had sent batches"
    );
    assert_eq!(sorted(server.written.clone()), (1..=40).collect::<Vec<_>>());
    assert_eq!(sorted(client.acked.clone()), (1..=40).collect::<Vec<_>>());
    assert_eq!(client.done.map(|d| d.files), Some(40));
}

#[test]
fn a_refused_open_fails_the_push_and_writes_nothing() {
    let (mut net, mut client, mut server) = setup(&[3, 1, 1], Direction::Push, 20);
    server.read_only = true;
    run(&mut net, &mut client, &mut server, None);
    assert!(matches!(client.refused, Some((ErrorCode::ReadOnly, _))));
    assert!(server.written.is_empty());
    assert!(client.acked.is_empty());
    assert!(client.done.is_none());
}

#[test]
fn a_duplicated_announcement_is_a_typed_error_not_a_hang() {
    let (mut net, mut client, mut server) = setup(&[1, 1], Direction::Push, 10);
    net.duplicate = Some((1, "Joined"));
    run(&mut net, &mut client, &mut server, None);
    assert!(matches!(
        client.error,
        Some(SessionError::Unexpected { got: "Joined", .. })
    ));
}

#[test]
fn a_duplicated_acknowledgement_is_caught() {
    let (mut net, mut client, mut server) = setup(&[1, 1], Direction::Push, 10);
    net.duplicate = Some((0, "BatchAck"));
    run(&mut net, &mut client, &mut server, None);
    assert!(matches!(
        client.error,
        Some(SessionError::UnknownAck { .. })
    ));
}

#[test]
fn a_lost_connection_names_exactly_what_it_leaves_unacknowledged() {
    let (mut net, mut client, mut server) = setup(&[20, 20], Direction::Push, 40);
    run(&mut net, &mut client, &mut server, Some((1, 30)));
    // The cut connection never ends: the session is stuck without it (the engine reports
    // the loss), and its machine says which batches to send again.
    let left = client.streams[1].lost();
    let acked = &client.acked;
    let expected: Vec<u64> = client.sent_on[1]
        .iter()
        .copied()
        .filter(|s| !acked.contains(s))
        .collect();
    assert_eq!(left, expected);
    assert!(!left.is_empty());
    // Nothing the server wrote is among them unless its acknowledgement was lost with the cut.
    assert!(client.done.is_none());
}

#[test]
fn a_server_that_never_announces_a_join_times_out_in_virtual_time() {
    let (mut net, mut client, mut server) = setup(&[1, 1], Direction::Push, 4);
    // The join's session never opens: the control connection is cut before its `Open` lands.
    net.cut(0);
    let started = net.now;
    run(&mut net, &mut client, &mut server, None);
    // The server refuses the held join after its patience, and the client stops waiting for
    // the server's hello on the control connection at its deadline.
    assert!(net.now - started >= JOIN_PATIENCE);
    assert!(client.streams[1].deadline().is_none());
    assert!(client.gate.open(), "the refused join settled");
    assert_eq!(
        client.error,
        Some(SessionError::TimedOut("waiting for the server's hello"))
    );
}
