//! Faults a long transfer must survive (issue 15): a connection reset, stalled or corrupted in
//! flight, a server killed and restarted, a client killed in the middle of a large file. Each
//! cell drives the real binary through a real `sprat relay` with fault injection, against
//! real `sprat serve` processes on 127.0.0.1, in push, pull and third-party copies, and asserts the exit code, that no file carries wrong content under
//! its final name, and that the destination ends exactly equal to the source.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use sprat_testkit::run::{run_sprat, spawn_sprat};
use sprat_testkit::server::{Server, ServerOptions};
use sprat_testkit::{assert_trees_equal, tree, Tmpfs};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// About 20 MiB: a 12 MiB file (chunks of 1 MiB), 300 small files, an empty directory, a
/// symlink.
fn make_source(dir: &Path, seed: u64) {
    tree::make_many_files(&dir.join("small"), 300, 20_000, seed);
    std::fs::create_dir_all(dir.join("big")).unwrap();
    tree::make_file(
        &dir.join("big/large.bin"),
        &tree::random_bytes(12 << 20, seed + 1),
        0o640,
    );
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    std::os::unix::fs::symlink("small/../big", dir.join("link")).unwrap();
}

/// Options every faulty copy gets: 1 MiB chunks, quick retries.
const COPY: &[&str] = &["--chunk-size", "1MiB", "--stall-timeout", "3s", "--json"];

fn report(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!("no JSON report ({e}):\n{}", describe(out));
    })
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[derive(Clone, Copy, Debug)]
enum Dir {
    Push,
    Pull,
    /// From server `a` to server `b` (the faults sit in front of `b`, between the servers).
    ThirdParty,
}

/// One cell's data and servers: `srv` is the server the faults sit in front of (the push's or
/// pull's, the third-party copy's destination), `source_srv` a third-party copy's source.
struct Cell {
    /// Holds the cell's directories until the cell is dropped.
    _t: tempfile::TempDir,
    dir: Dir,
    src: PathBuf,
    dst: PathBuf,
    root: PathBuf,
    srv: Server,
    source_srv: Option<Server>,
}

impl Cell {
    /// Servers and paths for a copy in direction `dir`; the source is made by `make`.
    fn new(dir: Dir, make: impl FnOnce(&Path)) -> Cell {
        Cell::new_in(dir, make, None)
    }

    /// [`Cell::new`], with the destination tree in `dest_base` (a file system of its own).
    fn new_in(dir: Dir, make: impl FnOnce(&Path), dest_base: Option<&Path>) -> Cell {
        let t = tmp();
        let base = dest_base.map_or_else(|| t.path().to_path_buf(), Path::to_path_buf);
        let (root, src, dst, source_srv) = match dir {
            Dir::Push => (base.clone(), t.path().join("src"), base.join("dst"), None),
            Dir::Pull => {
                let root = t.path().join("root");
                (root.clone(), root.join("src"), base.join("dst"), None)
            }
            Dir::ThirdParty => {
                let src_root = t.path().join("source-root");
                let a = server(&src_root);
                (
                    base.clone(),
                    src_root.join("src"),
                    base.join("dst"),
                    Some(a),
                )
            }
        };
        make(&src);
        let srv = server(&root);
        Cell {
            _t: t,
            dir,
            src,
            dst,
            root,
            srv,
            source_srv,
        }
    }

    /// The arguments of the copy, reaching `srv` through `via` (its own address or a relay's).
    fn args(&self, via: SocketAddr, opts: &[&str]) -> Vec<std::ffi::OsString> {
        self.args_of(via, opts, None)
    }

    /// [`Cell::args`] for the copy of the source's file `file` alone: the destination is then
    /// the file `dst`.
    fn args_of(
        &self,
        via: SocketAddr,
        opts: &[&str],
        file: Option<&str>,
    ) -> Vec<std::ffi::OsString> {
        let url = |p: &str| format!("sprat://{via}/{p}");
        let rel = file.map_or_else(|| "src".to_string(), |f| format!("src/{f}"));
        let local_src = file.map_or_else(|| self.src.clone(), |f| self.src.join(f));
        match self.dir {
            Dir::Push => cp_args(Some(&self.srv), opts, local_src, url("dst")),
            Dir::Pull => cp_args(Some(&self.srv), opts, url(&rel), &self.dst),
            Dir::ThirdParty => {
                let a = self.source_srv.as_ref().unwrap();
                cp_args(Some(&self.srv), opts, a.url(&rel), url("dst"))
            }
        }
    }

    /// The copy through `via`.
    fn copy(&self, via: SocketAddr, opts: &[&str]) -> Output {
        run_sprat(bin(), self.args(via, opts), &[])
    }

    /// The copy straight to the server.
    fn copy_direct(&self, opts: &[&str]) -> Output {
        self.copy(self.srv.addr(), opts)
    }
}

/// A copy through a relay with `faults` on one of its connections: it ends with an exact
/// copy (repaired within the session or by a retry), exit 0.
fn survives(dir: Dir, faults: &[&str], seed: u64) {
    let cell = Cell::new(dir, |src| make_source(src, seed));
    let relay = RelayProc::start(cell.srv.addr(), faults);
    let out = cell.copy(relay.addr, COPY);
    let why = format!("{dir:?} through {faults:?}\n{}", describe(&out));
    assert_eq!(out.status.code(), Some(0), "{why}");
    assert_trees_equal(&cell.src, &cell.dst);
    let r = report(&out);
    // The report's counts add up: every file of the source was written by some run.
    let files = r["files"].as_u64().unwrap() + r["up_to_date"].as_u64().unwrap();
    assert_eq!(files, 301, "{why}");
    no_wrong_file(&cell.src, &cell.dst).unwrap();
}

// A reset after 2 MiB of the second connection (the session's, after the destination's
// listing for a push; a join for a pull).
#[test]
fn push_survives_a_reset_connection() {
    survives(
        Dir::Push,
        &["--reset-after", "2MiB", "--fault-connection", "2"],
        1,
    );
}

#[test]
fn pull_survives_a_reset_connection() {
    survives(
        Dir::Pull,
        &["--reset-after", "2MiB", "--fault-connection", "1"],
        2,
    );
}

#[test]
fn push_survives_a_stalled_connection() {
    survives(
        Dir::Push,
        &["--stall-after", "1MiB", "--fault-connection", "2"],
        3,
    );
}

#[test]
fn pull_survives_a_stalled_connection() {
    survives(
        Dir::Pull,
        &["--stall-after", "1MiB", "--fault-connection", "1"],
        4,
    );
}

/// One bit flipped on the way, past the first 700,000 bytes of every connection of a push
/// (no TLS) of 300 files of 16 KiB: the damaged file is refused by its checksum, and the
/// same command runs again by itself, sending only what did not arrive (less than 700,000
/// bytes, so not damaged again). Exit 0, an exact copy.
#[test]
fn a_push_whose_data_is_damaged_on_the_way_sends_it_again_by_itself() {
    let t = tmp();
    let (src, root) = (t.path().join("src"), t.path().join("root"));
    tree::make_many_files(&src, 300, 16 << 10, 12);
    let plain = ServerOptions {
        extra_args: vec!["--no-encryption".into()],
        ..ServerOptions::default()
    };
    let srv = server_with(&root, &plain);
    let relay = RelayProc::start(srv.addr(), &["--flip-bit-at", "700000"]);
    let opts: Vec<&str> = COPY
        .iter()
        .copied()
        .chain(["--streams", "1", "--no-encryption"])
        .collect();
    let url = format!("sprat://{}/dst", relay.addr);
    let out = run_sprat(bin(), cp_args(Some(&srv), &opts, &src, url), &[]);
    let why = describe(&out);
    assert_eq!(out.status.code(), Some(0), "{why}");
    assert_trees_equal(&src, &root.join("dst"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("sprat: attempt 1 failed: "), "{why}");
    let json = report(&out);
    assert!(json["attempts"].as_u64() >= Some(2), "{why}");
    // The report is of the command, not of its last run: every file counts as sent (the
    // first run sent most of them, the last found those up to date), none as up to date.
    assert_eq!(json["files"].as_u64(), Some(300), "{why}");
    assert_eq!(json["up_to_date"].as_u64(), Some(0), "{why}");
    assert_eq!(json["counts_since_attempt"].as_u64(), Some(1), "{why}");
}

/// A copy through a relay that flips one bit of the client's stream: the damage is caught.
/// Either the copy is exact (the damaged part was refused and sent again), or it fails with a
/// reason and a non-zero exit (a damaged file is reported by name, never written as good);
/// then the same copy run again directly completes it exactly.
fn flipped_bit_is_caught(dir: Dir, at: &str, connection: &str, seed: u64) {
    let cell = Cell::new(dir, |src| make_source(src, seed));
    let relay = RelayProc::start(
        cell.srv.addr(),
        &["--flip-bit-at", at, "--fault-connection", connection],
    );
    let via_relay = cell.copy(relay.addr, COPY);
    let why = format!("{dir:?}, bit {at} flipped\n{}", describe(&via_relay));
    no_wrong_file(&cell.src, &cell.dst).unwrap_or_else(|e| panic!("{e}: {why}"));
    if via_relay.status.code() != Some(0) {
        let stderr = String::from_utf8_lossy(&via_relay.stderr);
        assert!(
            stderr.lines().any(|l| l.starts_with("sprat: ")),
            "no reason given: {why}"
        );
        let again = cell.copy_direct(COPY);
        assert_eq!(again.status.code(), Some(0), "{}", describe(&again));
    }
    assert_trees_equal(&cell.src, &cell.dst);
}

#[test]
fn a_flipped_bit_in_a_push_is_caught() {
    for (i, at) in ["300", "5000", "700000"].into_iter().enumerate() {
        flipped_bit_is_caught(Dir::Push, at, "2", 5 + i as u64);
    }
}

#[test]
fn a_flipped_bit_in_a_pull_is_caught() {
    for (i, at) in ["60", "200"].into_iter().enumerate() {
        flipped_bit_is_caught(Dir::Pull, at, "2", 8 + i as u64);
    }
}

/// Waits until `dst` holds at least `bytes` of regular file data, or panics after 30 s.
fn wait_for_bytes(dst: &Path, bytes: u64, child: &mut sprat_testkit::run::SpratChild) {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let have = du(dst);
        if have >= bytes {
            return;
        }
        if Instant::now() > until {
            panic!(
                "only {have} bytes arrived in 30 s:\n{}",
                describe(&child.wait_or_panic(Duration::from_secs(1)))
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Bytes of regular files below `dir`, with the bytes a partial file's journal records as
/// written (a partial file itself is preallocated: its size says nothing).
fn du(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                let name = e.file_name().to_string_lossy().into_owned();
                total += if name.ends_with(".sprat-part.log") {
                    journal_bytes(&e.path())
                } else if name.ends_with(".sprat-part") {
                    0
                } else {
                    m.len()
                };
            }
        }
    }
    total
}

/// The bytes a journal records: a 28-byte header, then 32-byte records whose second u64 is
/// the length of a chunk written.
fn journal_bytes(log: &Path) -> u64 {
    let bytes = std::fs::read(log).unwrap_or_default();
    // The header: magic, size, mtime (s, ns), the source file's version. A journal of a
    // hashed (long) name records the name after it: its length in two bytes, then the name.
    const HEADER: usize = 8 + 8 + 8 + 4 + 8;
    let header = match bytes.get(..8) {
        Some(b"SPRATPT4") => bytes.get(HEADER..HEADER + 2).map_or(HEADER, |n| {
            HEADER + 2 + usize::from(u16::from_le_bytes([n[0], n[1]]))
        }),
        _ => HEADER,
    };
    bytes
        .get(header..)
        .unwrap_or_default()
        .chunks_exact(32)
        .map(|r| u64::from_le_bytes(r[8..16].try_into().unwrap()))
        .sum()
}

/// The server is killed with SIGKILL in the middle of a copy and started again on the same
/// port 2 s later: the client, retrying, resumes and completes the same transfer.
fn server_killed_and_restarted(dir: Dir, seed: u64) {
    let mut cell = Cell::new(dir, |src| make_source(src, seed));
    let port = cell.srv.port();
    // A rate-limited path, so that the kill lands in the middle.
    let relay = RelayProc::start(cell.srv.addr(), &["--rate", "100mbit"]);
    let mut client = spawn_sprat(bin(), cell.args(relay.addr, COPY), &[]);
    wait_for_bytes(&cell.dst, 4 << 20, &mut client);
    cell.srv.kill();
    std::thread::sleep(Duration::from_secs(2));
    let opts = ServerOptions {
        listen: format!("127.0.0.1:{port}"),
        ..ServerOptions::default()
    };
    cell.srv = Server::start(bin(), &cell.root, &opts);
    let out = client.wait_or_panic(Duration::from_secs(120));
    let why = format!(
        "{dir:?}\n{}\nserver: {}",
        describe(&out),
        cell.srv.stderr_log()
    );
    assert_eq!(out.status.code(), Some(0), "{why}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("sprat: attempt 1 failed:")),
        "one line per failed attempt: {why}"
    );
    let r = report(&out);
    assert!(r["attempts"].as_u64().unwrap() >= 2, "{why}");
    assert!(
        r["up_to_date"].as_u64().unwrap() > 0 || r["bytes_not_sent"].as_u64().unwrap() > 0,
        "the run after the restart sent everything again: {why}"
    );
    assert_trees_equal(&cell.src, &cell.dst);
}

#[test]
fn push_resumes_after_the_server_is_killed_and_restarted() {
    server_killed_and_restarted(Dir::Push, 11);
}

#[test]
fn pull_resumes_after_the_server_is_killed_and_restarted() {
    server_killed_and_restarted(Dir::Pull, 12);
}

/// The client is killed with SIGKILL in the middle of a large file: nothing carries the large
/// file's final name, and the same command run again sends only what is missing.
/// What a killed pushing client had written to its socket still reaches the server, as does
/// a third-party copy's data in the buffers between the two servers (up to about 10 MiB on
/// loopback, more on a loaded host): those get a larger file, killed earlier, so that what
/// was in flight cannot complete it.
fn client_killed(dir: Dir, seed: u64) {
    client_killed_in(dir, seed, "large.bin");
}

/// [`client_killed`], the large file named `name`.
fn client_killed_in(dir: Dir, seed: u64, name: &str) {
    let (total, kill_at) = match dir {
        Dir::ThirdParty => (64u64 << 20, 16u64 << 20),
        Dir::Push => (48 << 20, 12 << 20),
        Dir::Pull => (24 << 20, 12 << 20),
    };
    let cell = Cell::new(dir, |src| {
        std::fs::create_dir_all(src.join("big")).unwrap();
        tree::make_file(
            &src.join("big").join(name),
            &tree::random_bytes(total as usize, seed),
            0o600,
        );
    });
    interrupt(&cell, kill_at);
    // Nothing under the final name (the file is incomplete), and what is there is right.
    assert!(
        !cell.dst.join("big").join(name).exists(),
        "an incomplete file has its final name"
    );
    no_wrong_file(&cell.src, &cell.dst).unwrap();
    let out = cell.copy_direct(COPY);
    let why = format!("{dir:?}\n{}", describe(&out));
    assert_eq!(out.status.code(), Some(0), "{why}");
    assert_trees_equal(&cell.src, &cell.dst);
    let not_sent = report(&out)["bytes_not_sent"].as_u64().unwrap();
    let sent = total - not_sent;
    // What was missing, and 10% of the file besides at most.
    assert!(
        not_sent >= kill_at * 4 / 5 && sent < total - kill_at + total / 10,
        "the re-run sent {sent} of {total} bytes: {why}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(cell.dst.join("big"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "partial files left: {leftovers:?}");
}

/// Runs `cell`'s copy through a 100 Mbit/s relay and kills its client with SIGKILL once
/// `kill_at` bytes are at the destination, then waits until the servers are done writing what
/// they had received (a third-party copy's source server stops sending when its client goes
/// away), so that a re-run's listing sees it all (a re-run at once is correct too, see
/// below, but may send more).
fn interrupt(cell: &Cell, kill_at: u64) {
    let relay = RelayProc::start(cell.srv.addr(), &["--rate", "100mbit"]);
    let mut client = spawn_sprat(bin(), cell.args(relay.addr, COPY), &[]);
    wait_for_bytes(&cell.dst, kill_at, &mut client);
    client.kill();
    let _ = client.wait_timeout(Duration::from_secs(10));
    let mut last = du(&cell.dst);
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = du(&cell.dst);
        if now == last || Instant::now() > until {
            break;
        }
        last = now;
    }
}

/// A cell of one large file, `big/large.bin`, and a small one, whose copy was interrupted
/// (see [`interrupt`]); with the large file's size and the bytes it was killed at.
fn interrupted(dir: Dir, seed: u64) -> (Cell, u64, u64) {
    let (total, kill_at) = match dir {
        Dir::Pull => (24u64 << 20, 12u64 << 20),
        _ => (48 << 20, 12 << 20),
    };
    let cell = Cell::new(dir, |src| {
        std::fs::create_dir_all(src.join("big")).unwrap();
        tree::make_file(
            &src.join("big/large.bin"),
            &tree::random_bytes(total as usize, seed),
            0o600,
        );
        tree::make_file(&src.join("small"), b"small", 0o644);
    });
    interrupt(&cell, kill_at);
    (cell, total, kill_at)
}

/// `--delete` after an interrupted copy: the partial file of a large file the source still
/// has is resumed, not deleted; that of a file the source no longer has is deleted with its
/// journal, and the copy succeeds.
fn delete_after_an_interruption(dir: Dir, seed: u64) {
    let (cell, _, kill_at) = interrupted(dir, seed);
    let delete: Vec<&str> = COPY.iter().copied().chain(["--delete"]).collect();
    let out = cell.copy_direct(&delete);
    let why = format!("{dir:?}\n{}", describe(&out));
    assert_eq!(out.status.code(), Some(0), "{why}");
    assert_trees_equal(&cell.src, &cell.dst);
    let not_sent = report(&out)["bytes_not_sent"].as_u64().unwrap();
    assert!(
        not_sent >= kill_at * 4 / 5,
        "resumed {not_sent} bytes only: {why}"
    );
    assert_eq!(report(&out)["deleted"].as_u64(), Some(0), "{why}");

    // Interrupted again, then the file goes from the source: its partial file goes too.
    std::fs::remove_file(cell.dst.join("big/large.bin")).unwrap();
    interrupt(&cell, kill_at);
    let hidden = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d.join("big"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        hidden(&cell.dst).len(),
        2,
        "no partial file to delete: {:?}",
        hidden(&cell.dst)
    );
    std::fs::remove_file(cell.src.join("big/large.bin")).unwrap();
    let out = cell.copy_direct(&delete);
    let why = format!("{dir:?}\n{}", describe(&out));
    assert_eq!(out.status.code(), Some(0), "{why}");
    assert_eq!(report(&out)["deleted"].as_u64(), Some(2), "{why}");
    assert_eq!(hidden(&cell.dst), Vec::<String>::new(), "{why}");
    assert_trees_equal(&cell.src, &cell.dst);
}

/// An interrupted copy, then the large file changes at the source keeping its size and mtime:
/// `--checksum` does not resume the partial file on size and mtime (that would make a mix of
/// the two versions), it sends the file whole and the copy is exact.
fn checksum_after_an_interruption(dir: Dir, seed: u64) {
    let (cell, total, _) = interrupted(dir, seed);
    let big = cell.src.join("big/large.bin");
    let mtime = std::fs::metadata(&big).unwrap().modified().unwrap();
    std::fs::write(&big, tree::random_bytes(total as usize, seed + 100)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&big)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let checked: Vec<&str> = COPY.iter().copied().chain(["--checksum"]).collect();
    let out = cell.copy_direct(&checked);
    let why = format!("{dir:?}\n{}", describe(&out));
    assert_eq!(out.status.code(), Some(0), "{why}");
    assert_eq!(
        std::fs::read(cell.dst.join("big/large.bin")).unwrap(),
        std::fs::read(&big).unwrap(),
        "not the source's content: {why}"
    );
    // Nothing of the large file was left out: only the small file's 5 bytes, up to date.
    assert_eq!(report(&out)["bytes_not_sent"].as_u64(), Some(5), "{why}");
}

/// SIGTERM to a server while a push runs: it accepts no new connection (a new client is
/// refused), lets the push finish (the client sees nothing wrong: exit 0, an exact copy),
/// says so in its log, and exits 0 once it has.
#[test]
fn a_server_stopped_by_sigterm_lets_the_running_push_finish() {
    let t = tmp();
    let (src, root) = (t.path().join("src"), t.path().join("root"));
    tree::make_many_files(&src, 40, 256 << 10, 39);
    let mut srv = server(&root);
    // 10 MiB at 40 Mbit/s: about 2 s.
    let relay = RelayProc::start(srv.addr(), &["--rate", "40mbit"]);
    let url = format!("sprat://{}/dst", relay.addr);
    let mut client = spawn_sprat(bin(), cp_args(Some(&srv), &["--json"], &src, url), &[]);
    wait_for_bytes(&root.join("dst"), 1 << 20, &mut client);
    srv.signal("TERM");
    // Once it says it stopped accepting (it logs that after closing its listener), not after
    // a fixed 300 ms a loaded host may not have given its signal thread.
    let until = Instant::now() + Duration::from_secs(10);
    while !srv.stderr_log().contains("stopping (SIGTERM)") {
        assert!(Instant::now() < until, "{}", srv.stderr_log());
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut ls: Vec<std::ffi::OsString> = vec!["ls".into()];
    ls.extend(srv.client_args());
    ls.push(srv.url("").into());
    let refused = run_sprat(bin(), ls, &[]);
    assert_ne!(refused.status.code(), Some(0), "{}", describe(&refused));
    let out = client.wait_or_panic(Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_trees_equal(&src, &root.join("dst"));
    let status = srv.wait_exit(Duration::from_secs(10));
    let log = srv.stderr_log();
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{log}");
    assert!(
        log.contains("stopping (SIGTERM): accepting no new connection"),
        "{log}"
    );
    assert!(log.contains("stopped: every transfer finished"), "{log}");
}

/// What an interrupted push left, as `sprat ls` and `sprat du` show it: the incomplete
/// large file is not named by the short listing (which scripts read for files that are
/// there; stderr says why), `ls -l` marks it with `~`, neither shows the hidden partial file
/// and journal it is kept in, and `du` counts it apart from the files.
#[test]
fn ls_and_du_tell_an_incomplete_file_from_the_files_there() {
    let (cell, _, _) = interrupted(Dir::Push, 38);
    let run = |args: &[&str]| {
        let mut v: Vec<std::ffi::OsString> = vec![args[0].into()];
        v.extend(cell.srv.client_args());
        v.extend(args[1..].iter().map(std::ffi::OsString::from));
        let out = run_sprat(bin(), v, &[]);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", describe(&out));
        out
    };
    let url = cell.srv.url("dst/big");
    let out = run(&["ls", &url]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "{}",
        describe(&out)
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("not listed: 1 file an interrupted copy left incomplete (large.bin)"),
        "{said}"
    );
    let out = run(&["ls", "-l", &url]);
    let long = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = long.lines().collect();
    assert_eq!(lines.len(), 1, "{long}");
    assert!(
        lines[0].starts_with('~') && lines[0].ends_with(" large.bin"),
        "{long}"
    );
    let out = run(&["du", "--json", &cell.srv.url("dst")]);
    let du: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(du["files"].as_u64(), Some(1), "only the small file: {du}");
    assert_eq!(du["bytes"].as_u64(), Some(5), "{du}");
    assert_eq!(du["incomplete_files"].as_u64(), Some(1), "{du}");
    assert!(du["incomplete_bytes"].as_u64().unwrap() > 48 << 20, "{du}");
    // `stat` of the incomplete file fails (it is not there), and says what is there instead.
    let mut stat: Vec<std::ffi::OsString> = vec!["stat".into()];
    stat.extend(cell.srv.client_args());
    stat.push(cell.srv.url("dst/big/large.bin").into());
    let out = run_sprat(bin(), stat, &[]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        said.contains("'dst/big/large.bin' is not there yet: an interrupted copy left"),
        "{}",
        describe(&out)
    );
}

/// An interrupted copy, then the large file is replaced at the source by another content of
/// the same size and mtime: written in place with its mtime put back (`in_place`), or
/// renamed over it (as `cp -p`, `tar x` or an editor's save leave it). The partial file is of
/// another version (its journal records the inode and change time of the source file): it is
/// not resumed, the file is sent whole, and the copy is exact. Resuming would make a mix of
/// the two versions that every later run takes as up to date.
fn replaced_after_an_interruption(dir: Dir, seed: u64, in_place: bool) {
    let (cell, total, _) = interrupted(dir, seed);
    let big = cell.src.join("big/large.bin");
    let mtime = std::fs::metadata(&big).unwrap().modified().unwrap();
    let content = tree::random_bytes(total as usize, seed + 100);
    let written = if in_place {
        big.clone()
    } else {
        cell.src.join("big/new.tmp")
    };
    std::fs::write(&written, &content).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&written)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    if !in_place {
        std::fs::rename(&written, &big).unwrap();
    }
    let out = cell.copy_direct(COPY);
    let why = format!("{dir:?}, in place: {in_place}\n{}", describe(&out));
    assert_eq!(out.status.code(), Some(0), "{why}");
    assert!(
        std::fs::read(cell.dst.join("big/large.bin")).unwrap() == content,
        "not the source's content: {why}"
    );
    // Nothing of the large file was left out: only the small file's 5 bytes, up to date.
    assert_eq!(report(&out)["bytes_not_sent"].as_u64(), Some(5), "{why}");
}

#[test]
fn a_partial_file_of_a_source_replaced_with_the_same_size_and_mtime_is_not_resumed() {
    replaced_after_an_interruption(Dir::Push, 35, false);
    replaced_after_an_interruption(Dir::Pull, 36, true);
}

#[test]
fn a_third_party_partial_file_of_a_replaced_source_is_not_resumed() {
    replaced_after_an_interruption(Dir::ThirdParty, 37, false);
}

#[test]
fn checksum_sends_whole_a_file_whose_partial_file_is_of_another_content() {
    checksum_after_an_interruption(Dir::Push, 33);
    checksum_after_an_interruption(Dir::Pull, 34);
}

#[test]
fn a_push_with_delete_resumes_partial_files_and_deletes_those_of_files_gone() {
    delete_after_an_interruption(Dir::Push, 31);
}

#[test]
fn a_pull_with_delete_resumes_partial_files_and_deletes_those_of_files_gone() {
    delete_after_an_interruption(Dir::Pull, 32);
}

/// A single file copied on its own (SRC a file, DST the file `dst`), the client killed with
/// SIGKILL half way: nothing under the final name, and the same command run again sends
/// only what is missing.
fn single_file_client_killed(dir: Dir, seed: u64) {
    let total = 24u64 << 20;
    let cell = Cell::new(dir, |src| {
        std::fs::create_dir_all(src).unwrap();
        tree::make_file(
            &src.join("large.bin"),
            &tree::random_bytes(total as usize, seed),
            0o600,
        );
    });
    let log = cell.dst.parent().unwrap().join(".dst.sprat-part.log");
    let relay = RelayProc::start(cell.srv.addr(), &["--rate", "100mbit"]);
    let file = Some("large.bin");
    let mut client = spawn_sprat(bin(), cell.args_of(relay.addr, COPY, file), &[]);
    let until = Instant::now() + Duration::from_secs(30);
    while journal_bytes(&log) < total / 2 {
        assert!(Instant::now() < until, "half the file never arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
    client.kill();
    let _ = client.wait_timeout(Duration::from_secs(10));
    // Let the server write what it had received (see `client_killed`).
    let mut last = journal_bytes(&log);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = journal_bytes(&log);
        if now == last {
            break;
        }
        last = now;
    }
    // Nothing incomplete under the final name. The file may be complete there: the relay
    // may have held the rest of it when the client died, and delivered it (a loaded
    // machine reads the journal late); then it must be whole and exact.
    if cell.dst.exists() {
        assert_eq!(
            std::fs::read(&cell.dst).unwrap(),
            std::fs::read(cell.src.join("large.bin")).unwrap(),
            "an incomplete file has its final name"
        );
    }
    let out = run_sprat(bin(), cell.args_of(cell.srv.addr(), COPY, file), &[]);
    let why = format!("{dir:?}\n{}", describe(&out));
    assert_eq!(out.status.code(), Some(0), "{why}");
    assert_eq!(
        std::fs::read(&cell.dst).unwrap(),
        std::fs::read(cell.src.join("large.bin")).unwrap()
    );
    assert!(!log.exists(), "the journal stayed");
    let not_sent = report(&out)["bytes_not_sent"].as_u64().unwrap();
    assert!(
        not_sent >= total * 2 / 5 && total - not_sent < total * 3 / 5,
        "the re-run sent {} of {total} bytes: {why}",
        total - not_sent
    );
    // Once more: the file is up to date, nothing is sent.
    let out = run_sprat(bin(), cell.args_of(cell.srv.addr(), COPY, file), &[]);
    assert_eq!(
        report(&out)["up_to_date"].as_u64(),
        Some(1),
        "{}",
        describe(&out)
    );
}

/// The client is killed and the same command run again at once, while the server still
/// writes what the killed session had sent: the two sessions share the large file, and the
/// destination ends exact (content, modes, mtimes).
#[test]
fn a_push_run_again_at_once_after_its_client_was_killed_ends_exact() {
    for seed in [71, 72, 73] {
        let cell = Cell::new(Dir::Push, |src| make_source(src, seed));
        let relay = RelayProc::start(cell.srv.addr(), &["--rate", "200mbit"]);
        let mut client = spawn_sprat(bin(), cell.args(relay.addr, COPY), &[]);
        wait_for_bytes(&cell.dst, 6 << 20, &mut client);
        client.kill();
        let out = cell.copy_direct(COPY);
        let why = format!(
            "seed {seed}\n{}\nserver: {}",
            describe(&out),
            cell.srv.stderr_log()
        );
        assert_eq!(out.status.code(), Some(0), "{why}");
        assert_trees_equal(&cell.src, &cell.dst);
        // Once the killed session's writes are over too, nothing has changed.
        std::thread::sleep(Duration::from_millis(500));
        assert_trees_equal(&cell.src, &cell.dst);
        no_wrong_file(&cell.src, &cell.dst).unwrap();
    }
}

#[test]
fn a_single_file_push_killed_half_way_resumes() {
    single_file_client_killed(Dir::Push, 61);
}

#[test]
fn a_single_file_pull_killed_half_way_resumes() {
    single_file_client_killed(Dir::Pull, 62);
}

#[test]
fn a_push_killed_in_a_large_file_resumes_from_its_verified_chunks() {
    client_killed(Dir::Push, 21);
}

#[test]
fn a_pull_killed_in_a_large_file_resumes_from_its_verified_chunks() {
    client_killed(Dir::Pull, 22);
}

/// A name too long to keep in the partial file's hidden name (which then holds its hash)
/// resumes too: its journal records the name.
#[test]
fn a_large_file_with_a_name_too_long_for_its_partial_name_resumes() {
    let long = format!("{}.bin", "a-long-name-".repeat(20));
    assert!(long.len() > 240 && long.len() < 256);
    client_killed_in(Dir::Push, 23, &long);
    client_killed_in(Dir::Pull, 24, &long);
}

// Third-party copies: the faults sit between the two servers (and on the client's requests to
// the destination); connection 1 is the client's ticket request, 2 the source server's listing
// of the destination, 3 its session.
#[test]
fn third_party_survives_a_reset_connection() {
    survives(
        Dir::ThirdParty,
        &["--reset-after", "2MiB", "--fault-connection", "3"],
        41,
    );
}

#[test]
fn third_party_survives_a_stalled_connection() {
    survives(
        Dir::ThirdParty,
        &["--stall-after", "1MiB", "--fault-connection", "3"],
        42,
    );
}

#[test]
fn a_flipped_bit_in_a_third_party_copy_is_caught() {
    for (i, at) in ["300", "700000"].into_iter().enumerate() {
        flipped_bit_is_caught(Dir::ThirdParty, at, "3", 43 + i as u64);
    }
}

#[test]
fn third_party_resumes_after_the_destination_server_is_killed_and_restarted() {
    server_killed_and_restarted(Dir::ThirdParty, 45);
}

#[test]
fn a_third_party_copy_whose_client_is_killed_stops_and_resumes() {
    client_killed(Dir::ThirdParty, 46);
}

/// A source for [`disk_full`]: 14 MiB of small files and a 2 MiB large file (each file fits
/// an 8 MiB disk on its own: a large file larger than the free space would be refused before
/// it is written, by name and without filling the disk, see tests/hostile_data.rs).
fn make_full_disk_source(dir: &Path, seed: u64) {
    tree::make_many_files(&dir.join("small"), 700, 20_000, seed);
    std::fs::create_dir_all(dir.join("big")).unwrap();
    let content = tree::random_bytes(2 << 20, seed + 1);
    tree::make_file(&dir.join("big/large.bin"), &content, 0o640);
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    std::os::unix::fs::symlink("small/../big", dir.join("link")).unwrap();
}

/// The destination's disk fills up (an 8 MiB tmpfs for a 16 MiB source): the copy fails with
/// exit 5 naming the cause, no file carries wrong content under its final name, and once
/// space is freed the same command completes the copy, sending less than everything.
fn disk_full(dir: Dir, seed: u64) {
    let Some(disk) = Tmpfs::mount("8m") else {
        eprintln!("skipped: cannot mount tmpfs");
        return;
    };
    let source = |src: &Path| make_full_disk_source(src, seed);
    let cell = Cell::new_in(dir, source, Some(disk.path()));
    let out = cell.copy_direct(COPY);
    let why = format!("{dir:?}\n{}", describe(&out));
    common::assert_disk_full(&out, &why);
    no_wrong_file(&cell.src, &cell.dst).unwrap_or_else(|e| panic!("{e}: {why}"));
    assert!(disk.resize("64m"));
    let out = cell.copy_direct(COPY);
    let why = format!("{dir:?}, after space was freed\n{}", describe(&out));
    assert_eq!(out.status.code(), Some(0), "{why}");
    assert_trees_equal(&cell.src, &cell.dst);
    let r = report(&out);
    assert!(
        r["up_to_date"].as_u64().unwrap() > 0 || r["bytes_not_sent"].as_u64().unwrap() > 0,
        "the re-run sent everything again: {why}"
    );
    drop(cell);
}

#[test]
fn a_push_into_a_full_disk_fails_cleanly_and_completes_once_space_is_freed() {
    disk_full(Dir::Push, 51);
}

#[test]
fn a_pull_into_a_full_disk_fails_cleanly_and_completes_once_space_is_freed() {
    disk_full(Dir::Pull, 52);
}

#[test]
fn a_third_party_copy_into_a_full_disk_fails_cleanly_and_completes_once_space_is_freed() {
    disk_full(Dir::ThirdParty, 53);
}

#[test]
fn a_transfer_that_keeps_failing_gives_up_after_retry_for_with_exit_6() {
    let t = tmp();
    let src = t.path().join("src");
    make_source(&src, 31);
    let root = t.path().join("root");
    let srv = server(&root);
    // Every connection is reset before it carries a whole file (the small ones are 20,000
    // bytes): no run can succeed, nor copy anything. After 64 KiB, a few files got through on
    // each run, each such run started --retry-for again, and a loaded host took 51 runs (over
    // 60 s) to end.
    let relay = RelayProc::start(srv.addr(), &["--reset-after", "16KiB"]);
    let started = Instant::now();
    let out = run_sprat(
        bin(),
        cp_args(Some(&srv), &["--retry-for", "4s"], &src, relay.url("dst")),
        &[],
    );
    assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("gave up after") && stderr.contains("--retry-for"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    no_wrong_file(&src, &root.join("dst")).unwrap();
}

/// `--retry-for` bounds the time without progress, not the whole copy: a copy that has run
/// longer than it and then loses its connection is run again, as long as each run copies
/// something (before, it gave up at the first loss, exit 6).
#[test]
fn a_copy_longer_than_retry_for_is_still_retried_while_it_progresses() {
    let t = tmp();
    let src = t.path().join("src");
    tree::make_many_files(&src, 120, 64 << 10, 37);
    let root = t.path().join("root");
    let srv = server(&root);
    // About 1 MB/s, and every connection reset after 2 MB from the client: each run copies
    // about 2 s worth, longer than the 1 s of --retry-for, then loses its connection.
    let relay = RelayProc::start(srv.addr(), &["--rate", "8mbit", "--reset-after", "2MB"]);
    let out = run_sprat(
        bin(),
        cp_args(
            Some(&srv),
            &["--retry-for", "1s", "--streams", "1", "--json"],
            &src,
            relay.url("dst"),
        ),
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let attempts = sprat_testkit::parse_json_report(&out.stdout).u64("attempts");
    assert!(attempts >= 3, "{attempts} attempts");
    assert_trees_equal(&src, &root.join("dst"));
}

/// A single large file pushed to a server met for the first time, over a link that drops
/// every 2 MB: the server proved itself while the client asked what DST is, before the first
/// run, and the first run's loss is retried like any other. Before, the client took the
/// server for one never reached and gave up at once (exit 4), as the push's session had been
/// dialled during that question.
#[test]
fn a_single_file_pushed_to_a_new_server_over_a_dropping_link_is_retried() {
    let t = tmp();
    let big = t.path().join("big");
    let data = tree::random_bytes(12 << 20, 47);
    std::fs::write(&big, &data).unwrap();
    let root = t.path().join("root");
    let srv = server(&root);
    // The server's first bytes come late on every connection: the question and the
    // session's connection both finish their first contact before the first run.
    let relay = RelayProc::start(
        srv.addr(),
        &["--reset-after", "2MB", "--slow-hello", "50ms"],
    );
    let out = common::copy_over_a_dropping_link(&srv, &[], &big, relay.url("big"));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let attempts = sprat_testkit::parse_json_report(&out.stdout).u64("attempts");
    assert!(attempts >= 2, "{attempts} attempts");
    assert_eq!(std::fs::read(root.join("big")).unwrap(), data);
}

/// `--checksum` over a link that drops every 2 MB: a large file of 12 MiB is resumed from
/// what the earlier attempts of the same run wrote (a partial file of this very version of
/// the source), and the copy completes. Before, `--checksum` sent it whole every time, each
/// attempt's progress restarted `--retry-for`, and the copy never ended (review 2026-11-29,
/// chaos, F2).
#[test]
fn checksum_resumes_a_large_file_across_its_own_retries() {
    let t = tmp();
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let data = tree::random_bytes(12 << 20, 41);
    std::fs::write(src.join("big"), &data).unwrap();
    let root = t.path().join("root");
    let srv = server(&root);
    let relay = RelayProc::start(srv.addr(), &["--reset-after", "2MB"]);
    let out = common::copy_over_a_dropping_link(&srv, &["--checksum"], &src, relay.url("dst"));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(std::fs::read(root.join("dst/big")).unwrap(), data);
}

/// A pull paced by `--bwlimit` reads its streams in turn: each may go unread for longer than
/// the server's idle timeout while the session as a whole moves. The server's session
/// watchdog bounds a session's connections together; their own send timeout is dropped once
/// the session has them, so none is cut for waiting its turn. Before, a TLS write (and a
/// plain one) that waited longer than the idle timeout failed, and the pull with it (review
/// 2026-11-30 of protocol 22, M2).
#[test]
fn a_paced_pull_whose_streams_wait_their_turn_is_not_cut_by_the_idle_timeout() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("t");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..32 {
        let data = tree::random_bytes(64 << 10, 100 + i);
        std::fs::write(src.join(format!("f{i:03}")), data).unwrap();
    }
    let opts = ServerOptions {
        extra_args: vec!["--idle-timeout".into(), "3s".into()],
        ..ServerOptions::default()
    };
    let srv = server_with(&root, &opts);
    let dst = t.path().join("dst");
    // 12 streams of 64 KiB batches at 200 KB/s: each stream is read once in about 4 s,
    // the session every 0.33 s. (With a 2 s idle timeout, the session's end, its last
    // batches read from the sockets' buffers, was cut now and then on a loaded host.)
    let paced = [
        "--bwlimit",
        "200KB/s",
        "--streams",
        "12",
        "--batch-size",
        "64KiB",
        "--tcp-buffer",
        "64KiB",
        "--retry-for",
        "0s",
    ];
    let out = cp(&srv, &paced, srv.url("t"), &dst);
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &dst);
}

/// A namespace command (`ls`, `stat`, `du`...) whose path goes silent once its request is
/// sent (here the relay stops forwarding in both directions after the client's last byte)
/// fails as stalled within its patience, exit 4, instead of waiting for ever (review
/// 2026-11-30 of sprat in scripts, F1: it was still waiting after 400 s); a server still at
/// a request says `Working` meanwhile (the engine's unit test).
#[test]
fn a_namespace_command_on_a_path_gone_silent_fails_as_stalled() {
    let t = tmp();
    let root = t.path().join("root");
    std::fs::create_dir_all(root.join("d")).unwrap();
    let srv = server(&root);
    let run = |relay: &RelayProc| {
        let mut ls: Vec<std::ffi::OsString> = vec!["ls".into()];
        ls.extend(srv.client_args());
        ls.push(format!("sprat://{}/d", relay.addr).into());
        sprat_testkit::run::run_sprat_timeout(bin(), ls, &[], Duration::from_secs(150))
            .expect("sprat ls gave up within 150 s")
    };
    // How many bytes the client sends for that `ls`, through a relay that forwards them all.
    let log = t.path().join("relay.log");
    let counting = RelayProc::start_logged(srv.addr(), &[], &log);
    let out = run(&counting);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let sent = counting.closed()[0].0.to_string();
    let silent = RelayProc::start(srv.addr(), &["--stall-after", &sent]);
    let started = Instant::now();
    let out = run(&silent);
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no progress from"), "{said}");
    assert!(started.elapsed() < Duration::from_secs(120));
}
