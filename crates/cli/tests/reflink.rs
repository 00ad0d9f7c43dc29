//! Local copies onto a file system that shares blocks between files (XFS here, in an image
//! mounted for the test): large files are cloned, not read and written, and the copy is exact
//! all the same (content, modes, mtimes); `--reflink never` writes every byte; a copy to
//! another file system, and small files, are copied as always. Skipped (with a note) where
//! the test may not make and mount an XFS image (not root, no `mkfs.xfs`).
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{assert_ok, cp_local, tmp};
use sprat_testkit::{assert_trees_equal, make_file, parse_json_report, random_bytes, LoopFs};

const MIB: usize = 1 << 20;

/// An XFS image of 512 MiB (XFS needs 300 at least), or `None` with a note.
fn xfs() -> Option<LoopFs> {
    let fs = LoopFs::mount("xfs", 512);
    if fs.is_none() {
        eprintln!("skipped: cannot make and mount an XFS image here (needs root and mkfs.xfs)");
    }
    fs
}

/// A tree of 3 large files (24 MiB in all; one read-only with an old mtime, one 0 bytes
/// short of a chunk boundary), small files and a symlink.
fn make_source(src: &Path) -> u64 {
    fs::create_dir_all(src.join("d/e")).unwrap();
    let sizes = [
        ("big", 12 * MIB),
        ("d/mid", 8 * MIB - 3),
        ("d/e/ro", 4 * MIB + 1),
    ];
    for (i, (name, len)) in sizes.iter().enumerate() {
        make_file(&src.join(name), &random_bytes(*len, i as u64), 0o644);
    }
    fs::set_permissions(src.join("d/e/ro"), fs::Permissions::from_mode(0o400)).unwrap();
    let old = filetime_of(1_000_000_000);
    fs::File::options()
        .write(true)
        .open(src.join("d/mid"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    for i in 0..20 {
        make_file(
            &src.join(format!("d/s{i}")),
            &random_bytes(100 * i, 100 + i as u64),
            0o640,
        );
    }
    std::os::unix::fs::symlink("../big", src.join("d/link")).unwrap();
    sizes.iter().map(|(_, len)| *len as u64).sum()
}

fn filetime_of(secs: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)
}

fn cloned(out: &std::process::Output) -> u64 {
    parse_json_report(&out.stdout).u64("cloned")
}

#[test]
fn a_local_copy_onto_xfs_clones_large_files_and_is_exact() {
    let Some(xfs) = xfs() else { return };
    let src = xfs.path().join("src");
    let large = make_source(&src);

    let before = xfs.used_bytes();
    let dst = xfs.path().join("dst");
    let out = cp_local(&["--json"], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal(&src, &dst);
    let report = parse_json_report(&out.stdout);
    assert_eq!(cloned(&out), 3, "the 3 large files are cloned");
    assert_eq!(report.files(), 23, "cloned files count as copied");
    // Shared blocks: the copy takes far less new space than its large files' bytes.
    let grew = xfs.used_bytes().saturating_sub(before);
    assert!(
        grew < large / 4,
        "a clone took {grew} bytes of new space for {large} bytes of large files"
    );

    // Up to date: nothing cloned or copied again.
    let again = cp_local(&["--json"], &src, &dst);
    assert_ok(&again, None);
    assert_eq!(
        (cloned(&again), parse_json_report(&again.stdout).files()),
        (0, 0)
    );

    // A single large file is cloned too.
    let one = xfs.path().join("one");
    let out = cp_local(&["--json"], src.join("big"), &one);
    assert_ok(&out, None);
    assert_eq!(cloned(&out), 1);
    assert_eq!(fs::read(&one).unwrap(), fs::read(src.join("big")).unwrap());

    // The human report says so.
    let human = cp_local(&[], src.join("d"), xfs.path().join("human"));
    assert_ok(&human, None);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("cloned: 2 large files share their blocks"),
        "report: {text}"
    );
    let single = cp_local(&[], src.join("big"), xfs.path().join("single"));
    assert_ok(&single, None);
    let text = String::from_utf8_lossy(&single.stdout);
    assert!(
        text.contains("cloned: 1 large file shares its blocks"),
        "report: {text}"
    );
}

#[test]
fn reflink_never_and_another_file_system_copy_every_byte() {
    let Some(xfs) = xfs() else { return };
    let src = xfs.path().join("src");
    let large = make_source(&src);

    let before = xfs.used_bytes();
    let dst = xfs.path().join("never");
    let out = cp_local(&["--json", "--reflink", "never"], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal(&src, &dst);
    assert_eq!(cloned(&out), 0);
    let grew = xfs.used_bytes().saturating_sub(before);
    assert!(
        grew >= large,
        "--reflink never took only {grew} bytes for {large}"
    );

    // Onto another file system (tmp): copied, exact.
    let t = tmp();
    let other = t.path().join("other");
    let out = cp_local(&["--json"], &src, &other);
    assert_ok(&out, None);
    assert_trees_equal(&src, &other);
    assert_eq!(cloned(&out), 0);
}
