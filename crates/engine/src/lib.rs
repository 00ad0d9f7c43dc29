//! sprat's engine: plans a transfer and wires the stages together.
//!
//! `scan -> plan -> read -> [wire] -> write -> commit`: the scanner and reader come from
//! `sprat-store`, frames and handshakes from `sprat-proto`; this crate owns the threads, the
//! bounded queues between stages, the sockets, the sessions of the server and the report.
//! It is the only crate that knows both the protocol and the storage layer.
#![forbid(unsafe_code)]

pub mod bench;
pub mod client;
pub mod config;
pub mod dataset;
pub mod error;
pub mod model;
pub mod net;
pub mod plan;
mod registry;
pub mod remote;
pub mod report;
mod requests;
pub mod server;
pub mod sink;
pub mod source;
pub mod streams;
pub mod tune;
mod unannounced;

pub use client::{copy, Endpoint};
pub use config::TransferOptions;
pub use error::TransferError;
pub use report::Report;
pub use server::{Server, ServerConfig};
