//! sprat's storage layer: confined directory roots, a parallel scanner, file reads into batch
//! buffers and a tree writer that makes files appear complete or not at all.
//!
//! This crate knows nothing of the wire protocol or of pipelines: it takes relative paths,
//! attributes and byte slices, and returns data and errors that name the path and operation.
//! The engine decides what to read and write and in which order.
//!
//! `unsafe` is denied everywhere but in `sys` (FIEMAP and io_uring) and `owner` (user and
//! group names from libc), where each block says why it is sound.
#![deny(unsafe_code)]

pub mod ancestry;
pub mod attrs;
pub mod batch_read;
pub mod clone;
pub mod compare;
pub mod direct;
pub mod error;
pub mod filter;
pub mod kernel_copy;
pub mod limit;
pub mod namespace;
pub mod owner;
pub mod partial;
pub(crate) mod perm;
pub mod read;
pub mod regular;
pub mod relpath;
pub mod root;
pub mod scan;
pub mod sparse;
pub mod special;
pub mod sync;
mod sys;
pub mod write;
pub mod writeback;
pub mod xattr;

pub use attrs::{checksum, Attrs};
pub use error::StoreError;
pub use filter::{Filter, FilterError, RuleKind, Selection};
pub use relpath::{display_bytes, display_path, join, split_parent};
pub use root::{Root, Source};
pub use scan::{
    list_directory, scan, scan_selected, stat_path, stat_root_file, EntryType, ScanEntry,
    ScanOptions,
};
pub use special::Special;
pub use write::{TreeWriter, WriterCursor};
