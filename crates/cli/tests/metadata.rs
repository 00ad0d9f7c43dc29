//! Hard links (`-H`), extended attributes (`-X`) and POSIX ACLs (`-A`), end to end: trees
//! with groups of links spread over directories and batches, with `user.*` attributes and
//! with access and default ACLs, pushed to and pulled from a real `sprat serve` on 127.0.0.1
//! over several streams, and copied locally; re-runs skip what is there and fix what differs.
//! The destination is compared with the source by inode sharing (`st_ino`, `st_nlink`), by
//! `getfattr -d -R` and by `getfacl -R` (the `attr` and `acl` packages).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use common::{assert_ok, bin, cp, cp_local, server, tmp};
use sprat_testkit::{describe, run_sprat};
use sprat_testkit::{make_file, parse_json_report, random_bytes};

/// Many small batches on four streams (local copies: four writers), so that the members of
/// a group of links travel in different batches, on different streams.
const SPREAD: &[&str] = &["--batch-files", "8", "--write-threads", "4"];
/// As [`SPREAD`], with files above 64 KiB sent as 64 KiB chunks.
const CHUNKED: &[&str] = &["--small-file-threshold", "64KiB", "--chunk-size", "64KiB"];

/// The groups of links of [`make_linked_tree`]: the first name of each is made as a file,
/// the others as links to it.
const GROUPS: &[&[&str]] = &[
    &["d0/g2-a", "d7/g2-b"],
    &["d0/g5-0", "d2/g5-1", "d4/g5-2", "d6/g5-3", "d7/g5-4"],
    &["d1/big-a", "d5/big-b"],
];

/// Eight directories of 40 small files each, with [`GROUPS`] spread among them (the last
/// group of 300 KiB, chunked with [`CHUNKED`]).
fn make_linked_tree(dir: &Path) {
    for d in 0..8 {
        for i in 0..40 {
            let name = dir.join(format!("d{d}/f{i}"));
            make_file_in(&name, &random_bytes(4096, d * 100 + i), 0o644);
        }
    }
    for (k, group) in GROUPS.iter().enumerate() {
        let size = if k == 2 { 300 << 10 } else { 1000 + k };
        make_file_in(
            &dir.join(group[0]),
            &random_bytes(size, 9000 + k as u64),
            0o640,
        );
        for other in &group[1..] {
            fs::hard_link(dir.join(group[0]), dir.join(other)).unwrap();
        }
    }
}

/// The groups of names sharing an inode below `dir` (files with more than one name), each
/// checked to have as many links as names found.
fn link_groups(dir: &Path) -> BTreeSet<BTreeSet<String>> {
    let mut by_ino: BTreeMap<u64, (u64, BTreeSet<String>)> = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                todo.push(p);
            } else if m.nlink() > 1 {
                let rel = p.strip_prefix(dir).unwrap().to_str().unwrap().to_string();
                let entry = by_ino
                    .entry(m.ino())
                    .or_insert((m.nlink(), BTreeSet::new()));
                entry.1.insert(rel);
            }
        }
    }
    by_ino
        .into_values()
        .map(|(nlink, names)| {
            assert_eq!(
                nlink,
                names.len() as u64,
                "{names:?}: links outside the tree"
            );
            names
        })
        .collect()
}

fn expected_groups() -> BTreeSet<BTreeSet<String>> {
    GROUPS
        .iter()
        .map(|g| g.iter().map(|s| s.to_string()).collect())
        .collect()
}

/// Files and bytes a copy's `--json` report says it sent.
fn sent(out: &std::process::Output) -> (u64, u64) {
    let r = parse_json_report(&out.stdout);
    (r.files(), r.bytes())
}

/// Copies `src` to `dst` with `extra` (push, pull or local, as `how` says).
fn copy(
    how: &str,
    srv: &sprat_testkit::Server,
    extra: &[&str],
    src: &str,
    dst: &str,
) -> std::process::Output {
    let mut args: Vec<&str> = extra.to_vec();
    args.push("--json");
    let out = if how == "local" {
        cp_local(&args, src, dst)
    } else {
        args.extend(["--streams", "4"]);
        cp(srv, &args, src, dst)
    };
    assert_ok(&out, Some(srv));
    out
}

/// Breaks the links of `name` below `dst`: it becomes a separate file of the same content
/// and mtime (what a copy without -H makes).
fn unlink_into_copy(dst: &Path, name: &str) {
    let p = dst.join(name);
    let m = fs::metadata(&p).unwrap();
    let data = fs::read(&p).unwrap();
    let tmp = dst.join("separate.tmp");
    fs::write(&tmp, data).unwrap();
    let mtime = filetime_of(&m);
    set_mtime(&tmp, mtime);
    fs::rename(&tmp, &p).unwrap();
    assert_eq!(fs::metadata(&p).unwrap().nlink(), 1);
}

fn filetime_of(m: &fs::Metadata) -> (i64, i64) {
    (m.mtime(), m.mtime_nsec())
}

fn set_mtime(p: &Path, (sec, nsec): (i64, i64)) {
    let t = std::time::UNIX_EPOCH + std::time::Duration::new(sec as u64, nsec as u32);
    let f = fs::File::options().write(true).open(p).unwrap();
    f.set_modified(t).unwrap();
}

/// [`make_file`], making its directory first.
fn make_file_in(path: &Path, content: &[u8], mode: u32) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    make_file(path, content, mode);
}

#[test]
fn hard_links_are_kept_in_push_pull_and_local_copies_and_rerun_fixes_them() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    make_linked_tree(&src);
    assert_eq!(link_groups(&src), expected_groups());
    let srv = server(&root);
    let local_root = t.path().join("local");
    fs::create_dir_all(&local_root).unwrap();
    for how in ["push", "pull", "local"] {
        for (k, chunking) in [&[][..], CHUNKED].into_iter().enumerate() {
            let mut extra = vec!["-H"];
            extra.extend_from_slice(SPREAD);
            extra.extend_from_slice(chunking);
            let name = format!("{how}-{k}");
            // Where the copy lands, as the copy names it and as this test reads it.
            let (src_arg, dst_arg, dst) = match how {
                "push" => (
                    src.to_str().unwrap().to_string(),
                    srv.url(&name),
                    root.join(&name),
                ),
                "pull" => (
                    srv.url("src"),
                    local_root.join(&name).to_str().unwrap().to_string(),
                    local_root.join(&name),
                ),
                _ => (
                    src.to_str().unwrap().to_string(),
                    local_root.join(&name).to_str().unwrap().to_string(),
                    local_root.join(&name),
                ),
            };
            let tag = format!("{how} {}", if k == 0 { "whole" } else { "chunked" });
            copy(how, &srv, &extra, &src_arg, &dst_arg);
            assert_eq!(link_groups(&dst), expected_groups(), "{tag}");
            sprat_testkit::assert_trees_equal(&src, &dst);

            // Nothing changed: nothing is sent again, and the links stay.
            let again = copy(how, &srv, &extra, &src_arg, &dst_arg);
            assert_eq!(sent(&again), (0, 0), "{tag}: a re-run sent data");
            assert_eq!(link_groups(&dst), expected_groups(), "{tag} re-run");

            // Members made separate files at the destination are linked again, without
            // their data travelling.
            unlink_into_copy(&dst, "d7/g2-b");
            unlink_into_copy(&dst, "d4/g5-2");
            let again = copy(how, &srv, &extra, &src_arg, &dst_arg);
            assert_eq!(sent(&again), (0, 0), "{tag}: relinking sent data");
            assert_eq!(link_groups(&dst), expected_groups(), "{tag} relinked");
        }
    }

    // A group whose content changed at the source (one inode, so every name): its data
    // travels once and every name at the destination links to the new file.
    let m = fs::metadata(src.join("d0/g5-0")).unwrap();
    fs::write(src.join("d4/g5-2"), b"changed through one of five names").unwrap();
    set_mtime(&src.join("d4/g5-2"), (m.mtime() + 10, 0));
    for (how, src_arg, dst) in [
        (
            "push",
            src.to_str().unwrap().to_string(),
            root.join("push-0"),
        ),
        ("pull", srv.url("src"), local_root.join("pull-0")),
        (
            "local",
            src.to_str().unwrap().to_string(),
            local_root.join("local-0"),
        ),
    ] {
        let dst_arg = match how {
            "push" => srv.url("push-0"),
            _ => dst.to_str().unwrap().to_string(),
        };
        let mut extra = vec!["-H"];
        extra.extend_from_slice(SPREAD);
        let out = copy(how, &srv, &extra, &src_arg, &dst_arg);
        assert_eq!(sent(&out).0, 1, "{how}: the changed group is one file sent");
        assert_eq!(link_groups(&dst), expected_groups(), "{how} after a change");
        sprat_testkit::assert_trees_equal(&src, &dst);
    }
}

#[test]
fn without_hard_links_each_name_is_a_file_of_its_own() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    make_linked_tree(&src);
    let srv = server(&root);
    assert_ok(&cp(&srv, SPREAD, &src, srv.url("plain")), Some(&srv));
    assert!(link_groups(&root.join("plain")).is_empty());
    let local = t.path().join("plain-local");
    assert_ok(&cp_local(SPREAD, &src, &local), None);
    assert!(link_groups(&local).is_empty());
    sprat_testkit::assert_trees_equal(&src, &local);
}

/// Runs `tool args` in `dir`; its stdout (panics if it fails).
fn run_in(dir: &Path, tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{tool}: {e} (install-deps.sh --tests installs it)"));
    assert!(
        out.status.success(),
        "{tool} {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn set_xattr(p: &Path, name: &str, value: &str) {
    run_in(
        p.parent().unwrap(),
        "setfattr",
        &["-h", "-n", name, "-v", value, p.to_str().unwrap()],
    );
}

/// `getfattr -d -R` of every `user.*` attribute below `dir`, paths relative to it, sorted.
fn user_xattrs(dir: &Path) -> String {
    let text = run_in(dir, "getfattr", &["-R", "-d", "-h", "-m", "^user\\.", "."]);
    sorted_blocks(&text)
}

/// `getfacl -R` below `dir`, paths relative to it, sorted by file.
fn acls(dir: &Path) -> String {
    let text = run_in(dir, "getfacl", &["-R", "-p", "."]);
    sorted_blocks(&text)
}

/// The blank-line separated blocks of `text`, sorted (the tools list in directory order).
fn sorted_blocks(text: &str) -> String {
    let mut blocks: Vec<&str> = text.split("\n\n").map(str::trim).collect();
    blocks.retain(|b| !b.is_empty());
    blocks.sort();
    blocks.join("\n\n")
}

/// Whether `dir`'s file system keeps `user.*` attributes.
fn xattrs_supported(dir: &Path) -> bool {
    let probe = dir.join("xattr-probe");
    fs::write(&probe, b"").unwrap();
    let ok = Command::new("setfattr")
        .args(["-n", "user.probe", "-v", "1"])
        .arg(&probe)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    fs::remove_file(&probe).unwrap();
    ok
}

/// A tree with `user.*` attributes on files (one large, chunked), a directory and the root,
/// and access and default ACLs.
fn make_attributed_tree(dir: &Path) {
    for d in 0..4 {
        for i in 0..20 {
            let p = dir.join(format!("d{d}/f{i}"));
            make_file_in(&p, &random_bytes(2048, d * 50 + i), 0o644);
            if i % 3 == 0 {
                set_xattr(&p, "user.sprat.test", &format!("file {d}/{i}"));
                set_xattr(&p, "user.empty", "");
            }
        }
    }
    make_file(&dir.join("big"), &random_bytes(200 << 10, 77), 0o600);
    set_xattr(&dir.join("big"), "user.big", "0x00ff00ff");
    set_xattr(&dir.join("d1"), "user.dir", "a directory's");
    set_xattr(dir, "user.root", "the root's");
    // ACLs: a named user and group on a file, a default ACL on a directory (files made in
    // it afterwards inherit it), and the mode's group bits as the mask.
    run_in(dir, "setfacl", &["-m", "u:daemon:rw,g:adm:r", "d0/f1"]);
    run_in(dir, "setfacl", &["-d", "-m", "u:bin:rwx,g:adm:rx", "d2"]);
    run_in(dir, "setfacl", &["-m", "u:bin:rx", "d2"]);
    make_file(
        &dir.join("d2/inherits"),
        b"made after the default ACL",
        0o640,
    );
}

#[test]
fn xattrs_and_acls_are_kept_in_push_pull_and_local_copies_and_reruns_fix_them() {
    let t = tmp();
    if !xattrs_supported(t.path()) {
        eprintln!("skipped: {} keeps no user.* attributes", t.path().display());
        return;
    }
    let root = t.path().join("root");
    let src = root.join("src");
    make_attributed_tree(&src);
    let want_x = user_xattrs(&src);
    let want_a = acls(&src);
    assert!(want_x.contains("user.sprat.test") && want_a.contains("default:user:bin:rwx"));
    let srv = server(&root);
    let local_root = t.path().join("local");
    fs::create_dir_all(&local_root).unwrap();
    for how in ["push", "pull", "local"] {
        let (src_arg, dst_arg, dst) = match how {
            "push" => (src.to_str().unwrap().into(), srv.url(how), root.join(how)),
            "pull" => (
                srv.url("src"),
                local_root.join(how).to_str().unwrap().to_string(),
                local_root.join(how),
            ),
            _ => (
                src.to_str().unwrap().to_string(),
                local_root.join(how).to_str().unwrap().to_string(),
                local_root.join(how),
            ),
        };
        let mut extra = vec!["-aXA", "--keep-setuid"];
        extra.extend_from_slice(SPREAD);
        extra.extend_from_slice(CHUNKED);
        copy(how, &srv, &extra, &src_arg, &dst_arg);
        assert_eq!(user_xattrs(&dst), want_x, "{how}: xattrs");
        assert_eq!(acls(&dst), want_a, "{how}: ACLs");
        sprat_testkit::assert_trees_equal(&src, &dst);

        // Changed, added and removed at the destination: a re-run puts them back as the
        // source has them, without sending any data.
        set_xattr(&dst.join("d0/f0"), "user.sprat.test", "changed");
        set_xattr(&dst.join("d0/f1"), "user.extra", "not at the source");
        run_in(&dst, "setfattr", &["-x", "user.big", "big"]);
        run_in(&dst, "setfattr", &["-x", "user.dir", "d1"]);
        run_in(&dst, "setfacl", &["-b", "d0/f1"]);
        run_in(&dst, "setfacl", &["-k", "d2"]);
        assert_ne!(user_xattrs(&dst), want_x);
        let again = copy(how, &srv, &extra, &src_arg, &dst_arg);
        assert_eq!(sent(&again), (0, 0), "{how}: a re-run sent data");
        assert_eq!(user_xattrs(&dst), want_x, "{how}: xattrs fixed");
        assert_eq!(acls(&dst), want_a, "{how}: ACLs fixed");
        sprat_testkit::assert_trees_equal(&src, &dst);

        // Without -X and -A a copy carries none (and a re-run leaves them alone).
        let plain = local_root.join(format!("{how}-plain"));
        if how == "local" {
            assert_ok(&cp_local(&[], &src, &plain), None);
            assert_eq!(user_xattrs(&plain), "");
        }
    }
}

#[test]
fn a_third_party_copy_keeps_hard_links_xattrs_and_acls() {
    let t = tmp();
    if !xattrs_supported(t.path()) {
        eprintln!("skipped: {} keeps no user.* attributes", t.path().display());
        return;
    }
    let (root_a, root_b) = (t.path().join("a"), t.path().join("b"));
    let src = root_a.join("src");
    make_linked_tree(&src);
    set_xattr(&src.join("d0/g2-a"), "user.linked", "shared by both names");
    run_in(&src, "setfacl", &["-m", "u:daemon:r", "d3/f3"]);
    fs::create_dir_all(&root_b).unwrap();
    let (a, b) = (server(&root_a), server(&root_b));
    let mut extra = vec!["-HXA", "--streams", "4"];
    extra.extend_from_slice(SPREAD);
    for _ in 0..2 {
        let out = cp(&a, &extra, a.url("src"), b.url("copy"));
        assert_ok(&out, Some(&b));
    }
    let dst = root_b.join("copy");
    assert_eq!(link_groups(&dst), expected_groups());
    assert_eq!(user_xattrs(&dst), user_xattrs(&src));
    assert_eq!(acls(&dst), acls(&src));
    sprat_testkit::assert_trees_equal(&src, &dst);
}

#[test]
fn xattrs_into_a_file_system_without_them_fail_by_name() {
    let t = tmp();
    if !xattrs_supported(t.path()) {
        eprintln!("skipped: {} keeps no user.* attributes", t.path().display());
        return;
    }
    let src = t.path().join("src");
    make_file_in(&src.join("plain"), b"no attributes", 0o644);
    make_file_in(&src.join("tagged"), b"one attribute", 0o644);
    set_xattr(&src.join("tagged"), "user.tag", "x");
    // ramfs keeps no extended attributes at all.
    let mnt = t.path().join("ramfs");
    fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "ramfs", "ramfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a ramfs here");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&mnt);
    let out = cp_local(&["-X"], &src, mnt.join("dst"));
    common::assert_exit(&out, 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tagged") && stderr.contains("extended attributes"),
        "{stderr}"
    );
    assert!(!stderr.contains("plain"), "{stderr}");
    assert_eq!(fs::read(mnt.join("dst/plain")).unwrap(), b"no attributes");
    // Without -X the same copy succeeds.
    assert_ok(&cp_local(&[], &src, mnt.join("dst2")), None);
}

/// Every `trusted.*` attribute below `dir` (`getfattr`), paths relative to it, sorted.
fn trusted_xattrs(dir: &Path) -> String {
    let text = run_in(
        dir,
        "getfattr",
        &["-R", "-d", "-h", "-m", "^trusted\\.", "."],
    );
    sorted_blocks(&text)
}

#[test]
fn trusted_attributes_need_root_on_both_sides_and_a_writer_keeping_setuid_bits() {
    let t = tmp();
    if !xattrs_supported(t.path()) || !common::is_root() {
        eprintln!("skipped: needs root and a file system with extended attributes");
        return;
    }
    let root = t.path().join("root");
    let src = root.join("src");
    make_file_in(&src.join("f"), b"content", 0o644);
    set_xattr(&src.join("f"), "user.plain", "u");
    set_xattr(&src.join("f"), "trusted.sprat", "t");
    let want = trusted_xattrs(&src);
    assert!(want.contains("trusted.sprat"), "{want}");

    // A local copy keeps setuid bits, and so these.
    let local = t.path().join("local");
    assert_ok(&cp_local(&["-X"], &src, &local), None);
    assert_eq!(trusted_xattrs(&local), want);

    // A server does not take them from a client by default...
    let srv = server(&root);
    assert_ok(&cp(&srv, &["-X"], &src, srv.url("plain")), Some(&srv));
    assert_eq!(trusted_xattrs(&root.join("plain")), "");
    assert_eq!(user_xattrs(&root.join("plain")), user_xattrs(&src));
    // ... unless told to keep setuid bits.
    let opts = sprat_testkit::ServerOptions {
        extra_args: vec!["--keep-setuid".into()],
        ..Default::default()
    };
    let trusting = common::server_with(&t.path().join("root2"), &opts);
    assert_ok(
        &cp(&trusting, &["-X"], &src, trusting.url("kept")),
        Some(&trusting),
    );
    assert_eq!(trusted_xattrs(&t.path().join("root2/kept")), want);
}

/// What a writing side leaves out by its own rule is said in the report and counted in the
/// JSON report (before, nothing told): the setuid and setgid bits of files from the network
/// (a push to a server without `--keep-setuid`, a pull without it) and `trusted.*`
/// attributes a server does not take; a writer keeping them says nothing.
#[test]
fn a_writer_says_which_setuid_bits_and_trusted_attributes_it_did_not_keep() {
    let t = tmp();
    if !xattrs_supported(t.path()) || !common::is_root() {
        eprintln!("skipped: needs root and a file system with extended attributes");
        return;
    }
    let src = t.path().join("src");
    make_file_in(&src.join("tool"), b"#!/bin/sh\n", 0o4755);
    make_file_in(&src.join("shared"), b"g", 0o2755);
    make_file_in(&src.join("plain"), b"p", 0o644);
    set_xattr(&src.join("plain"), "trusted.sprat", "t");
    let not_kept = |out: &std::process::Output| -> (u64, u64) {
        let r = parse_json_report(&out.stdout);
        let n = r.get("not_kept");
        (n["setid"].as_u64().unwrap(), n["xattrs"].as_u64().unwrap())
    };
    let root = t.path().join("root");
    let srv = server(&root);
    let out = cp(&srv, &["-X", "--json"], &src, srv.url("pushed"));
    assert_ok(&out, Some(&srv));
    assert_eq!(not_kept(&out), (2, 1), "{}", describe(&out));
    let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&root.join("pushed/tool")), 0o755);
    let text = cp(&srv, &["-X"], &src, srv.url("pushed-again"));
    let said = String::from_utf8_lossy(&text.stdout);
    for line in [
        "not kept: the setuid/setgid bits of 2 files",
        "`sprat serve --keep-setuid` keeps them",
        "not kept: the trusted.*/security.* attributes of 1 file",
    ] {
        assert!(said.contains(line), "{line:?}: {}", describe(&text));
    }

    // A re-run that writes nothing (-X re-checks the attributes of every file there) counts
    // nothing (review 18 F12).
    let out = cp(
        &srv,
        &["-X", "--ignore-existing", "--json"],
        &src,
        srv.url("pushed"),
    );
    assert_ok(&out, Some(&srv));
    assert_eq!(not_kept(&out), (0, 0), "{}", describe(&out));
    // A server keeping setuid bits keeps both, and says nothing.
    let opts = sprat_testkit::ServerOptions {
        extra_args: vec!["--keep-setuid".into()],
        ..Default::default()
    };
    let trusting = common::server_with(&t.path().join("root2"), &opts);
    let out = cp(&trusting, &["-X", "--json"], &src, trusting.url("kept"));
    assert_ok(&out, Some(&trusting));
    assert_eq!(not_kept(&out), (0, 0));
    let out = cp(&trusting, &["-X"], &src, trusting.url("kept-again"));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("not kept"));

    // Pulled from it: cleared unless the pull keeps them.
    let pulled = t.path().join("pulled");
    let out = cp(&trusting, &["-X", "--json"], trusting.url("kept"), &pulled);
    assert_ok(&out, Some(&trusting));
    assert_eq!(not_kept(&out).0, 2, "{}", describe(&out));
    assert_eq!(mode(&pulled.join("tool")), 0o755);
    let out = cp(
        &trusting,
        &["-X", "--keep-setuid", "--json"],
        trusting.url("kept"),
        t.path().join("pulled-kept"),
    );
    assert_ok(&out, Some(&trusting));
    assert_eq!(not_kept(&out), (0, 0));
    assert_eq!(mode(&t.path().join("pulled-kept/tool")), 0o4755);
}

#[test]
fn hard_links_xattrs_and_acls_can_be_defaults_of_the_configuration_file() {
    let t = tmp();
    let src = t.path().join("src");
    make_linked_tree(&src);
    let config = t.path().join("config.toml");
    fs::write(
        &config,
        "[defaults]\nhard_links = true\nxattrs = true\nacls = true\n",
    )
    .unwrap();
    let dst = t.path().join("dst");
    let config_arg = config.to_str().unwrap();
    assert_ok(&cp_local(&["--config", config_arg], &src, &dst), None);
    assert_eq!(link_groups(&dst), expected_groups());
    // An unknown key is still an error naming it.
    fs::write(&config, "[defaults]\nhardlinks = true\n").unwrap();
    let out = cp_local(&["--config", config_arg], &src, t.path().join("dst2"));
    common::assert_error_names(&out, &["hardlinks"]);
}

/// `sprat verify -X -H --owners` finds what `verify` alone does not compare, and says what
/// it compared: a changed xattr value, a changed owner, a hard link broken into two files
/// (each with the content, mode and mtime of the source), all "identical" to plain verify.
#[test]
fn verify_compares_xattrs_owners_and_hard_links_when_asked() {
    let t = tmp();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    std::fs::hard_link(src.join("a"), src.join("b")).unwrap();
    std::fs::write(src.join("c"), b"c").unwrap();
    let set_xattr = |p: &std::path::Path, v: &[u8]| {
        rustix::fs::setxattr(p, "user.k", v, rustix::fs::XattrFlags::empty())
    };
    if set_xattr(&src.join("c"), b"1").is_err() {
        eprintln!("skipped: this file system has no user xattrs");
        return;
    }
    assert_ok(&cp_local(&["-HX"], &src, &dst), None);
    let verify = |extra: &[&str]| {
        let mut args: Vec<String> = vec!["verify".into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.push(src.display().to_string());
        args.push(dst.display().to_string());
        run_sprat(bin(), &args, &[])
    };
    let out = verify(&["-XH", "--owners"]);
    assert_ok(&out, None);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("compared: content, modes, mtimes, symlinks, xattrs, owners, hard links"),
        "{}",
        describe(&out)
    );
    // Differences plain verify does not see.
    set_xattr(&dst.join("c"), b"2").unwrap();
    let dir_mtime = std::fs::metadata(&dst).unwrap().modified().unwrap();
    let b_meta = std::fs::metadata(dst.join("b")).unwrap();
    std::fs::remove_file(dst.join("b")).unwrap();
    std::fs::write(dst.join("b"), b"a").unwrap();
    let f = std::fs::File::options()
        .write(true)
        .open(dst.join("b"))
        .unwrap();
    f.set_modified(b_meta.modified().unwrap()).unwrap();
    std::fs::set_permissions(dst.join("b"), b_meta.permissions()).unwrap();
    std::fs::File::open(&dst)
        .unwrap()
        .set_modified(dir_mtime)
        .unwrap();
    assert_ok(&verify(&[]), None);
    let out = verify(&["-XH"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("c: extended attributes differ: user.k (value differs)"),
        "{said}"
    );
    assert!(said.contains("hard link of"), "{said}");
}
