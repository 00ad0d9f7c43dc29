//! `sprat gen` end to end: the same seed makes the same set, sizes follow the options, the set
//! copies like any tree, and bad options are refused by name without writing anything.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_ok, bin, tmp};
use sprat_testkit::{assert_trees_equal, run_sprat};
use std::path::Path;

/// Sizes of every file below `dir`, and their count.
fn sizes(dir: &Path) -> Vec<u64> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                out.push(m.len());
            }
        }
    }
    out
}

#[test]
fn gen_makes_the_set_it_is_asked_for() {
    let t = tmp();
    let a = t.path().join("a");
    let out = run_sprat(
        bin(),
        &[
            "gen",
            "--files",
            "250",
            "--size",
            "3KiB",
            "--per-dir",
            "20",
            "--depth",
            "2",
            "--json",
        ],
        &[],
    );
    assert!(!out.status.success(), "gen without DIR must fail");
    let args = |d: &Path| {
        vec![
            "gen".to_string(),
            "--total".into(),
            "3MiB".into(),
            "--dist".into(),
            "gridftp".into(),
            "--max-size".into(),
            "256KiB".into(),
            "--per-dir".into(),
            "7".into(),
            "--seed".into(),
            "42".into(),
            "--json".into(),
            d.display().to_string(),
        ]
    };
    let out = run_sprat(bin(), &args(&a), &[]);
    assert_ok(&out, None);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = sizes(&a);
    assert_eq!(s.iter().sum::<u64>(), 3 << 20);
    assert_eq!(report["bytes"], 3u64 << 20);
    assert_eq!(report["files"], s.len() as u64);
    assert!(s.iter().all(|&x| x <= 256 << 10), "a file above --max-size");
    assert!(s.len() > 7, "one directory would hold everything");

    // The same seed again: the same tree, byte for byte (mtimes aside: compare via a copy).
    let b = t.path().join("b");
    assert_ok(&run_sprat(bin(), &args(&b), &[]), None);
    let mut sa = sizes(&a);
    let mut sb = sizes(&b);
    sa.sort();
    sb.sort();
    assert_eq!(sa, sb);
    let out = run_sprat(
        bin(),
        &["verify", &a.display().to_string(), &b.display().to_string()],
        &[],
    );
    // verify also compares mtimes, which differ; the differences must only be mtimes.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines().all(|l| l.contains("mtime")),
        "generated sets differ in more than mtimes:\n{err}"
    );

    // A generated set copies like any tree.
    let c = t.path().join("c");
    assert_ok(
        &run_sprat(
            bin(),
            &[
                "cp",
                "-q",
                &a.display().to_string(),
                &c.display().to_string(),
            ],
            &[],
        ),
        None,
    );
    assert_trees_equal(&a, &c);
}

#[test]
fn gen_refuses_bad_options_by_name() {
    let t = tmp();
    let d = t.path().join("d").display().to_string();
    let cases: [(&[&str], &str); 5] = [
        (&["gen", "--files", "0", &d], "--files"),
        (&["gen", "--total", "1MiB", "--dist", "zipf", &d], "zipf"),
        (&["gen", "--files", "3", "--size", "12XB", &d], "12XB"),
        (
            &["gen", "--total", "1MiB", "--dist", "loguniform:9:3", &d],
            "loguniform",
        ),
        (&["gen", &d], "--files"),
    ];
    for (args, needle) in cases {
        let out = run_sprat(bin(), args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(
        !t.path().join("d").exists(),
        "a refused gen wrote something"
    );
    // A non-empty directory is never written into.
    std::fs::create_dir(t.path().join("full")).unwrap();
    std::fs::write(t.path().join("full/keep"), b"mine").unwrap();
    let full = t.path().join("full").display().to_string();
    let out = run_sprat(bin(), &["gen", "--files", "3", &full], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read_dir(t.path().join("full")).unwrap().count(), 1);
}
