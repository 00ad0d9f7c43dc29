//! What the server of one push session has acknowledged so far, as each batch's
//! acknowledgement arrives: the file bytes it wrote (what the stream adapter measures) and the
//! work of the batches it is done with, whatever became of their files (what a push over
//! several servers shares its batches out by), with the session's round trip.

use crate::sync::lock;
use sprat_proto::batch::Totals;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// What creating and publishing one file costs a writer, in bytes written: a file weighs this
/// much beside its data in the work of a batch.
const FILE_WEIGHT: u64 = 16 << 10;

/// The work of writing what `totals` counts: its data, and [`FILE_WEIGHT`] per file.
pub(crate) fn work_of(totals: &Totals) -> u64 {
    totals.bytes + totals.chunk_bytes + FILE_WEIGHT * totals.files
}

/// The acknowledgements of one push session.
#[derive(Default)]
pub(crate) struct SessionAcks {
    /// File bytes the server wrote.
    pub(crate) bytes: AtomicU64,
    /// Work of the batches acknowledged, failed files included.
    work: AtomicU64,
    /// Work of each batch sent and not acknowledged yet, by sequence number.
    sent: Mutex<HashMap<u64, u64>>,
    /// Nanoseconds; 0 until the session is open.
    rtt_ns: AtomicU64,
}

impl SessionAcks {
    /// Notes batch `seq` with `totals` going out (again, if a refused stream handed it back).
    pub(crate) fn sending(&self, seq: u64, totals: &Totals) {
        lock(&self.sent).insert(seq, work_of(totals));
    }

    /// Counts the acknowledgement of batch `seq`, in which the server wrote `bytes`.
    pub(crate) fn acked(&self, seq: u64, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let work = lock(&self.sent).remove(&seq);
        if let Some(work) = work {
            self.work.fetch_add(work, Ordering::Relaxed);
        }
    }

    /// Work of every batch acknowledged so far.
    pub(crate) fn work(&self) -> u64 {
        self.work.load(Ordering::Relaxed)
    }

    pub(crate) fn set_rtt(&self, rtt: Duration) {
        let ns = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
        self.rtt_ns.store(ns, Ordering::Relaxed);
    }

    /// The session's round trip; zero until it is open.
    pub(crate) fn rtt(&self) -> Duration {
        Duration::from_nanos(self.rtt_ns.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_counts_in_full_once_acknowledged_even_if_its_files_failed() {
        let acks = SessionAcks::default();
        let batch = Totals {
            files: 2,
            bytes: 1000,
            chunks: 1,
            chunk_bytes: 5000,
            ..Totals::default()
        };
        acks.sending(7, &batch);
        acks.sending(8, &batch);
        assert_eq!(acks.work(), 0);
        // Every file of batch 7 failed: nothing written, the batch is done with all the same.
        acks.acked(7, 0);
        assert_eq!(acks.work(), work_of(&batch));
        assert_eq!(acks.work(), 6000 + 2 * FILE_WEIGHT);
        acks.acked(8, 6000);
        assert_eq!(acks.work(), 2 * work_of(&batch));
        assert_eq!(acks.bytes.load(Ordering::Relaxed), 6000);
        // An acknowledgement of a batch not noted (or noted twice) adds no work.
        acks.acked(8, 0);
        assert_eq!(acks.work(), 2 * work_of(&batch));
    }
}
