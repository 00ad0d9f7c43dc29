//! End-to-end tests of `sprat model`: predictions computed from the costs given, and clear
//! errors for bad ones.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_exit, assert_ok, bin};
use sprat_testkit::run_sprat;

fn model(args: &[&str]) -> std::process::Output {
    run_sprat(bin(), [&["model"][..], args].concat(), &[])
}

#[test]
fn predicts_bottleneck_threshold_time_and_nodes() {
    // Storage: 100 us per file at 1 GB/s; network: 1 us per file at 100 MB/s. They cross
    // where 100e-6 + x/1e9 = 1e-6 + x/1e8, i.e. x = 99e-6 / 9e-9 = 11,000 bytes.
    let out = model(&[
        "--read",
        "100us,1GB/s",
        "--network",
        "1us,100MB/s",
        "--write",
        "50us,2GB/s",
        "--files",
        "1000",
        "--total",
        "10MB",
        "--batch-size",
        "1MB",
        "--streams",
        "2",
        "--link",
        "8Gbit",
        "--json",
    ]);
    assert_ok(&out, None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let x = v["storage_bound_below_bytes"].as_f64().unwrap();
    assert!((x - 11_000.0).abs() < 1.0, "{x}");
    assert_eq!(v["by_file_size"][0]["bottleneck"], "read"); // 4 KiB
    assert_eq!(v["by_file_size"][3]["bottleneck"], "network"); // 16 MiB
    assert_eq!(v["batches"], 10);
    // One batch: 100 files, 1 MB. read 0.011 s, network 0.0101 s, write 0.0055 s.
    // T = T_R + T_W + (n/p) * T_max = 0.011 + 0.0055 + 5 * 0.011.
    let t = v["predicted_seconds"].as_f64().unwrap();
    assert!((t - 0.0715).abs() < 1e-9, "{t}");
    // Per node: read 10 MB / 0.11 s = 90.9 MB/s, write 10 MB / 0.055 s = 181.8 MB/s;
    // 1 GB/s needs ceil(1e9 / 90.9e6) = 11 nodes.
    assert_eq!(v["nodes_for_link"], 11);
    let text = model(&[
        "--read",
        "100us,1GB/s",
        "--network",
        "1us,100MB/s",
        "--write",
        "50us,2GB/s",
    ]);
    assert_ok(&text, None);
    let s = String::from_utf8(text.stdout).unwrap();
    assert!(s.contains("storage bounds files below 11000 B"), "{s}");
}

#[test]
fn bad_costs_name_the_option() {
    for (args, needle) in [
        (
            vec![
                "--read",
                "100us",
                "--network",
                "1us,1GB/s",
                "--write",
                "1us,1GB/s",
            ],
            "--read",
        ),
        (
            vec![
                "--read",
                "1us,1GB/s",
                "--network",
                "1us,9parsecs",
                "--write",
                "1us,1GB/s",
            ],
            "--network",
        ),
        (
            vec![
                "--read",
                "1us,1GB/s",
                "--network",
                "1us,1GB/s",
                "--write",
                "1us,0MB/s",
            ],
            "--write",
        ),
    ] {
        let out = model(&args);
        assert_exit(&out, 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{err}");
    }
}
