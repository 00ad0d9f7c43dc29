//! How sessions end, message by message against a real server (the orders sprat's client
//! uses since protocol 13): a pull's `Commit` right behind its `Open` is answered with `Done`
//! only after the last batch and `End`, and a `Join` that comes once its session has ended is
//! refused at once, so that a client that committed without waiting for it is not held up.
#![allow(clippy::unwrap_used)]

mod common;

use common::raw::{self, Frame};
use common::{server_with, tmp};
use sprat_proto::session::{Direction, Role};
use sprat_proto::{DestCheck, ErrorCode, Message, Operation, Totals};
use sprat_testkit::{Server, ServerOptions};
use std::path::Path;
use std::time::{Duration, Instant};

/// A server without TLS (the hand-made clients speak plain frames).
fn plain_server(root: &Path) -> Server {
    let opts = ServerOptions {
        extra_args: vec!["--no-encryption".into()],
        ..ServerOptions::default()
    };
    server_with(root, &opts)
}

/// Reads control messages until `Done`; their names in order, `Done`'s included.
fn names_until_done(s: &mut std::net::TcpStream) -> Vec<&'static str> {
    let mut names = Vec::new();
    loop {
        match raw::read_frame(s).expect("the server answers") {
            Frame::Msg(m) => {
                names.push(m.name());
                if matches!(m, Message::Done(_)) {
                    return names;
                }
            }
            Frame::Batch(_) => names.push("Batch"),
        }
    }
}

#[test]
fn a_pulls_commit_right_behind_its_open_is_answered_after_its_last_batch() {
    let t = tmp();
    let root = t.path().join("root");
    let src = root.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let (files, size) = (24u64, 200u64 << 10);
    for i in 0..files {
        let data: Vec<u8> = (0..size)
            .map(|b| (b as u8).wrapping_mul(i as u8 + 7))
            .collect();
        std::fs::write(src.join(format!("f{i:02}")), data).unwrap();
    }
    let srv = plain_server(&root);
    let pull = Operation::Pull {
        check: DestCheck::None,
        meta: Default::default(),
        into_dir: false,
    };
    let commit = Message::Commit(Totals::default());
    let mut s = raw::open_with(
        &srv,
        "127.0.0.1",
        (raw::session_id(), pull),
        b"src",
        &[commit],
    );
    let mut order = Vec::new();
    let stats = loop {
        match raw::read_frame(&mut s).expect("the server answers") {
            Frame::Batch(_) => order.push("Batch"),
            Frame::Msg(Message::Done(done)) => {
                order.push("Done");
                break done;
            }
            Frame::Msg(m) => order.push(m.name()),
        }
    };
    // `Opened`, every batch, `End`, and only then `Done`.
    let batches = order.iter().filter(|n| **n == "Batch").count();
    assert!(batches >= 1, "{order:?}");
    let mut expected = vec!["Opened"];
    expected.extend(std::iter::repeat_n("Batch", batches));
    expected.extend(["End", "Done"]);
    assert_eq!(order, expected);
    let totals = stats.totals;
    assert_eq!((totals.files, totals.bytes), (files, files * size));
}

#[test]
fn a_join_after_its_push_session_ended_is_refused_at_once() {
    let t = tmp();
    let srv = plain_server(&t.path().join("root"));
    let id = raw::session_id();
    // A push that sends nothing: its `End` and `Commit` right behind the `Open`.
    let behind = [Message::End, Message::Commit(Totals::default())];
    let mut control = raw::open_with(&srv, "127.0.0.1", (id, raw::push_op()), b"dst", &behind);
    assert_eq!(names_until_done(&mut control), ["Opened", "EndAck", "Done"]);
    // A stream of that session that sent nothing joins late (its client committed without
    // waiting for it): refused at once, not after the 10 s a join waits for its `Open`.
    let asked = Instant::now();
    let mut late = raw::first_message(
        &srv,
        "127.0.0.1",
        (Direction::Push, Role::Joining),
        Message::Join { session: id },
        &[Message::End],
    );
    match raw::read_message(&mut late).expect("the server answers the join") {
        Message::Error { code, .. } => assert_eq!(code, ErrorCode::UnknownSession),
        other => panic!("a late join was not refused: {other:?}"),
    }
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    assert!(
        srv.root().join("dst").is_dir(),
        "the session's push was kept"
    );
}
