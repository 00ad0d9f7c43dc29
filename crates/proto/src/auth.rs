//! Token authentication by challenge and response; the token never crosses the wire.
//!
//! Both sides derive a key from the shared token. The client speaks first: its nonce, and a
//! hint (a MAC of that nonce) that tells the server which of its keys the client holds (the
//! server's token or a one-time ticket). Two forms of the exchange follow:
//!
//! - **On plain TCP** the server answers with its own nonce and proves the key at once with a
//!   MAC over both nonces; the client checks that proof before it sends anything else, then
//!   proves the key in turn with its own MAC, and sends its first request (or the first data
//!   of a push) right behind it. The server reads nothing more until that proof is checked.
//!   Data starts two round trips after `connect`.
//! - **On a channel the keys are bound to** (TLS: both keys are first bound to the session's
//!   exporter, see [`TokenKey::bound_to`]) a proof cannot be replayed on another channel, so
//!   the server's nonce is not needed for freshness: the client's hello carries its proof
//!   already ([`ClientHandshake::new_bound`]), and the server answers with its own
//!   ([`ServerHandshake::on_bound_hello`]). A client that already trusts the server's TLS key
//!   sends its first request (or data) right behind the hello, so data starts at the TLS
//!   handshake's end (two round trips after `connect`) rather than one round trip later; it
//!   checks the server's proof before it believes any answer.
//!
//! Each side authenticates the other either way. Each handshake state is its own type,
//! consumed by the message that moves it on; nonces are supplied by the caller (no I/O, no
//! randomness in this crate).

use crate::message::Message;
use crate::PROTOCOL_VERSION;
use thiserror::Error;

const KEY_CONTEXT: &str = "sprat 2026-11 session token key v1";

/// A key derived from the shared token.
#[derive(Clone)]
pub struct TokenKey([u8; 32]);

impl TokenKey {
    pub fn from_token(token: &[u8]) -> TokenKey {
        TokenKey(blake3::derive_key(KEY_CONTEXT, token))
    }

    fn mac(&self, parts: &[&[u8]]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        for part in parts {
            h.update(part);
        }
        h.finalize()
    }

    /// This key bound to one channel: `channel` is a value both ends derive from the channel
    /// itself (the TLS session's exporter; zeros on plain TCP), so that a proof made on one
    /// channel does not verify on another and a machine in the middle cannot relay it.
    pub fn bound_to(&self, channel: &[u8; 32]) -> TokenKey {
        TokenKey(*self.mac(&[b"channel", channel]).as_bytes())
    }

    /// Tells the server which key the client holds, without proving it (it can be replayed).
    fn hint(&self, client_nonce: &[u8; 32]) -> blake3::Hash {
        self.mac(&[b"hint", client_nonce])
    }

    fn proof(&self, role: &[u8], server_nonce: &[u8; 32], client_nonce: &[u8; 32]) -> blake3::Hash {
        self.mac(&[role, server_nonce, client_nonce])
    }

    /// The client's proof in a channel-bound hello: fresh through the channel, not a nonce of
    /// the server's.
    fn bound_client_proof(&self, client_nonce: &[u8; 32]) -> blake3::Hash {
        self.mac(&[b"client-bound", client_nonce])
    }
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

/// Why a handshake failed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("wrong token")]
    WrongToken,
    #[error(
        "the server requires a token and none was given (set SPRAT_TOKEN, or pass --token-file \
         FILE)"
    )]
    TokenRequired,
    #[error("the server did not prove it knows the token")]
    ServerNotAuthentic,
    #[error(
        "the server runs without a token (--no-auth), so it cannot prove it is the server \
         the token is for; nothing was done (connect without a token to use an open server)"
    )]
    ServerWithoutToken,
    /// The client speaks another protocol version (the server's refusal).
    #[error(
        "the client speaks sprat protocol {0} and this server {PROTOCOL_VERSION}: run the same \
         sprat release on both"
    )]
    ClientVersion(u16),
    /// The server speaks another protocol version (the client's refusal).
    #[error(
        "the server speaks sprat protocol {0} and this client {PROTOCOL_VERSION}: run the same \
         sprat release on both"
    )]
    ServerVersion(u16),
    #[error("unexpected message during handshake")]
    Unexpected,
}

/// Which credential a client proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// None: the server runs with `--no-auth`.
    Open,
    /// The server's token at this index of its [`ServerKeys::Tokens`] (0 with one token).
    Token(usize),
    /// The one-time ticket at this index of the list given to [`ServerHandshake::new`].
    Ticket(usize),
}

/// The tokens a server accepts (besides one-time tickets).
#[derive(Debug, Clone)]
pub enum ServerKeys {
    /// Anyone, without a token (`--no-auth`).
    Open,
    /// The keys of the server's tokens (one, or one per distinct token of its exports); the
    /// client's hint names the one it holds, and [`Credential::Token`] says which it proved.
    Tokens(Vec<TokenKey>),
}

impl ServerKeys {
    /// These keys bound to one channel (see [`TokenKey::bound_to`]).
    pub fn bound_to(&self, channel: &[u8; 32]) -> ServerKeys {
        match self {
            ServerKeys::Open => ServerKeys::Open,
            ServerKeys::Tokens(keys) => {
                ServerKeys::Tokens(keys.iter().map(|k| k.bound_to(channel)).collect())
            }
        }
    }
}

impl From<Option<TokenKey>> for ServerKeys {
    /// One token, or none at all (`--no-auth`).
    fn from(key: Option<TokenKey>) -> ServerKeys {
        key.map_or(ServerKeys::Open, |k| ServerKeys::Tokens(vec![k]))
    }
}

/// Server side, waiting for the client's hello.
#[derive(Debug)]
pub struct ServerHandshake {
    keys: ServerKeys,
    tickets: Vec<TokenKey>,
    nonce: [u8; 32],
}

/// Server side, having proved the key, waiting for the client's proof.
#[derive(Debug)]
pub struct ServerAwaitingProof {
    /// The client proof expected and the credential it stands for (`None`: `--no-auth`).
    expected: Option<(blake3::Hash, Credential)>,
}

impl ServerHandshake {
    /// `keys`: the server's tokens ([`ServerKeys`], or an `Option<TokenKey>`: one token, or
    /// `None` on a server run with `--no-auth`); `tickets` are one-time keys that grant
    /// narrower rights.
    pub fn new(
        keys: impl Into<ServerKeys>,
        tickets: Vec<TokenKey>,
        nonce: [u8; 32],
    ) -> ServerHandshake {
        ServerHandshake {
            keys: keys.into(),
            tickets,
            nonce,
        }
    }

    /// Answers the client's hello with the server's own, which proves the key the client's
    /// hint names. A hint that names none of the server's keys is a wrong token.
    pub fn on_message(self, msg: Message) -> Result<(ServerAwaitingProof, Message), AuthError> {
        // Plain TCP: the client's proof follows in `ClientAuth`, after the server's nonce.
        match self.read_hello(msg)? {
            Named::Open { .. } => Ok((ServerAwaitingProof { expected: None }, self.open_reply())),
            Named::Key {
                key,
                credential,
                client_nonce,
                ..
            } => {
                let expected = key.proof(b"client", &self.nonce, &client_nonce);
                let awaiting = ServerAwaitingProof {
                    expected: Some((expected, credential)),
                };
                Ok((awaiting, self.proving_reply(key, &client_nonce)))
            }
        }
    }

    /// Reads a client's hello: its version, and the key its hint names (a hint that names
    /// none of the server's keys is a wrong token).
    fn read_hello(&self, msg: Message) -> Result<Named<'_>, AuthError> {
        let Message::ClientHello {
            version,
            nonce: client_nonce,
            hint,
            mac,
        } = msg
        else {
            return Err(AuthError::Unexpected);
        };
        if version != PROTOCOL_VERSION {
            return Err(AuthError::ClientVersion(version));
        }
        let ServerKeys::Tokens(tokens) = &self.keys else {
            return Ok(Named::Open {
                no_token: hint == [0; 32],
            });
        };
        let hint = blake3::Hash::from_bytes(hint);
        // blake3::Hash compares in constant time.
        let matched = tokens
            .iter()
            .chain(self.tickets.iter())
            .position(|k| k.hint(&client_nonce) == hint)
            .ok_or(AuthError::WrongToken)?;
        let (key, credential) = match matched.checked_sub(tokens.len()) {
            None => (&tokens[matched], Credential::Token(matched)),
            Some(i) => (&self.tickets[i], Credential::Ticket(i)),
        };
        Ok(Named::Key {
            key,
            credential,
            client_nonce,
            mac,
        })
    }

    /// The hello of a server run with `--no-auth`: no proof.
    fn open_reply(&self) -> Message {
        Message::ServerHello {
            version: PROTOCOL_VERSION,
            auth_required: false,
            nonce: self.nonce,
            mac: [0; 32],
        }
    }

    /// The server's hello, proving `key`.
    fn proving_reply(&self, key: &TokenKey, client_nonce: &[u8; 32]) -> Message {
        Message::ServerHello {
            version: PROTOCOL_VERSION,
            auth_required: true,
            nonce: self.nonce,
            mac: *key.proof(b"server", &self.nonce, client_nonce).as_bytes(),
        }
    }
}

/// What a client's hello names ([`ServerHandshake::read_hello`]).
enum Named<'a> {
    /// Nothing: the server runs with `--no-auth`; `no_token`: the client's hint is zero (it
    /// holds no token, and expects none).
    Open { no_token: bool },
    /// The server's key the hint names, the credential it stands for, the client's nonce and
    /// the proof its hello carries (zeros on plain TCP).
    Key {
        key: &'a TokenKey,
        credential: Credential,
        client_nonce: [u8; 32],
        mac: [u8; 32],
    },
}

/// What a server makes of a channel-bound hello ([`ServerHandshake::on_bound_hello`]).
#[derive(Debug, PartialEq, Eq)]
pub enum BoundHello {
    /// The client proved this credential: send `reply` (which proves the key in turn); the
    /// client's first message may already follow the hello.
    Authenticated {
        credential: Credential,
        reply: Message,
    },
    /// A client brought a token to a server run with `--no-auth`, which cannot prove it:
    /// send `reply` (which says so) and read nothing more, so that nothing the client sent
    /// behind its hello is acted on.
    Unprovable { reply: Message },
}

impl ServerHandshake {
    /// Checks a hello that carries the client's proof (a TLS connection, whose keys are bound
    /// to it; see the module page) and answers it with the server's proof. A hint or proof
    /// that matches none of the server's keys is a wrong token.
    pub fn on_bound_hello(self, msg: Message) -> Result<BoundHello, AuthError> {
        match self.read_hello(msg)? {
            Named::Open { no_token: true } => Ok(BoundHello::Authenticated {
                credential: Credential::Open,
                reply: self.open_reply(),
            }),
            Named::Open { no_token: false } => Ok(BoundHello::Unprovable {
                reply: self.open_reply(),
            }),
            Named::Key {
                key,
                credential,
                client_nonce,
                mac,
            } => {
                if key.bound_client_proof(&client_nonce) != blake3::Hash::from_bytes(mac) {
                    return Err(AuthError::WrongToken);
                }
                let reply = self.proving_reply(key, &client_nonce);
                Ok(BoundHello::Authenticated { credential, reply })
            }
        }
    }
}

impl ServerAwaitingProof {
    /// Checks the client's proof; on success the client is authenticated with the returned
    /// credential.
    pub fn on_message(self, msg: Message) -> Result<Credential, AuthError> {
        let Message::ClientAuth { mac } = msg else {
            return Err(AuthError::Unexpected);
        };
        match self.expected {
            None => Ok(Credential::Open),
            Some((expected, credential)) if expected == blake3::Hash::from_bytes(mac) => {
                Ok(credential)
            }
            Some(_) => Err(AuthError::WrongToken),
        }
    }
}

/// Client side, waiting for the server's hello.
#[derive(Debug)]
pub struct ClientHandshake {
    key: Option<TokenKey>,
    nonce: [u8; 32],
}

impl ClientHandshake {
    /// Starts a handshake; send the returned hello at once.
    pub fn new(key: Option<TokenKey>, nonce: [u8; 32]) -> (ClientHandshake, Message) {
        let hint = key.as_ref().map_or([0; 32], |k| *k.hint(&nonce).as_bytes());
        let hello = Message::ClientHello {
            version: PROTOCOL_VERSION,
            nonce,
            hint,
            mac: [0; 32],
        };
        (ClientHandshake { key, nonce }, hello)
    }

    /// Starts a handshake on a channel `key` is bound to (TLS): the hello carries the client's
    /// proof, and what the client sends behind it is read once that proof is checked. The
    /// returned state checks the server's answer, which must come before any other.
    pub fn new_bound(key: Option<TokenKey>, nonce: [u8; 32]) -> (ClientBoundHandshake, Message) {
        let (hint, mac) = key.as_ref().map_or(([0; 32], [0; 32]), |k| {
            (
                *k.hint(&nonce).as_bytes(),
                *k.bound_client_proof(&nonce).as_bytes(),
            )
        });
        let hello = Message::ClientHello {
            version: PROTOCOL_VERSION,
            nonce,
            hint,
            mac,
        };
        (ClientBoundHandshake(ClientHandshake { key, nonce }), hello)
    }

    /// Checks the server's hello and its proof of the key; returns the client's own proof,
    /// after which the connection may carry anything (the server reads it only once the
    /// proof is checked). An `Error` with code `AuthFailed` in place of the hello means the
    /// server knows no such key.
    pub fn on_message(self, msg: Message) -> Result<Message, AuthError> {
        let (version, auth_required, server_nonce, server_mac) = match msg {
            Message::ServerHello {
                version,
                auth_required,
                nonce,
                mac,
            } => (version, auth_required, nonce, mac),
            Message::Error {
                code: crate::ErrorCode::AuthFailed,
                ..
            } => return Err(self.refused()),
            _ => return Err(AuthError::Unexpected),
        };
        if version != PROTOCOL_VERSION {
            return Err(AuthError::ServerVersion(version));
        }
        let mac = match (&self.key, auth_required) {
            (Some(key), true) => {
                let expected = key.proof(b"server", &server_nonce, &self.nonce);
                if expected != blake3::Hash::from_bytes(server_mac) {
                    return Err(AuthError::ServerNotAuthentic);
                }
                *key.proof(b"client", &server_nonce, &self.nonce).as_bytes()
            }
            (None, true) => return Err(AuthError::TokenRequired),
            // A client with a token sends nothing to a server that cannot prove it has it:
            // anyone can answer a hello with `auth_required = 0`.
            (Some(_), false) => return Err(AuthError::ServerWithoutToken),
            (None, false) => [0; 32],
        };
        Ok(Message::ClientAuth { mac })
    }

    /// What a refusal of the hello means for this client.
    pub fn refused(&self) -> AuthError {
        if self.key.is_some() {
            AuthError::WrongToken
        } else {
            AuthError::TokenRequired
        }
    }
}

/// Client side of a channel-bound handshake ([`ClientHandshake::new_bound`]): its hello, with
/// its proof, is sent; the server's answer and proof are due.
#[derive(Debug)]
pub struct ClientBoundHandshake(ClientHandshake);

impl ClientBoundHandshake {
    /// Checks the server's answer to the hello: its proof of the key, or that it runs without
    /// a token (accepted only by a client without one). An `Error` with code `AuthFailed` in
    /// its place means the server knows no such key.
    pub fn on_message(self, msg: Message) -> Result<(), AuthError> {
        self.0.on_message(msg).map(|_| ())
    }

    /// What a refusal of the hello means for this client.
    pub fn refused(&self) -> AuthError {
        self.0.refused()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a whole handshake; returns the credential the server saw.
    fn run(
        server_token: Option<&[u8]>,
        tickets: &[&[u8]],
        client_token: Option<&[u8]>,
    ) -> Result<Credential, AuthError> {
        let tickets = tickets.iter().map(|t| TokenKey::from_token(t)).collect();
        let server = ServerHandshake::new(server_token.map(TokenKey::from_token), tickets, [1; 32]);
        let (client, hello) = ClientHandshake::new(client_token.map(TokenKey::from_token), [2; 32]);
        let (server, reply) = match server.on_message(hello) {
            Ok(answered) => answered,
            // The server refuses the hello with an `Error`, which the client interprets.
            Err(AuthError::WrongToken) => return Err(client.refused()),
            Err(e) => return Err(e),
        };
        let proof = client.on_message(reply)?;
        server.on_message(proof)
    }

    #[test]
    fn same_token_authenticates_both_ways() {
        assert_eq!(
            run(Some(b"secret"), &[], Some(b"secret")),
            Ok(Credential::Token(0))
        );
    }

    #[test]
    fn wrong_or_missing_token_is_refused() {
        assert_eq!(
            run(Some(b"secret"), &[], Some(b"guess")),
            Err(AuthError::WrongToken)
        );
        assert_eq!(
            run(Some(b"secret"), &[], None),
            Err(AuthError::TokenRequired)
        );
    }

    #[test]
    fn open_server_accepts_clients_without_a_token() {
        assert_eq!(run(None, &[], None), Ok(Credential::Open));
    }

    #[test]
    fn a_client_with_a_token_refuses_a_server_that_cannot_prove_it() {
        // An impostor answers every hello with "no token needed".
        assert_eq!(
            run(None, &[], Some(b"x")),
            Err(AuthError::ServerWithoutToken)
        );
    }

    #[test]
    fn a_ticket_authenticates_as_a_ticket() {
        assert_eq!(
            run(Some(b"secret"), &[b"t1", b"t2"], Some(b"t2")),
            Ok(Credential::Ticket(1))
        );
    }

    #[test]
    fn a_server_with_several_tokens_says_which_one_was_proved() {
        let keys = |tokens: &[&[u8]]| tokens.iter().map(|t| TokenKey::from_token(t)).collect();
        let tokens: &[&[u8]] = &[b"export-a", b"export-b", b"export-c"];
        let prove = |token: &[u8]| {
            let server =
                ServerHandshake::new(ServerKeys::Tokens(keys(tokens)), keys(&[b"t"]), [1; 32]);
            let (client, hello) = ClientHandshake::new(Some(TokenKey::from_token(token)), [2; 32]);
            let (server, reply) = server.on_message(hello)?;
            server.on_message(client.on_message(reply)?)
        };
        for (i, token) in tokens.iter().enumerate() {
            assert_eq!(prove(token), Ok(Credential::Token(i)));
        }
        // Tickets are counted apart from the tokens.
        assert_eq!(prove(b"t"), Ok(Credential::Ticket(0)));
        assert_eq!(prove(b"other"), Err(AuthError::WrongToken));
    }

    #[test]
    fn client_detects_a_server_without_the_token() {
        let (client, _) = ClientHandshake::new(Some(TokenKey::from_token(b"secret")), [2; 32]);
        let hello = Message::ServerHello {
            version: PROTOCOL_VERSION,
            auth_required: true,
            nonce: [1; 32],
            mac: [0; 32],
        };
        assert_eq!(client.on_message(hello), Err(AuthError::ServerNotAuthentic));
    }

    #[test]
    fn a_replayed_hint_does_not_authenticate() {
        // An eavesdropper replays a client's hello; the server answers (the hint names its
        // key) but the eavesdropper cannot make the proof for the server's fresh nonce.
        let key = TokenKey::from_token(b"secret");
        let (_, hello) = ClientHandshake::new(Some(key.clone()), [2; 32]);
        let server = ServerHandshake::new(Some(key), Vec::new(), [9; 32]);
        let (server, _) = server.on_message(hello).unwrap();
        assert_eq!(
            server.on_message(Message::ClientAuth { mac: [0; 32] }),
            Err(AuthError::WrongToken)
        );
    }

    #[test]
    fn another_version_is_named() {
        let server = ServerHandshake::new(None, Vec::new(), [1; 32]);
        let hello = Message::ClientHello {
            version: 2,
            nonce: [2; 32],
            hint: [0; 32],
            mac: [0; 32],
        };
        assert_eq!(
            server.on_message(hello.clone()).err(),
            Some(AuthError::ClientVersion(2))
        );
        let server = ServerHandshake::new(None, Vec::new(), [1; 32]);
        assert_eq!(
            server.on_bound_hello(hello).err(),
            Some(AuthError::ClientVersion(2))
        );
    }

    /// Runs a whole channel-bound handshake; returns the credential the server saw.
    fn run_bound(
        server_token: Option<&[u8]>,
        tickets: &[&[u8]],
        client_token: Option<&[u8]>,
    ) -> Result<Credential, AuthError> {
        let tickets = tickets.iter().map(|t| TokenKey::from_token(t)).collect();
        let server = ServerHandshake::new(server_token.map(TokenKey::from_token), tickets, [1; 32]);
        let (client, hello) =
            ClientHandshake::new_bound(client_token.map(TokenKey::from_token), [2; 32]);
        match server.on_bound_hello(hello) {
            Ok(BoundHello::Authenticated { credential, reply }) => {
                client.on_message(reply)?;
                Ok(credential)
            }
            Ok(BoundHello::Unprovable { reply }) => {
                // The client refuses such an answer itself.
                assert_eq!(client.on_message(reply), Err(AuthError::ServerWithoutToken));
                Err(AuthError::ServerWithoutToken)
            }
            Err(AuthError::WrongToken) => Err(client.refused()),
            Err(e) => Err(e),
        }
    }

    #[test]
    fn a_bound_hello_authenticates_exactly_the_holders_of_a_key() {
        assert_eq!(
            run_bound(Some(b"secret"), &[], Some(b"secret")),
            Ok(Credential::Token(0))
        );
        assert_eq!(
            run_bound(Some(b"secret"), &[b"t1", b"t2"], Some(b"t2")),
            Ok(Credential::Ticket(1))
        );
        assert_eq!(
            run_bound(Some(b"secret"), &[], Some(b"guess")),
            Err(AuthError::WrongToken)
        );
        assert_eq!(
            run_bound(Some(b"secret"), &[], None),
            Err(AuthError::TokenRequired)
        );
        assert_eq!(run_bound(None, &[], None), Ok(Credential::Open));
        assert_eq!(
            run_bound(None, &[], Some(b"x")),
            Err(AuthError::ServerWithoutToken)
        );
    }

    #[test]
    fn a_bound_hello_with_the_hint_but_not_the_proof_is_refused() {
        // The hint alone names the key; without the proof the server refuses, whatever follows.
        let key = TokenKey::from_token(b"secret");
        let (_, hello) = ClientHandshake::new_bound(Some(key.clone()), [2; 32]);
        let Message::ClientHello {
            version,
            nonce,
            hint,
            ..
        } = hello
        else {
            panic!("not a hello: {hello:?}");
        };
        let forged = Message::ClientHello {
            version,
            nonce,
            hint,
            mac: [7; 32],
        };
        let server = ServerHandshake::new(Some(key), Vec::new(), [1; 32]);
        assert_eq!(server.on_bound_hello(forged), Err(AuthError::WrongToken));
    }

    #[test]
    fn a_bound_hello_does_not_verify_on_another_channel() {
        // A machine in the middle relays a client's hello made on its own TLS session with the
        // client to the server, on another session: the keys are bound to each, so it fails.
        let token = TokenKey::from_token(b"secret");
        let (_, hello) = ClientHandshake::new_bound(Some(token.bound_to(&[1; 32])), [2; 32]);
        let server = ServerHandshake::new(Some(token.bound_to(&[2; 32])), Vec::new(), [1; 32]);
        assert_eq!(server.on_bound_hello(hello), Err(AuthError::WrongToken));
    }

    #[test]
    fn a_bound_client_detects_a_server_without_the_token() {
        let (client, _) = ClientHandshake::new_bound(Some(TokenKey::from_token(b"s")), [2; 32]);
        let hello = Message::ServerHello {
            version: PROTOCOL_VERSION,
            auth_required: true,
            nonce: [1; 32],
            mac: [0; 32],
        };
        assert_eq!(client.on_message(hello), Err(AuthError::ServerNotAuthentic));
    }

    #[test]
    fn the_token_is_not_in_any_message() {
        let token = b"very-secret-token-value";
        let key = TokenKey::from_token(token);
        let server = ServerHandshake::new(Some(key.clone()), Vec::new(), [1; 32]);
        let (client, hello) = ClientHandshake::new(Some(key), [2; 32]);
        let (server, reply) = server.on_message(hello.clone()).unwrap();
        let proof = client.on_message(reply.clone()).unwrap();
        for m in [&hello, &reply, &proof] {
            let bytes = m.encode();
            assert!(!bytes.windows(token.len()).any(|w| w == token));
        }
        assert!(server.on_message(proof).is_ok());
    }
}
