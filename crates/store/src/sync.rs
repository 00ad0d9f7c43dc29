//! The one lock helper of the workspace (the engine re-exports it for the crates above).
//! Poisoned locks are not errors here: a thread that
//! panicked while holding one has already failed what it was doing, and what the lock guards
//! stays meaningful, so the other threads go on with it.

use std::sync::{LockResult, Mutex, MutexGuard};

/// Locks `m`, ignoring poison.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    unpoisoned(m.lock())
}

/// The value of a lock operation (a lock, a condition variable's wait), ignoring poison.
pub fn unpoisoned<T>(r: LockResult<T>) -> T {
    r.unwrap_or_else(|p| p.into_inner())
}
