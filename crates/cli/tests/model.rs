//! End-to-end tests of `sprat model`: predictions computed from the costs given, clear
//! errors for bad ones, and `--run`: a real copy (to a local directory and to a real `sprat
//! serve`) measured next to its prediction.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_exit, assert_ok, bin, server, tmp};
use sprat_testkit::{
    assert_trees_equal_with, make_fidelity_tree, make_many_files, run_sprat, CompareOptions,
    TreeStats,
};
use std::ffi::OsString;
use std::path::Path;

fn model(args: &[&str]) -> std::process::Output {
    run_sprat(bin(), [&["model"][..], args].concat(), &[])
}

/// Storage: 100 us per file at 1 GB/s; network: 1 us per file at 100 MB/s; write 50 us per
/// file at 2 GB/s.
const STAGE_COSTS: &[&str] = &[
    "--read",
    "100us,1GB/s",
    "--network",
    "1us,100MB/s",
    "--write",
    "50us,2GB/s",
];

#[test]
fn predicts_bottleneck_threshold_time_and_nodes() {
    // Storage: 100 us per file at 1 GB/s; network: 1 us per file at 100 MB/s. They cross
    // where 100e-6 + x/1e9 = 1e-6 + x/1e8, i.e. x = 99e-6 / 9e-9 = 11,000 bytes.
    let set = ["--files", "1000", "--total", "10MB", "--batch-size", "1MB"];
    let out = model(
        &[
            STAGE_COSTS,
            &set,
            &["--streams", "2", "--link", "8Gbit", "--json"],
        ]
        .concat(),
    );
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
    let text = model(STAGE_COSTS);
    assert_ok(&text, None);
    let s = String::from_utf8(text.stdout).unwrap();
    assert!(s.contains("storage bounds files below 11000 B"), "{s}");
    // `--nodes RATE` is the same question.
    let nodes = model(&[STAGE_COSTS, &set, &["--nodes", "8Gbit", "--json"]].concat());
    assert_ok(&nodes, None);
    let v: serde_json::Value = serde_json::from_slice(&nodes.stdout).unwrap();
    assert_eq!(v["nodes_for_link"], 11);
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

const COSTS: [&str; 6] = [
    "--read",
    "60us,900MB/s",
    "--network",
    "5us,1GB/s",
    "--write",
    "40us,700MB/s",
];

/// `sprat model COSTS [extra] --run SRC DST --json`, parsed.
fn model_run(extra: &[OsString], src: &Path, dst: impl Into<OsString>) -> serde_json::Value {
    let mut args: Vec<OsString> = vec!["model".into()];
    args.extend(COSTS.iter().map(OsString::from));
    args.extend(extra.iter().cloned());
    args.extend(["--json".into(), "--run".into(), src.into(), dst.into()]);
    let out = run_sprat(bin(), args, &[]);
    assert_ok(&out, None);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The prediction is made for SRC's counts, and both times are there and positive.
fn check_run_fields(v: &serde_json::Value, made: &TreeStats) {
    assert_eq!(v["files"], made.files, "{v}");
    assert_eq!(v["bytes"], made.bytes, "{v}");
    let run = &v["run"];
    assert_eq!(run["files"], made.files, "{v}");
    assert_eq!(run["bytes"], made.bytes, "{v}");
    assert_eq!(run["failed"], 0, "{v}");
    for key in [
        "predicted_seconds",
        "measured_seconds",
        "engine_seconds",
        "measured_over_predicted",
    ] {
        let x = run[key].as_f64().unwrap_or(-1.0);
        assert!(x > 0.0 && x.is_finite(), "{key} = {x}: {v}");
    }
    assert_eq!(run["predicted_seconds"], v["predicted_seconds"], "{v}");
    let ratio =
        run["measured_seconds"].as_f64().unwrap() / run["predicted_seconds"].as_f64().unwrap();
    assert!(
        (ratio - run["measured_over_predicted"].as_f64().unwrap()).abs() < 1e-9 * ratio.max(1.0)
    );
    for key in ["predicted_bottleneck", "measured_bottleneck"] {
        assert!(!run[key].as_str().unwrap_or("").is_empty(), "{key}: {v}");
    }
}

#[test]
fn run_to_a_local_directory_measures_a_complete_copy() {
    let t = tmp();
    let src = t.path().join("src");
    let made = make_fidelity_tree(&src);
    let dst = t.path().join("dst");
    let v = model_run(&[], &src, &dst);
    check_run_fields(&v, &made);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());

    // The text form prints both times and their ratio.
    let dst2 = t.path().join("dst2");
    std::fs::create_dir(&dst2).unwrap(); // an empty directory is accepted
    let mut args: Vec<OsString> = vec!["model".into()];
    args.extend(COSTS.iter().map(OsString::from));
    args.extend(["--run".into(), src.clone().into(), dst2.clone().into()]);
    let out = run_sprat(bin(), args, &[]);
    assert_ok(&out, None);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("predicted ") && text.contains("measured "),
        "{text}"
    );
    assert!(text.contains("measured / predicted = "), "{text}");
    assert_trees_equal_with(&src, &dst2, &CompareOptions::with_root());
}

#[test]
fn run_to_a_server_measures_a_complete_push() {
    let t = tmp();
    let src = t.path().join("src");
    let made = make_many_files(&src, 300, 4096, 7);
    let root = t.path().join("root");
    let srv = server(&root);
    let mut extra = srv.client_args();
    extra.extend([
        "--streams".into(),
        "2".into(),
        "--batch-size".into(),
        "256KiB".into(),
    ]);
    let v = model_run(&extra, &src, srv.url("dst"));
    check_run_fields(&v, &made);
    assert_eq!(v["streams"], 2, "{v}");
    // 300 x 4 KiB = 1,228,800 B in batches of 256 KiB: 5 batches predicted.
    assert_eq!(v["batches"], 5, "{v}");
    assert!(
        v["run"]["destination"]
            .as_str()
            .unwrap()
            .starts_with("sprat://"),
        "{v}"
    );
    assert_trees_equal_with(&src, &root.join("dst"), &CompareOptions::with_root());
}

#[test]
fn run_refuses_a_destination_that_is_not_empty() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 5, 100, 1);
    let dst = t.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    std::fs::write(dst.join("already-here"), b"x").unwrap();
    let root = t.path().join("root");
    let srv = server(&root);
    std::fs::create_dir_all(root.join("busy")).unwrap();
    std::fs::write(root.join("busy/file"), b"x").unwrap();
    for (dst_arg, extra) in [
        (OsString::from(&dst), Vec::new()),
        (OsString::from(srv.url("busy")), srv.client_args()),
    ] {
        let mut args: Vec<OsString> = vec!["model".into()];
        args.extend(COSTS.iter().map(OsString::from));
        args.extend(extra);
        args.extend(["--run".into(), src.clone().into(), dst_arg.clone()]);
        let out = run_sprat(bin(), args, &[]);
        assert_exit(&out, 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not empty"), "{err}");
        assert!(err.contains(&*dst_arg.to_string_lossy()), "{err}");
    }
    // Nothing was copied into either.
    assert_eq!(std::fs::read_dir(&dst).unwrap().count(), 1);
    assert_eq!(std::fs::read_dir(root.join("busy")).unwrap().count(), 1);

    // --files/--total are taken from SRC with --run: giving them too is refused.
    let mut args: Vec<OsString> = vec!["model".into()];
    args.extend(COSTS.iter().map(OsString::from));
    args.extend([
        "--files".into(),
        "10".into(),
        "--run".into(),
        src.clone().into(),
        t.path().join("new").into(),
    ]);
    let out = run_sprat(bin(), args, &[]);
    assert_exit(&out, 2);
    assert!(!t.path().join("new").exists());
}
