//! Long paths: `sprat relay` behaves like a path of the given round trip, shared bandwidth and
//! TCP window (checked with lower bounds on time, which a slow machine cannot break), sprat
//! sessions through it measure the round trip, choose and grow their streams and report the
//! tail, and `sprat doctor` reads the host's limits and measures a server.
#![allow(clippy::unwrap_used)]

mod common;

use common::{
    assert_error_names, assert_exit, assert_ok, bin, cp, no_wrong_file, server, tmp, RelayProc,
};
use serde_json::Value;
use sprat_testkit::{assert_trees_equal, describe, run_sprat, tree};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A TCP sink that reads every connection to its end and sends back what it counted.
fn sink() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                let mut n = 0u64;
                loop {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => {
                            n += k as u64;
                            // A single byte is a ping: answer it at once.
                            if k == 1 && n == 1 {
                                let _ = c.write_all(b"p");
                            }
                        }
                    }
                }
                let _ = c.write_all(&n.to_le_bytes());
            });
        }
    });
    addr
}

/// Sends `bytes` over a new connection to `addr`; returns what the far end counted.
fn send(addr: SocketAddr, bytes: usize) -> u64 {
    let mut c = TcpStream::connect(addr).unwrap();
    let chunk = vec![7u8; 1 << 16];
    let mut left = bytes;
    while left > 0 {
        let k = left.min(chunk.len());
        c.write_all(&chunk[..k]).unwrap();
        left -= k;
    }
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut n = [0u8; 8];
    c.read_exact(&mut n).unwrap();
    u64::from_le_bytes(n)
}

#[test]
fn relay_delays_each_round_trip() {
    let relay = RelayProc::start(sink(), &["--delay", "25ms"]);
    let mut c = TcpStream::connect(relay.addr).unwrap();
    c.set_nodelay(true).unwrap();
    // The first byte also waits for the connection's own handshake round trip.
    let started = Instant::now();
    c.write_all(b"x").unwrap();
    let mut p = [0u8; 1];
    c.read_exact(&mut p).unwrap();
    let rtt = started.elapsed();
    assert!(
        rtt >= Duration::from_millis(48),
        "round trip {rtt:?} < 2 x 25 ms"
    );
}

/// A server speaks first (a greeting) as soon as it accepts; on a real path its first bytes
/// reach the client two round trips after `connect`: the handshake's, then their own.
#[test]
fn relay_delivers_a_servers_first_bytes_two_round_trips_after_connect() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let greeter = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let _ = c.write_all(b"hello");
            std::thread::sleep(Duration::from_secs(2));
        }
    });
    let relay = RelayProc::start(greeter, &["--delay", "25ms"]);
    let started = Instant::now();
    let mut c = TcpStream::connect(relay.addr).unwrap();
    let mut hello = [0u8; 5];
    c.read_exact(&mut hello).unwrap();
    let took = started.elapsed();
    assert_eq!(&hello, b"hello");
    assert!(
        took >= Duration::from_millis(98),
        "the greeting came {took:?} after connect, before 2 x 50 ms"
    );
}

#[test]
fn relay_limits_one_connection_to_window_over_round_trip() {
    // 1 MiB through a 128 KiB window at 40 ms: at least 8 round trips (0.32 s), more with
    // slow start. Without the window it would take about one round trip.
    let relay = RelayProc::start(sink(), &["--delay", "20ms", "--window", "128KiB"]);
    let started = Instant::now();
    assert_eq!(
        send(relay.addr, 1 << 20),
        1 << 20,
        "bytes lost in the relay"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "1 MiB through a 128 KiB window at RTT 40 ms took only {took:?}"
    );
}

#[test]
fn relay_rate_cap_is_shared_by_all_connections() {
    // 4 connections x 1 MB through 80 Mbit/s (10 MB/s) shared: at least 0.4 s. A cap per
    // connection would let them finish in 0.1 s.
    let relay = RelayProc::start(sink(), &["--rate", "80mbit"]);
    let started = Instant::now();
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let a = relay.addr;
            std::thread::spawn(move || send(a, 1_000_000))
        })
        .collect();
    for s in senders {
        assert_eq!(s.join().unwrap(), 1_000_000);
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(380),
        "4 MB through a shared 10 MB/s cap took only {took:?}"
    );
}

/// An echo server on `addr`: every connection gets back what it sent.
fn echo(addr: SocketAddr) -> SocketAddr {
    let l = TcpListener::bind(addr).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            std::thread::spawn(move || {
                let mut r = c.try_clone().unwrap();
                let _ = std::io::copy(&mut r, &mut c);
            });
        }
    });
    addr
}

/// Sends `bytes` to `addr` and reads them back (an echo); panics unless they match.
fn round_trip(addr: SocketAddr, bytes: usize) {
    let data = tree::random_bytes(bytes, addr.port().into());
    let mut c = TcpStream::connect(addr).unwrap();
    let mut w = c.try_clone().unwrap();
    let sent = data.clone();
    let writer = std::thread::spawn(move || {
        w.write_all(&sent).unwrap();
        w.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    c.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    assert!(back == data, "{addr}: {} bytes back of {bytes}", back.len());
}

/// Two consecutive ports free on both 127.0.0.1 and 127.0.0.2, with echo servers on
/// 127.0.0.2 at both.
fn echo_pair() -> u16 {
    for _ in 0..50 {
        let Ok(first) = TcpListener::bind("127.0.0.2:0") else {
            continue;
        };
        let p = first.local_addr().unwrap().port();
        let free = |ip: &str, port: u16| TcpListener::bind((ip, port)).is_ok();
        if p < u16::MAX && free("127.0.0.1", p) && free("127.0.0.1", p + 1) {
            drop(first);
            if free("127.0.0.2", p) && free("127.0.0.2", p + 1) {
                echo(([127, 0, 0, 2], p).into());
                echo(([127, 0, 0, 2], p + 1).into());
                return p;
            }
        }
    }
    panic!("no two consecutive free ports on 127.0.0.1 and 127.0.0.2");
}

#[test]
fn relay_forwards_a_port_range_over_the_same_path() {
    let p = echo_pair();
    let main = echo("127.0.0.2:0".parse().unwrap());
    let ports = format!("{p}-{}", p + 1);
    let relay = RelayProc::start(main, &["--delay", "20ms", "--ports", &ports]);
    assert_eq!(relay.addr.ip().to_string(), "127.0.0.1");
    let port = |q: u16| SocketAddr::from(([127, 0, 0, 1], q));

    // Each port of the range reaches its own server both ways, a handshake round trip and a
    // data round trip (2 x 40 ms) later.
    for addr in [relay.addr, port(p), port(p + 1)] {
        let started = Instant::now();
        round_trip(addr, 1000);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(78),
            "{addr}: an echo through a 40 ms relay took only {took:?}"
        );
    }
    drop(relay);

    // The range shares the main listener's links: 3 x 1 MB each way through 80 Mbit/s
    // (10 MB/s) takes at least 0.3 s.
    let relay = RelayProc::start(main, &["--rate", "80mbit", "--ports", &ports]);
    let started = Instant::now();
    let echoes: Vec<_> = [relay.addr, port(p), port(p + 1)]
        .into_iter()
        .map(|a| std::thread::spawn(move || round_trip(a, 1_000_000)))
        .collect();
    for e in echoes {
        e.join().unwrap();
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(280),
        "3 MB through a shared 10 MB/s cap took only {took:?}"
    );
}

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// A tree of large and small files: chunks spread over streams, batches of small files.
fn mixed_tree(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..6 {
        tree::make_file(
            &dir.join(format!("big{i}")),
            &tree::random_bytes(3 << 20, i),
            0o644,
        );
    }
    tree::make_many_files(&dir.join("small"), 300, 3000, 9);
}

#[test]
fn sessions_through_a_long_path_measure_choose_and_report() {
    let t = tmp();
    let src = t.path().join("src");
    mixed_tree(&src);
    let srv = server(&t.path().join("root"));
    let relay = RelayProc::start(srv.addr(), &["--delay", "15ms", "--window", "256KiB"]);

    let out = cp(&srv, &["--json"], &src, relay.url("pushed"));
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &t.path().join("root/pushed"));
    let r = json(&out);
    let path = &r["path"];
    let rtt = path["rtt_ms"].as_f64().unwrap();
    assert!(rtt >= 29.0, "measured RTT {rtt} ms through a 30 ms relay");
    assert_eq!(path["auto_streams"], true);
    let (start, most) = (
        path["streams_start"].as_u64().unwrap(),
        path["streams_max"].as_u64().unwrap(),
    );
    // The server's hello takes a round trip and more to come back on this path: a session
    // starts all the streams it may grow to at once, before it knows the round trip.
    assert_eq!(start, 32, "streams at the start on a long path");
    assert!(most >= start, "streams {start} -> {most}");
    assert_eq!(r["streams"].as_u64(), Some(most));
    assert!(path["tail_s"].as_f64().unwrap() >= 0.0);
    assert!(path["tail_idle_s"].as_f64().unwrap() <= path["tail_s"].as_f64().unwrap());
    let text = cp(&srv, &[], &src, relay.url("pushed-again"));
    assert_ok(&text, Some(&srv));
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("RTT") && stdout.contains("(auto)") && stdout.contains("tail:"));

    // Pull through the same path, with streams and buffers given by hand.
    let back = t.path().join("back");
    let out = cp(
        &srv,
        &["--json", "--streams", "2", "--tcp-buffer", "1MiB"],
        relay.url("pushed"),
        &back,
    );
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &back);
    let path = &json(&out)["path"];
    assert_eq!(path["auto_streams"], false);
    assert_eq!(path["streams_start"].as_u64(), Some(2));
    assert_eq!(path["streams_max"].as_u64(), Some(2));
    assert_eq!(path["tcp_buffer"].as_u64(), Some(1 << 20));
    assert!(path["rtt_ms"].as_f64().unwrap() >= 29.0);
}

#[test]
fn third_party_copies_choose_their_own_streams() {
    let t = tmp();
    let src = t.path().join("a/src");
    mixed_tree(&src);
    let a = server(&t.path().join("a"));
    let b = server(&t.path().join("b"));
    // Both servers share the token of the test fixture.
    let out = cp(&a, &["--json"], a.url("src"), b.url("copy"));
    assert_ok(&out, Some(&a));
    assert_trees_equal(&src, &t.path().join("b/copy"));
}

fn doctor(args: &[&str]) -> std::process::Output {
    run_sprat(bin(), ["doctor"].iter().chain(args), &[])
}

fn sysctl(name: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/sys/{}", name.replace('.', "/")))
        .unwrap()
        .split_whitespace()
        .last()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn doctor_reads_the_host_and_sizes_streams_for_a_path() {
    let out = doctor(&["--rtt", "100ms", "--rate", "10gbit", "--json"]);
    assert_ok(&out, None);
    let d = json(&out);
    assert_eq!(
        d["limits"]["rmem_max"].as_u64(),
        Some(sysctl("net.core.rmem_max"))
    );
    assert_eq!(
        d["limits"]["tcp_wmem"][2].as_u64(),
        Some(sysctl("net.ipv4.tcp_wmem"))
    );
    let p = &d["paths"][0];
    assert_eq!(p["bdp_bytes"].as_u64(), Some(125_000_000));
    let window = p["window_bytes"].as_u64().unwrap();
    assert_eq!(
        p["streams_needed"].as_u64(),
        Some(125_000_000u64.div_ceil(window))
    );
    // One stream moves at most its window per round trip.
    let single = p["single_stream_bytes_per_s"].as_f64().unwrap();
    assert!((single - window as f64 / 0.1).abs() < 1.0);
    // A 12.5 MB BDP per stream exceeds this host's window unless it was tuned for it.
    if window < 125_000_000 {
        assert!(!d["changes"].as_array().unwrap().is_empty());
    }
    let text = doctor(&["--rtt", "30ms"]);
    assert_ok(&text, None);
    assert!(String::from_utf8_lossy(&text.stdout).contains("net.ipv4.tcp_rmem"));
}

#[test]
fn doctor_measures_the_round_trip_to_a_server() {
    let t = tmp();
    let srv = server(&t.path().join("root"));
    let relay = RelayProc::start(srv.addr(), &["--delay", "10ms"]);
    let mut args: Vec<std::ffi::OsString> = vec!["doctor".into(), relay.url("").into()];
    args.extend(srv.client_args());
    args.push("--json".into());
    let out = run_sprat(bin(), args, &[]);
    assert_ok(&out, Some(&srv));
    let d = json(&out);
    let rtts: Vec<f64> = d["measured_rtt_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(rtts.len() >= 5, "{rtts:?}");
    assert!(
        rtts.iter().all(|r| *r >= 19.0),
        "{rtts:?} through a 20 ms relay"
    );
    // The advice is for the least round trip measured: of all of them (of the first two
    // only, a loaded host's slow first two could be 50 ms above a later one).
    let least = rtts.iter().copied().fold(f64::INFINITY, f64::min);
    assert!((d["paths"][0]["rtt_ms"].as_f64().unwrap() - least).abs() < 50.0);
}

/// `sprat relay --listen 127.0.0.1:0 --to TO EXTRA...`.
fn relay_args<'a>(to: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["relay", "--listen", "127.0.0.1:0", "--to", to];
    args.extend_from_slice(extra);
    args
}

#[test]
fn bad_network_options_are_named() {
    for (args, names) in [
        (vec!["cp", "--streams", "0", "a", "b"], vec!["--streams"]),
        (vec!["cp", "--streams", "many", "a", "b"], vec!["--streams"]),
        (
            vec!["cp", "--tcp-buffer", "huge", "a", "b"],
            vec!["--tcp-buffer"],
        ),
        (vec!["doctor", "--rtt", "5h"], vec!["--rtt"]),
        (
            relay_args("127.0.0.1:1", &["--rate", "fast"]),
            vec!["--rate"],
        ),
        (
            relay_args("127.0.0.1:1", &["--ports", "6000-5000"]),
            vec!["--ports", "6000-5000"],
        ),
        (
            relay_args("127.0.0.1:1", &["--ports", "http"]),
            vec!["--ports"],
        ),
    ] {
        let out = run_sprat(bin(), &args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        sprat_testkit::assert_no_panic(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(names.iter().all(|n| err.contains(n)), "{args:?}: {err}");
    }
    // A port of the range already taken is named with the option.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let q = taken.local_addr().unwrap().port().to_string();
    let out = run_sprat(bin(), relay_args("127.0.0.2:1", &["--ports", &q]), &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--ports") && err.contains(&q), "{err}");
    let out = run_sprat(bin(), ["doctor", "sprat://127.0.0.1:1/"], &[]);
    assert_ne!(out.status.code(), Some(0));
    sprat_testkit::assert_no_panic(&out);
}

/// On a long path an automatic session starts many streams, most joining a few round trips
/// after the session opened; a tiny transfer is over on the control connection before they
/// are in. Its early `Commit` must wait for them: the server forgets the session when it
/// answers, and a join that comes later fails with "no such session".
#[test]
fn tiny_transfers_on_a_long_path_wait_for_their_streams_before_committing() {
    let t = tmp();
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    tree::make_file(&src.join("one.txt"), b"a single small file", 0o644);
    let srv = server(&t.path().join("root"));
    let relay = RelayProc::start(srv.addr(), &["--delay", "50ms"]);
    let out = cp(&srv, &["--json"], &src, relay.url("pushed"));
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &t.path().join("root/pushed"));
    let started = json(&out)["path"]["streams_start"].as_u64().unwrap();
    assert!(
        started > 4,
        "a 100 ms path starts more than 4 streams, got {started}"
    );
    let back = t.path().join("back");
    let out = cp(&srv, &["--json"], relay.url("pushed"), &back);
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &back);
}

/// A single small file keeps one stream busy: on a long path (where a session whose hello
/// comes late starts 32 streams at once, and commits once all have joined) it goes on one
/// connection, pushed, pulled (the server says so in `Opened` and turns the joins away) or
/// sent by a server to another (a third-party copy). A large file still starts as many as
/// the path wants: its opening chunks are small.
#[test]
fn a_single_small_file_on_a_long_path_opens_one_stream() {
    let t = tmp();
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    tree::make_file(&src.join("small"), b"a single small file", 0o644);
    let big = tree::random_bytes(3 << 20, 7);
    tree::make_file(&src.join("big"), &big, 0o644);
    let srv = server(&t.path().join("root"));
    let relay = RelayProc::start(srv.addr(), &["--delay", "30ms"]);
    let chunked = common::CHUNKED;
    for (name, streams) in [("small", 1..=1), ("big", 2..=32)] {
        let args: Vec<&str> = ["--json"].iter().chain(&chunked).copied().collect();
        let out = cp(&srv, &args, src.join(name), relay.url(name));
        assert_ok(&out, Some(&srv));
        let n = json(&out)["path"]["streams_start"].as_u64().unwrap();
        assert!(streams.contains(&n), "{name}: {n} streams, not {streams:?}");
        let sent = std::fs::read(t.path().join("root").join(name)).unwrap();
        assert_eq!(sent, std::fs::read(src.join(name)).unwrap(), "{name}");
        // Pulled back, to a new name and into an existing directory.
        let into = t.path().join(format!("into-{name}"));
        std::fs::create_dir(&into).unwrap();
        let back = t.path().join(format!("back-{name}"));
        for (dst, landed) in [(&back, back.clone()), (&into, into.join(name))] {
            let out = cp(&srv, &args, relay.url(name), dst);
            assert_ok(&out, Some(&srv));
            let n = json(&out)["path"]["streams_start"].as_u64().unwrap();
            assert!(
                streams.contains(&n),
                "pulled {name}: {n} streams, not {streams:?}"
            );
            let pulled = std::fs::read(&landed).unwrap();
            assert_eq!(pulled, std::fs::read(src.join(name)).unwrap(), "{name}");
        }
    }
    // The same server sends the small file to itself through the long path.
    let out = cp(&srv, &chunked, relay.url("small"), relay.url("copied"));
    assert_ok(&out, Some(&srv));
    let copied = std::fs::read(t.path().join("root/copied")).unwrap();
    assert_eq!(copied, b"a single small file");
    // The source server's `Done` says how many streams its push used (protocol 23): one,
    // whether it chose or was told at most 8 (before, the report said "8 streams").
    let told = String::from_utf8_lossy(&out.stdout);
    assert!(told.contains("over 1 stream\n"), "{told}");
    let args: Vec<&str> = ["--json", "--streams", "8"]
        .iter()
        .chain(&chunked)
        .copied()
        .collect();
    let out = cp(&srv, &args, relay.url("small"), relay.url("copied-8"));
    assert_ok(&out, Some(&srv));
    assert_eq!(json(&out)["streams"].as_u64(), Some(1), "{}", json(&out));
    // No stream was opened only to be turned away as one too many from this address.
    let log = srv.stderr_log();
    assert!(!log.contains("refusing"), "{log}");
}

/// A pull into an existing directory tells the server so: a single file's session then sends
/// it, checked against the index's entries of NAME, and the client writes it to `DST/NAME`
/// (protocol 22; in protocol 21 that session sent nothing, and the client opened a second one
/// for `DST/NAME`). Through a long path and over loopback, a tree lands in the directory and a
/// file inside it, and the server logs no failure: neither a first session of a file (which
/// the client used to drop while the server sent it the file) nor the connections the pulls
/// did not need (see
/// `security::a_connection_closed_before_it_authenticated_is_not_a_failed_authentication`).
#[test]
fn pulls_into_an_existing_directory_land_as_with_cp_and_leave_no_failures_logged() {
    let t = tmp();
    let root = t.path().join("root");
    std::fs::create_dir_all(root.join("tree/sub")).unwrap();
    tree::make_file(&root.join("tree/sub/a"), b"a file in a tree", 0o644);
    tree::make_file(&root.join("small"), b"a single small file", 0o644);
    let srv = server(&root);
    let relay = RelayProc::start(srv.addr(), &["--delay", "15ms"]);
    let into = t.path().join("into");
    std::fs::create_dir(&into).unwrap();
    // Through the relay first: its connection dialled beside the session's has certainly
    // done its part of the handshake when it is closed, and the server's log writes the
    // first failure of a second at once (the next ones are only counted).
    for name in ["tree", "small"] {
        for url in [relay.url(name), srv.url(name)] {
            let out = cp(&srv, &[], url, &into);
            assert_ok(&out, Some(&srv));
        }
    }
    assert_eq!(
        std::fs::read(into.join("sub/a")).unwrap(),
        b"a file in a tree"
    );
    assert_eq!(
        std::fs::read(into.join("small")).unwrap(),
        b"a single small file"
    );
    // What the server makes of the connections closed last.
    std::thread::sleep(Duration::from_millis(300));
    let log = srv.stderr_log();
    assert!(!log.contains("lost"), "{log}");
    assert!(!log.contains("ended"), "{log}");
    // One transfer each.
    assert_eq!(log.matches("pull from 'tree' done").count(), 2, "{log}");
    assert_eq!(log.matches("pull from 'small' done").count(), 2, "{log}");
}

/// A third-party copy of a single small file takes one of its source server's places for its
/// stream, not the 32 a tree's copy may grow to: with 12 places for the client's address (8 of
/// them left once the client's own connections are in), it still goes on the one stream its
/// server chooses, instead of streams fixed at the places it could get.
#[test]
fn a_third_party_copy_of_a_small_file_takes_one_place() {
    let t = tmp();
    let root = t.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    tree::make_file(&root.join("small"), b"a single small file", 0o644);
    let opts = sprat_testkit::ServerOptions {
        extra_args: vec!["--max-connections-per-address".into(), "12".into()],
        ..sprat_testkit::ServerOptions::default()
    };
    let srv = common::server_with(&root, &opts);
    let out = cp(&srv, &["--json"], srv.url("small"), srv.url("copied"));
    assert_ok(&out, Some(&srv));
    assert_eq!(
        std::fs::read(root.join("copied")).unwrap(),
        b"a single small file"
    );
    // The one stream the source server's push used, as its `Done` says (protocol 23).
    assert_eq!(
        json(&out)["streams"].as_u64(),
        Some(1),
        "{}",
        describe(&out)
    );
    let log = srv.stderr_log();
    assert!(!log.contains("refusing"), "{log}");
}

/// A third-party copy asks its destination what it is and then for a ticket on one
/// connection (two round trips fewer on a long path): through a relay in front of the
/// destination go that connection, the source server's listing and its session's one stream,
/// and nothing else. Asked again with the destination a directory and missing, the same.
#[test]
fn a_third_party_copy_asks_its_destination_on_one_connection() {
    let t = tmp();
    let root = t.path().join("root");
    std::fs::create_dir_all(root.join("dir")).unwrap();
    tree::make_file(&root.join("small"), b"a single small file", 0o644);
    let srv = server(&root);
    for (dst, landed) in [("copied", "copied"), ("dir", "dir/small")] {
        let relay = sprat_testkit::relay::Relay::start(srv.addr());
        let out = cp(&srv, &[], srv.url("small"), relay.url(dst));
        assert_ok(&out, Some(&srv));
        let copied = std::fs::read(root.join(landed)).unwrap();
        assert_eq!(copied, b"a single small file", "{dst}");
        assert_eq!(relay.connections(), 3, "{dst}: {}", describe(&out));
    }
}

/// A third-party copy asks its source server what its source is, then for the copy, on one
/// connection (two before: the copy's request dialled its own), a single file and a tree
/// alike: through a relay in front of the source goes that connection and nothing else. Into
/// `DST/` too, where the destination is not asked first (its server refuses a symlink at
/// `DST/NAME` itself): the source server is asked while the ticket is.
#[test]
fn a_third_party_copy_asks_its_source_server_on_one_connection() {
    let t = tmp();
    let a = server(&t.path().join("a"));
    let b = server(&t.path().join("b"));
    tree::make_file(&t.path().join("a/small"), b"four", 0o644);
    hundred_small_files(&t.path().join("a/tree"));
    for (src, dst, lands) in [
        ("small", "copy-small", "copy-small"),
        ("tree", "copy-tree", "copy-tree"),
        ("small", "into/", "into/small"),
        ("tree", "into/", "into/tree"),
    ] {
        let relay = sprat_testkit::relay::Relay::start(a.addr());
        let out = cp(&a, &[], relay.url(src), b.url(dst));
        assert_ok(&out, Some(&a));
        let (from, to) = (t.path().join("a").join(src), t.path().join("b").join(lands));
        match src {
            "small" => assert_eq!(std::fs::read(&to).unwrap(), b"four"),
            _ => assert_trees_equal(&from, &to),
        }
        assert_eq!(relay.connections(), 1, "{src}: {}", describe(&out));
    }
}

/// A busy server's hello comes after the client's grace even on a short path, so the client
/// starts wide, as on a long path. Once the `Opened` shows the path is short, a push retires
/// the streams the path does not need instead of keeping 32 connections to that server.
#[test]
fn a_push_retires_a_wide_start_once_the_path_proves_short() {
    let t = tmp();
    let src = t.path().join("src");
    tree::make_many_files(&src, 2000, 16 << 10, 5);
    let srv = server(&t.path().join("root"));
    // No delay, but the server's first bytes on each connection come 60 ms late. Small
    // batches keep the push handing them out past the adapter's first step.
    let relay = RelayProc::start(srv.addr(), &["--slow-hello", "60ms"]);
    let args = ["--json", "--batch-size", "64KiB"];
    let out = cp(&srv, &args, &src, relay.url("pushed"));
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &t.path().join("root/pushed"));
    let path = &json(&out)["path"];
    let (start, end, rtt) = (
        path["streams_start"].as_u64().unwrap(),
        path["streams_end"].as_u64().unwrap(),
        path["rtt_ms"].as_f64().unwrap(),
    );
    assert_eq!(start, 32, "a late hello starts wide");
    // The round trips measured (to the `Opened`, and on a probe's connection) include the
    // server's work: a loaded host can stretch them past 10 ms even on loopback, and then
    // the path is not known to be short.
    if rtt < 10.0 {
        assert!(end <= 4, "streams {start} -> {end} on a path of {rtt} ms");
    } else {
        eprintln!("the round trip measured {rtt} ms on loopback: host too busy to tell");
    }
    // `--streams` is the user's: nothing is retired.
    let out = cp(
        &srv,
        &["--json", "--streams", "6"],
        &src,
        relay.url("pushed-6"),
    );
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &t.path().join("root/pushed-6"));
    let path = &json(&out)["path"];
    assert_eq!(path["streams_end"].as_u64(), Some(6));
}

/// What each connection to a [`collector`] sent, and whether it ended, in accept order.
type Collected = std::sync::Arc<std::sync::Mutex<Vec<(Vec<u8>, bool)>>>;

/// A TCP server that keeps what each connection sent, and whether it ended (end of stream or
/// reset), by connection in accept order.
fn collector() -> (SocketAddr, Collected) {
    use std::sync::Arc;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen: Collected = Arc::default();
    let keep = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let slot = {
                let mut s = keep.lock().unwrap();
                s.push((Vec::new(), false));
                s.len() - 1
            };
            let keep = keep.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => keep.lock().unwrap()[slot].0.extend_from_slice(&buf[..k]),
                    }
                }
                keep.lock().unwrap()[slot].1 = true;
            });
        }
    });
    (addr, seen)
}

/// Writes `bytes` zero bytes to a new connection through `addr` (stopping quietly if the
/// connection breaks), then waits up to 10 s for `done`.
fn write_zeros(addr: SocketAddr, bytes: usize, done: impl Fn() -> bool) {
    let mut c = TcpStream::connect(addr).unwrap();
    let _ = c.write_all(&vec![0u8; bytes]);
    let _ = c.shutdown(std::net::Shutdown::Write);
    let until = Instant::now() + Duration::from_secs(10);
    while !done() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn relay_resets_stalls_and_flips_bits_as_asked() {
    // A flipped bit, on the second connection only.
    let (to, seen) = collector();
    let relay = RelayProc::start(to, &["--flip-bit-at", "1234", "--fault-connection", "2"]);
    let ended = |n: usize| {
        let seen = seen.clone();
        move || seen.lock().unwrap().get(n).is_some_and(|c| c.1)
    };
    write_zeros(relay.addr, 5000, ended(0));
    write_zeros(relay.addr, 5000, ended(1));
    {
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen[0].0,
            vec![0u8; 5000],
            "the first connection is untouched"
        );
        let flipped: Vec<usize> = (0..seen[1].0.len())
            .filter(|&i| seen[1].0[i] != 0)
            .collect();
        assert_eq!(seen[1].0.len(), 5000);
        assert_eq!(flipped, [1234], "one bit flipped, at the offset given");
        assert_eq!(seen[1].0[1234], 1);
    }
    drop(relay);

    // A reset: the server gets exactly the bytes before it, then the connection breaks.
    let (to, seen) = collector();
    let relay = RelayProc::start(to, &["--reset-after", "1000"]);
    let done = {
        let seen = seen.clone();
        move || seen.lock().unwrap().first().is_some_and(|c| c.1)
    };
    write_zeros(relay.addr, 100_000, done);
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0].0.len(), 1000, "bytes before the reset");
        assert!(seen[0].1, "the server's side of the connection ended");
    }
    drop(relay);

    // A stall: nothing more arrives, and the connection stays open.
    let (to, seen) = collector();
    let relay = RelayProc::start(to, &["--stall-after", "500"]);
    let mut c = TcpStream::connect(relay.addr).unwrap();
    c.write_all(&[0u8; 5000]).unwrap();
    // Once the bytes before the stall are in (a loaded host may take longer than a moment),
    // then long enough for more to have come if the relay let them through.
    let arrived = || seen.lock().unwrap().first().map_or(0, |conn| conn.0.len());
    let until = Instant::now() + Duration::from_secs(10);
    while arrived() < 500 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0].0.len(), 500, "bytes before the stall");
        assert!(!seen[0].1, "a stalled connection stays open");
    }
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut b = [0u8; 1];
    let still_open = matches!(c.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut);
    assert!(still_open, "the client's side neither ends nor breaks");
}

#[test]
fn a_push_through_a_faulty_path_fails_cleanly_and_writes_nothing_wrong() {
    let t = tmp();
    let src = t.path().join("src");
    tree::make_many_files(&src.join("small"), 400, 3000, 11);
    tree::make_file(&src.join("big"), &tree::random_bytes(3 << 20, 5), 0o644);
    let root = t.path().join("root");
    let srv = server(&root);
    // One flipped bit in the control connection's stream, at offsets inside the first
    // batches (headers and data alike), then a reset of it mid-transfer.
    let cases: Vec<(String, Vec<&str>)> = vec![
        ("flip-300".into(), vec!["--flip-bit-at", "300"]),
        ("flip-5000".into(), vec!["--flip-bit-at", "5000"]),
        ("flip-70000".into(), vec!["--flip-bit-at", "70000"]),
        ("reset".into(), vec!["--reset-after", "200KiB"]),
    ];
    for (name, faults) in cases {
        let mut args = vec!["--fault-connection", "1"];
        args.extend(faults);
        let relay = RelayProc::start(srv.addr(), &args);
        // --ignore-times: no listing of the destination first, so the relay's first
        // connection is the session's control connection.
        let out = cp(
            &srv,
            &["--streams", "2", "--ignore-times"],
            &src,
            relay.url(&name),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Either the damage was caught and repaired (a join whose handshake was hit is refused
        // and its batches go on the other stream: then the copy is exact), or the transfer
        // fails and says why; never a success with something wrong.
        if out.status.code() == Some(0) {
            assert_trees_equal(&src, &root.join(&name));
            continue;
        }
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with("sprat: error:") || l.contains("failed")),
            "{name}: says why\n{stderr}"
        );
        match no_wrong_file(&src, &root.join(&name)) {
            Ok(_) => {}
            Err(e) => panic!("{name}: {e}\n{stderr}"),
        }
    }
}

#[test]
fn doctor_sizes_transfer_nodes_from_a_data_set_read_on_this_host() {
    let t = tmp();
    let data = t.path().join("data");
    sprat_testkit::make_many_files(&data, 500, 8192, 4);
    let bytes = 500 * 8192;
    // A link far faster than any disk here: more than one node; a slow one: one node.
    for (rate, write) in [("1000gbit", None), ("1mbit", Some("1MB/s"))] {
        let mut args = vec![
            "--rtt",
            "10ms",
            "--rate",
            rate,
            "--data",
            data.to_str().unwrap(),
            "--json",
        ];
        if let Some(w) = write {
            args.extend(["--write-rate", w]);
        }
        let out = doctor(&args);
        assert_ok(&out, None);
        let n = &json(&out)["nodes"];
        assert_eq!(n["files"].as_u64(), Some(500), "{n}");
        assert_eq!(n["bytes"].as_u64(), Some(bytes), "{n}");
        let read = n["read_bytes_per_s"].as_f64().unwrap();
        let link = n["link_bytes_per_s"].as_f64().unwrap();
        let mut expected = (link / read).ceil().max(1.0);
        if let Some(w) = n["write_bytes_per_s"].as_f64() {
            expected = expected.max((link / w).ceil());
        }
        assert_eq!(n["nodes"].as_f64(), Some(expected), "{n}");
        if rate == "1mbit" {
            assert_eq!(n["nodes"].as_u64(), Some(1), "{n}");
            // 4 MB at 125 KB/s (the link is the slowest).
            let t = n["predicted_s"].as_f64().unwrap();
            assert!((t - bytes as f64 / 125_000.0).abs() < 0.01, "{n}");
        }
    }
    let out = doctor(&["--data", t.path().join("missing").to_str().unwrap()]);
    assert_exit(&out, 2);
    assert_error_names(&out, &["--data"]);
}

/// A few hundred kilobytes pushed over a long path go out in the first round trip after the
/// listing: one small batch on each of most of the session's streams, not a few batches of
/// 128 KiB on a few streams that each need several round trips of slow start to send them.
/// Checked on what each connection carried through the relay (its log), not on time.
#[test]
fn a_small_push_over_a_long_path_spreads_its_first_batches_over_the_streams() {
    let t = tmp();
    let src = t.path().join("src");
    hundred_small_files(&src);
    let srv = server(&t.path().join("root"));
    let log = t.path().join("relay.log");
    let relay = RelayProc::start_logged(srv.addr(), &["--delay", "50ms"], &log);
    let out = cp(&srv, &["--json"], &src, relay.url("pushed"));
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &t.path().join("root/pushed"));
    let streams = json(&out)["path"]["streams_start"].as_u64().unwrap();
    assert_eq!(streams, 32, "a 100 ms path starts its streams wide");
    drop(out);
    // Before: 10 connections, one with 126 KB. A stream that joins late leaves its share
    // to the first one acknowledged, so not every one of the 32 carries a batch every time.
    assert_carried_by_many(&relay, |(to_server, _)| to_server);
}

/// 100 files of 4 KiB, each of its own content, in `dir`.
fn hundred_small_files(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..100u32 {
        let content: Vec<u8> = (0..4096u32).map(|j| (i * 31 + j * 7) as u8).collect();
        tree::make_file(&dir.join(format!("f{i:03}")), &content, 0o644);
    }
}

/// Of the connections through `relay`, those that carried one way (`way` picks bytes to the
/// server or to the client) at least a first-round batch (three files of 4 KiB) carried the
/// 100 files of 4 KiB between them, and there are 20 or more of them.
fn assert_carried_by_many(relay: &RelayProc, way: impl Fn((u64, u64)) -> u64) {
    let closed = relay.closed();
    let carrying: Vec<u64> = closed
        .iter()
        .map(|&c| way(c))
        .filter(|&bytes| bytes >= 12_000)
        .collect();
    let total: u64 = carrying.iter().sum();
    assert!(total >= 409_600, "{closed:?}");
    assert!(
        carrying.len() >= 20,
        "only {} connections carried a batch: {closed:?}",
        carrying.len()
    );
}

/// The same for a pull: the server's connections hold after their first batch for a round
/// trip (measured in their TLS handshake), so the first few to join do not take what the
/// others, joining a little later, could carry in the same round trip.
#[test]
fn a_small_pull_over_a_long_path_spreads_its_first_batches_over_the_streams() {
    let t = tmp();
    let src = t.path().join("root/src");
    hundred_small_files(&src);
    let srv = server(&t.path().join("root"));
    let log = t.path().join("relay.log");
    let relay = RelayProc::start_logged(srv.addr(), &["--delay", "50ms"], &log);
    let back = t.path().join("back");
    let out = cp(&srv, &["--json"], relay.url("src"), &back);
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &back);
    // Before: 4 connections, one with 251 KB.
    assert_carried_by_many(&relay, |(_, to_client)| to_client);
}

/// A single file pushed over a long path asks the server what its destination is on one
/// connection, lists the destination on that same connection, and carries its session on a
/// second one dialled meanwhile: two connections for a small file (three before: the listing
/// had one of its own, and the session was dialled once the answer was in), whether the file
/// goes to a new name or into an existing directory (`DST` or `DST/`). A large file's session
/// still starts all its streams at once on such a path.
#[test]
fn a_single_file_pushed_over_a_long_path_asks_lists_and_sends_on_two_connections() {
    let t = tmp();
    let small = t.path().join("small");
    tree::make_file(&small, b"four", 0o644);
    let srv = server(&t.path().join("root"));
    std::fs::create_dir_all(t.path().join("root/dir")).unwrap();
    std::fs::create_dir_all(t.path().join("root/other")).unwrap();
    let pushes = [
        (0, "new", "new"),
        (1, "dir", "dir/small"),
        (2, "other/", "other/small"),
    ];
    for (n, dst, lands) in pushes {
        let log = t.path().join(format!("relay{n}.log"));
        let relay = RelayProc::start_logged(srv.addr(), &["--delay", "15ms"], &log);
        let out = cp(&srv, &[], &small, relay.url(dst));
        assert_ok(&out, Some(&srv));
        let landed = t.path().join("root").join(lands);
        assert_eq!(std::fs::read(&landed).unwrap(), b"four", "{lands}");
        let closed = relay.closed();
        assert_eq!(
            closed.len(),
            2,
            "connections of a push to {dst}: {closed:?}"
        );
    }
    let large = t.path().join("large");
    let content: Vec<u8> = (0..3u32 << 20).map(|i| (i * 13 + i / 4099) as u8).collect();
    tree::make_file(&large, &content, 0o644);
    let relay = RelayProc::start(srv.addr(), &["--delay", "15ms"]);
    let out = cp(&srv, &["--json"], &large, relay.url("dir"));
    assert_ok(&out, Some(&srv));
    assert_eq!(
        std::fs::read(t.path().join("root/dir/large")).unwrap(),
        content
    );
    let streams = json(&out)["path"]["streams_start"].as_u64().unwrap();
    assert_eq!(
        streams, 32,
        "a large file on a 30 ms path starts its streams wide"
    );
}

/// `--streams N` opens no more streams than the data can keep busy: a single small file,
/// pushed, or pulled into an existing directory, opens one however many were asked for.
/// Before, a push opened N-1 that carried nothing, and a pull's session for `DST/NAME`
/// dialled N-1 joins its server then refused (review 2026-11-30 of protocol 21, LOW).
#[test]
fn a_fixed_stream_count_opens_no_stream_a_single_small_file_cannot_use() {
    let t = tmp();
    let root = t.path().join("root");
    let srv = server(&root);
    tree::make_file(&root.join("small"), b"a single small file", 0o644);
    let into = t.path().join("into");
    std::fs::create_dir(&into).unwrap();
    let src = t.path().join("small");
    tree::make_file(&src, b"pushed", 0o644);
    for (case, most) in [("push", 2), ("pull", 6)] {
        let log = t.path().join(format!("relay-{case}.log"));
        let relay = RelayProc::start_logged(srv.addr(), &["--delay", "5ms"], &log);
        let args = ["--streams", "4"];
        let out = match case {
            "push" => cp(&srv, &args, &src, relay.url("pushed")),
            _ => cp(&srv, &args, relay.url("small"), &into),
        };
        assert_ok(&out, Some(&srv));
        let connections = relay.closed().len();
        assert!(connections <= most, "{case}: {connections} connections");
    }
    assert_eq!(std::fs::read(root.join("pushed")).unwrap(), b"pushed");
    assert_eq!(
        std::fs::read(into.join("small")).unwrap(),
        b"a single small file"
    );
}
