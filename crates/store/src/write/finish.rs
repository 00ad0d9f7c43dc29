//! The end of a tree's writing: hard links, then every directory's owner, extended
//! attributes, mode and mtime ([`TreeWriter::finish`]).
//!
//! Hard links are made once every file is written (the first name of each file carries its
//! data), on several threads when there are many; a name with nothing in the way is linked
//! directly, any other through a temporary name renamed over it.
//! Directories are finished deepest first, one depth at a time, so that no directory loses
//! the search or write permission its subdirectories still need before they are done.
//! Directories of one depth do not depend on each other (setting a directory's attributes
//! does not change its parent's mtime), so a depth with many of them is shared among a few
//! threads: on a tree of many small directories this is the serial tail of every copy, after
//! the last file. A directory that already has the owner, mode or mtime it is to get (one
//! this writer created with them, or met as it should be) is not given them again (a
//! directory whose mtime is right keeps the atime it has). The common case, a directory
//! without extended attributes whose owner and mode are right, is not even opened: a `statx`
//! and a `utimensat` by its name in its parent (kept open), never through a symlink; any
//! other is opened and set through its descriptor.
//! A directory this writer (not root) cannot open or change as it is, one it owns with a mode
//! such as `0000`, is given the owner bits it needs first (see [`super::loosen`]), and then its
//! attributes as any other; the directories it made writable during the run that have no
//! attributes to get here are given back the modes they had, before their parents are
//! finished.

use super::{
    depth, os, owner_ids, rename_into_place, timestamps, DirRecord, TreeWriter, XattrUpdate,
    MAX_LISTED_ERRORS,
};
use crate::attrs::Attrs;
use crate::error::StoreError;
use crate::root::escape_error;
use crate::sync::lock;
use rustix::fs::{
    fchmod, fstat, futimens, linkat, statx, unlinkat, utimensat, AtFlags, FileType, Mode, Stat,
    Statx, StatxFlags,
};
use rustix::io::Errno;
use std::os::fd::OwnedFd;

/// At least this many directories of one depth, or hard links, are shared among threads (a
/// thread costs tens of microseconds to start, a directory or a link a few).
const PARALLEL_FROM: usize = 256;
/// At most this many threads finish one depth (the work is the file system's metadata).
const MAX_THREADS: usize = 8;

/// The first [`MAX_LISTED_ERRORS`] errors met, and how many more there were.
#[derive(Default)]
struct Errors {
    listed: Vec<StoreError>,
    more: u64,
}

impl Errors {
    fn record(&mut self, e: StoreError) {
        if self.listed.len() < MAX_LISTED_ERRORS {
            self.listed.push(e);
        } else {
            self.more += 1;
        }
    }

    fn absorb(&mut self, other: Errors) {
        self.more += other.more;
        for e in other.listed {
            self.record(e);
        }
    }
}

impl TreeWriter {
    /// Makes the hard links, then applies directory owners, extended attributes, modes and
    /// mtimes, deepest first. Returns the first [`MAX_LISTED_ERRORS`] errors met and how
    /// many more there were.
    pub fn finish(&self) -> (Vec<StoreError>, u64) {
        let links = last_of_each(std::mem::take(&mut *lock(&self.links)));
        let mut dirs: Vec<_> = std::mem::take(&mut *lock(&self.dirs)).into_iter().collect();
        dirs.sort_unstable_by(|a, b| depth(&b.0).cmp(&depth(&a.0)).then_with(|| b.0.cmp(&a.0)));
        let mut errors = Errors::default();
        // Links change their directories' mtimes: made before those are set.
        errors.absorb(in_parallel(
            &links,
            OpenDirs::default,
            |dirs, (path, target)| match self.make_hard_link(dirs, path, target) {
                Err(e)
                    if e.errno() == Some(Errno::ACCESS) && self.loosen_link_dirs(path, target) =>
                {
                    self.make_hard_link(dirs, path, target)
                }
                other => other,
            },
        ));
        for level in dirs.chunk_by(|a, b| depth(&a.0) == depth(&b.0)) {
            // Directories made writable below this depth, which get no attributes here.
            let deeper_than = Some(depth(&level[0].0));
            for e in self.restore_loosened(deeper_than, &dirs) {
                errors.record(e);
            }
            errors.absorb(in_parallel(
                level,
                OpenDirs::default,
                |open, (path, record)| self.finish_dir(open, path, record),
            ));
        }
        for e in self.restore_loosened(None, &dirs) {
            errors.record(e);
        }
        if self.durable {
            if let Err(e) = self.sync(b"") {
                errors.record(e);
            }
        }
        (errors.listed, errors.more)
    }

    /// Makes the directories of hard link `path` (to make an entry in) and of `target` (to
    /// look it up) usable where their modes refused this writer (see
    /// [`TreeWriter::loosen_path`]): whether to try the link again.
    fn loosen_link_dirs(&self, path: &[u8], target: &[u8]) -> bool {
        let (Ok(path), Ok(target)) = (self.target(path), self.target(target)) else {
            return false;
        };
        let (pdir, _) = crate::relpath::split_parent(path);
        let (tdir, _) = crate::relpath::split_parent(target);
        self.loosen_path(tdir, crate::perm::SEARCH) | self.loosen_path(pdir, crate::perm::CHANGE)
    }

    /// Makes `path` a hard link of the regular or special file at `target` (transfer paths),
    /// replacing what is at `path`; nothing to do when it is one already.
    fn make_hard_link(
        &self,
        dirs: &mut OpenDirs,
        path: &[u8],
        target: &[u8],
    ) -> Result<(), StoreError> {
        let (tdir, tname) = crate::relpath::split_parent(self.target(target)?);
        let (pdir, pname) = crate::relpath::split_parent(self.target(path)?);
        let (tfd, pfd) = dirs.open_pair(self, tdir, pdir)?;
        let wanted = StatxFlags::TYPE | StatxFlags::INO;
        let t = statx(tfd, os(tname), AtFlags::SYMLINK_NOFOLLOW, wanted)
            .map_err(|e| StoreError::new("hard link to", target, e))?;
        // A regular file, FIFO, socket or device: never a directory or a symlink.
        let linkable = matches!(
            FileType::from_raw_mode(t.stx_mode as u32),
            FileType::RegularFile
                | FileType::Fifo
                | FileType::Socket
                | FileType::CharacterDevice
                | FileType::BlockDevice
        );
        if !linkable {
            return Err(StoreError::other(
                "hard link",
                path,
                "what it links to at the destination is not a regular file or a special file",
            ));
        }
        // Linked under its name at once (the file it links to is whole already), unless
        // something has the name.
        match linkat(tfd, os(tname), pfd, os(pname), AtFlags::empty()) {
            Err(Errno::EXIST) => {}
            other => return other.map_err(|e| StoreError::new("hard link", path, e)),
        }
        if let Ok(p) = statx(pfd, os(pname), AtFlags::SYMLINK_NOFOLLOW, wanted) {
            let same_dev = (p.stx_dev_major, p.stx_dev_minor) == (t.stx_dev_major, t.stx_dev_minor);
            // `--ignore-existing`: what is there stays (see `TreeWriter::keep_existing`).
            if same_dev && p.stx_ino == t.stx_ino || self.keep_existing {
                return Ok(());
            }
        }
        let temp = self.temp_name(pname);
        let link = || linkat(tfd, os(tname), pfd, os(&temp), AtFlags::empty());
        match link() {
            Err(Errno::EXIST) => {
                let _ = unlinkat(pfd, os(&temp), AtFlags::empty());
                link()
            }
            other => other,
        }
        .and_then(|()| {
            rename_into_place(pfd, &temp, pname, false).inspect_err(|_| {
                let _ = unlinkat(pfd, os(&temp), AtFlags::empty());
            })
        })
        .map_err(|e| StoreError::new("hard link", path, e))
    }

    /// Gives the directory at `path` the owner, extended attributes, mode and mtime of
    /// `record`, leaving alone what it has already.
    fn finish_dir(
        &self,
        open: &mut OpenDirs,
        path: &[u8],
        record: &DirRecord,
    ) -> Result<(), StoreError> {
        if self.finish_dir_from_parent(open, path, record) {
            return Ok(());
        }
        let (attrs, xattrs) = record;
        let fail = |e| StoreError::new("set attributes of", path, e);
        // A directory this writer owns but may not open as it is (mode 0000, or a directory
        // on the way it may not search) is made readable first; its mode is set below.
        let fd: OwnedFd = match self.base.open_dir_nofollow(path) {
            Err(Errno::ACCESS) if self.loosen_path(path, crate::perm::LIST) => {
                self.base.open_dir_nofollow(path)
            }
            other => other,
        }
        .map_err(|e| StoreError::new("set attributes of", path, escape_error(e)))?;
        let now = fstat(&fd).ok().map(|st| Current::of_stat(&st));
        let chown = self.owners && !now.as_ref().is_some_and(|now| now.has_owner(attrs));
        if chown {
            self.chown_fd(&fd, attrs).map_err(fail)?;
        }
        if let Some(x) = xattrs {
            let (scope, list) = &**x;
            let update = XattrUpdate {
                scope: *scope,
                list: list.clone(),
            };
            self.apply_xattrs(&fd, &update, false, path)?;
        }
        // A change of owner or ACLs may change the mode: set it again after them.
        if chown || xattrs.is_some() || !now.as_ref().is_some_and(|now| now.has_mode(attrs.mode)) {
            fchmod(&fd, Mode::from_raw_mode(attrs.mode)).map_err(fail)?;
        }
        if !now.as_ref().is_some_and(|now| now.has_mtime(attrs)) {
            futimens(&fd, &timestamps(attrs)).map_err(fail)?;
        }
        Ok(())
    }

    /// The common case without opening the directory: no extended attributes, and its owner
    /// and mode right already (a directory this writer made, most often), so at most its
    /// mtime is set, by name in its parent, never through a symlink. Whether it is done; when
    /// not (anything else to set, or any error), [`TreeWriter::finish_dir`] opens it.
    fn finish_dir_from_parent(&self, open: &mut OpenDirs, path: &[u8], record: &DirRecord) -> bool {
        let (attrs, xattrs) = record;
        if xattrs.is_some() || path.is_empty() {
            return false;
        }
        let (parent, name) = crate::relpath::split_parent(path);
        let Ok(parent) = open.open_one(self, parent) else {
            return false;
        };
        let wanted = StatxFlags::TYPE
            | StatxFlags::MODE
            | StatxFlags::UID
            | StatxFlags::GID
            | StatxFlags::MTIME;
        let Ok(st) = statx(parent, os(name), AtFlags::SYMLINK_NOFOLLOW, wanted) else {
            return false;
        };
        let now = Current::of_statx(&st);
        if FileType::from_raw_mode(now.mode) != FileType::Directory
            || (self.owners && !now.has_owner(attrs))
            || !now.has_mode(attrs.mode)
        {
            return false;
        }
        now.has_mtime(attrs)
            || utimensat(
                parent,
                os(name),
                &timestamps(attrs),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .is_ok()
    }
}

/// What a directory has: from `fstat` or `statx`.
struct Current {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime_sec: i64,
    mtime_nsec: i64,
}

impl Current {
    fn of_stat(st: &Stat) -> Current {
        Current {
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            mtime_sec: st.st_mtime,
            mtime_nsec: st.st_mtime_nsec as i64,
        }
    }

    fn of_statx(st: &Statx) -> Current {
        Current {
            mode: u32::from(st.stx_mode),
            uid: st.stx_uid,
            gid: st.stx_gid,
            mtime_sec: st.stx_mtime.tv_sec,
            mtime_nsec: i64::from(st.stx_mtime.tv_nsec),
        }
    }

    fn has_owner(&self, attrs: &Attrs) -> bool {
        let (uid, gid) = owner_ids(attrs);
        uid.is_none_or(|u| u.as_raw() == self.uid) && gid.is_none_or(|g| g.as_raw() == self.gid)
    }

    fn has_mode(&self, mode: u32) -> bool {
        self.mode & 0o7777 == mode & 0o7777
    }

    fn has_mtime(&self, attrs: &Attrs) -> bool {
        self.mtime_sec == attrs.mtime_sec && self.mtime_nsec == attrs.mtime_nsec as i64
    }
}

/// Does `work` on every item, on several threads when there are many, each with a `state`
/// of its own, and gathers the errors.
fn in_parallel<T: Sync, S>(
    items: &[T],
    state: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, &T) -> Result<(), StoreError> + Sync,
) -> Errors {
    let work_all = |part: &[T]| {
        let mut errors = Errors::default();
        let mut state = state();
        for item in part {
            if let Err(e) = work(&mut state, item) {
                errors.record(e);
            }
        }
        errors
    };
    let threads = finish_threads(items.len());
    if threads <= 1 {
        return work_all(items);
    }
    let mut errors = Errors::default();
    std::thread::scope(|scope| {
        let mut workers = Vec::new();
        for part in items.chunks(items.len().div_ceil(threads)) {
            let work_all = &work_all;
            // A thread the system will not start leaves its part to this one.
            match std::thread::Builder::new().spawn_scoped(scope, move || work_all(part)) {
                Ok(worker) => workers.push(worker),
                Err(_) => errors.absorb(work_all(part)),
            }
        }
        for worker in workers {
            match worker.join() {
                Ok(found) => errors.absorb(found),
                // Not expected: nothing on this path panics.
                Err(_) => errors.record(StoreError::other(
                    "finish",
                    b"",
                    "a thread finishing directories or hard links stopped",
                )),
            }
        }
    });
    errors
}

/// The directories a finishing thread opened last: links come in the order their names were
/// sent and directories of one depth sorted by path, so the next one is most often in the
/// same directories (a link's, or a directory's parent).
#[derive(Default)]
struct OpenDirs {
    /// (path below the root, descriptor), the most recently used last.
    open: Vec<(Vec<u8>, OwnedFd)>,
}

impl OpenDirs {
    /// Directories kept open per thread.
    const KEPT: usize = 4;

    /// Descriptors of directories `a` and `b` (paths below the writer's root).
    fn open_pair(
        &mut self,
        writer: &TreeWriter,
        a: &[u8],
        b: &[u8],
    ) -> Result<(&OwnedFd, &OwnedFd), StoreError> {
        self.use_dir(writer, a)?;
        self.use_dir(writer, b)?;
        // Both are among the two most recently used, so both are still open.
        let fd = |dir: &[u8]| {
            self.open
                .iter()
                .find(|(p, _)| p == dir)
                .map(|(_, fd)| fd)
                .ok_or_else(|| StoreError::other("open directory", dir, "not kept open"))
        };
        Ok((fd(a)?, fd(b)?))
    }

    /// The descriptor of directory `dir`, kept open.
    fn open_one(&mut self, writer: &TreeWriter, dir: &[u8]) -> Result<&OwnedFd, StoreError> {
        self.use_dir(writer, dir)?;
        self.open
            .last()
            .map(|(_, fd)| fd)
            .ok_or_else(|| StoreError::other("open directory", dir, "not kept open"))
    }

    /// Makes `dir` the most recently used, opening it if it is not open.
    fn use_dir(&mut self, writer: &TreeWriter, dir: &[u8]) -> Result<(), StoreError> {
        if let Some(i) = self.open.iter().position(|(p, _)| p == dir) {
            let kept = self.open.remove(i);
            self.open.push(kept);
            return Ok(());
        }
        // Links are made and looked at by name in it: an `O_PATH` descriptor serves, and
        // needs no permission on the directory itself (a `0000` one of a non-root writer's
        // own gets what a link in it needs when the link is refused, see `loosen_link_dirs`).
        let fd = writer
            .base
            .open_dir_path_nofollow(dir)
            .map_err(|e| StoreError::new("open directory", dir, escape_error(e)))?;
        if self.open.len() == Self::KEPT {
            self.open.remove(0);
        }
        self.open.push((dir.to_vec(), fd));
        Ok(())
    }
}

/// The links to make, one per path: the last sent of each, as when they were made one after
/// another (two threads must never make the same name, whose temporary names would clash).
fn last_of_each(links: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut seen = std::collections::HashSet::new();
    let mut kept: Vec<_> = links
        .into_iter()
        .rev()
        .filter(|(path, _)| seen.insert(path.clone()))
        .collect();
    kept.reverse();
    kept
}

/// Threads for `items` directories or links.
fn finish_threads(items: usize) -> usize {
    if items < PARALLEL_FROM {
        return 1;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpus.min(MAX_THREADS).min(items / (PARALLEL_FROM / 2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::root::Root;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn attrs(mode: u32, mtime_sec: i64) -> Attrs {
        Attrs {
            mode,
            mtime_sec,
            mtime_nsec: 123_456_789,
            ..Attrs::default()
        }
    }

    #[test]
    fn many_directories_of_each_depth_all_get_their_attributes() {
        let dir = tempfile::tempdir().unwrap();
        let n = 2 * PARALLEL_FROM + 3;
        // Met at the destination already, with another mode and mtime.
        std::fs::create_dir_all(dir.path().join("t0000/s")).unwrap();
        std::fs::set_permissions(dir.path().join("t0000"), PermissionsExt::from_mode(0o777))
            .unwrap();
        let writer = TreeWriter::for_dir(Root::open(dir.path()).unwrap(), false, "t".into());
        let mut c = writer.cursor();
        let top = |i: usize| attrs(0o550 + (i % 3) as u32 * 0o100, 1_500_000_000 + i as i64);
        let sub = |i: usize| attrs(0o700 + (i % 8) as u32, 1_600_000_000 + i as i64);
        for i in 0..n {
            c.make_dir(format!("t{i:04}").as_bytes(), &top(i)).unwrap();
            c.make_dir(format!("t{i:04}/s").as_bytes(), &sub(i))
                .unwrap();
            c.write_file(format!("t{i:04}/s/f").as_bytes(), &sub(i), b"x")
                .unwrap();
        }
        drop(c);
        let (errors, more) = writer.finish();
        assert!(errors.is_empty() && more == 0, "{errors:?}");
        for i in 0..n {
            for (path, want) in [(format!("t{i:04}"), top(i)), (format!("t{i:04}/s"), sub(i))] {
                let m = std::fs::symlink_metadata(dir.path().join(&path)).unwrap();
                assert_eq!(m.mode() & 0o7777, want.mode, "{path}");
                assert_eq!(
                    (m.mtime(), m.mtime_nsec()),
                    (want.mtime_sec, 123_456_789),
                    "{path}"
                );
            }
        }
    }

    #[test]
    fn many_hard_links_are_made_whatever_is_in_their_way() {
        let dir = tempfile::tempdir().unwrap();
        let n = 2 * PARALLEL_FROM + 5;
        let writer = TreeWriter::for_dir(Root::open(dir.path()).unwrap(), false, "t".into());
        let mut c = writer.cursor();
        for d in ["b", "b/0", "b/1", "b/2", "b/3", "b/4"] {
            c.make_dir(d.as_bytes(), &attrs(0o755, 1)).unwrap();
        }
        for i in 0..n {
            c.make_dir(format!("c{i}").as_bytes(), &attrs(0o755, 1))
                .unwrap();
            let file = format!("a/{}/f{i}", i % 7);
            c.write_file(file.as_bytes(), &attrs(0o644, 1), format!("{i}").as_bytes())
                .unwrap();
            // One link beside it, one in another tree, one more in a directory of its own.
            for link in [
                format!("a/{}/g{i}", i % 7),
                format!("b/{}/f{i}", i % 5),
                format!("c{i}/h"),
            ] {
                c.hard_link(link.as_bytes(), file.as_bytes()).unwrap();
            }
        }
        // In the way: another file under a link's name, and the link itself already made.
        c.write_file(b"b/0/f0", &attrs(0o644, 1), b"another")
            .unwrap();
        drop(c);
        std::fs::hard_link(dir.path().join("a/1/f1"), dir.path().join("c1/h")).unwrap();
        let (errors, more) = writer.finish();
        assert!(errors.is_empty() && more == 0, "{errors:?}");
        for i in 0..n {
            let file = std::fs::metadata(dir.path().join(format!("a/{}/f{i}", i % 7))).unwrap();
            assert_eq!(file.nlink(), 4, "f{i}");
            for link in [
                format!("a/{}/g{i}", i % 7),
                format!("b/{}/f{i}", i % 5),
                format!("c{i}/h"),
            ] {
                let m = std::fs::symlink_metadata(dir.path().join(&link)).unwrap();
                assert_eq!(m.ino(), file.ino(), "{link}");
            }
        }
        // No temporary name left behind.
        let left: Vec<_> = std::fs::read_dir(dir.path().join("b/0"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_directory_that_has_its_attributes_already_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let want = attrs(0o750, 1_500_000_000);
        let path = dir.path().join("d");
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, PermissionsExt::from_mode(0o750)).unwrap();
        let mtime = std::time::UNIX_EPOCH + std::time::Duration::new(1_500_000_000, 123_456_789);
        std::fs::File::open(&path)
            .unwrap()
            .set_times(std::fs::FileTimes::new().set_modified(mtime))
            .unwrap();
        let before = std::fs::metadata(&path).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let writer = TreeWriter::for_dir(Root::open(dir.path()).unwrap(), false, "t".into());
        writer.cursor().make_dir(b"d", &want).unwrap();
        // And one that needs only its mtime.
        writer
            .cursor()
            .make_dir(b"e", &attrs(0o755, 1_500_000_000))
            .unwrap();
        assert!(writer.finish().0.is_empty());
        let after = std::fs::metadata(&path).unwrap();
        // No attribute call touched it: its inode did not change.
        assert_eq!(
            (after.ctime(), after.ctime_nsec()),
            (before.ctime(), before.ctime_nsec())
        );
        assert_eq!(
            (after.mode() & 0o7777, after.mtime()),
            (0o750, 1_500_000_000)
        );
        let e = std::fs::metadata(dir.path().join("e")).unwrap();
        assert_eq!((e.mode() & 0o7777, e.mtime()), (0o755, 1_500_000_000));
    }

    #[test]
    fn a_symlink_put_in_place_of_a_directory_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let before = std::fs::metadata(outside.path()).unwrap();
        let writer = TreeWriter::for_dir(Root::open(dir.path()).unwrap(), false, "t".into());
        writer
            .cursor()
            .make_dir(b"d", &attrs(0o755, 1_500_000_000))
            .unwrap();
        std::fs::remove_dir(dir.path().join("d")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("d")).unwrap();
        let (errors, _) = writer.finish();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].to_string().contains('d'), "{}", errors[0]);
        let after = std::fs::metadata(outside.path()).unwrap();
        assert_eq!(
            (after.mtime(), after.mode()),
            (before.mtime(), before.mode())
        );
        assert_eq!(
            (after.ctime(), after.ctime_nsec()),
            (before.ctime(), before.ctime_nsec())
        );
    }

    #[test]
    fn only_the_last_link_sent_for_a_name_is_made() {
        let link = |p: &str, t: &str| (p.as_bytes().to_vec(), t.as_bytes().to_vec());
        let kept = last_of_each(vec![
            link("a", "x"),
            link("b", "x"),
            link("a", "y"),
            link("c", "z"),
        ]);
        assert_eq!(kept, vec![link("b", "x"), link("a", "y"), link("c", "z")]);
    }

    #[test]
    fn threads_only_for_many_directories_and_never_more_than_a_few() {
        assert_eq!(finish_threads(0), 1);
        assert_eq!(finish_threads(PARALLEL_FROM - 1), 1);
        assert!(finish_threads(1_000_000) <= MAX_THREADS);
        // Never fewer than half of PARALLEL_FROM items per thread.
        assert!(finish_threads(PARALLEL_FROM) <= 2);
        assert!(finish_threads(10 * PARALLEL_FROM) <= 20);
    }

    #[test]
    fn errors_past_the_listed_ones_are_counted() {
        let mut a = Errors::default();
        for _ in 0..MAX_LISTED_ERRORS {
            a.record(StoreError::other("x", b"a", "e"));
        }
        let mut b = Errors::default();
        b.record(StoreError::other("x", b"b", "e"));
        b.more = 2;
        a.absorb(b);
        assert_eq!(a.listed.len(), MAX_LISTED_ERRORS);
        assert_eq!(a.more, 3);
    }
}
