//! Parallel tree scanner: large-buffer `getdents64` and `statx` per entry, several threads
//! sharing one stack of directories (depth first), results sent one listing at a time over a
//! bounded channel so memory stays bounded however large the tree: a listing is a directory's
//! entries, or a piece of at most [`MAX_LISTING`] of them for a larger directory, so that a
//! huge (or hostile) directory is never held in memory whole.
//!
//! Entries of a listing are sorted by inode number, a cheap proxy for where their data lies on
//! disk. Symlinks are reported with their target and never followed.
//!
//! [`scan_selected`] applies a [`Selection`]: entries its rules exclude are left out and an
//! excluded directory is neither opened nor descended into; with a list of paths
//! (`--files-from`) only those paths (and the directories leading to them) are examined.

use crate::attrs::Attrs;
use crate::error::StoreError;
use crate::filter::{Filter, Selection};
use crate::root::Root;
use crate::sync::{lock, unpoisoned};
use crossbeam_channel::Sender;
use rustix::fs::{statx, AtFlags, FileType, RawDir, StatxFlags};
use std::ffi::OsStr;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Condvar, Mutex};

/// Kinds of entries a transfer copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryType {
    File,
    Dir,
    Symlink,
    /// Devices, sockets and FIFOs ([`ScanEntry::special`] says which), and entries that
    /// could not be examined ([`ScanEntry::error`]).
    Special,
}

/// One scanned entry.
#[derive(Debug, Clone)]
pub struct ScanEntry {
    /// Path relative to the scan root (empty for the root itself).
    pub path: Vec<u8>,
    pub kind: EntryType,
    pub size: u64,
    pub attrs: Attrs,
    pub ino: u64,
    /// The device the entry is on and how many names its inode has: files of one device and
    /// inode with more than one name are hard links of each other (`-H`).
    pub dev: u64,
    pub nlink: u32,
    /// Tells this version of a regular file from another of the same size and mtime (one
    /// written in place with its mtime put back, or put in its place by a rename): a digest
    /// of its inode number and change time, which no user can set. Never 0 for an entry
    /// scanned here; 0 where unknown (an entry a listing described).
    pub version: u64,
    pub link_target: Option<Vec<u8>>,
    /// What a [`EntryType::Special`] entry is (`None` for every other kind, and for an entry
    /// that could not be examined).
    pub special: Option<crate::Special>,
    /// Set when the entry could not be examined; the rest of its fields are zero.
    pub error: Option<String>,
}

impl ScanEntry {
    /// The directory part of `path`.
    pub fn parent(&self) -> &[u8] {
        crate::relpath::split_parent(&self.path).0
    }
    /// The final name in `path`.
    pub fn name(&self) -> &[u8] {
        crate::relpath::split_parent(&self.path).1
    }
}

/// Scanner settings.
#[derive(Debug, Clone, Copy)]
pub struct ScanOptions {
    pub threads: usize,
    /// Bytes of the getdents64 buffer per thread.
    pub dirent_buffer: usize,
    /// Most entries in one listing ([`MAX_LISTING`]).
    pub max_listing: usize,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            threads: 4,
            dirent_buffer: 256 << 10,
            max_listing: MAX_LISTING,
        }
    }
}

/// Most entries in one listing: a larger directory is listed and sent in pieces of this many
/// (each sorted by inode), so that what one directory pins in memory is bounded (about
/// 200 bytes an entry: 1.6 MB a piece) however many entries it has. Directories up to this
/// size are sent whole, as one inode-sorted listing.
pub const MAX_LISTING: usize = 8192;

struct Work {
    stack: Vec<Vec<u8>>,
    active: usize,
    stop: bool,
}

/// Scans the tree under `root`, sending each directory's entries as one `Vec` (in pieces of at
/// most [`MAX_LISTING`]; the root directory's own entry first, a directory's entry before its
/// own entries). Returns when the whole tree was visited or the receiver hung up.
pub fn scan(root: &Root, options: ScanOptions, out: Sender<Vec<ScanEntry>>) {
    scan_selected(root, options, &Selection::default(), out)
}

/// [`scan`], leaving out what `selection` does not select (see the module comment).
pub fn scan_selected(
    root: &Root,
    options: ScanOptions,
    selection: &Selection,
    out: Sender<Vec<ScanEntry>>,
) {
    if let Some(listed) = &selection.files_from {
        return scan_listed(root, listed, &selection.filter, out);
    }
    let filter = &selection.filter;
    let root_entry = stat_entry(root.fd(), "", Vec::new(), AtFlags::EMPTY_PATH);
    let is_dir = root_entry.kind == EntryType::Dir;
    let root_device = root_entry.dev;
    if out.send(vec![root_entry]).is_err() || !is_dir {
        return;
    }
    let work = Mutex::new(Work {
        stack: vec![Vec::new()],
        active: 0,
        stop: false,
    });
    let ready = Condvar::new();
    let same_device = selection.one_file_system.then_some(root_device);
    std::thread::scope(|s| {
        for _ in 0..options.threads.max(1) {
            s.spawn(|| worker(root, options, filter, same_device, &work, &ready, &out));
        }
    });
}

/// One scanning thread. `same_device`: with `-x`, the root's device; a directory on another
/// is sent but not entered.
fn worker(
    root: &Root,
    options: ScanOptions,
    filter: &Filter,
    same_device: Option<u64>,
    work: &Mutex<Work>,
    ready: &Condvar,
    out: &Sender<Vec<ScanEntry>>,
) {
    let mut buf: Vec<MaybeUninit<u8>> = Vec::with_capacity(options.dirent_buffer);
    buf.resize(options.dirent_buffer, MaybeUninit::uninit());
    loop {
        let dir = {
            let mut w = lock(work);
            loop {
                if w.stop {
                    return;
                }
                if let Some(d) = w.stack.pop() {
                    w.active += 1;
                    break d;
                }
                if w.active == 0 {
                    ready.notify_all();
                    return;
                }
                w = unpoisoned(ready.wait(w));
            }
        };
        // Each piece's subdirectories are there for any thread to take as soon as it is sent.
        list_dir(
            root,
            &dir,
            &mut buf,
            options.max_listing,
            filter,
            |entries, mut subdirs| {
                if let Some(device) = same_device {
                    // Mount points are few: a short list of those to leave.
                    let elsewhere: Vec<&[u8]> = entries
                        .iter()
                        .filter(|e| e.kind == EntryType::Dir && e.dev != device)
                        .map(|e| e.path.as_slice())
                        .collect();
                    if !elsewhere.is_empty() {
                        subdirs.retain(|d| !elsewhere.contains(&d.as_slice()));
                    }
                }
                let sent = out.send(entries).is_ok();
                let mut w = lock(work);
                if !sent {
                    w.stop = true;
                }
                w.stack.extend(subdirs.into_iter().rev());
                ready.notify_all();
                !w.stop
            },
        );
        let mut w = lock(work);
        w.active -= 1;
        ready.notify_all();
    }
}

/// Lists the entries of directory `dir` below `root` (not recursive), sorted by inode. The
/// whole directory: for one that may be large, see [`list_directory_in_pieces`].
pub fn list_directory(root: &Root, dir: &[u8]) -> Vec<ScanEntry> {
    let mut all = Vec::new();
    list_directory_in_pieces(root, dir, |piece| {
        all.extend(piece);
        true
    });
    all
}

/// Lists the entries of directory `dir` below `root` (not recursive), calling `each` with
/// pieces of at most [`MAX_LISTING`] entries, each sorted by inode, until it returns false.
pub fn list_directory_in_pieces(
    root: &Root,
    dir: &[u8],
    mut each: impl FnMut(Vec<ScanEntry>) -> bool,
) {
    let mut buf = vec![MaybeUninit::uninit(); ScanOptions::default().dirent_buffer];
    let all = &Filter::default();
    list_dir(root, dir, &mut buf, MAX_LISTING, all, |entries, _| {
        each(entries)
    });
}

/// Why a listed path (`--files-from`, a plan's shard) failed when the source no longer has it.
pub const LISTED_NOT_FOUND: &str = "listed (--files-from, or a plan), but not at the source now";

/// Examines `rel` below `root` without following a final symlink (`lstat`).
pub fn stat_path(root: &Root, rel: &[u8]) -> Result<ScanEntry, StoreError> {
    let entry = if rel.is_empty() {
        try_stat_entry(root.fd(), "", Vec::new(), AtFlags::EMPTY_PATH)
    } else {
        let (dir, name) = crate::relpath::split_parent(rel);
        let fd = root
            .open_dir(dir)
            .map_err(|e| StoreError::new("stat", rel, crate::root::escape_error(e)))?;
        try_stat_entry(
            &fd,
            OsStr::from_bytes(name),
            rel.to_vec(),
            AtFlags::SYMLINK_NOFOLLOW,
        )
    };
    entry
}

/// Lists one directory, calling `emit` with its entries (by inode) and its subdirectories to
/// visit, in pieces of at most `max` entries, until it returns false. An entry removed between
/// the listing and its `statx` (a writer's short-lived name, a file deleted meanwhile), or a
/// directory removed before it is opened, is left out: the scan sees the tree as it is when
/// each entry is examined. So is an entry `filter` excludes, decided from the directory
/// entry's type where the file system gives it (without a `statx`). A directory that cannot
/// be opened or read gives one failed entry (after the pieces read before the failure).
fn list_dir(
    root: &Root,
    dir: &[u8],
    buf: &mut [MaybeUninit<u8>],
    max: usize,
    filter: &Filter,
    mut emit: impl FnMut(Vec<ScanEntry>, Vec<Vec<u8>>) -> bool,
) {
    let fd: OwnedFd = match root.open_dir(dir) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) if !dir.is_empty() => return,
        Err(e) => {
            let err = StoreError::new("open directory", dir, crate::root::escape_error(e));
            emit(vec![failed(dir.to_vec(), err)], Vec::new());
            return;
        }
    };
    let max = max.max(1);
    let mut names: Vec<(u64, Vec<u8>, FileType)> = Vec::new();
    let mut iter = RawDir::new(&fd, buf);
    loop {
        let item = iter.next();
        let end = item.is_none();
        match item {
            Some(Ok(entry)) => {
                let name = entry.file_name().to_bytes();
                if name != b"." && name != b".." {
                    names.push((entry.ino(), name.to_vec(), entry.file_type()));
                }
            }
            Some(Err(e)) => {
                let err = StoreError::new("read directory", dir, e);
                emit(vec![failed(dir.to_vec(), err)], Vec::new());
                return;
            }
            None => {}
        }
        if names.len() >= max || (end && !names.is_empty()) {
            let (entries, subdirs) = examine(&fd, dir, std::mem::take(&mut names), filter);
            // Every entry of the piece excluded: nothing to send.
            if !entries.is_empty() && !emit(entries, subdirs) {
                return;
            }
        }
        if end {
            return;
        }
    }
}

/// `statx`es the `names` of directory `dir` (open as `fd`) in inode order, leaving out what
/// `filter` excludes; returns their entries and the subdirectories among them.
fn examine(
    fd: &OwnedFd,
    dir: &[u8],
    mut names: Vec<(u64, Vec<u8>, FileType)>,
    filter: &Filter,
) -> (Vec<ScanEntry>, Vec<Vec<u8>>) {
    names.sort_unstable_by_key(|(ino, _, _)| *ino);
    let mut entries = Vec::with_capacity(names.len());
    let mut subdirs = Vec::new();
    for (_, name, file_type) in names {
        let path = crate::relpath::join(dir, &name);
        if path.len() > Root::MAX_PATH {
            // Nothing can open it: one failure, named by its directory (its own path is too
            // long to travel), and nothing below it is visited.
            entries.push(failed_with(dir.to_vec(), too_long(&name, path.len())));
            continue;
        }
        let known = file_type != FileType::Unknown;
        if known && filter.excluded(&path, file_type == FileType::Directory) {
            continue;
        }
        let flags = AtFlags::SYMLINK_NOFOLLOW;
        let entry = match try_stat_entry(fd, OsStr::from_bytes(&name), path.clone(), flags) {
            Ok(entry) => entry,
            Err(e) if e.errno() == Some(rustix::io::Errno::NOENT) => continue,
            Err(e) => failed(path, e),
        };
        if !known && filter.excluded(&entry.path, entry.kind == EntryType::Dir) {
            continue;
        }
        if entry.kind == EntryType::Dir && entry.error.is_none() {
            subdirs.push(entry.path.clone());
        }
        entries.push(entry);
    }
    (entries, subdirs)
}

/// Listed entries sent in one message.
const LISTED_PER_MESSAGE: usize = 256;

/// The scan of a `--files-from` list: the root, then each listed path (sorted) behind the
/// directories leading to it, each examined once; `filter` applies to the listed paths (not
/// to the directories leading to them). A listed path that does not exist is a failed entry.
fn scan_listed(root: &Root, listed: &[Vec<u8>], filter: &Filter, out: Sender<Vec<ScanEntry>>) {
    let root_entry = stat_entry(root.fd(), "", Vec::new(), AtFlags::EMPTY_PATH);
    let is_dir = root_entry.kind == EntryType::Dir;
    if out.send(vec![root_entry]).is_err() || !is_dir {
        return;
    }
    let mut seen_dirs: std::collections::HashSet<Vec<u8>> = Default::default();
    let mut pending = Vec::new();
    for path in listed {
        // A listed path below a directory the rules leave out is not copied (as rsync: an
        // excluded directory is not descended into, listed or not).
        if crate::relpath::ancestors(path).any(|dir| filter.excluded(dir, true)) {
            continue;
        }
        let stat = stat_path(root, path);
        // A listed path the rules leave out is not copied, nor are the directories leading
        // to it made for it (as rsync; review 2026-11-30 of the filters, F5).
        if let Ok(e) = &stat {
            if filter.excluded(&e.path, e.kind == EntryType::Dir) {
                continue;
            }
        }
        for dir in crate::relpath::ancestors(path) {
            if seen_dirs.insert(dir.to_vec()) {
                // A parent that is missing or not a directory: the listed path reports it.
                if let Ok(e) = stat_path(root, dir) {
                    if e.kind == EntryType::Dir {
                        pending.push(e);
                    }
                }
            }
        }
        match stat {
            Ok(e) if e.kind == EntryType::Dir && !seen_dirs.insert(e.path.clone()) => {}
            Ok(e) => pending.push(e),
            Err(e) if e.errno() == Some(rustix::io::Errno::NOENT) => {
                let err = StoreError::other("stat", path, LISTED_NOT_FOUND);
                pending.push(failed(path.clone(), err));
            }
            Err(e) => pending.push(failed(path.clone(), e)),
        }
        if pending.len() >= LISTED_PER_MESSAGE && out.send(std::mem::take(&mut pending)).is_err() {
            return;
        }
    }
    if !pending.is_empty() {
        let _ = out.send(pending);
    }
}

fn stat_entry<P: rustix::path::Arg, Fd: std::os::fd::AsFd>(
    dir: Fd,
    name: P,
    path: Vec<u8>,
    flags: AtFlags,
) -> ScanEntry {
    let fallback = path.clone();
    try_stat_entry(dir, name, path, flags).unwrap_or_else(|err| failed(fallback, err))
}

fn try_stat_entry<P: rustix::path::Arg, Fd: std::os::fd::AsFd>(
    dir: Fd,
    name: P,
    path: Vec<u8>,
    flags: AtFlags,
) -> Result<ScanEntry, StoreError> {
    let mask = StatxFlags::TYPE
        | StatxFlags::MODE
        | StatxFlags::SIZE
        | StatxFlags::MTIME
        | StatxFlags::CTIME
        | StatxFlags::INO
        | StatxFlags::NLINK
        | StatxFlags::UID
        | StatxFlags::GID;
    let st = match statx(&dir, name, flags, mask) {
        Ok(st) => st,
        Err(e) => return Err(StoreError::new("stat", &path, e)),
    };
    let kind = match FileType::from_raw_mode(st.stx_mode as u32) {
        FileType::RegularFile => EntryType::File,
        FileType::Directory => EntryType::Dir,
        FileType::Symlink => EntryType::Symlink,
        _ => EntryType::Special,
    };
    let mut entry = ScanEntry {
        path,
        kind,
        size: if kind == EntryType::File {
            st.stx_size
        } else {
            0
        },
        attrs: Attrs {
            mode: st.stx_mode as u32 & 0o7777,
            mtime_sec: st.stx_mtime.tv_sec,
            mtime_nsec: st.stx_mtime.tv_nsec,
            uid: st.stx_uid,
            gid: st.stx_gid,
        },
        ino: st.stx_ino,
        dev: u64::from(st.stx_dev_major) << 32 | u64::from(st.stx_dev_minor),
        nlink: st.stx_nlink,
        version: version_of(st.stx_ino, &st.stx_ctime),
        link_target: None,
        special: crate::Special::of(
            FileType::from_raw_mode(st.stx_mode as u32),
            st.stx_rdev_major,
            st.stx_rdev_minor,
        ),
        error: None,
    };
    if kind == EntryType::Symlink {
        match rustix::fs::readlinkat(&dir, OsStr::from_bytes(entry.name()), Vec::new()) {
            Ok(target) => entry.link_target = Some(target.into_bytes()),
            Err(e) => return Err(StoreError::new("read link", &entry.path, e)),
        }
    }
    Ok(entry)
}

/// Why the entry `name` of a directory is not copied: its path below the root would be `len`
/// bytes long.
fn too_long(name: &[u8], len: usize) -> String {
    format!(
        "'{}' in this directory is left out: its path is {len} bytes long, more than the {} a \
         path below the root may have",
        crate::relpath::display_path(name),
        Root::MAX_PATH
    )
}

/// [`ScanEntry::version`] of the inode `ino` changed last at `ctime`.
pub fn version_of(ino: u64, ctime: &rustix::fs::StatxTimestamp) -> u64 {
    let mut bytes = [0u8; 20];
    bytes[..8].copy_from_slice(&ino.to_le_bytes());
    bytes[8..16].copy_from_slice(&ctime.tv_sec.to_le_bytes());
    bytes[16..].copy_from_slice(&ctime.tv_nsec.to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(&bytes).max(1)
}

fn failed(path: Vec<u8>, err: StoreError) -> ScanEntry {
    failed_with(path, err.to_string())
}

/// A failed entry at `path`, for the reason `error`.
pub(crate) fn failed_with(path: Vec<u8>, error: String) -> ScanEntry {
    ScanEntry {
        path,
        kind: EntryType::Special,
        size: 0,
        attrs: Attrs::default(),
        ino: 0,
        dev: 0,
        nlink: 0,
        version: 0,
        link_target: None,
        special: None,
        error: Some(error),
    }
}

/// Examines a single file `name` in `parent` as the root of a transfer (its path is empty).
pub fn stat_root_file(parent: &Root, name: &[u8]) -> ScanEntry {
    let mut entry = stat_entry(
        parent.fd(),
        OsStr::from_bytes(name),
        name.to_vec(),
        AtFlags::SYMLINK_NOFOLLOW,
    );
    entry.path.clear();
    entry
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A directory larger than a listing is sent in pieces, each sorted by inode, with every
    /// entry once, and a subdirectory's entry before its own entries.
    #[test]
    fn a_large_directory_is_sent_in_pieces_never_whole() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::create_dir(&big).unwrap();
        let mut expected = BTreeSet::from([String::new(), "big".to_string()]);
        for i in 0..1000 {
            if i % 100 == 7 {
                std::fs::create_dir(big.join(format!("s{i}"))).unwrap();
                std::fs::write(big.join(format!("s{i}/inner")), b"x").unwrap();
                expected.insert(format!("big/s{i}"));
                expected.insert(format!("big/s{i}/inner"));
            } else {
                std::fs::write(big.join(format!("f{i}")), b"x").unwrap();
                expected.insert(format!("big/f{i}"));
            }
        }
        for threads in [1, 3] {
            let root = Root::open(dir.path()).unwrap();
            let (tx, rx) = crossbeam_channel::bounded(2);
            let options = ScanOptions {
                threads,
                max_listing: 64,
                ..ScanOptions::default()
            };
            let handle = std::thread::spawn(move || scan(&root, options, tx));
            let mut seen = BTreeSet::new();
            let mut pieces = 0;
            for listing in rx {
                assert!(listing.len() <= 64, "a listing of {}", listing.len());
                assert!(listing.windows(2).all(|w| w[0].ino <= w[1].ino));
                for e in listing {
                    assert!(e.error.is_none(), "{:?}", e.error);
                    let parent = String::from_utf8(e.parent().to_vec()).unwrap();
                    assert!(e.path.is_empty() || seen.contains(&parent), "{parent}");
                    assert!(seen.insert(String::from_utf8(e.path).unwrap()));
                }
                pieces += 1;
            }
            handle.join().unwrap();
            assert_eq!(seen, expected);
            assert!(pieces >= 1000 / 64, "{pieces} listings");
        }
        // The same for one directory listed alone.
        let root = Root::open(dir.path()).unwrap();
        let mut sizes = Vec::new();
        list_directory_in_pieces(&root, b"big", |piece| {
            sizes.push(piece.len());
            true
        });
        assert_eq!(sizes.iter().sum::<usize>(), 1000);
        assert!(sizes.iter().all(|&n| n <= MAX_LISTING));
    }

    #[test]
    fn parallel_scan_finds_every_entry_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut expected = BTreeSet::new();
        for d in 0..20 {
            let sub = format!("d{d}/e{}", d % 3);
            std::fs::create_dir_all(dir.path().join(&sub)).unwrap();
            expected.insert(format!("d{d}"));
            expected.insert(sub.clone());
            for f in 0..15 {
                let p = format!("{sub}/f{f}");
                std::fs::write(dir.path().join(&p), b"x").unwrap();
                expected.insert(p);
            }
        }
        std::os::unix::fs::symlink("/nowhere", dir.path().join("link")).unwrap();
        expected.insert("link".into());
        expected.insert(String::new());
        for threads in [1, 4] {
            let root = Root::open(dir.path()).unwrap();
            let (tx, rx) = crossbeam_channel::bounded(2);
            let handle = std::thread::spawn(move || {
                scan(
                    &root,
                    ScanOptions {
                        threads,
                        dirent_buffer: 4096,
                        ..ScanOptions::default()
                    },
                    tx,
                )
            });
            let mut seen = BTreeSet::new();
            for listing in rx {
                for e in listing {
                    assert!(e.error.is_none(), "{:?}", e.error);
                    if e.path == b"link" {
                        assert_eq!(e.kind, EntryType::Symlink);
                        assert_eq!(e.link_target.as_deref(), Some(&b"/nowhere"[..]));
                    }
                    assert!(seen.insert(String::from_utf8(e.path).unwrap()));
                }
            }
            handle.join().unwrap();
            assert_eq!(seen, expected);
        }
    }
}
