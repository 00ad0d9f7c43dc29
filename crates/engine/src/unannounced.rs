//! Batches a push stream sent before the server announced the stream (`Opened` or `Joined`).
//!
//! A push sends its first batches right behind its `Open` or `Join`. A server that refuses a
//! joining stream (full, or a ticket that does not cover it) reads none of them, so the client
//! keeps each batch it sent until the stream is announced, and on a refusal hands them back to
//! the other streams: the transfer goes on with the streams it has, and nothing is lost.

use sprat_proto::Batch;
use std::sync::Mutex;

/// Most bytes of batches one stream sends before it is announced: a server holds a join until
/// its session is open (up to 10 s), and the client keeps all of it in memory meanwhile.
pub const HELD_LIMIT: u64 = 2 << 20;

/// One stream's batches in doubt.
pub struct Unannounced {
    state: Mutex<State>,
}

enum State {
    /// Not announced yet: what the stream sent so far.
    Holding(Vec<Batch>),
    /// Announced: the server acknowledges what arrives.
    Announced,
    /// Refused: everything sent on it must go again elsewhere.
    Refused,
}

impl Unannounced {
    /// For a stream that still awaits its announcement (`awaiting`), or one already announced.
    pub fn new(awaiting: bool) -> Unannounced {
        let state = if awaiting {
            State::Holding(Vec::new())
        } else {
            State::Announced
        };
        Unannounced {
            state: Mutex::new(state),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called once `batch` went out on the stream (or failed to): kept while the stream is not
    /// announced; handed back if the stream was refused meanwhile (send it elsewhere).
    pub fn sent(&self, batch: Batch) -> Option<Batch> {
        match &mut *self.lock() {
            State::Holding(held) => {
                held.push(batch);
                None
            }
            State::Announced => None,
            State::Refused => Some(batch),
        }
    }

    /// Whether the stream, not announced yet, holds [`HELD_LIMIT`] or more (it should wait).
    pub fn over_limit(&self) -> bool {
        match &*self.lock() {
            State::Holding(held) => {
                held.iter()
                    .map(|b| (b.header.len() + b.data.len()) as u64)
                    .sum::<u64>()
                    >= HELD_LIMIT
            }
            State::Announced | State::Refused => false,
        }
    }

    /// The server announced the stream: what it sent will be acknowledged.
    pub fn announced(&self) {
        *self.lock() = State::Announced;
    }

    /// The server refused the stream: returns what it sent, to go again elsewhere.
    pub fn refused(&self) -> Vec<Batch> {
        match std::mem::replace(&mut *self.lock(), State::Refused) {
            State::Holding(held) => held,
            State::Announced | State::Refused => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seq: u64) -> Batch {
        Batch::new(seq, 0)
    }

    #[test]
    fn batches_are_held_until_the_announcement_and_returned_on_a_refusal() {
        let announced = Unannounced::new(true);
        assert!(announced.sent(batch(1)).is_none());
        announced.announced();
        assert!(announced.sent(batch(2)).is_none());
        assert!(announced.refused().is_empty());

        let refused = Unannounced::new(true);
        assert!(refused.sent(batch(1)).is_none());
        assert!(refused.sent(batch(2)).is_none());
        let back: Vec<u64> = refused.refused().iter().map(|b| b.seq).collect();
        assert_eq!(back, [1, 2]);
        // A batch whose send was under way when the refusal came is handed back at once.
        assert_eq!(refused.sent(batch(3)).map(|b| b.seq), Some(3));
    }

    #[test]
    fn a_stream_holding_enough_waits_for_its_announcement() {
        let held = Unannounced::new(true);
        let mut big = Batch::new(1, 0);
        big.data = vec![0; HELD_LIMIT as usize];
        assert!(!held.over_limit());
        assert!(held.sent(big).is_none());
        assert!(held.over_limit());
        held.announced();
        assert!(!held.over_limit());
    }
}
