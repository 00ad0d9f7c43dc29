//! Live progress of `sprat cp` (issue 17, point 1): `--json-events` writes progress objects
//! with totals counted ahead of the copy, one object per failed file, and the report last;
//! `--progress` draws a line on stderr; nothing is drawn when the output is not a terminal.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use sprat_testkit::run::run_sprat;
use sprat_testkit::{assert_trees_equal, tree};
use std::path::Path;

/// 1,000 files of 8 KiB and two of 4 MiB (about 16 MB).
fn make_source(dir: &Path) {
    tree::make_many_files(&dir.join("small"), 1000, 8192, 7);
    std::fs::create_dir_all(dir.join("big")).unwrap();
    for i in 0..2 {
        tree::make_file(
            &dir.join(format!("big/f{i}")),
            &tree::random_bytes(4 << 20, 8 + i),
            0o644,
        );
    }
}

fn lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn json_events_report_progress_with_totals_then_the_report() {
    let t = tmp();
    let src = t.path().join("src");
    make_source(&src);
    let (files, bytes) = (1002u64, 1000 * 8192 + 2 * (4u64 << 20));
    let srv = server(&t.path().join("root"));
    // About 3 s through the relay: several progress events.
    let relay = RelayProc::start(srv.addr(), &["--rate", "40mbit"]);
    let out = cp(&srv, &["--json-events"], &src, relay.url("dst"));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let events = lines(&out);
    let (report, progress) = events.split_last().unwrap();
    assert_eq!(report["files"].as_u64(), Some(files), "{report}");
    assert!(progress.len() >= 2, "{} progress events", progress.len());
    let mut last_done = 0;
    for e in progress {
        assert_eq!(e["event"], "progress", "{e}");
        for key in [
            "elapsed_s",
            "files_done",
            "bytes_done",
            "mb_per_s",
            "files_per_s",
        ] {
            assert!(e[key].is_number(), "{key} in {e}");
        }
        for key in ["files_total", "bytes_total", "eta_s"] {
            assert!(e[key].is_number() || e[key].is_null(), "{key} in {e}");
        }
        let done = e["bytes_done"].as_u64().unwrap();
        assert!(done >= last_done && done <= bytes, "{e}");
        last_done = done;
    }
    // The count of the source ends long before the copy: the totals are exact.
    let counted = progress
        .iter()
        .rev()
        .find(|e| e["files_total"].is_u64())
        .unwrap();
    assert_eq!(counted["files_total"].as_u64(), Some(files));
    assert_eq!(counted["bytes_total"].as_u64(), Some(bytes));
    assert!(counted["eta_s"].is_number(), "{counted}");
    assert_trees_equal(&src, &t.path().join("root/dst"));
}

#[test]
fn json_events_name_each_failed_file() {
    let t = tmp();
    let src = t.path().join("src");
    make_source(&src);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        src.join("a-fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let out = cp_local(&["--json-events"], &src, t.path().join("dst"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let events = lines(&out);
    let failed: Vec<_> = events.iter().filter(|e| e["event"] == "failed").collect();
    assert_eq!(failed.len(), 1, "{events:?}");
    assert_eq!(failed[0]["path"], "a-fifo");
    assert!(failed[0]["error"].is_string());
    assert_eq!(events.last().unwrap()["failed"].as_u64(), Some(1));
}

#[test]
fn no_progress_line_on_pipes_unless_asked() {
    let t = tmp();
    let src = t.path().join("src");
    make_source(&src);
    let srv = server(&t.path().join("root"));
    let relay = RelayProc::start(srv.addr(), &["--rate", "60mbit"]);
    // Output to pipes: nothing drawn.
    let out = cp(&srv, &[], &src, relay.url("quiet"));
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("ETA"));
    // Forced.
    let out = run_sprat(
        bin(),
        cp_args(Some(&srv), &["--progress"], &src, relay.url("shown")),
        &[],
    );
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("files") && stderr.contains("ETA"),
        "{stderr}"
    );
    // The report on stdout is untouched by it.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ETA"));
}
