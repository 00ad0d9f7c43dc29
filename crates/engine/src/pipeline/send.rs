//! The send stage: batches onto one connection, then the end of its data. Shared by a pushing
//! client and a server serving a pull; which batch goes next, what becomes of it once sent
//! and the `End` itself come from the caller (its queues and its session state machine).

use crate::error::TransferError;
use crate::net::Conn;
use sprat_proto::{Batch, Message};

/// What the caller has for the connection next.
pub(crate) enum Next<T> {
    /// Send this batch.
    Batch(Batch),
    /// Send this control message between batches (a pull server's `Progress`).
    Control(Message),
    /// No more data: send `End` (the message the connection's state machine gives), and say
    /// why the stage ended.
    End(Message, T),
    /// Stop without `End`, for this reason.
    Stop(T),
}

/// Sends what `next` hands out on `conn` until it says to end or stop. Each batch, once
/// written (or not: the write's result comes along), goes to `after`, which may stop the
/// stage. Returns why the stage ended.
pub(crate) fn send<T>(
    conn: &mut Conn,
    mut next: impl FnMut() -> Next<T>,
    mut after: impl FnMut(Batch, Result<(), TransferError>) -> Result<Option<T>, TransferError>,
) -> Result<T, TransferError> {
    loop {
        match next() {
            Next::Batch(batch) => {
                let sent = conn.send_batch(&batch);
                if let Some(stop) = after(batch, sent)? {
                    return Ok(stop);
                }
            }
            Next::Control(msg) => conn.send(&msg)?,
            Next::End(end, why) => {
                conn.send(&end)?;
                return Ok(why);
            }
            Next::Stop(why) => return Ok(why),
        }
    }
}
