//! Token authentication by challenge and response; the token never crosses the wire.
//!
//! Both sides derive a key from the shared token. The server sends a random nonce, the client
//! answers with its own nonce and a keyed BLAKE3 MAC over both, and the server proves knowledge
//! of the key in return, so each side authenticates the other. Each handshake state is its own
//! type, consumed by the message that moves it on; nonces are supplied by the caller (no I/O,
//! no randomness in this crate).

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

    fn mac(&self, role: &[u8], server_nonce: &[u8; 32], client_nonce: &[u8; 32]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(role);
        h.update(server_nonce);
        h.update(client_nonce);
        h.finalize()
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
    #[error("protocol version {0} is not supported (this build speaks {PROTOCOL_VERSION})")]
    Version(u16),
    #[error("unexpected message during handshake")]
    Unexpected,
}

/// Server side, before the client answered the challenge.
pub struct ServerChallenge {
    key: Option<TokenKey>,
    tickets: Vec<TokenKey>,
    nonce: [u8; 32],
}

/// Which credential a client proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// The server's own token (or no token on a server run with `--no-auth`).
    Token,
    /// The one-time ticket at this index of the list given to [`ServerChallenge::start`].
    Ticket(usize),
}

impl ServerChallenge {
    /// Starts a handshake; send the returned hello. `key` is `None` on a server run with
    /// `--no-auth`; `tickets` are one-time keys that grant narrower rights.
    pub fn start(
        key: Option<TokenKey>,
        tickets: Vec<TokenKey>,
        nonce: [u8; 32],
    ) -> (ServerChallenge, Message) {
        let hello = Message::ServerHello {
            version: PROTOCOL_VERSION,
            auth_required: key.is_some(),
            nonce,
        };
        (
            ServerChallenge {
                key,
                tickets,
                nonce,
            },
            hello,
        )
    }

    /// Checks the client's answer; on success returns the reply to send and the credential used.
    pub fn on_message(self, msg: Message) -> Result<(Message, Credential), AuthError> {
        let Message::ClientAuth {
            version,
            nonce,
            mac,
        } = msg
        else {
            return Err(AuthError::Unexpected);
        };
        if version != PROTOCOL_VERSION {
            return Err(AuthError::Version(version));
        }
        let Some(key) = &self.key else {
            return Ok((Message::AuthOk { mac: [0; 32] }, Credential::Token));
        };
        let given = blake3::Hash::from_bytes(mac);
        // blake3::Hash compares in constant time.
        let matched = std::iter::once(key)
            .chain(self.tickets.iter())
            .position(|k| k.mac(b"client", &self.nonce, &nonce) == given)
            .ok_or(AuthError::WrongToken)?;
        let used = if matched == 0 {
            key
        } else {
            &self.tickets[matched - 1]
        };
        let credential = if matched == 0 {
            Credential::Token
        } else {
            Credential::Ticket(matched - 1)
        };
        let reply = Message::AuthOk {
            mac: *used.mac(b"server", &self.nonce, &nonce).as_bytes(),
        };
        Ok((reply, credential))
    }
}

/// Client side, waiting for the server's hello.
pub struct ClientHandshake {
    key: Option<TokenKey>,
    nonce: [u8; 32],
}

/// Client side, waiting for the server's proof.
pub struct ClientAwaitingProof {
    expected: Option<blake3::Hash>,
}

impl ClientHandshake {
    pub fn new(key: Option<TokenKey>, nonce: [u8; 32]) -> ClientHandshake {
        ClientHandshake { key, nonce }
    }

    /// Answers the server's challenge.
    pub fn on_message(self, msg: Message) -> Result<(ClientAwaitingProof, Message), AuthError> {
        let Message::ServerHello {
            version,
            auth_required,
            nonce: server_nonce,
        } = msg
        else {
            return Err(AuthError::Unexpected);
        };
        if version != PROTOCOL_VERSION {
            return Err(AuthError::Version(version));
        }
        let (mac, expected) = match (&self.key, auth_required) {
            (Some(key), true) => (
                *key.mac(b"client", &server_nonce, &self.nonce).as_bytes(),
                Some(key.mac(b"server", &server_nonce, &self.nonce)),
            ),
            (None, true) => return Err(AuthError::TokenRequired),
            (_, false) => ([0; 32], None),
        };
        let reply = Message::ClientAuth {
            version: PROTOCOL_VERSION,
            nonce: self.nonce,
            mac,
        };
        Ok((ClientAwaitingProof { expected }, reply))
    }
}

impl ClientAwaitingProof {
    /// Checks the server's proof; the connection is authenticated when this succeeds.
    pub fn on_message(self, msg: Message) -> Result<(), AuthError> {
        match msg {
            Message::AuthOk { mac } => match self.expected {
                Some(expected) if expected != blake3::Hash::from_bytes(mac) => {
                    Err(AuthError::ServerNotAuthentic)
                }
                _ => Ok(()),
            },
            Message::Error { .. } => Err(AuthError::WrongToken),
            _ => Err(AuthError::Unexpected),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(server_token: Option<&[u8]>, client_token: Option<&[u8]>) -> Result<(), AuthError> {
        let (server, hello) =
            ServerChallenge::start(server_token.map(TokenKey::from_token), Vec::new(), [1; 32]);
        let client = ClientHandshake::new(client_token.map(TokenKey::from_token), [2; 32]);
        let (client, answer) = client.on_message(hello)?;
        let (reply, _) = server.on_message(answer)?;
        client.on_message(reply)
    }

    #[test]
    fn same_token_authenticates_both_ways() {
        assert_eq!(run(Some(b"secret"), Some(b"secret")), Ok(()));
    }

    #[test]
    fn wrong_or_missing_token_is_refused() {
        assert_eq!(
            run(Some(b"secret"), Some(b"guess")),
            Err(AuthError::WrongToken)
        );
        assert_eq!(run(Some(b"secret"), None), Err(AuthError::TokenRequired));
    }

    #[test]
    fn open_server_accepts_anyone() {
        assert_eq!(run(None, None), Ok(()));
        assert_eq!(run(None, Some(b"x")), Ok(()));
    }

    #[test]
    fn a_ticket_authenticates_as_a_ticket() {
        let tickets = vec![TokenKey::from_token(b"t1"), TokenKey::from_token(b"t2")];
        let (server, hello) =
            ServerChallenge::start(Some(TokenKey::from_token(b"secret")), tickets, [1; 32]);
        let client = ClientHandshake::new(Some(TokenKey::from_token(b"t2")), [2; 32]);
        let (client, answer) = client.on_message(hello).unwrap();
        let (reply, credential) = server.on_message(answer).unwrap();
        assert_eq!(credential, Credential::Ticket(1));
        assert_eq!(client.on_message(reply), Ok(()));
    }

    #[test]
    fn client_detects_a_server_without_the_token() {
        let client = ClientHandshake::new(Some(TokenKey::from_token(b"secret")), [2; 32]);
        let hello = Message::ServerHello {
            version: PROTOCOL_VERSION,
            auth_required: true,
            nonce: [1; 32],
        };
        let (client, _) = client.on_message(hello).unwrap();
        assert_eq!(
            client.on_message(Message::AuthOk { mac: [0; 32] }),
            Err(AuthError::ServerNotAuthentic)
        );
    }

    #[test]
    fn the_token_is_not_in_any_message() {
        let token = b"very-secret-token-value";
        let (server, hello) =
            ServerChallenge::start(Some(TokenKey::from_token(token)), Vec::new(), [1; 32]);
        let (_, answer) = ClientHandshake::new(Some(TokenKey::from_token(token)), [2; 32])
            .on_message(hello)
            .unwrap();
        let bytes = answer.encode();
        assert!(!bytes.windows(token.len()).any(|w| w == token));
        assert!(server.on_message(answer).is_ok());
    }
}
