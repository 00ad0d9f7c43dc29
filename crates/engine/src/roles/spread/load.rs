//! How much of a spread push each server holds, and which server takes the next batch.
//!
//! A server holds what it was given and has not acknowledged as written yet. Its streams take
//! batches as fast as their sockets and the path's buffers accept them, which is tens of
//! megabytes ahead of its writing: with room in a queue as the only rule, a tree of a few
//! hundred megabytes is shared out before any server's speed is known, and a server that
//! started a little later (or writes more slowly) ends up with a share that does not match
//! its speed, which the others then wait for. So:
//! - the next batch goes to the server that will have written what it holds soonest, at the
//!   rate it has lately written;
//! - a server holds no more than it writes in [`HOLD_FOR`] (at least [`HOLD_FLOOR`]), so that
//!   the sharing out goes on as the servers write and follows their speeds to the end.
//!
//! Work is counted in bytes, each file weighing [`FILE_WEIGHT`] more.

use crate::pipeline::source::SentTotals;
use crate::roles::push::SessionAcks;
use sprat_proto::batch::Totals;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What creating and publishing one file costs a server's writer, in bytes written.
const FILE_WEIGHT: u64 = 16 << 10;

/// A server holds at most what it writes in this long (or in eight of its round trips, if
/// longer: its streams must keep the path full, and grow out of slow start, while
/// acknowledgements come back).
const HOLD_FOR: Duration = Duration::from_millis(250);
const HOLD_FOR_RTTS: u32 = 8;

/// What a server may hold whatever its rate, and all it may hold until its rate is known
/// (on a long path that costs about one round trip at the start, not more: once its first
/// acknowledgements are back, it may hold eight round trips of what they show).
const HOLD_FLOOR: u64 = 4 << 20;

/// A server's rate is what it wrote over this long (or two of its round trips, if longer).
const RATE_WINDOW: Duration = Duration::from_millis(1000);

/// A rate is known once a server's writing has been watched this long.
const RATE_MIN_SPAN: Duration = Duration::from_millis(20);

/// Samples of what a server wrote are kept this often at most.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// How long a dispatcher that found no server to take a batch waits before it looks again.
pub(super) const RECHECK: Duration = Duration::from_millis(2);

/// The load of every server of a spread push.
pub(super) struct Load<'a> {
    sent: &'a [SentTotals],
    acked: &'a [SessionAcks],
    /// Per server: (when, work written by then), oldest first.
    samples: Vec<VecDeque<(Instant, u64)>>,
}

/// One server's load at one moment.
struct Gauge {
    held: u64,
    /// Work written per second lately, if known.
    rate: Option<f64>,
    rtt: Duration,
}

impl<'a> Load<'a> {
    pub(super) fn new(sent: &'a [SentTotals], acked: &'a [SessionAcks]) -> Self {
        Load {
            sent,
            acked,
            samples: vec![VecDeque::new(); sent.len()],
        }
    }

    /// Counts a batch with `totals` handed to server `to`.
    pub(super) fn given(&self, to: usize, totals: &Totals) {
        self.sent[to].add(totals);
    }

    /// What each server was given and has not acknowledged yet, in bytes and files.
    pub(super) fn held(&self) -> Vec<(u64, u64)> {
        (self.sent.iter().zip(self.acked))
            .map(|(sent, acked)| {
                let given = sent.get();
                let bytes = given.bytes + given.chunk_bytes;
                let written = acked.bytes.load(Ordering::Relaxed);
                let files = acked.files.load(Ordering::Relaxed);
                (
                    bytes.saturating_sub(written),
                    given.files.saturating_sub(files),
                )
            })
            .collect()
    }

    /// The servers that may take a batch with `totals` next, the one that would have written
    /// it soonest first (at the rate each has lately written; a server whose rate is not
    /// known yet is taken at the others' mean rate, and while no rate is known they are
    /// ordered by what they hold). Left out: a server that holds all it may, and one that
    /// would be done with the batch more than [`HOLD_FOR`] after the soonest server whose
    /// rate is known (better to wait for that one than to give a slow server what it would
    /// still be writing when the others are done). Empty when every server is left out.
    pub(super) fn candidates(&mut self, totals: &Totals) -> Vec<usize> {
        let now = Instant::now();
        let gauges: Vec<Gauge> = (0..self.sent.len()).map(|i| self.gauge(i, now)).collect();
        let known: Vec<f64> = gauges.iter().filter_map(|g| g.rate).collect();
        let mean = match known.len() {
            0 => 1.0,
            n => known.iter().sum::<f64>() / n as f64,
        };
        let weight = work(totals) as f64;
        let done_in = |g: &Gauge| (g.held as f64 + weight) / g.rate.unwrap_or(mean);
        let soonest_known = (gauges.iter().filter(|g| g.rate.is_some()))
            .map(done_in)
            .min_by(f64::total_cmp);
        let latest = soonest_known.map_or(f64::INFINITY, |s| s + HOLD_FOR.as_secs_f64());
        let mut candidates: Vec<(usize, f64)> = (gauges.iter().enumerate())
            .filter(|(_, g)| g.held < g.may_hold())
            .map(|(i, g)| (i, done_in(g)))
            .filter(|&(_, t)| t <= latest)
            .collect();
        candidates.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        candidates.into_iter().map(|(i, _)| i).collect()
    }

    /// Server `i`'s load now; keeps a sample of what it wrote.
    fn gauge(&mut self, i: usize, now: Instant) -> Gauge {
        let given = work(&self.sent[i].get());
        let acked = &self.acked[i];
        let written =
            acked.bytes.load(Ordering::Relaxed) + FILE_WEIGHT * acked.files.load(Ordering::Relaxed);
        let rtt = Duration::from_nanos(acked.rtt_ns.load(Ordering::Relaxed));
        let window = RATE_WINDOW.max(rtt * 2);
        let samples = &mut self.samples[i];
        let due = samples
            .back()
            .is_none_or(|&(at, _)| now.duration_since(at) >= SAMPLE_EVERY);
        if written > 0 && due {
            samples.push_back((now, written));
        }
        // Keep one sample at least `window` old, the start of the rate's span.
        while samples
            .get(1)
            .is_some_and(|&(at, _)| now.duration_since(at) >= window)
        {
            samples.pop_front();
        }
        let rate = samples.front().and_then(|&(at, before)| {
            let span = now.duration_since(at);
            (span >= RATE_MIN_SPAN)
                .then(|| written.saturating_sub(before) as f64 / span.as_secs_f64())
        });
        Gauge {
            held: given.saturating_sub(written),
            rate,
            rtt,
        }
    }
}

/// The work of writing what `totals` counts.
fn work(totals: &Totals) -> u64 {
    totals.bytes + totals.chunk_bytes + FILE_WEIGHT * totals.files
}

impl Gauge {
    /// The most this server may hold.
    fn may_hold(&self) -> u64 {
        let span = HOLD_FOR.max(self.rtt * HOLD_FOR_RTTS).as_secs_f64();
        let by_rate = self.rate.map_or(0.0, |rate| rate * span) as u64;
        by_rate.max(HOLD_FLOOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprat_proto::batch::Totals;

    fn totals(files: u64, bytes: u64) -> Totals {
        Totals {
            files,
            bytes,
            entries: files,
            ..Totals::default()
        }
    }

    #[test]
    fn the_server_holding_least_comes_first_and_a_full_one_is_left_out() {
        let sent: Vec<SentTotals> = (0..3).map(|_| SentTotals::default()).collect();
        let acked: Vec<SessionAcks> = (0..3).map(|_| SessionAcks::default()).collect();
        let mut load = Load::new(&sent, &acked);
        let batch = totals(1, 1 << 20);
        assert_eq!(load.candidates(&batch), vec![0, 1, 2]);
        load.given(0, &totals(1, 1 << 20));
        load.given(2, &totals(1, 2 << 20));
        assert_eq!(load.candidates(&batch), vec![1, 0, 2]);
        // Server 2 reaches what it may hold before its rate is known.
        load.given(2, &totals(1, HOLD_FLOOR));
        assert_eq!(load.candidates(&batch), vec![1, 0]);
        // What is acknowledged is no longer held.
        acked[2]
            .bytes
            .store(HOLD_FLOOR + (2 << 20), Ordering::Relaxed);
        acked[2].files.store(2, Ordering::Relaxed);
        assert_eq!(load.held()[2], (0, 0));
        assert_eq!(load.candidates(&batch)[0], 1);
        assert!(load.candidates(&batch).contains(&2));
    }

    /// Two servers, each having written `rates[i]` bytes over a little more than
    /// [`RATE_MIN_SPAN`] and now holding `held[i]`.
    fn measured<'a>(
        sent: &'a [SentTotals],
        acked: &'a [SessionAcks],
        rates: [u64; 2],
        held: [u64; 2],
    ) -> Load<'a> {
        let mut load = Load::new(sent, acked);
        for a in acked {
            a.bytes.store(1, Ordering::Relaxed);
        }
        load.candidates(&Totals::default());
        std::thread::sleep(RATE_MIN_SPAN * 2);
        for (i, a) in acked.iter().enumerate() {
            a.bytes.store(1 + rates[i], Ordering::Relaxed);
            load.given(i, &totals(0, 1 + rates[i] + held[i]));
        }
        load
    }

    #[test]
    fn a_faster_server_may_hold_more_and_is_done_sooner_with_as_much() {
        let sent: Vec<SentTotals> = (0..2).map(|_| SentTotals::default()).collect();
        let acked: Vec<SessionAcks> = (0..2).map(|_| SessionAcks::default()).collect();
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
        let sent: Vec<SentTotals> = (0..2).map(|_| SentTotals::default()).collect();
        let acked: Vec<SessionAcks> = (0..2).map(|_| SessionAcks::default()).collect();
        // Server 0 writes a hundred times as fast as server 1, which holds nothing: a batch
        // of 8 MiB would still take it far longer than server 0 needs for all it holds.
        let mut load = measured(&sent, &acked, [100 << 20, 1 << 20], [2 << 20, 0]);
        assert_eq!(load.candidates(&totals(1, 8 << 20)), vec![0]);
        // A batch small enough for it to be done about as soon is offered to it too.
        assert_eq!(load.candidates(&totals(1, 1 << 10)), vec![1, 0]);
    }
}
