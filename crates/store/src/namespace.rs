//! Namespace operations on a confined root: make directories, remove (recursively), rename,
//! disk usage and checksums. Every path is resolved below the root; removal never follows a
//! symlink (a link is removed, not what it points to).
//!
//! A removal by a user who is not root succeeds where only the modes of directories that user
//! owns stand in the way (a tree a server running as that user wrote with its source's `0555`
//! or `0000` directories), as `rm -rf` does not: where unlinking fails with `EACCES`, the owner
//! bits needed are added (see [`crate::perm`]) and the unlink is tried once more. A directory
//! being removed gets `u+rwx`; the directory the removed entry was in stays, so it gets `u+wx`
//! for the removal and its mode back after. A removal that fails part-way leaves the
//! directories it had opened up inside the tree with `u+rwx`. Directories of other users are
//! never changed.

use crate::error::StoreError;
use crate::filter::Selection;
use crate::perm;
use crate::root::{escape_error, Root};
use crate::scan::{scan_selected, EntryType, ScanEntry, ScanOptions};
use rustix::fs::{
    mkdirat, openat, renameat, statx, unlinkat, AtFlags, FileType, Mode, OFlags, RawDir, StatxFlags,
};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::io::Read;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

fn os(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

/// The root itself may be listed but not removed, renamed or replaced.
fn not_root(op: &'static str, rel: &[u8]) -> Result<(), StoreError> {
    if rel.is_empty() {
        return Err(StoreError::new(
            op,
            rel,
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the exported root itself cannot be changed",
            ),
        ));
    }
    Ok(())
}

fn parent_of<'p>(
    root: &Root,
    op: &'static str,
    rel: &'p [u8],
) -> Result<(OwnedFd, &'p [u8]), StoreError> {
    let (dir, name) = crate::relpath::split_parent(rel);
    let fd = match root.open_dir(dir) {
        // A directory the user may not read (`0300`, or `0000` of its own): opened without
        // reading it; a change in it adds the bits it needs (see `Parent`).
        Err(Errno::ACCESS) => root.open_beneath(dir, OFlags::PATH | OFlags::DIRECTORY),
        other => other,
    }
    .map_err(|e| StoreError::new(op, rel, escape_error(e)))?;
    Ok((fd, name))
}

/// `mkdir` (or `mkdir -p` with `parents`).
pub fn make_dir(root: &Root, rel: &[u8], parents: bool) -> Result<(), StoreError> {
    not_root("create directory", rel)?;
    if parents {
        return root.mkdir_all(rel).map(|_| ());
    }
    let (dir, name) = parent_of(root, "create directory", rel)?;
    mkdirat(&dir, os(name), Mode::from_raw_mode(0o755))
        .map_err(|e| StoreError::new("create directory", rel, e))
}

/// Why [`remove`] leaves a name alone that a running transfer is writing (a temporary name, a
/// partial copy or its journal): the end of its error's text.
pub const BEING_WRITTEN: &str = "is being written by a running transfer";

/// Refuses `op` on `name` in `dir` (at `rel`) while a running transfer writes under it (see
/// [`BEING_WRITTEN`]): moving a partial copy away, or another file over it, would make that
/// transfer fail at its end, and leave an incomplete file under a name that looks complete.
fn refuse_live(
    dir: &std::os::fd::OwnedFd,
    name: &[u8],
    op: &'static str,
    rel: &[u8],
) -> Result<(), StoreError> {
    if crate::write::is_live_temp(name) || crate::partial::is_being_written(dir, name) {
        return Err(StoreError::other(op, rel, BEING_WRITTEN));
    }
    Ok(())
}

/// `rm` (or `rm -r` with `recursive`); returns the number of entries removed.
pub fn remove(root: &Root, rel: &[u8], recursive: bool) -> Result<u64, StoreError> {
    not_root("remove", rel)?;
    let (dir, name) = parent_of(root, "remove", rel)?;
    refuse_live(&dir, name, "remove", rel)?;
    let mut parent = Parent {
        fd: &dir,
        had: None,
    };
    // Looked at in a directory it may have to make searchable first (see `Parent`).
    let st =
        match parent.retry(|| statx(&dir, os(name), AtFlags::SYMLINK_NOFOLLOW, StatxFlags::TYPE)) {
            Ok(st) => st,
            Err(e) => {
                parent.restore(rel)?;
                return Err(StoreError::new("remove", rel, e));
            }
        };
    let removed = if FileType::from_raw_mode(st.stx_mode as u32) != FileType::Directory {
        parent
            .retry(|| unlinkat(&dir, os(name), AtFlags::empty()))
            .map(|()| 1)
            .map_err(|e| StoreError::new("remove", rel, e))
    } else if !recursive {
        parent
            .retry(|| unlinkat(&dir, os(name), AtFlags::REMOVEDIR))
            .map(|()| 1)
            .map_err(|e| match e {
                Errno::NOTEMPTY | Errno::EXIST => {
                    StoreError::other("remove", rel, "is a directory that is not empty (use -r)")
                }
                e => StoreError::new("remove", rel, e),
            })
    } else {
        let mut buf = vec![MaybeUninit::uninit(); 64 << 10];
        let mut path = rel.to_vec();
        remove_tree(&mut parent, name, &mut path, &mut buf)
    };
    let restored = parent.restore(rel);
    let removed = removed?;
    restored?;
    Ok(removed)
}

/// The directory an entry is removed from: it stays, so the owner bits a removal added to it
/// (see [`crate::perm`]) are taken away again after.
struct Parent<'a> {
    fd: &'a OwnedFd,
    /// Its permission bits before bits were added.
    had: Option<u32>,
}

impl Parent<'_> {
    /// Runs `op`, which removes an entry of this directory; where that fails with `EACCES`
    /// and the user owns the directory, once more after adding `u+wx` to it.
    fn retry<T>(&mut self, op: impl FnMut() -> Result<T, Errno>) -> Result<T, Errno> {
        let (result, had) = perm::retry_in(self.fd.as_fd(), perm::CHANGE, op);
        if self.had.is_none() {
            self.had = had;
        }
        result
    }

    /// Gives the directory back the mode it had, if bits were added (`rel`: the entry removed
    /// from it, for the error).
    fn restore(&self, rel: &[u8]) -> Result<(), StoreError> {
        match self.had {
            None => Ok(()),
            Some(mode) => perm::restore(self.fd.as_fd(), mode).map_err(|e| {
                StoreError::new("give back the mode of the directory holding", rel, e)
            }),
        }
    }
}

/// Removes directory `name` in `parent` and everything below it, descending by descriptor so
/// that no symlink is ever followed and no path is ever resolved whole (a tree may be deeper
/// than `PATH_MAX` allows a path to be). `path` names it in errors.
///
/// Iterative, however deep the tree: one directory is open at a time, and for each level
/// above it only its name, its identity (device and inode) and where its listing resumes are
/// kept. Going back up opens `..` and checks that it is the directory that was come from (a
/// directory moved meanwhile stops the removal with an error instead of removing elsewhere),
/// as `fts` does for `rm -r`. A directory's listing resumes after the subdirectory just
/// removed (its `getdents` cookie), and it is read once more from the start until a read
/// finds it empty.
///
/// A directory of the tree that the user owns but may not read or change (`0555`, `0000`)
/// gets `u+rwx` where an open or unlink in it fails with `EACCES`, and the step is tried once
/// more; `parent` gets `u+wx` the same way (see [`Parent`]).
fn remove_tree(
    parent: &mut Parent<'_>,
    name: &[u8],
    path: &mut Vec<u8>,
    buf: &mut [MaybeUninit<u8>],
) -> Result<u64, StoreError> {
    /// A directory being emptied: its name in its parent, its identity, where its listing
    /// resumes, and whether the current read started at its beginning and found anything.
    struct Level {
        name: Vec<u8>,
        id: (u64, u64),
        resume: u64,
        from_start: bool,
        found: bool,
        /// `path`'s length without this level's name.
        path_len: usize,
    }
    let identity = |fd: &OwnedFd, path: &[u8]| {
        rustix::fs::fstat(fd)
            .map(|st| (st.st_dev, st.st_ino))
            .map_err(|e| StoreError::new("remove", path, e))
    };
    let open_dir = |dir: &OwnedFd, name: &[u8], path: &[u8]| {
        let open = || {
            openat(
                dir,
                os(name),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
        };
        match open() {
            // A directory of the user's that the user may not read: it is to go, so it gets
            // u+rwx (through a descriptor that needs no permission on it).
            Err(Errno::ACCESS) => match perm::open_path(dir, name)
                .and_then(|fd| perm::add_bits(fd.as_fd(), perm::ALL))
            {
                Ok(Some(_)) => open(),
                _ => Err(Errno::ACCESS),
            },
            other => other,
        }
        .map_err(|e| StoreError::new("remove", path, e))
    };
    let mut current = open_dir(parent.fd, name, path)?;
    let mut levels = vec![Level {
        name: name.to_vec(),
        id: identity(&current, path)?,
        resume: 0,
        from_start: true,
        found: false,
        path_len: path.len() - name.len(),
    }];
    let mut removed = 0;
    while let Some(level) = levels.last_mut() {
        rustix::fs::seek(&current, rustix::fs::SeekFrom::Start(level.resume))
            .map_err(|e| StoreError::new("remove", path, e))?;
        // Remove what this read lists; stop at the first subdirectory, to go into it.
        let mut into: Option<Vec<u8>> = None;
        let mut iter = RawDir::new(&current, &mut *buf);
        while let Some(item) = iter.next() {
            let entry = item.map_err(|e| StoreError::new("remove", path, e))?;
            let child = entry.file_name().to_bytes();
            if child == b"." || child == b".." {
                continue;
            }
            level.found = true;
            // The partial copy of a file a running transfer is writing stops the removal
            // (see `partial::is_being_written`): that transfer would fail at its end.
            if crate::partial::is_partial_name(child)
                && crate::partial::is_being_written(&current, child)
            {
                path.push(b'/');
                path.extend_from_slice(child);
                return Err(StoreError::other("remove", path, BEING_WRITTEN));
            }
            let unlink = || unlinkat(&current, os(child), AtFlags::empty());
            match perm::retry_in(current.as_fd(), perm::ALL, unlink).0 {
                Ok(()) => removed += 1,
                // Gone meanwhile.
                Err(Errno::NOENT) => {}
                // A directory (Linux says EISDIR; POSIX allows EPERM).
                Err(Errno::ISDIR | Errno::PERM)
                    if matches!(entry.file_type(), FileType::Directory | FileType::Unknown) =>
                {
                    level.resume = entry.next_entry_cookie();
                    into = Some(child.to_vec());
                    break;
                }
                Err(e) => {
                    path.push(b'/');
                    path.extend_from_slice(child);
                    return Err(StoreError::new("remove", path, e));
                }
            }
        }
        if let Some(child) = into {
            let path_len = path.len();
            path.push(b'/');
            path.extend_from_slice(&child);
            let fd = open_dir(&current, &child, path)?;
            let id = identity(&fd, path)?;
            current = fd;
            levels.push(Level {
                name: child,
                id,
                resume: 0,
                from_start: true,
                found: false,
                path_len,
            });
            continue;
        }
        if !level.from_start || level.found {
            // Read it again from the start, until a read finds it empty.
            level.resume = 0;
            level.from_start = true;
            level.found = false;
            continue;
        }
        // Empty: remove it from its parent, and go on with the parent's listing.
        let Some(done) = levels.pop() else { break };
        let above = match levels.last() {
            None => {
                drop(current);
                let fd = parent.fd;
                parent
                    .retry(|| unlinkat(fd, os(&done.name), AtFlags::REMOVEDIR))
                    .map_err(|e| StoreError::new("remove", path, e))?;
                return Ok(removed + 1);
            }
            Some(above) => above.id,
        };
        let up = open_dir(&current, b"..", path)?;
        if identity(&up, path)? != above {
            return Err(StoreError::other(
                "remove",
                path,
                "a directory was moved while it was being removed",
            ));
        }
        drop(std::mem::replace(&mut current, up));
        let rmdir = || unlinkat(&current, os(&done.name), AtFlags::REMOVEDIR);
        perm::retry_in(current.as_fd(), perm::ALL, rmdir)
            .0
            .map_err(|e| StoreError::new("remove", path, e))?;
        removed += 1;
        path.truncate(done.path_len);
        if let Some(level) = levels.last_mut() {
            // The listing resumes behind the removed subdirectory; this read is no longer
            // one from the start.
            level.from_start = false;
        }
    }
    Ok(removed)
}

/// `mv`: renames `from` to `to`; when `to` is an existing directory, `from` moves into it.
pub fn rename(root: &Root, from: &[u8], to: &[u8]) -> Result<(), StoreError> {
    not_root("move", from)?;
    let (from_dir, from_name) = parent_of(root, "move", from)?;
    refuse_live(&from_dir, from_name, "move", from)?;
    let into = match root.open_beneath(to, OFlags::PATH) {
        Ok(fd) => statx(&fd, "", AtFlags::EMPTY_PATH, StatxFlags::TYPE)
            .is_ok_and(|st| FileType::from_raw_mode(st.stx_mode as u32) == FileType::Directory),
        // A symlink leading outside the root is neither followed nor replaced.
        Err(Errno::XDEV) => return Err(StoreError::new("move", to, escape_error(Errno::XDEV))),
        Err(_) => false,
    };
    let target = if into {
        crate::relpath::join(to, from_name)
    } else {
        to.to_vec()
    };
    not_root("move", &target)?;
    let (to_dir, to_name) = parent_of(root, "move", &target)?;
    refuse_live(&to_dir, to_name, "move", &target)?;
    renameat(&from_dir, os(from_name), &to_dir, os(to_name))
        .map_err(|e| StoreError::new("move", from, e))
}

/// Totals under a path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
    /// Large files an interrupted copy left incomplete (see [`crate::partial`]), not among
    /// `files`, and the bytes of their partial files and journals, not among `bytes`.
    pub partial_files: u64,
    pub partial_bytes: u64,
    /// FIFOs, sockets and devices.
    pub specials: u64,
    /// Entries that could not be examined (a directory that may not be read: what it holds
    /// is not counted).
    pub unreadable: u64,
}

/// Walks `rel` (a file or a whole tree), calling `each` for every entry; entries are
/// relative to `rel`. The first unreadable entry is an error.
pub fn walk(
    root: &Root,
    rel: &[u8],
    recursive: bool,
    each: impl FnMut(ScanEntry) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    walk_selected(root, rel, recursive, &Selection::default(), each)
}

/// [`walk`] of what `selection` selects of a recursive walk (see [`crate::scan_selected`]);
/// `selection` does not apply to a single entry or a directory listed alone.
pub fn walk_selected(
    root: &Root,
    rel: &[u8],
    recursive: bool,
    selection: &Selection,
    mut each: impl FnMut(ScanEntry) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    walk_reporting(root, rel, recursive, selection, |e| match &e.error {
        Some(err) => Err(StoreError::other(
            "list",
            &crate::relpath::join(rel, &e.path),
            err,
        )),
        None => each(e),
    })
}

/// [`walk_selected`], giving `each` the entries that could not be examined too (their
/// [`ScanEntry::error`] set: a directory that could not be listed, nothing below it given)
/// instead of ending the walk at the first; the walk still ends if `rel` itself cannot be
/// examined, or a directory listed alone (not `recursive`) cannot be read.
pub fn walk_reporting(
    root: &Root,
    rel: &[u8],
    recursive: bool,
    selection: &Selection,
    mut each: impl FnMut(ScanEntry) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let top = crate::scan::stat_path(root, rel)?;
    if top.kind != EntryType::Dir {
        let mut top = top;
        top.path.clear();
        return each(top);
    }
    let sub = match root.sub_root(rel) {
        Ok(sub) => sub,
        // A directory it may not read (a `0000` one of the server's own): itself, and an
        // entry saying it cannot be listed.
        Err(e) if recursive => {
            let mut me = top;
            me.path.clear();
            each(me)?;
            return each(crate::scan::failed_with(Vec::new(), e.to_string()));
        }
        Err(e) => return Err(e),
    };
    if !recursive {
        let mut me = top;
        me.path.clear();
        each(me)?;
        // Piece by piece: a huge directory is never held whole.
        let mut result = Ok(());
        crate::scan::list_directory_in_pieces(&sub, b"", |piece| {
            result = piece.into_iter().try_for_each(|e| {
                if let Some(err) = &e.error {
                    return Err(StoreError::other(
                        "list",
                        &crate::relpath::join(rel, &e.path),
                        err,
                    ));
                }
                each(e)
            });
            result.is_ok()
        });
        return result;
    }
    let (tx, rx) = crossbeam_channel::bounded(16);
    std::thread::scope(|s| {
        let sub = &sub;
        s.spawn(move || scan_selected(sub, ScanOptions::default(), selection, tx));
        for listing in rx {
            for e in listing {
                each(e)?;
            }
        }
        Ok(())
    })
}

/// `du`: files, directories, symlinks and bytes under `rel` (of what `selection` selects).
pub fn usage(root: &Root, rel: &[u8], selection: &Selection) -> Result<Usage, StoreError> {
    let mut u = Usage::default();
    walk_reporting(root, rel, true, selection, |e| {
        if e.error.is_some() {
            u.unreadable += 1;
            return Ok(());
        }
        match e.kind {
            EntryType::File
                if crate::partial::is_partial_name(crate::relpath::split_parent(&e.path).1) =>
            {
                if !crate::partial::is_log_path(&e.path) {
                    u.partial_files += 1;
                }
                u.partial_bytes += e.size;
            }
            EntryType::File => {
                u.files += 1;
                u.bytes += e.size;
            }
            EntryType::Dir => u.dirs += 1,
            EntryType::Symlink => u.symlinks += 1,
            EntryType::Special => u.specials += 1,
        }
        Ok(())
    })?;
    Ok(u)
}

/// Digest algorithms for [`checksum_file`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Digest {
    Xxh3,
    Sha256,
    Md5,
}

/// Reads file `rel` below `root` (never through a final symlink, and only if it is a regular
/// file) and returns its digest.
pub fn checksum_file(root: &Root, rel: &[u8], digest: Digest) -> Result<Vec<u8>, StoreError> {
    let (dir, name) = parent_of(root, "checksum", rel)?;
    // Never waiting on a FIFO or reading a device swapped in since the walk saw a file.
    let fd = crate::read::open_regular(&dir, name, rel, "checksum")?;
    let mut file = std::fs::File::from(fd);
    let mut buf = vec![0u8; 1 << 20];
    let mut xxh = xxhash_rust::xxh3::Xxh3::new();
    let mut sha = <sha2::Sha256 as sha2::Digest>::new();
    let mut md5 = <md5::Md5 as md5::Digest>::new();
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(StoreError::new("checksum", rel, e)),
        };
        match digest {
            Digest::Xxh3 => xxh.update(&buf[..n]),
            Digest::Sha256 => sha2::Digest::update(&mut sha, &buf[..n]),
            Digest::Md5 => md5::Digest::update(&mut md5, &buf[..n]),
        }
    }
    Ok(match digest {
        Digest::Xxh3 => xxh.digest128().to_be_bytes().to_vec(),
        Digest::Sha256 => sha2::Digest::finalize(sha).to_vec(),
        Digest::Md5 => md5::Digest::finalize(md5).to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_tree_deletes_links_not_their_targets() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"x").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t/a/b");
        std::fs::create_dir_all(&t).unwrap();
        for i in 0..300 {
            std::fs::write(t.join(format!("f{i}")), b"x").unwrap();
        }
        std::os::unix::fs::symlink(outside.path(), dir.path().join("t/link")).unwrap();
        let root = Root::open(dir.path()).unwrap();
        assert!(remove(&root, b"t", false).is_err());
        assert_eq!(remove(&root, b"t", true).unwrap(), 300 + 4);
        assert!(!dir.path().join("t").exists());
        assert!(outside.path().join("keep").exists());
        assert!(remove(&root, b"", true).is_err());
    }

    /// Makes `depth` directories `d`, one inside the other, below `top` (paths far longer
    /// than PATH_MAX: made by descriptor), with a file every 1000 levels and a symlink to
    /// `outside` at the bottom. Returns the number of entries made.
    fn make_deep_chain(top: &std::path::Path, depth: usize, outside: &std::path::Path) -> u64 {
        let mut fd = rustix::fs::open(
            top,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let mut made = 0;
        for level in 0..depth {
            mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
            fd = openat(
                &fd,
                "d",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
            made += 1;
            if level % 1000 == 0 {
                let f = openat(
                    &fd,
                    "file",
                    OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o644),
                )
                .unwrap();
                rustix::io::write(&f, b"x").unwrap();
                made += 1;
            }
        }
        rustix::fs::symlinkat(outside, &fd, "out").unwrap();
        made + 1
    }

    /// A temporary directory in memory where there is one (`/dev/shm`): removing 100,000
    /// directories from a disk mounted with `discard` takes minutes, and proves nothing more.
    fn memory_tempdir() -> tempfile::TempDir {
        tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap()
    }

    #[test]
    fn remove_tree_removes_a_tree_100_000_deep_without_recursing() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"x").unwrap();
        let dir = memory_tempdir();
        std::fs::create_dir(dir.path().join("deep")).unwrap();
        // Should the test fail: the temporary directory's own removal would recurse.
        struct RemoveDeep(std::path::PathBuf);
        impl Drop for RemoveDeep {
            fn drop(&mut self) {
                if self.0.exists() {
                    let rm = std::process::Command::new("rm")
                        .arg("-rf")
                        .arg(&self.0)
                        .status();
                    drop(rm);
                }
            }
        }
        let _cleanup = RemoveDeep(dir.path().join("deep"));
        let made = make_deep_chain(&dir.path().join("deep"), 100_000, outside.path());
        let root = Root::open(dir.path()).unwrap();
        assert_eq!(remove(&root, b"deep", true).unwrap(), made + 1);
        assert!(!dir.path().join("deep").exists());
        assert!(outside.path().join("keep").exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn remove_tree_empties_wide_directories_with_subdirectories_among_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut made = 0;
        for i in 0..300 {
            let sub = dir.path().join(format!("w/s{i}"));
            std::fs::create_dir_all(sub.join("inner")).unwrap();
            std::fs::write(sub.join("inner/f"), b"x").unwrap();
            std::fs::write(dir.path().join(format!("w/f{i}")), b"x").unwrap();
            made += 4;
        }
        let root = Root::open(dir.path()).unwrap();
        assert_eq!(remove(&root, b"w", true).unwrap(), made + 1);
        assert!(!dir.path().join("w").exists());
    }

    /// The same for a file whose name is too long to keep in its hidden names (hashed there:
    /// review 2026-11-29 of the session's fixes, M1: such a partial copy being written was
    /// removed, moved, and cleaned up under its writer); and the clean-up after a copy that
    /// finished the file ([`crate::partial::discard`]) leaves it alone too.
    #[test]
    fn a_held_partial_copy_of_a_long_name_is_neither_removed_moved_nor_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let name = vec![b'L'; 245];
        let (part, log) = (
            crate::partial::part_name(&name),
            crate::partial::log_name(&name),
        );
        assert!(part.starts_with(b".~"), "a hashed name");
        let at = |n: &[u8]| dir.path().join(std::ffi::OsStr::from_bytes(n));
        std::fs::write(at(&part), b"data").unwrap();
        std::fs::write(at(&log), b"journal").unwrap();
        std::fs::write(dir.path().join("other"), b"x").unwrap();
        let root = Root::open(dir.path()).unwrap();
        let held = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(at(&log))
            .unwrap();
        assert!(crate::partial::hold(&held));
        for hidden in [&part, &log] {
            let e = remove(&root, hidden, false).unwrap_err();
            assert!(e.to_string().ends_with(BEING_WRITTEN), "{e}");
            let e = rename(&root, hidden, b"moved").unwrap_err();
            assert!(e.to_string().ends_with(BEING_WRITTEN), "{e}");
            let e = rename(&root, b"other", hidden).unwrap_err();
            assert!(e.to_string().ends_with(BEING_WRITTEN), "{e}");
        }
        let dir_fd = root.open_dir_nofollow(b"").unwrap();
        assert!(!crate::partial::discard(&dir_fd, &name, None));
        assert_eq!(std::fs::read(at(&part)).unwrap(), b"data");
        drop(held);
        assert!(crate::partial::discard(&dir_fd, &name, None));
        assert!(!at(&part).exists() && !at(&log).exists());
    }

    /// The clean-up of a copy removes only the partial copy its index found at that name (of
    /// the same source identity and journal): not another job's, moved there since by a
    /// rename (review 2026-11-29 of the fixes of partial copies, M1).
    #[test]
    fn a_partial_copy_of_another_identity_is_not_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let id = |size| crate::partial::Identity {
            size,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 0,
            version: 7,
        };
        std::fs::write(dir.path().join(".x.sprat-part"), b"data").unwrap();
        let journal = crate::partial::encode_header(&id(4), b"x");
        std::fs::write(dir.path().join(".x.sprat-part.log"), journal).unwrap();
        let root = Root::open(dir.path()).unwrap();
        let seen = |size| crate::partial::Seen {
            id: id(size),
            journal_ino: crate::partial::journal_ino(&root, b"x"),
        };
        assert!(!crate::partial::discard_at(&root, b"x", Some(&seen(5))));
        let elsewhere = crate::partial::Seen {
            journal_ino: seen(4).journal_ino + 1,
            ..seen(4)
        };
        assert!(!crate::partial::discard_at(&root, b"x", Some(&elsewhere)));
        assert!(dir.path().join(".x.sprat-part").exists());
        assert!(crate::partial::discard_at(&root, b"x", Some(&seen(4))));
        assert!(!dir.path().join(".x.sprat-part").exists());
        assert!(!dir.path().join(".x.sprat-part.log").exists());
    }

    /// The partial copy (and journal) of a file a writer holds is not removed, by `rm` or by
    /// another copy's `--delete` (review 2026-11-29 of the fixes, F3); once the writer lets
    /// go, it is.
    #[test]
    fn a_partial_copy_a_writer_holds_is_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".f.sprat-part"), b"data").unwrap();
        std::fs::write(dir.path().join(".f.sprat-part.log"), b"journal").unwrap();
        let root = Root::open(dir.path()).unwrap();
        let held = std::fs::File::open(dir.path().join(".f.sprat-part.log")).unwrap();
        assert!(crate::partial::hold(&held));
        std::fs::write(dir.path().join("other"), b"x").unwrap();
        for name in [&b".f.sprat-part"[..], b".f.sprat-part.log"] {
            let e = remove(&root, name, false).unwrap_err();
            assert!(e.to_string().ends_with(BEING_WRITTEN), "{e}");
            // Nor moved away, nor replaced by a move (review 2026-11-29 of the session's
            // later changes, F5).
            let e = rename(&root, name, b"moved").unwrap_err();
            assert!(e.to_string().ends_with(BEING_WRITTEN), "{e}");
            let e = rename(&root, b"other", name).unwrap_err();
            assert!(e.to_string().ends_with(BEING_WRITTEN), "{e}");
        }
        assert!(!dir.path().join("moved").exists());
        assert_eq!(
            std::fs::read(dir.path().join(".f.sprat-part")).unwrap(),
            b"data"
        );
        drop(held);
        assert_eq!(remove(&root, b".f.sprat-part", false).unwrap(), 1);
        assert_eq!(remove(&root, b".f.sprat-part.log", false).unwrap(), 1);
        // Nor with the directory it is in (`rm -r`, `--delete` of a directory the source
        // lacks: review 2026-11-29 of the session's later changes, F2).
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/.g.sprat-part"), b"data").unwrap();
        std::fs::write(dir.path().join("d/.g.sprat-part.log"), b"journal").unwrap();
        let held = std::fs::File::open(dir.path().join("d/.g.sprat-part.log")).unwrap();
        assert!(crate::partial::hold(&held));
        let e = remove(&root, b"d", true).unwrap_err();
        assert!(e.to_string().ends_with(BEING_WRITTEN), "{e}");
        assert!(dir.path().join("d/.g.sprat-part").exists());
        drop(held);
        assert_eq!(remove(&root, b"d", true).unwrap(), 3);
    }

    #[test]
    fn rename_moves_into_existing_directories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let root = Root::open(dir.path()).unwrap();
        rename(&root, b"f", b"d").unwrap();
        assert!(dir.path().join("d/f").exists());
        rename(&root, b"d/f", b"g").unwrap();
        assert!(dir.path().join("g").exists());
    }

    #[test]
    fn a_fifo_swapped_in_after_the_walk_is_refused_by_checksum_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("t")).unwrap();
        std::fs::write(dir.path().join("t/f"), b"abc").unwrap();
        let root = Root::open(dir.path()).unwrap();
        let mut files = Vec::new();
        walk(&root, b"t", true, |e| {
            if e.kind == EntryType::File {
                files.push(e.path);
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(files, [b"f".to_vec()]);
        let fifo = dir.path().join("t/f");
        std::fs::remove_file(&fifo).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let top = dir.path().to_path_buf();
        let result = crate::batch_read::tests::unblocked(&fifo, move || {
            let root = Root::open(&top).unwrap();
            checksum_file(&root, b"t/f", Digest::Sha256).map_err(|e| e.to_string())
        });
        let err = result.unwrap_err();
        assert!(
            err.contains("'t/f'") && err.contains(crate::read::NOT_REGULAR),
            "{err}"
        );
    }

    #[test]
    fn digests_match_known_values() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("abc"), b"abc").unwrap();
        let root = Root::open(dir.path()).unwrap();
        let hex = |d: Vec<u8>| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(
            hex(checksum_file(&root, b"abc", Digest::Md5).unwrap()),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        assert_eq!(
            hex(checksum_file(&root, b"abc", Digest::Sha256).unwrap()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            u128::from_be_bytes(
                checksum_file(&root, b"abc", Digest::Xxh3)
                    .unwrap()
                    .try_into()
                    .unwrap()
            ),
            crate::attrs::checksum(b"abc")
        );
    }
}
