//! A plan on disk, in the directory `sprat plan --out` names:
//!
//! - `shard-00000.paths`, `shard-00001.paths`, ...: each shard's paths relative to the source,
//!   each ended by a NUL byte (any name the kernel allows, newlines included), sorted.
//! - `dirs.paths`: every directory below the source, the same way.
//! - `plan.json`: the [`Summary`], written last, so a directory with it holds a whole plan.

use super::{Plan, PlanError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The format written into `plan.json` (a reader refuses others).
pub const FORMAT: u32 = 1;

/// What `plan.json` says.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub format: u32,
    /// The source as given to `sprat plan` (shards may name it by another path).
    pub source: PathBuf,
    /// Regular files (each hard link counted), and symlinks with the FIFOs, sockets and
    /// devices (each a name without data).
    pub files: u64,
    pub symlinks: u64,
    pub dirs: u64,
    /// Bytes of the regular files, each hard-linked file's once.
    pub bytes: u64,
    /// Entries of a type sprat does not copy (not a file, directory, symlink, FIFO, socket or
    /// device).
    pub skipped_special: u64,
    /// The cost model the split used.
    pub per_file_s: f64,
    pub rate_bytes_per_s: f64,
    /// The longest shard's predicted time over the mean.
    pub imbalance: f64,
    pub shards: Vec<ShardSummary>,
}

/// One shard in `plan.json`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardSummary {
    /// Paths listed (files, their hard links, symlinks).
    pub paths: u64,
    /// Units placed (a hard-link group is one).
    pub files: u64,
    pub bytes: u64,
    pub predicted_s: f64,
}

/// A plan read back from its directory.
#[derive(Debug)]
pub struct PlanDir {
    pub path: PathBuf,
    pub summary: Summary,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PlanError + '_ {
    move |source| PlanError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn shard_file(dir: &Path, k: usize) -> PathBuf {
    dir.join(format!("shard-{k:05}.paths"))
}

fn write_paths(path: &Path, paths: &[Vec<u8>]) -> Result<(), PlanError> {
    let mut bytes = Vec::with_capacity(paths.iter().map(|p| p.len() + 1).sum());
    for p in paths {
        bytes.extend_from_slice(p);
        bytes.push(0);
    }
    std::fs::write(path, bytes).map_err(io(path))
}

fn read_paths(path: &Path) -> Result<Vec<Vec<u8>>, PlanError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    if bytes.last().is_some_and(|&b| b != 0) {
        return Err(PlanError::Format {
            path: path.to_path_buf(),
            what: "the last path is not ended by a NUL byte (a cut-off file?)".into(),
        });
    }
    Ok(bytes
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// Writes `plan` into `out`, which must not exist or be empty.
pub fn write(plan: &Plan, out: &Path) -> Result<(), PlanError> {
    match std::fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(PlanError::OutNotEmpty(out.to_path_buf()));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(out).map_err(io(out))?
        }
        Err(e) => return Err(io(out)(e)),
    }
    for (k, paths) in plan.shards.iter().enumerate() {
        write_paths(&shard_file(out, k), paths)?;
    }
    write_paths(&out.join("dirs.paths"), &plan.dirs)?;
    let json = out.join("plan.json");
    let text = serde_json::to_string_pretty(&plan.summary).map_err(|e| PlanError::Format {
        path: json.clone(),
        what: e.to_string(),
    })?;
    let tmp = out.join(".plan.json.tmp");
    std::fs::write(&tmp, text + "\n").map_err(io(&tmp))?;
    std::fs::rename(&tmp, &json).map_err(io(&json))
}

impl PlanDir {
    /// Reads `dir/plan.json`.
    pub fn open(dir: &Path) -> Result<PlanDir, PlanError> {
        let json = dir.join("plan.json");
        let text = std::fs::read_to_string(&json).map_err(io(&json))?;
        let summary: Summary = serde_json::from_str(&text).map_err(|e| PlanError::Format {
            path: json.clone(),
            what: e.to_string(),
        })?;
        if summary.format != FORMAT {
            return Err(PlanError::Format {
                path: json,
                what: format!(
                    "plan format {}, this sprat reads format {FORMAT}",
                    summary.format
                ),
            });
        }
        Ok(PlanDir {
            path: dir.to_path_buf(),
            summary,
        })
    }

    /// How many shards the plan has.
    pub fn shards(&self) -> usize {
        self.summary.shards.len()
    }

    /// Shard `k`'s paths.
    pub fn shard(&self, k: usize) -> Result<Vec<Vec<u8>>, PlanError> {
        let path = shard_file(&self.path, k);
        let paths = read_paths(&path)?;
        let expected = self.summary.shards.get(k).map_or(0, |s| s.paths);
        if paths.len() as u64 != expected {
            return Err(PlanError::Format {
                path,
                what: format!(
                    "{} paths, plan.json says {expected} (the plan was changed or cut off)",
                    paths.len()
                ),
            });
        }
        Ok(paths)
    }

    /// Every shard's paths together.
    pub fn all_paths(&self) -> Result<Vec<Vec<u8>>, PlanError> {
        let mut all = Vec::new();
        for k in 0..self.shards() {
            all.extend(self.shard(k)?);
        }
        Ok(all)
    }

    /// The directories below the source.
    pub fn dirs(&self) -> Result<Vec<Vec<u8>>, PlanError> {
        let path = self.path.join("dirs.paths");
        let dirs = read_paths(&path)?;
        if dirs.len() as u64 != self.summary.dirs {
            return Err(PlanError::Format {
                path,
                what: format!(
                    "{} directories, plan.json says {} (the plan was changed or cut off)",
                    dirs.len(),
                    self.summary.dirs
                ),
            });
        }
        Ok(dirs)
    }
}
