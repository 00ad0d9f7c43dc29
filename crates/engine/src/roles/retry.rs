//! Retries of a whole transfer: when a run fails on its connections (lost, reset, stalled,
//! refused after it had connected, or corrupted in transit), the transfer is run again after
//! an exponential backoff (1 s, 2 s, 4 s ... at most 60 s) until it succeeds or `--retry-for`
//! has passed. A run again is a re-sync: the destination's complete files are left alone by
//! the quick check and a large file cut in the middle resumes from its verified ranges, so
//! what earlier runs wrote is not sent again and counts as up to date in the report. Not for
//! errors that another run cannot fix (authentication, a full disk, a read-only server, bad
//! input): those end the transfer at once.

use crate::error::TransferError;
use crate::report::Report;
use std::fmt;
use std::time::{Duration, Instant};

/// Longest wait between two runs.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Wait before the second run.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// A failed run that will be followed by another.
#[derive(Debug)]
pub struct Notice {
    /// The run that failed (from 1).
    pub attempt: u32,
    pub error: String,
    /// The wait before the next run.
    pub wait: Duration,
    /// Time left until the transfer gives up.
    pub left: Duration,
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "attempt {} failed: {}; trying again in {} s ({} s left of --retry-for)",
            self.attempt,
            self.error,
            self.wait.as_secs(),
            self.left.as_secs()
        )
    }
}

/// The wait after failed run number `attempt`.
fn backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1 << attempt.saturating_sub(1).min(16))
        .min(MAX_BACKOFF)
}

/// Runs `run` until it succeeds, fails in a way another run cannot fix, or `retry_for` has
/// passed since the first run started (then [`TransferError::GaveUp`], with the last error).
/// A first run that never completed a handshake with a sprat server is not retried: a wrong
/// address, a server that is not there or a peer that is not sprat is reported at once, as
/// any tool would; once a server has proved itself, its going away (a restart, a lost link)
/// is waited for.
pub(crate) fn retrying(
    retry_for: Duration,
    notify: &mut dyn FnMut(&Notice),
    mut run: impl FnMut() -> Result<Report, TransferError>,
) -> Result<Report, TransferError> {
    let started = Instant::now();
    let mut attempt = 1;
    let proved_before = crate::net::servers_proved();
    loop {
        let error = match run() {
            Ok(mut report) => {
                report.attempts = attempt;
                return Ok(report);
            }
            Err(e) => e,
        };
        let never_connected = attempt == 1 && crate::net::servers_proved() == proved_before;
        if retry_for.is_zero() || !error.is_retryable() || never_connected {
            return Err(error);
        }
        let wait = backoff(attempt);
        let elapsed = started.elapsed();
        if elapsed + wait > retry_for {
            return Err(TransferError::GaveUp {
                attempts: attempt,
                after: elapsed,
                last: Box::new(error),
            });
        }
        notify(&Notice {
            attempt,
            error: error.to_string(),
            wait,
            left: retry_for - elapsed,
        });
        tracing::info!(attempt, ?wait, "transfer failed; running it again");
        std::thread::sleep(wait);
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost() -> TransferError {
        TransferError::ConnectionLost {
            peer: "p".into(),
            why: "reset".into(),
        }
    }

    #[test]
    fn the_backoff_doubles_up_to_a_minute() {
        let waits: Vec<u64> = (1..=8).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn errors_another_run_cannot_fix_end_the_transfer_at_once() {
        let mut runs = 0;
        let out = retrying(
            Duration::from_secs(600),
            &mut |_| panic!("no retry"),
            || {
                runs += 1;
                Err(TransferError::Auth {
                    peer: "p".into(),
                    why: "bad token".into(),
                })
            },
        );
        assert!(matches!(out, Err(TransferError::Auth { .. })));
        assert_eq!(runs, 1);
        // Nobody listening on the first run: reported at once.
        let out = retrying(
            Duration::from_secs(600),
            &mut |_| panic!("no retry"),
            || {
                Err(TransferError::Connect {
                    peer: "p".into(),
                    source: std::io::ErrorKind::ConnectionRefused.into(),
                })
            },
        );
        assert!(matches!(out, Err(TransferError::Connect { .. })));
    }

    #[test]
    fn a_lost_connection_is_retried_until_the_deadline_then_given_up() {
        let mut notices = Vec::new();
        let out = retrying(
            Duration::from_millis(1500),
            &mut |n| notices.push(n.to_string()),
            || {
                // A server was there: its going away is waited for.
                crate::net::server_proved();
                Err(lost())
            },
        );
        match out {
            Err(TransferError::GaveUp { attempts, last, .. }) => {
                assert_eq!(
                    attempts, 2,
                    "1 s after the first, then 2 s would pass the deadline"
                );
                assert!(matches!(*last, TransferError::ConnectionLost { .. }));
            }
            other => panic!("expected GaveUp, got {other:?}"),
        }
        assert_eq!(notices.len(), 1);
        assert!(notices[0]
            .starts_with("attempt 1 failed: connection to p lost: reset; trying again in 1 s"));
        assert_eq!(
            TransferError::GaveUp {
                attempts: 2,
                after: Duration::ZERO,
                last: Box::new(lost())
            }
            .exit_code(),
            6
        );
    }
}
