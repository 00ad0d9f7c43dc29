//! End-to-end tests of the batch storage layer: durable transfers (every batch synced before it
//! counts), both ways of putting files in place (unnamed `O_TMPFILE` inodes, and the temporary
//! name + rename fallback), and the storage limit benchmarks (`sprat bench read|write`).
#![allow(clippy::unwrap_used)]

mod common;

use common::{
    assert_exit, assert_ok, bin, cp, cp_args, cp_local, server, server_with, tmp, RelayProc,
};
use sprat_testkit::{
    assert_trees_equal, assert_trees_equal_with, describe, make_fidelity_tree, make_many_files,
    parse_json_report, random_bytes, run_sprat, CompareOptions, FuseMirror, ServerOptions,
};

fn syncs(stdout: &[u8]) -> (bool, u64) {
    let r = parse_json_report(stdout);
    (
        r.get("durable").as_bool().unwrap(),
        r.get("syncs").as_u64().unwrap(),
    )
}

#[test]
fn durable_local_copy_syncs_every_batch_and_plain_copy_never() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 600, 3000, 7);
    make_fidelity_tree(&src.join("fid"));
    // Small batches: many of them, so the group commit is exercised by several writers.
    let small = ["--json", "--batch-files", "16", "--write-threads", "4"];
    let dst = t.path().join("durable");
    let out = cp_local(&[&small[..], &["--durable"]].concat(), &src, &dst);
    assert_ok(&out, None);
    let (durable, n) = syncs(&out.stdout);
    assert!(durable);
    assert!(n >= 1, "a durable copy made no sync");
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());

    let plain = t.path().join("plain");
    let out = cp_local(&small, &src, &plain);
    assert_ok(&out, None);
    assert_eq!(syncs(&out.stdout), (false, 0));
    assert_trees_equal_with(&src, &plain, &CompareOptions::with_root());
}

#[test]
fn durable_push_is_synced_by_the_server_and_durable_pull_by_the_client() {
    let t = tmp();
    let src = t.path().join("src");
    make_fidelity_tree(&src);
    let srv = server(&t.path().join("root"));
    let out = cp(&srv, &["--json", "--durable"], &src, srv.url("pushed"));
    assert_ok(&out, Some(&srv));
    let (durable, n) = syncs(&out.stdout);
    assert!(durable && n >= 1, "push: durable={durable} syncs={n}");
    assert_trees_equal_with(&src, &srv.root().join("pushed"), &CompareOptions::default());

    let pulled = t.path().join("pulled");
    let out = cp(&srv, &["--json", "--durable"], srv.url("pushed"), &pulled);
    assert_ok(&out, Some(&srv));
    let (durable, n) = syncs(&out.stdout);
    assert!(durable && n >= 1, "pull: durable={durable} syncs={n}");
    assert_trees_equal_with(&src, &pulled, &CompareOptions::default());

    // Without --durable the server syncs nothing.
    let out = cp(&srv, &["--json"], &src, srv.url("plain"));
    assert_ok(&out, Some(&srv));
    assert_eq!(syncs(&out.stdout), (false, 0));
}

#[test]
fn rename_fallback_copies_and_replaces_exactly() {
    let t = tmp();
    let src = t.path().join("src");
    make_fidelity_tree(&src);
    let dst = t.path().join("dst");
    for _ in 0..2 {
        // Twice: the second run replaces every file that is already there.
        let out = run_sprat(
            bin(),
            cp_args(None, &["--publish", "rename"], &src, &dst),
            &[],
        );
        assert_ok(&out, None);
        assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
    }
    // And the default scheme replaces what the fallback wrote.
    let out = cp_local(&[], &src, &dst);
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

/// On a file system without unnamed inodes (a FUSE one here, as many network and user-space
/// file systems are), copies put their files in place under temporary names by themselves,
/// with nothing to ask: a local copy and its re-run replacing every file, a push to a server
/// whose root is there, and a large file pushed over a link that drops every 2 MB, resumed
/// from its partial copy there. Nothing is left under a temporary name.
#[test]
fn copies_onto_a_fuse_file_system_fall_back_to_temporary_names_by_themselves() {
    let Some(fuse) = FuseMirror::mount() else {
        eprintln!("skipped: cannot mount a FUSE file system here (needs bindfs and /dev/fuse)");
        return;
    };
    if fuse.has_unnamed_inodes() {
        eprintln!("skipped: this FUSE file system makes unnamed inodes: no fallback to test");
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    make_fidelity_tree(&src);
    make_many_files(&src.join("many"), 300, 3000, 5);
    let local = fuse.path().join("local");
    for again in [&[][..], &["--ignore-times"][..]] {
        let out = cp_local(again, &src, &local);
        assert_ok(&out, None);
        assert_trees_equal_with(&src, &local, &CompareOptions::with_root());
    }
    let srv = server(&fuse.path().join("root"));
    let out = cp(&srv, &[], &src, srv.url("pushed"));
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &fuse.path().join("root/pushed"));

    let big = t.path().join("big");
    let data = random_bytes(12 << 20, 43);
    std::fs::write(&big, &data).unwrap();
    let relay = RelayProc::start(srv.addr(), &["--reset-after", "2MB"]);
    let out = common::copy_over_a_dropping_link(&srv, &[], &big, relay.url("big"));
    assert_ok(&out, Some(&srv));
    let report = parse_json_report(&out.stdout);
    assert!(report.u64("attempts") >= 2, "{}", describe(&out));
    assert!(
        report.u64("bytes_not_sent") > 0,
        "nothing resumed: {}",
        describe(&out)
    );
    assert_eq!(std::fs::read(fuse.path().join("root/big")).unwrap(), data);
    let temporary: Vec<String> = walk_names(fuse.backing())
        .into_iter()
        .filter(|n| n.contains(".sprat"))
        .collect();
    assert!(
        temporary.is_empty(),
        "left under temporary names: {temporary:?}"
    );
}

/// The names of everything below `dir`.
fn walk_names(dir: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        names.push(entry.file_name().to_string_lossy().into_owned());
        if entry.file_type().unwrap().is_dir() {
            names.extend(walk_names(&entry.path()));
        }
    }
    names
}

/// What the plain writer of `sprat bench write` and `copy` keeps: content and links.
/// Directories get 0755 and nothing gets its mtime (it measures the file system, it is not a
/// copy).
fn plain_written() -> CompareOptions {
    CompareOptions {
        root_metadata: false,
        modes: false,
        mtimes: false,
    }
}

#[test]
fn bench_write_and_read_cover_the_whole_tree() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 500, 2000, 3);
    make_fidelity_tree(&src.join("fid"));
    let dst = t.path().join("written");
    let out = run_sprat(
        bin(),
        ["bench", "write", "--json", "--threads", "3"]
            .iter()
            .map(std::ffi::OsString::from)
            .chain([src.clone().into_os_string(), dst.clone().into_os_string()]),
        &[],
    );
    assert_ok(&out, None);
    let w: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_trees_equal_with(&src, &dst, &plain_written());

    let out = run_sprat(
        bin(),
        [
            "bench".into(),
            "read".into(),
            "--json".into(),
            src.clone().into_os_string(),
        ],
        &[],
    );
    assert_ok(&out, None);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["files", "bytes", "symlinks", "dirs"] {
        assert_eq!(r[key], w[key], "{key}: read {r} write {w}");
    }
    assert!(r["files"].as_u64().unwrap() > 500);
    assert!(r["seconds"].as_f64().unwrap() > 0.0);

    // A destination that is not empty is refused, naming it.
    let out = run_sprat(
        bin(),
        [
            "bench".into(),
            "write".into(),
            src.into_os_string(),
            dst.into_os_string(),
        ],
        &[],
    );
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
}

#[test]
fn bench_copy_reads_and_writes_the_whole_tree_at_once() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 300, 3000, 5);
    make_fidelity_tree(&src.join("fid"));
    let dst = t.path().join("written");
    let args = |extra: &[&str]| {
        ["bench", "copy", "--json"]
            .iter()
            .chain(extra)
            .map(std::ffi::OsString::from)
            .chain([src.clone().into_os_string(), dst.clone().into_os_string()])
            .collect::<Vec<_>>()
    };
    let out = run_sprat(bin(), args(&["--threads", "2", "--read-threads", "3"]), &[]);
    assert_ok(&out, None);
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_trees_equal_with(&src, &dst, &plain_written());
    assert_eq!(c["subsystem"], "copy");
    assert!(c["files"].as_u64().unwrap() > 300, "{c}");
    assert_eq!(
        (c["threads"].as_u64(), c["read_threads"].as_u64()),
        (Some(2), Some(3))
    );
    // The whole lasts as long as the slower of its two parts, which both ran.
    let (all, read, write) = (
        c["seconds"].as_f64().unwrap(),
        c["read_seconds"].as_f64().unwrap(),
        c["write_seconds"].as_f64().unwrap(),
    );
    assert!(read > 0.0 && write > 0.0 && all >= read.max(write), "{c}");

    // Bad input: a thread count out of range is named; so is a destination that is not empty.
    let out = run_sprat(bin(), args(&["--read-threads", "0"]), &[]);
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--read-threads"));
    let out = run_sprat(bin(), args(&[]), &[]);
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
}

#[test]
fn every_read_backend_and_order_copies_exactly_on_ext4_and_tmpfs() {
    let t = tmp();
    // /dev/shm is tmpfs (no FIEMAP: inode order is kept); the temporary directory is on the
    // root file system (ext4 here, with FIEMAP).
    let shm = tempfile::Builder::new()
        .prefix("sprat-e2e-")
        .tempdir_in("/dev/shm")
        .unwrap();
    for (name, base) in [("disk", t.path()), ("tmpfs", shm.path())] {
        let src = base.join("src");
        make_many_files(&src, 400, 20_000, 11);
        make_fidelity_tree(&src.join("fid"));
        for io in ["threads", "uring"] {
            for order in ["inode", "physical"] {
                let dst = t.path().join(format!("dst-{name}-{io}-{order}"));
                let out = cp_local(
                    &[
                        "--io",
                        io,
                        "--read-order",
                        order,
                        "--small-file-threshold",
                        "64KiB",
                        "--chunk-size",
                        "64KiB",
                    ],
                    &src,
                    &dst,
                );
                assert_ok(&out, None);
                assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
            }
        }
    }
}

/// With io_uring forbidden by the kernel (`kernel.io_uring_disabled = 2`, as some hardened
/// hosts set it), `--io uring` falls back to pread and copies exactly. Skipped where the
/// setting does not exist or cannot be changed (not root).
#[test]
fn uring_forbidden_by_the_kernel_falls_back_to_pread() {
    let knob = std::path::Path::new("/proc/sys/kernel/io_uring_disabled");
    let Ok(before) = std::fs::read_to_string(knob) else {
        eprintln!("skipped: {} is not available", knob.display());
        return;
    };
    if std::fs::write(knob, "2").is_err() {
        eprintln!("skipped: cannot write {}", knob.display());
        return;
    }
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 300, 5000, 5);
    let dst = t.path().join("dst");
    let out = cp_local(&["--io", "uring"], &src, &dst);
    std::fs::write(knob, before.trim()).unwrap();
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

/// Regression: batches of 4096 files read by 8 readers once held 32,768 files open and the
/// copy died with "Too many open files". Under a limit of 256 open files it must still copy
/// everything (readers share the limit and read large batches in windows).
#[test]
fn big_batches_under_a_low_open_file_limit() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 6000, 100, 13);
    let dst = t.path().join("dst");
    let script =
        "ulimit -n 256 && exec \"$0\" cp --batch-size 16MiB --batch-files 4096 \"$1\" \"$2\"";
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(bin())
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    assert_ok(&out, None);
    assert_trees_equal_with(&src, &dst, &CompareOptions::with_root());
}

/// `sprat bench network`: files made up in memory cross a real server's session and streams,
/// are verified and counted there, and nothing is written (also on a read-only server).
#[test]
fn bench_network_pushes_synthetic_files_that_the_server_verifies_and_drops() {
    let t = tmp();
    for opts in [ServerOptions::default(), ServerOptions::read_only()] {
        let root = t.path().join(format!("root-{}", opts.read_only));
        let srv = server_with(&root, &opts);
        let mut args: Vec<std::ffi::OsString> = vec!["bench".into(), "network".into()];
        args.extend(srv.client_args());
        args.extend(
            [
                "--json",
                "--files",
                "3000",
                "--size",
                "1000",
                "--streams",
                "3",
                "--batch-size",
                "64KiB",
            ]
            .map(std::ffi::OsString::from),
        );
        args.push(srv.url("anything").into());
        let out = run_sprat(bin(), args, &[]);
        assert_ok(&out, Some(&srv));
        let r = parse_json_report(&out.stdout);
        assert_eq!((r.files(), r.bytes()), (3000, 3_000_000));
        assert_eq!(r.get("failed").as_u64(), Some(0));
        assert_eq!(
            std::fs::read_dir(&root).unwrap().count(),
            0,
            "nothing is written"
        );
    }
    // A local path is not a server.
    let out = run_sprat(bin(), ["bench", "network", "/tmp"], &[]);
    assert_exit(&out, 2);
}

/// `sprat bench overhead`: every subsystem run at every point on real files and a real
/// server on loopback, the fits in the JSON object the issue names, and nothing left behind.
#[test]
fn bench_overhead_runs_every_subsystem_and_fits_them() {
    let t = tmp();
    let dir = t.path().join("scratch");
    let out = run_sprat(
        bin(),
        [
            "bench".into(),
            "overhead".into(),
            "--json".into(),
            "--total".into(),
            "2MiB".into(),
            "--points".into(),
            "40,400".into(),
            "--dir".into(),
            dir.clone().into_os_string(),
        ],
        &[],
    );
    assert_ok(&out, None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 8, "{v}");
    for sub in ["read", "network", "write", "end_to_end"] {
        let mine: Vec<_> = runs.iter().filter(|r| r["subsystem"] == sub).collect();
        let files: Vec<u64> = mine.iter().map(|r| r["files"].as_u64().unwrap()).collect();
        assert_eq!(files, [40, 400], "{sub}");
        for r in &mine {
            let expect =
                2 * 1024 * 1024 / r["files"].as_u64().unwrap() * r["files"].as_u64().unwrap();
            assert_eq!(r["bytes"].as_u64(), Some(expect), "{sub}");
        }
        // Two points fit exactly, unless noise makes the rate come out negative (then null).
        match &v[sub] {
            serde_json::Value::Null => {}
            fit => {
                for key in ["t0_s", "rate_bytes_per_s", "r2"] {
                    assert!(fit[key].is_f64(), "{sub}.{key}: {fit}");
                }
            }
        }
    }
    // Data sets, written trees and pushed copies are removed as it goes.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["server"], "left behind: {left:?}");
    assert_eq!(std::fs::read_dir(dir.join("server")).unwrap().count(), 0);

    // Fewer than two points cannot be fitted.
    let out = run_sprat(
        bin(),
        [
            "bench",
            "overhead",
            "--points",
            "10",
            "--dir",
            "/tmp/never-made-by-sprat",
        ],
        &[],
    );
    assert_exit(&out, 2);
}
