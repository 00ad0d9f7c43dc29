//! Digests of many files at once, for `--checksum`: a pool of threads, each with its own
//! directory cursor and read buffer, computes the XXH3-128 of the files handed to it (below
//! one root) while the caller goes on scanning or listing; results come back in the order
//! they are done. Files travel to the threads in small groups in scan order, so a group's
//! files mostly share one directory descriptor. Used where each copy lives: the source's
//! planner (`pipeline::source`), a local destination's index (`roles::destination`) and a
//! server's listing with digests (`roles::requests`).

use crossbeam_channel::{bounded, unbounded, Receiver, Sender, TryIter};
use sprat_store::read::DirCursor;
use sprat_store::Root;

/// Files handed to a thread at a time.
const GROUP: usize = 32;

/// One result: the item and its file's digest (`None`: the file could not be read).
pub type Digested<T> = (T, Option<u128>);

/// What the caller's thread digests with when the pool has no threads: a cursor, a buffer
/// and how to find an item's path.
type Inline<'r, T> = (DirCursor<'r>, Vec<u8>, fn(&T) -> &[u8]);

/// The caller's side of a running pool (see [`with_pool`]).
pub struct Pool<'r, T> {
    jobs: Option<Sender<Vec<T>>>,
    done: Receiver<Digested<T>>,
    group: Vec<T>,
    /// With no threads, digests are computed on the caller's thread.
    inline: Option<Inline<'r, T>>,
    inline_done: Vec<Digested<T>>,
}

impl<T> Pool<'_, T> {
    /// Queues `item`'s file (sent to the threads once a group is full; blocks while every
    /// thread is busy and the queue is full).
    pub fn submit(&mut self, item: T) {
        if let Some((cursor, buf, path)) = &mut self.inline {
            let digest = cursor.digest_file(path(&item), buf).ok();
            self.inline_done.push((item, digest));
            return;
        }
        self.group.push(item);
        if self.group.len() >= GROUP {
            self.flush();
        }
    }

    /// Hands a partly filled group to the threads.
    pub fn flush(&mut self) {
        if self.group.is_empty() {
            return;
        }
        let group = std::mem::take(&mut self.group);
        if let Some(jobs) = &self.jobs {
            // The threads only stop once `jobs` is dropped, so this cannot fail.
            let _ = jobs.send(group);
        }
    }

    /// Results ready now, without waiting.
    pub fn ready(&mut self) -> ReadyIter<'_, T> {
        ReadyIter {
            inline: std::mem::take(&mut self.inline_done).into_iter(),
            done: self.done.try_iter(),
        }
    }

    /// Hands over what is queued and returns every result still to come, waiting for them.
    pub fn finish(mut self) -> impl Iterator<Item = Digested<T>> {
        self.flush();
        let Pool {
            jobs,
            done,
            inline_done,
            ..
        } = self;
        // No more jobs: the threads end once the queue is empty, and with them `done`.
        drop(jobs);
        inline_done.into_iter().chain(done)
    }
}

/// Results ready now (see [`Pool::ready`]).
pub struct ReadyIter<'p, T> {
    inline: std::vec::IntoIter<Digested<T>>,
    done: TryIter<'p, Digested<T>>,
}

impl<T> Iterator for ReadyIter<'_, T> {
    type Item = Digested<T>;
    fn next(&mut self) -> Option<Digested<T>> {
        self.inline.next().or_else(|| self.done.next())
    }
}

/// The XXH3-128 of the one file `path` below `root` (`None`: it could not be read, or is not
/// a regular file).
pub fn file_digest(root: &Root, path: &[u8]) -> Option<u128> {
    DirCursor::new(root).digest_file(path, &mut Vec::new()).ok()
}

/// The path of a scanned entry, for [`with_pool`].
pub fn scanned_path(e: &sprat_store::ScanEntry) -> &[u8] {
    &e.path
}

/// Runs `body` with a pool of `threads` threads digesting files below `root` (`path` gives an
/// item's path relative to it); returns once `body` returned and the threads finished what
/// was queued. With 0 threads nothing is started and [`Pool::submit`] digests at once.
pub fn with_pool<'r, T: Send, R>(
    root: &'r Root,
    threads: usize,
    path: fn(&T) -> &[u8],
    body: impl FnOnce(Pool<'r, T>) -> R,
) -> R {
    let (jobs_tx, jobs_rx) = bounded::<Vec<T>>(threads * 2);
    // Unbounded: a thread never waits for the caller, who may itself be waiting to submit.
    // What it holds is bounded by what the caller submitted and has not collected yet.
    let (done_tx, done) = unbounded::<Digested<T>>();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (jobs_rx, done_tx) = (jobs_rx.clone(), done_tx.clone());
            s.spawn(move || {
                let mut cursor = DirCursor::new(root);
                let mut buf = Vec::new();
                for group in jobs_rx {
                    for item in group {
                        let digest = match cursor.digest_file(path(&item), &mut buf) {
                            Ok(d) => Some(d),
                            Err(e) => {
                                tracing::debug!(e = %crate::text::printable(&e.to_string()), "no digest");
                                None
                            }
                        };
                        if done_tx.send((item, digest)).is_err() {
                            return;
                        }
                    }
                }
            });
        }
        drop((jobs_rx, done_tx));
        body(Pool {
            jobs: (threads > 0).then_some(jobs_tx),
            done,
            group: Vec::new(),
            inline: (threads == 0).then(|| (DirCursor::new(root), Vec::new(), path)),
            inline_done: Vec::new(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digests_of(threads: usize, names: &[String], root: &Root) -> Vec<(String, Option<u128>)> {
        fn path(n: &String) -> &[u8] {
            n.as_bytes()
        }
        let mut out = with_pool(root, threads, path, |mut pool| {
            let mut out = Vec::new();
            for (i, n) in names.iter().enumerate() {
                pool.submit(n.clone());
                if i % 10 == 0 {
                    pool.flush();
                    out.extend(pool.ready());
                }
            }
            out.extend(pool.finish());
            out
        });
        out.sort();
        out
    }

    #[test]
    fn every_file_gets_its_digest_once_whatever_the_threads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut names: Vec<String> = Vec::new();
        for d in 0..3 {
            std::fs::create_dir(dir.path().join(format!("d{d}"))).expect("mkdir");
            for f in 0..50 {
                let name = format!("d{d}/f{f:02}");
                std::fs::write(dir.path().join(&name), name.as_bytes()).expect("write");
                names.push(name);
            }
        }
        names.push("d0/absent".into());
        let root = Root::open(dir.path()).expect("root");
        let mut expected: Vec<(String, Option<u128>)> = names
            .iter()
            .map(|n| {
                let d = (n != "d0/absent").then(|| sprat_store::checksum(n.as_bytes()));
                (n.clone(), d)
            })
            .collect();
        expected.sort();
        for threads in [0, 1, 4] {
            assert_eq!(digests_of(threads, &names, &root), expected, "{threads}");
        }
    }
}
