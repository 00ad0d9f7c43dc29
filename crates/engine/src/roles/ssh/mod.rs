//! Copies and namespace requests to `[USER@]HOST:PATH`, where only ssh is open: a one-shot
//! server is started on the remote through ssh (`sprat serve --one-shot`, see
//! [`launch`]), the client hands it a fresh one-time token on the ssh channel and pins the
//! key fingerprint the server prints there, and data then moves on sprat's own TCP streams,
//! directly or, when they cannot connect, through the ssh connection ([`tunnel`]).
//!
//! This module turns such arguments into ordinary `sprat://` endpoints ([`resolve`]) before
//! any role sees them: the roles know nothing of ssh, and a [`Launched`] guard keeps the
//! remote servers alive until the command is done. Not here: the one-shot server itself
//! (the binary's `serve --one-shot`, an ordinary [`crate::Server`]).

pub mod launch;
pub mod tunnel;

use crate::error::TransferError;
use crate::net::{Credentials, Fingerprint, Trust};
use crate::roles::endpoint::Endpoint;
use sprat_proto::auth::TokenKey;
use sprat_proto::path as wire_path;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

pub use launch::RemoteServer;

/// How to reach remotes named `[USER@]HOST:PATH`.
#[derive(Debug, Clone)]
pub struct SshOptions {
    /// The remote shell and its arguments (`-e/--rsh`, `SPRAT_RSH`, else `ssh`), split as a
    /// shell would.
    pub rsh: Vec<String>,
    /// The command that runs sprat on the remote (`--remote-sprat`, default `sprat`), given to
    /// the remote's shell as it is, like rsync's `--rsync-path`.
    pub remote_sprat: String,
    /// Tunnel the data streams through the ssh connection instead of connecting directly.
    pub via_ssh: bool,
}

impl SshOptions {
    /// Options from `--rsh` (or `rsh_env`, the value of `SPRAT_RSH`), `--remote-sprat` and
    /// `--via-ssh`.
    pub fn new(
        rsh: Option<&str>,
        rsh_env: Option<&str>,
        remote_sprat: Option<&str>,
        via_ssh: bool,
    ) -> Result<SshOptions, TransferError> {
        let (text, from) = match (rsh, rsh_env) {
            (Some(r), _) => (r, "-e/--rsh"),
            (None, Some(r)) if !r.trim().is_empty() => (r, "SPRAT_RSH"),
            _ => ("ssh", "the default"),
        };
        let rsh = shlex::split(text).ok_or_else(|| {
            TransferError::Usage(format!(
                "{from} '{text}': unbalanced quotes or a trailing backslash"
            ))
        })?;
        if rsh.is_empty() {
            return Err(TransferError::Usage(format!("{from} is empty")));
        }
        let remote_sprat = remote_sprat.unwrap_or("sprat").to_string();
        if remote_sprat.trim().is_empty() {
            return Err(TransferError::Usage("--remote-sprat is empty".into()));
        }
        Ok(SshOptions {
            rsh,
            remote_sprat,
            via_ssh,
        })
    }
}

/// A `[USER@]HOST:PATH` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// What ssh is given: `HOST` or `USER@HOST` (an IPv6 address without its brackets).
    pub user_host: String,
    /// The path as given: absolute, or relative to the remote login's home directory.
    pub path: Vec<u8>,
}

impl SshTarget {
    /// `Some` when `arg` names a remote over ssh: not a `sprat://` URL, and a `:` whose part
    /// before it is not empty and has no `/` (so `./a:b` and `/x/a:b` stay local paths, as
    /// with scp and rsync), and not followed by `//` (`http://...` is no host).
    /// `[::1]:PATH` and `USER@[::1]:PATH` name IPv6 addresses.
    pub fn parse(arg: &OsStr) -> Option<SshTarget> {
        let bytes = arg.as_bytes();
        if bytes.starts_with(b"sprat://") {
            return None;
        }
        let colon = match bytes.iter().position(|&b| b == b'[') {
            Some(open) if !bytes[..open].contains(&b':') => {
                let close = open + bytes[open..].iter().position(|&b| b == b']')?;
                if bytes.get(close + 1) != Some(&b':') {
                    return None;
                }
                close + 1
            }
            _ => bytes.iter().position(|&b| b == b':')?,
        };
        let host = &bytes[..colon];
        // `SCHEME://...` is a URL (of another scheme), not a host and a path.
        if host.is_empty() || host.contains(&b'/') || bytes[colon + 1..].starts_with(b"//") {
            return None;
        }
        let host = std::str::from_utf8(host).ok()?;
        let user_host = host.replace(['[', ']'], "");
        // `HOST:~/PATH` and `HOST:~` are in the home directory, as the remote shell of scp and
        // rsync takes them.
        let path = &bytes[colon + 1..];
        let path = match path {
            b"~" => &b""[..],
            p => p.strip_prefix(b"~/").unwrap_or(p),
        };
        Some(SshTarget {
            user_host,
            path: path.to_vec(),
        })
    }

    /// The host alone, for messages.
    pub fn host(&self) -> &str {
        self.user_host
            .rsplit_once('@')
            .map_or(&self.user_host[..], |(_, h)| h)
    }

    /// Whether the path is absolute (the remote server's root is then `/`, else the home).
    fn absolute(&self) -> bool {
        self.path.starts_with(b"/")
    }

    /// The path relative to the one-shot server's root.
    fn wire_path(&self) -> Result<Vec<u8>, TransferError> {
        let path = wire_path::normalize_user_path(&self.path);
        wire_path::validate(&path).map_err(|e| {
            TransferError::Usage(format!(
                "'{}:{}': {e}",
                self.user_host,
                String::from_utf8_lossy(&self.path)
            ))
        })?;
        Ok(path)
    }
}

impl std::fmt::Display for SshTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = if self.user_host.contains(':') {
            match self.user_host.rsplit_once('@') {
                Some((user, h)) => format!("{user}@[{h}]"),
                None => format!("[{}]", self.user_host),
            }
        } else {
            self.user_host.clone()
        };
        write!(f, "{host}:{}", String::from_utf8_lossy(&self.path))
    }
}

/// The remote servers started for one command, and what the command uses instead of its
/// `HOST:PATH` arguments. Dropping it ends the servers (their ssh channel's stdin closes).
pub struct Launched {
    /// Each argument as an endpoint, in the order given.
    pub endpoints: Vec<Endpoint>,
    /// Each argument as the user wrote it, for reports and messages.
    pub shown: Vec<String>,
    /// The credentials for these endpoints: the one-time token and the servers' keys pinned
    /// when any argument went over ssh, else the ones given.
    pub credentials: Credentials,
    /// The servers started, one per `[USER@]HOST`.
    pub servers: Vec<RemoteServer>,
}

impl Launched {
    /// `e` in the terms the user wrote: each one-shot server named by its `[USER@]HOST` (not
    /// the address it happened to listen on), and the paths of an absolute `HOST:/PATH` with
    /// their leading `/` (the server exports `/`, so it names them relative to it).
    pub fn in_user_terms(&self, mut e: TransferError) -> TransferError {
        for server in &self.servers {
            let paths: Vec<(String, String)> = self
                .endpoints
                .iter()
                .filter_map(|ep| match ep {
                    Endpoint::Remote { addr, path, .. }
                        if *addr == server.addr && server.root == "/" && !path.is_empty() =>
                    {
                        let p = String::from_utf8_lossy(path).into_owned();
                        Some((p.clone(), format!("/{p}")))
                    }
                    _ => None,
                })
                .collect();
            let shown = format!("{} (over ssh)", server.user_host);
            e = e.renamed(&server.addr, &shown, &paths);
        }
        // A usage error (an overlap refused, say) names the endpoints as the user wrote them.
        if let TransferError::Usage(mut text) = e {
            for (ep, shown) in self.endpoints.iter().zip(&self.shown) {
                if matches!(ep, Endpoint::Remote { .. }) {
                    text = text.replace(&format!("'{ep}'"), &format!("'{shown}'"));
                }
            }
            return TransferError::Usage(text);
        }
        e
    }

    /// What tells a transfer that an ssh process its servers live in has exited (see
    /// [`crate::sync::TransportWatch`]); nothing when no argument went over ssh.
    pub fn transport(&self) -> crate::sync::TransportWatch {
        if self.servers.is_empty() {
            return crate::sync::TransportWatch::default();
        }
        let watches: Vec<_> = self.servers.iter().map(|s| s.watch()).collect();
        crate::sync::TransportWatch::new(move || watches.iter().find_map(|w| w()))
    }
}

/// Parses the arguments of a command: `HOST:PATH` ones start a one-shot server on each host
/// named (one per `[USER@]HOST`, shared by its arguments), the others are parsed as
/// [`Endpoint`]s. An ssh argument cannot be mixed with a `sprat://` one.
pub fn resolve(
    args: &[&OsStr],
    given: &Credentials,
    options: &SshOptions,
) -> Result<Launched, TransferError> {
    let targets: Vec<Option<SshTarget>> = args.iter().map(|a| SshTarget::parse(a)).collect();
    let shown = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if targets.iter().all(Option::is_none) {
        let endpoints = args
            .iter()
            .map(|a| Endpoint::parse(a))
            .collect::<Result<_, _>>()?;
        return Ok(Launched {
            endpoints,
            shown,
            credentials: given.clone(),
            servers: Vec::new(),
        });
    }
    if args.iter().any(|a| a.as_bytes().starts_with(b"sprat://")) {
        return Err(TransferError::Usage(
            "a HOST:PATH argument (over ssh) cannot be used with a sprat:// URL in one command"
                .into(),
        ));
    }
    // One fresh token for every server of this command: a copy between two remotes
    // authenticates to both with it.
    let token: String = crate::net::random::<32>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut servers: Vec<RemoteServer> = Vec::new();
    let mut endpoints = Vec::new();
    for (arg, target) in args.iter().zip(&targets) {
        let Some(t) = target else {
            endpoints.push(Endpoint::parse(arg)?);
            continue;
        };
        let path = t.wire_path()?;
        let server = match servers.iter().position(|s| s.user_host == t.user_host) {
            Some(i) => &servers[i],
            None => {
                let root = if t.absolute() { "/" } else { "." };
                servers.push(RemoteServer::start(&t.user_host, root, &token, options)?);
                let last = servers.len() - 1;
                &servers[last]
            }
        };
        if (server.root == "/") != t.absolute() {
            return Err(TransferError::Usage(format!(
                "'{t}': the paths on {} must be all absolute or all relative to the home \
                 directory in one command",
                t.host()
            )));
        }
        endpoints.push(Endpoint::Remote {
            addr: server.addr.clone(),
            path,
            also: Vec::new(),
        });
    }
    // Between two remotes the source's server pushes to the destination's address itself:
    // a local forward of this client means nothing there.
    if servers.len() > 1 {
        if let Some(s) = servers.iter().find(|s| s.tunnelled) {
            return Err(TransferError::Usage(format!(
                "a copy between two HOST:PATH remotes needs their servers to connect to each \
                 other directly, but the streams to {} go through ssh (--via-ssh, or it could \
                 not be reached directly); copy in two steps through a local directory",
                s.user_host
            )));
        }
    }
    let pins: Vec<Fingerprint> = servers.iter().map(|s| s.fingerprint).collect();
    let credentials = Credentials::new(
        Some(TokenKey::from_token(token.as_bytes())),
        Trust {
            encrypt: true,
            pins,
            known: None,
        },
    );
    Ok(Launched {
        endpoints,
        shown,
        credentials,
        servers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Option<(String, String)> {
        SshTarget::parse(OsStr::new(s))
            .map(|t| (t.user_host, String::from_utf8_lossy(&t.path).into_owned()))
    }

    #[test]
    fn recognises_host_colon_path_like_scp() {
        let p = |h: &str, path: &str| Some((h.to_string(), path.to_string()));
        assert_eq!(parse("host:/data"), p("host", "/data"));
        assert_eq!(parse("me@host:data/x"), p("me@host", "data/x"));
        assert_eq!(parse("host:"), p("host", ""));
        assert_eq!(parse("host:a:b"), p("host", "a:b"));
        assert_eq!(parse("[::1]:/d"), p("::1", "/d"));
        assert_eq!(parse("me@[fe80::1]:d"), p("me@fe80::1", "d"));
        // `~` is the home directory, where relative paths are.
        assert_eq!(parse("host:~/x"), p("host", "x"));
        assert_eq!(parse("host:~"), p("host", ""));
        assert_eq!(parse("host:~other/x"), p("host", "~other/x"));
        for local in [
            "./a:b",
            "/x/a:b",
            "plain",
            ":x",
            "sprat://h:1/x",
            "[::1]/x",
            "a/b:c",
        ] {
            assert_eq!(parse(local), None, "{local}");
        }
    }

    #[test]
    fn shows_targets_as_given() {
        let t = SshTarget::parse(OsStr::new("me@[::1]:/d")).unwrap();
        assert_eq!(t.to_string(), "me@[::1]:/d");
        assert_eq!(t.host(), "::1");
        let t = SshTarget::parse(OsStr::new("h:x")).unwrap();
        assert_eq!(t.to_string(), "h:x");
    }

    #[test]
    fn refuses_paths_leaving_the_root() {
        let t = SshTarget::parse(OsStr::new("h:../x")).unwrap();
        assert!(t.wire_path().is_err());
        let t = SshTarget::parse(OsStr::new("h:/a//b/./")).unwrap();
        assert_eq!(t.wire_path().unwrap(), b"a/b");
    }

    #[test]
    fn splits_the_remote_shell_like_a_shell() {
        let o = SshOptions::new(Some("ssh -p 2222 -i 'my key'"), None, None, false).unwrap();
        assert_eq!(o.rsh, ["ssh", "-p", "2222", "-i", "my key"]);
        assert_eq!(o.remote_sprat, "sprat");
        let o = SshOptions::new(None, Some("myssh -q"), Some("/opt/sprat"), true).unwrap();
        assert_eq!(o.rsh, ["myssh", "-q"]);
        assert!(SshOptions::new(None, None, None, false).unwrap().rsh == ["ssh"]);
        assert!(SshOptions::new(Some("ssh 'x"), None, None, false).is_err());
        assert!(SshOptions::new(Some("  "), None, None, false).is_err());
    }
}
