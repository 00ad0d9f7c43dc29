//! Subsystem benchmarks: each storage stage measured on its own, for the limits that a whole
//! transfer is judged against.
//!
//! `read`: the tree scanned and every file read to nothing by parallel threads, in the
//! scanner's order (inode order within each directory); the time covers scan and reads.
//! `write`: a tree loaded into memory first (untimed), then written as plain files by
//! [`sprat_store::limit::write_plain`]; the time covers the write alone.

use crate::error::TransferError;
use serde::Serialize;
use sprat_store::limit::MemEntry;
use sprat_store::read::DirCursor;
use sprat_store::{EntryType, Root, ScanOptions};
use std::path::Path;
use std::time::Instant;

/// What one subsystem run measured.
#[derive(Debug, Clone, Serialize)]
pub struct SubsystemRun {
    /// `read`, `write`, `network` or `end_to_end`.
    pub subsystem: &'static str,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    pub files_per_s: f64,
    pub threads: usize,
}

impl SubsystemRun {
    fn new(subsystem: &'static str, tree: &TreeCounts, seconds: f64, threads: usize) -> Self {
        let s = seconds.max(1e-9);
        SubsystemRun {
            subsystem,
            files: tree.files,
            dirs: tree.dirs,
            symlinks: tree.symlinks,
            bytes: tree.bytes,
            seconds,
            mb_per_s: tree.bytes as f64 / 1e6 / s,
            files_per_s: tree.files as f64 / s,
            threads,
        }
    }
}

/// How many entries and bytes a tree has.
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeCounts {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
}

/// A tree held in memory.
pub struct MemTree {
    pub entries: Vec<MemEntry>,
    pub counts: TreeCounts,
}

/// Times scanning `src` and reading every file in it to nothing with `threads` threads.
pub fn read_limit(src: &Path, threads: usize) -> Result<SubsystemRun, TransferError> {
    let started = Instant::now();
    let root = Root::open(src)?;
    let (tx, rx) = crossbeam_channel::bounded::<Vec<sprat_store::ScanEntry>>(64);
    let counts = std::sync::Mutex::new(TreeCounts::default());
    let first_error = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        let root = &root;
        s.spawn(move || sprat_store::scan(root, ScanOptions::default(), tx));
        for _ in 0..threads.max(1) {
            let rx = rx.clone();
            let (counts, first_error) = (&counts, &first_error);
            s.spawn(move || {
                let mut cursor = DirCursor::new(root);
                let mut buf = Vec::new();
                let mut mine = TreeCounts::default();
                for listing in rx {
                    for e in listing {
                        match e.kind {
                            EntryType::File => {
                                buf.clear();
                                match cursor.read_file(&e.path, None, e.size, &mut buf) {
                                    Ok((n, _)) => mine.bytes += n,
                                    Err(err) => {
                                        let mut slot =
                                            first_error.lock().unwrap_or_else(|p| p.into_inner());
                                        slot.get_or_insert(err);
                                    }
                                }
                                mine.files += 1;
                            }
                            EntryType::Dir => mine.dirs += 1,
                            EntryType::Symlink => mine.symlinks += 1,
                            EntryType::Special => {}
                        }
                    }
                }
                let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
                c.files += mine.files;
                c.dirs += mine.dirs;
                c.symlinks += mine.symlinks;
                c.bytes += mine.bytes;
            });
        }
    });
    if let Some(err) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(err.into());
    }
    let counts = counts.into_inner().unwrap_or_else(|p| p.into_inner());
    Ok(SubsystemRun::new(
        "read",
        &counts,
        started.elapsed().as_secs_f64(),
        threads,
    ))
}

/// Bytes of memory the system could still give this process (`MemAvailable`).
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Loads the tree at `src` into memory: directories (parents first), files with their data
/// and permission bits, symlinks with their targets. Refuses a tree larger than half of the
/// memory available, and any entry it cannot read.
pub fn load_tree(src: &Path) -> Result<MemTree, TransferError> {
    let root = Root::open(src)?;
    let (tx, rx) = crossbeam_channel::bounded(64);
    let mut scanned = Vec::new();
    std::thread::scope(|s| {
        let root = &root;
        s.spawn(move || sprat_store::scan(root, ScanOptions::default(), tx));
        for listing in rx {
            scanned.extend(listing);
        }
    });
    let total: u64 = scanned.iter().map(|e| e.size).sum();
    if let Some(avail) = available_memory() {
        if total > avail / 2 {
            return Err(TransferError::Usage(format!(
                "'{}' holds {total} bytes, more than half of the memory available ({avail} bytes)",
                src.display()
            )));
        }
    }
    scanned.sort_by(|a, b| a.path.cmp(&b.path));
    let mut entries = Vec::with_capacity(scanned.len());
    let mut tree = TreeCounts::default();
    let mut cursor = DirCursor::new(&root);
    for e in scanned {
        if let Some(why) = e.error {
            return Err(TransferError::Local(format!(
                "cannot read '{}' in '{}': {why}",
                sprat_store::display_path(&e.path),
                src.display()
            )));
        }
        match e.kind {
            EntryType::Dir => {
                tree.dirs += 1;
                entries.push(MemEntry::Dir { path: e.path });
            }
            EntryType::File => {
                let mut data = Vec::with_capacity(e.size as usize);
                cursor.read_file(&e.path, None, e.size, &mut data)?;
                tree.files += 1;
                tree.bytes += data.len() as u64;
                entries.push(MemEntry::File {
                    path: e.path,
                    mode: e.attrs.mode,
                    data,
                });
            }
            EntryType::Symlink => {
                tree.symlinks += 1;
                entries.push(MemEntry::Symlink {
                    path: e.path,
                    target: e.link_target.unwrap_or_default(),
                });
            }
            EntryType::Special => {}
        }
    }
    Ok(MemTree {
        entries,
        counts: tree,
    })
}

/// Times writing `tree` as plain files into `dst` (created; it must be missing or empty).
pub fn write_limit(
    tree: &MemTree,
    dst: &Path,
    threads: usize,
) -> Result<SubsystemRun, TransferError> {
    let nonempty = std::fs::read_dir(dst).is_ok_and(|mut d| d.next().is_some());
    if nonempty {
        return Err(TransferError::Usage(format!(
            "destination '{}' is not empty",
            dst.display()
        )));
    }
    let started = Instant::now();
    let root = Root::create_local(dst)?;
    sprat_store::limit::write_plain(&root, &tree.entries, threads)?;
    Ok(SubsystemRun::new(
        "write",
        &tree.counts,
        started.elapsed().as_secs_f64(),
        threads,
    ))
}
