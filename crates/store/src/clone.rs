//! Whole files cloned from a local source: on a file system that shares blocks between files
//! (XFS, Btrfs, bcachefs, OCFS2: the `FICLONE` ioctl, what `cp --reflink` uses), a local copy
//! of a large file onto the same file system need not read or write its data at all. The
//! clone is made as any written file is: an unnamed file (or a hidden temporary name) that
//! gets its owner, mode and mtime, then its final name, so a name appears only for a complete
//! file. The source must still be the file the scan saw, before and after the clone; if it is
//! not, or the file systems refuse (ext4, two file systems, tmpfs), nothing is written and
//! the file is copied the ordinary way, which reads, checks and writes its bytes.

use crate::attrs::Attrs;
use crate::batch_read::{unchanged, Scanned};
use crate::error::StoreError;
use crate::write::{born_owned, os, TreeWriter, WriterCursor};
use rustix::fs::{unlinkat, AtFlags};
use rustix::io::Errno;
use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;

/// What [`WriterCursor::clone_file`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cloned {
    /// The file is in place under its final name, sharing the source's blocks.
    Done,
    /// The name was taken meanwhile and the writer keeps what exists
    /// ([`crate::TreeWriter::keep_existing`]): the clone was dropped.
    Kept,
    /// Nothing was written: copy the file the ordinary way. The file systems cannot share
    /// blocks here (the writer then stops trying, see [`TreeWriter::may_clone`]), the source
    /// is no longer the file the scan saw, or cloning failed for this file.
    No,
}

/// The source file to clone: its directory, its name there, and what the scan saw of it.
#[derive(Debug, Clone, Copy)]
pub struct CloneSource<'a> {
    pub dir: BorrowedFd<'a>,
    pub name: &'a [u8],
    pub scanned: Scanned,
}

impl TreeWriter {
    /// Whether to try cloning whole files from a local source (see
    /// [`WriterCursor::clone_file`]); once the file systems refuse, the writer stops trying.
    pub fn allow_cloning(&self, on: bool) {
        self.cloning.store(on, Ordering::Relaxed);
    }

    /// Whether a clone is still worth trying.
    pub fn may_clone(&self) -> bool {
        self.cloning.load(Ordering::Relaxed)
    }
}

/// Errors of `FICLONE` that say these two files can never share blocks (not this file alone):
/// no such ioctl here, two file systems, or a file system without shared extents.
fn refused_for_good(e: Errno) -> bool {
    matches!(
        e,
        Errno::OPNOTSUPP | Errno::XDEV | Errno::INVAL | Errno::NOTTY | Errno::NOSYS | Errno::PERM
    )
}

impl WriterCursor<'_> {
    /// Puts at `path` a clone of the local file `source` (all its blocks shared, nothing read
    /// or written), with the owner (when this writer sets owners), mode and mtime of `attrs`.
    /// Returns [`Cloned::No`], having written nothing, whenever the ordinary copy should do
    /// it instead; an error only where that copy would fail too (the destination's directory
    /// cannot be made, or the clone cannot be put in place).
    pub fn clone_file(
        &mut self,
        source: CloneSource<'_>,
        path: &[u8],
        attrs: &Attrs,
    ) -> Result<Cloned, StoreError> {
        let writer = self.writer;
        if !writer.may_clone() {
            return Ok(Cloned::No);
        }
        let Ok(src) = crate::read::open_regular(source.dir, source.name, path, "read") else {
            return Ok(Cloned::No);
        };
        if !unchanged(&src, &source.scanned) {
            return Ok(Cloned::No);
        }
        let target = writer.target(path)?;
        let (dir, name, new_file_owner) = self.parent_of_new_file(target)?;
        let (fd, temp) = writer.create_pending(dir, name, path, 0o600)?;
        let discard = |temp: Option<&[u8]>| {
            if let Some(temp) = temp {
                let _ = unlinkat(dir, os(temp), AtFlags::empty());
            }
        };
        if let Err(e) = rustix::fs::ioctl_ficlone(&fd, &src) {
            if refused_for_good(e) {
                writer.cloning.store(false, Ordering::Relaxed);
            }
            discard(temp.as_deref());
            return Ok(Cloned::No);
        }
        // Cloned from the version the scan saw only if it is still that version now.
        if !unchanged(&src, &source.scanned) {
            discard(temp.as_deref());
            return Ok(Cloned::No);
        }
        let chmod = Some(writer.file_mode(attrs.mode));
        let place = (dir, temp.as_deref(), name);
        let born_owned = born_owned(new_file_owner, attrs);
        let placed = match writer.settle_new_file(&fd, place, path, attrs, born_owned, chmod) {
            Ok(placed) => placed,
            Err(e) => {
                discard(temp.as_deref());
                return Err(e);
            }
        };
        // A partial copy an earlier run left is of no use now, whichever file has the name
        // (one another process writes now stays).
        crate::partial::discard(dir, name, None);
        if placed == crate::write::Placed::KeptExisting {
            return Ok(Cloned::Kept);
        }
        // `--durable`: done once a sync of the destination that started after it is done, as
        // a written batch is.
        if writer.is_durable() {
            writer.sync(path)?;
        }
        Ok(Cloned::Done)
    }
}
