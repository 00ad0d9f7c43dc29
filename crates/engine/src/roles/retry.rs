//! Retries of a whole transfer: when a run fails on its connections (lost, reset, stalled,
//! refused after it had connected, or corrupted in transit), the transfer is run again after
//! an exponential backoff (1 s, 2 s, 4 s ... at most 60 s) until it succeeds or `--retry-for`
//! has passed. A run again is a re-sync: the destination's complete files are left alone by
//! the quick check and a large file cut in the middle resumes from its verified ranges, so
//! what earlier runs wrote is not sent again and counts as up to date in the report. Not for
//! errors that another run cannot fix (authentication, a full disk, a read-only server, bad
//! input): those end the transfer at once. A run that completed with files whose data was
//! damaged on the way, or large files still incomplete, is run again the same way (at most
//! [`MAX_RUNS_FOR_FAILED_FILES`] runs in all): the re-sync sends only those files.

use crate::error::TransferError;
use crate::report::Report;
use std::fmt;
use std::time::{Duration, Instant};

/// Longest wait between two runs.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Wait before the second run.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Most runs of a transfer whose runs complete with files worth sending again (a damaged
/// link that keeps damaging data is not worth more).
const MAX_RUNS_FOR_FAILED_FILES: u32 = 3;

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
            seconds(self.wait),
            self.left.as_secs()
        )
    }
}

/// Whole seconds as they are, a wait cut to what is left of `--retry-for` to a tenth.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}

/// The wait after failed run number `attempt`.
fn backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1 << attempt.saturating_sub(1).min(16))
        .min(MAX_BACKOFF)
}

/// Runs `run` until it succeeds, fails in a way another run cannot fix, or `retry_for` has
/// passed since the failures began (then [`TransferError::GaveUp`], with the last error): a
/// run that failed after it had copied something (`progressed`, asked after each failed run)
/// starts the window again, so that a long copy that loses its connection after an hour is
/// retried like a short one, and `retry_for` bounds the time without progress.
/// A first run that never completed a handshake with a sprat server is not retried: a wrong
/// address, a server that is not there or a peer that is not sprat is reported at once, as
/// any tool would; once a server has proved itself, its going away (a restart, a lost link)
/// is waited for.
pub(crate) fn retrying(
    retry_for: Duration,
    notify: &mut dyn FnMut(&Notice),
    progressed: &dyn Fn() -> bool,
    mut run: impl FnMut() -> Result<Report, TransferError>,
) -> Result<Report, TransferError> {
    let started = Instant::now();
    let mut attempt = 1;
    let proved_before = crate::net::servers_proved();
    // The report of the runs since the last one cut short, which completed with files to
    // send again; and when the run after that started.
    let mut earlier: Option<Report> = None;
    let mut counted_from = started;
    // When the failures in a row began, and how many runs of them failed (for the backoff).
    let mut streak: Option<(Instant, u32)> = None;
    loop {
        let outcome = run();
        let (since, failed_runs) = match streak {
            Some((since, n)) if !progressed() => (since, n + 1),
            _ => (Instant::now(), 1),
        };
        let elapsed = since.elapsed();
        // The last wait is cut to what is left, so that the last run starts when
        // `--retry-for` ends rather than a whole backoff before it.
        let wait = backoff(failed_runs).min(retry_for.saturating_sub(elapsed));
        let in_time = elapsed < retry_for;
        // What failed, for the line that says another run follows.
        let failed = match outcome {
            Ok(report) => {
                let mut report = match earlier.take() {
                    Some(before) => report.after(&before, counted_from.elapsed()),
                    None => {
                        let mut report = report;
                        report.counts_since_attempt = attempt;
                        report
                    }
                };
                report.attempts = attempt;
                let mut again = report.failures.iter().filter(|f| f.is_worth_another_run());
                let Some(first) = again.next() else {
                    return Ok(report);
                };
                if attempt >= MAX_RUNS_FOR_FAILED_FILES || !in_time {
                    return Ok(report);
                }
                let line = format!(
                    "{} to send again ({}: {})",
                    crate::report::counted(1 + again.count() as u64, "file", "files"),
                    first.path,
                    first.error
                );
                earlier = Some(report);
                line
            }
            Err(error) => {
                // What earlier runs sent is not known: the next run counts it up to date.
                earlier = None;
                // A server at its limit of handshakes is waited for, as a busy one is.
                let busy = matches!(error, TransferError::ClosedBeforeHandshake { .. });
                // The server that failed it never proved itself here (a third-party copy's
                // source, asked after its destination did): not one that went away.
                let unproved = match &error {
                    TransferError::Connect { peer, .. }
                    | TransferError::ConnectionLost { peer, .. }
                    | TransferError::Protocol { peer, .. } => !crate::net::proved_at(peer),
                    _ => false,
                };
                let never_connected = attempt == 1
                    && (crate::net::servers_proved() == proved_before || unproved)
                    && !busy;
                if retry_for.is_zero() || !error.is_retryable() || never_connected {
                    return Err(error);
                }
                if !in_time {
                    return Err(TransferError::GaveUp {
                        attempts: attempt,
                        after: started.elapsed(),
                        last: Box::new(error),
                    });
                }
                error.to_string()
            }
        };
        streak = Some((since, failed_runs));
        notify(&Notice {
            attempt,
            error: failed,
            wait,
            left: retry_for.saturating_sub(elapsed),
        });
        tracing::info!(attempt, ?wait, "transfer failed; running it again");
        std::thread::sleep(wait);
        if earlier.is_none() {
            counted_from = Instant::now();
        }
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprat_proto::ErrorCode;

    fn lost() -> TransferError {
        TransferError::ConnectionLost {
            peer: "p".into(),
            why: "reset".into(),
        }
    }

    /// A report of a run in which `failures` (path, error) failed.
    fn report(failures: &[(&str, &str)]) -> Report {
        let mut r = Report::new(
            "push",
            "s".into(),
            "d".into(),
            &crate::report::Counts::default(),
            Duration::from_secs(1),
            1,
            crate::report::Stages::default(),
        );
        for (path, error) in failures {
            r.add_failure(path.as_bytes(), error);
        }
        r
    }

    #[test]
    fn a_run_with_files_damaged_on_the_way_runs_again_a_few_times_at_most() {
        let damaged = "checksum mismatch: data corrupted in transit";
        let unreadable = "open 'u': Permission denied (os error 13)";
        // Damaged once, then the re-sync sends it right.
        let mut notices = Vec::new();
        let mut runs = 0;
        let out = retrying(
            Duration::from_secs(600),
            &mut |n| notices.push(n.to_string()),
            &|| false,
            || {
                runs += 1;
                let first = [("f", damaged), ("u", unreadable)];
                Ok(report(if runs == 1 { &first } else { &first[1..] }))
            },
        )
        .unwrap();
        assert_eq!((runs, out.attempts, out.failed), (2, 2, 1));
        assert_eq!(notices.len(), 1);
        assert!(
            notices[0].starts_with("attempt 1 failed: 1 file to send again (f: checksum"),
            "{}",
            notices[0]
        );
        // Damaged every time: three runs, then the report says so.
        let mut runs = 0;
        let out = retrying(Duration::from_secs(600), &mut |_| {}, &|| false, || {
            runs += 1;
            Ok(report(&[("f", damaged)]))
        })
        .unwrap();
        assert_eq!((runs, out.failed), (MAX_RUNS_FOR_FAILED_FILES, 1));
        // Failures another run cannot fix, or no --retry-for: one run.
        for (failures, retry_for) in [(&[("u", unreadable)][..], 600), (&[("f", damaged)][..], 0)] {
            let mut runs = 0;
            let out = retrying(
                Duration::from_secs(retry_for),
                &mut |_| {},
                &|| false,
                || {
                    runs += 1;
                    Ok(report(failures))
                },
            )
            .unwrap();
            assert_eq!((runs, out.failed), (1, 1));
        }
    }

    #[test]
    fn the_backoff_doubles_up_to_a_minute() {
        let waits: Vec<u64> = (1..=8).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    /// Runs a transfer whose every run fails with `fail()`, for up to 600 s of
    /// `--retry-for`; another run is a panic. How many runs there were, and the outcome.
    fn runs_failing(
        mut fail: impl FnMut() -> TransferError,
    ) -> (u32, Result<Report, TransferError>) {
        let mut runs = 0;
        let out = retrying(
            Duration::from_secs(600),
            &mut |_| panic!("no retry"),
            &|| false,
            || {
                runs += 1;
                Err(fail())
            },
        );
        (runs, out)
    }

    #[test]
    fn errors_another_run_cannot_fix_end_the_transfer_at_once() {
        let (runs, out) = runs_failing(|| TransferError::Auth {
            peer: "p".into(),
            why: "bad token".into(),
        });
        assert!(matches!(out, Err(TransferError::Auth { .. })));
        assert_eq!(runs, 1);
        // A server of another protocol version, one that proved itself (its key was pinned):
        // as this release says it, and as releases of protocol 19 and older did.
        let older = "the client speaks sprat protocol 20 and this server 19: run the same sprat \
                     release on both";
        for code in [ErrorCode::VersionMismatch, ErrorCode::Protocol] {
            let (runs, out) = runs_failing(|| {
                crate::net::server_proved("older");
                TransferError::Remote {
                    peer: "older".into(),
                    code,
                    text: older.into(),
                }
            });
            assert!(matches!(out, Err(TransferError::Remote { .. })));
            assert_eq!(runs, 1, "{code:?}");
        }
        // Nobody listening on the first run: reported at once. Also when another server
        // proved itself in the run (a third-party copy's destination answered, its source is
        // not there).
        for (unreached, other_proved) in [
            ("nobody-listening", None),
            ("a-source-never-reached", Some("the-destination")),
        ] {
            let (runs, out) = runs_failing(|| {
                if let Some(other) = other_proved {
                    crate::net::server_proved(other);
                }
                TransferError::Connect {
                    peer: unreached.into(),
                    source: std::io::ErrorKind::ConnectionRefused.into(),
                }
            });
            assert!(matches!(out, Err(TransferError::Connect { .. })));
            assert_eq!(runs, 1);
        }
    }

    #[test]
    fn a_lost_connection_is_retried_until_the_deadline_then_given_up() {
        let mut notices = Vec::new();
        let out = retrying(
            Duration::from_millis(1500),
            &mut |n| notices.push(n.to_string()),
            &|| false,
            || {
                // A server was there: its going away is waited for.
                crate::net::server_proved("p");
                Err(lost())
            },
        );
        match out {
            Err(TransferError::GaveUp { attempts, last, .. }) => {
                assert_eq!(
                    attempts, 3,
                    "1 s after the first, then the 0.5 s left, then the deadline"
                );
                assert!(matches!(*last, TransferError::ConnectionLost { .. }));
            }
            other => panic!("expected GaveUp, got {other:?}"),
        }
        assert_eq!(notices.len(), 2);
        assert!(notices[0]
            .starts_with("attempt 1 failed: connection to p lost: reset; trying again in 1 s"));
        assert!(
            notices[1].contains("trying again in 0.5 s (0 s left"),
            "{}",
            notices[1]
        );
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
