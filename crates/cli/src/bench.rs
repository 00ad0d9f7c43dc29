//! `sprat bench`: subsystem measurements printed as a line of text or one JSON object.

use crate::args::{
    BenchCommand, BenchCommon, BenchCopyArgs, BenchNetworkArgs, BenchOverheadArgs, BenchReadArgs,
    BenchWriteArgs,
};
use anyhow::Context;
use sprat_engine::{push_input, PushInput};
use sprat_engine::{Endpoint, TransferError, TransferOptions};
use sprat_lab::bench;
use sprat_lab::bench::{MemTree, SubsystemRun};

pub fn run(command: BenchCommand) -> anyhow::Result<i32> {
    match command {
        BenchCommand::Write(a) => write(a),
        BenchCommand::Read(a) => read(a),
        BenchCommand::Network(a) => network(a),
        BenchCommand::Overhead(a) => overhead(a),
        BenchCommand::Copy(a) => copy(a),
    }
}

fn overhead(a: BenchOverheadArgs) -> anyhow::Result<i32> {
    if a.points.iter().any(|&n| n == 0 || n > a.total) {
        return Err(TransferError::Usage(
            "--points: every number of files must be at least 1 and at most --total bytes".into(),
        )
        .into());
    }
    crate::preserve_modes_exactly();
    let plan = bench::OverheadPlan {
        dir: a.dir.clone(),
        total: a.total,
        points: a.points.clone(),
        drop_caches: a
            .drop_caches
            .then_some(drop_caches_io as fn() -> std::io::Result<()>),
        options: TransferOptions::default(),
    };
    let json = a.json;
    let report = bench::overhead(&plan, |run| {
        if !json {
            eprintln!(
                "  {:<10} {:>7} files {:>8.3} s  {:>8.1} MB/s {:>9.0} files/s",
                run.subsystem, run.files, run.seconds, run.mb_per_s, run.files_per_s
            );
        }
    })
    .with_context(|| format!("in '{}'", a.dir.display()))?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(0);
    }
    println!("subsystem    t0 per file     rate          r2");
    for (name, fit) in [
        ("read", report.read),
        ("network", report.network),
        ("write", report.write),
        ("end_to_end", report.end_to_end),
    ] {
        match fit {
            Some(f) => println!(
                "{name:<12} {:>9.1} us  {:>9.1} MB/s  {:.4}",
                f.cost.t0_s * 1e6,
                f.cost.rate_bytes_per_s / 1e6,
                f.r2
            ),
            None => println!("{name:<12} no fit (the samples do not separate t0 from R)"),
        }
    }
    match report.end_to_end_between_max_and_sum {
        Some(true) => println!("end-to-end t0 lies between the largest subsystem t0 and their sum"),
        Some(false) => println!("end-to-end t0 lies OUTSIDE [largest subsystem t0, sum of them]"),
        None => {}
    }
    for (files, predicted, measured) in &report.predictions {
        println!(
            "{files:>7} files: model predicts {predicted:.3} s end to end, measured {measured:.3} s ({:.2}x)",
            measured / predicted
        );
    }
    Ok(0)
}

fn drop_caches_io() -> std::io::Result<()> {
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
}

fn network(a: BenchNetworkArgs) -> anyhow::Result<i32> {
    let client = crate::client(&a.connect, &[&a.url])?;
    let key = client.key;
    let url = client.urls.into_iter().next().unwrap_or_default();
    let Endpoint::Remote { addr, path, .. } = Endpoint::parse(&url)? else {
        return Err(TransferError::Usage(format!(
            "'{}' is not a server URL (sprat://HOST:PORT/)",
            a.url.to_string_lossy()
        ))
        .into());
    };
    let spec = crate::gen::dataset_spec(&a.sizes, 1000, 1, 1)?;
    let sizes = sprat_lab::dataset::plan_sizes(&spec)?;
    let options = TransferOptions {
        streams: a.streams.0,
        batch_size: a.batch_size,
        ..TransferOptions::default()
    };
    options.validate()?;
    let report = push_input(
        PushInput::Synthetic(sizes),
        &addr,
        &path,
        &key,
        &options,
        "memory (synthetic files)".into(),
        format!("{} (verified and dropped)", url.to_string_lossy()),
    )?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{report}");
    }
    Ok(if report.failed > 0 { 1 } else { 0 })
}

fn check_threads(threads: usize, option: &str) -> anyhow::Result<()> {
    if !(1..=256).contains(&threads) {
        return Err(TransferError::Usage(format!("{option} must be between 1 and 256")).into());
    }
    Ok(())
}

fn read(a: BenchReadArgs) -> anyhow::Result<i32> {
    check_threads(a.common.threads, "--threads")?;
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

/// The untimed part of `write` and `copy`: the tree at `src` loaded into memory, then the
/// caches dropped if asked.
fn load_for_writing(src: &std::path::Path, common: &BenchCommon) -> anyhow::Result<MemTree> {
    check_threads(common.threads, "--threads")?;
    crate::preserve_modes_exactly();
    if !src.is_dir() {
        return Err(TransferError::Usage(format!("'{}' is not a directory", src.display())).into());
    }
    let tree = bench::load_tree(src)?;
    if common.drop_caches {
        drop_caches()?;
    }
    Ok(tree)
}

fn write(a: BenchWriteArgs) -> anyhow::Result<i32> {
    let tree = load_for_writing(&a.src, &a.common)?;
    print(
        &bench::write_limit(&tree, &a.dst, a.common.threads)?,
        "write limit",
        a.common.json,
    )
}

fn copy(a: BenchCopyArgs) -> anyhow::Result<i32> {
    check_threads(a.read_threads, "--read-threads")?;
    let tree = load_for_writing(&a.src, &a.common)?;
    let run = bench::copy_limit(&a.src, &tree, &a.dst, a.read_threads, a.common.threads)?;
    if a.common.json {
        println!("{}", serde_json::to_string(&run)?);
        return Ok(0);
    }
    print(&run.both, "copy limit", false)?;
    println!(
        "  reading done at {:.3} s ({} threads), writing done at {:.3} s ({} threads)",
        run.read_seconds, run.read_threads, run.write_seconds, run.both.threads
    );
    Ok(0)
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`.
fn drop_caches() -> anyhow::Result<()> {
    drop_caches_io().context("--drop-caches: cannot write /proc/sys/vm/drop_caches (needs root)")
}
