//! `sprat serve --one-shot`: the server a client starts through ssh for a `[USER@]HOST:PATH`
//! argument (see `sprat_engine::ssh`). Its token is the first line of stdin (a command line
//! is visible to every user of the host in `ps`), it listens by default on the address the
//! ssh connection arrived at, and it exits as soon as stdin closes: the client closed the
//! ssh channel, or ssh died. Not here: serving itself, which is the ordinary server's.

use std::io::{BufRead, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Reads the token, the first line of stdin (surrounding white space removed).
pub fn read_token() -> anyhow::Result<Vec<u8>> {
    let mut line = Vec::new();
    std::io::stdin()
        .lock()
        .take(4096)
        .read_until(b'\n', &mut line)
        .map_err(|e| anyhow::anyhow!("--one-shot: cannot read the token from stdin: {e}"))?;
    let token = line.trim_ascii().to_vec();
    if token.len() < crate::MIN_TOKEN_LEN {
        anyhow::bail!(
            "--one-shot: the first line of stdin must be a token of at least {} bytes",
            crate::MIN_TOKEN_LEN
        );
    }
    Ok(token)
}

/// Where a one-shot server listens unless told: port 0 of the local address the ssh
/// connection arrived at (the third field of `SSH_CONNECTION`), so that the client can
/// connect to it as it connected to ssh; the loopback address without ssh.
/// `ssh_connection` is the value of `SSH_CONNECTION`.
pub fn default_listen(ssh_connection: Option<&str>) -> SocketAddr {
    let ip = ssh_connection
        .and_then(|c| c.split_whitespace().nth(2))
        .and_then(|ip| ip.parse::<IpAddr>().ok())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    SocketAddr::new(ip, 0)
}

/// Exits the process once stdin reaches its end (what remains of it is read and dropped).
pub fn exit_when_stdin_closes() {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        std::process::exit(0);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listens_where_ssh_arrived() {
        let at = |c| default_listen(c);
        assert_eq!(
            at(Some("10.1.2.3 50000 10.9.8.7 22")),
            "10.9.8.7:0".parse().unwrap()
        );
        assert_eq!(at(Some("::1 50000 ::1 22")), "[::1]:0".parse().unwrap());
        assert_eq!(at(Some("garbage")), "127.0.0.1:0".parse().unwrap());
        assert_eq!(at(None), "127.0.0.1:0".parse().unwrap());
    }
}
