//! Live progress of `sprat cp` (issue 17, point 1): `--json-events` writes progress objects
//! with totals counted ahead of the copy, one object per failed file, and the report last;
//! `--progress` draws a line on stderr; nothing is drawn when the output is not a terminal.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use sprat_testkit::run::run_sprat;
use sprat_testkit::ServerOptions;
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
    // A file named as the partial copy of a large file beside it cannot be copied (see
    // hostile_data.rs): the one failure.
    std::fs::write(src.join("large"), vec![7u8; 3 << 20]).unwrap();
    std::fs::write(src.join(".large.sprat-part"), b"notes").unwrap();
    let chunked = [
        "--json-events",
        "--small-file-threshold",
        "1MiB",
        "--chunk-size",
        "1MiB",
    ];
    let out = cp_local(&chunked, &src, t.path().join("dst"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let events = lines(&out);
    let failed: Vec<_> = events.iter().filter(|e| e["event"] == "failed").collect();
    assert_eq!(failed.len(), 1, "{events:?}");
    assert_eq!(failed[0]["path"], ".large.sprat-part");
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
    // Whole lines, without a terminal's escapes.
    assert!(
        !stderr.contains('\x1b') && !stderr.contains('\r'),
        "{stderr:?}"
    );
    // The report on stdout is untouched by it.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ETA"));
}

/// The progress objects of a `--json-events` run, checked: valid, with the required fields,
/// never going back, and the final report last (returned apart).
fn progress_events(out: &std::process::Output) -> (Vec<serde_json::Value>, serde_json::Value) {
    let mut events = lines(out);
    let report = events.pop().unwrap();
    assert!(
        report.get("event").is_none(),
        "the report is last: {report}"
    );
    assert!(report["files"].is_u64(), "{report}");
    let progress: Vec<_> = events
        .into_iter()
        .filter(|e| e["event"] == "progress")
        .collect();
    let mut last = (0, 0);
    for e in &progress {
        for key in [
            "elapsed_s",
            "files_done",
            "bytes_done",
            "files_skipped",
            "bytes_skipped",
        ] {
            assert!(e[key].is_number(), "{key} in {e}");
        }
        for key in ["files_total", "bytes_total", "eta_s"] {
            assert!(e[key].is_number() || e[key].is_null(), "{key} in {e}");
        }
        let done = (
            e["files_done"].as_u64().unwrap(),
            e["bytes_done"].as_u64().unwrap(),
        );
        assert!(done.0 >= last.0 && done.1 >= last.1, "{e}");
        assert!(e["files_skipped"].as_u64() <= Some(done.0), "{e}");
        last = done;
    }
    assert!(
        !progress.is_empty(),
        "a progress object at the end at least"
    );
    (progress, report)
}

/// The last progress object says everything is done: `files` files and `bytes` bytes, of which
/// `skipped` files the destination had.
#[track_caller]
fn assert_all_done(progress: &[serde_json::Value], files: u64, bytes: u64, skipped: u64) {
    let end = progress.last().unwrap();
    assert_eq!(end["files_total"].as_u64(), Some(files), "{end}");
    assert_eq!(end["bytes_total"].as_u64(), Some(bytes), "{end}");
    assert_eq!(end["files_done"].as_u64(), Some(files), "{end}");
    assert_eq!(end["bytes_done"].as_u64(), Some(bytes), "{end}");
    assert_eq!(end["files_skipped"].as_u64(), Some(skipped), "{end}");
    assert_eq!(end["eta_s"].as_f64(), Some(0.0), "{end}");
}

/// A source whose first files in name order (`a/`: 1,000 of 8 KiB) a re-run finds up to date
/// and whose last (`z/`: two of 4 MiB) it copies again once `change_last` rewrote them.
fn make_resync_source(dir: &Path) {
    tree::make_many_files(&dir.join("a"), 1000, 8192, 7);
    change_last(dir, 8);
}

fn change_last(dir: &Path, seed: u64) {
    std::fs::create_dir_all(dir.join("z")).unwrap();
    for i in 0..2 {
        tree::make_file(
            &dir.join(format!("z/f{i}")),
            &tree::random_bytes(4 << 20, seed + i),
            0o644,
        );
    }
}

const RESYNC_FILES: u64 = 1002;
const RESYNC_BYTES: u64 = 1000 * 8192 + 2 * (4 << 20);

#[test]
fn a_pull_run_again_counts_what_the_server_skips_and_reaches_the_total() {
    let t = tmp();
    let root = t.path().join("root");
    make_resync_source(&root.join("src"));
    // The server tells what it skipped between two batches of a stream: chunks of 256 KiB
    // leave it a gap at least every fifth of a second through the relay below, whichever
    // files its scan meets first (with 4 MiB chunks every stream could be busy with one for
    // the whole copy when the scan met the large files first).
    let opts = ServerOptions {
        extra_args: vec!["--chunk-size".into(), "256KiB".into()],
        ..ServerOptions::default()
    };
    let srv = server_with(&root, &opts);
    let dst = t.path().join("dst");
    assert_eq!(cp(&srv, &[], srv.url("src"), &dst).status.code(), Some(0));
    change_last(&root.join("src"), 20);
    // Through the relay the two changed files take about 6 s: the server's counts of what it
    // skipped arrive while they are sent.
    let relay = RelayProc::start(srv.addr(), &["--rate", "12mbit"]);
    let out = cp(&srv, &["--json-events"], relay.url("src"), &dst);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (progress, report) = progress_events(&out);
    assert_eq!(report["up_to_date"].as_u64(), Some(1000), "{report}");
    assert_all_done(&progress, RESYNC_FILES, RESYNC_BYTES, 1000);
    // Before the end: skipped files counted as done while the others were copied (as many
    // as the server had skipped when it last said so).
    let (_, before_end) = progress.split_last().unwrap();
    assert!(
        before_end
            .iter()
            .any(|e| e["files_skipped"].as_u64() > Some(0)),
        "{progress:?}"
    );
    assert_trees_equal(&root.join("src"), &dst);
}

#[test]
fn push_and_local_runs_again_count_skipped_files_as_done() {
    let t = tmp();
    let src = t.path().join("src");
    make_resync_source(&src);
    let srv = server(&t.path().join("root"));
    let local = t.path().join("local");
    assert_eq!(cp(&srv, &[], &src, srv.url("dst")).status.code(), Some(0));
    assert_eq!(cp_local(&[], &src, &local).status.code(), Some(0));
    change_last(&src, 30);
    let pushed = cp(&srv, &["--json-events"], &src, srv.url("dst"));
    assert_eq!(pushed.status.code(), Some(0), "{pushed:?}");
    let (progress, _) = progress_events(&pushed);
    assert_all_done(&progress, RESYNC_FILES, RESYNC_BYTES, 1000);
    let copied = cp_local(&["--json-events"], &src, &local);
    assert_eq!(copied.status.code(), Some(0), "{copied:?}");
    let (progress, _) = progress_events(&copied);
    assert_all_done(&progress, RESYNC_FILES, RESYNC_BYTES, 1000);
    assert_trees_equal(&src, &t.path().join("root/dst"));
    assert_trees_equal(&src, &local);
}

#[test]
fn a_third_party_copy_shows_the_source_servers_progress() {
    let t = tmp();
    let a = server(&t.path().join("a"));
    let b = server(&t.path().join("b"));
    make_source(&t.path().join("a/src"));
    let (files, bytes) = (1002u64, 1000 * 8192 + 2 * (4u64 << 20));
    // The source server pushes through the relay: about 3 s.
    let relay = RelayProc::start(b.addr(), &["--rate", "40mbit"]);
    let out = cp(&a, &["--json-events"], a.url("src"), relay.url("dst"));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (progress, report) = progress_events(&out);
    assert_eq!(report["files"].as_u64(), Some(files), "{report}");
    assert_all_done(&progress, files, bytes, 0);
    // While it ran, not only at the end: the client is not in the data path.
    let (_, before_end) = progress.split_last().unwrap();
    assert!(
        before_end.iter().any(|e| {
            let done = e["bytes_done"].as_u64().unwrap();
            done > 0 && done < bytes
        }),
        "{progress:?}"
    );
    assert_trees_equal(&t.path().join("a/src"), &t.path().join("b/dst"));
}

/// With `-H`, the names of one file count once in the totals, as the copy sends the file once:
/// the last progress object is done, locally and pushed (before, two names short of its
/// total, with no time left).
#[test]
fn hard_links_count_once_in_the_progress_totals() {
    let t = tmp();
    let src = t.path().join("src");
    make_source(&src);
    std::fs::hard_link(src.join("big/f0"), src.join("small/link-a")).unwrap();
    std::fs::hard_link(src.join("big/f0"), src.join("link-b")).unwrap();
    let (files, bytes) = (1002u64, 1000 * 8192 + 2 * (4u64 << 20));
    let local = t.path().join("local");
    let out = run_sprat(
        bin(),
        cp_args(None, &["-H", "--json-events"], &src, &local),
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_all_done(&progress_events(&out).0, files, bytes, 0);
    assert_trees_equal(&src, &local);
    let srv = server(&t.path().join("root"));
    let out = cp(&srv, &["-H", "--json-events"], &src, srv.url("pushed"));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_all_done(&progress_events(&out).0, files, bytes, 0);
}
