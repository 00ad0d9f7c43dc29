//! TLS 1.3 (rustls) under sprat's framed connections.
//!
//! A connection's reader and writer run on different threads, each with its own handle on the
//! socket (see `Conn::try_clone`), while a TLS connection is one state. So the state sits in a
//! mutex, the socket is non-blocking, and each side holds the lock only to move bytes through
//! the state: a side that must wait for the socket (nothing to read, no room to write) lets go
//! and waits in `poll`. Ciphertext is read from the socket in large pieces into an inbox (rustls
//! would read 4 KiB per system call) and fed to rustls from there.
//!
//! Servers present a raw public key (RFC 7250) instead of a certificate: a client trusts the key
//! by its fingerprint (see `identity`, `known_servers` and `trust`), as ssh trusts host keys.
//! Each side derives a 32-byte binding from the TLS session (an exporter, RFC 8446 7.5) that the
//! token handshake mixes into its proofs, so a proof made on one TLS session is worthless on
//! another: a machine in the middle that terminates TLS cannot relay the exchange.

use super::identity::{Fingerprint, ServerIdentity};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::io::{IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The label of the exporter both sides bind their token proofs to.
const BINDING_LABEL: &[u8] = b"EXPORTER-sprat-token-binding";
/// Ciphertext read from the socket per system call at most, once the handshake is done.
const INBOX: usize = 64 << 10;
/// The same during the handshake: a stranger's connection costs little memory until it has
/// proved it speaks TLS.
const HANDSHAKE_INBOX: usize = 4 << 10;
/// Ciphertext rustls may hold unsent before a writer waits for the socket.
const OUTBOX: usize = 256 << 10;

/// The cryptography in use: rustls's ring provider, TLS 1.3 suites only, AES-128-GCM first (the
/// fastest where the CPU has AES instructions), then ChaCha20-Poly1305 (the fastest where it
/// has not), then AES-256-GCM.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            use rustls::crypto::ring::cipher_suite as suite;
            let mut p = rustls::crypto::ring::default_provider();
            p.cipher_suites = vec![
                suite::TLS13_AES_128_GCM_SHA256,
                suite::TLS13_CHACHA20_POLY1305_SHA256,
                suite::TLS13_AES_256_GCM_SHA384,
            ];
            Arc::new(p)
        })
        .clone()
}

/// The server side's TLS settings.
#[derive(Clone)]
pub struct ServerTls {
    pub(crate) config: Arc<rustls::ServerConfig>,
    /// Whether clients may also connect without TLS (`sprat serve --no-encryption`).
    pub allow_plain: bool,
    pub fingerprint: Fingerprint,
}

impl ServerTls {
    pub fn new(identity: &ServerIdentity, allow_plain: bool) -> Result<ServerTls, rustls::Error> {
        let resolver = rustls::server::AlwaysResolvesServerRawPublicKeys::new(identity.key.clone());
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        // No session tickets: nothing arrives after the handshake but data (and key updates).
        config.send_tls13_tickets = 0;
        Ok(ServerTls {
            config: Arc::new(config),
            allow_plain,
            fingerprint: identity.fingerprint,
        })
    }
}

/// Accepts any raw public key whose TLS 1.3 signature checks out, and records its fingerprint:
/// whether that key is the right one is decided (against pins and the known-servers file)
/// once the handshake is done and before anything is sent on it.
#[derive(Debug)]
struct RecordingVerifier {
    seen: Mutex<Option<Fingerprint>>,
}

impl ServerCertVerifier for RecordingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *lock(&self.seen) = Some(Fingerprint::of_public_key(end_entity.as_ref()));
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::PeerIncompatible(
            rustls::PeerIncompatible::Tls12NotOffered,
        ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature_with_raw_key(
            message,
            &SubjectPublicKeyInfoDer::from(cert.as_ref()),
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        true
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Why a TLS handshake did not finish.
pub(crate) enum HandshakeError {
    /// The socket failed or timed out.
    Io(std::io::Error),
    /// The peer is not speaking TLS 1.3 as sprat does, or its proof failed.
    Tls(rustls::Error),
}

/// One TLS session over a TCP socket, shared by the handles of a `Conn`.
pub(crate) struct Tls {
    tcp: TcpStream,
    state: Mutex<State>,
    binding: [u8; 32],
    suite: String,
    /// The server's key (client side).
    pub(crate) server_key: Option<Fingerprint>,
    /// Server side: the time from its flight (after the client's hello) to the client's
    /// answer that ended the handshake, a round trip of the path (`None` on a client).
    pub(crate) handshake_rtt: Option<Duration>,
    /// The socket's send timeout in nanoseconds, as set before the handshake, 0 for none
    /// (see [`Tls::write_all`]).
    write_timeout_ns: AtomicU64,
}

struct State {
    conn: rustls::Connection,
    inbox: Vec<u8>,
    start: usize,
    end: usize,
    /// The socket reached end of stream (and rustls was told).
    eof: bool,
    /// Something came from the peer.
    heard: bool,
    /// When this side first sent something after that (a server's first flight).
    answered_at: Option<Instant>,
}

/// What one attempt to take in ciphertext did.
enum Intake {
    Fed,
    WouldBlock,
}

impl State {
    /// Moves ciphertext from the socket to rustls (one inbox read at most) and processes it.
    fn take_in(&mut self, tcp: &TcpStream, moved: &AtomicU64) -> std::io::Result<Intake> {
        if self.start == self.end && !self.eof {
            match (&mut &*tcp).read(&mut self.inbox) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    moved.fetch_add(n as u64, Ordering::Relaxed);
                    self.start = 0;
                    self.end = n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return Ok(Intake::WouldBlock)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(Intake::Fed),
                Err(e) => return Err(e),
            }
        }
        let mut pending = &self.inbox[self.start..self.end];
        let n = self.conn.read_tls(&mut pending)?;
        self.start += n;
        self.heard |= n > 0;
        if let Err(e) = self.conn.process_new_packets() {
            // rustls queued an alert saying why; send it if the socket takes it now.
            let _ = self.send_out(tcp, moved);
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
        }
        // A key update asks for one back: send it along now if the socket has room.
        if self.conn.wants_write() {
            self.send_out(tcp, moved)?;
        }
        Ok(Intake::Fed)
    }

    /// Writes queued ciphertext to the socket until it is all sent (true) or the socket is full.
    fn send_out(&mut self, tcp: &TcpStream, moved: &AtomicU64) -> std::io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut &*tcp) {
                Ok(n) => {
                    moved.fetch_add(n as u64, Ordering::Relaxed);
                    if self.heard && self.answered_at.is_none() {
                        self.answered_at = Some(Instant::now());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

/// Waits until `tcp` is readable or writable (`flags`), or `deadline` passes (`TimedOut`).
fn wait(tcp: &TcpStream, flags: PollFlags, deadline: Option<Instant>) -> std::io::Result<()> {
    loop {
        let timeout = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(std::io::ErrorKind::TimedOut.into());
                }
                Some(Timespec {
                    tv_sec: left.as_secs() as _,
                    tv_nsec: left.subsec_nanos() as _,
                })
            }
            None => None,
        };
        let mut fds = [PollFd::new(tcp, flags)];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) => continue,
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

impl Tls {
    /// Runs the client side of a handshake on `tcp` (which becomes non-blocking), giving up at
    /// `deadline`. The caller checks `server_key` before sending anything.
    pub(crate) fn connect(
        tcp: &TcpStream,
        deadline: Option<Instant>,
        moved: &AtomicU64,
    ) -> Result<Tls, HandshakeError> {
        let verifier = Arc::new(RecordingVerifier {
            seen: Mutex::new(None),
        });
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(HandshakeError::Tls)?
            .dangerous()
            .with_custom_certificate_verifier(verifier.clone())
            .with_no_client_auth();
        let mut config = config;
        config.resumption = rustls::client::Resumption::disabled();
        config.enable_sni = false;
        // Raw public keys carry no names: any fixed name will do.
        let name = ServerName::try_from("sprat").map_err(|_| {
            HandshakeError::Tls(rustls::Error::General("invalid server name".into()))
        })?;
        let conn =
            rustls::ClientConnection::new(Arc::new(config), name).map_err(HandshakeError::Tls)?;
        let mut tls = Tls::handshake(tcp, conn.into(), deadline, moved)?;
        // Its last flight ended the handshake: nothing was measured.
        tls.handshake_rtt = None;
        tls.server_key = *lock(&verifier.seen);
        Ok(tls)
    }

    /// Runs the server side of a handshake on `tcp` (which becomes non-blocking).
    pub(crate) fn accept(
        tcp: &TcpStream,
        config: &ServerTls,
        deadline: Option<Instant>,
        moved: &AtomicU64,
    ) -> Result<Tls, HandshakeError> {
        let conn =
            rustls::ServerConnection::new(config.config.clone()).map_err(HandshakeError::Tls)?;
        Tls::handshake(tcp, conn.into(), deadline, moved)
    }

    /// Runs the handshake, timing it from this side's first flight sent after the peer's
    /// first (a server's, after the client's hello) to its end (`handshake_rtt`).
    fn handshake(
        tcp: &TcpStream,
        mut conn: rustls::Connection,
        deadline: Option<Instant>,
        moved: &AtomicU64,
    ) -> Result<Tls, HandshakeError> {
        let io = HandshakeError::Io;
        let tcp = tcp.try_clone().map_err(io)?;
        let write_timeout = tcp.write_timeout().map_err(io)?;
        tcp.set_nonblocking(true).map_err(io)?;
        conn.set_buffer_limit(Some(OUTBOX));
        let mut state = State {
            conn,
            inbox: vec![0; HANDSHAKE_INBOX],
            start: 0,
            end: 0,
            eof: false,
            heard: false,
            answered_at: None,
        };
        loop {
            let flushed = state.send_out(&tcp, moved).map_err(io)?;
            if !flushed {
                wait(&tcp, PollFlags::OUT, deadline).map_err(io)?;
                continue;
            }
            if !state.conn.is_handshaking() {
                break;
            }
            if state.eof {
                return Err(io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            match state.take_in(&tcp, moved) {
                Ok(Intake::Fed) => {}
                Ok(Intake::WouldBlock) => wait(&tcp, PollFlags::IN, deadline).map_err(io)?,
                Err(e) => {
                    let tls_error = e
                        .get_ref()
                        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                        .cloned();
                    return Err(match tls_error {
                        Some(t) => HandshakeError::Tls(t),
                        None => io(e),
                    });
                }
            }
        }
        if state.start == state.end {
            state.inbox = vec![0; INBOX];
            (state.start, state.end) = (0, 0);
        } else {
            state.inbox.resize(INBOX.max(state.end), 0);
        }
        let mut binding = [0u8; 32];
        let binding = state
            .conn
            .export_keying_material(&mut binding, BINDING_LABEL, None)
            .map_err(HandshakeError::Tls)?;
        let binding = *binding;
        let suite = state
            .conn
            .negotiated_cipher_suite()
            .map(|s| format!("{:?}", s.suite()))
            .unwrap_or_default();
        let handshake_rtt = state.answered_at.map(|t| t.elapsed());
        let write_timeout_ns = write_timeout.map_or(0, |t| t.as_nanos().max(1) as u64);
        Ok(Tls {
            write_timeout_ns: AtomicU64::new(write_timeout_ns),
            tcp,
            state: Mutex::new(state),
            binding,
            suite,
            server_key: None,
            handshake_rtt,
        })
    }

    /// The value both sides' token proofs are bound to.
    pub(crate) fn binding(&self) -> [u8; 32] {
        self.binding
    }

    /// The negotiated cipher suite, e.g. `TLS13_AES_128_GCM_SHA256`.
    pub(crate) fn suite(&self) -> &str {
        &self.suite
    }

    /// Reads decrypted bytes into `buf`; 0 at the peer's orderly close. Waits for the socket
    /// without holding the session, until `deadline`.
    pub(crate) fn read(
        &self,
        buf: &mut [u8],
        deadline: Option<Instant>,
        moved: &AtomicU64,
    ) -> std::io::Result<usize> {
        loop {
            {
                let mut s = lock(&self.state);
                loop {
                    match s.conn.reader().read(buf) {
                        Ok(n) => return Ok(n),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                    match s.take_in(&self.tcp, moved)? {
                        Intake::Fed => continue,
                        Intake::WouldBlock => break,
                    }
                }
            }
            wait(&self.tcp, PollFlags::IN, deadline)?;
        }
    }

    /// Encrypts and sends all of `bufs`, waiting for room in the socket without holding the
    /// session. A wait that moves nothing for the socket's send timeout (a server's idle
    /// timeout, see `roles::server::guard_socket`) fails, as a plain socket's write would: the
    /// socket is non-blocking, so the kernel does not apply it.
    pub(crate) fn write_all(&self, bufs: &[IoSlice<'_>], moved: &AtomicU64) -> std::io::Result<()> {
        let mut owned: Vec<IoSlice<'_>> = bufs.to_vec();
        let mut slices = &mut owned[..];
        loop {
            let done = {
                let mut s = lock(&self.state);
                while !slices.is_empty() {
                    let n = s.conn.writer().write_vectored(slices)?;
                    if n == 0 {
                        break;
                    }
                    IoSlice::advance_slices(&mut slices, n);
                }
                s.send_out(&self.tcp, moved)? && slices.is_empty()
            };
            if done {
                return Ok(());
            }
            let limit = match self.write_timeout_ns.load(Ordering::Relaxed) {
                0 => None,
                ns => Some(Instant::now() + Duration::from_nanos(ns)),
            };
            wait(&self.tcp, PollFlags::OUT, limit)?;
        }
    }

    /// Writes wait for room without a bound from now on (see [`Tls::write_all`]).
    pub(crate) fn clear_write_timeout(&self) {
        self.write_timeout_ns.store(0, Ordering::Relaxed);
    }

    /// Says goodbye (TLS close_notify) and sends what is queued, waiting at most until
    /// `deadline` for room in the socket.
    pub(crate) fn close(&self, deadline: Option<Instant>, moved: &AtomicU64) {
        let mut s = lock(&self.state);
        s.conn.send_close_notify();
        loop {
            match s.send_out(&self.tcp, moved) {
                Ok(false) => {
                    drop(s);
                    if wait(&self.tcp, PollFlags::OUT, deadline).is_err() {
                        return;
                    }
                    s = lock(&self.state);
                }
                _ => return,
            }
        }
    }
}

/// Sessions this process opened with and without TLS, for the report (see [`observed`]).
static ENCRYPTED: AtomicU64 = AtomicU64::new(0);
static PLAIN: AtomicU64 = AtomicU64::new(0);
static SUITE: Mutex<String> = Mutex::new(String::new());

/// Counts one connection this process opened as a client.
pub(crate) fn note_connection(tls: Option<&Tls>) {
    match tls {
        Some(t) => {
            ENCRYPTED.fetch_add(1, Ordering::Relaxed);
            let mut suite = lock(&SUITE);
            if suite.is_empty() {
                *suite = t.suite().to_string();
            }
        }
        None => {
            PLAIN.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// How this process's client connections were protected so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    pub encrypted: u64,
    pub plain: u64,
    /// The cipher suite of the first encrypted connection.
    pub suite: String,
}

impl Observed {
    /// For a report: `TLS 1.3 (SUITE)`, `none`, or both counted when some connections were
    /// encrypted and some not.
    pub fn describe(&self) -> String {
        match (self.encrypted, self.plain) {
            (0, _) => "none".into(),
            (_, 0) => format!("TLS 1.3 ({})", self.suite),
            (e, p) => format!("TLS 1.3 ({}) on {e} connections, none on {p}", self.suite),
        }
    }
}

/// See [`Observed`].
pub fn observed() -> Observed {
    Observed {
        encrypted: ENCRYPTED.load(Ordering::Relaxed),
        plain: PLAIN.load(Ordering::Relaxed),
        suite: lock(&SUITE).clone(),
    }
}
