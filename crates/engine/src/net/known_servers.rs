//! Servers a client has met, like ssh's known_hosts: the first connection to a `HOST:PORT` pins
//! the fingerprint of the key it presented (once the server proved the client's token, when
//! the client has one), and later connections must present the same key.
//! The file has one `HOST:PORT SHA256:<base64>` line per server ('#' starts a comment), and a
//! line `HOST:PORT SHA256:<base64> proved` once a server with that key proved a client's token:
//! only such a key is trusted with a request or data before the server proves the token on
//! the connection at hand (see `net::greet_bound`); older clients read the first two words.
//! Clients running at once append under an exclusive lock, so the file is never torn.

use super::identity::Fingerprint;
use std::collections::HashMap;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A known-servers file and what has been read of it.
#[derive(Debug)]
pub struct KnownServers {
    path: PathBuf,
    /// Entries already seen to match, so that a session's many connections read the file
    /// once, and whether their key proved a token.
    confirmed: Mutex<HashMap<String, (Fingerprint, bool)>>,
}

/// What the file says of a server's key.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Pinned earlier, and the same; `proved`: a server with this key proved a token.
    Known { proved: bool },
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

    /// Checks `key` against the pin for `server` (`HOST:PORT`); what it writes is `pin`'s.
    pub fn check(&self, server: &str, key: &Fingerprint, pin: Pin) -> std::io::Result<Verdict> {
        let server = server.to_ascii_lowercase();
        let mut confirmed = self
            .confirmed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match confirmed.get(&server) {
            Some((k, proved)) if k == key && (*proved || pin != Pin::Proved) => {
                return Ok(Verdict::Known { proved: *proved })
            }
            _ => {}
        }
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Private, as ~/.ssh: whoever may write here may pin their own key. (A copy
            // runs with no umask, so the mode must not rely on one.)
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
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
        let append = |file: &mut std::fs::File, line: String| -> std::io::Result<()> {
            let end = file.seek(std::io::SeekFrom::End(0))?;
            let sep = if end > 0 && !text.ends_with('\n') {
                "\n"
            } else {
                ""
            };
            file.write_all(format!("{sep}{line}\n").as_bytes())?;
            // `/dev/null` (ssh's idiom for "remember nothing") cannot be synced: nothing to keep.
            match file.sync_data() {
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                    Ok(())
                }
                done => done,
            }
        };
        match find(&text, &server)? {
            Some(found) if found.key == *key => {
                let proved = found.proved || pin == Pin::Proved;
                if proved && !found.proved {
                    append(&mut file, format!("{server} {key} proved"))?;
                }
                confirmed.insert(server, (*key, proved));
                Ok(Verdict::Known { proved })
            }
            Some(found) => Ok(Verdict::Changed {
                pinned: found.key,
                line: found.line,
            }),
            None if pin == Pin::No => Ok(Verdict::New),
            None => {
                let proved = pin == Pin::Proved;
                let mark = if proved { " proved" } else { "" };
                append(&mut file, format!("{server} {key}{mark}"))?;
                confirmed.insert(server, (*key, proved));
                Ok(Verdict::Added)
            }
        }
    }
}

/// What [`KnownServers::check`] writes of a key met for the first time (or seen again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pin {
    /// Nothing: the server is to prove the token first.
    No,
    /// The key, unmarked (a client without a token: nothing to prove).
    Key,
    /// The key, marked as having proved a token (or that mark for a key pinned already).
    Proved,
}

/// The pin of a server in the file.
struct Found {
    key: Fingerprint,
    /// Its line number (from 1).
    line: usize,
    /// A line marks this key as having proved a token.
    proved: bool,
}

/// The pin for `server` in the file's text: its first line names the key; any line with that
/// key and the word `proved` marks it.
fn find(text: &str, server: &str) -> std::io::Result<Option<Found>> {
    let mut found: Option<Found> = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(host), Some(fp)) = (words.next(), words.next()) else {
            continue;
        };
        if !host.eq_ignore_ascii_case(server) {
            continue;
        }
        let key = Fingerprint::parse(fp).map_err(|why| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("line {}: {why}", i + 1),
            )
        })?;
        let proved = words.next() == Some("proved");
        match &mut found {
            None => {
                found = Some(Found {
                    key,
                    line: i + 1,
                    proved,
                })
            }
            Some(f) if f.key == key => f.proved |= proved,
            Some(_) => {}
        }
    }
    Ok(found)
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
        let unproved = Verdict::Known { proved: false };
        let proved = Verdict::Known { proved: true };
        // Met but not pinned (its proof of the token is still due): nothing written.
        assert_eq!(known.check("Host:7400", &a, Pin::No).unwrap(), Verdict::New);
        assert_eq!(known.check("Host:7400", &a, Pin::No).unwrap(), Verdict::New);
        // Pinned by a client without a token: known, not proved.
        assert_eq!(
            known.check("Host:7400", &a, Pin::Key).unwrap(),
            Verdict::Added
        );
        assert_eq!(known.check("host:7400", &a, Pin::No).unwrap(), unproved);
        // Then it proves a token: marked.
        assert_eq!(known.check("host:7400", &a, Pin::Proved).unwrap(), proved);
        assert_eq!(known.check("host:7400", &a, Pin::No).unwrap(), proved);
        assert_eq!(
            known.check("other:7400", &b, Pin::Proved).unwrap(),
            Verdict::Added
        );
        // A second process sees the file, not this one's memory.
        let again = KnownServers::new(path.clone());
        assert_eq!(again.check("host:7400", &a, Pin::No).unwrap(), proved);
        assert_eq!(again.check("other:7400", &b, Pin::No).unwrap(), proved);
        assert_eq!(
            again.check("host:7400", &b, Pin::Proved).unwrap(),
            Verdict::Changed { pinned: a, line: 1 }
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        // A line of an older client (two words) is known, not proved.
        let old = dir.path().join("old");
        std::fs::write(&old, format!("host:7400 {a}\n")).unwrap();
        let known = KnownServers::new(old);
        assert_eq!(known.check("host:7400", &a, Pin::No).unwrap(), unproved);
    }
}
