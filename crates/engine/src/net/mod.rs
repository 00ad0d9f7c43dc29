//! The thin I/O driver around `sprat-proto`: framed reads and writes on TCP streams, and the
//! handshakes run over them by feeding the protocol's state machines (`sprat_proto::auth`,
//! `sprat_proto::session`) what arrives and sending what they return. All parsing, validation
//! and session rules live in the protocol crate; this module owns sockets and timeouts.
//! Connections are encrypted with TLS 1.3 unless both sides allow plain TCP (see `tls`); the
//! server's identity and how a client trusts it live in `identity`, `known_servers`, `trust`.

pub mod identity;
pub mod known_servers;
pub mod tls;
pub mod trust;

pub use identity::{Fingerprint, ServerIdentity};
use known_servers::Pin;
pub use tls::ServerTls;
pub use trust::{Credentials, ServerAccess, Trust};

use crate::error::TransferError;
use crate::sync::lock;
use sprat_proto::auth::{ClientBoundHandshake, ClientHandshake, Credential, ServerKeys, TokenKey};
use sprat_proto::frame::kind;
use sprat_proto::session::client::{self as client_session, ClientStream};
use sprat_proto::session::server::{self as server_session, ServerStream};
use sprat_proto::session::{
    Direction, Role, SessionError, CLIENT_HELLO_PATIENCE, HANDSHAKE_TIMEOUT,
};
use sprat_proto::{Batch, FrameHeader, Message, FRAME_HEADER_LEN};
use std::io::{IoSlice, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tls::{HandshakeError, Tls};
/// Most bytes a socket holds that TCP has not sent yet (`TCP_NOTSENT_LOWAT`): a stream that
/// cannot send faster does not take more batches into its socket while other streams could
/// carry them.
const NOTSENT_LOWAT: u32 = 128 << 10;
/// How long a client has for its whole TLS handshake on the server: about a dozen round trips
/// of the slowest paths sprat serves, while a client dripping its hello holds a handshake slot
/// no longer.
const TLS_HANDSHAKE_PATIENCE: Duration = Duration::from_secs(10);
/// Waits before connecting again to a server that closed a connection during its TLS
/// handshake (see `open`).
pub(crate) const HANDSHAKE_RETRIES: [Duration; 4] = [
    Duration::from_millis(100),
    Duration::from_millis(300),
    Duration::from_millis(900),
    Duration::from_millis(2700),
];
/// Largest frame accepted before authentication.
const MAX_UNAUTHENTICATED_FRAME: u32 = 4096;

/// One received frame.
pub enum Frame {
    Control(Message),
    /// A batch payload and the time it took to arrive once its header was seen.
    Batch(Vec<u8>, Duration),
}

/// Why a read that waited past its deadline failed.
const TIMED_OUT: &str = "timed out waiting for the peer";

/// A framed TCP connection to a named peer.
pub struct Conn {
    pub stream: TcpStream,
    pub peer: String,
    /// Round trip estimated from the handshake: on a client see [`dial`]; on a server, the
    /// TLS handshake's last round trip (`None` without TLS).
    pub rtt: Option<Duration>,
    /// Bytes read and written on this socket so far, by every handle on it: what the stall
    /// watchdog (`session::stall`) looks at, counted per system call so that a slow link
    /// still shows progress within a large batch.
    moved: Arc<AtomicU64>,
    /// When reads give up (see [`Conn::read_until`]): a deadline for a whole message, not
    /// for each read, so that a peer dripping a byte at a time cannot hold a handshake open.
    /// Shared by every handle on the socket, like the socket's own read timeout.
    deadline: Arc<Deadline>,
    /// The TLS session on this socket, shared by every handle (`None`: plain TCP).
    tls: Option<Arc<Tls>>,
    /// Client side: the server's answer to a channel-bound hello sent together with the
    /// connection's first message, to be checked before anything else is read (see
    /// [`Conn::check_server_proof`]). Shared by every handle on the socket.
    server_proof: Option<Arc<Mutex<ServerProof>>>,
    /// Held while a message or batch is written, by every handle on the socket: a second
    /// writer (a server's `Working` beside the request it answers, see
    /// `roles::server::Heartbeat`) never cuts into another's frame.
    writing: Arc<Mutex<()>>,
    /// How long [`Conn::recv_control`] waits for each message (`None`: as the deadline set
    /// says): a namespace request's client, whose server says `Working` while it works.
    patience: Option<Duration>,
}

/// Client side, where a channel-bound hello went out with the first message: whether the
/// server's answer to it is still due (and by when), checked, or failed (then every later read
/// fails too: nothing that arrives may be believed).
enum ServerProof {
    Due {
        handshake: ClientBoundHandshake,
        deadline: Instant,
    },
    Checked,
    Failed,
}

/// A read deadline shared by the handles on one socket: nanoseconds after [`epoch`], plus
/// one (0: none).
#[derive(Default)]
struct Deadline(AtomicU64);

/// The instant deadlines are counted from.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Deadline {
    fn set(&self, at: Option<Instant>) {
        let n = at.map_or(0, |at| {
            at.saturating_duration_since(epoch()).as_nanos() as u64 + 1
        });
        self.0.store(n, Ordering::Relaxed);
    }

    fn get(&self) -> Option<Instant> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            n => Some(epoch() + Duration::from_nanos(n - 1)),
        }
    }
}

/// A socket read or written through, counting the bytes moved.
struct Metered<'a> {
    stream: &'a TcpStream,
    moved: &'a AtomicU64,
    deadline: &'a Deadline,
    tls: Option<&'a Tls>,
}

impl Read for Metered<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(tls) = self.tls {
            return tls.read(buf, self.deadline.get(), self.moved);
        }
        if let Some(deadline) = self.deadline.get() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            self.stream.set_read_timeout(Some(left))?;
        }
        let n = (&mut &*self.stream).read(buf)?;
        self.moved.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl Write for Metered<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(tls) = self.tls {
            tls.write_all(&[IoSlice::new(buf)], self.moved)?;
            return Ok(buf.len());
        }
        let n = (&mut &*self.stream).write(buf)?;
        self.moved.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Conn {
    /// Writes on this socket wait for room without a bound from now on (its send timeout
    /// cleared, the TLS session's too): for a session's connection, which the session's
    /// watchdog bounds with all the others (see `roles::server::guard_socket`).
    pub(crate) fn clear_write_timeout(&self) {
        let _ = self.stream.set_write_timeout(None);
        if let Some(tls) = &self.tls {
            tls.clear_write_timeout();
        }
    }

    pub fn new(stream: TcpStream, peer: String) -> Conn {
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            peer,
            rtt: None,
            moved: Arc::default(),
            deadline: Arc::default(),
            tls: None,
            server_proof: None,
            writing: Arc::default(),
            patience: None,
        }
    }

    /// From now on [`Conn::recv_control`] waits at most `patience` for each message (a
    /// server still at a request says `Working` meanwhile), then fails as stalled.
    pub(crate) fn wait_for_answers_within(&mut self, patience: Duration) {
        self.patience = Some(patience);
    }

    /// The key the server presented (client side of an encrypted connection).
    pub fn server_key(&self) -> Option<Fingerprint> {
        self.tls.as_deref().and_then(|t| t.server_key)
    }

    /// The value the token handshake binds its proofs to: the TLS session's exporter, or
    /// zeros on a plain connection.
    fn binding(&self) -> [u8; 32] {
        self.tls.as_deref().map_or([0; 32], Tls::binding)
    }

    /// Runs the client side of a TLS handshake and checks the server's key with `credentials`
    /// before anything else is sent. Returns whether the key is vouched for (see
    /// `Credentials::check_server`).
    fn start_tls_client(&mut self, credentials: &Credentials) -> Result<bool, TransferError> {
        let tls = Tls::connect(&self.stream, self.deadline.get(), &self.moved)
            .map_err(|e| self.handshake_failed(e))?;
        // A client with a token pins a new key only once the server proved the token.
        let pin = if credentials.token_for(&self.peer).is_none() {
            Pin::Key
        } else {
            Pin::No
        };
        let vouched = credentials.check_server(&self.peer, tls.server_key, pin)?;
        self.tls = Some(Arc::new(tls));
        Ok(vouched)
    }

    /// Runs the server side of a TLS handshake.
    fn start_tls_server(&mut self, config: &ServerTls) -> Result<(), TransferError> {
        let tls = Tls::accept(&self.stream, config, self.deadline.get(), &self.moved)
            .map_err(|e| self.handshake_failed(e))?;
        self.rtt = tls.handshake_rtt;
        self.tls = Some(Arc::new(tls));
        Ok(())
    }

    fn handshake_failed(&self, e: HandshakeError) -> TransferError {
        match e {
            HandshakeError::Io(e) => self.lost(e),
            // Not TLS at all: not a sprat server (a wrong port, another service, an older
            // sprat), a connection error (exit 4) rather than a failed authentication.
            HandshakeError::Tls(e @ rustls::Error::InvalidMessage(_)) => TransferError::Protocol {
                peer: self.peer.clone(),
                why: format!(
                    "TLS handshake failed: {e} (the peer does not speak TLS: an older sprat, \
                     or not sprat at all)"
                ),
            },
            HandshakeError::Tls(e) => TransferError::Auth {
                peer: self.peer.clone(),
                why: format!("TLS handshake failed: {e}"),
            },
        }
    }

    /// Bytes read and written on this socket so far (by every handle on it).
    pub fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    fn metered(&self) -> Metered<'_> {
        Metered {
            stream: &self.stream,
            moved: &self.moved,
            deadline: &self.deadline,
            tls: self.tls.as_deref(),
        }
    }

    /// A second handle on the same socket (for a reader and a writer thread).
    pub fn try_clone(&self) -> Result<Conn, TransferError> {
        Ok(Conn {
            stream: self.stream.try_clone().map_err(|e| self.lost(e))?,
            peer: self.peer.clone(),
            rtt: self.rtt,
            moved: self.moved.clone(),
            deadline: self.deadline.clone(),
            tls: self.tls.clone(),
            server_proof: self.server_proof.clone(),
            writing: self.writing.clone(),
            patience: self.patience,
        })
    }

    /// Reads from now on give up at `deadline` (`None`: never), however the bytes trickle in.
    pub fn read_until(&self, deadline: Option<Instant>) {
        self.deadline.set(deadline);
        let timeout = deadline.map(|d| {
            d.saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1))
        });
        let _ = self.stream.set_read_timeout(timeout);
    }

    /// The transfer error for a broken session rule on this connection.
    pub fn session_error(&self, e: SessionError) -> TransferError {
        match e {
            SessionError::Auth(why) => TransferError::Auth {
                peer: self.peer.clone(),
                why: why.to_string(),
            },
            SessionError::TimedOut(_) => TransferError::ConnectionLost {
                peer: self.peer.clone(),
                why: e.to_string(),
            },
            e => self.protocol(e.to_string()),
        }
    }

    fn lost(&self, e: std::io::Error) -> TransferError {
        let why = match e.kind() {
            std::io::ErrorKind::UnexpectedEof => crate::error::PEER_CLOSED.to_string(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => TIMED_OUT.to_string(),
            _ => e.to_string(),
        };
        TransferError::ConnectionLost {
            peer: self.peer.clone(),
            why,
        }
    }

    pub fn send(&mut self, msg: &Message) -> Result<(), TransferError> {
        let bytes = msg.encode();
        let _alone = lock(&self.writing);
        self.metered().write_all(&bytes).map_err(|e| self.lost(e))
    }

    /// Sends a batch frame: prefix, entry headers and data, without joining them in memory.
    pub fn send_batch(&mut self, batch: &Batch) -> Result<(), TransferError> {
        let prefix = batch.frame_prefix();
        let mut slices = [
            IoSlice::new(&prefix),
            IoSlice::new(&batch.header),
            IoSlice::new(&batch.data),
        ];
        let _alone = lock(&self.writing);
        if let Some(tls) = &self.tls {
            return tls
                .write_all(&slices, &self.moved)
                .map_err(|e| self.lost(e));
        }
        let mut slices = &mut slices[..];
        while !slices.is_empty() {
            match self.stream.write_vectored(slices) {
                Ok(0) => return Err(self.lost(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    self.moved.fetch_add(n as u64, Ordering::Relaxed);
                    IoSlice::advance_slices(&mut slices, n)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.lost(e)),
            }
        }
        Ok(())
    }

    /// Reads the next frame; oversized or unknown frames are refused before their payload is
    /// read, and so are batches where only control messages may come (`allow_batch` false).
    pub fn recv(&mut self) -> Result<Frame, TransferError> {
        self.recv_frame(true)
    }

    /// [`Conn::recv`], calling `admit` with a batch frame's payload length once its header is
    /// read and before any of its payload is (a receiver with a memory budget waits there, or
    /// refuses); what `admit` returns comes back with the batch.
    pub fn recv_admitted<T>(
        &mut self,
        admit: impl FnOnce(&Conn, u32) -> Result<T, TransferError>,
    ) -> Result<(Frame, Option<T>), TransferError> {
        let mut admitted = None;
        let frame = self.recv_frame_admitted(true, |conn, len| {
            admitted = Some(admit(conn, len)?);
            Ok(())
        })?;
        Ok((frame, admitted))
    }

    fn recv_frame(&mut self, allow_batch: bool) -> Result<Frame, TransferError> {
        self.recv_frame_admitted(allow_batch, |_, _| Ok(()))
    }

    fn recv_frame_admitted(
        &mut self,
        allow_batch: bool,
        admit: impl FnOnce(&Conn, u32) -> Result<(), TransferError>,
    ) -> Result<Frame, TransferError> {
        self.check_server_proof()?;
        let mut header = [0u8; FRAME_HEADER_LEN];
        self.metered()
            .read_exact(&mut header)
            .map_err(|e| self.lost(e))?;
        let started = Instant::now();
        let header = FrameHeader::decode(&header).map_err(|e| self.protocol(e.to_string()))?;
        if header.kind == kind::BATCH && !allow_batch {
            return Err(self.protocol("unexpected batch".into()));
        }
        if header.kind == kind::BATCH {
            admit(self, header.len)?;
            // Megabytes: into a spare buffer, which the writers give back (see `spare`).
            let mut payload = crate::spare::buffer(header.len as usize);
            self.metered()
                .read_exact(&mut payload)
                .map_err(|e| self.lost(e))?;
            return Ok(Frame::Batch(payload, started.elapsed()));
        }
        let mut payload = Vec::with_capacity(header.len as usize);
        self.metered()
            .take(header.len as u64)
            .read_to_end(&mut payload)
            .map_err(|e| self.lost(e))?;
        if payload.len() != header.len as usize {
            return Err(self.lost(std::io::ErrorKind::UnexpectedEof.into()));
        }
        let msg =
            Message::decode(header.kind, &payload).map_err(|e| self.protocol(e.to_string()))?;
        Ok(Frame::Control(msg))
    }

    /// Reads the next frame, which must be a control message (an `Error` included, for a
    /// session's state machine to interpret).
    pub fn recv_control_raw(&mut self) -> Result<Message, TransferError> {
        match self.recv_frame(false)? {
            Frame::Control(m) => Ok(m),
            Frame::Batch(..) => Err(self.protocol("unexpected batch".into())),
        }
    }

    /// Sends several messages in one write.
    pub fn send_all(&mut self, msgs: &[Message]) -> Result<(), TransferError> {
        let bytes: Vec<u8> = msgs.iter().flat_map(|m| m.encode()).collect();
        let _alone = lock(&self.writing);
        self.metered().write_all(&bytes).map_err(|e| self.lost(e))
    }

    /// Reads the next frame, which must be a control message (an `Error` becomes an error).
    pub fn recv_control(&mut self) -> Result<Message, TransferError> {
        loop {
            let asked = Instant::now();
            if let Some(patience) = self.patience {
                self.read_until(Some(asked + patience));
            }
            // Only this wait's own deadline: the proof of the token, read first, has its own
            // (review 2026-11-30 of the newest changes, F2: its 30 s were said as 60).
            let frame = self
                .recv_frame(false)
                .map_err(|e| match (self.patience, e) {
                    (Some(after), TransferError::ConnectionLost { why, .. })
                        if why == TIMED_OUT && asked.elapsed() >= after =>
                    {
                        TransferError::Stalled {
                            peer: self.peer.clone(),
                            after,
                            option: "the server sent nothing, not even that it is still working",
                        }
                    }
                    (_, e) => e,
                })?;
            return match frame {
                // A server still at the request: a sign of life, nothing to answer.
                Frame::Control(Message::Working) => continue,
                Frame::Control(Message::Error { code, text }) => Err(TransferError::Remote {
                    peer: self.peer.clone(),
                    code,
                    text,
                }),
                Frame::Control(m) => Ok(m),
                Frame::Batch(..) => Err(self.protocol("unexpected batch".into())),
            };
        }
    }

    /// Reads a small control message (the handshake): anything larger is refused unread.
    pub fn recv_small(&mut self) -> Result<Message, TransferError> {
        self.check_server_proof()?;
        self.read_small()
    }

    /// Client side, after a channel-bound hello sent together with the first message: the
    /// server's answer to the hello comes before anything else, and nothing the server sends
    /// is believed before its proof of the token is checked (every read calls this; call it
    /// before sending something only the server may read, such as a checked pull's index).
    /// Does nothing on other connections, or once checked.
    pub fn check_server_proof(&mut self) -> Result<(), TransferError> {
        let Some(proof) = self.server_proof.clone() else {
            return Ok(());
        };
        // Held while the answer is read: another handle reading meanwhile waits for it.
        let mut proof = lock(&proof);
        match std::mem::replace(&mut *proof, ServerProof::Failed) {
            ServerProof::Checked => {
                *proof = ServerProof::Checked;
                Ok(())
            }
            ServerProof::Failed => Err(TransferError::Auth {
                peer: self.peer.clone(),
                why: "the server's answer to the hello could not be checked".into(),
            }),
            ServerProof::Due {
                handshake,
                deadline,
            } => {
                // The answer comes within the handshake's time, whatever the caller reads.
                let before = self.deadline.get();
                self.read_until(Some(before.map_or(deadline, |b| b.min(deadline))));
                let reply = self.read_small();
                self.read_until(before);
                self.server_answered(handshake, reply?)?;
                *proof = ServerProof::Checked;
                Ok(())
            }
        }
    }

    /// Checks the server's answer to a channel-bound hello.
    fn server_answered(
        &self,
        handshake: ClientBoundHandshake,
        reply: Message,
    ) -> Result<(), TransferError> {
        if let Some(e) = refused_hello(&self.peer, &reply) {
            return Err(e);
        }
        handshake
            .on_message(reply)
            .map_err(|e| self.session_error(e.into()))?;
        server_proved(&self.peer);
        Ok(())
    }

    /// [`Conn::recv_small`] without the check of the server's proof.
    fn read_small(&mut self) -> Result<Message, TransferError> {
        let mut header = [0u8; FRAME_HEADER_LEN];
        self.metered()
            .read_exact(&mut header)
            .map_err(|e| self.lost(e))?;
        let header = FrameHeader::decode(&header).map_err(|e| self.protocol(e.to_string()))?;
        if header.kind == kind::BATCH || header.len > MAX_UNAUTHENTICATED_FRAME {
            return Err(self.protocol("oversized frame during the handshake".into()));
        }
        let mut payload = vec![0u8; header.len as usize];
        self.metered()
            .read_exact(&mut payload)
            .map_err(|e| self.lost(e))?;
        Message::decode(header.kind, &payload).map_err(|e| self.protocol(e.to_string()))
    }

    pub fn protocol(&self, why: String) -> TransferError {
        TransferError::Protocol {
            peer: self.peer.clone(),
            why,
        }
    }

    /// Stops sending (the peer sees end of stream) but keeps reading.
    pub fn shutdown_write(&self) {
        if let Some(tls) = &self.tls {
            tls.close(Some(Instant::now() + LINGER), &self.moved);
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }

    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// Random bytes for nonces and session ids.
pub fn random<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    if getrandom::fill(&mut out).is_err() {
        // No entropy source at all: fall back to the clock, which still differs per call.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            .to_le_bytes();
        for (i, b) in out.iter_mut().enumerate() {
            *b = t[i % t.len()] ^ (i as u8);
        }
    }
    out
}

/// Connects to `addr`, authenticates with `key` and sends `first` (the session's or request's
/// opening message). `first` travels together with the authentication answer, so that a
/// request costs one round trip after the server's hello; the server reads it only once the
/// client is authenticated.
pub fn connect(
    addr: &str,
    credentials: &Credentials,
    first: &Message,
) -> Result<Conn, TransferError> {
    connect_with(addr, credentials, first, None)
}

/// Opens a TCP connection, with send and receive buffers of `tcp_buffer` bytes set before
/// the handshake (so that the window scale is negotiated for them) or left to autotuning.
fn open_tcp(addr: &str, tcp_buffer: Option<u64>) -> Result<TcpStream, TransferError> {
    let connect_err = |source| TransferError::Connect {
        peer: addr.to_string(),
        source,
    };
    let addrs: Vec<_> = addr.to_socket_addrs().map_err(connect_err)?.collect();
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for a in addrs {
        let attempt = tcp_socket(a, tcp_buffer).and_then(|s| {
            s.connect_timeout(&a.into(), Duration::from_secs(10))
                .map(|()| s)
        });
        match attempt {
            Ok(s) => return Ok(s.into()),
            Err(e) => last = e,
        }
    }
    Err(connect_err(last))
}

/// Binds a listening socket whose accepted connections get `tcp_buffer` bytes of send and
/// receive buffer (inherited from the listener, so the window scale fits them), or autotuning.
pub fn listen(addr: &str, tcp_buffer: Option<u64>) -> std::io::Result<std::net::TcpListener> {
    let a = addr.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the address resolves to nothing",
        )
    })?;
    let socket = tcp_socket(a, tcp_buffer)?;
    socket.set_reuse_address(true)?;
    socket.bind(&a.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// A TCP socket for `a` with `tcp_buffer` bytes of send and receive buffer requested (the
/// kernel caps each at its `*mem_max`), or left to autotuning.
fn tcp_socket(
    a: std::net::SocketAddr,
    tcp_buffer: Option<u64>,
) -> std::io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(a),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    let _ = socket.set_tcp_notsent_lowat(NOTSENT_LOWAT);
    if let Some(bytes) = tcp_buffer {
        let bytes = bytes.min(i32::MAX as u64 / 2) as usize;
        let _ = socket.set_send_buffer_size(bytes);
        let _ = socket.set_recv_buffer_size(bytes);
    }
    Ok(socket)
}

/// [`connect`] with explicit socket buffers (`None`: kernel autotuning).
pub fn connect_with(
    addr: &str,
    credentials: &Credentials,
    first: &Message,
    tcp_buffer: Option<u64>,
) -> Result<Conn, TransferError> {
    dial(addr, credentials, tcp_buffer)?.authenticate(first)
}

/// A connection ready for its first message: the server has answered the client's hello and
/// proved the key, and the client's own proof is not sent yet; or, on TLS to a server whose
/// key was vouched for, the client's hello (which carries its proof) is not sent yet and goes
/// with the first message (see [`greet_bound`]). Dialled ahead so that its connect and
/// greeting overlap other work (the streams a session will join).
pub struct Dialed {
    conn: Conn,
    /// What goes in front of the first message.
    ahead: Option<Message>,
}

/// A connection [`open`] made, before the token handshake.
struct Opened {
    conn: Conn,
    /// The key the token handshake is to use (bound to this channel).
    key: Option<TokenKey>,
    /// When the dialling began.
    started: Instant,
    /// The server's TLS key is vouched for (see `Credentials::check_server`).
    vouched: bool,
}

/// Connects to `addr` and, unless `credentials` say not to, runs a TLS handshake and checks the
/// server's key, all under the handshake's timeout.
fn open(
    addr: &str,
    credentials: &Credentials,
    tcp_buffer: Option<u64>,
) -> Result<Opened, TransferError> {
    let mut attempt = 0;
    let (conn, started, vouched) = loop {
        let started = Instant::now();
        let stream = open_tcp(addr, tcp_buffer)?;
        let mut conn = Conn::new(stream, addr.to_string());
        conn.read_until(Some(started + HANDSHAKE_TIMEOUT));
        if !credentials.trust.encrypt {
            break (conn, started, false);
        }
        match conn.start_tls_client(credentials) {
            Ok(vouched) => break (conn, started, vouched),
            // A server at its limit of connections in their handshake closes new ones at
            // once (it cannot answer before TLS): such a connection is tried again, a few
            // times, a little later. One that stayed silent until the handshake's timeout is
            // not (five of them made a client wait 154 s on a listener that never answered).
            Err(TransferError::ConnectionLost { .. })
                if attempt < HANDSHAKE_RETRIES.len()
                    && started.elapsed() < HANDSHAKE_TIMEOUT / 2 =>
            {
                std::thread::sleep(HANDSHAKE_RETRIES[attempt]);
                attempt += 1;
            }
            // Every try closed at once: say what that most likely means.
            Err(TransferError::ConnectionLost { peer, why }) if attempt > 0 => {
                return Err(TransferError::ClosedBeforeHandshake {
                    peer,
                    why: format!(
                        "{why} ({} tries, each closed before the TLS handshake: the server may \
                         be at its limit of connections still authenticating, from this \
                         address or in all; try again later)",
                        attempt + 1
                    ),
                })
            }
            Err(e) => return Err(e),
        }
    };
    tls::note_connection(conn.tls.as_deref());
    let key = credentials
        .token_for(addr)
        .map(|k| k.bound_to(&conn.binding()));
    Ok(Opened {
        conn,
        key,
        started,
        vouched,
    })
}

/// Sends `hello` and reads the server's answer (small, under the handshake's timeout).
fn greet(conn: &mut Conn, hello: &Message) -> Result<Message, TransferError> {
    conn.send(hello)?;
    conn.recv_small()
}

/// The round trip estimated from dialling: the time from `connect` to the server's hello is
/// two round trips on a real path (the TCP handshake, then the hellos), three with TLS when
/// the client waited for the server's answer; the end of the TLS handshake, two.
fn estimated_rtt(conn: &Conn, started: Instant, answered: bool) -> Duration {
    let trips = match (conn.tls.is_some(), answered) {
        (true, true) => 3,
        _ => 2,
    };
    started.elapsed() / trips
}

/// The channel-bound handshake of a TLS connection (see `sprat_proto::auth`): the client's
/// hello carries its proof. When the server's key is `vouched` for (pinned, or marked as
/// having proved a token in the known-servers file), or the client has no token, the hello is
/// returned to go out with the first message and the server's answer is checked before
/// anything else is read ([`Conn::check_server_proof`]): data starts at the end of the TLS
/// handshake. A server met for the first time must prove the token first (its TLS key alone
/// is only trusted on first use): the hello is sent and its answer checked now, one round trip
/// more. Returns what goes in front of the first message, and whether the server answered.
fn greet_bound(
    conn: &mut Conn,
    credentials: &Credentials,
    key: Option<TokenKey>,
    vouched: bool,
) -> Result<(Option<Message>, bool), TransferError> {
    let early = vouched || key.is_none();
    let (handshake, hello) = ClientHandshake::new_bound(key, random());
    if early {
        conn.server_proof = Some(Arc::new(Mutex::new(ServerProof::Due {
            handshake,
            deadline: Instant::now() + HANDSHAKE_TIMEOUT,
        })));
        return Ok((Some(hello), false));
    }
    conn.send(&hello)?;
    let reply = conn.read_small()?;
    conn.server_answered(handshake, reply)?;
    // The server proved the token with this key: remember it (trust on first use).
    credentials.check_server(&conn.peer, conn.server_key(), Pin::Proved)?;
    Ok((None, true))
}

/// Whether `first` carries what only a server that proved the token may read, and so waits
/// for that proof even where a request may go with the hello: a third-party copy's `SendTo`,
/// whose ticket lets its holder write to the destination.
fn carries_a_secret(first: &Message) -> bool {
    matches!(
        first,
        Message::Request(sprat_proto::namespace::Request::SendTo { .. })
    )
}

/// A server's refusal of the hello for another reason than the key (for example a busy or
/// misconfigured server).
fn refused_hello(addr: &str, reply: &Message) -> Option<TransferError> {
    match reply {
        Message::Error { code, text } if *code != sprat_proto::ErrorCode::AuthFailed => {
            Some(TransferError::Remote {
                peer: addr.to_string(),
                code: *code,
                text: text.clone(),
            })
        }
        _ => None,
    }
}

/// Handshakes in this process in which a sprat server proved who it is: a retry (see
/// `roles::retry`) waits for a server that went away only if one was once there.
static SERVERS_PROVED: AtomicU64 = AtomicU64::new(0);

/// The addresses (as the user named them) whose server proved itself in this process.
static PROVED_AT: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Counts one handshake in which the server at `peer` proved itself.
pub(crate) fn server_proved(peer: &str) {
    SERVERS_PROVED.fetch_add(1, Ordering::Relaxed);
    let mut proved = lock(&PROVED_AT);
    if !proved.iter().any(|p| p == peer) {
        proved.push(peer.to_string());
    }
}

/// Whether the server at `peer` has proved itself in this process (see [`server_proved`]).
pub fn proved_at(peer: &str) -> bool {
    lock(&PROVED_AT).iter().any(|p| p == peer)
}

/// How many servers have proved themselves in this process so far (see [`SERVERS_PROVED`]).
pub fn servers_proved() -> u64 {
    SERVERS_PROVED.load(Ordering::Relaxed)
}

/// Connects to `addr`, says hello and checks the server's answer (the first half of
/// [`connect_with`]), for a connection of namespace requests. The connection's `rtt` is
/// estimated from the time this took (see [`estimated_rtt`]).
pub fn dial(
    addr: &str,
    credentials: &Credentials,
    tcp_buffer: Option<u64>,
) -> Result<Dialed, TransferError> {
    let Opened {
        mut conn,
        key,
        started,
        vouched,
    } = open(addr, credentials, tcp_buffer)?;
    if conn.tls.is_some() {
        let (ahead, answered) = greet_bound(&mut conn, credentials, key, vouched)?;
        conn.rtt = Some(estimated_rtt(&conn, started, answered));
        return Ok(Dialed { conn, ahead });
    }
    let (handshake, hello) = ClientHandshake::new(key, random());
    let reply = greet(&mut conn, &hello)?;
    if let Some(e) = refused_hello(addr, &reply) {
        return Err(e);
    }
    let proof = handshake
        .on_message(reply)
        .map_err(|e| conn.session_error(e.into()))?;
    server_proved(&conn.peer);
    conn.rtt = Some(estimated_rtt(&conn, started, true));
    Ok(Dialed {
        conn,
        ahead: Some(proof),
    })
}

impl Dialed {
    /// Sends the client's proof and `first` in one write, and returns without waiting: the
    /// server reads `first` only once the proof is checked, and answers it (or refuses the
    /// proof with `Error`) as the first thing it sends.
    pub fn authenticate(self, first: &Message) -> Result<Conn, TransferError> {
        let Dialed { mut conn, ahead } = self;
        if carries_a_secret(first) && conn.server_proof.is_some() {
            // Not before the server proved the token: the hello alone, then its answer.
            if let Some(hello) = ahead {
                conn.send(&hello)?;
            }
            conn.check_server_proof()?;
            conn.send(first)?;
            conn.read_until(None);
            return Ok(conn);
        }
        let msgs: Vec<Message> = ahead.into_iter().chain([first.clone()]).collect();
        conn.send_all(&msgs)?;
        conn.read_until(None);
        Ok(conn)
    }
}

/// A connection of a session whose server proved the key; the client's proof and first
/// message (`Open` or `Join`) are not sent yet. Dialled ahead so that its connect and greeting
/// overlap other work (the streams a session will join).
pub struct DialedSession {
    conn: Conn,
    machine: ClientStream,
}

/// A connection of a session and its state machine (see `sprat_proto::session::client`).
pub struct SessionConn {
    pub conn: Conn,
    pub machine: ClientStream,
}

/// [`dial`] for one connection of a session moving batches `direction`, in `role`.
pub fn dial_session(
    addr: &str,
    credentials: &Credentials,
    tcp_buffer: Option<u64>,
    direction: Direction,
    role: Role,
) -> Result<DialedSession, TransferError> {
    let Opened {
        mut conn,
        key,
        started,
        vouched,
    } = open(addr, credentials, tcp_buffer)?;
    if conn.tls.is_some() {
        let (ahead, answered) = greet_bound(&mut conn, credentials, key, vouched)?;
        conn.rtt = Some(estimated_rtt(&conn, started, answered));
        let machine = ClientStream::authenticated(direction, role, ahead);
        return Ok(DialedSession { conn, machine });
    }
    let (mut machine, hello) = ClientStream::new(direction, role, key, random(), Instant::now());
    let reply = greet(&mut conn, &hello)?;
    if let Some(e) = refused_hello(addr, &reply) {
        return Err(e);
    }
    match machine.on_message(reply, Instant::now()) {
        Ok(client_session::Event::ServerProved) => {
            server_proved(&conn.peer);
        }
        Ok(other) => return Err(conn.protocol(format!("unexpected {other:?} in the handshake"))),
        Err(e) => return Err(conn.session_error(e)),
    }
    conn.rtt = Some(estimated_rtt(&conn, started, true));
    Ok(DialedSession { conn, machine })
}

impl DialedSession {
    /// The round trip estimated from the handshake, see [`dial`].
    pub fn rtt(&self) -> Duration {
        self.conn.rtt.unwrap_or_default()
    }

    /// Whether the server has closed the connection meanwhile (one dialled ahead may wait).
    pub(crate) fn hung_up(&self) -> bool {
        self.conn.hung_up()
    }

    /// Sends the client's proof and `first` (`Open` or `Join`) in one write, and returns
    /// without waiting for the server's announcement: a push may send its first batches right
    /// behind. Reads from then on give up at the machine's deadline for the announcement.
    pub fn authenticate(self, first: Message) -> Result<SessionConn, TransferError> {
        let DialedSession {
            mut conn,
            mut machine,
        } = self;
        let both = machine
            .open(first, Instant::now())
            .map_err(|e| conn.session_error(e))?;
        conn.send_all(&both)?;
        conn.read_until(machine.deadline());
        Ok(SessionConn { conn, machine })
    }
}

/// What the server's `Opened` says of a session.
#[derive(Debug, Default, Clone, Copy)]
pub struct Announcement {
    /// Whether the session's root is a directory.
    pub root_is_dir: bool,
    /// Where a pull's source directory is on the server's kernel (zeros for a push).
    pub source: sprat_proto::SourceId,
    /// The server sends the data on the control connection alone and refuses the joins.
    pub one_stream: bool,
}

impl SessionConn {
    /// Reads messages until the server announces the connection (a pull, or a stream joined
    /// mid-transfer, waits for it before it takes any data). Returns what `Opened` says of
    /// the session (`None` for `Joined`).
    pub fn await_announcement(&mut self) -> Result<Option<Announcement>, TransferError> {
        let msg = match self.conn.recv_control_raw() {
            Ok(m) => m,
            Err(e) => return Err(self.timed_out().unwrap_or(e)),
        };
        match self.machine.on_message(msg, Instant::now()) {
            Ok(client_session::Event::Announced {
                root_is_dir,
                source,
                one_stream,
                // A push's, read on its stream (see `roles::push`).
                to_parent: _,
            }) => {
                self.conn.read_until(self.machine.deadline());
                Ok(root_is_dir.map(|root_is_dir| Announcement {
                    root_is_dir,
                    source,
                    one_stream,
                }))
            }
            Ok(client_session::Event::Refused { code, text, .. }) => Err(TransferError::Remote {
                peer: self.conn.peer.clone(),
                code,
                text,
            }),
            Ok(other) => Err(self.conn.protocol(format!("unexpected {other:?}"))),
            Err(e) => Err(self.conn.session_error(e)),
        }
    }

    /// The machine's own account of a read that failed: a passed deadline is a typed
    /// timeout naming what was awaited.
    pub fn timed_out(&mut self) -> Option<TransferError> {
        self.machine
            .on_timeout(Instant::now())
            .err()
            .map(|e| self.conn.session_error(e))
    }
}

/// How long a refusing server keeps reading (and dropping) what the client sent before the
/// refusal reached it: closing a socket with unread data resets the connection, and the reset
/// can destroy the refusal before the client reads it.
const LINGER: Duration = Duration::from_secs(2);

impl Conn {
    /// Sends `Error` and closes the connection without losing it: stops sending, then reads
    /// and drops whatever the client sent until it closes too (it does once it reads the
    /// error) or [`LINGER`] has passed.
    pub fn refuse(&mut self, code: sprat_proto::ErrorCode, text: String) {
        self.refuse_with(&Message::Error { code, text })
    }

    /// Whether the peer has closed (or reset) its side of the connection: asked of the
    /// kernel, without waiting and without reading.
    pub(crate) fn hung_up(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.stream, PollFlags::RDHUP)];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let hangup = PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR;
        matches!(poll(&mut fds, Some(&now)), Ok(1..)) && fds[0].revents().intersects(hangup)
    }

    /// [`Conn::refuse`] with the `Error` already made (by a session's state machine).
    pub fn refuse_with(&mut self, error: &Message) {
        if self.send(error).is_err() {
            return;
        }
        self.shutdown_write();
        self.read_until(Some(Instant::now() + LINGER));
        let mut sink = [0u8; 16 << 10];
        while let Ok(1..) = self.metered().read(&mut sink) {}
    }
}

/// Runs the server side of the handshake on a new connection (feeding a
/// [`ServerStream`]); `keys` are the server's tokens, `tickets` one-time keys also accepted.
/// Returns the connection's machine, now waiting for its first message, and the credential
/// the client proved; a client that failed is refused (with `Error`) here.
pub fn accept(
    conn: &mut Conn,
    keys: &ServerKeys,
    tickets: Vec<TokenKey>,
    tls: &ServerTls,
) -> Result<(ServerStream, Credential), TransferError> {
    let started = Instant::now();
    let auth_error = |conn: &Conn, why: String| TransferError::Auth {
        peer: conn.peer.clone(),
        why,
    };
    // A client of this protocol speaks first (a TLS hello, or a sprat hello on a plain
    // connection); one of version 2 or older waits for the server, and is told why nothing
    // happens.
    conn.read_until(Some(started + CLIENT_HELLO_PATIENCE));
    let Some(encrypted) = client_starts_tls(conn) else {
        let text = format!(
            "sent no hello within {} s (a client of sprat protocol {} speaks first; one of \
             protocol 2 or older waits for the server, and must be upgraded)",
            CLIENT_HELLO_PATIENCE.as_secs(),
            sprat_proto::PROTOCOL_VERSION
        );
        conn.refuse(sprat_proto::ErrorCode::Protocol, text.clone());
        return Err(auth_error(conn, text));
    };
    if encrypted {
        conn.read_until(Some(started + TLS_HANDSHAKE_PATIENCE));
        conn.start_tls_server(tls)?;
    } else if !tls.allow_plain {
        let text = "this server accepts only encrypted connections: connect without \
                    --no-encryption (or run the server with --no-encryption)"
            .to_string();
        conn.refuse(sprat_proto::ErrorCode::EncryptionRequired, text.clone());
        return Err(auth_error(conn, text));
    }
    let binding = conn.binding();
    let keys = keys.bound_to(&binding);
    let tickets = tickets.iter().map(|t| t.bound_to(&binding)).collect();
    let mut machine = ServerStream::new(keys, tickets, random(), Instant::now());
    if encrypted {
        machine = machine.bound();
    }
    loop {
        conn.read_until(machine.deadline());
        let msg = conn.recv_small()?;
        match machine.on_message(msg, Instant::now()) {
            Ok(server_session::Event::Reply(reply)) => conn.send(&reply)?,
            Ok(server_session::Event::Authenticated(credential)) => {
                conn.read_until(machine.deadline());
                return Ok((machine, credential));
            }
            Ok(server_session::Event::Greeted { reply, credential }) => {
                conn.send(&reply)?;
                conn.read_until(machine.deadline());
                return Ok((machine, credential));
            }
            Ok(server_session::Event::Unprovable(reply)) => {
                conn.refuse_with(&reply);
                return Err(auth_error(
                    conn,
                    "the client brought a token, which a server run with --no-auth cannot \
                     prove it knows: refused"
                        .into(),
                ));
            }
            Ok(other) => return Err(conn.protocol(format!("unexpected {other:?}"))),
            Err(SessionError::Auth(e)) => {
                conn.refuse(server_session::refusal_code(&e), e.to_string());
                return Err(auth_error(conn, e.to_string()));
            }
            Err(e) => return Err(conn.session_error(e)),
        }
    }
}

/// Whether the client's first bytes open a TLS handshake (a TLS record of type handshake,
/// `16 03 ..`; a sprat frame starts with a little-endian length whose second byte is 0 for a
/// hello). `None` if it sent nothing before the read deadline.
fn client_starts_tls(conn: &Conn) -> Option<bool> {
    let mut first = [0u8; 2];
    loop {
        match conn.stream.peek(&mut first) {
            Ok(0) | Err(_) => return None,
            Ok(2..) => return Some(first == [0x16, 0x03]),
            Ok(_) if first[0] != 0x16 => return Some(false),
            Ok(_) => {
                // One byte so far: wait a little for the second, within the deadline.
                if conn.deadline.get().is_some_and(|d| Instant::now() >= d) {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Runs `body` and, if the peer of `conn` hangs up meanwhile (closes or resets its side of
/// the connection), sets `cancel`. Reads nothing from `conn`: a request the peer sent
/// meanwhile stays for whoever reads next. Returns as soon as `body` has: the watcher is
/// woken through an eventfd, not left to finish a polling interval (which made every
/// third-party copy's answer up to 250 ms late).
pub(crate) fn cancel_on_hangup<T>(
    conn: &Conn,
    cancel: &crate::sync::Cancel,
    body: impl FnOnce() -> T,
) -> T {
    use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};
    const TICK: Duration = Duration::from_millis(250);
    let tick = Timespec {
        tv_sec: 0,
        tv_nsec: TICK.as_nanos() as _,
    };
    // Without an eventfd (none left), the watcher wakes once a tick as before.
    let wake = eventfd(0, EventfdFlags::CLOEXEC).ok();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let hangup = PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let mut fds = vec![PollFd::new(&conn.stream, PollFlags::RDHUP)];
                if let Some(wake) = &wake {
                    fds.push(PollFd::new(wake, PollFlags::IN));
                }
                match poll(&mut fds, Some(&tick)) {
                    Ok(_) if fds.get(1).is_some_and(|w| !w.revents().is_empty()) => return,
                    Ok(_) if fds[0].revents().intersects(hangup) => return cancel.cancel(),
                    // Data waiting (a next request): not a hangup; look again a tick later,
                    // unless woken first.
                    Ok(n) if n > 0 => {
                        if let Some(wake) = &wake {
                            let mut fds = [PollFd::new(wake, PollFlags::IN)];
                            let _ = poll(&mut fds, Some(&tick));
                        } else {
                            std::thread::sleep(TICK);
                        }
                    }
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(_) => return,
                }
            }
        });
        let out = body();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(wake) = &wake {
            let _ = rustix::io::write(wake, &1u64.to_ne_bytes());
        }
        out
    })
}
