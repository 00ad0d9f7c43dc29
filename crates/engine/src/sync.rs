//! The engine's two small concurrency helpers: [`lock`], and [`Abort`], the first fatal error
//! of a transfer together with the sockets to shut down so that no thread stays blocked.
//!
//! Poisoned locks are not errors here: a thread that panicked while holding one has already
//! failed the transfer (its scope re-raises the panic), and what the lock guards (counters,
//! lists of handles) stays meaningful, so the other threads go on with it.

use crate::error::TransferError;
use crate::net::Conn;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LockResult, Mutex, MutexGuard};

/// Locks `m`, ignoring poison (see the module page).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    unpoisoned(m.lock())
}

/// The value of a lock operation (a lock, a condition variable's wait, `into_inner`),
/// ignoring poison (see the module page).
pub(crate) fn unpoisoned<T>(r: LockResult<T>) -> T {
    r.unwrap_or_else(|p| p.into_inner())
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

    /// Adds a handle on `conn` to those a failure shuts down.
    pub(crate) fn watch(&self, conn: &Conn) {
        if let Ok(c) = conn.try_clone() {
            lock(&self.conns).push(c);
        }
    }
}
