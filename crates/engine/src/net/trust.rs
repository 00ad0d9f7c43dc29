//! What a client brings to a connection: its token (proof of the right to use the server)
//! and how it recognises the server (encryption on or off, and the keys it accepts: pinned on
//! the command line, or remembered from a first connection in the known-servers file). A
//! client may bring another token and other keys to one server than to the rest (a server
//! named by an alias of the client's config file, with its own token file and fingerprint).

use super::identity::Fingerprint;
use super::known_servers::{KnownServers, Pin, Verdict};
use crate::error::TransferError;
use sprat_proto::auth::TokenKey;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A client's token and trust, passed to every connection it opens.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub token: Option<TokenKey>,
    pub trust: Trust,
    /// What one server (`HOST:PORT`, lower case) gets instead of `token` and `trust.pins`.
    servers: Arc<BTreeMap<String, ServerAccess>>,
}

/// The token and keys for one server, in place of a client's general ones.
#[derive(Clone, Debug, Default)]
pub struct ServerAccess {
    /// The token for this server; `None`: the client's general token.
    pub token: Option<TokenKey>,
    /// Keys accepted from this server alone (known-servers file not used for it); empty: the
    /// client's general trust.
    pub pins: Vec<Fingerprint>,
}

/// How a client recognises servers.
#[derive(Clone, Debug)]
pub struct Trust {
    /// Whether connections use TLS (`false`: `--no-encryption`, for trusted networks).
    pub encrypt: bool,
    /// Keys accepted whatever the known-servers file says (`--server-fingerprint`, or the key
    /// a third-party copy's client vouches for); when any is given, only these are accepted.
    pub pins: Vec<Fingerprint>,
    /// Where a server met for the first time is remembered; `None`: only `pins` are accepted.
    pub known: Option<Arc<KnownServers>>,
}

impl Trust {
    /// Accepts exactly the server whose key is `key`.
    pub fn pinned(key: Fingerprint) -> Trust {
        Trust {
            encrypt: true,
            pins: vec![key],
            known: None,
        }
    }

    /// No encryption, and so no server key to check.
    pub fn plain() -> Trust {
        Trust {
            encrypt: false,
            pins: Vec::new(),
            known: None,
        }
    }
}

impl Credentials {
    pub fn new(token: Option<TokenKey>, trust: Trust) -> Credentials {
        Credentials {
            token,
            trust,
            servers: Arc::default(),
        }
    }

    /// These credentials with `access` for the server at `addr` (`HOST:PORT`) in place of the
    /// general token and pins.
    pub fn with_server(mut self, addr: &str, access: ServerAccess) -> Credentials {
        Arc::make_mut(&mut self.servers).insert(addr.to_ascii_lowercase(), access);
        self
    }

    /// What [`with_server`](Self::with_server) gave the server at `addr`, if anything.
    pub fn server(&self, addr: &str) -> Option<&ServerAccess> {
        self.servers.get(&addr.to_ascii_lowercase())
    }

    /// The general token (the one for servers without their own).
    pub fn token(&self) -> Option<&TokenKey> {
        self.token.as_ref()
    }

    /// The token to prove to the server at `addr`.
    pub fn token_for(&self, addr: &str) -> Option<&TokenKey> {
        self.server(addr)
            .and_then(|s| s.token.as_ref())
            .or(self.token.as_ref())
    }

    /// The same trust with another token (a one-time ticket, say).
    pub fn with_token(&self, token: Option<TokenKey>) -> Credentials {
        Credentials {
            token,
            trust: self.trust.clone(),
            servers: Arc::default(),
        }
    }

    /// Checks the key the server at `addr` presented in its TLS handshake, before anything
    /// is sent to it. Returns whether the key is vouched for: pinned on the command line or in
    /// the config, or marked in the known-servers file as having proved a token; only then
    /// may a client send more than its hello before the server has proved the token on this
    /// connection. What is written to the known-servers file is `pin`'s: nothing before the
    /// server proved the token (so that no key of a machine in the middle is ever pinned by a
    /// client holding a token), the key alone for a client without a token (nothing to prove),
    /// the key marked as proved once the server proved the token.
    pub(crate) fn check_server(
        &self,
        addr: &str,
        key: Option<Fingerprint>,
        pin: Pin,
    ) -> Result<bool, TransferError> {
        let refuse = |why: String| TransferError::Identity {
            peer: addr.to_string(),
            why,
        };
        let Some(key) = key else {
            return Err(refuse("the server presented no key".into()));
        };
        let trust = &self.trust;
        let pins = match self.server(addr) {
            Some(access) if !access.pins.is_empty() => &access.pins,
            _ => &trust.pins,
        };
        if !pins.is_empty() {
            if pins.contains(&key) {
                return Ok(true);
            }
            let given: Vec<String> = pins.iter().map(|p| p.to_string()).collect();
            return Err(refuse(format!(
                "the server's key is {key}, not the one expected ({}): someone may be \
                 intercepting the connection, or the server's key was replaced",
                given.join(", ")
            )));
        }
        let Some(known) = &trust.known else {
            return Err(refuse(format!(
                "its key {key} cannot be checked: no --server-fingerprint and no \
                 known-servers file"
            )));
        };
        let file = known.path().display();
        match known.check(addr, &key, pin) {
            Ok(Verdict::Known { proved }) => Ok(proved),
            Ok(Verdict::New) => Ok(false),
            // A file that keeps nothing (`--known-servers /dev/null`, as ssh's
            // `UserKnownHostsFile=/dev/null`): every connection is a first one.
            Ok(Verdict::Added) if std::fs::metadata(known.path()).is_ok_and(|m| !m.is_file()) => {
                eprintln!(
                    "sprat: connection to {addr}: its key {key} is taken unchecked ({file} \
                     keeps no pins)"
                );
                Ok(pin == Pin::Proved)
            }
            Ok(Verdict::Added) => {
                eprintln!(
                    "sprat: first connection to {addr}: its key {key} is now pinned in {file}"
                );
                Ok(pin == Pin::Proved)
            }
            Ok(Verdict::Changed { pinned, line }) => Err(refuse(format!(
                "THE SERVER'S KEY CHANGED: it presented {key}, but line {line} of {file} pins \
                 {pinned}. Someone may be intercepting the connection, or the server's key was \
                 replaced; if you know it was, delete line {line} of {file} (or pass \
                 --server-fingerprint {key})"
            ))),
            Err(e) => Err(TransferError::Local(format!(
                "cannot use the known-servers file {file}: {e}"
            ))),
        }
    }
}
