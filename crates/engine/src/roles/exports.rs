//! What a server exports, and which of it each connection may reach.
//!
//! A server started with `--root` exports one tree, the default export: a client's path is
//! relative to its root, as it always was. One started with `--config` exports named trees:
//! the first component of a client's path names the export and the rest is relative to that
//! export's root; the empty path is the server's root, which holds only the exports. Each
//! token reaches the exports that list it. A connection authenticated with a token may name
//! only those (any other name is refused the same way whether or not such an export exists),
//! and one authenticated with a one-time ticket only the export the ticket was issued in.
//! Below an export's root, paths are confined by the store (`Root`: `openat2` with
//! `RESOLVE_BENEATH`), the same for every export.
//!
//! Not here: reading the configuration file (the binary turns it into [`ExportSpec`]s), the
//! handshake (`sprat_proto::auth` says which token a client proved), and what each request
//! does with the place it names (`server.rs`, `requests.rs`).

use crate::error::TransferError;
use sprat_proto::auth::{Credential, ServerKeys, TokenKey};
use sprat_proto::ErrorCode;
use sprat_store::{display_path, Root};
use std::path::PathBuf;

/// One named export, as configured.
#[derive(Debug, Clone)]
pub struct ExportSpec {
    /// The first component of the paths that name it (see [`check_export_name`]).
    pub name: String,
    /// The directory exported; clients cannot reach outside it.
    pub root: PathBuf,
    /// Refuse every write into it.
    pub read_only: bool,
    /// Apply the owners and groups clients push (when the server runs as root, without
    /// `--no-owners`); false: what is pushed is owned by the server's user.
    pub owners: bool,
    /// The tokens that reach it, as given (without surrounding white space, none empty). One
    /// token may be given to several exports: it then reaches each of them.
    pub tokens: Vec<Vec<u8>>,
}

/// What a server exports (see the module's documentation).
#[derive(Debug)]
pub enum ExportsConfig {
    /// `--root`: one tree and no export name in paths; `key` is `None` with `--no-auth`.
    Default {
        root: PathBuf,
        read_only: bool,
        key: Option<TokenKey>,
    },
    /// `--config`: one or more named trees, each with its own tokens.
    Named(Vec<ExportSpec>),
}

/// Why `name` cannot name an export, if it cannot: a name is one path component (not empty,
/// no `/`, not `.` or `..`, no NUL or other control character, at most 255 bytes).
pub fn check_export_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("is empty")
    } else if name.contains('/') {
        Err("contains '/' (a name is one path component)")
    } else if name == "." || name == ".." {
        Err("is '.' or '..'")
    } else if name.chars().any(char::is_control) {
        Err("contains a control character")
    } else if name.len() > sprat_proto::path::MAX_NAME {
        Err("is longer than 255 bytes")
    } else {
        Ok(())
    }
}

/// One export of a running server.
#[derive(Debug)]
pub(crate) struct Export {
    /// Empty for the default export.
    pub name: String,
    pub root: Root,
    pub read_only: bool,
    /// Whether the owners clients push are applied (when the server runs as root).
    pub owners: bool,
}

impl Export {
    /// Its root directory, in words.
    pub fn describe(&self) -> String {
        if self.name.is_empty() {
            "the server's root directory".into()
        } else {
            format!("the root directory of export '{}'", self.name)
        }
    }

    /// The refusal of a write (`what`, e.g. "write") to `rel` below this export's root, if
    /// the export is read-only.
    pub fn writable(&self, what: &str, rel: &[u8]) -> Result<(), (ErrorCode, String)> {
        if !self.read_only {
            return Ok(());
        }
        let whose = if self.name.is_empty() {
            "the server is read-only".to_string()
        } else {
            format!("export '{}' is read-only", self.name)
        };
        Err((
            ErrorCode::ReadOnly,
            format!("{whose}: refusing to {what} '{}'", display_path(rel)),
        ))
    }
}

/// The exports a connection may name: indexes into [`Exports`]'s list.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reach(Vec<usize>);

impl Reach {
    /// Only the export at `index` (a ticket's).
    pub fn one(index: usize) -> Reach {
        Reach(vec![index])
    }

    fn allows(&self, index: usize) -> bool {
        self.0.contains(&index)
    }
}

/// Where a client's path lies.
#[derive(Debug)]
pub(crate) enum Place<'a> {
    /// The server's root above its named exports: the empty path with `--config`.
    ServerRoot,
    /// `rel` below the root of the export at `index`.
    In {
        export: &'a Export,
        index: usize,
        rel: Vec<u8>,
    },
}

/// The exports of a running server, its tokens and which exports each reaches.
pub(crate) struct Exports {
    /// Named exports (`--config`), or the default one (`--root`).
    named: bool,
    list: Vec<Export>,
    /// The tokens the handshake accepts.
    pub keys: ServerKeys,
    /// The exports each token reaches, by the token's index in `keys`.
    reach: Vec<Reach>,
}

impl Exports {
    /// Opens every export's root.
    pub fn open(config: ExportsConfig) -> Result<Exports, TransferError> {
        match config {
            ExportsConfig::Default {
                root,
                read_only,
                key,
            } => Ok(Exports {
                named: false,
                list: vec![Export {
                    name: String::new(),
                    // A root that is missing, not a directory or not readable is bad input
                    // (exit 2), as for a named export.
                    root: Root::open_export(&root)
                        .map_err(|e| TransferError::Usage(e.to_string()))?,
                    read_only,
                    owners: true,
                }],
                keys: key.into(),
                reach: vec![Reach::one(0)],
            }),
            ExportsConfig::Named(specs) => Exports::open_named(specs),
        }
    }

    fn open_named(specs: Vec<ExportSpec>) -> Result<Exports, TransferError> {
        let usage =
            |name: &str, why: String| TransferError::Usage(format!("export '{name}': {why}"));
        if specs.is_empty() {
            return Err(TransferError::Usage("no export configured".into()));
        }
        // Each distinct token once, with the exports that list it.
        let mut tokens: Vec<(&[u8], Reach)> = Vec::new();
        let mut list: Vec<Export> = Vec::with_capacity(specs.len());
        for (index, spec) in specs.iter().enumerate() {
            check_export_name(&spec.name)
                .map_err(|why| usage(&spec.name, format!("the name {why}")))?;
            if list.iter().any(|e| e.name == spec.name) {
                return Err(usage(&spec.name, "configured twice".into()));
            }
            if spec.tokens.is_empty() || spec.tokens.iter().any(|t| t.is_empty()) {
                return Err(usage(&spec.name, "needs tokens, none empty".into()));
            }
            for token in &spec.tokens {
                match tokens.iter_mut().find(|(t, _)| t == token) {
                    Some((_, reach)) if reach.allows(index) => {}
                    Some((_, reach)) => reach.0.push(index),
                    None => tokens.push((token, Reach::one(index))),
                }
            }
            let root =
                Root::open_export(&spec.root).map_err(|e| usage(&spec.name, e.to_string()))?;
            list.push(Export {
                name: spec.name.clone(),
                root,
                read_only: spec.read_only,
                owners: spec.owners,
            });
        }
        let (keys, reach) = tokens
            .into_iter()
            .map(|(t, reach)| (TokenKey::from_token(t), reach))
            .unzip();
        Ok(Exports {
            named: true,
            list,
            keys: ServerKeys::Tokens(keys),
            reach,
        })
    }

    /// The exports a connection that proved `credential` may name (a ticket's: see
    /// [`Reach::one`]).
    pub fn reach_of(&self, credential: Credential) -> Reach {
        match credential {
            Credential::Open => Reach((0..self.list.len()).collect()),
            Credential::Token(i) => self.reach.get(i).cloned().unwrap_or_default(),
            Credential::Ticket(_) => Reach::default(),
        }
    }

    /// The exports `reach` allows, in the configuration's order, by name.
    pub fn reachable<'a>(&'a self, reach: &'a Reach) -> impl Iterator<Item = &'a Export> + 'a {
        self.list
            .iter()
            .enumerate()
            .filter(|(i, _)| reach.allows(*i))
            .map(|(_, e)| e)
    }

    /// Where the client's `path` lies, if `reach` allows it; an export name it does not allow
    /// is refused as an authentication failure naming the export.
    pub fn place(&self, reach: &Reach, path: &[u8]) -> Result<Place<'_>, (ErrorCode, String)> {
        if !self.named {
            return match self.list.first() {
                Some(export) if reach.allows(0) => Ok(Place::In {
                    export,
                    index: 0,
                    rel: path.to_vec(),
                }),
                _ => Err((ErrorCode::AuthFailed, "no access to this server".into())),
            };
        }
        if path.is_empty() {
            return Ok(Place::ServerRoot);
        }
        let (name, rel) = match path.iter().position(|&b| b == b'/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (path, &[][..]),
        };
        let found = self
            .list
            .iter()
            .enumerate()
            .find(|(i, e)| reach.allows(*i) && e.name.as_bytes() == name);
        match found {
            Some((index, export)) => Ok(Place::In {
                export,
                index,
                rel: rel.to_vec(),
            }),
            // The same answer for an export of another token and for none at all: a token
            // does not learn the names of exports it cannot reach.
            None => Err((
                ErrorCode::AuthFailed,
                format!(
                    "export '{}': this token does not reach it (no such export, or not one of \
                     this token's; list the server's root to see yours)",
                    String::from_utf8_lossy(name)
                ),
            )),
        }
    }

    /// Where a single file's destination `path`, `DST/NAME`, left to this server
    /// (`or_parent`, see `sprat_proto::Operation::Push`) is: `path` itself if DST is a
    /// directory (not a symlink to one, as `Stat` describes it), else DST. Returns that path
    /// and whether it is DST. `what` the request says, for a refusal (DST may not be the
    /// server's root).
    pub fn path_or_parent(
        &self,
        reach: &Reach,
        path: Vec<u8>,
        what: &str,
    ) -> Result<(Vec<u8>, bool), (ErrorCode, String)> {
        let parent = sprat_store::split_parent(&path).0.to_vec();
        if parent.is_empty() {
            return Err((
                ErrorCode::BadRequest,
                format!("cannot {what} a file's place in the server's root by its parent"),
            ));
        }
        let (export, _, rel) = self.place_in_export(reach, &parent, what)?;
        let is_dir = sprat_store::stat_path(&export.root, &rel)
            .is_ok_and(|e| e.kind == sprat_store::EntryType::Dir);
        Ok(match is_dir {
            true => (path, false),
            false => (parent, true),
        })
    }

    /// Where `path` lies, which must be in an export (`what`, e.g. "push to", says what was
    /// asked of the server's root otherwise).
    pub fn place_in_export(
        &self,
        reach: &Reach,
        path: &[u8],
        what: &str,
    ) -> Result<(&Export, usize, Vec<u8>), (ErrorCode, String)> {
        match self.place(reach, path)? {
            Place::In { export, index, rel } => Ok((export, index, rel)),
            Place::ServerRoot => Err((
                ErrorCode::BadRequest,
                format!(
                    "cannot {what} the server's root: it holds only exports; name one \
                     (sprat://HOST:PORT/EXPORT/PATH)"
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, root: &std::path::Path, tokens: &[&str]) -> ExportSpec {
        ExportSpec {
            name: name.into(),
            root: root.to_path_buf(),
            read_only: false,
            owners: true,
            tokens: tokens.iter().map(|t| t.as_bytes().to_vec()).collect(),
        }
    }

    fn names<'a>(exports: &'a Exports, reach: &'a Reach) -> Vec<&'a str> {
        exports.reachable(reach).map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn a_token_reaches_the_exports_that_list_it_and_names_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let exports = Exports::open(ExportsConfig::Named(vec![
            spec("a", dir.path(), &["ta", "shared"]),
            spec("b", dir.path(), &["tb", "shared"]),
        ]))
        .unwrap();
        // Three distinct tokens: "shared" once, reaching both.
        let ServerKeys::Tokens(keys) = &exports.keys else {
            panic!("no tokens")
        };
        assert_eq!(keys.len(), 3);
        let (ta, shared, tb) = (
            exports.reach_of(Credential::Token(0)),
            exports.reach_of(Credential::Token(1)),
            exports.reach_of(Credential::Token(2)),
        );
        assert_eq!(names(&exports, &ta), ["a"]);
        assert_eq!(names(&exports, &tb), ["b"]);
        assert_eq!(names(&exports, &shared), ["a", "b"]);
        match exports.place(&ta, b"a/x/y").unwrap() {
            Place::In { index, rel, .. } => assert_eq!((index, rel.as_slice()), (0, &b"x/y"[..])),
            other => panic!("{other:?}"),
        }
        assert!(matches!(exports.place(&ta, b""), Ok(Place::ServerRoot)));
        // Another token's export and a missing one are refused alike, by name.
        for path in [&b"b/x"[..], b"b", b"nope/x"] {
            let (code, text) = exports.place(&ta, path).unwrap_err();
            assert_eq!(code, ErrorCode::AuthFailed);
            let name = String::from_utf8_lossy(path.split(|&b| b == b'/').next().unwrap());
            assert!(text.contains(&format!("export '{name}'")), "{text}");
        }
        assert!(exports.place_in_export(&ta, b"", "push to").is_err());
        // A ticket reaches nothing by itself.
        assert!(exports
            .place(&exports.reach_of(Credential::Ticket(0)), b"a")
            .is_err());
    }

    #[test]
    fn the_default_export_takes_paths_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let exports = Exports::open(ExportsConfig::Default {
            root: dir.path().into(),
            read_only: false,
            key: None,
        })
        .unwrap();
        let reach = exports.reach_of(Credential::Open);
        match exports.place(&reach, b"").unwrap() {
            Place::In { rel, .. } => assert!(rel.is_empty()),
            other => panic!("{other:?}"),
        }
        match exports.place(&reach, b"a/b").unwrap() {
            Place::In { rel, .. } => assert_eq!(rel, b"a/b"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_names_and_duplicates_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "a/b", "..", ".", "a\nb"] {
            assert!(check_export_name(bad).is_err(), "{bad:?}");
            let opened = Exports::open(ExportsConfig::Named(vec![spec(bad, dir.path(), &["t"])]));
            assert!(opened.is_err(), "{bad:?}");
        }
        assert!(check_export_name("runs-2026.v1").is_ok());
        let twice = Exports::open(ExportsConfig::Named(vec![
            spec("a", dir.path(), &["t"]),
            spec("a", dir.path(), &["u"]),
        ]));
        assert!(twice.is_err());
        let tokenless = Exports::open(ExportsConfig::Named(vec![spec("a", dir.path(), &[])]));
        assert!(tokenless.is_err());
    }
}
