//! A connection's bytes as a peer may send them: frame headers (unknown kinds and over-long
//! lengths refused), then every control message decoded and checked to round-trip
//! ([`sprat_fuzz::check_control`]), batch frames through the batch decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sprat_proto::frame::kind;

fuzz_target!(|data: &[u8]| {
    for frame in sprat_fuzz::frames(data) {
        let Ok(header) = frame.header else { break };
        if frame.payload.len() < header.len as usize {
            // The stream ended inside the payload: a driver reports a truncated frame.
            break;
        }
        if header.kind == kind::BATCH {
            sprat_fuzz::check_batch(frame.payload);
        } else {
            sprat_fuzz::check_control(header.kind, frame.payload);
        }
    }
});
