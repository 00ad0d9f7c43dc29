//! What a client brings to a connection: its token (proof of the right to use the server)
//! and how it recognises the server (encryption on or off, and the keys it accepts: pinned on
//! the command line, or remembered from a first connection in the known-servers file).

use super::identity::Fingerprint;
use super::known_servers::{KnownServers, Verdict};
use crate::error::TransferError;
use sprat_proto::auth::TokenKey;
use std::sync::Arc;

/// A client's token and trust, passed to every connection it opens.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub token: Option<TokenKey>,
    pub trust: Trust,
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
        Credentials { token, trust }
    }

    pub fn token(&self) -> Option<&TokenKey> {
        self.token.as_ref()
    }

    /// The same trust with another token (a one-time ticket, say).
    pub fn with_token(&self, token: Option<TokenKey>) -> Credentials {
        Credentials {
            token,
            trust: self.trust.clone(),
        }
    }

    /// Checks the key the server at `addr` presented in its TLS handshake, before anything
    /// is sent to it.
    pub(crate) fn check_server(
        &self,
        addr: &str,
        key: Option<Fingerprint>,
    ) -> Result<(), TransferError> {
        let refuse = |why: String| TransferError::Identity {
            peer: addr.to_string(),
            why,
        };
        let Some(key) = key else {
            return Err(refuse("the server presented no key".into()));
        };
        let trust = &self.trust;
        if !trust.pins.is_empty() {
            if trust.pins.contains(&key) {
                return Ok(());
            }
            let given: Vec<String> = trust.pins.iter().map(|p| p.to_string()).collect();
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
        match known.check(addr, &key) {
            Ok(Verdict::Known) => Ok(()),
            Ok(Verdict::Added) => {
                eprintln!(
                    "sprat: first connection to {addr}: its key {key} is now pinned in {file}"
                );
                Ok(())
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
