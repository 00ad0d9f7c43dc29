//! Bounds-checked primitives for reading and writing little-endian wire values.
//!
//! `Reader` never reads past its slice and never allocates on a peer's say-so: every variable
//! length is compared with the bytes actually present and with a caller-given cap first.

use thiserror::Error;

/// Why a frame or message could not be decoded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    #[error("truncated {0}")]
    Truncated(&'static str),
    #[error("{what} length {len} exceeds limit {limit}")]
    TooLong {
        what: &'static str,
        len: u64,
        limit: u64,
    },
    #[error("{0} trailing bytes after message")]
    TrailingBytes(usize),
    #[error("unknown {what} {value}")]
    Unknown { what: &'static str, value: u64 },
    #[error("invalid {what}: {why}")]
    Invalid {
        what: &'static str,
        why: &'static str,
    },
}

/// A cursor over a received byte slice.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated(what));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// What is left, without consuming it.
    pub fn peek_rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(what)?[0])
    }
    pub fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    pub fn u128(&mut self, what: &'static str) -> Result<u128, DecodeError> {
        Ok(u128::from_le_bytes(self.array(what)?))
    }

    /// A byte string prefixed by a u16 length, at most `limit` bytes.
    pub fn bytes16(&mut self, what: &'static str, limit: usize) -> Result<&'a [u8], DecodeError> {
        let len = self.u16(what)? as usize;
        if len > limit {
            return Err(DecodeError::TooLong {
                what,
                len: len as u64,
                limit: limit as u64,
            });
        }
        self.take(len, what)
    }

    /// Fails if any byte is left: every message must be consumed exactly.
    pub fn finish(self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }
}

/// Appends a u16-length-prefixed byte string. Callers guarantee `bytes.len() <= u16::MAX`
/// (all such fields have protocol limits far below that); longer input is truncated at the
/// limit rather than corrupting the stream, and decoders reject it by its content.
pub fn put_bytes16(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = bytes.len().min(u16::MAX as usize);
    out.extend_from_slice(&(len as u16).to_le_bytes());
    out.extend_from_slice(&bytes[..len]);
}
