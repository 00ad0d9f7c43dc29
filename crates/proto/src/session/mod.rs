//! The rules of a session's connections, as state machines: messages and the current time
//! go in, messages to send and events come out. No I/O and no clock: a driver (the engine)
//! owns the sockets and threads, feeds each connection's machine what arrived, sends what it
//! returns and acts on its events.
//!
//! - [`client::ClientStream`]: one connection of a client's session, control or joining, push
//!   or pull: the handshake, `Open` or `Join`, the server's announcement (`Opened`, `Joined`),
//!   batches and their acknowledgements, `End`, `Commit` and `Done`; the batches a push sent
//!   before its announcement (given back if the server refuses the connection); the batches in
//!   flight (what a lost connection leaves to send again).
//! - [`client::CommitGate`]: when a client may send `Commit` (every planned stream announced
//!   or refused).
//! - [`server::ServerStream`]: the same connection as the server sees it, from the client's
//!   hello to `Done`, and connections that carry namespace requests.
//!
//! A message the current state does not allow is a typed [`SessionError`], never a hang, and
//! every wait for the peer has a deadline ([`client::ClientStream::deadline`]). What is not
//! here: batch contents (see [`crate::batch`]), sockets, threads, files.

pub mod client;
pub mod server;
#[cfg(test)]
mod sim;

use crate::auth::AuthError;
use std::time::Duration;
use thiserror::Error;

/// How long a client waits for the server's hello, and then for the announcement of its
/// connection (a server holds a `Join` up to [`JOIN_PATIENCE`] while its session opens).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server waits for a new connection's hello before it tells the client that it
/// speaks a newer protocol (clients of version 2 and older wait for the server to speak).
pub const CLIENT_HELLO_PATIENCE: Duration = Duration::from_secs(5);
/// How long a client may take to authenticate to a server and send its first message.
pub const CLIENT_AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a server holds a `Join` for the `Open` of its session, sent at the same time.
pub const JOIN_PATIENCE: Duration = Duration::from_secs(10);
/// Most bytes of batches a push stream sends before the server announced it: the server may
/// hold a join up to [`JOIN_PATIENCE`], and the client keeps all of it in memory meanwhile.
pub const HELD_LIMIT: u64 = 2 << 20;

/// Which way batches travel in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The client sends batches, the server acknowledges them once written.
    Push,
    /// The server sends batches, the client writes them.
    Pull,
}

/// What a connection is to its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The connection that sent `Open`: it commits, and the session ends with it.
    Control,
    /// A connection that sent `Join`.
    Joining,
}

/// A connection's peer, or its own driver, broke the session's rules.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SessionError {
    /// The peer sent a message its connection's state does not allow.
    #[error("unexpected {got} {state}")]
    Unexpected {
        state: &'static str,
        got: &'static str,
    },
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// An acknowledgement of a batch this connection has not sent, or sent and had acknowledged.
    #[error("acknowledgement of batch {seq}, which is not in flight on this connection")]
    UnknownAck { seq: u64 },
    /// `EndAck` while batches of the connection were still unacknowledged.
    #[error("end of stream acknowledged with {0} batch(es) of it unacknowledged")]
    EndWithUnacked(usize),
    /// The peer did not answer within the deadline of the wait named.
    #[error("timed out {0}")]
    TimedOut(&'static str),
    /// The driver asked for something the connection's state does not allow (a bug of ours,
    /// reported rather than sent).
    #[error("cannot {action} {state}")]
    NotNow {
        action: &'static str,
        state: &'static str,
    },
}
