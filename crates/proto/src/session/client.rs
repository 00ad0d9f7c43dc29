//! A client's connection to a session, as a state machine (see the [module page](super)).
//!
//! The machine follows both directions of one connection: what the client may still send
//! ([`Sending`]) and what it is waiting for ([`Receiving`]). A push sends batches right behind
//! its `Open` or `Join`, before the server announced the connection; until the announcement the
//! machine keeps each batch sent (at most [`HELD_LIMIT`] bytes), and if the server refuses the
//! connection it hands them back to go on the session's other connections. Every batch sent
//! stays in flight until its acknowledgement; `EndAck` with any still in flight is an error, and
//! a lost connection tells which batches it leaves unacknowledged.

use super::{Direction, Role, SessionError, HANDSHAKE_TIMEOUT, HELD_LIMIT};
use crate::auth::{ClientHandshake, TokenKey};
use crate::{Batch, ErrorCode, Message, RemoteStats};
use std::time::Instant;

/// What became of a batch handed to [`ClientStream::sent`].
#[derive(Debug)]
pub enum Sent {
    /// The server refused the connection before announcing it and read none of the batch:
    /// send it elsewhere.
    Refused(Batch),
    /// Kept until the server announces the connection (or refuses it).
    Held,
    /// Nothing more to do with it: its memory is the caller's again.
    Done(Batch),
}

/// What arrived on a connection, for the driver to act on.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// The server proved the key: send what [`ClientStream::open`] returns.
    ServerProved,
    /// The server announced the connection (`Opened` on the control connection, with whether
    /// the session's root is a directory; `Joined` on the others).
    Announced {
        root_is_dir: Option<bool>,
        /// A pull's source directory on the server's kernel (`Opened` says; zeros otherwise).
        source: crate::SourceId,
        /// The server sends the session's data on the control connection alone and refuses
        /// its joins (`Opened` says; see [`crate::Message::Opened`]).
        one_stream: bool,
        /// A push `or_parent` went to the path's parent (`Opened` says; see
        /// [`crate::Operation::Push`]).
        to_parent: bool,
    },
    /// A batch of this connection is written; `unlisted` failures are counted, not listed.
    Acked {
        seq: u64,
        files: u32,
        bytes: u64,
        kept: crate::KeptEntries,
        failures: Vec<(Vec<u8>, String)>,
        unlisted: u32,
    },
    /// Every batch of this (push) connection is acknowledged.
    EndAcked,
    /// The last batch of this (pull) connection arrived.
    Ended,
    /// How far the server's side of a pull has come (on any of its connections).
    Progress(crate::TransferProgress),
    /// After `Commit`: directories whose attributes the server could not set (and how many
    /// more were not listed).
    DirFailures(Vec<(Vec<u8>, String)>, u32),
    /// Paths whose partial copy at the destination a pull did not resume (its server's
    /// `Superseded`, between `End` and `Done`).
    Superseded(Vec<Vec<u8>>),
    /// The session's totals: the answer to `Commit`, which ends the session.
    Done(RemoteStats),
    /// The server refused the connection or stopped it; `announced` says whether it had
    /// announced it (if not, it read none of the batches sent on it: [`ClientStream::take_held`]).
    Refused {
        code: ErrorCode,
        text: String,
        announced: bool,
    },
}

/// What the client is waiting for.
#[derive(Debug)]
enum Receiving {
    /// Its hello is sent; the server's answer and proof are due.
    Greeting(ClientHandshake),
    /// The server proved the key (or the driver runs the handshake, see
    /// [`ClientStream::authenticated`]); the first message is not sent yet, nor what goes in
    /// front of it (the client's proof or channel-bound hello), if anything.
    Proved(Option<Message>),
    /// `Open` or `Join` is sent; the server's announcement is due.
    Announcing,
    /// Announced: acknowledgements (push) or batches (pull) arrive.
    Transferring,
    /// `EndAck` (push) or `End` (pull) arrived.
    Ended,
    /// `Done` arrived.
    Done,
    /// Refused, lost or broken: nothing more arrives.
    Closed,
}

/// What the client may still send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sending {
    /// Batches (push), or nothing yet (pull).
    Open,
    /// `End` is sent (push).
    Ended,
    /// `Commit` is sent (control connection).
    Committed,
}

/// One connection of a client's session.
#[derive(Debug)]
pub struct ClientStream {
    direction: Direction,
    role: Role,
    receiving: Receiving,
    sending: Sending,
    /// Sequence numbers of batches sent and not acknowledged, in the order sent.
    in_flight: Vec<u64>,
    /// Batches sent before the announcement, kept until it arrives.
    held: Vec<Batch>,
    held_bytes: u64,
    /// The server refused the connection before announcing it.
    refused_unannounced: bool,
    /// A checked pull's index of the destination: sent entirely.
    index_ended: bool,
    /// The `Open` was a push's that left its place to the server (`or_parent`): only then may
    /// `Opened` say it went to the path's parent.
    or_parent: bool,
    deadline: Option<Instant>,
}

impl ClientStream {
    /// Starts a connection's handshake at `now`; send the returned hello at once.
    pub fn new(
        direction: Direction,
        role: Role,
        key: Option<TokenKey>,
        nonce: [u8; 32],
        now: Instant,
    ) -> (ClientStream, Message) {
        let (handshake, hello) = ClientHandshake::new(key, nonce);
        let mut stream = ClientStream::authenticated(direction, role, None);
        stream.receiving = Receiving::Greeting(handshake);
        stream.deadline = Some(now + HANDSHAKE_TIMEOUT);
        (stream, hello)
    }

    /// A connection whose handshake the driver runs itself (a channel-bound hello, see
    /// [`crate::auth::ClientHandshake::new_bound`], whose answer the driver checks before it
    /// hands this machine anything): `ahead` goes out in front of the first message (the
    /// hello, when the client sends it together with `Open` or `Join`; `None` when it was
    /// sent and answered already).
    pub fn authenticated(direction: Direction, role: Role, ahead: Option<Message>) -> ClientStream {
        ClientStream {
            direction,
            role,
            receiving: Receiving::Proved(ahead),
            sending: Sending::Open,
            in_flight: Vec::new(),
            held: Vec::new(),
            held_bytes: 0,
            refused_unannounced: false,
            index_ended: false,
            or_parent: false,
            deadline: None,
        }
    }

    pub fn direction(&self) -> Direction {
        self.direction
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// Where the connection stands, in words (for errors).
    pub fn state(&self) -> &'static str {
        match self.receiving {
            Receiving::Greeting(_) => "before the server's hello",
            Receiving::Proved(_) => "before the client's first message",
            Receiving::Announcing => "before the announcement of the connection",
            Receiving::Transferring => match self.direction {
                Direction::Push => "on a push connection",
                Direction::Pull => "on a pull connection",
            },
            Receiving::Ended => "after the end of the connection's data",
            Receiving::Done => "after Done",
            Receiving::Closed => "after the connection was closed",
        }
    }

    fn unexpected(&mut self, got: &Message) -> SessionError {
        let error = SessionError::Unexpected {
            state: self.state(),
            got: got.name(),
        };
        self.receiving = Receiving::Closed;
        error
    }

    fn not_now(&self, action: &'static str) -> SessionError {
        SessionError::NotNow {
            action,
            state: self.state(),
        }
    }

    /// When the client stops waiting for what it waits for now; `None`: no deadline (data may
    /// take as long as it takes).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Called when nothing arrived by `now`: an error once the deadline has passed.
    pub fn on_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        match self.deadline {
            Some(d) if now >= d => {
                let what = match self.receiving {
                    Receiving::Greeting(_) => "waiting for the server's hello",
                    _ => "waiting for the server to announce the connection",
                };
                self.receiving = Receiving::Closed;
                self.deadline = None;
                Err(SessionError::TimedOut(what))
            }
            _ => Ok(()),
        }
    }

    /// Whether the server announced the connection (acknowledgements count from then on).
    pub fn announced(&self) -> bool {
        matches!(
            self.receiving,
            Receiving::Transferring | Receiving::Ended | Receiving::Done
        )
    }

    /// Handles a control message from the server.
    pub fn on_message(&mut self, msg: Message, now: Instant) -> Result<Event, SessionError> {
        let _ = now;
        // A closed connection takes nothing more, an `Error` included: a refusal read after
        // it would tell whether the stream was announced from the closed state (never).
        if matches!(self.receiving, Receiving::Closed) {
            return Err(self.unexpected(&msg));
        }
        if let Message::Error { code, text } = msg {
            if let Receiving::Greeting(handshake) = &self.receiving {
                if code == ErrorCode::AuthFailed {
                    let e = handshake.refused();
                    self.receiving = Receiving::Closed;
                    return Err(e.into());
                }
            }
            let announced = self.announced();
            self.receiving = Receiving::Closed;
            self.deadline = None;
            if !announced {
                self.refused_unannounced = true;
                self.in_flight.clear();
            }
            return Ok(Event::Refused {
                code,
                text,
                announced,
            });
        }
        match std::mem::replace(&mut self.receiving, Receiving::Closed) {
            Receiving::Greeting(handshake) => {
                let proof = handshake.on_message(msg)?;
                self.receiving = Receiving::Proved(Some(proof));
                self.deadline = None;
                Ok(Event::ServerProved)
            }
            Receiving::Announcing => {
                let (root_is_dir, source, one_stream, to_parent) = match (msg, self.role) {
                    // Only a push that left its place to the server goes to its path's parent.
                    (
                        Message::Opened {
                            root_is_dir,
                            source,
                            one_stream,
                            to_parent,
                        },
                        Role::Control,
                    ) if !to_parent || self.direction == Direction::Push && self.or_parent => {
                        (Some(root_is_dir), source, one_stream, to_parent)
                    }
                    (Message::Joined, Role::Joining) => {
                        (None, crate::SourceId::default(), false, false)
                    }
                    (other, _) => {
                        self.receiving = Receiving::Announcing;
                        return Err(self.unexpected(&other));
                    }
                };
                self.receiving = Receiving::Transferring;
                self.deadline = None;
                self.held.clear();
                self.held_bytes = 0;
                Ok(Event::Announced {
                    root_is_dir,
                    source,
                    one_stream,
                    to_parent,
                })
            }
            Receiving::Transferring => {
                self.receiving = Receiving::Transferring;
                match (self.direction, msg) {
                    (
                        Direction::Push,
                        Message::BatchAck {
                            seq,
                            files,
                            bytes,
                            kept,
                            failures,
                            unlisted,
                        },
                    ) => {
                        let Some(i) = self.in_flight.iter().position(|&s| s == seq) else {
                            self.receiving = Receiving::Closed;
                            return Err(SessionError::UnknownAck { seq });
                        };
                        self.in_flight.remove(i);
                        Ok(Event::Acked {
                            seq,
                            files,
                            bytes,
                            kept,
                            failures,
                            unlisted,
                        })
                    }
                    (Direction::Push, Message::EndAck) if self.sending != Sending::Open => {
                        if !self.in_flight.is_empty() {
                            self.receiving = Receiving::Closed;
                            return Err(SessionError::EndWithUnacked(self.in_flight.len()));
                        }
                        self.receiving = Receiving::Ended;
                        Ok(Event::EndAcked)
                    }
                    (Direction::Pull, Message::End) => {
                        self.receiving = Receiving::Ended;
                        Ok(Event::Ended)
                    }
                    (Direction::Pull, Message::Progress(p)) => Ok(Event::Progress(p)),
                    (_, other) => Err(self.unexpected(&other)),
                }
            }
            Receiving::Ended => {
                self.receiving = Receiving::Ended;
                let committed = self.sending == Sending::Committed;
                match msg {
                    Message::BatchAck {
                        failures, unlisted, ..
                    } if committed && self.direction == Direction::Push => {
                        Ok(Event::DirFailures(failures, unlisted))
                    }
                    Message::Superseded(paths)
                        if committed && self.direction == Direction::Pull =>
                    {
                        Ok(Event::Superseded(paths))
                    }
                    Message::Done(stats) if committed => {
                        self.receiving = Receiving::Done;
                        Ok(Event::Done(stats))
                    }
                    other => Err(self.unexpected(&other)),
                }
            }
            state @ (Receiving::Proved(_) | Receiving::Done | Receiving::Closed) => {
                self.receiving = state;
                Err(self.unexpected(&msg))
            }
        }
    }

    /// A batch frame arrived (only a pull connection, once announced, receives batches).
    pub fn on_batch(&mut self) -> Result<(), SessionError> {
        if self.direction == Direction::Pull && matches!(self.receiving, Receiving::Transferring) {
            return Ok(());
        }
        let error = SessionError::Unexpected {
            state: self.state(),
            got: "batch",
        };
        self.receiving = Receiving::Closed;
        Err(error)
    }

    /// Once the server proved the key: the client's proof and `first` (`Open` or `Join`), to
    /// be sent together in one write. The announcement is due from `now`.
    pub fn open(&mut self, first: Message, now: Instant) -> Result<Vec<Message>, SessionError> {
        let fits = matches!(
            (&first, self.role),
            (Message::Open { .. }, Role::Control) | (Message::Join { .. }, Role::Joining)
        );
        if !fits {
            return Err(self.not_now("open or join with that message"));
        }
        self.or_parent = matches!(
            first,
            Message::Open {
                op: crate::Operation::Push {
                    or_parent: true,
                    ..
                },
                ..
            }
        );
        match std::mem::replace(&mut self.receiving, Receiving::Announcing) {
            Receiving::Proved(ahead) => {
                self.deadline = Some(now + HANDSHAKE_TIMEOUT);
                Ok(ahead.into_iter().chain([first]).collect())
            }
            state => {
                self.receiving = state;
                Err(self.not_now("open or join"))
            }
        }
    }

    /// A part of a checked pull's index of the destination, sent by the control connection
    /// right behind its `Open` (before the server announces the session).
    pub fn index_part(
        &self,
        entries: Vec<crate::namespace::NsEntry>,
    ) -> Result<Message, SessionError> {
        self.may_index()?;
        Ok(Message::Entries(entries))
    }

    /// Digests of files of the index (a pull checked by content), among its parts.
    pub fn index_sums(
        &self,
        sums: Vec<crate::namespace::PathDigest>,
    ) -> Result<Message, SessionError> {
        self.may_index()?;
        Ok(Message::Sums(sums))
    }

    /// The end of the index.
    pub fn index_end(&mut self) -> Result<Message, SessionError> {
        self.may_index()?;
        self.index_ended = true;
        Ok(Message::ReplyEnd)
    }

    fn may_index(&self) -> Result<(), SessionError> {
        let ok = self.direction == Direction::Pull
            && self.role == Role::Control
            && self.sending == Sending::Open
            && !self.index_ended
            && matches!(self.receiving, Receiving::Announcing);
        if ok {
            Ok(())
        } else {
            Err(self.not_now("send the destination's index"))
        }
    }

    /// Whether a push connection may send a batch now.
    pub fn may_send_batch(&self) -> bool {
        self.direction == Direction::Push
            && self.sending == Sending::Open
            && matches!(
                self.receiving,
                Receiving::Announcing | Receiving::Transferring
            )
    }

    /// Records that batch `seq` is about to go out on this push connection: in flight from
    /// now until acknowledged (before the write, since the acknowledgement may come back
    /// before the writer gets to [`ClientStream::sent`]).
    pub fn sending(&mut self, seq: u64) {
        if !self.refused_unannounced {
            self.in_flight.push(seq);
        }
    }

    /// Records that `batch` went out (or failed to): kept whole until the announcement.
    pub fn sent(&mut self, batch: Batch) -> Sent {
        if self.refused_unannounced {
            return Sent::Refused(batch);
        }
        if matches!(self.receiving, Receiving::Announcing) {
            self.held_bytes += (batch.header.len() + batch.data.len()) as u64;
            self.held.push(batch);
            return Sent::Held;
        }
        Sent::Done(batch)
    }

    /// Whether the connection, not announced yet, holds [`HELD_LIMIT`] bytes or more of
    /// batches: it should send no more until the announcement.
    pub fn over_limit(&self) -> bool {
        matches!(self.receiving, Receiving::Announcing) && self.held_bytes >= HELD_LIMIT
    }

    /// After a refusal before the announcement: the batches sent on the connection, none of
    /// which the server read.
    pub fn take_held(&mut self) -> Vec<Batch> {
        if self.refused_unannounced {
            self.held_bytes = 0;
            std::mem::take(&mut self.held)
        } else {
            Vec::new()
        }
    }

    /// A push connection's `End`, after its last batch.
    pub fn end(&mut self) -> Result<Message, SessionError> {
        if self.direction != Direction::Push || self.sending != Sending::Open {
            return Err(self.not_now("send End"));
        }
        self.sending = Sending::Ended;
        Ok(Message::End)
    }

    /// Whether this connection may send `Commit` now (the session's other connections are the
    /// driver's to check, see [`CommitGate`]): the control connection, once it sent its `End`
    /// (push; the server reads `Commit` after its `EndAck`, so it may go before the `Opened`
    /// and the acknowledgements are read) or its `Open` and index (pull: the server reads
    /// `Commit` once it has sent its `End`, so it may go right behind the `Open`, and `Done`
    /// follows the data without a round trip of its own).
    pub fn may_commit(&self) -> bool {
        let receiving = matches!(
            self.receiving,
            Receiving::Announcing | Receiving::Transferring | Receiving::Ended
        );
        let sending = match self.direction {
            Direction::Push => Sending::Ended,
            Direction::Pull => Sending::Open,
        };
        self.role == Role::Control && self.sending == sending && receiving
    }

    /// Whether batches sent on this push connection wait for its announcement: if the server
    /// refused it now, they would go on the session's other connections
    /// ([`ClientStream::take_held`]). A connection that holds none can lose nothing, and need
    /// not hold up the session's `Commit`. One refused (or lost) before its announcement
    /// counts as holding until its driver has handed back what it sent: `take_held` empties
    /// the machine before the batches are on their way to the others.
    pub fn holds_unannounced(&self) -> bool {
        !self.held.is_empty() || self.refused_unannounced
    }

    /// The control connection's `Commit`, telling what the client sent in all (a push's
    /// source totals; zero on a pull); `Done` is due after it.
    pub fn commit(&mut self, totals: crate::Totals) -> Result<Message, SessionError> {
        if !self.may_commit() {
            return Err(self.not_now("send Commit"));
        }
        self.sending = Sending::Committed;
        Ok(Message::Commit(totals))
    }

    /// Batches sent on this connection and not acknowledged, in the order sent.
    pub fn unacknowledged(&self) -> &[u64] {
        &self.in_flight
    }

    /// The connection broke (reset, closed, timed out): returns the batches it leaves
    /// unacknowledged, which the session must send again (or report) before it may claim them.
    /// A connection given up before its announcement is treated as refused: the server reads
    /// a connection's batches only once it has announced it, so what it sent is handed back
    /// ([`ClientStream::take_held`]).
    pub fn lost(&mut self) -> Vec<u64> {
        if self.announced() {
            self.held.clear();
            self.held_bytes = 0;
        } else {
            self.refused_unannounced = true;
        }
        self.receiving = Receiving::Closed;
        self.deadline = None;
        std::mem::take(&mut self.in_flight)
    }
}

/// When a push client may send `Commit`. The server forgets a session once it has answered
/// the `Commit`, so a connection still joining then is refused, and a push connection counts
/// on the server only from its announcement: the commit waits until every planned connection
/// that sent batches has been announced or refused (or failed to connect), and what refused
/// connections handed back went out again. A connection that sent none may settle without
/// its announcement once nothing is left to send (a refusal then loses nothing): a small
/// push commits right behind its data, one round trip sooner.
#[derive(Debug, Default)]
pub struct CommitGate {
    /// Planned connections whose fate is not known yet.
    pending: usize,
    /// Every planned connection has been started.
    all_started: bool,
}

impl CommitGate {
    pub fn new() -> CommitGate {
        CommitGate::default()
    }

    /// A planned connection started joining.
    pub fn joining(&mut self) {
        self.pending += 1;
    }

    /// A planned connection was announced, refused or could not connect.
    pub fn settled(&mut self) {
        self.pending = self.pending.saturating_sub(1);
    }

    /// Every planned connection has been started ([`CommitGate::joining`] was called for each).
    pub fn all_started(&mut self) {
        self.all_started = true;
    }

    /// Whether `Commit` may go (as far as the session's other connections are concerned).
    pub fn open(&self) -> bool {
        self.all_started && self.pending == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::ServerHandshake;

    fn key() -> TokenKey {
        TokenKey::from_token(b"token")
    }

    /// A client stream past its handshake, its first message sent.
    fn opened(direction: Direction, role: Role) -> (ClientStream, Instant) {
        let first = match role {
            Role::Control => Message::Open {
                session: [3; 16],
                op: crate::Operation::Pull {
                    check: crate::DestCheck::None,
                    meta: Default::default(),
                    into_dir: false,
                },
                path: Vec::new(),
                selection: Default::default(),
            },
            Role::Joining => Message::Join { session: [3; 16] },
        };
        opened_with(direction, role, first)
    }

    /// [`opened`] with `first` as its first message.
    fn opened_with(direction: Direction, role: Role, first: Message) -> (ClientStream, Instant) {
        let now = Instant::now();
        let (mut c, hello) = ClientStream::new(direction, role, Some(key()), [1; 32], now);
        let server = ServerHandshake::new(Some(key()), Vec::new(), [2; 32]);
        let (_, reply) = server.on_message(hello).expect("server answers");
        assert_eq!(c.on_message(reply, now), Ok(Event::ServerProved));
        c.open(first, now).expect("opens");
        (c, now)
    }

    fn batch(seq: u64, bytes: usize) -> Batch {
        let mut b = Batch::new(seq, bytes);
        b.data = vec![0; bytes];
        b
    }

    /// Sends `b` as the engine does: in flight before the write, held after it.
    fn send(c: &mut ClientStream, b: Batch) -> Option<Batch> {
        c.sending(b.seq);
        match c.sent(b) {
            Sent::Refused(b) => Some(b),
            Sent::Held | Sent::Done(_) => None,
        }
    }

    fn ack(seq: u64) -> Message {
        Message::BatchAck {
            seq,
            files: 1,
            bytes: 1,
            kept: Default::default(),
            failures: Vec::new(),
            unlisted: 0,
        }
    }

    #[test]
    fn a_stream_authenticated_by_its_driver_sends_what_goes_ahead_with_its_first_message() {
        let now = Instant::now();
        let (_, hello) = crate::auth::ClientHandshake::new_bound(Some(key()), [1; 32]);
        let join = Message::Join { session: [3; 16] };
        // The hello goes with the `Join` (the server's key was known).
        let mut c =
            ClientStream::authenticated(Direction::Push, Role::Joining, Some(hello.clone()));
        assert_eq!(c.open(join.clone(), now), Ok(vec![hello, join.clone()]));
        assert_eq!(
            c.on_message(Message::Joined, now),
            Ok(Event::Announced {
                root_is_dir: None,
                source: Default::default(),
                one_stream: false,
                to_parent: false
            })
        );
        // The hello was answered already: the `Join` goes alone.
        let mut c = ClientStream::authenticated(Direction::Push, Role::Joining, None);
        assert_eq!(c.open(join.clone(), now), Ok(vec![join]));
        // A stream opens once.
        assert!(c.open(Message::Join { session: [3; 16] }, now).is_err());
    }

    #[test]
    fn a_push_stream_holds_batches_until_announced_and_checks_every_ack() {
        let (mut c, now) = opened(Direction::Push, Role::Joining);
        assert!(send(&mut c, batch(1, 10)).is_none());
        assert!(send(&mut c, batch(2, 10)).is_none());
        // An acknowledgement before the announcement breaks the rules.
        let mut early = opened(Direction::Push, Role::Joining).0;
        assert!(matches!(
            early.on_message(ack(1), now),
            Err(SessionError::Unexpected { .. })
        ));
        assert_eq!(
            c.on_message(Message::Joined, now),
            Ok(Event::Announced {
                root_is_dir: None,
                source: Default::default(),
                one_stream: false,
                to_parent: false
            })
        );
        assert!(c.take_held().is_empty());
        assert!(matches!(
            c.on_message(ack(2), now),
            Ok(Event::Acked { seq: 2, .. })
        ));
        assert_eq!(c.unacknowledged(), &[1]);
        // Twice the same acknowledgement: the second names a batch no longer in flight.
        let mut twice = opened(Direction::Push, Role::Joining).0;
        send(&mut twice, batch(5, 1));
        twice.on_message(Message::Joined, now).expect("announced");
        twice.on_message(ack(5), now).expect("acked");
        assert_eq!(
            twice.on_message(ack(5), now),
            Err(SessionError::UnknownAck { seq: 5 })
        );
        // EndAck with a batch unacknowledged is an error; after the last ack it ends.
        assert_eq!(c.end(), Ok(Message::End));
        let mut short = opened(Direction::Push, Role::Joining).0;
        send(&mut short, batch(9, 1));
        short.on_message(Message::Joined, now).expect("announced");
        short.end().expect("ends");
        assert_eq!(
            short.on_message(Message::EndAck, now),
            Err(SessionError::EndWithUnacked(1))
        );
        assert!(matches!(c.on_message(ack(1), now), Ok(Event::Acked { .. })));
        assert_eq!(c.on_message(Message::EndAck, now), Ok(Event::EndAcked));
        // A joining stream never commits.
        assert!(c.commit(crate::Totals::default()).is_err());
    }

    #[test]
    fn a_refused_stream_gives_back_what_it_sent_and_everything_after() {
        let (mut c, now) = opened(Direction::Push, Role::Joining);
        send(&mut c, batch(1, 10));
        send(&mut c, batch(2, 10));
        let refusal = Message::Error {
            code: ErrorCode::Io,
            text: "server busy".into(),
        };
        assert!(matches!(
            c.on_message(refusal, now),
            Ok(Event::Refused {
                announced: false,
                ..
            })
        ));
        let back: Vec<u64> = c.take_held().iter().map(|b| b.seq).collect();
        assert_eq!(back, [1, 2]);
        // Still counted as holding: its batches are on their way back to the others, and
        // the session's commit must wait for them.
        assert!(c.holds_unannounced());
        // A batch whose send was under way when the refusal came is handed back at once.
        assert_eq!(send(&mut c, batch(3, 1)).map(|b| b.seq), Some(3));
        assert!(c.unacknowledged().is_empty());
    }

    #[test]
    fn a_stream_holds_batches_unannounced_until_its_announcement() {
        let (mut c, now) = opened(Direction::Push, Role::Joining);
        assert!(!c.holds_unannounced(), "nothing sent");
        send(&mut c, batch(1, 10));
        assert!(c.holds_unannounced());
        c.on_message(Message::Joined, now).expect("announced");
        assert!(!c.holds_unannounced(), "the server counts it now");
    }

    #[test]
    fn an_error_after_the_connection_closed_does_not_undo_its_announcement() {
        // Found by fuzz/client_stream: a second `Error` on an announced push stream (or one
        // after a broken rule) was reported as a refusal before the announcement, which
        // dropped the batches in flight from the account and handed later ones back as unread.
        let refusal = || Message::Error {
            code: ErrorCode::Io,
            text: "disk failed".into(),
        };
        let (mut c, now) = opened(Direction::Push, Role::Joining);
        c.on_message(Message::Joined, now).expect("announced");
        send(&mut c, batch(1, 10));
        assert!(matches!(
            c.on_message(refusal(), now),
            Ok(Event::Refused {
                announced: true,
                ..
            })
        ));
        assert!(matches!(
            c.on_message(refusal(), now),
            Err(SessionError::Unexpected { .. })
        ));
        assert_eq!(c.unacknowledged(), &[1], "batch 1 is still unaccounted for");
        assert!(
            send(&mut c, batch(2, 1)).is_none(),
            "not handed back as unread"
        );
        let (mut c, now) = opened(Direction::Push, Role::Joining);
        c.on_message(Message::Joined, now).expect("announced");
        send(&mut c, batch(1, 10));
        assert!(
            c.on_message(Message::Joined, now).is_err(),
            "announced twice"
        );
        assert!(c.on_message(refusal(), now).is_err());
        assert_eq!(c.unacknowledged(), &[1]);
    }

    #[test]
    fn an_unannounced_stream_stops_at_the_held_limit() {
        let (mut c, now) = opened(Direction::Push, Role::Joining);
        assert!(!c.over_limit());
        send(&mut c, batch(1, HELD_LIMIT as usize));
        assert!(c.over_limit());
        c.on_message(Message::Joined, now).expect("announced");
        assert!(!c.over_limit());
    }

    #[test]
    fn asking_for_the_held_batches_too_early_keeps_the_held_limit() {
        // Found by fuzz/client_stream: `take_held` before any refusal returned nothing but
        // forgot the bytes held, so the stream could send past HELD_LIMIT unannounced.
        let (mut c, _) = opened(Direction::Push, Role::Joining);
        send(&mut c, batch(1, HELD_LIMIT as usize));
        assert!(c.over_limit());
        assert!(
            c.take_held().is_empty(),
            "not refused: nothing to hand back"
        );
        assert!(c.over_limit(), "the batch is still held");
    }

    #[test]
    fn the_control_stream_of_a_pull_commits_right_behind_its_open_and_reads_done_after_its_end() {
        let (mut c, now) = opened(Direction::Pull, Role::Control);
        assert!(c
            .on_batch()
            .is_err_and(|e| matches!(e, SessionError::Unexpected { .. })));
        // Before the announcement: the `Commit` goes behind the `Open` (and the index).
        let (mut c, _) = opened(Direction::Pull, Role::Control);
        assert!(c.may_commit());
        assert_eq!(
            c.commit(crate::Totals::default()),
            Ok(Message::Commit(crate::Totals::default()))
        );
        assert!(!c.may_commit(), "one commit");
        assert!(c.index_end().is_err(), "no index after the commit");
        assert_eq!(
            c.on_message(
                Message::Opened {
                    root_is_dir: true,
                    source: Default::default(),
                    one_stream: false,
                    to_parent: false
                },
                now
            ),
            Ok(Event::Announced {
                root_is_dir: Some(true),
                source: Default::default(),
                one_stream: false,
                to_parent: false
            })
        );
        assert!(c.on_batch().is_ok(), "the data still comes");
        let stats = RemoteStats::default();
        let (mut early, _) = opened(Direction::Pull, Role::Control);
        early.commit(crate::Totals::default()).expect("commits");
        early
            .on_message(
                Message::Opened {
                    root_is_dir: true,
                    source: Default::default(),
                    one_stream: false,
                    to_parent: false,
                },
                now,
            )
            .expect("announced");
        assert!(
            early.on_message(Message::Done(stats), now).is_err(),
            "Done only after End"
        );
        let superseded = || Message::Superseded(vec![b"big".to_vec()]);
        assert!(
            early.on_message(superseded(), now).is_err(),
            "Superseded only after End"
        );
        assert_eq!(c.on_message(Message::End, now), Ok(Event::Ended));
        // Paths whose partial copies the pull did not resume, between `End` and `Done`.
        assert_eq!(
            c.on_message(superseded(), now),
            Ok(Event::Superseded(vec![b"big".to_vec()]))
        );
        assert_eq!(
            c.on_message(Message::Done(stats), now),
            Ok(Event::Done(stats))
        );
        assert!(c.on_message(Message::Done(stats), now).is_err());
        assert!(c.on_message(superseded(), now).is_err());
        // After its `End` (as before protocol 13) it may commit too.
        let (mut late, _) = opened(Direction::Pull, Role::Control);
        late.on_message(
            Message::Opened {
                root_is_dir: true,
                source: Default::default(),
                one_stream: false,
                to_parent: false,
            },
            now,
        )
        .expect("announced");
        late.on_message(Message::End, now).expect("ended");
        assert!(late.commit(crate::Totals::default()).is_ok());
        assert_eq!(
            late.on_message(Message::Done(stats), now),
            Ok(Event::Done(stats))
        );
        // A joining stream never commits.
        let (join, _) = opened(Direction::Pull, Role::Joining);
        assert!(!join.may_commit());
    }

    #[test]
    fn only_a_pulls_control_connection_sends_an_index_and_only_before_the_announcement() {
        let (mut c, now) = opened(Direction::Pull, Role::Control);
        assert!(matches!(c.index_part(Vec::new()), Ok(Message::Entries(_))));
        assert!(matches!(c.index_sums(Vec::new()), Ok(Message::Sums(_))));
        assert_eq!(c.index_end(), Ok(Message::ReplyEnd));
        assert!(c.index_sums(Vec::new()).is_err(), "not after the end");
        assert!(c.index_end().is_err(), "the index ends once");
        let (mut late, _) = opened(Direction::Pull, Role::Control);
        late.on_message(
            Message::Opened {
                root_is_dir: true,
                source: Default::default(),
                one_stream: false,
                to_parent: false,
            },
            now,
        )
        .expect("announced");
        assert!(late.index_part(Vec::new()).is_err());
        let (push, _) = opened(Direction::Push, Role::Control);
        assert!(push.index_part(Vec::new()).is_err());
        let (join, _) = opened(Direction::Pull, Role::Joining);
        assert!(join.index_part(Vec::new()).is_err());
    }

    #[test]
    fn a_pull_connection_takes_progress_only_while_it_transfers() {
        let p = crate::TransferProgress {
            skipped_files: 2,
            ..Default::default()
        };
        let (mut c, now) = opened(Direction::Pull, Role::Control);
        assert!(
            c.on_message(Message::Progress(p), now).is_err(),
            "not before Opened"
        );
        let (mut c, now) = opened(Direction::Pull, Role::Control);
        c.on_message(
            Message::Opened {
                root_is_dir: true,
                source: Default::default(),
                one_stream: false,
                to_parent: false,
            },
            now,
        )
        .expect("announced");
        assert_eq!(
            c.on_message(Message::Progress(p), now),
            Ok(Event::Progress(p))
        );
        assert_eq!(c.on_message(Message::End, now), Ok(Event::Ended));
        assert!(
            c.on_message(Message::Progress(p), now).is_err(),
            "not after End"
        );
        let (mut join, now) = opened(Direction::Pull, Role::Joining);
        join.on_message(Message::Joined, now).expect("announced");
        assert_eq!(
            join.on_message(Message::Progress(p), now),
            Ok(Event::Progress(p))
        );
        let (mut push, now) = opened(Direction::Push, Role::Control);
        push.on_message(
            Message::Opened {
                root_is_dir: true,
                source: Default::default(),
                one_stream: false,
                to_parent: false,
            },
            now,
        )
        .expect("announced");
        assert!(push.on_message(Message::Progress(p), now).is_err());
    }

    #[test]
    fn waits_have_deadlines() {
        let (mut c, now) = opened(Direction::Push, Role::Joining);
        let deadline = c.deadline().expect("the announcement has a deadline");
        assert_eq!(deadline, now + HANDSHAKE_TIMEOUT);
        assert!(c.on_timeout(now).is_ok());
        assert!(matches!(
            c.on_timeout(deadline),
            Err(SessionError::TimedOut(_))
        ));
        let (mut announced, now) = opened(Direction::Push, Role::Joining);
        announced
            .on_message(Message::Joined, now)
            .expect("announced");
        assert_eq!(announced.deadline(), None);
    }

    #[test]
    fn a_wrong_announcement_is_a_typed_error() {
        let (mut c, now) = opened(Direction::Push, Role::Joining);
        assert_eq!(
            c.on_message(
                Message::Opened {
                    root_is_dir: true,
                    source: Default::default(),
                    one_stream: false,
                    to_parent: false
                },
                now
            ),
            Err(SessionError::Unexpected {
                state: "before the announcement of the connection",
                got: "Opened",
            })
        );
    }

    /// Only a push that left its place to the server (`or_parent`) goes to its path's parent
    /// (`Opened`'s `to_parent`); a server that says so to a pull, or to another push, is
    /// wrong, and the push that asked hears it.
    #[test]
    fn only_a_push_is_told_it_went_to_its_paths_parent() {
        let to_parent = || Message::Opened {
            root_is_dir: false,
            source: Default::default(),
            one_stream: false,
            to_parent: true,
        };
        let push_open = |or_parent| Message::Open {
            session: [3; 16],
            op: crate::Operation::Push {
                source_is_dir: false,
                durable: false,
                discard: false,
                owners: false,
                numeric_ids: false,
                keep_existing: false,
                no_link_at_path: false,
                or_parent,
                source: Default::default(),
            },
            path: b"dst/name".to_vec(),
            selection: Default::default(),
        };
        let wrong = Err(SessionError::Unexpected {
            state: "before the announcement of the connection",
            got: "Opened",
        });
        let (mut pull, now) = opened(Direction::Pull, Role::Control);
        assert_eq!(pull.on_message(to_parent(), now), wrong);
        let (mut other, now) = opened_with(Direction::Push, Role::Control, push_open(false));
        assert_eq!(other.on_message(to_parent(), now), wrong);
        let (mut push, now) = opened_with(Direction::Push, Role::Control, push_open(true));
        assert!(matches!(
            push.on_message(to_parent(), now),
            Ok(Event::Announced {
                to_parent: true,
                ..
            })
        ));
    }

    #[test]
    fn a_lost_stream_names_what_it_leaves_unacknowledged() {
        let (mut c, now) = opened(Direction::Push, Role::Control);
        c.on_message(
            Message::Opened {
                root_is_dir: false,
                source: Default::default(),
                one_stream: false,
                to_parent: false,
            },
            now,
        )
        .expect("announced");
        for seq in 1..=3 {
            send(&mut c, batch(seq, 1));
        }
        c.on_message(ack(2), now).expect("acked");
        assert_eq!(c.lost(), [1, 3]);
    }

    #[test]
    fn the_commit_gate_opens_once_every_planned_stream_settled() {
        let mut gate = CommitGate::new();
        gate.joining();
        gate.joining();
        gate.settled();
        gate.all_started();
        assert!(!gate.open());
        gate.settled();
        assert!(gate.open());
    }
}
