//! Running `sprat` client commands as child processes, always with a time limit.
//!
//! Every run has a deadline: a command that hangs is killed (by its own PID) and the test fails
//! with whatever the command had printed, instead of the whole suite hanging. The environment
//! variable `SPRAT_TOKEN` is removed from every child's environment unless the caller sets it,
//! so a developer's shell cannot change a test's outcome. Output is drained by reader threads
//! while the child runs, so a chatty child never blocks on a full pipe.
//!
//! Also here: the assertions every error test makes on stderr (one `sprat: error: ` line, no
//! panic). Not for the server process: see [`crate::server`].

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The default time limit for one client command.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Asks the kernel to SIGKILL the child if the thread that spawned it dies, so that a test
/// process killed from outside (e.g. by a runner's timeout) leaves no `sprat` behind.
#[allow(unsafe_code)]
pub(crate) fn kill_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and calls only prctl(2), which is
    // async-signal-safe; it touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// Gives `cmd` this test process's private configuration and state directories
/// (`XDG_CONFIG_HOME`, `XDG_STATE_HOME`): a test neither reads nor writes the developer's own
/// known-servers file or server key, and every server one test process starts has the same key,
/// so a server restarted on the same port is still the one its clients pinned. Tests that
/// need other keys pass `--key-file`; the caller's own `env` entries override these.
pub fn isolate(cmd: &mut Command) {
    static HOME: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let home = HOME.get_or_init(|| {
        let dir = std::env::temp_dir();
        remove_homes_of_ended_processes(&dir);
        tempfile::Builder::new()
            .prefix(&format!("{HOME_PREFIX}{}-", std::process::id()))
            .tempdir_in(dir)
            .unwrap_or_else(|e| panic!("tempdir for the test's home: {e}"))
    });
    cmd.env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_STATE_HOME", home.path().join("state"));
}

/// How the name of a test process's home starts; its process id follows.
const HOME_PREFIX: &str = "sprat-test-home-";

/// Removes from `dir` the homes of test processes that have ended. A `static` is never
/// dropped, so each test process leaves its home behind when it exits (nextest runs one
/// process per test); the next one to start removes them. A home whose process id is in use
/// again is left for later.
fn remove_homes_of_ended_processes(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix(HOME_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !Path::new("/proc").join(pid.to_string()).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Builds a command for `bin` with `args` and `env`, stdin closed, stdout and stderr piped.
pub fn command<I, S>(bin: &Path, args: I, env: &[(&str, &str)]) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env_remove("SPRAT_TOKEN")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    isolate(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    kill_with_parent(&mut cmd);
    cmd
}

fn drain<R: Read + Send + 'static>(r: Option<R>) -> Option<JoinHandle<Vec<u8>>> {
    r.map(|mut r| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    })
}

/// A running `sprat` child process; killed (by its PID) when dropped if still running.
pub struct SpratChild {
    child: Child,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    started: Instant,
    status: Option<ExitStatus>,
    description: String,
}

/// A command that did not finish in time; it has been killed.
#[derive(Debug)]
pub struct TimedOut {
    /// What the command printed before it was killed (status is the kill's).
    pub output: Output,
    /// The limit that was exceeded.
    pub timeout: Duration,
}

impl SpratChild {
    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Time since the child was started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The exit status if the child has finished, without waiting.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self
                .child
                .try_wait()
                .unwrap_or_else(|e| panic!("wait for {}: {e}", self.description));
        }
        self.status
    }

    fn collect(&mut self, status: ExitStatus) -> Output {
        let stdout = self
            .stdout
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        let stderr = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        Output {
            status,
            stdout,
            stderr,
        }
    }

    /// Kills the child (by its PID) if it is still running, and reaps it.
    pub fn kill(&mut self) {
        if self.try_status().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    /// Waits at most `timeout` (counted from now) for the child to finish.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Output, TimedOut> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status() {
                return Ok(self.collect(status));
            }
            if Instant::now() >= deadline {
                self.kill();
                let status = self.status.unwrap_or_else(|| ExitStatus::from_raw(9));
                return Err(TimedOut {
                    output: self.collect(status),
                    timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits at most `timeout`; panics with the command's output if it does not finish.
    #[track_caller]
    pub fn wait_or_panic(&mut self, timeout: Duration) -> Output {
        match self.wait_timeout(timeout) {
            Ok(out) => out,
            Err(t) => panic!(
                "`{}` did not finish within {:?}; killed it.\n{}",
                self.description,
                t.timeout,
                describe(&t.output)
            ),
        }
    }
}

impl Drop for SpratChild {
    fn drop(&mut self) {
        self.kill();
    }
}

fn describe_command<I, S>(bin: &Path, args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut s = bin
        .file_name()
        .unwrap_or(bin.as_os_str())
        .to_string_lossy()
        .into_owned();
    for a in args {
        s.push(' ');
        s.push_str(&a.as_ref().to_string_lossy());
    }
    s
}

/// Starts `bin args` in the background (see [`command`] for the environment).
pub fn spawn_sprat<I, S>(bin: &Path, args: I, env: &[(&str, &str)]) -> SpratChild
where
    I: IntoIterator<Item = S> + Clone,
    S: AsRef<OsStr>,
{
    spawn_inner(bin, args, env, false)
}

/// Starts `bin args` with the read end of its stdout pipe already closed, as `sprat ... | head
/// -c0` would: anything it prints to stdout meets a broken pipe. The returned output's stdout is
/// always empty.
pub fn spawn_sprat_stdout_closed<I, S>(bin: &Path, args: I, env: &[(&str, &str)]) -> SpratChild
where
    I: IntoIterator<Item = S> + Clone,
    S: AsRef<OsStr>,
{
    spawn_inner(bin, args, env, true)
}

fn spawn_inner<I, S>(bin: &Path, args: I, env: &[(&str, &str)], close_stdout: bool) -> SpratChild
where
    I: IntoIterator<Item = S> + Clone,
    S: AsRef<OsStr>,
{
    let description = describe_command(bin, args.clone());
    let mut child = command(bin, args, env)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `{description}`: {e}"));
    if close_stdout {
        drop(child.stdout.take());
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    SpratChild {
        child,
        stdout,
        stderr,
        started: Instant::now(),
        status: None,
        description,
    }
}

/// Runs `bin args` to completion or until `timeout`, whichever comes first.
pub fn run_sprat_timeout<I, S>(
    bin: &Path,
    args: I,
    env: &[(&str, &str)],
    timeout: Duration,
) -> Result<Output, TimedOut>
where
    I: IntoIterator<Item = S> + Clone,
    S: AsRef<OsStr>,
{
    spawn_sprat(bin, args, env).wait_timeout(timeout)
}

/// Runs `bin args` to completion; panics (after killing it) if it takes over [`DEFAULT_TIMEOUT`].
#[track_caller]
pub fn run_sprat<I, S>(bin: &Path, args: I, env: &[(&str, &str)]) -> Output
where
    I: IntoIterator<Item = S> + Clone,
    S: AsRef<OsStr>,
{
    spawn_sprat(bin, args, env).wait_or_panic(DEFAULT_TIMEOUT)
}

/// A human-readable account of a finished command: exit status, stdout and stderr.
pub fn describe(out: &Output) -> String {
    let status = match (out.status.code(), out.status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        (None, None) => "unknown status".to_string(),
    };
    format!(
        "status: {status}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--------------",
        String::from_utf8_lossy(&out.stdout).trim_end(),
        String::from_utf8_lossy(&out.stderr).trim_end()
    )
}

/// Panics if stderr shows a Rust panic or the process died from a signal.
#[track_caller]
pub fn assert_no_panic(out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "sprat panicked:\n{}",
        describe(out)
    );
    assert!(
        out.status.signal().is_none(),
        "sprat died from a signal:\n{}",
        describe(out)
    );
}

/// Returns the first stderr line that begins `sprat: error: `; panics if there is none.
#[track_caller]
pub fn assert_error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    match stderr.lines().find(|l| l.starts_with("sprat: error: ")) {
        Some(l) => l.to_string(),
        None => panic!(
            "expected a line beginning `sprat: error: ` on stderr:\n{}",
            describe(out)
        ),
    }
}
