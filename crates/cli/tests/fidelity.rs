//! End-to-end fidelity of push (local -> server) and pull (server -> local) through a real
//! `sprat serve` on 127.0.0.1: the destination must equal the source in content, types, modes,
//! mtimes (with nanoseconds) and symlinks, with default settings, with several streams, with small
//! batches, and with chunking forced so large files travel as chunks across streams.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use common::{assert_ok, cp, server, tmp};
use sprat_testkit::{
    assert_trees_equal, assert_trees_equal_with, make_fidelity_tree, make_long_name_tree,
    make_many_files, parse_json_report, random_bytes, set_mtime_nofollow, CompareOptions,
};

/// Options that force every file above 64 KiB to be sent as 64 KiB chunks over 4 streams.
const CHUNKED: &[&str] = &[
    "--streams",
    "4",
    "--small-file-threshold",
    "64KiB",
    "--chunk-size",
    "64KiB",
    "--batch-size",
    "1MiB",
];

/// Pushes a tree made by `make` to `sprat://.../dst` and compares, root metadata included.
fn push_and_compare(extra: &[&str], make: impl Fn(&Path)) {
    let t = tmp();
    let src = t.path().join("src");
    make(&src);
    let root = t.path().join("root");
    let srv = server(&root);
    let out = cp(&srv, extra, &src, srv.url("dst"));
    assert_ok(&out, Some(&srv));
    assert_trees_equal_with(&src, &root.join("dst"), &CompareOptions::with_root());
}

/// Pulls a tree made by `make` in the server root from `sprat://.../src` and compares.
fn pull_and_compare(extra: &[&str], make: impl Fn(&Path)) {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    make(&src);
    let srv = server(&root);
    let dst = t.path().join("dst");
    let out = cp(&srv, extra, srv.url("src"), &dst);
    assert_ok(&out, Some(&srv));
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

fn fidelity(dir: &Path) {
    make_fidelity_tree(dir);
}

fn many_files(dir: &Path) {
    make_many_files(dir, 3000, 1500, 3000);
}

#[test]
fn push_fidelity_tree() {
    push_and_compare(&[], fidelity);
}

#[test]
fn pull_fidelity_tree() {
    pull_and_compare(&[], fidelity);
}

#[test]
fn push_fidelity_tree_4_streams() {
    push_and_compare(&["--streams", "4"], fidelity);
}

#[test]
fn pull_fidelity_tree_4_streams() {
    pull_and_compare(&["--streams", "4"], fidelity);
}

#[test]
fn push_fidelity_tree_batches_smaller_than_big_file() {
    push_and_compare(&["--batch-size", "1MiB"], fidelity);
}

#[test]
fn pull_fidelity_tree_batches_smaller_than_big_file() {
    pull_and_compare(&["--batch-size", "1MiB"], fidelity);
}

#[test]
fn push_fidelity_tree_chunked_across_streams() {
    push_and_compare(CHUNKED, fidelity);
}

#[test]
fn pull_fidelity_tree_chunked_across_streams() {
    pull_and_compare(CHUNKED, fidelity);
}

#[test]
fn push_many_small_files() {
    push_and_compare(&[], many_files);
}

#[test]
fn pull_many_small_files() {
    pull_and_compare(&["--streams", "4"], many_files);
}

#[test]
fn push_names_of_255_bytes() {
    push_and_compare(&[], |d| {
        make_long_name_tree(d);
    });
}

#[test]
fn pull_names_of_255_bytes() {
    pull_and_compare(&[], |d| {
        make_long_name_tree(d);
    });
}

#[test]
fn push_creates_missing_destination_and_parents() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 20, 5000, 20);
    let root = t.path().join("root");
    let srv = server(&root);
    let out = cp(&srv, &[], &src, srv.url("a/b/c/dst"));
    assert_ok(&out, Some(&srv));
    assert_trees_equal_with(&src, &root.join("a/b/c/dst"), &CompareOptions::with_root());
}

#[test]
fn pull_creates_missing_destination_and_parents() {
    let t = tmp();
    let root = t.path().join("root");
    make_many_files(&root.join("src"), 20, 5000, 21);
    let srv = server(&root);
    let dst = t.path().join("x/y/z/dst");
    let out = cp(&srv, &[], srv.url("src"), &dst);
    assert_ok(&out, Some(&srv));
    assert_trees_equal_with(&root.join("src"), &dst, &CompareOptions::with_root());
}

#[test]
fn push_to_server_root_itself() {
    let t = tmp();
    let src = t.path().join("src");
    make_fidelity_tree(&src);
    let root = t.path().join("root");
    let srv = server(&root);
    let out = cp(&srv, &[], &src, srv.url(""));
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &root);
}

#[test]
fn pull_from_server_root_itself() {
    let t = tmp();
    let root = t.path().join("root");
    make_fidelity_tree(&root);
    let srv = server(&root);
    let dst = t.path().join("dst");
    let out = cp(&srv, &[], srv.url(""), &dst);
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&root, &dst);
}

/// A small tree for the overwrite tests: files, a symlink and a nested directory.
fn make_small_tree(dir: &Path) {
    make_many_files(dir, 50, 3000, 50);
    symlink("d000/f00000.bin", dir.join("link")).unwrap();
    set_mtime_nofollow(&dir.join("link"), 1_600_000_000, 11);
    set_mtime_nofollow(dir, 1_600_000_000, 12);
}

/// Changes a tree the way a user's edits would between two copies (nothing is deleted).
fn mutate_tree(dir: &Path) {
    // New content of a different size.
    let p = dir.join("d000/f00001.bin");
    fs::write(&p, random_bytes(5000, 0xa1)).unwrap();
    set_mtime_nofollow(&p, 1_700_000_001, 1);
    // New content of the same size, newer mtime.
    let p = dir.join("d000/f00002.bin");
    fs::write(&p, random_bytes(3000, 0xa2)).unwrap();
    set_mtime_nofollow(&p, 1_700_000_002, 2);
    // Shrunk to empty.
    let p = dir.join("d000/f00003.bin");
    fs::write(&p, b"").unwrap();
    set_mtime_nofollow(&p, 1_700_000_003, 3);
    // Only the mode changes.
    fs::set_permissions(
        dir.join("d000/f00004.bin"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    // Only the mtime changes.
    set_mtime_nofollow(&dir.join("d000/f00005.bin"), 1_700_000_005, 5);
    // A new file, a new empty directory, a retargeted link.
    fs::write(dir.join("d000/new.bin"), random_bytes(777, 0xa3)).unwrap();
    fs::create_dir(dir.join("new_empty_dir")).unwrap();
    fs::remove_file(dir.join("link")).unwrap();
    symlink("d000/new.bin", dir.join("link")).unwrap();
    set_mtime_nofollow(&dir.join("link"), 1_700_000_006, 6);
    set_mtime_nofollow(&dir.join("new_empty_dir"), 1_700_000_007, 7);
    set_mtime_nofollow(&dir.join("d000"), 1_700_000_008, 8);
    set_mtime_nofollow(dir, 1_700_000_009, 9);
}

#[test]
fn push_twice_then_push_changes() {
    let t = tmp();
    let src = t.path().join("src");
    make_small_tree(&src);
    let root = t.path().join("root");
    let srv = server(&root);
    let dst = root.join("dst");
    for round in ["first push", "identical second push"] {
        let out = cp(&srv, &[], &src, srv.url("dst"));
        assert_ok(&out, Some(&srv));
        eprintln!("checking after {round}");
        assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
    }
    mutate_tree(&src);
    let out = cp(&srv, &[], &src, srv.url("dst"));
    assert_ok(&out, Some(&srv));
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn pull_twice_then_pull_changes() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    make_small_tree(&src);
    let srv = server(&root);
    let dst = t.path().join("dst");
    for round in ["first pull", "identical second pull"] {
        let out = cp(&srv, &[], srv.url("src"), &dst);
        assert_ok(&out, Some(&srv));
        eprintln!("checking after {round}");
        assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
    }
    mutate_tree(&src);
    let out = cp(&srv, &[], srv.url("src"), &dst);
    assert_ok(&out, Some(&srv));
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn push_json_report() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 200, 1000, 200);
    let root = t.path().join("root");
    let srv = server(&root);
    let out = cp(&srv, &["--json"], &src, srv.url("dst"));
    assert_ok(&out, Some(&srv));
    let report = parse_json_report(&out.stdout);
    assert_eq!(report.files(), 200, "files in {}", report.value);
    assert_eq!(report.bytes(), 200_000, "bytes in {}", report.value);
    assert!(
        (2..=3).contains(&report.dirs()),
        "dirs should count the 2 subdirectories (and maybe the root): {}",
        report.value
    );
    assert_trees_equal(&src, &root.join("dst"));
}

#[test]
fn pull_json_report() {
    let t = tmp();
    let root = t.path().join("root");
    make_many_files(&root.join("src"), 150, 2000, 150);
    let srv = server(&root);
    let dst = t.path().join("dst");
    let out = cp(&srv, &["--json", "--streams", "2"], srv.url("src"), &dst);
    assert_ok(&out, Some(&srv));
    let report = parse_json_report(&out.stdout);
    assert_eq!(report.files(), 150, "files in {}", report.value);
    assert_eq!(report.bytes(), 300_000, "bytes in {}", report.value);
    assert_trees_equal(&root.join("src"), &dst);
}
