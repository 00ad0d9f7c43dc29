//! How much of a spread push each server holds, and which server takes the next batch.
//!
//! A server holds the batches it was given and has not acknowledged yet. Its streams take
//! batches as fast as their sockets and the path's buffers accept them, which is tens of
//! megabytes ahead of its writing: with room in a queue as the only rule, a tree of a few
//! hundred megabytes is shared out before any server's speed is known, and a server that
//! started a little later (or writes more slowly) ends up with a share that does not match
//! its speed, which the others then wait for. So:
//! - the next batch goes to the server that would have written it soonest, at the rate it
//!   lately wrote while it had work;
//! - a server takes no more batches once it holds what it writes in [`HOLD_FOR`] (at least
//!   [`HOLD_FLOOR`]; the chunks of a large file it started still go to it), so that the sharing
//!   out goes on as the servers write and follows their speeds to the end.
//!
//! Work is counted by [`work_of`], on both sides: a batch counts in full once acknowledged,
//! whatever became of its files.

use crate::measurement::acked::{work_of, SessionAcks};
use crate::pipeline::source::SentTotals;
use sprat_proto::batch::Totals;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A server takes no more batches once it holds what it writes in this long (or in eight of
/// its round trips, if longer: its streams must keep the path full, and grow out of slow
/// start, while acknowledgements come back).
const HOLD_FOR: Duration = Duration::from_millis(250);
const HOLD_FOR_RTTS: u32 = 8;

/// What a server may hold whatever its rate, and all it may hold until its rate is known
/// (on a long path that costs about one round trip at the start, not more: once its first
/// acknowledgements are back, it may hold eight round trips of what they show).
const HOLD_FLOOR: u64 = 4 << 20;

/// A server's rate is what it wrote over this long (or two of its round trips, if longer).
const RATE_WINDOW: Duration = Duration::from_millis(1000);

/// A rate is measured once a server's writing has been watched this long.
const RATE_MIN_SPAN: Duration = Duration::from_millis(20);

/// Samples of what a server wrote are kept this often at most.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// How long a dispatcher that found no server to take a batch waits before it looks again.
pub(super) const RECHECK: Duration = Duration::from_millis(2);

/// The slowest rate taken for a server, in work per second: no time is infinite.
const RATE_MIN: f64 = 1.0;

/// The load of every server of a spread push.
pub(super) struct Load<'a> {
    sent: &'a [SentTotals],
    acked: &'a [SessionAcks],
    rates: Vec<Rate>,
}

/// How fast one server writes, measured only while it has work.
#[derive(Default, Clone)]
struct Rate {
    /// (when, work written by then), oldest first, since the server last had work.
    samples: VecDeque<(Instant, u64)>,
    /// The last rate measured, kept while the server has nothing to write.
    last: Option<f64>,
}

/// One server's load at one moment.
struct Gauge {
    held: u64,
    /// Work written per second while it had work, if measured.
    rate: Option<f64>,
    rtt: Duration,
}

impl<'a> Load<'a> {
    pub(super) fn new(sent: &'a [SentTotals], acked: &'a [SessionAcks]) -> Self {
        Load {
            sent,
            acked,
            rates: vec![Rate::default(); sent.len()],
        }
    }

    /// Counts a batch with `totals` handed to server `to`.
    pub(super) fn given(&self, to: usize, totals: &Totals) {
        self.sent[to].add(totals);
    }

    /// The work each server was given and has not acknowledged yet.
    pub(super) fn held(&self) -> Vec<u64> {
        (self.sent.iter().zip(self.acked))
            .map(|(sent, acked)| work_of(&sent.get()).saturating_sub(acked.work()))
            .collect()
    }

    /// The servers that may take a batch with `totals` next, the one that would have written
    /// it soonest first (a server whose rate is not measured yet is taken at the others' mean
    /// rate; while none is, they are ordered by what they hold). Left out: a server that holds
    /// all it may, and one that would be done with the batch more than [`HOLD_FOR`] after the
    /// soonest server whose rate is measured (better to wait for that one than to give a slow
    /// server what it would still be writing when the others are done). Empty when every
    /// server is left out.
    pub(super) fn candidates(&mut self, totals: &Totals) -> Vec<usize> {
        let now = Instant::now();
        let gauges: Vec<Gauge> = (0..self.sent.len()).map(|i| self.gauge(i, now)).collect();
        let known: Vec<f64> = gauges.iter().filter_map(|g| g.rate).collect();
        let mean = match known.len() {
            0 => RATE_MIN,
            n => known.iter().sum::<f64>() / n as f64,
        };
        let weight = work_of(totals) as f64;
        let done_in = |g: &Gauge| (g.held as f64 + weight) / g.rate.unwrap_or(mean).max(RATE_MIN);
        let soonest_measured = (gauges.iter().filter(|g| g.rate.is_some()))
            .map(done_in)
            .min_by(f64::total_cmp);
        let latest = soonest_measured.map_or(f64::INFINITY, |s| s + HOLD_FOR.as_secs_f64());
        let mut candidates: Vec<(usize, f64)> = (gauges.iter().enumerate())
            .filter(|(_, g)| g.held < g.may_hold())
            .map(|(i, g)| (i, done_in(g)))
            .filter(|&(_, t)| t <= latest)
            .collect();
        candidates.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        candidates.into_iter().map(|(i, _)| i).collect()
    }

    /// Server `i`'s load now. Its rate is measured over the time it had work: a server that
    /// holds nothing starts a new measurement (keeping its last rate meanwhile), and a
    /// measurement that shows nothing written keeps the last rate too.
    fn gauge(&mut self, i: usize, now: Instant) -> Gauge {
        let written = self.acked[i].work();
        let held = work_of(&self.sent[i].get()).saturating_sub(written);
        let rtt = self.acked[i].rtt();
        let rate = &mut self.rates[i];
        if held == 0 {
            rate.samples.clear();
        } else {
            let due =
                (rate.samples.back()).is_none_or(|&(at, _)| now.duration_since(at) >= SAMPLE_EVERY);
            if due {
                rate.samples.push_back((now, written));
            }
            // Keep one sample at least a window old, the start of the measurement.
            let window = RATE_WINDOW.max(rtt * 2);
            while (rate.samples.get(1)).is_some_and(|&(at, _)| now.duration_since(at) >= window) {
                rate.samples.pop_front();
            }
            if let Some(&(since, before)) = rate.samples.front() {
                let span = now.duration_since(since);
                if span >= RATE_MIN_SPAN && written > before {
                    rate.last = Some((written - before) as f64 / span.as_secs_f64());
                }
            }
        }
        Gauge {
            held,
            rate: rate.last,
            rtt,
        }
    }
}

impl Gauge {
    /// The most this server may hold before it takes another batch.
    fn may_hold(&self) -> u64 {
        let span = HOLD_FOR.max(self.rtt * HOLD_FOR_RTTS).as_secs_f64();
        let by_rate = self.rate.map_or(0.0, |rate| rate * span) as u64;
        by_rate.max(HOLD_FLOOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(files: u64, bytes: u64) -> Totals {
        Totals {
            files,
            bytes,
            entries: files,
            ..Totals::default()
        }
    }

    /// `n` servers with nothing sent or acknowledged.
    fn servers(n: usize) -> (Vec<SentTotals>, Vec<SessionAcks>) {
        let sent = (0..n).map(|_| SentTotals::default()).collect();
        let acked = (0..n).map(|_| SessionAcks::default()).collect();
        (sent, acked)
    }

    /// Hands batch `seq` with `totals` to server `to`, as the dispatcher and its stream do.
    fn give(load: &Load, acked: &[SessionAcks], to: usize, seq: u64, totals: &Totals) {
        load.given(to, totals);
        acked[to].sending(seq, totals);
    }

    #[test]
    fn the_server_holding_least_comes_first_and_a_full_one_is_left_out() {
        let (sent, acked) = servers(3);
        let mut load = Load::new(&sent, &acked);
        let batch = totals(1, 1 << 20);
        assert_eq!(load.candidates(&batch), vec![0, 1, 2]);
        give(&load, &acked, 0, 1, &totals(1, 1 << 20));
        give(&load, &acked, 2, 2, &totals(1, 2 << 20));
        assert_eq!(load.candidates(&batch), vec![1, 0, 2]);
        // Server 2 reaches what it may hold before its rate is known.
        give(&load, &acked, 2, 3, &totals(1, HOLD_FLOOR));
        assert_eq!(load.candidates(&batch), vec![1, 0]);
        // A batch acknowledged is no longer held, even if none of its files could be written.
        acked[2].acked(2, 0);
        acked[2].acked(3, HOLD_FLOOR);
        assert_eq!(load.held(), vec![work_of(&batch), 0, 0]);
        assert_eq!(load.candidates(&batch), vec![1, 2, 0]);
        // Batches of no weight (symlinks, directories) are handed out too.
        assert_eq!(load.candidates(&Totals::default()), vec![1, 2, 0]);
    }

    /// Two servers, each handed a batch of `wrote[i]` bytes and one of `holds[i]` bytes and
    /// one file, the first acknowledged a little more than [`RATE_MIN_SPAN`] later.
    fn measured<'a>(
        sent: &'a [SentTotals],
        acked: &'a [SessionAcks],
        wrote: [u64; 2],
        holds: [u64; 2],
    ) -> Load<'a> {
        let mut load = Load::new(sent, acked);
        for i in 0..2 {
            give(&load, acked, i, 10 * i as u64, &totals(0, wrote[i]));
            give(&load, acked, i, 10 * i as u64 + 1, &totals(1, holds[i]));
        }
        load.candidates(&Totals::default());
        std::thread::sleep(RATE_MIN_SPAN * 2);
        for (i, a) in acked.iter().enumerate() {
            a.acked(10 * i as u64, wrote[i]);
        }
        load
    }

    #[test]
    fn a_faster_server_may_hold_more_and_is_done_sooner_with_as_much() {
        let (sent, acked) = servers(2);
        // Server 1 wrote ten times what server 0 did; each holds 8 MiB.
        let mut load = measured(&sent, &acked, [4 << 20, 40 << 20], [8 << 20, 8 << 20]);
        let now = Instant::now();
        let (slow, fast) = (load.gauge(0, now), load.gauge(1, now));
        assert!(fast.rate > slow.rate, "{:?} {:?}", fast.rate, slow.rate);
        assert!(fast.may_hold() > slow.may_hold());
        assert_eq!(load.candidates(&totals(1, 1 << 20))[0], 1);
    }

    #[test]
    fn a_slow_server_gets_nothing_it_would_still_be_writing_long_after_the_others() {
        let (sent, acked) = servers(2);
        // Server 0 writes a hundred times as fast as server 1, which holds one empty file: a
        // batch of 8 MiB would still take it far longer than server 0 needs for all it holds.
        let mut load = measured(&sent, &acked, [100 << 20, 1 << 20], [2 << 20, 0]);
        assert_eq!(load.candidates(&totals(1, 8 << 20)), vec![0]);
        // A batch small enough for it to be done about as soon is offered to it too.
        assert_eq!(load.candidates(&totals(0, 1 << 10)), vec![1, 0]);
    }

    #[test]
    fn a_server_keeps_its_rate_while_it_has_nothing_to_write() {
        let (sent, acked) = servers(2);
        let mut load = measured(&sent, &acked, [40 << 20, 40 << 20], [1 << 20, 1 << 20]);
        let before = load.gauge(1, Instant::now()).rate;
        assert!(before.is_some());
        // Server 1 finishes what it holds and stays idle: its rate is what it was, not zero.
        acked[1].acked(11, 1 << 20);
        std::thread::sleep(RATE_MIN_SPAN * 2);
        let idle = load.gauge(1, Instant::now());
        assert_eq!((idle.held, idle.rate), (0, before));
        assert_eq!(load.candidates(&totals(1, 1 << 10))[0], 1);
    }
}
