//! Partial large files, kept across runs so that a transfer cut in the middle resumes.
//!
//! A large file (one that travels in chunks) is written under a hidden name beside its final
//! one, `.NAME.sprat-part`, and each chunk, once written, is recorded in a journal beside it,
//! `.NAME.sprat-part.log`: the file's identity at the source (size, mtime, and a version that
//! tells apart two files of the same size and mtime: a digest of the inode number and change
//! time) in a header,
//! then one record per chunk (offset, length, xxh3-128 of its bytes, as the source computed
//! and the receiver verified them). Neither name can be mistaken for the file: the final name
//! appears only once every byte is there, by a rename. A later run into the same tree finds
//! the journal (a listing, or a scan), leaves out the ranges it records, and the writer
//! re-reads and re-hashes those ranges before it counts them, so a resumed file is checked
//! end to end like any other. A journal whose header does not match what is sent now (the
//! source changed, even to a file of the same size and mtime) is discarded with its partial
//! file.
//!
//! A name too long to keep in the hidden names is hashed in them (`.~HASH~.sprat-part`); its
//! journal then also records the final name in its header, so that a listing can still tell
//! which file it belongs to and the copy resumes like any other.
//!
//! A writer holds a shared lock on the journal while it writes ([`hold`]); removals look for
//! it ([`is_being_written`]), and the clean-up after a copy that no longer needs a partial
//! copy takes the exclusive lock while it removes both names ([`discard`]).
//!
//! Encoding and range arithmetic, reading a journal from a directory, and the lock.

use rustix::fs::OFlags;
use std::collections::BTreeMap;
use std::os::fd::AsFd;

/// Suffix of a partial file's hidden name.
pub const PART_SUFFIX: &[u8] = b".sprat-part";
/// Suffix of its journal's name.
pub const LOG_SUFFIX: &[u8] = b".sprat-part.log";
const MAGIC: &[u8; 8] = b"SPRATPT3";
/// The magic of a journal whose header also holds the final name (a hashed one).
const MAGIC_NAMED: &[u8; 8] = b"SPRATPT4";
/// The magics of journals of earlier releases, without a version: read as of version 0, so
/// that their partial files are never resumed (their source cannot be told apart from
/// another of the same size and mtime) but still recognised, and replaced or deleted.
const MAGIC_UNVERSIONED: &[u8; 8] = b"SPRATPT1";
const MAGIC_UNVERSIONED_NAMED: &[u8; 8] = b"SPRATPT2";
const HEADER_LEN: usize = 8 + 8 + 8 + 4;
const VERSION_LEN: usize = 8;
/// Longest final name a journal's header records (the kernel's limit for one component).
const MAX_NAME: usize = 255;
const RECORD_LEN: usize = 8 + 8 + 16;
/// Largest journal read (about 2 million records): a larger one is ignored.
const MAX_LOG_BYTES: u64 = 64 << 20;

/// Names longer than this (with the prefix and suffixes) are hashed.
const NAME_MAX: usize = 255;

/// The hidden name of the partial file for `name` (a single path component).
pub fn part_name(name: &[u8]) -> Vec<u8> {
    hidden(name, PART_SUFFIX)
}

/// The name of the journal of the partial file for `name`.
pub fn log_name(name: &[u8]) -> Vec<u8> {
    hidden(name, LOG_SUFFIX)
}

/// The paths of the partial copy and of the journal of the file at `file` (a relative path),
/// beside it.
pub fn hidden_paths(file: &[u8]) -> [Vec<u8>; 2] {
    let (dir, name) = crate::relpath::split_parent(file);
    [part_name(name), log_name(name)].map(|hidden| crate::relpath::join(dir, &hidden))
}

/// Whether `name` is too long to keep in its hidden names, and is hashed there.
fn is_hashed(name: &[u8]) -> bool {
    name.len() + LOG_SUFFIX.len() >= NAME_MAX
}

fn hidden(name: &[u8], suffix: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + suffix.len() + 1);
    out.push(b'.');
    if is_hashed(name) {
        out.extend_from_slice(format!("~{:032x}~", crate::attrs::checksum(name)).as_bytes());
    } else {
        out.extend_from_slice(name);
    }
    out.extend_from_slice(suffix);
    out
}

/// Whether `inner` (a hidden name less its dot and suffix) is a hashed name.
fn is_hash_mark(inner: &[u8]) -> bool {
    inner.len() == 34
        && inner.starts_with(b"~")
        && inner.ends_with(b"~")
        && inner[1..33].iter().all(u8::is_ascii_hexdigit)
}

/// The final name a journal name stands for, when it can be told from the name alone (a
/// hashed name is told by the journal's header: [`describe`]).
pub fn final_name_of_log(log: &[u8]) -> Option<&[u8]> {
    let inner = log.strip_prefix(b".")?.strip_suffix(LOG_SUFFIX)?;
    (!inner.is_empty() && !is_hash_mark(inner) && log_name(inner) == log).then_some(inner)
}

/// The final name a hidden partial file or journal name (not hashed) stands for.
pub fn final_name_of_hidden(hidden: &[u8]) -> Option<&[u8]> {
    final_name_of_log(hidden).or_else(|| {
        let inner = hidden.strip_prefix(b".")?.strip_suffix(PART_SUFFIX)?;
        (!inner.is_empty() && !is_hash_mark(inner) && part_name(inner) == hidden).then_some(inner)
    })
}

/// The journal's name of a hidden partial file or journal name `hidden` (plain or hashed).
fn log_of_hidden(hidden: &[u8]) -> Option<Vec<u8>> {
    if let Some(name) = final_name_of_hidden(hidden) {
        return Some(log_name(name));
    }
    if is_hashed_log(hidden) {
        return Some(hidden.to_vec());
    }
    let inner = hidden.strip_prefix(b".")?.strip_suffix(PART_SUFFIX)?;
    is_hash_mark(inner).then(|| [hidden, &LOG_SUFFIX[PART_SUFFIX.len()..]].concat())
}

/// Whether `log` is the journal name of a hashed (too long) final name.
fn is_hashed_log(log: &[u8]) -> bool {
    log.strip_prefix(b".")
        .and_then(|l| l.strip_suffix(LOG_SUFFIX))
        .is_some_and(is_hash_mark)
}

/// Whether `path` (a relative path of a scanned or listed regular file) is a journal.
pub fn is_log_path(path: &[u8]) -> bool {
    let name = crate::relpath::split_parent(path).1;
    final_name_of_log(name).is_some() || is_hashed_log(name)
}

/// Whether `name` is a partial file or a journal (kept for resuming; never a temporary).
pub fn is_partial_name(name: &[u8]) -> bool {
    name.starts_with(b".") && (name.ends_with(PART_SUFFIX) || name.ends_with(LOG_SUFFIX))
}

/// What a large file is at its source: a partial file is resumed only for the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub size: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
    /// Tells this file from another of the same size and mtime (see
    /// [`crate::scan::ScanEntry::version`]); 0: unknown.
    pub version: u64,
}

/// A journal as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    /// The source file it is a copy of.
    pub id: Identity,
    /// The final name, recorded only where the hidden names hash it.
    pub name: Option<Vec<u8>>,
    /// The chunks written.
    pub records: Vec<Record>,
}

/// One chunk recorded in a journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub offset: u64,
    pub len: u64,
    pub hash: u128,
}

/// The header that starts the journal of the partial file for `name`: the source's
/// identity, and `name` itself when the hidden names hash it.
pub fn encode_header(id: &Identity, name: &[u8]) -> Vec<u8> {
    let named = is_hashed(name) && name.len() <= MAX_NAME;
    let mut out = Vec::with_capacity(HEADER_LEN + VERSION_LEN + 2 + name.len());
    out.extend_from_slice(if named { MAGIC_NAMED } else { MAGIC });
    out.extend_from_slice(&id.size.to_le_bytes());
    out.extend_from_slice(&id.mtime_sec.to_le_bytes());
    out.extend_from_slice(&id.mtime_nsec.to_le_bytes());
    out.extend_from_slice(&id.version.to_le_bytes());
    if named {
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name);
    }
    out
}

/// One record, appended once its chunk is written.
pub fn encode_record(r: &Record) -> [u8; RECORD_LEN] {
    let mut out = [0u8; RECORD_LEN];
    out[..8].copy_from_slice(&r.offset.to_le_bytes());
    out[8..16].copy_from_slice(&r.len.to_le_bytes());
    out[16..].copy_from_slice(&r.hash.to_le_bytes());
    out
}

/// A journal's identity, name and records; a torn last record (a crash while it was
/// appended) and records outside the file are left out. `None` if it is not a journal.
pub fn decode(bytes: &[u8]) -> Option<Journal> {
    let header = bytes.get(..HEADER_LEN)?;
    let (named, versioned) = match &header[..8] {
        m if m == MAGIC => (false, true),
        m if m == MAGIC_NAMED => (true, true),
        m if m == MAGIC_UNVERSIONED => (false, false),
        m if m == MAGIC_UNVERSIONED_NAMED => (true, false),
        _ => return None,
    };
    let u64_at = |b: &[u8], i: usize| {
        b.get(i..i + 8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
    };
    let (version, header_end) = if versioned {
        (u64_at(bytes, HEADER_LEN)?, HEADER_LEN + VERSION_LEN)
    } else {
        (0, HEADER_LEN)
    };
    let id = Identity {
        size: u64_at(header, 8)?,
        mtime_sec: u64_at(header, 16)? as i64,
        mtime_nsec: u32::from_le_bytes(header[24..28].try_into().ok()?),
        version,
    };
    let (name, body) = if named {
        let len = bytes.get(header_end..header_end + 2)?;
        let len = usize::from(u16::from_le_bytes([len[0], len[1]]));
        if len == 0 || len > MAX_NAME {
            return None;
        }
        let start = header_end + 2;
        (
            Some(bytes.get(start..start + len)?.to_vec()),
            &bytes[start + len..],
        )
    } else {
        (None, &bytes[header_end..])
    };
    let records = body
        .chunks_exact(RECORD_LEN)
        .filter_map(|r| {
            let rec = Record {
                offset: u64_at(r, 0)?,
                len: u64_at(r, 8)?,
                hash: u128::from_le_bytes(r[16..].try_into().ok()?),
            };
            let inside = rec.len > 0
                && rec
                    .offset
                    .checked_add(rec.len)
                    .is_some_and(|end| end <= id.size);
            inside.then_some(rec)
        })
        .collect();
    Some(Journal { id, name, records })
}

/// Reads the journal `log` in directory `dir` (never following a symlink).
pub fn read_log(dir: impl AsFd, log: &[u8]) -> Option<Journal> {
    // A journal's name holding a device or a FIFO is never opened, and one this user did not
    // make (another owner, another hard link) is none (see `regular::open_own_regular_at`).
    let fd = crate::regular::open_own_regular_at(dir, log, OFlags::RDONLY).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if st.st_size as u64 > MAX_LOG_BYTES {
        return None;
    }
    let mut bytes = Vec::with_capacity(st.st_size as usize);
    let mut file = std::fs::File::from(fd);
    std::io::Read::read_to_end(&mut file, &mut bytes).ok()?;
    decode(&bytes)
}

/// Marks the journal `log` as held by a writer writing its file now, for as long as the
/// descriptor is open: a shared lock, which other writers of the same file share and which
/// [`is_being_written`] tells. `log` must be open for reading and writing: where `flock` is
/// carried out as a POSIX lock (an NFS client), a shared lock needs a descriptor open for
/// reading, an exclusive one a descriptor open for writing. A tester holds the exclusive lock
/// for a moment only: the shared one is asked again for a while (a writer that gave up at
/// once would run unlocked, its partial copy free to remove).
///
/// Whether the journal is still there once held: a clean-up that held it exclusively a moment
/// before may have removed it (see [`discard`]), and a writer must not write into a partial
/// copy without a name.
#[must_use]
pub fn hold(log: &impl AsFd) -> bool {
    let shared = rustix::fs::FlockOperation::NonBlockingLockShared;
    for _ in 0..HOLD_TRIES {
        match rustix::fs::flock(log, shared) {
            Err(rustix::io::Errno::WOULDBLOCK) => {
                std::thread::sleep(std::time::Duration::from_micros(500))
            }
            Err(e) => {
                cannot_lock(e);
                break;
            }
            Ok(()) => break,
        }
    }
    rustix::fs::fstat(log).is_ok_and(|st| st.st_nlink > 0)
}

/// How often [`hold`] asks for its lock (every half millisecond: a tenth of a second).
const HOLD_TRIES: u32 = 200;

/// Says once per process that this file system takes no lock (flock) on journals (Lustre
/// mounted without `flock`, an NFS mount without locking): a removal cannot tell a partial
/// copy a running transfer writes from one an interrupted transfer left.
fn cannot_lock(e: rustix::io::Errno) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            error = %e,
            "the destination's file system takes no lock (flock) on the journals of partial \
             copies: `rm`, `--delete` and other transfers cannot tell a partial copy being \
             written from one an interrupted copy left"
        );
    }
}

/// The journal of `hidden` in `dir`, a partial copy or its journal (plain or hashed name),
/// with an exclusive lock on it, which lasts as long as the descriptor: an error while a
/// writer holds it (see [`hold`]); `None` when there is no journal, or its file system takes
/// no lock.
fn lock_unless_held(dir: impl AsFd, hidden: &[u8]) -> Result<Option<std::os::fd::OwnedFd>, ()> {
    let Some(log) = log_of_hidden(hidden) else {
        return Ok(None);
    };
    // Open for writing, which an exclusive lock needs where `flock` is a POSIX lock (see
    // `hold`); for reading only where this user may not write it.
    let fd = match crate::regular::open_regular_at(&dir, &log, OFlags::RDWR) {
        Err(rustix::io::Errno::ACCESS) => {
            crate::regular::open_regular_at(&dir, &log, OFlags::RDONLY)
        }
        other => other,
    };
    let Ok(fd) = fd else {
        return Ok(None);
    };
    let exclusive = rustix::fs::FlockOperation::NonBlockingLockExclusive;
    match rustix::fs::flock(&fd, exclusive) {
        Err(rustix::io::Errno::WOULDBLOCK) => Err(()),
        Err(e) => {
            cannot_lock(e);
            Ok(None)
        }
        Ok(()) => Ok(Some(fd)),
    }
}

/// Whether `hidden` in `dir`, a partial copy or its journal (plain or hashed name), is of a
/// file a writer is writing right now (see [`hold`]): then it must not be removed (a
/// `--delete`, `rm`, or another copy's clean-up would make that transfer fail at its end,
/// losing what it wrote).
pub fn is_being_written(dir: impl AsFd, hidden: &[u8]) -> bool {
    lock_unless_held(dir, hidden).is_err()
}

/// Removes the partial copy of `name` in `dir` and its journal, if an interrupted copy left
/// them there, once `name` itself is complete (its file arrived whole, as a small file, a
/// symlink or anything else, or was up to date): they would stay for ever otherwise, taking
/// room and listed as incomplete. One a running transfer writes stays; the two names go while
/// this holds the journal's lock, so that no writer starts on them meanwhile. Whether they
/// were there.
///
/// With `expected`, only the partial copy the copy's index found there: of that identity at
/// the source, and with that journal (not another job's, moved there since by a rename of
/// its directory).
pub fn discard(dir: impl AsFd, name: &[u8], expected: Option<&Seen>) -> bool {
    let (part, log) = (part_name(name), log_name(name));
    let Ok(locked) = lock_unless_held(&dir, &log) else {
        return false;
    };
    if let Some(seen) = expected {
        let ino = locked
            .as_ref()
            .and_then(|fd| rustix::fs::fstat(fd).ok())
            .map(|st| st.st_ino);
        let moved = seen.journal_ino != 0 && ino != Some(seen.journal_ino);
        if moved || read_log(&dir, &log).is_none_or(|journal| journal.id != seen.id) {
            return false;
        }
    }
    let mut removed = false;
    for hidden in [part, log] {
        let hidden: &std::ffi::OsStr = std::os::unix::ffi::OsStrExt::from_bytes(&hidden);
        removed |= rustix::fs::unlinkat(&dir, hidden, rustix::fs::AtFlags::empty()).is_ok();
    }
    removed
}

/// [`discard`] for the file at `rel` below `root` (its directory opened without following a
/// symlink on the way). Whether its partial copy went.
pub fn discard_at(root: &crate::Root, rel: &[u8], expected: Option<&Seen>) -> bool {
    let (dir, name) = crate::relpath::split_parent(rel);
    root.open_dir_nofollow(dir)
        .is_ok_and(|dir| !name.is_empty() && discard(&dir, name, expected))
}

/// A partial copy as an index found it: its source identity, and its journal's inode number
/// where the index looked at it itself (0 where a listing told it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub id: Identity,
    pub journal_ino: u64,
}

/// The inode number of the journal of the partial copy of `file_rel` below `root`, looked at
/// without following symlinks (0: none).
pub fn journal_ino(root: &crate::Root, file_rel: &[u8]) -> u64 {
    let [_, log] = hidden_paths(file_rel);
    root.open_beneath(&log, OFlags::PATH | OFlags::NOFOLLOW)
        .ok()
        .and_then(|fd| rustix::fs::fstat(&fd).ok())
        .map_or(0, |st| st.st_ino)
}

/// A partial file found by a listing or scan: `log_path` (relative to `root`) names a
/// journal. Returns the final path of its file, the source identity, and the ranges its
/// journal records (the writer verifies them again before it trusts them).
pub fn describe(root: &crate::Root, log_path: &[u8]) -> Option<(Vec<u8>, Identity, Coverage)> {
    let (dir, log) = crate::relpath::split_parent(log_path);
    let told = final_name_of_log(log);
    if told.is_none() && !is_hashed_log(log) {
        return None;
    }
    let dir_fd = root.open_dir_nofollow(dir).ok()?;
    let journal = read_log(&dir_fd, log)?;
    let name = match told {
        Some(name) => name,
        // A hashed name is the one its header records, if that name hashes to this journal
        // (so a journal cannot speak for another file, nor name one outside its directory).
        None => journal
            .name
            .as_deref()
            .filter(|n| is_component(n) && log_name(n) == log)?,
    };
    // Only a partial copy a writer would resume is one: this user's, with no other hard link
    // (a listing that offered another's ranges would have a copy send too little).
    let fd = crate::regular::open_own_regular_at(&dir_fd, &part_name(name), OFlags::PATH);
    if fd.is_err() {
        return None;
    }
    let mut present = Coverage::default();
    for r in &journal.records {
        present.add(r.offset, r.len);
    }
    Some((crate::relpath::join(dir, name), journal.id, present))
}

/// Whether `name` can be one component of a path: not empty, `.` or `..`, no `/` or NUL.
fn is_component(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

/// The partial file of the file at `file_path` (relative to `root`; a single file copied on
/// its own), if one lies beside it: its source identity and the ranges its journal records.
pub fn describe_file(root: &crate::Root, file_path: &[u8]) -> Option<(Identity, Coverage)> {
    let (dir, name) = crate::relpath::split_parent(file_path);
    if name.is_empty() {
        return None;
    }
    let log = crate::relpath::join(dir, &log_name(name));
    describe(root, &log).map(|(_, id, present)| (id, present))
}

/// The byte ranges of a file that are present, merged: `[start, end)` by start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    ranges: BTreeMap<u64, u64>,
}

impl Coverage {
    /// Adds `[offset, offset + len)`.
    pub fn add(&mut self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut start = offset;
        let mut end = offset.saturating_add(len);
        // Merge with a range that starts before and reaches `start`.
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
                self.ranges.remove(&s);
            }
        }
        // And with every range that starts inside the new one.
        let inside: Vec<(u64, u64)> = self
            .ranges
            .range(start..=end)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in inside {
            end = end.max(e);
            self.ranges.remove(&s);
        }
        self.ranges.insert(start, end);
    }

    /// Whether `[0, size)` is all present.
    pub fn is_complete(&self, size: u64) -> bool {
        size == 0 || self.ranges.get(&0).is_some_and(|&end| end >= size)
    }

    /// Bytes present.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }

    /// The present ranges as `(offset, len)`, by offset.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e - s))
    }

    /// The ranges of `[0, size)` that are missing, as `(offset, len)`, by offset.
    pub fn missing(&self, size: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = 0;
        for (&s, &e) in &self.ranges {
            if s >= size {
                break;
            }
            if s > at {
                out.push((at, s - at));
            }
            at = at.max(e);
        }
        if at < size {
            out.push((at, size - at));
        }
        out
    }

    /// The ranges as bytes (pairs of little-endian u64 offset and length), at most
    /// `max_ranges` of them (a shorter list only means more is sent again).
    pub fn encode(&self, max_ranges: usize) -> Vec<u8> {
        self.ranges()
            .take(max_ranges)
            .flat_map(|(o, l)| o.to_le_bytes().into_iter().chain(l.to_le_bytes()))
            .collect()
    }

    /// Ranges as [`Coverage::encode`] wrote them; `None` if malformed.
    pub fn decode(bytes: &[u8]) -> Option<Coverage> {
        if bytes.len() % 16 != 0 {
            return None;
        }
        let mut c = Coverage::default();
        for pair in bytes.chunks_exact(16) {
            let o = u64::from_le_bytes(pair[..8].try_into().ok()?);
            let l = u64::from_le_bytes(pair[8..].try_into().ok()?);
            o.checked_add(l)?;
            c.add(o, l);
        }
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn coverage_merges_overlapping_and_touching_ranges() {
        let mut c = Coverage::default();
        c.add(10, 10);
        c.add(30, 5);
        assert_eq!(c.missing(40), [(0, 10), (20, 10), (35, 5)]);
        c.add(0, 10);
        c.add(15, 20);
        assert_eq!(c.ranges().collect::<Vec<_>>(), [(0, 35)]);
        assert!(!c.is_complete(40));
        c.add(35, 5);
        assert!(c.is_complete(40));
        assert_eq!(c.bytes(), 40);
        // The same chunk twice counts once (a repeated chunk is not a second piece).
        let mut d = Coverage::default();
        d.add(0, 8);
        d.add(0, 8);
        assert!(!d.is_complete(16));
        assert_eq!(Coverage::decode(&c.encode(10)), Some(c));
        assert_eq!(Coverage::decode(&[1, 2, 3]), None);
    }

    #[test]
    fn journals_round_trip_and_drop_torn_or_outside_records() {
        let id = Identity {
            size: 100,
            mtime_sec: -5,
            mtime_nsec: 7,
            version: 0xfeed_beef,
        };
        let mut bytes = encode_header(&id, b"f");
        let good = Record {
            offset: 0,
            len: 50,
            hash: 99,
        };
        bytes.extend_from_slice(&encode_record(&good));
        let outside = Record {
            offset: 90,
            len: 20,
            hash: 1,
        };
        bytes.extend_from_slice(&encode_record(&outside));
        bytes.extend_from_slice(&encode_record(&good)[..10]);
        let journal = Journal {
            id,
            name: None,
            records: vec![good],
        };
        assert_eq!(decode(&bytes), Some(journal.clone()));
        assert_eq!(decode(b"not a journal at all, no"), None);
        // A hashed name is recorded in the header, and read back with the same records.
        let long = vec![b'y'; 250];
        let mut named = encode_header(&id, &long);
        named.extend_from_slice(&encode_record(&good));
        let decoded = decode(&named).unwrap();
        assert_eq!(decoded.name.as_deref(), Some(&long[..]));
        assert_eq!(decoded.records, journal.records);
        // A name that would run past the journal's end is no journal.
        assert_eq!(decode(&named[..HEADER_LEN + VERSION_LEN + 2 + 100]), None);
        // A journal of an earlier release has no version: it is read as of version 0, which
        // no source file has, so its partial file is replaced rather than resumed.
        let mut old = MAGIC_UNVERSIONED.to_vec();
        old.extend_from_slice(&bytes[8..HEADER_LEN]);
        old.extend_from_slice(&encode_record(&good));
        let read = decode(&old).unwrap();
        assert_eq!(read.id, Identity { version: 0, ..id });
        assert_eq!(read.records, journal.records);
    }

    #[test]
    fn a_hashed_journal_is_described_by_the_name_its_header_records() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let root = crate::Root::open(dir.path()).unwrap();
        let id = Identity {
            size: 64,
            mtime_sec: 1,
            mtime_nsec: 2,
            version: 3,
        };
        let long = vec![b'n'; 240];
        let mut bytes = encode_header(&id, &long);
        bytes.extend_from_slice(&encode_record(&Record {
            offset: 0,
            len: 32,
            hash: 5,
        }));
        let log = [b"d/", &log_name(&long)[..]].concat();
        std::fs::write(dir.path().join(std::ffi::OsStr::from_bytes(&log)), &bytes).unwrap();
        // Without its partial copy, a journal describes nothing.
        assert_eq!(describe(&root, &log), None);
        let part = [b"d/", &part_name(&long)[..]].concat();
        std::fs::write(
            dir.path().join(std::ffi::OsStr::from_bytes(&part)),
            [0u8; 64],
        )
        .unwrap();
        let (path, found, present) = describe(&root, &log).unwrap();
        assert_eq!(path, [b"d/", &long[..]].concat());
        assert_eq!((found, present.bytes()), (id, 32));
        // A header naming another file (here, one that hashes elsewhere) is not believed.
        let other = vec![b'm'; 240];
        let mut forged = encode_header(&id, &other);
        forged.extend_from_slice(&bytes[HEADER_LEN + VERSION_LEN + 2 + long.len()..]);
        std::fs::write(dir.path().join(std::ffi::OsStr::from_bytes(&log)), &forged).unwrap();
        assert_eq!(describe(&root, &log), None);
    }

    #[test]
    fn names_are_hidden_and_map_back() {
        assert_eq!(part_name(b"big.iso"), b".big.iso.sprat-part");
        assert_eq!(log_name(b"big.iso"), b".big.iso.sprat-part.log");
        assert_eq!(
            final_name_of_log(b".big.iso.sprat-part.log"),
            Some(&b"big.iso"[..])
        );
        assert_eq!(final_name_of_log(b"big.iso.sprat-part.log"), None);
        let long = vec![b'x'; 250];
        assert!(log_name(&long).len() <= 255);
        assert_eq!(final_name_of_log(&log_name(&long)), None);
        assert!(is_log_path(&[b"d/", &log_name(&long)[..]].concat()));
        assert!(!is_log_path(b"d/x.sprat-part.log"));
        assert_eq!(
            final_name_of_hidden(b".big.iso.sprat-part"),
            Some(&b"big.iso"[..])
        );
        assert_eq!(
            final_name_of_hidden(b".big.iso.sprat-part.log"),
            Some(&b"big.iso"[..])
        );
        assert_eq!(final_name_of_hidden(&part_name(&long)), None);
        assert_eq!(final_name_of_hidden(b"big.iso.sprat-part"), None);
        assert!(is_partial_name(&part_name(b"a")) && is_partial_name(&log_name(b"a")));
        assert!(!is_partial_name(b".a.sprat-0123abcd"));
    }
}
