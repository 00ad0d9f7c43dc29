//! End-to-end fidelity of local -> local `sprat cp` (the same pipeline without a network): the
//! destination must equal the source exactly, whether it exists, is missing with its parents, or
//! is copied into twice.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;

use common::{assert_ok, cp_local, tmp};
use sprat_testkit::{
    assert_trees_equal, assert_trees_equal_with, make_fidelity_tree, make_long_name_tree,
    make_many_files, parse_json_report, random_bytes, set_mtime_nofollow, CompareOptions,
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
