//! `sprat cp`'s live progress: one line on the terminal (stderr), rewritten a few times a
//! second (into a file or a pipe, a whole line every 5 s and one at the end), or with
//! `--json-events` one JSON object per line on stdout about once a second and once more at
//! the end. The totals come from a count of the source running beside the copy;
//! files the destination had already count as done but apart (skipped), and the time left is
//! predicted from this run's own per-file overhead and rate, `T = N * t0 + B / R` fitted to
//! the files and bytes copied so far (see [`Eta`]), not from bytes alone.

use sprat_engine::config::Selection;
use sprat_engine::measurement::progress::{count_source, Progress, Snapshot};
use sprat_engine::{Credentials, Endpoint};
use std::io::Write;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where progress goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A line on stderr, rewritten in place.
    Terminal,
    /// The same line on stderr every few seconds, each a line of its own, without terminal
    /// escapes: progress asked for into a log file or a pipe.
    Lines,
    /// JSON lines on stdout.
    Json,
}

/// How long the last word of the progress waits for a count of the source still running
/// when the copy ended (a short copy under load can end first: the totals were then missing).
const COUNT_PATIENCE: Duration = Duration::from_secs(2);

/// A running progress reporter; [`Reporter::finish`] stops it.
pub struct Reporter {
    stop: Sender<()>,
    ticker: JoinHandle<()>,
}

/// Starts counting what `selection` selects of `src` (for the totals) and reporting
/// `progress` in `mode`.
pub fn start(
    mode: Mode,
    progress: Progress,
    src: Endpoint,
    key: Credentials,
    selection: Selection,
    hard_links: bool,
) -> Reporter {
    let counted = progress.clone();
    // Detached: a count that is still running when the copy ends is waited for at most
    // `COUNT_PATIENCE` (the copy read the same tree: the count is nearly done), so that the
    // last word has the totals; one that fails says nothing of them.
    let (count_done, count_ended) = channel::<()>();
    std::thread::spawn(move || {
        match count_source(&src, &key, &selection, hard_links) {
            Ok((files, bytes)) => counted.set_totals(files, bytes),
            Err(e) => {
                tracing::info!(e = %sprat_engine::text::printable(&e.to_string()), "cannot count the source: no totals")
            }
        }
        let _ = count_done.send(());
    });
    let (stop, stopped) = channel::<()>();
    let tick = match mode {
        Mode::Terminal => Duration::from_millis(250),
        Mode::Lines => Duration::from_secs(5),
        Mode::Json => Duration::from_secs(1),
    };
    let ticker = std::thread::spawn(move || {
        let started = Instant::now();
        let mut eta = Eta::default();
        let mut last_sample = Instant::now();
        while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(tick) {
            let now = progress.snapshot();
            let elapsed = started.elapsed().as_secs_f64();
            if last_sample.elapsed() >= Duration::from_millis(900) {
                eta.sample(elapsed, &now);
                last_sample = Instant::now();
            }
            let left = eta.remaining(&now);
            match mode {
                Mode::Terminal => {
                    let line = terminal_line(elapsed, &now, left);
                    let _ = write!(std::io::stderr(), "\r\x1b[2K{line}");
                }
                Mode::Lines => {
                    let line = terminal_line(elapsed, &now, left);
                    let _ = writeln!(std::io::stderr(), "{line}");
                }
                Mode::Json => {
                    let event = json_event(elapsed, &now, left);
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{event}").and_then(|()| out.flush());
                }
            }
        }
        if mode != Mode::Terminal && progress.snapshot().files_total.is_none() {
            let _ = count_ended.recv_timeout(COUNT_PATIENCE);
        }
        match mode {
            Mode::Terminal => {
                let _ = write!(std::io::stderr(), "\r\x1b[2K");
            }
            // The last word: where the copy ended (the final report follows on stdout).
            Mode::Lines => {
                let now = progress.snapshot();
                let line = terminal_line(started.elapsed().as_secs_f64(), &now, Some(0.0));
                let _ = writeln!(std::io::stderr(), "{line}");
            }
            // The last word: where the copy ended (the final report follows).
            Mode::Json => {
                let now = progress.snapshot();
                let event = json_event(started.elapsed().as_secs_f64(), &now, eta.remaining(&now));
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{event}").and_then(|()| out.flush());
            }
        }
    });
    Reporter { stop, ticker }
}

impl Reporter {
    /// Stops reporting (a terminal's line is cleared).
    pub fn finish(self) {
        drop(self.stop);
        let _ = self.ticker.join();
    }
}

fn json_event(elapsed: f64, s: &Snapshot, left: Option<f64>) -> serde_json::Value {
    let rate = |n: u64| {
        if elapsed > 0.0 {
            n as f64 / elapsed
        } else {
            0.0
        }
    };
    serde_json::json!({
        "event": "progress",
        "elapsed_s": round3(elapsed),
        "files_done": s.files_done,
        "files_total": s.files_total,
        "bytes_done": s.bytes_done,
        "bytes_total": s.bytes_total,
        "files_skipped": s.files_skipped,
        "bytes_skipped": s.bytes_skipped,
        "mb_per_s": round3(rate(s.bytes_done - s.bytes_skipped) / 1e6),
        "files_per_s": round3(rate(s.files_done - s.files_skipped)),
        "eta_s": left.map(round3),
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn terminal_line(elapsed: f64, s: &Snapshot, left: Option<f64>) -> String {
    let of = |done: String, total: Option<String>| match total {
        Some(t) => format!("{done}/{t}"),
        None => done,
    };
    let files = of(
        s.files_done.to_string(),
        s.files_total.map(|n| n.to_string()),
    );
    let bytes = of(megabytes(s.bytes_done), s.bytes_total.map(megabytes));
    let rate = |n: u64| {
        if elapsed > 0.0 {
            n as f64 / elapsed
        } else {
            0.0
        }
    };
    let eta = left.map_or_else(|| "-".to_string(), clock);
    let skipped = if s.files_skipped > 0 {
        format!(" ({} skipped)", s.files_skipped)
    } else {
        String::new()
    };
    // The rates are the copy's: what was skipped took no copying.
    format!(
        "{files} files{skipped}  {bytes} MB  {:.1} MB/s  {:.0} files/s  {}  ETA {eta}",
        rate(s.bytes_done - s.bytes_skipped) / 1e6,
        rate(s.files_done - s.files_skipped),
        clock(elapsed),
    )
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / 1e6)
}

/// `H:MM:SS` or `M:SS`.
fn clock(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// The time left, from this run's own costs: the elapsed time at each sample is fitted as
/// `t = c + t0 * files_copied + bytes_copied / R` (least squares; `c` takes up the time
/// before the copy got going, so that a slow start does not weigh on the rate; `t0` and `1/R`
/// non-negative), and the time left is `t0 * files_left + bytes_left / R`. Skipped files (the
/// destination had them) are no copy work: they count as done but not in the fit. A per-file
/// cost is only told apart from the rate once [`MIN_FILES`] files were copied and their count
/// and bytes did not grow in proportion (files of more than one kind); until then the time
/// left is what the bytes alone predict at this run's rate (with no bytes copied yet: the
/// files alone).
#[derive(Default)]
pub struct Eta {
    // Sums over the samples of 1, t, f, b, f*f, b*b, f*b, t*f, t*b (f, b: files and MB
    // copied; t: seconds).
    n: f64,
    t: f64,
    f: f64,
    b: f64,
    ff: f64,
    bb: f64,
    fb: f64,
    tf: f64,
    tb: f64,
    last: Option<(f64, f64, f64)>,
}

/// Fewest files copied whose per-file cost the fit trusts: a few large files say nothing of
/// what 20,000 small ones will cost.
const MIN_FILES: f64 = 100.0;

impl Eta {
    pub fn sample(&mut self, elapsed: f64, s: &Snapshot) {
        let (f, b) = copied(s);
        if f == 0.0 && b == 0.0 {
            return;
        }
        self.n += 1.0;
        self.t += elapsed;
        self.f += f;
        self.b += b;
        self.ff += f * f;
        self.bb += b * b;
        self.fb += f * b;
        self.tf += elapsed * f;
        self.tb += elapsed * b;
        self.last = Some((elapsed, f, b));
    }

    /// Seconds left, once the totals are known and something is copied (or nothing is left).
    pub fn remaining(&self, s: &Snapshot) -> Option<f64> {
        let (files_total, bytes_total) = (s.files_total?, s.bytes_total?);
        let files_left = files_total.saturating_sub(s.files_done) as f64;
        let mb_left = bytes_total.saturating_sub(s.bytes_done) as f64 / 1e6;
        if files_left == 0.0 && mb_left == 0.0 {
            return Some(0.0);
        }
        let (t, f, b) = self.last?;
        if let Some((per_file, per_mb)) = self.costs(f) {
            return Some(per_file * files_left + per_mb * mb_left);
        }
        if b > 0.0 {
            Some(t * mb_left / b)
        } else {
            (f > 0.0).then(|| t * files_left / f)
        }
    }

    /// The fitted (seconds per file, seconds per MB), when the samples say something of them.
    fn costs(&self, files_copied: f64) -> Option<(f64, f64)> {
        if self.n < 2.0 {
            return None;
        }
        // Sums of squares and products about the means: the fit with an intercept.
        let centred = |xy: f64, x: f64, y: f64| xy - x * y / self.n;
        let (ff, bb, fb) = (
            centred(self.ff, self.f, self.f),
            centred(self.bb, self.b, self.b),
            centred(self.fb, self.f, self.b),
        );
        let (tf, tb) = (
            centred(self.tf, self.t, self.f),
            centred(self.tb, self.t, self.b),
        );
        let by_bytes = (bb > 0.0 && tb > 0.0).then(|| (0.0, tb / bb));
        let det = ff * bb - fb * fb;
        if files_copied < MIN_FILES || det <= 1e-6 * ff * bb {
            return by_bytes;
        }
        let per_file = (tf * bb - tb * fb) / det;
        let per_mb = (tb * ff - tf * fb) / det;
        match (per_file >= 0.0, per_mb >= 0.0) {
            (true, true) => Some((per_file, per_mb)),
            // The best fit with one term at zero: the other alone.
            (false, _) => by_bytes,
            (_, false) => (ff > 0.0 && tf > 0.0).then(|| (tf / ff, 0.0)),
        }
    }
}

/// Files and MB copied (done, not skipped).
fn copied(s: &Snapshot) -> (f64, f64) {
    let files = s.files_done.saturating_sub(s.files_skipped);
    let bytes = s.bytes_done.saturating_sub(s.bytes_skipped);
    (files as f64, bytes as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(files_done: u64, bytes_done: u64, files: u64, bytes: u64) -> Snapshot {
        Snapshot {
            files_done,
            bytes_done,
            files_skipped: 0,
            bytes_skipped: 0,
            files_total: Some(files),
            bytes_total: Some(bytes),
        }
    }

    #[test]
    fn the_fit_separates_per_file_cost_from_rate() {
        // 1 ms per file and 100 MB/s: 1,000 small files (1 KB) take 1.01 s; then a 1 GB file
        // runs at 100 MB/s.
        let mut eta = Eta::default();
        let (files, bytes) = (1001u64, 1_001_000_000u64);
        for (f, b) in [(500u64, 500_000u64), (1000, 1_000_000)] {
            let t = f as f64 * 0.001 + b as f64 / 1e8;
            eta.sample(t, &snap(f, b, files, bytes));
        }
        for mb in [100u64, 300] {
            let b = 1_000_000 + mb * 1_000_000;
            let t = 1000.0 * 0.001 + b as f64 / 1e8;
            eta.sample(t, &snap(1000, b, files, bytes));
        }
        let now = snap(1000, 301_000_000, files, bytes);
        let left = eta.remaining(&now).unwrap();
        // 700 MB at 100 MB/s and one file: 7.001 s.
        assert!((left - 7.001).abs() < 0.01, "{left}");
    }

    #[test]
    fn a_few_large_files_predict_by_bytes_not_by_files() {
        // Two 100 MB files at 100 MB/s; 10,000 files of 10 KB (100 MB) are left. Per file
        // they would predict 10,000 times a large file's time.
        let mut eta = Eta::default();
        let (files, bytes) = (10_002u64, 300_000_000u64);
        for (t, f, b) in [
            (0.5, 0u64, 50_000_000u64),
            (1.0, 1, 100_000_000),
            (2.0, 2, 200_000_000),
        ] {
            eta.sample(t, &snap(f, b, files, bytes));
        }
        let left = eta.remaining(&snap(2, 200_000_000, files, bytes)).unwrap();
        assert!((left - 1.0).abs() < 0.01, "{left}");
    }

    #[test]
    fn a_slow_start_does_not_weigh_on_the_rate() {
        // Nothing for 2 s, then 10 MB/s: at 5 s, 30 MB of 100 MB are done; 7 s are left (the
        // mean rate since the start, 6 MB/s, would say 11.7 s).
        let mut eta = Eta::default();
        let (files, bytes) = (1u64, 100_000_000u64);
        for t in 3..=5 {
            let b = (t - 2) * 10_000_000;
            eta.sample(t as f64, &snap(0, b, files, bytes));
        }
        let left = eta.remaining(&snap(0, 30_000_000, files, bytes)).unwrap();
        assert!((left - 7.0).abs() < 0.01, "{left}");
    }

    #[test]
    fn skipped_files_are_done_but_no_copy_work() {
        // 1,000 files of 1 MB: 900 skipped at once, 50 copied in 1 s. The 50 left take 1 s
        // (not the 0.05 s the 950 done in 1 s would say).
        let mut eta = Eta::default();
        let mut s = snap(950, 950_000_000, 1000, 1_000_000_000);
        s.files_skipped = 900;
        s.bytes_skipped = 900_000_000;
        eta.sample(1.0, &s);
        let left = eta.remaining(&s).unwrap();
        assert!((left - 1.0).abs() < 0.01, "{left}");
    }

    #[test]
    fn no_eta_without_totals_and_zero_when_done() {
        let mut eta = Eta::default();
        let mut s = snap(10, 1000, 10, 1000);
        eta.sample(1.0, &s);
        assert_eq!(eta.remaining(&s), Some(0.0));
        s.files_total = None;
        assert_eq!(eta.remaining(&s), None);
    }

    #[test]
    fn clock_reads_like_a_clock() {
        assert_eq!(clock(5.4), "0:05");
        assert_eq!(clock(3725.0), "1:02:05");
    }
}
