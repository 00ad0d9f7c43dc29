//! `sprat cp --exclude/--include/--exclude-from/--include-from/--files-from` against real
//! servers on loopback, in every direction (local, push, pull, third-party): what is copied
//! is what rsync selects with the same rules on the same tree (compared with rsync's own
//! dry run when rsync is installed, as `scripts/install-deps.sh` does, and always with the
//! list rsync's documentation gives); an excluded directory is never read; `--delete` keeps
//! what the rules exclude; dry runs and progress totals count only what is selected; bad
//! patterns and unreadable files are one-line errors (exit 2).
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_error_names, assert_exit, assert_ok, cp, cp_local, server, tmp, RelayProc};
use sprat_testkit::tree;
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

/// Rules that exercise each form: include before exclude (one `.o` file kept), unanchored,
/// anchored, `***`, directory-only (a file of that name is kept), `**` needing a directory
/// in between, an inner slash, a class, and the unreadable directory `secret/`.
const RULES: &[&str] = &[
    "--include",
    "keep.o",
    "--exclude",
    "*.o",
    "--exclude",
    "/file3.txt",
    "--exclude",
    "cache/***",
    "--exclude",
    "build/",
    "--exclude",
    "/logs/**/*.log",
    "--exclude",
    "sub/foo",
    "--exclude",
    "n[0-9].md",
    "--exclude",
    "secret/",
];

/// What [`RULES`] select of [`make_tree`], by rsync's rules.
const SELECTED: &[&str] = &[
    "a",
    "a/1.txt",
    "a/b",
    "a/b/2.txt",
    "a/keep.o",
    "a/build",
    "cache2",
    "docs",
    "docs/readme.md",
    "docs/notes",
    "docs/notes/nx.md",
    "file10.txt",
    "logs",
    "logs/a.log",
    "logs/sub",
    "sub",
    "x",
    "x/sub",
    "x/sub/foo2",
];

/// The tree the rules are tried on; `secret/` is made unreadable (mode 000) and its atime
/// old, so that reading it would show.
fn make_tree(root: &Path) {
    for f in [
        "a/1.txt",
        "a/b/2.txt",
        "a/b/3.o",
        "a/keep.o",
        "a/build",
        "top.o",
        "file3.txt",
        "file10.txt",
        "cache/x/y",
        "cache/z",
        "cache2",
        "build/out.bin",
        "build/sub/deep.bin",
        "logs/a.log",
        "logs/sub/b.log",
        "sub/foo/z",
        "x/sub/foo/w",
        "x/sub/foo2",
        "docs/readme.md",
        "docs/notes/n1.md",
        "docs/notes/nx.md",
        "secret/s.txt",
    ] {
        file(&root.join(f), f.as_bytes(), 0o644);
    }
    seal(&root.join("secret"));
}

/// Makes a file with its parent directories.
fn file(path: &Path, content: &[u8], mode: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    tree::make_file(path, content, mode);
}

/// Makes `dir` unreadable with an old atime (see [`was_read`]).
fn seal(dir: &Path) {
    set_old_atime(dir);
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o000)).unwrap();
}

fn set_old_atime(p: &Path) {
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(946_684_800);
    let f = std::fs::File::open(p).unwrap();
    f.set_times(std::fs::FileTimes::new().set_accessed(old))
        .unwrap();
}

fn atime(p: &Path) -> SystemTime {
    std::fs::metadata(p).unwrap().accessed().unwrap()
}

/// Whether the sealed directory `dir` was listed since [`seal`]: its atime moved (relatime
/// updates an atime older than a day on a read). `None` when this file system does not show
/// reads in atimes (`control`, a directory that was listed and whose atime was set as
/// old, did not move either). Running as root, the mode alone would not stop a read.
fn was_read(dir: &Path, control: &Path) -> Option<bool> {
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(946_684_800 + 60);
    if atime(control) < old {
        return None;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let read = atime(dir) > old;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o000)).unwrap();
    Some(read)
}

/// Every path below `dir` (files, directories, symlinks), relative.
fn paths_below(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            out.insert(p.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

fn set(paths: &[&str]) -> BTreeSet<String> {
    paths.iter().map(|p| p.to_string()).collect()
}

fn has_rsync() -> bool {
    Command::new("rsync").arg("--version").output().is_ok()
}

/// What `rsync -a --dry-run ARGS SRC/ DST/` would transfer (paths relative to SRC), when
/// rsync is installed.
fn rsync_selects(args: &[&str], src: &Path, dst: &Path) -> Option<BTreeSet<String>> {
    if !has_rsync() {
        eprintln!("rsync is not installed: comparing with the documented selection only");
        return None;
    }
    let out = Command::new("rsync")
        .args(["-a", "--dry-run", "--out-format=%n"])
        .args(args)
        .arg(format!("{}/", src.display()))
        .arg(format!("{}/", dst.display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .map(|l| l.trim_end_matches('/'))
            .filter(|l| !l.is_empty() && *l != ".")
            .map(str::to_string)
            .collect(),
    )
}

/// Checks a copy made with [`RULES`]: it succeeded (reading nothing of `secret/`), and the
/// destination holds exactly what rsync selects.
#[track_caller]
fn check_selected(
    out: &std::process::Output,
    src: &Path,
    dst: &Path,
    server: Option<&sprat_testkit::Server>,
) {
    assert_ok(out, server);
    let got = paths_below(dst);
    assert_eq!(got, set(SELECTED), "what was copied");
    if let Some(by_rsync) = rsync_selects(RULES, src, &dst.with_extension("rsync")) {
        assert_eq!(got, by_rsync, "sprat and rsync select differently");
    }
    match was_read(&src.join("secret"), &src.join("a")) {
        Some(read) => assert!(!read, "the excluded directory secret/ was read"),
        None => eprintln!("atimes do not show reads here: not checking that secret/ was unread"),
    }
}

/// A source tree and a directory to put copies in, with `a/` as the atime control.
fn source(t: &Path) -> std::path::PathBuf {
    let src = t.join("src");
    make_tree(&src);
    set_old_atime(&src.join("a"));
    src
}

#[test]
fn a_local_copy_selects_what_rsync_selects_and_never_reads_an_excluded_directory() {
    let t = tmp();
    let src = source(t.path());
    let dst = t.path().join("dst");
    let out = cp_local(RULES, &src, &dst);
    check_selected(&out, &src, &dst, None);
}

#[test]
fn a_push_selects_what_rsync_selects() {
    let t = tmp();
    let src = source(t.path());
    let root = t.path().join("root");
    let srv = server(&root);
    let out = cp(&srv, RULES, &src, srv.url("dst"));
    check_selected(&out, &src, &root.join("dst"), Some(&srv));
}

#[test]
fn a_pull_sends_the_rules_to_the_server_that_scans() {
    let t = tmp();
    let root = t.path().join("root");
    let src = source(&root);
    let srv = server(&root);
    let dst = t.path().join("dst");
    let out = cp(&srv, RULES, srv.url("src"), &dst);
    check_selected(&out, &src, &dst, Some(&srv));
}

#[test]
fn a_third_party_copy_sends_the_rules_to_the_source_server() {
    let t = tmp();
    let (root_a, root_b) = (t.path().join("a"), t.path().join("b"));
    let src = source(&root_a);
    let (a, b) = (server(&root_a), server(&root_b));
    let out = cp(&a, RULES, a.url("src"), b.url("dst"));
    check_selected(&out, &src, &root_b.join("dst"), Some(&a));
}

/// The regular files a dry run says it would send.
fn dry_run_sends(out: &std::process::Output) -> BTreeSet<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("send "))
        .map(str::to_string)
        .collect()
}

#[test]
fn dry_runs_list_only_what_is_selected() {
    let t = tmp();
    let root = t.path().join("root");
    let src = source(&root);
    let srv = server(&root);
    let files: BTreeSet<String> = SELECTED
        .iter()
        .filter(|p| src.join(p).is_file())
        .map(|p| p.to_string())
        .collect();
    let mut args = RULES.to_vec();
    args.push("--dry-run");
    let local = cp_local(&args, &src, t.path().join("dst"));
    assert_ok(&local, None);
    assert_eq!(dry_run_sends(&local), files, "local dry run");
    let pulled = cp(&srv, &args, srv.url("src"), t.path().join("dst"));
    assert_ok(&pulled, Some(&srv));
    assert_eq!(dry_run_sends(&pulled), files, "pull dry run");
    assert!(!t.path().join("dst").exists(), "a dry run wrote something");
}

/// A destination with extras: `extra.txt` (deleted), `old.o` and `cache/mine` (excluded:
/// kept), and `gone/` which the source does not have, holding `x.o` (excluded: kept, and so
/// is `gone/`) and `y.txt` (deleted).
fn make_extras(dst: &Path) {
    for f in ["extra.txt", "old.o", "cache/mine", "gone/x.o", "gone/y.txt"] {
        file(&dst.join(f), b"extra", 0o644);
    }
}

const DELETE_RULES: &[&str] = &["--exclude", "*.o", "--exclude", "cache/", "--delete"];

#[track_caller]
fn check_deleted(dst: &Path, src: &Path, t: &Path) {
    let got = paths_below(dst);
    for kept in [
        "old.o",
        "cache",
        "cache/mine",
        "gone",
        "gone/x.o",
        "a/1.txt",
    ] {
        assert!(got.contains(kept), "{kept} is gone: {got:?}");
    }
    for deleted in ["extra.txt", "gone/y.txt", "top.o", "cache/z"] {
        assert!(!got.contains(deleted), "{deleted} is there: {got:?}");
    }
    if has_rsync() {
        // rsync -a --delete with the same rules into the same destination.
        let theirs = t.join("rsync-dst");
        make_extras(&theirs);
        let out = Command::new("rsync")
            .args(["-a"])
            .args(DELETE_RULES)
            .args(["--exclude", "secret/"])
            .arg(format!("{}/", src.display()))
            .arg(format!("{}/", theirs.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(got, paths_below(&theirs), "sprat and rsync --delete differ");
    }
}

#[test]
fn delete_keeps_what_the_rules_exclude_locally_and_on_a_server() {
    let t = tmp();
    let src = source(t.path());
    let mut args = DELETE_RULES.to_vec();
    args.extend(["--exclude", "secret/"]);
    let dst = t.path().join("dst");
    make_extras(&dst);
    let out = cp_local(&args, &src, &dst);
    assert_ok(&out, None);
    check_deleted(&dst, &src, t.path());
    let root = t.path().join("root");
    make_extras(&root.join("dst"));
    let srv = server(&root);
    let out = cp(&srv, &args, &src, srv.url("dst"));
    assert_ok(&out, Some(&srv));
    check_deleted(&root.join("dst"), &src, t.path());
}

const LIST: &str = "# what to copy\na/b/2.txt\n\n/docs\nlogs/keep.log\n; gone\nmissing.txt\n";

#[track_caller]
fn check_listed(out: &std::process::Output, dst: &Path) {
    assert_exit(out, 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("missing.txt"), "{stderr}");
    let got = paths_below(dst);
    let want = set(&["a", "a/b", "a/b/2.txt", "docs", "logs", "logs/keep.log"]);
    assert_eq!(got, want);
}

#[test]
fn files_from_copies_the_listed_paths_and_names_a_missing_one() {
    let t = tmp();
    let root = t.path().join("root");
    let src = source(&root);
    file(&src.join("logs/keep.log"), b"k", 0o644);
    let list = t.path().join("list");
    std::fs::write(&list, LIST).unwrap();
    let list = list.to_str().unwrap();
    let srv = server(&root);
    let local = t.path().join("local");
    check_listed(&cp_local(&["--files-from", list], &src, &local), &local);
    if has_rsync() {
        let theirs = t.path().join("rsync-dst");
        Command::new("rsync")
            .args(["-a", "--files-from", list])
            .arg(format!("{}/", src.display()))
            .arg(format!("{}/", theirs.display()))
            .output()
            .unwrap();
        assert_eq!(
            paths_below(&local),
            paths_below(&theirs),
            "rsync lists differently"
        );
    }
    let pushed = root.join("pushed");
    check_listed(
        &cp(&srv, &["--files-from", list], &src, srv.url("pushed")),
        &pushed,
    );
    let pulled = t.path().join("pulled");
    check_listed(
        &cp(&srv, &["--files-from", list], srv.url("src"), &pulled),
        &pulled,
    );
}

#[test]
fn rules_apply_in_the_order_given_across_options_and_files() {
    let t = tmp();
    let src = t.path().join("src");
    for f in ["a.log", "keep.log", "x.txt"] {
        file(&src.join(f), b"x", 0o644);
    }
    let rules = t.path().join("rules");
    std::fs::write(&rules, "# comment\n; also\n\nkeep.log\n- x.txt\n").unwrap();
    let rules = rules.to_str().unwrap();
    // The include file comes first: keep.log is kept, and its "- x.txt" line excludes.
    let first = t.path().join("first");
    let out = cp_local(
        &["--include-from", rules, "--exclude", "*.log"],
        &src,
        &first,
    );
    assert_ok(&out, None);
    assert_eq!(paths_below(&first), set(&["keep.log"]));
    // The exclude comes first: it wins for keep.log too.
    let second = t.path().join("second");
    let out = cp_local(
        &["--exclude", "*.log", "--include-from", rules],
        &src,
        &second,
    );
    assert_ok(&out, None);
    assert_eq!(paths_below(&second), set(&[]));
}

#[test]
fn progress_totals_count_only_what_is_selected() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    for i in 0..4 {
        let data = tree::random_bytes(2 << 20, i);
        file(&src.join(format!("in{i}.bin")), &data, 0o644);
    }
    for i in 0..20 {
        file(&src.join(format!("skip/big{i}.bin")), &[7; 1 << 20], 0o644);
    }
    let srv = server(&root);
    // About 1.7 s through the relay: progress events with the totals.
    let relay = RelayProc::start(srv.addr(), &["--rate", "40mbit"]);
    let args = ["--json-events", "--exclude", "skip/"];
    let out = cp(&srv, &args, relay.url("src"), t.path().join("dst"));
    assert_ok(&out, Some(&srv));
    let counted = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .rfind(|e| e["files_total"].is_u64())
        .unwrap_or_else(|| panic!("no totals in {out:?}"));
    assert_eq!(counted["files_total"].as_u64(), Some(4), "{counted}");
    assert_eq!(
        counted["bytes_total"].as_u64(),
        Some(4 * (2 << 20)),
        "{counted}"
    );
}

#[test]
fn bad_patterns_and_unreadable_files_are_one_line_errors() {
    let t = tmp();
    let src = t.path().join("src");
    file(&src.join("f"), b"x", 0o644);
    let dst = t.path().join("dst");
    let bad_rules = t.path().join("bad-rules");
    std::fs::write(&bad_rules, "ok\n*.[ch\n").unwrap();
    let bad_rules = bad_rules.to_str().unwrap();
    let missing = t.path().join("no-such-file");
    let missing = missing.to_str().unwrap();
    for (args, names) in [
        (
            vec!["--exclude", "a[b"],
            vec!["--exclude", "a[b", "unbalanced"],
        ),
        (vec!["--include", ""], vec!["--include", "empty pattern"]),
        (
            vec!["--exclude-from", missing],
            vec!["--exclude-from", "no-such-file"],
        ),
        (
            vec!["--include-from", bad_rules],
            vec!["bad-rules", "line 2", "*.[ch"],
        ),
        (
            vec!["--files-from", missing],
            vec!["--files-from", "no-such-file"],
        ),
    ] {
        let out = cp_local(&args, &src, &dst);
        assert_exit(&out, 2);
        let line = assert_error_names(&out, &names[..1]);
        for n in &names {
            assert!(line.contains(n), "{line:?} does not name {n}");
        }
        assert!(!dst.exists(), "{args:?} copied something");
    }
    let out = cp_local(&["--files-from", bad_rules, "--delete"], &src, &dst);
    assert_exit(&out, 2);
}

#[test]
fn rules_too_large_for_a_server_are_refused_before_connecting_but_fine_locally() {
    let t = tmp();
    let root = t.path().join("root");
    file(&root.join("src/f.txt"), b"x", 0o644);
    file(&root.join("src/g.tmp"), b"x", 0o644);
    let srv = server(&root);
    // 20,000 rules of about 15 encoded bytes: more than the 64 KiB a server accepts.
    let mut text: String = (0..20_000).map(|i| format!("never-{i:06}\n")).collect();
    text.push_str("*.tmp\n");
    let rules = t.path().join("rules");
    std::fs::write(&rules, text).unwrap();
    let rules = rules.to_str().unwrap();
    let out = cp(
        &srv,
        &["--exclude-from", rules],
        srv.url("src"),
        t.path().join("pulled"),
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &["rules take"]);
    // A local source is scanned here: no limit.
    let local = t.path().join("local");
    let out = cp_local(&["--exclude-from", rules], root.join("src"), &local);
    assert_ok(&out, None);
    assert_eq!(paths_below(&local), set(&["f.txt"]));
}

/// Into `DST/` (rsync's `rsync -a RULES SRC DST/`, whose transfer root is SRC's parent) the
/// rules see SRC's entries as `SRC/PATH`: `/src/keep` and `src/tmp` name `DST/src/keep` and
/// `DST/src/tmp`, so `--delete` keeps `DST/src/keep/p` as rsync does, and `/x.log` (anchored
/// above SRC) matches nothing. A rule naming SRC itself copies nothing, and a single file a
/// rule leaves out is not copied (rsync copies nothing in both). Before, the rules were
/// matched below SRC there: `--delete` removed `DST/src/keep/p` with exit 0, and a single
/// file was copied whatever the rules (review 2026-11-30 of the filters, F1 and F2). Locally,
/// pushed, pulled and between two servers, and against rsync itself when it is installed.
#[test]
fn into_a_directory_the_rules_see_the_source_by_its_name_as_rsyncs_do() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    for f in ["tmp/a", "d", "keep/new", "x.log"] {
        file(&src.join(f), f.as_bytes(), 0o644);
    }
    let srv = server(&root);
    let rules = [
        "--delete",
        "--exclude",
        "/src/keep",
        "--exclude",
        "src/tmp",
        "--exclude",
        "/x.log",
    ];
    let expected = set(&["src", "src/d", "src/x.log", "src/keep", "src/keep/p"]);
    // A destination holding `src/keep/p` (the rule protects it) and `src/old` (an extra).
    let prepare = |dst: &Path| {
        file(&dst.join("src/keep/p"), b"precious", 0o644);
        file(&dst.join("src/old"), b"old", 0o644);
        file(&dst.join("src/d"), b"d", 0o644);
    };
    let copy = |how: &str, flags: &[&str], from: &str, to: &str| match how {
        "local" => cp_local(
            flags,
            root.join(from),
            format!("{}/", t.path().join(to).display()),
        ),
        "push" => cp(&srv, flags, root.join(from), srv.url(&format!("{to}/"))),
        "pull" => cp(
            &srv,
            flags,
            srv.url(from),
            format!("{}/", t.path().join(to).display()),
        ),
        _ => cp(&srv, flags, srv.url(from), srv.url(&format!("{to}/"))),
    };
    let place = |how: &str, to: &str| match how {
        "push" | "third" => root.join(to),
        _ => t.path().join(to),
    };
    for how in ["local", "push", "pull", "third"] {
        let to = format!("into-{how}");
        prepare(&place(how, &to));
        let out = copy(how, &rules, "src", &to);
        assert_ok(&out, Some(&srv));
        assert_eq!(paths_below(&place(how, &to)), expected, "{how}");
        assert_eq!(
            std::fs::read(place(how, &to).join("src/keep/p")).unwrap(),
            b"precious"
        );
        // SRC itself named by a rule, and a single file a rule leaves out: nothing is copied.
        for (flags, from) in [
            (["--exclude", "src"], "src"),
            (["--exclude", "*.log"], "src/x.log"),
        ] {
            let to = format!("none-{how}");
            std::fs::create_dir_all(place(how, &to)).unwrap();
            let out = copy(how, &flags, from, &to);
            assert_ok(&out, Some(&srv));
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("left out by the"),
                "{how} {flags:?}: {}",
                sprat_testkit::describe(&out)
            );
            assert_eq!(paths_below(&place(how, &to)), set(&[]), "{how} {flags:?}");
        }
        // A source that is not there is an error all the same, not "left out".
        let out = copy(how, &["--exclude", "*.log"], "src/gone.log", "none-gone");
        assert_exit(&out, 2);
    }
    if has_rsync() {
        let r = t.path().join("rsync");
        prepare(&r);
        let status = Command::new("rsync")
            .arg("-a")
            .args(rules)
            .arg(&src)
            .arg(format!("{}/", r.display()))
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(paths_below(&r), expected, "rsync");
    }
}

/// A `--files-from` line `DIR/` or `.` copies that directory and its entries one level down,
/// as rsync does (before, `DIR/` copied DIR empty and `.` nothing, exit 0); `A/./B` (rsync's
/// `-R` marker, B copied to `B`) is refused by line, since sprat puts a listed path at the
/// same path (review 2026-11-30 of the filters, F4). Locally, pushed and pulled, and against
/// rsync itself when it is installed.
#[test]
fn files_from_takes_a_listed_directorys_entries_as_rsync_does() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    for f in ["d/e/f", "d/g", "top", "other/x"] {
        file(&src.join(f), f.as_bytes(), 0o644);
    }
    let srv = server(&root);
    for (text, want) in [
        ("d/\n", &["d", "d/e", "d/g"][..]),
        (".\n", &["d", "top", "other"][..]),
        (
            "./d/.\nother/x\n",
            &["d", "d/e", "d/g", "other", "other/x"][..],
        ),
    ] {
        let list = t.path().join("list");
        std::fs::write(&list, text).unwrap();
        let list = list.to_str().unwrap();
        let args = ["--files-from", list];
        let name = text.replace(['/', '.', '\n'], "_");
        let (local, pushed, pulled) = (
            t.path().join(format!("local{name}")),
            root.join(format!("pushed{name}")),
            t.path().join(format!("pulled{name}")),
        );
        assert_ok(&cp_local(&args, &src, &local), None);
        let out = cp(&srv, &args, &src, srv.url(&format!("pushed{name}")));
        assert_ok(&out, Some(&srv));
        assert_ok(&cp(&srv, &args, srv.url("src"), &pulled), Some(&srv));
        for dst in [&local, &pushed, &pulled] {
            assert_eq!(paths_below(dst), set(want), "{text:?} {dst:?}");
        }
        if has_rsync() {
            let theirs = t.path().join(format!("rsync{name}"));
            let out = Command::new("rsync")
                .args(["-a", "--files-from", list])
                .arg(format!("{}/", src.display()))
                .arg(format!("{}/", theirs.display()))
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            assert_eq!(paths_below(&theirs), set(want), "rsync {text:?}");
        }
    }
    // A listed file the rules leave out: nor are the directories leading to it made (F5).
    file(&src.join("l/a.log"), b"log", 0o644);
    let list = t.path().join("logs");
    std::fs::write(&list, "l/a.log\ntop\n").unwrap();
    let args = ["--exclude", "*.log", "--files-from", list.to_str().unwrap()];
    assert_ok(&cp_local(&args, &src, t.path().join("nolog")), None);
    assert_eq!(paths_below(&t.path().join("nolog")), set(&["top"]));
    assert_ok(
        &cp(&srv, &args, srv.url("src"), t.path().join("nolog2")),
        Some(&srv),
    );
    assert_eq!(paths_below(&t.path().join("nolog2")), set(&["top"]));
    // A listed directory the rules leave out: neither it nor its entries (as rsync).
    let list = t.path().join("excluded");
    std::fs::write(&list, "d/\nd/e/f\ntop\n").unwrap();
    let args = ["--exclude", "d/", "--files-from", list.to_str().unwrap()];
    assert_ok(&cp_local(&args, &src, t.path().join("nod")), None);
    assert_eq!(paths_below(&t.path().join("nod")), set(&["top"]));
    assert_ok(
        &cp(&srv, &args, srv.url("src"), t.path().join("nod2")),
        Some(&srv),
    );
    assert_eq!(paths_below(&t.path().join("nod2")), set(&["top"]));
    // `SRC DST/` with a list: the listed paths land at the same paths in DST, as rsync's
    // (they went to DST/src/: review 2026-11-30 of protocol 23, F7).
    let list = t.path().join("top-only");
    std::fs::write(&list, "top\nd/g\n").unwrap();
    let args = ["--files-from", list.to_str().unwrap()];
    let slash = t.path().join("slash");
    let into = format!("{}/", slash.display());
    assert_ok(&cp_local(&args, &src, &into), None);
    assert_eq!(paths_below(&slash), set(&["top", "d", "d/g"]));
    assert_ok(
        &cp(
            &srv,
            &args,
            srv.url("src"),
            format!("{}/", t.path().join("slash2").display()),
        ),
        Some(&srv),
    );
    assert_eq!(
        paths_below(&t.path().join("slash2")),
        set(&["top", "d", "d/g"])
    );
    // A single file as SRC with a list: refused, as rsync does (it was written at DST itself:
    // review 2026-11-30 of the newest changes, F1), locally and pulled.
    let args = ["--files-from", list.to_str().unwrap()];
    let out = cp_local(
        &args,
        src.join("top"),
        format!("{}/", t.path().join("onto").display()),
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &["--files-from", "not a directory"]);
    let out = cp(
        &srv,
        &args,
        srv.url("src/top"),
        format!("{}/", t.path().join("onto").display()),
    );
    assert_exit(&out, 2);
    assert!(!t.path().join("onto").exists());
    let list = t.path().join("marked");
    std::fs::write(&list, "d/./e/f\n").unwrap();
    let out = cp_local(
        &["--files-from", list.to_str().unwrap()],
        &src,
        t.path().join("m"),
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &["line 1", "d/./e/f", "/./"]);
    assert!(!t.path().join("m").exists());
}
