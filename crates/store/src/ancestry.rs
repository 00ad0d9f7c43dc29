//! Where a path is on this host: the device and inode of it (or of its nearest directory that
//! exists) and of every directory above it up to `/`, with the running kernel's boot id.
//!
//! Two paths, named on this host or by two servers, overlap (one holds the other) exactly when
//! the first's device and inode are among the second's ancestry and both ancestries come from
//! one running kernel (the same boot id). Device and inode see through what names cannot: a
//! symlink, a bind mount, a server's export root or another server's name for the same tree.
//! What this cannot see: the same files through two kernels (an NFS or Lustre tree mounted on
//! two hosts), which have two boot ids.

use crate::root::Root;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// Most directories an ancestry holds: a path of `PATH_MAX` bytes has at most half as many
/// components, and mount points do not add any.
pub const MAX_DEPTH: usize = 2048;

/// A path's place in this host's file systems.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ancestry {
    /// The path itself is there (else `ids` starts at its nearest directory that is).
    pub exists: bool,
    /// (device, inode) of the path (or its nearest existing directory), then of each
    /// directory above it, `/` last.
    pub ids: Vec<(u64, u64)>,
}

impl Ancestry {
    /// Whether `other`'s own device and inode are among this ancestry's: this path is `other`
    /// or lies below it (when `other` exists).
    pub fn is_within(&self, other: &Ancestry) -> bool {
        other.exists && other.ids.first().is_some_and(|id| self.ids.contains(id))
    }
}

/// The running kernel's boot id (`/proc/sys/kernel/random/boot_id`), the same for every process
/// of this host until it restarts; `None` where it cannot be read.
pub fn boot_id() -> Option<[u8; 16]> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let hex: Vec<u8> = text.trim().bytes().filter(|&b| b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        id[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(id)
}

/// The ancestry of `rel` below `root`, resolved as the copy resolves it (within the root,
/// following symlinks that stay in it); above the root it goes on to `/`.
pub fn below(root: &Root, rel: &[u8]) -> Result<Ancestry, Errno> {
    let mut at = rel;
    let mut exists = true;
    loop {
        match root.open_beneath(at, OFlags::PATH) {
            Ok(fd) => {
                let parent = || root.open_beneath(crate::relpath::split_parent(at).0, OFlags::PATH);
                return Ok(Ancestry {
                    exists,
                    ids: up_from(fd, &parent)?,
                });
            }
            Err(Errno::NOENT) if !at.is_empty() => {
                exists = false;
                at = crate::relpath::split_parent(at).0;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The ancestry of a local path (symlinks followed, as a copy follows them).
pub fn of_local(path: &Path) -> Result<Ancestry, Errno> {
    let mut exists = true;
    for at in path.ancestors() {
        let at = if at.as_os_str().is_empty() {
            Path::new(".")
        } else {
            at
        };
        match open_path(at) {
            Ok(fd) => {
                let parent = || match at.parent() {
                    Some(p) if !p.as_os_str().is_empty() => open_path(p),
                    _ => open_path(Path::new(".")),
                };
                return Ok(Ancestry {
                    exists,
                    ids: up_from(fd, &parent)?,
                });
            }
            Err(Errno::NOENT) => exists = false,
            Err(e) => return Err(e),
        }
    }
    // A relative path whose every component is missing: its nearest directory is `.`.
    Ok(Ancestry {
        exists: false,
        ids: up_from(open_path(Path::new("."))?, &|| open_path(Path::new("..")))?,
    })
}

fn open_path(path: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
}

/// (device, inode) of `fd`, then of each directory above it by `..` (above a file: from its
/// directory, which `parent` opens), up to the one that is its own parent.
fn up_from(
    fd: OwnedFd,
    parent: &dyn Fn() -> Result<OwnedFd, Errno>,
) -> Result<Vec<(u64, u64)>, Errno> {
    let id = |fd: &OwnedFd| -> Result<(u64, u64), Errno> {
        let st = rustix::fs::fstat(fd.as_fd())?;
        Ok((st.st_dev, st.st_ino))
    };
    let mut ids = vec![id(&fd)?];
    let mut at = fd;
    while ids.len() < MAX_DEPTH {
        let parent = match rustix::fs::openat(
            &at,
            "..",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(p) => p,
            // A file has no `..`: its directory is reached by the path the caller gave.
            Err(Errno::NOTDIR) if ids.len() == 1 => {
                let dir = parent()?;
                let mut above = up_from(dir, &|| Err(Errno::NOTDIR))?;
                ids.append(&mut above);
                break;
            }
            Err(e) => return Err(e),
        };
        let pid = id(&parent)?;
        if ids.last() == Some(&pid) {
            break;
        }
        ids.push(pid);
        at = parent;
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_below_another_is_within_it_through_a_symlink_too() {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        std::fs::create_dir_all(top.join("a/b")).unwrap();
        std::os::unix::fs::symlink(top.join("a"), t.path().join("link")).unwrap();
        let top_a = of_local(&top).unwrap();
        let inner = of_local(&t.path().join("link/b/not-yet/deeper")).unwrap();
        assert!(!inner.exists);
        assert!(inner.is_within(&top_a));
        assert!(!top_a.is_within(&inner));
        let root = Root::open(&top).unwrap();
        let from_root = below(&root, b"a/b").unwrap();
        assert!(from_root.exists);
        assert_eq!(from_root.ids, of_local(&top.join("a/b")).unwrap().ids);
        assert_eq!(
            from_root.ids.last(),
            of_local(Path::new("/")).unwrap().ids.last()
        );
        std::fs::write(top.join("a/b/f"), b"x").unwrap();
        let file = of_local(&top.join("a/b/f")).unwrap();
        assert!(file.is_within(&top_a));
        assert_eq!(file.ids[1..], below(&root, b"a/b/f").unwrap().ids[1..]);
    }

    #[test]
    fn a_missing_path_is_within_nothing_that_is_missing() {
        let t = tempfile::tempdir().unwrap();
        let missing = of_local(&t.path().join("gone")).unwrap();
        let other = of_local(&t.path().join("gone/too")).unwrap();
        assert!(!other.is_within(&missing));
    }

    #[test]
    fn the_boot_id_is_read() {
        assert!(boot_id().is_some_and(|id| id != [0; 16]));
    }
}
