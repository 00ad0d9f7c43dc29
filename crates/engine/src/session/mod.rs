//! The engine's side of sessions: driving the protocol's per-connection state machines
//! (`sprat_proto::session`) over real sockets. [`client`] opens a client's session, joins
//! and adapts its streams and keeps the session-wide rules (the commit gate); [`registry`] is
//! the server's table of open sessions, where early joins wait for their `Open`; [`stall`]
//! fails a session whose progress stops; [`claims`] keeps two push sessions from writing one
//! tree at once; [`admission`] counts the server's places, while authenticating and after;
//! [`opening`] spreads a transfer's first batches over its streams on a long path.

pub(crate) mod admission;
pub(crate) mod claims;
pub(crate) mod client;
pub(crate) mod opening;
pub(crate) mod registry;
pub(crate) mod stall;
