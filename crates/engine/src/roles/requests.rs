//! The server's answers to namespace requests: one request in, one (possibly streamed) reply
//! out, however large the tree. Listings and checksums are sent in frames of about 512 KiB as
//! they are produced, so memory stays bounded. Every path is placed in an export the
//! connection reaches first (see [`super::exports`]); the server's root above named exports
//! can be listed, described and counted, nothing else.

use super::exports::{Export, Exports, Place, Reach};
use super::push::{push_counting, PushInput};
use crate::config::{Selection, TransferOptions};
use crate::error::{code_for, TransferError};
use crate::measurement::progress::Progress;
use crate::net::Conn;
use crate::net::{Credentials, Fingerprint, Trust};
use crate::pipeline::digest;
use crate::pipeline::skip::{digest_bytes, PartialEntry};
use sprat_proto::auth::TokenKey;
use sprat_proto::namespace::{
    entry_wire_size, DiskUsage, ListOwners, Location, NsEntry, NsKind, NsOwner, PathDigest,
    Request, SumAlgo, REPLY_FRAME_TARGET,
};
use sprat_proto::{ErrorCode, Message, RemoteStats, TransferProgress};
use sprat_store::namespace::{self as ns, Digest};
use sprat_store::owner::NameCache;
use sprat_store::partial;
use sprat_store::{display_path, EntryType, Root, ScanEntry, StoreError};
use std::time::Duration;

/// A one-time ticket and how long it stays valid unused.
pub(crate) type IssuedTicket = ([u8; 32], Duration);

/// What answering needs from the server.
pub(crate) struct Context<'a> {
    pub exports: &'a Exports,
    /// The exports the connection's credential reaches.
    pub reach: &'a Reach,
    pub options: &'a TransferOptions,
    /// Issues a one-time ticket for pushing to a path (as the client named it) in the export
    /// of that index; returns it and its lifetime, or why not (the server holds too many).
    pub issue_ticket: &'a dyn Fn(Vec<u8>, usize) -> Result<IssuedTicket, (ErrorCode, String)>,
    /// Whether this server pushes to another one when a client asks (`SendTo`).
    pub third_party: bool,
    /// Takes between 1 and the given number of the server's places for the streams of a
    /// third-party copy (held until the guard is dropped); `None` when none is free.
    pub places: &'a dyn Fn(usize) -> Option<crate::session::admission::Place>,
}

impl Context<'_> {
    fn place(&self, path: &[u8]) -> Result<Place<'_>, Refusal> {
        Ok(self.exports.place(self.reach, path)?)
    }

    /// The export `path` lies in and the path below its root; `what` names the operation
    /// refused on the server's root.
    fn in_export(&self, path: &[u8], what: &str) -> Result<(&Export, usize, Vec<u8>), Refusal> {
        Ok(self.exports.place_in_export(self.reach, path, what)?)
    }

    /// [`Context::in_export`] for a change, refused in a read-only export.
    fn writable(&self, path: &[u8], what: &str) -> Result<(&Export, usize, Vec<u8>), Refusal> {
        let (export, index, rel) = self.in_export(path, what)?;
        export.writable("change", &rel)?;
        Ok((export, index, rel))
    }
}

/// Failure of a request, already in the form sent to the client.
struct Refusal(ErrorCode, String);

impl From<(ErrorCode, String)> for Refusal {
    fn from((code, text): (ErrorCode, String)) -> Refusal {
        Refusal(code, text)
    }
}

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Refusal {
        Refusal(code_for(&e), e.to_string())
    }
}

impl From<TransferError> for Refusal {
    fn from(e: TransferError) -> Refusal {
        let code = match &e {
            TransferError::Remote { code, .. } => *code,
            TransferError::Auth { .. } => ErrorCode::AuthFailed,
            // This server's own transfer to another one (`SendTo`) lost it: worth retrying.
            e if e.is_retryable() => ErrorCode::PeerUnavailable,
            _ => ErrorCode::Io,
        };
        Refusal(code, e.to_string())
    }
}

/// Answers one request. Errors in sending end the connection; failures of the operation are
/// reported to the client as `Error`.
pub(crate) fn answer(
    ctx: &Context<'_>,
    conn: &mut Conn,
    req: Request,
) -> Result<(), TransferError> {
    let audit = change_of(&req);
    let outcome = execute(ctx, conn, req);
    // What changes the tree is logged whatever the verbosity, with who asked and whether it
    // was done (reads are not: `-v` shows them).
    if let Some(what) = audit {
        let peer = &conn.peer;
        match &outcome {
            Ok(()) => eprintln!("sprat serve: {peer}: {what}"),
            Err(Refusal(_, text)) => eprintln!(
                "sprat serve: {peer}: {what}: refused: {}",
                crate::text::printable(text)
            ),
        }
    }
    match outcome {
        Ok(()) => Ok(()),
        Err(Refusal(code, text)) => conn.send(&Message::Error { code, text }),
    }
}

/// `e`, the failure to find `rel`, or what it is when an interrupted copy left its partial
/// file there (which has another name until it is complete).
fn not_there_yet(root: &Root, rel: &[u8], e: StoreError) -> Refusal {
    if e.errno() != Some(rustix::io::Errno::NOENT) {
        return e.into();
    }
    match partial::describe_file(root, rel) {
        Some((id, present)) => Refusal(
            ErrorCode::NotFound,
            format!(
                "'{}' is not there yet: an interrupted copy left {} of its {} bytes, which \
                 the same copy run again completes",
                display_path(rel),
                present.bytes(),
                id.size
            ),
        ),
        None => e.into(),
    }
}

/// A line for the server's log for a request that changes the tree (`None` for reads).
fn change_of(req: &Request) -> Option<String> {
    let shown = |p: &[u8]| crate::text::printable(&display_path(p)).into_owned();
    Some(match req {
        Request::Mkdir { path, parents } => {
            format!(
                "mkdir{} '{}'",
                if *parents { " -p" } else { "" },
                shown(path)
            )
        }
        Request::Remove { path, recursive } => {
            format!(
                "rm{} '{}'",
                if *recursive { " -r" } else { "" },
                shown(path)
            )
        }
        Request::Rename { from, to } => format!("mv '{}' '{}'", shown(from), shown(to)),
        Request::SendTo {
            path, addr, dest, ..
        } => format!(
            "copy '{}' to {}/{}",
            shown(path),
            crate::text::printable(addr),
            shown(dest)
        ),
        _ => return None,
    })
}

/// A listing's entry for `e`, with its owner and group (and their names here) when `names`;
/// an entry that could not be examined is a [`NsKind::Failed`] one saying why.
fn ns_entry(e: ScanEntry, names: Option<&mut NameCache>) -> NsEntry {
    if let Some(error) = e.error {
        return NsEntry::failed(e.path, error);
    }
    let owner = names.map(|names| NsOwner {
        uid: e.attrs.uid,
        gid: e.attrs.gid,
        user: names.user(e.attrs.uid).unwrap_or_default().to_vec(),
        group: names.group(e.attrs.gid).unwrap_or_default().to_vec(),
    });
    // A special file's type and device number travel in its mode and size.
    let (mode, size) = match e.special {
        Some(special) => crate::pipeline::special::listed_fields(special, e.attrs.mode),
        None => (e.attrs.mode, e.size),
    };
    NsEntry {
        owner,
        kind: match e.kind {
            EntryType::File => NsKind::File,
            EntryType::Dir => NsKind::Dir,
            EntryType::Symlink => NsKind::Symlink,
            EntryType::Special => NsKind::Special,
        },
        size,
        mode,
        mtime_sec: e.attrs.mtime_sec,
        mtime_nsec: e.attrs.mtime_nsec,
        target: e.link_target.unwrap_or_default(),
        path: e.path,
    }
}

/// Sends items in frames of about [`REPLY_FRAME_TARGET`] bytes.
struct Batcher<T> {
    items: Vec<T>,
    bytes: usize,
    wrap: fn(Vec<T>) -> Message,
}

impl<T> Batcher<T> {
    fn new(wrap: fn(Vec<T>) -> Message) -> Batcher<T> {
        Batcher {
            items: Vec::new(),
            bytes: 0,
            wrap,
        }
    }
    fn push(&mut self, conn: &mut Conn, item: T, size: usize) -> Result<(), Refusal> {
        self.items.push(item);
        self.bytes += size;
        if self.bytes >= REPLY_FRAME_TARGET || self.items.len() >= 16384 {
            self.flush(conn)?;
        }
        Ok(())
    }
    fn flush(&mut self, conn: &mut Conn) -> Result<(), Refusal> {
        if !self.items.is_empty() {
            let msg = (self.wrap)(std::mem::take(&mut self.items));
            self.bytes = 0;
            conn.send(&msg)?;
        }
        Ok(())
    }
}

/// A file of a listing with digests: its path below the root, and in the listing.
type Listed = (Vec<u8>, Vec<u8>);

fn full_path(l: &Listed) -> &[u8] {
    &l.0
}

/// Adds the digest of a listed file (if it could be read) to the reply.
fn push_digest(
    sums: &mut Batcher<PathDigest>,
    conn: &mut Conn,
    ((_, rel), digest): digest::Digested<Listed>,
) -> Result<(), Refusal> {
    match digest {
        Some(d) => {
            let size = rel.len() + 20;
            sums.push(conn, (rel, digest_bytes(d)), size)
        }
        None => Ok(()),
    }
}

/// `List`: the entries at `path`, and with `digests` the XXH3-128 of every regular file
/// (computed by a pool of threads while the walk goes on, sent as `Sums` as they are done,
/// among the `Entries`; a file that cannot be read gets none).
/// With `names`, each entry carries its owner and group.
fn list(
    ctx: &Context<'_>,
    conn: &mut Conn,
    (root, path): (&Root, &[u8]),
    recursive: bool,
    digests: bool,
    selection: &Selection,
    mut names: Option<NameCache>,
) -> Result<(), Refusal> {
    let mut entries = Batcher::new(Message::Entries);
    let mut sums = Batcher::new(Message::Sums);
    let threads = if digests {
        ctx.options.read_threads.max(1)
    } else {
        0
    };
    let failed = |t: String| StoreError::other("list", path, &t);
    let mut logs = Vec::new();
    // A single file's partial file lies beside it (or instead of it), outside the walk.
    let beside = partial::describe_file(root, path);
    let mut listed_a_dir = false;
    digest::with_pool(root, threads, full_path, |mut pool| {
        // A directory that cannot be listed is an entry saying so, and the walk goes on.
        let walked = ns::walk_reporting(root, path, recursive, selection, |e| {
            if e.path.is_empty() && e.kind == EntryType::Dir {
                listed_a_dir = true;
            }
            if e.kind == EntryType::File && partial::is_log_path(&e.path) {
                logs.push(e.path.clone());
            }
            if digests && e.kind == EntryType::File {
                pool.submit((sprat_store::join(path, &e.path), e.path.clone()));
            }
            let e = ns_entry(e, names.as_mut());
            let size = entry_wire_size(&e);
            entries
                .push(conn, e, size)
                .map_err(|Refusal(_, t)| failed(t))?;
            for done in pool.ready() {
                push_digest(&mut sums, conn, done).map_err(|Refusal(_, t)| failed(t))?;
            }
            Ok(())
        });
        match walked {
            // No file, but what an interrupted copy of it left.
            Err(e) if beside.is_some() && e.errno() == Some(rustix::io::Errno::NOENT) => {}
            other => other?,
        }
        if let Some((id, present)) = beside.filter(|_| !listed_a_dir) {
            let e = PartialEntry::told(id, present).to_listed(Vec::new());
            let size = entry_wire_size(&e);
            entries.push(conn, e, size)?;
        }
        // Partial files an interrupted transfer left, for a copy to resume.
        if !logs.is_empty() {
            let listed = root.sub_root(path)?;
            for log in &logs {
                if let Some((file, id, present)) = partial::describe(&listed, log) {
                    let e = PartialEntry::told(id, present).to_listed(file);
                    let size = entry_wire_size(&e);
                    entries.push(conn, e, size)?;
                }
            }
        }
        entries.flush(conn)?;
        for done in pool.finish() {
            push_digest(&mut sums, conn, done)?;
        }
        sums.flush(conn)
    })?;
    conn.send(&Message::ReplyEnd)?;
    Ok(())
}

/// The server's root above named exports, as listed and described: a directory that cannot
/// be written.
fn server_root_entry() -> NsEntry {
    NsEntry {
        kind: NsKind::Dir,
        size: 0,
        mode: 0o555,
        mtime_sec: 0,
        mtime_nsec: 0,
        target: Vec::new(),
        path: Vec::new(),
        owner: None,
    }
}

/// `List` of the server's root above named exports: the root itself, then each export the
/// connection reaches as a directory named after it (and, `recursive`, everything below it,
/// paths beginning with the export's name).
fn list_exports(
    ctx: &Context<'_>,
    conn: &mut Conn,
    recursive: bool,
    mut names: Option<NameCache>,
) -> Result<(), Refusal> {
    let mut entries = Batcher::new(Message::Entries);
    let root = server_root_entry();
    let size = entry_wire_size(&root);
    entries.push(conn, root, size)?;
    for export in ctx.exports.reachable(ctx.reach) {
        let name = export.name.as_bytes();
        if !recursive {
            let mut e = ns_entry(sprat_store::stat_path(&export.root, b"")?, names.as_mut());
            e.path = name.to_vec();
            let size = entry_wire_size(&e);
            entries.push(conn, e, size)?;
            continue;
        }
        let failed = |t: String| StoreError::other("list", name, &t);
        ns::walk(&export.root, b"", true, |e| {
            let mut e = ns_entry(e, names.as_mut());
            e.path = sprat_store::join(name, &e.path);
            let size = entry_wire_size(&e);
            entries
                .push(conn, e, size)
                .map_err(|Refusal(_, t)| failed(t))
        })?;
    }
    entries.flush(conn)?;
    conn.send(&Message::ReplyEnd)?;
    Ok(())
}

/// A selection a client sent, compiled; a bad pattern is its bad request.
fn compiled(selection: sprat_proto::Selection) -> Result<Selection, Refusal> {
    crate::config::selection_from_wire(selection)
        .map_err(|e| Refusal(ErrorCode::BadRequest, e.to_string()))
}

/// Refuses a selection for the server's root above named exports: rules are anchored at a
/// transfer's root, which is inside one export.
fn within_an_export(selection: &Selection) -> Result<(), Refusal> {
    if selection.is_all() {
        return Ok(());
    }
    Err(Refusal(
        ErrorCode::BadRequest,
        "include/exclude rules and --files-from apply within one export, not to the \
         server's root"
            .into(),
    ))
}

fn execute(ctx: &Context<'_>, conn: &mut Conn, req: Request) -> Result<(), Refusal> {
    match req {
        Request::List {
            path,
            recursive,
            digests,
            selection,
            owners,
            or_parent,
        } => {
            // A single file's destination left to this server: `DST/NAME` if DST is a
            // directory, else DST, said first (see `Request::List`'s `or_parent`).
            let path = match or_parent {
                false => path,
                true => {
                    let (path, parent) = ctx.exports.path_or_parent(ctx.reach, path, "list")?;
                    conn.send(&Message::ListedAt { parent })?;
                    path
                }
            };
            let selection = compiled(selection)?;
            let names = match owners {
                ListOwners::No => None,
                ListOwners::Always => Some(NameCache::default()),
                // Only where a push's owners would be set, so that a pushing client
                // compares them only then.
                ListOwners::IfApplied => (ctx.options.owners
                    && sprat_store::owner::running_as_root())
                .then(NameCache::default),
            };
            match ctx.place(&path)? {
                Place::ServerRoot => {
                    within_an_export(&selection)?;
                    list_exports(ctx, conn, recursive, names)?
                }
                Place::In { export, rel, .. } => {
                    // An export that never applies pushed owners lists none "if applied".
                    let names = names.filter(|_| export.owners || owners != ListOwners::IfApplied);
                    list(
                        ctx,
                        conn,
                        (&export.root, &rel),
                        recursive,
                        digests,
                        &selection,
                        names,
                    )?
                }
            }
        }
        Request::Stat { path } => {
            let mut e = match ctx.place(&path)? {
                Place::ServerRoot => server_root_entry(),
                Place::In { export, rel, .. } => {
                    let mut names = NameCache::default();
                    let stat = sprat_store::stat_path(&export.root, &rel)
                        .map_err(|e| not_there_yet(&export.root, &rel, e))?;
                    ns_entry(stat, Some(&mut names))
                }
            };
            e.path.clear();
            conn.send(&Message::Entries(vec![e]))?;
            conn.send(&Message::ReplyEnd)?;
        }
        Request::Du { path, selection } => {
            let selection = compiled(selection)?;
            let mut total = DiskUsage::default();
            let mut add = |root: &Root, rel: &[u8]| -> Result<(), Refusal> {
                let u = ns::usage(root, rel, &selection)?;
                total.files += u.files;
                total.dirs += u.dirs;
                total.symlinks += u.symlinks;
                total.bytes += u.bytes;
                total.partial_files += u.partial_files;
                total.partial_bytes += u.partial_bytes;
                total.specials += u.specials;
                total.unreadable += u.unreadable;
                Ok(())
            };
            match ctx.place(&path)? {
                Place::ServerRoot => {
                    within_an_export(&selection)?;
                    for export in ctx.exports.reachable(ctx.reach) {
                        add(&export.root, b"")?;
                    }
                }
                Place::In { export, rel, .. } => add(&export.root, &rel)?,
            }
            conn.send(&Message::Usage(total))?;
        }
        Request::Mkdir { path, parents } => {
            // `mkdir -p` of a directory that is there asks for no change: done, read-only or
            // not.
            if parents {
                if let Ok(Place::In { export, rel, .. }) = ctx.place(&path) {
                    let there = sprat_store::stat_path(&export.root, &rel);
                    if there.is_ok_and(|e| e.kind == EntryType::Dir) {
                        conn.send(&Message::ReplyEnd)?;
                        return Ok(());
                    }
                }
            }
            let (export, _, rel) = ctx.writable(&path, "make a directory in")?;
            ns::make_dir(&export.root, &rel, parents)?;
            conn.send(&Message::ReplyEnd)?;
        }
        Request::Remove { path, recursive } => {
            let (export, _, rel) = ctx.writable(&path, "remove")?;
            ns::remove(&export.root, &rel, recursive)?;
            conn.send(&Message::ReplyEnd)?;
        }
        Request::Rename { from, to } => {
            let (export, index, from) = ctx.writable(&from, "move")?;
            let (other, other_index, to) = ctx.in_export(&to, "move into")?;
            if index != other_index {
                return Err(Refusal(
                    ErrorCode::BadRequest,
                    format!(
                        "cannot move from export '{}' to export '{}': a move stays within one \
                         export (copy, then remove)",
                        export.name, other.name
                    ),
                ));
            }
            if to == from || (to.starts_with(&from) && to.get(from.len()) == Some(&b'/')) {
                return Err(Refusal(
                    ErrorCode::BadRequest,
                    format!(
                        "cannot move '{}' into itself",
                        crate::text::printable(&String::from_utf8_lossy(&from))
                    ),
                ));
            }
            ns::rename(&export.root, &from, &to)?;
            conn.send(&Message::ReplyEnd)?;
        }
        Request::Sum {
            path,
            recursive,
            algo,
        } => {
            let (export, _, rel) = ctx.in_export(&path, "checksum")?;
            let (root, path) = (&export.root, rel);
            let top = sprat_store::stat_path(root, &path)?;
            if top.kind == EntryType::Dir && !recursive {
                return Err(Refusal(
                    ErrorCode::BadRequest,
                    format!("'{}' is a directory (use -r)", display_path(&path)),
                ));
            }
            // Named alone, what has no content to sum is said, not passed over in silence
            // (below a directory, only regular files are summed).
            if !matches!(top.kind, EntryType::Dir | EntryType::File) {
                let what = match top.kind {
                    EntryType::Symlink => "a symlink (never followed)",
                    _ => "not a regular file",
                };
                return Err(Refusal(
                    ErrorCode::BadRequest,
                    format!("'{}' is {what}: nothing to sum", display_path(&path)),
                ));
            }
            let digest = match algo {
                SumAlgo::Xxh3 => Digest::Xxh3,
                SumAlgo::Sha256 => Digest::Sha256,
                SumAlgo::Md5 => Digest::Md5,
            };
            let mut out = Batcher::new(Message::Sums);
            // A directory that cannot be read (a non-root server's own `0000` one) is named
            // with an empty digest, and the walk goes on.
            ns::walk_reporting(root, &path, true, &Selection::default(), |e| {
                if e.error.is_some() {
                    let size = e.path.len() + 4;
                    return out
                        .push(conn, (e.path, Vec::new()), size)
                        .map_err(|Refusal(_, t)| StoreError::other("checksum", &path, &t));
                }
                if e.kind != EntryType::File {
                    return Ok(());
                }
                let full = sprat_store::join(&path, &e.path);
                // A file below the directory that cannot be read (a non-root server's `0600`
                // file of another user, a read error) is named as an unreadable directory
                // is, and the walk goes on (review 2026-11-30 of sprat in scripts, F5: the
                // whole tree's sums were lost, exit 5).
                let d = match ns::checksum_file(root, &full, digest) {
                    Ok(d) => d,
                    Err(_) if !e.path.is_empty() => Vec::new(),
                    Err(e) => return Err(e),
                };
                let size = e.path.len() + d.len() + 4;
                out.push(conn, (e.path, d), size)
                    .map_err(|Refusal(_, t)| StoreError::other("checksum", &full, &t))
            })?;
            out.flush(conn)?;
            conn.send(&Message::ReplyEnd)?;
        }
        Request::Locate { path } => {
            let location = match ctx.place(&path)? {
                // Several exports under one root that is no directory: nothing to compare.
                Place::ServerRoot => Location {
                    host: [0; 16],
                    exists: true,
                    ids: Vec::new(),
                },
                Place::In { export, rel, .. } => {
                    let ancestry = sprat_store::ancestry::below(&export.root, &rel)
                        .map_err(|e| StoreError::new("locate", &rel, e))?;
                    Location {
                        host: sprat_store::ancestry::boot_id().unwrap_or_default(),
                        exists: ancestry.exists,
                        ids: ancestry.ids,
                    }
                }
            };
            conn.send(&Message::Location(location))?;
        }
        Request::Delegate { path, check_only } => {
            let (_, index, _) = ctx.writable(&path, "push to")?;
            // A check: nothing issued, nothing that could be used.
            if check_only {
                conn.send(&Message::Ticket {
                    ticket: [0; 32],
                    expires_in_s: 0,
                })?;
                return Ok(());
            }
            let (ticket, lifetime) = (ctx.issue_ticket)(path, index)?;
            conn.send(&Message::Ticket {
                ticket,
                expires_in_s: lifetime.as_secs() as u32,
            })?;
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
            if !ctx.third_party {
                return Err(Refusal(
                    ErrorCode::PermissionDenied,
                    "this server makes no third-party copies (it runs with --no-third-party): \
                     copy through the client instead"
                        .into(),
                ));
            }
            let selection = compiled(selection)?;
            let (export, _, rel) = ctx.in_export(&path, "send")?;
            let source = export.root.source(&rel)?;
            // The copy's streams are the server's connections too: as many as it asked for
            // (an automatic copy: as many as it may grow to) while places are free. When none
            // is, the place this request holds carries the copy: one stream, its listing of
            // the destination made first, so that one connection at a time leaves for it.
            let wanted = match streams {
                // A single small file goes on one stream (see `push::travels_whole_alone`),
                // however many were asked for (see `session::open`).
                _ if super::push::travels_whole_alone(&source, ctx.options) => 1,
                0 => crate::tune::MAX_AUTO_STREAMS,
                n => (n as usize).min(64),
            };
            let places = (ctx.places)(wanted);
            let streams = match places.as_ref().map_or(1, |p| p.len()) {
                n if n < wanted => n,
                _ => streams.into(),
            };
            // The client's stall timeout, within the server's own (0 on either side: none).
            let stall_timeout = match (
                Duration::from_millis(stall_timeout_ms.into()),
                ctx.options.stall_timeout,
            ) {
                (asked, own) if asked.is_zero() || own.is_zero() => asked.max(own),
                (asked, own) => asked.min(own),
            };
            let options = TransferOptions {
                // 0 asks the sending server to choose (and adapt) its streams itself, unless it
                // has fewer places free than an automatic copy may take.
                streams: (streams > 0).then(|| streams.min(64)),
                list_first: streams == 1,
                durable,
                no_link_at_dst: no_link_at_dest,
                // The destination is listed with the ticket, which allows that much.
                skip: crate::pipeline::skip::SkipRule::from_check(check),
                stall_timeout,
                selection,
                // This copy's own: stopping it stops no other.
                cancel: crate::sync::Cancel::default(),
                progress: Progress::default(),
                ..ctx.options.clone().with_meta(meta)
            };
            // The destination is trusted as the client found it: with the key it presented to
            // the client, or without encryption if the client used none.
            let trust = if dest_key == [0; 32] {
                Trust::plain()
            } else {
                Trust::pinned(Fingerprint(dest_key))
            };
            let key = Credentials::new(Some(TokenKey::from_token(&ticket)), trust);
            // A client that goes away (Ctrl-C) stops the copy it asked for; while the copy
            // runs, the client hears how far it has come (see `tell_progress`).
            let teller = conn.try_clone().ok();
            let super::push::Pushed {
                report, skipped, ..
            } = std::thread::scope(|s| {
                let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
                if let Some(teller) = teller {
                    let progress = options.progress.clone();
                    s.spawn(move || tell_progress(teller, &progress, &stopped));
                }
                let report = crate::net::cancel_on_hangup(conn, &options.cancel, || {
                    push_counting(
                        PushInput::Source(source),
                        &addr,
                        &dest,
                        &key,
                        &options,
                        (
                            display_path(&path),
                            format!("sprat://{addr}/{}", display_path(&dest)),
                        ),
                    )
                });
                drop(stop);
                report
            })?;
            if !report.failures.is_empty() {
                conn.send(&Message::BatchAck {
                    seq: 0,
                    files: 0,
                    bytes: 0,
                    kept: Default::default(),
                    failures: report
                        .failures
                        .iter()
                        .map(|f| (f.path.clone().into_bytes(), f.error.clone()))
                        .collect(),
                    unlisted: 0,
                })?;
            }
            // The partial copies at the destination that this push did not resume: of no
            // more use once it succeeded. The ticket ended with the push, so the client
            // removes them, with its own key (from protocol 22; before, they stayed).
            if report.failed == 0 {
                let superseded = skipped.take_superseded().into_iter().map(|(rel, _)| rel);
                for piece in super::server::superseded_pieces(superseded.collect()) {
                    conn.send(&Message::Superseded(piece))?;
                }
            }
            let ns = |s: f64| (s * 1e9) as u64;
            conn.send(&Message::Done(RemoteStats {
                files: report.files,
                dirs: report.dirs,
                symlinks: report.symlinks,
                bytes: report.bytes,
                failures: report.failed,
                read_busy_ns: ns(report.stages.scan_read_s),
                network_busy_ns: ns(report.stages.network_s.unwrap_or(0.0)),
                write_busy_ns: ns(report.stages.write_s),
                syncs: report.syncs,
                up_to_date: report.up_to_date,
                // Checked between the two servers (the destination against this push's
                // `Commit`, this server against the destination's `Done`).
                totals: sprat_proto::Totals::default(),
                attrs_fixed: report.attrs_fixed,
                bytes_not_sent: report.bytes_not_sent,
                not_kept: report.not_kept,
                specials: report.specials,
                // Of the push to the destination, which the client reports (from protocol 23).
                streams: report.streams as u64,
            }))?;
        }
    }
    Ok(())
}

/// How often at most a third-party copy's source server tells its client how far it has come.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// A third-party copy's `Progress` to its client on `conn` (a second handle on the `SendTo`
/// connection): what `progress` counts, when it changed, at most once per [`PROGRESS_EVERY`],
/// until `stopped` (before the copy's own answers go on the connection) or the client is gone.
fn tell_progress(mut conn: Conn, progress: &Progress, stopped: &crossbeam_channel::Receiver<()>) {
    let mut told = TransferProgress::default();
    while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
        stopped.recv_timeout(PROGRESS_EVERY)
    {
        let now = progress.snapshot();
        let p = TransferProgress {
            files: now.files_done - now.files_skipped,
            bytes: now.bytes_done - now.bytes_skipped,
            skipped_files: now.files_skipped,
            skipped_bytes: now.bytes_skipped,
        };
        if p != told {
            if conn.send(&Message::Progress(p)).is_err() {
                return;
            }
            told = p;
        }
    }
}
