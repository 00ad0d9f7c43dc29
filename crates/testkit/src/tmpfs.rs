//! A small tmpfs mounted on a temporary directory, for disk-full and read-only tests.
//!
//! [`Tmpfs::mount`] runs `mount -t tmpfs -o size=SIZE tmpfs DIR`; it needs root (or
//! CAP_SYS_ADMIN), so it returns `None` where mounting is not allowed and the test skips itself
//! with a message. The mount is undone when the value is dropped (lazily, if it is still busy).
//! [`Tmpfs::remount_read_only`] turns it into a read-only file system. Not for anything but
//! tests: it shells out to `mount`/`umount`.

use std::path::Path;
use std::process::{Command, Stdio};

/// A mounted tmpfs, unmounted on drop.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

/// Runs `cmd` with no input or output: whether it ran and succeeded.
pub(crate) fn run_quiet(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it, e.g. `"4m"`), or `None` if this
    /// process may not mount.
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::Builder::new()
            .prefix("sprat-tmpfs-")
            .tempdir()
            .ok()?;
        let ok = run_quiet(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o"])
                .arg(format!("size={size},mode=0755"))
                .arg("tmpfs")
                .arg(dir.path()),
        );
        ok.then_some(Tmpfs { dir })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Remounts read-only; returns false if that failed.
    pub fn remount_read_only(&self) -> bool {
        run_quiet(
            Command::new("mount")
                .args(["-o", "remount,ro"])
                .arg(self.dir.path()),
        )
    }

    /// Changes the size to `size` (as [`Tmpfs::mount`] takes it); returns false if that failed.
    pub fn resize(&self, size: &str) -> bool {
        run_quiet(
            Command::new("mount")
                .arg("-o")
                .arg(format!("remount,size={size}"))
                .arg(self.dir.path()),
        )
    }

    /// Bytes still free on the file system.
    pub fn available_bytes(&self) -> u64 {
        rustix::fs::statvfs(self.dir.path())
            .map(|s| s.f_bavail * s.f_frsize)
            .unwrap_or(0)
    }
}

/// A tmpfs mounted on a directory the test chose (inside a tree, for `-x`), unmounted on drop.
pub struct MountedOn {
    path: std::path::PathBuf,
}

impl MountedOn {
    /// Mounts a tmpfs of `size` on the existing directory `dir`, or `None` if this process may
    /// not mount.
    pub fn tmpfs(dir: &Path, size: &str) -> Option<MountedOn> {
        let ok = run_quiet(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o"])
                .arg(format!("size={size},mode=0755"))
                .arg("tmpfs")
                .arg(dir),
        );
        ok.then(|| MountedOn {
            path: dir.to_path_buf(),
        })
    }
}

impl Drop for MountedOn {
    fn drop(&mut self) {
        if !run_quiet(Command::new("umount").arg(&self.path)) {
            run_quiet(Command::new("umount").arg("-l").arg(&self.path));
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if !run_quiet(Command::new("umount").arg(self.dir.path())) {
            run_quiet(Command::new("umount").arg("-l").arg(self.dir.path()));
        }
    }
}
