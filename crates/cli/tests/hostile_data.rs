//! End-to-end checks that what a peer sends cannot hurt the storage side beyond the files it
//! names: setuid and setgid bits are cleared from files that arrive over the network (unless
//! `--keep-setuid`), a file that does not fit is refused before anything is allocated, a FIFO
//! swapped in for a file is reported instead of blocking a pull or `sprat sum`, and `rm -r`
//! removes a tree far deeper than the stack could recurse into.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{assert_ok, cp, cp_local, server, server_with, tmp};
use sprat_testkit::{make_file, parse_json_report, random_bytes, ServerOptions};

// ------------------------------------------------------------------ setuid and setgid bits

/// A tree with set-user-ID and set-group-ID files (a small one and one large enough to
/// travel in chunks), a sticky file, and a setgid directory.
fn make_setid_tree(dir: &Path) {
    fs::create_dir_all(dir.join("shared")).unwrap();
    make_file(&dir.join("suid"), b"#!/bin/sh\n", 0o4755);
    make_file(&dir.join("sgid"), b"#!/bin/sh\n", 0o2711);
    make_file(&dir.join("shared/both"), b"x", 0o6755);
    make_file(&dir.join("sticky"), b"y", 0o1644);
    make_file(&dir.join("big"), &random_bytes(3 << 20, 7), 0o4750);
    fs::set_permissions(dir.join("shared"), fs::Permissions::from_mode(0o2775)).unwrap();
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Checks the modes of a copy of [`make_setid_tree`]: with `kept`, exactly the source's;
/// otherwise the files without their setuid and setgid bits. The directory keeps its own.
#[track_caller]
fn assert_setid(dst: &Path, kept: bool, what: &str) {
    let want = |m: u32| if kept { m } else { m & !0o6000 };
    for (name, m) in [
        ("suid", 0o4755),
        ("sgid", 0o2711),
        ("shared/both", 0o6755),
        ("sticky", 0o1644),
        ("big", 0o4750),
    ] {
        assert_eq!(
            mode(&dst.join(name)),
            want(m),
            "{what}: mode of {name} is {:o}",
            mode(&dst.join(name))
        );
    }
    assert_eq!(
        mode(&dst.join("shared")),
        0o2775,
        "{what}: the setgid directory"
    );
}

#[test]
fn a_push_cannot_make_setuid_files_on_the_server_unless_it_keeps_them() {
    let t = tmp();
    let src = t.path().join("src");
    make_setid_tree(&src);
    let root = t.path().join("root");
    let srv = server(&root);
    let out = cp(&srv, &["--json"], &src, srv.url("dst"));
    assert_ok(&out, Some(&srv));
    assert_setid(&root.join("dst"), false, "push");
    // Running it again finds everything up to date: the cleared bits are no difference
    // to set again every time.
    let again = cp(&srv, &["--json"], &src, srv.url("dst"));
    assert_ok(&again, Some(&srv));
    let r = parse_json_report(&again.stdout);
    assert_eq!(
        (r.get("up_to_date").as_u64(), r.get("attrs_fixed").as_u64()),
        (Some(5), Some(0)),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    assert_setid(&root.join("dst"), false, "push again");
    // A client asking to keep them does not decide for the server.
    let asked = cp(&srv, &["--keep-setuid"], &src, srv.url("asked"));
    assert_ok(&asked, Some(&srv));
    assert_setid(
        &root.join("asked"),
        false,
        "push with the client's --keep-setuid",
    );

    let kept_root = t.path().join("kept");
    let opts = ServerOptions {
        extra_args: vec!["--keep-setuid".into()],
        ..ServerOptions::default()
    };
    let keeping = server_with(&kept_root, &opts);
    let out = cp(&keeping, &[], &src, keeping.url("dst"));
    assert_ok(&out, Some(&keeping));
    assert_setid(&kept_root.join("dst"), true, "push to serve --keep-setuid");
}

#[test]
fn a_pull_clears_setuid_bits_unless_kept_and_a_local_copy_keeps_them() {
    let t = tmp();
    let root = t.path().join("root");
    make_setid_tree(&root.join("src"));
    let srv = server(&root);
    let pulled = t.path().join("pulled");
    let out = cp(&srv, &[], srv.url("src"), &pulled);
    assert_ok(&out, Some(&srv));
    assert_setid(&pulled, false, "pull");
    let kept = t.path().join("kept");
    let out = cp(&srv, &["--keep-setuid"], srv.url("src"), &kept);
    assert_ok(&out, Some(&srv));
    assert_setid(&kept, true, "pull with --keep-setuid");
    let local = t.path().join("local");
    let out = cp_local(&[], root.join("src"), &local);
    assert_ok(&out, None);
    assert_setid(&local, true, "local copy");
}

// ------------------------------------------------------------- a file that cannot fit

/// A sparse 16 MiB file (cheap to make) beside small files.
fn make_too_big_tree(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    let big = fs::File::create(dir.join("huge.img")).unwrap();
    big.set_len(16 << 20).unwrap();
    drop(big);
    for i in 0..5 {
        make_file(
            &dir.join(format!("small{i}")),
            &random_bytes(1000, i),
            0o644,
        );
    }
}

/// A file larger than the destination's free space is refused before anything is
/// allocated, by name and as "No space left on device"; the rest of the tree arrives, and the
/// copy exits 5 with one error line saying the destination is full, as when a disk fills up
/// while writing (a full disk is one exit code wherever it is met).
#[test]
fn a_file_larger_than_the_free_space_fails_alone_by_name() {
    use sprat_testkit::Tmpfs;
    let Some(disk) = Tmpfs::mount("4m") else {
        eprintln!("skipped: cannot mount tmpfs");
        return;
    };
    let t = tmp();
    let src = t.path().join("src");
    make_too_big_tree(&src);
    for pull in [false, true] {
        let (out, dst, srv) = if pull {
            let srv = server(&src);
            let dst = disk.path().join("pulled");
            (cp(&srv, &[], srv.url(""), &dst), dst, srv)
        } else {
            let srv = server(disk.path());
            (
                cp(&srv, &[], &src, srv.url("pushed")),
                disk.path().join("pushed"),
                srv,
            )
        };
        let why = format!("pull={pull}\n{}", sprat_testkit::describe(&out));
        assert_eq!(out.status.code(), Some(5), "{why}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("sprat: error: "))
            .collect();
        assert!(
            errors.len() == 1 && errors[0].contains("its file system is full: 1 file did not fit"),
            "{why}"
        );
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with("sprat: failed: huge.img")
                    && l.contains("No space left on device")),
            "{why}"
        );
        for i in 0..5 {
            assert!(dst.join(format!("small{i}")).is_file(), "{why}");
        }
        assert!(!dst.join("huge.img").exists(), "{why}");
        assert!(
            disk.available_bytes() > 3 << 20,
            "the refused file took space: {} bytes free\n{why}",
            disk.available_bytes()
        );
        drop(srv);
    }
}

// ------------------------------------------------------- a FIFO swapped in for a file

/// The server lists a directory of many files, then one of them (the last it will read) is
/// replaced by a FIFO: the pull reports that file as not a regular file and exits 1, with
/// every other file copied, instead of a server thread waiting for ever for a writer.
///
/// The swap races the server's reading: on a loaded machine the client may take in every
/// batch before its first file shows, so the server has read the target before the swap. That
/// attempt proves nothing either way (the copy is whole and right), so it is made again, a few
/// times at most; any other outcome than the two is a failure.
#[test]
fn a_fifo_swapped_in_during_a_pull_fails_that_file_instead_of_blocking() {
    const ATTEMPTS: usize = 4;
    for attempt in 1..=ATTEMPTS {
        match fifo_swap_attempt() {
            SwapOutcome::Checked => return,
            SwapOutcome::TooLate(why) => {
                eprintln!(
                    "attempt {attempt}: the swap came after the server read the target\n{why}"
                )
            }
        }
    }
    panic!("in {ATTEMPTS} attempts the swap never came before the server read the target");
}

enum SwapOutcome {
    /// The swap came in time and the pull did what it must.
    Checked,
    /// The server had read the target before the swap: the pull copied it whole (checked).
    TooLate(String),
}

fn fifo_swap_attempt() -> SwapOutcome {
    use sprat_testkit::{make_fifo, spawn_sprat};
    use std::time::{Duration, Instant};
    let t = tmp();
    let root = t.path().join("root");
    let many = root.join("src/many");
    fs::create_dir_all(&many).unwrap();
    // 3000 x 40 KB: more than the server may read ahead of the client (its ready batches and
    // the streams' socket buffers, under 50 MB), so the target cannot have been read before
    // the client has taken in most of the others.
    let content = random_bytes(40_000, 9);
    for i in 0..3000 {
        fs::write(many.join(format!("f{i:05}")), &content).unwrap();
    }
    // Made last: the highest inode number of its directory, so the last file read.
    let target = many.join("zz-target");
    fs::write(&target, &content).unwrap();
    // One reader and small batches: the server reads the files one batch after another.
    let opts = ServerOptions {
        extra_args: ["--read-threads", "1", "--batch-files", "50"]
            .map(std::ffi::OsString::from)
            .to_vec(),
        ..ServerOptions::default()
    };
    let srv = server_with(&root, &opts);
    let dst = t.path().join("dst");
    let args = common::cp_args(Some(&srv), &["--retry-for", "0s"], srv.url("src"), &dst);
    let mut child = spawn_sprat(common::bin(), args, &[]);
    // The first file written means the directory was listed (a listing is sent only once
    // taken): now the target is swapped for a FIFO, before the server reads it if in time.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fs::read_dir(dst.join("many")).is_ok_and(|mut d| d.next().is_some()) {
        assert!(Instant::now() < deadline, "the pull wrote nothing");
        std::thread::sleep(Duration::from_millis(1));
    }
    fs::remove_file(&target).unwrap();
    make_fifo(&target);
    let out = match child.wait_timeout(Duration::from_secs(40)) {
        Ok(out) => out,
        Err(timed_out) => {
            // Let the blocked server thread go before failing.
            let _writer = fs::OpenOptions::new().read(true).write(true).open(&target);
            panic!(
                "the pull hung on the FIFO:\n{}\n--- server ---\n{}",
                sprat_testkit::describe(&timed_out.output),
                srv.stderr_log()
            );
        }
    };
    let why = sprat_testkit::describe(&out);
    let copied = dst.join("many/zz-target");
    assert_eq!(
        fs::read_dir(dst.join("many")).unwrap().count(),
        if out.status.code() == Some(0) {
            3001
        } else {
            3000
        },
        "{why}"
    );
    if out.status.code() == Some(0) {
        assert_eq!(fs::read(&copied).unwrap(), content, "{why}");
        return SwapOutcome::TooLate(why);
    }
    assert_eq!(out.status.code(), Some(1), "{why}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("sprat: failed: many/zz-target")
                && l.contains("not a regular file")),
        "{why}"
    );
    assert!(!copied.exists(), "{why}");
    SwapOutcome::Checked
}

// ------------------------------------------------------------------ rm -r of a deep tree

/// Makes `depth` directories `d`, one inside the other, in `top`: paths far longer than
/// PATH_MAX, so made by descriptor. A file lies every 1000 levels.
fn make_deep_chain(top: &Path, depth: usize) {
    use rustix::fs::{mkdirat, openat, Mode, OFlags};
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open(top, dir_flags, Mode::empty()).unwrap();
    for level in 0..depth {
        mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
        fd = openat(&fd, "d", dir_flags, Mode::empty()).unwrap();
        if level % 1000 == 0 {
            let file_flags = OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC;
            openat(&fd, "f", file_flags, Mode::from_raw_mode(0o644)).unwrap();
        }
    }
}

/// Removes a deep tree that a failed test left, with `rm -rf` (the temporary directory's own
/// removal recurses, and would overflow the test's stack).
struct RemoveDeep(std::path::PathBuf);

impl Drop for RemoveDeep {
    fn drop(&mut self) {
        if self.0.exists() {
            let _ = std::process::Command::new("rm")
                .arg("-rf")
                .arg(&self.0)
                .status();
        }
    }
}

/// `sprat rm -r` of a tree 100,000 directories deep removes it (the server neither
/// overflows its stack nor runs out of descriptors) and the server stays up.
#[test]
fn rm_r_removes_a_tree_100_000_deep() {
    // In memory where there is /dev/shm: removing 100,000 directories from a disk mounted
    // with `discard` takes minutes.
    let t = tempfile::Builder::new()
        .prefix("sprat-e2e-")
        .tempdir_in("/dev/shm")
        .unwrap_or_else(|_| tmp());
    let root = t.path().join("root");
    fs::create_dir_all(root.join("deep")).unwrap();
    fs::write(root.join("keep"), b"x").unwrap();
    let _cleanup = RemoveDeep(root.join("deep"));
    make_deep_chain(&root.join("deep"), 100_000);
    let mut srv = server(&root);
    let mut args = vec!["rm".into(), "-r".into()];
    args.extend(srv.client_args());
    args.push(srv.url("deep").into());
    let out = sprat_testkit::run_sprat(common::bin(), args, &[]);
    common::assert_exit(&out, 0);
    assert!(!root.join("deep").exists());
    assert!(root.join("keep").exists());
    assert!(srv.is_running(), "{}", srv.stderr_log());
}

// ------------------------------------------------------------------ paths beyond PATH_MAX

/// Makes, in `top`, a chain of 25 directories with names of 200 bytes (by descriptor: the
/// last ones lie beyond PATH_MAX) with a file at level 20 (a path of 4,023 bytes) and one at
/// the end (5,000 bytes), and a file `ok/f` beside the chain.
fn make_long_paths(top: &Path) {
    use rustix::fs::{mkdirat, openat, Mode, OFlags};
    fs::create_dir_all(top.join("ok")).unwrap();
    fs::write(top.join("ok/f"), b"ok").unwrap();
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let file_flags = OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC;
    let name = "d".repeat(200);
    let mut fd = rustix::fs::open(top, dir_flags, Mode::empty()).unwrap();
    for level in 1..=25 {
        mkdirat(&fd, name.as_str(), Mode::from_raw_mode(0o755)).unwrap();
        fd = openat(&fd, name.as_str(), dir_flags, Mode::empty()).unwrap();
        if level == 20 || level == 25 {
            let f = openat(&fd, "f", file_flags, Mode::from_raw_mode(0o644)).unwrap();
            rustix::io::write(&f, b"deep").unwrap();
        }
    }
}

/// Files with paths below the copy's root longer than the kernel lets a path be (4,095
/// bytes): each fails by name (its directory, and its own name in the reason), the copy
/// exits 1, and everything else arrives, pushed, pulled and copied locally. Before, the
/// whole copy stopped on a "malformed batch" (a push retried it for ten minutes).
#[test]
fn a_path_longer_than_the_kernel_allows_fails_alone_by_name() {
    let t = tempfile::Builder::new()
        .prefix("sprat-e2e-")
        .tempdir_in("/dev/shm")
        .unwrap_or_else(|_| tmp());
    let root = t.path().join("root");
    let src = t.path().join("src");
    make_long_paths(&src);
    let _cleanup = [RemoveDeep(src.clone()), RemoveDeep(root.clone())];
    fs::create_dir_all(&root).unwrap();
    make_long_paths(&root.join("tree"));
    let srv = server(&root);
    let url = |p: &str| format!("sprat://{}/{p}", srv.addr());
    let check = |out: &std::process::Output, dst: &Path| {
        common::assert_exit(out, 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("'ddd") && err.contains("4095") && err.contains("is left out"),
            "{err}"
        );
        assert_eq!(fs::read(dst.join("ok/f")).unwrap(), b"ok");
        let level20: std::path::PathBuf = std::iter::repeat_n("d".repeat(200), 20).collect();
        assert_eq!(fs::read(dst.join(level20).join("f")).unwrap(), b"deep");
    };
    let local = t.path().join("local");
    check(&cp_local(&[], &src, &local), &local);
    check(&cp(&srv, &[], &src, url("pushed")), &root.join("pushed"));
    let pulled = t.path().join("pulled");
    check(&cp(&srv, &[], url("tree"), &pulled), &pulled);
}

// ------------------------------------------- files named as another file's partial copy

/// A tree holding `.NAME.sprat-part` and `.NAME.sprat-part.log` beside a file NAME large
/// enough to travel in chunks (what an interrupted copy leaves): the two cannot arrive beside
/// NAME's own partial copy, so each fails by name (exit 1) instead of being overwritten and
/// removed while the copy says it copied them; NAME arrives whole, and such a name beside a
/// small file is copied as any other. Local copy, push and pull.
#[test]
fn files_named_as_a_large_files_partial_copy_fail_by_name_instead_of_vanishing() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    fs::create_dir_all(&src).unwrap();
    let big = random_bytes(3 << 20, 21);
    fs::write(src.join("big"), &big).unwrap();
    fs::write(src.join(".big.sprat-part"), b"my notes").unwrap();
    fs::write(src.join(".big.sprat-part.log"), b"my log").unwrap();
    fs::write(src.join("small"), b"s").unwrap();
    fs::write(src.join(".small.sprat-part"), b"kept").unwrap();
    let srv = server(&root);
    let chunked = common::CHUNKED;
    let runs = [
        ("local", t.path().join("local")),
        ("push", root.join("pushed")),
        ("pull", t.path().join("pulled")),
    ];
    for (how, dst) in runs {
        let out = match how {
            "local" => cp_local(&chunked, &src, &dst),
            "push" => cp(&srv, &chunked, &src, srv.url("pushed")),
            _ => cp(&srv, &chunked, srv.url("src"), &dst),
        };
        let why = format!("{how}\n{}", sprat_testkit::describe(&out));
        assert_eq!(out.status.code(), Some(1), "{why}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        for name in [".big.sprat-part", ".big.sprat-part.log"] {
            assert!(
                stderr
                    .lines()
                    .any(|l| l.starts_with(&format!("sprat: failed: {name}: not copied"))),
                "{name}: {why}"
            );
            assert!(!dst.join(name).exists(), "{name}: {why}");
        }
        assert_eq!(fs::read(dst.join("big")).unwrap(), big, "{why}");
        assert_eq!(
            fs::read(dst.join(".small.sprat-part")).unwrap(),
            b"kept",
            "{why}"
        );
        assert_eq!(fs::read(dst.join("small")).unwrap(), b"s", "{why}");
    }
}
