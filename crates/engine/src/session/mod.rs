//! The engine's side of sessions: driving the protocol's per-connection state machines
//! (`sprat_proto::session`) over real sockets. [`client`] opens a client's session, joins
//! and adapts its streams and keeps the session-wide rules (the commit gate); [`registry`] is
//! the server's table of open sessions, where early joins wait for their `Open`; [`stall`]
//! fails a session whose progress stops.

pub(crate) mod client;
pub(crate) mod registry;
pub(crate) mod stall;
