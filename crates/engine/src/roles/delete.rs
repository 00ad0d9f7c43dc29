//! `--delete`: before a copy, what the destination has and the source does not is removed,
//! only inside the destination (the copy's last pass then sets the attributes of the
//! directories they were in): both sides are listed (a server's streamed reply or a
//! scan of a local tree), and each top-most extra entry is removed with everything below it,
//! never following a symlink (a local destination through the store's confined operations, a
//! server's with `Remove` requests, all sent on one connection before the replies are read).
//! The source is listed as the copy selects it (`--exclude`...), and an entry of the
//! destination that the rules exclude, or that is in an excluded directory, is left alone, as
//! rsync's receiver does without `--delete-excluded`. The partial file and journal an
//! interrupted copy left for a file (see `sprat_store::partial`) belong to that file: they are
//! kept while the source has it (the copy resumes from them) and removed with it otherwise.

use super::destination::{scan_local, scan_local_source_counting_errors};
use super::endpoint::Endpoint;
use super::remote;
use crate::config::Selection;
use crate::config::TransferOptions;
use crate::error::TransferError;
use crate::net::Credentials;
use sprat_proto::namespace::{NsKind, Request};
use sprat_proto::Message;
use sprat_store::{partial, relpath, EntryType, Root};
use std::collections::{HashMap, HashSet};

/// A tree's paths with whether each is a directory, the final paths of its partial files, and
/// why what is below some of its entries is unknown, if it is (entries that could not be read
/// or listed).
type Listed = (Vec<(Vec<u8>, bool)>, Vec<Vec<u8>>, Option<String>);

/// Every path below `ep` (relative to it; the root itself left out), whether it is a
/// directory, and the final paths of the partial files there (from a server's listing, or
/// the journals of a local tree); with `source`, only what the transfer selects.
fn paths(
    ep: &Endpoint,
    key: &Credentials,
    options: &TransferOptions,
    source: bool,
) -> Result<Listed, TransferError> {
    let mut out = Vec::new();
    let mut partials = Vec::new();
    let mut unreadable = 0;
    // The first of the destination's directories that could not be listed, and why.
    let mut failed: Option<(Vec<u8>, String)> = None;
    let selection = match source {
        true => options.selection.clone(),
        false => Selection::default(),
    };
    match ep {
        Endpoint::Local(p) if source => {
            unreadable = scan_local_source_counting_errors(p, options, |e| {
                if e.error.is_none() {
                    out.push((e.path, e.kind == EntryType::Dir))
                }
            })?
        }
        Endpoint::Local(p) => {
            let mut logs = Vec::new();
            scan_local(p, options, |e| {
                if let Some(error) = e.error {
                    // What --exclude protects at the destination is kept anyway.
                    if !options.selection.filter.protected(&e.path, true) {
                        failed.get_or_insert((e.path, error));
                    }
                    return;
                }
                if e.kind == EntryType::File && partial::is_log_path(&e.path) {
                    logs.push(e.path.clone());
                }
                out.push((e.path, e.kind == EntryType::Dir))
            })?;
            if !logs.is_empty() {
                let root = Root::open(p)?;
                partials.extend(
                    logs.iter()
                        .filter_map(|l| partial::describe(&root, l))
                        .map(|d| d.0),
                );
            }
        }
        Endpoint::Remote { addr, path, .. } => {
            // A listing names each partial file by its final path, kind partial: no entry.
            let listed =
                remote::list_summed(addr, key, path, true, &selection, None, |e| match e.kind {
                    NsKind::Partial => partials.push(e.path),
                    // What the server could not list (see `extras_unless_unreadable`).
                    NsKind::Failed if source => unreadable += 1,
                    NsKind::Failed => {
                        let why = String::from_utf8_lossy(&e.target).into_owned();
                        if !options.selection.filter.protected(&e.path, true) {
                            failed.get_or_insert((e.path, why));
                        }
                    }
                    _ => out.push((e.path, e.kind == NsKind::Dir)),
                });
            match listed {
                Ok(()) => {}
                Err(TransferError::Remote {
                    code: sprat_proto::ErrorCode::NotFound,
                    ..
                }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let unknown = match failed {
        Some((at, why)) => Some(format!(
            "--delete skipped: the destination's directory '{}' cannot be listed ({}), so what \
             it holds that the source lacks cannot be told",
            crate::text::printable(&sprat_store::display_path(&at)),
            crate::text::printable(&why)
        )),
        None if unreadable > 0 => Some(format!(
            "--delete skipped: {} of the source could not be read, and what is below an \
             unreadable directory would have looked deleted from it",
            crate::report::counted(unreadable, "entry", "entries")
        )),
        None => None,
    };
    Ok((out, partials, unknown))
}

/// Whether a listing (as [`paths`] returns it, the root's own entry included) is of a
/// directory; a listing without its root (a destination not made yet) counts as one.
fn root_is_dir(listed: &[(Vec<u8>, bool)]) -> bool {
    listed
        .iter()
        .find(|(p, _)| p.is_empty())
        .is_none_or(|(_, dir)| *dir)
}

/// The final path each hidden partial file or journal among `partials` (final paths) stands
/// for, by its hidden path.
fn partial_owners(partials: Vec<Vec<u8>>) -> HashMap<Vec<u8>, Vec<u8>> {
    let mut owners = HashMap::new();
    for file in partials {
        for hidden in partial::hidden_paths(&file) {
            owners.insert(hidden, file.clone());
        }
    }
    owners
}

/// The final path of the file `path` is a hidden partial file or journal of, if it is one.
fn owner_of<'a>(
    path: &[u8],
    owners: &'a HashMap<Vec<u8>, Vec<u8>>,
) -> Option<std::borrow::Cow<'a, [u8]>> {
    if let Some(file) = owners.get(path) {
        return Some(file.as_slice().into());
    }
    let (dir, name) = relpath::split_parent(path);
    let file = partial::final_name_of_hidden(name)?;
    Some(relpath::join(dir, file).into())
}

/// [`extras_unless_unreadable`] for a dry run: a source with unreadable entries is an error.
pub(crate) fn extras(
    src: &Endpoint,
    dst: &Endpoint,
    key: &Credentials,
    options: &TransferOptions,
) -> Result<Vec<Vec<u8>>, TransferError> {
    extras_unless_unreadable(src, dst, key, options)?.map_err(TransferError::Local)
}

/// The destination's top-most entries that the source does not have (an extra directory
/// stands for everything below it), sorted; or why none may be deleted: some of the
/// source's entries could not be read, so what is below them would look deleted from it
/// (rsync too deletes nothing after an I/O error).
pub(crate) fn extras_unless_unreadable(
    src: &Endpoint,
    dst: &Endpoint,
    key: &Credentials,
    options: &TransferOptions,
) -> Result<Result<Vec<Vec<u8>>, String>, TransferError> {
    let (listed, _, unknown) = paths(src, key, options, true)?;
    if let Some(why) = unknown {
        return Ok(Err(why));
    }
    // A single file replaces one name, or goes inside DST: nothing else of DST is the copy's
    // to delete (as with rsync), whatever DST holds.
    if !root_is_dir(&listed) {
        return Ok(Ok(Vec::new()));
    }
    let source: HashSet<Vec<u8>> = listed
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| !p.is_empty())
        .collect();
    let filter = &options.selection.filter;
    let (mut dest, partials, unknown) = paths(dst, key, options, false)?;
    if let Some(why) = unknown {
        return Ok(Err(why));
    }
    dest.retain(|(p, _)| !p.is_empty());
    // Entries a user made, not an interrupted copy's partial files.
    let dest_top = dest
        .iter()
        .filter(|(p, _)| !p.contains(&b'/') && partial::final_name_of_hidden(p).is_none())
        .count();
    let owners = partial_owners(partials);
    // With `--ignore-existing`, a file the destination has is never written again: a partial
    // file of it is of no use (an interrupted run left it before the file appeared there).
    let kept_files: HashSet<Vec<u8>> = match options.keeps_existing() {
        true => {
            let with_partial: HashSet<Vec<u8>> = dest
                .iter()
                .filter(|(_, is_dir)| !*is_dir)
                .filter_map(|(p, _)| owner_of(p, &owners).map(|f| f.into_owned()))
                .collect();
            dest.iter()
                .filter(|(p, is_dir)| !*is_dir && with_partial.contains(p))
                .map(|(p, _)| p.clone())
                .collect()
        }
        false => HashSet::new(),
    };
    let (protected, mut extra): (Vec<_>, Vec<_>) = dest
        .into_iter()
        .filter(|(p, _)| !source.contains(p))
        // A partial file of a file the source has is what the copy resumes from.
        .filter(|(p, is_dir)| {
            *is_dir
                || owner_of(p, &owners)
                    .is_none_or(|f| !source.contains(f.as_ref()) || kept_files.contains(f.as_ref()))
        })
        .partition(|(p, is_dir)| filter.protected(p, *is_dir));
    // A directory holding a protected entry stays (its other extras go one by one).
    let holding: HashSet<&[u8]> = protected
        .iter()
        .flat_map(|(p, _)| relpath::ancestors(p))
        .collect();
    let extra: Vec<Vec<u8>> = extra
        .drain(..)
        .map(|(p, _)| p)
        .filter(|p| !holding.contains(p.as_slice()))
        .collect();
    let extra = top_most(extra);
    if !options.force_delete {
        refuse_to_empty(dst, dest_top, &extra)?;
    }
    Ok(Ok(extra))
}

/// Refuses a `--delete` that would remove every entry the destination holds at its top: a
/// DST sharing nothing with SRC is almost always the directory SRC was meant to go into (`cp
/// --delete src backup/`, as rsync puts `src` inside `backup/`), where sprat's DST names the
/// copy itself and would lose all of `backup`. `--force-delete` (or emptying DST first) says
/// otherwise.
fn refuse_to_empty(
    dst: &Endpoint,
    dest_top: usize,
    extra: &[Vec<u8>],
) -> Result<(), TransferError> {
    let extra_top = extra
        .iter()
        .filter(|p| !p.contains(&b'/') && partial::final_name_of_hidden(p).is_none())
        .count();
    if dest_top == 0 || extra_top < dest_top {
        return Ok(());
    }
    Err(TransferError::Usage(format!(
        "--delete would remove everything in '{dst}' ({dest_top} entries, none of them in the \
         source): DST names the copy of SRC itself (like rsync's SRC/ DST/), so to copy SRC \
         into that directory name DST/NAME; to make it a copy of SRC anyway, add --force-delete"
    )))
}

/// Leaves out of `paths` every one below another of them; the rest sorted component by
/// component, so that everything below a directory comes right after it (sorted as bytes,
/// `data-old` and `data.bak` come between `data` and `data/x`, which then stayed, and was
/// removed again after `data`: review 2026-11-30 of the filters, F3).
fn top_most(mut paths: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    paths.sort_by(|a, b| a.split(|&c| c == b'/').cmp(b.split(|&c| c == b'/')));
    let mut out: Vec<Vec<u8>> = Vec::new();
    for p in paths {
        let below_last = out
            .last()
            .is_some_and(|last| p.starts_with(last) && p.get(last.len()) == Some(&b'/'));
        if !below_last {
            out.push(p);
        }
    }
    out
}

/// Paths that could not be removed, and why.
pub(crate) type Failures = Vec<(Vec<u8>, String)>;

/// Removes the extras of `dst`; returns how many top-most entries were removed (a directory
/// counts once, with everything below it) and the failures.
pub(crate) fn delete_extras(
    src: &Endpoint,
    dst: &Endpoint,
    key: &Credentials,
    options: &TransferOptions,
) -> Result<(u64, Failures), TransferError> {
    let extra = match extras_unless_unreadable(src, dst, key, options)? {
        Ok(extra) => extra,
        Err(why) => return Ok((0, vec![(Vec::new(), why)])),
    };
    let mut removed = 0;
    let mut failures = Vec::new();
    if extra.is_empty() {
        return Ok((0, failures));
    }
    match dst {
        Endpoint::Local(d) => {
            let root = Root::open(d)?;
            for rel in extra {
                match sprat_store::namespace::remove(&root, &rel, true) {
                    Ok(_) => {
                        removed += 1;
                        told_deleted(options, &rel);
                    }
                    Err(e) if being_written(&e.to_string()) => {}
                    Err(e) => failures.push((rel, e.to_string())),
                }
            }
        }
        Endpoint::Remote { addr, path, .. } => {
            let remove = |rel: &[u8]| Request::Remove {
                path: relpath::join(path, rel),
                recursive: true,
            };
            let mut conn = remote::request(addr, key, remove(&extra[0]))?;
            for rel in &extra[1..] {
                conn.send(&Message::Request(remove(rel)))?;
            }
            for rel in extra {
                match conn.recv_control() {
                    Ok(Message::ReplyEnd) => {
                        removed += 1;
                        told_deleted(options, &rel);
                    }
                    Ok(other) => {
                        return Err(conn.protocol(format!("unexpected reply {other:?}")));
                    }
                    Err(TransferError::Remote { text, .. }) if being_written(&text) => {}
                    // A request the server refused: the others go on.
                    Err(TransferError::Remote { text, .. }) => failures.push((rel, text)),
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok((removed, failures))
}

/// Whether a removal was refused because a running transfer is writing the entry (the partial
/// copy of a file another copy is writing into this destination now): not this copy's to
/// remove, and no failure of it.
fn being_written(error: &str) -> bool {
    let refused = error.ends_with(sprat_store::namespace::BEING_WRITTEN);
    if refused {
        tracing::info!(error, "left for the transfer writing it");
    }
    refused
}

/// `-v`: an entry removed, told as it is.
fn told_deleted(options: &TransferOptions, rel: &[u8]) {
    if let Some(log) = &options.file_log {
        log.deleted(rel);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_extra_directory_stands_for_everything_below_it() {
        let paths: Vec<Vec<u8>> = ["a", "a/b", "a/b/c", "ab", "b/x", "b/x/y", "c"]
            .iter()
            .map(|p| p.as_bytes().to_vec())
            .collect();
        let top: Vec<&[u8]> = vec![b"a", b"ab", b"b/x", b"c"];
        assert_eq!(super::top_most(paths), top);
        // Names that sort between a directory and its entries, in any order given.
        let paths: Vec<Vec<u8>> = [
            "data/x",
            "data-old/y",
            "data 2",
            "data",
            "data.bak",
            "data-old",
        ]
        .iter()
        .map(|p| p.as_bytes().to_vec())
        .collect();
        let top: Vec<&[u8]> = vec![b"data", b"data 2", b"data-old", b"data.bak"];
        assert_eq!(super::top_most(paths), top);
    }
}
