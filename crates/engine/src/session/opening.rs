//! A sending stream's first round trip: on a long path, a stream takes no more batches than
//! TCP's initial window lets it send until its first acknowledgement comes, so that a
//! transfer's first batches spread over every stream instead of queueing on the first
//! streams to ask.
//!
//! A socket takes a batch whenever its buffer has room, long before slow start lets the bytes
//! leave: the first streams to ask would take most of a small transfer, each needing several
//! round trips for what the other streams could have carried in one. Until the stream's
//! first acknowledgement, it takes another batch only while its unacknowledged bytes and one
//! batch as large as its last fit in TCP's initial window, or when it has nothing
//! unacknowledged. The planner makes the first round's batches that size (`pipeline::plan`).
//!
//! A pull's server hears no acknowledgements: its streams hold until a round trip (measured
//! in the TLS handshake) has passed since their first batch went out, when TCP's first
//! acknowledgement comes.
//!
//! Only the first round trip: holding later rounds to the window too (until the window
//! reached 256 KiB) spread them no better and cost 100,000 x 4 KiB through 100 ms about
//! 2.5% (each held round waits for the server to write the batch and acknowledge it, where
//! TCP's own window moves on each byte's acknowledgement); see docs/performance.md.
//!
//! Only where a round trip costs something (`tune::SLOW_START_FROM_RTT`); on loopback and a
//! LAN every stream takes batches as fast as its socket does.

use crate::sync::lock;
use crate::tune::{INITIAL_CWND, SLOW_START_FROM_RTT};
use crossbeam_channel::{bounded, Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One stream's first round trip, shared by its sender (which takes batches) and its
/// receiver (which reads their acknowledgements).
pub(crate) struct FirstRoundTrip {
    state: Mutex<State>,
    wake_tx: Sender<()>,
    wake: Receiver<()>,
}

struct State {
    /// No acknowledgement yet (on a long path).
    held: bool,
    /// A sender that hears no acknowledgements: the round trip after its first batch that
    /// ends the hold, and when (once that batch went).
    timed: Option<(Duration, Option<Instant>)>,
    /// Sequence numbers of the batches sent while held.
    in_flight: Vec<u64>,
    unacked: u64,
    /// Bytes of the batch taken last.
    last: u64,
}

impl FirstRoundTrip {
    /// The first round trip of a stream on a path of round trip `rtt`: not held on a short one.
    pub(crate) fn new(rtt: Duration) -> FirstRoundTrip {
        FirstRoundTrip::with(rtt >= SLOW_START_FROM_RTT, None)
    }

    /// The first round trip of a stream that hears no acknowledgements (a pull's server): held
    /// until `rtt` after its first batch, where `rtt` is known and long.
    pub(crate) fn timed(rtt: Option<Duration>) -> FirstRoundTrip {
        let long = rtt.filter(|&r| r >= SLOW_START_FROM_RTT);
        FirstRoundTrip::with(long.is_some(), long.map(|r| (r, None)))
    }

    fn with(held: bool, timed: Option<(Duration, Option<Instant>)>) -> FirstRoundTrip {
        let (wake_tx, wake) = bounded(1);
        FirstRoundTrip {
            state: Mutex::new(State {
                held,
                timed,
                in_flight: Vec::new(),
                unacked: 0,
                last: 0,
            }),
            wake_tx,
            wake,
        }
    }

    /// Whether the stream may take another batch now.
    pub(crate) fn may_take(&self) -> bool {
        let mut s = lock(&self.state);
        if let Some((_, Some(until))) = s.timed {
            if Instant::now() >= until {
                s.held = false;
                s.timed = None;
            }
        }
        !s.held || s.unacked == 0 || s.unacked + s.last <= INITIAL_CWND
    }

    /// How long a timed hold ([`FirstRoundTrip::timed`]) still lasts, once it started.
    pub(crate) fn left(&self) -> Option<Duration> {
        let timed = lock(&self.state).timed;
        match timed {
            Some((_, Some(until))) => Some(until.saturating_duration_since(Instant::now())),
            _ => None,
        }
    }

    /// Signalled when the first acknowledgement came (wait on it while [`may_take`] says no).
    ///
    /// [`may_take`]: FirstRoundTrip::may_take
    pub(crate) fn woken(&self) -> &Receiver<()> {
        &self.wake
    }

    /// Batch `seq` of `bytes` is about to go out. A first batch larger than the initial
    /// window ends the hold at once: it takes round trips of slow start by itself (a stream
    /// joining once the opening batches are behind), and holding would only leave the
    /// stream's socket empty once it is acknowledged.
    pub(crate) fn sending(&self, seq: u64, bytes: u64) {
        let mut s = lock(&self.state);
        if s.held && s.in_flight.is_empty() && bytes > INITIAL_CWND {
            s.held = false;
            s.timed = None;
        }
        if let Some((rtt, until @ None)) = &mut s.timed {
            *until = Some(Instant::now() + *rtt);
        }
        if s.held {
            s.last = bytes;
            s.in_flight.push(seq);
            s.unacked += bytes;
        }
    }

    /// Batch `seq` was acknowledged: the first round trip is over if it was one of the
    /// stream's.
    pub(crate) fn acked(&self, seq: u64) {
        let mut s = lock(&self.state);
        if s.held && s.in_flight.contains(&seq) {
            s.held = false;
            s.in_flight = Vec::new();
            drop(s);
            let _ = self.wake_tx.try_send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_on_a_long_path_takes_what_its_first_round_trip_carries() {
        let w = FirstRoundTrip::new(Duration::from_millis(100));
        assert!(w.may_take());
        w.sending(1, 12_500);
        assert!(
            !w.may_take(),
            "a second batch would not leave in the first round trip"
        );
        // Acknowledgements of batches it did not send change nothing.
        w.acked(99);
        assert!(!w.may_take());
        assert!(w.woken().try_recv().is_err());
        w.acked(1);
        assert!(w.woken().try_recv().is_ok());
        for seq in 2..100 {
            w.sending(seq, 1 << 20);
            assert!(w.may_take(), "open once the first acknowledgement came");
        }
        // A stream whose first batch is larger than the initial window is not held.
        let late = FirstRoundTrip::new(Duration::from_millis(100));
        late.sending(1, 1 << 20);
        assert!(late.may_take());
        // Small batches that fit the initial window together go at once.
        let small = FirstRoundTrip::new(Duration::from_millis(100));
        small.sending(1, 4_000);
        small.sending(2, 4_000);
        assert!(small.may_take());
        small.sending(3, 4_000);
        assert!(!small.may_take());
    }

    #[test]
    fn a_pull_server_stream_holds_for_a_round_trip_after_its_first_batch() {
        let w = FirstRoundTrip::timed(Some(Duration::from_millis(30)));
        assert!(w.may_take());
        assert_eq!(w.left(), None, "the hold starts with the first batch");
        w.sending(1, 12_500);
        assert!(!w.may_take());
        let left = w.left().unwrap();
        assert!(left > Duration::ZERO && left <= Duration::from_millis(30));
        std::thread::sleep(left + Duration::from_millis(1));
        assert!(w.may_take(), "a round trip after the first batch");
        w.sending(2, 1 << 20);
        assert!(w.may_take());
        // Without TLS (no round trip measured) or on a short path: never held.
        for rtt in [None, Some(Duration::from_micros(100))] {
            let w = FirstRoundTrip::timed(rtt);
            w.sending(1, 1 << 20);
            assert!(w.may_take());
        }
    }

    #[test]
    fn a_stream_on_a_short_path_is_never_held() {
        let w = FirstRoundTrip::new(Duration::from_micros(50));
        for seq in 1..100 {
            w.sending(seq, 1 << 20);
            assert!(w.may_take());
        }
    }
}
