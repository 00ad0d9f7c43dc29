//! The end of a tree's writing: hard links, then every directory's owner, extended
//! attributes, mode and mtime ([`TreeWriter::finish`]).
//!
//! Directories are finished deepest first, one depth at a time, so that no directory loses
//! the search or write permission its subdirectories still need before they are done.
//! Directories of one depth do not depend on each other (setting a directory's attributes
//! does not change its parent's mtime), so a depth with many of them is shared among a few
//! threads: on a tree of many small directories this is the serial tail of every copy, after
//! the last file. A directory that already has the owner, mode or mtime it is to get (one
//! this writer created with them, or met as it should be) is not given them again: one
//! `fstat` instead of a `fchown`, a `fchmod` and a `futimens` that would each dirty its inode.

use super::{depth, owner_ids, timestamps, DirRecord, TreeWriter, XattrUpdate, MAX_LISTED_ERRORS};
use crate::attrs::Attrs;
use crate::error::StoreError;
use crate::root::escape_error;
use crate::sync::lock;
use rustix::fs::{fchmod, fstat, futimens, Mode, Stat};
use std::os::fd::OwnedFd;

/// A depth with at least this many directories is shared among threads (a thread costs tens
/// of microseconds to start, a directory a few).
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
        let links = std::mem::take(&mut *lock(&self.links));
        let mut dirs: Vec<_> = std::mem::take(&mut *lock(&self.dirs)).into_iter().collect();
        dirs.sort_unstable_by(|a, b| depth(&b.0).cmp(&depth(&a.0)).then_with(|| b.0.cmp(&a.0)));
        let mut errors = Errors::default();
        // Links change their directories' mtimes: made before those are set.
        for (path, target) in links {
            if let Err(e) = self.make_hard_link(&path, &target) {
                errors.record(e);
            }
        }
        for level in dirs.chunk_by(|a, b| depth(&a.0) == depth(&b.0)) {
            errors.absorb(self.finish_level(level));
        }
        if self.durable {
            if let Err(e) = self.sync(b"") {
                errors.record(e);
            }
        }
        (errors.listed, errors.more)
    }

    /// Finishes directories of one depth, on several threads when there are many.
    fn finish_level(&self, level: &[(Vec<u8>, DirRecord)]) -> Errors {
        let threads = finish_threads(level.len());
        let finish_all = |part: &[(Vec<u8>, DirRecord)]| {
            let mut errors = Errors::default();
            for (path, record) in part {
                if let Err(e) = self.finish_dir(path, record) {
                    errors.record(e);
                }
            }
            errors
        };
        if threads <= 1 {
            return finish_all(level);
        }
        let mut errors = Errors::default();
        std::thread::scope(|scope| {
            let workers: Vec<_> = level
                .chunks(level.len().div_ceil(threads))
                .map(|part| (part, scope.spawn(move || finish_all(part))))
                .collect();
            for (part, worker) in workers {
                match worker.join() {
                    Ok(found) => errors.absorb(found),
                    // Not expected (no panics on this path); the directories still count.
                    Err(_) => errors.record(StoreError::other(
                        "set attributes of",
                        &part[0].0,
                        "the thread finishing this and the next directories stopped",
                    )),
                }
            }
        });
        errors
    }

    /// Gives the directory at `path` the owner, extended attributes, mode and mtime of
    /// `record`, leaving alone what it has already.
    fn finish_dir(&self, path: &[u8], (attrs, xattrs): &DirRecord) -> Result<(), StoreError> {
        let fail = |e| StoreError::new("set attributes of", path, e);
        let fd: OwnedFd = self
            .base
            .open_dir_nofollow(path)
            .map_err(|e| StoreError::new("set attributes of", path, escape_error(e)))?;
        let now = fstat(&fd).ok();
        let chown = self.owners && !now.as_ref().is_some_and(|st| has_owner(st, attrs));
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
        if chown || xattrs.is_some() || !now.as_ref().is_some_and(|st| has_mode(st, attrs.mode)) {
            fchmod(&fd, Mode::from_raw_mode(attrs.mode)).map_err(fail)?;
        }
        if !now.as_ref().is_some_and(|st| has_mtime(st, attrs)) {
            futimens(&fd, &timestamps(attrs)).map_err(fail)?;
        }
        Ok(())
    }
}

/// Threads for finishing `dirs` directories of one depth.
fn finish_threads(dirs: usize) -> usize {
    if dirs < PARALLEL_FROM {
        return 1;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpus.min(MAX_THREADS).min(dirs / (PARALLEL_FROM / 2))
}

fn has_owner(st: &Stat, attrs: &Attrs) -> bool {
    let (uid, gid) = owner_ids(attrs);
    uid.is_none_or(|u| u.as_raw() == st.st_uid) && gid.is_none_or(|g| g.as_raw() == st.st_gid)
}

fn has_mode(st: &Stat, mode: u32) -> bool {
    st.st_mode & 0o7777 == mode & 0o7777
}

fn has_mtime(st: &Stat, attrs: &Attrs) -> bool {
    st.st_mtime == attrs.mtime_sec && st.st_mtime_nsec as i64 == attrs.mtime_nsec as i64
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
    fn threads_only_for_many_directories_and_never_more_than_a_few() {
        assert_eq!(finish_threads(0), 1);
        assert_eq!(finish_threads(PARALLEL_FROM - 1), 1);
        assert!(finish_threads(1_000_000) <= MAX_THREADS);
        assert!(finish_threads(PARALLEL_FROM) >= 1);
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
