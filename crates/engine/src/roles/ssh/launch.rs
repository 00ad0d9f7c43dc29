//! Starting a one-shot server on a remote through ssh, and ending it.
//!
//! The client runs `RSH [options] -o ControlMaster=yes -o ControlPath=... [USER@]HOST
//! 'REMOTE_SPRAT serve --one-shot --root ROOT'`, writes a fresh token as the first line of
//! the channel's stdin (never on a command line: `ps` shows arguments on both hosts), and
//! reads the server's first two lines on stdout: `listening on ADDR` and `fingerprint
//! SHA256:...`. The server listens on the address the ssh connection arrived at (or on the
//! remote's loopback with `--via-ssh`), accepts only that token, and exits when its stdin
//! closes: when [`RemoteServer`] is dropped, or when ssh dies. The ssh process is a
//! connection master (its control socket in a private directory), so that streams can be
//! tunnelled through it later without authenticating again (see `tunnel`).
//!
//! Not here: what the server does (an ordinary `Server`), and the trust decision (ssh's own
//! host-key check is its root: the fingerprint comes over the ssh channel).

use super::{tunnel, SshOptions};
use crate::error::TransferError;
use crate::net::Fingerprint;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a direct connection to the remote server may take before the streams go
/// through the ssh connection instead.
const DIRECT_PATIENCE: Duration = Duration::from_secs(3);
/// Lines of the remote's stdout read before the server's (a login banner printed by a shell
/// start-up file, say) before giving up.
const MAX_BANNER_LINES: usize = 1000;
/// Lines of ssh's stderr kept for messages.
const KEPT_STDERR_LINES: usize = 8;
/// How long ssh has to exit once the server's stdin is closed, before it is killed.
const EXIT_PATIENCE: Duration = Duration::from_secs(5);

/// A one-shot server running on a remote, reached through ssh.
pub struct RemoteServer {
    /// `HOST` or `USER@HOST`, as given to ssh.
    pub user_host: String,
    /// The server's root: `/` or `.` (the login's home directory).
    pub root: &'static str,
    /// Where the client connects: the server's own address, or a local forward through ssh.
    pub addr: String,
    /// The key the server printed on the ssh channel: the only one accepted.
    pub fingerprint: Fingerprint,
    /// Whether the streams go through the ssh connection.
    pub tunnelled: bool,
    /// The ssh process the server lives in (shared with [`RemoteServer::watch`]).
    child: Arc<Mutex<Child>>,
    stdin: Option<ChildStdin>,
    control: ControlDir,
}

impl RemoteServer {
    /// Starts a server on `user_host` exporting `root` (`/` or `.`), accepting only `token`.
    pub fn start(
        user_host: &str,
        root: &'static str,
        token: &str,
        options: &SshOptions,
    ) -> Result<RemoteServer, TransferError> {
        let host = user_host
            .rsplit_once('@')
            .map_or(user_host, |(_, h)| h)
            .to_string();
        if user_host.starts_with('-') || host.is_empty() {
            return Err(TransferError::Usage(format!(
                "'{user_host}' is not a host name"
            )));
        }
        let control = ControlDir::new()?;
        let mut remote = format!("{} serve --one-shot --root {root}", options.remote_sprat);
        if options.via_ssh {
            remote.push_str(" --listen 127.0.0.1:0");
        }
        let mut cmd = Command::new(&options.rsh[0]);
        cmd.args(&options.rsh[1..])
            .args(master_options(&control.socket()))
            .arg(user_host)
            .arg(&remote)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        tracing::info!("ssh: {:?} {user_host} '{remote}'", options.rsh);
        let mut child = cmd.spawn().map_err(|e| TransferError::Ssh {
            host: host.clone(),
            why: format!(
                "cannot run the remote shell '{}' for {host}: {e}",
                options.rsh[0]
            ),
        })?;
        let kept = Arc::new(Mutex::new(VecDeque::new()));
        let stderr = child.stderr.take().map(|err| {
            let kept = kept.clone();
            let host = host.clone();
            std::thread::spawn(move || keep_stderr(err, &kept, &host))
        });
        let mut stdin = child.stdin.take();
        if let Some(s) = stdin.as_mut() {
            // A failure here is ssh gone already: its exit says why, below.
            let _ = s
                .write_all(format!("{token}\n").as_bytes())
                .and_then(|()| s.flush());
        }
        let announced = child.stdout.take().map(read_announcement);
        let Some(Some((addr, fingerprint))) = announced else {
            drop(stdin);
            let status = child.wait();
            if let Some(t) = stderr {
                let _ = t.join();
            }
            let last = kept
                .lock()
                .map(|k| k.back().cloned().unwrap_or_default())
                .unwrap_or_default();
            return Err(start_failed(
                &host,
                status.ok().and_then(|s| s.code()),
                &last,
                options,
            ));
        };
        let mut server = RemoteServer {
            user_host: user_host.to_string(),
            root,
            addr: addr.to_string(),
            fingerprint,
            tunnelled: false,
            child: Arc::new(Mutex::new(child)),
            stdin,
            control,
        };
        if !options.via_ssh {
            match TcpStream::connect_timeout(&addr, DIRECT_PATIENCE) {
                Ok(_) => return Ok(server),
                Err(e) => tracing::info!(
                    "ssh: cannot connect to {host}'s server at {addr} directly ({e}); \
                     tunnelling the streams through ssh"
                ),
            }
        }
        let local = tunnel::forward(options, user_host, &server.control.socket(), addr)?;
        server.addr = local.to_string();
        server.tunnelled = true;
        Ok(server)
    }
}

impl RemoteServer {
    /// A check that says, once this server's ssh process has exited (a dropped link, a
    /// killed ssh), that the server is gone with it: another run could only dial a server
    /// that is no longer there.
    pub fn watch(&self) -> impl Fn() -> Option<TransferError> + Send + Sync + 'static {
        let child = self.child.clone();
        let host = self.user_host.clone();
        move || {
            let status = crate::sync::lock(&child).try_wait().ok().flatten()?;
            let how = match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ) {
                (Some(c), _) => format!("exit {c}"),
                (None, Some(sig)) => format!("signal {sig}"),
                _ => "ended".to_string(),
            };
            Some(TransferError::Ssh {
                host: host.clone(),
                why: format!(
                    "ssh to {host} ended during the copy ({how}), and the server it started \
                     there with it; run the command again to resume (what was written is kept)"
                ),
            })
        }
    }
}

impl Drop for RemoteServer {
    fn drop(&mut self) {
        // The server exits when its stdin closes, and ssh with it.
        drop(self.stdin.take());
        let until = Instant::now() + EXIT_PATIENCE;
        let mut child = crate::sync::lock(&self.child);
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= until => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

/// The options making the ssh process a connection master whose control socket is
/// `socket`, which gives up on a silent path: given after the user's own, so that they override the user's configuration
/// but not the command line (ssh keeps the first value of an option).
fn master_options(socket: &Path) -> Vec<String> {
    vec![
        "-o".into(),
        "ControlMaster=yes".into(),
        "-o".into(),
        format!("ControlPath={}", socket.display()),
        "-o".into(),
        "ControlPersist=no".into(),
        // A path that stalls without closing ends ssh within half a minute, and with it the
        // copy (see `RemoteServer::watch`), instead of leaving it to the TCP timeouts.
        "-o".into(),
        "ServerAliveInterval=10".into(),
        "-o".into(),
        "ServerAliveCountMax=3".into(),
    ]
}

/// Reads the remote's stdout up to the server's two lines; `None` if it ends first. The rest
/// of stdout is read (and dropped) in the background, so that the server never blocks on it.
fn read_announcement(out: std::process::ChildStdout) -> Option<(SocketAddr, Fingerprint)> {
    let mut reader = BufReader::new(out);
    let mut addr = None;
    let mut line = Vec::new();
    for _ in 0..MAX_BANNER_LINES {
        line.clear();
        if reader.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        // Output of the remote's shell start-up files without a last newline (a prompt, a
        // title sequence) runs into the server's first line: it is looked for in the line.
        let listening = text.rfind("listening on ").map(|i| &text[i..]);
        if let Some(a) = listening.and_then(|t| t.strip_prefix("listening on ")) {
            if text != listening.unwrap_or_default() {
                tracing::info!("ssh: the remote printed {text:?} before its server's address");
            }
            addr = a.parse::<SocketAddr>().ok();
        } else if let Some(f) = text.strip_prefix("fingerprint ") {
            let fingerprint = Fingerprint::parse(f).ok()?;
            let addr = addr?;
            std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
            return Some((addr, fingerprint));
        } else {
            tracing::debug!("ssh: the remote printed {text:?}");
        }
    }
    None
}

/// Keeps the last lines ssh (and the remote server) wrote on stderr, for messages.
fn keep_stderr(err: std::process::ChildStderr, kept: &Mutex<VecDeque<String>>, host: &str) {
    let mut reader = BufReader::new(err);
    let mut line = Vec::new();
    while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
        let text = String::from_utf8_lossy(&line).trim().to_string();
        line.clear();
        if text.is_empty() {
            continue;
        }
        tracing::info!("ssh {host}: {text}");
        if let Ok(mut k) = kept.lock() {
            if k.len() == KEPT_STDERR_LINES {
                k.pop_front();
            }
            k.push_back(text);
        }
    }
}

/// Why no server started on `host`, from ssh's exit code and its last line on stderr.
fn start_failed(host: &str, code: Option<i32>, last: &str, options: &SshOptions) -> TransferError {
    let said = if last.is_empty() {
        String::new()
    } else {
        format!(": {last}")
    };
    let why = match code {
        Some(127) => format!(
            "sprat not found on {host} (ssh exit 127); install it there or pass \
             --remote-sprat PATH (tried '{}')",
            options.remote_sprat
        ),
        Some(126) => format!(
            "'{}' cannot be run on {host} (ssh exit 126){said}",
            options.remote_sprat
        ),
        Some(255) => format!("ssh to {host} failed (exit 255){said}"),
        Some(c) => format!("sprat on {host} started no server (ssh exit {c}){said}"),
        None => format!("ssh to {host} was killed by a signal{said}"),
    };
    TransferError::Ssh {
        host: host.to_string(),
        why,
    }
}

/// A private directory (mode 0700) for the ssh control socket, removed on drop (or by
/// [`remove_control_dirs`] when the process ends on a signal, which drops nothing).
struct ControlDir(PathBuf);

/// The control directories that exist, for [`remove_control_dirs`].
static CONTROL_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes the ssh control directories of this process: for a process about to exit on a
/// signal.
pub fn remove_control_dirs() {
    for dir in crate::sync::lock(&CONTROL_DIRS).drain(..) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

impl ControlDir {
    fn new() -> Result<ControlDir, TransferError> {
        use std::os::unix::fs::DirBuilderExt;
        // Short: a unix socket's path has at most 107 bytes, and ssh adds to it while binding.
        let base = std::env::temp_dir();
        let base = if base.as_os_str().len() > 60 {
            PathBuf::from("/tmp")
        } else {
            base
        };
        let name: String = crate::net::random::<6>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dir = base.join(format!("sprat-ssh-{name}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| {
                TransferError::Local(format!(
                    "cannot create a directory for ssh's control socket '{}': {e}",
                    dir.display()
                ))
            })?;
        crate::sync::lock(&CONTROL_DIRS).push(dir.clone());
        Ok(ControlDir(dir))
    }

    fn socket(&self) -> PathBuf {
        self.0.join("m")
    }
}

impl Drop for ControlDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        crate::sync::lock(&CONTROL_DIRS).retain(|d| *d != self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> SshOptions {
        SshOptions::new(None, None, Some("/opt/sprat"), false).unwrap()
    }

    #[test]
    fn names_the_host_in_failures() {
        let e = start_failed(
            "h1",
            Some(127),
            "bash: sprat: command not found",
            &options(),
        );
        assert!(
            e.to_string()
                .starts_with("sprat not found on h1 (ssh exit 127)"),
            "{e}"
        );
        let e = start_failed(
            "h1",
            Some(255),
            "Permission denied (publickey).",
            &options(),
        );
        assert_eq!(
            e.to_string(),
            "ssh to h1 failed (exit 255): Permission denied (publickey)."
        );
    }

    #[test]
    fn a_missing_remote_shell_is_named() {
        let o = SshOptions::new(Some("/nonexistent/ssh"), None, None, false).unwrap();
        let e = RemoteServer::start("h1", "/", "t", &o).err().unwrap();
        assert!(e.to_string().contains("/nonexistent/ssh"), "{e}");
        assert!(RemoteServer::start("-oProxyCommand=x", "/", "t", &o).is_err());
    }
}
