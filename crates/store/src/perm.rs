//! Owner permission bits added to a directory for the time a writer needs them.
//!
//! A tree copied with its modes has directories that its own writer, when it is not root,
//! cannot change on the next run: a `0555` directory refuses new, replaced and removed
//! entries, a `0000` one cannot even be opened. As rsync does, the writer then adds the owner
//! bits it lacks (`u+wx` to change entries, `u+rx` to list, `u+x` to pass through) to a
//! directory *it owns*, and the directory gets its final mode back afterwards (the tree
//! writer's last pass, or the removal that loosened it).
//!
//! Only where an operation failed with `EACCES` (never on the common path, which gets no
//! extra system call), only for directories owned by the effective user (root, which may
//! write anywhere, never gets here), and never through a symlink: a directory is named by a
//! descriptor, opened without following a symlink. A directory that cannot be opened for
//! reading (mode `0000`) is opened with `O_PATH`, which needs no permission on it; `fchmod`
//! refuses such a descriptor (`EBADF`), so its mode is set with `chmod` of
//! `/proc/self/fd/N`, which resolves to that very inode (never to whatever has its name by
//! then): the `O_PATH` route needs `/proc`, and without it the operation fails as before.

use rustix::fs::{fchmod, fstat, openat, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// `u+x`: to look names up in a directory (to pass through it).
pub const SEARCH: u32 = 0o100;
/// `u+wx`: to create, replace or remove a directory's entries.
pub const CHANGE: u32 = 0o300;
/// `u+rx`: to open a directory and list it.
pub const LIST: u32 = 0o500;
/// `u+rwx`: all of them (a directory whose contents are being removed).
pub const ALL: u32 = 0o700;

/// Adds `bits` to the permissions of the directory `fd` (an ordinary descriptor or an
/// `O_PATH` one) when the effective user owns it and it lacks some of them. Returns the
/// permission bits (`0o7777`) it had when they were changed; `None` when it has them all
/// already or belongs to another user (it is left alone).
pub fn add_bits(fd: BorrowedFd<'_>, bits: u32) -> Result<Option<u32>, Errno> {
    let st = fstat(fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(Errno::NOTDIR);
    }
    if st.st_uid != rustix::process::geteuid().as_raw() {
        return Ok(None);
    }
    let had = st.st_mode & 0o7777;
    if had & bits == bits {
        return Ok(None);
    }
    set_mode(fd, had | bits)?;
    Ok(Some(had))
}

/// Gives the directory `fd` the permission bits `mode` again (after [`add_bits`]), if it is
/// still a directory of the effective user's and has other bits now.
pub fn restore(fd: BorrowedFd<'_>, mode: u32) -> Result<(), Errno> {
    let st = fstat(fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory
        || st.st_uid != rustix::process::geteuid().as_raw()
        || st.st_mode & 0o7777 == mode & 0o7777
    {
        return Ok(());
    }
    set_mode(fd, mode)
}

/// Sets the permission bits of the file or directory `fd`: `fchmod`, or for an `O_PATH` descriptor
/// (which `fchmod` refuses with `EBADF`) `chmod` of its `/proc/self/fd` entry, the same inode.
pub fn set_mode(fd: BorrowedFd<'_>, mode: u32) -> Result<(), Errno> {
    match fchmod(fd, Mode::from_raw_mode(mode)) {
        Err(Errno::BADF) => {
            let proc_path = crate::regular::proc_path(fd);
            rustix::fs::chmod(proc_path.as_str(), Mode::from_raw_mode(mode))
        }
        other => other,
    }
}

/// Opens the directory `name` in `dir` as an `O_PATH` descriptor, never following a symlink
/// (`ENOTDIR` for anything but a directory). It needs search permission on `dir` only, none
/// on the directory itself.
pub fn open_path(dir: impl AsFd, name: &[u8]) -> Result<OwnedFd, Errno> {
    openat(
        dir,
        std::ffi::OsStr::from_bytes(name),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Opens the regular file `name` in `dir` for reading after adding `u+r` to its mode, when the
/// effective user owns it and its mode refused the open (`0000`, `0200`): a copy of a source
/// file of that mode, whose attributes the writer must set again (its caller gives it its
/// mode). Named by an `O_PATH` descriptor, never through a symlink; `EACCES` otherwise.
pub fn open_own_closed_file(dir: impl AsFd, name: &[u8]) -> Result<OwnedFd, Errno> {
    let name = std::ffi::OsStr::from_bytes(name);
    let path = openat(
        &dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = fstat(&path)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
        || st.st_uid != rustix::process::geteuid().as_raw()
    {
        return Err(Errno::ACCESS);
    }
    set_mode(path.as_fd(), (st.st_mode & 0o7777) | 0o400)?;
    openat(
        &dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
}

/// Runs `op`, an operation on entries of the directory `dir`; when it fails with `EACCES` and
/// [`add_bits`] could add `bits` to `dir`, runs it once more. Returns its result and the
/// permission bits `dir` had if they were changed (to be restored by the caller if the
/// directory stays).
pub fn retry_in<T>(
    dir: BorrowedFd<'_>,
    bits: u32,
    mut op: impl FnMut() -> Result<T, Errno>,
) -> (Result<T, Errno>, Option<u32>) {
    match op() {
        Err(Errno::ACCESS) => match add_bits(dir, bits) {
            Ok(Some(had)) => (op(), Some(had)),
            _ => (Err(Errno::ACCESS), None),
        },
        other => (other, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode_of(p: &std::path::Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn bits_are_added_through_an_o_path_descriptor_and_taken_back() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o000)).unwrap();
        let top = rustix::fs::open(
            dir.path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        let fd = open_path(&top, b"d").unwrap();
        assert_eq!(add_bits(fd.as_fd(), LIST).unwrap(), Some(0o000));
        assert_eq!(mode_of(&d), 0o500);
        // Has them now: nothing more to do.
        assert_eq!(add_bits(fd.as_fd(), SEARCH).unwrap(), None);
        restore(fd.as_fd(), 0o000).unwrap();
        assert_eq!(mode_of(&d), 0o000);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_symlink_is_never_opened_for_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("l")).unwrap();
        let top = rustix::fs::open(
            dir.path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        assert!(open_path(&top, b"l").is_err());
    }
}
