//! Batch read: the data of a whole batch read together rather than one file at a time.
//!
//! Phase 1 opens every file of the batch (metadata was scanned before, with large getdents64
//! buffers and statx, entries in inode order) and, with [`ReadOrder::Physical`], asks where
//! each file's data lies (FIEMAP). Phase 2 reads the batch in that physical order, either
//! with one io_uring holding many reads in flight ([`IoBackend::Uring`]) or with plain
//! `pread`s on the calling thread ([`IoBackend::Threads`]; parallelism then comes from several
//! reader threads each reading its own batch). Data lands directly in the batch buffer, each
//! item's bytes where the batch format wants them; the checksum is computed afterwards.
//!
//! A file system without FIEMAP (tmpfs, many network file systems) keeps the scanner's inode
//! order; a kernel without io_uring, or one that forbids it, gets the pread path. Neither is
//! an error.

use crate::error::StoreError;
use crate::read::DirCursor;
use crate::root::Root;
use crate::sys::{self, ReadRequest, UringReader};
use rustix::io::Errno;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// How the data of a batch is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoBackend {
    /// `pread` one item after another on the calling thread.
    Threads,
    /// All reads of the batch in flight at once on an io_uring.
    Uring,
}

/// In which order a batch's items are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOrder {
    /// The order of the items (the scanner's inode order).
    Scan,
    /// By physical address of the data (FIEMAP), where the file system tells it.
    Physical,
}

/// One item of a batch to read: `len` bytes from `offset` of a file the scan saw with
/// `scanned` size, mtime and version (`len` is that size for a whole file, `whole`). After its
/// data is read, the open file is examined again (`statx` on its descriptor): a file whose
/// size, mtime or version is no longer what the scan saw changed while it was read (or was
/// replaced by another of the same size and mtime), and its data is refused
/// (a chunk of a large file is checked the same way, so every chunk of a copied large file
/// was read from the one version the scan saw). A file gone before it could be opened
/// vanished.
#[derive(Debug, Clone, Copy)]
pub struct ReadItem<'p> {
    pub path: &'p [u8],
    pub offset: u64,
    pub len: u64,
    pub whole: bool,
    pub scanned: Scanned,
}

/// What the scan saw of a file: its size, mtime and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scanned {
    pub size: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
    /// [`crate::ScanEntry::version`]; 0: unknown, not checked.
    pub version: u64,
}

/// The text of the error of a file that changed between its scan and the end of its read.
pub const CHANGED: &str = "changed while being read";
/// The text of the error of a file that was gone when it was to be read.
pub const VANISHED: &str = "vanished before it could be read";

/// What reading one item gave: its length and checksum, or why it failed.
pub type ItemResult = Result<(u64, u128), StoreError>;

/// Reads batches below one root; one per reader thread.
pub struct BatchReader<'r> {
    cursor: DirCursor<'r>,
    name_override: Option<Vec<u8>>,
    order: ReadOrder,
    uring: Option<UringReader>,
    /// Cleared when the file system answers that it has no FIEMAP.
    fiemap_works: bool,
    /// Most files of a batch open at once.
    max_open: usize,
}

/// Reads in flight on one ring.
const URING_DEPTH: u32 = 128;

/// Files of a batch held open at once unless [`BatchReader::with_max_open`] says otherwise.
pub const DEFAULT_MAX_OPEN: usize = 256;

impl<'r> BatchReader<'r> {
    /// A reader for files below `root`; `name_override` names the file when the source is a
    /// single file (its items have an empty path). With [`IoBackend::Uring`] the ring is made
    /// now; if the kernel refuses, the reader uses `pread` instead (see [`Self::backend`]).
    pub fn new(
        root: &'r Root,
        name_override: Option<&[u8]>,
        order: ReadOrder,
        backend: IoBackend,
    ) -> BatchReader<'r> {
        let uring = match backend {
            IoBackend::Uring => UringReader::new(URING_DEPTH).ok(),
            IoBackend::Threads => None,
        };
        BatchReader {
            cursor: DirCursor::new(root),
            name_override: name_override.map(<[u8]>::to_vec),
            order,
            uring,
            fiemap_works: true,
            max_open: DEFAULT_MAX_OPEN,
        }
    }

    /// The back end actually in use.
    pub fn backend(&self) -> IoBackend {
        if self.uring.is_some() {
            IoBackend::Uring
        } else {
            IoBackend::Threads
        }
    }

    /// Holds at most `max_open` files of a batch open at once (at least 1): a batch of more
    /// files is read in windows of that many, so that readers x `max_open` stays within the
    /// process's limit on open files.
    pub fn with_max_open(mut self, max_open: usize) -> BatchReader<'r> {
        self.max_open = max_open.max(1);
        self
    }

    /// Appends the data of every item to `buf`, in item order, and returns each item's length
    /// and checksum (or its error; a failed item contributes no bytes).
    pub fn read(&mut self, items: &[ReadItem<'_>], buf: &mut Vec<u8>) -> Vec<ItemResult> {
        let start = buf.len();
        let total: u64 = items.iter().map(|i| i.len).sum();
        buf.resize(start + total as usize, 0);
        self.read_at(items, buf, start)
    }

    /// [`BatchReader::read`] into `buf` from its first byte, whatever it holds: a spare
    /// buffer's stale bytes are overwritten where they are not dropped, so only a buffer that
    /// must grow is zeroed (the part it grows by), not the whole of it for every batch. What
    /// `buf` holds afterwards is the data read and nothing else, as with `read`.
    pub fn read_over(&mut self, items: &[ReadItem<'_>], buf: &mut Vec<u8>) -> Vec<ItemResult> {
        let total: u64 = items.iter().map(|i| i.len).sum();
        buf.resize(total as usize, 0);
        self.read_at(items, buf, 0)
    }

    /// Reads every item's data into `buf` from `start` on (`buf` holds exactly their total
    /// there), moves it down over the gaps of failed items and truncates `buf` after it.
    fn read_at(
        &mut self,
        items: &[ReadItem<'_>],
        buf: &mut Vec<u8>,
        start: usize,
    ) -> Vec<ItemResult> {
        let mut slots = Vec::with_capacity(items.len());
        let mut offset = start;
        for item in items {
            slots.push(offset);
            offset += item.len as usize;
        }
        let mut state = WindowState {
            results: (0..items.len()).map(|_| None).collect(),
            got: vec![0; items.len()],
            errors: vec![None; items.len()],
            changed: vec![false; items.len()],
        };
        let with_data: Vec<usize> = (0..items.len()).filter(|&i| items[i].len > 0).collect();
        for window in with_data.chunks(self.max_open) {
            self.read_window(items, window, &slots, start, buf, &mut state);
        }
        let WindowState {
            mut results,
            got,
            errors,
            changed,
        } = state;
        // Results in item order; data moved down over the gaps of failed and short items.
        let mut write_at = start;
        for (i, item) in items.iter().enumerate() {
            if results[i].is_some() {
                continue;
            }
            let result = if item.len == 0 {
                Ok((0, crate::attrs::checksum(&[])))
            } else if let Some(e) = errors[i] {
                Err(StoreError::new("read", item.path, e))
            } else if changed[i] || (got[i] as u64) < item.len {
                // A short read is a file that shrank: never data written as good.
                Err(StoreError::other("read", item.path, CHANGED))
            } else {
                let n = got[i];
                if slots[i] != write_at {
                    buf.copy_within(slots[i]..slots[i] + n, write_at);
                }
                let hash = crate::attrs::checksum(&buf[write_at..write_at + n]);
                write_at += n;
                Ok((n as u64, hash))
            };
            results[i] = Some(result);
        }
        buf.truncate(write_at);
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(StoreError::other("read", b"", "not read"))))
            .collect()
    }

    /// Opens the items of `window` (indices into `items`), orders them, reads their data into
    /// their slots of `buf` and closes them again.
    fn read_window(
        &mut self,
        items: &[ReadItem<'_>],
        window: &[usize],
        slots: &[usize],
        start: usize,
        buf: &mut Vec<u8>,
        state: &mut WindowState,
    ) {
        // Phase 1: open, in item order (the scan's inode order).
        let mut opened: Vec<(usize, OwnedFd)> = Vec::with_capacity(window.len());
        for &i in window {
            match self
                .cursor
                .open_file(items[i].path, self.name_override.as_deref())
            {
                Ok(fd) => opened.push((i, fd)),
                Err(e) if e.errno() == Some(Errno::NOENT) => {
                    state.results[i] = Some(Err(StoreError::other("read", items[i].path, VANISHED)))
                }
                Err(e) => state.results[i] = Some(Err(e)),
            }
        }
        if self.order == ReadOrder::Physical && self.fiemap_works {
            let mut keys = Vec::with_capacity(opened.len());
            for (i, fd) in &opened {
                match sys::physical_address(fd.as_fd(), items[*i].offset) {
                    Ok(addr) => keys.push(addr.unwrap_or(u64::MAX)),
                    Err(Errno::OPNOTSUPP | Errno::NOTTY | Errno::INVAL) => {
                        self.fiemap_works = false;
                        break;
                    }
                    Err(_) => keys.push(u64::MAX),
                }
            }
            if self.fiemap_works {
                // Stable: files without a known address keep their inode order, last.
                let mut keyed: Vec<_> = keys.into_iter().zip(opened).collect();
                keyed.sort_by_key(|(key, _)| *key);
                opened = keyed.into_iter().map(|(_, o)| o).collect();
            }
        }
        // A chunk of a large file that lies wholly in a hole is not read: its slot is filled
        // with zeros (checked against the scan afterwards like any read).
        let (holes, opened): (Vec<_>, Vec<_>) = opened
            .into_iter()
            .partition(|(i, fd)| !items[*i].whole && in_hole(fd, items[*i].offset, items[*i].len));
        for (i, fd) in &holes {
            // Zeros, whatever the buffer held before (see `read_over`).
            buf[slots[*i]..slots[*i] + items[*i].len as usize].fill(0);
            state.got[*i] = items[*i].len as usize;
            state.errors[*i] = None;
            state.changed[*i] = !unchanged(fd, &items[*i].scanned);
        }
        // Phase 2: the data, in that order.
        let mut requests: Vec<ReadRequest> = opened
            .iter()
            .map(|(i, fd)| ReadRequest {
                fd: fd.as_raw_fd(),
                file_offset: items[*i].offset,
                buf_offset: slots[*i],
                len: items[*i].len as usize,
                done: 0,
                error: None,
            })
            .collect();
        let mut use_pread = true;
        // The ring takes the buffer; it only does when nothing precedes this batch's data in
        // it, so that a failure of the ring itself (the buffer is then lost) loses nothing else.
        if let (Some(ring), 0, false) = (&mut self.uring, start, requests.is_empty()) {
            let len = buf.len();
            match ring.read_all(&mut requests, std::mem::take(buf)) {
                Ok(b) => {
                    *buf = b;
                    use_pread = false;
                }
                Err(_) => {
                    // Use pread from now on; earlier windows' data went with the buffer.
                    self.uring = None;
                    buf.resize(len, 0);
                    for r in &mut requests {
                        r.done = 0;
                        r.error = None;
                    }
                    for i in 0..state.got.len() {
                        if state.got[i] > 0 && !window.contains(&i) {
                            state.errors[i] = Some(Errno::IO);
                        }
                    }
                }
            }
        }
        for (r, (i, fd)) in requests.iter_mut().zip(&opened) {
            if use_pread {
                pread_request(fd, r, buf);
            }
            state.got[*i] = r.done;
            state.errors[*i] = r.error;
            // Examined after its data was read: what was read is the version the scan saw
            // only if the file still has that size and mtime now.
            if r.error.is_none() {
                state.changed[*i] = !unchanged(fd, &items[*i].scanned);
            }
        }
    }
}

/// Whether `len` bytes at `offset` of `fd` are all a hole (`SEEK_DATA` finds no data before
/// their end); any doubt (an error, a file system without `SEEK_DATA`) says no: read them.
fn in_hole(fd: &OwnedFd, offset: u64, len: u64) -> bool {
    match rustix::fs::seek(fd, rustix::fs::SeekFrom::Data(offset)) {
        Ok(data) => data >= offset.saturating_add(len),
        // No data from `offset` to the end: a hole, or a file now shorter than the scan saw
        // (which the check against the scan after the read reports).
        Err(Errno::NXIO) => true,
        Err(_) => false,
    }
}

/// Whether the open file `fd` still has the size, mtime and version the scan saw (an error
/// examining it counts as a change).
pub(crate) fn unchanged(fd: &OwnedFd, scanned: &Scanned) -> bool {
    allocated_if_unchanged(fd, scanned).is_some()
}

/// The bytes the open file `fd` has allocated, if it still has the size, mtime and version
/// the scan saw ([`unchanged`], with the same one `statx`).
pub(crate) fn allocated_if_unchanged(fd: &OwnedFd, scanned: &Scanned) -> Option<u64> {
    use rustix::fs::{statx, AtFlags, StatxFlags};
    let st = statx(
        fd,
        "",
        AtFlags::EMPTY_PATH,
        StatxFlags::SIZE
            | StatxFlags::MTIME
            | StatxFlags::BLOCKS
            | StatxFlags::INO
            | StatxFlags::CTIME,
    )
    .ok()?;
    let same = st.stx_size == scanned.size
        && st.stx_mtime.tv_sec == scanned.mtime_sec
        && st.stx_mtime.tv_nsec == scanned.mtime_nsec
        && (scanned.version == 0
            || crate::scan::version_of(st.stx_ino, &st.stx_ctime) == scanned.version);
    same.then(|| st.stx_blocks.saturating_mul(512))
}

/// Per-item outcomes of a batch read, filled window by window.
struct WindowState {
    results: Vec<Option<ItemResult>>,
    got: Vec<usize>,
    errors: Vec<Option<Errno>>,
    /// Items whose file no longer had the scanned size and mtime after the read.
    changed: Vec<bool>,
}

/// Reads one request with `pread` until it is complete, the file ends or it fails.
fn pread_request(fd: &OwnedFd, r: &mut ReadRequest, buf: &mut [u8]) {
    while r.done < r.len {
        let target = &mut buf[r.buf_offset + r.done..r.buf_offset + r.len];
        match rustix::io::pread(fd, target, r.file_offset + r.done as u64) {
            Ok(0) => r.len = r.done,
            Ok(n) => r.done += n,
            Err(Errno::INTR) => {}
            Err(e) => {
                r.error = Some(e);
                return;
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const UNKNOWN: Scanned = Scanned {
        size: 0,
        mtime_sec: 0,
        mtime_nsec: 0,
        version: 0,
    };

    /// Runs `f` on a thread of its own; panics if it takes more than 20 s, first opening the
    /// FIFO `fifo` for writing so that a thread blocked opening it for reading can end.
    pub(crate) fn unblocked<T: Send + 'static>(
        fifo: &std::path::Path,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        match rx.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok(v) => v,
            Err(_) => {
                let _writer = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(fifo);
                panic!("reading blocked on the FIFO {}", fifo.display());
            }
        }
    }

    /// A file the scan saw, then replaced by a FIFO (or a device) before it is read: opening
    /// it must not wait for a writer, and nothing but a regular file is ever read.
    #[test]
    fn a_fifo_or_device_swapped_in_after_the_scan_is_refused_not_read() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        for name in ["fifo", "device", "kept"] {
            std::fs::write(dir.path().join("d").join(name), b"12345").unwrap();
        }
        let root = Root::open(dir.path()).unwrap();
        let scanned = crate::scan::list_directory(&root, b"d");
        assert_eq!(scanned.len(), 3);
        // Swapped after the scan.
        let fifo = dir.path().join("d/fifo");
        std::fs::remove_file(&fifo).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let device = dir.path().join("d/device");
        std::fs::remove_file(&device).unwrap();
        // /dev/zero: it would give any number of bytes (where this process may make one).
        let has_device = rustix::fs::mknodat(
            rustix::fs::CWD,
            &device,
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o644),
            rustix::fs::makedev(1, 5),
        )
        .is_ok();
        assert!(std::fs::metadata(&fifo).unwrap().mode() & 0o170000 == 0o010000);
        for backend in [IoBackend::Threads, IoBackend::Uring] {
            let (scanned, top) = (scanned.clone(), dir.path().to_path_buf());
            let results = unblocked(&fifo, move || {
                let root = Root::open(&top).unwrap();
                let items: Vec<ReadItem<'_>> = scanned
                    .iter()
                    .map(|e| ReadItem {
                        path: &e.path,
                        offset: 0,
                        len: e.size,
                        whole: true,
                        scanned: Scanned {
                            size: e.size,
                            mtime_sec: e.attrs.mtime_sec,
                            mtime_nsec: e.attrs.mtime_nsec,
                            version: 0,
                        },
                    })
                    .collect();
                let mut reader = BatchReader::new(&root, None, ReadOrder::Scan, backend);
                let mut buf = Vec::new();
                let results = reader.read(&items, &mut buf);
                let texts: Vec<(Vec<u8>, Result<u64, String>)> = scanned
                    .iter()
                    .zip(results)
                    .map(|(e, r)| (e.path.clone(), r.map(|(n, _)| n).map_err(|e| e.to_string())))
                    .collect();
                (texts, buf)
            });
            let (texts, buf) = results;
            for (path, result) in &texts {
                let what = format!("{backend:?} {}", String::from_utf8_lossy(path));
                match &path[..] {
                    b"d/kept" => assert_eq!(result, &Ok(5), "{what}"),
                    b"d/device" if !has_device => {}
                    _ => {
                        let err = result.as_ref().unwrap_err();
                        assert!(err.contains(crate::read::NOT_REGULAR), "{what}: {err}");
                        let shown = String::from_utf8_lossy(path).into_owned();
                        assert!(err.contains(&shown), "{what}: {err}");
                    }
                }
            }
            assert_eq!(buf, b"12345", "{backend:?}: only the regular file's bytes");
        }
        // One file at a time, and a chunk of one, the same way.
        let top = dir.path().to_path_buf();
        let (whole, chunk) = unblocked(&fifo, move || {
            let root = Root::open(&top).unwrap();
            let mut cursor = DirCursor::new(&root);
            let mut buf = Vec::new();
            let whole = cursor.read_file(b"d/fifo", None, 5, &mut buf).map(|_| ());
            let chunk = cursor
                .read_chunk(b"d/fifo", None, 0, 5, &mut buf)
                .map(|_| ());
            (whole, chunk)
        });
        for r in [whole, chunk] {
            let err = r.unwrap_err().to_string();
            assert!(err.contains(crate::read::NOT_REGULAR), "{err}");
        }
    }

    /// A file replaced, between its scan and its read, by another of the same size and mtime
    /// (renamed over it, or written in place with its mtime put back) is refused as changed:
    /// the chunks of one copied file all come from the version the scan saw.
    #[test]
    fn a_file_replaced_by_one_of_the_same_size_and_mtime_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, [1u8; 8192]).unwrap();
        let root = Root::open(dir.path()).unwrap();
        let scan = crate::scan::stat_path(&root, b"f").unwrap();
        let scanned = Scanned {
            size: scan.size,
            mtime_sec: scan.attrs.mtime_sec,
            mtime_nsec: scan.attrs.mtime_nsec,
            version: scan.version,
        };
        assert_ne!(scanned.version, 0);
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        let read = |backend| {
            let items = [ReadItem {
                path: b"f",
                offset: 4096,
                len: 4096,
                whole: false,
                scanned,
            }];
            let mut reader = BatchReader::new(&root, None, ReadOrder::Scan, backend);
            let mut buf = Vec::new();
            reader.read(&items, &mut buf).remove(0)
        };
        assert!(read(IoBackend::Threads).is_ok());
        let other = dir.path().join("g");
        std::fs::write(&other, [2u8; 8192]).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&other)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        std::fs::rename(&other, &path).unwrap();
        for backend in [IoBackend::Threads, IoBackend::Uring] {
            let err = read(backend).unwrap_err().to_string();
            assert!(err.contains(CHANGED), "{backend:?}: {err}");
        }
    }

    /// Chunks in a hole are not read but give zeros, even over a stale buffer; chunks with
    /// data are read, whichever back end; a file shorter than scanned is still refused.
    #[test]
    fn chunks_in_holes_read_as_zeros() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse");
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(4 << 20).unwrap();
        f.write_all_at(b"data", (1 << 20) + 10).unwrap();
        let content = std::fs::read(&path).unwrap();
        let st = std::fs::metadata(&path).unwrap();
        let scanned = Scanned {
            size: st.len(),
            mtime_sec: st.mtime(),
            mtime_nsec: st.mtime_nsec() as u32,
            version: 0,
        };
        let root = Root::open(dir.path()).unwrap();
        for backend in [IoBackend::Threads, IoBackend::Uring] {
            let items: Vec<ReadItem<'_>> = (0..4u64)
                .map(|c| ReadItem {
                    path: b"sparse",
                    offset: c << 20,
                    len: 1 << 20,
                    whole: false,
                    scanned,
                })
                .collect();
            let mut reader = BatchReader::new(&root, None, ReadOrder::Scan, backend);
            let mut buf = vec![0xEE; 3];
            let results = reader.read(&items, &mut buf);
            assert_eq!(&buf[3..], &content[..], "{backend:?}");
            for (c, r) in results.into_iter().enumerate() {
                let (n, hash) = r.unwrap();
                let want = &content[c << 20..(c + 1) << 20];
                assert_eq!((n, hash), (1 << 20, crate::attrs::checksum(want)));
            }
            // Over a stale buffer (a spare one): its bytes never show through, holes included,
            // whether it is longer or shorter than the data.
            for stale_len in [(5 << 20) + 7, 1 << 20] {
                let mut stale = vec![0xEE; stale_len];
                let results = reader.read_over(&items, &mut stale);
                assert!(
                    stale == content,
                    "{backend:?}, stale buffer of {stale_len} bytes"
                );
                assert!(results.iter().all(Result::is_ok), "{backend:?}");
            }
            let shorter = Scanned {
                size: st.len() + 1,
                ..scanned
            };
            let items = [ReadItem {
                path: b"sparse",
                offset: 3 << 20,
                len: 1 << 20,
                whole: false,
                scanned: shorter,
            }];
            let mut buf = Vec::new();
            assert!(reader.read(&items, &mut buf)[0].is_err(), "{backend:?}");
        }
    }

    /// Every back end and order must give the same bytes and results.
    #[test]
    fn every_backend_and_order_reads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let mut expected = Vec::new();
        for i in 0..200usize {
            let data: Vec<u8> = (0..(i * 37) % 9000).map(|b| (b * 7 + i) as u8).collect();
            std::fs::write(dir.path().join(format!("d/f{i}")), &data).unwrap();
            expected.push(data);
        }
        let big: Vec<u8> = (0..300_000u32).map(|b| (b % 251) as u8).collect();
        std::fs::write(dir.path().join("big"), &big).unwrap();
        let root = Root::open(dir.path()).unwrap();
        let names: Vec<Vec<u8>> = (0..200).map(|i| format!("d/f{i}").into_bytes()).collect();
        let mut items: Vec<ReadItem<'_>> = names
            .iter()
            .zip(&expected)
            .map(|(n, e)| ReadItem {
                path: n,
                offset: 0,
                len: e.len() as u64,
                whole: true,
                scanned: UNKNOWN,
            })
            .collect();
        // A missing file, a file that shrank since the scan, and chunks of a large file.
        items.insert(
            3,
            ReadItem {
                path: b"d/missing",
                offset: 0,
                len: 10,
                whole: true,
                scanned: UNKNOWN,
            },
        );
        items.insert(
            7,
            ReadItem {
                path: b"d/f5",
                offset: 0,
                len: 1_000_000,
                whole: true,
                scanned: UNKNOWN,
            },
        );
        items.push(ReadItem {
            path: b"big",
            offset: 100_000,
            len: 150_000,
            whole: false,
            scanned: UNKNOWN,
        });
        items.push(ReadItem {
            path: b"big",
            offset: 290_000,
            len: 20_000,
            whole: false,
            scanned: UNKNOWN,
        });
        for item in &mut items {
            let m = std::fs::metadata(dir.path().join(std::str::from_utf8(item.path).unwrap()));
            if let Ok(m) = m {
                use std::os::unix::fs::MetadataExt;
                item.scanned = Scanned {
                    size: m.len(),
                    mtime_sec: m.mtime(),
                    mtime_nsec: m.mtime_nsec() as u32,
                    version: 0,
                };
            }
        }
        // d/f5 was scanned larger than it is now: it shrank.
        items[7].scanned.size = 1_000_000;
        for backend in [IoBackend::Threads, IoBackend::Uring] {
            for order in [ReadOrder::Scan, ReadOrder::Physical] {
                let mut reader = BatchReader::new(&root, None, order, backend);
                let mut buf = Vec::new();
                let results = reader.read(&items, &mut buf);
                assert_eq!(results.len(), items.len());
                let mut want = Vec::new();
                for (item, result) in items.iter().zip(&results) {
                    let what = format!(
                        "{backend:?} {order:?} {}",
                        crate::relpath::display_path(item.path)
                    );
                    match item.path {
                        b"d/missing" => {
                            let err = result.as_ref().unwrap_err().to_string();
                            assert!(err.contains(VANISHED), "{what}: {err}");
                        }
                        b"big" if item.offset == 290_000 => {
                            let err = result.as_ref().unwrap_err().to_string();
                            assert!(err.contains(CHANGED), "{what}: {err}");
                        }
                        b"d/f5" if item.len == 1_000_000 => {
                            let err = result.as_ref().unwrap_err().to_string();
                            assert!(err.contains(CHANGED), "{what}: {err}");
                        }
                        _ => {
                            let data = if item.path == b"big" {
                                &big[item.offset as usize..(item.offset + item.len) as usize]
                            } else {
                                let i: usize = std::str::from_utf8(&item.path[3..])
                                    .unwrap()
                                    .parse()
                                    .unwrap();
                                &expected[i][..]
                            };
                            let (len, hash) = result.as_ref().unwrap();
                            assert_eq!(*len, data.len() as u64, "{what}");
                            assert_eq!(*hash, crate::attrs::checksum(data), "{what}");
                            want.extend_from_slice(data);
                        }
                    }
                }
                assert!(buf == want, "{backend:?} {order:?}: batch data differs");
            }
        }
    }
}
