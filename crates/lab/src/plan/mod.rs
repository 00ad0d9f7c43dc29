//! `sprat plan`: a data set split into shards that separate `sprat cp --plan DIR --shard K`
//! runs copy, on one host or many (a Slurm array, a Kubernetes indexed job, an ssh loop).
//!
//! [`make`] scans the source once, in parallel, groups hard links of one file (same inode) so
//! that they land in one shard, and splits the files into shards of equal predicted time
//! ([`split`]: `files * t0 + bytes / R`, the model of the report). [`dir`] writes the plan into
//! a directory and reads it back: the shards' path lists, the directories (made and given
//! their attributes by `--finish`) and a summary.

pub mod dir;
pub mod split;

use crate::model::StageCost;
use sprat_store::{EntryType, Root, ScanOptions, Source};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use dir::{PlanDir, Summary};

/// Why a plan could not be made, written or read.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("source {0}")]
    Store(#[from] sprat_store::StoreError),
    #[error("cannot plan {source_path}: {entry}: {error}")]
    Unreadable {
        source_path: PathBuf,
        entry: String,
        error: String,
    },
    #[error("{0}: not a directory (a plan splits a tree; copy a single file with sprat cp)")]
    NotADirectory(PathBuf),
    #[error("{path}: {what}")]
    Format { path: PathBuf, what: String },
    #[error("{0}: exists and is not empty (give a new directory for the plan)")]
    OutNotEmpty(PathBuf),
}

/// How to plan.
#[derive(Debug, Clone, Copy)]
pub struct PlanOptions {
    pub shards: usize,
    /// The cost of a file: per-file overhead and rate.
    pub cost: StageCost,
    pub scan_threads: usize,
}

/// A plan in memory: what [`dir::write`] stores.
#[derive(Debug)]
pub struct Plan {
    pub summary: Summary,
    /// Each shard's paths (regular files and symlinks), relative to the source, sorted.
    pub shards: Vec<Vec<Vec<u8>>>,
    /// Every directory below the source, relative to it (the source itself excluded).
    pub dirs: Vec<Vec<u8>>,
}

/// Scans `source` and splits it as `options` say.
pub fn make(source: &Path, options: PlanOptions) -> Result<Plan, PlanError> {
    let root = match Root::open_local_source(source)? {
        Source::Dir(root) => root,
        Source::File { .. } => return Err(PlanError::NotADirectory(source.to_path_buf())),
    };
    let scan_options = ScanOptions {
        threads: options.scan_threads.max(1),
        ..ScanOptions::default()
    };
    let (tx, rx) = crossbeam_channel::bounded(64);
    let mut entries = Vec::new();
    let mut dirs = Vec::new();
    let mut specials = 0u64;
    let mut first_error = None;
    std::thread::scope(|s| {
        s.spawn(|| sprat_store::scan::scan(&root, scan_options, tx));
        for listing in rx {
            for e in listing {
                if let Some(error) = e.error {
                    first_error.get_or_insert((e.path, error));
                    continue;
                }
                match e.kind {
                    EntryType::Dir if !e.path.is_empty() => dirs.push(e.path),
                    EntryType::Dir => {}
                    EntryType::File => entries.push((e.path, e.size, Some(e.ino))),
                    EntryType::Symlink => entries.push((e.path, 0, None)),
                    // FIFOs, sockets and devices travel like symlinks: a name, no data.
                    EntryType::Special if e.special.is_some() => entries.push((e.path, 0, None)),
                    EntryType::Special => specials += 1,
                }
            }
        }
    });
    if let Some((path, error)) = first_error {
        return Err(PlanError::Unreadable {
            source_path: source.to_path_buf(),
            entry: sprat_store::display_path(&path),
            error,
        });
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    dirs.sort_unstable();

    // Units in path order; every path with an inode seen before joins that inode's unit.
    let mut units: Vec<split::Unit> = Vec::new();
    let mut unit_of_path = Vec::with_capacity(entries.len());
    let mut unit_of_inode: HashMap<u64, usize> = HashMap::new();
    let (mut files, mut symlinks, mut bytes) = (0u64, 0u64, 0u64);
    for (order, (_, size, ino)) in entries.iter().enumerate() {
        match ino {
            Some(_) => files += 1,
            None => symlinks += 1,
        }
        let existing = ino.and_then(|i| unit_of_inode.get(&i).copied());
        let unit = match existing {
            Some(u) => u,
            None => {
                bytes += size;
                units.push(split::Unit {
                    order,
                    files: 1,
                    bytes: *size,
                });
                if let Some(ino) = ino {
                    unit_of_inode.insert(*ino, units.len() - 1);
                }
                units.len() - 1
            }
        };
        unit_of_path.push(unit);
    }
    drop(unit_of_inode);
    let placed = split::split(&units, options.shards, options.cost);
    let mut shards = vec![Vec::new(); options.shards.max(1)];
    for ((path, _, _), unit) in entries.into_iter().zip(unit_of_path) {
        shards[placed.shard_of[unit]].push(path);
    }
    let summary = Summary {
        format: dir::FORMAT,
        source: source.to_path_buf(),
        files,
        symlinks,
        dirs: dirs.len() as u64,
        bytes,
        skipped_special: specials,
        per_file_s: options.cost.t0_s,
        rate_bytes_per_s: options.cost.rate_bytes_per_s,
        imbalance: placed.imbalance(),
        shards: placed
            .shards
            .iter()
            .zip(&shards)
            .map(|(l, paths)| dir::ShardSummary {
                paths: paths.len() as u64,
                files: l.files,
                bytes: l.bytes,
                predicted_s: l.seconds,
            })
            .collect(),
    };
    Ok(Plan {
        summary,
        shards,
        dirs,
    })
}
