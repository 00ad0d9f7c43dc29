//! `sprat gen`: turns the command line into a data set specification for the engine's
//! generator and prints what was made.

use crate::args::{GenArgs, SizeSpecArgs};
use sprat_engine::TransferError;
use sprat_lab::dataset::{self, DatasetSpec, SizeDist};

/// Turns the size options into a data set specification (directory layout and threads
/// from the caller); the error names the conflicting options.
pub fn dataset_spec(
    a: &SizeSpecArgs,
    per_dir: u64,
    depth: u32,
    threads: usize,
) -> Result<DatasetSpec, TransferError> {
    let usage = TransferError::Usage;
    if a.files == Some(0) {
        return Err(usage("--files must be at least 1".into()));
    }
    let dist = match (&a.dist, a.size, a.files, a.total) {
        (Some(d), _, _, _) => {
            SizeDist::parse(d, a.max_size, crate::units::size).map_err(|e| usage(e.to_string()))?
        }
        (None, Some(s), _, _) => SizeDist::Fixed(s),
        (None, None, Some(n), Some(t)) => SizeDist::Fixed(t / n),
        (None, None, _, _) => SizeDist::Fixed(4096),
    };
    if a.dist.is_some() && a.files.is_some() && a.total.is_some() {
        return Err(usage(
            "--dist with both --files and --total: choose one of them".into(),
        ));
    }
    if a.size.is_some() && a.files.is_some() && a.total.is_some() {
        return Err(usage(
            "--size with both --files and --total: choose two of the three".into(),
        ));
    }
    Ok(DatasetSpec {
        // With a fixed size and a total, the count follows.
        files: match (a.files, &dist, a.total) {
            (None, SizeDist::Fixed(s), Some(t)) if *s > 0 => Some(t / s),
            (files, _, _) => files,
        },
        total: a.total,
        dist,
        per_dir,
        depth,
        seed: a.seed,
        threads,
    })
}

pub fn run(a: GenArgs) -> anyhow::Result<i32> {
    let spec = dataset_spec(&a.sizes, a.per_dir, a.depth, a.threads)?;
    let s = dataset::generate(&a.dir, &spec)?;
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        println!(
            "made {} files in {} directories, {:.1} MiB in {:.2} s ({:.0} files/s) in {}",
            s.files,
            s.dirs,
            s.bytes as f64 / 1048576.0,
            s.seconds,
            s.files as f64 / s.seconds.max(1e-9),
            a.dir.display()
        );
        println!(
            "file sizes: min {} B, median {} B, mean {:.0} B, max {} B",
            s.min_size, s.median_size, s.mean_size, s.max_size
        );
    }
    Ok(0)
}
