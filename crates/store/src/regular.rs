//! Opening a name only if it is a regular file: a device's driver never runs its `open` for
//! it (a watchdog arming, a tape rewinding) and nothing waits on a FIFO, even where a peer
//! could have put one under that name.
//!
//! The name is first opened with `O_PATH` (which opens nothing: no driver, no FIFO), its type
//! looked at on that descriptor, and only a regular file is opened again, from that
//! descriptor (`/proc/self/fd/N`): the inode looked at is the one opened, whatever is put
//! under the name in between.

use rustix::fs::{fstat, openat, FileType, Mode, OFlags, CWD};
use rustix::io::Errno;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The name of the descriptor `fd` in `/proc/self/fd`, which the kernel resolves to that very
/// inode (never to what has its name by then): the way to act on an `O_PATH` descriptor where
/// an `f*` call refuses it, or to open again what it names.
pub(crate) fn proc_path(fd: impl AsFd) -> String {
    format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())
}

/// Opens `name` in `dir` with `flags` (never creating it, never following a symlink) if it
/// is a regular file; `Errno::NXIO` if it is anything else.
pub fn open_regular_at(dir: impl AsFd, name: &[u8], flags: OFlags) -> Result<OwnedFd, Errno> {
    open_checked(dir, name, flags, false)
}

/// [`open_regular_at`] of a file this process's user made for itself (a partial copy and its
/// journal): also `Errno::PERM` unless it is owned by the effective user and has no other hard
/// link. Whoever may write the directory could put another user's file there under that name
/// (a hard link of a file outside the tree, or of another user's file in it), which writing,
/// `chown` and `chmod` would then change.
pub fn open_own_regular_at(dir: impl AsFd, name: &[u8], flags: OFlags) -> Result<OwnedFd, Errno> {
    open_checked(dir, name, flags, true)
}

fn open_checked(dir: impl AsFd, name: &[u8], flags: OFlags, own: bool) -> Result<OwnedFd, Errno> {
    let name: &std::ffi::OsStr = std::os::unix::ffi::OsStrExt::from_bytes(name);
    let path = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let at = openat(dir, name, path, Mode::empty())?;
    let st = fstat(&at)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(Errno::NXIO);
    }
    if own && (st.st_nlink != 1 || st.st_uid != rustix::process::geteuid().as_raw()) {
        return Err(Errno::PERM);
    }
    let again = flags & !(OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::TRUNC);
    // Asked only to look (`O_PATH`): the descriptor looked at is the one wanted.
    if again == OFlags::PATH {
        return Ok(at);
    }
    openat(
        CWD,
        proc_path(&at).as_str(),
        again | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"data").unwrap();
        rustix::fs::mknodat(
            CWD,
            dir.path().join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("link")).unwrap();
        let d = rustix::fs::open(
            dir.path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        let fd = open_regular_at(&d, b"f", OFlags::RDWR).unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(rustix::io::read(&fd, &mut buf).unwrap(), 4);
        assert_eq!(&buf, b"data");
        // A FIFO without a writer would block an open for reading: refused, not waited on.
        assert_eq!(
            open_regular_at(&d, b"fifo", OFlags::RDONLY).err(),
            Some(Errno::NXIO)
        );
        assert_eq!(
            open_regular_at(&d, b"link", OFlags::RDONLY).err(),
            Some(Errno::NXIO)
        );
        assert_eq!(
            open_regular_at(&d, b"none", OFlags::RDONLY).err(),
            Some(Errno::NOENT)
        );
    }
}
