//! A loopback TCP relay that sits between a client and a server and records what crosses it.
//!
//! Point the client at [`Relay::url`] instead of the server: every connection is forwarded to
//! the server, and all bytes in both directions are kept (up to 64 MiB each way) so a test can
//! check what went over the wire, e.g. that a secret never crossed it in the clear. Built with
//! [`Relay::start_cutting_after`], the relay drops every connection once that many bytes have
//! crossed it (both directions counted): a connection lost mid-transfer while the server stays
//! up. Built with [`Relay::start_first_to`], the first connection goes to another server than
//! the rest (an impostor on the path of one stream of a session).
//!
//! Listens on 127.0.0.1 only and connects only to the address it is given. Not a network
//! emulator: no delay, no bandwidth limit.

use crate::sync::lock;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

const RECORD_CAP: usize = 64 << 20;

#[derive(Default)]
struct Shared {
    to_server: Mutex<Vec<u8>>,
    to_client: Mutex<Vec<u8>>,
    streams: Mutex<Vec<TcpStream>>,
    forwarded: AtomicU64,
    connections: AtomicU64,
    cut: AtomicBool,
    stop: AtomicBool,
}

impl Shared {
    fn cut_all(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for s in lock(&self.streams).iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// A running relay; stops and drops all its connections when dropped.
pub struct Relay {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    to_server: bool,
    shared: Arc<Shared>,
    cut_after: Option<u64>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if shared.cut.load(Ordering::SeqCst) {
            break;
        }
        {
            let rec = if to_server {
                &shared.to_server
            } else {
                &shared.to_client
            };
            let mut rec = lock(rec);
            if rec.len() < RECORD_CAP {
                rec.extend_from_slice(&buf[..n]);
            }
        }
        let mut n_send = n;
        let mut cut_now = false;
        let before = shared.forwarded.fetch_add(n as u64, Ordering::SeqCst);
        if let Some(limit) = cut_after {
            if before + n as u64 >= limit {
                n_send = limit.saturating_sub(before) as usize;
                cut_now = true;
            }
        }
        if to.write_all(&buf[..n_send]).is_err() {
            break;
        }
        if cut_now {
            shared.cut_all();
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

impl Relay {
    /// A relay that forwards every connection to `target` and records both directions.
    pub fn start(target: SocketAddr) -> Relay {
        Relay::start_inner((target, target), None)
    }

    /// Like [`Relay::start`], but once `bytes` have crossed the relay (both directions counted),
    /// every connection is shut down and new ones are refused.
    pub fn start_cutting_after(target: SocketAddr, bytes: u64) -> Relay {
        Relay::start_inner((target, target), Some(bytes))
    }

    /// Like [`Relay::start`], but the first connection accepted goes to `first` and every
    /// later one to `rest`.
    pub fn start_first_to(first: SocketAddr, rest: SocketAddr) -> Relay {
        Relay::start_inner((first, rest), None)
    }

    fn start_inner((first, rest): (SocketAddr, SocketAddr), cut_after: Option<u64>) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("relay: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("relay: {e}"));
        listener
            .set_nonblocking(true)
            .unwrap_or_else(|e| panic!("relay: {e}"));
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        let accept = std::thread::spawn(move || {
            while !sh.stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        if sh.cut.load(Ordering::SeqCst) {
                            drop(client);
                            continue;
                        }
                        let _ = client.set_nonblocking(false);
                        let target = match sh.connections.load(Ordering::SeqCst) {
                            0 => first,
                            _ => rest,
                        };
                        let Ok(server) = TcpStream::connect(target) else {
                            drop(client);
                            continue;
                        };
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        sh.connections.fetch_add(1, Ordering::SeqCst);
                        let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (
                            client.try_clone(),
                            server.try_clone(),
                            client.try_clone(),
                            server.try_clone(),
                        ) else {
                            continue;
                        };
                        {
                            let mut streams = lock(&sh.streams);
                            streams.push(c3);
                            streams.push(s3);
                        }
                        let (sh1, sh2) = (sh.clone(), sh.clone());
                        std::thread::spawn(move || pump(client, server, true, sh1, cut_after));
                        std::thread::spawn(move || pump(s2, c2, false, sh2, cut_after));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Relay {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// The relay's own address (what the client should connect to).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `sprat://127.0.0.1:RELAYPORT/` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("sprat://{}/{}", self.addr, path)
    }

    /// All bytes clients sent towards the server so far.
    pub fn client_to_server(&self) -> Vec<u8> {
        lock(&self.shared.to_server).clone()
    }

    /// All bytes the server sent towards clients so far.
    pub fn server_to_client(&self) -> Vec<u8> {
        lock(&self.shared.to_client).clone()
    }

    /// How many connections the relay has forwarded.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Bytes forwarded so far, both directions.
    pub fn forwarded(&self) -> u64 {
        self.shared.forwarded.load(Ordering::SeqCst)
    }

    /// True once the relay has cut the connections.
    pub fn has_cut(&self) -> bool {
        self.shared.cut.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cut_all();
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}
