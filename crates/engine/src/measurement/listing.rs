//! `sprat cp -v`: the regular files a transfer completes, reported one by one as they do
//! ([`FileLog`]). A pull and a local copy report a file once their writer has put it in place
//! (the writer pool lists what each batch completed); a push once the server acknowledged the
//! batch that holds it ([`PushListing`] remembers what each batch in flight held). Files left
//! alone (up to date, attributes set only) are not reported; what `--delete` removed is, as
//! it is removed.

use crate::sync::lock;
use sprat_proto::{Batch, EntryKind, KeptEntries};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// What happened to a path the log is told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logged {
    /// A regular file completed.
    Completed,
    /// An entry `--delete` removed (a directory with everything below it).
    Deleted,
}

/// What is told each completed file's path.
type Report = dyn Fn(&[u8], Logged) + Send + Sync;

/// Where the paths of completed files go (relative to the transfer's root; clones share it).
#[derive(Clone)]
pub struct FileLog(Arc<Report>);

impl FileLog {
    pub fn new(report: impl Fn(&[u8], Logged) + Send + Sync + 'static) -> FileLog {
        FileLog(Arc::new(report))
    }

    /// Reports one completed file.
    pub fn completed(&self, path: &[u8]) {
        (self.0)(path, Logged::Completed)
    }

    /// Reports one entry `--delete` removed.
    pub fn deleted(&self, path: &[u8]) {
        (self.0)(path, Logged::Deleted)
    }
}

impl std::fmt::Debug for FileLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileLog")
    }
}

/// What a pushed batch held that an acknowledgement completes, with its index among the
/// batch's entries (how the acknowledgement names what the server kept).
enum Held {
    File(usize, Vec<u8>),
    Chunk {
        index: usize,
        path: Vec<u8>,
        len: u64,
        file_size: u64,
    },
}

/// A push's batches in flight, to report their files once the server acknowledged them. A
/// small file is complete with its batch's acknowledgement; a large file once acknowledged
/// chunks cover its size, or (a resumed file, of which only missing ranges travel) when the
/// session is done ([`PushListing::finish`]). Files the server kept as the destination had
/// them (`--ignore-existing`, or its own check of what the client could not list) are not
/// reported: they were not copied.
pub(crate) struct PushListing {
    log: FileLog,
    in_flight: Mutex<HashMap<u64, Vec<Held>>>,
    /// Large files with chunks acknowledged: bytes acknowledged so far.
    large: Mutex<HashMap<Vec<u8>, u64>>,
    /// Large files of which a chunk failed or was kept: never reported.
    unreported: Mutex<HashSet<Vec<u8>>>,
}

impl PushListing {
    pub(crate) fn new(log: FileLog) -> PushListing {
        PushListing {
            log,
            in_flight: Mutex::default(),
            large: Mutex::default(),
            unreported: Mutex::default(),
        }
    }

    /// `batch` is about to be sent (again, if a refused stream handed it back).
    pub(crate) fn sending(&self, batch: &Batch) {
        let Ok(view) = batch.view() else { return };
        let held = view
            .entries
            .iter()
            .enumerate()
            .filter_map(|(index, e)| match &e.kind {
                EntryKind::File { .. } => Some(Held::File(index, e.path.to_vec())),
                EntryKind::Chunk {
                    file_size, data, ..
                } => Some(Held::Chunk {
                    index,
                    path: e.path.to_vec(),
                    len: data.len() as u64,
                    file_size: *file_size,
                }),
                _ => None,
            })
            .collect();
        lock(&self.in_flight).insert(batch.seq, held);
    }

    /// The server acknowledged batch `seq`; `kept` says which of its entries the server kept
    /// as the destination had them, `failures` name what of it failed.
    pub(crate) fn acked(&self, seq: u64, kept: &KeptEntries, failures: &[(Vec<u8>, String)]) {
        let Some(held) = lock(&self.in_flight).remove(&seq) else {
            return;
        };
        let failed: HashSet<&[u8]> = failures.iter().map(|(p, _)| p.as_slice()).collect();
        for h in held {
            match h {
                Held::File(index, path)
                    if !kept.contains(index) && !failed.contains(path.as_slice()) =>
                {
                    self.log.completed(&path)
                }
                Held::File(..) => {}
                Held::Chunk {
                    index,
                    path,
                    len,
                    file_size,
                } => {
                    if kept.contains(index) || failed.contains(path.as_slice()) {
                        lock(&self.large).remove(&path);
                        lock(&self.unreported).insert(path);
                        continue;
                    }
                    if lock(&self.unreported).contains(&path) {
                        continue;
                    }
                    let mut large = lock(&self.large);
                    let acked = large.entry(path.clone()).or_default();
                    *acked += len;
                    if *acked >= file_size {
                        large.remove(&path);
                        drop(large);
                        self.log.completed(&path);
                    }
                }
            }
        }
    }

    /// The session is done (the server wrote everything sent): reports the large files
    /// whose acknowledged chunks did not cover their size (resumed ones).
    pub(crate) fn finish(&self) {
        let rest: Vec<Vec<u8>> = lock(&self.large).drain().map(|(p, _)| p).collect();
        for path in rest {
            self.log.completed(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprat_proto::FileMeta;

    fn recorder() -> (FileLog, Arc<Mutex<Vec<Vec<u8>>>>) {
        let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let s = seen.clone();
        (FileLog::new(move |p, _| lock(&s).push(p.to_vec())), seen)
    }

    fn none() -> KeptEntries {
        KeptEntries::default()
    }

    fn kept(at: &[usize]) -> KeptEntries {
        let mut kept = KeptEntries::default();
        at.iter().for_each(|&i| kept.mark(i));
        kept
    }

    fn chunk(seq: u64, path: &[u8], size: u64, offset: u64, len: u64) -> Batch {
        let mut b = Batch::new(seq, len as usize);
        b.data.resize(len as usize, 7);
        let of = sprat_proto::ChunkOf {
            file_size: size,
            version: 0,
            whole: true,
            unless: None,
        };
        b.push_chunk(path, &FileMeta::default(), of, offset, len, 0);
        b
    }

    #[test]
    fn a_file_is_reported_once_its_batch_is_acknowledged_unless_it_failed() {
        let (log, seen) = recorder();
        let listing = PushListing::new(log);
        let mut b = Batch::new(1, 8);
        for name in [&b"a"[..], b"b"] {
            b.data.extend_from_slice(b"xy");
            b.push_file(name, &FileMeta::default(), 2, 0);
        }
        b.push_dir(b"d", &FileMeta::default());
        listing.sending(&b);
        assert!(lock(&seen).is_empty(), "nothing before the acknowledgement");
        listing.acked(1, &none(), &[(b"b".to_vec(), "disk trouble".into())]);
        assert_eq!(*lock(&seen), vec![b"a".to_vec()]);
        // An acknowledgement of a batch not in flight reports nothing.
        listing.acked(1, &none(), &[]);
        assert_eq!(lock(&seen).len(), 1);
    }

    #[test]
    fn a_large_file_is_reported_when_its_chunks_cover_it_in_any_order() {
        let (log, seen) = recorder();
        let listing = PushListing::new(log);
        listing.sending(&chunk(1, b"big", 10, 0, 4));
        listing.sending(&chunk(2, b"big", 10, 4, 4));
        listing.sending(&chunk(3, b"big", 10, 8, 2));
        listing.acked(3, &none(), &[]);
        listing.acked(1, &none(), &[]);
        assert!(lock(&seen).is_empty());
        listing.acked(2, &none(), &[]);
        assert_eq!(*lock(&seen), vec![b"big".to_vec()]);
        // A resumed file (only its tail travels) is reported when the session is done; one
        // of which a chunk failed never is.
        listing.sending(&chunk(4, b"resumed", 10, 8, 2));
        listing.sending(&chunk(5, b"broken", 10, 0, 4));
        listing.sending(&chunk(6, b"broken", 10, 4, 6));
        listing.acked(4, &none(), &[]);
        listing.acked(5, &none(), &[(b"broken".to_vec(), "bad".into())]);
        listing.acked(6, &none(), &[]);
        listing.finish();
        assert_eq!(*lock(&seen), vec![b"big".to_vec(), b"resumed".to_vec()]);
    }

    #[test]
    fn files_the_server_kept_are_not_reported() {
        let (log, seen) = recorder();
        let listing = PushListing::new(log);
        let mut b = Batch::new(1, 8);
        b.push_dir(b"d", &FileMeta::default());
        for name in [&b"d/a"[..], b"d/b", b"d/c"] {
            b.data.extend_from_slice(b"xy");
            b.push_file(name, &FileMeta::default(), 2, 0);
        }
        listing.sending(&b);
        // Entries 1 and 3 (`d/a`, `d/c`; entry 0 is the directory) were kept.
        listing.acked(1, &kept(&[1, 3]), &[]);
        assert_eq!(*lock(&seen), vec![b"d/b".to_vec()]);
        // A large file whose completing chunk the server kept is never reported, whatever
        // the order its other chunks' acknowledgements come in.
        listing.sending(&chunk(2, b"big", 10, 0, 4));
        listing.sending(&chunk(3, b"big", 10, 4, 6));
        listing.acked(3, &kept(&[0]), &[]);
        listing.acked(2, &none(), &[]);
        listing.finish();
        assert_eq!(*lock(&seen), vec![b"d/b".to_vec()]);
    }
}
