//! A sending stream's opening window: on a long path, the batches a stream takes in its first
//! round trips keep to what TCP's slow start lets it send, so that a transfer's first batches
//! spread over every stream instead of queueing on the first streams to ask.
//!
//! A socket takes a batch whenever its buffer has room, long before slow start lets the bytes
//! leave: the first streams to ask would take most of a small transfer, each needing several
//! round trips for what the other streams could have carried in one. The window starts at
//! TCP's initial window and grows by what the receiver acknowledges, as slow start does; a
//! stream takes another batch only while its unacknowledged bytes and one batch as large as
//! its last fit in the window, or when it has nothing unacknowledged. The planner makes the
//! opening batches to fit such a window (`pipeline::plan`, its rounds). Once the window
//! reaches [`OPEN_AT`] it stays open: the opening batches are behind, and TCP's own window
//! paces what follows.
//!
//! Only where a round trip costs something ([`GATED_FROM_RTT`]); on loopback and a LAN every
//! stream takes batches as fast as its socket does.

use crate::sync::lock;
use crossbeam_channel::{bounded, Receiver, Sender};
use std::sync::Mutex;
use std::time::Duration;

/// Shortest round trip on which a stream keeps to its opening window.
pub(crate) const GATED_FROM_RTT: Duration = Duration::from_millis(1);
/// Window at which the gate opens for good: where the planner's opening rounds end.
pub(crate) const OPEN_AT: u64 = crate::pipeline::plan::RAMP_END;

/// One stream's opening window, shared by its sender (which takes batches) and its receiver
/// (which reads their acknowledgements).
pub(crate) struct OpeningWindow {
    state: Mutex<State>,
    wake_tx: Sender<()>,
    wake: Receiver<()>,
}

struct State {
    /// Bytes the stream may have unacknowledged; `None` once open.
    window: Option<u64>,
    /// Batches sent and not acknowledged: sequence number and bytes.
    in_flight: Vec<(u64, u64)>,
    unacked: u64,
    /// Bytes of the batch taken last.
    last: u64,
}

impl OpeningWindow {
    /// A window for a stream on a path of round trip `rtt`: open from the start on a short one.
    pub(crate) fn new(rtt: Duration) -> OpeningWindow {
        let gated = rtt >= GATED_FROM_RTT;
        let (wake_tx, wake) = bounded(1);
        OpeningWindow {
            state: Mutex::new(State {
                window: gated.then_some(crate::tune::INITIAL_CWND),
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
        let s = lock(&self.state);
        match s.window {
            None => true,
            Some(window) => s.unacked == 0 || s.unacked + s.last <= window,
        }
    }

    /// Signalled when an acknowledgement came (wait on it while [`may_take`] says no).
    ///
    /// [`may_take`]: OpeningWindow::may_take
    pub(crate) fn woken(&self) -> &Receiver<()> {
        &self.wake
    }

    /// Batch `seq` of `bytes` is about to go out.
    pub(crate) fn sending(&self, seq: u64, bytes: u64) {
        let mut s = lock(&self.state);
        s.last = bytes;
        if s.window.is_some() {
            s.in_flight.push((seq, bytes));
            s.unacked += bytes;
        }
    }

    /// Batch `seq` was acknowledged: the window grows by its bytes, as slow start's does.
    pub(crate) fn acked(&self, seq: u64) {
        let mut s = lock(&self.state);
        let Some(window) = s.window else {
            return;
        };
        let Some(at) = s.in_flight.iter().position(|&(q, _)| q == seq) else {
            return;
        };
        let (_, bytes) = s.in_flight.swap_remove(at);
        s.unacked -= bytes;
        let grown = window + bytes;
        s.window = (grown < OPEN_AT).then_some(grown);
        drop(s);
        let _ = self.wake_tx.try_send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_on_a_long_path_takes_what_slow_start_lets_it_send() {
        let w = OpeningWindow::new(Duration::from_millis(100));
        assert!(w.may_take());
        w.sending(1, 14_000);
        assert!(
            !w.may_take(),
            "a second batch would not leave in the first round trip"
        );
        w.acked(1);
        assert!(w.woken().try_recv().is_ok());
        // The window doubled: two batches of the first size, then it waits again.
        w.sending(2, 14_000);
        assert!(w.may_take());
        w.sending(3, 14_000);
        assert!(!w.may_take());
        w.acked(3);
        w.acked(2);
        // A larger batch than the window still goes when nothing is unacknowledged.
        assert!(w.may_take());
        w.sending(4, 250_000);
        assert!(!w.may_take());
        w.acked(4);
        assert!(w.may_take());
        w.sending(5, 1 << 20);
        assert!(w.may_take(), "open once the window reached {OPEN_AT}");
        // Acknowledgements of batches it does not know change nothing.
        w.acked(99);
        assert!(w.may_take());
    }

    #[test]
    fn a_stream_on_a_short_path_is_never_held() {
        let w = OpeningWindow::new(Duration::from_micros(50));
        for seq in 1..100 {
            w.sending(seq, 1 << 20);
            assert!(w.may_take());
        }
    }
}
