//! What the store keeps of a file besides its bytes: permission bits, modification time and
//! owner, and the checksum computed as files are read and checked as they are written.

/// Permission bits, modification time and owner of a file, directory or link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attrs {
    pub mode: u32,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
    /// Numeric owner and group (set on what is written only by a writer that applies
    /// owners, see [`crate::TreeWriter::owners`]).
    pub uid: u32,
    pub gid: u32,
}

/// The checksum sprat computes as files are read and checks as they are written (xxh3-128).
pub fn checksum(data: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(data)
}
