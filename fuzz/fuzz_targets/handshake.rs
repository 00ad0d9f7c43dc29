//! Both sides of the handshake (`sprat_proto::auth`), in both its forms (plain TCP, and the
//! channel-bound one of TLS, whose hello carries the client's proof), fed what a peer may
//! send: honest messages, honest ones altered, and arbitrary ones. The invariants are the
//! handshake's promises: the server answers only a hello of this version whose hint names one
//! of its keys, and accepts a proof only if it is the one an honest client holding that key
//! makes; the client sends its proof only to a server that proved the key it holds (or to an
//! open server when it holds none), and a bound client judges the server's answer as a plain
//! one does; an open server lets in a bound client only without a token; honest peers always
//! succeed.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use sprat_proto::auth::{
    AuthError, BoundHello, ClientHandshake, Credential, ServerHandshake, TokenKey,
};
use sprat_proto::{ErrorCode, Message, PROTOCOL_VERSION};

const TOKENS: [&[u8]; 4] = [b"token", b"ticket-1", b"ticket-2", b"other"];

fn key(i: u8) -> TokenKey {
    TokenKey::from_token(TOKENS[i as usize % TOKENS.len()])
}

/// What the server is given and what is sent to it.
#[derive(Arbitrary, Debug)]
enum ClientSays {
    /// The hello an honest client holding this token (or none) sends.
    Honest(Option<u8>),
    /// That hello with another version.
    OtherVersion(Option<u8>, u16),
    Arbitrary,
}

/// What a server on a channel the keys are bound to (TLS) is sent: a hello that carries the
/// client's proof.
#[derive(Arbitrary, Debug)]
enum BoundSays {
    /// The hello an honest client holding this token (or none) sends.
    Honest(Option<u8>),
    /// That hello with another version.
    OtherVersion(Option<u8>, u16),
    /// That hello with one bit of its proof flipped.
    Flipped(Option<u8>, u8),
    /// The hint of one token with the proof of another.
    OtherProof {
        hint: u8,
        proof: u8,
    },
    Arbitrary,
}

#[derive(Arbitrary, Debug)]
enum ProofSays {
    Honest,
    /// The honest proof with one bit flipped.
    Flipped(u8),
    /// The proof an honest client holding another token would make.
    OtherKey(u8),
    Arbitrary,
}

#[derive(Arbitrary, Debug)]
enum ServerSays {
    /// The answer of an honest server with this token and tickets.
    Honest {
        token: Option<u8>,
        tickets: u8,
    },
    /// That answer with a bit of the proof flipped or auth_required inverted.
    Flipped {
        token: Option<u8>,
        bit: u8,
    },
    NoAuth,
    Refused(bool),
    Arbitrary,
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = server_side(&mut u);
    let _ = client_side(&mut u);
    let _ = bound_server_side(&mut u);
});

/// The index of the key an honest client's hello names, among the server's keys.
fn named_key(
    server_token: Option<u8>,
    tickets: &[u8],
    nonce: [u8; 32],
    hint: [u8; 32],
) -> Option<(u8, Credential)> {
    let token = server_token?;
    std::iter::once((token, Credential::Token(0)))
        .chain(
            tickets
                .iter()
                .enumerate()
                .map(|(i, &t)| (t, Credential::Ticket(i))),
        )
        .find(|&(t, _)| {
            let (_, hello) = ClientHandshake::new(Some(key(t)), nonce);
            matches!(hello, Message::ClientHello { hint: h, .. } if h == hint)
        })
}

fn server_side(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let server_token: Option<u8> = u.arbitrary()?;
    let tickets: Vec<u8> = (0..u.int_in_range(0..=2)?)
        .map(|_| u.arbitrary())
        .collect::<Result<_, _>>()?;
    let server_nonce: [u8; 32] = u.arbitrary()?;
    let client_nonce: [u8; 32] = u.arbitrary()?;
    let server = ServerHandshake::new(
        server_token.map(key),
        tickets.iter().map(|&t| key(t)).collect(),
        server_nonce,
    );
    let (client, hello, client_token) = match ClientSays::arbitrary(u)? {
        ClientSays::Honest(t) => {
            let (c, h) = ClientHandshake::new(t.map(key), client_nonce);
            (Some(c), h, t)
        }
        ClientSays::OtherVersion(t, v) => {
            let (_, h) = ClientHandshake::new(t.map(key), client_nonce);
            let Message::ClientHello {
                nonce, hint, mac, ..
            } = h
            else {
                unreachable!()
            };
            let h = Message::ClientHello {
                version: v,
                nonce,
                hint,
                mac,
            };
            (None, h, t)
        }
        ClientSays::Arbitrary => (None, sprat_fuzz::arb_message(u)?, None),
    };
    let result = server.on_message(hello.clone());
    let Message::ClientHello {
        version,
        nonce,
        hint,
        ..
    } = hello
    else {
        assert_eq!(result.err(), Some(AuthError::Unexpected));
        return Ok(());
    };
    if version != PROTOCOL_VERSION {
        assert_eq!(result.err(), Some(AuthError::ClientVersion(version)));
        return Ok(());
    }
    let named = named_key(server_token, &tickets, nonce, hint);
    let (waiting, reply) = match result {
        Ok(answered) => answered,
        Err(e) => {
            assert_eq!(e, AuthError::WrongToken);
            assert!(
                server_token.is_some() && named.is_none(),
                "a hint of a key refused"
            );
            return Ok(());
        }
    };
    assert!(
        server_token.is_none() || named.is_some(),
        "a hint naming no key answered"
    );
    let Message::ServerHello {
        version: v,
        auth_required,
        nonce: n,
        ..
    } = reply
    else {
        panic!("the answer to a hello is not a ServerHello");
    };
    assert_eq!(
        (v, n, auth_required),
        (PROTOCOL_VERSION, server_nonce, server_token.is_some())
    );
    // The honest client's proof for the key the hello named, when there is one.
    let honest = client.map(|c| c.on_message(reply.clone()));
    // An answered honest client goes on: the server proved the key it holds (a server with a
    // token answers only a hint of one of its keys), or neither has a token.
    if let Some(proof) = &honest {
        assert_eq!(
            proof.is_ok(),
            server_token.is_some() || client_token.is_none(),
            "an honest client and server disagree: {proof:?}"
        );
    }
    let expected = named.map(|(t, credential)| {
        let (c, _) = ClientHandshake::new(Some(key(t)), nonce);
        (
            c.on_message(reply.clone())
                .expect("the server proved the named key"),
            credential,
        )
    });
    let proof = match ProofSays::arbitrary(u)? {
        ProofSays::Honest => match (&expected, &honest) {
            (Some((p, _)), _) => p.clone(),
            (None, Some(Ok(p))) => p.clone(),
            _ => Message::ClientAuth { mac: [0; 32] },
        },
        ProofSays::Flipped(bit) => match &expected {
            Some((Message::ClientAuth { mac }, _)) => {
                let mut mac = *mac;
                mac[(bit / 8) as usize % 32] ^= 1 << (bit % 8);
                Message::ClientAuth { mac }
            }
            _ => Message::ClientAuth { mac: [1; 32] },
        },
        ProofSays::OtherKey(t) => {
            let (c, _) = ClientHandshake::new(Some(key(t)), nonce);
            c.on_message(reply.clone())
                .unwrap_or(Message::ClientAuth { mac: [2; 32] })
        }
        ProofSays::Arbitrary => sprat_fuzz::arb_message(u)?,
    };
    let outcome = waiting.on_message(proof.clone());
    if !matches!(proof, Message::ClientAuth { .. }) {
        assert_eq!(outcome, Err(AuthError::Unexpected));
        return Ok(());
    }
    match (&expected, outcome) {
        // An open server takes any proof.
        (None, outcome) => assert_eq!(outcome, Ok(Credential::Open)),
        (Some((p, credential)), Ok(c)) => {
            assert_eq!(&proof, p, "a proof other than the honest one accepted");
            assert_eq!(&c, credential, "another credential than the hint named");
        }
        (Some((p, _)), Err(e)) => {
            assert_ne!(&proof, p, "the honest proof refused");
            assert_eq!(e, AuthError::WrongToken);
        }
    }
    Ok(())
}

fn client_side(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let client_token: Option<u8> = u.arbitrary()?;
    let client_nonce: [u8; 32] = u.arbitrary()?;
    let server_nonce: [u8; 32] = u.arbitrary()?;
    let (client, hello) = ClientHandshake::new(client_token.map(key), client_nonce);
    let honest_answer = |token: Option<u8>, tickets: u8| {
        let tickets = (0..tickets % 3).map(|t| key(t + 1)).collect();
        ServerHandshake::new(token.map(key), tickets, server_nonce).on_message(hello.clone())
    };
    let answer = match ServerSays::arbitrary(u)? {
        ServerSays::Honest { token, tickets } => match honest_answer(token, tickets) {
            Ok((_, reply)) => reply,
            Err(e) => Message::Error {
                code: sprat_proto::session::server::refusal_code(&e),
                text: e.to_string(),
            },
        },
        ServerSays::Flipped { token, bit } => match honest_answer(token, 0) {
            Ok((
                _,
                Message::ServerHello {
                    version,
                    auth_required,
                    nonce,
                    mut mac,
                },
            )) => {
                if bit == 255 {
                    Message::ServerHello {
                        version,
                        auth_required: !auth_required,
                        nonce,
                        mac,
                    }
                } else {
                    mac[(bit / 8) as usize % 32] ^= 1 << (bit % 8);
                    Message::ServerHello {
                        version,
                        auth_required,
                        nonce,
                        mac,
                    }
                }
            }
            _ => Message::End,
        },
        ServerSays::NoAuth => Message::ServerHello {
            version: PROTOCOL_VERSION,
            auth_required: false,
            nonce: server_nonce,
            mac: [0; 32],
        },
        ServerSays::Refused(auth) => Message::Error {
            code: if auth {
                ErrorCode::AuthFailed
            } else {
                ErrorCode::Protocol
            },
            text: String::new(),
        },
        ServerSays::Arbitrary => sprat_fuzz::arb_message(u)?,
    };
    let outcome = client.on_message(answer.clone());
    // A client whose hello carried its proof (TLS) checks the answer the same way.
    let (bound, _) = ClientHandshake::new_bound(client_token.map(key), client_nonce);
    assert_eq!(
        bound.on_message(answer.clone()).as_ref().err(),
        outcome.as_ref().err(),
        "a bound client and a plain one judge an answer differently"
    );
    let Message::ServerHello {
        version,
        auth_required,
        nonce,
        mac,
    } = answer
    else {
        match answer {
            Message::Error {
                code: ErrorCode::AuthFailed,
                ..
            } => assert_eq!(
                outcome,
                Err(if client_token.is_some() {
                    AuthError::WrongToken
                } else {
                    AuthError::TokenRequired
                })
            ),
            _ => assert_eq!(outcome, Err(AuthError::Unexpected)),
        }
        return Ok(());
    };
    if version != PROTOCOL_VERSION {
        assert_eq!(outcome, Err(AuthError::ServerVersion(version)));
        return Ok(());
    }
    match (client_token, auth_required) {
        (None, false) => assert_eq!(outcome, Ok(Message::ClientAuth { mac: [0; 32] })),
        (None, true) => assert_eq!(outcome, Err(AuthError::TokenRequired)),
        (Some(_), false) => assert_eq!(outcome, Err(AuthError::ServerWithoutToken)),
        (Some(t), true) => {
            // The server of that token and nonce: what it proves, and the proof it expects.
            let (waiting, reply) = ServerHandshake::new(Some(key(t)), Vec::new(), nonce)
                .on_message(hello.clone())
                .expect("the client's hint names its own key");
            let proved = matches!(reply, Message::ServerHello { mac: m, .. } if m == mac);
            match outcome {
                Ok(proof) => {
                    assert!(proved, "a proof the server did not make accepted");
                    assert_eq!(waiting.on_message(proof), Ok(Credential::Token(0)));
                }
                Err(e) => {
                    assert!(!proved, "the honest server's proof refused");
                    assert_eq!(e, AuthError::ServerNotAuthentic);
                }
            }
        }
    }
    Ok(())
}

/// The hello of an honest client holding token `t` (or none) on a channel its key is bound
/// to: it carries the client's proof.
fn bound_hello(t: Option<u8>, nonce: [u8; 32]) -> Message {
    ClientHandshake::new_bound(t.map(key), nonce).1
}

/// The proof a hello carries (zeros for anything else).
fn mac_of(hello: &Message) -> [u8; 32] {
    match hello {
        Message::ClientHello { mac, .. } => *mac,
        _ => [0; 32],
    }
}

/// The server's side of a channel-bound handshake (`ServerHandshake::on_bound_hello`): it
/// lets in a hello of this version whose hint names one of its keys only if the hello carries
/// the very proof an honest client holding that key makes, with the credential the hint
/// named, and answers with a proof of that key; an open server lets in a client without a
/// token and tells one with a token that it has none. Honest peers always succeed.
fn bound_server_side(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let server_token: Option<u8> = u.arbitrary()?;
    let tickets: Vec<u8> = (0..u.int_in_range(0..=2)?)
        .map(|_| u.arbitrary())
        .collect::<Result<_, _>>()?;
    let server_nonce: [u8; 32] = u.arbitrary()?;
    let client_nonce: [u8; 32] = u.arbitrary()?;
    let server = ServerHandshake::new(
        server_token.map(key),
        tickets.iter().map(|&t| key(t)).collect(),
        server_nonce,
    );
    // The hello, and the token of the honest client that sent it as it is (if one did).
    let (hello, honest) = match BoundSays::arbitrary(u)? {
        BoundSays::Honest(t) => (bound_hello(t, client_nonce), Some(t)),
        BoundSays::OtherVersion(t, v) => {
            let mut hello = bound_hello(t, client_nonce);
            if let Message::ClientHello { version, .. } = &mut hello {
                *version = v;
            }
            (hello, None)
        }
        BoundSays::Flipped(t, bit) => {
            let mut hello = bound_hello(t, client_nonce);
            if let Message::ClientHello { mac, .. } = &mut hello {
                mac[(bit / 8) as usize % 32] ^= 1 << (bit % 8);
            }
            (hello, None)
        }
        BoundSays::OtherProof { hint, proof } => {
            let mut hello = bound_hello(Some(hint), client_nonce);
            if let Message::ClientHello { mac, .. } = &mut hello {
                *mac = mac_of(&bound_hello(Some(proof), client_nonce));
            }
            (hello, None)
        }
        BoundSays::Arbitrary => (sprat_fuzz::arb_message(u)?, None),
    };
    let result = server.on_bound_hello(hello.clone());
    let Message::ClientHello {
        version,
        nonce,
        hint,
        mac,
    } = hello
    else {
        assert_eq!(result.err(), Some(AuthError::Unexpected));
        return Ok(());
    };
    if version != PROTOCOL_VERSION {
        assert_eq!(result.err(), Some(AuthError::ClientVersion(version)));
        return Ok(());
    }
    if server_token.is_none() {
        // An open server: a client without a token (a zero hint) is let in; one with a token
        // is told that the server has none, and the honest one stops there.
        let open_reply = Message::ServerHello {
            version: PROTOCOL_VERSION,
            auth_required: false,
            nonce: server_nonce,
            mac: [0; 32],
        };
        match result {
            Ok(BoundHello::Authenticated { credential, reply }) => {
                assert_eq!(hint, [0; 32], "an open server let in a client with a token");
                assert_eq!((credential, reply), (Credential::Open, open_reply));
            }
            Ok(BoundHello::Unprovable { reply }) => {
                assert_ne!(
                    hint, [0; 32],
                    "an open server turned away a client without one"
                );
                assert_eq!(reply, open_reply);
                if let Some(t) = honest {
                    let (client, _) = ClientHandshake::new_bound(t.map(key), client_nonce);
                    assert_eq!(client.on_message(reply), Err(AuthError::ServerWithoutToken));
                }
            }
            Err(e) => panic!("an open server refused a hello of its version: {e}"),
        }
        return Ok(());
    }
    let let_in = matches!(result, Ok(BoundHello::Authenticated { .. }));
    match (named_key(server_token, &tickets, nonce, hint), result) {
        (Some((t, named)), Ok(BoundHello::Authenticated { credential, reply })) => {
            assert_eq!(
                mac,
                mac_of(&bound_hello(Some(t), nonce)),
                "a proof other than the honest one accepted"
            );
            assert_eq!(credential, named, "another credential than the hint named");
            assert!(
                matches!(
                    reply,
                    Message::ServerHello {
                        version: PROTOCOL_VERSION,
                        auth_required: true,
                        nonce: n,
                        ..
                    } if n == server_nonce
                ),
                "the answer to a bound hello: {reply:?}"
            );
            // The answer proves the key to an honest client holding it.
            let (client, _) = ClientHandshake::new_bound(Some(key(t)), nonce);
            assert_eq!(
                client.on_message(reply),
                Ok(()),
                "the server's proof refused"
            );
        }
        (Some((t, _)), Err(e)) => {
            assert_ne!(
                mac,
                mac_of(&bound_hello(Some(t), nonce)),
                "the honest proof refused"
            );
            assert_eq!(e, AuthError::WrongToken);
        }
        (None, Err(e)) => assert_eq!(e, AuthError::WrongToken, "a hint naming no key"),
        (_, Ok(answer)) => panic!("a server with a token answered {answer:?}"),
    }
    // An honest client is let in exactly when it holds one of the server's keys.
    if let Some(t) = honest {
        let name = |k: u8| TOKENS[k as usize % TOKENS.len()];
        let holds = t.is_some_and(|t| {
            server_token
                .iter()
                .chain(&tickets)
                .any(|&k| name(k) == name(t))
        });
        assert_eq!(
            let_in, holds,
            "an honest client refused, or one without the key let in"
        );
    }
    Ok(())
}
