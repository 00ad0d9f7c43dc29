//! rsync's habits in `sprat cp` (issue 17, point 3): `-v` lists each file on stdout as it
//! completes (exactly the files copied, nothing on a re-run with nothing to do), in a push, a
//! pull and a local copy, and `--bwlimit RATE` keeps a push and a pull at or under RATE.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use sprat_testkit::{assert_trees_equal, tree};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

/// A name with a newline: listed escaped, on one line.
const ODD_NAME: &str = "odd\nname.txt";
const ODD_SHOWN: &str = "odd\\x0aname.txt";

/// 120 small files in two directories, two large files cut into several chunks each (with
/// `--chunk-size 256KiB`), a file with a newline in its name, a symlink and an empty
/// directory. Returns the regular files as `-v` shows them.
fn make_source(dir: &Path) -> BTreeSet<String> {
    tree::make_many_files(&dir.join("small"), 120, 3000, 5);
    std::fs::create_dir_all(dir.join("big")).unwrap();
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    for i in 0..2u64 {
        let data = tree::random_bytes((2 << 20) + 12345, 40 + i);
        tree::make_file(&dir.join(format!("big/f{i}")), &data, 0o644);
    }
    tree::make_file(&dir.join(ODD_NAME), b"odd", 0o644);
    std::os::unix::fs::symlink("big/f0", dir.join("link")).unwrap();
    let mut files: BTreeSet<String> = sprat_testkit::walk_tree(dir)
        .into_iter()
        .filter(|(_, e)| e.kind == sprat_testkit::compare::EntryKind::File)
        .map(|(p, _)| p.to_str().unwrap().to_string())
        .collect();
    files.remove(ODD_NAME);
    files.insert(ODD_SHOWN.to_string());
    files
}

/// The lines `-v` printed: stdout up to the report's first line (`push ...`, `pull ...`,
/// `copy ...`), which must follow them.
fn listed(out: &Output) -> BTreeSet<String> {
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let mut files = BTreeSet::new();
    for line in lines.by_ref() {
        if ["push ", "pull ", "copy "]
            .iter()
            .any(|d| line.starts_with(d))
        {
            return files;
        }
        assert!(files.insert(line.to_string()), "listed twice: {line}");
    }
    panic!("no report after the listed files:\n{text}");
}

/// Rewrites `rel` below `dir` with new content (a new size, so the quick check sends it).
fn change(dir: &Path, rel: &str) {
    tree::make_file(&dir.join(rel), b"changed content", 0o644);
}

const CHUNKED: [&str; 4] = ["-v", "--chunk-size", "256KiB", "--streams"];

#[test]
fn verbose_lists_exactly_the_files_a_push_copies() {
    let t = tmp();
    let src = t.path().join("src");
    let all = make_source(&src);
    let root = t.path().join("root");
    let srv = server(&root);
    let args = [&CHUNKED[..], &["3"]].concat();

    let out = cp(&srv, &args, &src, srv.url("dst"));
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &root.join("dst"));
    assert_eq!(
        listed(&out),
        all,
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Two changed files and a new one: only they are listed.
    change(&src, "small/d000/f00007.bin");
    change(&src, "big/f1");
    change(&src, "small/new.bin");
    let out = cp(&srv, &args, &src, srv.url("dst"));
    assert_ok(&out, Some(&srv));
    let expected: BTreeSet<String> = ["small/d000/f00007.bin", "big/f1", "small/new.bin"]
        .map(String::from)
        .into();
    assert_eq!(listed(&out), expected);

    // Nothing to do: nothing listed.
    let out = cp(&srv, &args, &src, srv.url("dst"));
    assert_ok(&out, Some(&srv));
    assert_eq!(listed(&out), BTreeSet::new());

    // A single file (chunked) is listed by its name.
    let out = cp(&srv, &args, src.join("big/f0"), srv.url("single"));
    assert_ok(&out, Some(&srv));
    assert_eq!(listed(&out), BTreeSet::from(["f0".to_string()]));
}

#[test]
fn verbose_lists_exactly_the_files_a_pull_copies() {
    let t = tmp();
    let root = t.path().join("root");
    let all = make_source(&root.join("src"));
    let srv = server(&root);
    let dst = t.path().join("dst");
    let args = [&CHUNKED[..], &["3"]].concat();

    let out = cp(&srv, &args, srv.url("src"), &dst);
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&root.join("src"), &dst);
    assert_eq!(listed(&out), all);

    change(&root.join("src"), "big/f0");
    change(&root.join("src"), "small/d001/f00150.bin");
    let out = cp(&srv, &args, srv.url("src"), &dst);
    assert_ok(&out, Some(&srv));
    let expected: BTreeSet<String> = ["big/f0", "small/d001/f00150.bin"].map(String::from).into();
    assert_eq!(listed(&out), expected);

    let out = cp(&srv, &args, srv.url("src"), &dst);
    assert_ok(&out, Some(&srv));
    assert_eq!(listed(&out), BTreeSet::new());

    let out = cp(&srv, &args, srv.url("src/big/f1"), t.path().join("one"));
    assert_ok(&out, Some(&srv));
    assert_eq!(listed(&out), BTreeSet::from(["f1".to_string()]));
}

#[test]
fn verbose_lists_exactly_the_files_a_local_copy_copies_and_json_events_name_them() {
    let t = tmp();
    let src = t.path().join("src");
    let all = make_source(&src);
    let dst = t.path().join("dst");
    let args = ["-v", "--chunk-size", "256KiB"];

    let out = cp_local(&args, &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal(&src, &dst);
    assert_eq!(listed(&out), all);

    let out = cp_local(&args, &src, &dst);
    assert_ok(&out, None);
    assert_eq!(listed(&out), BTreeSet::new());

    // A single file is listed by its name.
    let out = cp_local(
        &args,
        src.join("small/d000/f00003.bin"),
        t.path().join("one"),
    );
    assert_ok(&out, None);
    assert_eq!(listed(&out), BTreeSet::from(["f00003.bin".to_string()]));

    // With --json-events: one {"event":"file"} per file (the exact name), the report last.
    let again = t.path().join("again");
    let out = cp_local(&["-v", "--json-events"], &src, &again);
    assert_ok(&out, None);
    let text = String::from_utf8_lossy(&out.stdout);
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let files: BTreeSet<String> = events
        .iter()
        .filter(|e| e["event"] == "file")
        .map(|e| e["path"].as_str().unwrap().replace('\n', "\\x0a"))
        .collect();
    assert_eq!(files, all);
    assert!(events.last().unwrap()["files"].is_number(), "{text}");

    // Without -v nothing is listed: stdout is the report alone.
    let plain = cp_local(&[], &src, t.path().join("plain"));
    assert_ok(&plain, None);
    assert!(String::from_utf8_lossy(&plain.stdout).starts_with("copy "));
}

#[test]
fn diagnostics_start_at_two_v() {
    let t = tmp();
    let src = t.path().join("src");
    tree::make_many_files(&src, 10, 100, 1);
    let srv = server(&t.path().join("root"));
    let one = cp(&srv, &["-v"], &src, srv.url("one"));
    assert_ok(&one, Some(&srv));
    let stderr = String::from_utf8_lossy(&one.stderr);
    assert!(!stderr.contains("INFO"), "-v lists files only:\n{stderr}");
    let two = cp(&srv, &["-vv"], &src, srv.url("two"));
    assert_ok(&two, Some(&srv));
    let stderr = String::from_utf8_lossy(&two.stderr);
    assert!(stderr.contains("INFO"), "-vv adds diagnostics:\n{stderr}");
}

/// 64 files of 128 KiB: 8 MiB.
fn make_eight_mib(dir: &Path) {
    tree::make_many_files(dir, 64, 128 << 10, 9);
}

/// Runs `cp` and returns its output and how long it took.
fn timed(run: impl FnOnce() -> Output) -> (Output, Duration) {
    let started = Instant::now();
    let out = run();
    (out, started.elapsed())
}

#[test]
fn bwlimit_keeps_a_push_and_a_pull_at_or_under_the_rate() {
    let t = tmp();
    let src = t.path().join("src");
    make_eight_mib(&src);
    let root = t.path().join("root");
    let srv = server(&root);
    // 8 MiB at 4 MB/s: 2.1 s at the least; 6 s leaves room for a loaded host.
    let limit = ["--bwlimit", "4MB/s"];
    let (push, push_took) = timed(|| cp(&srv, &limit, &src, srv.url("pushed")));
    assert_ok(&push, Some(&srv));
    assert_trees_equal(&src, &root.join("pushed"));
    let (pull, pull_took) = timed(|| cp(&srv, &limit, srv.url("pushed"), t.path().join("pulled")));
    assert_ok(&pull, Some(&srv));
    assert_trees_equal(&src, &t.path().join("pulled"));
    for (what, took) in [("push", push_took), ("pull", pull_took)] {
        assert!(
            took >= Duration::from_millis(1600),
            "{what} of 8 MiB at 4MB/s took {took:?}"
        );
        assert!(
            took <= Duration::from_secs(6),
            "{what} of 8 MiB at 4MB/s took {took:?}"
        );
    }
    // The same copies without the limit are faster.
    let (free_push, free_push_took) = timed(|| cp(&srv, &[], &src, srv.url("free")));
    assert_ok(&free_push, Some(&srv));
    let (free_pull, free_pull_took) =
        timed(|| cp(&srv, &[], srv.url("free"), t.path().join("free")));
    assert_ok(&free_pull, Some(&srv));
    assert!(
        free_push_took < push_took && free_pull_took < pull_took,
        "without --bwlimit: push {free_push_took:?}, pull {free_pull_took:?}; with: push \
         {push_took:?}, pull {pull_took:?}"
    );
}

#[test]
fn bwlimit_paces_a_local_copy_too() {
    let t = tmp();
    let src = t.path().join("src");
    make_eight_mib(&src);
    let (out, took) = timed(|| cp_local(&["--bwlimit", "4MB/s"], &src, t.path().join("dst")));
    assert_ok(&out, None);
    assert_trees_equal(&src, &t.path().join("dst"));
    assert!(
        took >= Duration::from_millis(1600) && took <= Duration::from_secs(6),
        "a local copy of 8 MiB at 4MB/s took {took:?}"
    );
}

#[test]
fn a_bwlimit_for_a_copy_between_two_servers_is_refused() {
    let t = tmp();
    let srv = server(&t.path().join("root"));
    tree::make_many_files(&t.path().join("root/src"), 2, 100, 1);
    let out = cp(
        &srv,
        &["--bwlimit", "1MB/s"],
        srv.url("src"),
        srv.url("dst"),
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &["--bwlimit"]);
    assert!(!t.path().join("root/dst").exists());
}

#[test]
fn a_bwlimit_too_low_or_not_a_rate_is_refused() {
    let t = tmp();
    let src = t.path().join("src");
    tree::make_many_files(&src, 2, 100, 1);
    // "90": rsync's KiB/s, 92.2 KB/s.
    for (rate, said) in [
        ("10KB/s", "10.0 KB/s"),
        ("fast", "fast"),
        ("90", "92.2 KB/s"),
    ] {
        let out = cp_local(&["--bwlimit", rate], &src, t.path().join("dst"));
        assert_exit(&out, 2);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--bwlimit"), "{rate}: {stderr}");
        assert!(stderr.contains(said), "{rate}: {stderr}");
        assert!(!t.path().join("dst").exists());
    }
}
