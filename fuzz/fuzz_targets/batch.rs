//! A batch frame's payload, decoded ([`sprat_proto::BatchView::decode`]) and rebuilt with the
//! sender's own methods: same entries, same totals, same bytes ([`sprat_fuzz::check_batch`]).
//! The header check makes random bytes fail early, so half the inputs are taken as entry
//! headers and data behind a correct check, to reach the entry decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sprat_proto::batch::BATCH_FIXED_LEN;
use sprat_proto::{Batch, FRAME_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        sprat_fuzz::check_batch(rest);
        return;
    }
    // [u32 count][u16 header length][header][data], framed with a correct check.
    if rest.len() < 6 {
        return;
    }
    let count = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) % 64;
    let header_len = (u16::from_le_bytes([rest[4], rest[5]]) as usize).min(rest.len() - 6);
    let batch = Batch {
        seq: u64::from(mode),
        count,
        header: rest[6..6 + header_len].to_vec(),
        data: rest[6 + header_len..].to_vec(),
        totals: Default::default(),
    };
    let mut payload = batch.frame_prefix()[FRAME_HEADER_LEN..].to_vec();
    assert_eq!(payload.len(), BATCH_FIXED_LEN);
    payload.extend_from_slice(&batch.header);
    payload.extend_from_slice(&batch.data);
    let decoded = sprat_fuzz::check_batch(&payload);
    // The local hand-off decodes the same buffers without the frame: the same verdict.
    assert_eq!(
        decoded,
        batch.view().is_ok(),
        "wire and local decoders disagree"
    );
});
