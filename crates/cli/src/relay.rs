//! `sprat relay`: a user-space WAN emulator for tests and benchmarks (this kernel has no netem).
//!
//! Every connection accepted on `--listen` is forwarded to `--to`. Each direction delays every
//! byte by `--delay` (one way, so the round trip gains twice that), optionally paces it to
//! `--rate`, and holds at most `--window` bytes in flight, so a single TCP stream through the
//! relay is limited to about window / RTT as on a real long path.

use crate::args::RelayArgs;
use anyhow::Context;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Parses `15ms`, `0.1ms`, `2s`, `100us` (a bare number is milliseconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (e.g. 15ms)"))?;
    let secs = match unit {
        "" | "ms" => v / 1e3,
        "us" => v / 1e6,
        "s" => v,
        other => {
            return Err(format!(
                "unknown duration unit '{other}' in '{text}' (use us, ms, s)"
            ))
        }
    };
    if !(0.0..=3600.0).contains(&secs) {
        return Err(format!("duration '{text}' is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses `1gbit`, `100mbit`, `500kbit`, `0` (unlimited) into bytes per second.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let t = text.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{text}' is not a rate (e.g. 1gbit)"))?;
    let bits = match unit {
        "" | "bit" => v,
        "kbit" => v * 1e3,
        "mbit" => v * 1e6,
        "gbit" => v * 1e9,
        other => {
            return Err(format!(
                "unknown rate unit '{other}' in '{text}' (use kbit, mbit, gbit)"
            ))
        }
    };
    Ok(bits / 8.0)
}

#[derive(Clone, Copy)]
struct Shape {
    delay: Duration,
    rate: Option<f64>,
    window: usize,
}

pub fn run(a: RelayArgs) -> anyhow::Result<i32> {
    let listener =
        TcpListener::bind(a.listen).with_context(|| format!("cannot listen on {}", a.listen))?;
    let shape = Shape {
        delay: a.delay,
        rate: (a.rate > 0.0).then_some(a.rate),
        window: (a.window as usize).max(64 << 10),
    };
    crate::print_quietly(&format!("listening on {}\n", listener.local_addr()?))?;
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let to = a.to;
        std::thread::spawn(move || {
            // A real connection costs a round trip before the first byte can flow.
            std::thread::sleep(shape.delay * 2);
            let server = match TcpStream::connect(to) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("sprat relay: cannot connect to {to}: {e}");
                    return;
                }
            };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                return;
            };
            let up = std::thread::spawn(move || pipe(client, server, shape));
            pipe(s2, c2, shape);
            let _ = up.join();
        });
    }
    Ok(0)
}

/// Forwards `from` to `to` with the delay, pace and window of `shape`; ends on end of stream.
fn pipe(mut from: TcpStream, mut to: TcpStream, shape: Shape) {
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let in_flight = Arc::new((Mutex::new(0usize), Condvar::new()));
    let reader_flight = in_flight.clone();
    let reader = std::thread::spawn(move || {
        let (lock, freed) = &*reader_flight;
        loop {
            {
                let mut n = lock.lock().unwrap_or_else(|p| p.into_inner());
                while *n >= shape.window {
                    n = freed.wait(n).unwrap_or_else(|p| p.into_inner());
                }
            }
            let mut buf = vec![0u8; 64 << 10];
            let got = from.read(&mut buf).unwrap_or(0);
            buf.truncate(got);
            *lock.lock().unwrap_or_else(|p| p.into_inner()) += got;
            if tx.send((Instant::now(), buf)).is_err() || got == 0 {
                return;
            }
        }
    });
    let (lock, freed) = &*in_flight;
    let mut line_free = Instant::now();
    for (arrived, buf) in rx {
        let mut send_at = arrived + shape.delay;
        if let Some(rate) = shape.rate {
            send_at = send_at.max(line_free);
            line_free = send_at + Duration::from_secs_f64(buf.len() as f64 / rate);
        }
        let now = Instant::now();
        if send_at > now {
            std::thread::sleep(send_at - now);
        }
        if buf.is_empty() {
            let _ = to.shutdown(Shutdown::Write);
            break;
        }
        if to.write_all(&buf).is_err() {
            let _ = to.shutdown(Shutdown::Both);
            break;
        }
        *lock.lock().unwrap_or_else(|p| p.into_inner()) -= buf.len();
        freed.notify_all();
    }
    // Unblock a reader waiting for window space after the far side went away.
    *lock.lock().unwrap_or_else(|p| p.into_inner()) = 0;
    freed.notify_all();
    let _ = reader.join();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations_and_rates() {
        assert_eq!(parse_duration("15ms"), Ok(Duration::from_millis(15)));
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_millis(2)));
        assert!(parse_duration("5h").is_err());
        assert_eq!(parse_rate("1gbit"), Ok(125e6));
        assert_eq!(parse_rate("0"), Ok(0.0));
        assert!(parse_rate("fast").is_err());
    }
}
