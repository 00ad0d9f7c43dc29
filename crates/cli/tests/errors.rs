//! End-to-end error behaviour of `sprat cp`: the documented exit code (2 usage / bad input,
//! 4 connection, 5 fatal I/O), one `sprat: error: ` line naming the path or the peer, no panic,
//! the process ends in bounded time, and nothing half-written is left under a final name after a
//! dropped connection or a full disk.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::{
    assert_error_names, assert_exit, assert_no_failures, assert_ok, bin, closed_port, cp, cp_args,
    cp_local, entries_below, has_regular_file, s, server, server_with, tmp,
};
use sprat_testkit::{
    assert_trees_equal, describe, diff_snapshots, make_many_files, partial_copy_violations,
    run_sprat, run_sprat_timeout, snapshot, spawn_sprat, CompareOptions, Relay, Server,
    ServerOptions, SpratChild, Tmpfs,
};

// ---------------------------------------------------------------- usage and bad input: exit 2

#[test]
fn push_of_missing_local_source_exits_2() {
    let t = tmp();
    let root = t.path().join("root");
    let srv = server(&root);
    let missing = t.path().join("no-such-source");
    let out = cp(&srv, &[], &missing, srv.url("dst"));
    assert_exit(&out, 2);
    assert_error_names(&out, &[s(&missing)]);
    assert!(
        entries_below(&root).is_empty(),
        "server root was written: {:?}",
        entries_below(&root)
    );
}

#[test]
fn local_copy_of_missing_source_exits_2() {
    let t = tmp();
    let missing = t.path().join("no-such-source");
    let dst = t.path().join("dst");
    let out = cp_local(&[], &missing, &dst);
    assert_exit(&out, 2);
    assert_error_names(&out, &[s(&missing)]);
    assert!(
        !dst.exists(),
        "destination was created for a missing source"
    );
}

#[test]
fn pull_of_missing_remote_source_exits_2() {
    let t = tmp();
    let root = t.path().join("root");
    let srv = server(&root);
    let dst = t.path().join("dst");
    let out = cp(&srv, &[], srv.url("no-such-source"), &dst);
    assert_exit(&out, 2);
    assert_error_names(&out, &["no-such-source"]);
    assert!(!has_regular_file(&dst));
}

#[test]
fn bad_options_and_arguments_exit_2() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 2, 10, 1);
    let dst = t.path().join("dst");
    let (src, dst) = (s(&src), s(&dst));
    let cases: Vec<Vec<&str>> = vec![
        vec!["cp", "--streams", "many", src, dst],
        vec!["cp", "--batch-size", "12XB", src, dst],
        vec!["cp", "--chunk-size", "lots", src, dst],
        vec!["cp", "--small-file-threshold", "-5", src, dst],
        vec!["cp", "--no-such-option", src, dst],
        vec!["cp", src],
        vec!["cp"],
        vec!["cp", src, "sprat://127.0.0.1:notaport/x"],
        vec!["no-such-command"],
    ];
    let mut failures = Vec::new();
    for args in &cases {
        let out = run_sprat(bin(), args, &[("SPRAT_TOKEN", "t")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(2) || stderr.trim().is_empty() || stderr.contains("panicked") {
            failures.push(format!(
                "`sprat {}`: expected exit 2 and a message on stderr; got {}",
                args.join(" "),
                describe(&out)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        !Path::new(dst).exists(),
        "a rejected command wrote the destination"
    );
}

// ------------------------------------------------- unwritable destination: exit 5, names path

#[test]
fn pull_into_destination_below_a_regular_file_exits_5() {
    let t = tmp();
    let root = t.path().join("root");
    make_many_files(&root.join("src"), 5, 100, 2);
    let srv = server(&root);
    let blocker = t.path().join("file.txt");
    fs::write(&blocker, b"I am a file").unwrap();
    let dst = blocker.join("sub");
    let out = cp(&srv, &[], srv.url("src"), &dst);
    assert_exit(&out, 5);
    assert_error_names(&out, &["file.txt"]);
    assert_eq!(fs::read(&blocker).unwrap(), b"I am a file");
}

#[test]
fn local_copy_into_destination_below_a_regular_file_exits_5() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 5, 100, 3);
    let blocker = t.path().join("file.txt");
    fs::write(&blocker, b"I am a file").unwrap();
    let out = cp_local(&[], &src, blocker.join("sub"));
    assert_exit(&out, 5);
    assert_error_names(&out, &["file.txt"]);
    assert_eq!(fs::read(&blocker).unwrap(), b"I am a file");
}

#[test]
fn push_into_destination_below_a_regular_file_exits_5() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 5, 100, 4);
    let root = t.path().join("root");
    fs::create_dir(&root).unwrap();
    fs::write(root.join("file.txt"), b"I am a file").unwrap();
    let srv = server(&root);
    let out = cp(&srv, &[], &src, srv.url("file.txt/sub"));
    assert_exit(&out, 5);
    assert_error_names(&out, &["file.txt"]);
    assert_eq!(fs::read(root.join("file.txt")).unwrap(), b"I am a file");
}

#[test]
fn pull_into_read_only_file_system_exits_5() {
    let Some(mnt) = Tmpfs::mount("4m") else {
        eprintln!("skipped: cannot mount tmpfs");
        return;
    };
    assert!(mnt.remount_read_only(), "remount,ro failed");
    let t = tmp();
    let root = t.path().join("root");
    make_many_files(&root.join("src"), 5, 100, 5);
    let srv = server(&root);
    let dst = mnt.path().join("dst");
    let out = cp(&srv, &[], srv.url("src"), &dst);
    assert_exit(&out, 5);
    assert_error_names(&out, &[s(mnt.path())]);
}

#[test]
fn push_to_server_on_read_only_file_system_exits_5() {
    let Some(mnt) = Tmpfs::mount("4m") else {
        eprintln!("skipped: cannot mount tmpfs");
        return;
    };
    assert!(mnt.remount_read_only(), "remount,ro failed");
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 5, 100, 6);
    let mut srv = server(mnt.path());
    let out = cp(&srv, &[], &src, srv.url("dst"));
    assert_exit(&out, 5);
    assert_error_names(&out, &["dst"]);
    assert!(srv.is_running(), "server died:\n{}", srv.stderr_log());
}

// ------------------------------------------------------ connection errors: exit 4, names peer

fn assert_connection_refused(pull: bool) {
    let t = tmp();
    let port = closed_port();
    let peer = format!("127.0.0.1:{port}");
    let url = format!("sprat://{peer}/dst");
    let local = t.path().join("local");
    make_many_files(&local, 3, 100, 7);
    let args = if pull {
        cp_args(None, &[], &url, t.path().join("pulled"))
    } else {
        cp_args(None, &[], &local, &url)
    };
    let started = Instant::now();
    let out = run_sprat_timeout(
        bin(),
        args,
        &[("SPRAT_TOKEN", "t")],
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| {
        panic!(
            "sprat cp to a port nobody listens on did not end within 30 s:\n{}",
            describe(&e.output)
        )
    });
    assert_exit(&out, 4);
    assert_error_names(&out, &[&peer]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?} to give up on a refused connection",
        started.elapsed()
    );
}

#[test]
fn push_to_server_not_running_exits_4() {
    assert_connection_refused(false);
}

#[test]
fn pull_from_server_not_running_exits_4() {
    assert_connection_refused(true);
}

/// Enough data that a debug build needs a noticeable time to move it.
const DROP_FILES: usize = 384;
const DROP_FILE_SIZE: usize = 128 * 1024;

/// Waits until a regular file shows up below `watch` (data is flowing), then kills the server.
fn kill_server_once_data_flows(srv: &mut Server, client: &mut SpratChild, watch: &Path) {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        if client.try_status().is_some() {
            let out = client.wait_or_panic(Duration::from_secs(5));
            panic!(
                "the transfer ended before the server could be killed (test data too small \
                 for this machine?):\n{}\n--- server stderr ---\n{}",
                describe(&out),
                srv.stderr_log()
            );
        }
        if has_regular_file(watch) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no file appeared below {watch:?} within 40 s\n--- server stderr ---\n{}",
            srv.stderr_log()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    srv.kill();
}

/// Checks a client that lost its server: exit 4, names the peer, no panic, no corrupt file.
fn dropped_connection_failures(out: &Output, peer: &str, src: &Path, dst: &Path) -> Vec<String> {
    if out.status.success()
        && fs::symlink_metadata(dst).is_ok()
        && diff_snapshots(&snapshot(src), &snapshot(dst), &CompareOptions::default()).is_empty()
    {
        panic!(
            "inconclusive: the whole transfer completed before the connection was lost (test \
             data too small for this machine?):\n{}",
            describe(out)
        );
    }
    let mut failures = Vec::new();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() != Some(4) {
        failures.push(format!("exit code {:?}, expected 4", out.status.code()));
    }
    if stderr.contains("panicked") {
        failures.push("sprat panicked".to_string());
    }
    match stderr.lines().find(|l| l.starts_with("sprat: error: ")) {
        None => failures.push("no `sprat: error: ` line on stderr".to_string()),
        Some(l) if !l.contains(peer) => failures.push(format!(
            "the error line does not name the peer {peer}: {l:?}"
        )),
        Some(_) => {}
    }
    let (violations, strays) = partial_copy_violations(src, dst);
    failures.extend(violations);
    if !strays.is_empty() {
        eprintln!(
            "note: {} entries under names not in the source were left in {dst:?}, e.g. {:?}",
            strays.len(),
            &strays[..strays.len().min(5)]
        );
    }
    failures
}

#[test]
fn push_when_server_dies_mid_transfer_exits_4() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, DROP_FILES, DROP_FILE_SIZE, 8);
    let root = t.path().join("root");
    let mut srv = server(&root);
    let peer = srv.addr().to_string();
    let mut client = spawn_sprat(bin(), cp_args(Some(&srv), &[], &src, srv.url("dst")), &[]);
    kill_server_once_data_flows(&mut srv, &mut client, &root);
    let out = client.wait_or_panic(Duration::from_secs(30));
    let failures = dropped_connection_failures(&out, &peer, &src, &root.join("dst"));
    assert_no_failures(&failures, &out, Some(&srv));
}

#[test]
fn pull_when_server_dies_mid_transfer_exits_4() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    make_many_files(&src, DROP_FILES, DROP_FILE_SIZE, 9);
    let mut srv = server(&root);
    let peer = srv.addr().to_string();
    let dst = t.path().join("dst");
    let mut client = spawn_sprat(bin(), cp_args(Some(&srv), &[], srv.url("src"), &dst), &[]);
    kill_server_once_data_flows(&mut srv, &mut client, &dst);
    let out = client.wait_or_panic(Duration::from_secs(30));
    let failures = dropped_connection_failures(&out, &peer, &src, &dst);
    assert_no_failures(&failures, &out, Some(&srv));
}

/// Cuts the connection(s) in a relay after 4 MiB while the server stays up; then checks the
/// client's failure, that the server survived, and that a plain rerun completes the copy.
fn cut_then_rerun(pull: bool) {
    let t = tmp();
    let root = t.path().join("root");
    let (src, dst) = if pull {
        (root.join("src"), t.path().join("dst"))
    } else {
        (t.path().join("src"), root.join("dst"))
    };
    make_many_files(&src, 128, DROP_FILE_SIZE, 10);
    let mut srv = server(&root);
    let relay = Relay::start_cutting_after(srv.addr(), 4 << 20);
    let peer = relay.addr().to_string();
    let args = if pull {
        cp_args(Some(&srv), &[], relay.url("src"), &dst)
    } else {
        cp_args(Some(&srv), &[], &src, relay.url("dst"))
    };
    let out = run_sprat(bin(), args, &[]);
    assert!(
        relay.has_cut(),
        "the transfer moved less than 4 MiB through the relay ({} bytes); test data too small?\n{}",
        relay.forwarded(),
        describe(&out)
    );
    let mut failures = dropped_connection_failures(&out, &peer, &src, &dst);
    if !srv.is_running() {
        failures.push("the server died when a client connection was cut".to_string());
    }
    assert_no_failures(&failures, &out, Some(&srv));

    // The same copy run again, directly, must complete and be exact.
    let out = if pull {
        cp(&srv, &[], srv.url("src"), &dst)
    } else {
        cp(&srv, &[], &src, srv.url("dst"))
    };
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &dst);
}

#[test]
fn push_cut_mid_transfer_exits_4_and_rerun_completes() {
    cut_then_rerun(false);
}

#[test]
fn pull_cut_mid_transfer_exits_4_and_rerun_completes() {
    cut_then_rerun(true);
}

// ------------------------------------------------------------------ disk full: exit 5

fn disk_full_failures(out: &Output, src: &Path, dst: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() != Some(5) {
        failures.push(format!("exit code {:?}, expected 5", out.status.code()));
    }
    if stderr.contains("panicked") {
        failures.push("sprat panicked".to_string());
    }
    let lower = stderr.to_lowercase();
    if !lower.contains("no space left") && !lower.contains("disk full") {
        failures.push("stderr mentions neither `No space left` nor `disk full`".to_string());
    }
    match stderr.lines().find(|l| l.starts_with("sprat: error: ")) {
        None => failures.push("no `sprat: error: ` line on stderr".to_string()),
        Some(l) if !(l.contains("dst") || l.contains(".bin")) => {
            failures.push(format!("the error line names no path: {l:?}"))
        }
        Some(_) => {}
    }
    let (violations, strays) = partial_copy_violations(src, dst);
    failures.extend(violations);
    if !strays.is_empty() {
        eprintln!(
            "note: {} entries under names not in the source were left in {dst:?}, e.g. {:?}",
            strays.len(),
            &strays[..strays.len().min(5)]
        );
    }
    failures
}

#[test]
fn pull_onto_full_disk_exits_5_and_leaves_no_corrupt_file() {
    let Some(mnt) = Tmpfs::mount("4m") else {
        eprintln!("skipped: cannot mount tmpfs");
        return;
    };
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    make_many_files(&src, 40, 256 * 1024, 11);
    let srv = server(&root);
    let dst = mnt.path().join("dst");
    let out = cp(&srv, &[], srv.url("src"), &dst);
    let failures = disk_full_failures(&out, &src, &dst);
    assert_no_failures(&failures, &out, Some(&srv));
}

#[test]
fn push_onto_full_server_disk_exits_5_and_leaves_no_corrupt_file() {
    let Some(mnt) = Tmpfs::mount("4m") else {
        eprintln!("skipped: cannot mount tmpfs");
        return;
    };
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 40, 256 * 1024, 12);
    let mut srv = server_with(mnt.path(), &ServerOptions::default());
    let dst = mnt.path().join("dst");
    let out = cp(&srv, &[], &src, srv.url("dst"));
    let mut failures = disk_full_failures(&out, &src, &dst);
    if !srv.is_running() {
        failures.push("the server died when its disk filled up".to_string());
    }
    assert_no_failures(&failures, &out, Some(&srv));
}

#[test]
fn local_copy_onto_full_disk_exits_5_and_leaves_no_corrupt_file() {
    let Some(mnt) = Tmpfs::mount("4m") else {
        eprintln!("skipped: cannot mount tmpfs");
        return;
    };
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 40, 256 * 1024, 13);
    let dst = mnt.path().join("dst");
    let out = cp_local(&[], &src, &dst);
    let failures = disk_full_failures(&out, &src, &dst);
    assert_no_failures(&failures, &out, None);
}
