//! Data sets for tests and benchmarks (`sprat gen`): many files with sizes drawn from a
//! distribution, spread over a tree of directories, with incompressible content.
//!
//! Everything is a function of the seed: the same specification gives the same names, sizes
//! and bytes on every run and machine, whatever the number of writer threads. Not part of a
//! transfer's path: it writes with plain `std::fs` calls from a few threads.

pub mod dist;

pub use dist::SizeDist;
use rand::{RngCore, SeedableRng};
use sprat_engine::TransferError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Most files one data set may have (the size list is held in memory: 8 bytes per file).
pub const MAX_FILES: u64 = 100_000_000;

/// What to generate.
#[derive(Debug, Clone)]
pub struct DatasetSpec {
    /// Number of files; `None`: draw sizes until `total` bytes.
    pub files: Option<u64>,
    /// Total bytes; with `files` unset, the set stops at exactly this many bytes.
    pub total: Option<u64>,
    pub dist: SizeDist,
    /// Files per directory.
    pub per_dir: u64,
    /// Levels of directories above the files (0: every file directly in the root).
    pub depth: u32,
    pub seed: u64,
    /// Writer threads.
    pub threads: usize,
}

/// What was generated.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DatasetSummary {
    pub files: u64,
    pub dirs: u64,
    pub bytes: u64,
    pub min_size: u64,
    pub median_size: u64,
    pub mean_size: f64,
    pub max_size: u64,
    pub seconds: f64,
}

/// Draws the size of every file of the set, in file order.
pub fn plan_sizes(spec: &DatasetSpec) -> Result<Vec<u64>, TransferError> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(spec.seed);
    match (spec.files, spec.total) {
        (Some(n), _) if n > MAX_FILES => Err(TransferError::Usage(format!(
            "--files {n}: at most {MAX_FILES} files per data set"
        ))),
        (Some(n), _) => Ok((0..n).map(|_| spec.dist.sample(&mut rng)).collect()),
        (None, Some(total)) => {
            let mean = spec.dist.mean();
            if mean <= 0.0 {
                return Err(TransferError::Usage(
                    "--total needs a file size above 0".into(),
                ));
            }
            if total as f64 / mean > MAX_FILES as f64 {
                return Err(TransferError::Usage(format!(
                    "--total {total} bytes in files of ~{mean:.0} bytes would be more than \
                     {MAX_FILES} files"
                )));
            }
            let mut sizes = Vec::with_capacity((total as f64 / mean) as usize + 1);
            let mut sum = 0u64;
            while sum < total {
                let s = spec.dist.sample(&mut rng).min(total - sum);
                sizes.push(s);
                sum += s;
            }
            Ok(sizes)
        }
        (None, None) => Err(TransferError::Usage(
            "say how large the set is: --files N or --total SIZE".into(),
        )),
    }
}

/// The relative directory of leaf directory `d` out of `dirs`, `depth` levels deep.
fn dir_path(d: u64, dirs: u64, depth: u32) -> PathBuf {
    let mut path = PathBuf::new();
    if depth == 0 {
        return path;
    }
    // Smallest fan-out f with f^depth >= dirs.
    let mut fanout = 1u64;
    while fanout.saturating_pow(depth) < dirs {
        fanout += 1;
    }
    let width = digits(fanout.saturating_sub(1));
    for level in (0..depth).rev() {
        let digit = (d / fanout.saturating_pow(level)) % fanout;
        path.push(format!("d{digit:0width$}"));
    }
    path
}

fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// Writes the data set into `dir`, which must be missing or empty.
pub fn generate(dir: &Path, spec: &DatasetSpec) -> Result<DatasetSummary, TransferError> {
    let started = Instant::now();
    if spec.per_dir == 0 {
        return Err(TransferError::Usage("--per-dir must be at least 1".into()));
    }
    let sizes = plan_sizes(spec)?;
    let io = |what: &str, path: &Path, e: std::io::Error| {
        TransferError::Local(format!("{what} '{}': {e}", path.display()))
    };
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(TransferError::Usage(format!(
                    "'{}' is not empty; give a new or empty directory",
                    dir.display()
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| io("cannot create", dir, e))?
        }
        Err(e) => return Err(io("cannot read", dir, e)),
    }
    let n = sizes.len() as u64;
    let dirs = if spec.depth == 0 {
        0
    } else {
        n.div_ceil(spec.per_dir)
    };
    let leaf = |i: u64| dir_path(i / spec.per_dir, dirs, spec.depth);
    let mut made = std::collections::BTreeSet::new();
    for d in 0..dirs {
        let rel = dir_path(d, dirs, spec.depth);
        let path = dir.join(&rel);
        std::fs::create_dir_all(&path).map_err(|e| io("cannot create", &path, e))?;
        for a in rel.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            made.insert(a.to_path_buf());
        }
    }
    let name_width = digits(n.saturating_sub(1));
    let next = AtomicU64::new(0);
    let failure: Mutex<Option<TransferError>> = Mutex::new(None);
    const CLAIM: u64 = 64;
    std::thread::scope(|s| {
        for _ in 0..spec.threads.max(1) {
            s.spawn(|| {
                let mut buf = vec![0u8; 0];
                loop {
                    let first = next.fetch_add(CLAIM, Ordering::Relaxed);
                    if first >= n || failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                        break;
                    }
                    for i in first..(first + CLAIM).min(n) {
                        let path = dir.join(leaf(i)).join(format!("f{i:0name_width$}"));
                        let size = sizes[i as usize];
                        if let Err(e) = write_file(&path, size, spec.seed, i, &mut buf) {
                            if let Ok(mut f) = failure.lock() {
                                f.get_or_insert(io("cannot write", &path, e));
                            }
                            return;
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    let mut sorted = sizes.clone();
    sorted.sort_unstable();
    let bytes: u64 = sizes.iter().sum();
    Ok(DatasetSummary {
        files: n,
        dirs: made.len() as u64,
        bytes,
        min_size: sorted.first().copied().unwrap_or(0),
        median_size: sorted.get(sorted.len() / 2).copied().unwrap_or(0),
        mean_size: if n == 0 { 0.0 } else { bytes as f64 / n as f64 },
        max_size: sorted.last().copied().unwrap_or(0),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Writes `size` pseudo-random bytes (a function of the seed and the file's index) to a new
/// file at `path`; `buf` is reused between calls.
fn write_file(
    path: &Path,
    size: u64,
    seed: u64,
    index: u64,
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    const PIECE: u64 = 4 << 20;
    let mut rng = rand::rngs::StdRng::seed_from_u64(
        seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    let mut file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)?;
    let mut left = size;
    while left > 0 {
        let piece = left.min(PIECE) as usize;
        buf.resize(piece, 0);
        rng.fill_bytes(&mut buf[..piece]);
        file.write_all(&buf[..piece])?;
        left -= piece as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(files: Option<u64>, total: Option<u64>, dist: SizeDist) -> DatasetSpec {
        DatasetSpec {
            files,
            total,
            dist,
            per_dir: 10,
            depth: 2,
            seed: 3,
            threads: 3,
        }
    }

    /// Every file below `dir`: relative path and bytes, sorted by path.
    fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("readable") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(dir).expect("below").to_path_buf();
                    out.push((rel, std::fs::read(&p).expect("readable")));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn total_is_hit_exactly() {
        let s = spec(
            None,
            Some(1_000_000),
            SizeDist::gridftp(Some(1 << 20)).unwrap(),
        );
        let sizes = plan_sizes(&s).expect("plans");
        assert_eq!(sizes.iter().sum::<u64>(), 1_000_000);
    }

    #[test]
    fn directories_spread_over_levels() {
        assert_eq!(dir_path(0, 100, 2), PathBuf::from("d0/d0"));
        assert_eq!(dir_path(99, 100, 2), PathBuf::from("d9/d9"));
        assert_eq!(dir_path(37, 100, 2), PathBuf::from("d3/d7"));
        assert_eq!(dir_path(5, 6, 1), PathBuf::from("d5"));
        assert_eq!(dir_path(5, 6, 0), PathBuf::new());
    }

    #[test]
    fn same_seed_same_set_whatever_the_threads() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut a = spec(Some(57), None, SizeDist::LogUniform { min: 1, max: 9000 });
        generate(&tmp.path().join("a"), &a).expect("generates");
        a.threads = 1;
        generate(&tmp.path().join("b"), &a).expect("generates");
        assert_eq!(
            contents(&tmp.path().join("a")),
            contents(&tmp.path().join("b"))
        );
        assert_eq!(contents(&tmp.path().join("a")).len(), 57);
        let err = generate(&tmp.path().join("a"), &a).expect_err("not empty");
        assert!(err.to_string().contains("not empty"), "{err}");
    }
}
