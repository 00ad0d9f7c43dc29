//! End-to-end error behaviour of `sprat cp`: the documented exit code (2 usage / bad input,
//! 4 connection, 5 fatal I/O), one `sprat: error: ` line naming the path or the peer, no panic,
//! the process ends in bounded time, and nothing half-written is left under a final name after a
//! dropped connection or a full disk.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use common::{
    assert_error_names, assert_exit, assert_no_failures, assert_ok, bin,
    check_blocked_file_outcome, check_special_files_outcome, closed_port, cp, cp_args, cp_local,
    entries_below, has_regular_file, s, server, server_with, tmp,
};
use sprat_testkit::{
    assert_trees_equal, describe, diff_snapshots, make_fifo, make_file, make_many_files,
    partial_copy_violations, random_bytes, run_sprat, run_sprat_timeout, snapshot, spawn_sprat,
    CompareOptions, Relay, Server, ServerOptions, SpratChild, Tmpfs,
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
        vec!["cp", "--streams", "0", src, dst],
        vec!["cp", "--streams", "100000", src, dst],
        vec!["cp", "--chunk-size", "0", src, dst],
        vec!["cp", "--batch-size", "0", src, dst],
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
    make_many_files(&local, 100, 100, 7);
    let args = if pull {
        cp_args(None, &[], &url, t.path().join("pulled"))
    } else {
        // One file a batch: more batches than the source's queues hold, so the reading must
        // stop cleanly when the connection fails (it once waited for ever).
        cp_args(None, &["--batch-files", "1"], &local, &url)
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

/// Small files of the interrupted-transfer trees.
const DROP_FILE_SIZE: usize = 128 * 1024;

/// A tree of `small` files of 128 KiB plus `big` files of 4 MiB (sent as chunks by default, and
/// started first): enough data that a debug build needs a noticeable time to move it.
fn make_transfer_tree(dir: &Path, small: usize, big: usize, seed: u64) {
    make_many_files(&dir.join("small"), small, DROP_FILE_SIZE, seed);
    fs::create_dir(dir.join("big")).unwrap();
    for i in 0..big {
        let content = random_bytes(4 << 20, seed + 1000 + i as u64);
        make_file(&dir.join(format!("big/big{i}.bin")), &content, 0o644);
    }
}

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

/// What a failed copy left in `dst`: a file under its final name with wrong content is always a
/// failure; a writer's temporary file left behind is one only if the writer process survived
/// (it had the chance to clean up; a SIGKILLed server had not).
fn leftover_failures(src: &Path, dst: &Path, writer_survived: bool) -> Vec<String> {
    let (mut failures, strays) = partial_copy_violations(src, dst);
    // Partial large files and their journals stay, under hidden names, for the next run to
    // resume (`sprat_store::partial`); nothing else may.
    let strays: Vec<_> = strays
        .into_iter()
        .filter(|s| {
            let s = format!("{s:?}");
            !(s.contains(".sprat-part\"") || s.contains(".sprat-part.log\""))
        })
        .collect();
    if !strays.is_empty() {
        let msg = format!(
            "{} entries under names not in the source were left in {dst:?}, e.g. {:?}",
            strays.len(),
            &strays[..strays.len().min(5)]
        );
        if writer_survived {
            failures.push(format!("{msg} (temporary files not cleaned up)"));
        } else {
            eprintln!("note: {msg}");
        }
    }
    failures
}

/// Checks a client that lost its server: exit 4, names the peer, no panic, no corrupt file.
fn dropped_connection_failures(
    out: &Output,
    peer: &str,
    src: &Path,
    dst: &Path,
    writer_survived: bool,
) -> Vec<String> {
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
    if common::error_line_count(out) > 1 {
        failures.push("more than one `sprat: error: ` line on stderr".to_string());
    }
    match stderr.lines().find(|l| l.starts_with("sprat: error: ")) {
        None => failures.push("no `sprat: error: ` line on stderr".to_string()),
        Some(l) if !l.contains(peer) => failures.push(format!(
            "the error line does not name the peer {peer}: {l:?}"
        )),
        Some(_) => {}
    }
    failures.extend(leftover_failures(src, dst, writer_survived));
    failures
}

#[test]
fn push_when_server_dies_mid_transfer_exits_4() {
    let t = tmp();
    let src = t.path().join("src");
    make_transfer_tree(&src, 320, 4, 8);
    let root = t.path().join("root");
    let mut srv = server(&root);
    let peer = srv.addr().to_string();
    let no_retry = ["--retry-for", "0s"];
    let mut client = spawn_sprat(
        bin(),
        cp_args(Some(&srv), &no_retry, &src, srv.url("dst")),
        &[],
    );
    kill_server_once_data_flows(&mut srv, &mut client, &root);
    let out = client.wait_or_panic(Duration::from_secs(30));
    let failures = dropped_connection_failures(&out, &peer, &src, &root.join("dst"), false);
    assert_no_failures(&failures, &out, Some(&srv));

    // A new server on the same root; the same push again must complete every file.
    let srv = server(&root);
    let out = cp(&srv, &[], &src, srv.url("dst"));
    assert_ok(&out, Some(&srv));
    let missing = common::missing_regular_files(&src, &root.join("dst"), &[]);
    assert!(missing.is_empty(), "after the rerun: {missing:?}");
}

#[test]
fn pull_when_server_dies_mid_transfer_exits_4() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    make_transfer_tree(&src, 320, 4, 9);
    let mut srv = server(&root);
    let peer = srv.addr().to_string();
    let dst = t.path().join("dst");
    let no_retry = ["--retry-for", "0s"];
    let mut client = spawn_sprat(
        bin(),
        cp_args(Some(&srv), &no_retry, srv.url("src"), &dst),
        &[],
    );
    kill_server_once_data_flows(&mut srv, &mut client, &dst);
    let out = client.wait_or_panic(Duration::from_secs(30));
    let failures = dropped_connection_failures(&out, &peer, &src, &dst, true);
    assert_no_failures(&failures, &out, Some(&srv));

    // A new server on the same root; the same pull again must make an exact copy.
    let srv = server(&root);
    let out = cp(&srv, &[], srv.url("src"), &dst);
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &dst);
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
    make_transfer_tree(&src, 128, 2, 10);
    let mut srv = server(&root);
    let relay = Relay::start_cutting_after(srv.addr(), 4 << 20);
    let peer = relay.addr().to_string();
    let no_retry = ["--retry-for", "0s"];
    let args = if pull {
        cp_args(Some(&srv), &no_retry, relay.url("src"), &dst)
    } else {
        cp_args(Some(&srv), &no_retry, &src, relay.url("dst"))
    };
    let out = run_sprat(bin(), args, &[]);
    assert!(
        relay.has_cut(),
        "the transfer moved less than 4 MiB through the relay ({} bytes); test data too small?\n{}",
        relay.forwarded(),
        describe(&out)
    );
    let mut failures = dropped_connection_failures(&out, &peer, &src, &dst, true);
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

/// About 10 MiB for a 4 MiB file system: two 3 MiB files (chunked, started first) and sixteen
/// of 256 KiB.
fn make_disk_full_tree(dir: &Path, seed: u64) {
    make_many_files(&dir.join("small"), 16, 256 * 1024, seed);
    for i in 0..2u64 {
        let content = random_bytes(3 << 20, seed + 100 + i);
        make_file(&dir.join(format!("large{i}.bin")), &content, 0o644);
    }
}

fn disk_full_failures(out: &Output, src: &Path, dst: &Path) -> Vec<String> {
    let writer_survived = true;
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
    if common::error_line_count(out) > 1 {
        failures.push("more than one `sprat: error: ` line on stderr".to_string());
    }
    match stderr.lines().find(|l| l.starts_with("sprat: error: ")) {
        None => failures.push("no `sprat: error: ` line on stderr".to_string()),
        Some(l) if !(l.contains("dst") || l.contains(".bin") || l.contains("small")) => {
            failures.push(format!("the error line names no path: {l:?}"))
        }
        Some(_) => {}
    }
    failures.extend(leftover_failures(src, dst, writer_survived));
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
    make_disk_full_tree(&src, 11);
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
    make_disk_full_tree(&src, 12);
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
    make_disk_full_tree(&src, 13);
    let dst = mnt.path().join("dst");
    let out = cp_local(&[], &src, &dst);
    let failures = disk_full_failures(&out, &src, &dst);
    assert_no_failures(&failures, &out, None);
}

// ------------------------------------------------- one bad file does not abort the transfer

#[test]
fn push_with_one_blocked_file_fails_alone_with_exit_1() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 20, 1000, 14);
    let root = t.path().join("root");
    let dst = root.join("dst");
    fs::create_dir_all(dst.join("d000/f00003.bin")).unwrap();
    fs::write(dst.join("d000/f00003.bin/keep.txt"), b"keep").unwrap();
    let srv = server(&root);
    let out = cp(&srv, &[], &src, srv.url("dst"));
    check_blocked_file_outcome(&out, &src, &dst, Some(&srv));
}

#[test]
fn pull_with_one_blocked_file_fails_alone_with_exit_1() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    make_many_files(&src, 20, 1000, 15);
    let dst = t.path().join("dst");
    fs::create_dir_all(dst.join("d000/f00003.bin")).unwrap();
    fs::write(dst.join("d000/f00003.bin/keep.txt"), b"keep").unwrap();
    let srv = server(&root);
    let out = cp(&srv, &[], srv.url("src"), &dst);
    check_blocked_file_outcome(&out, &src, &dst, Some(&srv));
}

#[test]
fn push_of_special_files_does_not_hang_and_makes_them_again() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 10, 1000, 16);
    make_fifo(&src.join("d000/pipe"));
    let _sock = std::os::unix::net::UnixListener::bind(src.join("d000/sock")).unwrap();
    let root = t.path().join("root");
    let srv = server(&root);
    let out = run_sprat_timeout(
        bin(),
        cp_args(Some(&srv), &[], &src, srv.url("dst")),
        &[],
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| {
        panic!(
            "pushing a tree with a FIFO did not finish within 30 s:\n{}",
            describe(&e.output)
        )
    });
    check_special_files_outcome(&out, &src, &root.join("dst"), Some(&srv));
}

// ------------------------------------------------------------- a peer that is not a sprat server

/// A listener that answers every connection with `reply` and closes it; returns its port.
fn fake_peer(reply: &'static [u8]) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().take(64) {
            let Ok(mut c) = c else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut c, &mut buf);
            let _ = std::io::Write::write_all(&mut c, reply);
        }
    });
    port
}

#[test]
fn talking_to_a_peer_that_is_not_sprat_fails_cleanly() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 3, 100, 17);
    let mut failures = Vec::new();
    let replies: [&'static [u8]; 3] = [
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
        &[0xff; 64],
        b"",
    ];
    for reply in replies {
        let port = fake_peer(reply);
        let peer = format!("127.0.0.1:{port}");
        for pull in [false, true] {
            let url = format!("sprat://{peer}/dst");
            let args = if pull {
                cp_args(None, &[], &url, t.path().join(format!("pulled-{port}")))
            } else {
                cp_args(None, &[], &src, &url)
            };
            let what = format!(
                "{} {peer} answering {:?}",
                if pull { "pull from" } else { "push to" },
                String::from_utf8_lossy(&reply[..reply.len().min(16)])
            );
            match run_sprat_timeout(
                bin(),
                args,
                &[("SPRAT_TOKEN", "t")],
                Duration::from_secs(30),
            ) {
                Err(e) => failures.push(format!(
                    "{what}: did not end within 30 s\n{}",
                    describe(&e.output)
                )),
                Ok(out) => {
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    let line = stderr.lines().find(|l| l.starts_with("sprat: error: "));
                    if out.status.success() || stderr.contains("panicked") {
                        failures.push(format!(
                            "{what}: expected a clean failure\n{}",
                            describe(&out)
                        ));
                    } else if !line.is_some_and(|l| l.contains(&peer)) {
                        failures.push(format!(
                            "{what}: no `sprat: error: ` line naming the peer\n{}",
                            describe(&out)
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn missing_client_token_file_exits_2_naming_it() {
    let t = tmp();
    let root = t.path().join("root");
    let srv = server(&root);
    let src = t.path().join("src");
    make_many_files(&src, 2, 10, 18);
    let missing = t.path().join("no-such-token-file");
    let out = run_sprat(
        bin(),
        ["cp", "--token-file", s(&missing), s(&src), &srv.url("dst")],
        &[],
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &[s(&missing)]);
    assert!(entries_below(&root).is_empty());
}

#[test]
fn server_with_missing_token_file_refuses_to_start_naming_it() {
    let t = tmp();
    let root = t.path().join("root");
    fs::create_dir(&root).unwrap();
    let missing = t.path().join("no-such-token-file");
    let opts = ServerOptions {
        token: None,
        extra_args: vec!["--token-file".into(), missing.clone().into_os_string()],
        ..ServerOptions::default()
    };
    match Server::try_start(bin(), &root, &opts) {
        Ok(srv) => panic!(
            "sprat serve started on {} with a missing token file",
            srv.addr()
        ),
        Err(f) => {
            assert!(
                f.status.and_then(|st| st.code()).is_some_and(|c| c != 0),
                "expected a non-zero exit:\n{f}"
            );
            assert!(
                f.stderr.contains(s(&missing)),
                "stderr does not name the token file:\n{f}"
            );
            assert!(!f.stderr.contains("panicked"), "panicked:\n{f}");
        }
    }
}

/// A root that is missing or is a file is bad input, as a named export's is: exit 2, with the
/// path named.
#[test]
fn server_with_a_root_that_is_no_directory_refuses_to_start_with_exit_2() {
    let t = tmp();
    let file = t.path().join("a-file");
    fs::write(&file, b"x").unwrap();
    for root in [t.path().join("missing"), file] {
        match Server::try_start(bin(), &root, &ServerOptions::default()) {
            Ok(srv) => panic!("sprat serve started on {} with root {root:?}", srv.addr()),
            Err(f) => {
                assert_eq!(f.status.and_then(|st| st.code()), Some(2), "{f}");
                assert!(
                    f.stderr.contains(s(&root)),
                    "stderr does not name the root:\n{f}"
                );
                assert!(!f.stderr.contains("panicked"), "panicked:\n{f}");
            }
        }
    }
}

#[test]
fn an_error_line_names_each_cause_once() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    make_file(&src.join("a"), b"a", 0o644);
    // A file where the destination's parent should be a directory.
    let blocker = t.path().join("file");
    fs::write(&blocker, b"x").unwrap();
    let cases = [
        (
            cp_local(&[], &src, blocker.join("dst")),
            "Not a directory (os error 20)",
        ),
        (
            run_sprat(
                bin(),
                [
                    OsString::from("cp"),
                    "--retry-for".into(),
                    "0".into(),
                    src.clone().into(),
                    format!("sprat://127.0.0.1:{}/x", closed_port()).into(),
                ],
                &[("SPRAT_TOKEN", "a-token-of-sixteen-bytes")],
            ),
            "Connection refused (os error 111)",
        ),
    ];
    for (out, cause) in cases {
        let line = sprat_testkit::assert_error_line(&out);
        assert_eq!(line.matches(cause).count(), 1, "{line}");
    }
}

/// A listener that accepts connections and never says a word: the client gives up after one
/// handshake's timeout (30 s), with exit 4 and the peer named. Before, it dialled it five times
/// over, 154 s in all.
#[test]
fn a_listener_that_never_answers_is_given_up_after_one_handshake_timeout() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().take(16) {
            held.push(c);
        }
    });
    let t = tmp();
    let started = std::time::Instant::now();
    let out = run_sprat(
        bin(),
        [
            std::ffi::OsString::from("ls"),
            "--known-servers".into(),
            t.path().join("k").into(),
            format!("sprat://{peer}/").into(),
        ],
        &[],
    );
    let took = started.elapsed();
    assert_exit(&out, 4);
    assert_error_names(&out, &[&peer.to_string(), "timed out"]);
    assert!(took < Duration::from_secs(60), "gave up after {took:?}");
}

/// A file pulled on its own into a directory of many entries lands inside it, in small and
/// in chunks, with the size-and-mtime check and with `--checksum`, and leaves the directory's
/// other entries as they were (the client stops indexing the directory once the server says
/// the source is a file).
#[test]
fn a_single_file_pulled_into_a_crowded_directory_goes_inside_it() {
    let t = tmp();
    let root = t.path().join("root");
    fs::create_dir_all(&root).unwrap();
    fs::write(root.join("file"), b"data").unwrap();
    fs::write(root.join("big"), random_bytes(3 << 20, 6)).unwrap();
    let crowded = t.path().join("crowded");
    make_many_files(&crowded, 30_000, 16, 17);
    let before = fs::read_dir(&crowded).unwrap().count();
    let srv = server(&root);
    let url = |p: &str| format!("sprat://{}/{p}", srv.addr());
    let chunked = common::CHUNKED;
    for flags in [&chunked[..], &[&chunked[..], &["-c"]].concat()] {
        for file in ["file", "big"] {
            let out = cp(&srv, flags, url(file), &crowded);
            let why = format!("pull of {file} {flags:?}\n{}", describe(&out));
            assert_ok(&out, None);
            assert_eq!(
                fs::read(crowded.join(file)).unwrap(),
                fs::read(root.join(file)).unwrap(),
                "{why}"
            );
            assert_eq!(fs::read_dir(&crowded).unwrap().count(), before + 1, "{why}");
            fs::remove_file(crowded.join(file)).unwrap();
        }
    }
}

/// A file copied on its own onto an existing directory goes inside it, under its own name,
/// as with cp and rsync, in a local copy, a push, a pull and between servers, small or in
/// chunks; the directory
/// itself is neither replaced nor otherwise touched. Through a symlink to a directory: a local
/// destination follows it (as cp); a server does not follow the symlink it is asked to
/// write, and refuses, saying what to do.
#[test]
fn a_single_file_onto_an_existing_directory_goes_inside_it() {
    let t = tmp();
    let root = t.path().join("root");
    let local_dirs = t.path().join("dirs");
    for base in [&root, &local_dirs] {
        fs::create_dir_all(base.join("full/sub")).unwrap();
        fs::create_dir_all(base.join("empty")).unwrap();
        std::os::unix::fs::symlink("full", base.join("link")).unwrap();
        fs::write(base.join("file"), b"data").unwrap();
        // Larger than a chunk: it travels in chunks, into a partial file.
        fs::write(base.join("big"), random_bytes(3 << 20, 5)).unwrap();
    }
    let srv = server(&root);
    let url = |p: &str| format!("sprat://{}/{p}", srv.addr());
    let chunked = common::CHUNKED;
    for file in ["file", "big"] {
        let content = fs::read(local_dirs.join(file)).unwrap();
        for dir in ["empty", "full"] {
            let local_file = local_dirs.join(file);
            let runs: [(&str, PathBuf, &dyn Fn() -> std::process::Output); 4] = [
                ("local", local_dirs.join(dir), &|| {
                    cp_local(&chunked, &local_file, local_dirs.join(dir))
                }),
                ("push", root.join(dir), &|| {
                    cp(&srv, &chunked, &local_file, url(dir))
                }),
                ("pull", local_dirs.join(dir), &|| {
                    cp(&srv, &chunked, url(file), local_dirs.join(dir))
                }),
                ("third party", root.join(dir), &|| {
                    cp(&srv, &chunked, url(file), url(dir))
                }),
            ];
            for (how, landed_in, run) in runs {
                let out = run();
                let why = format!("{how} of {file} onto {dir}\n{}", describe(&out));
                assert_ok(&out, None);
                assert_eq!(fs::read(landed_in.join(file)).unwrap(), content, "{why}");
                fs::remove_file(landed_in.join(file)).unwrap();
            }
        }
        // Local through the symlink: inside what it points to.
        let through_link: [&dyn Fn() -> std::process::Output; 2] = [
            &|| cp_local(&chunked, local_dirs.join(file), local_dirs.join("link")),
            &|| cp(&srv, &chunked, url(file), local_dirs.join("link")),
        ];
        for run in through_link {
            let out = run();
            assert_ok(&out, None);
            let landed = local_dirs.join("full").join(file);
            assert_eq!(fs::read(&landed).unwrap(), content);
            fs::remove_file(landed).unwrap();
        }
        // A server's symlink: refused, with what to do.
        let out = cp(&srv, &chunked, local_dirs.join(file), url("link"));
        let why = format!("push of {file} onto link\n{}", describe(&out));
        assert_eq!(out.status.code(), Some(1), "{why}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("is a directory") && stderr.contains("DST/NAME"),
            "{why}"
        );
    }
    for base in [&root, &local_dirs] {
        assert!(base.join("empty").is_dir() && base.join("full/sub").is_dir());
        assert!(fs::symlink_metadata(base.join("link"))
            .unwrap()
            .is_symlink());
        // No partial file, temporary or anything else was left beside them.
        let mut names: Vec<String> = fs::read_dir(base)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["big", "empty", "file", "full", "link"],
            "{}",
            base.display()
        );
        assert_eq!(fs::read_dir(base.join("full")).unwrap().count(), 1);
        assert_eq!(fs::read_dir(base.join("empty")).unwrap().count(), 0);
    }
}

/// A single file pushed to `DST` (no trailing slash) goes where cp puts it: inside DST if
/// that is a directory, else at DST (a new name, a file it updates, a path whose parents are
/// made). From protocol 22 a small file's client does not ask first; its server decides, and
/// the push's check lists the one it chose: a second run finds the file up to date. A larger
/// file, whose data waits for the listing anyway, asks first as before. The report names
/// where the file went either way.
#[test]
fn a_file_pushed_to_dst_without_asking_first_goes_where_cp_puts_it() {
    let t = tmp();
    let srv = server(&t.path().join("root"));
    let report = |out: &Output| -> serde_json::Value {
        assert_ok(out, Some(&srv));
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.lines().last().unwrap_or_default()).expect("a JSON report")
    };
    let large = random_bytes(64 << 10, 9);
    for (name, content) in [("f", &b"the file"[..]), ("large", &large[..])] {
        let root = t.path().join("root").join(name);
        fs::create_dir_all(root.join("dir")).unwrap();
        fs::write(root.join("file"), b"an older version").unwrap();
        let src = t.path().join(name);
        fs::write(&src, content).unwrap();
        let in_dir = format!("dir/{name}");
        for (dst, landed) in [
            ("dir", in_dir.as_str()),
            ("new", "new"),
            ("file", "file"),
            ("a/b/c", "a/b/c"),
        ] {
            let (dst, landed) = (format!("{name}/{dst}"), format!("{name}/{landed}"));
            let first = report(&cp(&srv, &["--json"], &src, srv.url(&dst)));
            assert_eq!(first["files"], 1, "{dst}: {first}");
            assert_eq!(first["destination"], srv.url(&landed), "{dst}");
            let written = fs::read(t.path().join("root").join(&landed)).unwrap();
            assert!(written == content, "{dst}");
            let again = report(&cp(&srv, &["--json"], &src, srv.url(&dst)));
            assert_eq!(
                (again["files"].as_u64(), again["up_to_date"].as_u64()),
                (Some(0), Some(1)),
                "{dst}: {again}"
            );
            assert_eq!(again["destination"], srv.url(&landed), "{dst}");
        }
        assert!(root.join("dir").is_dir());
    }
}

/// With `--json`, a copy that cannot complete prints its error as JSON on stdout too, where a
/// script reads the report.
#[test]
fn json_reports_a_copy_that_cannot_complete_as_an_error_object() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 3, 10, 1);
    let port = closed_port();
    for flag in ["--json", "--json-events"] {
        let url = format!("sprat://127.0.0.1:{port}/x");
        let out = run_sprat(bin(), cp_args(None, &[flag], &src, &url), &[]);
        let why = describe(&out);
        assert_eq!(out.status.code(), Some(4), "{why}");
        let last = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .map(str::to_owned)
            .unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&last).expect(&why);
        assert_eq!(v["exit_code"].as_u64(), Some(4), "{why}");
        assert!(v["error"].as_str().unwrap().contains("127.0.0.1"), "{why}");
    }
}

/// `DST/` with a trailing slash, as with cp and rsync: a single file goes inside it under its
/// own name (made if missing), in a local copy, a push, a pull and a copy between two
/// servers; a tree's contents still go into DST itself.
#[test]
fn a_single_file_goes_into_a_destination_given_with_a_trailing_slash() {
    let t = tmp();
    let (root_a, root_b) = (t.path().join("a"), t.path().join("b"));
    let local = t.path().join("local");
    for base in [&root_a, &root_b, &local] {
        fs::create_dir_all(base.join("dir")).unwrap();
        fs::write(base.join("data.bin"), b"payload").unwrap();
    }
    let (a, b) = (server(&root_a), server(&root_b));
    let url = |s: &Server, p: &str| format!("sprat://{}/{p}", s.addr());
    let outs = [
        (
            local.join("dir/data.bin"),
            cp_local(
                &[],
                local.join("data.bin"),
                format!("{}/", local.join("dir").display()),
            ),
        ),
        (
            local.join("new/data.bin"),
            cp_local(
                &[],
                local.join("data.bin"),
                format!("{}/", local.join("new").display()),
            ),
        ),
        (
            root_a.join("dir/data.bin"),
            cp(&a, &[], local.join("data.bin"), url(&a, "dir/")),
        ),
        (
            local.join("pulled/data.bin"),
            cp(
                &a,
                &[],
                url(&a, "data.bin"),
                format!("{}/", local.join("pulled").display()),
            ),
        ),
        (
            root_b.join("dir/data.bin"),
            cp(&a, &[], url(&a, "data.bin"), url(&b, "dir/")),
        ),
    ];
    for (landed, out) in outs {
        assert_ok(&out, None);
        assert_eq!(
            fs::read(&landed).unwrap(),
            b"payload",
            "{}",
            landed.display()
        );
    }
    // A tree goes inside `DST/` too, as with cp, scp and rsync; `SRC/ DST/` puts its
    // contents into DST, as rsync; `.` is a directory to copy into.
    let out = cp_local(
        &[],
        local.join("dir"),
        format!("{}/", local.join("tree").display()),
    );
    assert_ok(&out, None);
    assert_eq!(
        fs::read(local.join("tree/dir/data.bin")).unwrap(),
        b"payload"
    );
    let out = cp_local(
        &[],
        format!("{}/", local.join("dir").display()),
        format!("{}/", local.join("tree2").display()),
    );
    assert_ok(&out, None);
    assert_eq!(fs::read(local.join("tree2/data.bin")).unwrap(), b"payload");
    let here = local.join("here");
    fs::create_dir_all(&here).unwrap();
    let out = std::process::Command::new(bin())
        .current_dir(&here)
        .args(["cp", "-q"])
        .arg(local.join("dir"))
        .arg(".")
        .env("SPRAT_CONFIG", "/dev/null")
        .output()
        .unwrap();
    assert_ok(&out, None);
    assert_eq!(fs::read(here.join("dir/data.bin")).unwrap(), b"payload");
    // A tree pushed into a server's directory, and pulled into one.
    let out = cp(&a, &[], local.join("dir"), url(&a, "into/"));
    assert_ok(&out, None);
    assert_eq!(
        fs::read(root_a.join("into/dir/data.bin")).unwrap(),
        b"payload"
    );
    let out = cp(
        &a,
        &[],
        url(&a, "into"),
        format!("{}/", local.join("got").display()),
    );
    assert_ok(&out, None);
    assert_eq!(
        fs::read(local.join("got/into/dir/data.bin")).unwrap(),
        b"payload"
    );
}

/// Ctrl-C during a copy: one line saying that nothing is half written and how to go on, and
/// the exit a shell reports for SIGINT (130); with `--json`, stdout has the error in the
/// report's place (it was left empty: review 2026-11-30 of sprat in scripts, F2); the same
/// command run again completes the copy exactly.
#[test]
fn an_interrupted_copy_says_how_to_go_on_and_the_same_command_finishes_it() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 40, 256 * 1024, 21);
    let dst = t.path().join("dst");
    let args = [
        OsString::from("cp"),
        "--json".into(),
        "--bwlimit".into(),
        "2MB/s".into(),
        src.clone().into(),
        dst.clone().into(),
    ];
    let mut child = spawn_sprat(bin(), &args, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !has_regular_file(&dst) {
        assert!(Instant::now() < deadline, "no file copied within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.pid().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_or_panic(Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(130), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("interrupted") && stderr.contains("run the same command again"),
        "{stderr}"
    );
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(said["exit_code"], 130, "{said}");
    assert!(
        said["error"].as_str().unwrap().contains("interrupted"),
        "{said}"
    );
    assert_ok(&cp_local(&[], &src, &dst), None);
    assert_trees_equal(&src, &dst);
}

/// What a user mistypes or half-knows is said plainly: a dangling symlink as SRC names its
/// target, a symlink to a file copied as the link says so (as rsync -a copies it), and
/// `sprat:/HOST...` (one slash) asks whether `sprat://` was meant, instead of trying ssh to a
/// host named `sprat`.
#[test]
fn symlinks_as_sources_and_a_mistyped_url_are_explained() {
    let t = tmp();
    let dir = t.path();
    fs::create_dir_all(dir.join("run")).unwrap();
    fs::write(dir.join("run/out.h5"), b"data").unwrap();
    std::os::unix::fs::symlink("run/out.h5", dir.join("latest.h5")).unwrap();
    std::os::unix::fs::symlink("nowhere", dir.join("dangling")).unwrap();
    let out = cp_local(&[], dir.join("dangling"), dir.join("x"));
    assert_exit(&out, 2);
    assert_error_names(&out, &["symbolic link to 'nowhere', which does not exist"]);
    let out = cp_local(&[], dir.join("latest.h5"), dir.join("copy.h5"));
    assert_ok(&out, None);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("is a symbolic link: it is copied as the link"),
        "{}",
        describe(&out)
    );
    assert!(fs::symlink_metadata(dir.join("copy.h5"))
        .unwrap()
        .is_symlink());
    let out = cp_local(&[], dir.join("run"), "sprat:/127.0.0.1:1/x");
    assert_exit(&out, 2);
    assert_error_names(&out, &["did you mean 'sprat://127.0.0.1:1/x'"]);
}

/// A directory copied onto an existing regular file is a usage mistake said plainly, exit
/// 2, as cp -r and rsync refuse it, locally, pushed and pulled; the file stays as it was
/// (before: "create directory 'afile': File exists (os error 17)", exit 5; review 2026-11-29
/// of rsync habits, F11).
#[test]
fn a_directory_onto_a_file_is_refused_naming_it() {
    let t = tmp();
    let root = t.path().join("root");
    fs::create_dir_all(root.join("src")).unwrap();
    fs::write(root.join("src/f"), b"data").unwrap();
    fs::write(root.join("afile"), b"keep me").unwrap();
    let local = t.path().join("afile");
    fs::write(&local, b"keep me").unwrap();
    let srv = server(&root);
    let outs = [
        cp_local(&[], root.join("src"), &local),
        cp(&srv, &[], root.join("src"), srv.url("afile")),
        cp(&srv, &[], srv.url("src"), &local),
    ];
    for out in outs {
        assert_exit(&out, 2);
        assert_error_names(
            &out,
            &[
                "'",
                "afile' is a file, and a directory cannot be copied onto a file",
            ],
        );
    }
    assert_eq!(fs::read(&local).unwrap(), b"keep me");
    assert_eq!(fs::read(root.join("afile")).unwrap(), b"keep me");
}

// ------------------------------------------------------- a server of another protocol version

/// A hello of another protocol version is refused with the code that says so (from protocol
/// 20; a server of 19 or older used the code of any protocol error, which clients retried
/// for all of `--retry-for` once the server had shown its pinned key), and a client refused
/// so by an older server fails at once, exit 4, with the server's words. (That such a refusal
/// is not retried even from a server that proved itself is `roles::retry`'s unit test: a
/// stand-in cannot show a pinned key.)
#[test]
fn a_server_of_another_protocol_version_is_not_retried() {
    use sprat_proto::{ErrorCode, Message, PROTOCOL_VERSION};
    let t = tmp();
    let opts = ServerOptions {
        extra_args: vec!["--no-encryption".into()],
        ..ServerOptions::default()
    };
    let srv = server_with(&t.path().join("root"), &opts);
    let mut s = common::raw::connect(&srv, "127.0.0.1");
    let older = Message::ClientHello {
        version: PROTOCOL_VERSION - 1,
        nonce: [1; 32],
        hint: [0; 32],
        mac: [0; 32],
    };
    std::io::Write::write_all(&mut s, &older.encode()).unwrap();
    match common::raw::read_message(&mut s).unwrap() {
        Message::Error { code, text } => {
            assert_eq!(code, ErrorCode::VersionMismatch, "{text}");
            let said = format!("protocol {}", PROTOCOL_VERSION - 1);
            assert!(text.contains(&said), "{text}");
        }
        other => panic!("a hello of another version was answered with {other:?}"),
    }

    // An older server refuses this client's hello as protocol 19 did.
    static OLD_REFUSAL: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let refusal = OLD_REFUSAL.get_or_init(|| {
        Message::Error {
            code: ErrorCode::Protocol,
            text: format!(
                "the client speaks sprat protocol {PROTOCOL_VERSION} and this server {}: run \
                 the same sprat release on both",
                PROTOCOL_VERSION - 1
            ),
        }
        .encode()
    });
    let port = fake_peer(refusal);
    let src = t.path().join("src");
    make_many_files(&src, 3, 100, 17);
    let url = OsString::from(format!("sprat://127.0.0.1:{port}/dst"));
    let pulled = t.path().join("pulled").into_os_string();
    for (src, dst) in [(src.into_os_string(), url.clone()), (url, pulled)] {
        let args = cp_args(None, &["--no-encryption", "--retry-for", "60s"], src, dst);
        let started = Instant::now();
        let out = run_sprat_timeout(
            bin(),
            args,
            &[("SPRAT_TOKEN", "t")],
            Duration::from_secs(50),
        )
        .unwrap_or_else(|e| panic!("retried a version mismatch\n{}", describe(&e.output)));
        assert_exit(&out, 4);
        assert_error_names(&out, &["run the same sprat release on both"]);
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("trying again"),
            "{}",
            describe(&out)
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{}",
            describe(&out)
        );
    }
}

/// A report that cannot be written to stdout (a full disk under `> FILE`, here /dev/full) is
/// an I/O error, exit 5, naming stdout, after a copy that is complete (review 2026-11-30 of
/// sprat in scripts, F3: exit 2, "bad usage").
#[test]
fn a_report_stdout_cannot_take_is_an_io_error() {
    let t = tmp();
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"data").unwrap();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = std::process::Command::new(bin())
        .args(["cp", "--json"])
        .arg(&src)
        .arg(t.path().join("dst"))
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write to standard output"));
    assert_eq!(std::fs::read(t.path().join("dst/f")).unwrap(), b"data");
}
