//! `sprat relay`: a user-space WAN emulator for tests and benchmarks (this kernel has no netem).
//!
//! Every connection accepted on `--listen` is forwarded to `--to`; with `--ports FIRST-LAST`,
//! every connection to a port in that range of the `--listen` IP is also forwarded to the same
//! port of the `--to` IP (data connections a server announces on its own ports, e.g. GridFTP's
//! passive mode). All of them share one path, which the relay models:
//! - **Delay.** Each direction delays every byte by `--delay` (one way; the round trip gains
//!   twice that). A new connection costs what a TCP handshake costs: the client's first bytes
//!   reach the server 1.5 round trips after its `connect` (the server accepts it then), and
//!   the server's first bytes reach the client no sooner than 2 round trips after it.
//! - **Bandwidth.** `--rate` is the capacity of the path in each direction, shared by all
//!   connections (a FIFO bottleneck queue), not a per-connection cap.
//! - **Window.** Each connection and direction holds at most its window of bytes in flight;
//!   bytes leave the window a full round trip after they were sent (delivery plus the
//!   acknowledgement's way back), so one connection moves at most window / RTT. The window
//!   starts at 10 segments and grows by what is acknowledged (slow start) up to `--window`,
//!   by default the largest window one TCP connection reaches under this host's buffer
//!   limits (see `sprat doctor`).
//!
//! - **Faults**, to see a transfer fail safely: `--reset-after BYTES` resets a connection once
//!   that many bytes went from client to server, `--stall-after BYTES` stops forwarding in both
//!   directions then (the connection stays open), `--flip-bit-at OFFSET` flips one bit of the
//!   client-to-server stream; `--fault-connection N` applies them to the Nth connection only.
//!   `--slow-hello TIME` holds back the server's first bytes on every connection (a busy
//!   server, whose hello comes late on a short path).
//!
//! Each connection is logged on stderr when it opens, and with the bytes it carried each way
//! when it closes.
//!
//! Not modelled: loss and congestion control (the queue never drops), and buffer sizes the
//! endpoints set on their own sockets (the relay's `--window` stands for them).

use crate::args::RelayArgs;
use anyhow::Context;
use sprat_engine::sync::{lock, unpoisoned};
use sprat_engine::tune::TcpLimits;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// TCP's initial window: 10 segments.
const INITIAL_WINDOW: usize = 10 * 1448;
/// Receive buffer of the relay's sockets: small, so that bytes beyond a connection's window
/// wait in the sender's own socket (as on a real path, where only the window is in flight)
/// rather than in a relay buffer that would accept megabytes at once.
const RELAY_RCVBUF: usize = 64 << 10;
/// Largest piece read at once.
const PIECE: usize = 64 << 10;

#[derive(Clone, Copy)]
struct Shape {
    delay: Duration,
    window: usize,
    /// Added to the time the server's first byte of each connection may arrive.
    slow_hello: Duration,
}

/// Faults injected into the client-to-server direction of a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Faults {
    reset_after: Option<u64>,
    stall_after: Option<u64>,
    flip_bit_at: Option<u64>,
}

/// What happens to a connection after the bytes just forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Nothing: go on.
    None,
    /// Reset the connection.
    Reset,
    /// Forward nothing more, keep the connection open.
    Stall,
}

impl Faults {
    fn any(&self) -> bool {
        *self != Faults::default()
    }

    /// Applies the faults to `buf`, the bytes at offset `at` of the client-to-server stream:
    /// flips the bit if it lies in them, and cuts them where a reset or stall begins.
    fn apply(&self, at: u64, buf: &mut Vec<u8>) -> Cut {
        let end = at + buf.len() as u64;
        if let Some(flip) = self.flip_bit_at.filter(|f| (at..end).contains(f)) {
            buf[(flip - at) as usize] ^= 1;
        }
        let cuts = [
            (self.reset_after, Cut::Reset),
            (self.stall_after, Cut::Stall),
        ];
        let first = cuts
            .into_iter()
            .filter_map(|(limit, cut)| limit.filter(|&l| l <= end).map(|l| (l, cut)))
            .min_by_key(|&(l, _)| l);
        match first {
            Some((limit, cut)) => {
                buf.truncate(limit.saturating_sub(at) as usize);
                cut
            }
            None => Cut::None,
        }
    }
}

/// One direction of the path: a bottleneck of `rate` bytes/s shared by every connection.
struct Link {
    rate: Option<f64>,
    free_at: Mutex<Instant>,
}

impl Link {
    /// Queues `n` bytes that arrived now; returns when their last byte has left the bottleneck.
    fn transmit(&self, n: usize) -> Instant {
        let now = Instant::now();
        let Some(rate) = self.rate else { return now };
        let mut free = lock(&self.free_at);
        let done = (*free).max(now) + Duration::from_secs_f64(n as f64 / rate);
        *free = done;
        done
    }
}

pub fn run(a: RelayArgs) -> anyhow::Result<i32> {
    let listener =
        TcpListener::bind(a.listen).with_context(|| format!("cannot listen on {}", a.listen))?;
    let extra = a
        .ports
        .clone()
        .into_iter()
        .flatten()
        .map(|p| {
            let (from, to) = (
                SocketAddr::new(a.listen.ip(), p),
                SocketAddr::new(a.to.ip(), p),
            );
            TcpListener::bind(from)
                .map(|l| (l, to))
                .with_context(|| format!("cannot listen on {from} (--ports)"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let window = match a.window.0 {
        Some(w) => w as usize,
        None => TcpLimits::read().best_window().0 as usize,
    }
    .max(INITIAL_WINDOW);
    let shape = Shape {
        delay: a.delay,
        window,
        slow_hello: a.slow_hello,
    };
    let rate = (a.rate.bytes_per_s() > 0.0).then_some(a.rate.bytes_per_s());
    let link = |rate| {
        Arc::new(Link {
            rate,
            free_at: Mutex::new(Instant::now()),
        })
    };
    let path = Path {
        shape,
        up: link(rate),
        down: link(rate),
        faults: Faults {
            reset_after: a.reset_after,
            stall_after: a.stall_after,
            flip_bit_at: a.flip_bit_at,
        },
        fault_connection: a.fault_connection,
        accepted: Arc::default(),
    };
    crate::print_quietly(&format!("listening on {}\n", listener.local_addr()?))?;
    eprintln!(
        "sprat relay: {} -> {}{}: RTT {:.1} ms, {} per direction (shared), window {} per connection",
        a.listen,
        a.to,
        a.ports.as_ref().map_or(String::new(), |r| format!(
            ", ports {}-{} -> the same ports of {}",
            r.start(),
            r.end(),
            a.to.ip()
        )),
        a.delay.as_secs_f64() * 2e3,
        rate.map_or("no rate cap".to_string(), |r| format!(
            "{:.0} Mbit/s",
            r * 8e-6
        )),
        sprat_engine::report::human_bytes(window as u64),
    );
    for (l, to) in extra {
        let _ = socket2::SockRef::from(&l).set_recv_buffer_size(RELAY_RCVBUF);
        let path = path.clone();
        std::thread::spawn(move || path.serve(l, to));
    }
    let _ = socket2::SockRef::from(&listener).set_recv_buffer_size(RELAY_RCVBUF);
    path.serve(listener, a.to);
    Ok(0)
}

/// The emulated path every forwarded connection shares: its shape, its two links, the faults
/// to inject and on which connection (`None`: every one), and the connections accepted so far.
#[derive(Clone)]
struct Path {
    shape: Shape,
    up: Arc<Link>,
    down: Arc<Link>,
    faults: Faults,
    fault_connection: Option<u64>,
    accepted: Arc<std::sync::atomic::AtomicU64>,
}

impl Path {
    /// Forwards every connection accepted on `listener` to `to`; logs each on stderr, and
    /// what it carried once it closed.
    fn serve(&self, listener: TcpListener, to: SocketAddr) {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            if let (Ok(from), Ok(at)) = (client.peer_addr(), client.local_addr()) {
                eprintln!("sprat relay: {from} -> {at} -> {to}");
            }
            let Path {
                shape, up, down, ..
            } = self.clone();
            let nth = self.accepted.fetch_add(1, Ordering::SeqCst) + 1;
            let faults = match self.fault_connection {
                Some(n) if n != nth => Faults::default(),
                _ => self.faults,
            };
            if faults.any() {
                eprintln!("sprat relay: connection {nth}: injecting {faults:?}");
            }
            let stalled = Arc::new(AtomicBool::new(false));
            let accepted = Instant::now();
            std::thread::spawn(move || {
                // A real connection costs a round trip before the first byte can flow: the
                // client's bytes leave after it and arrive one delay later. The server, which
                // this relay reaches at once, could on a real path only answer a first byte
                // half a round trip later than that (when the handshake's last ACK arrives).
                std::thread::sleep(shape.delay * 2);
                let server_first = accepted + shape.delay * 4 + shape.slow_hello;
                let server = match TcpStream::connect(to) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("sprat relay: cannot connect to {to}: {e}");
                        return;
                    }
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let _ = socket2::SockRef::from(&server).set_recv_buffer_size(RELAY_RCVBUF);
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                    return;
                };
                let up_end = Ends {
                    faults,
                    stalled: stalled.clone(),
                };
                let forward =
                    std::thread::spawn(move || pipe(client, server, shape, &up, accepted, up_end));
                let down_end = Ends {
                    faults: Faults::default(),
                    stalled,
                };
                let down = pipe(s2, c2, shape, &down, server_first, down_end);
                let up = forward.join().unwrap_or_default();
                eprintln!(
                    "sprat relay: connection {nth} closed: {up} bytes to the server, {down} to the client"
                );
            });
        }
    }
}

/// Bytes of one connection and direction in flight, and when they will be acknowledged.
struct Window {
    cwnd: usize,
    max: usize,
    in_flight: usize,
    acks: VecDeque<(Instant, usize)>,
    closed: bool,
}

impl Window {
    /// Takes the acknowledgements due by `now` (slow start: the window grows by what they
    /// acknowledge).
    fn settle(&mut self, now: Instant) {
        while let Some(&(at, n)) = self.acks.front() {
            if at > now {
                break;
            }
            self.acks.pop_front();
            self.in_flight -= n;
            self.cwnd = (self.cwnd + n).min(self.max);
        }
    }
}

/// The faults one direction of a connection injects, and the connection's stall, which
/// stops both directions.
struct Ends {
    faults: Faults,
    stalled: Arc<AtomicBool>,
}

/// Resets a connection: both sockets close without lingering (a reset, not an orderly end).
fn reset(a: &TcpStream, b: &TcpStream) {
    for s in [a, b] {
        let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
        let _ = s.shutdown(Shutdown::Both);
    }
}

/// Holds a stalled connection open, forwarding nothing, until the relay ends.
fn stall_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Forwards `from` to `to` through `link` with the delay and window of `shape`, delivering
/// nothing before `not_before`, with `ends`' faults; ends on end of stream. Returns the bytes
/// forwarded.
fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    shape: Shape,
    link: &Link,
    not_before: Instant,
    ends: Ends,
) -> u64 {
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>, Cut)>();
    let window = Arc::new((
        Mutex::new(Window {
            cwnd: INITIAL_WINDOW.min(shape.window),
            max: shape.window,
            in_flight: 0,
            acks: VecDeque::new(),
            closed: false,
        }),
        Condvar::new(),
    ));
    let writer_window = window.clone();
    let delay = shape.delay;
    let Ok(from_handle) = from.try_clone() else {
        return 0;
    };
    let writer_stalled = ends.stalled.clone();
    let writer = std::thread::spawn(move || {
        let (window_lock, acked) = &*writer_window;
        for (deliver_at, buf, cut) in rx {
            let now = Instant::now();
            if deliver_at > now {
                std::thread::sleep(deliver_at - now);
            }
            if writer_stalled.load(Ordering::SeqCst) {
                stall_forever();
            }
            if !buf.is_empty() && to.write_all(&buf).is_err() {
                let _ = to.shutdown(Shutdown::Both);
                break;
            }
            match cut {
                Cut::Reset => {
                    reset(&to, &from_handle);
                    break;
                }
                Cut::Stall => {
                    writer_stalled.store(true, Ordering::SeqCst);
                    stall_forever();
                }
                Cut::None => {}
            }
            if buf.is_empty() {
                let _ = to.shutdown(Shutdown::Write);
                break;
            }
            let mut w = lock(window_lock);
            w.acks.push_back((Instant::now() + delay, buf.len()));
            acked.notify_all();
        }
        // Unblock a reader waiting for window space after the far side went away.
        lock(window_lock).closed = true;
        acked.notify_all();
    });
    let (window_lock, acked) = &*window;
    let mut forwarded = 0u64;
    loop {
        let room = {
            let mut w = lock(window_lock);
            loop {
                w.settle(Instant::now());
                if w.closed {
                    break 0;
                }
                if w.in_flight < w.cwnd {
                    break (w.cwnd - w.in_flight).min(PIECE);
                }
                let wait = w
                    .acks
                    .front()
                    .map_or(Duration::from_millis(100), |&(at, _)| {
                        at.saturating_duration_since(Instant::now())
                    });
                w = unpoisoned(acked.wait_timeout(w, wait)).0;
            }
        };
        if room == 0 {
            break;
        }
        let mut buf = vec![0u8; room];
        let got = from.read(&mut buf).unwrap_or(0);
        buf.truncate(got);
        let cut = ends.faults.apply(forwarded, &mut buf);
        let got = buf.len();
        forwarded += got as u64;
        let deliver_at = (link.transmit(got) + shape.delay).max(not_before);
        lock(window_lock).in_flight += got;
        if tx.send((deliver_at, buf, cut)).is_err() || got == 0 || cut != Cut::None {
            break;
        }
    }
    drop(tx);
    let _ = writer.join();
    forwarded
}

#[cfg(test)]
mod tests {
    use super::{Cut, Faults};

    #[test]
    fn faults_flip_one_bit_and_cut_where_they_begin() {
        let faults = Faults {
            reset_after: Some(10),
            stall_after: None,
            flip_bit_at: Some(6),
        };
        let mut first = vec![0u8; 4];
        assert_eq!(faults.apply(0, &mut first), Cut::None);
        assert_eq!(first, [0; 4]);
        let mut second = vec![0u8; 8];
        assert_eq!(faults.apply(4, &mut second), Cut::Reset);
        assert_eq!(second, [0, 0, 1, 0, 0, 0]);
        let stall_first = Faults {
            reset_after: Some(20),
            stall_after: Some(15),
            flip_bit_at: None,
        };
        let mut buf = vec![0u8; 100];
        assert_eq!(stall_first.apply(0, &mut buf), Cut::Stall);
        assert_eq!(buf.len(), 15);
        assert!(!Faults::default().any());
    }

    #[test]
    fn parses_port_ranges() {
        use crate::args::parse_port_range;
        assert_eq!(parse_port_range("50000-50015").ok(), Some(50000..=50015));
        assert_eq!(parse_port_range("7000").ok(), Some(7000..=7000));
        for bad in ["0-10", "10-5", "1-2000", "x"] {
            assert!(parse_port_range(bad).is_err(), "{bad}");
        }
    }
}
