//! rsync's options as people type them into `sprat cp`: the ones sprat takes as rsync does
//! (`-avh`, `-rlptgoD`, `-W`, `-S`, `--info=progress2`, a bare `--bwlimit` number) copy; the
//! ones it lacks are refused by name with what to do instead, before anything is made; and a
//! third path is refused with a word on copying several.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use sprat_testkit::{assert_trees_equal, describe, run_sprat, tree};
use std::fs;

#[test]
fn rsyncs_usual_flags_copy_as_with_rsync() {
    let t = tmp();
    let src = t.path().join("src");
    tree::make_many_files(&src, 2, 20, 7);
    for (i, flags) in [
        &["-avh"][..],
        &["-rlptgoD"],
        &["-aWS", "--info=progress2"],
        &["-ah", "--bwlimit", "100000"],
        &[
            "--recursive",
            "--links",
            "--perms",
            "--times",
            "--owner",
            "--group",
            "--devices",
        ],
        &[
            "-aEs",
            "--specials",
            "--no-i-r",
            "--mkpath",
            "--blocking-io",
        ],
    ]
    .iter()
    .enumerate()
    {
        let dst = t.path().join(format!("dst{i}"));
        let out = cp_local(flags, &src, &dst);
        assert_ok(&out, None);
        assert_trees_equal(&src, &dst);
    }
    // `-h` alone still asks for help, as with rsync.
    let out = run_sprat(bin(), ["cp", "-h"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: sprat cp"));
}

#[test]
fn an_rsync_option_sprat_lacks_is_refused_with_what_to_do() {
    let t = tmp();
    let src = t.path().join("src");
    tree::make_many_files(&src, 1, 5, 8);
    let dst = t.path().join("dst");
    for (flags, named, advice) in [
        (&["--stats"][..], "--stats", "report"),
        (&["--list-only"], "--list-only", "sprat ls"),
        (&["-avL"], "--copy-links", "as links"),
        (&["--timeout=30"], "--timeout", "--stall-timeout"),
        (&["--info=stats2"], "--info=stats2", "progress2"),
    ] {
        let out = cp_local(flags, &src, &dst);
        assert_exit(&out, 2);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(named) && stderr.contains(advice),
            "{flags:?}: {stderr}"
        );
        assert!(!dst.exists(), "{flags:?} made the destination");
    }
    // rsync's line with sprat's name but not its command.
    let out = run_sprat(
        bin(),
        ["-av", src.to_str().unwrap(), dst.to_str().unwrap()],
        &[],
    );
    assert_exit(&out, 2);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`sprat cp -av SRC DST`"),
        "{}",
        describe(&out)
    );
    assert!(!dst.exists());
}

/// `sprat cp SRC... DIR`, as a shell glob gives it: each source inside DIR under its own name,
/// a source with a trailing `/` its contents, as with rsync; locally and pushed. A missing
/// source fails alone (exit 2, the others copied); a DIR that is a file is refused first.
#[test]
fn several_sources_go_into_the_last_path() {
    let t = tmp();
    let src = t.path().join("src");
    tree::make_many_files(&src.join("d1"), 1, 5, 11);
    std::fs::create_dir_all(src.join("d2")).unwrap();
    for name in ["e1", "e2"] {
        std::fs::write(src.join("d2").join(name), name).unwrap();
    }
    std::fs::write(src.join("a.txt"), b"a").unwrap();
    std::fs::write(src.join("b.txt"), b"b").unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let srv = server(&root);
    let arg = |p: &str| src.join(p).to_str().unwrap().to_string();
    let d2_contents = format!("{}/", arg("d2"));
    let sources = [arg("a.txt"), arg("b.txt"), arg("d1"), d2_contents];
    let local = t.path().join("local");
    let mut args: Vec<String> = vec!["cp".into(), "-q".into()];
    args.extend(sources.iter().cloned());
    args.push(local.to_str().unwrap().into());
    let out = run_sprat(bin(), &args, &[]);
    assert_ok(&out, None);
    let url = srv.url("pushed");
    let out = cp(
        &srv,
        &[
            sources[0].as_str(),
            sources[1].as_str(),
            sources[2].as_str(),
        ],
        sources[3].as_str(),
        &url,
    );
    assert_ok(&out, Some(&srv));
    for dst in [local, root.join("pushed")] {
        assert_eq!(std::fs::read(dst.join("a.txt")).unwrap(), b"a");
        assert_eq!(std::fs::read(dst.join("b.txt")).unwrap(), b"b");
        assert_trees_equal(&src.join("d1"), &dst.join("d1"));
        for entry in std::fs::read_dir(src.join("d2")).unwrap() {
            let name = entry.unwrap().file_name();
            assert_eq!(
                std::fs::read(src.join("d2").join(&name)).unwrap(),
                std::fs::read(dst.join(&name)).unwrap()
            );
        }
    }
    // A missing source fails alone; the next one is still copied.
    let again = t.path().join("again");
    let out = run_sprat(
        bin(),
        [
            "cp",
            "-q",
            &arg("missing"),
            &arg("a.txt"),
            again.to_str().unwrap(),
        ],
        &[],
    );
    assert_exit(&out, 2);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("missing"),
        "{}",
        describe(&out)
    );
    assert_eq!(std::fs::read(again.join("a.txt")).unwrap(), b"a");
    // --delete with a source whose contents go into DIR itself: each copy would delete the
    // others' files, so it is refused.
    let out = run_sprat(
        bin(),
        [
            "cp",
            "--delete",
            &format!("{}/", arg("d1")),
            &arg("d2"),
            again.to_str().unwrap(),
        ],
        &[],
    );
    assert_exit(&out, 2);
    assert_eq!(std::fs::read(again.join("a.txt")).unwrap(), b"a");
    // Two sources of one name: refused before either is copied, as cp refuses them.
    std::fs::create_dir_all(src.join("other/d1")).unwrap();
    let twice = t.path().join("twice");
    let out = run_sprat(
        bin(),
        ["cp", &arg("d1"), &arg("other/d1"), twice.to_str().unwrap()],
        &[],
    );
    assert_exit(&out, 2);
    assert!(!twice.exists(), "{}", describe(&out));
    // The last path a file: refused before anything is copied.
    let out = run_sprat(bin(), ["cp", &arg("b.txt"), &arg("d1"), &arg("a.txt")], &[]);
    assert_exit(&out, 2);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a directory"),
        "{}",
        describe(&out)
    );
    assert_eq!(std::fs::read(src.join("a.txt")).unwrap(), b"a");
}

/// `-x`, as `rsync -x`: a directory where another file system is mounted is copied empty,
/// and nothing of that file system; without it, everything. A pull is refused (its server
/// scans the source).
#[test]
fn one_file_system_copies_a_mount_point_empty() {
    let t = tmp();
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("mnt")).unwrap();
    std::fs::write(src.join("here.txt"), b"here").unwrap();
    let Some(mounted) = sprat_testkit::MountedOn::tmpfs(&src.join("mnt"), "1m") else {
        eprintln!("skipped: this process may not mount a tmpfs");
        return;
    };
    std::fs::write(src.join("mnt/there.txt"), b"there").unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let srv = server(&root);
    let local = t.path().join("local");
    assert_ok(&cp_local(&["-ax"], &src, &local), None);
    assert_ok(&cp(&srv, &["-x"], &src, srv.url("pushed")), Some(&srv));
    for dst in [local, root.join("pushed")] {
        assert_eq!(std::fs::read(dst.join("here.txt")).unwrap(), b"here");
        assert!(dst.join("mnt").is_dir(), "{}", dst.display());
        assert_eq!(std::fs::read_dir(dst.join("mnt")).unwrap().count(), 0);
    }
    let all = t.path().join("all");
    assert_ok(&cp_local(&["-a"], &src, &all), None);
    assert_eq!(std::fs::read(all.join("mnt/there.txt")).unwrap(), b"there");
    let out = cp(&srv, &["-x"], srv.url("pushed"), t.path().join("pulled"));
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--one-file-system"));
    drop(mounted);
}

/// `--delete` into a directory that has nothing in common with the source (`cp --delete src
/// backup/`, as an rsync user types it to get `backup/src`): refused before anything is
/// removed or copied, saying how to copy into it, locally, pushed and in a dry run. Once DST
/// shares a name with SRC, or is empty, `--delete` mirrors as before.
#[test]
fn delete_refuses_to_empty_a_directory_unrelated_to_the_source() {
    let t = tmp();
    let src = t.path().join("src");
    tree::make_many_files(&src, 1, 3, 13);
    let backup = t.path().join("backup");
    std::fs::create_dir_all(backup.join("other_project")).unwrap();
    std::fs::write(backup.join("other_project/data"), b"important").unwrap();
    let root = t.path().join("root");
    std::fs::create_dir_all(root.join("backup/other")).unwrap();
    std::fs::write(root.join("backup/other/data"), b"important").unwrap();
    let srv = server(&root);
    let runs = [
        cp_local(&["--delete"], &src, &backup),
        cp_local(&["--delete", "-n"], &src, &backup),
        cp(&srv, &["--delete"], &src, srv.url("backup")),
    ];
    for out in runs {
        assert_exit(&out, 2);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("DST/NAME"), "{}", describe(&out));
    }
    assert_eq!(
        std::fs::read(backup.join("other_project/data")).unwrap(),
        b"important"
    );
    assert_eq!(
        std::fs::read(root.join("backup/other/data")).unwrap(),
        b"important"
    );
    assert_eq!(std::fs::read_dir(&backup).unwrap().count(), 1);
    // Into it, by name: nothing of it removed.
    assert_ok(&cp_local(&["--delete"], &src, backup.join("src")), None);
    assert_trees_equal(&src, &backup.join("src"));
    assert_eq!(
        std::fs::read(backup.join("other_project/data")).unwrap(),
        b"important"
    );
    // A mirror that shares a name with the source: its extras go, as always.
    let mirror = t.path().join("mirror");
    assert_ok(&cp_local(&[], &src, &mirror), None);
    std::fs::write(mirror.join("stale"), b"x").unwrap();
    assert_ok(&cp_local(&["--delete"], &src, &mirror), None);
    assert_trees_equal(&src, &mirror);
    // A mirror whose every top-level name changed (dated directories): the refusal names
    // --force-delete, which goes on, locally and pushed.
    let dated = t.path().join("dated");
    std::fs::create_dir_all(dated.join("2026-11-28")).unwrap();
    std::fs::write(dated.join("2026-11-28/run.dat"), b"new").unwrap();
    let local_mirror = t.path().join("local_mirror");
    std::fs::create_dir_all(local_mirror.join("2026-11-27")).unwrap();
    std::fs::write(local_mirror.join("2026-11-27/run.dat"), b"old").unwrap();
    std::fs::create_dir_all(root.join("mirror/2026-11-27")).unwrap();
    let out = cp_local(&["--delete"], &dated, &local_mirror);
    assert_exit(&out, 2);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--force-delete"),
        "{}",
        describe(&out)
    );
    assert_ok(
        &cp_local(&["--delete", "--force-delete"], &dated, &local_mirror),
        None,
    );
    assert_trees_equal(&dated, &local_mirror);
    let out = cp(
        &srv,
        &["--delete", "--force-delete"],
        &dated,
        srv.url("mirror"),
    );
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&dated, &root.join("mirror"));
    // Without --delete it is a usage error, not silently ignored.
    assert_exit(&cp_local(&["--force-delete"], &dated, &local_mirror), 2);
}

/// `--delete` with a single file as the source deletes nothing, as with rsync, wherever the
/// file goes: pulled into an existing directory (its other entries stay, excluded or not), or
/// copied onto a name that is a directory (refused, nothing inside it removed).
#[test]
fn delete_with_a_single_file_source_removes_nothing() {
    let t = tmp();
    let root = t.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("file.txt"), b"data").unwrap();
    let srv = server(&root);
    let dir = t.path().join("dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.log"), b"keep").unwrap();
    std::fs::write(dir.join("b.txt"), b"precious").unwrap();
    for flags in [&["--delete", "--exclude", "*.log"][..], &["--delete"]] {
        let out = cp(&srv, flags, srv.url("file.txt"), &dir);
        assert_ok(&out, Some(&srv));
        assert_eq!(
            std::fs::read(dir.join("b.txt")).unwrap(),
            b"precious",
            "{flags:?}"
        );
        assert_eq!(
            std::fs::read(dir.join("a.log")).unwrap(),
            b"keep",
            "{flags:?}"
        );
        assert_eq!(
            std::fs::read(dir.join("file.txt")).unwrap(),
            b"data",
            "{flags:?}"
        );
    }
    let onto = t.path().join("onto");
    std::fs::create_dir_all(onto.join("file.txt")).unwrap();
    std::fs::write(onto.join("file.txt/valuable"), b"v").unwrap();
    let out = cp_local(&["--delete"], root.join("file.txt"), &onto);
    assert_exit(&out, 1);
    assert_eq!(std::fs::read(onto.join("file.txt/valuable")).unwrap(), b"v");
}

/// Several sources whose names hold a `:` (timestamps) keep their names: a `:` is a host's
/// only in `HOST:PATH`.
#[test]
fn several_sources_with_a_colon_in_their_names_keep_them() {
    let t = tmp();
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let names = ["2024-01-01T10:00.log", "2024-01-02T10:00.log"];
    for n in names {
        std::fs::write(src.join(n), n).unwrap();
    }
    let out_dir = t.path().join("out");
    let mut args: Vec<String> = vec!["cp".into(), "-q".into()];
    args.extend(
        names
            .iter()
            .map(|n| src.join(n).to_str().unwrap().to_string()),
    );
    args.push(out_dir.to_str().unwrap().into());
    let out = run_sprat(bin(), &args, &[]);
    assert_ok(&out, None);
    for n in names {
        assert_eq!(std::fs::read(out_dir.join(n)).unwrap(), n.as_bytes());
    }
}

/// rsync's habits with `--delete` never cost data: `sprat cp --delete proj backup/` mirrors
/// into `backup/proj` (as rsync), leaving the rest of `backup` alone, on a local tree and on
/// a server's root; and a DST that holds the source (`--delete data/inner data`) is refused
/// before anything is removed, where it used to delete the source itself.
#[test]
fn delete_with_rsyncs_habits_removes_nothing_but_the_copys_own_extras() {
    let t = tmp();
    let (proj, backup) = (t.path().join("proj"), t.path().join("backup"));
    put(&proj.join("README"), b"proj readme");
    put(&proj.join("data/d1"), b"d1");
    put(&backup.join("README"), b"backup readme");
    put(&backup.join("other-project/thesis.tex"), b"precious");
    let out = cp_local(&["--delete"], &proj, format!("{}/", backup.display()));
    assert_ok(&out, None);
    assert_trees_equal(&proj, &backup.join("proj"));
    assert_eq!(fs::read(backup.join("README")).unwrap(), b"backup readme");
    assert_eq!(
        fs::read(backup.join("other-project/thesis.tex")).unwrap(),
        b"precious"
    );

    // The same into a server's root, another user's directory there.
    let root = t.path().join("root");
    put(&root.join("README"), b"the export's");
    put(&root.join("otheruser/thesis"), b"theirs");
    let srv = server(&root);
    let out = cp(&srv, &["--delete"], &proj, srv.url(""));
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&proj, &root.join("proj"));
    assert_eq!(fs::read(root.join("otheruser/thesis")).unwrap(), b"theirs");

    // A DST that holds the source, locally and on a server: refused, nothing removed.
    let data = t.path().join("data");
    put(&data.join("inner/a/f"), b"f");
    put(&data.join("inner/README"), b"r");
    put(&data.join("README"), b"r");
    put(&data.join("other/o"), b"o");
    let before = files_of(&data);
    for dry in [&["--delete", "-n"][..], &["--delete"][..]] {
        let out = cp_local(dry, data.join("inner"), &data);
        assert_exit(&out, 2);
        assert_error_names(&out, &["--delete would delete the source"]);
    }
    assert_eq!(files_of(&data), before);
    put(&root.join("data/inner/f"), b"f");
    put(&root.join("data/kept"), b"k");
    let out = cp(&srv, &["--delete"], srv.url("data/inner"), srv.url("data"));
    assert_exit(&out, 2);
    assert_eq!(fs::read(root.join("data/inner/f")).unwrap(), b"f");
    assert_eq!(fs::read(root.join("data/kept")).unwrap(), b"k");
}

/// A source inside the destination is seen by device and inode, whatever names the two sides
/// have: a local path inside a server's export, and two servers on one host exporting nested
/// trees. `--delete` is refused (before, it deleted the source), dry run or not, and a
/// `--delete` between the two that does not overlap still deletes what it should. A push
/// into its own source is refused without `--delete` too.
#[test]
fn delete_sees_the_source_inside_a_servers_export_and_across_nested_exports() {
    let t = tmp();
    let exp = t.path().join("exp");
    put(&exp.join("proj/inner/a"), b"a");
    put(&exp.join("proj/keep"), b"k");
    put(&exp.join("other/o"), b"o");
    let outer = server(&exp);
    let nested = server(&exp.join("proj"));
    let before = files_of(&exp);
    let inner = exp.join("proj/inner");
    for dry in [&["--delete", "-n"][..], &["--delete"][..]] {
        for (src, dst) in [
            (s(&inner).to_string(), outer.url("proj")),
            (nested.url("inner"), outer.url("proj")),
            (nested.url("inner"), s(&exp.join("proj")).to_string()),
            (outer.url("proj/inner"), nested.url("")),
        ] {
            let out = cp(&outer, dry, &src, &dst);
            assert_exit(&out, 2);
            let said = describe(&out);
            assert!(
                said.contains("--delete would delete the source")
                    || said.contains("is the source or inside it"),
                "{src} -> {dst}: {said}"
            );
        }
    }
    assert_eq!(files_of(&exp), before);
    // Without --delete, a push (from this host, or a third-party copy's source server) into
    // a directory below its source is refused by the server, which knows both: before, each
    // run nested one more copy of the tree in itself.
    for src in [s(&exp.join("proj")).to_string(), outer.url("proj")] {
        let out = cp(&outer, &[], &src, nested.url("inner/copy"));
        assert_exit(&out, 2);
        assert_error_names(&out, &["is the pushed source or inside it"]);
    }
    // A pull into a local path inside the pulled directory: refused by the client, which the
    // server's `Opened` tells where the source is.
    let out = cp(
        &outer,
        &[],
        outer.url("proj"),
        exp.join("proj/inner/pulled"),
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &["is the pulled source or inside it"]);
    assert_eq!(files_of(&exp), before);
    assert!(!exp.join("proj/inner/pulled").exists());
    put(&exp.join("proj/elsewhere/extra"), b"x");
    put(&exp.join("proj/elsewhere/o"), b"older");
    let out = cp(
        &outer,
        &["--delete"],
        exp.join("other"),
        nested.url("elsewhere"),
    );
    assert_ok(&out, Some(&nested));
    assert!(!exp.join("proj/elsewhere/extra").exists());
    assert_eq!(fs::read(exp.join("proj/elsewhere/o")).unwrap(), b"o");
}

/// `-n` compares symlinks by their targets: one the destination has with the same target is
/// left out, one with another target is shown as `link PATH` (before, any symlink there was
/// left out), locally and on a server.
#[test]
fn a_dry_run_shows_a_symlink_whose_target_changed() {
    let t = tmp();
    let src = t.path().join("src");
    put(&src.join("f"), b"f");
    std::os::unix::fs::symlink("f", src.join("same")).unwrap();
    std::os::unix::fs::symlink("new-target", src.join("moved")).unwrap();
    let srv = server(&t.path().join("root"));
    for (dst, remote) in [
        (t.path().join("dst").display().to_string(), None),
        (srv.url("dst"), Some(t.path().join("root/dst"))),
    ] {
        let at = remote.unwrap_or_else(|| t.path().join("dst"));
        put(&at.join("f"), b"f");
        std::os::unix::fs::symlink("f", at.join("same")).unwrap();
        std::os::unix::fs::symlink("old-target", at.join("moved")).unwrap();
        let out = cp(&srv, &["-n"], &src, &dst);
        assert_ok(&out, Some(&srv));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("link moved\n"), "{dst}: {said}");
        assert!(!said.contains("link same"), "{dst}: {said}");
    }
}

/// Writes `content` at `path`, making its parents.
fn put(path: &std::path::Path, content: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

/// Every file below `dir` with its content, in order.
fn files_of(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// `-v` names what `--delete` removed, as rsync does (`deleting PATH`), and `--json-events`
/// as `deleted` events; `-r --files-from` (rsync: listed directories whole) is refused, not
/// copied as empty directories; `verify` of a URL or a missing path is a usage error.
#[test]
fn deletions_are_listed_and_what_sprat_cannot_do_is_refused() {
    let t = tmp();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    put(&src.join("keep"), b"k");
    put(&dst.join("keep"), b"k");
    put(&dst.join("gone/inside"), b"g");
    put(&dst.join("old"), b"o");
    let out = cp_local(&["-v", "--delete"], &src, &dst);
    assert_ok(&out, None);
    let said = String::from_utf8_lossy(&out.stdout);
    for line in ["deleting gone\n", "deleting old\n"] {
        assert!(said.contains(line), "{}", describe(&out));
    }
    put(&dst.join("again"), b"a");
    let out = cp_local(&["-v", "--json-events", "--delete"], &src, &dst);
    assert_ok(&out, None);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(r#"{"event":"deleted","path":"again"}"#),
        "{}",
        describe(&out)
    );

    let list = t.path().join("list");
    put(&list, b"keep\n");
    let out = cp_local(
        &["-r", "--files-from", &list.display().to_string()],
        &src,
        t.path().join("ff"),
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &["-r with --files-from"]);
    assert!(!t.path().join("ff").exists());

    for (a, b) in [
        (
            src.display().to_string(),
            "sprat://127.0.0.1:1/x".to_string(),
        ),
        (
            src.display().to_string(),
            t.path().join("typo").display().to_string(),
        ),
    ] {
        let out = run_sprat(bin(), ["verify", a.as_str(), b.as_str()], &[]);
        assert_exit(&out, 2);
    }
}

/// Where `DST/` and `--delete` could reach what the user never named, sprat stops first:
/// a symlink at DST/NAME (NAME being SRC's) is refused, not followed (the copy and
/// `--delete` would act where it points); `--delete` refuses a source inside the
/// destination named through another name of the same server; a dry run refuses a copy into
/// itself as the copy does, and shows the directories and symlinks the copy would make and
/// the directories whose mode it would set.
#[test]
fn dst_slash_and_delete_never_reach_what_was_not_named() {
    let t = tmp();
    let (src, d, elsewhere) = (
        t.path().join("src"),
        t.path().join("D"),
        t.path().join("elsewhere"),
    );
    put(&src.join("s"), b"s");
    put(&elsewhere.join("precious"), b"p");
    fs::create_dir_all(&d).unwrap();
    std::os::unix::fs::symlink("../elsewhere", d.join("src")).unwrap();
    let out = cp_local(&["--delete"], &src, format!("{}/", d.display()));
    assert_exit(&out, 2);
    assert_error_names(&out, &["is a symbolic link"]);
    assert_eq!(fs::read(elsewhere.join("precious")).unwrap(), b"p");
    assert!(!elsewhere.join("s").exists());

    // Through another name of one server (its key tells).
    let root = t.path().join("root");
    put(&root.join("P/sub/f"), b"f");
    put(&root.join("P/other"), b"o");
    let srv = server(&root);
    let other_name = srv.url("P").replace("127.0.0.1", "localhost");
    let out = cp(&srv, &["--delete"], srv.url("P/sub"), &other_name);
    assert_exit(&out, 2);
    assert_error_names(&out, &["--delete would delete the source"]);
    // Through a symlink on the server (Pl -> P): the directories' devices and inodes tell.
    std::os::unix::fs::symlink("P", root.join("Pl")).unwrap();
    let out = cp(&srv, &["--delete"], srv.url("Pl/sub"), srv.url("P"));
    assert_exit(&out, 2);
    assert_error_names(&out, &["--delete would delete the source"]);
    assert_eq!(fs::read(root.join("P/sub/f")).unwrap(), b"f");
    assert_eq!(fs::read(root.join("P/other")).unwrap(), b"o");

    // A dry run: into itself refused; directories and symlinks shown.
    let out = cp_local(&["-n"], &src, format!("{}/", src.display()));
    assert_exit(&out, 2);
    let copy = t.path().join("copy");
    assert_ok(&cp_local(&[], &src, &copy), None);
    fs::create_dir(src.join("newdir")).unwrap();
    std::os::unix::fs::symlink("s", src.join("link")).unwrap();
    let out = cp_local(&["-n"], &src, &copy);
    assert_ok(&out, None);
    let said = String::from_utf8_lossy(&out.stdout);
    for line in [
        "mkdir newdir/\n",
        "link link\n",
        "make 1 directory and 1 symlink",
    ] {
        assert!(said.contains(line), "{line:?}: {}", describe(&out));
    }
}

/// A dry run into a read-only server is refused as the copy would be, not "would send".
#[test]
fn a_dry_run_into_a_read_only_server_is_refused_as_the_copy_is() {
    let t = tmp();
    let src = t.path().join("src");
    put(&src.join("f"), b"f");
    let opts = sprat_testkit::server::ServerOptions {
        read_only: true,
        ..Default::default()
    };
    let srv = server_with(&t.path().join("root"), &opts);
    for dry in [&["-n"][..], &[][..]] {
        let out = cp(&srv, dry, &src, srv.url("x"));
        assert_exit(&out, 5);
        assert_error_names(&out, &["read-only"]);
    }
}

/// A bind mount shows one directory under two paths: `--delete` into the directory that
/// holds the source under its other name is refused, and so is a copy into itself (before,
/// the source was deleted). Needs root to mount; skipped otherwise.
#[test]
fn a_bind_mount_does_not_hide_that_the_destination_holds_the_source() {
    let t = tmp();
    let (data, view) = (t.path().join("data"), t.path().join("view"));
    put(&data.join("new/a"), b"a");
    put(&data.join("keep"), b"k");
    fs::create_dir_all(&view).unwrap();
    let mounted = std::process::Command::new("mount")
        .arg("--bind")
        .args([&data, &view])
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot bind-mount (needs root)");
        return;
    }
    let delete = cp_local(&["--delete"], view.join("new"), &data);
    let into_itself = cp_local(&[], &data, view.join("inner"));
    let _ = std::process::Command::new("umount").arg(&view).status();
    assert_exit(&delete, 2);
    assert_error_names(&delete, &["--delete would delete the source"]);
    assert_exit(&into_itself, 2);
    assert_eq!(fs::read(data.join("new/a")).unwrap(), b"a");
    assert_eq!(fs::read(data.join("keep")).unwrap(), b"k");
    assert!(!data.join("inner").exists());

    // The other way round: the source reached through a bind mount of a directory below DST
    // (`..` from the mount's root leads to the mount point's parent, not to DST), locally,
    // pushed, and pulled from a server exporting the bind mount (review 18 F9: `--delete`
    // removed the directory holding the source).
    let (top, bound) = (t.path().join("top"), t.path().join("bound"));
    put(&top.join("f1"), b"1");
    put(&top.join("f2"), b"2");
    put(&top.join("mid/sub/f1"), b"s");
    put(&top.join("mid/precious"), b"p");
    fs::create_dir_all(&bound).unwrap();
    assert!(std::process::Command::new("mount")
        .arg("--bind")
        .args([top.join("mid"), bound.clone()])
        .status()
        .unwrap()
        .success());
    let before = files_of(&top);
    let outer = server(t.path());
    let through = server(&bound);
    let outs = [
        cp_local(&["--delete"], bound.join("sub"), &top),
        cp(&outer, &["--delete"], bound.join("sub"), outer.url("top")),
        cp(&through, &["--delete"], through.url("sub"), &top),
        cp(&through, &[], &top, through.url("inner")),
        cp_local(&[], &top, bound.join("inner2")),
    ];
    let _ = std::process::Command::new("umount").arg(&bound).status();
    for out in &outs {
        assert_exit(out, 2);
    }
    assert_eq!(files_of(&top), before);
}

/// `--delete` of a directory whose siblings' names extend its own (`data`, `data-old`,
/// `data.bak`, `data 2`: `-`, `.` and space sort before `/`) removes each once, with
/// everything below it, exit 0; before, the entries below `data` were removed again one by
/// one after `data` had gone, each failing (exit 1), and the dry run listed them (review
/// 2026-11-30 of the filters, F3). Locally, pushed and pulled.
#[test]
fn delete_removes_directories_whose_siblings_extend_their_names() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("keep"), b"kept").unwrap();
    let srv = server(&root);
    let extras = |dst: &std::path::Path| {
        for (dir, file) in [
            ("data", "x"),
            ("data-old", "y"),
            ("data.bak", "z"),
            ("data 2", "w"),
        ] {
            fs::create_dir_all(dst.join(dir)).unwrap();
            fs::write(dst.join(dir).join(file), b"extra").unwrap();
        }
        fs::write(dst.join("keep"), b"kept").unwrap();
    };
    for how in ["local", "push", "pull"] {
        let dst = match how {
            "push" => root.join("pushed"),
            _ => t.path().join(how),
        };
        extras(&dst);
        let run = |flags: &[&str]| match how {
            "local" => cp_local(flags, &src, &dst),
            "push" => cp(&srv, flags, &src, srv.url("pushed")),
            _ => cp(&srv, flags, srv.url("src"), &dst),
        };
        let out = run(&["--delete", "-n", "--json"]);
        assert_ok(&out, Some(&srv));
        let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(plan["delete"], 4, "{how}: {plan}");
        let out = run(&["--delete"]);
        assert_ok(&out, Some(&srv));
        assert_trees_equal(&src, &dst);
    }
}
