//! Token authentication by challenge and response; the token never crosses the wire.
//!
//! Both sides derive a key from the shared token. The client speaks first: its nonce, and a
//! hint (a MAC of that nonce) that tells the server which of its keys the client holds (the
//! server's token or a one-time ticket). The server answers with its own nonce and proves the
//! key at once with a MAC over both nonces; the client checks that proof before it sends
//! anything else, then proves the key in turn with its own MAC, and sends its first request (or
//! the first data of a push) right behind it. The server reads nothing more until that proof is
//! checked. So each side authenticates the other, and data starts two round trips after
//! `connect`, the same as a request's reply. Each handshake state is its own type, consumed by
//! the message that moves it on; nonces are supplied by the caller (no I/O, no randomness in
//! this crate).

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
    #[error("the server requires a token and none was given")]
    TokenRequired,
    #[error("the server did not prove it knows the token")]
    ServerNotAuthentic,
    #[error(
        "the server runs without a token (--no-auth), so it cannot prove it is the server \
         the token is for; nothing was sent (connect without a token to use an open server)"
    )]
    ServerWithoutToken,
    #[error("protocol version {0} is not supported (this build speaks {PROTOCOL_VERSION})")]
    Version(u16),
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
        let Message::ClientHello {
            version,
            nonce: client_nonce,
            hint,
        } = msg
        else {
            return Err(AuthError::Unexpected);
        };
        if version != PROTOCOL_VERSION {
            return Err(AuthError::Version(version));
        }
        let ServerKeys::Tokens(tokens) = &self.keys else {
            let hello = Message::ServerHello {
                version: PROTOCOL_VERSION,
                auth_required: false,
                nonce: self.nonce,
                mac: [0; 32],
            };
            return Ok((ServerAwaitingProof { expected: None }, hello));
        };
        let hint = blake3::Hash::from_bytes(hint);
        // blake3::Hash compares in constant time.
        let matched = tokens
            .iter()
            .chain(self.tickets.iter())
            .position(|k| k.hint(&client_nonce) == hint)
            .ok_or(AuthError::WrongToken)?;
        let (used, credential) = match matched.checked_sub(tokens.len()) {
            None => (&tokens[matched], Credential::Token(matched)),
            Some(i) => (&self.tickets[i], Credential::Ticket(i)),
        };
        let hello = Message::ServerHello {
            version: PROTOCOL_VERSION,
            auth_required: true,
            nonce: self.nonce,
            mac: *used.proof(b"server", &self.nonce, &client_nonce).as_bytes(),
        };
        let expected = used.proof(b"client", &self.nonce, &client_nonce);
        Ok((
            ServerAwaitingProof {
                expected: Some((expected, credential)),
            },
            hello,
        ))
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
        };
        (ClientHandshake { key, nonce }, hello)
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
            return Err(AuthError::Version(version));
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
        };
        assert_eq!(server.on_message(hello).err(), Some(AuthError::Version(2)));
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
