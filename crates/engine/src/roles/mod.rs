//! What sprat does, each a composition of the pipeline's stages and a session's connections:
//! a local copy ([`local`]), a push ([`push`]: source stages into send stages; [`spread`]: one
//! push over several servers that share a file system), a pull
//! ([`pull`]: receive stages into the writer pool), namespace requests and third-party copies
//! from the client side ([`remote`]), and the server ([`server`]: receive or send stages per
//! connection, answers to requests in [`requests`], and a push of its own for a third-party
//! copy; what it exports and to which tokens in [`exports`]; [`bound`] the most memory it
//! holds). [`endpoint`] names the two sides of a copy and picks the role; [`ssh`] starts
//! one-shot servers through ssh for `[USER@]HOST:PATH` arguments and turns those into
//! endpoints.

pub(crate) mod bound;
pub(crate) mod delete;
pub(crate) mod destination;
pub(crate) mod dry_run;
pub(crate) mod endpoint;
pub(crate) mod exports;
pub(crate) mod local;
pub(crate) mod overlap;
pub(crate) mod pull;
pub(crate) mod push;
pub mod remote;
pub(crate) mod requests;
pub mod retry;
pub(crate) mod server;
pub(crate) mod spread;
pub mod ssh;
