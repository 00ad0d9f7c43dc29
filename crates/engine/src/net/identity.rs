//! A server's identity: its private key (Ed25519, PKCS#8 in a PEM file created with mode 0600
//! on first use) and the fingerprint clients pin, `SHA256:<base64>` of the public key as ssh
//! shows host keys. The key signs each TLS handshake (raw public keys, RFC 7250: no X.509
//! certificate, no certificate authority; trust is the pinned fingerprint).

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use sha2::Digest;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The SHA-256 of a server's public key (its DER SubjectPublicKeyInfo).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

const PREFIX: &str = "SHA256:";

impl Fingerprint {
    /// The fingerprint of a DER SubjectPublicKeyInfo.
    pub fn of_public_key(spki: &[u8]) -> Fingerprint {
        Fingerprint(sha2::Sha256::digest(spki).into())
    }

    /// Parses `SHA256:<base64>` (with or without base64 padding).
    pub fn parse(text: &str) -> Result<Fingerprint, String> {
        let bad = || {
            format!("'{text}' is not a server fingerprint (expected SHA256: and 43 base64 characters, as `sprat serve` prints)")
        };
        let b64 = text.trim().strip_prefix(PREFIX).ok_or_else(bad)?;
        let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(b64.trim_end_matches('='))
            .map_err(|_| bad())?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
        Ok(Fingerprint(bytes))
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(self.0);
        write!(f, "{PREFIX}{b64}")
    }
}

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Why a server's key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot read the server key '{path}': {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the server key '{path}': {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the server key '{path}' is readable by other users (mode {mode:o}): a key others can \
         read lets them pose as this server; run chmod 600 '{path}'"
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error("the server key '{path}' is not a usable private key: {why}")]
    Invalid { path: PathBuf, why: String },
    #[error(
        "no place for the server key: neither XDG_STATE_HOME nor HOME is set (use --key-file)"
    )]
    NoStateDir,
}

/// A server's private key, ready to sign handshakes, and its fingerprint.
#[derive(Clone)]
pub struct ServerIdentity {
    pub(crate) key: Arc<CertifiedKey>,
    pub fingerprint: Fingerprint,
}

impl std::fmt::Debug for ServerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServerIdentity({})", self.fingerprint)
    }
}

impl ServerIdentity {
    /// Where a server keeps its key without `--key-file`: `$XDG_STATE_HOME/sprat/server.key`,
    /// else `~/.local/state/sprat/server.key`.
    pub fn default_path() -> Result<PathBuf, IdentityError> {
        let base = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
                Some(home) => PathBuf::from(home).join(".local/state"),
                None => return Err(IdentityError::NoStateDir),
            },
        };
        Ok(base.join("sprat").join("server.key"))
    }

    /// Loads the key at `path`, creating a new one there (mode 0600, and its directory with
    /// mode 0700) if there is none. Two servers starting at once end with the same key.
    pub fn load_or_create(path: &Path) -> Result<ServerIdentity, IdentityError> {
        match std::fs::metadata(path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path)?,
            Err(source) => {
                return Err(IdentityError::Read {
                    path: path.into(),
                    source,
                })
            }
        }
        load(path)
    }

    /// A new key kept in memory only (for a server inside a test or a benchmark).
    pub fn ephemeral() -> Result<ServerIdentity, IdentityError> {
        let pkcs8 = generate().map_err(|source| IdentityError::Create {
            path: "(memory)".into(),
            source,
        })?;
        let der = PrivateKeyDer::Pkcs8(pkcs8.into());
        from_der(der).map_err(|why| IdentityError::Invalid {
            path: "(memory)".into(),
            why,
        })
    }
}

/// A new Ed25519 key, PKCS#8-encoded.
fn generate() -> std::io::Result<Vec<u8>> {
    let rng = ring::rand::SystemRandom::new();
    ring::signature::Ed25519KeyPair::generate_pkcs8(&rng)
        .map(|doc| doc.as_ref().to_vec())
        .map_err(|_| std::io::Error::other("no randomness for a new key"))
}

fn from_der(der: PrivateKeyDer<'static>) -> Result<ServerIdentity, String> {
    let signer = super::tls::provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| e.to_string())?;
    let spki = signer
        .public_key()
        .ok_or_else(|| "its public key cannot be derived".to_string())?;
    let fingerprint = Fingerprint::of_public_key(spki.as_ref());
    let raw = CertificateDer::from(spki.as_ref().to_vec());
    Ok(ServerIdentity {
        key: Arc::new(CertifiedKey::new(vec![raw], signer)),
        fingerprint,
    })
}

fn load(path: &Path) -> Result<ServerIdentity, IdentityError> {
    let read_err = |source| IdentityError::Read {
        path: path.into(),
        source,
    };
    let mode = std::fs::metadata(path)
        .map_err(read_err)?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(IdentityError::Exposed {
            path: path.into(),
            mode: mode & 0o7777,
        });
    }
    let pem = std::fs::read(path).map_err(read_err)?;
    let invalid = |why: String| IdentityError::Invalid {
        path: path.into(),
        why,
    };
    let der = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| invalid(e.to_string()))?;
    from_der(der).map_err(invalid)
}

/// Writes a new Ed25519 key to `path` atomically: a private temporary file, then a hard link
/// to the final name (which fails, harmlessly, if another process made one meanwhile).
fn create(path: &Path) -> Result<(), IdentityError> {
    let err = |source| IdentityError::Create {
        path: path.into(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(err)?;
    }
    let pkcs8 = generate().map_err(err)?;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&pkcs8);
    let mut pem = String::from("-----BEGIN PRIVATE KEY-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END PRIVATE KEY-----\n");
    let tmp = path.with_extension(format!("new.{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(pem.as_bytes())?;
        f.sync_all()?;
        match std::fs::hard_link(&tmp, path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    written.map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_print_and_parse_like_ssh() {
        let f = Fingerprint::of_public_key(b"key");
        let text = f.to_string();
        assert!(
            text.starts_with("SHA256:") && text.len() == 7 + 43,
            "{text}"
        );
        assert_eq!(Fingerprint::parse(&text).unwrap(), f);
        assert_eq!(Fingerprint::parse(&format!("{text}=")).unwrap(), f);
        assert!(Fingerprint::parse("SHA256:abc").is_err());
        assert!(Fingerprint::parse(&text[7..]).is_err());
    }

    #[test]
    fn a_key_is_created_private_and_loads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/sprat/server.key");
        let a = ServerIdentity::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = ServerIdentity::load_or_create(&path).unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = ServerIdentity::load_or_create(&path)
            .unwrap_err()
            .to_string();
        assert!(e.contains("chmod 600"), "{e}");
    }
}
