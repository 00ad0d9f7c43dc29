//! The lock helper of the test kit, which depends on no sprat crate (it drives the binary), so
//! it keeps its own copy of `sprat_store::sync::lock`. Poisoned locks are not errors here: a thread that
//! panicked while holding one has already failed what it was doing, and what the lock guards
//! stays meaningful, so the other threads go on with it.

use std::sync::{LockResult, Mutex, MutexGuard};

/// Locks `m`, ignoring poison.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    unpoisoned(m.lock())
}

/// The value of a lock operation (a lock, a condition variable's wait), ignoring poison.
pub(crate) fn unpoisoned<T>(r: LockResult<T>) -> T {
    r.unwrap_or_else(|p| p.into_inner())
}
