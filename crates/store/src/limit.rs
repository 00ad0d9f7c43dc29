//! Storage limits: how fast this file system can take a tree written in the plainest way.
//!
//! [`write_plain`] writes a tree held in memory with no atomicity, no checksums and no
//! attributes beyond the permission bits given at creation: directories first, then every
//! file created under its final name (`O_CREAT | O_EXCL`), written and closed, from several
//! threads. It is the yardstick ("write limit") that sprat's own write stage is judged
//! against, not a way to copy data.

use crate::error::StoreError;
use crate::root::{escape_error, Root};
use rustix::fs::{mkdirat, openat, symlinkat, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One entry of a tree held in memory.
#[derive(Debug, Clone)]
pub enum MemEntry {
    Dir {
        path: Vec<u8>,
    },
    File {
        path: Vec<u8>,
        mode: u32,
        data: Vec<u8>,
    },
    Symlink {
        path: Vec<u8>,
        target: Vec<u8>,
    },
}

/// Writes `entries` below `root` with `threads` threads. Directories are made first (in the
/// order given, parents before children), then files and symlinks are shared out in runs of
/// one directory so that each thread keeps its directory open.
pub fn write_plain(root: &Root, entries: &[MemEntry], threads: usize) -> Result<(), StoreError> {
    for e in entries {
        if let MemEntry::Dir { path } = e {
            if !path.is_empty() {
                root.mkdir_all(path)?;
            }
        }
    }
    let leaves: Vec<&MemEntry> = entries
        .iter()
        .filter(|e| !matches!(e, MemEntry::Dir { .. }))
        .collect();
    // Runs of one directory each (at most RUN entries): threads work in different
    // directories, as sprat's writers do with whole batches, rather than all contending for
    // one directory's lock.
    const RUN: usize = 1024;
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    let mut start = 0;
    for i in 1..=leaves.len() {
        let split = i == leaves.len()
            || i - start >= RUN
            || crate::relpath::split_parent(leaf_path(leaves[i])).0
                != crate::relpath::split_parent(leaf_path(leaves[start])).0;
        if split {
            runs.push(start..i);
            start = i;
        }
    }
    let next = AtomicUsize::new(0);
    let result = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| {
                    let mut dir: Option<(Vec<u8>, OwnedFd)> = None;
                    loop {
                        let Some(run) = runs.get(next.fetch_add(1, Ordering::Relaxed)) else {
                            return Ok(());
                        };
                        for e in &leaves[run.clone()] {
                            write_leaf(root, &mut dir, e)?;
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(StoreError::other("write", b"", "writer panicked")))
            })
            .collect::<Result<Vec<()>, StoreError>>()
    });
    result.map(|_| ())
}

fn leaf_path(e: &MemEntry) -> &[u8] {
    match e {
        MemEntry::File { path, .. } | MemEntry::Symlink { path, .. } | MemEntry::Dir { path } => {
            path
        }
    }
}

fn write_leaf(
    root: &Root,
    dir: &mut Option<(Vec<u8>, OwnedFd)>,
    e: &MemEntry,
) -> Result<(), StoreError> {
    let path = match e {
        MemEntry::File { path, .. } | MemEntry::Symlink { path, .. } => path,
        MemEntry::Dir { .. } => return Ok(()),
    };
    let (parent, name) = crate::relpath::split_parent(path);
    if dir.as_ref().is_none_or(|(p, _)| p.as_slice() != parent) {
        let fd = root
            .open_dir(parent)
            .map_err(|err| StoreError::new("open directory", parent, escape_error(err)))?;
        *dir = Some((parent.to_vec(), fd));
    }
    let Some((_, dir_fd)) = dir.as_ref() else {
        return Err(StoreError::other("open directory", parent, "no descriptor"));
    };
    let name = OsStr::from_bytes(name);
    match e {
        MemEntry::File { mode, data, .. } => {
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
            let fd = openat(dir_fd, name, flags, Mode::from_raw_mode(*mode & 0o777))
                .map_err(|err| StoreError::new("create", path, err))?;
            let mut rest = data.as_slice();
            while !rest.is_empty() {
                match rustix::io::write(&fd, rest) {
                    Ok(0) => return Err(StoreError::new("write", path, Errno::NOSPC)),
                    Ok(n) => rest = &rest[n..],
                    Err(Errno::INTR) => {}
                    Err(err) => return Err(StoreError::new("write", path, err)),
                }
            }
        }
        MemEntry::Symlink { target, .. } => symlinkat(OsStr::from_bytes(target), dir_fd, name)
            .map_err(|err| StoreError::new("create symlink", path, err))?,
        MemEntry::Dir { .. } => {
            mkdirat(dir_fd, name, Mode::from_raw_mode(0o755))
                .map_err(|err| StoreError::new("create directory", path, err))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_entry() {
        let dir = tempfile::tempdir().unwrap();
        let mut entries = vec![
            MemEntry::Dir { path: Vec::new() },
            MemEntry::Dir {
                path: b"a/b".to_vec(),
            },
        ];
        for i in 0..300 {
            entries.push(MemEntry::File {
                path: format!("a/b/f{i}").into_bytes(),
                mode: 0o640,
                data: vec![i as u8; i],
            });
        }
        entries.push(MemEntry::Symlink {
            path: b"a/l".to_vec(),
            target: b"b/f1".to_vec(),
        });
        write_plain(&Root::open(dir.path()).unwrap(), &entries, 3).unwrap();
        for i in 0..300 {
            let data = std::fs::read(dir.path().join(format!("a/b/f{i}"))).unwrap();
            assert_eq!(data, vec![i as u8; i]);
        }
        assert_eq!(
            std::fs::read_link(dir.path().join("a/l")).unwrap(),
            std::path::Path::new("b/f1")
        );
        // Existing files are an error, never overwritten.
        let err = write_plain(&Root::open(dir.path()).unwrap(), &entries, 2).unwrap_err();
        assert_eq!(err.errno(), Some(Errno::EXIST));
    }
}
