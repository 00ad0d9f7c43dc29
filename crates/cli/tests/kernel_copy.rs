//! Local copies of large files within one file system that does not share blocks (ext4,
//! tmpfs): files of 1 to 64 MiB are copied inside the kernel (`copy_file_range`) by threads
//! of their own (larger ones in chunks, which a cut copy resumes), and the copy is exact all the same (content, modes, mtimes, holes); `-v`
//! lists them and the report counts them. A copy to another file system (where the kernel
//! refuses), `--reflink never` and `SPRAT_KERNEL_COPY=0` move the bytes through sprat and are
//! just as exact. A disk that fills up during a kernel copy fails the copy with exit 5 naming
//! the cause, leaves no wrong file, and the same command completes it once there is room.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Output;

use common::{assert_ok, bin, cp_args, cp_local, no_wrong_file, tmp};
use sprat_testkit::{
    assert_trees_equal, make_file, parse_json_report, random_bytes, run_sprat, Tmpfs,
};

const MIB: usize = 1 << 20;

/// Regular files of [`make_source`] of 1 to 64 MiB.
const LARGE: u64 = 4;

/// Its regular files.
const FILES: u64 = 26;

/// A tree with 4 files of 1 to 64 MiB (one exactly 1 MiB, one read-only with an old mtime, one
/// a 64 MiB sparse file with 2 MiB of data), a sparse file past 64 MiB, one a byte short of
/// 1 MiB, 20 small files and a symlink. Returns the 64 MiB sparse file's path.
fn make_source(src: &Path) -> std::path::PathBuf {
    fs::create_dir_all(src.join("d/e")).unwrap();
    make_file(&src.join("big"), &random_bytes(5 * MIB + 3, 1), 0o644);
    make_file(&src.join("d/exact"), &random_bytes(MIB, 2), 0o755);
    make_file(&src.join("d/under"), &random_bytes(MIB - 1, 3), 0o600);
    make_file(&src.join("d/e/ro"), &random_bytes(3 * MIB + 7, 4), 0o644);
    fs::set_permissions(src.join("d/e/ro"), fs::Permissions::from_mode(0o400)).unwrap();
    fs::File::options()
        .write(true)
        .open(src.join("d/e/ro"))
        .unwrap()
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000))
        .unwrap();
    let sparse = src.join("d/sparse");
    let f = fs::File::create(&sparse).unwrap();
    f.set_len(64 * MIB as u64).unwrap();
    f.write_all_at(&random_bytes(MIB, 5), 8 * MIB as u64)
        .unwrap();
    f.write_all_at(&random_bytes(MIB, 6), 63 * MIB as u64)
        .unwrap();
    drop(f);
    let huge = fs::File::create(src.join("d/huge")).unwrap();
    huge.set_len(80 * MIB as u64).unwrap();
    huge.write_all_at(b"past the cap", 70 * MIB as u64).unwrap();
    drop(huge);
    for i in 0..20 {
        let data = random_bytes(500 * i, 100 + i as u64);
        make_file(&src.join(format!("d/s{i}")), &data, 0o640);
    }
    std::os::unix::fs::symlink("../big", src.join("d/link")).unwrap();
    sparse
}

fn kernel_copied(out: &Output) -> u64 {
    parse_json_report(&out.stdout).u64("kernel_copied")
}

/// Bytes of disk the file at `path` takes.
fn allocated(path: &Path) -> u64 {
    fs::metadata(path).unwrap().blocks() * 512
}

/// The sparse file's copy takes no more disk than its source, give or take a block per run.
fn assert_holes_kept(src: &Path, dst: &Path) {
    let (a, b) = (allocated(src), allocated(dst));
    assert!(
        b <= a + 64 * 1024 && b < 8 * MIB as u64,
        "{} takes {b} bytes of disk, its source {a}",
        dst.display()
    );
}

/// The files `-v` listed: stdout up to the report's first line.
fn listed(out: &Output) -> BTreeSet<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .take_while(|l| !l.starts_with("copy "))
        .map(str::to_string)
        .collect()
}

#[test]
fn large_files_are_copied_inside_the_kernel_and_exactly() {
    let t = tmp();
    let src = t.path().join("src");
    let sparse = make_source(&src);
    let dst = t.path().join("dst");

    let out = cp_local(&["--json"], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal(&src, &dst);
    assert_holes_kept(&sparse, &dst.join("d/sparse"));
    assert_eq!(kernel_copied(&out), LARGE, "the 4 files of 1 to 64 MiB");
    assert_eq!(parse_json_report(&out.stdout).files(), FILES);
    assert_holes_kept(&src.join("d/huge"), &dst.join("d/huge"));

    // Up to date: nothing copied again.
    let again = cp_local(&["--json"], &src, &dst);
    assert_ok(&again, None);
    let report = parse_json_report(&again.stdout);
    assert_eq!((kernel_copied(&again), report.files()), (0, 0));

    // `-v` lists them with the rest, and the report says how many went inside the kernel.
    let listed_dst = t.path().join("listed");
    let out = cp_local(&["-v"], &src, &listed_dst);
    assert_ok(&out, None);
    assert_trees_equal(&src, &listed_dst);
    let names = listed(&out);
    for name in [
        "big", "d/exact", "d/e/ro", "d/sparse", "d/huge", "d/under", "d/s0",
    ] {
        assert!(names.contains(name), "-v did not list {name}: {names:?}");
    }
    assert_eq!(names.len() as u64, FILES, "{names:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("copied inside the kernel: 4 large files"),
        "report: {text}"
    );

    // A single large file too.
    let one = t.path().join("one");
    let out = cp_local(&[], src.join("big"), &one);
    assert_ok(&out, None);
    assert_eq!(fs::read(&one).unwrap(), fs::read(src.join("big")).unwrap());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("copied inside the kernel: 1 large file "),
        "report: {text}"
    );
}

#[test]
fn without_kernel_copies_and_across_file_systems_the_copy_is_as_exact() {
    let t = tmp();
    let src = t.path().join("src");
    let sparse = make_source(&src);

    // Turned off: through sprat's batches.
    let off = t.path().join("off");
    let args = cp_args(None, &["--json"], &src, &off);
    let out = run_sprat(bin(), args, &[("SPRAT_KERNEL_COPY", "0")]);
    assert_ok(&out, None);
    assert_trees_equal(&src, &off);
    assert_holes_kept(&sparse, &off.join("d/sparse"));
    assert_eq!(kernel_copied(&out), 0);

    // `--reflink never` (XFS and Btrfs would clone).
    let never = t.path().join("never");
    let out = cp_local(&["--json", "--reflink", "never"], &src, &never);
    assert_ok(&out, None);
    assert_trees_equal(&src, &never);
    assert_eq!(kernel_copied(&out), 0);

    // Another file system: the kernel refuses, and what was handed over is copied all the same.
    let Some(other) = Tmpfs::mount("256m") else {
        eprintln!("skipped the copy to another file system: cannot mount tmpfs");
        return;
    };
    let there = other.path().join("dst");
    let out = cp_local(&["--json"], &src, &there);
    assert_ok(&out, None);
    assert_trees_equal(&src, &there);
    assert_holes_kept(&sparse, &there.join("d/sparse"));
    assert_eq!(
        kernel_copied(&out),
        0,
        "nothing crosses file systems in the kernel"
    );
}

#[test]
fn a_disk_that_fills_during_kernel_copies_fails_cleanly_and_completes_once_freed() {
    // Source and destination on one 16 MiB file system: the copy cannot fit.
    let Some(disk) = Tmpfs::mount("16m") else {
        eprintln!("skipped: cannot mount tmpfs");
        return;
    };
    let src = disk.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..3 {
        make_file(
            &src.join(format!("f{i}")),
            &random_bytes(3 * MIB, 10 + i),
            0o644,
        );
    }
    let dst = disk.path().join("dst");
    let out = cp_local(&[], &src, &dst);
    let why = sprat_testkit::describe(&out);
    // A file the disk has no room for when its copy starts fails alone (exit 1); one that
    // filled the disk while copied beside another stops the copy (exit 5): both say why.
    let code = out.status.code();
    assert!(code == Some(1) || code == Some(5), "{why}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No space left on device"),
        "the cause is not named: {why}"
    );
    no_wrong_file(&src, &dst).unwrap_or_else(|e| panic!("{e}: {why}"));

    assert!(disk.resize("64m"));
    let out = cp_local(&["--json"], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal(&src, &dst);
    assert!(kernel_copied(&out) > 0, "{}", sprat_testkit::describe(&out));
}

#[test]
fn a_file_its_disk_has_no_room_for_fails_alone_and_the_rest_is_copied() {
    let Some(disk) = Tmpfs::mount("16m") else {
        eprintln!("skipped: cannot mount tmpfs");
        return;
    };
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..10 {
        make_file(
            &src.join(format!("f{i}")),
            &random_bytes(100 << 10, i),
            0o644,
        );
    }
    // Within the sizes copied inside the kernel, and larger than the whole disk.
    make_file(&src.join("huge"), &random_bytes(20 * MIB, 99), 0o644);
    // As large, but mostly a hole: its 1 MiB of data fits.
    let sparse = fs::File::create(src.join("sparse")).unwrap();
    sparse.set_len(20 * MIB as u64).unwrap();
    sparse
        .write_all_at(&random_bytes(MIB, 98), 5 * MIB as u64)
        .unwrap();
    drop(sparse);
    let dst = disk.path().join("dst");
    let out = cp_local(&["--json"], &src, &dst);
    let why = sprat_testkit::describe(&out);
    // A full disk: exit 5, however it was met.
    assert_eq!(out.status.code(), Some(5), "{why}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("huge") && l.contains("No space left on device")),
        "{why}"
    );
    assert!(!dst.join("huge").exists(), "{why}");
    assert_eq!(
        fs::read(dst.join("sparse")).unwrap(),
        fs::read(src.join("sparse")).unwrap()
    );
    for i in 0..10 {
        let name = format!("f{i}");
        assert_eq!(
            fs::read(dst.join(&name)).unwrap(),
            fs::read(src.join(&name)).unwrap()
        );
    }
}
