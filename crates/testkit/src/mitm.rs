//! A machine in the middle, for tests of sprat's encryption: it accepts a client's TLS
//! connection with a key of its own, opens its own TLS connection to the real server (accepting
//! whatever key that presents), and passes the decrypted bytes along both ways. A client that
//! trusts the MITM's key would talk to the server through it; sprat's pinning and its token
//! proofs bound to each TLS session are what must stop it.
//!
//! One thread per connection pumps both TLS sessions over non-blocking sockets. Loopback only.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// A running MITM; stops accepting when dropped.
pub struct Mitm {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Plaintext bytes it passed between clients and the server, both ways.
    relayed: Arc<AtomicU64>,
    /// The most plaintext bytes one client connection sent through it.
    most_from_one_client: Arc<AtomicU64>,
}

/// The MITM's verifier of the real server: accepts any key (it is the attacker).
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
    fn requires_raw_public_keys(&self) -> bool {
        true
    }
}

impl Mitm {
    /// Listens on 127.0.0.1 and forwards every connection to `target` through two TLS sessions.
    pub fn start(target: SocketAddr) -> Mitm {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&rng).expect("a MITM key");
        let signer = provider
            .key_provider
            .load_private_key(PrivateKeyDer::Pkcs8(pkcs8.as_ref().to_vec().into()))
            .expect("the MITM key loads");
        let spki = signer.public_key().expect("a public key").as_ref().to_vec();
        let certified = rustls::sign::CertifiedKey::new(vec![CertificateDer::from(spki)], signer);
        let server_config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(
                rustls::server::AlwaysResolvesServerRawPublicKeys::new(Arc::new(certified)),
            ));
        let client_config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
            .with_no_client_auth();
        let (server_config, client_config) = (Arc::new(server_config), Arc::new(client_config));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the MITM");
        let addr = listener.local_addr().expect("its address");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let stop = Arc::new(AtomicBool::new(false));
        let relayed = Arc::new(AtomicU64::new(0));
        let most_from_one_client = Arc::new(AtomicU64::new(0));
        let (stop2, relayed2, most2) =
            (stop.clone(), relayed.clone(), most_from_one_client.clone());
        std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let (sc, cc, stop) = (server_config.clone(), client_config.clone(), stop2.clone());
                let counts = Counts {
                    relayed: relayed2.clone(),
                    most_from_one_client: most2.clone(),
                    from_this_client: AtomicU64::new(0),
                };
                std::thread::spawn(move || {
                    let _ = pump(client, target, sc, cc, &stop, &counts);
                });
            }
        });
        Mitm {
            addr,
            stop,
            relayed,
            most_from_one_client,
        }
    }

    /// `sprat://127.0.0.1:PORT/path` through the MITM.
    pub fn url(&self, path: &str) -> String {
        format!("sprat://{}/{}", self.addr, path)
    }

    /// Decrypted bytes it passed between clients and the server, both ways.
    pub fn relayed(&self) -> u64 {
        self.relayed.load(Ordering::Relaxed)
    }

    /// The most decrypted bytes one client connection sent through it to the server.
    pub fn most_from_one_client(&self) -> u64 {
        self.most_from_one_client.load(Ordering::Relaxed)
    }
}

impl Drop for Mitm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What one connection's pump counts.
struct Counts {
    relayed: Arc<AtomicU64>,
    most_from_one_client: Arc<AtomicU64>,
    from_this_client: AtomicU64,
}

/// Moves bytes between the client's TLS session (the MITM as server) and the server's (the
/// MITM as client) until either side closes.
fn pump(
    client: TcpStream,
    target: SocketAddr,
    server_config: Arc<rustls::ServerConfig>,
    client_config: Arc<rustls::ClientConfig>,
    stop: &AtomicBool,
    counts: &Counts,
) -> std::io::Result<()> {
    let server = TcpStream::connect(target)?;
    client.set_nonblocking(true)?;
    server.set_nonblocking(true)?;
    let mut facing_client: rustls::Connection = rustls::ServerConnection::new(server_config)
        .map_err(std::io::Error::other)?
        .into();
    let name = ServerName::try_from("sprat").map_err(std::io::Error::other)?;
    let mut facing_server: rustls::Connection = rustls::ClientConnection::new(client_config, name)
        .map_err(std::io::Error::other)?
        .into();
    let mut buf = vec![0u8; 64 << 10];
    while !stop.load(Ordering::Relaxed) {
        let a = step(
            &client,
            &mut facing_client,
            &mut facing_server,
            &mut buf,
            &|n| {
                counts.relayed.fetch_add(n, Ordering::Relaxed);
                let sent = counts.from_this_client.fetch_add(n, Ordering::Relaxed) + n;
                counts
                    .most_from_one_client
                    .fetch_max(sent, Ordering::Relaxed);
            },
        );
        let b = step(
            &server,
            &mut facing_server,
            &mut facing_client,
            &mut buf,
            &|n| {
                counts.relayed.fetch_add(n, Ordering::Relaxed);
            },
        );
        // What either side said before it closed still reaches the other.
        flush(&client, &mut facing_client)?;
        flush(&server, &mut facing_server)?;
        match (a, b) {
            (Ok(false), Ok(false)) => std::thread::sleep(Duration::from_millis(1)),
            (Ok(_), Ok(_)) => {}
            (Err(e), _) | (_, Err(e)) => {
                std::thread::sleep(Duration::from_millis(200));
                let _ = flush(&client, &mut facing_client);
                let _ = flush(&server, &mut facing_server);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Reads what arrived on `sock` into `from`, and writes its plaintext into `to`, telling
/// `count` how much. Returns whether anything moved; an error once the socket is closed.
fn step(
    mut sock: &TcpStream,
    from: &mut rustls::Connection,
    to: &mut rustls::Connection,
    buf: &mut [u8],
    count: &dyn Fn(u64),
) -> std::io::Result<bool> {
    let moved = match from.read_tls(&mut sock) {
        Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(e) => return Err(e),
    };
    from.process_new_packets().map_err(std::io::Error::other)?;
    loop {
        match from.reader().read(buf) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                count(n as u64);
                to.writer().write_all(&buf[..n])?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(moved)
}

fn flush(mut sock: &TcpStream, conn: &mut rustls::Connection) -> std::io::Result<()> {
    while conn.wants_write() {
        match conn.write_tls(&mut sock) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
