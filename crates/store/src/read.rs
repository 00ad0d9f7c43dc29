//! Reading file data into a caller's batch buffer, with the checksum computed as it is read.
//!
//! Files are opened relative to their directory's descriptor (the caller keeps it open for a
//! run of files in the same directory) and never through a symlink. Empty files are not opened.
//! A file is opened without blocking (`O_NONBLOCK`: opening a FIFO would wait for a writer)
//! and examined once open: whatever is not a regular file by then (a FIFO or a device
//! swapped in since the scan) is refused as [`NOT_REGULAR`], never read.

use crate::error::StoreError;
use crate::root::Root;
use rustix::buffer::spare_capacity;
use rustix::fs::{openat, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// Keeps the descriptor of the directory last read from, so a run of files in one directory
/// costs one directory open.
pub struct DirCursor<'r> {
    root: &'r Root,
    dir: Vec<u8>,
    fd: Option<OwnedFd>,
}

impl<'r> DirCursor<'r> {
    pub fn new(root: &'r Root) -> DirCursor<'r> {
        DirCursor {
            root,
            dir: Vec::new(),
            fd: None,
        }
    }

    fn dir_fd(&mut self, dir: &[u8], path: &[u8]) -> Result<&OwnedFd, StoreError> {
        if self.fd.is_none() || self.dir != dir {
            self.fd = None;
            let fd = self.root.open_dir(dir).map_err(|e| {
                StoreError::new("open directory", path, crate::root::escape_error(e))
            })?;
            self.dir.clear();
            self.dir.extend_from_slice(dir);
            self.fd = Some(fd);
        }
        self.fd
            .as_ref()
            .ok_or_else(|| StoreError::other("open directory", path, "no descriptor"))
    }

    /// Opens the regular file at `path` for reading (see the module's doc): never through a
    /// symlink, never blocking, and refused unless it is a regular file once open.
    pub(crate) fn open_file(
        &mut self,
        path: &[u8],
        name_override: Option<&[u8]>,
    ) -> Result<OwnedFd, StoreError> {
        let (dir, name) = crate::relpath::split_parent(path);
        let name = name_override.unwrap_or(name);
        let dir_fd = self.dir_fd(dir, path)?;
        open_regular(dir_fd, name, path, "open")
    }

    /// Appends the whole file at `path` (expected to be `size` bytes) to `buf`; returns the
    /// number of bytes read and their checksum. A file that shrank since it was scanned is
    /// copied as it is now; growth beyond `size` is cut at `size`.
    /// `name_override` names the file when the source root is the file itself.
    pub fn read_file(
        &mut self,
        path: &[u8],
        name_override: Option<&[u8]>,
        size: u64,
        buf: &mut Vec<u8>,
    ) -> Result<(u64, u128), StoreError> {
        if size == 0 {
            return Ok((0, crate::attrs::checksum(&[])));
        }
        let fd = self.open_file(path, name_override)?;
        let start = buf.len();
        fill(buf, size, |b, _| rustix::io::read(&fd, spare_capacity(b))).map_err(|e| {
            buf.truncate(start);
            StoreError::new("read", path, e)
        })?;
        let data = &buf[start..];
        Ok((data.len() as u64, crate::attrs::checksum(data)))
    }

    /// Appends `len` bytes at `offset` of the file at `path` to `buf`; returns their checksum.
    pub fn read_chunk(
        &mut self,
        path: &[u8],
        name_override: Option<&[u8]>,
        offset: u64,
        len: u64,
        buf: &mut Vec<u8>,
    ) -> Result<u128, StoreError> {
        let fd = self.open_file(path, name_override)?;
        let start = buf.len();
        let got = fill(buf, len, |b, got| {
            rustix::io::pread(&fd, spare_capacity(b), offset + got)
        })
        .map_err(|e| {
            buf.truncate(start);
            StoreError::new("read", path, e)
        })?;
        if got < len {
            buf.truncate(start);
            return Err(StoreError::other(
                "read",
                path,
                "file shrank while it was being copied",
            ));
        }
        Ok(crate::attrs::checksum(&buf[start..]))
    }

    /// The XXH3-128 of the regular file at `path` as it is now, read to its end through
    /// `buf` (a scratch buffer, grown to [`DIGEST_READ_SIZE`] once and reused): what
    /// `--checksum` compares. Never through a symlink; a file that became a FIFO or device
    /// since it was scanned is refused, not waited on.
    pub fn digest_file(&mut self, path: &[u8], buf: &mut Vec<u8>) -> Result<u128, StoreError> {
        let (dir, name) = crate::relpath::split_parent(path);
        let dir_fd = self.dir_fd(dir, path)?;
        let fd = open_regular(dir_fd, name, path, "checksum")?;
        if buf.len() < DIGEST_READ_SIZE {
            buf.resize(DIGEST_READ_SIZE, 0);
        }
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        loop {
            match rustix::io::read(&fd, &mut buf[..]) {
                Ok(0) => return Ok(hasher.digest128()),
                Ok(n) => hasher.update(&buf[..n]),
                Err(Errno::INTR) => {}
                Err(e) => return Err(StoreError::new("read", path, e)),
            }
        }
    }
}

/// The text of the error of a path that is not a regular file when it is to be read.
pub const NOT_REGULAR: &str = "not a regular file";

/// Opens `name` in `dir` for reading, never through a symlink and without waiting (a FIFO
/// would block `open` until a writer came, a device might), then refuses it unless it is a
/// regular file: nothing else is ever read. `path` names it in errors, `op` the operation.
/// `O_NONBLOCK` changes nothing for reading a regular file.
pub fn open_regular(
    dir: impl AsFd,
    name: &[u8],
    path: &[u8],
    op: &'static str,
) -> Result<OwnedFd, StoreError> {
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let fd = openat(dir, OsStr::from_bytes(name), flags, Mode::empty())
        .map_err(|e| StoreError::new(op, path, e))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| StoreError::new(op, path, e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(StoreError::other(op, path, NOT_REGULAR));
    }
    Ok(fd)
}

/// Bytes read at a time by [`DirCursor::digest_file`].
pub const DIGEST_READ_SIZE: usize = 256 << 10;

/// Appends up to `size` bytes to `buf` by calling `read(buf, bytes_so_far)` until `size` bytes
/// arrived or it returns 0; returns the number of bytes appended.
fn fill(
    buf: &mut Vec<u8>,
    size: u64,
    mut read: impl FnMut(&mut Vec<u8>, u64) -> Result<usize, Errno>,
) -> Result<u64, Errno> {
    let start = buf.len();
    let target = start + size as usize;
    while buf.len() < target {
        let want = target - buf.len();
        if buf.capacity() - buf.len() < want {
            buf.reserve(want);
        }
        match read(buf, (buf.len() - start) as u64) {
            Ok(0) => break,
            Ok(_) => {}
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(target);
    Ok((buf.len() - start) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_file_hashes_the_whole_content_and_refuses_links_and_fifos() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big: Vec<u8> = (0..DIGEST_READ_SIZE * 2 + 17).map(|i| i as u8).collect();
        std::fs::create_dir(dir.path().join("d")).expect("mkdir");
        std::fs::write(dir.path().join("d/big"), &big).expect("write");
        std::fs::write(dir.path().join("d/empty"), b"").expect("write");
        std::os::unix::fs::symlink("big", dir.path().join("d/link")).expect("symlink");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            dir.path().join("d/fifo").as_path(),
            Mode::from_raw_mode(0o600),
        )
        .expect("mkfifo");
        let root = Root::open(dir.path()).expect("root");
        let mut cursor = DirCursor::new(&root);
        let mut buf = Vec::new();
        let digest = |c: &mut DirCursor<'_>, p: &[u8], b: &mut Vec<u8>| c.digest_file(p, b);
        assert_eq!(
            digest(&mut cursor, b"d/big", &mut buf).expect("big"),
            crate::attrs::checksum(&big)
        );
        assert_eq!(
            digest(&mut cursor, b"d/empty", &mut buf).expect("empty"),
            crate::attrs::checksum(b"")
        );
        assert!(digest(&mut cursor, b"d/link", &mut buf).is_err());
        assert!(digest(&mut cursor, b"d/fifo", &mut buf).is_err());
        assert!(digest(&mut cursor, b"d/absent", &mut buf).is_err());
    }
}
