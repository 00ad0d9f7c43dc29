//! Batches: many small files (and chunks of large ones) packed into one frame.
//!
//! A batch payload is `[u64 seq][u32 entry count][u32 header length][u64 header check]
//! [entry headers][data]`. Entry headers carry each item's relative path and metadata; the data
//! of files and chunks follows in the same order. The header check (xxh3-64 of the fixed fields
//! before it and of the entry headers) catches a path, size or attribute changed in transit;
//! each file's and chunk's own xxh3-128 covers its data. The sender keeps headers and data in two buffers so file bytes
//! are read straight into `data` and written to the socket without another copy.

use crate::codec::{put_bytes16, DecodeError, Reader};
use crate::frame::{kind, FrameHeader, FRAME_HEADER_LEN, MAX_BATCH_PAYLOAD};
use crate::message::MAX_MESSAGE_TEXT;
use crate::path::{self, MAX_PATH};

/// Most entries one batch may carry (a sender's `--batch-files` goes up to this). It bounds
/// what decoding one batch costs a receiver beyond the payload: one [`Entry`] each.
pub const MAX_ENTRIES: u32 = 1 << 16;
/// Bytes of the fixed batch fields after the frame header.
pub const BATCH_FIXED_LEN: usize = 24;

/// The check of a batch's fixed fields and entry headers (see the module page).
fn header_check(seq: u64, count: u32, header: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&seq.to_le_bytes());
    h.update(&count.to_le_bytes());
    h.update(&(header.len() as u32).to_le_bytes());
    h.update(header);
    h.digest()
}

const ENTRY_FILE: u8 = 1;
const ENTRY_DIR: u8 = 2;
const ENTRY_SYMLINK: u8 = 3;
const ENTRY_CHUNK: u8 = 4;
const ENTRY_FAILED: u8 = 5;
const ENTRY_ATTRS: u8 = 6;
const ENTRY_USER: u8 = 7;
const ENTRY_GROUP: u8 = 8;
const ENTRY_HARD_LINK: u8 = 9;
const ENTRY_XATTRS: u8 = 10;
const ENTRY_FILE_UNLESS: u8 = 11;
const ENTRY_CHUNK_WHOLE: u8 = 12;
const ENTRY_SPECIAL: u8 = 13;
const ENTRY_CHUNK_UNLESS: u8 = 14;

/// When a receiver keeps what it has instead of writing a [`EntryKind::File`] sent with
/// `unless`: the sender sent it before it knew what the destination has (a push's first
/// files, while its listing of the destination is on its way), so the receiver checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepRule {
    /// The destination has a regular file there of the same size and mtime (to the
    /// nanosecond), with the mode (and, where the receiver sets owners, the owner) the
    /// entry would give it: the quick check.
    SameSizeAndTime,
    /// The destination has anything at that path (`--ignore-existing`).
    Present,
}

impl KeepRule {
    fn to_u8(self) -> u8 {
        match self {
            KeepRule::SameSizeAndTime => 1,
            KeepRule::Present => 2,
        }
    }

    fn from_u8(v: u8) -> Result<KeepRule, DecodeError> {
        match v {
            1 => Ok(KeepRule::SameSizeAndTime),
            2 => Ok(KeepRule::Present),
            other => Err(DecodeError::Unknown {
                what: "keep rule",
                value: other as u64,
            }),
        }
    }
}

/// Which special file an [`EntryKind::Special`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialKind {
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl SpecialKind {
    fn to_u8(self) -> u8 {
        match self {
            SpecialKind::Fifo => 1,
            SpecialKind::Socket => 2,
            SpecialKind::CharDevice => 3,
            SpecialKind::BlockDevice => 4,
        }
    }

    fn from_u8(v: u8) -> Result<SpecialKind, DecodeError> {
        match v {
            1 => Ok(SpecialKind::Fifo),
            2 => Ok(SpecialKind::Socket),
            3 => Ok(SpecialKind::CharDevice),
            4 => Ok(SpecialKind::BlockDevice),
            other => Err(DecodeError::Unknown {
                what: "special file type",
                value: other as u64,
            }),
        }
    }
}

/// Most bytes of one item's extended attributes, names and values together (the kernel's
/// limit on one listing of names is the same 64 KiB). A receiver refuses a batch with more;
/// a sender fails an item that has more.
pub const MAX_XATTR_BYTES: usize = 64 << 10;
/// Longest extended attribute name (the kernel's `XATTR_NAME_MAX`).
pub const MAX_XATTR_NAME: usize = 255;

/// Which extended attributes an [`EntryKind::Xattrs`] entry speaks for: the receiver makes
/// the item's attributes in these namespaces exactly the ones listed (adding, replacing and
/// removing), and leaves the others alone.
pub mod xattr_scope {
    /// `user.*` (`-X`).
    pub const USER: u8 = 1;
    /// `trusted.*` and `security.*` (`-X` when the sender runs as root).
    pub const SYSTEM: u8 = 2;
    /// `system.posix_acl_access` and `system.posix_acl_default` (`-A`).
    pub const ACL: u8 = 4;
    /// Every bit defined.
    pub const ALL: u8 = USER | SYSTEM | ACL;

    /// The scope bit `name` belongs to (0: none: such a name never travels).
    pub fn of(name: &[u8]) -> u8 {
        if name.starts_with(b"user.") {
            USER
        } else if name.starts_with(b"trusted.") || name.starts_with(b"security.") {
            SYSTEM
        } else if name == b"system.posix_acl_access" || name == b"system.posix_acl_default" {
            ACL
        } else {
            0
        }
    }
}

/// The extended attributes of one item as they travel: `count` pairs of `u8 len + name`,
/// `u32 len + value`, checked when decoded (names non-empty, without NUL, in the entry's
/// scope; names and values together at most [`MAX_XATTR_BYTES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XattrList<'a> {
    count: u16,
    raw: &'a [u8],
}

impl<'a> XattrList<'a> {
    /// The (name, value) pairs, in the order sent.
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let mut r = Reader::new(self.raw);
        (0..self.count).map_while(move |_| {
            let n = r.u8("xattr name").ok()? as usize;
            let name = r.take(n, "xattr name").ok()?;
            let v = r.u32("xattr value").ok()? as usize;
            let value = r.take(v, "xattr value").ok()?;
            Some((name, value))
        })
    }

    /// How many pairs.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Reads and checks a list whose entry has `scope`.
    fn decode(r: &mut Reader<'a>, scope: u8) -> Result<XattrList<'a>, DecodeError> {
        let invalid = |why| DecodeError::Invalid {
            what: "extended attribute",
            why,
        };
        let count = r.u16("xattr count")?;
        let mut body = 0usize;
        // Walk the pairs over what is left, then take their bytes in one piece.
        let rest = r.peek_rest();
        let mut w = Reader::new(rest);
        for _ in 0..count {
            let n = w.u8("xattr name length")? as usize;
            let name = w.take(n, "xattr name")?;
            if name.is_empty() || name.contains(&0) {
                return Err(invalid("empty name or a NUL in it"));
            }
            let bit = xattr_scope::of(name);
            if bit == 0 || scope & bit == 0 {
                return Err(invalid("a name outside the entry's scope"));
            }
            let v = w.u32("xattr value length")? as usize;
            body = body.saturating_add(n).saturating_add(v);
            if body > MAX_XATTR_BYTES {
                return Err(DecodeError::TooLong {
                    what: "extended attributes of one item",
                    len: body as u64,
                    limit: MAX_XATTR_BYTES as u64,
                });
            }
            w.take(v, "xattr value")?;
        }
        let used = rest.len() - w.remaining();
        let raw = r.take(used, "xattrs")?;
        Ok(XattrList { count, raw })
    }
}

/// Longest user or group name a batch carries (longer names travel as numeric ids only).
pub const MAX_OWNER_NAME: usize = 255;

/// Permission bits, modification time and owner, as copied to the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileMeta {
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
    /// The sender's numeric owner and group; their names, when the sender has them, travel
    /// once per batch as [`EntryKind::UserName`] and [`EntryKind::GroupName`] entries.
    pub uid: u32,
    pub gid: u32,
}

/// The large file a chunk is of, as [`EntryKind::Chunk`] describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkOf {
    pub file_size: u64,
    pub version: u64,
    pub whole: bool,
    /// The receiver keeps what it has at the path, and drops the file's chunks, if the rule
    /// holds (see [`EntryKind::Chunk`]); only with `whole`.
    pub unless: Option<KeepRule>,
}

/// What one entry of a batch describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind<'a> {
    /// A whole regular file; `data.len()` is its size, `hash` the xxh3-128 of `data`. With
    /// `unless`, the receiver leaves what it has at the path alone if the rule holds (and
    /// counts the file as up to date), else writes the file as usual.
    File {
        meta: FileMeta,
        hash: u128,
        data: &'a [u8],
        unless: Option<KeepRule>,
    },
    /// A directory (its attributes are applied after everything inside it is written).
    Dir { meta: FileMeta },
    /// A symbolic link, copied as a link and never followed.
    Symlink {
        mtime_sec: i64,
        mtime_nsec: u32,
        uid: u32,
        gid: u32,
        target: &'a [u8],
    },
    /// A FIFO, a socket or a device (of number `major`, `minor`; both 0 for a FIFO or a
    /// socket), recreated as such and never opened.
    Special {
        meta: FileMeta,
        kind: SpecialKind,
        major: u32,
        minor: u32,
    },
    /// One piece of a large file: `data` goes at `offset` of a file of `file_size` bytes.
    /// `whole`: the file is sent whole, so a partial file an earlier run left of it is not
    /// resumed (its ranges are written again, and nothing of it counts as present);
    /// otherwise the sender sends only the ranges such a partial file lacks. `version`: what
    /// tells this version of the file from another of the same size and mtime at the sender
    /// (a digest of its inode number and change time; 0: unknown), kept in the partial
    /// file's journal so that a later run resumes only from the very same version.
    Chunk {
        meta: FileMeta,
        file_size: u64,
        version: u64,
        offset: u64,
        hash: u128,
        data: &'a [u8],
        whole: bool,
        /// From protocol 18, of a file sent whole only: the receiver keeps what it has at
        /// the path if the rule holds (looked at when a chunk of the file arrives while
        /// nothing of it is written yet), and drops the file's chunks (a file below a
        /// directory the destination's side could not list, whose check is the receiver's).
        unless: Option<KeepRule>,
    },
    /// The sender could not read this item; `text` says why.
    Failed { text: &'a [u8] },
    /// The destination already has this file's content (`size` bytes): only its mode and
    /// mtime are to be set.
    Attrs { meta: FileMeta, size: u64 },
    /// The sender's name for user `id`, for the entries of this batch (path empty): a
    /// receiver that maps owners by name looks it up in its own user database.
    UserName { id: u32, name: &'a [u8] },
    /// The sender's name for group `id` (as [`EntryKind::UserName`]).
    GroupName { id: u32, name: &'a [u8] },
    /// `-H`: this path is a hard link of the regular file at `target` (both relative to the
    /// transfer root). Links are made once every file is written (the session's commit), so
    /// `target` may travel in any batch, on any stream.
    HardLink { target: &'a [u8] },
    /// `-X`/`-A`: the extended attributes in `scope` (bits of [`xattr_scope`]) of the item
    /// at this path, which is the next entry of the batch (a File, Dir, Chunk or Attrs).
    Xattrs { scope: u8, list: XattrList<'a> },
}

/// One decoded entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Path relative to the transfer root; empty for the root itself.
    pub path: &'a [u8],
    pub kind: EntryKind<'a>,
}

/// What a sender sent, summed over batches: the receiver checks what it received against it
/// before it reports success (a push's `Commit`, a pull's `Done`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Entries of every kind.
    pub entries: u64,
    /// `File` entries and their data bytes.
    pub files: u64,
    pub bytes: u64,
    /// `Chunk` entries and their data bytes.
    pub chunks: u64,
    pub chunk_bytes: u64,
    /// `Failed` entries (what the sender could not read).
    pub failed: u64,
}

impl Totals {
    /// Adds `other` to these totals (wrapping never happens in practice: u64 counters).
    pub fn add(&mut self, other: &Totals) {
        self.entries = self.entries.saturating_add(other.entries);
        self.files = self.files.saturating_add(other.files);
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.chunks = self.chunks.saturating_add(other.chunks);
        self.chunk_bytes = self.chunk_bytes.saturating_add(other.chunk_bytes);
        self.failed = self.failed.saturating_add(other.failed);
    }

    /// The fields in wire order.
    pub fn fields(&self) -> [u64; 6] {
        [
            self.entries,
            self.files,
            self.bytes,
            self.chunks,
            self.chunk_bytes,
            self.failed,
        ]
    }

    /// Reads the six fields in wire order.
    pub(crate) fn decode(r: &mut crate::codec::Reader<'_>) -> Result<Totals, DecodeError> {
        Ok(Totals {
            entries: r.u64("entries sent")?,
            files: r.u64("files sent")?,
            bytes: r.u64("bytes sent")?,
            chunks: r.u64("chunks sent")?,
            chunk_bytes: r.u64("chunk bytes sent")?,
            failed: r.u64("failures sent")?,
        })
    }

    /// Appends the six fields in wire order.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        for v in self.fields() {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

impl std::fmt::Display for Totals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} entries: {} files of {} bytes, {} chunks of {} bytes, {} unreadable",
            self.entries, self.files, self.bytes, self.chunks, self.chunk_bytes, self.failed
        )
    }
}

/// A batch being built by a sender: entry headers and file data in separate buffers.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    pub seq: u64,
    pub count: u32,
    pub header: Vec<u8>,
    pub data: Vec<u8>,
    /// What the batch holds, counted as entries are pushed.
    pub totals: Totals,
}

impl Batch {
    pub fn new(seq: u64, data_capacity: usize) -> Batch {
        Batch::with_data(seq, Vec::with_capacity(data_capacity))
    }

    /// A batch whose file data goes into `data`, emptied first: memory an earlier batch
    /// used, with its pages mapped already.
    pub fn with_data(seq: u64, mut data: Vec<u8>) -> Batch {
        data.clear();
        Batch {
            seq,
            count: 0,
            header: Vec::with_capacity(4096),
            data,
            totals: Totals::default(),
        }
    }

    fn begin(&mut self, entry: u8, path: &[u8]) {
        self.count += 1;
        self.totals.entries += 1;
        self.header.push(entry);
        put_bytes16(&mut self.header, path);
    }

    fn put_meta(&mut self, meta: &FileMeta) {
        self.header.extend_from_slice(&meta.mode.to_le_bytes());
        self.header.extend_from_slice(&meta.mtime_sec.to_le_bytes());
        self.header
            .extend_from_slice(&meta.mtime_nsec.to_le_bytes());
        self.header.extend_from_slice(&meta.uid.to_le_bytes());
        self.header.extend_from_slice(&meta.gid.to_le_bytes());
    }

    /// Records a file whose `len` bytes were just appended to `data`.
    pub fn push_file(&mut self, path: &[u8], meta: &FileMeta, len: u64, hash: u128) {
        self.push_file_unless(path, meta, len, hash, None)
    }

    /// [`Batch::push_file`], which the receiver leaves out if `unless` holds there (see
    /// [`KeepRule`]); counted in the totals as any file.
    pub fn push_file_unless(
        &mut self,
        path: &[u8],
        meta: &FileMeta,
        len: u64,
        hash: u128,
        unless: Option<KeepRule>,
    ) {
        self.begin(
            if unless.is_some() {
                ENTRY_FILE_UNLESS
            } else {
                ENTRY_FILE
            },
            path,
        );
        self.totals.files += 1;
        self.totals.bytes += len;
        if let Some(rule) = unless {
            self.header.push(rule.to_u8());
        }
        self.put_meta(meta);
        self.header.extend_from_slice(&len.to_le_bytes());
        self.header.extend_from_slice(&hash.to_le_bytes());
    }

    /// Records a chunk whose `len` bytes were just appended to `data`, of the file `of`
    /// (see [`EntryKind::Chunk`]).
    pub fn push_chunk(
        &mut self,
        path: &[u8],
        meta: &FileMeta,
        of: ChunkOf,
        offset: u64,
        len: u64,
        hash: u128,
    ) {
        let ChunkOf {
            file_size,
            version,
            whole,
            unless,
        } = of;
        let kind = match (whole, unless) {
            (true, Some(_)) => ENTRY_CHUNK_UNLESS,
            (true, None) => ENTRY_CHUNK_WHOLE,
            (false, _) => ENTRY_CHUNK,
        };
        self.begin(kind, path);
        if let (true, Some(rule)) = (whole, unless) {
            self.header.push(rule.to_u8());
        }
        self.totals.chunks += 1;
        self.totals.chunk_bytes += len;
        self.put_meta(meta);
        self.header.extend_from_slice(&file_size.to_le_bytes());
        self.header.extend_from_slice(&version.to_le_bytes());
        self.header.extend_from_slice(&offset.to_le_bytes());
        self.header.extend_from_slice(&len.to_le_bytes());
        self.header.extend_from_slice(&hash.to_le_bytes());
    }

    pub fn push_dir(&mut self, path: &[u8], meta: &FileMeta) {
        self.begin(ENTRY_DIR, path);
        self.put_meta(meta);
    }

    /// Records a symlink; of `meta`, its mtime and owner travel (a link has no mode).
    pub fn push_symlink(&mut self, path: &[u8], meta: &FileMeta, target: &[u8]) {
        self.begin(ENTRY_SYMLINK, path);
        self.header.extend_from_slice(&meta.mtime_sec.to_le_bytes());
        self.header
            .extend_from_slice(&meta.mtime_nsec.to_le_bytes());
        self.header.extend_from_slice(&meta.uid.to_le_bytes());
        self.header.extend_from_slice(&meta.gid.to_le_bytes());
        put_bytes16(&mut self.header, target);
    }

    /// Records a FIFO, socket or device (see [`EntryKind::Special`]).
    pub fn push_special(
        &mut self,
        path: &[u8],
        meta: &FileMeta,
        kind: SpecialKind,
        (major, minor): (u32, u32),
    ) {
        self.begin(ENTRY_SPECIAL, path);
        self.put_meta(meta);
        self.header.push(kind.to_u8());
        self.header.extend_from_slice(&major.to_le_bytes());
        self.header.extend_from_slice(&minor.to_le_bytes());
    }

    /// Records the sender's name of user `id` (left out when empty, too long or with a NUL,
    /// or when the batch holds [`MAX_ENTRIES`] already: the id alone travels then).
    pub fn push_user_name(&mut self, id: u32, name: &[u8]) {
        if owner_name_ok(name) && self.count < MAX_ENTRIES {
            self.begin(ENTRY_USER, b"");
            self.header.extend_from_slice(&id.to_le_bytes());
            put_bytes16(&mut self.header, name);
        }
    }

    /// Records the sender's name of group `id` (as [`Batch::push_user_name`]).
    pub fn push_group_name(&mut self, id: u32, name: &[u8]) {
        if owner_name_ok(name) && self.count < MAX_ENTRIES {
            self.begin(ENTRY_GROUP, b"");
            self.header.extend_from_slice(&id.to_le_bytes());
            put_bytes16(&mut self.header, name);
        }
    }

    /// Records that `path` is a hard link of the regular file at `target`.
    pub fn push_hard_link(&mut self, path: &[u8], target: &[u8]) {
        self.begin(ENTRY_HARD_LINK, path);
        put_bytes16(&mut self.header, target);
    }

    /// Records the extended attributes in `scope` of `path`, the next entry pushed. Returns
    /// false, pushing nothing, when they are more than a receiver accepts (names longer than
    /// [`MAX_XATTR_NAME`] or outside `scope`, over [`MAX_XATTR_BYTES`] in all, or more than
    /// 65,535 of them): the caller fails the item instead.
    pub fn push_xattrs(&mut self, path: &[u8], scope: u8, list: &[(Vec<u8>, Vec<u8>)]) -> bool {
        let bytes: usize = list.iter().map(|(n, v)| n.len() + v.len()).sum();
        let fits = bytes <= MAX_XATTR_BYTES
            && list.len() <= u16::MAX as usize
            && list.iter().all(|(n, _)| {
                !n.is_empty()
                    && n.len() <= MAX_XATTR_NAME
                    && !n.contains(&0)
                    && scope & xattr_scope::of(n) != 0
            });
        if !fits {
            return false;
        }
        self.begin(ENTRY_XATTRS, path);
        self.header.push(scope);
        self.header
            .extend_from_slice(&(list.len() as u16).to_le_bytes());
        for (name, value) in list {
            self.header.push(name.len() as u8);
            self.header.extend_from_slice(name);
            self.header
                .extend_from_slice(&(value.len() as u32).to_le_bytes());
            self.header.extend_from_slice(value);
        }
        true
    }

    /// Records a file whose content the destination already has: set its attributes only.
    pub fn push_attrs(&mut self, path: &[u8], meta: &FileMeta, size: u64) {
        self.begin(ENTRY_ATTRS, path);
        self.put_meta(meta);
        self.header.extend_from_slice(&size.to_le_bytes());
    }

    pub fn push_failed(&mut self, path: &[u8], text: &str) {
        self.begin(ENTRY_FAILED, path);
        self.totals.failed += 1;
        let mut end = text.len().min(MAX_MESSAGE_TEXT);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        put_bytes16(&mut self.header, &text.as_bytes()[..end]);
    }

    /// Bytes of the whole batch payload.
    pub fn payload_len(&self) -> usize {
        BATCH_FIXED_LEN + self.header.len() + self.data.len()
    }

    /// Frame header plus fixed batch fields; send it, then `header`, then `data`.
    pub fn frame_prefix(&self) -> [u8; FRAME_HEADER_LEN + BATCH_FIXED_LEN] {
        let mut out = [0u8; FRAME_HEADER_LEN + BATCH_FIXED_LEN];
        let frame = FrameHeader {
            kind: kind::BATCH,
            len: self.payload_len() as u32,
        };
        out[..FRAME_HEADER_LEN].copy_from_slice(&frame.encode());
        out[5..13].copy_from_slice(&self.seq.to_le_bytes());
        out[13..17].copy_from_slice(&self.count.to_le_bytes());
        out[17..21].copy_from_slice(&(self.header.len() as u32).to_le_bytes());
        let check = header_check(self.seq, self.count, &self.header);
        out[21..29].copy_from_slice(&check.to_le_bytes());
        out
    }

    /// Decodes this batch's own buffers (the local memory hand-off uses this).
    pub fn view(&self) -> Result<BatchView<'_>, DecodeError> {
        BatchView::from_parts(self.seq, self.count, &self.header, &self.data)
    }

    /// Whether the batch exceeds the largest payload a peer accepts.
    pub fn too_large(&self) -> bool {
        self.payload_len() > MAX_BATCH_PAYLOAD as usize
    }
}

/// A fully validated batch borrowed from received bytes.
#[derive(Debug)]
pub struct BatchView<'a> {
    pub seq: u64,
    pub entries: Vec<Entry<'a>>,
}

impl<'a> BatchView<'a> {
    /// What this batch holds, counted as a sender counts it (see [`Batch::totals`]).
    pub fn totals(&self) -> Totals {
        let mut t = Totals {
            entries: self.entries.len() as u64,
            ..Totals::default()
        };
        for e in &self.entries {
            match &e.kind {
                EntryKind::File { data, .. } => {
                    t.files += 1;
                    t.bytes += data.len() as u64;
                }
                EntryKind::Chunk { data, .. } => {
                    t.chunks += 1;
                    t.chunk_bytes += data.len() as u64;
                }
                EntryKind::Failed { .. } => t.failed += 1,
                _ => {}
            }
        }
        t
    }

    /// Decodes a batch frame's payload.
    pub fn decode(payload: &'a [u8]) -> Result<BatchView<'a>, DecodeError> {
        let mut r = Reader::new(payload);
        let seq = r.u64("batch sequence")?;
        let count = r.u32("entry count")?;
        let header_len = r.u32("header length")? as usize;
        let check = r.u64("header check")?;
        let header = r.take(header_len, "batch header")?;
        if header_check(seq, count, header) != check {
            return Err(DecodeError::Invalid {
                what: "batch header",
                why: "its check does not match: corrupted in transit",
            });
        }
        let data = r.take(r.remaining(), "batch data")?;
        BatchView::from_parts(seq, count, header, data)
    }

    /// Decodes entry headers and splits `data` among them; every byte must be accounted for.
    pub fn from_parts(
        seq: u64,
        count: u32,
        header: &'a [u8],
        data: &'a [u8],
    ) -> Result<BatchView<'a>, DecodeError> {
        if count > MAX_ENTRIES {
            return Err(DecodeError::TooLong {
                what: "batch entries",
                len: count as u64,
                limit: MAX_ENTRIES as u64,
            });
        }
        // Each entry takes at least 3 header bytes, so this bounds the allocation by real input.
        let mut entries = Vec::with_capacity((count as usize).min(header.len() / 3));
        let mut r = Reader::new(header);
        let mut data_pos = 0usize;
        let mut take_data = |len: u64| -> Result<&'a [u8], DecodeError> {
            let len = usize::try_from(len).map_err(|_| DecodeError::Truncated("batch data"))?;
            if data.len() - data_pos < len {
                return Err(DecodeError::Truncated("batch data"));
            }
            let out = &data[data_pos..data_pos + len];
            data_pos += len;
            Ok(out)
        };
        for _ in 0..count {
            let entry = r.u8("entry kind")?;
            let path = path::validate(r.bytes16("entry path", MAX_PATH)?)?;
            let kind = match entry {
                ENTRY_FILE | ENTRY_FILE_UNLESS => {
                    let unless = match entry {
                        ENTRY_FILE_UNLESS => Some(KeepRule::from_u8(r.u8("keep rule")?)?),
                        _ => None,
                    };
                    let meta = read_meta(&mut r)?;
                    let len = r.u64("file size")?;
                    let hash = r.u128("file hash")?;
                    EntryKind::File {
                        meta,
                        hash,
                        data: take_data(len)?,
                        unless,
                    }
                }
                ENTRY_DIR => EntryKind::Dir {
                    meta: read_meta(&mut r)?,
                },
                ENTRY_SYMLINK => {
                    let mtime_sec = r.i64("mtime")?;
                    let mtime_nsec = read_nsec(&mut r)?;
                    let uid = r.u32("owner")?;
                    let gid = r.u32("group")?;
                    let target = r.bytes16("link target", MAX_PATH)?;
                    if target.is_empty() || target.contains(&0) {
                        return Err(DecodeError::Invalid {
                            what: "link target",
                            why: "empty or contains NUL",
                        });
                    }
                    EntryKind::Symlink {
                        mtime_sec,
                        mtime_nsec,
                        uid,
                        gid,
                        target,
                    }
                }
                ENTRY_SPECIAL => {
                    let meta = read_meta(&mut r)?;
                    let kind = SpecialKind::from_u8(r.u8("special file type")?)?;
                    let major = r.u32("device major")?;
                    let minor = r.u32("device minor")?;
                    let device = matches!(kind, SpecialKind::CharDevice | SpecialKind::BlockDevice);
                    if !device && (major, minor) != (0, 0) {
                        return Err(DecodeError::Invalid {
                            what: "special file",
                            why: "a FIFO or socket with a device number",
                        });
                    }
                    EntryKind::Special {
                        meta,
                        kind,
                        major,
                        minor,
                    }
                }
                ENTRY_CHUNK | ENTRY_CHUNK_WHOLE | ENTRY_CHUNK_UNLESS => {
                    let unless = match entry {
                        ENTRY_CHUNK_UNLESS => Some(KeepRule::from_u8(r.u8("keep rule")?)?),
                        _ => None,
                    };
                    let meta = read_meta(&mut r)?;
                    let file_size = r.u64("file size")?;
                    let version = r.u64("file version")?;
                    let offset = r.u64("chunk offset")?;
                    let len = r.u64("chunk length")?;
                    let hash = r.u128("chunk hash")?;
                    let end = offset.checked_add(len);
                    if len == 0 || end.is_none_or(|end| end > file_size) {
                        return Err(DecodeError::Invalid {
                            what: "chunk",
                            why: "empty or beyond the file size",
                        });
                    }
                    EntryKind::Chunk {
                        meta,
                        file_size,
                        version,
                        offset,
                        hash,
                        data: take_data(len)?,
                        whole: entry != ENTRY_CHUNK,
                        unless,
                    }
                }
                ENTRY_FAILED => EntryKind::Failed {
                    text: r.bytes16("failure text", MAX_MESSAGE_TEXT)?,
                },
                ENTRY_ATTRS => EntryKind::Attrs {
                    meta: read_meta(&mut r)?,
                    size: r.u64("file size")?,
                },
                ENTRY_USER | ENTRY_GROUP => {
                    let id = r.u32("owner id")?;
                    let name = r.bytes16("owner name", MAX_OWNER_NAME)?;
                    if !path.is_empty() || !owner_name_ok(name) {
                        return Err(DecodeError::Invalid {
                            what: "owner name",
                            why: "empty, with a NUL, or given a path",
                        });
                    }
                    if entry == ENTRY_USER {
                        EntryKind::UserName { id, name }
                    } else {
                        EntryKind::GroupName { id, name }
                    }
                }
                ENTRY_HARD_LINK => {
                    let target = path::validate(r.bytes16("link target", MAX_PATH)?)?;
                    if target.is_empty() || path.is_empty() || target == path {
                        return Err(DecodeError::Invalid {
                            what: "hard link",
                            why: "to or of the root, or to itself",
                        });
                    }
                    EntryKind::HardLink { target }
                }
                ENTRY_XATTRS => {
                    let scope = r.u8("xattr scope")?;
                    if scope == 0 || scope & !xattr_scope::ALL != 0 {
                        return Err(DecodeError::Invalid {
                            what: "xattr scope",
                            why: "empty or unknown bits",
                        });
                    }
                    EntryKind::Xattrs {
                        scope,
                        list: XattrList::decode(&mut r, scope)?,
                    }
                }
                other => {
                    return Err(DecodeError::Unknown {
                        what: "entry kind",
                        value: other as u64,
                    })
                }
            };
            entries.push(Entry { path, kind });
        }
        r.finish()?;
        if data_pos != data.len() {
            return Err(DecodeError::TrailingBytes(data.len() - data_pos));
        }
        Ok(BatchView { seq, entries })
    }
}

fn read_nsec(r: &mut Reader<'_>) -> Result<u32, DecodeError> {
    let nsec = r.u32("mtime nanoseconds")?;
    if nsec >= 1_000_000_000 {
        return Err(DecodeError::Invalid {
            what: "mtime",
            why: "nanoseconds out of range",
        });
    }
    Ok(nsec)
}

fn read_meta(r: &mut Reader<'_>) -> Result<FileMeta, DecodeError> {
    let mode = r.u32("mode")?;
    if mode > 0o7777 {
        return Err(DecodeError::Invalid {
            what: "mode",
            why: "bits beyond 0o7777",
        });
    }
    Ok(FileMeta {
        mode,
        mtime_sec: r.i64("mtime")?,
        mtime_nsec: read_nsec(r)?,
        uid: r.u32("owner")?,
        gid: r.u32("group")?,
    })
}

/// Whether `name` can travel as a user or group name.
fn owner_name_ok(name: &[u8]) -> bool {
    !name.is_empty() && name.len() <= MAX_OWNER_NAME && !name.contains(&0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Batch {
        let meta = FileMeta {
            mode: 0o644,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 123,
            uid: 1000,
            gid: 4,
        };
        let mut b = Batch::new(7, 0);
        b.data.extend_from_slice(b"hello");
        b.push_file(b"a/b\xff", &meta, 5, 42);
        b.push_dir(b"", &meta);
        b.push_symlink(b"l", &meta, b"../x");
        b.data.extend_from_slice(b"xy");
        b.push_chunk(
            b"big",
            &meta,
            ChunkOf {
                file_size: 10,
                version: 77,
                whole: false,
                unless: None,
            },
            8,
            2,
            9,
        );
        b.push_failed(b"gone", "No such file");
        b.push_file(b"empty", &meta, 0, 0);
        b.push_attrs(b"same", &meta, 1234);
        b.push_user_name(1000, b"alice");
        b.push_group_name(4, b"adm");
        b.push_hard_link(b"a/other", b"a/b\xff");
        b.data.extend_from_slice(b"sent early");
        b.push_file_unless(b"early", &meta, 10, 77, Some(KeepRule::Present));
        let list = [
            (b"user.k".to_vec(), b"v".to_vec()),
            (b"system.posix_acl_access".to_vec(), vec![2, 0, 0, 0]),
        ];
        assert!(b.push_xattrs(b"d", xattr_scope::USER | xattr_scope::ACL, &list));
        b.push_dir(b"d", &meta);
        b.push_special(b"dev/sda", &meta, SpecialKind::BlockDevice, (8, 0));
        b.push_special(b"fifo", &meta, SpecialKind::Fifo, (0, 0));
        b
    }

    fn payload(b: &Batch) -> Vec<u8> {
        let mut out = b.frame_prefix()[FRAME_HEADER_LEN..].to_vec();
        out.extend_from_slice(&b.header);
        out.extend_from_slice(&b.data);
        out
    }

    #[test]
    fn any_flipped_bit_before_the_data_is_refused() {
        let b = sample();
        let good = payload(&b);
        assert!(BatchView::decode(&good).is_ok());
        let before_data = BATCH_FIXED_LEN + b.header.len();
        for byte in 0..before_data {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[byte] ^= 1 << bit;
                assert!(
                    BatchView::decode(&bad).is_err(),
                    "bit {bit} of byte {byte} flipped and the batch still decoded"
                );
            }
        }
    }

    #[test]
    fn batch_roundtrips_through_wire_bytes() {
        let b = sample();
        let bytes = payload(&b);
        let view = BatchView::decode(&bytes).unwrap();
        assert_eq!(view.seq, 7);
        assert_eq!(view.entries.len(), 15);
        assert_eq!(
            view.entries[13].kind,
            EntryKind::Special {
                meta: FileMeta {
                    mode: 0o644,
                    mtime_sec: 1_700_000_000,
                    mtime_nsec: 123,
                    uid: 1000,
                    gid: 4,
                },
                kind: SpecialKind::BlockDevice,
                major: 8,
                minor: 0,
            }
        );
        assert!(matches!(
            view.entries[14].kind,
            EntryKind::Special {
                kind: SpecialKind::Fifo,
                ..
            }
        ));
        match &view.entries[10].kind {
            EntryKind::File { data, unless, .. } => {
                assert_eq!(*data, b"sent early");
                assert_eq!(*unless, Some(KeepRule::Present));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            view.entries[9].kind,
            EntryKind::HardLink { target: b"a/b\xff" }
        );
        match &view.entries[11].kind {
            EntryKind::Xattrs { scope, list } => {
                assert_eq!(*scope, xattr_scope::USER | xattr_scope::ACL);
                let got: Vec<_> = list.iter().collect();
                assert_eq!(got.len(), 2);
                assert_eq!(got[0], (&b"user.k"[..], &b"v"[..]));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            view.entries[7].kind,
            EntryKind::UserName {
                id: 1000,
                name: b"alice"
            }
        );
        assert_eq!(
            view.entries[8].kind,
            EntryKind::GroupName {
                id: 4,
                name: b"adm"
            }
        );
        assert_eq!(view.entries, b.view().unwrap().entries);
        assert!(matches!(
            view.entries[6].kind,
            EntryKind::Attrs { size: 1234, .. }
        ));
        match &view.entries[0].kind {
            EntryKind::File {
                data, hash, unless, ..
            } => {
                assert_eq!(*data, b"hello");
                assert_eq!(*hash, 42);
                assert_eq!(*unless, None);
            }
            other => panic!("unexpected {other:?}"),
        }
        match &view.entries[3].kind {
            EntryKind::Chunk {
                data,
                offset,
                version,
                whole,
                ..
            } => {
                assert_eq!(*data, b"xy");
                assert_eq!(*offset, 8);
                assert_eq!((*version, *whole), (77, false));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn xattrs_beyond_the_cap_or_outside_their_scope_are_refused() {
        let mut b = Batch::new(1, 0);
        let big = vec![(b"user.big".to_vec(), vec![0u8; MAX_XATTR_BYTES])];
        assert!(!b.push_xattrs(b"f", xattr_scope::USER, &big));
        let acl = vec![(b"system.posix_acl_access".to_vec(), vec![2])];
        assert!(!b.push_xattrs(b"f", xattr_scope::USER, &acl));
        assert_eq!(b.count, 0);
        // A hand-made entry over the cap: refused by the decoder, before anything is kept.
        let mut h = vec![ENTRY_XATTRS];
        put_bytes16(&mut h, b"f");
        h.push(xattr_scope::USER);
        h.extend_from_slice(&2u16.to_le_bytes());
        for name in [&b"user.a"[..], b"user.b"] {
            h.push(name.len() as u8);
            h.extend_from_slice(name);
            h.extend_from_slice(&(40_000u32).to_le_bytes());
            h.extend_from_slice(&[0u8; 40_000]);
        }
        let err = BatchView::from_parts(1, 1, &h, &[]).unwrap_err();
        assert!(matches!(err, DecodeError::TooLong { .. }), "{err}");
    }

    #[test]
    fn chunk_beyond_file_size_is_refused() {
        let mut b = Batch::new(1, 0);
        b.data.extend_from_slice(b"abc");
        b.push_chunk(
            b"f",
            &FileMeta::default(),
            ChunkOf {
                file_size: 4,
                version: 0,
                whole: true,
                unless: None,
            },
            2,
            3,
            0,
        );
        assert!(BatchView::decode(&payload(&b)).is_err());
    }

    #[test]
    fn unaccounted_data_is_refused() {
        let mut b = sample();
        b.data.push(0);
        assert!(BatchView::decode(&payload(&b)).is_err());
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = BatchView::decode(&bytes);
        }

        #[test]
        fn decoding_corrupted_batches_never_panics(pos in 0usize..200, val in any::<u8>()) {
            let mut bytes = payload(&sample());
            let p = pos % bytes.len();
            bytes[p] = val;
            let _ = BatchView::decode(&bytes);
        }
    }
}
