//! Clients made by hand with the server's token, message by message: to misbehave once
//! authenticated (speak from another loopback address, open a session and go silent, stop
//! reading, announce the largest sizes the protocol allows) and to take a session through
//! orders of messages the real client uses (a pull's `Commit` right behind its `Open`, a
//! `Join` after the session ended). They speak without TLS (a server under test runs with
//! `--no-encryption`): what they do after the handshake is the same either way.
#![allow(clippy::unwrap_used)]

use sprat_proto::auth::{ClientHandshake, TokenKey};
use sprat_proto::namespace::Request;
use sprat_proto::session::client::{ClientStream, Event};
use sprat_proto::session::{Direction, Role};
use sprat_proto::{FrameHeader, Message, Operation, FRAME_HEADER_LEN};
use sprat_testkit::{Server, DEFAULT_TOKEN};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

/// The token's key as a plain connection (one without TLS, which a server started with
/// `--no-encryption` accepts) binds it: to no channel.
fn key() -> TokenKey {
    TokenKey::from_token(DEFAULT_TOKEN.as_bytes()).bound_to(&[0; 32])
}

/// Different bytes at each call (nonces and session ids need not be secret here).
fn fresh<const N: usize>() -> [u8; N] {
    static NEXT: AtomicU8 = AtomicU8::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        .to_le_bytes();
    std::array::from_fn(|i| t[i % t.len()] ^ n.wrapping_mul(i as u8 + 1))
}

/// A TCP connection to `srv` from the loopback address `from`.
pub fn connect(srv: &Server, from: &str) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("{from}:0").parse().unwrap();
    socket.bind(&local.into()).unwrap();
    socket.connect(&srv.addr().into()).unwrap();
    socket.into()
}

/// Reads one whole frame as a message (a batch is an error).
pub fn read_message(s: &mut TcpStream) -> std::io::Result<Message> {
    match read_frame(s)? {
        Frame::Msg(m) => Ok(m),
        Frame::Batch(_) => Err(std::io::Error::other("a batch where a message was due")),
    }
}

/// A frame as the server sent it: a batch (its payload's length) or a control message.
/// (Read one at a time: the size of a message beside a length costs nothing here.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Frame {
    Batch(u32),
    Msg(Message),
}

/// Reads one whole frame, a batch's payload read and dropped.
pub fn read_frame(s: &mut TcpStream) -> std::io::Result<Frame> {
    let mut header = [0u8; FRAME_HEADER_LEN];
    s.read_exact(&mut header)?;
    let header = FrameHeader::decode(&header).map_err(std::io::Error::other)?;
    let mut payload = vec![0u8; header.len as usize];
    s.read_exact(&mut payload)?;
    if header.kind == sprat_proto::frame::kind::BATCH {
        return Ok(Frame::Batch(header.len));
    }
    Message::decode(header.kind, &payload)
        .map(Frame::Msg)
        .map_err(std::io::Error::other)
}

fn direction(op: &Operation) -> Direction {
    match op {
        Operation::Push { .. } => Direction::Push,
        Operation::Pull { .. } => Direction::Pull,
    }
}

/// An authenticated connection from `from` in `role`, whose first message (`Open` or
/// `Join`) and then `behind` are sent in one write, nothing read after the server's hello.
pub fn first_message(
    srv: &Server,
    from: &str,
    (direction, role): (Direction, Role),
    first: Message,
    behind: &[Message],
) -> TcpStream {
    let mut s = connect(srv, from);
    let now = Instant::now();
    let (mut machine, hello) = ClientStream::new(direction, role, Some(key()), fresh(), now);
    s.write_all(&hello.encode()).unwrap();
    let reply = read_message(&mut s).unwrap();
    assert_eq!(machine.on_message(reply, now), Ok(Event::ServerProved));
    let mut out = Vec::new();
    for m in machine.open(first, now).unwrap().iter().chain(behind) {
        out.extend_from_slice(&m.encode());
    }
    s.write_all(&out).unwrap();
    s
}

/// A connection from `from` that says hello, reads the server's, and closes before it proves
/// the key (as sprat does with a connection it dialled ahead and did not need).
pub fn hello_then_close(srv: &Server, from: &str) {
    let mut s = connect(srv, from);
    let now = Instant::now();
    let (mut machine, hello) =
        ClientStream::new(Direction::Pull, Role::Control, Some(key()), fresh(), now);
    s.write_all(&hello.encode()).unwrap();
    let reply = read_message(&mut s).unwrap();
    assert_eq!(machine.on_message(reply, now), Ok(Event::ServerProved));
}

/// A session `session` opened from `from` (`op` on `path`) with `behind` right after the
/// `Open`; the server's answer is not read yet.
pub fn open_with(
    srv: &Server,
    from: &str,
    (session, op): ([u8; 16], Operation),
    path: &[u8],
    behind: &[Message],
) -> TcpStream {
    let role = (direction(&op), Role::Control);
    let open = Message::Open {
        session,
        op,
        path: path.to_vec(),
        selection: Default::default(),
    };
    first_message(srv, from, role, open, behind)
}

/// A new session id.
pub fn session_id() -> [u8; 16] {
    fresh()
}

/// A session opened from `from` (`op` on `path`), announced by the server.
pub fn open(srv: &Server, from: &str, op: Operation, path: &[u8]) -> TcpStream {
    let mut s = open_with(srv, from, (fresh(), op), path, &[]);
    match read_message(&mut s).unwrap() {
        Message::Opened { .. } => s,
        other => panic!("the server did not open the session: {other:?}"),
    }
}

/// A push of a tree, as sprat's client asks for one by default.
pub fn push_op() -> Operation {
    Operation::Push {
        source_is_dir: true,
        durable: false,
        discard: false,
        owners: true,
        numeric_ids: false,
        keep_existing: false,
        no_link_at_path: false,
        or_parent: false,
        source: Default::default(),
    }
}

/// A push of a tree to `path`, opened from `from`.
pub fn open_push(srv: &Server, from: &str, path: &str) -> TcpStream {
    open(srv, from, push_op(), path.as_bytes())
}

/// An authenticated connection from `from` whose first request, `req`, is sent.
pub fn request(srv: &Server, from: &str, req: Request) -> TcpStream {
    let mut s = connect(srv, from);
    let (handshake, hello) = ClientHandshake::new(Some(key()), fresh());
    s.write_all(&hello.encode()).unwrap();
    let reply = read_message(&mut s).unwrap();
    let proof = handshake.on_message(reply).unwrap();
    s.write_all(&proof.encode()).unwrap();
    s.write_all(&Message::Request(req).encode()).unwrap();
    s
}
