//! A small file system of a given type (XFS, Btrfs) in an image file mounted on a temporary
//! directory, for tests of what depends on the file system (cloning shared blocks).
//!
//! [`LoopFs::mount`] makes a sparse image, runs `mkfs.TYPE` on it and `mount -o loop`; it
//! needs root and the file system's tools, so it returns `None` where either is missing and
//! the test skips itself with a message. The mount is undone when the value is dropped
//! (lazily, if it is still busy), and the image removed. Not for anything but tests: it shells
//! out to `mkfs`, `mount` and `umount`.

use crate::tmpfs::run_quiet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted image file system, unmounted and removed on drop.
pub struct LoopFs {
    mount_point: PathBuf,
    // Dropped last: holds the image and the mount point.
    _dir: tempfile::TempDir,
}

impl LoopFs {
    /// Mounts a fresh file system of type `fs_type` (`"xfs"`, `"btrfs"`) in an image of
    /// `size_mib` MiB (sparse: only what is written takes space), or `None` if it cannot be
    /// made or mounted here.
    pub fn mount(fs_type: &str, size_mib: u64) -> Option<LoopFs> {
        let dir = tempfile::Builder::new()
            .prefix("sprat-loopfs-")
            .tempdir()
            .ok()?;
        let image = dir.path().join("image");
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(size_mib << 20))
            .ok()?;
        let mount_point = dir.path().join("mnt");
        std::fs::create_dir(&mount_point).ok()?;
        let made = run_quiet(
            Command::new(format!("mkfs.{fs_type}"))
                .args(["-q", "-f"])
                .arg(&image),
        );
        let mounted = made
            && run_quiet(
                Command::new("mount")
                    .args(["-t", fs_type, "-o", "loop"])
                    .arg(&image)
                    .arg(&mount_point),
            );
        mounted.then_some(LoopFs {
            mount_point,
            _dir: dir,
        })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.mount_point
    }

    /// Bytes the file system has in use.
    pub fn used_bytes(&self) -> u64 {
        rustix::fs::statvfs(&self.mount_point)
            .map(|s| (s.f_blocks - s.f_bfree) * s.f_frsize)
            .unwrap_or(0)
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if !run_quiet(Command::new("umount").arg(&self.mount_point)) {
            run_quiet(Command::new("umount").arg("-l").arg(&self.mount_point));
        }
    }
}
