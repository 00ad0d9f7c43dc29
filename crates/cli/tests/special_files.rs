//! FIFOs, sockets and character and block devices, end to end: a tree holding each is copied
//! locally, pushed to and pulled from a real `sprat serve` on 127.0.0.1, and copied between
//! two servers; each arrives as what it is (type, device number, mode, mtime, owner), never
//! opened. Devices from the network are created only where the writing side allows it
//! (`sprat serve --keep-devices`, `sprat cp --keep-devices`); elsewhere the report counts
//! them as not kept, exit 0. A re-run puts right a special file of another type or number,
//! `--delete` removes one the source lacks, `--dry-run` lists what it would make, and
//! `sprat ls -l`, `stat` and `verify` show and compare them. Devices need root: without it
//! those checks are skipped with a note.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use common::{assert_ok, bin, cp, cp_local, is_root, server, server_with, tmp};
use rustix::fs::{FileType, Mode};
use sprat_testkit::{describe, parse_json_report, run_sprat, ServerOptions};

/// What a special file is: its type letter as `ls -l` shows it, and its device number.
fn kind_of(path: &Path) -> (char, u32, u32) {
    let m = fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let t = m.file_type();
    let letter = match () {
        _ if t.is_fifo() => 'p',
        _ if t.is_socket() => 's',
        _ if t.is_char_device() => 'c',
        _ if t.is_block_device() => 'b',
        _ if t.is_file() => '-',
        _ => '?',
    };
    let rdev = m.rdev();
    (letter, rustix::fs::major(rdev), rustix::fs::minor(rdev))
}

fn mknod(path: &Path, kind: FileType, mode: u32, (major, minor): (u32, u32)) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        kind,
        Mode::from_raw_mode(mode),
        rustix::fs::makedev(major, minor),
    )
    .unwrap_or_else(|e| panic!("mknod {}: {e}", path.display()));
    // The umask aside, as given.
    rustix::fs::chmod(path, Mode::from_raw_mode(mode)).unwrap();
}

/// A tree of one file, a FIFO with an old mtime, a socket, and (as root) a character device
/// owned by ids without a name and a block device; returns whether it holds the devices.
fn make_tree(dir: &Path) -> bool {
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::write(dir.join("sub/f"), b"data").unwrap();
    mknod(&dir.join("fifo"), FileType::Fifo, 0o640, (0, 0));
    mknod(&dir.join("sub/sock"), FileType::Socket, 0o755, (0, 0));
    let old = (1_577_934_245, 123_456_789);
    set_mtime(&dir.join("fifo"), old);
    if !is_root() {
        eprintln!("note: not root, so the tree holds no devices and their checks are skipped");
        return false;
    }
    mknod(&dir.join("null"), FileType::CharacterDevice, 0o600, (1, 3));
    rustix::fs::chownat(
        rustix::fs::CWD,
        dir.join("null"),
        Some(rustix::fs::Uid::from_raw(54_321)),
        Some(rustix::fs::Gid::from_raw(54_322)),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap();
    set_mtime(&dir.join("null"), old);
    mknod(&dir.join("sub/loop"), FileType::BlockDevice, 0o660, (7, 99));
    true
}

/// Sets the mtime (and atime) of `path` itself, a symlink or special file too.
fn set_mtime(path: &Path, (sec, nsec): (i64, i64)) {
    let t = rustix::fs::Timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    let times = rustix::fs::Timestamps {
        last_access: t,
        last_modification: t,
    };
    let nofollow = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
    rustix::fs::utimensat(rustix::fs::CWD, path, &times, nofollow)
        .unwrap_or_else(|e| panic!("utimensat {}: {e}", path.display()));
}

/// `sprat verify` of `copy` against `src`, owners compared as root: exit 0.
#[track_caller]
fn assert_verified(src: &Path, copy: &Path) {
    let mut args = vec!["verify".to_string()];
    if is_root() {
        args.push("--owners".into());
    }
    args.push(src.display().to_string());
    args.push(copy.display().to_string());
    let out = run_sprat(bin(), &args, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let specials = if is_root() { 4 } else { 2 };
    assert!(
        stdout.contains(&format!("{specials} special files")),
        "{stdout}"
    );
}

/// What arrived without the devices: the file, the FIFO and the socket, and no device.
#[track_caller]
fn assert_without_devices(copy: &Path, out: &std::process::Output) {
    assert_eq!(fs::read(copy.join("sub/f")).unwrap(), b"data");
    assert_eq!(kind_of(&copy.join("fifo")), ('p', 0, 0));
    assert_eq!(kind_of(&copy.join("sub/sock")).0, 's');
    assert!(!copy.join("null").exists() && !copy.join("sub/loop").exists());
    let report = parse_json_report(&out.stdout);
    assert_eq!(report.u64("specials"), 2, "{}", describe(out));
    assert_eq!(report.get("not_kept")["devices"], 2, "{}", describe(out));
}

#[test]
fn every_kind_of_special_file_is_made_again_locally_pushed_pulled_and_between_servers() {
    let t = tmp();
    let (root_a, root_b) = (t.path().join("a"), t.path().join("b"));
    let src = root_a.join("src");
    let devices = make_tree(&src);
    fs::create_dir_all(&root_b).unwrap();
    let keeping = ServerOptions {
        extra_args: vec!["--keep-devices".into()],
        ..ServerOptions::default()
    };
    let (a, b) = (server(&root_a), server_with(&root_b, &keeping));

    let local = t.path().join("local");
    let out = cp_local(&["--json"], &src, &local);
    assert_ok(&out, None);
    assert_verified(&src, &local);
    let report = parse_json_report(&out.stdout);
    assert_eq!(report.u64("specials"), if devices { 4 } else { 2 });

    for (extra, url, root) in [
        (&[][..], b.url("pushed"), &root_b),
        (&["--keep-devices"][..], b.url("pushed-again"), &root_b),
    ] {
        let mut args = vec!["--json"];
        args.extend_from_slice(extra);
        let out = cp(&b, &args, &src, &url);
        assert_ok(&out, Some(&b));
        let name = url.rsplit('/').next().unwrap();
        assert_verified(&src, &root.join(name));
    }
    let pulled = t.path().join("pulled");
    let out = cp(&b, &["--keep-devices"], b.url("pushed"), &pulled);
    assert_ok(&out, Some(&b));
    assert_verified(&src, &pulled);
    let out = cp(&a, &[], a.url("src"), b.url("third"));
    assert_ok(&out, Some(&b));
    assert_verified(&src, &root_b.join("third"));

    if !devices {
        return;
    }
    // Where the writing side does not create devices from the network: counted, exit 0.
    let out = cp(&a, &["--json"], &src, a.url("pushed"));
    assert_ok(&out, Some(&a));
    assert_without_devices(&root_a.join("pushed"), &out);
    let out = cp(&a, &[], &src, a.url("pushed"));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("not kept: 2 device files (the server creates them only when it runs as root and was started with `sprat serve --keep-devices`)"),
        "{}",
        describe(&out)
    );
    let plain = t.path().join("pulled-plain");
    let out = cp(&b, &["--json"], b.url("pushed"), &plain);
    assert_ok(&out, Some(&b));
    assert_without_devices(&plain, &out);
    let out = cp(&b, &["--json"], b.url("pushed"), a.url("third"));
    assert_ok(&out, Some(&a));
    assert_without_devices(&root_a.join("third"), &out);
}

#[test]
fn a_rerun_puts_right_special_files_of_another_kind_and_delete_removes_extra_ones() {
    let t = tmp();
    let root = t.path().join("root");
    let src = t.path().join("src");
    let devices = make_tree(&src);
    let keeping = ServerOptions {
        extra_args: vec!["--keep-devices".into()],
        ..ServerOptions::default()
    };
    let srv = server_with(&root, &keeping);
    let local = t.path().join("local");
    for (how, copy) in [("local", local.clone()), ("push", root.join("pushed"))] {
        let run = |extra: &[&str]| match how {
            "local" => cp_local(extra, &src, &copy),
            _ => cp(&srv, extra, &src, srv.url("pushed")),
        };
        assert_ok(&run(&[]), Some(&srv));
        // The copy's FIFO becomes a socket, its socket a regular file, a device gets another
        // number, and a FIFO the source lacks appears.
        fs::remove_file(copy.join("fifo")).unwrap();
        mknod(&copy.join("fifo"), FileType::Socket, 0o640, (0, 0));
        fs::remove_file(copy.join("sub/sock")).unwrap();
        fs::write(copy.join("sub/sock"), b"not a socket").unwrap();
        if devices {
            fs::remove_file(copy.join("null")).unwrap();
            mknod(&copy.join("null"), FileType::CharacterDevice, 0o600, (1, 5));
        }
        mknod(&copy.join("extra"), FileType::Fifo, 0o600, (0, 0));

        let dry = run(&["--dry-run", "--delete"]);
        assert_eq!(dry.status.code(), Some(0), "{how}: {}", describe(&dry));
        let listed = String::from_utf8_lossy(&dry.stdout);
        for line in ["special fifo", "special sub/sock", "delete extra"] {
            assert!(listed.lines().any(|l| l == line), "{how}: {line}\n{listed}");
        }
        assert_eq!(
            listed.lines().any(|l| l == "device null"),
            devices,
            "{how}: {listed}"
        );
        assert_eq!(
            kind_of(&copy.join("fifo")).0,
            's',
            "{how}: the dry run changed it"
        );

        assert_ok(&run(&["--delete"]), Some(&srv));
        assert!(!copy.join("extra").exists(), "{how}");
        assert_verified(&src, &copy);
        // Up to date: the dry run would make nothing.
        let dry = run(&["--dry-run", "--delete"]);
        let listed = String::from_utf8_lossy(&dry.stdout);
        assert!(
            !listed.contains("special ") && !listed.contains("device "),
            "{how}: {listed}"
        );
    }
}

#[test]
fn ls_and_stat_show_each_type_and_device_number() {
    let t = tmp();
    let root = t.path().join("root");
    let devices = make_tree(&root.join("tree"));
    let srv = server(&root);
    let mut ls = vec!["ls".to_string(), "-l".into()];
    ls.extend(
        srv.client_args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    ls.push(srv.url("tree"));
    let out = run_sprat(bin(), &ls, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("{name} not listed:\n{text}"))
            .to_string()
    };
    assert!(line("fifo").starts_with("prw-r----- "), "{text}");
    if devices {
        let null = line("null");
        assert!(null.starts_with("crw------- "), "{null}");
        assert!(null.contains(" 1, 3 2020-01-02 03:04:05 null"), "{null}");
    }
    let mut stat = vec!["stat".to_string(), "--json".into()];
    stat.extend(
        srv.client_args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    stat.push(srv.url("tree/sub/sock"));
    let out = run_sprat(bin(), &stat, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["type"], "socket", "{v}");
    // `du` counts them.
    let mut du = vec!["du".to_string(), "--json".into()];
    du.extend(
        srv.client_args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    du.push(srv.url("tree"));
    let out = run_sprat(bin(), &du, &[]);
    let u: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(u["specials"], if devices { 4 } else { 2 }, "{u}");
    assert_eq!(v["mode"], "0755", "{v}");
    if devices {
        let mut stat = stat.clone();
        *stat.last_mut().unwrap() = srv.url("tree/sub/loop");
        let out = run_sprat(bin(), &stat, &[]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["type"], "block device", "{v}");
        assert_eq!(v["device"], "7,99", "{v}");
    }
}

#[test]
fn verify_tells_special_files_of_another_type_or_number_apart() {
    let t = tmp();
    let src = t.path().join("src");
    let devices = make_tree(&src);
    let copy = t.path().join("copy");
    assert_ok(&cp_local(&[], &src, &copy), None);
    fs::remove_file(copy.join("fifo")).unwrap();
    mknod(&copy.join("fifo"), FileType::Socket, 0o640, (0, 0));
    if devices {
        fs::remove_file(copy.join("sub/loop")).unwrap();
        mknod(
            &copy.join("sub/loop"),
            FileType::BlockDevice,
            0o660,
            (7, 98),
        );
    }
    let args = [
        "verify".to_string(),
        src.display().to_string(),
        copy.display().to_string(),
    ];
    let out = run_sprat(bin(), &args, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fifo: file type differs"), "{stderr}");
    if devices {
        assert!(stderr.contains("sub/loop: device 7,99 != 7,98"), "{stderr}");
    }
}

#[test]
fn a_special_file_alone_is_copied_as_a_file_would_be() {
    let t = tmp();
    let root = t.path().join("root");
    let devices = make_tree(&root.join("tree"));
    let srv = server(&root);
    let fifo = root.join("tree/fifo");
    let local = t.path().join("local-fifo");
    for _ in 0..2 {
        assert_ok(&cp_local(&[], &fifo, &local), None);
    }
    assert_eq!(kind_of(&local), ('p', 0, 0));
    let pushed = root.join("pushed-sock");
    assert_ok(
        &cp(
            &srv,
            &[],
            root.join("tree/sub/sock"),
            srv.url("pushed-sock"),
        ),
        Some(&srv),
    );
    assert_eq!(kind_of(&pushed).0, 's');
    // Into an existing directory: inside it, under its own name.
    let into = t.path().join("into");
    fs::create_dir(&into).unwrap();
    assert_ok(&cp(&srv, &[], srv.url("tree/fifo"), &into), Some(&srv));
    assert_eq!(kind_of(&into.join("fifo")), ('p', 0, 0));
    assert_eq!(
        fs::symlink_metadata(into.join("fifo")).unwrap().mtime(),
        1_577_934_245
    );
    if devices {
        let null = t.path().join("null");
        assert_ok(
            &cp(&srv, &["--keep-devices"], srv.url("tree/null"), &null),
            Some(&srv),
        );
        assert_eq!(kind_of(&null), ('c', 1, 3));
    }
}

/// A FIFO or a symlink named as the partial copy (or journal) of a large file beside it is
/// failed by name, never sent: made under that name at the destination, it took the partial
/// copy's place, and the large file arrived as a FIFO with exit 0 (review 2026-11-29, F6).
#[test]
fn nothing_named_as_a_partial_copy_takes_a_large_files_place() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    fs::create_dir_all(&src).unwrap();
    let big = sprat_testkit::random_bytes(3 << 20, 5);
    fs::write(src.join("big"), &big).unwrap();
    mknod(&src.join(".big.sprat-part"), FileType::Fifo, 0o644, (0, 0));
    std::os::unix::fs::symlink("elsewhere", src.join(".big.sprat-part.log")).unwrap();
    let srv = server(&root);
    let chunked = common::CHUNKED;
    for (how, dst) in [
        ("push", root.join("pushed")),
        ("pull", t.path().join("pulled")),
    ] {
        let out = match how {
            "push" => cp(&srv, &chunked, &src, srv.url("pushed")),
            _ => cp(&srv, &chunked, srv.url("src"), &dst),
        };
        let why = format!("{how}: {}", describe(&out));
        assert_eq!(out.status.code(), Some(1), "{why}");
        assert_eq!(kind_of(&dst.join("big")).0, '-', "{why}");
        assert_eq!(fs::read(dst.join("big")).unwrap(), big, "{why}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("failed: .big.sprat-part: not copied"),
            "{why}"
        );
    }
}

/// `--ignore-existing` leaves whatever the destination has at a path, whatever the source
/// has there: a file is not replaced by a FIFO or a symlink, nor a FIFO or symlink by a file
/// (review 2026-11-29, F1). Local copy, push and pull.
#[test]
fn ignore_existing_leaves_every_kind_of_entry_alone() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    fs::create_dir_all(&src).unwrap();
    mknod(&src.join("was-file"), FileType::Fifo, 0o644, (0, 0));
    fs::write(src.join("was-fifo"), b"source file").unwrap();
    mknod(&src.join("was-link"), FileType::Socket, 0o644, (0, 0));
    std::os::unix::fs::symlink("source-target", src.join("was-sock")).unwrap();
    let before = |dst: &Path| {
        fs::create_dir_all(dst).unwrap();
        fs::write(dst.join("was-file"), b"kept data").unwrap();
        mknod(&dst.join("was-fifo"), FileType::Fifo, 0o600, (0, 0));
        std::os::unix::fs::symlink("kept-target", dst.join("was-link")).unwrap();
        mknod(&dst.join("was-sock"), FileType::Socket, 0o600, (0, 0));
    };
    let srv = server(&root);
    for (how, dst) in [
        ("local", t.path().join("local")),
        ("push", root.join("pushed")),
        ("pull", t.path().join("pulled")),
    ] {
        before(&dst);
        let out = match how {
            "local" => cp_local(&["--ignore-existing"], &src, &dst),
            "push" => cp(&srv, &["--ignore-existing"], &src, srv.url("pushed")),
            _ => cp(&srv, &["--ignore-existing"], srv.url("src"), &dst),
        };
        assert_ok(&out, Some(&srv));
        let why = format!("{how}: {}", describe(&out));
        assert_eq!(
            fs::read(dst.join("was-file")).unwrap(),
            b"kept data",
            "{why}"
        );
        assert_eq!(kind_of(&dst.join("was-fifo")).0, 'p', "{why}");
        assert_eq!(
            fs::read_link(dst.join("was-link")).unwrap(),
            Path::new("kept-target"),
            "{why}"
        );
        assert_eq!(kind_of(&dst.join("was-sock")).0, 's', "{why}");
    }
}

/// A re-run keeps a special file of the same type and number where it is (the same inode: a
/// socket a service listens on stays that socket), setting only what differs of its
/// attributes; it replaced every one on every run before (review 2026-11-29, F2).
#[test]
fn a_rerun_keeps_the_same_special_files_and_fixes_their_attributes() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    make_tree(&src);
    let keeping = ServerOptions {
        extra_args: vec!["--keep-devices".into()],
        ..ServerOptions::default()
    };
    let srv = server_with(&root, &keeping);
    let local = t.path().join("local");
    for (how, dst) in [("local", local.clone()), ("push", root.join("pushed"))] {
        let run = || match how {
            "local" => cp_local(&[], &src, &dst),
            _ => cp(&srv, &[], &src, srv.url("pushed")),
        };
        assert_ok(&run(), Some(&srv));
        let ino = |rel: &str| fs::symlink_metadata(dst.join(rel)).unwrap().ino();
        let (fifo, sock) = (ino("fifo"), ino("sub/sock"));
        rustix::fs::chmod(dst.join("fifo"), Mode::from_raw_mode(0o600)).unwrap();
        assert_ok(&run(), Some(&srv));
        assert_eq!((ino("fifo"), ino("sub/sock")), (fifo, sock), "{how}");
        assert_verified(&src, &dst);
    }
}

/// `-A`: a device's or a FIFO's ACL travels with it (read and set without opening it), so
/// that a device whose ACL shuts its group out does not arrive open to its group through
/// its mode's group bits, which are the ACL's mask (review 2026-11-29, F5). Local copy, push
/// and pull, checked by `verify -A`.
#[test]
fn acls_of_special_files_travel_with_them() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    fs::create_dir_all(&src).unwrap();
    mknod(&src.join("fifo"), FileType::Fifo, 0o640, (0, 0));
    let devices = is_root();
    if devices {
        mknod(&src.join("disk"), FileType::BlockDevice, 0o660, (7, 98));
    }
    let setfacl = |spec: &str, name: &str| {
        std::process::Command::new("setfacl")
            .args(["-m", spec])
            .arg(src.join(name))
            .status()
            .is_ok_and(|s| s.success())
    };
    if !setfacl("u:nobody:r", "fifo") {
        eprintln!("skipped: setfacl cannot set an ACL here");
        return;
    }
    if devices {
        assert!(setfacl("g::---,m::rw-,u:nobody:rw-", "disk"));
    }
    let keeping = ServerOptions {
        extra_args: vec!["--keep-devices".into()],
        ..ServerOptions::default()
    };
    let srv = server_with(&root, &keeping);
    for (how, dst) in [
        ("local", t.path().join("local")),
        ("push", root.join("pushed")),
        ("pull", t.path().join("pulled")),
    ] {
        let out = match how {
            "local" => cp_local(&["-A"], &src, &dst),
            "push" => cp(&srv, &["-A"], &src, srv.url("pushed")),
            _ => cp(&srv, &["-A", "--keep-devices"], srv.url("src"), &dst),
        };
        assert_ok(&out, Some(&srv));
        let args = [
            "verify",
            "-A",
            &src.display().to_string(),
            &dst.display().to_string(),
        ];
        let verified = run_sprat(bin(), args, &[]);
        assert_eq!(
            verified.status.code(),
            Some(0),
            "{how}: {}",
            describe(&verified)
        );
    }
}

/// `--ignore-existing` where the source has a directory and the destination a file, FIFO or
/// symlink: what is there stays, and the directory is failed by name with everything below
/// it (exit 1); before, the file was deleted and the directory put in its place, exit 0
/// (review 2026-11-29 of unreadable directories, F10). A directory named as a large file's
/// journal beside it is failed the same way: it would stand where that file's journal is
/// kept and block the file forever (F14). Local copy, push and pull.
#[test]
fn ignore_existing_keeps_a_file_where_the_source_has_a_directory() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    fs::create_dir_all(src.join("h")).unwrap();
    fs::write(src.join("h/x"), b"below").unwrap();
    fs::write(src.join("a"), b"a").unwrap();
    let srv = server(&root);
    for (how, dst) in [
        ("local", t.path().join("local")),
        ("push", root.join("pushed")),
        ("pull", t.path().join("pulled")),
    ] {
        fs::create_dir_all(&dst).unwrap();
        fs::write(dst.join("h"), b"precious").unwrap();
        let out = match how {
            "local" => cp_local(&["--ignore-existing"], &src, &dst),
            "push" => cp(&srv, &["--ignore-existing"], &src, srv.url("pushed")),
            _ => cp(&srv, &["--ignore-existing"], srv.url("src"), &dst),
        };
        let why = format!("{how}: {}", describe(&out));
        assert_eq!(out.status.code(), Some(1), "{why}");
        assert_eq!(fs::read(dst.join("h")).unwrap(), b"precious", "{why}");
        assert_eq!(fs::read(dst.join("a")).unwrap(), b"a", "{why}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("failed: h: not copied"),
            "{why}"
        );
    }

    let tree = root.join("journal");
    fs::create_dir_all(tree.join(".big.sprat-part.log")).unwrap();
    fs::write(tree.join(".big.sprat-part.log/x"), b"inner").unwrap();
    let big = sprat_testkit::random_bytes(3 << 20, 9);
    fs::write(tree.join("big"), &big).unwrap();
    let chunked = common::CHUNKED;
    for _ in 0..2 {
        let out = cp(&srv, &chunked, &tree, srv.url("journal-copy"));
        assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
        assert_eq!(fs::read(root.join("journal-copy/big")).unwrap(), big);
    }
}

/// `--ignore-existing` with a single FIFO as the source keeps the file the
/// destination has at its name, and a single file keeps a FIFO there (review 2026-11-29 of
/// the session's changes, F4). Local copy and push.
#[test]
fn ignore_existing_with_a_single_special_file_or_link_keeps_what_is_there() {
    let t = tmp();
    let root = t.path().join("root");
    fs::create_dir_all(&root).unwrap();
    let fifo = t.path().join("fifo");
    mknod(&fifo, FileType::Fifo, 0o644, (0, 0));
    let file = t.path().join("file");
    fs::write(&file, b"source").unwrap();
    let srv = server(&root);
    for (src, kept_as) in [(&fifo, "a-file"), (&file, "a-fifo")] {
        for how in ["local", "push"] {
            let dst = match how {
                "local" => t.path().join(format!("local-{kept_as}")),
                _ => root.join(format!("pushed-{kept_as}")),
            };
            let _ = fs::remove_file(&dst);
            match kept_as {
                "a-file" => fs::write(&dst, b"kept").unwrap(),
                _ => mknod(&dst, FileType::Fifo, 0o600, (0, 0)),
            }
            let out = match how {
                "local" => cp_local(&["--ignore-existing"], src, &dst),
                _ => {
                    let name = dst.file_name().unwrap().to_str().unwrap();
                    cp(&srv, &["--ignore-existing"], src, srv.url(name))
                }
            };
            let why = format!("{how} {}: {}", src.display(), describe(&out));
            assert_eq!(out.status.code(), Some(0), "{why}");
            match kept_as {
                "a-file" => assert_eq!(fs::read(&dst).unwrap(), b"kept", "{why}"),
                _ => assert_eq!(kind_of(&dst).0, 'p', "{why}"),
            }
        }
    }
}

/// A directory at the name under which the destination keeps a large file's partial copy
/// (`.NAME.sprat-part`): an empty one is removed and the file arrives; one holding files
/// fails the file, naming the directory (before: `No such device or address`, every run;
/// review 2026-11-29 of the session's changes, F7).
#[test]
fn a_directory_at_a_partial_copys_name_is_named_or_removed() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    fs::create_dir_all(&src).unwrap();
    let big = sprat_testkit::random_bytes(3 << 20, 3);
    fs::write(src.join("big"), &big).unwrap();
    let srv = server(&root);
    let chunked = common::CHUNKED;
    fs::create_dir_all(root.join("empty/.big.sprat-part")).unwrap();
    assert_ok(&cp(&srv, &chunked, &src, srv.url("empty")), Some(&srv));
    assert_eq!(fs::read(root.join("empty/big")).unwrap(), big);
    fs::create_dir_all(root.join("full/.big.sprat-part")).unwrap();
    fs::write(root.join("full/.big.sprat-part/mine"), b"mine").unwrap();
    let out = cp(&srv, &chunked, &src, srv.url("full"));
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("'.big.sprat-part' at the destination is not a regular file"),
        "{}",
        describe(&out)
    );
    assert_eq!(
        fs::read(root.join("full/.big.sprat-part/mine")).unwrap(),
        b"mine"
    );
}

/// `-H --ignore-existing`: a name of a group of hard links the destination lacks arrives with
/// the source's content even where another name of the group is there with other content (it
/// became a link to that, #1); and with `-X` a kept file keeps its own mtime and attributes
/// (it was given the source's mtime over its other content, which later runs then took for up
/// to date, #7). Review 2026-11-29 of `--ignore-existing`. Local copy and push.
#[test]
fn ignore_existing_keeps_files_whole_with_hard_links_and_xattrs() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"source content").unwrap();
    fs::hard_link(src.join("a"), src.join("b")).unwrap();
    fs::hard_link(src.join("a"), src.join("c")).unwrap();
    let srv = server(&root);
    for (how, dst) in [
        ("local", t.path().join("local")),
        ("push", root.join("pushed")),
    ] {
        fs::create_dir_all(&dst).unwrap();
        fs::write(dst.join("a"), b"destination's own").unwrap();
        set_mtime(&dst.join("a"), (1_000_000_000, 0));
        let out = match how {
            "local" => cp_local(&["-HX", "--ignore-existing"], &src, &dst),
            _ => cp(&srv, &["-HX", "--ignore-existing"], &src, srv.url("pushed")),
        };
        assert_ok(&out, Some(&srv));
        let why = format!("{how}: {}", describe(&out));
        assert_eq!(
            fs::read(dst.join("a")).unwrap(),
            b"destination's own",
            "{why}"
        );
        assert_eq!(fs::read(dst.join("b")).unwrap(), b"source content", "{why}");
        assert_eq!(fs::read(dst.join("c")).unwrap(), b"source content", "{why}");
        let a = fs::metadata(dst.join("a")).unwrap();
        assert_eq!(a.mtime(), 1_000_000_000, "{why}");
        assert_eq!(a.nlink(), 1, "{why}");
        // The names sent are still links of each other, whichever the scan met first.
        let ino = |n: &str| fs::metadata(dst.join(n)).unwrap().ino();
        assert_eq!(ino("b"), ino("c"), "{why}");
    }
}

/// A FIFO the destination has already, which a snapshot of the destination (`cp -al`) gave a
/// second hard link, is left as it is by a re-run that has nothing to set: the same inode.
/// Before, it was made again on every run (review 2026-11-29 of the fixes, F5). Local copy
/// and push.
#[test]
fn a_special_file_with_another_hard_link_is_left_when_nothing_changed() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    fs::create_dir_all(&src).unwrap();
    mknod(&src.join("fifo"), FileType::Fifo, 0o640, (0, 0));
    let srv = server(&root);
    for (how, dst) in [
        ("local", t.path().join("local")),
        ("push", root.join("pushed")),
    ] {
        let copy = || match how {
            "local" => cp_local(&[], &src, &dst),
            _ => cp(&srv, &[], &src, srv.url("pushed")),
        };
        assert_ok(&copy(), Some(&srv));
        fs::hard_link(dst.join("fifo"), t.path().join(format!("snapshot-{how}"))).unwrap();
        let before = fs::symlink_metadata(dst.join("fifo")).unwrap().ino();
        let out = copy();
        assert_ok(&out, Some(&srv));
        let after = fs::symlink_metadata(dst.join("fifo")).unwrap();
        assert_eq!(after.ino(), before, "{how}: {}", describe(&out));
        assert!(after.file_type().is_fifo(), "{how}");
    }
}

/// `-H` keeps hard links between FIFOs, sockets and devices as between regular files (as
/// rsync -aH does), locally, pushed and pulled, and a re-run leaves them so; `verify -H` tells
/// a copy that lost such a link (review 2026-11-29 of special files, F3: each name was made a
/// node of its own, and `verify -H` called the copy identical).
#[test]
fn hard_links_between_special_files_are_kept_with_dash_h() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    fs::create_dir_all(src.join("a")).unwrap();
    fs::create_dir_all(src.join("b")).unwrap();
    mknod(&src.join("a/fifo"), FileType::Fifo, 0o640, (0, 0));
    fs::hard_link(src.join("a/fifo"), src.join("b/fifo2")).unwrap();
    mknod(&src.join("a/sock"), FileType::Socket, 0o755, (0, 0));
    fs::hard_link(src.join("a/sock"), src.join("b/sock2")).unwrap();
    fs::write(src.join("a/file"), b"data").unwrap();
    fs::hard_link(src.join("a/file"), src.join("b/file2")).unwrap();
    let srv = server(&root);
    let ino = |p: &Path| fs::symlink_metadata(p).unwrap().ino();
    let verify_h = |copy: &Path| {
        let args = [
            "verify",
            "-H",
            src.to_str().unwrap(),
            copy.to_str().unwrap(),
        ];
        run_sprat(bin(), args, &[])
    };
    let local = t.path().join("local");
    let pulled = t.path().join("pulled");
    let copies = [
        ("local", local.clone()),
        ("push", root.join("pushed")),
        ("pull", pulled.clone()),
    ];
    for (how, copy) in &copies {
        for run in 0..2 {
            let out = match *how {
                "local" => cp_local(&["-H"], &src, copy),
                "push" => cp(&srv, &["-H"], &src, srv.url("pushed")),
                _ => cp(&srv, &["-H"], srv.url("src"), copy),
            };
            assert_ok(&out, Some(&srv));
            for (first, second) in [
                ("a/fifo", "b/fifo2"),
                ("a/sock", "b/sock2"),
                ("a/file", "b/file2"),
            ] {
                let why = format!("{how} run {run}: {second}");
                assert_eq!(ino(&copy.join(first)), ino(&copy.join(second)), "{why}");
            }
            assert_eq!(kind_of(&copy.join("b/fifo2")).0, 'p');
            let out = verify_h(copy);
            assert_eq!(out.status.code(), Some(0), "{how}: {}", describe(&out));
        }
    }
    // A copy whose FIFOs are no longer one: verify -H says so.
    fs::remove_file(local.join("b/fifo2")).unwrap();
    mknod(&local.join("b/fifo2"), FileType::Fifo, 0o640, (0, 0));
    let mtime = fs::symlink_metadata(src.join("b/fifo2")).unwrap();
    set_mtime(&local.join("b/fifo2"), (mtime.mtime(), mtime.mtime_nsec()));
    let out = verify_h(&local);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a/fifo: a hard link of b/fifo2"),
        "{}",
        describe(&out)
    );
}
