#![allow(clippy::unwrap_used)]
//! Encryption and server identity against real servers: every connection is TLS 1.3 unless
//! both sides allow plain TCP; a client pins a server's key on first use and refuses a changed
//! one; a machine in the middle that terminates TLS with its own key is refused, and its relay
//! of the token exchange fails because the proofs are bound to each TLS session.

mod common;

use common::*;
use sprat_testkit::mitm::Mitm;
use sprat_testkit::relay::Relay;
use sprat_testkit::server::DEFAULT_TOKEN;
use sprat_testkit::tree::{make_file, make_many_files};
use sprat_testkit::{assert_trees_equal, run_sprat, ServerOptions};
use std::ffi::OsString;
use std::path::Path;

const MARKER: &[u8] = b"SPRAT-SECRET-CONTENT-MARKER-5c71";

/// A source tree whose file holds [`MARKER`] and whose name is a marker too.
fn marked_source(dir: &Path) {
    let mut content = Vec::new();
    for _ in 0..50 {
        content.extend_from_slice(MARKER);
        content.extend_from_slice(b"\n");
    }
    std::fs::create_dir_all(dir).unwrap();
    make_file(&dir.join("secret-name-marker-93ab.txt"), &content, 0o644);
    make_many_files(&dir.join("more"), 20, 1000, 3);
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn with_key_file(key: &Path, extra: &[&str]) -> ServerOptions {
    let mut args: Vec<OsString> = vec!["--key-file".into(), key.into()];
    args.extend(extra.iter().map(OsString::from));
    ServerOptions {
        extra_args: args,
        ..ServerOptions::default()
    }
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_recording_relay_sees_neither_token_nor_content_nor_names() {
    let t = tmp();
    let src = t.path().join("src");
    marked_source(&src);
    let srv = server(&t.path().join("root"));
    let relay = Relay::start(srv.addr());
    let out = cp(&srv, &[], &src, relay.url("dst"));
    assert_ok(&out, Some(&srv));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("encryption: TLS 1.3"),
        "the report does not say the copy was encrypted:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let pulled = t.path().join("pulled");
    assert_ok(&cp(&srv, &[], relay.url("dst"), &pulled), Some(&srv));
    assert_trees_equal(&src, &pulled);
    let wire = [relay.client_to_server(), relay.server_to_client()].concat();
    assert!(
        wire.len() > 40_000,
        "the relay saw too little: {}",
        wire.len()
    );
    for (what, needle) in [
        ("file content", MARKER),
        ("a file name", b"secret-name-marker-93ab".as_slice()),
        ("the token", DEFAULT_TOKEN.as_bytes()),
    ] {
        assert!(
            !contains(&wire, needle),
            "{what} crossed the wire in the clear"
        );
    }
}

#[test]
fn without_encryption_on_both_sides_the_same_relay_sees_the_content() {
    // The check above can fail: in plain mode the marker is on the wire.
    let t = tmp();
    let src = t.path().join("src");
    marked_source(&src);
    let opts = ServerOptions {
        extra_args: vec!["--no-encryption".into()],
        ..ServerOptions::default()
    };
    let srv = server_with(&t.path().join("root"), &opts);
    let relay = Relay::start(srv.addr());
    let out = cp(&srv, &["--no-encryption"], &src, relay.url("dst"));
    assert_ok(&out, Some(&srv));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("encryption: none"),
        "the report does not say the copy was plain:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_trees_equal(&src, &srv.root().join("dst"));
    assert!(contains(&relay.client_to_server(), MARKER));
    // Still no token in the clear: it is proved, never sent.
    assert!(!contains(
        &relay.client_to_server(),
        DEFAULT_TOKEN.as_bytes()
    ));
    // The same server also takes encrypted clients.
    let again = t.path().join("again");
    assert_ok(&cp(&srv, &[], srv.url("dst"), &again), Some(&srv));
    assert_trees_equal(&src, &again);
}

#[test]
fn a_plain_client_is_refused_by_a_server_that_requires_encryption() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 5, 100, 1);
    let srv = server(&t.path().join("root"));
    let out = cp(&srv, &["--no-encryption"], &src, srv.url("dst"));
    assert_exit(&out, 3);
    assert_error_names(&out, &["only encrypted connections"]);
    assert!(
        !srv.root().join("dst").exists(),
        "a plain push wrote something"
    );
}

#[test]
fn a_changed_server_key_is_refused_and_nothing_is_sent() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 5, 100, 2);
    let root = t.path().join("root");
    let known = t.path().join("known_servers");
    let known_arg = known.to_str().unwrap();
    let first = server_with(&root, &with_key_file(&t.path().join("a.key"), &[]));
    let port = first.port();
    let out = cp(
        &first,
        &["--known-servers", known_arg],
        &src,
        first.url("one"),
    );
    assert_ok(&out, Some(&first));
    assert!(
        stderr(&out).contains("now pinned"),
        "no notice of the first pin: {}",
        stderr(&out)
    );
    let pinned = std::fs::read_to_string(&known).unwrap();
    assert!(pinned.contains(first.fingerprint()), "{pinned}");
    // The same server again: known, silent.
    let out = cp(
        &first,
        &["--known-servers", known_arg],
        &src,
        first.url("two"),
    );
    assert_ok(&out, Some(&first));
    assert!(!stderr(&out).contains("pinned"), "{}", stderr(&out));
    drop(first);
    // Another key on the same address.
    let mut opts = with_key_file(&t.path().join("b.key"), &[]);
    opts.listen = format!("127.0.0.1:{port}");
    let impostor = server_with(&root, &opts);
    let out = cp(
        &impostor,
        &["--known-servers", known_arg],
        &src,
        impostor.url("three"),
    );
    assert_exit(&out, 3);
    let line = assert_error_names(&out, &["KEY CHANGED"]);
    assert!(
        line.contains(impostor.fingerprint()) && line.contains("line 1"),
        "{line}"
    );
    assert!(
        !root.join("three").exists(),
        "data went to a server with another key"
    );
    // Namespace commands refuse it too.
    let mut ls: Vec<OsString> = vec!["ls".into()];
    ls.extend(impostor.client_args());
    ls.extend([
        "--known-servers".into(),
        known_arg.into(),
        impostor.url("").into(),
    ]);
    assert_exit(&run_sprat(bin(), ls, &[]), 3);
    // Pinning the new key on the command line lets the user through, file untouched.
    let fp = impostor.fingerprint().to_string();
    let out = cp(
        &impostor,
        &["--server-fingerprint", &fp],
        &src,
        impostor.url("four"),
    );
    assert_ok(&out, Some(&impostor));
    assert_eq!(std::fs::read_to_string(&known).unwrap(), pinned);
}

/// `--known-servers /dev/null`, ssh's idiom for "remember no server": every connection is
/// a first one (the server proves the token before anything is sent), nothing is kept, the
/// message says so (not that the key is now pinned), and the copy works.
#[test]
fn known_servers_in_dev_null_remember_nothing_and_copy() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 2, 100, 3);
    let root = t.path().join("root");
    let srv = server_with(&root, &with_key_file(&t.path().join("a.key"), &[]));
    for run in ["one", "two"] {
        let out = cp(&srv, &["--known-servers", "/dev/null"], &src, srv.url(run));
        assert_ok(&out, Some(&srv));
        assert!(
            stderr(&out).contains("taken unchecked") && !stderr(&out).contains("pinned in"),
            "{run}: {}",
            stderr(&out)
        );
        assert_trees_equal(&src, &root.join(run));
    }
}

#[test]
fn an_explicit_fingerprint_is_the_only_key_accepted() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 5, 100, 3);
    let srv = server(&t.path().join("root"));
    let known = t.path().join("never-written");
    let known_arg = known.to_str().unwrap();
    let fp = srv.fingerprint().to_string();
    let out = cp(
        &srv,
        &["--server-fingerprint", &fp, "--known-servers", known_arg],
        &src,
        srv.url("dst"),
    );
    assert_ok(&out, Some(&srv));
    assert!(
        !known.exists(),
        "an explicit pin wrote the known-servers file"
    );
    let other = format!("SHA256:{}", "A".repeat(43));
    let out = cp(
        &srv,
        &["--server-fingerprint", &other],
        &src,
        srv.url("dst2"),
    );
    assert_exit(&out, 3);
    assert_error_names(&out, &[&fp]);
    assert!(!srv.root().join("dst2").exists());
    let out = cp(
        &srv,
        &["--server-fingerprint", "SHA256:short"],
        &src,
        srv.url("dst3"),
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &["--server-fingerprint"]);
}

#[test]
fn a_machine_in_the_middle_with_its_own_key_is_refused() {
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 5, 100, 4);
    let srv = server(&t.path().join("root"));
    let known = t.path().join("known_servers");
    let known_arg = known.to_str().unwrap();
    // The client knows the real server.
    assert_ok(
        &cp(
            &srv,
            &["--known-servers", known_arg],
            &src,
            srv.url("direct"),
        ),
        Some(&srv),
    );
    let mitm = Mitm::start(srv.addr());
    // Through the MITM, with the real server pinned: refused as a changed key...
    let out = cp(
        &srv,
        &["--server-fingerprint", srv.fingerprint()],
        &src,
        mitm.url("x"),
    );
    assert_exit(&out, 3);
    assert!(!srv.root().join("x").exists());
    // ...and on a first connection (nothing pinned, the MITM's key accepted), the token
    // exchange it relays fails: each proof is bound to its own TLS session.
    let fresh = t.path().join("fresh_known");
    let out = cp(
        &srv,
        &["--known-servers", fresh.to_str().unwrap()],
        &src,
        mitm.url("y"),
    );
    assert_exit(&out, 3);
    assert!(
        mitm.relayed() > 0,
        "the MITM relayed nothing: the test proves nothing"
    );
    assert!(
        !srv.root().join("y").exists(),
        "a push through the MITM wrote data"
    );
    // A key met for the first time is not trusted with more than the hello before the token
    // is proved: no `Open`, no batch crossed the MITM (a client that trusts the key sends
    // them with its hello).
    let hello = sprat_proto::Message::ClientHello {
        version: sprat_proto::PROTOCOL_VERSION,
        nonce: [0; 32],
        hint: [0; 32],
        mac: [0; 32],
    };
    assert_eq!(
        mitm.most_from_one_client(),
        hello.encode().len() as u64,
        "a client sent more than its hello through a key it met for the first time"
    );
    // Nor is the MITM's key remembered: it never proved the token.
    let pinned = std::fs::read_to_string(&fresh).unwrap_or_default();
    assert!(
        pinned.trim().is_empty(),
        "a key that did not prove the token was pinned: {pinned}"
    );
    let pulled = t.path().join("pulled");
    let out = cp(
        &srv,
        &["--known-servers", fresh.to_str().unwrap()],
        mitm.url("direct"),
        &pulled,
    );
    assert_exit(&out, 3);
    assert!(!pulled.join("f0").exists());
}

#[test]
fn third_party_copies_are_encrypted_between_the_servers() {
    let t = tmp();
    let src = t.path().join("src");
    marked_source(&src);
    let a = server(&t.path().join("a"));
    let b = server_with(
        &t.path().join("b"),
        &with_key_file(&t.path().join("b.key"), &[]),
    );
    assert_ok(&cp(&a, &[], &src, a.url("data")), Some(&a));
    // The source server reaches the destination through a recording relay.
    let relay = Relay::start(b.addr());
    let out = cp(&a, &[], a.url("data"), relay.url("copy"));
    assert_ok(&out, Some(&a));
    assert_trees_equal(&src, &b.root().join("copy"));
    let wire = [relay.client_to_server(), relay.server_to_client()].concat();
    assert!(
        wire.len() > 20_000,
        "the relay saw too little: {}",
        wire.len()
    );
    assert!(
        !contains(&wire, MARKER),
        "content crossed between the servers in the clear"
    );
}

#[test]
fn the_server_prints_its_fingerprint_and_keeps_its_key() {
    let t = tmp();
    let key = t.path().join("k/server.key");
    let first = server_with(&t.path().join("root"), &with_key_file(&key, &[]));
    let fp = first.fingerprint().to_string();
    drop(first);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the key file is not private");
    let again = server_with(&t.path().join("root"), &with_key_file(&key, &[]));
    assert_eq!(
        again.fingerprint(),
        fp,
        "a restarted server changed its key"
    );
    drop(again);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run_sprat(
        bin(),
        [
            OsString::from("serve"),
            "--root".into(),
            t.path().join("root").into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--no-auth".into(),
            "--key-file".into(),
            key.clone().into(),
        ],
        &[],
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &["chmod 600"]);
}

#[test]
fn a_peer_that_does_not_speak_tls_is_named_as_such() {
    // What an older sprat server answers a TLS hello with: a plain `Error` frame.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        if let Ok((mut c, _)) = listener.accept() {
            let mut first = [0u8; 16];
            let _ = c.read(&mut first);
            let text = b"oversized frame during the handshake";
            let mut frame = ((text.len() + 4) as u32).to_le_bytes().to_vec();
            frame.push(4);
            frame.extend_from_slice(&8u16.to_le_bytes());
            frame.extend_from_slice(&(text.len() as u16).to_le_bytes());
            frame.extend_from_slice(text);
            let _ = c.write_all(&frame);
        }
    });
    let t = tmp();
    let out = run_sprat(
        bin(),
        [
            OsString::from("ls"),
            "--known-servers".into(),
            t.path().join("k").into(),
            format!("sprat://{addr}/").into(),
        ],
        &[],
    );
    // Not a sprat server: a connection error, as the README says, not a failed
    // authentication.
    assert_exit(&out, 4);
    assert_error_names(&out, &["does not speak TLS"]);
}

/// Whether `srv` opened a session on `path` (its `-vv` log says so).
fn opened_session_on(srv: &sprat_testkit::Server, path: &str) -> bool {
    srv.stderr_log()
        .lines()
        .any(|l| l.contains("session opened") && l.contains(&format!("path={path}")))
}

#[test]
fn an_impostor_answering_one_connection_of_a_push_stops_it() {
    // The impostor holds the server's private key (the same key file) but not the token. A
    // relay sends the first connection of each push to it and the others to the real server:
    // the destination's listing (it dials first), or with `--ignore-times` (no listing)
    // usually a joining stream (joins dial before the control connection), sometimes the
    // control connection.
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 40, 32 << 10, 9);
    let key = t.path().join("server.key");
    let with_key = |token: &str, verbose: bool| {
        let mut extra_args: Vec<OsString> = vec!["--key-file".into(), key.clone().into()];
        if verbose {
            extra_args.push("-vv".into());
        }
        ServerOptions {
            token: Some(token.to_string()),
            extra_args,
            ..ServerOptions::default()
        }
    };
    let real = server_with(&t.path().join("root"), &with_key(DEFAULT_TOKEN, true));
    let impostor = server_with(
        &t.path().join("impostor"),
        &with_key("not-the-token-4e1d", false),
    );
    assert_eq!(real.fingerprint(), impostor.fingerprint());
    let mut joins_answered = 0;
    for attempt in 0..8 {
        // With the key pinned (a join sends its `Join` and first batches with its hello, and
        // learns of the failed proof from the answer), or met for the first time (a join
        // waits for the proof before it sends anything).
        let known = t.path().join(format!("known-{attempt}"));
        let mut args = vec!["--streams", "4"];
        if attempt % 4 < 2 {
            args.extend(["--server-fingerprint", real.fingerprint()]);
        } else {
            args.extend(["--known-servers", known.to_str().unwrap()]);
        }
        let no_listing = attempt % 2 == 1;
        if no_listing {
            args.push("--ignore-times");
        }
        let relay = Relay::start_first_to(impostor.addr(), real.addr());
        let dst = format!("x{attempt}");
        let out = cp(&real, &args, &src, relay.url(&dst));
        assert_exit(&out, 3);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("authentic") || err.contains("token"), "{err}");
        assert!(
            entries_below(&t.path().join("impostor")).is_empty(),
            "the impostor wrote something"
        );
        // The real server opened this push, which had no listing: the impostor answered one
        // of its joins.
        if no_listing && opened_session_on(&real, &dst) {
            joins_answered += 1;
        }
    }
    assert!(
        joins_answered > 0,
        "the impostor never answered a join in 4 pushes: the test proved nothing about joins"
    );
}
