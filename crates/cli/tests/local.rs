//! End-to-end fidelity of local -> local `sprat cp` (the same pipeline without a network): the
//! destination must equal the source exactly, whether it exists, is missing with its parents, or
//! is copied into twice.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::time::Duration;

use common::{
    assert_ok, bin, check_blocked_file_outcome, check_special_files_outcome, cp_args, cp_local, s,
    tmp, type_change_v1, type_change_v2,
};
use sprat_testkit::{
    assert_trees_equal, assert_trees_equal_with, describe, make_fidelity_tree, make_fifo,
    make_long_name_tree, make_many_files, make_special_mode_tree, parse_json_report, random_bytes,
    run_sprat_timeout, set_mtime_nofollow, CompareOptions,
};

#[test]
fn local_fidelity_tree() {
    let t = tmp();
    let src = t.path().join("src");
    make_fidelity_tree(&src);
    let dst = t.path().join("dst");
    let out = cp_local(&[], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn local_fidelity_tree_chunked_across_streams() {
    let t = tmp();
    let src = t.path().join("src");
    make_fidelity_tree(&src);
    let dst = t.path().join("dst");
    let out = cp_local(
        &[
            "--streams",
            "4",
            "--small-file-threshold",
            "64KiB",
            "--chunk-size",
            "64KiB",
            "--batch-size",
            "1MiB",
        ],
        &src,
        &dst,
    );
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn local_many_small_files() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 3000, 1500, 31);
    let dst = t.path().join("dst");
    let out = cp_local(&[], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn local_names_of_255_bytes() {
    let t = tmp();
    let src = t.path().join("src");
    make_long_name_tree(&src);
    let dst = t.path().join("dst");
    let out = cp_local(&[], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn local_creates_missing_destination_and_parents() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 30, 4000, 32);
    let dst = t.path().join("p/q/r/dst");
    let out = cp_local(&[], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn local_into_existing_empty_destination() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 30, 4000, 33);
    let dst = t.path().join("dst");
    fs::create_dir(&dst).unwrap();
    let out = cp_local(&[], &src, &dst);
    assert_ok(&out, None);
    // DST holds the contents of SRC (rsync `SRC/ DST/`), not a `src` directory inside it.
    assert_trees_equal(&src, &dst);
}

#[test]
fn local_twice_then_changes() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 40, 3000, 34);
    let dst = t.path().join("dst");
    for _ in 0..2 {
        let out = cp_local(&[], &src, &dst);
        assert_ok(&out, None);
        assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
    }
    let p = src.join("d000/f00001.bin");
    fs::write(&p, random_bytes(6000, 1)).unwrap();
    set_mtime_nofollow(&p, 1_700_000_000, 1);
    let p = src.join("d000/f00002.bin");
    fs::write(&p, random_bytes(3000, 2)).unwrap();
    set_mtime_nofollow(&p, 1_700_000_000, 2);
    fs::write(src.join("d000/added.txt"), b"added\n").unwrap();
    set_mtime_nofollow(&src.join("d000"), 1_700_000_000, 3);
    let out = cp_local(&[], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn local_json_report() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 120, 2500, 35);
    let dst = t.path().join("dst");
    let out = cp_local(&["--json"], &src, &dst);
    assert_ok(&out, None);
    let report = parse_json_report(&out.stdout);
    assert_eq!(report.files(), 120, "files in {}", report.value);
    assert_eq!(report.bytes(), 300_000, "bytes in {}", report.value);
    assert_trees_equal(&src, &dst);
}

#[test]
fn local_empty_tree() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    set_mtime_nofollow(&src, 1_600_000_000, 79);
    let dst = t.path().join("dst");
    let out = cp_local(&[], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn local_special_permission_bits() {
    let t = tmp();
    let src = t.path().join("src");
    make_special_mode_tree(&src);
    let dst = t.path().join("dst");
    let out = cp_local(&[], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn local_replaces_entries_whose_type_changed() {
    let t = tmp();
    let src = t.path().join("src");
    type_change_v1(&src);
    let dst = t.path().join("dst");
    let out = cp_local(&[], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal(&src, &dst);
    type_change_v2(&src);
    let out = cp_local(&[], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn local_trailing_slashes_mean_the_same() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 10, 100, 36);
    let dst = t.path().join("dst");
    let out = cp_local(&[], format!("{}/", s(&src)), format!("{}/", s(&dst)));
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn local_json_report_counts_fidelity_tree() {
    let t = tmp();
    let src = t.path().join("src");
    let stats = make_fidelity_tree(&src);
    let dst = t.path().join("dst");
    let out = cp_local(&["--json"], &src, &dst);
    assert_ok(&out, None);
    let report = parse_json_report(&out.stdout);
    assert_eq!(report.files(), stats.files, "files in {}", report.value);
    assert_eq!(report.bytes(), stats.bytes, "bytes in {}", report.value);
    assert!(
        report.dirs() == stats.dirs || report.dirs() == stats.dirs + 1,
        "dirs should be {} (or {} with the root) in {}",
        stats.dirs,
        stats.dirs + 1,
        report.value
    );
    if let Some(links) = report.get("symlinks").as_u64() {
        assert_eq!(links, stats.symlinks, "symlinks in {}", report.value);
    }
    assert_trees_equal(&src, &dst);
}

/// One destination entry that cannot be replaced (a non-empty directory where the source has
/// a file) must fail alone: exit 1 naming it, every other file copied. Replacing it (exit 0
/// and the file in place) is accepted too; aborting the whole copy is not.
#[test]
fn local_one_blocked_file_fails_alone_with_exit_1() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 20, 1000, 37);
    let dst = t.path().join("dst");
    fs::create_dir_all(dst.join("d000/f00003.bin")).unwrap();
    fs::write(dst.join("d000/f00003.bin/keep.txt"), b"keep").unwrap();
    let out = cp_local(&[], &src, &dst);
    check_blocked_file_outcome(&out, &src, &dst, None);
}

/// A FIFO and a unix socket in the source must not hang the copy (a FIFO opened for reading
/// blocks forever); every regular file still arrives.
#[test]
fn local_special_files_in_source_do_not_hang() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 10, 1000, 38);
    make_fifo(&src.join("d000/pipe"));
    let _sock = std::os::unix::net::UnixListener::bind(src.join("d000/sock")).unwrap();
    let dst = t.path().join("dst");
    let out = run_sprat_timeout(
        bin(),
        cp_args(None, &[], &src, &dst),
        &[],
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| {
        panic!(
            "copying a tree with a FIFO did not finish within 30 s:\n{}",
            describe(&e.output)
        )
    });
    check_special_files_outcome(&out, &src, &dst, None);
}

#[test]
fn local_copy_into_its_own_subdirectory_terminates() {
    // `sprat cp src src/copy`: refusing (exit 2) is fine; so is copying the tree as it was when
    // the copy started. Copying the copy into itself again and again is not.
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 200, 2000, 39);
    let reference = t.path().join("reference");
    let out = cp_local(&[], &src, &reference);
    assert_ok(&out, None);
    let dst = src.join("copy");
    let out = run_sprat_timeout(
        bin(),
        cp_args(None, &[], &src, &dst),
        &[],
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| {
        panic!(
            "copying a tree into its own subdirectory did not end within 30 s:\n{}",
            describe(&e.output)
        )
    });
    sprat_testkit::assert_no_panic(&out);
    match out.status.code() {
        Some(2) => {
            sprat_testkit::assert_error_line(&out);
        }
        Some(0) => assert_trees_equal(&reference, &dst),
        other => panic!(
            "exit code {other:?}: expected 2 (refused) or 0 (a copy of the tree as it was)\n{}",
            describe(&out)
        ),
    }
}

#[test]
fn local_fidelity_tree_every_file_chunked_in_4kib() {
    let t = tmp();
    let src = t.path().join("src");
    make_fidelity_tree(&src);
    let dst = t.path().join("dst");
    let out = cp_local(
        &["--small-file-threshold", "0", "--chunk-size", "4KiB"],
        &src,
        &dst,
    );
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}
