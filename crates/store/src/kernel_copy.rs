//! Whole files copied inside the kernel: a local copy of a large file onto a file system that
//! cannot share blocks (ext4, tmpfs) still need not bring its bytes into user space.
//! `copy_file_range(2)` moves them from the source's page cache to the destination's, which
//! costs about half the CPU of reading them into a buffer and writing them out again (what
//! `cp` does since coreutils 9), and several threads doing it at once keep the disk busy.
//!
//! The file is made as any written file is: an unnamed file (or a hidden temporary name) that
//! gets its owner, mode and mtime, then its final name, so a name appears only for a complete
//! file. Only the source's data is copied, extent by extent (`SEEK_DATA`, `SEEK_HOLE`): its
//! holes stay holes. The source must be the file the scan saw before and after the copy, as
//! for a read; if it is not, nothing is left at the destination and the file fails as one
//! that changed while being read.
//!
//! Where the file systems refuse (two file systems, or one without the call), the bytes of
//! that file are read and written by this thread instead (nothing is lost), and the writer
//! stops offering further files ([`TreeWriter::may_copy_in_kernel`]): they go through the
//! ordinary batches, which are faster than this fallback. Any other error of the call sends
//! the rest of the file through a buffer too: `copy_file_range` does not say whether the
//! source or the destination failed, a separate read and write do.
//!
//! No checksum is computed: the bytes never enter sprat's memory, so there is no hand-off
//! between a reader and a writer for a checksum to guard.

use crate::attrs::Attrs;
use crate::batch_read::{allocated_if_unchanged, unchanged, CHANGED, VANISHED};
use crate::clone::CloneSource;
use crate::error::StoreError;
use crate::write::{born_owned, os, Placed, TreeWriter, WriterCursor};
use rustix::fs::{seek, unlinkat, AtFlags, SeekFrom};
use rustix::io::Errno;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;

/// Most bytes one `copy_file_range` call is asked for: large enough that the calls cost
/// nothing beside the copy, small enough that a cancelled copy stops soon.
const CALL_MAX: usize = 64 << 20;

/// Bytes read and written at a time where the kernel refuses to copy.
const FALLBACK_PIECE: usize = 1 << 20;

impl TreeWriter {
    /// Whether to offer whole files from a local source for a copy inside the kernel (see
    /// [`WriterCursor::copy_in_kernel`]); once the file systems refuse, offers stop.
    pub fn allow_kernel_copy(&self, on: bool) {
        self.kernel_copy.store(on, Ordering::Relaxed);
    }

    /// Whether copying whole files inside the kernel is still worth offering.
    pub fn may_copy_in_kernel(&self) -> bool {
        self.kernel_copy.load(Ordering::Relaxed)
    }
}

/// Errors of `copy_file_range` that say these two files can never be copied that way (not
/// this file alone): no such call, two file systems, a file system without it.
fn refused_for_good(e: Errno) -> bool {
    matches!(
        e,
        Errno::XDEV | Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS | Errno::PERM | Errno::BADF
    )
}

impl WriterCursor<'_> {
    /// Puts at `path` a copy of the local file `source`, its bytes copied inside the kernel,
    /// with the owner (when this writer sets owners), mode and mtime of `attrs`; returns
    /// whether all of it was copied inside the kernel (not so where the file systems refused,
    /// see the module's doc), and whether it is in place or the writer kept what was there
    /// ([`crate::TreeWriter::keep_existing`]). On any error nothing is left at `path` that was not there
    /// before; a source that is gone or no longer the file the scan saw fails as it does for a
    /// read ([`VANISHED`], [`CHANGED`]).
    pub fn copy_in_kernel(
        &mut self,
        source: CloneSource<'_>,
        path: &[u8],
        attrs: &Attrs,
    ) -> Result<(bool, Placed), StoreError> {
        let writer = self.writer;
        let src = crate::read::open_regular(source.dir, source.name, path, "read").map_err(
            |e| match e.errno() {
                Some(Errno::NOENT) => StoreError::other("read", path, VANISHED),
                _ => e,
            },
        )?;
        let Some(allocated) = allocated_if_unchanged(&src, &source.scanned) else {
            return Err(StoreError::other("read", path, CHANGED));
        };
        let target = writer.target(path)?;
        let (dir, name, new_file_owner) = self.parent_of_new_file(target)?;
        // A file its file system has no room for fails alone, before anything is created,
        // as a large file does in a batch (not the whole copy, with the disk full). The copy
        // keeps holes: what it needs is what the source has allocated.
        crate::write::check_room(dir, allocated.min(source.scanned.size), path)?;
        let mode = writer.file_mode(attrs.mode);
        let exact = writer.exact_create_mode() && mode & 0o7000 == 0;
        let (fd, temp) =
            writer.create_pending(dir, name, path, if exact { mode } else { 0o600 })?;
        let result = copy_extents(writer, &src, &fd, source.scanned.size, path)
            .and_then(|in_kernel| {
                // Copied from the version the scan saw only if it is still that version now.
                if !unchanged(&src, &source.scanned) {
                    return Err(StoreError::other("read", path, CHANGED));
                }
                writer.whole_file_written(&fd, source.scanned.size);
                let chmod = (!exact).then_some(mode);
                let place = (dir, temp.as_deref(), name);
                let born_owned = born_owned(new_file_owner, attrs);
                let placed = writer.settle_new_file(&fd, place, path, attrs, born_owned, chmod)?;
                // A partial copy an earlier run left is of no use now (one another process
                // writes now stays).
                crate::partial::discard(dir, name, None);
                Ok((in_kernel, placed))
            })
            .and_then(|done| {
                // `--durable`: done once a sync of the destination that started after it is
                // done, as a written batch is.
                if writer.is_durable() {
                    writer.sync(path)?;
                }
                Ok(done)
            });
        if let (Err(_), Some(temp)) = (&result, &temp) {
            let _ = unlinkat(dir, os(temp), AtFlags::empty());
        }
        result
    }
}

/// Copies the data of the first `size` bytes of `src` into the new file `dst` at the same
/// offsets, skipping the source's holes, and gives `dst` that size; returns whether all of it
/// was copied inside the kernel.
fn copy_extents(
    writer: &TreeWriter,
    src: &OwnedFd,
    dst: &OwnedFd,
    size: u64,
    path: &[u8],
) -> Result<bool, StoreError> {
    let mut in_kernel = true;
    let mut at = 0;
    while at < size {
        let data = match seek(src, SeekFrom::Data(at)) {
            Ok(data) => data.min(size),
            // No data from `at` on: the rest is a hole.
            Err(Errno::NXIO) => size,
            // No `SEEK_DATA` here: all of it is data.
            Err(_) => at,
        };
        if data >= size {
            break;
        }
        let end = match seek(src, SeekFrom::Hole(data)) {
            Ok(hole) => hole.clamp(data + 1, size),
            Err(_) => size,
        };
        in_kernel &= copy_range(writer, src, dst, data, end, path)?;
        at = end;
    }
    rustix::fs::ftruncate(dst, size).map_err(|e| StoreError::new("write", path, e))?;
    Ok(in_kernel)
}

/// Copies bytes `start..end` of `src` to the same offsets of `dst`, inside the kernel unless
/// the file systems refuse (then through a buffer, and the writer stops offering files) or
/// the kernel copy fails (then through a buffer too); whether all of it was copied inside the
/// kernel.
fn copy_range(
    writer: &TreeWriter,
    src: &OwnedFd,
    dst: &OwnedFd,
    start: u64,
    end: u64,
    path: &[u8],
) -> Result<bool, StoreError> {
    let (mut from, mut to) = (start, start);
    while from < end && writer.may_copy_in_kernel() {
        let len = (end - from).min(CALL_MAX as u64) as usize;
        match rustix::fs::copy_file_range(src, Some(&mut from), dst, Some(&mut to), len) {
            // The source ended early: it changed, which the check after the copy reports.
            Ok(0) => return Ok(true),
            Ok(_) => {}
            Err(Errno::INTR) => {}
            Err(e) if refused_for_good(e) => writer.allow_kernel_copy(false),
            // Any other error (`EIO`, `ENOSPC`...) may be the source's or the destination's:
            // the rest of this file goes through a buffer, whose reads and writes meet it
            // again and tell which (a bad source file fails alone; a full disk stops the copy).
            Err(_) => break,
        }
    }
    copy_through_buffer(src, dst, from, end, path)?;
    Ok(from >= end)
}

/// Copies bytes `start..end` of `src` to the same offsets of `dst` by reading and writing.
fn copy_through_buffer(
    src: impl AsFd,
    dst: impl AsFd,
    mut at: u64,
    end: u64,
    path: &[u8],
) -> Result<(), StoreError> {
    if at >= end {
        return Ok(());
    }
    let mut buf = vec![0u8; FALLBACK_PIECE.min((end - at) as usize)];
    while at < end {
        let want = buf.len().min((end - at) as usize);
        let n = match rustix::io::pread(&src, &mut buf[..want], at) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(StoreError::new("read", path, e)),
        };
        crate::write::write_all_at(&dst, &buf[..n], at)
            .map_err(|e| StoreError::new("write", path, e))?;
        at += n as u64;
    }
    Ok(())
}
