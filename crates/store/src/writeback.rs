//! Early writeback: makes the disk start on what a tree writer wrote while the copy goes on,
//! instead of after it.
//!
//! Without it the kernel starts writing a copy's dirty pages back only once they pass its
//! background threshold (10% of memory here, about 2 GB) or are 30 s old, so a copy smaller
//! than that finishes with everything still in memory and the whole write to disk happens in
//! the final `sync` (the user's, or the next writeback): the disk idles while the copy runs,
//! and the CPU idles while the disk writes.
//!
//! Large files' chunks mostly bypass the page cache: they are written with `O_DIRECT` where
//! the file system allows (see `crate::direct`). Starting the writeback of each chunk written
//! through the page cache (`sync_file_range(SYNC_FILE_RANGE_WRITE)`) was tried and made a warm
//! copy of 2 x 1 GiB slower, not faster (docs/performance.md).
//!
//! Whole files of [`FILE_MIN`] bytes or more: [`start_file`] starts the writeback of each one
//! as it is written (on by default, see `TreeWriter::file_writeback`). That concerns only the
//! file itself, and it made a warm push of 1 MiB files to ext4 finish a quarter sooner, sync
//! included.
//!
//! Smaller files are many, and starting each on its own makes the disk take them one by one.
//! For them a [`Writeback`] runs one thread that, when kicked, calls `syncfs` on the
//! destination's file system (a kick during a `syncfs` asks for one more after it), one thread
//! per file system in a process, shared by every writer on it ([`Writeback::for_file_system`]:
//! a server taking many pushes at once makes one `syncfs` at a time, not one per push): the kernel
//! writes all that is dirty there together, in order, while the copy goes on. The writer kicks
//! it after a batch once [`EARLY_MIN`] bytes of such files (and of large files' chunks written
//! through the page cache), and a quarter of all it wrote, were written since the last kick
//! ([`early_due`], `TreeWriter::batch_written`; the counts start again every 256 MiB without
//! a kick, [`count_again`]), so a copy of mostly large files makes no `syncfs` at all. A
//! durable writer has none (it syncs and waits per batch); `SPRAT_EARLY_WRITEBACK=0` turns it
//! off. Nobody
//! waits for it: it is not durability (a durable writer syncs and waits per batch, see
//! `TreeWriter::sync`), and its errors are not reported (a non-durable copy promises nothing
//! about the disk; the user's own `sync` reports a write error). It also starts the writeback
//! of other programs' dirty data on that file system, which the kernel would write within
//! 30 s anyway; nobody waits for that either. On this machine's ext4 it made copies of
//! 100,000 x 4 KiB finish 7-12% sooner, sync included (docs/performance.md, "One disk for
//! source and copy").

use crate::sync::{lock, unpoisoned};
use rustix::fs::{fadvise, Advice};
use std::collections::HashMap;
use std::num::NonZeroU64;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};

/// Whole files this large or larger start going to disk as soon as they are written.
pub const FILE_MIN: u64 = 256 << 10;

/// Bytes of smaller files written through the page cache after which a batch kicks the
/// [`Writeback`]: a few syncs per second of copying, none for a copy of large files.
pub const EARLY_MIN: u64 = 16 << 20;

/// Whether a batch kicks the [`Writeback`], given the bytes of small files `left` in the page
/// cache and all bytes `written` since the last kick: at least [`EARLY_MIN`] of them, and at
/// least a quarter of what was written. Where large files carry most of the bytes, the disk
/// is busy with them already (they go to it as they are written), and a `syncfs` would only
/// add flushes to its work (on 2 GiB of GridFTP sizes, 4% of the bytes in small files, a copy
/// kicking after every 16 MiB of them was 4% slower cold).
pub fn early_due(left: u64, written: u64) -> bool {
    left >= EARLY_MIN && left.saturating_mul(4) >= written
}

/// Whether the counts start again without a kick: after this many bytes written without one,
/// so that a copy whose small files come after many large ones is judged on the recent bytes.
pub fn count_again(written: u64) -> bool {
    written >= 16 * EARLY_MIN
}

/// Starts writing the first `len` bytes of the file `fd` to disk, without waiting for it.
/// `POSIX_FADV_DONTNEED` does that on Linux (it starts the writeback of the range's dirty
/// pages, then drops those already clean), and it needs no unsafe code, unlike
/// `sync_file_range`. A file system without writeback (tmpfs) ignores it. Best effort: the
/// final sync reports any write error.
pub fn start_file(fd: impl AsFd, len: u64) {
    if let Some(len) = NonZeroU64::new(len) {
        let _ = fadvise(fd, 0, Some(len), Advice::DontNeed);
    }
}

/// A thread starting writeback of one file system whenever it is kicked (see the module's doc).
pub struct Writeback {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// Kicked since the last sync started.
    pending: bool,
    stop: bool,
    /// Syncs started so far.
    runs: u64,
}

/// The writebacks in use in this process, by the device of their file system.
fn in_use() -> &'static Mutex<HashMap<u64, Weak<Writeback>>> {
    static IN_USE: OnceLock<Mutex<HashMap<u64, Weak<Writeback>>>> = OnceLock::new();
    IN_USE.get_or_init(Mutex::default)
}

impl Writeback {
    /// The writeback of the file system holding `fd` (a descriptor of the destination's root):
    /// the one other writers of this process on that file system use, or a new one, whose
    /// thread owns `fd`. It stops once its last user drops it.
    pub fn for_file_system(fd: OwnedFd) -> std::io::Result<Arc<Writeback>> {
        let dev = rustix::fs::fstat(&fd)?.st_dev;
        let mut in_use = lock(in_use());
        if let Some(running) = in_use.get(&dev).and_then(Weak::upgrade) {
            return Ok(running);
        }
        in_use.retain(|_, w| w.strong_count() > 0);
        let started = Arc::new(Writeback::start(fd)?);
        in_use.insert(dev, Arc::downgrade(&started));
        Ok(started)
    }

    /// Starts the thread for the file system holding `fd` (a descriptor of the destination's
    /// root, which the thread owns); writers get it through [`Writeback::for_file_system`].
    fn start(fd: OwnedFd) -> std::io::Result<Writeback> {
        let shared = Arc::new(Shared::default());
        let mine = shared.clone();
        std::thread::Builder::new()
            .name("sprat-writeback".into())
            .spawn(move || run(&mine, &fd))?;
        Ok(Writeback { shared })
    }

    /// Asks for a sync once the one under way (if any) is over: what was written until now
    /// starts going to disk.
    pub fn kick(&self) {
        let mut st = lock(&self.shared.state);
        if !st.pending {
            st.pending = true;
            self.shared.wake.notify_one();
        }
    }

    /// How many syncs the thread started.
    pub fn runs(&self) -> u64 {
        lock(&self.shared.state).runs
    }
}

impl Drop for Writeback {
    /// Stops the thread without waiting for it: a sync under way finishes on its own.
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.wake.notify_one();
    }
}

fn run(shared: &Shared, fd: &OwnedFd) {
    loop {
        {
            let mut st = lock(&shared.state);
            while !st.pending && !st.stop {
                st = unpoisoned(shared.wake.wait(st));
            }
            if st.stop {
                return;
            }
            st.pending = false;
            st.runs += 1;
        }
        // Errors are not this thread's to report (see the module's doc).
        let _ = rustix::fs::syncfs(fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kick_is_due_for_enough_small_files_that_are_a_quarter_of_the_bytes() {
        assert!(!early_due(EARLY_MIN - 1, EARLY_MIN - 1));
        assert!(early_due(EARLY_MIN, EARLY_MIN));
        assert!(early_due(EARLY_MIN, 4 * EARLY_MIN));
        assert!(!early_due(EARLY_MIN, 4 * EARLY_MIN + 1));
        assert!(early_due(u64::MAX, u64::MAX));
    }

    #[test]
    fn the_counts_start_again_after_many_bytes_without_a_kick() {
        assert!(!count_again(16 * EARLY_MIN - 1));
        assert!(count_again(16 * EARLY_MIN));
    }

    #[test]
    fn kicks_start_syncs_and_a_dropped_writeback_stops() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fd = OwnedFd::from(std::fs::File::open(dir.path()).expect("open"));
        let wb = Writeback::start(fd).expect("start");
        wb.kick();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while wb.runs() == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(wb.runs() >= 1);
        drop(wb);
    }

    #[test]
    fn writers_on_one_file_system_share_one_writeback() {
        let a = tempfile::tempdir().expect("tempdir");
        let b = tempfile::tempdir_in(a.path()).expect("tempdir");
        let open = |p: &std::path::Path| OwnedFd::from(std::fs::File::open(p).expect("open"));
        let first = Writeback::for_file_system(open(a.path())).expect("start");
        let second = Writeback::for_file_system(open(b.path())).expect("share");
        assert!(
            Arc::ptr_eq(&first, &second),
            "two threads for one file system"
        );
        // The registry holds it weakly: its users alone keep it (2 here, or more while
        // another test of this process writes to the same file system).
        assert!(Arc::strong_count(&first) >= 2);
        drop(second);
        let again = first;
        // Another file system (tmpfs, when there is one) gets its own.
        let shm = std::path::Path::new("/dev/shm");
        if let (Ok(here), Ok(there)) = (std::fs::metadata(a.path()), std::fs::metadata(shm)) {
            use std::os::unix::fs::MetadataExt;
            if here.dev() != there.dev() {
                let other = Writeback::for_file_system(open(shm)).expect("start");
                assert!(!Arc::ptr_eq(&again, &other));
            }
        }
    }
}
