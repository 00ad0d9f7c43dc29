//! The process's allocator, mimalloc, and the one setting sprat changes in it.
//!
//! mimalloc, not glibc's allocator: with glibc's per-thread arenas a TLS server spent a third
//! more CPU on a push of 1 MiB files (rustls copies every record into a new `Vec`, on many
//! threads). Version 2 (the crate's `v2` feature): version 3 kept up to three times more
//! memory resident in a server under 32 copies. See "The allocator" in docs/performance.md.
//!
//! The only unsafe code outside the storage crate's system calls: one call into mimalloc's C
//! API, made before any thread starts.
#![allow(unsafe_code)]

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (the same index in its versions 2 and 3; the `sys`
/// crate names no constant for it).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays mapped before it goes back to the system, in milliseconds.
///
/// mimalloc's default, 10 ms, is shorter than the time between two batches of a transfer: the
/// memory of each batch (its buffer, its index of entries, the TLS records) went back and was
/// mapped again for the next one, each time a page fault and a zeroed page, on this machine's
/// transparent huge pages 2 MiB at a time. A push of a real tree (44,000 files, 600 MB) took
/// 1,000 to 1,700 faults in the server and 3,600 to 4,200 in the client; with memory kept a
/// second, 250 and 700 ("Freed memory kept a second" in docs/performance.md). The memory
/// held is what the transfer used a moment before, within its bounds.
const KEEP_MS: std::ffi::c_long = 1000;

/// Sets mimalloc's purge delay to [`KEEP_MS`], unless the environment chose one
/// (`MIMALLOC_PURGE_DELAY`, read by mimalloc at start). Call first thing in `main`.
pub fn keep_freed_memory_a_while() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: `mi_option_set` stores an integer in mimalloc's option table; it is not thread
    // safe, and this runs at the start of `main`, before the program starts any thread.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, KEEP_MS) }
}
