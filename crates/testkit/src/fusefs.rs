//! A FUSE file system mounted on a temporary directory, for tests of what a copy does on a
//! file system without unnamed inodes (`O_TMPFILE`), as many network and user-space file
//! systems are.
//!
//! [`FuseMirror::mount`] runs `bindfs` (a FUSE file system that mirrors a directory), which
//! answers `O_TMPFILE` with `EOPNOTSUPP`; it needs `bindfs` and `/dev/fuse`, so it returns
//! `None` where either is missing and the test skips itself with a message. The mount is
//! undone when the value is dropped (`fusermount -u -z`). Not for anything but tests.

use crate::tmpfs::run_quiet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory mirrored through FUSE, unmounted on drop.
pub struct FuseMirror {
    mount_point: PathBuf,
    backing: PathBuf,
    // Dropped last: holds the backing directory and the mount point.
    _dir: tempfile::TempDir,
}

impl FuseMirror {
    /// Mounts an empty directory through `bindfs`, or `None` if that cannot be done here.
    pub fn mount() -> Option<FuseMirror> {
        let dir = tempfile::Builder::new()
            .prefix("sprat-fuse-")
            .tempdir()
            .ok()?;
        let (backing, mount_point) = (dir.path().join("backing"), dir.path().join("mnt"));
        std::fs::create_dir(&backing).ok()?;
        std::fs::create_dir(&mount_point).ok()?;
        let mounted = run_quiet(Command::new("bindfs").arg(&backing).arg(&mount_point));
        mounted.then_some(FuseMirror {
            mount_point,
            backing,
            _dir: dir,
        })
    }

    /// The mount point: the file system under test.
    pub fn path(&self) -> &Path {
        &self.mount_point
    }

    /// Whether the file system makes unnamed inodes (`O_TMPFILE`); bindfs did not as of
    /// Linux 6.18.
    pub fn has_unnamed_inodes(&self) -> bool {
        use rustix::fs::{openat, Mode, OFlags};
        let flags = OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC;
        openat(rustix::fs::CWD, &self.mount_point, flags, Mode::from(0o600)).is_ok()
    }

    /// The directory it mirrors, to look at what was written without going through FUSE.
    pub fn backing(&self) -> &Path {
        &self.backing
    }
}

impl Drop for FuseMirror {
    fn drop(&mut self) {
        run_quiet(
            Command::new("fusermount")
                .args(["-u", "-z"])
                .arg(&self.mount_point),
        );
    }
}
