//! What the fuzz targets share: splitting raw bytes into frames as a driver reads them, the
//! round-trip invariants of control messages and batches, and arbitrary (but plausible)
//! messages for the targets that drive the state machines.
//!
//! The invariants are assertions: a target fails not only when the code under test panics but
//! when a decoded value does not survive encoding and decoding again. Not here: anything
//! that needs a socket (see `fuzz_targets/server_engine.rs`).

use arbitrary::{Arbitrary, Unstructured};
use sprat_proto::frame::{kind, MAX_BATCH_PAYLOAD, MAX_CONTROL_PAYLOAD};
use sprat_proto::namespace::{
    DiskUsage, ListOwners, Location, NsEntry, NsKind, NsOwner, Request, SumAlgo,
};
use sprat_proto::{
    Batch, BatchView, ChunkOf, DestCheck, EntryKind, ErrorCode, FrameHeader, Message, NotKept,
    Operation, RemoteStats, Selection, SourceId, Totals, FRAME_HEADER_LEN, PROTOCOL_VERSION,
};

/// One frame cut from a byte stream: its header (or why it was refused) and its payload,
/// which is shorter than the header says when the stream ended first.
pub struct RawFrame<'a> {
    pub header: Result<FrameHeader, sprat_proto::DecodeError>,
    pub payload: &'a [u8],
}

/// Cuts `data` into frames the way a driver reads a connection: a 5-byte header, then as
/// many payload bytes as it says. A refused header ends the stream (a driver closes the
/// connection there).
pub fn frames(mut data: &[u8]) -> Vec<RawFrame<'_>> {
    let mut out = Vec::new();
    while data.len() >= FRAME_HEADER_LEN {
        let mut head = [0u8; FRAME_HEADER_LEN];
        head.copy_from_slice(&data[..FRAME_HEADER_LEN]);
        data = &data[FRAME_HEADER_LEN..];
        let header = FrameHeader::decode(&head);
        let Ok(h) = header else {
            out.push(RawFrame {
                header,
                payload: &[],
            });
            break;
        };
        let limit = if h.kind == kind::BATCH {
            MAX_BATCH_PAYLOAD
        } else {
            MAX_CONTROL_PAYLOAD
        };
        assert!(
            h.len <= limit,
            "a header over its kind's limit was accepted"
        );
        assert_eq!(h.encode(), head, "a frame header re-encodes to other bytes");
        let n = (h.len as usize).min(data.len());
        out.push(RawFrame {
            header,
            payload: &data[..n],
        });
        data = &data[n..];
    }
    out
}

/// Decodes a control payload of `frame_kind` and checks what a peer relies on:
///
/// - the decoded message encodes to a frame with a valid header of the same kind, which
///   decodes again;
/// - for every message that carries no lossy field, that re-encoding is byte for byte the
///   payload received (decoding consumed exactly it), and decodes to the same value;
/// - for the lossy ones (error texts that are not UTF-8, the unlisted failures of a
///   `BatchAck`, a hello of another version, of which only the version is read), one more
///   round is a fixed point.
///
/// Every selection (include/exclude rules, a `--files-from` list) a message carries has
/// non-empty patterns without NUL and valid, non-empty listed paths.
///
/// Returns the decoded message.
pub fn check_control(frame_kind: u8, payload: &[u8]) -> Option<Message> {
    let m1 = Message::decode(frame_kind, payload).ok()?;
    assert_ne!(
        frame_kind,
        kind::BATCH,
        "a batch decoded as a control message"
    );
    let y1 = reencode(&m1, frame_kind);
    let m2 = Message::decode(frame_kind, &y1[FRAME_HEADER_LEN..]).unwrap_or_else(|e| {
        panic!(
            "the encoding of a decoded {} does not decode: {e}",
            m1.name()
        )
    });
    if is_exact(&m1, payload) {
        assert_eq!(m2, m1, "decode(encode(m)) != m");
        assert_eq!(
            &y1[FRAME_HEADER_LEN..],
            payload,
            "encode(decode(payload)) != payload for {}",
            m1.name()
        );
    } else {
        let y2 = reencode(&m2, frame_kind);
        let m3 = Message::decode(frame_kind, &y2[FRAME_HEADER_LEN..])
            .unwrap_or_else(|e| panic!("a re-encoded {} does not decode: {e}", m2.name()));
        assert_eq!(m3, m2, "one round of encoding is not a fixed point");
    }
    if let Some(selection) = selection_of(&m1) {
        check_selection(selection);
    }
    Some(m1)
}

/// The selection a message carries, if any.
pub fn selection_of(m: &Message) -> Option<&Selection> {
    match m {
        Message::Open { op, selection, .. } => {
            if matches!(op, Operation::Push { .. }) {
                assert!(
                    selection.is_all(),
                    "a push's Open with a selection accepted"
                );
            }
            Some(selection)
        }
        Message::Request(
            Request::List { selection, .. }
            | Request::Du { selection, .. }
            | Request::SendTo { selection, .. },
        ) => Some(selection),
        _ => None,
    }
}

/// What the store may assume of a selection a peer sent.
pub fn check_selection(s: &Selection) {
    assert!(s.check().is_ok(), "a selection over its limits accepted");
    for (_, pattern) in &s.rules {
        assert!(
            !pattern.is_empty() && !pattern.contains(&0),
            "bad pattern accepted"
        );
    }
    for p in s.files_from.iter().flatten() {
        assert!(!p.is_empty(), "an empty listed path accepted");
        assert!(
            sprat_proto::path::validate(p).is_ok(),
            "an invalid listed path accepted"
        );
    }
}

/// Include/exclude rules and a `--files-from` list with plausible contents.
pub fn arb_selection(u: &mut Unstructured<'_>) -> arbitrary::Result<Selection> {
    if u.ratio(1, 2)? {
        return Ok(Selection::default());
    }
    let rules = (0..u.int_in_range(0..=3)?)
        .map(|_| {
            const PATTERNS: &[&[u8]] = &[b"*.log", b"/a/***", b"d/", b"keep", b"*"];
            let pattern = u.choose(PATTERNS)?;
            Ok((u.arbitrary()?, pattern.to_vec()))
        })
        .collect::<arbitrary::Result<_>>()?;
    let files_from = if u.arbitrary()? {
        Some(
            (0..u.int_in_range(0..=3)?)
                .map(|_| arb_path(u))
                .filter(|p| !matches!(p, Ok(p) if p.is_empty()))
                .collect::<arbitrary::Result<_>>()?,
        )
    } else {
        None
    };
    let base = match u.arbitrary()? {
        true => Some(u.choose(&[&b"src"[..], b"a.log", b"d"])?.to_vec()),
        false => None,
    };
    Ok(Selection {
        rules,
        files_from,
        base,
    })
}

/// Encodes `m` and checks its frame header.
fn reencode(m: &Message, frame_kind: u8) -> Vec<u8> {
    let y = m.encode();
    let mut head = [0u8; FRAME_HEADER_LEN];
    head.copy_from_slice(&y[..FRAME_HEADER_LEN]);
    let h = FrameHeader::decode(&head)
        .unwrap_or_else(|e| panic!("the encoding of {} has a refused header: {e}", m.name()));
    assert_eq!(h.kind, frame_kind, "re-encoded as another kind");
    assert_eq!(h.len as usize, y.len() - FRAME_HEADER_LEN, "header length");
    y
}

/// Whether decoding `payload` into `m` lost nothing.
fn is_exact(m: &Message, payload: &[u8]) -> bool {
    match m {
        Message::ClientHello { version, .. } | Message::ServerHello { version, .. } => {
            *version == PROTOCOL_VERSION
        }
        // code, then the text's length and bytes.
        Message::Error { .. } => std::str::from_utf8(&payload[4..]).is_ok(),
        // A text made UTF-8 may grow past its limit, and then fewer failures fit a frame.
        Message::BatchAck { failures, .. } => failures.iter().all(|(_, t)| !t.contains('\u{FFFD}')),
        _ => true,
    }
}

/// Decodes a batch payload and checks it against a batch rebuilt from the decoded entries
/// with the sender's own [`Batch`] methods: same entries, same totals, and (when no failure
/// text had to be made UTF-8) the very same bytes.
pub fn check_batch(payload: &[u8]) -> bool {
    let Ok(view) = BatchView::decode(payload) else {
        return false;
    };
    let mut b = Batch::new(view.seq, 0);
    let mut exact = true;
    for e in &view.entries {
        assert!(
            sprat_proto::path::validate(e.path).is_ok(),
            "entry path not valid"
        );
        match &e.kind {
            EntryKind::File {
                meta,
                hash,
                data,
                unless,
            } => {
                b.data.extend_from_slice(data);
                b.push_file_unless(e.path, meta, data.len() as u64, *hash, *unless);
            }
            EntryKind::Dir { meta } => b.push_dir(e.path, meta),
            EntryKind::Symlink {
                mtime_sec,
                mtime_nsec,
                uid,
                gid,
                target,
            } => {
                assert!(!target.is_empty() && !target.contains(&0));
                let meta = sprat_proto::FileMeta {
                    mode: 0o777,
                    mtime_sec: *mtime_sec,
                    mtime_nsec: *mtime_nsec,
                    uid: *uid,
                    gid: *gid,
                };
                b.push_symlink(e.path, &meta, target)
            }
            EntryKind::UserName { id, name } => {
                assert!(e.path.is_empty() && !name.is_empty() && !name.contains(&0));
                b.push_user_name(*id, name)
            }
            EntryKind::GroupName { id, name } => {
                assert!(e.path.is_empty() && !name.is_empty() && !name.contains(&0));
                b.push_group_name(*id, name)
            }
            EntryKind::Chunk {
                meta,
                file_size,
                version,
                offset,
                hash,
                data,
                whole,
                unless,
            } => {
                assert!(!data.is_empty(), "empty chunk accepted");
                assert!(
                    unless.is_none() || *whole,
                    "a keep rule on a resumable chunk"
                );
                assert!(
                    offset
                        .checked_add(data.len() as u64)
                        .is_some_and(|end| end <= *file_size),
                    "chunk beyond its file accepted"
                );
                b.data.extend_from_slice(data);
                let of = ChunkOf {
                    file_size: *file_size,
                    version: *version,
                    whole: *whole,
                    unless: *unless,
                };
                b.push_chunk(e.path, meta, of, *offset, data.len() as u64, *hash);
            }
            EntryKind::Failed { text } => match std::str::from_utf8(text) {
                Ok(t) => b.push_failed(e.path, t),
                Err(_) => {
                    exact = false;
                    b.push_failed(e.path, &String::from_utf8_lossy(text));
                }
            },
            EntryKind::Attrs { meta, size } => b.push_attrs(e.path, meta, *size),
            EntryKind::HardLink { target } => {
                assert!(!target.is_empty() && !e.path.is_empty() && *target != e.path);
                b.push_hard_link(e.path, target)
            }
            EntryKind::Special {
                meta,
                kind,
                major,
                minor,
            } => b.push_special(e.path, meta, *kind, (*major, *minor)),
            EntryKind::Xattrs { scope, list } => {
                let list: Vec<(Vec<u8>, Vec<u8>)> =
                    list.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
                let bytes: usize = list.iter().map(|(n, v)| n.len() + v.len()).sum();
                assert!(bytes <= sprat_proto::batch::MAX_XATTR_BYTES);
                assert!(
                    b.push_xattrs(e.path, *scope, &list),
                    "accepted xattrs not re-encodable"
                );
            }
        }
        if let EntryKind::File { meta, .. }
        | EntryKind::Dir { meta }
        | EntryKind::Chunk { meta, .. }
        | EntryKind::Attrs { meta, .. } = &e.kind
        {
            assert!(meta.mode <= 0o7777 && meta.mtime_nsec < 1_000_000_000);
        }
    }
    assert_eq!(b.count as usize, view.entries.len(), "entry count");
    assert_eq!(b.totals, view.totals(), "totals of a rebuilt batch");
    let mut bytes = b.frame_prefix()[FRAME_HEADER_LEN..].to_vec();
    bytes.extend_from_slice(&b.header);
    bytes.extend_from_slice(&b.data);
    assert_eq!(
        b.frame_prefix()[..4],
        (bytes.len() as u32).to_le_bytes(),
        "frame length of a rebuilt batch"
    );
    let again = BatchView::decode(&bytes).expect("a rebuilt batch decodes");
    assert_eq!(again.seq, view.seq);
    assert_eq!(again.totals(), view.totals());
    let local = b.view().expect("a rebuilt batch's own buffers decode");
    assert_eq!(local.entries, again.entries, "wire and local views differ");
    if exact {
        assert_eq!(again.entries, view.entries, "decode(encode(batch)) differs");
        assert_eq!(bytes, payload, "encode(decode(batch)) != payload");
    } else {
        assert_eq!(again.entries.len(), view.entries.len());
    }
    true
}

/// A relative path: mostly valid ones from a small set, sometimes arbitrary bytes.
pub fn arb_path(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<u8>> {
    const PATHS: &[&[u8]] = &[b"", b"a", b"a/b", b"d", b"d/e/f", b"x\xff", b"l"];
    Ok(if u.ratio(7, 8)? {
        u.choose(PATHS)?.to_vec()
    } else {
        Vec::<u8>::arbitrary(u)?
    })
}

fn arb_check(u: &mut Unstructured<'_>) -> arbitrary::Result<DestCheck> {
    Ok(*u.choose(&[
        DestCheck::None,
        DestCheck::QuickCheck,
        DestCheck::IgnoreExisting,
        DestCheck::Checksum,
        DestCheck::SizeOnly,
        DestCheck::Update,
    ])?)
}

fn arb_totals(u: &mut Unstructured<'_>) -> arbitrary::Result<Totals> {
    Ok(Totals {
        entries: u.arbitrary()?,
        files: u.arbitrary()?,
        bytes: u.arbitrary()?,
        chunks: u.arbitrary()?,
        chunk_bytes: u.arbitrary()?,
        failed: u.arbitrary()?,
    })
}

fn arb_failures(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<(Vec<u8>, String)>> {
    let n = u.int_in_range(0..=3)?;
    (0..n).map(|_| Ok((arb_path(u)?, u.arbitrary()?))).collect()
}

/// A namespace request with plausible fields.
pub fn arb_request(u: &mut Unstructured<'_>) -> arbitrary::Result<Request> {
    Ok(match u.int_in_range(0..=9)? {
        0 => Request::List {
            path: arb_path(u)?,
            recursive: u.arbitrary()?,
            digests: u.arbitrary()?,
            selection: arb_selection(u)?,
            owners: *u.choose(&[ListOwners::No, ListOwners::Always, ListOwners::IfApplied])?,
            or_parent: u.arbitrary()?,
        },
        1 => Request::Stat { path: arb_path(u)? },
        2 => Request::Du {
            path: arb_path(u)?,
            selection: arb_selection(u)?,
        },
        3 => Request::Mkdir {
            path: arb_path(u)?,
            parents: u.arbitrary()?,
        },
        4 => Request::Remove {
            path: arb_path(u)?,
            recursive: u.arbitrary()?,
        },
        5 => Request::Rename {
            from: arb_path(u)?,
            to: arb_path(u)?,
        },
        6 => Request::Sum {
            path: arb_path(u)?,
            recursive: u.arbitrary()?,
            algo: *u.choose(&[SumAlgo::Xxh3, SumAlgo::Sha256, SumAlgo::Md5])?,
        },
        7 => Request::Delegate {
            path: arb_path(u)?,
            check_only: u.arbitrary()?,
        },
        8 => Request::Locate { path: arb_path(u)? },
        _ => Request::SendTo {
            path: arb_path(u)?,
            addr: u.arbitrary()?,
            ticket: u.arbitrary()?,
            dest: arb_path(u)?,
            streams: u.arbitrary()?,
            durable: u.arbitrary()?,
            no_link_at_dest: u.arbitrary()?,
            check: arb_check(u)?,
            meta: arb_meta(u)?,
            stall_timeout_ms: u.arbitrary()?,
            dest_key: u.arbitrary()?,
            selection: arb_selection(u)?,
        },
    })
}

/// Where a path is on a server's host: usually a few (device, inode) pairs, as a server
/// answers `Locate`; sometimes an unknown host or no ids at all.
fn arb_location(u: &mut Unstructured<'_>) -> arbitrary::Result<Location> {
    Ok(Location {
        host: if u.ratio(1, 8)? {
            [0; 16]
        } else {
            u.arbitrary()?
        },
        exists: u.arbitrary()?,
        ids: (0..u.int_in_range(0..=4)?)
            .map(|_| Ok((u.arbitrary()?, u.arbitrary()?)))
            .collect::<arbitrary::Result<_>>()?,
    })
}

fn arb_entry(u: &mut Unstructured<'_>) -> arbitrary::Result<NsEntry> {
    Ok(NsEntry {
        path: arb_path(u)?,
        kind: *u.choose(&[
            NsKind::File,
            NsKind::Dir,
            NsKind::Symlink,
            NsKind::Special,
            NsKind::Partial,
        ])?,
        size: u.arbitrary()?,
        mode: u.arbitrary()?,
        mtime_sec: u.arbitrary()?,
        mtime_nsec: u.arbitrary()?,
        target: Vec::<u8>::arbitrary(u)?,
        owner: if u.arbitrary()? {
            Some(NsOwner {
                uid: u.arbitrary()?,
                gid: u.arbitrary()?,
                user: arb_name(u)?,
                group: arb_name(u)?,
            })
        } else {
            None
        },
    })
}

/// A user or group name as a listing carries it (no NUL, at most 255 bytes; maybe empty).
fn arb_name(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<u8>> {
    let mut name = Vec::<u8>::arbitrary(u)?;
    name.retain(|&b| b != 0);
    name.truncate(255);
    Ok(name)
}

fn arb_meta(u: &mut Unstructured<'_>) -> arbitrary::Result<sprat_proto::MetaFlags> {
    Ok(sprat_proto::MetaFlags {
        hard_links: u.arbitrary()?,
        xattrs: u.arbitrary()?,
        acls: u.arbitrary()?,
    })
}

/// Any control message with plausible fields (the state machines do not look at most of
/// them; what matters is which message arrives when).
pub fn arb_message(u: &mut Unstructured<'_>) -> arbitrary::Result<Message> {
    let session = *u.choose(&[[7u8; 16], [8u8; 16]])?;
    Ok(match u.int_in_range(0..=21)? {
        0 => Message::ClientHello {
            version: if u.ratio(7, 8)? {
                PROTOCOL_VERSION
            } else {
                u.arbitrary()?
            },
            nonce: u.arbitrary()?,
            hint: u.arbitrary()?,
            mac: u.arbitrary()?,
        },
        1 => Message::ServerHello {
            version: if u.ratio(7, 8)? {
                PROTOCOL_VERSION
            } else {
                u.arbitrary()?
            },
            auth_required: u.arbitrary()?,
            nonce: u.arbitrary()?,
            mac: u.arbitrary()?,
        },
        2 => Message::ClientAuth {
            mac: u.arbitrary()?,
        },
        3 => Message::Error {
            code: *u.choose(&[
                ErrorCode::AuthFailed,
                ErrorCode::NotFound,
                ErrorCode::Busy,
                ErrorCode::UnknownSession,
                ErrorCode::Protocol,
                ErrorCode::EncryptionRequired,
                ErrorCode::VersionMismatch,
                ErrorCode::Other(999),
            ])?,
            text: u.arbitrary()?,
        },
        4 => {
            let push = u.arbitrary()?;
            Message::Open {
                session,
                op: if push {
                    let (source_is_dir, no_link_at_path): (bool, bool) = u.arbitrary()?;
                    Operation::Push {
                        source_is_dir,
                        durable: u.arbitrary()?,
                        discard: u.arbitrary()?,
                        owners: u.arbitrary()?,
                        numeric_ids: u.arbitrary()?,
                        keep_existing: u.arbitrary()?,
                        no_link_at_path,
                        // Only a single file's, without bit 6 (else not a valid `Open`).
                        or_parent: !source_is_dir && !no_link_at_path && u.arbitrary()?,
                        // Unknown (all zeros), or a directory on some kernel.
                        source: if u.arbitrary()? {
                            SourceId::default()
                        } else {
                            SourceId {
                                host: u.arbitrary()?,
                                dev: u.arbitrary()?,
                                ino: u.arbitrary()?,
                            }
                        },
                    }
                } else {
                    Operation::Pull {
                        check: arb_check(u)?,
                        meta: arb_meta(u)?,
                        into_dir: u.arbitrary()?,
                    }
                },
                path: arb_path(u)?,
                selection: if push {
                    Selection::default()
                } else {
                    arb_selection(u)?
                },
            }
        }
        5 => Message::Opened {
            root_is_dir: u.arbitrary()?,
            source: sprat_proto::SourceId {
                host: u.arbitrary()?,
                dev: u.arbitrary()?,
                ino: u.arbitrary()?,
            },
            one_stream: u.arbitrary()?,
            to_parent: u.arbitrary()?,
        },
        6 => Message::Join { session },
        7 => Message::Joined,
        8 => Message::BatchAck {
            seq: u.int_in_range(0..=8)?,
            files: u.arbitrary()?,
            bytes: u.arbitrary()?,
            kept: {
                let mut kept = sprat_proto::KeptEntries::default();
                for _ in 0..u.int_in_range(0..=3)? {
                    kept.mark(u.int_in_range(0..=600)?);
                }
                kept
            },
            failures: arb_failures(u)?,
            unlisted: u.int_in_range(0..=3)?,
        },
        9 => Message::End,
        10 => Message::EndAck,
        11 => Message::Commit(arb_totals(u)?),
        12 => Message::Done(RemoteStats {
            files: u.arbitrary()?,
            bytes: u.arbitrary()?,
            totals: arb_totals(u)?,
            not_kept: NotKept {
                setid: u.arbitrary()?,
                xattrs: u.arbitrary()?,
                owners: u.arbitrary()?,
                mtimes: u.arbitrary()?,
                devices: u.arbitrary()?,
            },
            specials: u.arbitrary()?,
            streams: u.arbitrary()?,
            ..RemoteStats::default()
        }),
        13 => Message::Request(arb_request(u)?),
        14 => {
            let n = u.int_in_range(0..=3)?;
            Message::Entries((0..n).map(|_| arb_entry(u)).collect::<Result<_, _>>()?)
        }
        15 => {
            let n = u.int_in_range(0..=3)?;
            Message::Sums(
                (0..n)
                    .map(|_| Ok((arb_path(u)?, Vec::<u8>::arbitrary(u)?)))
                    .collect::<Result<_, _>>()?,
            )
        }
        16 => Message::Usage(DiskUsage {
            files: u.arbitrary()?,
            dirs: u.arbitrary()?,
            symlinks: u.arbitrary()?,
            bytes: u.arbitrary()?,
            partial_files: u.arbitrary()?,
            partial_bytes: u.arbitrary()?,
            specials: u.arbitrary()?,
            unreadable: u.arbitrary()?,
        }),
        17 => Message::ReplyEnd,
        18 => Message::Ticket {
            ticket: u.arbitrary()?,
            expires_in_s: u.arbitrary()?,
        },
        19 => Message::Location(arb_location(u)?),
        20 => Message::Superseded(
            (0..u.int_in_range(0..=3)?)
                .map(|_| arb_path(u))
                .collect::<arbitrary::Result<_>>()?,
        ),
        // Raw bytes through the decoder, as a peer would send them.
        _ => {
            let k = u.int_in_range(kind::SERVER_HELLO..=kind::SUPERSEDED)?;
            let payload: &[u8] = u.arbitrary()?;
            match Message::decode(k, payload) {
                Ok(m) => m,
                Err(_) => Message::End,
            }
        }
    })
}
