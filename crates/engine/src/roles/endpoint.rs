//! The two sides of a copy as the user names them (a local path or `sprat://HOST:PORT/PATH`),
//! and [`copy`], which picks the role that moves data between them: a local copy, a push, a
//! pull or a third-party transfer.

use crate::config::{SkipRule, TransferOptions};
use crate::error::TransferError;
use crate::net::Credentials;
use crate::report::Report;
use sprat_proto::path as wire_path;
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Local(PathBuf),
    /// `sprat://HOST:PORT/PATH`, `path` relative to the server's root.
    Remote {
        addr: String,
        path: Vec<u8>,
        /// `sprat://A:PORT,B:PORT/PATH`: further servers exporting the same shared file
        /// system as `addr`; a push spreads its data over all of them (see `roles::spread`),
        /// everything else goes to `addr` alone.
        also: Vec<String>,
    },
}

impl Endpoint {
    /// The directory a server's endpoint is in (`sprat://HOST/DST` of `sprat://HOST/DST/NAME`);
    /// a local one as it is.
    pub(crate) fn remote_parent(&self) -> Endpoint {
        match self {
            Endpoint::Remote { addr, path, also } => Endpoint::Remote {
                addr: addr.clone(),
                path: sprat_store::split_parent(path).0.to_vec(),
                also: also.clone(),
            },
            local => local.clone(),
        }
    }

    /// The last component of its path, if it has one (not a server's root, `.`, `..` or `/`).
    pub fn name(&self) -> Option<Vec<u8>> {
        let name = match self {
            Endpoint::Local(p) => p.file_name().map(|n| n.as_bytes().to_vec()),
            Endpoint::Remote { path, .. } => path.rsplit(|&b| b == b'/').next().map(<[u8]>::to_vec),
        };
        name.filter(|n| !n.is_empty() && n.as_slice() != b"." && n.as_slice() != b"..")
    }

    /// Parses a command-line argument: a `sprat://` URL or a local path.
    pub fn parse(arg: &std::ffi::OsStr) -> Result<Endpoint, TransferError> {
        let bytes = arg.as_bytes();
        let Some(rest) = bytes.strip_prefix(b"sprat://") else {
            if bytes.is_empty() {
                return Err(TransferError::Usage("empty path".into()));
            }
            if let Some(scheme) = other_scheme(bytes) {
                return Err(TransferError::Usage(format!(
                    "invalid URL '{}': sprat speaks sprat://HOST:PORT/PATH, not {scheme}:// \
                     (a local path that starts so: ./{})",
                    arg.to_string_lossy(),
                    arg.to_string_lossy()
                )));
            }
            return Ok(Endpoint::Local(PathBuf::from(arg)));
        };
        let bad = |why: &str| {
            TransferError::Usage(format!("invalid URL '{}': {why}", arg.to_string_lossy()))
        };
        let slash = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        let addrs =
            std::str::from_utf8(&rest[..slash]).map_err(|_| bad("the host is not UTF-8"))?;
        let mut servers: Vec<String> = Vec::new();
        for addr in addrs.split(',') {
            let port_ok = addr
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !port_ok {
                return Err(bad(
                    "expected sprat://HOST:PORT/PATH (or HOST:PORT,HOST:PORT,... for servers \
                     sharing one file system)",
                ));
            }
            if servers.iter().any(|s| s == addr) {
                return Err(bad(&format!("server {addr} is named twice")));
            }
            servers.push(addr.to_string());
        }
        let addr = servers.remove(0);
        let path = wire_path::normalize_user_path(&rest[slash..]);
        wire_path::validate(&path).map_err(|e| {
            bad(&format!(
                "{e}; paths are relative to the server's root and may not leave it"
            ))
        })?;
        Ok(Endpoint::Remote {
            addr,
            path,
            also: servers,
        })
    }
}

/// Where a copy goes, as with cp, scp and rsync. `DST/` (`into`: DST given with a trailing
/// slash, or as `.` or `..`) is a directory to copy into: SRC goes to `DST/NAME`, NAME being
/// its own (the directory is made if missing), unless SRC was given with a trailing slash too
/// (`contents`: rsync's `SRC/ DST/`, its contents into DST). Without the slash, DST names the
/// copy itself, and only a single file goes inside DST when DST is an existing directory (a
/// local one, or a symlink to one; a remote one, asked with one request). A remote source is
/// asked what it is (one request) when DST is remote too (the two asked at once); a pull
/// without `DST/` finds out from the server's answer, unless no copy follows (a dry run).
///
/// With `dial_ahead` (the copy follows at once), a push whose destination the server is
/// asked about dials its session meanwhile. The connection that asked is kept for what the
/// copy asks next of that server: a push's listing of its destination, a third-party copy's
/// ticket and its request of the copy. A push into `DST/` that [`DialAhead::server_checks_link`]
/// allows asks nothing: its server refuses a symlink at `DST/NAME` itself
/// ([`Destination::link_left_to_server`]). Nor does a single file pushed to one server's
/// `DST` that [`DialAhead::server_picks_dir`] allows: its server puts it in DST or at DST
/// ([`Destination::or_parent_left_to_server`]), and the push asks beside its listing.
pub fn into_directory(
    src: &Endpoint,
    dst: Endpoint,
    key: &Credentials,
    into: bool,
    contents: bool,
    dial_ahead: Option<DialAhead>,
) -> Result<Destination, TransferError> {
    let checked_here = |endpoint: Result<Endpoint, TransferError>| {
        endpoint.map(|endpoint| Destination {
            endpoint,
            link_left_to_server: false,
            or_parent_left_to_server: false,
        })
    };
    // A push of a source that is there (a missing one fails before any session).
    let push = matches!(src, Endpoint::Local(p) if p.symlink_metadata().is_ok());
    let dial_session = |dst: &Endpoint| {
        if let (Some(ahead), Endpoint::Remote { addr, .. }, true) = (dial_ahead, dst, push) {
            crate::session::client::dial_ahead(addr, key, ahead.tcp_buffer);
        }
    };
    if into {
        return match src.name().filter(|_| !contents) {
            Some(name) => {
                let dst = inside(dst, &name);
                if !server_checks_link(src, &dst, push, dial_ahead) {
                    dial_session(&dst);
                }
                at_own_name(src, dst, push, dial_ahead, key)
            }
            None => checked_here(Ok(dst)),
        };
    }
    // A pull is not asked: it finds out from the server's answer (see `pull`), which costs a
    // tree's pull nothing; a dry run, which opens no session, asks. Between two servers both
    // are asked, at once.
    let pull = matches!((src, &dst), (Endpoint::Remote { .. }, Endpoint::Local(_)));
    if pull && dial_ahead.is_some() {
        return checked_here(Ok(dst));
    }
    // Between servers the source is asked anyway; a push's local source is known at once.
    let dst_asked = match (src, &dst) {
        (Endpoint::Remote { .. }, Endpoint::Remote { .. }) => {
            let (tx, rx) = std::sync::mpsc::channel();
            let (dst, key) = (dst.clone(), key.clone());
            // Its connection is kept for the ticket the copy asks for next.
            std::thread::spawn(move || tx.send(is_directory(&dst, &key)));
            Some(rx)
        }
        _ => None,
    };
    let (is_file, name) = match src {
        // A FIFO, socket or device goes as a file would.
        Endpoint::Local(p) => (
            std::fs::metadata(p).is_ok_and(|m| !m.is_dir()),
            p.file_name().map(|n| n.as_bytes().to_vec()),
        ),
        Endpoint::Remote { addr, path, .. } => {
            use sprat_proto::namespace::NsKind;
            let name = path.rsplit(|&b| b == b'/').next().map(<[u8]>::to_vec);
            // Its connection is kept for the copy the client asks of this server next.
            let is_file = !path.is_empty()
                && super::remote::stat_keeping(addr, key, path)
                    .is_ok_and(|e| matches!(e.kind, NsKind::File | NsKind::Special));
            (is_file, name)
        }
    };
    let Some(name) = name.filter(|n| is_file && !n.is_empty()) else {
        // The destination's answer is awaited all the same: its connection, kept for the
        // ticket, must not hold one of the server's places while nobody uses it.
        if let Some(asked) = dst_asked {
            let _ = asked.recv();
        }
        return checked_here(Ok(dst));
    };
    dial_session(&dst);
    // A file pushed to one server, its session opened at once: nobody asks what DST is.
    // The push goes to `DST/NAME` and its server puts the file there if DST is a directory,
    // else at DST itself (the push asks beside its listing, to check the file against the
    // right one). One round trip less before the data leaves.
    let one_server =
        matches!(&dst, Endpoint::Remote { path, also, .. } if also.is_empty() && !path.is_empty());
    let server_picks = dial_ahead.is_some_and(|a| a.server_checks_link && a.server_picks_dir);
    if push && one_server && server_picks && !copied_as_link(src) {
        return Ok(Destination {
            endpoint: self::inside(dst, &name),
            link_left_to_server: false,
            or_parent_left_to_server: true,
        });
    }
    let inside = match dst_asked {
        Some(asked) => asked.recv().unwrap_or(false),
        None => is_directory(&dst, key),
    };
    match inside {
        true => at_own_name(src, self::inside(dst, &name), push, dial_ahead, key),
        false => checked_here(Ok(dst)),
    }
}

/// Whether `src` is a local symlink copied as the link (not one to a directory, which is
/// followed): it puts a link at `DST/NAME`, never writing through what is there, so its own
/// earlier copy there, a link, is replaced as any re-run replaces it (review 2026-11-30 of
/// protocol 23, F4: the second copy was refused).
fn copied_as_link(src: &Endpoint) -> bool {
    matches!(src, Endpoint::Local(p)
        if p.symlink_metadata().is_ok_and(|m| m.is_symlink())
            && !p.metadata().is_ok_and(|m| m.is_dir()))
}

/// Whether the server that writes `dst` (`DST/NAME`) refuses a symlink there itself, in the
/// push's `Open`: a push to one server, its session opened at once, or a copy between two
/// servers, which saves the three round trips of asking it first.
fn server_checks_link(
    src: &Endpoint,
    dst: &Endpoint,
    push: bool,
    dial_ahead: Option<DialAhead>,
) -> bool {
    let one_server = matches!(dst, Endpoint::Remote { also, .. } if also.is_empty());
    let pushed = push || matches!(src, Endpoint::Remote { .. });
    pushed && one_server && dial_ahead.is_some_and(|a| a.server_checks_link)
}

/// `dst`, which is `DST/NAME` with NAME the source's own (into `DST/`, or a single file into
/// the directory `DST`): a name the user did not type, so a symlink there is refused, never
/// followed nor replaced, by the server that writes it (see [`server_checks_link`]) or asked
/// here first. Before, a single file copied to a directory `DST` without the slash, locally,
/// between two servers or over ssh, replaced such a link.
fn at_own_name(
    src: &Endpoint,
    dst: Endpoint,
    push: bool,
    dial_ahead: Option<DialAhead>,
    key: &Credentials,
) -> Result<Destination, TransferError> {
    if copied_as_link(src) {
        return Ok(Destination {
            endpoint: dst,
            link_left_to_server: false,
            or_parent_left_to_server: false,
        });
    }
    let link_left_to_server = server_checks_link(src, &dst, push, dial_ahead);
    let endpoint = match link_left_to_server {
        true => dst,
        false => no_link_at(dst, key)?,
    };
    Ok(Destination {
        endpoint,
        link_left_to_server,
        or_parent_left_to_server: false,
    })
}

/// What [`into_directory`] may start for the copy that follows it: that copy's session.
#[derive(Clone, Copy, Debug, Default)]
pub struct DialAhead {
    /// The copy's `--tcp-buffer` (`None`: automatic).
    pub tcp_buffer: Option<u64>,
    /// A push into `DST/`, or a copy between two servers, may leave it to the destination's
    /// server to refuse a symlink at `DST/NAME` (the push's `Open` says so, see
    /// [`TransferOptions::no_link_at_dst`]); not where something acts on `DST/NAME` before
    /// that push opens (`--delete`'s extras).
    pub server_checks_link: bool,
    /// A single file pushed to `DST` may leave it to the server to put it in DST or at DST
    /// ([`Destination::or_parent_left_to_server`]); not where the copy shows its destination
    /// as the user named it before it starts (over ssh).
    pub server_picks_dir: bool,
}

/// Where a copy goes, as [`into_directory`] found it.
#[derive(Debug)]
pub struct Destination {
    pub endpoint: Endpoint,
    /// Nobody asked whether `endpoint` (`DST/NAME`) is a symlink: the copy must set
    /// [`TransferOptions::no_link_at_dst`] for the push that writes it to be refused there.
    pub link_left_to_server: bool,
    /// Nobody asked whether DST is a directory: `endpoint` is `DST/NAME`, and the copy must
    /// set [`TransferOptions::dst_or_parent`] for its server to put the file there or at DST.
    pub or_parent_left_to_server: bool,
}

/// `DST/NAME`, unless it is a symlink: NAME is SRC's, not a path the user named, and a copy
/// through a link there would write (and `--delete` remove) wherever it points. rsync
/// replaces such a link; sprat leaves it to the user.
fn no_link_at(dst: Endpoint, key: &Credentials) -> Result<Endpoint, TransferError> {
    let target = match &dst {
        Endpoint::Local(p) => std::fs::read_link(p)
            .ok()
            .map(|t| t.into_os_string().into_vec()),
        // Its connection is kept for what the copy asks next (see `into_directory`).
        Endpoint::Remote { addr, path, .. } => super::remote::stat_keeping(addr, key, path)
            .ok()
            .filter(|e| e.kind == sprat_proto::namespace::NsKind::Symlink)
            .map(|e| e.target),
    };
    match target {
        Some(target) => Err(TransferError::Usage(link_not_followed(
            &dst.to_string(),
            &target,
        ))),
        None => Ok(dst),
    }
}

/// Why a copy into `DST/` does not go to `shown` (`DST/NAME`), a symlink to `target`: said
/// by the client, or by a server the push left it to (see [`into_directory`]).
pub(crate) fn link_not_followed(shown: &str, target: &[u8]) -> String {
    // A target of up to 4 KiB is cut: the advice after it must fit in a server's message.
    let (target, cut) = match target.len() > LINK_TARGET_SHOWN {
        true => (&target[..LINK_TARGET_SHOWN], "..."),
        false => (target, ""),
    };
    format!(
        "'{shown}' is a symbolic link (to '{}{cut}'): a copy into the directory goes to that \
         name, and sprat does not follow a link there that you did not name; remove the \
         link, or name the destination itself",
        sprat_store::display_bytes(target)
    )
}

/// Most bytes of a link's target [`link_not_followed`] shows.
const LINK_TARGET_SHOWN: usize = 256;

/// `name` inside the directory `dst`.
fn inside(dst: Endpoint, name: &[u8]) -> Endpoint {
    match dst {
        Endpoint::Local(d) => Endpoint::Local(d.join(std::ffi::OsStr::from_bytes(name))),
        Endpoint::Remote { addr, path, also } => Endpoint::Remote {
            addr,
            path: sprat_store::relpath::join(&path, name),
            also,
        },
    }
}

/// Whether `ep` is a directory (a server's is asked, its connection kept for what the copy
/// asks next; a symlink to one counts locally only).
fn is_directory(ep: &Endpoint, key: &Credentials) -> bool {
    match ep {
        Endpoint::Local(d) => std::fs::metadata(d).is_ok_and(|m| m.is_dir()),
        Endpoint::Remote { addr, path, .. } => super::remote::stat_keeping(addr, key, path)
            .is_ok_and(|e| e.kind == sprat_proto::namespace::NsKind::Dir),
    }
}

/// The scheme of `arg` when it is a URL of a scheme other than sprat's (`http://...`): a
/// name of letters, digits, `+`, `-` and `.`, starting with a letter, then `://`.
fn other_scheme(arg: &[u8]) -> Option<&str> {
    let end = arg.windows(3).position(|w| w == b"://")?;
    let scheme = std::str::from_utf8(&arg[..end]).ok()?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(scheme)
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Local(p) => write!(f, "{}", p.display()),
            Endpoint::Remote { addr, path, also } => {
                write!(f, "sprat://{addr}")?;
                for more in also {
                    write!(f, ",{more}")?;
                }
                write!(f, "/{}", String::from_utf8_lossy(path))
            }
        }
    }
}

/// Copies `src` to `dst`; afterwards `dst` holds the contents of `src`.
pub fn copy(
    src: &Endpoint,
    dst: &Endpoint,
    key: &Credentials,
    options: &TransferOptions,
) -> Result<Report, TransferError> {
    copy_retrying(src, dst, key, options, &mut |notice| {
        eprintln!("sprat: {}", crate::text::printable(&notice.to_string()))
    })
}

/// [`copy`], telling `notify` of each failed attempt that is followed by another (see
/// [`super::retry`]).
pub fn copy_retrying(
    src: &Endpoint,
    dst: &Endpoint,
    key: &Credentials,
    options: &TransferOptions,
    notify: &mut dyn FnMut(&super::retry::Notice),
) -> Result<Report, TransferError> {
    options.validate()?;
    check_selection(src, options)?;
    check_servers(src, dst)?;
    // A server that refused a connection for want of places (its `--max-connections`, or
    // those of this address) may admit fewer streams: each such attempt is followed by one
    // with half as many, down to one, and a push's listing then made before its session (a
    // session that waits for its listing must not hold the place the listing needs).
    let mut narrowed: Option<TransferOptions> = None;
    let not_sent_are = match options.skip {
        SkipRule::Update => Some("up to date already, or newer at the destination (-u)"),
        SkipRule::IgnoreExisting => {
            Some("left alone, being at the destination (--ignore-existing)")
        }
        _ => None,
    };
    // Whether the run that just failed had copied anything (its counts start again with each
    // run): then `--retry-for` starts again too.
    let progressed = || {
        let now = options.progress.snapshot();
        now.files_done > now.files_skipped || now.bytes_done > now.bytes_skipped
    };
    let report = super::retry::retrying(options.retry_for, notify, &progressed, || {
        let these = narrowed.as_ref().unwrap_or(options);
        if let Some(gone) = options.transport.gone() {
            return Err(gone);
        }
        these.progress.restart();
        let (used, listed_first) = (these.streams, these.list_first);
        copy_once(src, dst, key, these).map_err(|e| {
            if e.is_busy() {
                let streams = fewer_streams(used);
                if used != Some(streams) || !listed_first {
                    narrowed = Some(TransferOptions {
                        streams: Some(streams),
                        list_first: true,
                        ..options.clone()
                    });
                    return e.then(&format!(
                        "the next attempt uses {}, a push's listing of its destination first",
                        counted(streams)
                    ));
                }
            }
            e
        })
    });
    report.map(|r| Report { not_sent_are, ..r })
}

/// The streams an attempt uses after one a server refused for want of places with
/// `streams` (`None`: chosen by sprat, which starts with a few or more).
fn fewer_streams(streams: Option<usize>) -> usize {
    streams.map_or(2, |n| (n / 2).max(1))
}

fn counted(streams: usize) -> String {
    crate::report::counted(streams as u64, "stream", "streams")
}

/// Refuses a selection that cannot be applied: one too large to send to the server that
/// scans a remote source, or `--delete` with `--files-from` (what would "not in the source"
/// mean for a list?).
pub(crate) fn check_selection(
    src: &Endpoint,
    options: &TransferOptions,
) -> Result<(), TransferError> {
    if options.delete && options.selection.files_from.is_some() {
        return Err(TransferError::Usage(
            "--delete cannot be used with --files-from".into(),
        ));
    }
    if matches!(src, Endpoint::Remote { .. }) {
        crate::config::wire_selection(&options.selection)
            .check()
            .map_err(|e| TransferError::Usage(e.to_string()))?;
    }
    Ok(())
}

/// Refuses several servers in one URL where they cannot be used: only a push from local
/// storage and a pull to it spread over several servers.
fn check_servers(src: &Endpoint, dst: &Endpoint) -> Result<(), TransferError> {
    let several = |e: &Endpoint| matches!(e, Endpoint::Remote { also, .. } if !also.is_empty());
    let (local_src, local_dst) = (
        matches!(src, Endpoint::Local(_)),
        matches!(dst, Endpoint::Local(_)),
    );
    if (several(src) && !local_dst) || (several(dst) && !local_src) {
        let named = if several(src) { src } else { dst };
        return Err(TransferError::Usage(format!(
            "'{named}' names several servers, which only a copy between them and local files \
             (a push or a pull) can use; name one of them"
        )));
    }
    Ok(())
}

/// One attempt of a copy.
fn copy_once(
    src: &Endpoint,
    dst: &Endpoint,
    key: &Credentials,
    options: &TransferOptions,
) -> Result<Report, TransferError> {
    super::overlap::refuse_overlap(src, dst, key, options.delete)?;
    // Extras go before the copy (only what the source does not have at all), so that the
    // copy's last pass sets the attributes of the directories they were in.
    let (deleted, failures) = if options.delete {
        super::delete::delete_extras(src, dst, key, options)?
    } else {
        (0, Vec::new())
    };
    let mut report = copy_only(src, dst, key, options)?;
    report.deleted = deleted;
    if !matches!((src, dst), (Endpoint::Local(_), Endpoint::Local(_))) {
        report.encryption = Some(crate::net::tls::observed().describe());
    }
    for (path, text) in failures {
        report.add_failure(&path, &format!("cannot delete: {text}"));
    }
    Ok(report)
}

fn copy_only(
    src: &Endpoint,
    dst: &Endpoint,
    key: &Credentials,
    options: &TransferOptions,
) -> Result<Report, TransferError> {
    match (src, dst) {
        (Endpoint::Local(s), Endpoint::Local(d)) => super::local::copy(s, d, options, src, dst),
        (Endpoint::Local(s), Endpoint::Remote { addr, path, also }) if also.is_empty() => {
            super::push::push(s, addr, path, key, options, src, dst)
        }
        (Endpoint::Local(s), Endpoint::Remote { addr, path, also }) => {
            let servers: Vec<&str> = std::iter::once(addr)
                .chain(also)
                .map(|a| a.as_str())
                .collect();
            super::spread::push(s, &servers, path, key, options, src, dst)
        }
        (Endpoint::Remote { addr, path, also }, Endpoint::Local(d)) if also.is_empty() => {
            super::pull::pull(addr, path, d, key, options, src, dst)
        }
        (Endpoint::Remote { addr, path, also }, Endpoint::Local(d)) => {
            let servers: Vec<&str> = std::iter::once(addr)
                .chain(also)
                .map(|a| a.as_str())
                .collect();
            super::spread::pull(&servers, path, d, key, options, src, dst)
        }
        (
            Endpoint::Remote {
                addr: src_addr,
                path: src_path,
                ..
            },
            Endpoint::Remote {
                addr: dst_addr,
                path: dst_path,
                ..
            },
        ) => super::remote::third_party(
            src_addr,
            src_path,
            dst_addr,
            dst_path,
            key,
            options,
            src.to_string(),
            dst.to_string(),
        ),
    }
}
