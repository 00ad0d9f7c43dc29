//! Control messages: handshake, session open/join, acknowledgements, end of stream and commit.
//!
//! Batches are encoded by [`crate::batch`] because their payload is written and read in two parts
//! (entry headers, then file data) without being copied into one buffer.

use crate::batch::Totals;
use crate::codec::{put_bytes16, DecodeError, Reader};
use crate::frame::{kind, FrameHeader, MAX_CONTROL_PAYLOAD};
use crate::namespace::{self, DiskUsage, NsEntry, PathDigest, Request};
use crate::path::{self, MAX_PATH};

/// Longest error text accepted from a peer.
pub const MAX_MESSAGE_TEXT: usize = 4096;
/// Most failures listed in one acknowledgement.
pub const MAX_ACK_FAILURES: usize = 128;

/// Which entries of a pushed batch its writer kept as the destination had them, not writing
/// them (`--ignore-existing`, or the check a sender left to the writer): a bitmap, bit
/// `i % 8` of byte `i / 8` for the batch's entry `i`, empty when none was kept. A pushing
/// client's `-v` leaves those files out of what it lists as copied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeptEntries(Vec<u8>);

impl KeptEntries {
    /// The longest bitmap: one bit for each entry a batch may hold.
    pub const MAX_LEN: usize = crate::batch::MAX_ENTRIES as usize / 8;

    /// Marks entry `index` as kept (indexes past a batch's [`crate::batch::MAX_ENTRIES`] are
    /// not entries of a batch, and are ignored).
    pub fn mark(&mut self, index: usize) {
        if index / 8 >= Self::MAX_LEN {
            return;
        }
        if self.0.len() <= index / 8 {
            self.0.resize(index / 8 + 1, 0);
        }
        self.0[index / 8] |= 1 << (index % 8);
    }

    /// Whether entry `index` was kept.
    pub fn contains(&self, index: usize) -> bool {
        self.0
            .get(index / 8)
            .is_some_and(|b| b & (1 << (index % 8)) != 0)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    fn from_bytes(bytes: &[u8]) -> KeptEntries {
        KeptEntries(bytes.to_vec())
    }
}

/// What a session does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// The client sends a tree; the server writes it under `path`. `durable`: the server
    /// syncs each batch to stable storage before acknowledging it. `discard`: the server
    /// verifies and counts every batch but writes nothing (a network-only measurement).
    /// `owners`: the server sets each item's owner and group as sent (if it runs as root
    /// and allows it), mapped by name unless `numeric_ids`.
    Push {
        source_is_dir: bool,
        durable: bool,
        discard: bool,
        owners: bool,
        numeric_ids: bool,
        /// `--ignore-existing` (from protocol 18): the server replaces nothing the
        /// destination has (a file, a link, a special file), whatever the client sends.
        keep_existing: bool,
        /// `DST/NAME` (from protocol 20): the path's last component is the source's own name
        /// under a directory the user named with a trailing slash, not one the user named;
        /// the server refuses a symlink there (the copy would write, and `--delete` remove,
        /// wherever it points), as the client would have asked it first.
        no_link_at_path: bool,
        /// A single file copied to `DST` that the client did not ask about first (from
        /// protocol 22): the path is `DST/NAME`, NAME the file's own name. If `DST` is a
        /// directory (not a symlink to one), the file goes inside it, at the path, where the
        /// server refuses a symlink as with `no_link_at_path`; otherwise it goes to `DST`
        /// itself. `Opened` says which ([`Message::Opened`]'s `to_parent`). Not with
        /// `source_is_dir` or `no_link_at_path`, nor on a connection a ticket authenticated.
        or_parent: bool,
        /// Where the pushed directory is on the sender's host, for the server to refuse a
        /// destination inside it (see [`SourceId`]).
        source: SourceId,
    },
    /// The server sends the tree at `path`; the client writes it. With a `check`, the client
    /// sends what its destination has right behind the `Open` (`Entries`, then `ReplyEnd`),
    /// and the server leaves out what the check says is there. `into_dir` (from protocol
    /// 21): the client's destination is an existing directory, which a single file goes
    /// inside (`DST/NAME`, as with cp). From protocol 22 a server whose source is a single
    /// file sends it in this session, checked against the index's entries of NAME alone (as
    /// the file's own), and the client writes it to `DST/NAME`; in protocol 21 it announced
    /// the file and sent nothing, and the client opened a second session for `DST/NAME`.
    Pull {
        check: DestCheck,
        meta: MetaFlags,
        into_dir: bool,
    },
}

/// A directory on one running kernel: its boot id, device and inode (all zeros: unknown). A
/// push names its source so; a server whose kernel it is refuses a destination at or below
/// that directory (the copy would read what it writes, nesting a copy in itself).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceId {
    pub host: [u8; 16],
    pub dev: u64,
    pub ino: u64,
}

impl SourceId {
    /// As 32 bytes: the host, then device and inode (little-endian).
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.host);
        out.extend_from_slice(&self.dev.to_le_bytes());
        out.extend_from_slice(&self.ino.to_le_bytes());
    }

    fn decode(r: &mut Reader<'_>) -> Result<SourceId, DecodeError> {
        Ok(SourceId {
            host: r.array("source host")?,
            dev: r.u64("source device")?,
            ino: r.u64("source inode")?,
        })
    }
}

/// What a copy keeps besides content, modes, mtimes and owners, as a pull's `Open` and
/// `SendTo` ask the sending server for it (a pushing client decides for itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetaFlags {
    /// `-H`: files linked to each other at the source are linked at the destination.
    pub hard_links: bool,
    /// `-X`: extended attributes.
    pub xattrs: bool,
    /// `-A`: POSIX ACLs.
    pub acls: bool,
}

impl MetaFlags {
    /// As three bits: 1 hard links, 2 xattrs, 4 ACLs.
    pub(crate) fn to_bits(self) -> u8 {
        self.hard_links as u8 | (self.xattrs as u8) << 1 | (self.acls as u8) << 2
    }

    pub(crate) fn from_bits(bits: u8) -> Option<MetaFlags> {
        (bits & !7 == 0).then_some(MetaFlags {
            hard_links: bits & 1 != 0,
            xattrs: bits & 2 != 0,
            acls: bits & 4 != 0,
        })
    }
}

/// What a pulling client's destination already has, and how the server uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DestCheck {
    /// No index follows: send everything.
    #[default]
    None,
    /// Leave out regular files the destination has with the same size and mtime (set only
    /// the attributes of those whose mode alone differs).
    QuickCheck,
    /// Leave out every file the destination has.
    IgnoreExisting,
    /// Leave out regular files the destination has with the same size and the same content
    /// (XXH3-128 digests): the index carries the digests of the destination's files as `Sums`
    /// frames besides its `Entries` (setting only the attributes of those whose mode or mtime
    /// differs).
    Checksum,
    /// Leave out regular files the destination has with the same size, whatever their mtime
    /// (setting the attributes of those whose mode or mtime differs).
    SizeOnly,
    /// Leave out regular files the destination has with a newer mtime; the others as
    /// [`DestCheck::QuickCheck`].
    Update,
}

impl DestCheck {
    /// The byte of a pull's `Open` and of `SendTo` that says which check.
    pub(crate) fn to_u8(self) -> u8 {
        match self {
            DestCheck::None => 0,
            DestCheck::QuickCheck => 1,
            DestCheck::IgnoreExisting => 2,
            DestCheck::Checksum => 3,
            DestCheck::SizeOnly => 4,
            DestCheck::Update => 5,
        }
    }

    pub(crate) fn from_u8(v: u8) -> Option<DestCheck> {
        Some(match v {
            0 => DestCheck::None,
            1 => DestCheck::QuickCheck,
            2 => DestCheck::IgnoreExisting,
            3 => DestCheck::Checksum,
            4 => DestCheck::SizeOnly,
            5 => DestCheck::Update,
            _ => return None,
        })
    }
}

/// Error classes a peer reports; they decide the client's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    AuthFailed,
    NotFound,
    PermissionDenied,
    ReadOnly,
    BadRequest,
    Io,
    NoSpace,
    Protocol,
    UnknownSession,
    /// The server's own connections to another server (a third-party copy) were lost,
    /// stalled or could not be made: the request may succeed if made again.
    PeerUnavailable,
    /// The server has no room for another connection now: the request may succeed later.
    Busy,
    /// The server accepts only encrypted (TLS) connections and the client came without.
    EncryptionRequired,
    /// The client's hello is of another protocol version (from protocol 20; 8 before): no
    /// attempt of that client will succeed.
    VersionMismatch,
    Other(u16),
}

impl ErrorCode {
    fn to_u16(self) -> u16 {
        match self {
            ErrorCode::AuthFailed => 1,
            ErrorCode::NotFound => 2,
            ErrorCode::PermissionDenied => 3,
            ErrorCode::ReadOnly => 4,
            ErrorCode::BadRequest => 5,
            ErrorCode::Io => 6,
            ErrorCode::NoSpace => 7,
            ErrorCode::Protocol => 8,
            ErrorCode::UnknownSession => 9,
            ErrorCode::PeerUnavailable => 10,
            ErrorCode::Busy => 11,
            ErrorCode::EncryptionRequired => 12,
            ErrorCode::VersionMismatch => 13,
            ErrorCode::Other(v) => v,
        }
    }
    fn from_u16(v: u16) -> ErrorCode {
        match v {
            1 => ErrorCode::AuthFailed,
            2 => ErrorCode::NotFound,
            3 => ErrorCode::PermissionDenied,
            4 => ErrorCode::ReadOnly,
            5 => ErrorCode::BadRequest,
            6 => ErrorCode::Io,
            7 => ErrorCode::NoSpace,
            8 => ErrorCode::Protocol,
            9 => ErrorCode::UnknownSession,
            10 => ErrorCode::PeerUnavailable,
            11 => ErrorCode::Busy,
            12 => ErrorCode::EncryptionRequired,
            13 => ErrorCode::VersionMismatch,
            other => ErrorCode::Other(other),
        }
    }
}

/// Counters a server reports when a session ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteStats {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
    pub failures: u64,
    /// Stage busy times in nanoseconds, already divided by the stage's worker count.
    pub read_busy_ns: u64,
    pub network_busy_ns: u64,
    pub write_busy_ns: u64,
    /// File system syncs the writer made (durable pushes sync every batch).
    pub syncs: u64,
    /// A checked pull: files the client's destination had already (not sent), files whose
    /// attributes alone were sent, and the bytes of both. A push: of the files sent before
    /// the client had the destination's listing (see [`crate::KeepRule`]), those the
    /// destination had already and kept (`up_to_date`) and those whose attributes alone it
    /// set (`attrs_fixed`); `bytes_not_sent` zero.
    pub up_to_date: u64,
    pub attrs_fixed: u64,
    pub bytes_not_sent: u64,
    /// A pull: what the server's source sent, which the client checks against what it
    /// received. A push: what the server received (and checked against the `Commit`).
    pub totals: Totals,
    /// A push: what the server wrote without all that was sent with it (see [`NotKept`]).
    pub not_kept: NotKept,
    /// FIFOs, sockets and devices made (from protocol 18).
    pub specials: u64,
    /// Most streams the session had open at once, as the server saw them (from protocol
    /// 23): a third-party copy's source server says how many its push to the destination
    /// used, which its client reports; 0 where the server does not say.
    pub streams: u64,
}

/// Regular files a writer wrote (their data, or their mode and mtime alone) without part of
/// what was sent with them, by its own rule (not a failure): those whose setuid or setgid
/// bits it cleared (it does not keep them from a peer), whose `trusted.*` or `security.*`
/// attributes it did not set (it runs as another user than root, or does not keep setuid
/// bits), that it left owned by itself although the sender asked for their owners (it does
/// not run as root, or applies none), and whose mtime its file system could not hold (it set
/// the nearest it holds); and devices it did not create (it does not run as root, or does not
/// create devices a peer sends), from protocol 18.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NotKept {
    pub setid: u64,
    pub xattrs: u64,
    pub owners: u64,
    pub mtimes: u64,
    pub devices: u64,
}

impl NotKept {
    pub fn add(&mut self, other: &NotKept) {
        self.setid = self.setid.saturating_add(other.setid);
        self.xattrs = self.xattrs.saturating_add(other.xattrs);
        self.owners = self.owners.saturating_add(other.owners);
        self.mtimes = self.mtimes.saturating_add(other.mtimes);
        self.devices = self.devices.saturating_add(other.devices);
    }

    pub fn is_empty(&self) -> bool {
        *self == NotKept::default()
    }
}

/// A control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// The client's first message: its nonce and which key it holds (see [`crate::auth`]);
    /// on a channel the proofs are bound to (TLS), also its proof of the key (`mac`; zeros on
    /// plain TCP, where the proof follows in `ClientAuth`).
    ClientHello {
        version: u16,
        nonce: [u8; 32],
        hint: [u8; 32],
        mac: [u8; 32],
    },
    /// The server's answer: its nonce and its proof of the key.
    ServerHello {
        version: u16,
        auth_required: bool,
        nonce: [u8; 32],
        mac: [u8; 32],
    },
    /// The client's proof of the key.
    ClientAuth {
        mac: [u8; 32],
    },
    Error {
        code: ErrorCode,
        text: String,
    },
    /// Opens a session under an id the client chose, so that its other connections can
    /// `Join` at once, without waiting for `Opened`.
    Open {
        session: [u8; 16],
        op: Operation,
        path: Vec<u8>,
        /// What a pull's server selects of its source (rules, a `--files-from` list); a
        /// push's must select everything.
        selection: crate::Selection,
    },
    Opened {
        root_is_dir: bool,
        /// A pull's source directory on the server's kernel (see [`SourceId`]; zeros for a
        /// push), for the client to refuse a destination inside it.
        source: SourceId,
        /// A pull whose source is one file that travels whole (protocol 21): the server sends
        /// it on this connection alone and refuses the session's joins, so the client need
        /// not wait for any of them.
        one_stream: bool,
        /// A push `or_parent` went to the path's parent, `DST`, which was not a directory
        /// (protocol 22; see [`Operation::Push`]). Always false otherwise.
        to_parent: bool,
    },
    Join {
        session: [u8; 16],
    },
    Joined,
    /// A written batch (after `Commit`: directories whose attributes could not be set).
    /// `failures` lists failed paths and why (at most [`MAX_ACK_FAILURES`] travel);
    /// `unlisted` counts the failures beyond those listed. `kept` says which of the batch's
    /// entries the writer did not write because the destination had them (see
    /// [`KeptEntries`]).
    BatchAck {
        seq: u64,
        files: u32,
        bytes: u64,
        kept: KeptEntries,
        failures: Vec<(Vec<u8>, String)>,
        unlisted: u32,
    },
    End,
    EndAck,
    /// Ends a session; a push's carries what the client sent in all (a pull's is zero).
    Commit(Totals),
    Done(RemoteStats),
    /// A namespace request (see [`crate::namespace`]).
    Request(Request),
    /// Part of a listing.
    Entries(Vec<NsEntry>),
    /// Part of a checksum reply: (path, digest).
    Sums(Vec<PathDigest>),
    Usage(DiskUsage),
    /// Ends a streamed reply, or acknowledges a request that has no other reply.
    ReplyEnd,
    /// A one-time credential for pushing one tree to this server, valid `expires_in_s` seconds.
    Ticket {
        ticket: [u8; 32],
        expires_in_s: u32,
    },
    /// How far a transfer the client is not in the data path of (or not the sending side of)
    /// has come: a pull's server on its control connection, a third-party copy's source
    /// server on the `SendTo` connection, at most about once a second.
    Progress(TransferProgress),
    /// The answer to `Locate` (see [`crate::namespace::Location`]).
    Location(crate::namespace::Location),
    /// A pull's server, on its control connection between its `End` and its `Done` (from
    /// protocol 21): paths whose partial copy at the client's destination (listed in its
    /// index) this copy did not resume, since the file was up to date there, arrived whole or
    /// was left alone; the client removes those partial copies once the pull succeeded. Also
    /// (from protocol 22) a third-party copy's source server, on the `SendTo` connection
    /// before its `Done`, once its push succeeded: the partial copies at the destination
    /// (relative to its path) that push did not resume, which the client removes there. At
    /// most [`MAX_SUPERSEDED`] a message.
    Superseded(Vec<Vec<u8>>),
    /// The first message of the reply to a `List` with `or_parent` (from protocol 22):
    /// whether the listing that follows is of the path's parent, `DST`, which is not a
    /// directory (see [`crate::namespace::Request::List`]).
    ListedAt {
        parent: bool,
    },
    /// A server still at a request (from protocol 23): sent on the request's connection
    /// when it has sent nothing else for a while (see `WORKING_EVERY` in the engine), so
    /// that a client waiting for a long answer (`du` of a large tree, `rm -r`, a
    /// third-party copy) can tell a busy server from a stalled one. Clients skip it.
    Working,
}

/// Most paths one [`Message::Superseded`] carries.
pub const MAX_SUPERSEDED: usize = 1024;

/// What a [`Message::Progress`] carries, each a total since the transfer began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferProgress {
    /// Regular files written (a third-party copy's; zero in a pull's, whose client counts
    /// what it writes itself) and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Regular files the destination had already (not sent), and the bytes not sent: theirs,
    /// those of files whose attributes alone were set, and those a resumed file had.
    pub skipped_files: u64,
    pub skipped_bytes: u64,
}

impl Message {
    /// The message's name, as in docs/protocol.md (for errors).
    pub fn name(&self) -> &'static str {
        match self {
            Message::ClientHello { .. } => "ClientHello",
            Message::ServerHello { .. } => "ServerHello",
            Message::ClientAuth { .. } => "ClientAuth",
            Message::Error { .. } => "Error",
            Message::Open { .. } => "Open",
            Message::Opened { .. } => "Opened",
            Message::Join { .. } => "Join",
            Message::Joined => "Joined",
            Message::BatchAck { .. } => "BatchAck",
            Message::End => "End",
            Message::EndAck => "EndAck",
            Message::Commit(_) => "Commit",
            Message::Done(_) => "Done",
            Message::Request(_) => "a request",
            Message::Entries(_) => "Entries",
            Message::Sums(_) => "Sums",
            Message::Usage(_) => "Usage",
            Message::ReplyEnd => "ReplyEnd",
            Message::Ticket { .. } => "Ticket",
            Message::Progress(_) => "Progress",
            Message::Location(_) => "Location",
            Message::Superseded(_) => "Superseded",
            Message::ListedAt { .. } => "ListedAt",
            Message::Working => "Working",
        }
    }

    /// Encodes the message as a whole frame (header included).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; crate::frame::FRAME_HEADER_LEN];
        let k = match self {
            Message::ClientHello {
                version,
                nonce,
                hint,
                mac,
            } => {
                out.extend_from_slice(&version.to_le_bytes());
                out.extend_from_slice(nonce);
                out.extend_from_slice(hint);
                out.extend_from_slice(mac);
                kind::CLIENT_HELLO
            }
            Message::ServerHello {
                version,
                auth_required,
                nonce,
                mac,
            } => {
                out.extend_from_slice(&version.to_le_bytes());
                out.push(*auth_required as u8);
                out.extend_from_slice(nonce);
                out.extend_from_slice(mac);
                kind::SERVER_HELLO
            }
            Message::ClientAuth { mac } => {
                out.extend_from_slice(mac);
                kind::CLIENT_AUTH
            }
            Message::Error { code, text } => {
                out.extend_from_slice(&code.to_u16().to_le_bytes());
                put_bytes16(&mut out, truncate_text(text).as_bytes());
                kind::ERROR
            }
            Message::Open {
                session,
                op,
                path,
                selection,
            } => {
                out.extend_from_slice(session);
                match op {
                    Operation::Push {
                        source_is_dir,
                        durable,
                        discard,
                        owners,
                        numeric_ids,
                        keep_existing,
                        no_link_at_path,
                        or_parent,
                        source,
                    } => {
                        out.push(1);
                        out.push(
                            *source_is_dir as u8
                                | (*durable as u8) << 1
                                | (*discard as u8) << 2
                                | (*owners as u8) << 3
                                | (*numeric_ids as u8) << 4
                                | (*keep_existing as u8) << 5
                                | (*no_link_at_path as u8) << 6
                                | (*or_parent as u8) << 7,
                        );
                        source.encode(&mut out);
                    }
                    Operation::Pull {
                        check,
                        meta,
                        into_dir,
                    } => {
                        out.push(2);
                        out.push(check.to_u8() | meta.to_bits() << 4 | (*into_dir as u8) << 7);
                    }
                }
                put_bytes16(&mut out, path);
                selection.encode(&mut out);
                kind::OPEN
            }
            Message::Opened {
                root_is_dir,
                source,
                one_stream,
                to_parent,
            } => {
                out.push(*root_is_dir as u8 | (*one_stream as u8) << 1 | (*to_parent as u8) << 2);
                source.encode(&mut out);
                kind::OPENED
            }
            Message::Join { session } => {
                out.extend_from_slice(session);
                kind::JOIN
            }
            Message::Joined => kind::JOINED,
            Message::BatchAck {
                seq,
                files,
                bytes,
                kept,
                failures,
                unlisted,
            } => {
                out.extend_from_slice(&seq.to_le_bytes());
                out.extend_from_slice(&files.to_le_bytes());
                out.extend_from_slice(&bytes.to_le_bytes());
                put_bytes16(&mut out, kept.as_bytes());
                let room = MAX_CONTROL_PAYLOAD as usize - BATCH_ACK_FIXED_LEN - kept.len();
                let listed = &failures[..listed_failures(failures, room)];
                let total = (failures.len() as u32).saturating_add(*unlisted);
                out.extend_from_slice(&total.to_le_bytes());
                out.extend_from_slice(&(listed.len() as u16).to_le_bytes());
                for (path, text) in listed {
                    put_bytes16(&mut out, path);
                    put_bytes16(&mut out, truncate_text(text).as_bytes());
                }
                kind::BATCH_ACK
            }
            Message::End => kind::END,
            Message::EndAck => kind::END_ACK,
            Message::Commit(totals) => {
                totals.encode(&mut out);
                kind::COMMIT
            }
            Message::Done(s) => {
                for v in [
                    s.files,
                    s.dirs,
                    s.symlinks,
                    s.bytes,
                    s.failures,
                    s.read_busy_ns,
                    s.network_busy_ns,
                    s.write_busy_ns,
                    s.syncs,
                    s.up_to_date,
                    s.attrs_fixed,
                    s.bytes_not_sent,
                ] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                s.totals.encode(&mut out);
                let n = &s.not_kept;
                for v in [
                    n.setid, n.xattrs, n.owners, n.mtimes, n.devices, s.specials, s.streams,
                ] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                kind::DONE
            }
            Message::Request(req) => {
                req.encode(&mut out);
                kind::REQUEST
            }
            Message::Entries(entries) => {
                namespace::encode_entries(entries, &mut out);
                kind::ENTRIES
            }
            Message::Sums(sums) => {
                namespace::encode_sums(sums, &mut out);
                kind::SUMS
            }
            Message::Usage(u) => {
                let all = [
                    u.files,
                    u.dirs,
                    u.symlinks,
                    u.bytes,
                    u.partial_files,
                    u.partial_bytes,
                    u.specials,
                    u.unreadable,
                ];
                for v in all {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                kind::USAGE
            }
            Message::ReplyEnd => kind::REPLY_END,
            Message::Ticket {
                ticket,
                expires_in_s,
            } => {
                out.extend_from_slice(ticket);
                out.extend_from_slice(&expires_in_s.to_le_bytes());
                kind::TICKET
            }
            Message::Progress(p) => {
                for v in [p.files, p.bytes, p.skipped_files, p.skipped_bytes] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                kind::PROGRESS
            }
            Message::Location(l) => {
                l.encode(&mut out);
                kind::LOCATION
            }
            Message::Superseded(paths) => {
                out.extend_from_slice(&(paths.len() as u16).to_le_bytes());
                for p in paths {
                    put_bytes16(&mut out, p);
                }
                kind::SUPERSEDED
            }
            Message::ListedAt { parent } => {
                out.push(*parent as u8);
                kind::LISTED_AT
            }
            Message::Working => kind::WORKING,
        };
        let len = (out.len() - crate::frame::FRAME_HEADER_LEN) as u32;
        debug_assert!(len <= MAX_CONTROL_PAYLOAD);
        out[..crate::frame::FRAME_HEADER_LEN]
            .copy_from_slice(&FrameHeader { kind: k, len }.encode());
        out
    }

    /// Decodes a control payload of the given frame kind. Batch frames are refused here.
    pub fn decode(frame_kind: u8, payload: &[u8]) -> Result<Message, DecodeError> {
        let mut r = Reader::new(payload);
        let msg = match frame_kind {
            // A peer of another version is named, not refused as malformed: the version
            // comes first and the rest of its hello is not read.
            kind::CLIENT_HELLO => match r.u16("version")? {
                version if version != crate::PROTOCOL_VERSION => {
                    return Ok(Message::ClientHello {
                        version,
                        nonce: [0; 32],
                        hint: [0; 32],
                        mac: [0; 32],
                    })
                }
                version => Message::ClientHello {
                    version,
                    nonce: r.array("nonce")?,
                    hint: r.array("hint")?,
                    mac: r.array("mac")?,
                },
            },
            kind::SERVER_HELLO => match r.u16("version")? {
                version if version != crate::PROTOCOL_VERSION => {
                    return Ok(Message::ServerHello {
                        version,
                        auth_required: false,
                        nonce: [0; 32],
                        mac: [0; 32],
                    })
                }
                version => Message::ServerHello {
                    version,
                    auth_required: bool_byte(r.u8("auth flag")?)?,
                    nonce: r.array("nonce")?,
                    mac: r.array("mac")?,
                },
            },
            kind::CLIENT_AUTH => Message::ClientAuth {
                mac: r.array("mac")?,
            },
            kind::ERROR => Message::Error {
                code: ErrorCode::from_u16(r.u16("error code")?),
                text: String::from_utf8_lossy(r.bytes16("error text", MAX_MESSAGE_TEXT)?)
                    .into_owned(),
            },
            kind::OPEN => {
                let session = r.array("session id")?;
                let op = match (r.u8("operation")?, r.u8("operation flag")?) {
                    (1, flags)
                        if flags & PUSH_OR_PARENT != 0
                            && flags & (PUSH_SOURCE_IS_DIR | PUSH_NO_LINK_AT_PATH) != 0 =>
                    {
                        return Err(DecodeError::Invalid {
                            what: "push flags",
                            why: "bit 7 (or the parent) is for a single file, without bit 6",
                        })
                    }
                    // Every bit of the byte has its meaning (from protocol 22).
                    (1, flags) => Operation::Push {
                        source_is_dir: flags & PUSH_SOURCE_IS_DIR != 0,
                        durable: flags & PUSH_DURABLE != 0,
                        discard: flags & PUSH_DISCARD != 0,
                        owners: flags & PUSH_OWNERS != 0,
                        numeric_ids: flags & PUSH_NUMERIC_IDS != 0,
                        keep_existing: flags & PUSH_KEEP_EXISTING != 0,
                        no_link_at_path: flags & PUSH_NO_LINK_AT_PATH != 0,
                        or_parent: flags & PUSH_OR_PARENT != 0,
                        source: SourceId::decode(&mut r)?,
                    },
                    (2, byte) => Operation::Pull {
                        check: DestCheck::from_u8(byte & 0xf).ok_or(DecodeError::Invalid {
                            what: "pull check",
                            why: "unknown value",
                        })?,
                        meta: MetaFlags::from_bits(byte >> 4 & 7).ok_or(DecodeError::Invalid {
                            what: "pull flags",
                            why: "unknown bits set",
                        })?,
                        into_dir: byte & PULL_INTO_DIR != 0,
                    },
                    (v, _) => {
                        return Err(DecodeError::Unknown {
                            what: "operation",
                            value: v as u64,
                        })
                    }
                };
                let path = path::validate(r.bytes16("path", MAX_PATH)?)?.to_vec();
                let selection = crate::Selection::decode(&mut r)?;
                if matches!(op, Operation::Push { .. }) && !selection.is_all() {
                    return Err(DecodeError::Invalid {
                        what: "push selection",
                        why: "a push's source is selected by the client",
                    });
                }
                Message::Open {
                    session,
                    op,
                    path,
                    selection,
                }
            }
            kind::OPENED => match r.u8("root kind")? {
                flags if flags & !OPENED_FLAGS == 0 => Message::Opened {
                    root_is_dir: flags & OPENED_ROOT_IS_DIR != 0,
                    one_stream: flags & OPENED_ONE_STREAM != 0,
                    to_parent: flags & OPENED_TO_PARENT != 0,
                    source: SourceId::decode(&mut r)?,
                },
                _ => {
                    return Err(DecodeError::Invalid {
                        what: "Opened flags",
                        why: "unknown flag",
                    })
                }
            },
            kind::JOIN => Message::Join {
                session: r.array("session id")?,
            },
            kind::JOINED => Message::Joined,
            kind::BATCH_ACK => {
                let seq = r.u64("sequence")?;
                let files = r.u32("files")?;
                let bytes = r.u64("bytes")?;
                let kept =
                    KeptEntries::from_bytes(r.bytes16("kept entries", KeptEntries::MAX_LEN)?);
                let total_failures = r.u32("failure count")? as usize;
                let listed = r.u16("listed failures")? as usize;
                if listed > MAX_ACK_FAILURES || listed > total_failures {
                    return Err(DecodeError::TooLong {
                        what: "failure list",
                        len: listed as u64,
                        limit: MAX_ACK_FAILURES as u64,
                    });
                }
                let mut failures = Vec::with_capacity(listed);
                for _ in 0..listed {
                    let p = r.bytes16("failed path", MAX_PATH)?.to_vec();
                    let t = String::from_utf8_lossy(r.bytes16("failure text", MAX_MESSAGE_TEXT)?)
                        .into_owned();
                    failures.push((p, t));
                }
                Message::BatchAck {
                    seq,
                    files,
                    bytes,
                    kept,
                    failures,
                    // Failures beyond the listed ones are reported by count only.
                    unlisted: (total_failures - listed) as u32,
                }
            }
            kind::END => Message::End,
            kind::END_ACK => Message::EndAck,
            kind::COMMIT => Message::Commit(Totals::decode(&mut r)?),
            kind::DONE => Message::Done(RemoteStats {
                files: r.u64("files")?,
                dirs: r.u64("dirs")?,
                symlinks: r.u64("symlinks")?,
                bytes: r.u64("bytes")?,
                failures: r.u64("failures")?,
                read_busy_ns: r.u64("read busy")?,
                network_busy_ns: r.u64("network busy")?,
                write_busy_ns: r.u64("write busy")?,
                syncs: r.u64("syncs")?,
                up_to_date: r.u64("up to date")?,
                attrs_fixed: r.u64("attributes fixed")?,
                bytes_not_sent: r.u64("bytes not sent")?,
                totals: Totals::decode(&mut r)?,
                not_kept: NotKept {
                    setid: r.u64("setid bits not kept")?,
                    xattrs: r.u64("attributes not kept")?,
                    owners: r.u64("owners not kept")?,
                    mtimes: r.u64("mtimes not kept")?,
                    devices: r.u64("devices not kept")?,
                },
                specials: r.u64("special files")?,
                streams: r.u64("streams")?,
            }),
            kind::REQUEST => Message::Request(Request::decode(&mut r)?),
            kind::ENTRIES => Message::Entries(namespace::decode_entries(&mut r)?),
            kind::SUMS => Message::Sums(namespace::decode_sums(&mut r)?),
            kind::USAGE => Message::Usage(DiskUsage {
                files: r.u64("files")?,
                dirs: r.u64("dirs")?,
                symlinks: r.u64("symlinks")?,
                bytes: r.u64("bytes")?,
                partial_files: r.u64("incomplete files")?,
                partial_bytes: r.u64("bytes of incomplete files")?,
                specials: r.u64("special files")?,
                unreadable: r.u64("unreadable entries")?,
            }),
            kind::REPLY_END => Message::ReplyEnd,
            kind::TICKET => Message::Ticket {
                ticket: r.array("ticket")?,
                expires_in_s: r.u32("expiry")?,
            },
            kind::PROGRESS => Message::Progress(TransferProgress {
                files: r.u64("files")?,
                bytes: r.u64("bytes")?,
                skipped_files: r.u64("skipped files")?,
                skipped_bytes: r.u64("skipped bytes")?,
            }),
            kind::LOCATION => Message::Location(crate::namespace::Location::decode(&mut r)?),
            kind::SUPERSEDED => {
                let count = r.u16("path count")? as usize;
                if count > MAX_SUPERSEDED {
                    return Err(DecodeError::Invalid {
                        what: "Superseded",
                        why: "too many paths",
                    });
                }
                let mut paths = Vec::with_capacity(count);
                for _ in 0..count {
                    paths.push(path::validate(r.bytes16("path", MAX_PATH)?)?.to_vec());
                }
                Message::Superseded(paths)
            }
            kind::WORKING => Message::Working,
            kind::LISTED_AT => match r.u8("listed at")? {
                b @ (0 | 1) => Message::ListedAt { parent: b == 1 },
                _ => {
                    return Err(DecodeError::Invalid {
                        what: "ListedAt",
                        why: "neither 0 nor 1",
                    })
                }
            },
            other => {
                return Err(DecodeError::Unknown {
                    what: "control message",
                    value: other as u64,
                })
            }
        };
        r.finish()?;
        Ok(msg)
    }
}

/// Bits of the flag byte of a push.
/// The pull flag byte's top bit (its low bits are the check, the next three [`MetaFlags`]).
const PULL_INTO_DIR: u8 = 0x80;
const OPENED_ROOT_IS_DIR: u8 = 1;
const OPENED_ONE_STREAM: u8 = 2;
const OPENED_TO_PARENT: u8 = 4;
const OPENED_FLAGS: u8 = OPENED_ROOT_IS_DIR | OPENED_ONE_STREAM | OPENED_TO_PARENT;
const PUSH_SOURCE_IS_DIR: u8 = 1;
const PUSH_DURABLE: u8 = 2;
const PUSH_DISCARD: u8 = 4;
const PUSH_OWNERS: u8 = 8;
const PUSH_NUMERIC_IDS: u8 = 16;
const PUSH_KEEP_EXISTING: u8 = 32;
const PUSH_NO_LINK_AT_PATH: u8 = 64;
const PUSH_OR_PARENT: u8 = 128;

fn bool_byte(b: u8) -> Result<bool, DecodeError> {
    match b {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::Invalid {
            what: "flag",
            why: "not 0 or 1",
        }),
    }
}

/// Bytes of a `BatchAck` before its list of failures, but for its kept entries' bitmap.
const BATCH_ACK_FIXED_LEN: usize = 28;

/// How many of `failures` a `BatchAck` lists: at most [`MAX_ACK_FAILURES`], and no more than
/// fit in the `room` left in a control frame (128 failures with the longest path and text
/// would not); the failure count still says how many there were in all.
fn listed_failures(failures: &[(Vec<u8>, String)], mut room: usize) -> usize {
    let mut listed = 0;
    for (path, text) in failures.iter().take(MAX_ACK_FAILURES) {
        let len = 4 + path.len().min(u16::MAX as usize) + truncate_text(text).len();
        if len > room {
            break;
        }
        room -= len;
        listed += 1;
    }
    listed
}

fn truncate_text(text: &str) -> &str {
    if text.len() <= MAX_MESSAGE_TEXT {
        return text;
    }
    let mut end = MAX_MESSAGE_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FRAME_HEADER_LEN;

    fn roundtrip(m: Message) {
        let bytes = m.encode();
        let header = FrameHeader::decode(&bytes[..FRAME_HEADER_LEN].try_into().unwrap()).unwrap();
        assert_eq!(header.len as usize, bytes.len() - FRAME_HEADER_LEN);
        let back = Message::decode(header.kind, &bytes[FRAME_HEADER_LEN..]).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn every_message_roundtrips() {
        roundtrip(Message::ClientHello {
            version: crate::PROTOCOL_VERSION,
            nonce: [1; 32],
            hint: [4; 32],
            mac: [5; 32],
        });
        roundtrip(Message::ServerHello {
            version: crate::PROTOCOL_VERSION,
            auth_required: true,
            nonce: [7; 32],
            mac: [3; 32],
        });
        roundtrip(Message::ClientAuth { mac: [2; 32] });
        roundtrip(Message::Error {
            code: ErrorCode::NoSpace,
            text: "disk full".into(),
        });
        roundtrip(Message::Open {
            session: [7; 16],
            op: Operation::Push {
                source_is_dir: true,
                durable: false,
                discard: true,
                owners: true,
                numeric_ids: false,
                keep_existing: false,
                no_link_at_path: false,
                source: Default::default(),
                or_parent: false,
            },
            path: b"a/b".to_vec(),
            selection: Default::default(),
        });
        roundtrip(Message::Open {
            session: [7; 16],
            op: Operation::Push {
                source_is_dir: false,
                durable: true,
                discard: false,
                owners: true,
                numeric_ids: false,
                keep_existing: false,
                no_link_at_path: false,
                source: Default::default(),
                or_parent: true,
            },
            path: b"a/b".to_vec(),
            selection: Default::default(),
        });
        roundtrip(Message::Open {
            session: [7; 16],
            op: Operation::Pull {
                check: DestCheck::QuickCheck,
                meta: Default::default(),
                into_dir: false,
            },
            path: Vec::new(),
            selection: Default::default(),
        });
        roundtrip(Message::Opened {
            root_is_dir: false,
            source: Default::default(),
            one_stream: false,
            to_parent: false,
        });
        roundtrip(Message::Opened {
            root_is_dir: false,
            source: Default::default(),
            one_stream: true,
            to_parent: false,
        });
        roundtrip(Message::Opened {
            root_is_dir: false,
            source: Default::default(),
            one_stream: true,
            to_parent: true,
        });
        roundtrip(Message::Superseded(vec![b"a/big".to_vec(), b"b".to_vec()]));
        roundtrip(Message::Working);
        roundtrip(Message::ListedAt { parent: false });
        roundtrip(Message::ListedAt { parent: true });
        let mut bytes = Message::ListedAt { parent: true }.encode();
        bytes[FRAME_HEADER_LEN] = 2;
        assert!(Message::decode(kind::LISTED_AT, &bytes[FRAME_HEADER_LEN..]).is_err());
        roundtrip(Message::Superseded(Vec::new()));
        roundtrip(Message::Join { session: [9; 16] });
        roundtrip(Message::Joined);
        let mut kept = KeptEntries::default();
        kept.mark(0);
        kept.mark(9);
        roundtrip(Message::BatchAck {
            seq: 5,
            files: 3,
            bytes: 100,
            kept,
            failures: vec![(b"x".to_vec(), "bad".into())],
            unlisted: 7,
        });
        roundtrip(Message::End);
        roundtrip(Message::EndAck);
        let totals = Totals {
            entries: 13,
            files: 14,
            bytes: 15,
            chunks: 16,
            chunk_bytes: 17,
            failed: 18,
        };
        roundtrip(Message::Commit(totals));
        roundtrip(Message::Commit(Totals::default()));
        roundtrip(Message::Done(RemoteStats {
            files: 1,
            dirs: 2,
            symlinks: 3,
            bytes: 4,
            failures: 5,
            read_busy_ns: 6,
            network_busy_ns: 7,
            write_busy_ns: 8,
            syncs: 9,
            up_to_date: 10,
            attrs_fixed: 11,
            bytes_not_sent: 12,
            totals,
            not_kept: NotKept {
                setid: 13,
                xattrs: 14,
                owners: 15,
                mtimes: 16,
                devices: 17,
            },
            specials: 18,
            streams: 19,
        }));
    }

    #[test]
    fn a_commit_or_done_cut_short_is_refused() {
        for msg in [
            Message::Commit(Totals::default()),
            Message::Done(RemoteStats::default()),
        ] {
            let frame = msg.encode();
            let payload = &frame[crate::frame::FRAME_HEADER_LEN..];
            let k = frame[4];
            assert!(Message::decode(k, &payload[..payload.len() - 1]).is_err());
            let mut longer = payload.to_vec();
            longer.push(0);
            assert!(Message::decode(k, &longer).is_err());
            assert!(Message::decode(k, &[]).is_err());
        }
    }

    #[test]
    fn namespace_messages_roundtrip() {
        use crate::namespace::{NsKind, SumAlgo};
        let path = b"a/b".to_vec();
        for req in [
            Request::List {
                path: path.clone(),
                recursive: true,
                digests: false,
                selection: Default::default(),
                owners: crate::namespace::ListOwners::Always,
                or_parent: false,
            },
            Request::List {
                path: path.clone(),
                recursive: true,
                digests: true,
                selection: Default::default(),
                owners: Default::default(),
                or_parent: false,
            },
            Request::List {
                path: path.clone(),
                recursive: false,
                digests: true,
                selection: Default::default(),
                owners: crate::namespace::ListOwners::IfApplied,
                or_parent: false,
            },
            Request::Stat { path: Vec::new() },
            Request::Du {
                path: path.clone(),
                selection: Default::default(),
            },
            Request::Mkdir {
                path: path.clone(),
                parents: true,
            },
            Request::Remove {
                path: path.clone(),
                recursive: false,
            },
            Request::Rename {
                from: path.clone(),
                to: b"c".to_vec(),
            },
            Request::Sum {
                path: path.clone(),
                recursive: true,
                algo: SumAlgo::Sha256,
            },
            Request::Delegate {
                path: path.clone(),
                check_only: true,
            },
            Request::SendTo {
                path: path.clone(),
                addr: "127.0.0.1:9".into(),
                ticket: [5; 32],
                dest: b"d".to_vec(),
                streams: 4,
                durable: true,
                no_link_at_dest: false,
                check: crate::DestCheck::IgnoreExisting,
                meta: crate::MetaFlags {
                    hard_links: true,
                    xattrs: false,
                    acls: true,
                },
                stall_timeout_ms: 60_000,
                dest_key: [7; 32],
                selection: Default::default(),
            },
            Request::SendTo {
                path: path.clone(),
                addr: "127.0.0.1:9".into(),
                ticket: [5; 32],
                dest: b"d".to_vec(),
                streams: 0,
                durable: false,
                no_link_at_dest: true,
                check: crate::DestCheck::Checksum,
                meta: Default::default(),
                stall_timeout_ms: 0,
                dest_key: [0; 32],
                selection: Default::default(),
            },
        ] {
            roundtrip(Message::Request(req));
        }
        roundtrip(Message::Entries(vec![NsEntry {
            path: b"x\xff".to_vec(),
            kind: NsKind::Symlink,
            size: 3,
            mode: 0o777,
            mtime_sec: -5,
            mtime_nsec: 7,
            target: b"../y".to_vec(),
            owner: Some(crate::namespace::NsOwner {
                uid: 1000,
                gid: 4,
                user: b"alice".to_vec(),
                group: Vec::new(),
            }),
        }]));
        roundtrip(Message::Sums(vec![(b"f".to_vec(), vec![1; 32])]));
        roundtrip(Message::Usage(DiskUsage {
            files: 1,
            dirs: 2,
            symlinks: 3,
            bytes: 4,
            partial_files: 5,
            partial_bytes: 6,
            specials: 7,
            unreadable: 8,
        }));
        roundtrip(Message::ReplyEnd);
        roundtrip(Message::Ticket {
            ticket: [9; 32],
            expires_in_s: 60,
        });
        roundtrip(Message::Progress(crate::TransferProgress {
            files: 1,
            bytes: u64::MAX,
            skipped_files: 3,
            skipped_bytes: 4,
        }));
    }

    #[test]
    fn openeds_unknown_flags_are_refused() {
        let opened = Message::Opened {
            root_is_dir: true,
            source: Default::default(),
            one_stream: true,
            to_parent: false,
        };
        let mut bytes = opened.encode();
        assert_eq!(bytes[FRAME_HEADER_LEN], 3);
        for flags in [8, 0x10, 0x80] {
            bytes[FRAME_HEADER_LEN] = flags;
            assert!(Message::decode(kind::OPENED, &bytes[FRAME_HEADER_LEN..]).is_err());
        }
    }

    /// A push "in DST, or DST itself" is of a single file, whose server checks the link at
    /// `DST/NAME` itself: with a directory's flag or bit 6 it is refused.
    #[test]
    fn a_push_to_a_path_or_its_parent_is_of_a_single_file_only() {
        let open = |source_is_dir, no_link_at_path| Message::Open {
            session: [5; 16],
            op: Operation::Push {
                source_is_dir,
                durable: false,
                discard: false,
                owners: false,
                numeric_ids: false,
                keep_existing: false,
                no_link_at_path,
                or_parent: true,
                source: Default::default(),
            },
            path: b"dst/name".to_vec(),
            selection: Default::default(),
        };
        roundtrip(open(false, false));
        for (dir, link) in [(true, false), (false, true), (true, true)] {
            let bytes = open(dir, link).encode();
            assert!(
                Message::decode(kind::OPEN, &bytes[FRAME_HEADER_LEN..]).is_err(),
                "{dir} {link}"
            );
        }
    }

    #[test]
    fn checked_pulls_roundtrip_and_unknown_checks_or_list_flags_are_refused() {
        for check in [
            DestCheck::None,
            DestCheck::QuickCheck,
            DestCheck::IgnoreExisting,
            DestCheck::Checksum,
            DestCheck::SizeOnly,
            DestCheck::Update,
        ] {
            roundtrip(Message::Open {
                session: [3; 16],
                op: Operation::Pull {
                    check,
                    meta: Default::default(),
                    into_dir: false,
                },
                path: b"p".to_vec(),
                selection: Default::default(),
            });
        }
        let mut open = Message::Open {
            session: [3; 16],
            op: Operation::Pull {
                check: DestCheck::Checksum,
                meta: Default::default(),
                into_dir: false,
            },
            path: b"p".to_vec(),
            selection: Default::default(),
        }
        .encode();
        // The check byte follows the id and the operation.
        open[FRAME_HEADER_LEN + 17] = 6;
        assert!(Message::decode(kind::OPEN, &open[FRAME_HEADER_LEN..]).is_err());
        let mut list = Message::Request(Request::List {
            path: b"p".to_vec(),
            recursive: true,
            digests: true,
            selection: Default::default(),
            owners: Default::default(),
            or_parent: false,
        })
        .encode();
        assert_eq!(
            list[FRAME_HEADER_LEN + 1],
            3,
            "bit 0 recursive, bit 1 digests"
        );
        // Bit 5 is unknown (bit 4, or the parent, is from protocol 22); bits 2 and 3 (owners
        // always, owners if applied) exclude each other.
        for bad in [32, 12] {
            list[FRAME_HEADER_LEN + 1] = bad;
            assert!(Message::decode(kind::REQUEST, &list[FRAME_HEADER_LEN..]).is_err());
        }
    }

    #[test]
    fn namespace_requests_cannot_name_paths_outside_the_root() {
        for bad in [&b"../x"[..], b"/etc", b"a/../../b"] {
            let mut bytes = Message::Request(Request::Stat { path: bad.to_vec() }).encode();
            // The encoder does not validate; the decoder must refuse.
            let payload = bytes.split_off(FRAME_HEADER_LEN);
            assert!(Message::decode(kind::REQUEST, &payload).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn open_with_escaping_path_is_refused() {
        let mut bytes = Message::Open {
            session: [7; 16],
            op: Operation::Pull {
                check: DestCheck::QuickCheck,
                meta: Default::default(),
                into_dir: false,
            },
            path: b"aa/bb".to_vec(),
            selection: Default::default(),
        }
        .encode();
        let n = bytes.len();
        bytes[n - 5..].copy_from_slice(b"../bb");
        assert!(Message::decode(kind::OPEN, &bytes[FRAME_HEADER_LEN..]).is_err());
    }

    #[test]
    fn a_batch_ack_of_many_long_failures_stays_within_a_control_frame() {
        // 128 failures of the longest path and text took more than a control frame: the
        // encoder's debug assertion fired, and in release the peer refused the frame.
        let failures: Vec<(Vec<u8>, String)> = (0..200u8)
            .map(|i| (vec![b'a' + i % 26; MAX_PATH], "x".repeat(MAX_MESSAGE_TEXT)))
            .collect();
        // With the longest bitmap of kept entries too.
        let mut kept = KeptEntries::default();
        kept.mark(crate::batch::MAX_ENTRIES as usize - 1);
        let m = Message::BatchAck {
            seq: 3,
            files: 0,
            bytes: 0,
            kept,
            failures,
            unlisted: 5,
        };
        let bytes = m.encode();
        let header = FrameHeader::decode(&bytes[..FRAME_HEADER_LEN].try_into().unwrap())
            .expect("within the limit of a control frame");
        let Message::BatchAck {
            failures, unlisted, ..
        } = Message::decode(header.kind, &bytes[FRAME_HEADER_LEN..]).unwrap()
        else {
            panic!("not a BatchAck");
        };
        let listed = failures.len();
        assert!((100..MAX_ACK_FAILURES).contains(&listed), "{listed} listed");
        assert_eq!(
            unlisted as usize,
            205 - listed,
            "the failures not listed are counted"
        );
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut bytes = Message::End.encode();
        bytes.push(0);
        assert_eq!(
            Message::decode(kind::END, &bytes[FRAME_HEADER_LEN..]),
            Err(DecodeError::TrailingBytes(1))
        );
    }

    #[test]
    fn oversized_frames_are_refused_before_reading() {
        let header = [0xff, 0xff, 0xff, 0x7f, kind::BATCH];
        assert!(FrameHeader::decode(&header).is_err());
        let header = [0, 0, 0x20, 0, kind::OPEN];
        assert!(FrameHeader::decode(&header).is_err());
        assert!(FrameHeader::decode(&[0, 0, 0, 0, 200]).is_err());
    }
}
