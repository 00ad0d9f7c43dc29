//! The engine's server (`sprat_engine::Server`, the code behind `sprat serve`) fed whole
//! connections: it runs in this process on a loopback port with a temporary root, and each
//! input is one connection that (usually) completes the handshake honestly and then sends an
//! arbitrary sequence of control messages, raw frames and batches (valid, corrupted or
//! naming odd paths): sessions opened and joined, pushes with their batches, `End` and
//! `Commit`, pulls, namespace requests (`ls`, `stat`, `du`, `mkdir`, `rm`, `mv`, `sum`,
//! `Delegate`, `SendTo`, `Locate`). Invariants:
//!
//! - the server answers only with well-formed frames (each decodes);
//! - nothing outside the root changes: a sentinel directory beside the root, which a symlink
//!   inside the root points to, keeps exactly its one file and its content;
//! - the server keeps serving (the next input connects and is answered).
//!
//! A third-party `SendTo` is pointed at a loopback address (the server itself, or a closed
//! port): no input makes the server reach beyond this machine. The root is put back to its
//! small fixture tree before each input.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use sprat_engine::config::IoBackend;
use sprat_engine::{
    ExportsConfig, Server, ServerConfig, ServerIdentity, ServerTls, TokenKey, TransferOptions,
    MIN_CLIENT_MEMORY,
};
use sprat_proto::auth::ClientHandshake;
use sprat_proto::frame::kind;
use sprat_proto::namespace::Request;
use sprat_proto::{
    Batch, BatchView, ChunkOf, FileMeta, FrameHeader, KeepRule, Message, FRAME_HEADER_LEN,
};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use xxhash_rust::xxh3::xxh3_128;

const TOKEN: &[u8] = b"fuzz-token";
const SENTINEL: &[u8] = b"outside the root: never touched";

struct Fixture {
    _dir: tempfile::TempDir,
    _key_dir: tempfile::TempDir,
    top: PathBuf,
    root: PathBuf,
    outside: PathBuf,
    addr: SocketAddr,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        // A Rust program ignores SIGPIPE before `main` (a write to a closed socket is then an
        // EPIPE error, as `sprat serve` sees it); a libFuzzer target has no Rust `main`, so the
        // server's writes to a connection the input closed would kill the process instead.
        // SAFETY: setting a signal's disposition to SIG_IGN, before any thread of ours runs.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        let dir = tempfile::tempdir().expect("temporary directory");
        let top = dir.path().to_path_buf();
        let root = top.join("root");
        let outside = top.join("outside");
        std::fs::create_dir_all(&root).expect("root");
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::write(outside.join("sentinel"), SENTINEL).expect("sentinel");
        let options = TransferOptions {
            scan_threads: 1,
            read_threads: 1,
            write_threads: 1,
            io_backend: IoBackend::Uring,
            stall_timeout: Duration::from_secs(2),
            ..TransferOptions::default()
        };
        let key_dir = tempfile::tempdir().expect("temporary directory for the server's key");
        let identity =
            ServerIdentity::load_or_create(&key_dir.path().join("key")).expect("server key");
        let config = ServerConfig {
            exports: ExportsConfig::Default {
                root: root.clone(),
                read_only: false,
                key: Some(TokenKey::from_token(TOKEN)),
            },
            // Plain connections allowed: the inputs speak sprat's frames, not TLS.
            tls: ServerTls::new(&identity, true).expect("TLS set-up"),
            options,
            max_connections: 64,
            max_connections_per_address: 64,
            max_client_memory: MIN_CLIENT_MEMORY,
            idle_timeout: Duration::from_secs(5),
            third_party: true,
        };
        let server = Server::bind(config, "127.0.0.1:0").expect("server binds on loopback");
        let addr = server.local_addr().expect("server address");
        std::thread::spawn(move || server.run());
        Fixture {
            _dir: dir,
            _key_dir: key_dir,
            top,
            root,
            outside,
            addr,
        }
    })
}

/// Puts the root back to its fixture tree: files, directories, and a symlink that points
/// outside the root.
fn reset(root: &Path) {
    if let Ok(entries) = std::fs::read_dir(root) {
        for e in entries.flatten() {
            let p = e.path();
            let _ = match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&p),
                _ => std::fs::remove_file(&p),
            };
        }
    }
    let _ = std::fs::create_dir_all(root.join("d/e"));
    let _ = std::fs::write(root.join("a"), b"hello");
    let _ = std::fs::write(root.join("d/e/f"), vec![7u8; 3000]);
    let _ = std::os::unix::fs::symlink("../outside", root.join("l"));
}

/// Checks that nothing beside the root changed.
fn check_outside(f: &Fixture) {
    let mut top: Vec<_> = std::fs::read_dir(&f.top)
        .expect("read the temporary directory")
        .map(|e| e.expect("entry").file_name())
        .collect();
    top.sort();
    assert_eq!(
        top,
        ["outside", "root"],
        "an entry appeared beside the root"
    );
    let inside: Vec<_> = std::fs::read_dir(&f.outside)
        .expect("the directory outside the root is still there")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        inside,
        ["sentinel"],
        "the directory outside the root changed"
    );
    assert_eq!(
        std::fs::read(f.outside.join("sentinel")).expect("sentinel still there"),
        SENTINEL,
        "the file outside the root changed"
    );
}

#[derive(Arbitrary, Debug)]
enum Send {
    Message,
    /// A frame of this kind with these payload bytes, as a peer may send anything.
    Raw(u8, Vec<u8>),
    Batch {
        seq: u8,
        corrupt: Option<u16>,
    },
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    reset(&f.root);
    let mut u = Unstructured::new(data);
    let Ok(stream) = connect(f) else {
        panic!("the server stopped accepting connections");
    };
    let _ = converse(&mut u, stream, f.addr);
    check_outside(f);
});

fn connect(f: &Fixture) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(f.addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn converse(
    u: &mut Unstructured<'_>,
    mut s: TcpStream,
    server: SocketAddr,
) -> arbitrary::Result<()> {
    let mut received = Vec::new();
    // An honest handshake first, unless the input skips it.
    if u.ratio(15, 16)? {
        // A plain connection's proofs are bound to a channel of zeros.
        let key = TokenKey::from_token(TOKEN).bound_to(&[0; 32]);
        let (client, hello) = ClientHandshake::new(Some(key), [5; 32]);
        if s.write_all(&hello.encode()).is_err() {
            return Ok(());
        }
        let Some(reply) = read_frame(&mut s, &mut received) else {
            return Ok(());
        };
        let Ok(proof) = client.on_message(reply) else {
            panic!("the server did not prove the token");
        };
        if s.write_all(&proof.encode()).is_err() {
            return Ok(());
        }
    }
    let mut out = Vec::new();
    let mut n = 0;
    while !u.is_empty() && n < 24 {
        n += 1;
        match Send::arbitrary(u)? {
            Send::Message => {
                let m = loopback_only(sprat_fuzz::arb_message(u)?, server, u)?;
                out.extend_from_slice(&m.encode());
            }
            Send::Raw(k, payload) => match Message::decode(k, &payload) {
                // What decodes is sent re-encoded, with any SendTo kept on loopback.
                Ok(m) => out.extend_from_slice(&loopback_only(m, server, u)?.encode()),
                Err(_) => {
                    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                    out.push(k);
                    out.extend_from_slice(&payload);
                }
            },
            Send::Batch { seq, corrupt } => {
                let mut frame = arb_batch(u, u64::from(seq))?;
                if let Some(at) = corrupt {
                    let at = FRAME_HEADER_LEN + usize::from(at) % (frame.len() - FRAME_HEADER_LEN);
                    frame[at] ^= 0x5a;
                }
                out.extend_from_slice(&frame);
            }
        }
    }
    let _ = s.write_all(&out);
    let _ = s.shutdown(Shutdown::Write);
    let _ = s.read_to_end(&mut received);
    check_answers(&received);
    Ok(())
}

/// Points a third-party copy at loopback: the server itself or a closed port.
fn loopback_only(
    m: Message,
    server: SocketAddr,
    u: &mut Unstructured<'_>,
) -> arbitrary::Result<Message> {
    Ok(match m {
        Message::Request(Request::SendTo {
            path,
            ticket,
            dest,
            streams,
            durable,
            no_link_at_dest,
            check,
            meta,
            stall_timeout_ms,
            dest_key,
            selection,
            ..
        }) => Message::Request(Request::SendTo {
            path,
            addr: if u.arbitrary()? {
                server.to_string()
            } else {
                "127.0.0.1:1".into()
            },
            ticket,
            dest,
            streams: streams % 4,
            durable,
            no_link_at_dest,
            check,
            meta,
            stall_timeout_ms: stall_timeout_ms % 3000,
            dest_key,
            selection,
        }),
        other => other,
    })
}

/// A batch frame of a few entries with plausible paths.
fn arb_batch(u: &mut Unstructured<'_>, seq: u64) -> arbitrary::Result<Vec<u8>> {
    let mut b = Batch::new(seq, 0);
    let meta = FileMeta {
        mode: u.int_in_range(0..=0o7777)?,
        mtime_sec: u.int_in_range(0..=2_000_000_000)?,
        mtime_nsec: 0,
        uid: u.arbitrary()?,
        gid: u.arbitrary()?,
    };
    for _ in 0..u.int_in_range(0..=4)? {
        let path = sprat_fuzz::arb_path(u)?;
        match u.int_in_range(0..=6)? {
            0 => {
                let data: Vec<u8> = u.arbitrary()?;
                let hash = if u.ratio(7, 8)? {
                    xxh3_128(&data)
                } else {
                    u.arbitrary()?
                };
                // Sometimes one of a push's first files, which the server checks itself.
                let unless = *u.choose(&[
                    None,
                    Some(KeepRule::SameSizeAndTime),
                    Some(KeepRule::Present),
                ])?;
                b.data.extend_from_slice(&data);
                b.push_file_unless(&path, &meta, data.len() as u64, hash, unless);
            }
            1 => b.push_dir(&path, &meta),
            2 => b.push_symlink(
                &path,
                &meta,
                u.choose(&[&b"a"[..], b"../outside", b"/etc"])?,
            ),
            3 => {
                let data: Vec<u8> = u.arbitrary()?;
                if data.is_empty() {
                    continue;
                }
                let offset = u64::from(u.int_in_range(0u16..=64)?);
                let size = offset + data.len() as u64 + u64::from(u.int_in_range(0u8..=3)?);
                let whole = u.arbitrary()?;
                // Sometimes a file to check, below a directory the sender could not list.
                let unless = match whole {
                    true => *u.choose(&[
                        None,
                        Some(KeepRule::SameSizeAndTime),
                        Some(KeepRule::Present),
                    ])?,
                    false => None,
                };
                let of = ChunkOf {
                    file_size: size,
                    version: u64::from(u.int_in_range(0u8..=2)?),
                    whole,
                    unless,
                };
                b.data.extend_from_slice(&data);
                b.push_chunk(&path, &meta, of, offset, data.len() as u64, xxh3_128(&data));
            }
            4 => b.push_failed(&path, "unreadable"),
            // A FIFO, or a device (which a server makes only with --keep-devices, as root).
            5 => {
                let (kind, number) = *u.choose(&[
                    (sprat_proto::SpecialKind::Fifo, (0, 0)),
                    (sprat_proto::SpecialKind::Socket, (0, 0)),
                    (sprat_proto::SpecialKind::CharDevice, (1, 3)),
                    (sprat_proto::SpecialKind::BlockDevice, (7, 0)),
                ])?;
                b.push_special(&path, &meta, kind, number)
            }
            _ => b.push_attrs(&path, &meta, u.int_in_range(0..=5000)?),
        }
    }
    let mut frame = b.frame_prefix().to_vec();
    frame.extend_from_slice(&b.header);
    frame.extend_from_slice(&b.data);
    Ok(frame)
}

/// Reads one control frame (the server's hello), keeping its bytes.
fn read_frame(s: &mut TcpStream, received: &mut Vec<u8>) -> Option<Message> {
    let mut head = [0u8; FRAME_HEADER_LEN];
    s.read_exact(&mut head).ok()?;
    let header = FrameHeader::decode(&head).expect("the server sent a valid frame header");
    let mut payload = vec![0u8; header.len as usize];
    s.read_exact(&mut payload).ok()?;
    received.clear();
    Some(Message::decode(header.kind, &payload).expect("the server's hello decodes"))
}

/// Every complete frame the server sent decodes.
fn check_answers(mut bytes: &[u8]) {
    while bytes.len() >= FRAME_HEADER_LEN {
        let mut head = [0u8; FRAME_HEADER_LEN];
        head.copy_from_slice(&bytes[..FRAME_HEADER_LEN]);
        let header = FrameHeader::decode(&head)
            .unwrap_or_else(|e| panic!("the server sent a bad frame header: {e}"));
        let end = FRAME_HEADER_LEN + header.len as usize;
        if bytes.len() < end {
            return;
        }
        let payload = &bytes[FRAME_HEADER_LEN..end];
        if header.kind == kind::BATCH {
            if let Err(e) = BatchView::decode(payload) {
                panic!("the server sent a batch that does not decode: {e}");
            }
        } else if let Err(e) = Message::decode(header.kind, payload) {
            panic!("the server sent a message that does not decode: {e}");
        }
        bytes = &bytes[end..];
    }
}
