//! Helpers shared by the end-to-end test files: the binary's path, `sprat cp` invocations with
//! the server's token, and assertions on exit codes. Each test file uses only part of this.
#![allow(dead_code)]

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

/// The first `sprat: error: ` line; panics unless it contains one of `names`.
#[track_caller]
pub fn assert_error_names(out: &Output, names: &[&str]) -> String {
    let line = sprat_testkit::assert_error_line(out);
    assert!(
        names.iter().any(|n| line.contains(n)),
        "the error line names none of {names:?}: {line:?}\n{}",
        describe(out)
    );
    line
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
