//! How a local destination's data reaches the disk: large files' chunks written with
//! `O_DIRECT` (past the page cache) and the early writeback of batches. These tests check that
//! what is written is exact, whichever way it was written, and that durable copies stay
//! durable; what the techniques gain in time is measured, not asserted (docs/performance.md).
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_ok, bin, cp_args, cp_local, tmp};
use sprat_testkit::{
    assert_trees_equal, make_file, make_many_files, parse_json_report, random_bytes, run_sprat,
};
use std::fs;
use std::path::Path;

/// Large files of awkward sizes (chunks of 1 MiB, so most are split; last chunks that end
/// off a 4 KiB boundary), one with a run of zeros in its middle, and small files around them.
fn make_large_set(src: &Path) {
    fs::create_dir_all(src.join("big")).unwrap();
    let sizes: [usize; 5] = [
        (3 << 20) + 123,
        2 << 20,
        (1 << 20) + 1,
        (5 << 20) + 4095,
        4 << 20,
    ];
    for (i, size) in sizes.iter().enumerate() {
        make_file(
            &src.join(format!("big/f{i}")),
            &random_bytes(*size, i as u64),
            0o640,
        );
    }
    let mut holed = random_bytes(3 << 20, 99);
    holed[(1 << 20) + 4096..(2 << 20) + 8192].fill(0);
    make_file(&src.join("big/zeros-inside"), &holed, 0o600);
    make_many_files(&src.join("small"), 50, 3000, 5);
}

fn cp_local_env(
    extra: &[&str],
    src: &Path,
    dst: &Path,
    env: &[(&str, &str)],
) -> std::process::Output {
    run_sprat(bin(), cp_args(None, extra, src, dst), env)
}

#[test]
fn large_files_copied_locally_are_exact_with_direct_writes_and_without() {
    let t = tmp();
    let src = t.path().join("src");
    make_large_set(&src);
    let opts = ["--chunk-size", "1MiB", "--small-file-threshold", "256KiB"];
    let direct = t.path().join("direct");
    assert_ok(&cp_local(&opts, &src, &direct), None);
    assert_trees_equal(&src, &direct);
    // The same through the page cache, without early writeback (the switches measurements use).
    let buffered = t.path().join("buffered");
    let env = [("SPRAT_DIRECT_CHUNKS", "0"), ("SPRAT_EARLY_WRITEBACK", "0")];
    assert_ok(&cp_local_env(&opts, &src, &buffered, &env), None);
    assert_trees_equal(&src, &buffered);
    // A re-run over a complete copy changes nothing and sends nothing.
    assert_ok(&cp_local(&opts, &src, &direct), None);
    assert_trees_equal(&src, &direct);
}

#[test]
fn a_single_large_file_copied_to_a_file_name_is_exact() {
    let t = tmp();
    let src = t.path().join("one");
    make_file(&src, &random_bytes((6 << 20) + 333, 7), 0o644);
    let dst = t.path().join("copy");
    assert_ok(&cp_local(&["--chunk-size", "1MiB"], &src, &dst), None);
    assert_eq!(fs::read(&src).unwrap(), fs::read(&dst).unwrap());
}

#[test]
fn a_durable_copy_of_large_files_is_still_synced_before_it_counts() {
    let t = tmp();
    let src = t.path().join("src");
    make_large_set(&src);
    let dst = t.path().join("dst");
    let opts = ["--json", "--durable", "--chunk-size", "1MiB"];
    let out = cp_local(&opts, &src, &dst);
    assert_ok(&out, None);
    let r = parse_json_report(&out.stdout);
    assert!(r.get("durable").as_bool().unwrap());
    assert!(
        r.get("syncs").as_u64().unwrap() >= 1,
        "a durable copy made no sync"
    );
    assert_trees_equal(&src, &dst);
}
