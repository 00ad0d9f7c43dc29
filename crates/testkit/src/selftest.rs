//! Tests of the test kit itself, using `cp -a` as a known-good copier: a generated tree and its
//! `cp -a` copy compare equal, and every kind of difference the comparison promises to catch is
//! caught and named. Not a test of sprat.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;

use crate::compare::{
    assert_trees_equal, assert_trees_equal_with, diff_snapshots, partial_copy_violations, snapshot,
    CompareOptions,
};
use crate::tree::{
    make_fidelity_tree, make_long_name_tree, make_many_files, set_mtime_nofollow, FIDELITY_BIG_FILE,
};

fn cp_a(src: &Path, dst: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(dst)
        .status()
        .unwrap();
    assert!(status.success(), "cp -a failed");
}

fn diffs(a: &Path, b: &Path) -> Vec<String> {
    diff_snapshots(&snapshot(a), &snapshot(b), &CompareOptions::with_root())
}

#[test]
fn fidelity_tree_has_what_it_promises() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    let stats = make_fidelity_tree(&src);
    assert!(stats.files > 30 && stats.symlinks >= 8 && stats.dirs > 120);
    assert!(stats.bytes > FIDELITY_BIG_FILE as u64);
    let snap = snapshot(&src);
    let big = &snap.entries[Path::new("big.bin")];
    assert_eq!(big.size, FIDELITY_BIG_FILE as u64);
    assert_eq!(snap.entries[Path::new("locked_dir")].mode, 0o555);
    assert_eq!(snap.entries[Path::new("readonly.txt")].mode, 0o444);
    assert_eq!(
        snap.entries[Path::new("mtime-max-ns.txt")].mtime.1,
        999_999_999
    );
    let link = &snap.entries[Path::new("links/absolute")];
    assert_eq!(link.target.as_deref(), Some(Path::new("/etc/passwd")));
    assert_ne!(link.mtime.1, 0, "symlink mtime was not set");
    assert_ne!(snap.root.mtime.1, 0, "root mtime was not set");
    let deepest = snap
        .entries
        .keys()
        .map(|p| p.components().count())
        .max()
        .unwrap();
    assert_eq!(deepest, 121);
}

#[test]
fn cp_a_copy_compares_equal() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    make_fidelity_tree(&src);
    make_long_name_tree(&src.join("long"));
    // make_long_name_tree touched src's mtime; set it again.
    set_mtime_nofollow(&src, 1_600_000_000, 5);
    let dst = t.path().join("dst");
    cp_a(&src, &dst);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

#[test]
fn every_kind_of_difference_is_reported() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    make_many_files(&src, 5, 100, 1);
    fs::create_dir(src.join("empty")).unwrap();
    symlink("d000/f00000.bin", src.join("link")).unwrap();
    set_mtime_nofollow(&src.join("empty"), 1_000_000_000, 1);
    set_mtime_nofollow(&src, 1_000_000_000, 2);
    let dst = t.path().join("dst");
    cp_a(&src, &dst);
    assert!(diffs(&src, &dst).is_empty());

    // Content change of the same size, keeping the mtime.
    let f = dst.join("d000/f00001.bin");
    let mut c = fs::read(&f).unwrap();
    c[50] ^= 1;
    fs::write(&f, &c).unwrap();
    set_mtime_nofollow(
        &f,
        snapshot(&src).entries[Path::new("d000/f00001.bin")].mtime.0,
        snapshot(&src).entries[Path::new("d000/f00001.bin")].mtime.1 as u32,
    );
    // Mode, nanosecond mtime, link target, a missing and an extra entry, type change.
    fs::set_permissions(
        dst.join("d000/f00002.bin"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    set_mtime_nofollow(&dst.join("d000/f00003.bin"), 1_000_000_000, 7);
    fs::remove_file(dst.join("link")).unwrap();
    symlink("elsewhere", dst.join("link")).unwrap();
    fs::remove_file(dst.join("d000/f00004.bin")).unwrap();
    fs::write(dst.join("extra"), b"x").unwrap();
    fs::remove_dir(dst.join("empty")).unwrap();
    fs::write(dst.join("empty"), b"").unwrap();
    set_mtime_nofollow(&dst, 1_000_000_000, 3);

    let d = diffs(&src, &dst).join("\n");
    for needle in [
        "\"d000/f00001.bin\": content differs from byte 50",
        "\"d000/f00002.bin\": mode differs: source 0644, destination 0600",
        "\"d000/f00003.bin\": mtime differs",
        "\"link\": link target differs",
        "\"d000/f00004.bin\": missing in destination",
        "\"extra\": unexpected in destination",
        "\"empty\": type differs: source Dir, destination File",
        "\"<root>\": mtime differs",
    ] {
        assert!(d.contains(needle), "{needle:?} not reported in:\n{d}");
    }
    let r = std::panic::catch_unwind(|| assert_trees_equal(&src, &dst));
    assert!(r.is_err(), "assert_trees_equal did not panic");
}

#[test]
fn partial_copy_check_flags_wrong_content_only() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    make_many_files(&src, 3, 1000, 9);
    let dst = t.path().join("dst");
    fs::create_dir_all(dst.join("d000")).unwrap();
    fs::copy(src.join("d000/f00000.bin"), dst.join("d000/f00000.bin")).unwrap();
    fs::write(dst.join("d000/f00001.bin"), b"half").unwrap();
    fs::write(dst.join("d000/.f00002.bin.tmp"), b"half").unwrap();
    let (violations, strays) = partial_copy_violations(&src, &dst);
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].contains("f00001.bin"));
    assert_eq!(strays.len(), 1, "{strays:?}");
}

#[test]
fn tmpfs_mounts_fills_and_unmounts() {
    let Some(fs_) = crate::tmpfs::Tmpfs::mount("1m") else {
        eprintln!("skipped: cannot mount tmpfs");
        return;
    };
    let p = fs_.path().to_path_buf();
    let err = fs::write(p.join("big"), vec![0u8; 2 << 20]).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    fs::remove_file(p.join("big")).unwrap();
    assert!(fs_.remount_read_only());
    let err = fs::write(p.join("x"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    drop(fs_);
    assert!(!p.exists());
}
