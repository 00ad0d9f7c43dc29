//! Copying again into a destination that already holds the tree: files the destination has
//! with the same size and mtime are not sent (push, pull, third-party and local copy), a file whose mode alone
//! differs has its attributes set without its content, `--ignore-times` sends everything,
//! `--ignore-existing` leaves every present file alone, `--dry-run` says what a copy would do
//! and does nothing, `--delete` removes what the source does not have, `--checksum` compares
//! content where size and mtime would not tell. Real server, real files.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_ok, cp, cp_local, server, tmp, RelayProc};
use serde_json::Value;
use sprat_testkit::{assert_trees_equal, tree};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The names in directory `dir`, sorted (hidden ones too).
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn report(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

fn counts(r: &Value) -> (u64, u64, u64, u64) {
    let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("no {k} in {r}"));
    (n("files"), n("up_to_date"), n("attrs_fixed"), n("bytes"))
}

/// Runs the same scenario for a push and for a local copy: `copy(extra, dst_name)` copies
/// `src` into the destination named, `dst(dst_name)` is where it lands on disk.
fn scenario(
    src: &Path,
    copy: &dyn Fn(&[&str], &str) -> std::process::Output,
    dst: &dyn Fn(&str) -> std::path::PathBuf,
) {
    tree::make_many_files(&src.join("small"), 300, 2000, 3);
    tree::make_file(&src.join("big"), &tree::random_bytes(3 << 20, 4), 0o644);
    let files = 301;

    let first = copy(&["--json"], "d");
    assert_ok(&first, None);
    assert_eq!(counts(&report(&first)).0, files);

    // Nothing changed: nothing is sent.
    let again = copy(&["--json"], "d");
    assert_ok(&again, None);
    let (sent, up_to_date, fixed, bytes) = counts(&report(&again));
    assert_eq!((sent, up_to_date, fixed, bytes), (0, files, 0, 0));
    assert_trees_equal(src, &dst("d"));

    // A mode change only: that file's attributes are set, its content not sent.
    let changed = src.join("small/d0/f0000");
    let changed = if changed.exists() {
        changed
    } else {
        first_file(&src.join("small"))
    };
    std::fs::set_permissions(&changed, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A dry run says so and changes nothing.
    let dry = copy(&["--json", "--dry-run"], "d");
    assert_ok(&dry, None);
    let plan = report(&dry);
    assert_eq!(
        (
            plan["send"].as_u64(),
            plan["attrs"].as_u64(),
            plan["up_to_date"].as_u64()
        ),
        (Some(0), Some(1), Some(files - 1)),
        "{plan}"
    );
    let in_dst = dst("d").join(changed.strip_prefix(src).unwrap());
    let mode = std::fs::metadata(&in_dst).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o644, "a dry run changed the destination");
    let modes = copy(&["--json"], "d");
    assert_ok(&modes, None);
    assert_eq!(counts(&report(&modes)), (0, files - 1, 1, 0));
    assert_trees_equal(src, &dst("d"));

    // A new content with a new mtime is sent; the rest is not.
    tree::make_file(&changed, b"new content", 0o600);
    let content = copy(&["--json"], "d");
    assert_ok(&content, None);
    assert_eq!(counts(&report(&content)), (1, files - 1, 0, 11));
    assert_trees_equal(src, &dst("d"));

    // --ignore-times sends everything again.
    let all = copy(&["--json", "--ignore-times"], "d");
    assert_ok(&all, None);
    let (sent, up_to_date, _, _) = counts(&report(&all));
    assert_eq!((sent, up_to_date), (files, 0));

    // --ignore-existing leaves a present file alone even when it differs.
    tree::make_file(&changed, b"newer, longer content", 0o600);
    let existing = copy(&["--json", "--ignore-existing"], "d");
    assert_ok(&existing, None);
    assert_eq!(counts(&report(&existing)).0, 0);
    let kept = std::fs::read(dst("d").join(changed.strip_prefix(src).unwrap())).unwrap();
    assert_eq!(kept, b"new content");

    // --delete removes what the source does not have, only inside the destination: a file, a
    // directory with what is below it, a symlink (not what it points to).
    assert_ok(&copy(&[], "d"), None);
    let d = dst("d");
    let outside = src.parent().unwrap().join("outside");
    tree::make_file(&outside, b"keep me", 0o644);
    tree::make_file(&d.join("small/stray"), b"y", 0o644);
    std::fs::create_dir_all(d.join("extra/sub")).unwrap();
    tree::make_file(&d.join("extra/sub/f"), b"x", 0o644);
    std::os::unix::fs::symlink(&outside, d.join("link")).unwrap();
    let dry = copy(&["--json", "--dry-run", "--delete"], "d");
    assert_ok(&dry, None);
    assert_eq!(report(&dry)["delete"].as_u64(), Some(3));
    assert!(
        d.join("extra/sub/f").exists(),
        "a dry run deleted something"
    );
    let deleted = copy(&["--json", "--delete"], "d");
    assert_ok(&deleted, None);
    assert_eq!(report(&deleted)["deleted"].as_u64(), Some(3));
    assert_trees_equal(src, &d);
    assert_eq!(std::fs::read(&outside).unwrap(), b"keep me");
}

/// Gives `path` the mtime `t` (to the nanosecond).
fn set_mtime(path: &Path, t: SystemTime) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(t).unwrap();
}

/// Changes `path`'s content without changing its size or mtime: a change the quick check
/// cannot see.
fn rewrite_keeping_size_and_mtime(path: &Path) {
    let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
    let mut data = std::fs::read(path).unwrap();
    for b in data.iter_mut().take(64) {
        *b ^= 0x5a;
    }
    std::fs::write(path, &data).unwrap();
    set_mtime(path, mtime);
}

/// `--checksum`, in the same four directions: a content change the quick check misses (same
/// size, same mtime) is sent, nothing else; a file of the same content with another mtime
/// only has its attributes set; nothing changed sends nothing.
fn checksum_scenario(
    src: &Path,
    copy: &dyn Fn(&[&str], &str) -> std::process::Output,
    dst: &dyn Fn(&str) -> std::path::PathBuf,
) {
    // Every small file has the same size: each one is compared by its digest.
    tree::make_many_files(&src.join("small"), 250, 3000, 5);
    // Larger than a chunk: travels in chunks when sent.
    tree::make_file(&src.join("big"), &tree::random_bytes(5 << 20, 6), 0o644);
    let files = 251;
    let total = 250 * 3000 + (5 << 20);
    assert_ok(&copy(&["--json"], "d"), None);

    // Nothing changed: --checksum sends nothing.
    let again = copy(&["--json", "--checksum"], "d");
    assert_ok(&again, None);
    assert_eq!(counts(&report(&again)), (0, files, 0, 0));
    assert_eq!(report(&again)["bytes_not_sent"].as_u64(), Some(total));
    assert_trees_equal(src, &dst("d"));

    // Content changed, size and mtime kept, in a small file and in the chunked one.
    let small = first_file(&src.join("small"));
    let big = src.join("big");
    rewrite_keeping_size_and_mtime(&small);
    rewrite_keeping_size_and_mtime(&big);
    let in_dst = |p: &Path| dst("d").join(p.strip_prefix(src).unwrap());
    // The quick check does not see it.
    let quick = copy(&["--json"], "d");
    assert_ok(&quick, None);
    assert_eq!(counts(&report(&quick)), (0, files, 0, 0));
    assert_ne!(
        std::fs::read(in_dst(&small)).unwrap(),
        std::fs::read(&small).unwrap()
    );
    // A dry run with --checksum does, and changes nothing.
    let dry = copy(&["--json", "--dry-run", "--checksum"], "d");
    assert_ok(&dry, None);
    let plan = report(&dry);
    assert_eq!(
        (
            plan["send"].as_u64(),
            plan["attrs"].as_u64(),
            plan["up_to_date"].as_u64()
        ),
        (Some(2), Some(0), Some(files - 2)),
        "{plan}"
    );
    assert_ne!(
        std::fs::read(in_dst(&small)).unwrap(),
        std::fs::read(&small).unwrap()
    );
    // --checksum sends those two files, nothing else.
    let summed = copy(&["--json", "-c"], "d");
    assert_ok(&summed, None);
    assert_eq!(
        counts(&report(&summed)),
        (2, files - 2, 0, 3000 + (5 << 20))
    );
    assert_trees_equal(src, &dst("d"));

    // Same content, another mtime: only the attributes are set (its bytes are not sent).
    let touched = src.join("small/d001/f00100.bin");
    set_mtime(
        &touched,
        SystemTime::UNIX_EPOCH + Duration::new(1_500_000_000, 123_456_789),
    );
    let dry = copy(&["--json", "--dry-run", "--checksum"], "d");
    assert_ok(&dry, None);
    let plan = report(&dry);
    assert_eq!(
        (plan["send"].as_u64(), plan["attrs"].as_u64()),
        (Some(0), Some(1)),
        "{plan}"
    );
    let fixed = copy(&["--json", "--checksum"], "d");
    assert_ok(&fixed, None);
    assert_eq!(counts(&report(&fixed)), (0, files - 1, 1, 0));
    assert_eq!(report(&fixed)["bytes_not_sent"].as_u64(), Some(total));
    assert_trees_equal(src, &dst("d"));
}

/// A scenario of copying again: `copy(extra, dst_name)` copies `src` into the destination
/// named, `dst(dst_name)` is where that lands on disk.
type Scenario =
    fn(&Path, &dyn Fn(&[&str], &str) -> std::process::Output, &dyn Fn(&str) -> std::path::PathBuf);

/// The directions a scenario runs in.
enum Way {
    Local,
    Push,
    Pull,
    ThirdParty,
}

/// Runs `scenario` in one direction, with the servers it needs.
fn run_in(way: Way, scenario: Scenario) {
    let t = tmp();
    match way {
        Way::Local => {
            let (src, dst) = (t.path().join("src"), t.path().join("dst"));
            scenario(
                &src,
                &|extra, name| cp_local(extra, &src, dst.join(name)),
                &|name| dst.join(name),
            );
        }
        Way::Push => {
            let (src, root) = (t.path().join("src"), t.path().join("root"));
            let srv = server(&root);
            let url = |name: &str| format!("sprat://{}/{name}", srv.addr());
            scenario(
                &src,
                &|extra, name| cp(&srv, extra, &src, url(name)),
                &|name| root.join(name),
            );
        }
        Way::Pull => {
            let root = t.path().join("root");
            let (src, dst) = (root.join("data"), t.path().join("dst"));
            let srv = server(&root);
            let url = format!("sprat://{}/data", srv.addr());
            scenario(
                &src,
                &|extra, name| cp(&srv, extra, &url, dst.join(name)),
                &|name| dst.join(name),
            );
        }
        Way::ThirdParty => {
            let (root_a, root_b) = (t.path().join("a"), t.path().join("b"));
            let src = root_a.join("data");
            let (a, b) = (server(&root_a), server(&root_b));
            let from = format!("sprat://{}/data", a.addr());
            scenario(
                &src,
                &|extra, name| cp(&a, extra, &from, format!("sprat://{}/{name}", b.addr())),
                &|name| root_b.join(name),
            );
        }
    }
}

fn first_file(dir: &Path) -> std::path::PathBuf {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                return e.path();
            }
        }
    }
    panic!("no file under {}", dir.display());
}

#[test]
fn a_push_again_sends_only_what_changed() {
    run_in(Way::Push, scenario);
}

/// A push of one small file through a path of 50 ms round trips sends it before the
/// destination's listing is in (protocol 14), and the server checks it itself: each case
/// must end as a push that waited would (the counts of the report, the file's content and
/// mode). A larger file waits for the listing.
#[test]
fn a_single_small_file_sent_before_the_listing_is_checked_by_the_server() {
    let t = tmp();
    let src = t.path().join("src");
    let root = t.path().join("root");
    std::fs::create_dir_all(&src).unwrap();
    let srv = server(&root);
    let relay = RelayProc::start(srv.addr(), &["--delay", "25ms"]);
    let push = |name: &str, extra: &[&str]| {
        let url = format!("sprat://{}/{name}", relay.addr);
        let mut args = vec!["--json"];
        args.extend_from_slice(extra);
        let out = cp(&srv, &args, src.join(name), url);
        assert_ok(&out, Some(&srv));
        counts(&report(&out))
    };
    for (name, size) in [("small", 4096usize), ("large", 64 << 10)] {
        let data = tree::random_bytes(size, 7);
        let f = src.join(name);
        tree::make_file(&f, &data, 0o644);
        let copy = root.join(name);
        let n = size as u64;
        // New, then up to date.
        assert_eq!(push(name, &[]), (1, 0, 0, n), "{name}");
        assert_eq!(push(name, &[]), (0, 1, 0, 0), "{name}");
        // Another content of the same size and mtime: the quick check keeps it.
        rewrite_keeping_size_and_mtime(&copy);
        let kept = std::fs::read(&copy).unwrap();
        assert_ne!(kept, data);
        assert_eq!(push(name, &[]), (0, 1, 0, 0), "{name}");
        assert_eq!(std::fs::read(&copy).unwrap(), kept, "{name}");
        // A mode alone differs: only it is set.
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(push(name, &[]), (0, 0, 1, 0), "{name}");
        let mode = std::fs::metadata(&copy).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o644, "{name}");
        assert_eq!(std::fs::read(&copy).unwrap(), kept, "{name}");
        // --ignore-existing keeps it; --ignore-times sends it again.
        assert_eq!(push(name, &["--ignore-existing"]), (0, 1, 0, 0), "{name}");
        assert_eq!(std::fs::read(&copy).unwrap(), kept, "{name}");
        assert_eq!(push(name, &["--ignore-times"]), (1, 0, 0, n), "{name}");
        assert_eq!(std::fs::read(&copy).unwrap(), data, "{name}");
        // A new mtime: sent.
        set_mtime(&f, SystemTime::now() - Duration::from_secs(3600));
        assert_eq!(push(name, &[]), (1, 0, 0, n), "{name}");
        assert_eq!(std::fs::read(&copy).unwrap(), data, "{name}");
        let mtime = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
        assert_eq!(mtime(&copy), mtime(&f), "{name}");
    }
}

#[test]
fn a_local_copy_again_sends_only_what_changed() {
    run_in(Way::Local, scenario);
}

#[test]
fn a_pull_again_sends_only_what_changed() {
    run_in(Way::Pull, scenario);
}

#[test]
fn a_third_party_copy_again_sends_only_what_changed() {
    run_in(Way::ThirdParty, scenario);
}

/// A dry run of a single file (rsync's `-n FILE DST`) says whether its copy would send it,
/// with the copy's own check, where the copy would put it: DST, or DST/NAME in an existing
/// directory (a pull asks the server what its source is then). Locally, pushed, pulled and
/// between two servers: a new file would be sent, one copied already is up to date, one
/// changed in place at the same size and mtime is up to date to the quick check and sent by
/// `-c`. Before, a dry run of a single file was refused ("--dry-run compares trees").
#[test]
fn a_dry_run_of_a_single_file_says_what_its_copy_would_do() {
    let t = tmp();
    let root = t.path().join("root");
    std::fs::create_dir_all(root.join("in")).unwrap();
    let srv = server(&root);
    let f = t.path().join("f");
    tree::make_file(&f, b"a single file to check", 0o644);
    tree::make_file(&root.join("f"), b"a single file to check", 0o644);
    let (here, pulled_into) = (t.path().join("here"), t.path().join("pulled-into"));
    std::fs::create_dir_all(&here).unwrap();
    std::fs::create_dir_all(&pulled_into).unwrap();
    let remote_f = srv.url("f");
    // (source, destination as named, where the copy puts the file, through the server).
    let cases: Vec<(
        std::ffi::OsString,
        std::ffi::OsString,
        std::path::PathBuf,
        bool,
    )> = vec![
        (
            f.clone().into(),
            t.path().join("g").into(),
            t.path().join("g"),
            false,
        ),
        (f.clone().into(), here.clone().into(), here.join("f"), false),
        (
            f.clone().into(),
            srv.url("new").into(),
            root.join("new"),
            true,
        ),
        (
            f.clone().into(),
            srv.url("in").into(),
            root.join("in/f"),
            true,
        ),
        (
            remote_f.clone().into(),
            t.path().join("p").into(),
            t.path().join("p"),
            true,
        ),
        (
            remote_f.clone().into(),
            pulled_into.clone().into(),
            pulled_into.join("f"),
            true,
        ),
        (
            remote_f.clone().into(),
            srv.url("third").into(),
            root.join("third"),
            true,
        ),
    ];
    let dry = |extra: &[&str], from: &std::ffi::OsStr, to: &std::ffi::OsStr, remote: bool| {
        let args: Vec<&str> = ["-n", "--json"].iter().chain(extra).copied().collect();
        let out = match remote {
            true => cp(&srv, &args, from, to),
            false => cp_local(&args, from, to),
        };
        assert_ok(&out, remote.then_some(&srv));
        let r = report(&out);
        assert_eq!(r["dry_run"], true, "{r}");
        (
            r["send"].as_u64().unwrap(),
            r["up_to_date"].as_u64().unwrap(),
        )
    };
    for (from, to, lands, remote) in &cases {
        let what = format!("{from:?} -> {to:?}");
        assert_eq!(dry(&[], from, to, *remote), (1, 0), "new: {what}");
        assert!(!lands.exists(), "a dry run wrote {lands:?}");
        let out = match remote {
            true => cp(&srv, &[], from, to),
            false => cp_local(&[], from, to),
        };
        assert_ok(&out, remote.then_some(&srv));
        assert_eq!(
            std::fs::read(lands).unwrap(),
            b"a single file to check",
            "{what}"
        );
        assert_eq!(dry(&[], from, to, *remote), (0, 1), "copied: {what}");
        rewrite_keeping_size_and_mtime(lands);
        assert_eq!(dry(&[], from, to, *remote), (0, 1), "quick check: {what}");
        assert_eq!(dry(&["-c"], from, to, *remote), (1, 0), "checksum: {what}");
        assert_ne!(std::fs::read(lands).unwrap(), b"a single file to check");
    }
    // Onto a directory of its name, which its copy would not replace: refused as the copy
    // is, locally and pushed (it said "send").
    std::fs::create_dir_all(here.join("d/f")).unwrap();
    std::fs::create_dir_all(root.join("in2/f")).unwrap();
    let local = cp_local(&["-n"], &f, here.join("d"));
    let pushed = cp(&srv, &["-n"], &f, srv.url("in2"));
    for out in [local, pushed] {
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}",
            sprat_testkit::describe(&out)
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("is a directory"));
    }
}

#[test]
fn a_push_with_checksum_sends_what_the_quick_check_misses() {
    run_in(Way::Push, checksum_scenario);
}

#[test]
fn a_local_copy_with_checksum_sends_what_the_quick_check_misses() {
    run_in(Way::Local, checksum_scenario);
}

#[test]
fn a_pull_with_checksum_sends_what_the_quick_check_misses() {
    run_in(Way::Pull, checksum_scenario);
}

#[test]
fn a_third_party_copy_with_checksum_sends_what_the_quick_check_misses() {
    run_in(Way::ThirdParty, checksum_scenario);
}

#[test]
fn checksum_with_ignore_times_or_ignore_existing_is_a_usage_error() {
    let t = tmp();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    tree::make_file(&src.join("f"), b"x", 0o644);
    for (other, name) in [
        ("--ignore-times", "--ignore-times"),
        ("-I", "--ignore-times"),
        ("--ignore-existing", "--ignore-existing"),
    ] {
        let out = cp_local(&["--checksum", other], &src, t.path().join("d"));
        assert_eq!(out.status.code(), Some(2), "{other}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--checksum") && err.contains(name), "{err}");
        assert!(
            !t.path().join("d").exists(),
            "{other}: something was copied"
        );
    }
}

#[test]
fn a_pull_again_into_a_destination_indexed_in_many_pieces_sends_only_what_changed() {
    // 3,000 files with names of 150 bytes: the destination's index (and, with --checksum,
    // its digests) goes to the server in several pieces as the scan of the destination
    // makes them, each piece 256 KiB at most.
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("data");
    let files = 3000;
    for d in 0..10 {
        std::fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
    }
    for n in 0..files {
        let name = format!("d{}/f{n:04}-{}", n % 10, "n".repeat(140));
        tree::make_file(&src.join(name), format!("file {n}").as_bytes(), 0o644);
    }
    let srv = server(&root);
    let url = format!("sprat://{}/data", srv.addr());
    let dst = t.path().join("dst");
    let first = cp(&srv, &["--json"], &url, &dst);
    assert_ok(&first, Some(&srv));
    assert_eq!(counts(&report(&first)).0, files);

    let again = cp(&srv, &["--json"], &url, &dst);
    assert_ok(&again, Some(&srv));
    assert_eq!(counts(&report(&again)), (0, files, 0, 0));

    // The last file the scan of the destination meets is as likely as any to change.
    let changed = src.join(format!("d9/f2999-{}", "n".repeat(140)));
    tree::make_file(&changed, b"changed!!", 0o644);
    set_mtime(
        &changed,
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000),
    );
    let one = cp(&srv, &["--json"], &url, &dst);
    assert_ok(&one, Some(&srv));
    assert_eq!(counts(&report(&one)), (1, files - 1, 0, 9));

    let summed = cp(&srv, &["--json", "--checksum"], &url, &dst);
    assert_ok(&summed, Some(&srv));
    assert_eq!(counts(&report(&summed)), (0, files, 0, 0));
    assert_trees_equal(&src, &dst);
}

/// Every regular file below `dir`.
fn files_below(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// `--size-only` and `-u`, in the four directions: a destination whose files another tool
/// copied without their mtimes has only its attributes set with `--size-only` (no byte
/// travels), a file of another size is sent; with `-u` a file newer at the destination is
/// left alone, one older is sent.
fn size_only_and_update_scenario(
    src: &Path,
    copy: &dyn Fn(&[&str], &str) -> std::process::Output,
    dst: &dyn Fn(&str) -> std::path::PathBuf,
) {
    tree::make_many_files(&src.join("small"), 120, 2000, 8);
    // Larger than a chunk: travels in chunks when sent.
    tree::make_file(&src.join("big"), &tree::random_bytes(5 << 20, 9), 0o644);
    let files = 121;
    assert_ok(&copy(&["--json"], "d"), None);
    let in_dst = |p: &Path| dst("d").join(p.strip_prefix(src).unwrap());

    // Every destination file gets another mtime, as `scp -r` would have left it.
    let copied_at = SystemTime::UNIX_EPOCH + Duration::new(2_000_000_000, 0);
    for f in files_below(&dst("d")) {
        set_mtime(&f, copied_at);
    }
    // The quick check would send every file again; --size-only sends none, only the mtimes.
    let dry = copy(&["--json", "--dry-run"], "d");
    assert_ok(&dry, None);
    assert_eq!(
        report(&dry)["send"].as_u64(),
        Some(files),
        "{}",
        report(&dry)
    );
    let dry = copy(&["--json", "--dry-run", "--size-only"], "d");
    assert_ok(&dry, None);
    let plan = report(&dry);
    assert_eq!(
        (plan["send"].as_u64(), plan["attrs"].as_u64()),
        (Some(0), Some(files)),
        "{plan}"
    );
    let sized = copy(&["--json", "--size-only"], "d");
    assert_ok(&sized, None);
    assert_eq!(counts(&report(&sized)), (0, 0, files, 0));
    assert_trees_equal(src, &dst("d"));

    // A file of another size is sent; a change that kept the size is not (it is what
    // --size-only means).
    let grown = first_file(&src.join("small"));
    std::fs::write(&grown, vec![7u8; 2100]).unwrap();
    let big = src.join("big");
    rewrite_keeping_size_and_mtime(&big);
    let sized = copy(&["--json", "--size-only"], "d");
    assert_ok(&sized, None);
    // The grown file is sent; its mtime changed too, so no attributes to fix elsewhere.
    assert_eq!(counts(&report(&sized)), (1, files - 1, 0, 2100));
    assert_eq!(std::fs::read(in_dst(&grown)).unwrap(), vec![7u8; 2100]);
    assert_ne!(
        std::fs::read(in_dst(&big)).unwrap(),
        std::fs::read(&big).unwrap()
    );
    // The quick check does not see the big file's change either (same size and mtime);
    // -I puts it right for what follows.
    assert_ok(&copy(&["--json", "-I"], "d"), None);
    assert_trees_equal(src, &dst("d"));

    // -u: the destination's copy changed later than the source's is kept...
    let kept = in_dst(&grown);
    std::fs::write(&kept, b"edited at the destination").unwrap();
    set_mtime(
        &kept,
        SystemTime::UNIX_EPOCH + Duration::new(2_100_000_000, 0),
    );
    // ...and a source file changed later than its copy is sent.
    let other = files_below(&src.join("small"))
        .into_iter()
        .find(|f| *f != grown)
        .unwrap();
    std::fs::write(&other, vec![9u8; 2000]).unwrap();
    set_mtime(
        &other,
        SystemTime::UNIX_EPOCH + Duration::new(2_050_000_000, 0),
    );
    let updated = copy(&["--json", "-u"], "d");
    assert_ok(&updated, None);
    assert_eq!(counts(&report(&updated)), (1, files - 1, 0, 2000));
    assert_eq!(std::fs::read(&kept).unwrap(), b"edited at the destination");
    assert_eq!(std::fs::read(in_dst(&other)).unwrap(), vec![9u8; 2000]);
    // Without -u the quick check sends the source's version back.
    let plain = copy(&["--json"], "d");
    assert_ok(&plain, None);
    assert_eq!(counts(&report(&plain)).0, 1);
    assert_trees_equal(src, &dst("d"));
}

#[test]
fn size_only_and_update_in_a_local_copy() {
    run_in(Way::Local, size_only_and_update_scenario);
}

#[test]
fn size_only_and_update_in_a_push() {
    run_in(Way::Push, size_only_and_update_scenario);
}

#[test]
fn size_only_and_update_in_a_pull() {
    run_in(Way::Pull, size_only_and_update_scenario);
}

#[test]
fn size_only_and_update_in_a_third_party_copy() {
    run_in(Way::ThirdParty, size_only_and_update_scenario);
}

#[test]
fn size_only_and_update_exclude_the_other_rules() {
    let t = tmp();
    let src = t.path().join("src");
    std::fs::create_dir(&src).unwrap();
    tree::make_file(&src.join("f"), b"x", 0o644);
    for (rule, other) in [
        ("--size-only", "-c"),
        ("--size-only", "-I"),
        ("--size-only", "--ignore-existing"),
        ("-u", "--size-only"),
        ("--update", "--checksum"),
        ("-u", "--ignore-times"),
    ] {
        let out = cp_local(&[rule, other], &src, t.path().join("d"));
        assert_eq!(out.status.code(), Some(2), "{rule} {other}");
        assert!(!t.path().join("d").exists(), "{rule} {other}: copied");
    }
}

/// `-H` with a rule that keeps what the destination has (`-u`, `--ignore-existing`,
/// `--size-only`): a name of a hard-linked file that the rule leaves alone is not linked again
/// (which replaced its content), in a local copy, a push and a pull; the new name arrives.
#[test]
fn hard_links_do_not_replace_what_a_keeping_rule_leaves_alone() {
    let t = tmp();
    let root = t.path().join("root");
    let srv = server(&root);
    for (i, rule) in ["-u", "--ignore-existing", "--size-only"]
        .iter()
        .enumerate()
    {
        for how in ["local", "push", "pull"] {
            let case = format!("{how}{i}");
            let src = match how {
                "pull" => root.join(format!("src-{case}")),
                _ => t.path().join(format!("src-{case}")),
            };
            std::fs::create_dir_all(&src).unwrap();
            // Both names in each order of the scan: whichever comes first carries the data.
            for (a, b) in [("a1", "b1"), ("b2", "a2")] {
                std::fs::write(src.join(a), b"SOURCE!").unwrap();
                std::fs::hard_link(src.join(a), src.join(b)).unwrap();
                set_mtime(
                    &src.join(a),
                    SystemTime::UNIX_EPOCH + Duration::new(1_600_000_000, 0),
                );
            }
            let dst = match how {
                "push" => root.join(format!("dst-{case}")),
                _ => t.path().join(format!("dst-{case}")),
            };
            std::fs::create_dir_all(&dst).unwrap();
            // The destination has each `a` name, newer and of the same size, other content.
            for a in ["a1", "a2"] {
                std::fs::write(dst.join(a), b"KEEP ME").unwrap();
                set_mtime(
                    &dst.join(a),
                    SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 0),
                );
            }
            let url = |p: &Path| {
                format!(
                    "sprat://{}/{}",
                    srv.addr(),
                    p.file_name().unwrap().to_string_lossy()
                )
            };
            let out = match how {
                "local" => cp_local(&["-H", rule], &src, &dst),
                "push" => cp(&srv, &["-H", rule], &src, url(&dst)),
                _ => cp(&srv, &["-H", rule], url(&src), &dst),
            };
            assert_ok(&out, Some(&srv));
            for (a, b) in [("a1", "b1"), ("a2", "b2")] {
                assert_eq!(
                    std::fs::read(dst.join(a)).unwrap(),
                    b"KEEP ME",
                    "{how} {rule} {a}"
                );
                assert_eq!(
                    std::fs::read(dst.join(b)).unwrap(),
                    b"SOURCE!",
                    "{how} {rule} {b}"
                );
            }
        }
    }
}

/// `--ignore-existing` when files appear at the destination during the copy, after the
/// sender looked (a small file, and a large one sent in chunks or copied inside the kernel):
/// the writer keeps them, `-v` does not list them, and the report counts them as left alone,
/// not as copied; no partial copy is left. Before, they were kept but reported as copied with
/// their bytes (review 2026-11-29 of `--ignore-existing`, #2). Local copy, push and pull.
#[test]
fn files_that_appear_during_an_ignore_existing_copy_are_left_alone_and_counted_so() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    for i in 0..40 {
        let data = sprat_testkit::random_bytes(100_000, i);
        std::fs::write(src.join(format!("a/{i:02}")), data).unwrap();
    }
    // Listed once `a` is (the scan finds it there): sent after everything in `a`.
    std::fs::create_dir(src.join("a/z")).unwrap();
    std::fs::write(src.join("a/z/small"), b"the source's small file").unwrap();
    std::fs::write(
        src.join("a/z/big"),
        sprat_testkit::random_bytes(3 << 20, 99),
    )
    .unwrap();
    let srv = server(&root);
    let pull_dst = t.path().join("pulled");
    for (how, dst) in [
        ("local", t.path().join("local")),
        ("push", root.join("pushed")),
        ("pull", pull_dst.clone()),
    ] {
        // Once the copy has begun (the sender's look at the destination is over), files
        // appear at two names the sender will send.
        let planter = {
            let dst = dst.clone();
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                let has_a_file = || {
                    std::fs::read_dir(dst.join("a")).is_ok_and(|mut d| {
                        d.any(|e| e.is_ok_and(|e| e.file_type().is_ok_and(|t| t.is_file())))
                    })
                };
                while !has_a_file() {
                    assert!(std::time::Instant::now() < deadline, "the copy never began");
                    std::thread::sleep(Duration::from_millis(2));
                }
                let _ = std::fs::create_dir(dst.join("a/z"));
                // Never over what the copy wrote already.
                let plant = |name: &str, data: &[u8]| {
                    let mut f = std::fs::File::options()
                        .write(true)
                        .create_new(true)
                        .open(dst.join(name))
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                    std::io::Write::write_all(&mut f, data).unwrap();
                };
                plant("a/z/small", b"planted");
                plant("a/z/big", b"planted big");
            })
        };
        let args = [
            "-v",
            "--ignore-existing",
            "--bwlimit",
            "2MB/s",
            "--small-file-threshold",
            "1MiB",
            "--chunk-size",
            "1MiB",
        ];
        let out = match how {
            "local" => cp_local(&args, &src, &dst),
            "push" => cp(&srv, &args, &src, srv.url("pushed")),
            _ => cp(&srv, &args, srv.url("src"), &pull_dst),
        };
        planter.join().unwrap();
        assert_ok(&out, Some(&srv));
        let why = format!("{how}: {}", sprat_testkit::describe(&out));
        let planted = |name: &str| std::fs::read(dst.join("a/z").join(name)).unwrap();
        assert_eq!(planted("small"), b"planted", "{why}");
        assert_eq!(planted("big"), b"planted big", "{why}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.lines().any(|l| l.starts_with("a/z/")), "{why}");
        assert_eq!(
            text.lines().filter(|l| l.starts_with("a/")).count(),
            40,
            "{why}"
        );
        assert!(text.contains("  40 files, "), "{why}");
        assert!(
            text.contains("left alone, being at the destination (--ignore-existing): 2 files"),
            "{why}"
        );
        assert_eq!(names_in(&dst.join("a/z")), ["big", "small"], "{why}");
    }
}

/// A large file's partial copy left by an interrupted run, when the file then appears at the
/// destination from elsewhere: `--ignore-existing` keeps that file, so the partial copy is of
/// no use, and `--ignore-existing --delete` removes it (before, nothing ever did: review
/// 2026-11-29 of `--ignore-existing`, #4). Local copy and push.
#[test]
fn ignore_existing_with_delete_removes_the_partial_copy_of_a_file_it_keeps() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big"), sprat_testkit::random_bytes(12 << 20, 5)).unwrap();
    std::fs::write(src.join("small"), b"small").unwrap();
    let srv = server(&root);
    let chunked = common::CHUNKED;
    for (how, dst) in [
        ("local", t.path().join("local")),
        ("push", root.join("pushed")),
    ] {
        let target = match how {
            "local" => dst.as_os_str().to_owned(),
            _ => srv.url("pushed").into(),
        };
        let server = (how == "push").then_some(&srv);
        common::interrupt_once_a_partial_copy_is_written(server, &chunked, &src, &target, &dst);
        std::fs::write(dst.join("big"), b"from elsewhere").unwrap();
        let mut extra = vec!["--ignore-existing", "--delete"];
        extra.extend_from_slice(&chunked);
        let out = match how {
            "local" => cp_local(&extra, &src, &dst),
            _ => cp(&srv, &extra, &src, srv.url("pushed")),
        };
        assert_ok(&out, Some(&srv));
        let why = format!("{how}: {}", sprat_testkit::describe(&out));
        assert_eq!(
            std::fs::read(dst.join("big")).unwrap(),
            b"from elsewhere",
            "{why}"
        );
        assert_eq!(names_in(&dst), ["big", "small"], "{why}");
    }
}

/// A re-run leaves a symlink the destination has already (same target and mtime) as it is,
/// as rsync does, and counts none made; one whose target changed at the source is made
/// again. Before, every run made every symlink anew (a new inode each time, and the report
/// counted them all). Local copy, push and pull.
#[test]
fn a_re_run_leaves_symlinks_that_are_up_to_date_and_remakes_changed_ones() {
    use std::os::unix::fs::MetadataExt;
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("f"), b"f").unwrap();
    std::os::unix::fs::symlink("f", src.join("same")).unwrap();
    std::os::unix::fs::symlink("f", src.join("changes")).unwrap();
    std::os::unix::fs::symlink("../f", src.join("d/deep")).unwrap();
    let srv = server(&root);
    let pulled = t.path().join("pulled");
    let runs: [(&str, std::path::PathBuf); 3] = [
        ("local", t.path().join("local")),
        ("push", root.join("pushed")),
        ("pull", pulled.clone()),
    ];
    let copy = |how: &str| match how {
        "local" => cp_local(&["--json"], &src, t.path().join("local")),
        "push" => cp(&srv, &["--json"], &src, srv.url("pushed")),
        _ => cp(&srv, &["--json"], srv.url("src"), &pulled),
    };
    for (how, dst) in &runs {
        assert_ok(&copy(how), Some(&srv));
        let ino = |name: &str| std::fs::symlink_metadata(dst.join(name)).unwrap().ino();
        let before = (ino("same"), ino("d/deep"));
        let out = copy(how);
        assert_ok(&out, Some(&srv));
        let why = format!("{how}: {}", sprat_testkit::describe(&out));
        assert_eq!(report(&out)["symlinks"], 0, "{why}");
        assert_eq!((ino("same"), ino("d/deep")), before, "{why}");
    }
    std::fs::remove_file(src.join("changes")).unwrap();
    std::os::unix::fs::symlink("d", src.join("changes")).unwrap();
    for (how, dst) in &runs {
        let out = copy(how);
        assert_ok(&out, Some(&srv));
        let why = format!("{how}: {}", sprat_testkit::describe(&out));
        assert_eq!(report(&out)["symlinks"], 1, "{why}");
        let target = std::fs::read_link(dst.join("changes")).unwrap();
        assert_eq!(target, std::path::Path::new("d"), "{why}");
        assert_trees_equal(&src, dst);
    }
}

/// Two processes copying the same large file into one destination at once (a push through a
/// server, and a local copy beside it that sends the file whole): the second writes it with
/// the first instead of removing the partial copy the first is writing, and both succeed.
/// Before, the second removed it, and the first failed at its end (review 2026-11-29 of the
/// session's later changes, F1).
#[test]
fn a_second_process_writing_the_same_large_file_joins_the_first() {
    let t = tmp();
    let root = t.path().join("root");
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let data = sprat_testkit::random_bytes(12 << 20, 12);
    std::fs::write(src.join("big"), &data).unwrap();
    let srv = server(&root);
    let chunked = common::CHUNKED;
    let dst = root.join("shared");
    // The first ends first (before, it then found its partial copy gone, the second's not
    // complete yet, and failed).
    let url = srv.url("shared");
    let to = (&src, url.as_ref(), dst.as_path());
    let mut first = common::copy_writing_a_partial_copy(Some(&srv), &chunked, to, "4MB/s");
    let mut extra = vec!["--ignore-times", "--bwlimit", "1500kB/s"];
    extra.extend_from_slice(&chunked);
    let second = cp_local(&extra, &src, &dst);
    let first = first.wait_or_panic(Duration::from_secs(60));
    assert_ok(&second, Some(&srv));
    assert_ok(&first, Some(&srv));
    assert_eq!(std::fs::read(dst.join("big")).unwrap(), data);
    assert_eq!(names_in(&dst), ["big"]);
}

/// Two pushes of the same large file to one server at once share its partial copy: both
/// succeed, and each counts the file once, whichever put it in place (before, the one whose
/// last chunk came first reported 0 files; review 2026-11-29 of the fixes, F4), and neither
/// says an interrupted copy had written what it did not send.
#[test]
fn two_pushes_of_one_large_file_at_once_each_count_it() {
    let t = tmp();
    let root = t.path().join("root");
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let data = sprat_testkit::random_bytes(12 << 20, 13);
    std::fs::write(src.join("big"), &data).unwrap();
    let srv = server(&root);
    let chunked: Vec<&str> = ["--json"].iter().chain(&common::CHUNKED).copied().collect();
    let dst = root.join("shared");
    let url = srv.url("shared");
    let to = (&src, url.as_ref(), dst.as_path());
    let mut first = common::copy_writing_a_partial_copy(Some(&srv), &chunked, to, "4MB/s");
    let mut extra = vec!["--bwlimit", "3MB/s"];
    extra.extend_from_slice(&chunked);
    let second = cp(&srv, &extra, &src, srv.url("shared"));
    let first = first.wait_or_panic(Duration::from_secs(60));
    for out in [&first, &second] {
        assert_ok(out, Some(&srv));
        assert_eq!(report(out)["files"], 1, "{}", sprat_testkit::describe(out));
    }
    assert_eq!(std::fs::read(dst.join("big")).unwrap(), data);
    assert_eq!(names_in(&dst), ["big"]);
}

/// A partial copy an interrupted copy left of a large file goes once a later copy succeeds
/// without it: when the file arrives whole as a small file (a new, smaller version), and when
/// the file is up to date already (debris of an older run). Before, both stayed for ever,
/// listed as an incomplete file and taking their room (review 2026-11-29 of the session's
/// later changes, F4). Local copy, push and pull, over one server and over two, and a copy
/// between two servers (whose source server names them to its client from protocol 22:
/// before, they stayed).
#[test]
fn a_partial_copy_of_a_file_that_arrived_whole_goes_once_the_copy_succeeds() {
    let t = tmp();
    let root = t.path().join("root");
    let (srv, also) = (server(&root), server(&root));
    let both = |path: &str| format!("sprat://{},{}/{path}", srv.addr(), also.addr());
    let chunked = common::CHUNKED;
    let kinds = [
        "local",
        "push",
        "pull",
        "spread-push",
        "spread-pull",
        "third-party",
    ];
    for how in kinds {
        let src = root.join(format!("src-{how}"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("big"), sprat_testkit::random_bytes(12 << 20, 4)).unwrap();
        std::fs::write(src.join("other"), b"other").unwrap();
        let (src_url, dst_name) = (format!("src-{how}"), format!("dst-{how}"));
        // A copy between two servers, interrupted as a push to the destination's.
        let pushed = how.ends_with("push") || how == "third-party";
        let dst = match pushed {
            true => root.join(&dst_name),
            false => t.path().join(&dst_name),
        };
        // Interrupted through one server; copied again through the same, or through both.
        let (from, to): (std::ffi::OsString, std::ffi::OsString) = match how {
            "local" => (src.clone().into(), dst.clone().into()),
            _ if pushed => (src.clone().into(), srv.url(&dst_name).into()),
            _ => (srv.url(&src_url).into(), dst.clone().into()),
        };
        let (again_from, again_to) = match how {
            "spread-push" => (from.clone(), both(&dst_name).into()),
            "spread-pull" => (both(&src_url).into(), to.clone()),
            "third-party" => (srv.url(&src_url).into(), also.url(&dst_name).into()),
            _ => (from.clone(), to.clone()),
        };
        let server = (how != "local").then_some(&srv);
        common::interrupt_once_a_partial_copy_is_written(server, &chunked, &from, &to, &dst);
        let hidden = [".big.sprat-part", ".big.sprat-part.log"];
        let kept = t.path().join(format!("kept-{how}"));
        std::fs::create_dir_all(&kept).unwrap();
        for name in hidden {
            std::fs::copy(dst.join(name), kept.join(name)).unwrap();
        }
        // A new version, small: it travels whole.
        std::fs::write(src.join("big"), b"small now").unwrap();
        let copy = |extra: &[&str]| match server {
            Some(srv) => cp(srv, extra, &again_from, &again_to),
            None => cp_local(extra, &again_from, &again_to),
        };
        let out = copy(&chunked);
        assert_ok(&out, server);
        assert_eq!(names_in(&dst), ["big", "other"], "{how}");
        assert_eq!(std::fs::read(dst.join("big")).unwrap(), b"small now");
        // The same partial copy put back beside the up-to-date file: the next run finds
        // nothing to copy, and removes it (a pull's server, which decides what is sent, tells
        // its client which partial copies it did not resume: from protocol 21; before, a
        // pull from one server left it).
        for name in hidden {
            std::fs::copy(kept.join(name), dst.join(name)).unwrap();
        }
        let out = copy(&["--json"]);
        assert_ok(&out, server);
        assert_eq!(report(&out)["files"], 0, "{how}");
        assert_eq!(names_in(&dst), ["big", "other"], "{how}");
    }
}

/// A pull removes only the partial copies of files it put in place: one another transfer
/// left of a file this pull does not cover (another source, a file it excludes, a file
/// deleted at its source) stays for that transfer to resume, even where a file of that name
/// is there (review 2026-11-29 of the session's fixes, M2).
#[test]
fn a_pull_keeps_the_partial_copies_of_files_it_does_not_copy() {
    let t = tmp();
    let root = t.path().join("root");
    let srv = server(&root);
    let chunked = common::CHUNKED;
    let (a, b) = (root.join("a"), root.join("b"));
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(b.join("small"), b"b's").unwrap();
    std::fs::create_dir_all(&a).unwrap();
    std::fs::write(a.join("big"), sprat_testkit::random_bytes(12 << 20, 6)).unwrap();
    std::fs::write(a.join("small"), b"a's").unwrap();
    let dst = t.path().join("shared");
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::write(dst.join("big"), b"the user's old big").unwrap();
    let to: std::ffi::OsString = dst.clone().into();
    let from_a: std::ffi::OsString = srv.url("a").into();
    common::interrupt_once_a_partial_copy_is_written(Some(&srv), &chunked, &from_a, &to, &dst);
    let hidden = [".big.sprat-part", ".big.sprat-part.log"].map(String::from);
    let kept = || hidden.iter().all(|h| names_in(&dst).contains(h));
    assert!(kept(), "{:?}", names_in(&dst));
    let list = t.path().join("list");
    std::fs::write(&list, "small\n").unwrap();
    let list = list.to_str().unwrap();
    let runs: [(&[&str], String); 3] = [
        (&[], srv.url("b")),
        (&["--exclude", "big"], srv.url("a")),
        (&["--files-from", list], srv.url("a")),
    ];
    for (extra, from) in runs {
        let out = cp(&srv, extra, &from, &to);
        assert_ok(&out, Some(&srv));
        assert!(kept(), "{extra:?} {from}: {:?}", names_in(&dst));
        assert_eq!(
            std::fs::read(dst.join("big")).unwrap(),
            b"the user's old big"
        );
    }
    // And the interrupted pull, run again, resumes it.
    let out = cp(&srv, &["--json"], &from_a, &to);
    assert_ok(&out, Some(&srv));
    assert!(
        report(&out)["bytes_not_sent"].as_u64().unwrap() > 0,
        "{}",
        sprat_testkit::describe(&out)
    );
    assert_eq!(names_in(&dst), ["big", "small"]);
}

/// The same for a single file copied on its own (`sprat cp FILE DST`), whose new small
/// version a push sends before the destination's listing is in: its partial copy goes too.
/// Also between two servers, the copy interrupted as a push to the destination's.
#[test]
fn a_single_files_partial_copy_goes_once_it_arrived_whole() {
    let t = tmp();
    let root = t.path().join("root");
    let (srv, also) = (server(&root), server(&root));
    let chunked = common::CHUNKED;
    for how in ["local", "push", "pull", "third-party"] {
        let src = root.join(format!("src-{how}"));
        std::fs::create_dir_all(&src).unwrap();
        let file = src.join("big");
        std::fs::write(&file, sprat_testkit::random_bytes(12 << 20, 5)).unwrap();
        let dir = match how {
            "push" | "third-party" => root.join(format!("dst-{how}")),
            _ => t.path().join(format!("dst-{how}")),
        };
        std::fs::create_dir_all(&dir).unwrap();
        let (from, to): (std::ffi::OsString, std::ffi::OsString) = match how {
            "local" => (file.clone().into(), dir.join("big").into()),
            "push" | "third-party" => (
                file.clone().into(),
                srv.url(&format!("dst-{how}/big")).into(),
            ),
            _ => (
                srv.url(&format!("src-{how}/big")).into(),
                dir.join("big").into(),
            ),
        };
        let server = (how != "local").then_some(&srv);
        common::interrupt_once_a_partial_copy_is_written(server, &chunked, &from, &to, &dir);
        std::fs::write(&file, b"small now").unwrap();
        let from: std::ffi::OsString = match how {
            "third-party" => srv.url(&format!("src-{how}/big")).into(),
            _ => from,
        };
        let to: std::ffi::OsString = match how {
            "third-party" => also.url(&format!("dst-{how}/big")).into(),
            _ => to,
        };
        let out = match server {
            Some(srv) => cp(srv, &chunked, &from, &to),
            None => cp_local(&chunked, &from, &to),
        };
        assert_ok(&out, server);
        assert_eq!(names_in(&dir), ["big"], "{how}");
        assert_eq!(std::fs::read(dir.join("big")).unwrap(), b"small now");
    }
}

/// A single file pulled into an existing directory (`sprat cp sprat://HOST/big DIR`), in the
/// one session that found it a file (protocol 22): an interrupted pull's partial copy in DIR
/// is resumed, and the next pull finds the file up to date; the same partial copy put back
/// beside it then goes (the server names it superseded). Through a relay of 10 ms, for the
/// scan of DIR to end before the client hears that the source is a file (which would stop
/// it, and send the pull to a second session for `DIR/big`).
#[test]
fn a_file_pulled_into_a_directory_resumes_and_is_then_up_to_date() {
    let t = tmp();
    let root = t.path().join("root");
    let srv = server(&root);
    let data = sprat_testkit::random_bytes(12 << 20, 8);
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/big"), &data).unwrap();
    let dir = t.path().join("dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("other"), b"the directory's own").unwrap();
    let from: std::ffi::OsString = srv.url("src/big").into();
    let to: std::ffi::OsString = dir.clone().into();
    let chunked = common::CHUNKED;
    common::interrupt_once_a_partial_copy_is_written(Some(&srv), &chunked, &from, &to, &dir);
    let hidden = [".big.sprat-part", ".big.sprat-part.log"];
    let kept = t.path().join("kept");
    std::fs::create_dir_all(&kept).unwrap();
    for name in hidden {
        std::fs::copy(dir.join(name), kept.join(name)).unwrap();
    }
    let relay = RelayProc::start(srv.addr(), &["--delay", "5ms"]);
    let from: std::ffi::OsString = relay.url("src/big").into();
    let args: Vec<&str> = chunked.iter().copied().chain(["--json"]).collect();
    let out = cp(&srv, &args, &from, &to);
    assert_ok(&out, Some(&srv));
    let resumed = report(&out);
    assert!(
        resumed["bytes_not_sent"].as_u64().unwrap() > 0,
        "{}",
        sprat_testkit::describe(&out)
    );
    assert_eq!(std::fs::read(dir.join("big")).unwrap(), data);
    assert_eq!(names_in(&dir), ["big", "other"]);
    for name in hidden {
        std::fs::copy(kept.join(name), dir.join(name)).unwrap();
    }
    let again = report(&cp(&srv, &["--json"], &from, &to));
    assert_eq!(
        (again["files"].as_u64(), again["up_to_date"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(names_in(&dir), ["big", "other"]);
}

/// `--checksum` on a single file pulled (to its own name or into a directory) or pushed: the
/// unchanged file is found up to date by its digest, not sent again. Before, a single file's
/// source took no digest (nor did a pulling client's index of one), and `--checksum` sent it
/// every time (third review of 2026-11-30, M2).
#[test]
fn a_single_file_pulled_with_checksum_is_not_sent_again_unchanged() {
    let t = tmp();
    let root = t.path().join("root");
    let srv = server(&root);
    std::fs::write(root.join("f"), sprat_testkit::random_bytes(100 << 10, 3)).unwrap();
    let dir = t.path().join("dir");
    std::fs::create_dir_all(&dir).unwrap();
    let local = t.path().join("local");
    std::fs::write(&local, sprat_testkit::random_bytes(100 << 10, 4)).unwrap();
    let copies: [(std::ffi::OsString, std::ffi::OsString); 3] = [
        (srv.url("f").into(), t.path().join("g").into()),
        (srv.url("f").into(), dir.into()),
        (local.into(), srv.url("pushed").into()),
    ];
    for (from, to) in copies {
        for run in 0..2 {
            let out = cp(&srv, &["--checksum", "--json"], &from, &to);
            assert_ok(&out, Some(&srv));
            let r = report(&out);
            let want = if run == 0 { (1, 0) } else { (0, 1) };
            assert_eq!(
                (r["files"].as_u64(), r["up_to_date"].as_u64()),
                (Some(want.0), Some(want.1)),
                "{to:?} run {run}: {r}"
            );
        }
    }
    // Changed in place, same size and mtime: the digest tells, and it is sent.
    let f = root.join("f");
    let mtime = std::fs::metadata(&f).unwrap().modified().unwrap();
    std::fs::write(&f, sprat_testkit::random_bytes(100 << 10, 5)).unwrap();
    let file = std::fs::File::options().write(true).open(&f).unwrap();
    file.set_modified(mtime).unwrap();
    let g = t.path().join("g");
    let out = cp(&srv, &["--checksum", "--json"], srv.url("f"), &g);
    assert_ok(&out, Some(&srv));
    assert_eq!(report(&out)["files"], 1);
    assert_eq!(std::fs::read(&g).unwrap(), std::fs::read(&f).unwrap());
}

/// A copy whose source holds files named like a partial copy (a tree copied on from an
/// interrupted destination) does not write them over the partial copy a running transfer is
/// writing there: those two entries fail by name, and the running transfer succeeds (review
/// 2026-11-29 of the fixes of partial copies, M3: it failed at its end).
#[test]
fn files_named_like_a_held_partial_copy_are_not_written_over_it() {
    let t = tmp();
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let data = sprat_testkit::random_bytes(12 << 20, 8);
    std::fs::write(src.join("big"), &data).unwrap();
    let debris = t.path().join("debris");
    std::fs::create_dir_all(&debris).unwrap();
    std::fs::write(debris.join(".big.sprat-part"), b"not a partial copy").unwrap();
    std::fs::write(debris.join(".big.sprat-part.log"), b"not a journal").unwrap();
    std::fs::write(debris.join("other"), b"other").unwrap();
    let dst = t.path().join("dst");
    let chunked = common::CHUNKED;
    let to = (&src, dst.as_os_str(), dst.as_path());
    let mut running = common::copy_writing_a_partial_copy(None, &chunked, to, "4MB/s");
    let out = cp_local(&["--json"], &debris, &dst);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        sprat_testkit::describe(&out)
    );
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("its name is that of a partial copy a running transfer is writing"),
        "{text}"
    );
    assert_eq!(std::fs::read(dst.join("other")).unwrap(), b"other");
    let first = running.wait_or_panic(Duration::from_secs(60));
    assert_ok(&first, None);
    assert_eq!(std::fs::read(dst.join("big")).unwrap(), data);
}

/// A dry run against a server checks that it would write there without taking one of the
/// one-time tickets an address may hold unused (64): seventy dry runs in a row all answer,
/// and a copy between two servers still gets its ticket after them. Before, each dry run held
/// a ticket for a minute, and the 65th was refused as busy (review 2026-11-30 of protocol 23,
/// F8). A read-only server still refuses a dry run as it refuses the copy.
#[test]
fn dry_runs_take_no_tickets() {
    let t = tmp();
    let root = t.path().join("root");
    std::fs::create_dir_all(root.join("in")).unwrap();
    tree::make_file(&root.join("f"), b"to copy", 0o644);
    let srv = server(&root);
    let f = root.join("f");
    for i in 0..70 {
        let out = cp(&srv, &["-n", "--json"], &f, srv.url("in"));
        assert_ok(&out, Some(&srv));
        assert_eq!(report(&out)["send"], 1, "dry run {i}");
    }
    assert_ok(&cp(&srv, &[], srv.url("f"), srv.url("copied")), Some(&srv));
    assert_eq!(std::fs::read(root.join("copied")).unwrap(), b"to copy");
    let opts = sprat_testkit::ServerOptions {
        extra_args: vec!["--read-only".into()],
        ..sprat_testkit::ServerOptions::default()
    };
    let ro = common::server_with(&root, &opts);
    let out = cp(&ro, &["-n"], &f, ro.url("in"));
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        sprat_testkit::describe(&out)
    );
}
