//! `sprat model`: predictions from per-stage costs given on the command line (per-file
//! overhead and rate of read, network and write), printed as text or one JSON object.

use crate::args::ModelArgs;
use serde::Serialize;
use sprat_engine::model::{nodes_for_link, StageCost, Stages};
use sprat_engine::TransferError;

/// Parses `T0,RATE`, e.g. `50us,800MB/s`.
fn parse_cost(option: &str, text: &str) -> Result<StageCost, TransferError> {
    let bad = |why: String| TransferError::Usage(format!("{option} '{text}': {why}"));
    let (t0, rate) = text
        .split_once(',')
        .ok_or_else(|| bad("expected T0,RATE, e.g. 50us,800MB/s".into()))?;
    let t0_s = parse_duration(t0).map_err(bad)?;
    let rate_bytes_per_s = parse_rate(rate).map_err(bad)?;
    if rate_bytes_per_s <= 0.0 {
        return Err(bad("the rate must be positive".into()));
    }
    Ok(StageCost {
        t0_s,
        rate_bytes_per_s,
    })
}

/// Splits `12.5ms` into 12.5 and `ms`.
fn number_and_unit(text: &str) -> Result<(f64, String), String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let n: f64 = t[..split]
        .parse()
        .map_err(|_| format!("'{t}' does not start with a number"))?;
    if !n.is_finite() || n < 0.0 {
        return Err(format!("'{t}' is not a non-negative number"));
    }
    Ok((n, t[split..].trim().to_ascii_lowercase()))
}

/// `100ns`, `50us`, `1.5ms`, `2s`.
pub fn parse_duration(text: &str) -> Result<f64, String> {
    let (n, unit) = number_and_unit(text)?;
    let per_second = match unit.as_str() {
        "ns" => 1e9,
        "us" | "µs" => 1e6,
        "ms" => 1e3,
        "s" | "" => 1.0,
        other => return Err(format!("unknown time unit '{other}' (ns, us, ms, s)")),
    };
    Ok(n / per_second)
}

/// `800MB/s`, `1.2GB/s`, `512MiB/s`, `10Gbit` (bits per second), in bytes per second.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let (n, unit) = number_and_unit(text)?;
    let unit = unit.strip_suffix("/s").unwrap_or(&unit);
    let scale = match unit {
        "b" | "" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1048576.0,
        "gib" => 1073741824.0,
        "kbit" => 1e3 / 8.0,
        "mbit" => 1e6 / 8.0,
        "gbit" => 1e9 / 8.0,
        other => {
            return Err(format!(
                "unknown rate unit '{other}' (MB/s, GB/s, MiB/s, Mbit, Gbit, ...)"
            ))
        }
    };
    Ok(n * scale)
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
        .map(|l| parse_rate(l).map_err(|why| TransferError::Usage(format!("--link '{l}': {why}"))))
        .transpose()?;
    let (files, bytes) = (a.files as f64, a.total as f64);
    let batches = ((a.total as f64 / a.batch_size.max(1) as f64).ceil() as u64).max(1);
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
    let p = Prediction {
        stages,
        by_file_size,
        storage_bound_below_bytes: stages.storage_bound_below(),
        files: a.files,
        bytes: a.total,
        batches,
        streams: a.streams,
        predicted_seconds: stages.pipeline_time(files, bytes, batches as f64, a.streams as f64),
        read_alone_s: alone(stages.read),
        network_alone_s: alone(stages.network),
        write_alone_s: alone(stages.write),
        link_bytes_per_s: link,
        nodes_for_link: link
            .map(|l| nodes_for_link(l, bytes / alone(stages.read), bytes / alone(stages.write))),
    };
    if a.json {
        println!("{}", serde_json::to_string(&p)?);
        return Ok(0);
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
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations_and_rates() {
        assert_eq!(parse_duration("50us"), Ok(50e-6));
        assert_eq!(parse_duration("1.5ms"), Ok(1.5e-3));
        assert_eq!(parse_rate("800MB/s"), Ok(800e6));
        assert_eq!(parse_rate("10Gbit"), Ok(1.25e9));
        assert_eq!(parse_rate("1MiB/s"), Ok(1048576.0));
        assert!(parse_rate("5furlongs").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_cost("--read", "50us").is_err());
    }
}
