//! Tree comparison: checks that a copy equals its source (paths, types, content, permission
//! bits, mtimes, link targets; on request extended attributes, ACLs, owners and hard links),
//! without following symlinks. Used by `sprat verify`, the demo and benchmark scripts to
//! prove that a copy is exact.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What was compared.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TreeSummary {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// FIFOs, sockets and devices.
    pub specials: u64,
    pub bytes: u64,
}

/// Most differences listed.
const MAX_DIFFERENCES: usize = 50;

/// What [`compare_trees_also`] compares beyond content, types, modes, mtimes and link
/// targets (what `sprat cp` keeps with `-X`, `-A`, `-H` and as root).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AlsoCompare {
    /// Extended attributes of these scopes ([`crate::xattr::USER`] ...; 0: none).
    pub xattrs: u8,
    /// Owners and groups (numeric ids).
    pub owners: bool,
    /// Which regular files are hard links of each other.
    pub hard_links: bool,
}

/// The scopes of extended attributes a copy keeps with `-X` (`user.*`, and as root
/// `trusted.*` and `security.*`) and `-A` (ACLs), for [`AlsoCompare::xattrs`].
pub fn xattr_scopes(xattrs: bool, acls: bool) -> u8 {
    let mut scope = 0;
    if xattrs {
        scope |= crate::xattr::USER;
        if crate::owner::running_as_root() {
            scope |= crate::xattr::SYSTEM;
        }
    }
    if acls {
        scope |= crate::xattr::ACL;
    }
    scope
}

/// Compares tree `b` with tree `a`. `with_root_attrs` also compares the roots' own mode and
/// mtime. Returns the summary of `a`, or the differences found (at most 50).
pub fn compare_trees(
    a: &Path,
    b: &Path,
    with_root_attrs: bool,
) -> Result<TreeSummary, Vec<String>> {
    compare_trees_also(a, b, with_root_attrs, AlsoCompare::default())
}

/// [`compare_trees`], comparing `also` too.
pub fn compare_trees_also(
    a: &Path,
    b: &Path,
    with_root_attrs: bool,
    also: AlsoCompare,
) -> Result<TreeSummary, Vec<String>> {
    // Hard links: each linked inode of one tree, with the inode and path it has in the other.
    let mut links_a: HashMap<(u64, u64), ((u64, u64), String)> = HashMap::new();
    let mut links_b: HashMap<(u64, u64), ((u64, u64), String)> = HashMap::new();
    let mut diffs = Vec::new();
    let mut summary = TreeSummary::default();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        if diffs.len() >= MAX_DIFFERENCES {
            break;
        }
        let (pa, pb) = (a.join(&rel), b.join(&rel));
        let shown = if rel.as_os_str().is_empty() {
            ".".into()
        } else {
            rel.display().to_string()
        };
        let (ma, mb) = match (fs::symlink_metadata(&pa), fs::symlink_metadata(&pb)) {
            (Ok(ma), Ok(mb)) => (ma, mb),
            (Err(e), _) => {
                diffs.push(format!("{shown}: cannot read source: {e}"));
                continue;
            }
            (_, Err(_)) => {
                diffs.push(format!("{shown}: missing in the copy"));
                continue;
            }
        };
        let ta = ma.file_type();
        if ma.mode() & 0o170000 != mb.mode() & 0o170000 {
            diffs.push(format!(
                "{shown}: file type differs ({} != {})",
                type_name(ma.mode()),
                type_name(mb.mode())
            ));
            continue;
        }
        let is_root = rel.as_os_str().is_empty();
        if (!is_root || with_root_attrs)
            && !ta.is_symlink()
            && ma.mode() & 0o7777 != mb.mode() & 0o7777
        {
            diffs.push(format!(
                "{shown}: mode {:o} != {:o}",
                ma.mode() & 0o7777,
                mb.mode() & 0o7777
            ));
        }
        if (!is_root || with_root_attrs)
            && (ma.mtime(), ma.mtime_nsec()) != (mb.mtime(), mb.mtime_nsec())
        {
            diffs.push(format!(
                "{shown}: mtime {} != {}",
                seconds(ma.mtime(), ma.mtime_nsec()),
                seconds(mb.mtime(), mb.mtime_nsec())
            ));
        }
        if also.owners && (ma.uid(), ma.gid()) != (mb.uid(), mb.gid()) {
            diffs.push(format!(
                "{shown}: owner {}:{} != {}:{}",
                ma.uid(),
                ma.gid(),
                mb.uid(),
                mb.gid()
            ));
        }
        let special = !(ta.is_symlink() || ta.is_file() || ta.is_dir());
        if also.xattrs != 0 && !ta.is_symlink() {
            let read = |p: &Path| xattrs_of(p, also.xattrs, special);
            match (read(&pa), read(&pb)) {
                (Ok(x), Ok(y)) if x == y => {}
                (Ok(x), Ok(y)) => diffs.push(format!(
                    "{shown}: extended attributes differ: {}",
                    differing(&x, &y)
                )),
                (Err(e), _) | (_, Err(e)) => {
                    diffs.push(format!("{shown}: cannot read extended attributes: {e}"))
                }
            }
        }
        if also.hard_links && (ta.is_file() || special) {
            let (ia, ib) = ((ma.dev(), ma.ino()), (mb.dev(), mb.ino()));
            for (map, mine, theirs, linked, side) in [
                (&mut links_a, ia, ib, ma.nlink() > 1, "source"),
                (&mut links_b, ib, ia, mb.nlink() > 1, "copy"),
            ] {
                if !linked {
                    continue;
                }
                match map.get(&mine) {
                    Some((other, first)) if *other != theirs => diffs.push(format!(
                        "{shown}: a hard link of {first} in the {side}, not in the other tree"
                    )),
                    Some(_) => {}
                    None => {
                        map.insert(mine, (theirs, shown.clone()));
                    }
                }
            }
        }
        if special {
            summary.specials += 1;
            if ma.rdev() != mb.rdev() {
                let number =
                    |rdev| format!("{},{}", rustix::fs::major(rdev), rustix::fs::minor(rdev));
                diffs.push(format!(
                    "{shown}: device {} != {}",
                    number(ma.rdev()),
                    number(mb.rdev())
                ));
            }
        } else if ta.is_symlink() {
            summary.symlinks += 1;
            match (fs::read_link(&pa), fs::read_link(&pb)) {
                (Ok(x), Ok(y)) if x == y => {}
                _ => diffs.push(format!("{shown}: link target differs")),
            }
        } else if ta.is_file() {
            summary.files += 1;
            summary.bytes += ma.len();
            if ma.len() != mb.len() {
                diffs.push(format!("{shown}: size {} != {}", ma.len(), mb.len()));
            } else if !same_content(&pa, &pb) {
                diffs.push(format!("{shown}: content differs"));
            }
        } else if ta.is_dir() {
            summary.dirs += 1;
            let (la, lb) = match (list(&pa), list(&pb)) {
                (Ok(la), Ok(lb)) => (la, lb),
                _ => {
                    diffs.push(format!("{shown}: cannot list directory"));
                    continue;
                }
            };
            for name in lb.keys().filter(|n| !la.contains_key(*n)) {
                diffs.push(format!(
                    "{}: extra in the copy",
                    rel.join(&lb[name]).display()
                ));
            }
            for name in la.values() {
                stack.push(rel.join(name));
            }
        }
    }
    if diffs.is_empty() {
        Ok(summary)
    } else {
        Err(diffs)
    }
}

/// The extended attributes of `p` in `scope` (a file or directory, never through a symlink).
/// The file type of `mode` (`st_mode`) in words.
fn type_name(mode: u32) -> &'static str {
    match mode & 0o170000 {
        0o100000 => "regular file",
        0o040000 => "directory",
        0o120000 => "symlink",
        0o010000 => "FIFO",
        0o140000 => "socket",
        0o020000 => "character device",
        0o060000 => "block device",
        _ => "unknown type",
    }
}

fn xattrs_of(p: &Path, scope: u8, special: bool) -> Result<crate::xattr::Xattrs, String> {
    use rustix::fs::{Mode, OFlags};
    // A FIFO, socket or device is never opened (see `crate::xattr::Unopened`).
    let flags = match special {
        true => OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        false => OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
    };
    let fd = rustix::fs::open(p, flags, Mode::empty()).map_err(|e| e.to_string())?;
    let read = match special {
        true => crate::xattr::read(&crate::xattr::Unopened::new(fd), scope),
        false => crate::xattr::read(&fd, scope),
    };
    read.map_err(|e| match e {
        crate::xattr::ReadError::Os(e) => e.to_string(),
        crate::xattr::ReadError::TooLarge(n) => format!("{n} bytes, more than a copy carries"),
    })
}

/// The names whose presence or value differs between `x` and `y`, for a message.
fn differing(x: &crate::xattr::Xattrs, y: &crate::xattr::Xattrs) -> String {
    let (mx, my): (BTreeMap<_, _>, BTreeMap<_, _>) = (
        x.iter().map(|(n, v)| (n, v)).collect(),
        y.iter().map(|(n, v)| (n, v)).collect(),
    );
    let mut names: Vec<&Vec<u8>> = mx.keys().chain(my.keys()).copied().collect();
    names.sort();
    names.dedup();
    let shown: Vec<String> = names
        .into_iter()
        .filter(|n| mx.get(n) != my.get(n))
        .map(|n| {
            let what = match (mx.contains_key(n), my.contains_key(n)) {
                (true, false) => "missing in the copy",
                (false, true) => "extra in the copy",
                _ => "value differs",
            };
            format!("{} ({what})", crate::relpath::display_bytes(n))
        })
        .collect();
    shown.join(", ")
}

fn list(dir: &Path) -> std::io::Result<BTreeMap<Vec<u8>, std::ffi::OsString>> {
    let mut out = BTreeMap::new();
    for e in fs::read_dir(dir)? {
        let name = e?.file_name();
        out.insert(name.as_bytes().to_vec(), name);
    }
    Ok(out)
}

/// Opens a file to compare: never through a symlink nor waiting on a FIFO, and only if it is
/// still a regular file (one swapped for a FIFO or a device since it was examined differs).
fn open_regular(p: &Path) -> Option<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(p)
        .ok()?;
    f.metadata().ok()?.is_file().then_some(f)
}

fn same_content(a: &Path, b: &Path) -> bool {
    let (Some(mut fa), Some(mut fb)) = (open_regular(a), open_regular(b)) else {
        return false;
    };
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = match fa.read(&mut ba) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if n == 0 {
            return fb.read(&mut bb[..1]).map(|m| m == 0).unwrap_or(false);
        }
        if fb.read_exact(&mut bb[..n]).is_err() || ba[..n] != bb[..n] {
            return false;
        }
    }
}

/// A time as `stat -c %.9Y` prints it: seconds and nanoseconds since 1970 as one signed
/// decimal (`sec`, `nsec` as the kernel keeps them: whole seconds down, nanoseconds up).
fn seconds(sec: i64, nsec: i64) -> String {
    if sec < 0 && nsec > 0 {
        format!("-{}.{:09}", -(sec + 1), 1_000_000_000 - nsec)
    } else {
        format!("{sec}.{nsec:09}")
    }
}

#[cfg(test)]
mod seconds_tests {
    #[test]
    fn times_before_1970_print_as_stat_prints_them() {
        assert_eq!(super::seconds(-1, 999_999_999), "-0.000000001");
        assert_eq!(super::seconds(-5_364_662_400, 123), "-5364662399.999999877");
        assert_eq!(super::seconds(-2, 0), "-2.000000000");
        assert_eq!(super::seconds(15, 7), "15.000000007");
    }
}
