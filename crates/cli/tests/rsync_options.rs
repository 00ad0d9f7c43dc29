//! rsync's options as people type them into `sprat cp`: the ones sprat takes as rsync does
//! (`-avh`, `-rlptgoD`, `-W`, `-S`, `--info=progress2`, a bare `--bwlimit` number) copy; the
//! ones it lacks are refused by name with what to do instead, before anything is made; and a
//! third path is refused with a word on copying several.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use sprat_testkit::{assert_trees_equal, describe, run_sprat, tree};

#[test]
fn rsyncs_usual_flags_copy_as_with_rsync() {
    let t = tmp();
    let src = t.path().join("src");
    tree::make_many_files(&src, 2, 20, 7);
    for (i, flags) in [
        &["-avh"][..],
        &["-rlptgoD"],
        &["-aWS", "--info=progress2"],
        &["-ah", "--bwlimit", "100000"],
    ]
    .iter()
    .enumerate()
    {
        let dst = t.path().join(format!("dst{i}"));
        let out = cp_local(flags, &src, &dst);
        assert_ok(&out, None);
        assert_trees_equal(&src, &dst);
    }
    // `-h` alone still asks for help, as with rsync.
    let out = run_sprat(bin(), ["cp", "-h"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: sprat cp"));
}

#[test]
fn an_rsync_option_sprat_lacks_is_refused_with_what_to_do() {
    let t = tmp();
    let src = t.path().join("src");
    tree::make_many_files(&src, 1, 5, 8);
    let dst = t.path().join("dst");
    for (flags, named, advice) in [
        (&["--stats"][..], "--stats", "report"),
        (&["--list-only"], "--list-only", "sprat ls"),
        (&["-avx"], "--one-file-system", "--exclude"),
        (&["--timeout=30"], "--timeout", "--stall-timeout"),
        (&["--info=stats2"], "--info=stats2", "progress2"),
    ] {
        let out = cp_local(flags, &src, &dst);
        assert_exit(&out, 2);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(named) && stderr.contains(advice),
            "{flags:?}: {stderr}"
        );
        assert!(!dst.exists(), "{flags:?} made the destination");
    }
    // Several sources, as a shell glob gives them.
    let out = run_sprat(
        bin(),
        [
            "cp",
            src.join("f0").to_str().unwrap(),
            src.join("f1").to_str().unwrap(),
            dst.to_str().unwrap(),
        ],
        &[],
    );
    assert_exit(&out, 2);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("one SRC"),
        "{}",
        describe(&out)
    );
    assert!(!dst.exists());
    // rsync's line with sprat's name but not its command.
    let out = run_sprat(
        bin(),
        ["-av", src.to_str().unwrap(), dst.to_str().unwrap()],
        &[],
    );
    assert_exit(&out, 2);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`sprat cp -av SRC DST`"),
        "{}",
        describe(&out)
    );
    assert!(!dst.exists());
}
