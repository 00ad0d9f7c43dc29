//! Transfer errors and the exit codes they map to.
//!
//! Exit codes (documented in the README): 0 everything arrived and verified; 1 the transfer
//! finished but some files failed; 2 usage or bad input (missing source, bad option); 3
//! authentication failed; 4 connection error (no server, connection lost, protocol violation,
//! no server started through ssh); 5 fatal I/O error (destination unwritable, disk full,
//! read-only server); 6 the transfer kept failing on connection errors and gave up after
//! `--retry-for`.

use sprat_proto::ErrorCode;
use sprat_store::StoreError;

/// Why a connection was lost when its peer closed it (see [`TransferError::is_peer_closed`]).
pub(crate) const PEER_CLOSED: &str = "the peer closed the connection";

/// Why a transfer or server operation stopped.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("{0}")]
    Usage(String),
    #[error("authentication with {peer} failed: {why}")]
    Auth { peer: String, why: String },
    /// The server's key is not the one expected (pinned, or given on the command line).
    #[error("refusing {peer}: {why}")]
    Identity { peer: String, why: String },
    #[error("cannot connect to {peer}: {source}")]
    Connect {
        peer: String,
        #[source]
        source: std::io::Error,
    },
    #[error("connection to {peer} lost: {why}")]
    ConnectionLost { peer: String, why: String },
    /// Every try was closed before the TLS handshake: a sprat server at its limit of
    /// connections still authenticating does that (it cannot say why before TLS), so it is
    /// waited for with `--retry-for` even on a first run.
    #[error("connection to {peer} lost: {why}")]
    ClosedBeforeHandshake { peer: String, why: String },
    /// No byte moved for `after`, the time the option `option` allows.
    #[error("no progress from {peer} for {} s ({option})", .after.as_secs())]
    Stalled {
        peer: String,
        after: std::time::Duration,
        option: &'static str,
    },
    #[error("gave up after {attempts} attempts in {} s (--retry-for): {last}", .after.as_secs())]
    GaveUp {
        attempts: u32,
        after: std::time::Duration,
        last: Box<TransferError>,
    },
    #[error("protocol error from {peer}: {why}")]
    Protocol { peer: String, why: String },
    #[error("server {peer}: {text}")]
    Remote {
        peer: String,
        code: ErrorCode,
        text: String,
    },
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Local(String),
    /// Starting a server on `host` through ssh failed (`why` names the host).
    #[error("{why}")]
    Ssh { host: String, why: String },
    /// What arrived is not what the sender said it sent (the receiver's check of the totals).
    #[error("{0}")]
    Incomplete(String),
}

impl From<crate::config::OptionError> for TransferError {
    fn from(e: crate::config::OptionError) -> TransferError {
        TransferError::Usage(e.to_string())
    }
}

impl TransferError {
    /// Whether this says the machine answered is not the server (it failed to prove the
    /// token, or showed another key): on any connection of a session, that stops the copy,
    /// never a stream the transfer could do without.
    pub fn is_authentication(&self) -> bool {
        matches!(
            self,
            TransferError::Auth { .. } | TransferError::Identity { .. }
        )
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            TransferError::Usage(_) => 2,
            TransferError::Auth { .. } | TransferError::Identity { .. } => 3,
            TransferError::Connect { .. }
            | TransferError::ConnectionLost { .. }
            | TransferError::ClosedBeforeHandshake { .. }
            | TransferError::Stalled { .. }
            | TransferError::Protocol { .. }
            | TransferError::Ssh { .. } => 4,
            TransferError::GaveUp { .. } => 6,
            TransferError::Remote { code, .. } => match code {
                ErrorCode::AuthFailed | ErrorCode::EncryptionRequired => 3,
                ErrorCode::NotFound | ErrorCode::BadRequest => 2,
                ErrorCode::Protocol
                | ErrorCode::UnknownSession
                | ErrorCode::PeerUnavailable
                | ErrorCode::Busy
                | ErrorCode::VersionMismatch => 4,
                _ => 5,
            },
            TransferError::Store(e) if e.errno() == Some(rustix_noent()) => 2,
            TransferError::Store(_) | TransferError::Local(_) | TransferError::Incomplete(_) => 5,
        }
    }

    /// Whether the server refused this client's protocol version: running again cannot help.
    /// A server of protocol 19 or older says so with the code of any protocol error, and a
    /// text of its own, which is recognised.
    pub fn is_version_mismatch(&self) -> bool {
        match self {
            TransferError::Remote { code, text, .. } => {
                *code == ErrorCode::VersionMismatch
                    || (*code == ErrorCode::Protocol && text.contains(" speaks sprat protocol "))
            }
            _ => false,
        }
    }

    /// Whether the connection was lost because its peer closed it (an orderly end, not a
    /// reset, a timeout or a malformed message).
    pub fn is_peer_closed(&self) -> bool {
        matches!(self, TransferError::ConnectionLost { why, .. } if why == PEER_CLOSED)
    }

    /// Whether a server refused a connection for want of places (`--max-connections`, or
    /// those of one address).
    pub fn is_busy(&self) -> bool {
        matches!(
            self,
            TransferError::Remote {
                code: ErrorCode::Busy,
                ..
            }
        )
    }

    /// The same error, with `what_next` added to a server's refusal's text (what the next
    /// attempt does about it).
    pub fn then(self, what_next: &str) -> TransferError {
        match self {
            TransferError::Remote { peer, code, text } => TransferError::Remote {
                peer,
                code,
                text: format!("{text}; {what_next}"),
            },
            other => other,
        }
    }

    /// The same error in the user's terms: `peer` (an address the user never named, such as
    /// a one-shot server's started through ssh) shown as `shown`, and `path` arguments
    /// (relative to that server's root) as `to`, in a server's refusal's text.
    pub fn renamed(self, peer: &str, shown: &str, paths: &[(String, String)]) -> TransferError {
        let name = |p: String| if p == peer { shown.to_string() } else { p };
        match self {
            TransferError::Identity { peer, why } => TransferError::Identity {
                peer: name(peer),
                why,
            },
            TransferError::Connect { peer, source } => TransferError::Connect {
                peer: name(peer),
                source,
            },
            TransferError::ConnectionLost { peer, why } => TransferError::ConnectionLost {
                peer: name(peer),
                why,
            },
            TransferError::ClosedBeforeHandshake { peer, why } => {
                TransferError::ClosedBeforeHandshake {
                    peer: name(peer),
                    why,
                }
            }
            TransferError::Stalled {
                peer,
                after,
                option,
            } => TransferError::Stalled {
                peer: name(peer),
                after,
                option,
            },
            TransferError::GaveUp {
                attempts,
                after,
                last,
            } => TransferError::GaveUp {
                attempts,
                after,
                last: Box::new(last.renamed(peer, shown, paths)),
            },
            TransferError::Protocol { peer, why } => TransferError::Protocol {
                peer: name(peer),
                why,
            },
            TransferError::Remote {
                peer: p,
                code,
                mut text,
            } if p == peer => {
                for (from, to) in paths {
                    text = text.replace(&format!("'{from}"), &format!("'{to}"));
                }
                TransferError::Remote {
                    peer: shown.to_string(),
                    code,
                    text,
                }
            }
            other => other,
        }
    }

    /// Whether running the transfer again may succeed: the connection was lost, stalled,
    /// refused or corrupted on the way. Refusals by the server (authentication, a read-only
    /// root, a full disk) and local errors are not retried.
    pub fn is_retryable(&self) -> bool {
        match self {
            TransferError::Connect { .. }
            | TransferError::ConnectionLost { .. }
            | TransferError::ClosedBeforeHandshake { .. }
            | TransferError::Stalled { .. }
            | TransferError::Protocol { .. } => true,
            // A protocol error that is an older server's refusal of this client's version is
            // not (see `is_version_mismatch`).
            TransferError::Remote { code, .. } => {
                matches!(
                    code,
                    ErrorCode::Protocol
                        | ErrorCode::UnknownSession
                        | ErrorCode::PeerUnavailable
                        | ErrorCode::Busy
                ) && !self.is_version_mismatch()
            }
            _ => false,
        }
    }
}

fn rustix_noent() -> rustix::io::Errno {
    rustix::io::Errno::NOENT
}

/// The wire error code for a storage error.
pub fn code_for(e: &StoreError) -> ErrorCode {
    use rustix::io::Errno;
    match e.errno() {
        Some(Errno::NOENT) => ErrorCode::NotFound,
        Some(Errno::ACCESS) | Some(Errno::PERM) => ErrorCode::PermissionDenied,
        Some(Errno::NOSPC) | Some(Errno::DQUOT) => ErrorCode::NoSpace,
        Some(Errno::ROFS) => ErrorCode::ReadOnly,
        _ if e.source.kind() == std::io::ErrorKind::PermissionDenied => ErrorCode::PermissionDenied,
        _ => ErrorCode::Io,
    }
}
