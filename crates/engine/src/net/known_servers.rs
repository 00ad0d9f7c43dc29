//! Servers a client has met, like ssh's known_hosts: the first connection to a `HOST:PORT` pins
//! the fingerprint of the key it presented (once the server proved the client's token, when
//! the client has one), and later connections must present the same key.
//! The file has one `HOST:PORT SHA256:<base64>` line per server ('#' starts a comment). Clients
//! running at once append under an exclusive lock, so the file is never torn.

use super::identity::Fingerprint;
use std::collections::HashMap;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A known-servers file and what has been read of it.
#[derive(Debug)]
pub struct KnownServers {
    path: PathBuf,
    /// Entries already seen to match, so that a session's many connections read the file once.
    confirmed: Mutex<HashMap<String, Fingerprint>>,
}

/// What the file says of a server's key.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Pinned earlier, and the same.
    Known,
    /// Not met before: now pinned.
    Added,
    /// Not met before, and not pinned (yet).
    New,
    /// Pinned earlier with another key, at this line.
    Changed { pinned: Fingerprint, line: usize },
}

impl KnownServers {
    pub fn new(path: PathBuf) -> KnownServers {
        KnownServers {
            path,
            confirmed: Mutex::default(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `$XDG_CONFIG_HOME/sprat/known_servers`, else `~/.config/sprat/known_servers`; `None`
    /// when neither variable is set.
    pub fn default_path() -> Option<PathBuf> {
        let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => {
                PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".config")
            }
        };
        Some(base.join("sprat").join("known_servers"))
    }

    /// Checks `key` against the pin for `server` (`HOST:PORT`); if there is none, pins it when
    /// `pin_new` says so ([`Verdict::Added`]), else leaves it ([`Verdict::New`]).
    pub fn check(
        &self,
        server: &str,
        key: &Fingerprint,
        pin_new: bool,
    ) -> std::io::Result<Verdict> {
        let server = server.to_ascii_lowercase();
        let mut confirmed = self
            .confirmed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if confirmed.get(&server) == Some(key) {
            return Ok(Verdict::Known);
        }
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o644)
            .open(&self.path)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(|e| std::io::Error::new(e.kind(), format!("it is not a text file ({e})")))?;
        match find(&text, &server)? {
            Some((pinned, _)) if pinned == *key => {
                confirmed.insert(server, *key);
                Ok(Verdict::Known)
            }
            Some((pinned, line)) => Ok(Verdict::Changed { pinned, line }),
            None if !pin_new => Ok(Verdict::New),
            None => {
                let end = file.seek(std::io::SeekFrom::End(0))?;
                let sep = if end > 0 && !text.ends_with('\n') {
                    "\n"
                } else {
                    ""
                };
                file.write_all(format!("{sep}{server} {key}\n").as_bytes())?;
                file.sync_data()?;
                confirmed.insert(server, *key);
                Ok(Verdict::Added)
            }
        }
    }
}

/// The pin for `server` in the file's text and its line number (from 1).
fn find(text: &str, server: &str) -> std::io::Result<Option<(Fingerprint, usize)>> {
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(host), Some(fp)) = (words.next(), words.next()) else {
            continue;
        };
        if host.eq_ignore_ascii_case(server) {
            let fp = Fingerprint::parse(fp).map_err(|why| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("line {}: {why}", i + 1),
                )
            })?;
            return Ok(Some((fp, i + 1)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_use_pins_then_a_change_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cfg/sprat/known_servers");
        let a = Fingerprint::of_public_key(b"a");
        let b = Fingerprint::of_public_key(b"b");
        let known = KnownServers::new(path.clone());
        // Met but not pinned (its proof of the token is still due): nothing written.
        assert_eq!(known.check("Host:7400", &a, false).unwrap(), Verdict::New);
        assert_eq!(known.check("Host:7400", &a, false).unwrap(), Verdict::New);
        assert_eq!(known.check("Host:7400", &a, true).unwrap(), Verdict::Added);
        assert_eq!(known.check("host:7400", &a, false).unwrap(), Verdict::Known);
        assert_eq!(known.check("host:7400", &a, true).unwrap(), Verdict::Known);
        assert_eq!(known.check("other:7400", &b, true).unwrap(), Verdict::Added);
        // A second process sees the file, not this one's memory.
        let again = KnownServers::new(path.clone());
        assert_eq!(again.check("host:7400", &a, false).unwrap(), Verdict::Known);
        assert_eq!(
            again.check("host:7400", &b, true).unwrap(),
            Verdict::Changed { pinned: a, line: 1 }
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
    }
}
