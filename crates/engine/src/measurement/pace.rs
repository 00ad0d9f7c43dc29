//! `--bwlimit`: one pace shared by every connection of a client's transfer, so that the bytes
//! of all its streams together stay at or under a rate.
//!
//! A stream reserves the time its batch takes at the rate, after every reservation made
//! before it, and sleeps until that time has passed: a sender before it writes the batch, a
//! receiver after it read one (it then reads nothing while it sleeps, and TCP's flow control
//! slows the sender down). The unit is a batch or chunk, so the rate holds over a few of them,
//! not within one. Not for servers: what they send and receive is paced by their clients.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A rate shared by the connections of one transfer (clones share it).
#[derive(Debug, Clone)]
pub struct Pace {
    bytes_per_s: u64,
    /// When the bytes reserved so far have had their time at the rate.
    free_at: Arc<Mutex<Option<Instant>>>,
}

impl Pace {
    /// A pace of `bytes_per_s` (at least 1).
    pub fn new(bytes_per_s: u64) -> Pace {
        Pace {
            bytes_per_s: bytes_per_s.max(1),
            free_at: Arc::default(),
        }
    }

    /// The rate, in bytes per second.
    pub fn bytes_per_s(&self) -> u64 {
        self.bytes_per_s
    }

    /// Reserves `bytes` at the rate after everything reserved before and returns when their
    /// time is over.
    pub fn take(&self, bytes: u64) {
        let until = self.reserve(bytes, Instant::now());
        let now = Instant::now();
        if until > now {
            std::thread::sleep(until - now);
        }
    }

    /// The moment by which `bytes` reserved at `now` have had their time.
    fn reserve(&self, bytes: u64, now: Instant) -> Instant {
        let span = Duration::from_secs_f64(bytes as f64 / self.bytes_per_s as f64);
        let mut free_at = crate::sync::lock(&self.free_at);
        // Time not used (a pause between batches) is not saved up for a burst later.
        let start = free_at.map_or(now, |t| t.max(now));
        let until = start + span;
        *free_at = Some(until);
        until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_follow_one_another_at_the_rate() {
        let pace = Pace::new(1_000_000);
        let now = Instant::now();
        assert_eq!(pace.reserve(500_000, now), now + Duration::from_millis(500));
        // A second stream's batch waits for the first one's time.
        assert_eq!(pace.reserve(250_000, now), now + Duration::from_millis(750));
        // After an idle second, the next starts from now: no saved-up burst.
        let later = now + Duration::from_secs(2);
        assert_eq!(pace.reserve(1_000, later), later + Duration::from_millis(1));
    }
}
