//! Destination directories a writer that is not root cannot change as they are (a `0555`
//! directory copied with its mode, a `0000` one), made writable for the run.
//!
//! Where creating, replacing or removing an entry, or opening a directory, failed with
//! `EACCES`, the writer adds the owner bits it needs (see [`crate::perm`]) to the directories
//! below its base that it owns, remembers the mode each had, and tries once more: the common
//! path gets no extra system call. [`TreeWriter::finish`] then gives every directory the mode
//! it is to have: the source's for those the sender sent (the normal directory pass), and the
//! remembered one for the others ([`TreeWriter::restore_loosened`]). The base itself is
//! changed only when it is the copy of the source's root directory (its attributes are set at
//! the end too), never when it is a directory the user named to hold the copy or a single
//! file. Directories are named by descriptors opened without following symlinks, below the
//! base: nothing outside it is ever changed. A writer that stops before `finish` (killed)
//! leaves them writable by their owner until the next run finishes.

use super::{depth, DirRecord, TreeWriter};
use crate::error::StoreError;
use crate::perm;
use crate::root::escape_error;
use crate::sync::lock;
use rustix::io::Errno;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

impl TreeWriter {
    /// Whether the writer may add bits to directory `dir` (below its base): any directory below
    /// the base, and the base itself when it is the copy of the source's root directory.
    fn may_loosen(&self, dir: &[u8]) -> bool {
        !dir.is_empty() || (self.set_root_attrs && self.file_name.is_none())
    }

    /// Adds `bits` to the directory `fd`, which is `dir` below the base (see
    /// [`perm::add_bits`]), remembering the mode it had the first time. Whether an operation
    /// that failed there with `EACCES` is worth trying again: bits were added, now or by an
    /// earlier call (perhaps on another thread, after this operation failed).
    pub(crate) fn loosen_fd(&self, fd: BorrowedFd<'_>, dir: &[u8], bits: u32) -> bool {
        if !self.may_loosen(dir) {
            return false;
        }
        let mut loosened = lock(&self.loosened);
        let known = loosened.contains_key(dir);
        match perm::add_bits(fd, bits) {
            Ok(Some(had)) => {
                if !known && !self.may_remember_len(dir.len()) {
                    // No memory left to remember it: as it was, and the operation fails.
                    let _ = perm::restore(fd, had);
                    return false;
                }
                loosened.entry(dir.to_vec()).or_insert(had);
                true
            }
            Ok(None) => known,
            Err(_) => false,
        }
    }

    /// [`TreeWriter::loosen_fd`] of directory `dir` (below the base) with `bits`, and of every
    /// directory on the way to it with `u+x`, each opened (`O_PATH`) from the one before
    /// without following a symlink; where the way ends early (a component is missing, or no
    /// directory), the last directory that exists gets `u+wx` to make it. For an open or a
    /// `mkdir -p` that failed with `EACCES`: whether to try it again.
    pub(crate) fn loosen_path(&self, dir: &[u8], bits: u32) -> bool {
        let components: Vec<&[u8]> = match dir.is_empty() {
            true => Vec::new(),
            false => dir.split(|&b| b == b'/').collect(),
        };
        if components
            .iter()
            .any(|c| c.is_empty() || *c == b"." || *c == b"..")
        {
            return false;
        }
        let base_bits = if components.is_empty() {
            bits
        } else {
            perm::SEARCH
        };
        let mut again = self.loosen_fd(self.base.fd(), b"", base_bits);
        let mut current: Option<OwnedFd> = None;
        let mut end = 0;
        for (i, name) in components.iter().enumerate() {
            let parent_end = end;
            end += name.len() + usize::from(i > 0);
            let parent = current.as_ref().map_or(self.base.fd(), |fd| fd.as_fd());
            let fd = match perm::open_path(parent, name) {
                Ok(fd) => fd,
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => {
                    // To be made (or replaced by a directory) in the last one that exists.
                    return self.loosen_fd(parent, &dir[..parent_end], perm::CHANGE) | again;
                }
                Err(_) => return again,
            };
            let want = if i + 1 == components.len() {
                bits
            } else {
                perm::SEARCH
            };
            again |= self.loosen_fd(fd.as_fd(), &dir[..end], want);
            current = Some(fd);
        }
        again
    }

    /// Runs `op`, which creates, replaces or removes entries of the directory `dir` (open as
    /// `fd`) below the base; when it fails with `EACCES` and the writer could give the
    /// directory `u+wx` ([`TreeWriter::loosen_fd`]), runs it once more.
    pub(crate) fn in_dir<T>(
        &self,
        at: (&OwnedFd, &[u8]),
        op: impl FnMut() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.in_dir_by(at, StoreError::errno, op)
    }

    /// [`TreeWriter::in_dir`] for an operation that returns an OS error.
    pub(crate) fn in_dir_errno<T>(
        &self,
        at: (&OwnedFd, &[u8]),
        op: impl FnMut() -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        self.in_dir_by(at, |e: &Errno| Some(*e), op)
    }

    fn in_dir_by<T, E>(
        &self,
        (fd, dir): (&OwnedFd, &[u8]),
        errno: impl Fn(&E) -> Option<Errno>,
        mut op: impl FnMut() -> Result<T, E>,
    ) -> Result<T, E> {
        match op() {
            Err(e)
                if errno(&e) == Some(Errno::ACCESS)
                    && self.loosen_fd(fd.as_fd(), dir, perm::CHANGE) =>
            {
                op()
            }
            other => other,
        }
    }

    /// Gives back their modes to the directories this writer made writable that are not in
    /// `recorded` (which [`TreeWriter::finish`] gives the sender's attributes): those deeper
    /// than `deeper_than`, or all of them (`None`), deepest first. Each is forgotten once done.
    pub(super) fn restore_loosened(
        &self,
        deeper_than: Option<usize>,
        recorded: &[(Vec<u8>, DirRecord)],
    ) -> Vec<StoreError> {
        let mut errors = Vec::new();
        let mut todo: Vec<(Vec<u8>, u32)> = {
            let mut loosened = lock(&self.loosened);
            if loosened.is_empty() {
                return errors;
            }
            let due: Vec<Vec<u8>> = loosened
                .keys()
                .filter(|p| deeper_than.is_none_or(|d| depth(p) > d) && !is_recorded(recorded, p))
                .cloned()
                .collect();
            due.into_iter()
                .filter_map(|p| loosened.remove_entry(&p))
                .collect()
        };
        todo.sort_unstable_by_key(|(p, _)| std::cmp::Reverse(depth(p)));
        for (path, mode) in todo {
            let fd = match self.base.open_dir_path_nofollow(&path) {
                Ok(fd) => fd,
                // Removed or replaced meanwhile: nothing of it to give back.
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => continue,
                Err(e) => {
                    errors.push(StoreError::new(
                        "give back the mode of directory",
                        &path,
                        escape_error(e),
                    ));
                    continue;
                }
            };
            if let Err(e) = perm::restore(fd.as_fd(), mode) {
                errors.push(StoreError::new("give back the mode of directory", &path, e));
            }
        }
        errors
    }
}

/// Whether `path` is among `dirs`, sorted as [`TreeWriter::finish`] sorts them: deepest first,
/// then by path, descending.
pub(super) fn is_recorded(dirs: &[(Vec<u8>, DirRecord)], path: &[u8]) -> bool {
    dirs.binary_search_by(|(p, _)| {
        depth(path)
            .cmp(&depth(p))
            .then_with(|| path.cmp(p.as_slice()))
    })
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attrs::Attrs;
    use crate::root::Root;
    use std::os::unix::fs::PermissionsExt;

    fn mode_of(p: &std::path::Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    fn chmod(p: &std::path::Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// (The tests run as root, whom no mode refuses: the bits are added here by calling the
    /// writer's own step directly, as it does after `EACCES`.)
    #[test]
    fn directories_made_writable_get_their_modes_back_deepest_first() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b/c")).unwrap();
        chmod(&dir.path().join("a/b/c"), 0o000);
        chmod(&dir.path().join("a/b"), 0o000);
        chmod(&dir.path().join("a"), 0o555);
        let writer = TreeWriter::for_dir(Root::open(dir.path()).unwrap(), true, "t".into());
        // The sender sent `a` (to be 0000 in the end), not `a/b` nor `a/b/c`.
        let attrs = Attrs {
            mode: 0o000,
            mtime_sec: 1_500_000_000,
            ..Attrs::default()
        };
        writer.cursor().make_dir(b"a", &attrs).unwrap();
        assert!(writer.loosen_path(b"a/b/c", perm::LIST));
        assert_eq!(mode_of(&dir.path().join("a")), 0o555, "had u+x already");
        assert_eq!(mode_of(&dir.path().join("a/b")), 0o100);
        assert_eq!(mode_of(&dir.path().join("a/b/c")), 0o500);
        // Asked again: nothing more to add, but worth trying again.
        assert!(writer.loosen_path(b"a/b/c", perm::LIST));
        let (errors, more) = writer.finish();
        assert!(errors.is_empty() && more == 0, "{errors:?}");
        // `a/b/c` and `a/b` were given back their modes, `a` got its own. (Root passes through
        // a 0000 directory all the same: that they are given back before `a` becomes 0000 is
        // seen by the end-to-end tests that run the writer as `nobody`, not here.)
        chmod(&dir.path().join("a"), 0o700);
        assert_eq!(mode_of(&dir.path().join("a/b")), 0o000);
        chmod(&dir.path().join("a/b"), 0o700);
        assert_eq!(mode_of(&dir.path().join("a/b/c")), 0o000);
        chmod(&dir.path().join("a/b/c"), 0o700);
    }

    #[test]
    fn the_base_is_left_alone_unless_it_is_the_copy_of_the_source_root() {
        let dir = tempfile::tempdir().unwrap();
        chmod(dir.path(), 0o555);
        let holder = TreeWriter::for_dir(Root::open(dir.path()).unwrap(), false, "t".into());
        assert!(!holder.loosen_path(b"", perm::CHANGE));
        assert_eq!(mode_of(dir.path()), 0o555);
        let copy = TreeWriter::for_dir(Root::open(dir.path()).unwrap(), true, "t".into());
        assert!(copy.loosen_path(b"", perm::CHANGE));
        assert_eq!(mode_of(dir.path()), 0o755);
        // Never sent its attributes: given back its mode at the end.
        assert!(copy.finish().0.is_empty());
        assert_eq!(mode_of(dir.path()), 0o555);
        chmod(dir.path(), 0o755);
    }

    #[test]
    fn a_symlink_on_the_way_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        chmod(outside.path(), 0o555);
        std::os::unix::fs::symlink(outside.path(), dir.path().join("l")).unwrap();
        let writer = TreeWriter::for_dir(Root::open(dir.path()).unwrap(), true, "t".into());
        writer.loosen_path(b"l", perm::CHANGE);
        assert_eq!(mode_of(outside.path()), 0o555);
        assert!(writer.finish().0.is_empty());
        assert_eq!(mode_of(outside.path()), 0o555);
        chmod(outside.path(), 0o755);
    }

    #[test]
    fn recorded_directories_are_found_in_the_order_finish_sorts_them() {
        let mut dirs: Vec<(Vec<u8>, DirRecord)> = ["", "a", "b", "a/x", "a/y", "b/x/z"]
            .iter()
            .map(|p| (p.as_bytes().to_vec(), (Attrs::default(), None)))
            .collect();
        dirs.sort_unstable_by(|a, b| depth(&b.0).cmp(&depth(&a.0)).then_with(|| b.0.cmp(&a.0)));
        for p in ["", "a", "b", "a/x", "a/y", "b/x/z"] {
            assert!(is_recorded(&dirs, p.as_bytes()), "{p}");
        }
        for p in ["c", "a/z", "b/x", "b/x/z/w"] {
            assert!(!is_recorded(&dirs, p.as_bytes()), "{p}");
        }
    }
}
