//! End-to-end fidelity of push (local -> server) and pull (server -> local) through a real
//! `sprat serve` on 127.0.0.1: the destination must equal the source in content, types, modes,
//! mtimes (with nanoseconds) and symlinks, with default settings, with several streams, with small
//! batches, and with chunking forced so large files travel as chunks across streams.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use common::{assert_ok, bin, cp, cp_args, server, tmp, type_change_v1, type_change_v2};
use sprat_testkit::{
    assert_trees_equal, assert_trees_equal_with, make_fidelity_tree, make_long_name_tree,
    make_many_files, make_special_mode_tree, parse_json_report, random_bytes, set_mtime_nofollow,
    spawn_sprat, CompareOptions, Server, ServerOptions, DEFAULT_TIMEOUT,
};

/// Options that force every file above 64 KiB to be sent as 64 KiB chunks over 3 streams.
const CHUNKED: &[&str] = &[
    "--streams",
    "3",
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
fn push_fidelity_tree_1_stream() {
    push_and_compare(&["--streams", "1"], fidelity);
}

#[test]
fn pull_fidelity_tree_1_stream() {
    pull_and_compare(&["--streams", "1"], fidelity);
}

#[test]
fn push_fidelity_tree_8_streams() {
    push_and_compare(&["--streams", "8"], fidelity);
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
    pull_and_compare(&[], many_files);
}

#[test]
fn push_empty_tree() {
    push_and_compare(&[], |d| {
        fs::create_dir_all(d).unwrap();
        set_mtime_nofollow(d, 1_600_000_000, 77);
    });
}

#[test]
fn pull_empty_tree() {
    pull_and_compare(&[], |d| {
        fs::create_dir_all(d).unwrap();
        set_mtime_nofollow(d, 1_600_000_000, 78);
    });
}

#[test]
fn push_special_permission_bits() {
    push_and_compare(&[], |d| {
        make_special_mode_tree(d);
    });
}

#[test]
fn pull_special_permission_bits() {
    pull_and_compare(&[], |d| {
        make_special_mode_tree(d);
    });
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
    // `SRC/ sprat://HOST/`: the contents of SRC into the root itself.
    let out = cp(&srv, &[], format!("{}/", src.display()), srv.url(""));
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

#[test]
fn push_replaces_entries_whose_type_changed() {
    let t = tmp();
    let src = t.path().join("src");
    type_change_v1(&src);
    let root = t.path().join("root");
    let srv = server(&root);
    let out = cp(&srv, &[], &src, srv.url("dst"));
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &root.join("dst"));
    type_change_v2(&src);
    let out = cp(&srv, &[], &src, srv.url("dst"));
    assert_ok(&out, Some(&srv));
    assert_trees_equal_with(&src, &root.join("dst"), &CompareOptions::with_root());
}

#[test]
fn concurrent_clients_on_one_server() {
    let t = tmp();
    let root = t.path().join("root");
    let shared = root.join("shared");
    make_many_files(&shared, 300, 3000, 0xc0);
    let srv = server(&root);
    let mut jobs = Vec::new();
    for i in 0..3 {
        let src = t.path().join(format!("src{i}"));
        make_many_files(&src, 300, 3000, 0xc1 + i);
        let args = cp_args(Some(&srv), &[], &src, srv.url(&format!("dst{i}")));
        jobs.push((
            src,
            root.join(format!("dst{i}")),
            spawn_sprat(bin(), args, &[]),
        ));
    }
    for i in 0..2 {
        let dst = t.path().join(format!("pulled{i}"));
        let args = cp_args(Some(&srv), &[], srv.url("shared"), &dst);
        jobs.push((shared.clone(), dst, spawn_sprat(bin(), args, &[])));
    }
    for (src, dst, mut child) in jobs {
        let out = child.wait_or_panic(DEFAULT_TIMEOUT);
        assert_ok(&out, Some(&srv));
        assert_trees_equal(&src, &dst);
    }
}

#[test]
fn url_paths_with_spaces_and_unicode() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 10, 1000, 0xd0);
    let root = t.path().join("root");
    let srv = server(&root);
    let rel = "dir with space/ünïcödé 名前";
    let out = cp(&srv, &[], &src, srv.url(rel));
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &root.join(rel));
    let dst = t.path().join("pulled");
    let out = cp(&srv, &[], srv.url(rel), &dst);
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &dst);
}

#[test]
fn push_and_pull_over_ipv6_loopback() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback");
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 20, 2000, 0xe0);
    let root = t.path().join("root");
    fs::create_dir(&root).unwrap();
    let opts = ServerOptions {
        listen: "[::1]:0".to_string(),
        ..ServerOptions::default()
    };
    let srv = Server::start(bin(), &root, &opts);
    let url = srv.url("dst");
    assert!(url.starts_with("sprat://[::1]:"), "{url}");
    let out = cp(&srv, &[], &src, &url);
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &root.join("dst"));
    let dst = t.path().join("pulled");
    let out = cp(&srv, &[], &url, &dst);
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &dst);
}

#[test]
fn host_name_localhost_in_url() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 20, 2000, 0xe1);
    let root = t.path().join("root");
    let srv = server(&root);
    let url = format!("sprat://localhost:{}/dst", srv.port());
    let out = cp(&srv, &[], &src, &url);
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &root.join("dst"));
}

#[test]
fn push_fidelity_tree_every_file_chunked_in_4kib() {
    push_and_compare(
        &["--small-file-threshold", "0", "--chunk-size", "4KiB"],
        fidelity,
    );
}

#[test]
fn concurrent_pushes_to_the_same_destination() {
    // Two clients pushing the same tree to the same place at once: both finish, and the result
    // is the tree (no mixed or half-written file, no temporary file left over).
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 400, 3000, 0xe2);
    fs::write(src.join("big.bin"), random_bytes(3 << 20, 0xe3)).unwrap();
    let root = t.path().join("root");
    let srv = server(&root);
    let mut children: Vec<_> = (0..2)
        .map(|_| spawn_sprat(bin(), cp_args(Some(&srv), &[], &src, srv.url("dst")), &[]))
        .collect();
    for c in &mut children {
        let out = c.wait_or_panic(DEFAULT_TIMEOUT);
        assert_ok(&out, Some(&srv));
    }
    assert_trees_equal(&src, &root.join("dst"));
}

/// Sets the mtime of `p` (not following a symlink) to `sec`.`nsec`.
fn set_mtime_ns(p: &Path, sec: i64, nsec: i64) {
    let t = rustix::fs::Timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    let times = rustix::fs::Timestamps {
        last_access: t,
        last_modification: t,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        p,
        &times,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap();
}

/// The mtime of `p` as the file system holds it.
fn mtime_ns(p: &Path) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = fs::symlink_metadata(p).unwrap();
    (m.mtime(), m.mtime_nsec())
}

/// An mtime the destination's file system cannot hold (ext4: 1901 to 2446) is set to the
/// nearest it holds, by the kernel: the report says so (before, nothing did), pushed, pulled
/// and copied locally. The source lives on tmpfs (64-bit times); what the destination holds is
/// found by trying, so on a file system that holds them all nothing is counted.
#[test]
fn mtimes_the_destination_cannot_hold_are_reported() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("skipped: no tmpfs at /dev/shm for the source");
        return;
    }
    let src_dir = tempfile::Builder::new()
        .prefix("sprat-e2e-mtimes-")
        .tempdir_in(shm)
        .unwrap();
    let src = src_dir.path().join("src");
    let write_file = |p: &Path, content: &[u8]| {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    };
    // `big` (2 MiB) is copied inside the kernel by a local copy, not by the write stage.
    let times: [(&str, i64, i64); 5] = [
        ("y1800", -5_364_662_400, 123),
        ("y3000", 32_503_680_000, 456),
        ("far", 31_556_889_864_403_199, 0),
        ("now", 1_700_000_000, 789),
        ("big", 32_503_680_000, 7),
    ];
    for (name, sec, nsec) in times {
        let content = match name {
            "big" => sprat_testkit::random_bytes(2 << 20, 5),
            _ => name.as_bytes().to_vec(),
        };
        write_file(&src.join(name), &content);
        set_mtime_ns(&src.join(name), sec, nsec);
    }
    let t = tmp();
    // What the destination's file system makes of each time.
    let probe = t.path().join("probe");
    let mut expected = 0;
    for (_, sec, nsec) in times {
        write_file(&probe, b"p");
        set_mtime_ns(&probe, sec, nsec);
        expected += u64::from(mtime_ns(&probe) != (sec, nsec));
    }
    let mtimes = |out: &std::process::Output| {
        sprat_testkit::parse_json_report(&out.stdout).get("not_kept")["mtimes"].as_u64()
    };
    let local = sprat_testkit::run_sprat(
        bin(),
        cp_args(None, &["--json"], &src, t.path().join("local")),
        &[],
    );
    assert_ok(&local, None);
    assert_eq!(
        mtimes(&local),
        Some(expected),
        "{}",
        sprat_testkit::describe(&local)
    );
    let srv = server(&t.path().join("root"));
    let push = cp(&srv, &["--json"], &src, srv.url("pushed"));
    assert_ok(&push, Some(&srv));
    assert_eq!(
        mtimes(&push),
        Some(expected),
        "{}",
        sprat_testkit::describe(&push)
    );
    let pull = cp(&srv, &[], srv.url("pushed"), src_dir.path().join("pulled"));
    assert_ok(&pull, Some(&srv));
    if expected > 0 {
        assert!(
            String::from_utf8_lossy(&cp(&srv, &[], &src, srv.url("again")).stdout)
                .contains(&format!("not kept: the mtimes of {expected} files")),
        );
    }
    assert_eq!(mtime_ns(&t.path().join("local/now")), (1_700_000_000, 789));
}
