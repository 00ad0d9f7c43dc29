//! A fixture that runs the real `sprat serve` on loopback for one test.
//!
//! [`Server::start`] spawns `sprat serve --root ROOT --listen 127.0.0.1:0` (or `--config FILE`; or another loopback
//! address) with a token written to a private token file (or passed in `SPRAT_TOKEN`, or none at
//! all), waits, with a time limit, for the first stdout line `listening on 127.0.0.1:PORT`, and
//! from then on hands out
//! `sprat://127.0.0.1:PORT/...` URLs and the client arguments that carry the same token. The
//! server is killed by its own PID when the fixture is dropped, so a failing test leaves no
//! daemon behind; its stderr is kept so a test can show the server's side of a failure.
//!
//! Not a readiness guess: no fixed sleeps, the fixture trusts only the `listening on` line.

use crate::sync::lock;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::run::kill_with_parent;

/// The token the fixture uses unless told otherwise.
pub const DEFAULT_TOKEN: &str = "sprat-test-token-7c1e5a9f02b4";

/// How to start a server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The shared secret; `None` starts the server without any token.
    pub token: Option<String>,
    /// Pass the token in `SPRAT_TOKEN` instead of `--token-file`.
    pub token_via_env: bool,
    /// Add `--read-only`.
    pub read_only: bool,
    /// Add `--no-auth`.
    pub no_auth: bool,
    /// The `--listen` address; a loopback address with port 0 (the default `127.0.0.1:0`).
    pub listen: String,
    /// More arguments after the fixture's own.
    pub extra_args: Vec<OsString>,
    /// Start with `--config FILE` (named exports, their roots and tokens in the file) instead
    /// of `--root`; the root given to [`Server::start`] is then only what [`Server::root`]
    /// returns. Set `token` to `None` unless the test wants `--token-file` too.
    pub config: Option<PathBuf>,
    /// How long to wait for the `listening on` line.
    pub ready_timeout: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            token: Some(DEFAULT_TOKEN.to_string()),
            token_via_env: false,
            read_only: false,
            no_auth: false,
            listen: "127.0.0.1:0".to_string(),
            extra_args: Vec::new(),
            config: None,
            ready_timeout: Duration::from_secs(30),
        }
    }
}

impl ServerOptions {
    /// A server started with `--read-only` (and the default token).
    pub fn read_only() -> Self {
        ServerOptions {
            read_only: true,
            ..ServerOptions::default()
        }
    }

    /// A server started with `--no-auth` and no token.
    pub fn no_auth() -> Self {
        ServerOptions {
            token: None,
            no_auth: true,
            ..ServerOptions::default()
        }
    }

    /// A server started with neither a token nor `--no-auth` (it should refuse to start).
    pub fn without_token() -> Self {
        ServerOptions {
            token: None,
            ..ServerOptions::default()
        }
    }
}

/// Why a server did not come up.
#[derive(Debug)]
pub struct StartFailure {
    /// The exit status, if the process had exited (it is killed otherwise).
    pub status: Option<ExitStatus>,
    /// The first stdout line, if one came.
    pub first_line: Option<String>,
    /// Everything the server printed on stderr.
    pub stderr: String,
    /// What went wrong, in words.
    pub reason: String,
}

impl std::fmt::Display for StartFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sprat serve did not start: {}\nexit status: {:?}\nfirst stdout line: {:?}\n--- stderr ---\n{}",
            self.reason,
            self.status,
            self.first_line,
            self.stderr.trim_end()
        )
    }
}

/// A running `sprat serve`, killed when dropped.
pub struct Server {
    child: Child,
    addr: SocketAddr,
    root: PathBuf,
    token: Option<String>,
    token_file: Option<PathBuf>,
    /// `SHA256:...`, the server's key as its second stdout line gives it.
    fingerprint: String,
    stderr: Arc<Mutex<Vec<u8>>>,
    _token_dir: tempfile::TempDir,
}

const STDERR_CAP: usize = 4 << 20;

fn spawn_stderr_reader<R: Read + Send + 'static>(
    mut r: R,
    buf: Arc<Mutex<Vec<u8>>>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            let mut b = lock(&buf);
            if b.len() < STDERR_CAP {
                b.extend_from_slice(&chunk[..n]);
            }
        }
    })
}

impl Server {
    /// Starts a server exporting `root`; panics with the server's stderr if it does not start.
    #[track_caller]
    pub fn start(bin: &Path, root: &Path, opts: &ServerOptions) -> Server {
        match Server::try_start(bin, root, opts) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts a server exporting `root`, or says why it did not come up.
    pub fn try_start(
        bin: &Path,
        root: &Path,
        opts: &ServerOptions,
    ) -> Result<Server, StartFailure> {
        let token_dir = tempfile::Builder::new()
            .prefix("sprat-token-")
            .tempdir()
            .unwrap_or_else(|e| panic!("tempdir for token: {e}"));
        let mut cmd = Command::new(bin);
        cmd.arg("serve");
        match &opts.config {
            Some(config) => cmd.arg("--config").arg(config),
            None => cmd.arg("--root").arg(root),
        };
        cmd.arg("--listen")
            .arg(&opts.listen)
            .env_remove("SPRAT_TOKEN")
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        crate::run::isolate(&mut cmd);
        let mut token_file = None;
        if let Some(token) = &opts.token {
            // Written the way a user would: `echo TOKEN > file`, private to the owner.
            let path = token_dir.path().join("token");
            crate::tree::make_file(&path, format!("{token}\n").as_bytes(), 0o600);
            if opts.token_via_env {
                cmd.env("SPRAT_TOKEN", token);
            } else {
                cmd.arg("--token-file").arg(&path);
            }
            token_file = Some(path);
        }
        if opts.read_only {
            cmd.arg("--read-only");
        }
        if opts.no_auth {
            cmd.arg("--no-auth");
        }
        cmd.args(&opts.extra_args);
        kill_with_parent(&mut cmd);

        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin:?} serve: {e}"));
        let stderr_buf = Arc::new(Mutex::new(Vec::new()));
        let stderr_thread = child
            .stderr
            .take()
            .map(|e| spawn_stderr_reader(e, stderr_buf.clone()));
        let (tx, rx) = mpsc::channel::<String>();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(out);
                // `listening on HOST:PORT`, then `fingerprint SHA256:...`.
                for _ in 0..2 {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    let _ = tx.send(line);
                }
                drop(tx);
                // Keep draining so the server never blocks on a full stdout pipe.
                let _ = std::io::copy(&mut reader, &mut std::io::sink());
            });
        }

        let fail = |mut child: Child, first_line: Option<String>, reason: String| {
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut status = None;
            while Instant::now() < deadline {
                if let Ok(Some(s)) = child.try_wait() {
                    status = Some(s);
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if status.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
            if let Some(t) = stderr_thread {
                let _ = t.join();
            }
            let stderr = String::from_utf8_lossy(&lock(&stderr_buf)).into_owned();
            StartFailure {
                status,
                first_line,
                stderr,
                reason,
            }
        };

        let line = match rx.recv_timeout(opts.ready_timeout) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                return Err(fail(
                    child,
                    None,
                    format!("no `listening on` line within {:?}", opts.ready_timeout),
                ));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(fail(
                    child,
                    None,
                    "stdout closed before a `listening on` line".to_string(),
                ));
            }
        };
        let addr = line
            .trim_end()
            .strip_prefix("listening on ")
            .and_then(|a| a.trim().parse::<SocketAddr>().ok());
        let Some(addr) = addr else {
            let _ = child.kill();
            return Err(fail(
                child,
                Some(line.clone()),
                format!("first stdout line is not `listening on HOST:PORT`: {line:?}"),
            ));
        };
        if addr.port() == 0 || !addr.ip().is_loopback() {
            let _ = child.kill();
            return Err(fail(
                child,
                Some(line.clone()),
                format!("`listening on` names an unexpected address {addr}"),
            ));
        }
        let second = rx.recv_timeout(opts.ready_timeout).unwrap_or_default();
        let Some(fingerprint) = second
            .trim_end()
            .strip_prefix("fingerprint ")
            .filter(|f| f.starts_with("SHA256:"))
            .map(str::to_string)
        else {
            let _ = child.kill();
            return Err(fail(
                child,
                Some(line.clone()),
                format!("second stdout line is not `fingerprint SHA256:...`: {second:?}"),
            ));
        };
        Ok(Server {
            child,
            addr,
            root: root.to_path_buf(),
            token: opts.token.clone(),
            token_file,
            fingerprint,
            stderr: stderr_buf,
            _token_dir: token_dir,
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exported root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `sprat://127.0.0.1:PORT/` (`sprat://[::1]:PORT/` for IPv6) followed by `path` as given (`""` names the root itself; a
    /// leading `/` is kept, giving `sprat://HOST:PORT//...`).
    pub fn url(&self, path: &str) -> String {
        format!("sprat://{}/{}", self.addr, path)
    }

    /// The server's key fingerprint (`SHA256:...`), as `sprat serve` printed it.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The token the server was started with.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The token file (it holds the token and a newline), if the server has a token.
    pub fn token_file(&self) -> Option<&Path> {
        self.token_file.as_deref()
    }

    /// The client arguments that authenticate to this server: `--token-file FILE`, or nothing.
    pub fn client_args(&self) -> Vec<OsString> {
        match &self.token_file {
            Some(f) => vec!["--token-file".into(), f.clone().into_os_string()],
            None => Vec::new(),
        }
    }

    /// Everything the server has printed on stderr so far.
    pub fn stderr_log(&self) -> String {
        String::from_utf8_lossy(&lock(&self.stderr)).into_owned()
    }

    /// True while the server process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends the signal `name` (as `kill` takes it: `TERM`, `INT`...) to the server process.
    pub fn signal(&self, name: &str) {
        let sent = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{name} {} failed", self.pid());
    }

    /// Waits up to `limit` for the server to exit: its exit status, `None` if it still runs.
    pub fn wait_exit(&mut self, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
        let until = std::time::Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() > until {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Kills the server (SIGKILL to its own PID) and reaps it. Idempotent.
    pub fn kill(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
