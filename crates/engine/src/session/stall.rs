//! The stall watchdog of a transfer: a session whose connections (those its [`Abort`]
//! watches) move no byte in either direction for `--stall-timeout` while it is running is
//! failed with [`TransferError::Stalled`], which shuts its sockets down so that no thread
//! stays blocked on a connection that neither breaks nor delivers. A retry (see
//! `roles::retry`) then starts the transfer again. Not for detecting a slow link: any byte of
//! progress resets the clock. The same watchdog stops a session asked to stop from outside
//! (see [`Cancel`]).

use crate::error::TransferError;
use crate::sync::{Abort, Cancel};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// How long a session may move nothing, the option that set it (named in the error), and
/// what stops it from outside.
pub(crate) type Patience<'a> = (Duration, &'static str, &'a Cancel);

/// Runs `body` with a watchdog on the bytes moved by the connections `abort` watches: if
/// none moves for `timeout` (and the transfer has not failed already), `abort` fails with a
/// stall naming `peer` and `option`; once `cancel` is set, `abort` fails at once. The
/// watchdog ends when `body` returns. A zero `timeout` turns the stall check off.
pub(crate) fn watched<T>(
    abort: &Abort,
    (timeout, option, cancel): Patience<'_>,
    peer: &str,
    body: impl FnOnce() -> T,
) -> T {
    watched_by(
        abort,
        &|| abort.moved(),
        (timeout, option, cancel),
        peer,
        body,
    )
}

/// [`watched`], counting the bytes `moved` says instead of those of `abort`'s connections
/// alone: for a push over several servers, where one session waiting for the others to
/// finish is not stalled while they move data.
pub(crate) fn watched_by<T>(
    abort: &Abort,
    moved: &(dyn Fn() -> u64 + Sync),
    (timeout, option, cancel): Patience<'_>,
    peer: &str,
    body: impl FnOnce() -> T,
) -> T {
    let watchdog = Watchdog {
        progress: moved,
        abort,
        timeout,
        option,
        cancel,
        peer,
    };
    watchdog.run(body)
}

/// What the watchdog watches, and what it fails.
struct Watchdog<'a> {
    progress: &'a (dyn Fn() -> u64 + Sync),
    abort: &'a Abort,
    timeout: Duration,
    option: &'static str,
    cancel: &'a Cancel,
    peer: &'a str,
}

impl Watchdog<'_> {
    fn run<T>(&self, body: impl FnOnce() -> T) -> T {
        std::thread::scope(|s| {
            let (stop_tx, stop) = bounded::<()>(0);
            s.spawn(move || self.watch(&stop));
            let out = body();
            drop::<Sender<()>>(stop_tx);
            out
        })
    }

    fn watch(&self, stop: &Receiver<()>) {
        let tick = if self.timeout.is_zero() {
            Duration::from_millis(250)
        } else {
            (self.timeout / 8).clamp(Duration::from_millis(10), Duration::from_millis(250))
        };
        let mut last = (self.progress)();
        let mut since = Instant::now();
        loop {
            match stop.recv_timeout(tick) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            if self.abort.is_set() {
                return;
            }
            if self.cancel.is_cancelled() {
                tracing::info!(peer = self.peer, "asked to stop");
                return self.abort.fail(TransferError::Local(
                    "the transfer was stopped: its client went away".into(),
                ));
            }
            if self.timeout.is_zero() {
                continue;
            }
            let now = (self.progress)();
            if now != last {
                last = now;
                since = Instant::now();
            } else if since.elapsed() >= self.timeout {
                tracing::info!(peer = self.peer, timeout = ?self.timeout, "no progress: stalled");
                return self.abort.fail(TransferError::Stalled {
                    peer: self.peer.to_string(),
                    after: self.timeout,
                    option: self.option,
                });
            }
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
        let cancel = Cancel::default();
        let watchdog = Watchdog {
            progress: &progress,
            abort: &abort,
            timeout: Duration::from_millis(50),
            option: "--stall-timeout",
            cancel: &cancel,
            peer: "p",
        };
        watchdog.run(|| {
            for _ in 0..20 {
                counter.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        assert!(!abort.is_set(), "progress every 10 ms is not a stall");
        watchdog.run(|| {
            let until = Instant::now() + Duration::from_secs(5);
            while !abort.is_set() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let stalled = abort.take().expect("a stall");
        assert!(matches!(stalled, TransferError::Stalled { .. }));
        assert_eq!(
            stalled.to_string(),
            "no progress from p for 0 s (--stall-timeout)"
        );
    }

    #[test]
    fn a_cancelled_transfer_fails_even_without_a_stall_timeout() {
        let (abort, cancel) = (Abort::default(), Cancel::default());
        let watchdog = Watchdog {
            progress: &|| 0,
            abort: &abort,
            timeout: Duration::ZERO,
            option: "--stall-timeout",
            cancel: &cancel,
            peer: "p",
        };
        watchdog.run(|| {
            cancel.cancel();
            let until = Instant::now() + Duration::from_secs(5);
            while !abort.is_set() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        assert!(matches!(abort.take(), Some(TransferError::Local(_))));
    }
}
