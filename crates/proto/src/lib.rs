//! sprat's wire protocol: frame layout, messages, batch encoding and the authentication handshake.
//!
//! This crate does no I/O and reads no clock. Bytes go in, typed messages and protocol errors come
//! out; a driver elsewhere (the engine) owns the sockets. Every length a peer sends is checked
//! against a limit before anything is allocated, and trailing bytes are an error.
//! The normative description of the format is `docs/protocol.md`.
#![forbid(unsafe_code)]

pub mod auth;
pub mod batch;
pub mod codec;
pub mod frame;
pub mod message;
pub mod namespace;
pub mod path;
pub mod selection;
pub mod session;

pub use batch::{
    xattr_scope, Batch, BatchView, ChunkOf, Entry, EntryKind, FileMeta, KeepRule, SpecialKind,
    Totals, XattrList,
};
pub use codec::DecodeError;
pub use frame::{FrameHeader, FRAME_HEADER_LEN};
pub use message::{
    DestCheck, ErrorCode, KeptEntries, Message, MetaFlags, NotKept, Operation, RemoteStats,
    SourceId, TransferProgress, MAX_SUPERSEDED,
};
pub use selection::Selection;

/// Version of the protocol spoken by this build; peers with another version are refused.
pub const PROTOCOL_VERSION: u16 = 23;
