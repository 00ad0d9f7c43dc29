//! The engine's small concurrency helpers: [`lock`] (the store's, which ignores poison:
//! a thread that panicked while holding a lock has already failed the transfer, and what the
//! lock guards stays meaningful), re-exported for the crates above; [`Abort`], the first
//! fatal error of a transfer together with the sockets to shut down so that no thread stays
//! blocked; [`Cancel`], a transfer's stop signal from outside it; and [`Signal`], a one-time
//! signal threads wait for among their channels.

use crate::error::TransferError;
use crate::net::Conn;
use crossbeam_channel::{bounded, Receiver, Sender, TryRecvError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub use sprat_store::sync::{lock, unpoisoned};

/// Asked before each run of a transfer whether what carries its connections is gone for good
/// (the ssh process a one-shot server lives in): `Some(why)` ends the transfer at once with
/// that error, instead of dialling a server that can no longer be there.
#[derive(Clone, Default)]
pub struct TransportWatch(Option<Arc<WatchFn>>);

type WatchFn = dyn Fn() -> Option<crate::error::TransferError> + Send + Sync;

impl TransportWatch {
    pub fn new(
        gone: impl Fn() -> Option<crate::error::TransferError> + Send + Sync + 'static,
    ) -> Self {
        TransportWatch(Some(Arc::new(gone)))
    }

    /// Why the transport is gone, if it is.
    pub fn gone(&self) -> Option<crate::error::TransferError> {
        self.0.as_ref().and_then(|f| f())
    }
}

impl std::fmt::Debug for TransportWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "TransportWatch(set)"
        } else {
            "TransportWatch(none)"
        })
    }
}

/// A stop signal given to a transfer from outside (a third-party copy whose client went
/// away): the session's watchdog (see `session::stall`) fails the transfer once it is set.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// Asks the transfer to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the transfer was asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A one-time signal that any number of threads wait for among their other channels
/// (`select!` on [`Signal::receiver`], which is ready once it is set), or look at without
/// waiting. Set by dropping the only sender.
pub(crate) struct Signal {
    tx: Mutex<Option<Sender<()>>>,
    rx: Receiver<()>,
}

impl Default for Signal {
    fn default() -> Signal {
        let (tx, rx) = bounded(0);
        Signal {
            tx: Mutex::new(Some(tx)),
            rx,
        }
    }
}

impl Signal {
    /// Sets the signal (again: no effect).
    pub(crate) fn set(&self) {
        lock(&self.tx).take();
    }

    /// Whether it is set.
    pub(crate) fn is_set(&self) -> bool {
        matches!(self.rx.try_recv(), Err(TryRecvError::Disconnected))
    }

    /// Ready (disconnected) once the signal is set.
    pub(crate) fn receiver(&self) -> &Receiver<()> {
        &self.rx
    }
}

/// A transfer's first fatal error (later ones, often its consequences, are dropped) and the
/// connections to shut down when it happens.
#[derive(Default)]
pub(crate) struct Abort {
    error: Mutex<Option<TransferError>>,
    set: AtomicBool,
    conns: Mutex<Vec<Conn>>,
}

impl Abort {
    /// Records `e` if it is the first, and shuts every registered connection down.
    pub(crate) fn fail(&self, e: TransferError) {
        {
            let mut slot = lock(&self.error);
            if slot.is_none() {
                *slot = Some(e);
                self.set.store(true, Ordering::SeqCst);
            }
        }
        for c in lock(&self.conns).iter() {
            c.shutdown();
        }
    }

    /// Whether the transfer has failed.
    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    /// The first error, if any.
    pub(crate) fn take(&self) -> Option<TransferError> {
        lock(&self.error).take()
    }

    /// Bytes moved so far on every registered connection (see `session::stall`).
    pub(crate) fn moved(&self) -> u64 {
        lock(&self.conns).iter().map(Conn::moved).sum()
    }

    /// Adds a handle on `conn` to those a failure shuts down; a connection added after the
    /// failure (a join dialled meanwhile) is shut down at once, so no thread waits on it.
    pub(crate) fn watch(&self, conn: &Conn) {
        if let Ok(c) = conn.try_clone() {
            let mut conns = lock(&self.conns);
            // Checked under the lock `fail` takes to shut the list down: either `fail` sees
            // this connection, or this sees the failure.
            if self.is_set() {
                c.shutdown();
            }
            conns.push(c);
        }
    }
}
