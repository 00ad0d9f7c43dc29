//! Whether a copy's source and destination are one tree: a destination that is the source or
//! lies inside it (the copy would read what it writes), and for `--delete` a source inside the
//! destination (the source is not among its own contents, so it would be deleted).
//!
//! Paths are compared by the device and inode of every directory above them, on one running
//! kernel (see `sprat_store::ancestry`): a server answers `Locate` for its paths, and a local
//! path is located here. That sees through symlinks, bind mounts, a local path inside a
//! server's export, one server under two names and two servers exporting nested trees. Where
//! nothing can be located (the root of a server of several exports), two paths of servers are
//! compared as they are written, when the two servers present one key.
//!
//! Locating costs a connection to each server (a few round trips before the copy starts), so
//! only `--delete`, where an overlap loses data, asks for it. Without it, a local path and a
//! server's path are not compared (a push into a server's export that holds the source nests
//! a copy of the tree in itself), and two servers' paths only by name.

use super::endpoint::Endpoint;
use super::remote;
use crate::error::TransferError;
use crate::net::Credentials;
use sprat_proto::namespace::NsKind;
use sprat_proto::path as wire_path;
use sprat_store::ancestry::{self, Ancestry};
use sprat_store::relpath;

/// Refuses a copy whose destination is its source or inside it, and with `delete` also one
/// whose source is inside its destination (before anything is deleted or written).
pub(crate) fn refuse_overlap(
    src: &Endpoint,
    dst: &Endpoint,
    key: &Credentials,
    delete: bool,
) -> Result<(), TransferError> {
    let (dst_in_src, src_in_dst) = match (src, dst) {
        (Endpoint::Local(s), Endpoint::Local(d)) => (
            s.is_dir() && super::destination::is_inside(d, s),
            super::destination::is_inside(s, d),
        ),
        _ if delete => match located_pair(src, dst, key) {
            Some((s, d)) => (d.is_within(&s), s.is_within(&d)),
            None => by_name(src, dst, key, delete)?,
        },
        _ => by_name(src, dst, key, false)?,
    };
    if dst_in_src {
        return Err(TransferError::Usage(format!(
            "destination '{dst}' is the source or inside it"
        )));
    }
    if delete && src_in_dst {
        return Err(TransferError::Usage(format!(
            "--delete would delete the source: '{src}' is inside the destination '{dst}', \
             whose entries the source does not have are removed; name a destination that \
             does not hold the source (DST/ copies into DST/NAME)"
        )));
    }
    Ok(())
}

/// Refuses a pull into `dst`, a local path at or below the pulled directory `source` (on this
/// host's kernel, as the server's `Opened` told): the copy would read what it writes. A push
/// is refused so by its server (see `roles::server`).
pub(crate) fn refuse_a_pull_into_its_source(
    source: sprat_proto::SourceId,
    dst: &std::path::Path,
    dst_label: &str,
) -> Result<(), TransferError> {
    if passes_through(source, || ancestry::of_local(dst)) {
        return Err(TransferError::Usage(format!(
            "destination '{dst_label}' is the pulled source or inside it (the same directory on \
             this host): the copy would read what it writes"
        )));
    }
    Ok(())
}

/// Whether the way up from a path on this host (its `ancestry`, asked only then) passes
/// through the directory `source`, when `source` is on this host's kernel: the path is that
/// directory or lies below it.
pub(crate) fn passes_through(
    source: sprat_proto::SourceId,
    ancestry: impl FnOnce() -> Result<Ancestry, rustix::io::Errno>,
) -> bool {
    source.host != [0; 16]
        && ancestry::boot_id() == Some(source.host)
        && ancestry().is_ok_and(|a| a.ids.contains(&(source.dev, source.ino)))
}

/// Where both sides are, when both could be located on one kernel: `None` when either could
/// not be (nothing is then known), and two unrelated ancestries for two kernels.
fn located_pair(src: &Endpoint, dst: &Endpoint, key: &Credentials) -> Option<(Ancestry, Ancestry)> {
    let (s, d) = std::thread::scope(|scope| {
        let other = scope.spawn(|| locate(dst, key));
        let mine = locate(src, key);
        (mine, other.join().ok().flatten())
    });
    let ((s_host, s), (d_host, d)) = (s?, d?);
    // On two kernels nothing overlaps: two ancestries with nothing in common.
    match s_host == d_host {
        true => Some((s, d)),
        false => Some((Ancestry::default(), Ancestry::default())),
    }
}

/// The kernel `ep` is on and its ancestry there; `None` when unknown.
fn locate(ep: &Endpoint, key: &Credentials) -> Option<([u8; 16], Ancestry)> {
    match ep {
        Endpoint::Local(p) => ancestry::of_local(p)
            .ok()
            .and_then(|a| Some((ancestry::boot_id()?, a))),
        Endpoint::Remote { addr, path, .. } => match remote::locate(addr, key, path) {
            Ok(l) if l.host != [0; 16] && !l.ids.is_empty() => Some((
                l.host,
                Ancestry {
                    exists: l.exists,
                    ids: l.ids,
                },
            )),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(%e, "cannot locate '{ep}'");
                None
            }
        },
    }
}

/// Without locations: two paths of servers compared as they are written, when the servers are
/// one (the same address, or one key); `(destination in source, source in destination)`.
fn by_name(
    src: &Endpoint,
    dst: &Endpoint,
    key: &Credentials,
    delete: bool,
) -> Result<(bool, bool), TransferError> {
    let (
        Endpoint::Remote {
            addr: a, path: s, ..
        },
        Endpoint::Remote {
            addr: b, path: d, ..
        },
    ) = (src, dst)
    else {
        return Ok((false, false));
    };
    let (dst_in_src, src_in_dst) = (wire_path::is_within(d, s), wire_path::is_within(s, d));
    if !(dst_in_src || delete) || !remote::one_server(a, b, key)? {
        return Ok((false, false));
    }
    if delete {
        // Paths on one server compare only as they are: a symlink on either would hide that
        // one holds the other.
        for (addr, path) in [(a, s), (b, d)] {
            if let Some(link) = first_symlink_in(addr, path, key) {
                return Err(TransferError::Usage(format!(
                    "--delete between two paths of one server, and '{}' is a symbolic link \
                     on it: whether the destination holds the source cannot be told; name \
                     both by their real paths",
                    sprat_store::display_path(&link)
                )));
            }
        }
    }
    Ok((dst_in_src, src_in_dst))
}

/// The first directory of `path` on the server at `addr` that is a symlink (the path itself
/// included), asked one component after another.
fn first_symlink_in(addr: &str, path: &[u8], key: &Credentials) -> Option<Vec<u8>> {
    let mut at = Vec::new();
    for part in path.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
        at = relpath::join(&at, part);
        match remote::stat(addr, key, &at) {
            Ok(e) if e.kind == NsKind::Symlink => return Some(at),
            Ok(e) if e.kind == NsKind::Dir => {}
            _ => return None,
        }
    }
    None
}
