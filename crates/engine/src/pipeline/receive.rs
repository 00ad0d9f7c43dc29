//! The receive stage: batch frames from one connection into the writer pool, until the
//! connection's rules say its data is over. Shared by a pulling client and a server receiving
//! a push; what a control message means is the caller's (its session state machine's).

use crate::budget::Charge;
use crate::error::TransferError;
use crate::net::{Conn, Frame};
use crate::pipeline::sink::{BatchOutcome, Incoming, WriteJob};
use crossbeam_channel::Sender;
use sprat_proto::Message;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where received batches go and what the stage counts.
pub(crate) struct ReceiveLane<'a> {
    /// The writer pool's queue.
    pub jobs: Sender<WriteJob>,
    /// Where each batch's outcome is reported.
    pub reply: Sender<BatchOutcome>,
    /// Nanoseconds batches took to arrive once their header was seen.
    pub network_ns: &'a AtomicU64,
    /// Payload bytes received.
    pub received: &'a AtomicU64,
    /// Asked with each batch's length before its payload is read: the memory it may take
    /// (a server's budget for its clients' data waits or refuses here); `None`: no budget.
    pub admit: Option<&'a Admit<'a>>,
    /// Name the files each batch completes in its outcome (`cp -v`).
    pub list: bool,
    /// The rate to keep to (`cp --bwlimit`): after each batch the stage reads nothing until
    /// the batch has had its time, and the sender slows down with TCP's flow control.
    pub pace: Option<&'a crate::measurement::pace::Pace>,
}

/// What a [`ReceiveLane`] asks before it reads a batch of the given length.
pub(crate) type Admit<'a> = dyn Fn(&Conn, u32) -> Result<Charge, TransferError> + Sync + 'a;

/// What a control message means to the connection: more batches follow, or its data is over.
pub(crate) enum Flow {
    More,
    Over,
}

/// What a batch frame means to the connection: write it, or drop it (a connection the
/// receiver refused reads and drops what still arrives).
pub(crate) enum Take {
    Write,
    Drop,
}

/// Receives batches on `conn` into `lane` until `on_control` says the data is over. Each
/// batch frame is first checked by `on_batch`, each control message interpreted by
/// `on_control`; a writer pool that stopped taking batches ends the stage with `closed`.
pub(crate) fn receive(
    conn: &mut Conn,
    lane: &ReceiveLane,
    mut on_batch: impl FnMut(&Conn) -> Result<Take, TransferError>,
    mut on_control: impl FnMut(&Conn, Message) -> Result<Flow, TransferError>,
    closed: impl Fn(&Conn) -> TransferError,
) -> Result<(), TransferError> {
    let admit = |conn: &Conn, len: u32| match lane.admit {
        Some(admit) => admit(conn, len),
        None => Ok(Charge::none()),
    };
    loop {
        let (frame, charge) = conn.recv_admitted(admit)?;
        match frame {
            Frame::Batch(payload, took) => {
                if let Take::Drop = on_batch(conn)? {
                    continue;
                }
                lane.network_ns
                    .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
                lane.received
                    .fetch_add(payload.len() as u64, Ordering::Relaxed);
                let bytes = payload.len() as u64;
                let job = WriteJob {
                    incoming: Incoming::Wire(payload),
                    reply: lane.reply.clone(),
                    charge: charge.unwrap_or_default(),
                    list: lane.list,
                };
                if lane.jobs.send(job).is_err() {
                    return Err(closed(conn));
                }
                if let Some(pace) = lane.pace {
                    pace.take(bytes);
                }
            }
            Frame::Control(msg) => {
                if let Flow::Over = on_control(conn, msg)? {
                    return Ok(());
                }
            }
        }
    }
}
