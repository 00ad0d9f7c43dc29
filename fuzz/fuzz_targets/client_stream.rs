//! The client's side of one connection of a session
//! (`sprat_proto::session::client::ClientStream`), fed an arbitrary sequence of what the
//! server may send (honest or forged hellos, the announcement of the stream — `Opened` or
//! `Joined` — or the wrong one, acknowledgements of batches sent or never sent, `EndAck`,
//! `End`, `Done`, errors, raw frames through the decoder) interleaved with what the driver
//! does (open, send batches, end, commit, send a checked pull's index, lose the connection,
//! let time pass). The stream runs the handshake itself (plain TCP) or starts authenticated
//! by its driver (TLS: the channel-bound hello goes out ahead of the first message, or was
//! answered already). A model of the rules runs beside it:
//!
//! - the client goes on only with a server that proved the key it holds; what goes ahead of
//!   the first message is the client's proof, or the driver's hello, or nothing;
//! - the stream is announced at most once, after its `Open` or `Join`, by the message of its
//!   role (`Opened` on the control connection, `Joined` on the others);
//! - the batches in flight are exactly those sent and not acknowledged; an acknowledgement
//!   of any other batch, or `EndAck` with some in flight, is an error;
//! - a refusal says whether the stream had been announced; the batches a push sent before
//!   the announcement are kept and handed back exactly when it was refused (or lost) before
//!   it, and the stream says it holds them until then; a pull's control connection may
//!   commit from its `Open` on, and sends no index after its `Commit`; `Done` only after
//!   `Commit`;
//! - waits for the server's hello and for the announcement have deadlines.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use sprat_proto::auth::{ClientHandshake, ServerHandshake, TokenKey};
use sprat_proto::session::client::{ClientStream, Event, Sent};
use sprat_proto::session::{Direction, Role, SessionError, HELD_LIMIT};
use sprat_proto::{Batch, DestCheck, ErrorCode, Message, Operation, RemoteStats, Totals};
use std::time::{Duration, Instant};

const TOKENS: [&[u8]; 2] = [b"token", b"other"];

#[derive(Arbitrary, Debug)]
enum Op {
    /// The answer of an honest server holding this token (or none) to the client's hello.
    ServerHello(Option<bool>),
    /// The announcement the stream's role expects, or the other one.
    Announce {
        right: bool,
        root_is_dir: bool,
        one_stream: bool,
        /// A push's file went to its path's parent (only a push may be told so).
        to_parent: bool,
    },
    /// An acknowledgement of the n-th batch sent (or of one never sent).
    Ack(u8),
    EndAck,
    PullEnd,
    Done,
    Error(bool),
    Message,
    /// The driver: `Open` or `Join` (the right one for the role, or not).
    Open(bool),
    Send(u16, bool),
    Batch,
    End,
    Commit,
    Index(u8),
    TakeHeld,
    Lost,
    Advance(u8),
    Timeout,
}

#[derive(Default, Debug)]
struct Model {
    proved: bool,
    opened: bool,
    announced: bool,
    /// A pull's `End` or a push's `EndAck` arrived.
    ended: bool,
    done: bool,
    /// Refused, lost or broken.
    closed: bool,
    /// Refused or lost before the announcement: what was sent is handed back.
    refused_unannounced: bool,
    in_flight: Vec<u64>,
    /// Sequence numbers and sizes of the batches sent before the announcement.
    held: Vec<(u64, u64)>,
    sent_end: bool,
    committed: bool,
    index_ended: bool,
    sent: Vec<u64>,
    next_seq: u64,
}

impl Model {
    fn held_bytes(&self) -> u64 {
        self.held.iter().map(|h| h.1).sum()
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let direction = if u.arbitrary()? {
        Direction::Push
    } else {
        Direction::Pull
    };
    let role = if u.arbitrary()? {
        Role::Control
    } else {
        Role::Joining
    };
    let client_token: Option<bool> = u.arbitrary()?;
    let key = |t: bool| TokenKey::from_token(TOKENS[t as usize]);
    let mut now = Instant::now();
    let mut m = Model::default();
    // The handshake: the machine's own (plain TCP), or the driver's (a channel-bound hello,
    // TLS), whose hello goes out with the first message or was answered already.
    let by_driver = u.ratio(1, 4)?;
    let (mut c, hello, ahead) = if by_driver {
        let (_, hello) = ClientHandshake::new_bound(client_token.map(key), [1; 32]);
        let ahead = u.arbitrary::<bool>()?.then(|| hello.clone());
        m.proved = true;
        (
            ClientStream::authenticated(direction, role, ahead.clone()),
            hello,
            ahead,
        )
    } else {
        let (c, hello) = ClientStream::new(direction, role, client_token.map(key), [1; 32], now);
        (c, hello, None)
    };
    let mut steps = 0;
    while !u.is_empty() && steps < 64 {
        steps += 1;
        let op = Op::arbitrary(u)?;
        // What the server sends, and whether it is a genuine proof of the client's key.
        let incoming: Option<(Message, bool)> = match &op {
            Op::ServerHello(token) => {
                let server = ServerHandshake::new(token.map(key), Vec::new(), [2; 32]);
                match server.on_message(hello.clone()) {
                    Ok((_, reply)) => Some((reply, *token == client_token)),
                    Err(_) => Some((
                        Message::Error {
                            code: ErrorCode::AuthFailed,
                            text: "wrong token".into(),
                        },
                        false,
                    )),
                }
            }
            Op::Announce {
                right,
                root_is_dir,
                one_stream,
                to_parent,
            } => {
                let control = (role == Role::Control) == *right;
                Some((
                    if control {
                        Message::Opened {
                            root_is_dir: *root_is_dir,
                            source: Default::default(),
                            one_stream: *one_stream,
                            to_parent: *to_parent,
                        }
                    } else {
                        Message::Joined
                    },
                    false,
                ))
            }
            Op::Ack(n) => {
                let seq = m
                    .sent
                    .get(*n as usize)
                    .copied()
                    .unwrap_or(u64::from(*n) + 1000);
                Some((
                    Message::BatchAck {
                        seq,
                        files: 1,
                        bytes: 1,
                        kept: Default::default(),
                        failures: Vec::new(),
                        unlisted: 0,
                    },
                    false,
                ))
            }
            Op::EndAck => Some((Message::EndAck, false)),
            Op::PullEnd => Some((Message::End, false)),
            Op::Done => Some((Message::Done(RemoteStats::default()), false)),
            Op::Error(auth) => Some((
                Message::Error {
                    code: if *auth {
                        ErrorCode::AuthFailed
                    } else {
                        ErrorCode::NotFound
                    },
                    text: "refused".into(),
                },
                false,
            )),
            Op::Message => Some((sprat_fuzz::arb_message(u)?, false)),
            _ => None,
        };
        if let Some((msg, genuine)) = incoming {
            let r = c.on_message(msg.clone(), now);
            check_message(
                &mut m,
                &c,
                &msg,
                genuine,
                client_token.is_some(),
                direction,
                role,
                r,
            );
        } else {
            match op {
                Op::Open(right) => {
                    let control = (role == Role::Control) == right;
                    let first = if control {
                        Message::Open {
                            session: [3; 16],
                            op: Operation::Pull {
                                check: DestCheck::None,
                                meta: Default::default(),
                                into_dir: false,
                            },
                            path: Vec::new(),
                            selection: Default::default(),
                        }
                    } else {
                        Message::Join { session: [3; 16] }
                    };
                    let r = c.open(first.clone(), now);
                    if right && m.proved && !m.opened && !m.closed {
                        let sent = r.expect("open after the server's proof");
                        // The proof (the machine's own handshake) or what the driver put
                        // ahead, then the first message.
                        let (last, before) = sent.split_last().expect("something to send");
                        assert_eq!(last, &first, "the first message sent is another");
                        match &ahead {
                            Some(hello) => assert_eq!(before, [hello.clone()]),
                            None if by_driver => assert!(before.is_empty()),
                            None => assert!(
                                matches!(before, [Message::ClientAuth { .. }]),
                                "the proof does not go ahead of the first message: {before:?}"
                            ),
                        }
                        m.opened = true;
                        assert!(c.deadline().is_some(), "no deadline for the announcement");
                    } else {
                        assert!(r.is_err(), "open allowed with {m:?}");
                    }
                }
                Op::Send(size, refused_meanwhile) => {
                    let may = direction == Direction::Push
                        && !m.sent_end
                        && m.opened
                        && !m.closed
                        && !m.ended
                        && !m.done;
                    assert_eq!(c.may_send_batch(), may, "may_send_batch with {m:?}");
                    if may {
                        // As the engine sends: in flight before the write, then recorded
                        // as sent; the server's refusal may arrive in between.
                        let seq = m.next_seq;
                        m.next_seq += 1;
                        m.sent.push(seq);
                        c.sending(seq);
                        if !m.refused_unannounced {
                            m.in_flight.push(seq);
                        }
                        if refused_meanwhile {
                            let msg = Message::Error {
                                code: ErrorCode::Busy,
                                text: "busy".into(),
                            };
                            let r = c.on_message(msg.clone(), now);
                            check_message(
                                &mut m,
                                &c,
                                &msg,
                                false,
                                client_token.is_some(),
                                direction,
                                role,
                                r,
                            );
                        }
                        let announcing = m.opened && !m.announced && !m.closed;
                        let mut b = Batch::new(seq, 0);
                        b.data = vec![0; usize::from(size) * 64];
                        match c.sent(b) {
                            Sent::Refused(b) => {
                                assert!(m.refused_unannounced, "a batch handed back: {m:?}");
                                assert_eq!(b.seq, seq, "another batch handed back");
                            }
                            Sent::Held => {
                                assert!(
                                    announcing && !m.refused_unannounced,
                                    "a batch held with {m:?}"
                                );
                                m.held.push((seq, u64::from(size) * 64));
                            }
                            Sent::Done(b) => {
                                assert!(
                                    !announcing && !m.refused_unannounced,
                                    "a stream refused before its announcement kept a batch, \
                                     or one announcing did not: {m:?}"
                                );
                                assert_eq!(b.seq, seq, "another batch given back");
                            }
                        }
                    }
                }
                Op::Batch => {
                    let r = c.on_batch();
                    let may = direction == Direction::Pull && m.announced && !m.ended && !m.closed;
                    if may {
                        assert_eq!(r, Ok(()));
                    } else {
                        assert!(r.is_err(), "a batch accepted with {m:?}");
                        m.closed = true;
                    }
                }
                Op::End => {
                    let r = c.end();
                    if direction == Direction::Push && !m.sent_end && !m.committed {
                        assert_eq!(r, Ok(Message::End));
                        m.sent_end = true;
                    } else {
                        assert!(r.is_err(), "End allowed with {m:?}");
                    }
                }
                Op::Commit => {
                    let may = role == Role::Control
                        && !m.committed
                        && match direction {
                            Direction::Push => m.sent_end && m.opened && !m.closed && !m.done,
                            // Right behind its `Open` (and index), or any time up to `Done`.
                            Direction::Pull => m.opened && !m.closed && !m.done,
                        };
                    let r = c.commit(Totals::default());
                    if may {
                        assert!(r.is_ok(), "Commit refused with {m:?}");
                        m.committed = true;
                    } else {
                        assert!(r.is_err(), "Commit allowed with {m:?}");
                    }
                }
                Op::Index(which) => {
                    let may = direction == Direction::Pull
                        && role == Role::Control
                        && !m.index_ended
                        && !m.committed
                        && m.opened
                        && !m.announced
                        && !m.closed;
                    let r = match which % 3 {
                        0 => c.index_part(Vec::new()),
                        1 => c.index_sums(Vec::new()),
                        _ => c.index_end(),
                    };
                    if may {
                        assert!(r.is_ok(), "index refused with {m:?}");
                        if which % 3 == 2 {
                            m.index_ended = true;
                        }
                    } else {
                        assert!(r.is_err(), "index allowed with {m:?}");
                    }
                }
                Op::TakeHeld => {
                    let held: Vec<u64> = c.take_held().iter().map(|b| b.seq).collect();
                    if m.refused_unannounced {
                        let want: Vec<u64> = m.held.iter().map(|h| h.0).collect();
                        assert_eq!(held, want, "the batches handed back after a refusal");
                        m.held.clear();
                    } else {
                        assert!(held.is_empty(), "batches handed back without a refusal");
                    }
                }
                Op::Lost => {
                    let left = c.lost();
                    assert_eq!(left, m.in_flight, "what a lost connection leaves");
                    m.in_flight.clear();
                    // A connection already closed (refused, broken, timed out) counts as
                    // given up before its announcement, even one announced before: the
                    // machine no longer tells them apart (it then holds nothing, but
                    // `holds_unannounced` stays true).
                    if m.announced && !m.closed {
                        m.held.clear();
                    } else {
                        m.refused_unannounced = true;
                    }
                    m.closed = true;
                    assert_eq!(c.deadline(), None);
                }
                Op::Advance(secs) => now += Duration::from_secs(u64::from(secs)),
                Op::Timeout => {
                    let deadline = c.deadline();
                    let r = c.on_timeout(now);
                    match deadline {
                        Some(d) if now >= d => {
                            assert!(matches!(r, Err(SessionError::TimedOut(_))));
                            m.closed = true;
                        }
                        _ => assert_eq!(r, Ok(())),
                    }
                }
                _ => unreachable!(),
            }
        }
        // Checked after every step.
        assert_eq!(
            c.unacknowledged(),
            m.in_flight.as_slice(),
            "batches in flight with {m:?}"
        );
        assert_eq!(
            c.announced(),
            m.announced && !m.closed,
            "announced() with {m:?}"
        );
        assert_eq!(
            c.holds_unannounced(),
            !m.held.is_empty() || m.refused_unannounced,
            "holds_unannounced() with {m:?}"
        );
        let announcing = m.opened && !m.announced && !m.closed;
        assert_eq!(
            c.over_limit(),
            announcing && m.held_bytes() >= HELD_LIMIT,
            "over_limit() with {m:?}"
        );
        if !m.closed && (!m.proved || announcing) {
            assert!(
                c.deadline().is_some(),
                "a wait for the server without a deadline"
            );
        }
        let _ = c.state();
    }
    Ok(())
}

/// Checks what `on_message` did with a message from the server, and moves the model on.
#[allow(clippy::too_many_arguments)]
fn check_message(
    m: &mut Model,
    c: &ClientStream,
    msg: &Message,
    genuine: bool,
    has_token: bool,
    direction: Direction,
    role: Role,
    r: Result<Event, SessionError>,
) {
    let name = msg.name();
    match r {
        Err(_) => m.closed = true,
        Ok(Event::ServerProved) => {
            assert!(!m.proved && !m.closed, "proved twice or after the end");
            match msg {
                Message::ServerHello {
                    auth_required: true,
                    ..
                } => assert!(genuine && has_token, "a forged proof accepted"),
                Message::ServerHello { .. } => {
                    assert!(
                        !has_token,
                        "a client with a token went on with an open server"
                    )
                }
                _ => panic!("proved by {name}"),
            }
            m.proved = true;
            assert_eq!(c.deadline(), None);
        }
        Ok(Event::Announced {
            root_is_dir,
            source,
            one_stream,
            to_parent,
        }) => {
            assert!(
                !to_parent || direction == Direction::Push,
                "a pull told it went to its parent"
            );
            assert!(
                m.opened && !m.announced && !m.closed,
                "announced with {m:?}"
            );
            match (role, msg) {
                (
                    Role::Control,
                    Message::Opened {
                        root_is_dir: r,
                        source: s,
                        one_stream: o,
                        to_parent: t,
                    },
                ) => {
                    assert_eq!(root_is_dir, Some(*r));
                    assert_eq!(source, *s);
                    assert_eq!(one_stream, *o);
                    assert_eq!(to_parent, *t);
                }
                (Role::Joining, Message::Joined) => {
                    assert_eq!(root_is_dir, None);
                    assert_eq!(source, Default::default());
                    assert!(!one_stream && !to_parent);
                }
                _ => panic!("{name} announced a {role:?} stream"),
            }
            m.announced = true;
            m.held.clear();
            assert_eq!(c.deadline(), None);
        }
        Ok(Event::Acked { seq, .. }) => {
            assert_eq!(direction, Direction::Push);
            assert!(m.announced && !m.closed && !m.ended);
            let i = m
                .in_flight
                .iter()
                .position(|&s| s == seq)
                .unwrap_or_else(|| panic!("batch {seq} acknowledged, not in flight"));
            m.in_flight.remove(i);
        }
        Ok(Event::EndAcked) => {
            assert_eq!(direction, Direction::Push);
            assert!(m.sent_end && m.in_flight.is_empty() && m.announced && !m.ended);
            m.ended = true;
        }
        Ok(Event::Ended) => {
            assert_eq!(direction, Direction::Pull);
            assert!(m.announced && !m.ended && !m.closed);
            m.ended = true;
        }
        Ok(Event::DirFailures(..)) => {
            assert_eq!(direction, Direction::Push);
            assert!(m.committed && m.ended);
        }
        Ok(Event::Superseded(_)) => {
            assert_eq!(direction, Direction::Pull);
            assert!(m.committed && m.ended && !m.done, "Superseded with {m:?}");
        }
        Ok(Event::Progress(_)) => {
            assert_eq!(direction, Direction::Pull);
            assert!(m.announced && !m.ended && !m.closed, "Progress with {m:?}");
        }
        Ok(Event::Done(_)) => {
            assert!(m.committed && m.ended && !m.done, "Done with {m:?}");
            m.done = true;
        }
        Ok(Event::Refused { announced, .. }) => {
            assert!(matches!(msg, Message::Error { .. }));
            assert_eq!(
                announced, m.announced,
                "a refusal misreports whether the stream was announced: {m:?}"
            );
            if !m.announced {
                m.refused_unannounced = true;
                m.in_flight.clear();
            }
            m.closed = true;
        }
    }
}
