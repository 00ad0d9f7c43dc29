//! Spare batch buffers: the memory of a batch that has been written (by the writers) or sent
//! (by a send stage), kept for the next batch a socket delivers or a reader fills.
//!
//! A batch is megabytes in a buffer that lives until the batch is written or sent. Allocated
//! afresh each time, every batch costs the kernel a page fault and a zeroed page per 4 KiB,
//! and the allocator another pass to initialise what the socket or the files then overwrite:
//! a third of a receiving server's CPU in a profile of 1 MiB files over loopback. A spare
//! buffer is mapped and initialised already.
//!
//! One list for the whole process, holding at most [`IDLE_BYTES`]: the batches themselves are
//! bounded by the server's memory budget while they are in flight, and what waits here for
//! the next one stays small whatever the number of sessions. A spare buffer still holds an
//! earlier batch's bytes; whoever takes one overwrites all of it before using it.

use crate::sync::lock;
use std::sync::Mutex;

/// The most the idle buffers may hold, in bytes of capacity.
pub(crate) const IDLE_BYTES: usize = 64 << 20;

struct Idle {
    buffers: Vec<Vec<u8>>,
    bytes: usize,
}

static IDLE: Mutex<Idle> = Mutex::new(Idle {
    buffers: Vec::new(),
    bytes: 0,
});

/// A buffer of exactly `len` bytes to read a payload into: a spare one with room for them
/// when there is one (its contents are stale), else a new one.
pub(crate) fn buffer(len: usize) -> Vec<u8> {
    match take(len) {
        Some(mut spare) => {
            // Within its capacity: shrinking keeps the memory, growing initialises only the
            // new part.
            spare.resize(len, 0);
            spare
        }
        None => vec![0; len],
    }
}

/// An empty buffer with room for `capacity` bytes, for a batch being built.
pub(crate) fn empty(capacity: usize) -> Vec<u8> {
    match take(capacity) {
        Some(mut spare) => {
            spare.clear();
            spare
        }
        None => Vec::with_capacity(capacity),
    }
}

/// The most recently given back idle buffer that fits `len` bytes (see [`fits`]).
fn take(len: usize) -> Option<Vec<u8>> {
    let mut idle = lock(&IDLE);
    let at = idle.buffers.iter().rposition(|b| fits(b.capacity(), len))?;
    let spare = idle.buffers.swap_remove(at);
    idle.bytes -= spare.capacity();
    Some(spare)
}

/// Whether a buffer of `capacity` bytes may hold `len`. One too small is not grown: that
/// would copy its stale bytes and double its size. One much larger is not taken either: a
/// server charges a batch its length against the clients' memory budget (`crate::budget`), so
/// a small batch must not hold a large buffer. The slack, an eighth and 64 KiB, lets batches of
/// one target size share buffers; the server's memory bound counts it (`MemoryBound`).
fn fits(capacity: usize, len: usize) -> bool {
    capacity >= len && capacity - len <= len / 8 + SLACK
}

/// The fixed part of the slack [`fits`] allows.
pub(crate) const SLACK: usize = 64 << 10;

/// Keeps `buffer` for a later [`buffer`] if the idle ones leave room for it, else frees it.
pub(crate) fn give_back(buffer: Vec<u8>) {
    let mut idle = lock(&IDLE);
    if buffer.capacity() > 0 && idle.bytes + buffer.capacity() <= IDLE_BYTES {
        idle.bytes += buffer.capacity();
        idle.buffers.push(buffer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_has_the_length_asked_and_idle_memory_stays_bounded() {
        let b = buffer(1000);
        assert_eq!(b.len(), 1000);
        give_back(b);
        let b = buffer(10);
        assert_eq!(b.len(), 10);
        give_back(b);
        // More than the bound given back: the list keeps what fits and frees the rest.
        for _ in 0..(IDLE_BYTES / (8 << 20)) + 4 {
            give_back(vec![0u8; 8 << 20]);
        }
        assert!(lock(&IDLE).bytes <= IDLE_BYTES);
        let b = buffer(5 << 20);
        assert_eq!(b.len(), 5 << 20);
        let e = empty(3 << 20);
        assert!(e.is_empty() && e.capacity() >= 3 << 20);
    }

    #[test]
    fn a_buffer_fits_a_length_within_an_eighth_and_64_kib_above_it() {
        assert!(fits(4 << 20, 4 << 20));
        assert!(fits((4 << 20) + (512 << 10) + SLACK, 4 << 20));
        assert!(!fits((4 << 20) + (512 << 10) + SLACK + 1, 4 << 20));
        assert!(!fits((4 << 20) - 1, 4 << 20));
        assert!(fits(SLACK, 0));
        assert!(!fits(1 << 20, 4096));
    }

    #[test]
    fn a_spare_buffer_too_small_is_not_taken() {
        give_back(vec![7u8; 100]);
        let b = buffer(1 << 20);
        assert_eq!(b.len(), 1 << 20);
        assert!(
            b.iter().all(|&x| x == 0),
            "a new buffer, not the small spare grown"
        );
    }
}
