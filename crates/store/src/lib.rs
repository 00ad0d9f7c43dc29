//! sprat's storage layer: confined directory roots, a parallel scanner, file reads into batch
//! buffers and a tree writer that makes files appear complete or not at all.
//!
//! This crate knows nothing of the wire protocol or of pipelines: it takes relative paths,
//! attributes and byte slices, and returns data and errors that name the path and operation.
//! The engine decides what to read and write and in which order.
//!
//! `unsafe` is denied everywhere but in `sys` (FIEMAP and io_uring), where each block says why
//! it is sound.
#![deny(unsafe_code)]

pub mod batch_read;
pub mod compare;
pub mod error;
pub mod limit;
pub mod namespace;
pub mod read;
pub mod root;
pub mod scan;
mod sys;
pub mod write;

pub use error::StoreError;
pub use root::{Root, Source};
pub use scan::{
    list_directory, scan, stat_path, stat_root_file, EntryType, ScanEntry, ScanOptions,
};
pub use write::{TreeWriter, WriterCursor};

/// Permission bits and modification time of a file, directory or link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attrs {
    pub mode: u32,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
}

/// The checksum sprat computes as files are read and checks as they are written (xxh3-128).
pub fn checksum(data: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(data)
}

/// Renders a relative path for messages (lossy for non-UTF-8 names; `.` for the root).
pub fn display_path(rel: &[u8]) -> String {
    if rel.is_empty() {
        ".".to_string()
    } else {
        String::from_utf8_lossy(rel).into_owned()
    }
}

/// Splits a relative path into its parent directory and final name.
pub fn split_parent(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&[], rel),
    }
}

/// Joins a relative directory path and a name (the directory may be empty).
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(dir.len() + 1 + name.len());
    out.extend_from_slice(dir);
    if !dir.is_empty() && !name.is_empty() {
        out.push(b'/');
    }
    out.extend_from_slice(name);
    out
}
