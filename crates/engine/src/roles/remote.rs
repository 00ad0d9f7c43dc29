//! Namespace operations from the client side: each is one request and one (possibly streamed)
//! reply on an authenticated connection, a fresh one or one kept from the copy's question of
//! what its source or destination is (see [`Kept`]), and third-party transfers, where this
//! client directs one server to push a tree straight to another.

use crate::config::{Selection, TransferOptions};
use crate::error::TransferError;
use crate::net::Credentials;
use crate::net::{self, Conn};
use crate::pipeline::skip::{digest_from_bytes, DestIndex};
use crate::report::{Counts, Report, Stages};
use sprat_proto::namespace::{DiskUsage, ListOwners, Location, NsEntry, Request, SumAlgo};
use sprat_proto::Message;
use std::time::{Duration, Instant};

/// Sends `req` to the server at `addr` and returns the connection to read the reply from.
pub(crate) fn request(addr: &str, key: &Credentials, req: Request) -> Result<Conn, TransferError> {
    let mut conn = net::connect(addr, key, &Message::Request(req))?;
    // A server still at a request says so every `WORKING_EVERY`: one that says nothing for
    // this long is taken as stalled (a stopped server, a dead path), never waited for for
    // ever (review 2026-11-30 of sprat in scripts, F1).
    conn.wait_for_answers_within(ANSWER_PATIENCE);
    Ok(conn)
}

/// How long a request's client waits for each message of its answer: several of the
/// server's `Working` (see `roles::server::WORKING_EVERY`).
pub(crate) const ANSWER_PATIENCE: Duration = Duration::from_secs(60);

/// Round trips to the server at `addr`: the authentication exchange of one connection, then
/// `requests` small requests (`stat` of the root) one after another on it.
pub fn probe_rtt(
    addr: &str,
    key: &Credentials,
    requests: usize,
) -> Result<Vec<Duration>, TransferError> {
    let stat = || Request::Stat { path: Vec::new() };
    let read_reply = |conn: &mut Conn| loop {
        match conn.recv_control()? {
            Message::Entries(_) => {}
            Message::ReplyEnd => return Ok(()),
            m => return Err(unexpected(conn, m)),
        }
    };
    let mut conn = request(addr, key, stat())?;
    // The first reply answers the request sent with the authentication.
    read_reply(&mut conn)?;
    let mut rtts: Vec<Duration> = conn.rtt.into_iter().collect();
    for _ in 0..requests {
        let sent = Instant::now();
        conn.send(&Message::Request(stat()))?;
        read_reply(&mut conn)?;
        rtts.push(sent.elapsed());
    }
    Ok(rtts)
}

fn unexpected(conn: &Conn, m: Message) -> TransferError {
    conn.protocol(format!("unexpected reply {m:?}"))
}

/// `ls` (`recursive`: `ls -R`): calls `each` for the listed path itself (empty relative path)
/// and every entry below it, as the server streams them, with their owners and groups.
pub fn list(
    addr: &str,
    key: &Credentials,
    path: &[u8],
    recursive: bool,
    each: impl FnMut(NsEntry),
) -> Result<(), TransferError> {
    let list = Request::List {
        path: path.to_vec(),
        recursive,
        digests: false,
        selection: crate::config::wire_selection(&Selection::default()),
        owners: ListOwners::Always,
        or_parent: false,
    };
    listed(addr, key, list, None, each)
}

/// [`list`] of what `selection` selects (applied by the server's scan), and with `digests`
/// the XXH3-128 of every regular file listed, computed by the server and streamed in the same
/// reply (`Sums` among the `Entries`), each given to `digests` (a file the server could not
/// read has none).
pub(crate) fn list_summed(
    addr: &str,
    key: &Credentials,
    path: &[u8],
    recursive: bool,
    selection: &Selection,
    digests: Option<&mut dyn FnMut(Vec<u8>, u128)>,
    each: impl FnMut(NsEntry),
) -> Result<(), TransferError> {
    let list = Request::List {
        path: path.to_vec(),
        recursive,
        digests: digests.is_some(),
        selection: crate::config::wire_selection(selection),
        owners: ListOwners::No,
        or_parent: false,
    };
    listed(addr, key, list, digests, each)
}

/// The reply to `list` (a `List` request), as [`list_summed`] takes it.
fn listed(
    addr: &str,
    key: &Credentials,
    list: Request,
    digests: Option<&mut dyn FnMut(Vec<u8>, u128)>,
    each: impl FnMut(NsEntry),
) -> Result<(), TransferError> {
    let (mut conn, reply) = ask(addr, key, list)?;
    listed_on(&mut conn, reply, digests, each)
}

/// The rest of a `List`'s reply on `conn`, whose first message is `reply`.
fn listed_on(
    conn: &mut Conn,
    mut reply: Message,
    mut digests: Option<&mut dyn FnMut(Vec<u8>, u128)>,
    mut each: impl FnMut(NsEntry),
) -> Result<(), TransferError> {
    loop {
        match (reply, &mut digests) {
            (Message::Entries(entries), _) => entries.into_iter().for_each(&mut each),
            (Message::Sums(sums), Some(digests)) => {
                for (path, bytes) in sums {
                    let digest = digest_from_bytes(&bytes).ok_or_else(|| {
                        conn.protocol(format!("a digest of {} bytes, not 16", bytes.len()))
                    })?;
                    digests(path, digest);
                }
            }
            (Message::ReplyEnd, _) => return Ok(()),
            (m, _) => return Err(unexpected(conn, m)),
        }
        reply = conn.recv_control()?;
    }
}

/// The destination's entries under `path` on the server, for the check (see
/// `pipeline::skip`): one recursive listing, streamed in one reply, with the digests of its
/// files when `digests` (`--checksum`); empty if `path` does not exist yet. With `owners`
/// (`Some(by_name)`: the copy keeps owners, by name unless `--numeric-ids`), entries carry
/// their owners where the server sets a push's, and the check compares them.
pub(crate) fn index(
    addr: &str,
    key: &Credentials,
    path: &[u8],
    digests: bool,
    owners: Option<bool>,
) -> Result<DestIndex, TransferError> {
    index_by((path, false), digests, owners, |list, keep, each| {
        listed(addr, key, list, keep, each)
    })
}

/// [`index`] of a single file's destination `path` (`DST/NAME`) whose server puts the file
/// there if DST is a directory, else at DST itself (see `Operation::Push`'s `or_parent`):
/// one `List` with `or_parent`, which its server answers with the listing of the one it
/// found (a file the copy may update, the partial copy of one not there yet, which this one
/// resumes), saying first which. Returns the index and whether the file goes to DST (unless
/// DST changes before the push's own `Open`: the push checks its server's answer against
/// this one).
pub(crate) fn index_or_parent(
    addr: &str,
    key: &Credentials,
    path: &[u8],
    digests: bool,
    owners: Option<bool>,
) -> Result<(DestIndex, bool), TransferError> {
    let mut to_parent = None;
    let index = index_by((path, true), digests, owners, |list, keep, each| {
        let (mut conn, first) = ask(addr, key, list)?;
        match first {
            Message::ListedAt { parent } => to_parent = Some(parent),
            m => return Err(unexpected(&conn, m)),
        }
        let first = conn.recv_control()?;
        listed_on(&mut conn, first, keep, each)
    })?;
    match to_parent {
        Some(to_parent) => Ok((index, to_parent)),
        None => Err(TransferError::Local(
            "the server did not say where it lists the destination".into(),
        )),
    }
}

/// A recursive `List` of `path` for a copy's check (see [`index`]; `or_parent`: see
/// [`index_or_parent`]).
fn list_request((path, or_parent): (&[u8], bool), digests: bool, owners: Option<bool>) -> Request {
    Request::List {
        or_parent,
        path: path.to_vec(),
        recursive: true,
        digests,
        selection: crate::config::wire_selection(&Selection::default()),
        owners: match owners {
            Some(_) => ListOwners::IfApplied,
            None => ListOwners::No,
        },
    }
}

/// The index [`index`] makes of `path`, from what `listing` gets of its `List` request.
fn index_by(
    path: (&[u8], bool),
    digests: bool,
    owners: Option<bool>,
    listing: impl FnOnce(
        Request,
        Option<&mut dyn FnMut(Vec<u8>, u128)>,
        &mut dyn FnMut(NsEntry),
    ) -> Result<(), TransferError>,
) -> Result<DestIndex, TransferError> {
    let mut index = DestIndex::default().written_by_peer();
    if let Some(by_name) = owners {
        index = index.comparing_owners_by_name(by_name);
    }
    // Digests may come before or after their entries: set once the listing is complete.
    let mut summed = Vec::new();
    let mut keep = |path, digest| summed.push((path, digest));
    let keep: Option<&mut dyn FnMut(Vec<u8>, u128)> = digests.then_some(&mut keep);
    let list = list_request(path, digests, owners);
    let listed = listing(list, keep, &mut |e| index.insert_listed(e));
    match listed {
        Ok(()) => {
            for (path, digest) in summed {
                index.set_digest(&path, digest);
            }
            Ok(index)
        }
        Err(TransferError::Remote {
            code: sprat_proto::ErrorCode::NotFound,
            ..
        }) => Ok(DestIndex::default()),
        Err(e) => Err(e),
    }
}

/// Removes `leftovers` (temporary names a killed writer left, relative to `path`) on the
/// server, with `Remove` requests all sent on one connection before the replies are read (a
/// third-party copy's ticket allows exactly these); what cannot be removed is logged and left.
pub(crate) fn remove_leftovers(addr: &str, key: &Credentials, path: &[u8], leftovers: &[Vec<u8>]) {
    let paths: Vec<Vec<u8>> = leftovers
        .iter()
        .map(|rel| sprat_store::relpath::join(path, rel))
        .collect();
    remove_each(addr, key, &paths, "a leftover temporary file");
}

/// Removes the partial copies (and journals) an interrupted copy left on the server at
/// `addr` of `files` (paths relative to the destination `path`, the empty path for `path`
/// itself, a single file), once a push that did not resume them succeeded (see
/// `SkipCounts::supersedes`). The server keeps one a running transfer writes.
pub(crate) fn remove_superseded_partials(
    addr: &str,
    key: &Credentials,
    path: &[u8],
    files: impl IntoIterator<Item = impl AsRef<[u8]>>,
) {
    // (A name too long for a request could not be a partial copy's.)
    let paths: Vec<Vec<u8>> = files
        .into_iter()
        .flat_map(|rel| {
            sprat_store::partial::hidden_paths(&sprat_store::relpath::join(path, rel.as_ref()))
        })
        .filter(|p| p.len() <= sprat_proto::path::MAX_PATH)
        .collect();
    remove_each(
        addr,
        key,
        &paths,
        "the partial copy an interrupted copy left",
    );
}

/// Removes each of `paths` (in the server's namespace) on one connection to `addr`, `what`
/// they are naming them in the log; what cannot be removed is logged and left (the copy
/// does not depend on it).
fn remove_each(addr: &str, key: &Credentials, paths: &[Vec<u8>], what: &str) {
    const REMOVES_IN_FLIGHT: usize = 64;
    let Some((first, rest)) = paths.split_first() else {
        return;
    };
    let remove = |path: &[u8]| Request::Remove {
        path: path.to_vec(),
        recursive: false,
    };
    let removed = (|| -> Result<(), TransferError> {
        let mut conn = request(addr, key, remove(first))?;
        // At most `REMOVES_IN_FLIGHT` asked ahead of the replies read: the server answers one
        // at a time, and a client that only wrote would fill both ways of the connection.
        let mut asked = rest.iter();
        for path in asked.by_ref().take(REMOVES_IN_FLIGHT - 1) {
            conn.send(&Message::Request(remove(path)))?;
        }
        for path in paths {
            let shown = crate::text::printable(&sprat_store::display_path(path)).into_owned();
            match conn.recv_control() {
                Ok(Message::ReplyEnd) => {
                    tracing::info!(path = %shown, "removed {what}")
                }
                Ok(other) => return Err(conn.protocol(format!("unexpected reply {other:?}"))),
                // Gone already (another transfer finished the file): nothing to say.
                Err(TransferError::Remote {
                    code: sprat_proto::ErrorCode::NotFound,
                    ..
                }) => {}
                Err(TransferError::Remote { text, .. }) => {
                    tracing::info!(text = %crate::text::printable(&text), "cannot remove {what}")
                }
                Err(e) => return Err(e),
            }
            // One answered, one more asked.
            if let Some(next) = asked.next() {
                conn.send(&Message::Request(remove(next)))?;
            }
        }
        Ok(())
    })();
    if let Err(e) = removed {
        tracing::warn!(e = %crate::text::printable(&e.to_string()), "cannot remove {what}");
    }
}

/// Refuses as a push to `path` on the server at `addr` would be refused (a read-only server or
/// export, a path outside the token's exports): a dry run asks whether the server would give
/// the one-time ticket a third-party copy pushes with, which it gives only for a path it
/// would write; the check issues none (from protocol 23; before, each dry run held one of the
/// 64 unused tickets an address may hold for a minute: review 2026-11-30 of protocol 23, F8).
pub(crate) fn may_write(addr: &str, key: &Credentials, path: &[u8]) -> Result<(), TransferError> {
    let mut conn = request(
        addr,
        key,
        Request::Delegate {
            path: path.to_vec(),
            check_only: true,
        },
    )?;
    match conn.recv_control()? {
        Message::Ticket { .. } => Ok(()),
        m => Err(unexpected(&conn, m)),
    }
}

/// Where `path` is on the host of the server at `addr` (see `roles::overlap`).
pub(crate) fn locate(
    addr: &str,
    key: &Credentials,
    path: &[u8],
) -> Result<Location, TransferError> {
    let mut conn = request(
        addr,
        key,
        Request::Locate {
            path: path.to_vec(),
        },
    )?;
    match conn.recv_control()? {
        Message::Location(l) => Ok(l),
        m => Err(unexpected(&conn, m)),
    }
}

/// Whether the servers at `a` and `b` are one server: the same address, or two that present
/// the same key (asked of both; servers without encryption cannot be told apart, and are
/// taken as two).
pub(crate) fn one_server(a: &str, b: &str, key: &Credentials) -> Result<bool, TransferError> {
    if a == b {
        return Ok(true);
    }
    let key_of = |addr: &str| -> Result<_, TransferError> {
        let root = Request::Stat { path: Vec::new() };
        Ok(request(addr, key, root)?.server_key())
    };
    let (ka, kb) = std::thread::scope(|s| {
        let other = s.spawn(|| key_of(b));
        let mine = key_of(a);
        (mine, other.join().unwrap_or(Ok(None)))
    });
    Ok(matches!((ka?, kb?), (Some(x), Some(y)) if x == y))
}

/// `stat`: the entry at `path` (a symlink is described, not followed).
pub fn stat(addr: &str, key: &Credentials, path: &[u8]) -> Result<NsEntry, TransferError> {
    stat_reply(&mut stat_request(addr, key, path)?)
}

fn stat_request(addr: &str, key: &Credentials, path: &[u8]) -> Result<Conn, TransferError> {
    let path = path.to_vec();
    request(addr, key, Request::Stat { path })
}

/// The answer to a `Stat` on `conn`.
fn stat_reply(conn: &mut Conn) -> Result<NsEntry, TransferError> {
    let entry = match conn.recv_control()? {
        Message::Entries(mut e) if e.len() == 1 => e.remove(0),
        m => return Err(unexpected(conn, m)),
    };
    match conn.recv_control()? {
        Message::ReplyEnd => Ok(entry),
        m => Err(unexpected(conn, m)),
    }
}

/// A connection whose request was answered, kept for the next request to the same server:
/// a third-party copy asks both servers what its source and destination are, then the
/// destination for a ticket and the source for the copy (see [`stat_keeping`] and
/// [`third_party`]); a copy that asked what DST is lists it for its check.
/// Each later request saves the connect and handshake of a new connection: two or three
/// round trips on a long path.
struct Kept {
    addr: String,
    since: Instant,
    conn: Conn,
}

/// The connections kept, at most [`KEPT_MOST`]; the oldest goes first.
static KEPT: std::sync::Mutex<Vec<Kept>> = std::sync::Mutex::new(Vec::new());

/// Most connections kept at once (a third-party copy keeps one to each server).
const KEPT_MOST: usize = 4;

/// How long a kept connection may wait for its next request: well within a server's idle
/// timeout.
const KEPT_FRESH: Duration = Duration::from_secs(5);

/// [`stat`], keeping the connection for the next request to `addr` (see [`Kept`]): also
/// after the server's answer that the path is not there, as it goes on serving the
/// connection.
pub(crate) fn stat_keeping(
    addr: &str,
    key: &Credentials,
    path: &[u8],
) -> Result<NsEntry, TransferError> {
    let mut conn = stat_request(addr, key, path)?;
    let answer = stat_reply(&mut conn);
    // Only a connection on which the server proved the token: a third-party copy's ticket
    // may go on it (a server's refusal of the hello, such as busy, proved nothing).
    let proved = conn.check_server_proof().is_ok();
    if proved && matches!(answer, Ok(_) | Err(TransferError::Remote { .. })) {
        let mut kept = crate::sync::lock(&KEPT);
        if kept.len() >= KEPT_MOST {
            kept.remove(0);
        }
        kept.push(Kept {
            addr: addr.to_string(),
            since: Instant::now(),
            conn,
        });
    }
    answer
}

/// A connection kept for `addr` that is fresh and that the server has not closed, if there is
/// one; stale ones are dropped. Its server proved itself on it, before the run that now takes
/// it: counted again for that run (see `retry::retrying`), as a new connection would be.
fn take_kept(addr: &str) -> Option<Conn> {
    let mut kept = fresh_kept();
    let at = kept.iter().position(|k| k.addr == addr)?;
    net::server_proved(addr);
    Some(kept.remove(at).conn)
}

/// Whether a connection is kept for `addr` (see [`take_kept`]).
fn is_kept(addr: &str) -> bool {
    fresh_kept().iter().any(|k| k.addr == addr)
}

/// The connections kept, once those stale or closed by their server are dropped.
fn fresh_kept() -> std::sync::MutexGuard<'static, Vec<Kept>> {
    let mut kept = crate::sync::lock(&KEPT);
    kept.retain(|k| k.since.elapsed() < KEPT_FRESH && !k.conn.hung_up());
    kept
}

/// Closes the connections kept for `addr`: for a copy that will ask nothing more of that
/// server on them (each holds one of the server's places).
pub(crate) fn release_kept(addr: &str) {
    crate::sync::lock(&KEPT).retain(|k| k.addr != addr);
}

/// `req` asked of the server at `addr`, and the first message of its answer (an `Error` as
/// an error), with the connection for the rest: on the connection kept for `addr` if there
/// is one (see [`Kept`]), else on a new one, or on a new one too when the kept one turns out
/// closed before it answered.
fn ask(addr: &str, key: &Credentials, req: Request) -> Result<(Conn, Message), TransferError> {
    if let Some(mut conn) = take_kept(addr) {
        let first = conn
            .send(&Message::Request(req.clone()))
            .and_then(|()| conn.recv_control());
        match first {
            Ok(reply) => return Ok((conn, reply)),
            // The server's own answer (a refusal) holds whatever connection asks.
            Err(e @ TransferError::Remote { .. }) => return Err(e),
            Err(e) => tracing::debug!(%e, "the kept connection failed; asking on a new one"),
        }
    }
    let mut conn = request(addr, key, req)?;
    let first = conn.recv_control()?;
    Ok((conn, first))
}

/// A ticket from the server at `addr` for a push to `path`, and the key that server
/// presented (asked as [`ask`] does).
fn ticket(
    addr: &str,
    key: &Credentials,
    path: &[u8],
) -> Result<([u8; 32], [u8; 32]), TransferError> {
    let delegate = Request::Delegate {
        path: path.to_vec(),
        check_only: false,
    };
    match ask(addr, key, delegate)? {
        // The source server must find the destination this client checked.
        (conn, Message::Ticket { ticket, .. }) => {
            Ok((ticket, conn.server_key().map_or([0; 32], |k| k.0)))
        }
        (conn, m) => Err(unexpected(&conn, m)),
    }
}

/// `du`: totals under `path`, computed on the server.
pub fn du(addr: &str, key: &Credentials, path: &[u8]) -> Result<DiskUsage, TransferError> {
    du_selected(addr, key, path, &Selection::default())
}

/// [`du`] of what `selection` selects (counted by the server's scan).
pub fn du_selected(
    addr: &str,
    key: &Credentials,
    path: &[u8],
    selection: &Selection,
) -> Result<DiskUsage, TransferError> {
    let mut conn = request(
        addr,
        key,
        Request::Du {
            path: path.to_vec(),
            selection: crate::config::wire_selection(selection),
        },
    )?;
    match conn.recv_control()? {
        Message::Usage(u) => Ok(u),
        m => Err(unexpected(&conn, m)),
    }
}

/// Runs a request whose only reply is `ReplyEnd` (mkdir, rm, mv).
pub fn simple(addr: &str, key: &Credentials, req: Request) -> Result<(), TransferError> {
    let mut conn = request(addr, key, req)?;
    match conn.recv_control()? {
        Message::ReplyEnd => Ok(()),
        m => Err(unexpected(&conn, m)),
    }
}

/// `sum`: digests computed on the server; `each(path relative to `path`, digest)`.
pub fn sum(
    addr: &str,
    key: &Credentials,
    path: &[u8],
    recursive: bool,
    algo: SumAlgo,
    mut each: impl FnMut(Vec<u8>, Vec<u8>),
) -> Result<(), TransferError> {
    let mut conn = request(
        addr,
        key,
        Request::Sum {
            path: path.to_vec(),
            recursive,
            algo,
        },
    )?;
    loop {
        match conn.recv_control()? {
            Message::Sums(sums) => sums.into_iter().for_each(|(p, d)| each(p, d)),
            Message::ReplyEnd => return Ok(()),
            m => return Err(unexpected(&conn, m)),
        }
    }
}

/// The paths a third-party copy's source server names in its `Superseded` messages, up to
/// [`SUPERSEDED_KEPT_BYTES`] of memory, and none whose partial copy's name would be longer
/// than a path may be: beyond that, the rest are left in place (and said so once).
#[derive(Default)]
struct SupersededPaths {
    paths: Vec<Vec<u8>>,
    bytes: usize,
    full: bool,
}

/// Most memory [`SupersededPaths`] takes, each path counted with what holding it costs (and
/// removing it: two hidden names): a bound on what a server may make this client hold and
/// ask, well above the partial copies of any real run (about 100,000 paths of 100 bytes).
const SUPERSEDED_KEPT_BYTES: usize = 32 << 20;

/// What keeping `path` costs [`SupersededPaths`]: the path and its two hidden names, each
/// with its vector.
fn superseded_cost(path: &[u8]) -> usize {
    3 * (path.len() + 32 + std::mem::size_of::<Vec<u8>>())
}

impl SupersededPaths {
    fn add(&mut self, paths: Vec<Vec<u8>>) {
        for path in paths {
            let cost = superseded_cost(&path);
            if self.bytes + cost > SUPERSEDED_KEPT_BYTES {
                if !std::mem::replace(&mut self.full, true) {
                    tracing::warn!(
                        "the source server named more partial copies to remove than this \
                         client keeps; the rest stay at the destination"
                    );
                }
                return;
            }
            self.bytes += cost;
            self.paths.push(path);
        }
    }
}

/// Third-party copy: the destination server issues a one-time ticket for `dst_path`, and the
/// source server pushes `src_path` to it with that ticket. The data never passes through this
/// client; the report does.
#[allow(clippy::too_many_arguments)]
pub fn third_party(
    src_addr: &str,
    src_path: &[u8],
    dst_addr: &str,
    dst_path: &[u8],
    key: &Credentials,
    options: &TransferOptions,
    src_label: String,
    dst_label: String,
) -> Result<Report, TransferError> {
    let started = Instant::now();
    // The destination's place goes back at once: a server of one or two places needs it for
    // the source server's connections. Meanwhile, unless a connection to the source server
    // is kept already (it was asked what the source is), one is made for the `SendTo`, with
    // that question: its connect and hellos overlap the ticket's. Its answer is awaited (the
    // scope's end) even when the ticket is refused: a connection left in the middle of its
    // handshake would be logged by the source server as a failed authentication. Whatever it
    // answered, the `SendTo` asks again and says what went wrong.
    let src_kept = is_kept(src_addr);
    let (ticket, dest_key) = std::thread::scope(|s| {
        if !src_kept {
            s.spawn(|| stat_keeping(src_addr, key, src_path));
        }
        ticket(dst_addr, key, dst_path)
    })?;
    let send_to = Request::SendTo {
        path: src_path.to_vec(),
        addr: dst_addr.to_string(),
        ticket,
        dest: dst_path.to_vec(),
        streams: options.streams.map_or(0, |n| n as u16),
        durable: options.durable,
        no_link_at_dest: options.no_link_at_dst,
        check: options.skip.as_check(),
        meta: options.meta_flags(),
        stall_timeout_ms: options.stall_timeout.as_millis().min(u32::MAX as u128) as u32,
        dest_key,
        selection: crate::config::wire_selection(&options.selection),
    };
    // On the connection that asked what the source is, if it is still there: it is
    // authenticated, and the server proved the token on it (a ticket goes only to such a one).
    let mut src = match take_kept(src_addr) {
        Some(mut conn) => {
            conn.send(&Message::Request(send_to))?;
            conn
        }
        None => request(src_addr, key, send_to)?,
    };
    let mut counts = Counts::default();
    let mut superseded = SupersededPaths::default();
    let stats = loop {
        match src.recv_control()? {
            // Partial copies at the destination the copy did not resume (after its failures,
            // before its `Done`).
            Message::Superseded(paths) => superseded.add(paths),
            Message::BatchAck {
                failures, unlisted, ..
            } => {
                for (p, t) in failures {
                    counts.add_failure(&p, &t);
                }
                counts.failed += u64::from(unlisted);
            }
            // How far the copy has come (the source server's counts).
            Message::Progress(p) => {
                options.progress.set_copied(p.files, p.bytes);
                options
                    .progress
                    .set_skipped(p.skipped_files, p.skipped_bytes);
            }
            Message::Done(stats) => break stats,
            m => return Err(unexpected(&src, m)),
        }
    };
    options.progress.set_copied(stats.files, stats.bytes);
    options
        .progress
        .set_skipped(stats.up_to_date, stats.bytes_not_sent);
    counts.files = stats.files;
    counts.dirs = stats.dirs;
    counts.symlinks = stats.symlinks;
    counts.specials = stats.specials;
    counts.bytes = stats.bytes;
    counts.failed = counts.failed.max(stats.failures);
    counts.syncs = stats.syncs;
    counts.not_kept = stats.not_kept;
    // The source server's ticket ended with its push: this client removes them, as its own
    // push would (see `push::push`).
    if counts.failed == 0 {
        remove_superseded_partials(dst_addr, key, dst_path, superseded.paths);
    }
    let secs = |ns: u64| Duration::from_nanos(ns).as_secs_f64();
    let stages = Stages {
        scan_read_s: secs(stats.read_busy_ns),
        network_s: Some(secs(stats.network_busy_ns)),
        write_s: secs(stats.write_busy_ns),
    };
    Ok(Report::new(
        "third-party",
        src_label,
        dst_label,
        &counts,
        started.elapsed(),
        // The streams the source server's push used (from protocol 23), which `--streams N`
        // bounds but does not set: a small copy takes fewer.
        stats.streams as usize,
        stages,
    )
    .with_durable(options.durable)
    .with_not_sent(stats.up_to_date, stats.attrs_fixed, stats.bytes_not_sent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_server_cannot_make_the_client_keep_more_superseded_paths_than_its_bound() {
        let mut kept = SupersededPaths::default();
        kept.add(vec![b"a/big".to_vec(), b"b".to_vec()]);
        assert_eq!(kept.paths, [b"a/big".to_vec(), b"b".to_vec()]);
        // Long paths, then many short ones: either way, what is kept stays within the bound,
        // each path counted with its vectors (a path of one byte costs far more than one).
        for (len, pieces) in [(4000, 10), (1, 1000)] {
            let mut kept = SupersededPaths::default();
            let piece = vec![vec![b'x'; len]; sprat_proto::MAX_SUPERSEDED];
            for _ in 0..pieces {
                kept.add(piece.clone());
            }
            assert!(kept.full, "{len}");
            assert!(kept.bytes <= SUPERSEDED_KEPT_BYTES, "{}", kept.bytes);
            let held: usize = kept.paths.iter().map(|p| superseded_cost(p)).sum();
            assert_eq!(held, kept.bytes);
            assert!(held > SUPERSEDED_KEPT_BYTES - superseded_cost(&piece[0]));
            assert!(
                kept.paths.len() < SUPERSEDED_KEPT_BYTES / 100,
                "{}",
                kept.paths.len()
            );
        }
    }
}
