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
//! Not modelled: loss and congestion control (the queue never drops), and buffer sizes the
//! endpoints set on their own sockets (the relay's `--window` stands for them).

use crate::args::RelayArgs;
use anyhow::Context;
use sprat_engine::sync::{lock, unpoisoned};
use sprat_engine::tune::TcpLimits;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
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

/// The emulated path every forwarded connection shares: its shape and its two links.
#[derive(Clone)]
struct Path {
    shape: Shape,
    up: Arc<Link>,
    down: Arc<Link>,
}

impl Path {
    /// Forwards every connection accepted on `listener` to `to`; logs each on stderr.
    fn serve(&self, listener: TcpListener, to: SocketAddr) {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            if let (Ok(from), Ok(at)) = (client.peer_addr(), client.local_addr()) {
                eprintln!("sprat relay: {from} -> {at} -> {to}");
            }
            let Path { shape, up, down } = self.clone();
            let accepted = Instant::now();
            std::thread::spawn(move || {
                // A real connection costs a round trip before the first byte can flow: the
                // client's bytes leave after it and arrive one delay later. The server, which
                // this relay reaches at once, could on a real path only answer a first byte
                // half a round trip later than that (when the handshake's last ACK arrives).
                std::thread::sleep(shape.delay * 2);
                let server_first = accepted + shape.delay * 4;
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
                let forward =
                    std::thread::spawn(move || pipe(client, server, shape, &up, accepted));
                pipe(s2, c2, shape, &down, server_first);
                let _ = forward.join();
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

/// Forwards `from` to `to` through `link` with the delay and window of `shape`, delivering
/// nothing before `not_before`; ends on end of stream.
fn pipe(mut from: TcpStream, mut to: TcpStream, shape: Shape, link: &Link, not_before: Instant) {
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
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
    let writer = std::thread::spawn(move || {
        let (window_lock, acked) = &*writer_window;
        for (deliver_at, buf) in rx {
            let now = Instant::now();
            if deliver_at > now {
                std::thread::sleep(deliver_at - now);
            }
            if buf.is_empty() {
                let _ = to.shutdown(Shutdown::Write);
                break;
            }
            if to.write_all(&buf).is_err() {
                let _ = to.shutdown(Shutdown::Both);
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
        let deliver_at = (link.transmit(got) + shape.delay).max(not_before);
        lock(window_lock).in_flight += got;
        if tx.send((deliver_at, buf)).is_err() || got == 0 {
            break;
        }
    }
    drop(tx);
    let _ = writer.join();
}

#[cfg(test)]
mod tests {
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
