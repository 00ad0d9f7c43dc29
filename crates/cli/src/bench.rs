//! `sprat bench`: subsystem measurements printed as a line of text or one JSON object.

use crate::args::{BenchCommand, BenchReadArgs, BenchWriteArgs};
use anyhow::Context;
use sprat_engine::bench;
use sprat_engine::bench::SubsystemRun;
use sprat_engine::TransferError;

pub fn run(command: BenchCommand) -> anyhow::Result<i32> {
    match command {
        BenchCommand::Write(a) => write(a),
        BenchCommand::Read(a) => read(a),
    }
}

fn check_threads(threads: usize) -> anyhow::Result<()> {
    if !(1..=256).contains(&threads) {
        return Err(TransferError::Usage("--threads must be between 1 and 256".into()).into());
    }
    Ok(())
}

fn read(a: BenchReadArgs) -> anyhow::Result<i32> {
    check_threads(a.common.threads)?;
    if !a.src.is_dir() {
        return Err(
            TransferError::Usage(format!("'{}' is not a directory", a.src.display())).into(),
        );
    }
    if a.common.drop_caches {
        drop_caches()?;
    }
    print(
        &bench::read_limit(&a.src, a.common.threads)?,
        "read limit",
        a.common.json,
    )
}

fn print(run: &SubsystemRun, what: &str, json: bool) -> anyhow::Result<i32> {
    if json {
        println!("{}", serde_json::to_string(run)?);
    } else {
        println!(
            "{what}: {} files, {} dirs, {} symlinks, {:.1} MB in {:.3} s: {:.1} MB/s, {:.0} files/s ({} threads)",
            run.files,
            run.dirs,
            run.symlinks,
            run.bytes as f64 / 1e6,
            run.seconds,
            run.mb_per_s,
            run.files_per_s,
            run.threads
        );
    }
    Ok(0)
}

fn write(a: BenchWriteArgs) -> anyhow::Result<i32> {
    check_threads(a.common.threads)?;
    crate::preserve_modes_exactly();
    if !a.src.is_dir() {
        return Err(
            TransferError::Usage(format!("'{}' is not a directory", a.src.display())).into(),
        );
    }
    let tree = bench::load_tree(&a.src)?;
    if a.common.drop_caches {
        drop_caches()?;
    }
    print(
        &bench::write_limit(&tree, &a.dst, a.common.threads)?,
        "write limit",
        a.common.json,
    )
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`.
fn drop_caches() -> anyhow::Result<()> {
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
        .context("--drop-caches: cannot write /proc/sys/vm/drop_caches (needs root)")
}
