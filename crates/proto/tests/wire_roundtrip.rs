//! Property tests of the wire format: every message a peer can send (control messages, the
//! handshake, the announcement of a stream, namespace requests and replies, batches) encodes
//! to bytes that decode to the same value, and decoding consumes exactly the encoding: a
//! byte more or less is refused, and a stream of frames is cut back into the same messages.
//! The fuzz targets in fuzz/ check the same invariants from the decoding side.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use sprat_proto::auth::{ClientHandshake, Credential, ServerHandshake, TokenKey};
use sprat_proto::namespace::{DiskUsage, ListOwners, NsEntry, NsKind, NsOwner, Request, SumAlgo};
use sprat_proto::{
    Batch, BatchView, ChunkOf, DestCheck, EntryKind, ErrorCode, FileMeta, FrameHeader, KeepRule,
    Message, MetaFlags, Operation, RemoteStats, Selection, SpecialKind, Totals, FRAME_HEADER_LEN,
    PROTOCOL_VERSION,
};

/// A valid relative path: empty (the root) or 1-4 names of 1-12 bytes, none `.` or `..`,
/// any byte but `/` and NUL.
fn rel_path() -> impl Strategy<Value = Vec<u8>> {
    let name = proptest::collection::vec(1u8..=255, 1..12)
        .prop_map(|n| {
            n.into_iter()
                .map(|b| if b == b'/' { b'_' } else { b })
                .collect::<Vec<u8>>()
        })
        .prop_filter("not . or ..", |n| n != b"." && n != b"..");
    prop_oneof![
        1 => Just(Vec::new()),
        6 => proptest::collection::vec(name, 1..4).prop_map(|parts| parts.join(&b'/')),
    ]
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn meta_flags() -> impl Strategy<Value = MetaFlags> {
    any::<(bool, bool, bool)>().prop_map(|(hard_links, xattrs, acls)| MetaFlags {
        hard_links,
        xattrs,
        acls,
    })
}

fn dest_check() -> impl Strategy<Value = DestCheck> {
    prop_oneof![
        Just(DestCheck::None),
        Just(DestCheck::QuickCheck),
        Just(DestCheck::IgnoreExisting),
        Just(DestCheck::SizeOnly),
        Just(DestCheck::Update),
        Just(DestCheck::Checksum),
    ]
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    prop_oneof![
        Just(ErrorCode::AuthFailed),
        Just(ErrorCode::NotFound),
        Just(ErrorCode::PermissionDenied),
        Just(ErrorCode::ReadOnly),
        Just(ErrorCode::BadRequest),
        Just(ErrorCode::Io),
        Just(ErrorCode::NoSpace),
        Just(ErrorCode::Protocol),
        Just(ErrorCode::UnknownSession),
        Just(ErrorCode::PeerUnavailable),
        Just(ErrorCode::Busy),
        Just(ErrorCode::EncryptionRequired),
        Just(ErrorCode::VersionMismatch),
        // Codes this build does not know travel as they are.
        (14u16..).prop_map(ErrorCode::Other),
        Just(ErrorCode::Other(0)),
    ]
}

/// Include/exclude rules and a `--files-from` list, as a pull, a listing or a third-party
/// copy sends them.
fn selection() -> impl Strategy<Value = Selection> {
    let pattern = proptest::collection::vec(1u8..=255, 1..16);
    let list =
        proptest::collection::vec(rel_path().prop_filter("not empty", |p| !p.is_empty()), 0..4);
    prop_oneof![
        2 => Just(Selection::default()),
        1 => (
            proptest::collection::vec((any::<bool>(), pattern), 0..4),
            proptest::option::of(list),
            proptest::option::of(proptest::collection::vec(b'a'..=b'z', 1..8))
        )
            .prop_map(|(rules, files_from, base)| Selection {
                rules,
                files_from,
                base
            }),
    ]
}

fn totals() -> impl Strategy<Value = Totals> {
    any::<[u64; 6]>().prop_map(|f| Totals {
        entries: f[0],
        files: f[1],
        bytes: f[2],
        chunks: f[3],
        chunk_bytes: f[4],
        failed: f[5],
    })
}

fn remote_stats() -> impl Strategy<Value = RemoteStats> {
    (any::<[u64; 12]>(), totals(), any::<[u64; 7]>()).prop_map(|(f, totals, n)| RemoteStats {
        files: f[0],
        dirs: f[1],
        symlinks: f[2],
        bytes: f[3],
        failures: f[4],
        read_busy_ns: f[5],
        network_busy_ns: f[6],
        write_busy_ns: f[7],
        syncs: f[8],
        up_to_date: f[9],
        attrs_fixed: f[10],
        bytes_not_sent: f[11],
        totals,
        not_kept: sprat_proto::NotKept {
            setid: n[0],
            xattrs: n[1],
            owners: n[2],
            mtimes: n[3],
            devices: n[4],
        },
        specials: n[5],
        streams: n[6],
    })
}

fn operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        (
            any::<(bool, bool, bool, bool, bool, bool)>(),
            any::<(bool, bool)>(),
            any::<([u8; 16], u64, u64)>()
        )
            .prop_map(
                |(
                    (source_is_dir, durable, discard, owners, numeric_ids, keep_existing),
                    (no_link_at_path, or_parent),
                    (host, dev, ino),
                )| {
                    Operation::Push {
                        source_is_dir,
                        durable,
                        discard,
                        owners,
                        numeric_ids,
                        keep_existing,
                        no_link_at_path,
                        source: sprat_proto::SourceId { host, dev, ino },
                        // Only a single file's push to `DST/NAME` that has no bit 6.
                        or_parent: or_parent && !source_is_dir && !no_link_at_path,
                    }
                }
            ),
        (dest_check(), meta_flags(), any::<bool>()).prop_map(|(check, meta, into_dir)| {
            Operation::Pull {
                check,
                meta,
                into_dir,
            }
        }),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (
            (rel_path(), any::<bool>()),
            any::<bool>(),
            any::<bool>(),
            selection(),
            prop_oneof![
                Just(ListOwners::No),
                Just(ListOwners::Always),
                Just(ListOwners::IfApplied)
            ]
        )
            .prop_map(
                |((path, or_parent), recursive, digests, selection, owners)| Request::List {
                    path,
                    recursive,
                    digests,
                    selection,
                    owners,
                    or_parent,
                }
            ),
        rel_path().prop_map(|path| Request::Stat { path }),
        (rel_path(), selection()).prop_map(|(path, selection)| Request::Du { path, selection }),
        (rel_path(), any::<bool>()).prop_map(|(path, parents)| Request::Mkdir { path, parents }),
        (rel_path(), any::<bool>())
            .prop_map(|(path, recursive)| Request::Remove { path, recursive }),
        (rel_path(), rel_path()).prop_map(|(from, to)| Request::Rename { from, to }),
        (
            rel_path(),
            any::<bool>(),
            prop_oneof![
                Just(SumAlgo::Xxh3),
                Just(SumAlgo::Sha256),
                Just(SumAlgo::Md5)
            ]
        )
            .prop_map(|(path, recursive, algo)| Request::Sum {
                path,
                recursive,
                algo
            }),
        (rel_path(), any::<bool>())
            .prop_map(|(path, check_only)| Request::Delegate { path, check_only }),
        rel_path().prop_map(|path| Request::Locate { path }),
        (
            rel_path(),
            "[a-z0-9.:\\[\\]-]{0,60}",
            any::<[u8; 32]>(),
            rel_path(),
            any::<u16>(),
            any::<(bool, bool)>(),
            dest_check(),
            (any::<u32>(), any::<[u8; 32]>(), selection(), meta_flags())
        )
            .prop_map(
                |(
                    path,
                    addr,
                    ticket,
                    dest,
                    streams,
                    (durable, no_link_at_dest),
                    check,
                    (stall_timeout_ms, dest_key, selection, meta),
                )| {
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
            ),
    ]
}

fn ns_entry() -> impl Strategy<Value = NsEntry> {
    (
        rel_path(),
        prop_oneof![
            Just(NsKind::File),
            Just(NsKind::Dir),
            Just(NsKind::Symlink),
            Just(NsKind::Special),
            Just(NsKind::Partial),
        ],
        any::<(u64, u32, i64, u32)>(),
        bytes(64),
        proptest::option::of((
            any::<(u32, u32)>(),
            proptest::collection::vec(1u8..=255, 0..40),
            proptest::collection::vec(1u8..=255, 0..40),
        )),
    )
        .prop_map(
            |(path, kind, (size, mode, mtime_sec, mtime_nsec), target, owner)| NsEntry {
                path,
                kind,
                size,
                mode,
                mtime_sec,
                mtime_nsec,
                target,
                owner: owner.map(|((uid, gid), user, group)| NsOwner {
                    uid,
                    gid,
                    user,
                    group,
                }),
            },
        )
}

/// Every control message, with the fields a peer may send.
fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        any::<([u8; 32], [u8; 32], [u8; 32])>().prop_map(|(nonce, hint, mac)| {
            Message::ClientHello {
                version: PROTOCOL_VERSION,
                nonce,
                hint,
                mac,
            }
        }),
        any::<(bool, [u8; 32], [u8; 32])>().prop_map(|(auth_required, nonce, mac)| {
            Message::ServerHello {
                version: PROTOCOL_VERSION,
                auth_required,
                nonce,
                mac,
            }
        }),
        any::<[u8; 32]>().prop_map(|mac| Message::ClientAuth { mac }),
        (error_code(), ".{0,40}").prop_map(|(code, text)| Message::Error { code, text }),
        (any::<[u8; 16]>(), operation(), rel_path(), selection()).prop_map(
            |(session, op, path, selection)| Message::Open {
                session,
                // A push's source is selected by the client: its `Open` selects everything.
                selection: if matches!(op, Operation::Push { .. }) {
                    Selection::default()
                } else {
                    selection
                },
                op,
                path,
            }
        ),
        (any::<(bool, bool, bool)>(), any::<([u8; 16], u64, u64)>()).prop_map(
            |((root_is_dir, one_stream, to_parent), (host, dev, ino))| Message::Opened {
                root_is_dir,
                source: sprat_proto::SourceId { host, dev, ino },
                one_stream,
                to_parent,
            }
        ),
        any::<[u8; 16]>().prop_map(|session| Message::Join { session }),
        Just(Message::Joined),
        (
            any::<(u64, u32, u64)>(),
            proptest::collection::vec((bytes(40), ".{0,20}"), 0..6),
            any::<u16>(),
            proptest::collection::vec(0usize..70_000, 0..5)
        )
            .prop_map(|((seq, files, bytes), failures, unlisted, kept_at)| {
                Message::BatchAck {
                    seq,
                    files,
                    bytes,
                    kept: {
                        let mut kept = sprat_proto::KeptEntries::default();
                        kept_at.iter().for_each(|&i| kept.mark(i));
                        kept
                    },
                    failures,
                    unlisted: u32::from(unlisted),
                }
            }),
        Just(Message::End),
        Just(Message::EndAck),
        totals().prop_map(Message::Commit),
        remote_stats().prop_map(Message::Done),
        request().prop_map(Message::Request),
        proptest::collection::vec(ns_entry(), 0..8).prop_map(Message::Entries),
        proptest::collection::vec((rel_path(), bytes(65)), 0..8).prop_map(Message::Sums),
        any::<[u64; 8]>().prop_map(|f| Message::Usage(DiskUsage {
            files: f[0],
            dirs: f[1],
            symlinks: f[2],
            bytes: f[3],
            partial_files: f[4],
            partial_bytes: f[5],
            specials: f[6],
            unreadable: f[7],
        })),
        Just(Message::ReplyEnd),
        any::<([u8; 32], u32)>().prop_map(|(ticket, expires_in_s)| Message::Ticket {
            ticket,
            expires_in_s
        }),
        any::<[u64; 4]>().prop_map(|f| Message::Progress(sprat_proto::TransferProgress {
            files: f[0],
            bytes: f[1],
            skipped_files: f[2],
            skipped_bytes: f[3],
        })),
        (
            any::<[u8; 16]>(),
            any::<bool>(),
            proptest::collection::vec(any::<(u64, u64)>(), 0..40)
        )
            .prop_map(|(host, exists, ids)| Message::Location(
                sprat_proto::namespace::Location { host, exists, ids }
            )),
        proptest::collection::vec("[a-z]{1,20}(/[a-z]{1,20}){0,3}", 0..20).prop_map(|paths| {
            Message::Superseded(paths.into_iter().map(String::into_bytes).collect())
        }),
        any::<bool>().prop_map(|parent| Message::ListedAt { parent }),
    ]
}

/// Splits one encoded frame into its checked header and payload.
fn split(frame: &[u8]) -> (FrameHeader, &[u8]) {
    let header = FrameHeader::decode(&frame[..FRAME_HEADER_LEN].try_into().unwrap()).unwrap();
    (header, &frame[FRAME_HEADER_LEN..])
}

/// One batch entry as a sender pushes it.
#[derive(Debug, Clone)]
enum Item {
    File(Vec<u8>, FileMeta, Vec<u8>, u128, Option<KeepRule>),
    Dir(Vec<u8>, FileMeta),
    Symlink(Vec<u8>, FileMeta, Vec<u8>),
    UserName(u32, Vec<u8>),
    GroupName(u32, Vec<u8>),
    Chunk(Vec<u8>, FileMeta, ChunkOf, u64, Vec<u8>, u128),
    Failed(Vec<u8>, String),
    Attrs(Vec<u8>, FileMeta, u64),
    HardLink(Vec<u8>, Vec<u8>),
    Xattrs(Vec<u8>, u8, Pairs),
    Special(Vec<u8>, FileMeta, SpecialKind, (u32, u32)),
}

/// Extended attributes as (name, value) pairs.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Extended attribute names of every scope, with values of up to 100 bytes.
fn xattr_list() -> impl Strategy<Value = (u8, Pairs)> {
    let name = prop_oneof![
        "user\\.[a-z0-9_.]{1,20}",
        "trusted\\.[a-z]{1,10}",
        "security\\.[a-z]{1,10}",
        Just("system.posix_acl_access".to_string()),
        Just("system.posix_acl_default".to_string()),
    ];
    proptest::collection::vec((name, bytes(100)), 0..6).prop_map(|list| {
        let list: Pairs = list.into_iter().map(|(n, v)| (n.into_bytes(), v)).collect();
        let scope = list
            .iter()
            .fold(sprat_proto::xattr_scope::USER, |s, (n, _)| {
                s | sprat_proto::xattr_scope::of(n)
            });
        (scope, list)
    })
}

fn meta() -> impl Strategy<Value = FileMeta> {
    (
        0u32..=0o7777,
        any::<i64>(),
        0u32..1_000_000_000,
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(|(mode, mtime_sec, mtime_nsec, uid, gid)| FileMeta {
            mode,
            mtime_sec,
            mtime_nsec,
            uid,
            gid,
        })
}

/// No rule (an ordinary file) or one of the rules of a file sent before the listing.
fn keep_rule() -> impl Strategy<Value = Option<KeepRule>> {
    prop_oneof![
        Just(None),
        Just(Some(KeepRule::SameSizeAndTime)),
        Just(Some(KeepRule::Present)),
    ]
}

fn item() -> impl Strategy<Value = Item> {
    let target = proptest::collection::vec(1u8..=255, 1..30);
    prop_oneof![
        (rel_path(), meta(), bytes(200), any::<u128>(), keep_rule())
            .prop_map(|(p, m, d, h, k)| Item::File(p, m, d, h, k)),
        (rel_path(), meta()).prop_map(|(p, m)| Item::Dir(p, m)),
        (rel_path(), meta(), target).prop_map(|(p, m, t)| Item::Symlink(p, m, t)),
        (any::<u32>(), proptest::collection::vec(1u8..=255, 1..32))
            .prop_map(|(id, n)| Item::UserName(id, n)),
        (any::<u32>(), proptest::collection::vec(1u8..=255, 1..32))
            .prop_map(|(id, n)| Item::GroupName(id, n)),
        (
            rel_path(),
            meta(),
            proptest::collection::vec(any::<u8>(), 1..200),
            any::<u64>(),
            any::<u128>(),
            (any::<bool>(), keep_rule())
        )
            .prop_map(|(p, m, d, slack, h, (whole, unless))| {
                // offset + len <= file size, without overflow.
                let len = d.len() as u64;
                let offset = slack % (u64::MAX - len);
                let file_size = (offset + len).saturating_add(slack % 7);
                let of = ChunkOf {
                    file_size,
                    version: slack ^ h as u64,
                    whole,
                    // A rule travels with a file sent whole only.
                    unless: unless.filter(|_| whole),
                };
                Item::Chunk(p, m, of, offset, d, h)
            }),
        (rel_path(), ".{0,30}").prop_map(|(p, t)| Item::Failed(p, t)),
        (rel_path(), meta(), any::<u64>()).prop_map(|(p, m, s)| Item::Attrs(p, m, s)),
        (rel_path(), rel_path())
            .prop_filter("a link of neither the root nor itself", |(p, t)| {
                !p.is_empty() && !t.is_empty() && p != t
            })
            .prop_map(|(p, t)| Item::HardLink(p, t)),
        (rel_path(), xattr_list()).prop_map(|(p, (scope, list))| Item::Xattrs(p, scope, list)),
        (rel_path(), meta(), 0u8..4, any::<(u32, u32)>()).prop_map(|(p, m, k, number)| {
            // A FIFO or a socket has no device number.
            match k {
                0 => Item::Special(p, m, SpecialKind::Fifo, (0, 0)),
                1 => Item::Special(p, m, SpecialKind::Socket, (0, 0)),
                2 => Item::Special(p, m, SpecialKind::CharDevice, number),
                _ => Item::Special(p, m, SpecialKind::BlockDevice, number),
            }
        }),
    ]
}

fn build(seq: u64, items: &[Item]) -> Batch {
    let mut b = Batch::new(seq, 0);
    for item in items {
        match item {
            Item::File(p, m, d, h, k) => {
                b.data.extend_from_slice(d);
                b.push_file_unless(p, m, d.len() as u64, *h, *k);
            }
            Item::Dir(p, m) => b.push_dir(p, m),
            Item::Symlink(p, m, t) => b.push_symlink(p, m, t),
            Item::UserName(id, n) => b.push_user_name(*id, n),
            Item::GroupName(id, n) => b.push_group_name(*id, n),
            Item::Chunk(p, m, of, offset, d, h) => {
                b.data.extend_from_slice(d);
                b.push_chunk(p, m, *of, *offset, d.len() as u64, *h);
            }
            Item::Failed(p, t) => b.push_failed(p, t),
            Item::Attrs(p, m, s) => b.push_attrs(p, m, *s),
            Item::HardLink(p, t) => b.push_hard_link(p, t),
            Item::Xattrs(p, scope, list) => assert!(b.push_xattrs(p, *scope, list)),
            Item::Special(p, m, k, number) => b.push_special(p, m, *k, *number),
        }
    }
    b
}

/// The entry a decoder should return for `item`.
fn expected(item: &Item) -> (Vec<u8>, String) {
    let (path, kind) = match item {
        Item::File(p, m, d, h, k) => (p, format!("file {m:?} {h} {d:?} {k:?}")),
        Item::Dir(p, m) => (p, format!("dir {m:?}")),
        Item::Symlink(p, m, t) => (
            p,
            format!(
                "symlink {} {} {} {} {t:?}",
                m.mtime_sec, m.mtime_nsec, m.uid, m.gid
            ),
        ),
        Item::UserName(id, n) => return (Vec::new(), format!("user {id} {n:?}")),
        Item::GroupName(id, n) => return (Vec::new(), format!("group {id} {n:?}")),
        Item::Chunk(p, m, of, offset, d, h) => {
            let ChunkOf {
                file_size,
                version,
                whole,
                unless,
            } = of;
            (
                p,
                format!("chunk {m:?} {file_size} {version} {offset} {h} {d:?} {whole} {unless:?}"),
            )
        }
        Item::Failed(p, t) => (p, format!("failed {:?}", t.as_bytes())),
        Item::Attrs(p, m, s) => (p, format!("attrs {m:?} {s}")),
        Item::HardLink(p, t) => (p, format!("hard link {t:?}")),
        Item::Xattrs(p, scope, list) => (p, format!("xattrs {scope} {list:?}")),
        Item::Special(p, m, k, (major, minor)) => {
            (p, format!("special {m:?} {k:?} {major} {minor}"))
        }
    };
    (path.clone(), kind)
}

fn described(kind: &EntryKind<'_>) -> String {
    match kind {
        EntryKind::File {
            meta,
            hash,
            data,
            unless,
        } => format!("file {meta:?} {hash} {data:?} {unless:?}"),
        EntryKind::Dir { meta } => format!("dir {meta:?}"),
        EntryKind::Symlink {
            mtime_sec,
            mtime_nsec,
            uid,
            gid,
            target,
        } => format!("symlink {mtime_sec} {mtime_nsec} {uid} {gid} {target:?}"),
        EntryKind::UserName { id, name } => format!("user {id} {name:?}"),
        EntryKind::GroupName { id, name } => format!("group {id} {name:?}"),
        EntryKind::Chunk {
            meta,
            file_size,
            version,
            offset,
            hash,
            data,
            whole,
            unless,
        } => format!(
            "chunk {meta:?} {file_size} {version} {offset} {hash} {data:?} {whole} {unless:?}"
        ),
        EntryKind::Failed { text } => format!("failed {text:?}"),
        EntryKind::Attrs { meta, size } => format!("attrs {meta:?} {size}"),
        EntryKind::HardLink { target } => format!("hard link {:?}", target.to_vec()),
        EntryKind::Xattrs { scope, list } => {
            let list: Pairs = list.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
            format!("xattrs {scope} {list:?}")
        }
        EntryKind::Special {
            meta,
            kind,
            major,
            minor,
        } => format!("special {meta:?} {kind:?} {major} {minor}"),
    }
}

fn payload(b: &Batch) -> Vec<u8> {
    let mut out = b.frame_prefix()[FRAME_HEADER_LEN..].to_vec();
    out.extend_from_slice(&b.header);
    out.extend_from_slice(&b.data);
    out
}

proptest! {
    #[test]
    fn every_control_message_roundtrips_and_is_consumed_exactly(
        m in message(),
        cut in any::<prop::sample::Index>(),
    ) {
        let frame = m.encode();
        let (header, body) = split(&frame);
        prop_assert_eq!(header.len as usize, body.len());
        prop_assert_eq!(Message::decode(header.kind, body), Ok(m.clone()));
        // A byte more is refused; so is any shorter payload.
        let mut longer = body.to_vec();
        longer.push(0);
        prop_assert!(Message::decode(header.kind, &longer).is_err());
        if !body.is_empty() {
            let short = &body[..cut.index(body.len())];
            prop_assert!(
                Message::decode(header.kind, short).is_err(),
                "{} decoded from {} of its {} bytes", m.name(), short.len(), body.len()
            );
        }
    }

    #[test]
    fn a_stream_of_frames_is_cut_back_into_the_same_messages(
        msgs in proptest::collection::vec(message(), 1..6),
    ) {
        let stream: Vec<u8> = msgs.iter().flat_map(|m| m.encode()).collect();
        let mut rest = &stream[..];
        let mut back = Vec::new();
        while !rest.is_empty() {
            let header = FrameHeader::decode(&rest[..FRAME_HEADER_LEN].try_into().unwrap()).unwrap();
            let end = FRAME_HEADER_LEN + header.len as usize;
            back.push(Message::decode(header.kind, &rest[FRAME_HEADER_LEN..end]).unwrap());
            rest = &rest[end..];
        }
        prop_assert_eq!(back, msgs);
    }

    #[test]
    fn a_hello_of_another_version_decodes_to_its_version(
        version in any::<u16>().prop_filter("another version", |v| *v != PROTOCOL_VERSION),
        nonce in any::<[u8; 32]>(),
        server in any::<bool>(),
    ) {
        let m = if server {
            Message::ServerHello { version, auth_required: true, nonce, mac: nonce }
        } else {
            Message::ClientHello { version, nonce, hint: nonce, mac: nonce }
        };
        let frame = m.encode();
        let (header, body) = split(&frame);
        // Only the version is read: the rest of another version's hello is not its business.
        match Message::decode(header.kind, body).unwrap() {
            Message::ServerHello { version: v, .. } | Message::ClientHello { version: v, .. } => {
                prop_assert_eq!(v, version)
            }
            other => prop_assert!(false, "decoded as {other:?}"),
        }
    }

    #[test]
    fn the_handshake_authenticates_exactly_the_holders_of_a_key(
        server_token in proptest::option::of(0usize..3),
        tickets in proptest::collection::vec(0usize..3, 0..3),
        client_token in proptest::option::of(0usize..3),
        server_nonce in any::<[u8; 32]>(),
        client_nonce in any::<[u8; 32]>(),
    ) {
        const TOKENS: [&[u8]; 3] = [b"token", b"ticket", b"other"];
        let key = |i: usize| TokenKey::from_token(TOKENS[i]);
        let server = ServerHandshake::new(
            server_token.map(key),
            tickets.iter().map(|&t| key(t)).collect(),
            server_nonce,
        );
        let (client, hello) = ClientHandshake::new(client_token.map(key), client_nonce);
        // Each message crosses the wire.
        let wire = |m: Message| {
            let frame = m.encode();
            let (header, body) = split(&frame);
            Message::decode(header.kind, body).unwrap()
        };
        let answered = server.on_message(wire(hello));
        let expected = match (server_token, client_token) {
            (None, None) => Some(Credential::Open),
            (Some(s), Some(c)) if s == c => Some(Credential::Token(0)),
            (Some(_), Some(c)) => tickets.iter().position(|&t| t == c).map(Credential::Ticket),
            _ => None,
        };
        let credential = match answered {
            Ok((waiting, reply)) => match client.on_message(wire(reply)) {
                Ok(proof) => waiting.on_message(wire(proof)).ok(),
                Err(_) => None,
            },
            Err(_) => None,
        };
        prop_assert_eq!(credential, expected);
    }

    #[test]
    fn every_batch_roundtrips_and_is_consumed_exactly(
        seq in any::<u64>(),
        items in proptest::collection::vec(item(), 0..12),
        cut in any::<prop::sample::Index>(),
    ) {
        let b = build(seq, &items);
        let bytes = payload(&b);
        prop_assert_eq!(b.frame_prefix()[..4].to_vec(), (bytes.len() as u32).to_le_bytes().to_vec());
        let view = BatchView::decode(&bytes).unwrap();
        prop_assert_eq!(view.seq, seq);
        let got: Vec<(Vec<u8>, String)> =
            view.entries.iter().map(|e| (e.path.to_vec(), described(&e.kind))).collect();
        let want: Vec<(Vec<u8>, String)> = items.iter().map(expected).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(view.totals(), b.totals);
        prop_assert_eq!(&b.view().unwrap().entries, &view.entries);
        let mut longer = bytes.clone();
        longer.push(0);
        prop_assert!(BatchView::decode(&longer).is_err());
        let short = &bytes[..cut.index(bytes.len())];
        prop_assert!(BatchView::decode(short).is_err(), "decoded from {} of {} bytes", short.len(), bytes.len());
    }
}
