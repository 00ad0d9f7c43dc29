//! sprat's engine: plans a transfer and wires the stages together.
//!
//! `scan -> plan -> read -> [wire] -> write -> commit`: the scanner and reader come from
//! `sprat-store`, frames and handshakes from `sprat-proto`; this crate owns the threads, the
//! bounded queues between stages, the sockets, the sessions of the server and the report.
//! It is the only crate that knows both the protocol and the storage layer.
#![forbid(unsafe_code)]

/// `eprintln!` that never panics: a line for a stderr that is gone (a server started with its
/// stderr closed, a client's piped into `head`) is dropped. Defined before the modules, so
/// that theirs is this one too.
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub(crate) mod budget;
pub mod config;
pub mod error;
pub mod host_memory;
pub mod measurement;
pub(crate) mod net;
pub(crate) mod pipeline;
pub mod report;
pub(crate) mod roles;
pub(crate) mod session;
pub(crate) mod spare;
pub mod sync;
pub mod text;
pub mod tune;

pub use config::TransferOptions;
pub use error::TransferError;
pub use report::Report;
pub use roles::bound::MemoryBound;
pub use roles::dry_run::{dry_run, Action, DryRun};
pub use roles::endpoint::{copy, copy_retrying, into_directory, Destination, DialAhead, Endpoint};
pub use roles::exports::{check_export_name, ExportSpec, ExportsConfig};
pub use roles::push::{push_input, PushInput};
pub use roles::remote;
pub use roles::retry::Notice as RetryNotice;
pub use roles::server::{
    default_client_memory, default_connections_per_address, Server, ServerConfig, StopHandle,
    DEFAULT_CLIENT_MEMORY, DEFAULT_IDLE_TIMEOUT, MIN_CLIENT_MEMORY,
};
pub use roles::ssh;

// What the cli and the measurement tools need from the layers below, so that they import the
// engine only.
pub use net::known_servers::KnownServers;
pub use net::{Credentials, Fingerprint, ServerAccess, ServerIdentity, ServerTls, Trust};
pub use sprat_proto::auth::TokenKey;
pub use sprat_proto::namespace::{NsEntry, NsKind, NsOwner, Request, SumAlgo};
pub use sprat_proto::ErrorCode;
pub use sprat_proto::SpecialKind;
pub use sprat_store::compare;
pub use sprat_store::compare::compare_trees;
pub use sprat_store::partial::final_name_of_hidden;
pub use sprat_store::relpath;
pub use sprat_store::root::clear_umask;
pub use sprat_store::scan;
