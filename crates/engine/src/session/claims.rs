//! A server's claims on the trees its push sessions write. A push opening on a tree that
//! overlaps one another session still writes (the same command run again while the session
//! it interrupted still writes what it had received, perhaps from a network path's buffers)
//! waits until that session has stopped writing: two sessions do not write one file at once,
//! and the earlier one cannot change what the later one finished (a file's or a directory's
//! mtime). The wait ends early when the other session makes no progress for a second (it is
//! stalled: waiting for it would only stall this one too), and after a bounded time; the
//! push then goes on regardless (a busy tree is slower, not refused).

use crate::sync::{lock, unpoisoned};
use sprat_proto::path::is_within;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a push waits at most for an overlapping session to stop writing.
pub(crate) const CLAIM_PATIENCE: Duration = Duration::from_secs(30);

/// An overlapping session that made no progress for this long is not waited for.
const IDLE: Duration = Duration::from_secs(1);

/// The trees being written, by claim.
#[derive(Default)]
pub(crate) struct Claims {
    /// Each claim's id, tree and progress counter.
    held: Mutex<Vec<(u64, Vec<u8>, Progress)>>,
    released: Condvar,
    next: AtomicU64,
}

/// A session's progress (a counter that grows with every batch written: its writers' busy
/// time), which its claim shows to the sessions waiting.
pub(crate) type Progress = Arc<AtomicU64>;

/// A claim on a tree, released when dropped.
pub(crate) struct Claim {
    claims: Arc<Claims>,
    id: u64,
}

impl Claims {
    /// Claims the tree at `path` (relative to the exported root) for a session whose progress
    /// is `progress`, first waiting up to `patience` until no claim overlaps it (one is the
    /// other or lies below it), or until the overlapping ones made no progress for [`IDLE`].
    pub(crate) fn claim(
        self: &Arc<Self>,
        path: &[u8],
        progress: Progress,
        patience: Duration,
    ) -> Claim {
        let deadline = Instant::now() + patience;
        let mut held = lock(&self.held);
        let overlaps = |p: &[u8]| is_within(p, path) || is_within(path, p);
        let mut seen = (u64::MAX, Instant::now());
        loop {
            let mut busy = held.iter().filter(|(_, p, _)| overlaps(p)).peekable();
            if busy.peek().is_none() {
                break;
            }
            // Which sessions hold overlapping claims, and how far each got.
            let moved = busy.fold(0u64, |acc, (id, _, n)| {
                acc.wrapping_mul(31)
                    .wrapping_add(*id)
                    .wrapping_add(n.load(Ordering::Relaxed))
            });
            let now = Instant::now();
            if moved != seen.0 {
                seen = (moved, now);
            } else if now - seen.1 >= IDLE {
                tracing::warn!("another session writing into this tree makes no progress");
                break;
            }
            if now >= deadline {
                tracing::warn!(?patience, "another session still writes into this tree");
                break;
            }
            let tick = (deadline - now).min(IDLE / 10);
            held = unpoisoned(self.released.wait_timeout(held, tick)).0;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        held.push((id, path.to_vec(), progress));
        Claim {
            claims: self.clone(),
            id,
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        lock(&self.claims.held).retain(|(id, _, _)| *id != self.id);
        self.claims.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlapping_claim_waits_while_the_first_writes_and_others_do_not() {
        let claims = Arc::new(Claims::default());
        let progress = Progress::default();
        let first = claims.claim(b"runs/42", progress.clone(), Duration::ZERO);
        // Elsewhere: at once.
        let started = Instant::now();
        drop(claims.claim(b"runs/43", Progress::default(), Duration::from_secs(5)));
        assert!(started.elapsed() < Duration::from_millis(500));
        // The root overlaps everything: it waits while the first claim's session writes (for
        // 2 s, longer than IDLE), until it is dropped.
        let release = std::thread::spawn(move || {
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(100));
                progress.fetch_add(1, Ordering::Relaxed);
            }
            drop(first);
        });
        let started = Instant::now();
        let root = claims.claim(b"", Progress::default(), Duration::from_secs(10));
        let waited = started.elapsed();
        release.join().unwrap();
        assert!(waited >= Duration::from_millis(1900), "{waited:?}");
        assert!(waited < Duration::from_secs(8), "{waited:?}");
        // A session that makes no progress is waited for about IDLE only.
        let started = Instant::now();
        let _below = claims.claim(b"runs/42/raw", Progress::default(), Duration::from_secs(10));
        let waited = started.elapsed();
        assert!(
            waited >= IDLE && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        drop(root);
    }
}
