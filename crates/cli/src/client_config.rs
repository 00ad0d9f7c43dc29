//! The client's configuration file, `$XDG_CONFIG_HOME/sprat/config.toml` (else
//! `~/.config/sprat/config.toml`; `--config FILE` or `SPRAT_CONFIG` name another): defaults
//! for the options a user would otherwise type every time (`[defaults]`), and named servers
//! (`[servers.ALIAS]`: a URL, a token file, a pinned fingerprint) that `sprat://ALIAS/PATH`
//! then names. Read and checked here, at the binary's edge; every mistake is one line naming
//! the file, the table and the key. A missing file is no error (unless named explicitly); an
//! unreadable one is.
//!
//! Not here: the server's own file (`sprat serve --config`, see `serve_config`); what the
//! options mean (`args`, `main`).

use crate::args::Auto;
use serde::Deserialize;
use sprat_engine::{Endpoint, Fingerprint};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file's format, shown by `sprat cp --help` and in the README.
pub const CLIENT_CONFIG_HELP: &str = r#"Configuration file (--config FILE, else $SPRAT_CONFIG, else
$XDG_CONFIG_HOME/sprat/config.toml or ~/.config/sprat/config.toml; a missing file is ignored):
defaults for options, and servers named by an alias, used as sprat://ALIAS/PATH (a host without
a port). Options on the command line override the file; `--config /dev/null` ignores it.
Relative paths are relative to the file's directory, `~/` is the home directory.

    [defaults]
    token_file = "~/.config/sprat/token"      # as --token-file (SPRAT_TOKEN overrides it)
    known_servers = "~/.config/sprat/known"   # as --known-servers
    no_encryption = false                     # as --no-encryption
    streams = "auto"                          # cp: as --streams (or a number)
    bwlimit = "100mbit"                       # cp: as --bwlimit
    tcp_buffer = "auto"                       # cp: as --tcp-buffer
    batch_size = "auto"                       # cp: as --batch-size
    progress = true                           # cp: always (false: never; unset: on a terminal)
    checksum = false                          # cp: as -c (unless -I or --ignore-existing)
    durable = false                           # cp: as --durable
    numeric_ids = false                       # cp: as --numeric-ids
    no_owners = false                         # cp: as --no-owners
    keep_setuid = false                       # cp: as --keep-setuid
    keep_devices = false                      # cp: as --keep-devices
    hard_links = false                        # cp: as -H
    xattrs = false                            # cp: as -X
    acls = false                              # cp: as -A
    retry_for = "10min"                       # cp: as --retry-for
    stall_timeout = "60s"                     # cp: as --stall-timeout

    [servers.lab]                             # sprat://lab/sub/dir = sprat://lab.example.org:7400/runs/sub/dir
    url = "sprat://lab.example.org:7400/runs" # the server, and the path (or export) below it
    token_file = "~/.config/sprat/lab.token"  # this server's token (--token-file overrides it)
    fingerprint = "SHA256:..."                # accept only this key (--server-fingerprint overrides it)
"#;

/// A configuration file as read and checked (empty when there is none).
#[derive(Debug, Default)]
pub struct ClientConfig {
    /// Where it was read from, or would have been (for messages).
    file: Option<PathBuf>,
    /// Whether the file was there.
    found: bool,
    pub defaults: Defaults,
    servers: BTreeMap<String, ServerAlias>,
}

/// `[defaults]`, checked; `None`: not in the file.
#[derive(Debug, Default)]
pub struct Defaults {
    pub token_file: Option<PathBuf>,
    pub known_servers: Option<PathBuf>,
    pub no_encryption: Option<bool>,
    pub streams: Option<Auto<usize>>,
    pub bwlimit: Option<crate::units::Rate>,
    pub tcp_buffer: Option<Auto<u64>>,
    pub batch_size: Option<Auto<u64>>,
    pub progress: Option<bool>,
    pub checksum: Option<bool>,
    pub durable: Option<bool>,
    pub numeric_ids: Option<bool>,
    pub no_owners: Option<bool>,
    pub keep_setuid: Option<bool>,
    pub keep_devices: Option<bool>,
    pub hard_links: Option<bool>,
    pub xattrs: Option<bool>,
    pub acls: Option<bool>,
    pub retry_for: Option<Duration>,
    pub stall_timeout: Option<Duration>,
}

/// One `[servers.ALIAS]`, checked.
#[derive(Debug)]
pub struct ServerAlias {
    /// `HOST:PORT`.
    pub addr: String,
    /// The path below the server's root (or the export and a path in it), normalised.
    pub path: Vec<u8>,
    pub token_file: Option<PathBuf>,
    pub fingerprint: Option<Fingerprint>,
}

/// A server alias and its name.
pub type Named<'a> = (&'a str, &'a ServerAlias);

use crate::serve_config::one_line;
/// A mistake in the file, in one line: `config 'FILE': [TABLE]: key 'KEY': what` (the same
/// error as the server's config file).
pub use crate::serve_config::ConfigError;

/// The file's top level: two tables, each read on its own so that its mistakes name it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    defaults: Option<toml::Table>,
    #[serde(default)]
    servers: Option<toml::Table>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    token_file: Option<PathBuf>,
    known_servers: Option<PathBuf>,
    no_encryption: Option<bool>,
    streams: Option<toml::Value>,
    bwlimit: Option<toml::Value>,
    tcp_buffer: Option<toml::Value>,
    batch_size: Option<toml::Value>,
    progress: Option<bool>,
    checksum: Option<bool>,
    durable: Option<bool>,
    numeric_ids: Option<bool>,
    no_owners: Option<bool>,
    keep_setuid: Option<bool>,
    keep_devices: Option<bool>,
    hard_links: Option<bool>,
    xattrs: Option<bool>,
    acls: Option<bool>,
    retry_for: Option<String>,
    stall_timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    url: String,
    token_file: Option<PathBuf>,
    fingerprint: Option<String>,
}

/// Where the file is when neither `--config` nor `SPRAT_CONFIG` says: beside the
/// known-servers file.
pub fn default_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".config"),
    };
    Some(base.join("sprat").join("config.toml"))
}

impl ClientConfig {
    /// Reads the file `explicit` names (`--config`), else `SPRAT_CONFIG`'s, else the default
    /// one if it exists.
    pub fn load(explicit: Option<&Path>) -> Result<ClientConfig, ConfigError> {
        let named = explicit
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("SPRAT_CONFIG").map(PathBuf::from))
            .filter(|p| !p.as_os_str().is_empty());
        match named {
            Some(file) => read(&file),
            None => match default_path() {
                Some(file) => match std::fs::symlink_metadata(&file) {
                    // Not there, or not where this user can look (another user's home, as
                    // after `setpriv` or `su` without a login): no file. One that is there but
                    // cannot be read is an error (in `read`).
                    Err(e) if absent(&e) => Ok(ClientConfig {
                        file: Some(file),
                        ..ClientConfig::default()
                    }),
                    _ => read(&file),
                },
                None => Ok(ClientConfig::default()),
            },
        }
    }

    /// Where the file is, in words for messages.
    fn shown(&self) -> String {
        match &self.file {
            Some(f) => format!("config '{}'", f.display()),
            None => "the config file (no $XDG_CONFIG_HOME or $HOME)".into(),
        }
    }

    /// The error of a key in a table, in the file's format.
    pub fn error(&self, table: &str, key: &str, what: &str) -> anyhow::Error {
        anyhow::anyhow!("{}: [{table}]: key '{key}': {what}", self.shown())
    }

    /// If `arg` is `sprat://ALIAS/PATH` with ALIAS a host without a port, the URL it stands
    /// for and the alias; any other argument as it is. An alias the file does not declare is
    /// an error.
    pub fn resolve<'a>(
        &'a self,
        arg: &OsStr,
    ) -> Result<(OsString, Option<Named<'a>>), sprat_engine::TransferError> {
        let bytes = arg.as_bytes();
        let Some(rest) = bytes.strip_prefix(b"sprat://") else {
            return Ok((arg.to_os_string(), None));
        };
        let slash = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        let host = &rest[..slash];
        if host.is_empty() || host.contains(&b':') {
            return Ok((arg.to_os_string(), None));
        }
        let name = String::from_utf8_lossy(host);
        let Some((alias, server)) = self.servers.get_key_value(name.as_ref()) else {
            let known = if self.servers.is_empty() {
                match (&self.file, self.found) {
                    (Some(_), true) => format!("{} declares no [servers]", self.shown()),
                    (Some(_), false) => format!("there is no {}", self.shown()),
                    (None, _) => "no config file".into(),
                }
            } else {
                format!(
                    "{} declares {}",
                    self.shown(),
                    self.servers
                        .keys()
                        .map(|k| format!("[servers.{k}]"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(sprat_engine::TransferError::Usage(format!(
                "invalid URL '{}': '{name}' has no port and is no server alias ({known}); \
                 expected sprat://HOST:PORT/PATH or sprat://ALIAS/PATH",
                arg.to_string_lossy()
            )));
        };
        let mut url = format!("sprat://{}/", server.addr).into_bytes();
        url.extend_from_slice(&server.path);
        let below = &rest[slash..];
        if !below.is_empty() && below != b"/" {
            if !server.path.is_empty() {
                url.push(b'/');
            }
            url.extend_from_slice(below.strip_prefix(b"/").unwrap_or(below));
        }
        Ok((OsString::from_vec(url), Some((alias.as_str(), server))))
    }
}

/// Whether looking the default file up failed because it is not there for this user: missing,
/// a parent that is no directory, or a parent this user may not search.
fn absent(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    e.kind() == std::io::ErrorKind::NotFound
        || matches!(Errno::from_io_error(e), Some(Errno::NOTDIR | Errno::ACCESS))
}

/// Makes a path of the file absolute: `~/` is `$HOME`, a relative path is relative to `base`.
fn expand(base: &Path, path: PathBuf) -> PathBuf {
    if let Ok(rest) = path.strip_prefix("~") {
        if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            return PathBuf::from(home).join(rest);
        }
    }
    base.join(path)
}

/// Reads and checks `file`.
fn read(file: &Path) -> Result<ClientConfig, ConfigError> {
    let fail = |what: String| ConfigError {
        file: file.to_path_buf(),
        what,
    };
    let table = crate::serve_config::read_table(file)?;
    let raw = RawFile::deserialize(toml::Value::Table(table)).map_err(|e| {
        fail(format!(
            "{} (the tables are [defaults] and [servers.ALIAS])",
            one_line(&e)
        ))
    })?;
    let base = file.parent().unwrap_or(Path::new("."));
    let defaults = match raw.defaults {
        Some(t) => read_defaults(t, base).map_err(|w| fail(format!("[defaults]: {w}")))?,
        None => Defaults::default(),
    };
    let mut servers = BTreeMap::new();
    for (alias, value) in raw.servers.unwrap_or_default() {
        let label = format!("[servers.{alias}]");
        check_alias(&alias).map_err(|w| fail(format!("{label}: {w}")))?;
        let toml::Value::Table(t) = value else {
            return Err(fail(format!(
                "{label}: is of type {}, not a table (write [servers.{alias}] and url = \"...\" below it)",
                value.type_str()
            )));
        };
        let server = read_server(t, base).map_err(|w| fail(format!("{label}: {w}")))?;
        servers.insert(alias, server);
    }
    Ok(ClientConfig {
        file: Some(file.to_path_buf()),
        found: true,
        defaults,
        servers,
    })
}

/// An alias is what a URL's host can be without a port: letters, digits, `.`, `-`, `_`.
fn check_alias(alias: &str) -> Result<(), String> {
    let ok = !alias.is_empty()
        && alias
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{alias}' is not an alias: use letters, digits, '.', '-' and '_' (it is written \
             as the host of sprat://ALIAS/PATH)"
        ))
    }
}

fn read_defaults(table: toml::Table, base: &Path) -> Result<Defaults, String> {
    let raw = RawDefaults::deserialize(toml::Value::Table(table)).map_err(|e| one_line(&e))?;
    let key = |k: &'static str| move |why: String| format!("key '{k}': {why}");
    let streams = match raw.streams {
        None => None,
        Some(toml::Value::Integer(n)) => Some(
            crate::args::parse_streams(&n.to_string())
                .map_err(|e| key("streams")(e.to_string()))?,
        ),
        Some(toml::Value::String(s)) => {
            Some(crate::args::parse_streams(&s).map_err(|e| key("streams")(e.to_string()))?)
        }
        Some(v) => {
            return Err(key("streams")(format!(
                "a {}, expected a number or \"auto\"",
                v.type_str()
            )))
        }
    };
    // A size or a rate as a string (`"4MiB"`, `"100mbit"`) or a bare number (`bwlimit =
    // 1000`: KiB/s, as on the command line).
    let text = |k: &'static str, v: Option<toml::Value>| match v {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s)),
        Some(toml::Value::Integer(n)) => Ok(Some(n.to_string())),
        Some(v) => Err(key(k)(format!(
            "a {}, expected a number or a string such as \"100MB/s\"",
            v.type_str()
        ))),
    };
    let size = |k: &'static str, v: Option<toml::Value>| {
        text(k, v)?
            .map(|s| crate::args::parse_auto_size(&s).map_err(|e| key(k)(e.to_string())))
            .transpose()
    };
    let duration = |k: &'static str, v: Option<String>| {
        v.map(|s| crate::units::long_duration(&s).map_err(|e| key(k)(e.to_string())))
            .transpose()
    };
    Ok(Defaults {
        token_file: raw.token_file.map(|p| expand(base, p)),
        known_servers: raw.known_servers.map(|p| expand(base, p)),
        no_encryption: raw.no_encryption,
        streams,
        bwlimit: text("bwlimit", raw.bwlimit)?
            .map(|s| crate::units::Rate::parse(&s).map_err(|e| key("bwlimit")(e.to_string())))
            .transpose()?,
        tcp_buffer: size("tcp_buffer", raw.tcp_buffer)?,
        batch_size: size("batch_size", raw.batch_size)?,
        progress: raw.progress,
        checksum: raw.checksum,
        durable: raw.durable,
        numeric_ids: raw.numeric_ids,
        no_owners: raw.no_owners,
        keep_setuid: raw.keep_setuid,
        keep_devices: raw.keep_devices,
        hard_links: raw.hard_links,
        xattrs: raw.xattrs,
        acls: raw.acls,
        retry_for: duration("retry_for", raw.retry_for)?,
        stall_timeout: duration("stall_timeout", raw.stall_timeout)?,
    })
}

fn read_server(table: toml::Table, base: &Path) -> Result<ServerAlias, String> {
    let raw = RawServer::deserialize(toml::Value::Table(table)).map_err(|e| one_line(&e))?;
    let (addr, path) = match Endpoint::parse(OsStr::new(&raw.url)) {
        Ok(Endpoint::Remote { also, .. }) if !also.is_empty() => {
            return Err(format!(
                "key 'url': '{}' names several servers; an alias stands for one",
                raw.url
            ))
        }
        Ok(Endpoint::Remote { addr, path, .. }) => (addr, path),
        Ok(_) => {
            return Err(format!(
                "key 'url': '{}' is not a sprat://HOST:PORT/PATH URL",
                raw.url
            ))
        }
        Err(e) => return Err(format!("key 'url': {e}")),
    };
    let fingerprint = raw
        .fingerprint
        .map(|f| Fingerprint::parse(&f).map_err(|why| format!("key 'fingerprint': {why}")))
        .transpose()?;
    Ok(ServerAlias {
        addr,
        path,
        token_file: raw.token_file.map(|p| expand(base, p)),
        fingerprint,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn read_text(text: &str) -> (tempfile::TempDir, Result<ClientConfig, ConfigError>) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, text).unwrap();
        let read = read(&file);
        (dir, read)
    }

    #[test]
    fn sizes_and_rates_may_be_bare_numbers() {
        let (_dir, c) = read_text("[defaults]\nbwlimit = 1000\nbatch_size = 4194304\n");
        let d = c.unwrap().defaults;
        assert_eq!(d.bwlimit.unwrap().bytes_per_s(), 1000.0 * 1024.0);
        assert!(matches!(d.batch_size, Some(Auto(Some(4194304)))));
        let (_dir, c) = read_text("[defaults]\nbwlimit = 1.5\n");
        let e = c.err().unwrap().to_string();
        assert!(e.contains("key 'bwlimit'") && e.contains("float"), "{e}");
    }

    #[test]
    fn aliases_stand_for_their_url_with_the_path_below_it() {
        let (dir, c) = read_text(
            "[servers.lab]\nurl = \"sprat://127.0.0.1:7400/runs\"\ntoken_file = \"t\"\n\
             [servers.root]\nurl = \"sprat://h:1/\"\n",
        );
        let c = c.unwrap();
        let url = |s: &str| c.resolve(OsStr::new(s)).unwrap().0.into_string().unwrap();
        assert_eq!(url("sprat://lab/a/b"), "sprat://127.0.0.1:7400/runs/a/b");
        assert_eq!(url("sprat://lab/"), "sprat://127.0.0.1:7400/runs");
        assert_eq!(url("sprat://lab"), "sprat://127.0.0.1:7400/runs");
        assert_eq!(url("sprat://root/x"), "sprat://h:1/x");
        assert_eq!(url("sprat://h:1/x"), "sprat://h:1/x");
        assert_eq!(url("./local"), "./local");
        let (_, alias) = c.resolve(OsStr::new("sprat://lab/x")).unwrap();
        assert_eq!(alias.unwrap().1.token_file, Some(dir.path().join("t")));
        let e = c.resolve(OsStr::new("sprat://nope/x")).unwrap_err();
        assert!(
            e.to_string().contains("[servers.lab], [servers.root]"),
            "{e}"
        );
    }

    #[test]
    fn each_mistake_is_one_line_naming_the_table_and_the_key() {
        let cases = [
            ("[defaults]\nstreems = 4\n", "[defaults]", "`streems`"),
            (
                "[defaults]\nprogress = \"yes\"\n",
                "[defaults]",
                "`progress`",
            ),
            ("[defaults]\nstreams = 99\n", "[defaults]", "key 'streams'"),
            (
                "[defaults]\nbwlimit = \"fast\"\n",
                "[defaults]",
                "key 'bwlimit'",
            ),
            (
                "[defaults]\nretry_for = \"5\"\n",
                "[defaults]",
                "key 'retry_for'",
            ),
            (
                "[servers.a]\nurl = \"sprat://h/x\"\n",
                "[servers.a]",
                "key 'url'",
            ),
            (
                "[servers.a]\nurl = \"/local\"\n",
                "[servers.a]",
                "key 'url'",
            ),
            ("[servers.a]\ntoken_file = \"t\"\n", "[servers.a]", "`url`"),
            (
                "[servers.a]\nurl = \"sprat://h:1/\"\ntoken = \"t\"\n",
                "[servers.a]",
                "`token`",
            ),
            (
                "[servers.a]\nurl = \"sprat://h:1/\"\nfingerprint = \"x\"\n",
                "[servers.a]",
                "key 'fingerprint'",
            ),
            ("[servers]\na = 1\n", "[servers.a]", "not a table"),
            (
                "[servers.\"a:1\"]\nurl = \"sprat://h:1/\"\n",
                "[servers.a:1]",
                "not an alias",
            ),
            ("[default]\n", "", "`default`"),
            ("[defaults\n", "", "line 1"),
        ];
        for (text, table, key) in cases {
            let (_dir, read) = read_text(text);
            let line = read.unwrap_err().to_string();
            assert!(!line.contains('\n'), "{line:?}");
            assert!(line.starts_with("config '"), "{line}");
            assert!(line.contains(table), "{line:?} does not name {table}");
            assert!(line.contains(key), "{line:?} does not name {key}");
        }
    }
}
