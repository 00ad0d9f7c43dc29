//! The stall watchdog of a transfer: a session whose connections (those its [`Abort`]
//! watches) move no byte in either direction for `--stall-timeout` while it is running is
//! failed with [`TransferError::Stalled`], which shuts its sockets down so that no thread
//! stays blocked on a connection that neither breaks nor delivers. A retry (see
//! `roles::retry`) then starts the transfer again. Not for detecting a slow link: any byte of
//! progress resets the clock.

use crate::error::TransferError;
use crate::sync::Abort;
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// Runs `body` with a watchdog on the bytes moved by the connections `abort` watches: if
/// none moves for `timeout` (and the transfer has not failed already), `abort` fails with a
/// stall naming `peer`. The watchdog ends when `body` returns. A zero `timeout` turns it off.
pub(crate) fn watched<T>(
    abort: &Abort,
    timeout: Duration,
    peer: &str,
    body: impl FnOnce() -> T,
) -> T {
    watched_by(&|| abort.moved(), abort, timeout, peer, body)
}

/// [`watched`], with progress read from `progress`.
fn watched_by<T>(
    progress: &(dyn Fn() -> u64 + Sync),
    abort: &Abort,
    timeout: Duration,
    peer: &str,
    body: impl FnOnce() -> T,
) -> T {
    if timeout.is_zero() {
        return body();
    }
    std::thread::scope(|s| {
        let (stop_tx, stop) = bounded::<()>(0);
        s.spawn(move || watch(&stop, progress, abort, timeout, peer));
        let out = body();
        drop::<Sender<()>>(stop_tx);
        out
    })
}

fn watch(
    stop: &Receiver<()>,
    progress: &(dyn Fn() -> u64 + Sync),
    abort: &Abort,
    timeout: Duration,
    peer: &str,
) {
    let tick = (timeout / 8).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut last = progress();
    let mut since = Instant::now();
    loop {
        match stop.recv_timeout(tick) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        if abort.is_set() {
            return;
        }
        let now = progress();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= timeout {
            tracing::info!(peer, ?timeout, "no progress: stalled");
            abort.fail(TransferError::Stalled {
                peer: peer.to_string(),
                after: timeout,
            });
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn a_still_counter_fails_the_transfer_and_a_moving_one_does_not() {
        let counter = AtomicU64::new(0);
        let progress = || counter.load(Ordering::Relaxed);
        let abort = Abort::default();
        watched_by(&progress, &abort, Duration::from_millis(50), "p", || {
            for _ in 0..20 {
                counter.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        assert!(!abort.is_set(), "progress every 10 ms is not a stall");
        watched_by(&progress, &abort, Duration::from_millis(50), "p", || {
            let until = Instant::now() + Duration::from_secs(5);
            while !abort.is_set() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        assert!(matches!(abort.take(), Some(TransferError::Stalled { .. })));
    }
}
