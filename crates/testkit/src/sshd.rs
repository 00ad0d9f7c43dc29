//! A private OpenSSH server on loopback for the tests of `[USER@]HOST:PATH` copies: its own
//! host key, its own client key in its own `authorized_keys`, a random port, started as
//! `sshd -D -e -f CONFIG` (foreground, log on stderr, kept in a file) and killed when the
//! fixture is dropped or the test dies. [`Sshd::rsh`] is the `-e` command a client passes:
//! `ssh` with that key, no host-key prompts or known_hosts file, `BatchMode` (a test never
//! waits for a password), and no user configuration.
//!
//! Not here: anything sprat-specific beyond the helpers that look at the processes sshd runs
//! ([`Sshd::sessions`]).

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's sshd lives.
pub const SSHD: &str = "/usr/sbin/sshd";

/// A running private sshd.
pub struct Sshd {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

/// A process started below the sshd (a login's shell, the command it runs), as found in
/// `/proc`.
#[derive(Debug, Clone)]
pub struct Session {
    pub pid: u32,
    /// The process's arguments.
    pub args: Vec<String>,
    /// The process's environment, `NAME=value`.
    pub environ: Vec<String>,
}

impl Sshd {
    /// Starts a private sshd on 127.0.0.1; panics, saying why, if it does not come up.
    pub fn start() -> Sshd {
        let dir = tempfile::Builder::new()
            .prefix("sprat-sshd-")
            .tempdir()
            .unwrap();
        let d = dir.path();
        for key in ["host_key", "client_key"] {
            let out = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "sprat-test", "-f"])
                .arg(d.join(key))
                .output()
                .unwrap_or_else(|e| panic!("cannot run ssh-keygen (openssh-client): {e}"));
            assert!(out.status.success(), "ssh-keygen: {out:?}");
        }
        fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).unwrap();
        // sshd's privilege separation directory, which Debian creates only in its service.
        let _ = fs::create_dir_all("/run/sshd");
        assert!(
            Path::new(SSHD).exists(),
            "{SSHD} is missing: install openssh-server (scripts/install-deps.sh --tests)"
        );
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let config = d.join("sshd_config");
            fs::write(&config, sshd_config(d, port)).unwrap();
            let log = fs::File::create(d.join("sshd.log")).unwrap();
            let mut cmd = Command::new(SSHD);
            cmd.arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log);
            crate::run::kill_with_parent(&mut cmd);
            let mut child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {SSHD}: {e}"));
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Sshd { child, port, dir };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            last = fs::read_to_string(d.join("sshd.log")).unwrap_or_default();
        }
        panic!("sshd did not start; its log:\n{last}");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The client's private key.
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("client_key")
    }

    /// The remote shell command for `sprat -e`: ssh to this server, non-interactively.
    pub fn rsh(&self) -> String {
        format!(
            "ssh -F /dev/null -p {} -i {} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no \
             -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR \
             -o ConnectTimeout=10",
            self.port,
            self.client_key().display()
        )
    }

    /// Makes sshd reachable through a unix socket at `path` as well: each connection to it
    /// is forwarded to sshd's TCP port by a thread of this process (for a client in a
    /// network namespace of its own, which reaches the socket through the file system but
    /// no TCP port of this host: `ssh -o "ProxyCommand=nc -U PATH"`).
    pub fn unix_bridge(&self, path: &Path) {
        let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
        let port = self.port;
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                    continue;
                };
                let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut s2);
                    let _ = s2.shutdown(std::net::Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let (mut c, mut s) = (client, server);
                    let _ = std::io::copy(&mut s, &mut c);
                    let _ = c.shutdown(std::net::Shutdown::Write);
                });
            }
        });
    }

    /// What sshd logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }

    /// The processes running below this sshd, now.
    pub fn sessions(&self) -> Vec<Session> {
        let mut out = Vec::new();
        let Ok(entries) = fs::read_dir("/proc") else {
            return out;
        };
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if pid == self.pid() || !descends_from(pid, self.pid()) {
                continue;
            }
            let split = |name: &str| -> Vec<String> {
                fs::read(format!("/proc/{pid}/{name}"))
                    .unwrap_or_default()
                    .split(|&b| b == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()
            };
            out.push(Session {
                pid,
                args: split("cmdline"),
                environ: split("environ"),
            });
        }
        out
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `ancestor` is among the parents of `pid`.
fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut p = pid;
    for _ in 0..64 {
        let Some(parent) = parent_of(p) else {
            return false;
        };
        if parent == ancestor {
            return true;
        }
        if parent <= 1 {
            return false;
        }
        p = parent;
    }
    false
}

/// The parent of `pid`, from `/proc/PID/stat` (the field after the command's closing `)`).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// A port free now (sshd may still lose it to another program: [`Sshd::start`] tries again).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

fn sshd_config(dir: &Path, port: u16) -> String {
    format!(
        "Port {port}\n\
         ListenAddress 127.0.0.1\n\
         HostKey {dir}/host_key\n\
         AuthorizedKeysFile {dir}/authorized_keys\n\
         PermitRootLogin yes\n\
         StrictModes no\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         PidFile none\n\
         AllowTcpForwarding yes\n\
         MaxStartups 100\n\
         MaxSessions 100\n\
         LogLevel VERBOSE\n",
        dir = dir.display()
    )
}
