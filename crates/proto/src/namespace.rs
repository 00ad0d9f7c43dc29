//! Namespace operations: one request, one reply (possibly streamed in several frames).
//!
//! `List` and `Stat` are answered by `Entries` frames, `Sum` by `Sums` frames, each followed by
//! `ReplyEnd`; `Du` by one `Usage`; `Mkdir`, `Remove` and `Rename` by `ReplyEnd` alone; any of
//! them by `Error`. `Delegate` asks a destination server for a one-time ticket that lets a
//! source server push one tree to it (`Ticket`); `SendTo` asks a source server to push a tree
//! to another server with such a ticket (a third-party transfer), answered like a push's commit
//! (`BatchAck` with failures, then `Done`).

use crate::codec::{put_bytes16, DecodeError, Reader};
use crate::path::{self, MAX_PATH};
use crate::SpecialKind;

/// Most entries or sums in one frame.
pub const MAX_ENTRIES_PER_FRAME: usize = 65536;
/// Payload size at which a sender starts a new `Entries` or `Sums` frame.
pub const REPLY_FRAME_TARGET: usize = 512 << 10;

/// A file's path and its digest, as listed by `Sums`.
pub type PathDigest = (Vec<u8>, Vec<u8>);

/// Digest algorithms of `Sum`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SumAlgo {
    /// XXH3-128, the transfer checksum.
    Xxh3,
    Sha256,
    Md5,
}

impl SumAlgo {
    pub fn name(self) -> &'static str {
        match self {
            SumAlgo::Xxh3 => "xxh3",
            SumAlgo::Sha256 => "sha256",
            SumAlgo::Md5 => "md5",
        }
    }
    fn to_u8(self) -> u8 {
        match self {
            SumAlgo::Xxh3 => 1,
            SumAlgo::Sha256 => 2,
            SumAlgo::Md5 => 3,
        }
    }
    fn from_u8(v: u8) -> Result<SumAlgo, DecodeError> {
        match v {
            1 => Ok(SumAlgo::Xxh3),
            2 => Ok(SumAlgo::Sha256),
            3 => Ok(SumAlgo::Md5),
            other => Err(DecodeError::Unknown {
                what: "checksum algorithm",
                value: other as u64,
            }),
        }
    }
}

/// Whether a listing's entries carry their owner and group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListOwners {
    /// No owners (what a copy's index needs when it does not compare them).
    #[default]
    No,
    /// Every entry's owner and group (`sprat ls -l`).
    Always,
    /// Every entry's, when this server sets the owners of what clients push (it runs as
    /// root, without `--no-owners`); none otherwise: a pushing client's index, which then
    /// compares owners (a re-run fixes an owner that differs).
    IfApplied,
}

/// A namespace request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    List {
        path: Vec<u8>,
        recursive: bool,
        /// Also send the XXH3-128 digest of every regular file listed, as `Sums` frames
        /// among the `Entries` (`--checksum`'s index of a destination).
        digests: bool,
        /// What of a recursive listing to list (a source's rules or `--files-from` list).
        selection: crate::Selection,
        /// Whether entries carry their owner and group.
        owners: ListOwners,
        /// From protocol 22: the path is `DST/NAME`, a single file's destination that its
        /// push leaves to the server (see [`crate::Operation::Push`]'s `or_parent`): the
        /// server lists it if `DST` is a directory (not a symlink to one), else `DST`
        /// itself, and says which first ([`crate::Message::ListedAt`]). Not on a connection
        /// a ticket authenticated.
        or_parent: bool,
    },
    Stat {
        path: Vec<u8>,
    },
    Du {
        path: Vec<u8>,
        /// What to count (a source's rules or `--files-from` list).
        selection: crate::Selection,
    },
    Mkdir {
        path: Vec<u8>,
        parents: bool,
    },
    Remove {
        path: Vec<u8>,
        recursive: bool,
    },
    Rename {
        from: Vec<u8>,
        to: Vec<u8>,
    },
    Sum {
        path: Vec<u8>,
        recursive: bool,
        algo: SumAlgo,
    },
    Delegate {
        path: Vec<u8>,
        /// Only whether the server would give a ticket for `path` (from protocol 23): it
        /// answers `Ticket` with an all-zero ticket that is no credential, and issues none (a
        /// dry run's check, which took one of the few unused tickets an address may hold).
        check_only: bool,
    },
    /// Where `path` is on the server's host (see [`Location`]): asked before a copy whose
    /// source and destination may be one tree (`--delete`, or both on one host).
    Locate {
        path: Vec<u8>,
    },
    SendTo {
        path: Vec<u8>,
        /// `HOST:PORT` of the destination server, as the source server should reach it.
        addr: String,
        ticket: [u8; 32],
        dest: Vec<u8>,
        streams: u16,
        /// Ask the destination to sync every batch before acknowledging it.
        durable: bool,
        /// `dest` is `DST/NAME` (from protocol 20): the source server's push asks the
        /// destination to refuse a symlink there (see `Operation::Push::no_link_at_path`).
        no_link_at_dest: bool,
        /// What of the destination the source server leaves out (it lists the destination
        /// with the ticket first).
        check: crate::DestCheck,
        /// What the source server keeps besides content (`-H`, `-X`, `-A`).
        meta: crate::MetaFlags,
        /// The client's stall timeout for the source server's session, in milliseconds (0:
        /// none; the source server bounds it by its own).
        stall_timeout_ms: u32,
        /// The fingerprint (SHA-256 of the public key) the destination server must present,
        /// as the client knows it; all zeros: connect without TLS (the client's
        /// `--no-encryption`).
        dest_key: [u8; 32],
        /// What the source server sends of its tree (rules, a `--files-from` list).
        selection: crate::Selection,
    },
}

/// Most directories a [`Location`] names (a path of 4,095 bytes has at most 2,048
/// components).
pub const MAX_LOCATION_DEPTH: usize = 2048;

/// The answer to `Locate`: where a path is on the server's host. Two locations with one
/// `host` (the kernel's boot id) overlap when one's first id is among the other's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The boot id of the server's kernel; all zeros: unknown (nothing can be compared).
    pub host: [u8; 16],
    /// The path is there; else `ids` starts at its nearest directory that is.
    pub exists: bool,
    /// (device, inode) of the path, then of each directory above it up to the server's `/`
    /// (at most [`MAX_LOCATION_DEPTH`]); empty: unknown (the server's root of several
    /// exports, which is no directory).
    pub ids: Vec<(u64, u64)>,
}

impl Location {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.host);
        out.push(self.exists as u8);
        let ids = &self.ids[..self.ids.len().min(MAX_LOCATION_DEPTH)];
        out.extend_from_slice(&(ids.len() as u16).to_le_bytes());
        for (dev, ino) in ids {
            out.extend_from_slice(&dev.to_le_bytes());
            out.extend_from_slice(&ino.to_le_bytes());
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Location, DecodeError> {
        let host = r.array("host")?;
        let exists = flag(r, "exists flag")?;
        let count = r.u16("location depth")? as usize;
        if count > MAX_LOCATION_DEPTH {
            return Err(DecodeError::TooLong {
                what: "location",
                len: count as u64,
                limit: MAX_LOCATION_DEPTH as u64,
            });
        }
        let mut ids = Vec::with_capacity(count);
        for _ in 0..count {
            ids.push((r.u64("device")?, r.u64("inode")?));
        }
        Ok(Location { host, exists, ids })
    }
}

/// Entry types in listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsKind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device (from protocol 18, see [`NsEntry::special`]), or an entry of
    /// another type.
    Special,
    /// A large file an interrupted transfer left incomplete, kept (under hidden names) for
    /// the next run to resume: `path` is the file's final path, `size`, `mtime_*` are the
    /// source file's it is a copy of, and `target` holds that file's version (a little-endian
    /// u64, as the chunks carried it: see [`crate::EntryKind::Chunk`]) then the byte ranges
    /// present (pairs of little-endian u64 offset and length, at most
    /// [`MAX_PARTIAL_RANGES`]).
    Partial,
    /// An entry below the listed path that the listing side could not examine, in a
    /// recursive listing (from protocol 18): a directory it could not list (nothing below
    /// it is listed), or a name it could not look at; `target` says why. Before, such an
    /// entry ended the whole listing with an error.
    Failed,
}

/// Most ranges a [`NsKind::Partial`] entry lists.
pub const MAX_PARTIAL_RANGES: usize = 255;

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsEntry {
    /// Path relative to the listed path (empty for the listed path itself).
    pub path: Vec<u8>,
    pub kind: NsKind,
    pub size: u64,
    pub mode: u32,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
    /// Link target of a symlink, empty otherwise.
    pub target: Vec<u8>,
    /// Its owner and group, when the listing carries them.
    pub owner: Option<NsOwner>,
}

/// The type bits of `st_mode` a [`NsKind::Special`] entry's mode carries.
const SPECIAL_TYPES: [(u32, SpecialKind); 4] = [
    (0o010000, SpecialKind::Fifo),
    (0o140000, SpecialKind::Socket),
    (0o020000, SpecialKind::CharDevice),
    (0o060000, SpecialKind::BlockDevice),
];

impl NsEntry {
    /// A [`NsKind::Failed`] entry for `path`, saying `why` (cut to what a listing's text may
    /// hold).
    pub fn failed(path: Vec<u8>, why: String) -> NsEntry {
        let mut target = why.into_bytes();
        target.truncate(MAX_PATH);
        NsEntry {
            path,
            kind: NsKind::Failed,
            size: 0,
            mode: 0,
            mtime_sec: 0,
            mtime_nsec: 0,
            target,
            owner: None,
        }
    }

    /// What a [`NsKind::Special`] entry is: its `mode` carries the type bits of `st_mode`
    /// (FIFO `0o010000`, socket `0o140000`, character device `0o020000`, block device
    /// `0o060000`) besides its permission bits, and its `size` a device's number, major in
    /// the high 32 bits and minor in the low. `None`: another entry, or an unknown type.
    pub fn special(&self) -> Option<(SpecialKind, u32, u32)> {
        if self.kind != NsKind::Special {
            return None;
        }
        let kind = SPECIAL_TYPES
            .iter()
            .find(|(bits, _)| self.mode & 0o170000 == *bits)?
            .1;
        Some((kind, (self.size >> 32) as u32, self.size as u32))
    }

    /// The `mode` and `size` of a [`NsKind::Special`] entry of `kind` with permission bits
    /// `perm` and device number `major`, `minor` (see [`NsEntry::special`]).
    pub fn special_fields(kind: SpecialKind, perm: u32, (major, minor): (u32, u32)) -> (u32, u64) {
        let bits = SPECIAL_TYPES
            .iter()
            .find(|(_, k)| *k == kind)
            .map_or(0, |(bits, _)| *bits);
        (
            bits | perm & 0o7777,
            u64::from(major) << 32 | u64::from(minor),
        )
    }
}

/// An entry's owner and group: numeric ids, and their names on the side that listed it
/// (empty: the id has no name there, or names were not asked for).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NsOwner {
    pub uid: u32,
    pub gid: u32,
    pub user: Vec<u8>,
    pub group: Vec<u8>,
}

/// Longest user or group name a listing carries (longer ones travel as ids only).
pub const MAX_NS_OWNER_NAME: usize = 255;

impl NsOwner {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.uid.to_le_bytes());
        out.extend_from_slice(&self.gid.to_le_bytes());
        for name in [&self.user, &self.group] {
            let name: &[u8] = if name.len() <= MAX_NS_OWNER_NAME && !name.contains(&0) {
                name
            } else {
                &[]
            };
            out.push(name.len() as u8);
            out.extend_from_slice(name);
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<NsOwner, DecodeError> {
        let uid = r.u32("owner")?;
        let gid = r.u32("group")?;
        let mut name = |what| -> Result<Vec<u8>, DecodeError> {
            let n = r.u8(what)? as usize;
            let name = r.take(n, what)?;
            if name.contains(&0) {
                return Err(DecodeError::Invalid {
                    what,
                    why: "contains NUL",
                });
            }
            Ok(name.to_vec())
        };
        let user = name("user name")?;
        let group = name("group name")?;
        Ok(NsOwner {
            uid,
            gid,
            user,
            group,
        })
    }
}

/// Totals of `Du`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
    /// Large files an interrupted copy left incomplete ([`NsKind::Partial`]), not among
    /// `files`; the bytes of their partial files and journals, not among `bytes`.
    pub partial_files: u64,
    pub partial_bytes: u64,
    /// FIFOs, sockets and devices (from protocol 18).
    pub specials: u64,
    /// Entries the server could not examine (a directory it may not read: what it holds is
    /// not counted), from protocol 18.
    pub unreadable: u64,
}

const OP_LIST: u8 = 1;
const OP_STAT: u8 = 2;
const OP_DU: u8 = 3;
const OP_MKDIR: u8 = 4;
const OP_REMOVE: u8 = 5;
const OP_RENAME: u8 = 6;
const OP_SUM: u8 = 7;
const OP_DELEGATE: u8 = 8;
const OP_SEND_TO: u8 = 9;
const OP_LOCATE: u8 = 10;

/// `SendTo`'s flags byte (before protocol 20, the 0 or 1 of `durable` alone).
const SEND_DURABLE: u8 = 1;
const SEND_NO_LINK_AT_DEST: u8 = 2;
const SEND_FLAGS: u8 = SEND_DURABLE | SEND_NO_LINK_AT_DEST;

/// `List` flags: bit 0 recursive, bit 1 with digests, bit 2 with owners, bit 3 with owners
/// if the server applies a push's (see [`ListOwners`]).
const LIST_RECURSIVE: u8 = 1;
const LIST_DIGESTS: u8 = 2;
const LIST_OWNERS: u8 = 4;
const LIST_OWNERS_IF_APPLIED: u8 = 8;
const LIST_OR_PARENT: u8 = 16;

fn flag(r: &mut Reader<'_>, what: &'static str) -> Result<bool, DecodeError> {
    match r.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::Invalid {
            what,
            why: "not 0 or 1",
        }),
    }
}

fn rel_path(r: &mut Reader<'_>) -> Result<Vec<u8>, DecodeError> {
    Ok(path::validate(r.bytes16("path", MAX_PATH)?)?.to_vec())
}

impl Request {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Request::List {
                path,
                recursive,
                digests,
                selection,
                owners,
                or_parent,
            } => {
                out.push(OP_LIST);
                let owners = match owners {
                    ListOwners::No => 0,
                    ListOwners::Always => LIST_OWNERS,
                    ListOwners::IfApplied => LIST_OWNERS_IF_APPLIED,
                };
                let or_parent = if *or_parent { LIST_OR_PARENT } else { 0 };
                out.push(*recursive as u8 | (*digests as u8) << 1 | owners | or_parent);
                put_bytes16(out, path);
                selection.encode(out);
            }
            Request::Stat { path } => {
                out.push(OP_STAT);
                put_bytes16(out, path);
            }
            Request::Du { path, selection } => {
                out.push(OP_DU);
                put_bytes16(out, path);
                selection.encode(out);
            }
            Request::Mkdir { path, parents } => {
                out.push(OP_MKDIR);
                out.push(*parents as u8);
                put_bytes16(out, path);
            }
            Request::Remove { path, recursive } => {
                out.push(OP_REMOVE);
                out.push(*recursive as u8);
                put_bytes16(out, path);
            }
            Request::Rename { from, to } => {
                out.push(OP_RENAME);
                put_bytes16(out, from);
                put_bytes16(out, to);
            }
            Request::Sum {
                path,
                recursive,
                algo,
            } => {
                out.push(OP_SUM);
                out.push(*recursive as u8);
                out.push(algo.to_u8());
                put_bytes16(out, path);
            }
            Request::Delegate { path, check_only } => {
                out.push(OP_DELEGATE);
                out.push(*check_only as u8);
                put_bytes16(out, path);
            }
            Request::Locate { path } => {
                out.push(OP_LOCATE);
                put_bytes16(out, path);
            }
            Request::SendTo {
                path,
                addr,
                ticket,
                dest,
                streams,
                durable,
                no_link_at_dest,
                check,
                meta,
                stall_timeout_ms,
                dest_key,
                selection,
            } => {
                out.push(OP_SEND_TO);
                put_bytes16(out, path);
                put_bytes16(out, addr.as_bytes());
                out.extend_from_slice(ticket);
                put_bytes16(out, dest);
                out.extend_from_slice(&streams.to_le_bytes());
                out.push(*durable as u8 | (*no_link_at_dest as u8) << 1);
                out.push(check.to_u8());
                out.push(meta.to_bits());
                out.extend_from_slice(&stall_timeout_ms.to_le_bytes());
                out.extend_from_slice(dest_key);
                selection.encode(out);
            }
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Request, DecodeError> {
        Ok(match r.u8("request")? {
            OP_LIST => {
                let flags = r.u8("list flags")?;
                let known = LIST_RECURSIVE
                    | LIST_DIGESTS
                    | LIST_OWNERS
                    | LIST_OWNERS_IF_APPLIED
                    | LIST_OR_PARENT;
                let owners = match (
                    flags & LIST_OWNERS != 0,
                    flags & LIST_OWNERS_IF_APPLIED != 0,
                ) {
                    (false, false) => ListOwners::No,
                    (true, false) => ListOwners::Always,
                    (false, true) => ListOwners::IfApplied,
                    (true, true) => {
                        return Err(DecodeError::Invalid {
                            what: "list flags",
                            why: "owners both always and if applied",
                        })
                    }
                };
                if flags & !known != 0 {
                    return Err(DecodeError::Invalid {
                        what: "list flags",
                        why: "unknown bits set",
                    });
                }
                Request::List {
                    recursive: flags & LIST_RECURSIVE != 0,
                    digests: flags & LIST_DIGESTS != 0,
                    path: rel_path(r)?,
                    selection: crate::Selection::decode(r)?,
                    owners,
                    or_parent: flags & LIST_OR_PARENT != 0,
                }
            }
            OP_STAT => Request::Stat { path: rel_path(r)? },
            OP_DU => Request::Du {
                path: rel_path(r)?,
                selection: crate::Selection::decode(r)?,
            },
            OP_MKDIR => {
                let parents = flag(r, "parents flag")?;
                Request::Mkdir {
                    parents,
                    path: rel_path(r)?,
                }
            }
            OP_REMOVE => {
                let recursive = flag(r, "recursive flag")?;
                Request::Remove {
                    recursive,
                    path: rel_path(r)?,
                }
            }
            OP_RENAME => Request::Rename {
                from: rel_path(r)?,
                to: rel_path(r)?,
            },
            OP_SUM => {
                let recursive = flag(r, "recursive flag")?;
                let algo = SumAlgo::from_u8(r.u8("checksum algorithm")?)?;
                Request::Sum {
                    recursive,
                    algo,
                    path: rel_path(r)?,
                }
            }
            OP_DELEGATE => {
                let check_only = match r.u8("delegate flags")? {
                    0 => false,
                    1 => true,
                    _ => {
                        return Err(DecodeError::Invalid {
                            what: "delegate flags",
                            why: "not 0 or 1",
                        })
                    }
                };
                Request::Delegate {
                    check_only,
                    path: rel_path(r)?,
                }
            }
            OP_LOCATE => Request::Locate { path: rel_path(r)? },
            OP_SEND_TO => {
                let path = rel_path(r)?;
                let addr =
                    String::from_utf8(r.bytes16("address", 255)?.to_vec()).map_err(|_| {
                        DecodeError::Invalid {
                            what: "address",
                            why: "not UTF-8",
                        }
                    })?;
                let ticket = r.array("ticket")?;
                let dest = rel_path(r)?;
                let streams = r.u16("streams")?;
                let flags = r.u8("send flags")?;
                if flags & !SEND_FLAGS != 0 {
                    return Err(DecodeError::Invalid {
                        what: "send flags",
                        why: "unknown bits set",
                    });
                }
                let (durable, no_link_at_dest) =
                    (flags & SEND_DURABLE != 0, flags & SEND_NO_LINK_AT_DEST != 0);
                let check = crate::DestCheck::from_u8(r.u8("destination check")?).ok_or(
                    DecodeError::Invalid {
                        what: "destination check",
                        why: "not 0, 1, 2 or 3",
                    },
                )?;
                let meta = crate::MetaFlags::from_bits(r.u8("metadata flags")?).ok_or(
                    DecodeError::Invalid {
                        what: "metadata flags",
                        why: "unknown bits set",
                    },
                )?;
                let stall_timeout_ms = r.u32("stall timeout")?;
                let dest_key = r.array("destination key")?;
                let selection = crate::Selection::decode(r)?;
                Request::SendTo {
                    path,
                    addr,
                    ticket,
                    dest,
                    streams,
                    durable,
                    no_link_at_dest,
                    check,
                    meta,
                    stall_timeout_ms,
                    dest_key,
                    selection,
                }
            }
            other => {
                return Err(DecodeError::Unknown {
                    what: "request",
                    value: other as u64,
                })
            }
        })
    }
}

impl NsKind {
    fn to_u8(self) -> u8 {
        match self {
            NsKind::File => 1,
            NsKind::Dir => 2,
            NsKind::Symlink => 3,
            NsKind::Special => 4,
            NsKind::Partial => 5,
            NsKind::Failed => 6,
        }
    }
    fn from_u8(v: u8) -> Result<NsKind, DecodeError> {
        match v {
            1 => Ok(NsKind::File),
            2 => Ok(NsKind::Dir),
            3 => Ok(NsKind::Symlink),
            4 => Ok(NsKind::Special),
            5 => Ok(NsKind::Partial),
            6 => Ok(NsKind::Failed),
            other => Err(DecodeError::Unknown {
                what: "entry type",
                value: other as u64,
            }),
        }
    }
}

pub(crate) fn encode_entries(entries: &[NsEntry], out: &mut Vec<u8>) {
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        put_bytes16(out, &e.path);
        out.push(e.kind.to_u8());
        out.extend_from_slice(&e.size.to_le_bytes());
        out.extend_from_slice(&e.mode.to_le_bytes());
        out.extend_from_slice(&e.mtime_sec.to_le_bytes());
        out.extend_from_slice(&e.mtime_nsec.to_le_bytes());
        put_bytes16(out, &e.target);
        match &e.owner {
            None => out.push(0),
            Some(o) => {
                out.push(1);
                o.encode(out);
            }
        }
    }
}

fn count(r: &mut Reader<'_>, what: &'static str) -> Result<usize, DecodeError> {
    let n = r.u32(what)? as usize;
    if n > MAX_ENTRIES_PER_FRAME {
        return Err(DecodeError::TooLong {
            what,
            len: n as u64,
            limit: MAX_ENTRIES_PER_FRAME as u64,
        });
    }
    Ok(n)
}

pub(crate) fn decode_entries(r: &mut Reader<'_>) -> Result<Vec<NsEntry>, DecodeError> {
    let n = count(r, "entry count")?;
    // Each entry takes at least 32 bytes: never allocate beyond what was received.
    let mut out = Vec::with_capacity(n.min(r.remaining() / 32));
    for _ in 0..n {
        let path = path::validate(r.bytes16("entry path", MAX_PATH)?)?.to_vec();
        out.push(NsEntry {
            path,
            kind: NsKind::from_u8(r.u8("entry type")?)?,
            size: r.u64("size")?,
            mode: r.u32("mode")?,
            mtime_sec: r.i64("mtime")?,
            mtime_nsec: r.u32("mtime nanoseconds")?,
            target: r.bytes16("link target", MAX_PATH)?.to_vec(),
            owner: match r.u8("owner flag")? {
                0 => None,
                1 => Some(NsOwner::decode(r)?),
                _ => {
                    return Err(DecodeError::Invalid {
                        what: "owner flag",
                        why: "not 0 or 1",
                    })
                }
            },
        });
    }
    Ok(out)
}

pub(crate) fn encode_sums(sums: &[PathDigest], out: &mut Vec<u8>) {
    out.extend_from_slice(&(sums.len() as u32).to_le_bytes());
    for (p, d) in sums {
        put_bytes16(out, p);
        put_bytes16(out, d);
    }
}

pub(crate) fn decode_sums(r: &mut Reader<'_>) -> Result<Vec<PathDigest>, DecodeError> {
    let n = count(r, "checksum count")?;
    let mut out = Vec::with_capacity(n.min(r.remaining() / 4));
    for _ in 0..n {
        let p = path::validate(r.bytes16("checksum path", MAX_PATH)?)?.to_vec();
        let d = r.bytes16("digest", 64)?.to_vec();
        out.push((p, d));
    }
    Ok(out)
}

/// Approximate encoded size of an entry, for splitting replies into frames.
pub fn entry_wire_size(e: &NsEntry) -> usize {
    32 + e.path.len()
        + e.target.len()
        + e.owner
            .as_ref()
            .map_or(0, |o| 10 + o.user.len() + o.group.len())
}
