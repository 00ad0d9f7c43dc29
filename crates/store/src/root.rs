//! Confined directory roots: every path below a root is resolved with `openat2` and
//! `RESOLVE_BENEATH`, so `..`, absolute paths and symlinks cannot lead outside it. An export
//! of the file system's root `/` (the one-shot server of a copy over ssh) has nothing to be
//! confined to: paths below it resolve as anywhere else, symlinks to absolute paths included
//! (`/scratch -> /lustre/scratch`), as scp and rsync resolve them.

use crate::error::StoreError;
use rustix::fs::{openat2, statx, AtFlags, FileType, Mode, OFlags, ResolveFlags, StatxFlags, CWD};
use rustix::io::Errno;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

/// The umask the process started with, kept by [`clear_umask`].
static USER_UMASK: OnceLock<u32> = OnceLock::new();

/// Clears the process's umask, so that copied files and directories get exactly their source's
/// permission bits (as `cp -a` and `rsync -a` do), and keeps the user's for what is made on
/// the user's behalf rather than copied (the missing parents of a destination).
pub fn clear_umask() {
    let before = rustix::process::umask(Mode::empty());
    USER_UMASK.get_or_init(|| before.bits());
}

/// The user's umask (022 before [`clear_umask`] ran, or if it never did).
pub fn user_umask() -> u32 {
    USER_UMASK.get().copied().unwrap_or(0o022)
}

const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// An open directory that paths are confined to.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    /// Paths below it may not lead out of it (false only for an export of `/` itself, see
    /// [`Root::open_export`]; what is opened below any root is confined again).
    confined: bool,
}

/// What a source path turned out to be.
#[derive(Debug)]
pub enum Source {
    /// A directory: scan it, paths relative to it.
    Dir(Root),
    /// A single regular file: `parent` holds it under `name`.
    File { parent: Root, name: Vec<u8> },
}

impl Root {
    /// Opens an existing directory given by the user (symlinks in `path` are followed).
    pub fn open(path: &Path) -> Result<Root, StoreError> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| StoreError::new("open directory", path.as_os_str().as_bytes(), e))?;
        Ok(Root { fd, confined: true })
    }

    /// Opens a server's exported directory: confined, unless it is the file system's root
    /// (then paths below it resolve as anywhere on the host: nothing lies outside it).
    pub fn open_export(path: &Path) -> Result<Root, StoreError> {
        let mut root = Root::open(path)?;
        let id = |fd: BorrowedFd<'_>| rustix::fs::fstat(fd).map(|st| (st.st_dev, st.st_ino));
        let top = rustix::fs::open("/", OFlags::PATH | OFlags::CLOEXEC, Mode::empty());
        if let (Ok(mine), Ok(Ok(top))) = (id(root.fd()), top.map(|t| id(t.as_fd()))) {
            root.confined = mine != top;
        }
        Ok(root)
    }

    /// How paths below this root are resolved.
    fn resolve(&self) -> ResolveFlags {
        if self.confined {
            BENEATH
        } else {
            ResolveFlags::NO_MAGICLINKS
        }
    }

    /// Opens the user's local source path (following a symlink given as the path itself).
    pub fn open_local_source(path: &Path) -> Result<Source, StoreError> {
        let bytes = path.as_os_str().as_bytes();
        let st = statx(CWD, path, AtFlags::empty(), StatxFlags::TYPE)
            .map_err(|e| StoreError::new("read source", bytes, e))?;
        match FileType::from_raw_mode(st.stx_mode as u32) {
            FileType::Directory => Ok(Source::Dir(Root::open(path)?)),
            // A FIFO, socket or device alone is copied as what it is, as a file would be.
            FileType::RegularFile
            | FileType::Fifo
            | FileType::Socket
            | FileType::CharacterDevice
            | FileType::BlockDevice => {
                let parent = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                let name = path
                    .file_name()
                    .map(|n| n.as_bytes().to_vec())
                    .ok_or_else(|| StoreError::other("read source", bytes, "not a file name"))?;
                Ok(Source::File {
                    parent: Root::open(parent)?,
                    name,
                })
            }
            _ => Err(StoreError::other(
                "read source",
                bytes,
                "not a regular file or directory",
            )),
        }
    }

    /// Creates (like `mkdir -p`) and opens a local destination directory given by the user.
    /// What it makes has the user's umask applied (see [`clear_umask`]), as with `mkdir -p`;
    /// a copied tree's directories get their source's modes later.
    pub fn create_local(path: &Path) -> Result<Root, StoreError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o777 & !user_umask())
            .create(path)
            .map_err(|e| StoreError::new("create directory", path.as_os_str().as_bytes(), e))?;
        Root::open(path)
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn try_clone(&self) -> Result<Root, StoreError> {
        Ok(Root {
            fd: self
                .fd
                .try_clone()
                .map_err(|e| StoreError::new("duplicate descriptor", b"", e))?,
            confined: self.confined,
        })
    }

    /// The longest path below a root that can be opened (`openat2` takes the whole path,
    /// which the kernel limits to `PATH_MAX`, 4,096 bytes with its terminating NUL).
    pub const MAX_PATH: usize = 4095;

    /// Opens `rel` below this root with `flags`, refusing any escape.
    pub fn open_beneath(&self, rel: &[u8], flags: OFlags) -> Result<OwnedFd, Errno> {
        let path: &[u8] = if rel.is_empty() { b"." } else { rel };
        openat2(
            &self.fd,
            std::ffi::OsStr::from_bytes(path),
            flags | OFlags::CLOEXEC,
            Mode::empty(),
            self.resolve(),
        )
    }

    /// Opens directory `rel` below this root.
    pub fn open_dir(&self, rel: &[u8]) -> Result<OwnedFd, Errno> {
        self.open_beneath(rel, OFlags::RDONLY | OFlags::DIRECTORY)
    }

    /// Opens `rel` below this root as a new root.
    pub fn sub_root(&self, rel: &[u8]) -> Result<Root, StoreError> {
        let fd = self
            .open_dir(rel)
            .map_err(|e| StoreError::new("open directory", rel, escape_error(e)))?;
        Ok(Root { fd, confined: true })
    }

    /// Resolves a source below this root: a directory, or a regular or special file.
    pub fn source(&self, rel: &[u8]) -> Result<Source, StoreError> {
        let fd = self
            .open_beneath(rel, OFlags::PATH)
            .map_err(|e| StoreError::new("open source", rel, escape_error(e)))?;
        let st = statx(&fd, "", AtFlags::EMPTY_PATH, StatxFlags::TYPE)
            .map_err(|e| StoreError::new("read source", rel, e))?;
        match FileType::from_raw_mode(st.stx_mode as u32) {
            FileType::Directory => Ok(Source::Dir(self.sub_root(rel)?)),
            FileType::RegularFile
            | FileType::Fifo
            | FileType::Socket
            | FileType::CharacterDevice
            | FileType::BlockDevice => {
                let (parent, name) = crate::relpath::split_parent(rel);
                Ok(Source::File {
                    parent: self.sub_root(parent)?,
                    name: name.to_vec(),
                })
            }
            _ => Err(StoreError::other(
                "open source",
                rel,
                "not a regular file or directory",
            )),
        }
    }

    /// Creates every missing directory of `rel` (mode 0755 before attributes are applied) and
    /// opens it. Each component is opened without following symlinks; an existing component
    /// that is not a directory is an error.
    pub fn mkdir_all(&self, rel: &[u8]) -> Result<Root, StoreError> {
        self.make_dirs(rel, false)
    }

    /// Like [`Root::mkdir_all`], but a component that is a file or a symlink is replaced by a
    /// directory (the tree being written says a directory belongs there).
    pub fn mkdir_all_replacing(&self, rel: &[u8]) -> Result<Root, StoreError> {
        self.make_dirs(rel, true)
    }

    fn make_dirs(&self, rel: &[u8], replace: bool) -> Result<Root, StoreError> {
        let mut current = self.try_clone()?;
        current.confined = true;
        if rel.is_empty() {
            return Ok(current);
        }
        // Below an export of `/`, the way to the directory follows symlinks as `mkdir -p`
        // does; the directory itself, and all below it, is confined again.
        let (follow, resolve) = match self.confined {
            true => (OFlags::NOFOLLOW, BENEATH),
            false => (OFlags::empty(), ResolveFlags::NO_MAGICLINKS),
        };
        for component in rel.split(|&b| b == b'/') {
            let name = std::ffi::OsStr::from_bytes(component);
            let open = |dir: &Root| {
                openat2(
                    &dir.fd,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | follow | OFlags::CLOEXEC,
                    Mode::empty(),
                    resolve,
                )
            };
            let mkdir =
                |dir: &Root| match rustix::fs::mkdirat(&dir.fd, name, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => Ok(()),
                    Err(e) => Err(StoreError::new("create directory", rel, e)),
                };
            let fd = match open(&current) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    mkdir(&current)?;
                    open(&current).map_err(|e| StoreError::new("open directory", rel, e))?
                }
                Err(Errno::NOTDIR | Errno::LOOP) if replace => {
                    rustix::fs::unlinkat(&current.fd, name, rustix::fs::AtFlags::empty())
                        .map_err(|e| StoreError::new("replace with a directory", rel, e))?;
                    mkdir(&current)?;
                    open(&current).map_err(|e| StoreError::new("open directory", rel, e))?
                }
                Err(Errno::NOTDIR | Errno::LOOP) if is_symlink_at(&current.fd, name) => {
                    let shown = crate::display_path(component);
                    return Err(StoreError::other(
                        "open directory",
                        rel,
                        &format!(
                            "'{shown}' is a symbolic link, which sprat does not follow here (it \
                             could lead outside the tree it writes, or the server's exported \
                             root); name the directory it points to instead"
                        ),
                    ));
                }
                Err(e) => {
                    return Err(StoreError::new(
                        "open directory",
                        rel,
                        escape_error(not_a_dir(e)),
                    ))
                }
            };
            current = Root { fd, confined: true };
        }
        Ok(current)
    }

    /// Opens directory `rel` below this root without following any symlink on the way.
    pub fn open_dir_nofollow(&self, rel: &[u8]) -> Result<OwnedFd, Errno> {
        self.open_dir_with(rel, OFlags::RDONLY)
    }

    /// Opens directory `rel` below this root as an `O_PATH` descriptor (which needs no
    /// permission on the directory itself), without following any symlink on the way.
    pub fn open_dir_path_nofollow(&self, rel: &[u8]) -> Result<OwnedFd, Errno> {
        self.open_dir_with(rel, OFlags::PATH)
    }

    fn open_dir_with(&self, rel: &[u8], how: OFlags) -> Result<OwnedFd, Errno> {
        let path: &[u8] = if rel.is_empty() { b"." } else { rel };
        openat2(
            &self.fd,
            std::ffi::OsStr::from_bytes(path),
            how | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            BENEATH | ResolveFlags::NO_SYMLINKS,
        )
    }
}

/// Whether `name` in `dir` is a symbolic link (not followed).
fn is_symlink_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> bool {
    rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
}

fn not_a_dir(e: Errno) -> Errno {
    // O_NOFOLLOW on a symlink gives ELOOP; for the user the path is simply not a directory.
    if e == Errno::LOOP {
        Errno::NOTDIR
    } else {
        e
    }
}

/// Turns the kernel's "would escape" error into a message a user understands.
pub fn escape_error(e: Errno) -> std::io::Error {
    if e == Errno::XDEV {
        std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "path leads outside the exported root",
        )
    } else {
        e.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_cannot_lead_outside_the_root() {
        let outside = tempfile::tempdir().unwrap();
        let root_dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root_dir.path().join("esc")).unwrap();
        std::fs::create_dir(root_dir.path().join("in")).unwrap();
        let root = Root::open(root_dir.path()).unwrap();
        assert!(root.open_dir(b"in").is_ok());
        assert_eq!(root.open_dir(b"esc").unwrap_err(), Errno::XDEV);
        assert!(root.open_dir(b"in/../../x").is_err());
        assert!(root.mkdir_all(b"esc/sub").is_err());
        assert!(!outside.path().join("sub").exists());
        assert!(root.source(b"esc").is_err());
    }

    #[test]
    fn mkdir_all_creates_missing_directories() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path()).unwrap();
        root.mkdir_all(b"a/b/c").unwrap();
        assert!(dir.path().join("a/b/c").is_dir());
        root.mkdir_all(b"a/b/c").unwrap();
    }
}
