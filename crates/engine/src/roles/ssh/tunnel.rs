//! Tunnelling a remote server's streams through the ssh connection that started it: a local
//! forward from a loopback port of the client to the server's address, added to the running
//! ssh connection master (`ssh -O forward -L 127.0.0.1:PORT:ADDR:PORT`), so that no second
//! authentication is needed and every stream crosses the one ssh connection. Used with
//! `--via-ssh`, and when a direct connection to the server fails.

use super::SshOptions;
use crate::error::TransferError;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};

/// Ports tried for the forward (another program may take a free port between the moment it
/// is found and the moment ssh binds it).
const ATTEMPTS: usize = 8;

/// Adds a forward from a free loopback port to `remote` (an address as seen from the remote
/// host) to the ssh connection master at `control`; returns the local address.
pub(crate) fn forward(
    options: &SshOptions,
    user_host: &str,
    control: &Path,
    remote: SocketAddr,
) -> Result<SocketAddr, TransferError> {
    let target = match remote {
        SocketAddr::V4(a) => format!("{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    };
    let host = user_host
        .rsplit_once('@')
        .map_or(user_host, |(_, h)| h)
        .to_string();
    let failed = |why: String| TransferError::Ssh {
        host: host.clone(),
        why: format!("cannot tunnel the streams to {host} through ssh: {why}"),
    };
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        let local = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| failed(format!("no free local port: {e}")))?;
        let out = Command::new(&options.rsh[0])
            .args(&options.rsh[1..])
            .arg("-o")
            .arg(format!("ControlPath={}", control.display()))
            .args(["-O", "forward", "-L"])
            .arg(format!("127.0.0.1:{}:{target}", local.port()))
            .arg(user_host)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| failed(format!("cannot run '{}': {e}", options.rsh[0])))?;
        if out.status.success() {
            tracing::info!("ssh: streams to {host} go through ssh, from {local} to {target}");
            return Ok(local);
        }
        last = String::from_utf8_lossy(&out.stderr)
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string();
    }
    Err(failed(last))
}
