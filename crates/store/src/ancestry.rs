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
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Most directories an ancestry holds: a path of `PATH_MAX` bytes has at most half as many
/// components, and mount points do not add any.
pub const MAX_DEPTH: usize = 2048;

/// A path's place in this host's file systems (the default: nowhere, within nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
/// directory, which `parent` opens), up to the one that is its own parent. Where the way up
/// leaves a bind mount of a directory (its mount's root is not its file system's), `..` leads
/// to the mount point's parent: the directories above the bound directory itself, found
/// through another mount of the same file system, are added too (so that a bind mount of
/// `DST/mid` does not hide that `DST` holds what lies below it).
fn up_from(
    fd: OwnedFd,
    parent: &dyn Fn() -> Result<OwnedFd, Errno>,
) -> Result<Vec<(u64, u64)>, Errno> {
    let mut mounts = None;
    let mut ids = Vec::new();
    walk_up(fd, parent, &mut ids, &mut mounts, 0)?;
    Ok(ids)
}

/// What [`walk_up`] needs of a directory: (device, inode), and its mount's id and device
/// (major, minor).
type Look = ((u64, u64), u64, (u32, u32));

fn look(fd: &OwnedFd) -> Result<Look, Errno> {
    use rustix::fs::{statx, AtFlags, StatxFlags};
    let st = statx(
        fd,
        "",
        AtFlags::EMPTY_PATH,
        StatxFlags::INO | StatxFlags::MNT_ID,
    )?;
    let dev = (st.stx_dev_major, st.stx_dev_minor);
    let id = (rustix::fs::makedev(dev.0, dev.1), st.stx_ino);
    Ok((id, st.stx_mnt_id, dev))
}

/// Bind mounts within bind mounts are followed this deep at most.
const MAX_BIND_DEPTH: u32 = 8;

fn walk_up(
    fd: OwnedFd,
    parent: &dyn Fn() -> Result<OwnedFd, Errno>,
    ids: &mut Vec<(u64, u64)>,
    mounts: &mut Option<Vec<Mount>>,
    depth: u32,
) -> Result<(), Errno> {
    let (first, mut mount, mut dev) = look(&fd)?;
    let start = ids.len();
    ids.push(first);
    let (mut at, mut at_id) = (fd, first);
    while ids.len() < MAX_DEPTH {
        let up = match rustix::fs::openat(
            &at,
            "..",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(p) => p,
            // A file has no `..`: its directory is reached by the path the caller gave.
            Err(Errno::NOTDIR) if ids.len() == start + 1 => {
                let dir = parent()?;
                return walk_up(dir, &|| Err(Errno::NOTDIR), ids, mounts, depth);
            }
            Err(e) => return Err(e),
        };
        let (pid, pmount, pdev) = look(&up)?;
        let top = pid == at_id;
        if pmount != mount || top {
            // `at` is the root of its mount: if that mount shows a directory below its file
            // system's root, that directory's own parents are reached through another mount.
            if depth < MAX_BIND_DEPTH {
                if let Some(real) = bound_directory(mount, dev, mounts) {
                    let mut more = Vec::new();
                    if walk_up(real, &|| Err(Errno::NOTDIR), &mut more, mounts, depth + 1).is_ok() {
                        for id in more {
                            if !ids.contains(&id) && ids.len() < MAX_DEPTH {
                                ids.push(id);
                            }
                        }
                    }
                }
            }
        }
        if top {
            break;
        }
        if !ids.contains(&pid) {
            ids.push(pid);
        }
        (at, at_id, mount, dev) = (up, pid, pmount, pdev);
    }
    Ok(())
}

/// A line of `/proc/self/mountinfo`: a mount's id, its file system's device, the directory of
/// that file system it shows, and where.
struct Mount {
    id: u64,
    dev: (u32, u32),
    root: Vec<u8>,
    point: Vec<u8>,
}

/// This process's mounts (none if they cannot be read).
fn read_mounts() -> Vec<Mount> {
    let Ok(text) = std::fs::read("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.split(|&b| b == b'\n')
        .filter_map(|line| {
            let mut f = line.split(|&b| b == b' ');
            let id = std::str::from_utf8(f.next()?).ok()?.parse().ok()?;
            let _parent = f.next()?;
            let (major, minor) = std::str::from_utf8(f.next()?).ok()?.split_once(':')?;
            let dev = (major.parse().ok()?, minor.parse().ok()?);
            let root = unescape(f.next()?);
            let point = unescape(f.next()?);
            Some(Mount {
                id,
                dev,
                root,
                point,
            })
        })
        .collect()
}

/// A mountinfo field with its `\NNN` (octal) escapes undone.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (field[i], octal) {
            (b'\\', Some(d)) => {
                out.push(
                    d.iter()
                        .fold(0u8, |n, c| n.wrapping_mul(8).wrapping_add(c - b'0')),
                );
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// The directory the mount `mount` (of device `dev`) shows, opened through another mount of
/// the same file system that shows a directory above it; `None` when the mount shows its file
/// system's root, or no other mount reaches the directory.
fn bound_directory(
    mount: u64,
    dev: (u32, u32),
    mounts: &mut Option<Vec<Mount>>,
) -> Option<OwnedFd> {
    let mounts = mounts.get_or_insert_with(read_mounts);
    let this = mounts.iter().find(|m| m.id == mount)?;
    if this.root == b"/" {
        return None;
    }
    mounts
        .iter()
        .filter(|m| m.id != mount && m.dev == dev)
        .filter_map(|m| {
            let rest = this.root.strip_prefix(m.root.as_slice())?;
            let rest = match m.root.as_slice() {
                b"/" => rest,
                _ if rest.is_empty() || rest.starts_with(b"/") => rest,
                _ => return None,
            };
            Some((m.root.len(), [m.point.as_slice(), b"/", rest].concat()))
        })
        // The mount showing the most of the file system first (its root the shortest).
        .min_by_key(|(len, _)| *len)
        .and_then(|(_, path)| {
            let path = std::ffi::OsStr::from_bytes(&path);
            open_path(Path::new(path)).ok()
        })
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
    fn a_bind_mount_of_a_directory_below_another_shows_that_one_above_it() {
        let t = tempfile::tempdir().unwrap();
        let (top, view) = (t.path().join("top"), t.path().join("view"));
        std::fs::create_dir_all(top.join("mid/sub")).unwrap();
        std::fs::create_dir_all(&view).unwrap();
        let mounted = std::process::Command::new("mount")
            .arg("--bind")
            .args([top.join("mid"), view.clone()])
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: cannot bind-mount (needs root)");
            return;
        }
        let sub = of_local(&view.join("sub"));
        let top_a = of_local(&top);
        let _ = std::process::Command::new("umount").arg(&view).status();
        assert!(sub.unwrap().is_within(&top_a.unwrap()));
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(br"/a\040b\011c"), b"/a b\tc");
        assert_eq!(unescape(br"/plain"), b"/plain");
    }

    #[test]
    fn the_boot_id_is_read() {
        assert!(boot_id().is_some_and(|id| id != [0; 16]));
    }
}
