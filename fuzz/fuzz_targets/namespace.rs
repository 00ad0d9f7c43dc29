//! Namespace requests (what a client asks a server) and their replies (what a server answers
//! a client: `Entries`, `Sums`, `Usage`, `Ticket`, `ReplyEnd`, `Location`), decoded and
//! checked to round-trip byte for byte; every path a request or a listing names must be a
//! valid relative path (never absolute, never `..`), so that no request can name anything
//! outside the server's root; a selection's patterns are non-empty without NUL and its listed
//! paths valid (checked by `check_control`); a location names at most `MAX_LOCATION_DEPTH`
//! directories.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sprat_proto::frame::kind;
use sprat_proto::namespace::Request;
use sprat_proto::path::validate;
use sprat_proto::Message;

const KINDS: [u8; 7] = [
    kind::REQUEST,
    kind::ENTRIES,
    kind::SUMS,
    kind::USAGE,
    kind::TICKET,
    kind::REPLY_END,
    kind::LOCATION,
];

fuzz_target!(|data: &[u8]| {
    let Some((&which, payload)) = data.split_first() else {
        return;
    };
    let k = KINDS[which as usize % KINDS.len()];
    let Some(msg) = sprat_fuzz::check_control(k, payload) else {
        return;
    };
    let paths: Vec<&[u8]> = match &msg {
        Message::Request(req) => match req {
            Request::List { path, .. }
            | Request::Stat { path }
            | Request::Du { path, .. }
            | Request::Mkdir { path, .. }
            | Request::Remove { path, .. }
            | Request::Sum { path, .. }
            | Request::Delegate { path, .. }
            | Request::Locate { path } => vec![path],
            Request::Rename { from, to } => vec![from, to],
            Request::SendTo {
                path, dest, addr, ..
            } => {
                assert!(addr.len() <= 255, "address longer than its limit");
                vec![path, dest]
            }
        },
        Message::Entries(entries) => {
            assert!(entries.len() <= sprat_proto::namespace::MAX_ENTRIES_PER_FRAME);
            entries.iter().map(|e| e.path.as_slice()).collect()
        }
        Message::Sums(sums) => {
            assert!(
                sums.iter().all(|(_, d)| d.len() <= 64),
                "digest over 64 bytes"
            );
            sums.iter().map(|(p, _)| p.as_slice()).collect()
        }
        Message::Location(location) => {
            assert!(
                location.ids.len() <= sprat_proto::namespace::MAX_LOCATION_DEPTH,
                "a location deeper than its limit"
            );
            Vec::new()
        }
        _ => Vec::new(),
    };
    for p in paths {
        assert!(
            validate(p).is_ok(),
            "a path that validate refuses was accepted"
        );
        assert!(!p.starts_with(b"/"));
        assert!(!p.split(|&b| b == b'/').any(|c| c == b".."));
    }
});
