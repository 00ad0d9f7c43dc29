//! The server's side of one connection (`sprat_proto::session::server::ServerStream`) fed an
//! arbitrary sequence of what can happen to it: messages from the client (honest handshake
//! messages, plain or channel-bound, arbitrary ones, raw frames through the decoder), batch
//! frames, time passing, and the driver's own decisions (accept, refuse, acknowledge, end,
//! commit). A small model of the session's rules runs beside it and every step is checked
//! against it:
//!
//! - nothing of the session is accepted before the client proved a key the server holds (in
//!   `ClientAuth`, or in a bound hello); a bound hello with a token to a server without one
//!   is answered so, and what follows dropped;
//! - a push connection acknowledges at most the batches that arrived, each once; `EndAck`
//!   only after `End` and every acknowledgement; `Done` only after `Commit`, which only the
//!   control connection sends, after its `End`;
//! - after an error nothing more is accepted; after a refusal everything is dropped quietly;
//! - every wait before the connection's first message has a deadline, and `on_timeout`
//!   fails exactly when it has passed.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use sprat_proto::auth::{ClientHandshake, Credential, TokenKey};
use sprat_proto::session::server::{Event, ServerStream};
use sprat_proto::session::Direction;
use sprat_proto::{ErrorCode, Message, RemoteStats, MAX_SUPERSEDED};
use std::time::{Duration, Instant};

const TOKENS: [&[u8]; 3] = [b"token", b"ticket", b"other"];

#[derive(Arbitrary, Debug)]
enum Op {
    /// The honest client's next handshake message (its hello, then its proof).
    HonestNext,
    /// The honest client's first message: `Open`, `Join` or a request.
    First(u8),
    Message,
    Batch,
    Advance(u8),
    Timeout,
    AcceptOpen {
        push: bool,
        root_is_dir: bool,
    },
    AcceptJoin {
        push: bool,
    },
    ExpectIndex {
        digests: bool,
    },
    Refuse,
    Ack,
    EndAck,
    DirFailures,
    /// A pull's `Superseded`, of one path or of one more than a message may carry.
    Superseded {
        too_many: bool,
    },
    Done,
    End,
    Inspect,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Control,
    Joining,
}

/// What the rules say the connection is at.
#[derive(Default, Debug)]
struct Model {
    /// The connection's keys are bound to its channel (TLS): the client's hello carries its
    /// proof, and no `ClientAuth` follows.
    bound: bool,
    authenticated: bool,
    /// The first message (`Open`, `Join`, a request) arrived.
    first: bool,
    role: Option<Role>,
    requests: bool,
    /// A checked pull's index is being read / was read to its end.
    index: Option<bool>,
    index_ended: bool,
    accepted: Option<Direction>,
    batches: u64,
    acks: u64,
    ended: bool,
    end_acked: bool,
    pull_ended: bool,
    committed: bool,
    done: bool,
    refused: bool,
    closed: bool,
}

impl Model {
    fn fail(&mut self) {
        self.closed = true;
    }
    fn live(&self) -> bool {
        !self.closed && !self.refused
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let server_token: Option<u8> = u.arbitrary()?;
    let ticket: bool = u.arbitrary()?;
    let client_token: Option<u8> = u.arbitrary()?;
    let key = |t: u8| TokenKey::from_token(TOKENS[t as usize % TOKENS.len()]);
    let tickets: Vec<TokenKey> = if ticket { vec![key(1)] } else { Vec::new() };
    let bound: bool = u.arbitrary()?;
    let mut now = Instant::now();
    let mut s = ServerStream::new(server_token.map(key), tickets, [3; 32], now);
    // A plain connection's honest client proves the key after the server's answer; a bound
    // one's hello carries its proof, and nothing of the handshake follows it.
    let (mut client, hello) = if bound {
        s = s.bound();
        (
            None,
            ClientHandshake::new_bound(client_token.map(key), [4; 32]).1,
        )
    } else {
        let (client, hello) = ClientHandshake::new(client_token.map(key), [4; 32]);
        (Some(client), hello)
    };
    let mut honest_next = Some(hello);
    let mut m = Model {
        bound,
        ..Model::default()
    };
    let mut steps = 0;
    while !u.is_empty() && steps < 64 {
        steps += 1;
        let op = Op::arbitrary(u)?;
        let before_refused = m.refused;
        match op {
            Op::HonestNext | Op::Message | Op::First(_) => {
                let msg = match op {
                    Op::HonestNext => match honest_next.take() {
                        Some(msg) => msg,
                        None => continue,
                    },
                    Op::First(which) => first_message(which),
                    _ => sprat_fuzz::arb_message(u)?,
                };
                let name = msg.name();
                let r = s.on_message(msg.clone(), now);
                if before_refused {
                    let want = if matches!(msg, Message::End) {
                        Event::Ended
                    } else {
                        Event::Dropped
                    };
                    assert_eq!(r, Ok(want), "a refused connection must drop {name}");
                    continue;
                }
                if m.closed {
                    assert!(r.is_err(), "{name} accepted after an error: {r:?}");
                    continue;
                }
                let event = match r {
                    Ok(e) => e,
                    Err(_) => {
                        m.fail();
                        continue;
                    }
                };
                on_event(&mut m, &event, &msg, server_token, client_token, ticket);
                if let Event::Reply(reply) = &event {
                    // The honest client answers with its proof, if it accepts the server's.
                    if let Some(c) = client.take() {
                        honest_next = c.on_message(reply.clone()).ok();
                    }
                }
            }
            Op::Batch => {
                let r = s.on_batch();
                if m.refused {
                    assert_eq!(r, Ok(()), "a refused connection must drop batches");
                } else if m.live() && m.accepted == Some(Direction::Push) && !m.ended {
                    assert_eq!(r, Ok(()), "a batch of an open push refused");
                    m.batches += 1;
                } else {
                    assert!(r.is_err(), "a batch accepted with {m:?}");
                    m.fail();
                }
            }
            Op::Advance(secs) => now += Duration::from_secs(u64::from(secs)),
            Op::Timeout => {
                let deadline = s.deadline();
                let r = s.on_timeout(now);
                match deadline {
                    Some(d) if now >= d => {
                        assert!(r.is_err(), "a passed deadline did not fail");
                        m.fail();
                    }
                    _ => assert_eq!(r, Ok(()), "a timeout before the deadline"),
                }
            }
            Op::AcceptOpen { push, root_is_dir } => {
                let d = direction(push);
                let source = sprat_proto::SourceId::default();
                let to_parent = d == Direction::Push && u.arbitrary()?;
                let r = s.accept_open(d, root_is_dir, source, (false, to_parent));
                let may = m.live()
                    && m.role == Some(Role::Control)
                    && m.accepted.is_none()
                    && (m.index.is_none() || m.index_ended);
                if may {
                    assert_eq!(
                        r,
                        Ok(Message::Opened {
                            root_is_dir,
                            source,
                            one_stream: false,
                            to_parent,
                        })
                    );
                    m.accepted = Some(d);
                } else {
                    assert!(r.is_err(), "Opened allowed with {m:?}");
                }
            }
            Op::AcceptJoin { push } => {
                let d = direction(push);
                let r = s.accept_join(d);
                if m.live() && m.role == Some(Role::Joining) && m.accepted.is_none() {
                    assert_eq!(r, Ok(Message::Joined));
                    m.accepted = Some(d);
                } else {
                    assert!(r.is_err(), "Joined allowed with {m:?}");
                }
            }
            Op::ExpectIndex { digests } => {
                let r = s.expect_index(digests);
                let may = m.live()
                    && m.role == Some(Role::Control)
                    && m.accepted.is_none()
                    && (m.index.is_none() || m.index_ended);
                if may {
                    assert_eq!(r, Ok(()));
                    m.index = Some(digests);
                    m.index_ended = false;
                } else {
                    assert!(r.is_err(), "an index allowed with {m:?}");
                }
            }
            Op::Refuse => {
                let msg = s.refuse(ErrorCode::BadRequest, "no".into());
                assert!(matches!(msg, Message::Error { .. }));
                assert_eq!(s.deadline(), None, "a refused connection waits for nothing");
                m.refused = true;
                m.closed = false;
            }
            Op::Ack => {
                let r = s.ack(1, 1, 1, Default::default(), (Vec::new(), 0));
                if m.live() && m.accepted == Some(Direction::Push) && m.acks < m.batches {
                    assert!(r.is_ok(), "an acknowledgement of an arrived batch refused");
                    m.acks += 1;
                } else {
                    assert!(r.is_err(), "an acknowledgement beyond the batches: {m:?}");
                }
            }
            Op::EndAck => {
                let r = s.end_ack();
                let may = m.live()
                    && m.accepted == Some(Direction::Push)
                    && m.ended
                    && !m.end_acked
                    && m.acks == m.batches;
                if may {
                    assert_eq!(r, Ok(Message::EndAck));
                    m.end_acked = true;
                } else {
                    assert!(r.is_err(), "EndAck allowed with {m:?}");
                }
            }
            Op::DirFailures => {
                let r = s.dir_failures((Vec::new(), 0));
                if m.live() && m.accepted == Some(Direction::Push) && is_committed(&m) {
                    assert!(r.is_ok());
                } else {
                    assert!(r.is_err(), "directory failures allowed with {m:?}");
                }
            }
            Op::Superseded { too_many } => {
                let n = if too_many { MAX_SUPERSEDED + 1 } else { 1 };
                let r = s.superseded(vec![b"big".to_vec(); n]);
                let may = m.accepted == Some(Direction::Pull) && is_committed(&m);
                if may && !too_many {
                    assert!(r.is_ok(), "Superseded refused with {m:?}");
                } else {
                    assert!(r.is_err(), "Superseded allowed with {m:?} ({n} paths)");
                }
            }
            Op::Done => {
                let r = s.done(RemoteStats::default());
                if is_committed(&m) {
                    assert!(r.is_ok(), "Done refused after Commit: {m:?}");
                    m.done = true;
                    m.closed = true;
                } else {
                    assert!(r.is_err(), "Done allowed with {m:?}");
                }
            }
            Op::End => {
                let r = s.end();
                if m.live() && m.accepted == Some(Direction::Pull) && !m.pull_ended {
                    assert_eq!(r, Ok(Message::End));
                    m.pull_ended = true;
                } else {
                    assert!(r.is_err(), "a pull's End allowed with {m:?}");
                }
            }
            Op::Inspect => {}
        }
        // Checked after every step.
        assert_eq!(s.refusing(), m.refused, "refusing() with {m:?}");
        assert_eq!(s.committed(), is_committed(&m), "committed() with {m:?}");
        assert_eq!(
            s.may_send_batch(),
            m.live() && m.accepted == Some(Direction::Pull) && !m.pull_ended,
            "may_send_batch() with {m:?}"
        );
        assert!(m.acks <= m.batches);
        if m.live() && !m.first {
            assert!(
                s.deadline().is_some(),
                "a wait for the client without a deadline"
            );
        }
        if m.first || m.refused {
            assert_eq!(s.deadline(), None, "a deadline after the first message");
        }
        let _ = s.state();
    }
    Ok(())
}

/// The model's view of a finished control connection.
fn is_committed(m: &Model) -> bool {
    m.live()
        && m.committed
        && match m.accepted {
            Some(Direction::Push) => m.end_acked,
            Some(Direction::Pull) => true,
            None => false,
        }
}

fn direction(push: bool) -> Direction {
    if push {
        Direction::Push
    } else {
        Direction::Pull
    }
}

fn first_message(which: u8) -> Message {
    use sprat_proto::namespace::Request;
    use sprat_proto::{DestCheck, Operation};
    let op = match which % 4 {
        0 => Operation::Push {
            source_is_dir: true,
            durable: false,
            discard: false,
            owners: false,
            numeric_ids: false,
            keep_existing: false,
            no_link_at_path: false,
            or_parent: false,
            source: Default::default(),
        },
        1 => Operation::Pull {
            check: DestCheck::None,
            meta: Default::default(),
            into_dir: false,
        },
        _ => Operation::Pull {
            check: DestCheck::Checksum,
            meta: Default::default(),
            into_dir: false,
        },
    };
    match which % 7 {
        4 => Message::Join { session: [7; 16] },
        5 => Message::Request(Request::Stat {
            path: b"a".to_vec(),
        }),
        6 => Message::Entries(Vec::new()),
        _ => Message::Open {
            session: [7; 16],
            op,
            path: b"d".to_vec(),
            selection: Default::default(),
        },
    }
}

/// Checks a proved credential: only the honest client can make a valid proof, of the keys it
/// may have proved.
fn check_credential(
    credential: &Credential,
    server_token: Option<u8>,
    client_token: Option<u8>,
    ticket: bool,
) {
    match (server_token, credential) {
        (None, Credential::Open) => {}
        (Some(st), Credential::Token(0)) => assert_eq!(
            client_token.map(|t| t as usize % TOKENS.len()),
            Some(st as usize % TOKENS.len()),
            "authenticated with another token"
        ),
        (Some(_), Credential::Ticket(0)) => {
            assert!(ticket);
            assert_eq!(client_token.map(|t| t as usize % TOKENS.len()), Some(1));
        }
        other => panic!("unexpected credential {other:?}"),
    }
}

/// Checks an event against the model and moves the model on.
fn on_event(
    m: &mut Model,
    event: &Event,
    msg: &Message,
    server_token: Option<u8>,
    client_token: Option<u8>,
    ticket: bool,
) {
    match event {
        Event::Reply(reply) => {
            assert!(!m.bound, "a bound hello answered without its proof");
            assert!(!m.authenticated, "a second hello answered");
            assert!(matches!(msg, Message::ClientHello { .. }));
            assert!(matches!(reply, Message::ServerHello { .. }));
        }
        Event::Authenticated(credential) => {
            assert!(!m.bound, "a proof after a bound hello");
            assert!(!m.authenticated, "authenticated twice");
            assert!(matches!(msg, Message::ClientAuth { .. }));
            check_credential(credential, server_token, client_token, ticket);
            m.authenticated = true;
        }
        Event::Greeted { reply, credential } => {
            assert!(m.bound, "a plain hello taken as a proof");
            assert!(!m.authenticated, "authenticated twice");
            assert!(matches!(msg, Message::ClientHello { .. }));
            assert!(matches!(reply, Message::ServerHello { .. }));
            check_credential(credential, server_token, client_token, ticket);
            m.authenticated = true;
        }
        Event::Unprovable(reply) => {
            // A client with a token (a hint) at a server without one: told so, then ignored.
            assert!(m.bound && !m.authenticated, "Unprovable with {m:?}");
            assert_eq!(server_token, None, "a server with a token cannot answer so");
            assert!(
                matches!(msg, Message::ClientHello { hint, .. } if *hint != [0; 32]),
                "Unprovable for {msg:?}"
            );
            assert!(
                matches!(
                    reply,
                    Message::ServerHello {
                        auth_required: false,
                        ..
                    }
                ),
                "Unprovable answered with {reply:?}"
            );
            m.refused = true;
        }
        Event::Open { .. } | Event::Join { .. } => {
            assert!(m.authenticated && !m.first, "Open or Join with {m:?}");
            m.first = true;
            m.role = Some(if matches!(event, Event::Open { .. }) {
                Role::Control
            } else {
                Role::Joining
            });
        }
        Event::Request(_) => {
            assert!(m.authenticated, "a request before authentication");
            assert!(
                !m.first || m.requests,
                "a request on a session's connection"
            );
            m.first = true;
            m.requests = true;
        }
        Event::Ended => {
            assert!(matches!(msg, Message::End));
            assert_eq!(
                m.accepted,
                Some(Direction::Push),
                "End of a non-push: {m:?}"
            );
            assert!(!m.ended, "End twice");
            m.ended = true;
        }
        Event::Commit(_) => {
            assert_eq!(
                m.role,
                Some(Role::Control),
                "Commit on a joining connection"
            );
            assert!(!m.committed, "Commit twice");
            match m.accepted {
                Some(Direction::Push) => assert!(m.ended, "Commit before End"),
                Some(Direction::Pull) => assert!(m.pull_ended, "Commit before the pull's End"),
                None => panic!("Commit before the session was accepted"),
            }
            m.committed = true;
        }
        Event::Dropped => panic!("dropped without a refusal"),
        Event::IndexPart(_) | Event::IndexSums(_) | Event::IndexEnd => {
            let Some(digests) = m.index else {
                panic!("an index part without expect_index: {m:?}");
            };
            assert!(!m.index_ended);
            if matches!(event, Event::IndexSums(_)) {
                assert!(digests, "digests in an index without them");
            }
            if matches!(event, Event::IndexEnd) {
                m.index_ended = true;
            }
        }
    }
}
