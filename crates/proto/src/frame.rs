//! Frame layout: every message travels as `[u32 payload length][u8 kind][payload]`.
//!
//! The header is decoded before the payload is read so that a driver can refuse an oversized
//! frame before allocating for it. Limits depend on the kind: only batches may be large.

use crate::codec::DecodeError;

/// Bytes in a frame header.
pub const FRAME_HEADER_LEN: usize = 5;
/// Largest payload of a batch frame (the batch target size is capped well below this).
pub const MAX_BATCH_PAYLOAD: u32 = 160 << 20;
/// Largest payload of any other frame.
pub const MAX_CONTROL_PAYLOAD: u32 = 1 << 20;

/// Message kinds on the wire.
pub mod kind {
    pub const SERVER_HELLO: u8 = 1;
    pub const CLIENT_AUTH: u8 = 2;
    pub const CLIENT_HELLO: u8 = 3;
    pub const ERROR: u8 = 4;
    pub const OPEN: u8 = 5;
    pub const OPENED: u8 = 6;
    pub const JOIN: u8 = 7;
    pub const JOINED: u8 = 8;
    pub const BATCH: u8 = 9;
    pub const BATCH_ACK: u8 = 10;
    pub const END: u8 = 11;
    pub const END_ACK: u8 = 12;
    pub const COMMIT: u8 = 13;
    pub const DONE: u8 = 14;
    pub const REQUEST: u8 = 15;
    pub const ENTRIES: u8 = 16;
    pub const SUMS: u8 = 17;
    pub const USAGE: u8 = 18;
    pub const REPLY_END: u8 = 19;
    pub const TICKET: u8 = 20;
    pub const PROGRESS: u8 = 21;
    pub const LOCATION: u8 = 22;
    pub const SUPERSEDED: u8 = 23;
    pub const LISTED_AT: u8 = 24;
    pub const WORKING: u8 = 25;
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: u8,
    pub len: u32,
}

impl FrameHeader {
    /// Decodes and validates a header: unknown kinds and over-long payloads are refused here.
    pub fn decode(bytes: &[u8; FRAME_HEADER_LEN]) -> Result<FrameHeader, DecodeError> {
        let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let kind = bytes[4];
        let limit = match kind {
            kind::BATCH => MAX_BATCH_PAYLOAD,
            kind::SERVER_HELLO..=kind::WORKING => MAX_CONTROL_PAYLOAD,
            other => {
                return Err(DecodeError::Unknown {
                    what: "frame kind",
                    value: other as u64,
                })
            }
        };
        if len > limit {
            return Err(DecodeError::TooLong {
                what: "frame",
                len: len as u64,
                limit: limit as u64,
            });
        }
        Ok(FrameHeader { kind, len })
    }

    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let l = self.len.to_le_bytes();
        [l[0], l[1], l[2], l[3], self.kind]
    }
}
