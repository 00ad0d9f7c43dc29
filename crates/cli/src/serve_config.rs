//! `sprat serve --config FILE`: the TOML file that declares a server's named exports (each a
//! name, a root, its tokens and whether it is read-only) and the server-wide settings that are
//! otherwise flags (`listen`, `max_connections`, `key_file`). Read and checked here, at the binary's edge,
//! into the engine's [`ExportSpec`]s; every mistake is one line naming the file, the export
//! and the key. The format is shown by `sprat serve --help` (`args::SERVE_CONFIG_HELP`).
//!
//! Not here: what exports mean to the server (`sprat_engine`'s `exports` module).

use serde::Deserialize;
use sprat_engine::{check_export_name, ExportSpec};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// A configuration as read and checked.
#[derive(Debug)]
pub struct ServeConfig {
    pub listen: Option<SocketAddr>,
    pub max_connections: Option<usize>,
    /// The server's TLS key (as `--key-file`), relative to the file's directory.
    pub key_file: Option<PathBuf>,
    pub exports: Vec<ExportSpec>,
}

/// A mistake in a config file (this server's, or a client's `config.toml`), in one line:
/// `config 'FILE': [export 'NAME': ][key 'KEY': ]what`.
#[derive(Debug, thiserror::Error)]
#[error("config '{}': {what}", file.display())]
pub struct ConfigError {
    pub(crate) file: PathBuf,
    pub(crate) what: String,
}

/// The file's top level.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    listen: Option<String>,
    max_connections: Option<usize>,
    key_file: Option<PathBuf>,
    /// Each `[[export]]` table, read on its own so that its mistakes name it.
    #[serde(default)]
    export: Vec<toml::Table>,
}

/// One `[[export]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExport {
    name: String,
    root: PathBuf,
    #[serde(default)]
    tokens: Vec<String>,
    #[serde(default)]
    token_files: Vec<PathBuf>,
    #[serde(default)]
    read_only: bool,
    /// Apply the owners clients push (a root server, without --no-owners).
    #[serde(default = "yes")]
    owners: bool,
}

fn yes() -> bool {
    true
}

/// A serde error of a table in one line, in the file's words (keys, not fields): toml says
/// which key on a line of its own.
pub(crate) fn one_line(e: &toml::de::Error) -> String {
    e.to_string()
        .trim_end()
        .replace("\nin ", ", in key ")
        .replace("unknown field", "unknown key")
        .replace("missing field", "missing key")
}

/// Reads `file` as TOML; a syntax error names its line.
pub(crate) fn read_table(file: &Path) -> Result<toml::Table, ConfigError> {
    let fail = |what: String| ConfigError {
        file: file.to_path_buf(),
        what,
    };
    let text = std::fs::read_to_string(file).map_err(|e| fail(format!("cannot read it: {e}")))?;
    toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map_or(0, |s| text[..s.start].lines().count().max(1));
        fail(format!("line {line}: {}", e.message()))
    })
}

/// Reads and checks `file`.
pub fn read(file: &Path) -> Result<ServeConfig, ConfigError> {
    let fail = |what: String| ConfigError {
        file: file.to_path_buf(),
        what,
    };
    // Syntax first (with the line), then the keys of the top level.
    let table = read_table(file)?;
    let raw = RawFile::deserialize(toml::Value::Table(table)).map_err(|e| fail(one_line(&e)))?;
    let listen = raw
        .listen
        .map(|l| {
            l.parse::<SocketAddr>()
                .map_err(|e| fail(format!("key 'listen': '{l}': {e} (expected HOST:PORT)")))
        })
        .transpose()?;
    if raw.export.is_empty() {
        return Err(fail(
            "no [[export]] table: declare at least one export (name, root, tokens)".into(),
        ));
    }
    // Relative paths in the file are relative to its directory.
    let base = file.parent().unwrap_or(Path::new("."));
    let mut exports: Vec<ExportSpec> = Vec::with_capacity(raw.export.len());
    // A token too short to be a key, reported once every other mistake has been looked for.
    let mut too_short = None;
    let mut inline_tokens = false;
    for (i, table) in raw.export.into_iter().enumerate() {
        // Named by its name if it has one, else by its place in the file.
        let label = match table.get("name").and_then(|n| n.as_str()) {
            Some(name) => format!("export '{name}'"),
            None => format!("export #{}", i + 1),
        };
        let fail_in = |what: String| fail(format!("{label}: {what}"));
        let raw =
            RawExport::deserialize(toml::Value::Table(table)).map_err(|e| fail_in(one_line(&e)))?;
        check_export_name(&raw.name)
            .map_err(|why| fail_in(format!("key 'name': the name {why}")))?;
        if exports.iter().any(|e| e.name == raw.name) {
            return Err(fail_in(
                "key 'name': another export has this name already".into(),
            ));
        }
        let root = base.join(&raw.root);
        match std::fs::metadata(&root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(fail_in(format!(
                    "key 'root': '{}' is not a directory",
                    root.display()
                )))
            }
            Err(e) => return Err(fail_in(format!("key 'root': '{}': {e}", root.display()))),
        }
        let mut tokens = Vec::new();
        for token in &raw.tokens {
            let token = token.trim();
            if token.is_empty() {
                return Err(fail_in("key 'tokens': an empty token".into()));
            }
            if token.len() < crate::MIN_TOKEN_LEN && too_short.is_none() {
                too_short = Some(fail_in(format!(
                    "key 'tokens': a token of {} bytes: a server's token must have at least {}",
                    token.len(),
                    crate::MIN_TOKEN_LEN
                )));
            }
            inline_tokens = true;
            tokens.push(token.as_bytes().to_vec());
        }
        for token_file in &raw.token_files {
            let path = base.join(token_file);
            let bytes = std::fs::read(&path).map_err(|e| {
                fail_in(format!(
                    "key 'token_files': cannot read '{}': {e}",
                    path.display()
                ))
            })?;
            let token = bytes.trim_ascii();
            if token.is_empty() {
                return Err(fail_in(format!(
                    "key 'token_files': '{}' is empty",
                    path.display()
                )));
            }
            if token.len() < crate::MIN_TOKEN_LEN && too_short.is_none() {
                too_short = Some(fail_in(format!(
                    "key 'token_files': '{}' holds a token of {} bytes: a server's token must \
                     have at least {}",
                    path.display(),
                    token.len(),
                    crate::MIN_TOKEN_LEN
                )));
            }
            crate::warn_if_readable_by_others(&path, "token file");
            tokens.push(token.to_vec());
        }
        if tokens.is_empty() {
            return Err(fail_in(
                "no token: give 'tokens' or 'token_files' (an export is never open to anyone)"
                    .into(),
            ));
        }
        exports.push(ExportSpec {
            name: raw.name,
            root,
            read_only: raw.read_only,
            owners: raw.owners,
            tokens,
        });
    }
    if let Some(e) = too_short {
        return Err(e);
    }
    if inline_tokens {
        crate::warn_if_readable_by_others(file, "config file");
    }
    if raw.max_connections == Some(0) {
        return Err(fail(
            "key 'max_connections': 0 would refuse every client (at least 1)".into(),
        ));
    }
    // A read-only export inside a writable one (the same tree for two groups of tokens, say)
    // can be written through the writable one: said at start, not refused.
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    for ro in exports.iter().filter(|e| e.read_only) {
        let inside = exports
            .iter()
            .filter(|w| !w.read_only)
            .find(|w| real(&ro.root).starts_with(real(&w.root)));
        if let Some(w) = inside {
            eprintln!(
                "sprat serve: note: export '{}' is read-only, but its files lie inside the \
                 writable export '{}' ({}): whoever holds a token of '{}' can change them",
                ro.name,
                w.name,
                w.root.display(),
                w.name
            );
        }
    }
    Ok(ServeConfig {
        listen,
        max_connections: raw.max_connections,
        key_file: raw.key_file.map(|k| base.join(k)),
        exports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `text` as a config file in a fresh directory (with a directory `data` and a
    /// token file `t`), and reads it.
    fn read_text(text: &str) -> (tempfile::TempDir, Result<ServeConfig, ConfigError>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        std::fs::write(dir.path().join("t"), "a-file-token-0123\n").unwrap();
        std::fs::write(dir.path().join("short"), "short\n").unwrap();
        let file = dir.path().join("sprat.toml");
        std::fs::write(&file, text).unwrap();
        let read = read(&file);
        (dir, read)
    }

    #[test]
    fn a_good_file_gives_its_exports_with_paths_relative_to_it() {
        let (dir, read) = read_text(
            "listen = \"127.0.0.1:0\"\nmax_connections = 8\nkey_file = \"k\"\n\
             [[export]]\nname = \"a\"\nroot = \"data\"\ntokens = [\" an-inline-token-0123 \"]\n\
             token_files = [\"t\"]\n\
             [[export]]\nname = \"b\"\nroot = \"data\"\ntokens = [\"token-of-export-b\"]\nread_only = true\n",
        );
        let c = read.unwrap();
        assert_eq!(c.listen, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(c.max_connections, Some(8));
        assert_eq!(c.key_file, Some(dir.path().join("k")));
        assert_eq!(c.exports.len(), 2);
        assert_eq!(c.exports[0].root, dir.path().join("data"));
        assert_eq!(
            c.exports[0].tokens,
            [
                b"an-inline-token-0123".to_vec(),
                b"a-file-token-0123".to_vec()
            ]
        );
        assert!(!c.exports[0].read_only && c.exports[1].read_only);
    }

    #[test]
    fn a_limit_of_zero_connections_is_refused() {
        let text = "max_connections = 0\n[[export]]\nname = \"a\"\nroot = \"data\"\n\
                    token_files = [\"t\"]\n";
        let (_dir, read) = read_text(text);
        let line = read.unwrap_err().to_string();
        assert!(line.contains("key 'max_connections'"), "{line}");
    }

    #[test]
    fn each_mistake_is_one_line_naming_the_export_and_the_key() {
        let export = |body: &str| format!("[[export]]\nname = \"a\"\n{body}\n");
        let cases = [
            (
                export("root = \"data\"\ntokens = [\"t\"]\nroots = 1"),
                "`roots`",
            ),
            (export("tokens = [\"t\"]"), "`root`"),
            (export("root = 5\ntokens = [\"t\"]"), "key `root`"),
            (export("root = \"nowhere\"\ntokens = [\"t\"]"), "key 'root'"),
            (export("root = \"t\"\ntokens = [\"t\"]"), "not a directory"),
            (export("root = \"data\""), "no token"),
            (export("root = \"data\"\ntokens = [\" \"]"), "key 'tokens'"),
            (
                export("root = \"data\"\ntoken_files = [\"missing\"]"),
                "key 'token_files'",
            ),
            ("listen = \"nohost\"\n".into(), "key 'listen'"),
            ("lissen = 1\n".into(), "`lissen`"),
            ("[[export]\n".into(), "line 1"),
            ("".into(), "no [[export]]"),
        ];
        for (text, names) in cases {
            let (_dir, read) = read_text(&text);
            let line = read.unwrap_err().to_string();
            assert!(!line.contains('\n'), "{line:?}");
            assert!(line.starts_with("config '"), "{line}");
            assert!(line.contains(names), "{line:?} does not name {names}");
            if text.contains("name = \"a\"") {
                assert!(line.contains("export 'a'"), "{line}");
            }
        }
    }

    #[test]
    fn names_must_be_one_component_and_unique() {
        for name in ["a/b", "..", "."] {
            let (_dir, read) = read_text(&format!(
                "[[export]]\nname = \"{name}\"\nroot = \"data\"\ntokens = [\"t\"]\n"
            ));
            let line = read.unwrap_err().to_string();
            assert!(line.contains("key 'name'"), "{line}");
        }
        let one = "[[export]]\nname = \"a\"\nroot = \"data\"\ntokens = [\"t\"]\n";
        let (_dir, read) = read_text(&format!("{one}{one}"));
        assert!(read.unwrap_err().to_string().contains("another export"));
    }

    #[test]
    fn a_token_under_16_bytes_is_refused_naming_where_it_is() {
        let export = |body: &str| format!("[[export]]\nname = \"a\"\nroot = \"data\"\n{body}\n");
        let (_dir, read) = read_text(&export("tokens = [\"fifteen-bytes!!\"]"));
        let line = read.unwrap_err().to_string();
        assert!(
            line.contains("export 'a'") && line.contains("key 'tokens'"),
            "{line}"
        );
        assert!(
            line.contains("15 bytes") && line.contains("at least 16"),
            "{line}"
        );
        let (dir, read) = read_text(&export("token_files = [\"short\"]"));
        let _ = dir;
        let line = read.unwrap_err().to_string();
        assert!(
            line.contains("key 'token_files'") && line.contains("short"),
            "{line}"
        );
        let (_dir, read) = read_text(&export("tokens = [\"sixteen-bytes!!!\"]"));
        assert!(read.is_ok());
    }
}
