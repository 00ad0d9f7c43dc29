//! End-to-end usability of the command line: `--help` explains every documented option, and a
//! closed stdout (`sprat cp ... | head -c0`) is handled quietly instead of with a panic.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{assert_ok, bin, cp_args, tmp};
use sprat_testkit::{
    assert_trees_equal, describe, make_many_files, run_sprat, spawn_sprat_stdout_closed,
};

#[test]
fn help_explains_every_documented_option() {
    let cases: [(&[&str], &[&str]); 3] = [
        (&["--help"], &["cp", "serve"]),
        (
            &["cp", "--help"],
            &[
                "--json",
                "--streams",
                "--batch-size",
                "--small-file-threshold",
                "--chunk-size",
                "--token-file",
                "SPRAT_TOKEN",
                "--keep-setuid",
            ],
        ),
        (
            &["serve", "--help"],
            &[
                "--root",
                "--listen",
                "--token-file",
                "--read-only",
                "--no-auth",
                "--keep-setuid",
                "--max-connections-per-address",
                "--max-client-memory",
                "--idle-timeout",
                "--no-third-party",
            ],
        ),
    ];
    for (args, needles) in cases {
        let out = run_sprat(bin(), args, &[]);
        assert_ok(&out, None);
        let text = String::from_utf8_lossy(&out.stdout);
        for n in needles {
            assert!(
                text.contains(n),
                "`sprat {}` does not mention {n}:\n{text}",
                args.join(" ")
            );
        }
    }
}

fn copy_with_closed_stdout(extra: &[&str]) {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 20, 1000, 40);
    let dst = t.path().join("dst");
    let mut child = spawn_sprat_stdout_closed(bin(), cp_args(None, extra, &src, &dst), &[]);
    let out = child.wait_or_panic(Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "a closed stdout made sprat panic:\n{}",
        describe(&out)
    );
    assert!(
        std::os::unix::process::ExitStatusExt::signal(&out.status).is_none(),
        "sprat died from a signal:\n{}",
        describe(&out)
    );
    // The copy itself must be complete whatever happened to the report.
    assert_trees_equal(&src, &dst);
}

#[test]
fn closed_stdout_is_quiet_for_the_report() {
    copy_with_closed_stdout(&[]);
}

#[test]
fn closed_stdout_is_quiet_for_the_json_report() {
    copy_with_closed_stdout(&["--json"]);
}

/// The flags of cp's and rsync's habits: `-r`, `-P` and `--partial` copy as without them (with
/// `-P`, progress shows), `-z` is refused with a word on why, before anything is copied.
#[test]
fn the_habits_of_cp_and_rsync_are_understood() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 20, 100, 1);
    for (i, flags) in [&["-r"][..], &["-avP"], &["--partial", "-a"], &["-ru"]]
        .iter()
        .enumerate()
    {
        let dst = t.path().join(format!("d{i}"));
        let out = common::cp_local(flags, &src, &dst);
        assert_ok(&out, None);
        assert_trees_equal(&src, &dst);
        // The progress line is written (at least once, at the end) only when asked for.
        let drawn = String::from_utf8_lossy(&out.stderr).contains("ETA");
        assert_eq!(
            drawn,
            flags.contains(&"-avP"),
            "{flags:?}\n{}",
            describe(&out)
        );
    }
    for flags in [&["-avz"][..], &["--compress"]] {
        let dst = t.path().join("z");
        let out = common::cp_local(flags, &src, &dst);
        assert_eq!(out.status.code(), Some(2), "{flags:?}\n{}", describe(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("-z/--compress") && err.contains("compress"),
            "{err}"
        );
        assert!(!dst.exists(), "{flags:?}: something was copied");
    }
}
