//! `sprat model`: predictions from per-stage costs given on the command line (per-file
//! overhead and rate of read, network and write), printed as text or one JSON object; with
//! `--run SRC DST`, also a real copy of SRC to DST, measured and printed next to its
//! prediction.

use crate::args::ModelArgs;
use serde::Serialize;
use sprat_engine::remote;
use sprat_engine::Credentials;
use sprat_engine::ErrorCode;
use sprat_engine::NsKind;
use sprat_engine::{Endpoint, TransferError};
use sprat_lab::model::{nodes_for_link, StageCost, Stages};
use std::ffi::OsString;
use std::path::Path;
use std::time::Instant;

/// Parses `T0,RATE`, e.g. `50us,800MB/s`.
fn parse_cost(option: &str, text: &str) -> Result<StageCost, TransferError> {
    let bad = |why: String| TransferError::Usage(format!("{option} '{text}': {why}"));
    let (t0, rate) = text
        .split_once(',')
        .ok_or_else(|| bad("expected T0,RATE, e.g. 50us,800MB/s".into()))?;
    let t0_s = crate::units::duration(t0)
        .map_err(|e| bad(e.to_string()))?
        .as_secs_f64();
    let rate_bytes_per_s = crate::units::Rate::parse(rate)
        .map_err(|e| bad(e.to_string()))?
        .bytes_per_s();
    if rate_bytes_per_s <= 0.0 {
        return Err(bad("the rate must be positive".into()));
    }
    Ok(StageCost {
        t0_s,
        rate_bytes_per_s,
    })
}

#[derive(Serialize)]
struct SizePoint {
    file_size: u64,
    bottleneck: &'static str,
    seconds_per_file: f64,
}

#[derive(Serialize)]
struct Prediction {
    stages: Stages,
    by_file_size: Vec<SizePoint>,
    /// Files smaller than this are bound by storage, larger ones by the network (`null`:
    /// one of them bounds every size).
    storage_bound_below_bytes: Option<f64>,
    files: u64,
    bytes: u64,
    batches: u64,
    streams: usize,
    predicted_seconds: f64,
    read_alone_s: f64,
    network_alone_s: f64,
    write_alone_s: f64,
    link_bytes_per_s: Option<f64>,
    nodes_for_link: Option<u64>,
    /// With `--run`: the real copy, measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    run: Option<Measured>,
}

/// A real copy set against its prediction.
#[derive(Serialize)]
struct Measured {
    source: String,
    destination: String,
    /// What the copy moved (from its report).
    files: u64,
    dirs: u64,
    symlinks: u64,
    bytes: u64,
    failed: u64,
    predicted_seconds: f64,
    /// Wall time of the copy, from the call to its return (connection set-up included).
    measured_seconds: f64,
    /// The engine's own time of the copy (its report's `seconds`).
    engine_seconds: f64,
    /// measured / predicted: above 1, the copy was slower than predicted.
    measured_over_predicted: f64,
    /// The model's bottleneck stage for the data set's mean file size.
    predicted_bottleneck: &'static str,
    /// The stage the copy itself reported as its bottleneck.
    measured_bottleneck: &'static str,
}

/// `--run SRC DST`, checked: SRC a local tree (counted), DST missing or empty.
struct RunPlan {
    src: Endpoint,
    dst: Endpoint,
    key: Credentials,
    files: u64,
    bytes: u64,
}

fn plan_run(pair: &[OsString], connect: &crate::args::ConnectArgs) -> anyhow::Result<RunPlan> {
    let [src_arg, dst_arg] = pair else {
        return Err(TransferError::Usage("--run takes two arguments: SRC DST".into()).into());
    };
    let client = crate::client(connect, &[src_arg, dst_arg])?;
    let src = Endpoint::parse(&client.url(0))?;
    let dst = Endpoint::parse(&client.url(1))?;
    let Endpoint::Local(src_path) = &src else {
        return Err(TransferError::Usage(format!(
            "--run SRC '{src}' must be a local tree: the model counts its files and bytes"
        ))
        .into());
    };
    let key = client.key;
    let counts = sprat_lab::bench::count_tree(src_path)
        .map_err(|e| TransferError::Usage(format!("--run SRC '{}': {e}", src_path.display())))?;
    if counts.files == 0 {
        return Err(TransferError::Usage(format!(
            "--run SRC '{}' holds no regular files: nothing to predict",
            src_path.display()
        ))
        .into());
    }
    match &dst {
        Endpoint::Local(d) => refuse_nonempty_local(d)?,
        Endpoint::Remote { addr, path, .. } => refuse_nonempty_remote(addr, path, &key, &dst)?,
    }
    Ok(RunPlan {
        src,
        dst,
        key,
        files: counts.files,
        bytes: counts.bytes,
    })
}

const GIVE_EMPTY: &str = "give a new or empty directory, so that the run copies the whole tree";

fn refuse_nonempty_local(d: &Path) -> anyhow::Result<()> {
    let refuse = |why: &str| -> anyhow::Result<()> {
        Err(TransferError::Usage(format!("--run DST '{}' {why}; {GIVE_EMPTY}", d.display())).into())
    };
    match std::fs::symlink_metadata(d) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(TransferError::Local(format!(
            "cannot examine --run DST '{}': {e}",
            d.display()
        ))
        .into()),
        Ok(m) if !m.is_dir() => refuse("exists and is not a directory"),
        Ok(_) => {
            let mut entries = std::fs::read_dir(d).map_err(|e| {
                TransferError::Local(format!("cannot list --run DST '{}': {e}", d.display()))
            })?;
            match entries.next() {
                None => Ok(()),
                Some(_) => refuse("exists and is not empty"),
            }
        }
    }
}

fn refuse_nonempty_remote(
    addr: &str,
    path: &[u8],
    key: &Credentials,
    dst: &Endpoint,
) -> anyhow::Result<()> {
    let refuse = |why: &str| -> anyhow::Result<()> {
        Err(TransferError::Usage(format!("--run DST '{dst}' {why}; {GIVE_EMPTY}")).into())
    };
    match remote::stat(addr, key, path) {
        Err(TransferError::Remote {
            code: ErrorCode::NotFound,
            ..
        }) => Ok(()),
        Err(e) => Err(e.into()),
        Ok(e) if e.kind != NsKind::Dir => refuse("exists and is not a directory"),
        Ok(_) => {
            let mut below = 0u64;
            remote::list(addr, key, path, false, |e| {
                if !e.path.is_empty() {
                    below += 1;
                }
            })?;
            if below > 0 {
                refuse("exists and is not empty")
            } else {
                Ok(())
            }
        }
    }
}

pub fn run(a: ModelArgs) -> anyhow::Result<i32> {
    let stages = Stages {
        read: parse_cost("--read", &a.read)?,
        network: parse_cost("--network", &a.network)?,
        write: parse_cost("--write", &a.write)?,
    };
    if a.files == 0 || a.streams == 0 {
        return Err(TransferError::Usage("--files and --streams must be at least 1".into()).into());
    }
    let link = a
        .link
        .as_deref()
        .map(|l| {
            crate::units::Rate::parse(l)
                .map(crate::units::Rate::bytes_per_s)
                .map_err(|why| TransferError::Usage(format!("--link '{l}': {why}")))
        })
        .transpose()?;
    let options = crate::options(&a.tuning, None, true);
    options.validate()?;
    let plan = a
        .run
        .as_deref()
        .map(|pair| plan_run(pair, &a.connect))
        .transpose()?;
    let (n_files, n_bytes) = match &plan {
        Some(p) => (p.files, p.bytes),
        None => (a.files, a.total),
    };
    let (files, bytes) = (n_files as f64, n_bytes as f64);
    let batches = ((bytes / options.batch_size.max(1) as f64).ceil() as u64).max(1);
    let alone = |c: StageCost| c.time(files, bytes);
    let by_file_size = [4 << 10, 64 << 10, 1 << 20, 16 << 20]
        .into_iter()
        .map(|size: u64| {
            let (bottleneck, seconds_per_file) = stages.bottleneck(size as f64);
            SizePoint {
                file_size: size,
                bottleneck,
                seconds_per_file,
            }
        })
        .collect();
    let predicted_seconds = stages.pipeline_time(files, bytes, batches as f64, a.streams as f64);
    let measured = match plan {
        Some(plan) => Some(measure(plan, &options, &stages, predicted_seconds)?),
        None => None,
    };
    let p = Prediction {
        stages,
        by_file_size,
        storage_bound_below_bytes: stages.storage_bound_below(),
        files: n_files,
        bytes: n_bytes,
        batches,
        streams: a.streams,
        predicted_seconds,
        read_alone_s: alone(stages.read),
        network_alone_s: alone(stages.network),
        write_alone_s: alone(stages.write),
        link_bytes_per_s: link,
        nodes_for_link: link
            .map(|l| nodes_for_link(l, bytes / alone(stages.read), bytes / alone(stages.write))),
        run: measured,
    };
    let code = match &p.run {
        Some(m) if m.failed > 0 => 1,
        _ => 0,
    };
    if a.json {
        println!("{}", serde_json::to_string(&p)?);
        return Ok(code);
    }
    println!("stage     per-file overhead  rate");
    for (name, c) in [
        ("read", stages.read),
        ("network", stages.network),
        ("write", stages.write),
    ] {
        println!(
            "{name:<9} {:>12.1} us  {:>10.1} MB/s",
            c.t0_s * 1e6,
            c.rate_bytes_per_s / 1e6
        );
    }
    for s in &p.by_file_size {
        println!(
            "files of {:>8} B: bottleneck {} ({:.1} us per file)",
            s.file_size,
            s.bottleneck,
            s.seconds_per_file * 1e6
        );
    }
    match p.storage_bound_below_bytes {
        Some(x) => println!("storage bounds files below {x:.0} B; the network bounds larger ones"),
        None => {
            let (stage, _) = stages.bottleneck(1e12);
            let kind = if stage == "network" {
                "the network"
            } else {
                "storage"
            };
            println!("no crossover: {kind} bounds files of every size")
        }
    }
    println!(
        "{} files, {} B in {} batches over {} streams: predicted {:.3} s (one pipeline's stages alone: read {:.3} s, network {:.3} s, write {:.3} s)",
        p.files, p.bytes, p.batches, p.streams, p.predicted_seconds, p.read_alone_s, p.network_alone_s, p.write_alone_s
    );
    if let (Some(l), Some(n)) = (p.link_bytes_per_s, p.nodes_for_link) {
        println!(
            "to fill {:.1} Gbit/s with this data set: {n} transfer node(s) (per node: read {:.1} MB/s, write {:.1} MB/s)",
            l * 8.0 / 1e9,
            bytes / p.read_alone_s / 1e6,
            bytes / p.write_alone_s / 1e6
        );
    }
    if let Some(m) = &p.run {
        let failed = if m.failed > 0 {
            format!(", {} FAILED", m.failed)
        } else {
            String::new()
        };
        println!(
            "run {} -> {}: {} files, {} directories, {} symlinks, {} B copied{failed}",
            m.source, m.destination, m.files, m.dirs, m.symlinks, m.bytes
        );
        println!(
            "predicted {:.3} s, measured {:.3} s (engine's own {:.3} s): measured / predicted = {:.2}",
            m.predicted_seconds, m.measured_seconds, m.engine_seconds, m.measured_over_predicted
        );
        println!(
            "bottleneck: predicted {} (mean file {:.0} B), measured {}",
            m.predicted_bottleneck,
            bytes / files,
            m.measured_bottleneck
        );
    }
    Ok(code)
}

/// Runs the planned copy as `sprat cp` does and sets its time against `predicted_seconds`.
fn measure(
    plan: RunPlan,
    options: &sprat_engine::TransferOptions,
    stages: &Stages,
    predicted_seconds: f64,
) -> anyhow::Result<Measured> {
    crate::preserve_modes_exactly();
    let started = Instant::now();
    let report = sprat_engine::copy(&plan.src, &plan.dst, &plan.key, options)?;
    let measured_seconds = started.elapsed().as_secs_f64();
    for f in &report.failures {
        eprintln!(
            "sprat: failed: {}: {}",
            sprat_engine::text::printable(&f.path),
            sprat_engine::text::printable(&f.error)
        );
    }
    let (predicted_bottleneck, _) = stages.bottleneck(plan.bytes as f64 / plan.files as f64);
    Ok(Measured {
        source: plan.src.to_string(),
        destination: plan.dst.to_string(),
        files: report.files,
        dirs: report.dirs,
        symlinks: report.symlinks,
        bytes: report.bytes,
        failed: report.failed,
        predicted_seconds,
        measured_seconds,
        engine_seconds: report.seconds,
        measured_over_predicted: measured_seconds / predicted_seconds.max(1e-12),
        predicted_bottleneck,
        measured_bottleneck: report.bottleneck,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_is_an_overhead_and_a_rate_each_with_its_unit() {
        let c = parse_cost("--read", "50us,800MB/s").expect("a valid cost");
        assert!((c.t0_s - 50e-6).abs() < 1e-12);
        assert_eq!(c.rate_bytes_per_s, 800e6);
        let c = parse_cost("--network", "0us,10gbit").expect("a valid cost");
        assert_eq!(c.rate_bytes_per_s, 1.25e9);
        assert!(parse_cost("--read", "50us").is_err());
        let no_unit = parse_cost("--write", "50,800MB/s").map_err(|e| e.to_string());
        assert!(no_unit.is_err_and(|e| e.contains("--write") && e.contains("no unit")));
    }
}
