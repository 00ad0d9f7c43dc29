//! Owners, groups and sparse files, end to end: a tree whose entries belong to system users
//! and groups (`daemon`, `bin`, `adm`) and to ids without a name, pushed to and pulled from a
//! real `sprat serve` on 127.0.0.1 and copied locally, keeps every owner and group (when the
//! writer runs as root, as these tests do); `--numeric-ids`, `--no-owners` and
//! `sprat serve --no-owners` do what they say; a writer that is not root leaves what it
//! writes its own, without an error. A sparse file keeps its holes in all three directions.
//! Tests about owners are skipped (with a note) when not run as root.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{lchown, symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::{assert_ok, bin, cp, cp_local, server, server_with, tmp};
use sprat_testkit::{describe, make_file, random_bytes, ServerOptions};

/// Forces every file above 64 KiB to travel as 64 KiB chunks.
const CHUNKED: &[&str] = &["--small-file-threshold", "64KiB", "--chunk-size", "64KiB"];

/// An owner and a group without a name in this machine's user database.
const NAMELESS_UID: u32 = 54_321;
const NAMELESS_GID: u32 = 54_322;

fn is_root() -> bool {
    fs::metadata("/proc/self").unwrap().uid() == 0
}

/// The id of `name` in `/etc/passwd` (users) or `/etc/group`.
fn id_of(db: &str, name: &str) -> u32 {
    let text = fs::read_to_string(db).unwrap();
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&name)).then(|| f[2].parse().unwrap())
        })
        .unwrap_or_else(|| panic!("{name} is not in {db}"))
}

fn user(name: &str) -> u32 {
    id_of("/etc/passwd", name)
}

fn group(name: &str) -> u32 {
    id_of("/etc/group", name)
}

/// A tree with entries of several owners: files (one large, one setgid), a directory, a
/// symlink, and ids without a name.
fn make_owned_tree(dir: &Path) {
    fs::create_dir_all(dir.join("d")).unwrap();
    make_file(&dir.join("a"), b"daemon's", 0o644);
    make_file(&dir.join("d/b"), b"nameless", 0o640);
    make_file(&dir.join("big"), &random_bytes(300 << 10, 7), 0o600);
    make_file(&dir.join("setgid"), b"#!/bin/sh\n", 0o2755);
    symlink("a", dir.join("l")).unwrap();
    let chown =
        |rel: &str, uid: u32, gid: u32| lchown(dir.join(rel), Some(uid), Some(gid)).unwrap();
    chown("a", user("daemon"), group("adm"));
    chown("d/b", NAMELESS_UID, NAMELESS_GID);
    chown("big", user("bin"), group("daemon"));
    chown("setgid", user("daemon"), group("adm"));
    // chown clears the setgid bit: set it again, as the source has it.
    fs::set_permissions(dir.join("setgid"), fs::Permissions::from_mode(0o2755)).unwrap();
    chown("l", user("bin"), group("bin"));
    chown("d", user("bin"), group("adm"));
}

/// Every entry below `dir` (itself excluded) with its (uid, gid, mode), links not followed.
fn owners(dir: &Path) -> BTreeMap<PathBuf, (u32, u32, u32)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                todo.push(p.clone());
            }
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            out.insert(rel, (m.uid(), m.gid(), m.mode() & 0o7777));
        }
    }
    out
}

/// Whether to go on: false (with a note) when not root.
fn root_or_skip() -> bool {
    if !is_root() {
        eprintln!("skipped: owners are set only by a writer running as root");
    }
    is_root()
}

#[test]
fn push_pull_and_local_copy_keep_owners_and_groups() {
    if !root_or_skip() {
        return;
    }
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    make_owned_tree(&src);
    let want = owners(&src);
    assert_eq!(want.len(), 6);
    let srv = server(&root);
    for extra in [&[][..], CHUNKED] {
        let tag = if extra.is_empty() { "whole" } else { "chunked" };
        // Push: the server (root) applies them. Setuid/setgid bits of pushed files are
        // cleared by default; everything else must match.
        let pushed = format!("pushed-{tag}");
        assert_ok(&cp(&srv, extra, &src, srv.url(&pushed)), Some(&srv));
        let mut want_pushed = want.clone();
        want_pushed.get_mut(Path::new("setgid")).unwrap().2 = 0o755;
        assert_eq!(owners(&root.join(&pushed)), want_pushed, "push ({tag})");

        // Pull, keeping setid bits: the owner is set before the mode, so the bit survives.
        let pulled = t.path().join(format!("pulled-{tag}"));
        let mut args = extra.to_vec();
        args.push("--keep-setuid");
        assert_ok(&cp(&srv, &args, srv.url("src"), &pulled), Some(&srv));
        assert_eq!(owners(&pulled), want, "pull ({tag})");

        // A local copy keeps setid bits like cp -a.
        let copied = t.path().join(format!("copied-{tag}"));
        assert_ok(&cp_local(extra, &src, &copied), None);
        assert_eq!(owners(&copied), want, "local copy ({tag})");
    }
}

#[test]
fn numeric_ids_and_no_owners() {
    if !root_or_skip() {
        return;
    }
    let t = tmp();
    let root = t.path().join("root");
    let src = t.path().join("src");
    make_owned_tree(&src);
    let want = owners(&src);
    let srv = server(&root);

    assert_ok(
        &cp(&srv, &["--numeric-ids"], &src, srv.url("numeric")),
        Some(&srv),
    );
    let got = owners(&root.join("numeric"));
    assert_eq!(
        got[Path::new("d/b")].0,
        NAMELESS_UID,
        "a uid without a name travels as its number"
    );
    let ids = |m: &BTreeMap<PathBuf, (u32, u32, u32)>| -> Vec<(u32, u32)> {
        m.values().map(|v| (v.0, v.1)).collect()
    };
    assert_eq!(ids(&got), ids(&want));

    // Without --numeric-ids, a uid that has no name falls back to its number too.
    assert_ok(&cp_local(&[], &src, t.path().join("local")), None);
    assert_eq!(
        owners(&t.path().join("local"))[Path::new("d/b")],
        (NAMELESS_UID, NAMELESS_GID, 0o640)
    );

    // --no-owners: what is written belongs to the writer (root).
    assert_ok(
        &cp(&srv, &["--no-owners"], &src, srv.url("mine")),
        Some(&srv),
    );
    assert!(owners(&root.join("mine"))
        .values()
        .all(|v| (v.0, v.1) == (0, 0)));
    assert_ok(
        &cp_local(&["--no-owners"], &src, t.path().join("mine")),
        None,
    );
    assert!(owners(&t.path().join("mine"))
        .values()
        .all(|v| (v.0, v.1) == (0, 0)));

    // A server started with --no-owners ignores what a client asks.
    let root2 = t.path().join("root2");
    let opts = ServerOptions {
        extra_args: vec!["--no-owners".into()],
        ..ServerOptions::default()
    };
    let srv2 = server_with(&root2, &opts);
    assert_ok(&cp(&srv2, &[], &src, srv2.url("dst")), Some(&srv2));
    assert!(owners(&root2.join("dst"))
        .values()
        .all(|v| (v.0, v.1) == (0, 0)));
}

#[test]
fn a_writer_that_is_not_root_keeps_what_it_writes_silently() {
    if !root_or_skip() || !Path::new("/usr/bin/setpriv").exists() {
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    make_owned_tree(&src);
    // Readable by nobody: the nameless file is 0640, so make it world readable here.
    fs::set_permissions(src.join("d/b"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(src.join("big"), fs::Permissions::from_mode(0o644)).unwrap();
    let out_dir = t.path().join("out");
    fs::create_dir(&out_dir).unwrap();
    let nobody = user("nobody");
    lchown(&out_dir, Some(nobody), Some(nobody)).unwrap();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let dst = out_dir.join("dst");
    let args: Vec<std::ffi::OsString> = vec![
        "--reuid".into(),
        nobody.to_string().into(),
        "--regid".into(),
        nobody.to_string().into(),
        "--clear-groups".into(),
        bin().into(),
        "cp".into(),
        src.clone().into(),
        dst.clone().into(),
    ];
    let out = std::process::Command::new("/usr/bin/setpriv")
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = owners(&dst);
    assert_eq!(got.len(), 6);
    assert!(
        got.values().all(|v| (v.0, v.1) == (nobody, nobody)),
        "{got:?}"
    );
}

/// A 64 MiB file with 2 MiB of data in two places, the rest holes.
fn make_sparse(path: &Path) {
    let f = fs::File::create(path).unwrap();
    f.set_len(64 << 20).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&random_bytes(1 << 20, 1), 10 << 20).unwrap();
    f.write_all_at(&random_bytes(1 << 20, 2), 40 << 20).unwrap();
}

fn blocks(path: &Path) -> u64 {
    fs::metadata(path).unwrap().blocks()
}

#[track_caller]
fn assert_sparse_copy(src: &Path, dst: &Path, how: &str) {
    assert_eq!(fs::read(src).unwrap(), fs::read(dst).unwrap(), "{how}");
    let (s, d) = (blocks(src), blocks(dst));
    assert!(
        d <= 2 * s,
        "{how}: the copy takes {d} blocks, its source {s} (at most twice as many allowed)"
    );
}

#[test]
fn a_sparse_file_stays_sparse_in_push_pull_and_local_copy() {
    let t = tmp();
    let root = t.path().join("root");
    fs::create_dir_all(root.join("src")).unwrap();
    let src = root.join("src/sparse");
    make_sparse(&src);
    // Also a small file (sent whole) with a hole in the middle.
    let small = root.join("src/small");
    {
        let f = fs::File::create(&small).unwrap();
        f.set_len(512 << 10).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"tail", (512 << 10) - 4).unwrap();
    }
    assert!(blocks(&src) < 5 << 11, "the source is not sparse here");
    let srv = server(&root);

    assert_ok(
        &cp(&srv, &[], root.join("src"), srv.url("pushed")),
        Some(&srv),
    );
    assert_sparse_copy(&src, &root.join("pushed/sparse"), "push");
    assert_sparse_copy(&small, &root.join("pushed/small"), "push (small)");

    let pulled = t.path().join("pulled");
    assert_ok(&cp(&srv, &[], srv.url("src"), &pulled), Some(&srv));
    assert_sparse_copy(&src, &pulled.join("sparse"), "pull");
    assert_sparse_copy(&small, &pulled.join("small"), "pull (small)");

    let copied = t.path().join("copied");
    assert_ok(&cp_local(&[], root.join("src"), &copied), None);
    assert_sparse_copy(&src, &copied.join("sparse"), "local copy");
    assert_sparse_copy(&small, &copied.join("small"), "local copy (small)");
}

#[test]
fn a_local_re_run_gives_back_an_owner_changed_at_the_destination() {
    if !root_or_skip() {
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    make_owned_tree(&src);
    let dst = t.path().join("dst");
    assert_ok(&cp_local(&[], &src, &dst), None);
    // Same content, size and mtime: only the owner differs, and the re-run puts it back.
    lchown(dst.join("a"), Some(0), Some(0)).unwrap();
    lchown(dst.join("big"), Some(user("daemon")), None).unwrap();
    assert_ok(&cp_local(&[], &src, &dst), None);
    assert_eq!(owners(&dst), owners(&src));
}

/// A file created in a set-group-ID directory takes that directory's group: the writer skips
/// `fchown` only where a new file already has the wanted owner and group, so files of the
/// writer's own ids (root's here) keep group 0 there, and files of the directory's group
/// keep theirs, in a push and in a local copy.
#[test]
fn files_written_into_a_set_group_id_directory_keep_their_own_group() {
    if !root_or_skip() {
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    for (name, gid) in [
        ("root-owned", 0),
        ("adm-owned", group("adm")),
        ("sub/root-too", 0),
    ] {
        fs::write(src.join(name), name.as_bytes()).unwrap();
        lchown(src.join(name), Some(0), Some(gid)).unwrap();
    }
    let check = |dst: &Path, how: &str| {
        for (name, gid) in [
            ("root-owned", 0),
            ("adm-owned", group("adm")),
            ("sub/root-too", 0),
        ] {
            let m = fs::symlink_metadata(dst.join(name)).unwrap();
            assert_eq!(
                (m.uid(), m.gid()),
                (0, gid),
                "{how}: owner and group of {name}"
            );
        }
    };
    // Destinations that exist already, set-group-ID and owned by group `adm`, with a
    // set-group-ID subdirectory as `mkdir` in such a directory makes it.
    let setgid_dir = |dir: &Path| {
        fs::create_dir_all(dir.join("sub")).unwrap();
        for d in [dir.to_path_buf(), dir.join("sub")] {
            lchown(&d, Some(0), Some(group("adm"))).unwrap();
            fs::set_permissions(&d, fs::Permissions::from_mode(0o2775)).unwrap();
        }
    };
    let local = t.path().join("local");
    setgid_dir(&local);
    assert_ok(&cp_local(&[], &src, &local), None);
    check(&local, "local copy");

    let root = t.path().join("exported");
    setgid_dir(&root.join("pushed"));
    let srv = server(&root);
    assert_ok(&cp(&srv, &[], &src, srv.url("pushed")), None);
    check(&root.join("pushed"), "push");
}

/// Files and bytes a copy's `--json` report says it sent.
fn sent(out: &std::process::Output) -> (u64, u64) {
    let r = sprat_testkit::parse_json_report(&out.stdout);
    (r.files(), r.bytes())
}

#[test]
fn push_and_pull_re_runs_give_back_owners_changed_at_the_destination_without_data() {
    if !root_or_skip() {
        return;
    }
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    make_owned_tree(&src);
    let srv = server(&root);
    let pulled = t.path().join("pulled");
    for (how, dst) in [("push", root.join("pushed")), ("pull", pulled.clone())] {
        let copy = |extra: &[&str]| {
            let mut args = vec!["--json", "--keep-setuid"];
            args.extend_from_slice(extra);
            let out = match how {
                "push" => cp(&srv, &args, &src, srv.url("pushed")),
                _ => cp(&srv, &args, srv.url("src"), &pulled),
            };
            assert_ok(&out, Some(&srv));
            out
        };
        copy(&[]);
        let want = owners(&dst);
        // Same content, size and mtime: only owners and groups differ.
        lchown(dst.join("a"), Some(0), Some(0)).unwrap();
        lchown(dst.join("big"), Some(user("daemon")), None).unwrap();
        lchown(dst.join("d/b"), None, Some(group("bin"))).unwrap();
        assert_ne!(owners(&dst), want);
        let out = copy(&[]);
        assert_eq!(sent(&out), (0, 0), "{how}: a re-run sent data");
        assert_eq!(owners(&dst), want, "{how}: owners given back");
        // Nothing differs: a further re-run changes nothing either.
        let out = copy(&[]);
        assert_eq!(sent(&out), (0, 0), "{how}");
        assert_eq!(owners(&dst), want, "{how}");
        // With --numeric-ids, ids are compared (and are the same here).
        lchown(dst.join("a"), Some(NAMELESS_UID), None).unwrap();
        copy(&["--numeric-ids"]);
        assert_eq!(owners(&dst), want, "{how} --numeric-ids");
        // --no-owners: an owner changed at the destination stays.
        lchown(dst.join("a"), Some(0), None).unwrap();
        copy(&["--no-owners"]);
        assert_eq!(owners(&dst)[Path::new("a")].0, 0, "{how} --no-owners");
    }
}

#[test]
fn ls_and_stat_show_owners_and_groups_by_name_or_number() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    fs::create_dir_all(&src).unwrap();
    make_file(&src.join("a"), b"x", 0o644);
    if is_root() {
        lchown(src.join("a"), Some(user("daemon")), Some(group("adm"))).unwrap();
        make_file(&src.join("n"), b"y", 0o644);
        lchown(src.join("n"), Some(NAMELESS_UID), Some(NAMELESS_GID)).unwrap();
    }
    let m = fs::metadata(src.join("a")).unwrap();
    let srv = server(&root);
    let run = |args: &[&str]| {
        let mut all: Vec<std::ffi::OsString> = vec![args[0].into()];
        all.extend(srv.client_args());
        all.extend(args[1..].iter().map(std::ffi::OsString::from));
        let out = sprat_testkit::run_sprat(bin(), all, &[]);
        assert_ok(&out, Some(&srv));
        String::from_utf8(out.stdout).unwrap()
    };
    let url = srv.url("src");
    let long = run(&["ls", "-l", &url]);
    let line = long.lines().find(|l| l.ends_with(" a")).unwrap();
    let numeric = run(&["ls", "-l", "--numeric-ids", &url]);
    let nline = numeric.lines().find(|l| l.ends_with(" a")).unwrap();
    assert!(
        nline.contains(&format!(" {} ", m.uid())) && nline.contains(&format!(" {} ", m.gid())),
        "{nline}"
    );
    let json: serde_json::Value = serde_json::from_str(&run(&["ls", "--json", &url])).unwrap();
    let a = json
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "a")
        .unwrap();
    assert_eq!(a["uid"], m.uid());
    assert_eq!(a["gid"], m.gid());
    let stat = run(&["stat", &srv.url("src/a")]);
    assert!(stat.contains(&format!("({})", m.uid())), "{stat}");
    if is_root() {
        assert!(
            line.contains(" daemon ") && line.contains(" adm "),
            "{line}"
        );
        assert_eq!(a["user"], "daemon");
        assert_eq!(a["group"], "adm");
        assert!(
            stat.contains("owner: daemon") && stat.contains("group: adm"),
            "{stat}"
        );
        // Ids without a name on the server show as numbers.
        let nameless = long.lines().find(|l| l.ends_with(" n")).unwrap();
        assert!(
            nameless.contains(&format!(" {NAMELESS_UID} ")),
            "{nameless}"
        );
    }
}

/// `--delete` when a directory of the source cannot be read (run as a user that may not read
/// it): that directory is reported as failed, and nothing at all is deleted, least of all its
/// copy at the destination, which would otherwise look deleted from the source (exit 1).
#[test]
fn a_delete_after_an_unreadable_source_directory_deletes_nothing() {
    if !root_or_skip() || !Path::new("/usr/bin/setpriv").exists() {
        return;
    }
    let t = tmp();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let nobody = user("nobody");
    let src = t.path().join("src");
    for (path, data) in [("keep/a", "a"), ("secret/b", "b"), ("secret/c", "c")] {
        fs::create_dir_all(src.join(path).parent().unwrap()).unwrap();
        make_file(&src.join(path), data.as_bytes(), 0o644);
    }
    let dst = t.path().join("dst");
    for dir in [&src, &dst] {
        fs::create_dir_all(dir).unwrap();
    }
    let as_nobody = |args: &[&Path]| {
        let mut cmd = std::process::Command::new("/usr/bin/setpriv");
        cmd.args([
            "--reuid",
            &nobody.to_string(),
            "--regid",
            &nobody.to_string(),
        ])
        .arg("--clear-groups")
        .arg(bin())
        .arg("cp")
        .args(args);
        cmd.output().unwrap()
    };
    for entry in walk(t.path()) {
        lchown(&entry, Some(nobody), Some(nobody)).unwrap();
    }
    let out = as_nobody(&[&src, &dst]);
    assert!(out.status.success(), "{}", describe(&out));
    fs::write(dst.join("stale"), b"not in the source").unwrap();
    fs::set_permissions(src.join("secret"), fs::Permissions::from_mode(0o000)).unwrap();
    let out = as_nobody(&[Path::new("--delete"), &src, &dst]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--delete skipped"), "{stderr}");
    assert_eq!(fs::read(dst.join("secret/b")).unwrap(), b"b");
    assert_eq!(fs::read(dst.join("secret/c")).unwrap(), b"c");
    assert!(
        dst.join("stale").exists(),
        "deleted in spite of the failure"
    );
    fs::set_permissions(src.join("secret"), fs::Permissions::from_mode(0o755)).unwrap();
}

/// Every path below `dir`, `dir` included.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    if fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        for e in fs::read_dir(dir).unwrap() {
            out.extend(walk(&e.unwrap().path()));
        }
    }
    out
}
