//! The server's view of one connection, as a state machine (see the [module page](super)):
//! the client's hello and proof, its first message (`Open`, `Join` or a namespace request),
//! which the driver accepts or refuses, then the session's traffic on the connection: a push
//! connection's batches (each acknowledged once, never more than arrived) up to `End` and
//! `EndAck`, a pull connection's batches up to `End`, and on the control connection `Commit`
//! and `Done`. After the server refused or failed a connection, what still arrives is read
//! and dropped (so that closing the socket does not reset the connection before the client
//! read why).

use super::{Direction, Role, SessionError, CLIENT_AUTH_TIMEOUT, CLIENT_HELLO_PATIENCE};
use crate::auth::{
    AuthError, BoundHello, Credential, ServerAwaitingProof, ServerHandshake, ServerKeys, TokenKey,
};
use crate::namespace::Request;
use crate::{ErrorCode, Message, Operation, RemoteStats};
use std::time::Instant;

/// What arrived on a connection, for the server's driver to act on.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// Send this answer to the client's hello.
    Reply(Message),
    /// The client proved this credential.
    Authenticated(Credential),
    /// Send this answer to the client's hello, which proved this credential already (a
    /// channel-bound hello, see [`ServerStream::bound`]): the first message is due.
    Greeted {
        reply: Message,
        credential: Credential,
    },
    /// Send this answer and read nothing more: a client brought a token to a server run with
    /// `--no-auth`, which cannot prove it (the client stops on this answer).
    Unprovable(Message),
    /// The client asks to open a session: [`ServerStream::accept_open`] or
    /// [`ServerStream::refuse`].
    Open {
        session: [u8; 16],
        op: Operation,
        path: Vec<u8>,
        selection: crate::Selection,
    },
    /// The client asks to join a session: [`ServerStream::accept_join`] or refuse.
    Join { session: [u8; 16] },
    /// A namespace request; more may follow on the same connection.
    Request(Request),
    /// A push connection's last batch arrived.
    Ended,
    /// The control connection's `Commit`, with what the client sent in all: answer with
    /// [`ServerStream::done`] once every connection of the session has ended.
    Commit(crate::Totals),
    /// Something that arrived after the server refused or failed the connection: dropped.
    Dropped,
    /// A part of a checked pull's index of the client's destination.
    IndexPart(Vec<crate::namespace::NsEntry>),
    /// Digests of files of the index (a pull checked by content, `DestCheck::Checksum`).
    IndexSums(Vec<crate::namespace::PathDigest>),
    /// The end of the index: the driver decides on the `Open` now.
    IndexEnd,
}

#[derive(Debug)]
enum State {
    /// Waiting for the client's hello.
    Hello(ServerHandshake),
    /// The server proved the key; the client's proof is due.
    Proof(ServerAwaitingProof),
    /// Authenticated: the connection's first message is due.
    First,
    /// `Open` (control) or `Join` arrived; the driver decides.
    Deciding(Role),
    /// A checked pull's `Open` arrived; the client's index of its destination follows
    /// (with digests: a pull checked by content).
    ReadingIndex {
        digests: bool,
    },
    Push(Push),
    Pull(Pull),
    /// A connection of namespace requests.
    Requests,
    /// The server sent `Error`: what arrives is dropped until the client closes.
    Refusing,
    /// `Done` is sent, or the connection is finished otherwise.
    Closed,
}

#[derive(Debug)]
struct Push {
    role: Role,
    /// Batches received and acknowledged so far.
    received: u64,
    acked: u64,
    /// `End` arrived.
    ended: bool,
    end_acked: bool,
    committed: bool,
}

#[derive(Debug)]
struct Pull {
    role: Role,
    /// `End` is sent.
    ended: bool,
    committed: bool,
}

/// One connection as the server sees it.
#[derive(Debug)]
pub struct ServerStream {
    state: State,
    deadline: Option<Instant>,
    /// The connection's keys are bound to its TLS session: the hello carries the proof.
    bound: bool,
}

/// The error code a failed handshake is refused with.
pub fn refusal_code(e: &AuthError) -> ErrorCode {
    match e {
        AuthError::ClientVersion(_) | AuthError::ServerVersion(_) => ErrorCode::VersionMismatch,
        AuthError::Unexpected => ErrorCode::Protocol,
        _ => ErrorCode::AuthFailed,
    }
}

impl ServerStream {
    /// A new connection at `now`: `keys` are the server's tokens (see [`ServerHandshake::new`]:
    /// an `Option<TokenKey>` is one token, or `None` on a server run with `--no-auth`);
    /// `tickets` are one-time keys also accepted.
    pub fn new(
        keys: impl Into<ServerKeys>,
        tickets: Vec<TokenKey>,
        nonce: [u8; 32],
        now: Instant,
    ) -> ServerStream {
        ServerStream {
            state: State::Hello(ServerHandshake::new(keys, tickets, nonce)),
            deadline: Some(now + CLIENT_HELLO_PATIENCE),
            bound: false,
        }
    }

    /// This stream for a connection whose `keys` and `tickets` are bound to its channel
    /// (TLS): the client's hello carries its proof, and the server answers it with its own
    /// ([`crate::auth::ServerHandshake::on_bound_hello`]).
    pub fn bound(mut self) -> ServerStream {
        self.bound = true;
        self
    }

    /// Where the connection stands, in words (for errors).
    pub fn state(&self) -> &'static str {
        match &self.state {
            State::Hello(_) => "before the client's hello",
            State::Proof(_) => "before the client's proof",
            State::First => "before the connection's first message",
            State::Deciding(_) => "while the server decides on the connection",
            State::ReadingIndex { .. } => "while the client sends the index of its destination",
            State::Push(p) if p.ended => "after the end of a push connection",
            State::Push(_) => "on a push connection",
            State::Pull(p) if p.ended => "after the end of a pull connection",
            State::Pull(_) => "on a pull connection",
            State::Requests => "on a connection of requests",
            State::Refusing => "after the server refused the connection",
            State::Closed => "after the connection was closed",
        }
    }

    fn unexpected(&mut self, got: &'static str) -> SessionError {
        let error = SessionError::Unexpected {
            state: self.state(),
            got,
        };
        self.state = State::Closed;
        error
    }

    fn not_now(&self, action: &'static str) -> SessionError {
        SessionError::NotNow {
            action,
            state: self.state(),
        }
    }

    /// When the server stops waiting for the client: the hello within
    /// [`CLIENT_HELLO_PATIENCE`], the proof and first message within [`CLIENT_AUTH_TIMEOUT`].
    /// `None` once the connection carries a session or requests.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the server refused or failed the connection (what arrives is to be dropped).
    pub fn refusing(&self) -> bool {
        matches!(self.state, State::Refusing)
    }

    /// Whether the client has said hello yet (an older client never does).
    pub fn greeted(&self) -> bool {
        !matches!(self.state, State::Hello(_))
    }

    /// Called when nothing arrived by `now`: an error once the deadline has passed.
    pub fn on_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        match self.deadline {
            Some(d) if now >= d => {
                let what = match self.state {
                    State::Hello(_) => "waiting for the client's hello",
                    State::Proof(_) => "waiting for the client's proof",
                    _ => "waiting for the client's first message",
                };
                self.state = State::Closed;
                self.deadline = None;
                Err(SessionError::TimedOut(what))
            }
            _ => Ok(()),
        }
    }

    /// Handles a control message from the client.
    pub fn on_message(&mut self, msg: Message, now: Instant) -> Result<Event, SessionError> {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Hello(handshake) if self.bound => match handshake.on_bound_hello(msg)? {
                BoundHello::Authenticated { credential, reply } => {
                    self.state = State::First;
                    self.deadline = Some(now + CLIENT_AUTH_TIMEOUT);
                    Ok(Event::Greeted { reply, credential })
                }
                BoundHello::Unprovable { reply } => {
                    self.state = State::Refusing;
                    self.deadline = None;
                    Ok(Event::Unprovable(reply))
                }
            },
            State::Hello(handshake) => {
                let (waiting, reply) = handshake.on_message(msg)?;
                self.state = State::Proof(waiting);
                self.deadline = Some(now + CLIENT_AUTH_TIMEOUT);
                Ok(Event::Reply(reply))
            }
            State::Proof(waiting) => {
                let credential = waiting.on_message(msg)?;
                self.state = State::First;
                self.deadline = Some(now + CLIENT_AUTH_TIMEOUT);
                Ok(Event::Authenticated(credential))
            }
            State::First => {
                self.deadline = None;
                match msg {
                    Message::Open {
                        session,
                        op,
                        path,
                        selection,
                    } => {
                        self.state = State::Deciding(Role::Control);
                        Ok(Event::Open {
                            session,
                            op,
                            path,
                            selection,
                        })
                    }
                    Message::Join { session } => {
                        self.state = State::Deciding(Role::Joining);
                        Ok(Event::Join { session })
                    }
                    Message::Request(r) => {
                        self.state = State::Requests;
                        Ok(Event::Request(r))
                    }
                    other => {
                        self.state = State::First;
                        Err(self.unexpected(other.name()))
                    }
                }
            }
            State::Requests => {
                self.state = State::Requests;
                match msg {
                    Message::Request(r) => Ok(Event::Request(r)),
                    other => Err(self.unexpected(other.name())),
                }
            }
            State::Push(mut p) => match msg {
                Message::End if !p.ended => {
                    p.ended = true;
                    self.state = State::Push(p);
                    Ok(Event::Ended)
                }
                Message::Commit(totals) if p.role == Role::Control && p.ended && !p.committed => {
                    p.committed = true;
                    self.state = State::Push(p);
                    Ok(Event::Commit(totals))
                }
                other => {
                    self.state = State::Push(p);
                    Err(self.unexpected(other.name()))
                }
            },
            State::Pull(mut p) => match msg {
                Message::Commit(totals) if p.role == Role::Control && p.ended && !p.committed => {
                    p.committed = true;
                    self.state = State::Pull(p);
                    Ok(Event::Commit(totals))
                }
                other => {
                    self.state = State::Pull(p);
                    Err(self.unexpected(other.name()))
                }
            },
            State::ReadingIndex { digests } => match msg {
                Message::Entries(entries) => {
                    self.state = State::ReadingIndex { digests };
                    Ok(Event::IndexPart(entries))
                }
                Message::Sums(sums) if digests => {
                    self.state = State::ReadingIndex { digests };
                    Ok(Event::IndexSums(sums))
                }
                Message::ReplyEnd => {
                    self.state = State::Deciding(Role::Control);
                    Ok(Event::IndexEnd)
                }
                other => {
                    self.state = State::ReadingIndex { digests };
                    Err(self.unexpected(other.name()))
                }
            },
            State::Refusing => {
                self.state = State::Refusing;
                Ok(match msg {
                    Message::End => Event::Ended,
                    _ => Event::Dropped,
                })
            }
            state @ (State::Deciding(_) | State::Closed) => {
                self.state = state;
                Err(self.unexpected(msg.name()))
            }
        }
    }

    /// A batch frame arrived: only a push connection receives batches, up to its `End`.
    pub fn on_batch(&mut self) -> Result<(), SessionError> {
        match &mut self.state {
            State::Push(p) if !p.ended => {
                p.received += 1;
                Ok(())
            }
            State::Refusing => Ok(()),
            _ => Err(self.unexpected("batch")),
        }
    }

    /// After a checked pull's `Open`: the client's index of its destination is read next
    /// ([`Event::IndexPart`] up to [`Event::IndexEnd`], and with `digests`
    /// [`Event::IndexSums`] among them), then the `Open` is decided.
    pub fn expect_index(&mut self, digests: bool) -> Result<(), SessionError> {
        if !matches!(self.state, State::Deciding(Role::Control)) {
            return Err(self.not_now("read an index"));
        }
        self.state = State::ReadingIndex { digests };
        Ok(())
    }

    fn accept(
        &mut self,
        direction: Direction,
        announcement: Message,
    ) -> Result<Message, SessionError> {
        let State::Deciding(role) = self.state else {
            return Err(self.not_now("announce the connection"));
        };
        self.state = match direction {
            Direction::Push => State::Push(Push {
                role,
                received: 0,
                acked: 0,
                ended: false,
                end_acked: false,
                committed: false,
            }),
            Direction::Pull => State::Pull(Pull {
                role,
                ended: false,
                committed: false,
            }),
        };
        Ok(announcement)
    }

    /// Accepts the `Open`: the session is open, this is its control connection.
    pub fn accept_open(
        &mut self,
        direction: Direction,
        root_is_dir: bool,
        source: crate::SourceId,
        (one_stream, to_parent): (bool, bool),
    ) -> Result<Message, SessionError> {
        if !matches!(self.state, State::Deciding(Role::Control)) {
            return Err(self.not_now("send Opened"));
        }
        self.accept(
            direction,
            Message::Opened {
                root_is_dir,
                source,
                one_stream,
                to_parent,
            },
        )
    }

    /// Accepts the `Join` into a session moving batches `direction`.
    pub fn accept_join(&mut self, direction: Direction) -> Result<Message, SessionError> {
        if !matches!(self.state, State::Deciding(Role::Joining)) {
            return Err(self.not_now("send Joined"));
        }
        self.accept(direction, Message::Joined)
    }

    /// Refuses what the connection asked for, or stops it after a fatal error: the `Error` to
    /// send. What arrives afterwards is dropped.
    pub fn refuse(&mut self, code: ErrorCode, text: String) -> Message {
        self.state = State::Refusing;
        self.deadline = None;
        Message::Error { code, text }
    }

    /// The acknowledgement of a written batch of this push connection, with its failures
    /// (those listed, and how many more).
    pub fn ack(
        &mut self,
        seq: u64,
        files: u32,
        bytes: u64,
        kept: crate::KeptEntries,
        (failures, unlisted): (Vec<(Vec<u8>, String)>, u32),
    ) -> Result<Message, SessionError> {
        match &mut self.state {
            State::Push(p) if p.acked < p.received => {
                p.acked += 1;
                Ok(Message::BatchAck {
                    seq,
                    files,
                    bytes,
                    kept,
                    failures,
                    unlisted,
                })
            }
            _ => Err(self.not_now("acknowledge a batch")),
        }
    }

    /// `EndAck`, once the connection's `End` arrived and each of its batches is acknowledged.
    pub fn end_ack(&mut self) -> Result<Message, SessionError> {
        match &mut self.state {
            State::Push(p) if p.ended && !p.end_acked && p.acked == p.received => {
                p.end_acked = true;
                Ok(Message::EndAck)
            }
            _ => Err(self.not_now("send EndAck")),
        }
    }

    /// Whether the control connection read `Commit` and may finish the session.
    pub fn committed(&self) -> bool {
        match &self.state {
            State::Push(p) => p.committed && p.end_acked,
            State::Pull(p) => p.committed,
            _ => false,
        }
    }

    /// After `Commit` on a push: directories whose attributes could not be set (those
    /// listed, and how many more).
    pub fn dir_failures(
        &mut self,
        (failures, unlisted): (Vec<(Vec<u8>, String)>, u32),
    ) -> Result<Message, SessionError> {
        if !matches!(self.state, State::Push(_)) || !self.committed() {
            return Err(self.not_now("report directory failures"));
        }
        Ok(Message::BatchAck {
            seq: 0,
            files: 0,
            bytes: 0,
            kept: crate::KeptEntries::default(),
            failures,
            unlisted,
        })
    }

    /// `Done` with the session's totals, the answer to `Commit`; the connection is finished.
    pub fn done(&mut self, stats: RemoteStats) -> Result<Message, SessionError> {
        if !self.committed() {
            return Err(self.not_now("send Done"));
        }
        self.state = State::Closed;
        Ok(Message::Done(stats))
    }

    /// After `Commit` on a pull: paths whose partial copy at the client's destination the
    /// pull did not resume (see [`Message::Superseded`]), at most
    /// [`crate::MAX_SUPERSEDED`] a message.
    pub fn superseded(&mut self, paths: Vec<Vec<u8>>) -> Result<Message, SessionError> {
        match &self.state {
            State::Pull(p) if p.committed && paths.len() <= crate::MAX_SUPERSEDED => {
                Ok(Message::Superseded(paths))
            }
            _ => Err(self.not_now("send Superseded")),
        }
    }

    /// Whether a pull connection may send a batch now.
    pub fn may_send_batch(&self) -> bool {
        matches!(&self.state, State::Pull(p) if !p.ended)
    }

    /// A pull's `Progress` (what the server's check spared so far), on any of its
    /// connections before its `End`.
    pub fn progress(&self, p: crate::TransferProgress) -> Result<Message, SessionError> {
        match &self.state {
            State::Pull(pull) if !pull.ended => Ok(Message::Progress(p)),
            _ => Err(self.not_now("send Progress")),
        }
    }

    /// A pull connection's `End`, after its last batch.
    pub fn end(&mut self) -> Result<Message, SessionError> {
        match &mut self.state {
            State::Pull(p) if !p.ended => {
                p.ended = true;
                Ok(Message::End)
            }
            _ => Err(self.not_now("send End")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::ClientHandshake;

    /// A server stream past the handshake and its first message.
    /// The `Open` of a pull of the root, session `session`, checked by `check`.
    fn pull_open(session: [u8; 16], check: crate::DestCheck) -> Message {
        Message::Open {
            session,
            op: Operation::Pull {
                check,
                meta: Default::default(),
                into_dir: false,
            },
            path: Vec::new(),
            selection: Default::default(),
        }
    }

    fn deciding(first: Message) -> (ServerStream, Event, Instant) {
        let now = Instant::now();
        let key = TokenKey::from_token(b"t");
        let mut s = ServerStream::new(Some(key.clone()), Vec::new(), [1; 32], now);
        let (client, hello) = ClientHandshake::new(Some(key), [2; 32]);
        let Ok(Event::Reply(reply)) = s.on_message(hello, now) else {
            panic!("no reply to the hello");
        };
        let proof = client.on_message(reply).expect("server proves the key");
        assert_eq!(
            s.on_message(proof, now),
            Ok(Event::Authenticated(Credential::Token(0)))
        );
        let event = s.on_message(first, now).expect("first message");
        (s, event, now)
    }

    fn open_push() -> (ServerStream, Instant) {
        let op = Operation::Push {
            source_is_dir: true,
            durable: false,
            discard: false,
            owners: true,
            numeric_ids: false,
            keep_existing: false,
            no_link_at_path: false,
            source: Default::default(),
            or_parent: false,
        };
        let (mut s, event, now) = deciding(Message::Open {
            session: [7; 16],
            op,
            path: b"d".to_vec(),
            selection: Default::default(),
        });
        assert!(matches!(event, Event::Open { session, .. } if session == [7; 16]));
        assert_eq!(
            s.accept_open(Direction::Push, true, Default::default(), (false, false)),
            Ok(Message::Opened {
                root_is_dir: true,
                source: Default::default(),
                one_stream: false,
                to_parent: false
            })
        );
        (s, now)
    }

    #[test]
    fn a_push_connection_acknowledges_what_arrived_then_commits() {
        let (mut s, now) = open_push();
        s.on_batch().expect("batch");
        s.on_batch().expect("batch");
        assert!(s.ack(1, 1, 1, Default::default(), (Vec::new(), 0)).is_ok());
        assert_eq!(s.on_message(Message::End, now), Ok(Event::Ended));
        assert!(s.on_batch().is_err());
    }

    #[test]
    fn end_ack_waits_for_every_acknowledgement_and_done_for_commit() {
        let (mut s, now) = open_push();
        s.on_batch().expect("batch");
        assert_eq!(s.on_message(Message::End, now), Ok(Event::Ended));
        assert!(s.end_ack().is_err());
        s.ack(1, 1, 1, Default::default(), (Vec::new(), 0))
            .expect("ack");
        assert!(
            s.ack(2, 1, 1, Default::default(), (Vec::new(), 0)).is_err(),
            "more acks than batches"
        );
        assert!(s.done(RemoteStats::default()).is_err(), "no Commit yet");
        assert_eq!(s.end_ack(), Ok(Message::EndAck));
        assert_eq!(
            s.on_message(Message::Commit(crate::Totals::default()), now),
            Ok(Event::Commit(crate::Totals::default()))
        );
        assert!(s.dir_failures((Vec::new(), 0)).is_ok());
        assert!(s.done(RemoteStats::default()).is_ok());
    }

    #[test]
    fn a_join_never_commits_and_a_pull_never_receives_batches() {
        let (mut join, event, now) = deciding(Message::Join { session: [7; 16] });
        assert_eq!(event, Event::Join { session: [7; 16] });
        assert!(join
            .accept_open(Direction::Push, true, Default::default(), (false, false))
            .is_err());
        assert_eq!(join.accept_join(Direction::Push), Ok(Message::Joined));
        join.on_message(Message::End, now).expect("end");
        assert!(join
            .on_message(Message::Commit(crate::Totals::default()), now)
            .is_err());

        let (mut pull, _, now) = deciding(pull_open([8; 16], crate::DestCheck::None));
        pull.accept_open(Direction::Pull, false, Default::default(), (false, false))
            .expect("opened");
        assert!(pull.on_batch().is_err());
        let (mut pull, _, _) = deciding(pull_open([8; 16], crate::DestCheck::None));
        pull.accept_open(Direction::Pull, false, Default::default(), (false, false))
            .expect("opened");
        assert!(pull.may_send_batch());
        assert!(
            pull.on_message(Message::Commit(crate::Totals::default()), now)
                .is_err(),
            "Commit before End"
        );
        // Superseded partial copies: after the `Commit`, before `Done`, a bounded number.
        let (mut pull, _, now) = deciding(pull_open([9; 16], crate::DestCheck::QuickCheck));
        pull.expect_index(false).expect("index");
        pull.on_message(Message::ReplyEnd, now).expect("index end");
        pull.accept_open(Direction::Pull, true, Default::default(), (false, false))
            .expect("opened");
        assert!(
            pull.superseded(vec![b"a".to_vec()]).is_err(),
            "no Commit yet"
        );
        pull.end().expect("end");
        pull.on_message(Message::Commit(crate::Totals::default()), now)
            .expect("commit");
        assert_eq!(
            pull.superseded(vec![b"a".to_vec()]),
            Ok(Message::Superseded(vec![b"a".to_vec()]))
        );
        let too_many = vec![b"a".to_vec(); crate::MAX_SUPERSEDED + 1];
        assert!(pull.superseded(too_many).is_err());
        assert!(pull.done(RemoteStats::default()).is_ok());
        assert!(pull.superseded(Vec::new()).is_err(), "after Done");
    }

    #[test]
    fn a_checked_pull_reads_the_index_before_it_is_decided() {
        let (mut s, _, now) = deciding(pull_open([8; 16], crate::DestCheck::QuickCheck));
        assert!(s.accept_join(Direction::Pull).is_err());
        s.expect_index(false)
            .expect("an Open may be followed by an index");
        assert!(
            s.accept_open(Direction::Pull, true, Default::default(), (false, false))
                .is_err(),
            "not before its end"
        );
        assert_eq!(
            s.on_message(Message::Entries(Vec::new()), now),
            Ok(Event::IndexPart(Vec::new()))
        );
        assert!(s.on_batch().is_err(), "a batch is not part of an index");
        let (mut s, _, now) = deciding(pull_open([8; 16], crate::DestCheck::QuickCheck));
        s.expect_index(false).expect("index");
        assert_eq!(s.on_message(Message::ReplyEnd, now), Ok(Event::IndexEnd));
        assert_eq!(
            s.accept_open(Direction::Pull, true, Default::default(), (false, false)),
            Ok(Message::Opened {
                root_is_dir: true,
                source: Default::default(),
                one_stream: false,
                to_parent: false
            })
        );
    }

    #[test]
    fn digests_are_part_of_an_index_only_of_a_pull_checked_by_content() {
        let open = Message::Open {
            session: [9; 16],
            op: Operation::Pull {
                check: crate::DestCheck::Checksum,
                meta: Default::default(),
                into_dir: false,
            },
            path: Vec::new(),
            selection: Default::default(),
        };
        let sums = || Message::Sums(vec![(b"f".to_vec(), vec![0; 16])]);
        let (mut s, _, now) = deciding(open.clone());
        s.expect_index(true).expect("index");
        assert!(matches!(
            s.on_message(sums(), now),
            Ok(Event::IndexSums(v)) if v.len() == 1
        ));
        assert_eq!(s.on_message(Message::ReplyEnd, now), Ok(Event::IndexEnd));
        let (mut s, _, now) = deciding(open);
        s.expect_index(false).expect("index");
        assert!(s.on_message(sums(), now).is_err());
    }

    #[test]
    fn a_refused_connection_drops_what_follows() {
        let (mut s, _, now) = deciding(Message::Join { session: [1; 16] });
        let error = s.refuse(ErrorCode::UnknownSession, "no such session".into());
        assert!(matches!(error, Message::Error { .. }));
        assert!(s.on_batch().is_ok());
        assert_eq!(
            s.on_message(Message::Commit(crate::Totals::default()), now),
            Ok(Event::Dropped)
        );
        assert_eq!(s.on_message(Message::End, now), Ok(Event::Ended));
    }

    #[test]
    fn the_first_message_must_be_open_join_or_a_request() {
        let (_, _, _) = deciding(Message::Join { session: [1; 16] });
        let now = Instant::now();
        let mut s = ServerStream::new(None, Vec::new(), [1; 32], now);
        let (client, hello) = ClientHandshake::new(None, [2; 32]);
        let Ok(Event::Reply(reply)) = s.on_message(hello, now) else {
            panic!("no reply");
        };
        s.on_message(client.on_message(reply).expect("proof"), now)
            .expect("authenticated");
        assert_eq!(
            s.on_message(Message::Commit(crate::Totals::default()), now),
            Err(SessionError::Unexpected {
                state: "before the connection's first message",
                got: "Commit",
            })
        );
    }

    #[test]
    fn every_wait_before_the_first_message_has_a_deadline() {
        let now = Instant::now();
        let mut s = ServerStream::new(None, Vec::new(), [1; 32], now);
        assert_eq!(s.deadline(), Some(now + CLIENT_HELLO_PATIENCE));
        assert!(!s.greeted());
        assert!(matches!(
            s.on_timeout(now + CLIENT_HELLO_PATIENCE),
            Err(SessionError::TimedOut("waiting for the client's hello"))
        ));
    }
}
