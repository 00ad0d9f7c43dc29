//! Helpers shared by the end-to-end test files: the binary's path, `sprat cp` invocations with
//! the server's token, and assertions on exit codes. Each test file uses only part of this.
#![allow(dead_code)]

pub mod raw;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Output;

use sprat_testkit::{describe, run_sprat, Server, ServerOptions};

/// The `sprat` binary under test.
pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sprat"))
}

/// A fresh temporary directory.
pub fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sprat-e2e-")
        .tempdir()
        .unwrap()
}

/// Starts a server with the default token exporting `root` (created if missing).
pub fn server(root: &Path) -> Server {
    server_with(root, &ServerOptions::default())
}

/// Starts a server exporting `root` (created if missing) with `opts`.
pub fn server_with(root: &Path, opts: &ServerOptions) -> Server {
    std::fs::create_dir_all(root).unwrap();
    Server::start(bin(), root, opts)
}

/// Builds `cp [server's token args] [extra] SRC DST`.
pub fn cp_args(
    server: Option<&Server>,
    extra: &[&str],
    src: impl AsRef<OsStr>,
    dst: impl AsRef<OsStr>,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["cp".into()];
    if let Some(s) = server {
        args.extend(s.client_args());
    }
    args.extend(extra.iter().map(OsString::from));
    args.push(src.as_ref().to_owned());
    args.push(dst.as_ref().to_owned());
    args
}

/// Runs `sprat cp` authenticated to `server` (60 s limit).
pub fn cp(
    server: &Server,
    extra: &[&str],
    src: impl AsRef<OsStr>,
    dst: impl AsRef<OsStr>,
) -> Output {
    run_sprat(bin(), cp_args(Some(server), extra, src, dst), &[])
}

/// Runs a local->local `sprat cp` (60 s limit).
pub fn cp_local(extra: &[&str], src: impl AsRef<OsStr>, dst: impl AsRef<OsStr>) -> Output {
    run_sprat(bin(), cp_args(None, extra, src, dst), &[])
}

/// Panics unless `out` exited 0; shows the server's log too when there is one.
#[track_caller]
pub fn assert_ok(out: &Output, server: Option<&Server>) {
    sprat_testkit::assert_no_panic(out);
    if !out.status.success() {
        let log = server.map(|s| s.stderr_log()).unwrap_or_default();
        panic!(
            "sprat cp failed:\n{}\n--- server stderr ---\n{}",
            describe(out),
            log.trim_end()
        );
    }
}

/// Panics unless `out` exited with `code` and printed no panic.
#[track_caller]
pub fn assert_exit(out: &Output, code: i32) {
    sprat_testkit::assert_no_panic(out);
    assert_eq!(
        out.status.code(),
        Some(code),
        "expected exit code {code}:\n{}",
        describe(out)
    );
}

/// Panics unless `out` stopped on a full disk: exit 5, a stderr line naming the cause (`why`
/// describes the run).
#[track_caller]
pub fn assert_disk_full(out: &Output, why: &str) {
    assert_eq!(out.status.code(), Some(5), "{why}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("No space left on device")),
        "the cause is not named: {why}"
    );
}

/// Panics unless `out` failed (non-zero exit) without panicking.
#[track_caller]
pub fn assert_failed(out: &Output) {
    sprat_testkit::assert_no_panic(out);
    assert!(
        !out.status.success(),
        "expected a failure, but sprat exited 0:\n{}",
        describe(out)
    );
}

/// The `sprat: error: ` line; panics unless there is exactly one and it contains one of `names`.
#[track_caller]
pub fn assert_error_names(out: &Output, names: &[&str]) -> String {
    let line = sprat_testkit::assert_error_line(out);
    assert_eq!(
        error_line_count(out),
        1,
        "a fatal error must be ONE `sprat: error: ` line:\n{}",
        describe(out)
    );
    assert!(
        names.iter().any(|n| line.contains(n)),
        "the error line names none of {names:?}: {line:?}\n{}",
        describe(out)
    );
    line
}

/// How many stderr lines begin `sprat: error: `.
pub fn error_line_count(out: &Output) -> usize {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("sprat: error: "))
        .count()
}

/// Path as a `&str` (test paths are always UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `dir` joined with `rel`.
pub fn at(dir: &Path, rel: &str) -> PathBuf {
    dir.join(rel)
}

/// Everything below `dir`, or nothing if it does not exist (for "nothing was written" checks).
pub fn entries_below(dir: &Path) -> Vec<PathBuf> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Vec::new();
    }
    sprat_testkit::walk_tree(dir).into_keys().collect()
}

/// A port on 127.0.0.1 that nothing listens on (bound, then closed).
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let p = l.local_addr().unwrap().port();
    drop(l);
    p
}

/// True if any regular file exists below `dir` (cheap: reads no content, stops at the first).
pub fn has_regular_file(dir: &Path) -> bool {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            match e.file_type() {
                Ok(ft) if ft.is_file() => return true,
                Ok(ft) if ft.is_dir() => stack.push(e.path()),
                _ => {}
            }
        }
    }
    false
}

/// Panics with every collected failure (and the command's output) if there are any.
#[track_caller]
pub fn assert_no_failures(failures: &[String], out: &Output, server: Option<&Server>) {
    if failures.is_empty() {
        return;
    }
    let log = server.map(|s| s.stderr_log()).unwrap_or_default();
    let mut shown = failures[..failures.len().min(20)].join("\n  - ");
    if failures.len() > 20 {
        shown.push_str(&format!("\n  ... and {} more", failures.len() - 20));
    }
    panic!(
        "{} failure(s):\n  - {shown}\n{}\n--- server stderr ---\n{}",
        failures.len(),
        describe(out),
        log.trim_end()
    );
}

/// Version 1 of a tree whose entries change type in version 2 (see [`type_change_v2`]).
pub fn type_change_v1(dir: &Path) {
    std::fs::create_dir(dir).unwrap();
    sprat_testkit::make_file(&dir.join("a"), b"a was a file", 0o644);
    std::os::unix::fs::symlink("a", dir.join("b")).unwrap();
    std::fs::create_dir(dir.join("d")).unwrap();
    sprat_testkit::make_file(&dir.join("e"), b"e was a file", 0o644);
}

/// Version 2: file `a` became a directory, link `b` a file, empty directory `d` a file, file
/// `e` a symlink.
pub fn type_change_v2(dir: &Path) {
    std::fs::remove_file(dir.join("a")).unwrap();
    std::fs::create_dir(dir.join("a")).unwrap();
    sprat_testkit::make_file(&dir.join("a/inside"), b"now inside a directory", 0o644);
    std::fs::remove_file(dir.join("b")).unwrap();
    sprat_testkit::make_file(&dir.join("b"), b"b is a file now", 0o600);
    std::fs::remove_dir(dir.join("d")).unwrap();
    sprat_testkit::make_file(&dir.join("d"), b"d is a file now", 0o644);
    std::fs::remove_file(dir.join("e")).unwrap();
    std::os::unix::fs::symlink("b", dir.join("e")).unwrap();
    for (i, p) in ["a/inside", "a", "b", "d", "e", ""].iter().enumerate() {
        sprat_testkit::set_mtime_nofollow(&dir.join(p), 1_650_000_000 + i as i64, 100 + i as u32);
    }
}

/// Failures if any regular file of `src` other than `except` is missing or different in `dst`.
pub fn missing_regular_files(src: &Path, dst: &Path, except: &[&Path]) -> Vec<String> {
    let mut failures = Vec::new();
    for (rel, e) in sprat_testkit::snapshot(src).files() {
        if except.contains(&rel.as_path()) {
            continue;
        }
        match std::fs::read(dst.join(rel)) {
            Ok(c) if Some(&c) == e.content.as_ref() => {}
            Ok(_) => failures.push(format!("{rel:?}: wrong content in the destination")),
            Err(err) => failures.push(format!("{rel:?}: not in the destination ({err})")),
        }
    }
    failures
}

/// The outcome of a copy where `d000/f00003.bin` is blocked in the destination by a non-empty
/// directory: exit 1 naming it with every other file copied, or exit 0 with the file in place.
#[track_caller]
pub fn check_blocked_file_outcome(out: &Output, src: &Path, dst: &Path, server: Option<&Server>) {
    sprat_testkit::assert_no_panic(out);
    let blocked = Path::new("d000/f00003.bin");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut failures = Vec::new();
    match out.status.code() {
        Some(1) => {
            if !stderr.contains("f00003.bin") {
                failures.push("exit 1 but stderr does not name d000/f00003.bin".to_string());
            }
        }
        Some(0) => {
            if std::fs::read(dst.join(blocked)).ok() != std::fs::read(src.join(blocked)).ok() {
                failures.push(
                    "exit 0 but d000/f00003.bin is not the source file in the destination"
                        .to_string(),
                );
            }
        }
        other => failures.push(format!(
            "exit code {other:?}: expected 1 (that one file failed, the rest copied) or 0 (the \
             blocking directory replaced); one bad file must not abort the transfer"
        )),
    }
    failures.extend(missing_regular_files(src, dst, &[blocked]));
    assert_no_failures(&failures, out, server);
}

/// The outcome of copying a tree holding a FIFO `d000/pipe` and a socket `d000/sock`: exit 0,
/// every regular file copied, and the two made again as a FIFO and a socket (never opened,
/// never turned into a file).
#[track_caller]
pub fn check_special_files_outcome(out: &Output, src: &Path, dst: &Path, server: Option<&Server>) {
    use std::os::unix::fs::FileTypeExt;
    sprat_testkit::assert_no_panic(out);
    let mut failures = Vec::new();
    if out.status.code() != Some(0) {
        failures.push(format!("exit code {:?}: expected 0", out.status.code()));
    }
    for (name, want) in [("d000/pipe", "FIFO"), ("d000/sock", "socket")] {
        match std::fs::symlink_metadata(dst.join(name)) {
            Ok(m) if want == "FIFO" && m.file_type().is_fifo() => {}
            Ok(m) if want == "socket" && m.file_type().is_socket() => {}
            Ok(m) => failures.push(format!("{name} was made as {:?}", m.file_type())),
            Err(e) => failures.push(format!("{name} was not made: {e}")),
        }
    }
    failures.extend(missing_regular_files(src, dst, &[]));
    assert_no_failures(&failures, out, server);
}

/// A running `sprat relay`; killed by its PID when dropped.
pub struct RelayProc {
    child: std::process::Child,
    pub addr: std::net::SocketAddr,
    /// Where its stderr goes, when kept ([`RelayProc::start_logged`]).
    log: Option<PathBuf>,
}

impl RelayProc {
    pub fn start(to: std::net::SocketAddr, args: &[&str]) -> RelayProc {
        RelayProc::spawn(to, args, None)
    }

    /// [`RelayProc::start`], keeping its log in `log` (see [`RelayProc::closed`]).
    pub fn start_logged(to: std::net::SocketAddr, args: &[&str], log: &Path) -> RelayProc {
        RelayProc::spawn(to, args, Some(log))
    }

    /// Bytes to the server and to the client of each connection closed so far, as logged;
    /// waits (up to 10 s) until every connection the relay accepted has closed.
    pub fn closed(&self) -> Vec<(u64, u64)> {
        let log = self
            .log
            .as_ref()
            .expect("a relay started with start_logged");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let accepted = text
                .lines()
                .filter(|l| l.matches(" -> ").count() == 2 && !l.contains("RTT"))
                .count();
            let closed: Vec<(u64, u64)> = text
                .lines()
                .filter_map(|l| {
                    let rest = l.split_once(" closed: ")?.1;
                    let (up, down) = rest.split_once(" bytes to the server, ")?;
                    let down = down.strip_suffix(" to the client")?;
                    Some((up.parse().ok()?, down.parse().ok()?))
                })
                .collect();
            if closed.len() >= accepted || std::time::Instant::now() > deadline {
                return closed;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    fn spawn(to: std::net::SocketAddr, args: &[&str], log: Option<&Path>) -> RelayProc {
        let mut cmd = sprat_testkit::run::command(
            bin(),
            ["relay", "--listen", "127.0.0.1:0", "--to", &to.to_string()]
                .iter()
                .chain(args),
            &[],
        );
        match log {
            Some(log) => cmd.stderr(std::fs::File::create(log).unwrap()),
            None => cmd.stderr(std::process::Stdio::null()),
        };
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("relay printed {line:?}"))
            .parse()
            .unwrap();
        RelayProc {
            child,
            addr,
            log: log.map(Path::to_path_buf),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("sprat://{}/{path}", self.addr)
    }
}

impl Drop for RelayProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every regular file under `dst` has the content of the file of the same path under `src`
/// (partial large files, kept under hidden names for a later run, are not files of the tree);
/// returns how many were checked.
pub fn no_wrong_file(src: &Path, dst: &Path) -> Result<usize, String> {
    let mut checked = 0;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(dst.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            let rel = rel.join(e.file_name());
            let ft = e.file_type().map_err(|e| e.to_string())?;
            if ft.is_dir() {
                stack.push(rel);
            } else if ft.is_file() && !e.file_name().to_string_lossy().contains(".sprat-part") {
                // (A partial large file and its journal stay, hidden, for a later run.)
                let got = std::fs::read(dst.join(&rel)).map_err(|e| e.to_string())?;
                let want = std::fs::read(src.join(&rel))
                    .map_err(|e| format!("{}: not in the source ({e})", rel.display()))?;
                if got != want {
                    return Err(format!("{} has wrong content", rel.display()));
                }
                checked += 1;
            }
        }
    }
    Ok(checked)
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// Options that make a file of more than 1 MiB travel in chunks of 1 MiB (a "large" file
/// with a partial copy and a journal) in a test's few MiB.
pub const CHUNKED: [&str; 4] = ["--small-file-threshold", "1MiB", "--chunk-size", "1MiB"];

/// Runs `sprat cp [extra] SRC DST` on one stream with `--retry-for 20s` and `--json`, a file
/// over 1 MiB cut into chunks of 256 KiB, for a DST behind a relay that drops its connections:
/// each run resumes what the runs before wrote. Panics if it takes over 120 s.
pub fn copy_over_a_dropping_link(
    server: &Server,
    extra: &[&str],
    src: impl AsRef<OsStr>,
    dst: impl AsRef<OsStr>,
) -> Output {
    let resuming = [
        "--retry-for",
        "20s",
        "--streams",
        "1",
        "--small-file-threshold",
        "1MiB",
        "--chunk-size",
        "256KiB",
        "--json",
    ];
    let args = cp_args(Some(server), &[extra, &resuming[..]].concat(), src, dst);
    sprat_testkit::run_sprat_timeout(bin(), args, &[], std::time::Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("the copy did not end within 120 s"))
}

/// Runs `sprat cp [extra] SRC DST` (authenticated to `server` if given) at 2 MB/s and stops it
/// with SIGINT once the journal of the partial copy of the large file `big` in `dst_dir` (where
/// DST lands on disk) records chunks written; the copy must exit 130 and leave that partial
/// copy. `extra` should make `big` a large file (e.g. `--small-file-threshold 1MiB`).
pub fn interrupt_once_a_partial_copy_is_written(
    server: Option<&Server>,
    extra: &[&str],
    src: impl AsRef<OsStr>,
    dst: &OsStr,
    dst_dir: &Path,
) {
    let mut child = copy_writing_a_partial_copy(server, extra, (src, dst, dst_dir), "2MB/s");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.pid() as i32).expect("a pid"),
        rustix::process::Signal::INT,
    )
    .expect("SIGINT");
    let out = child.wait_or_panic(std::time::Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(130), "{}", describe(&out));
    assert!(dst_dir.join(".big.sprat-part").exists());
}

/// Starts `sprat cp` of `src` (holding a large file `big`) to `dst` at `rate`
/// (`--bwlimit`), and returns it running once its partial copy of `big` in `dst_dir` has
/// journalled a few chunks.
pub fn copy_writing_a_partial_copy(
    server: Option<&Server>,
    extra: &[&str],
    (src, dst, dst_dir): (impl AsRef<OsStr>, &OsStr, &Path),
    rate: &str,
) -> sprat_testkit::SpratChild {
    let mut args = cp_args(server, extra, src, dst);
    args.splice(1..1, ["--bwlimit".into(), rate.into()]);
    let child = sprat_testkit::spawn_sprat(bin(), args, &[]);
    let journal = dst_dir.join(".big.sprat-part.log");
    let started = std::time::Instant::now();
    while std::fs::metadata(&journal).map_or(true, |m| m.len() < 200) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "no partial copy at {}",
            journal.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
}
