//! The namespace commands: `ls`, `stat`, `du`, `mkdir`, `rm`, `mv`, `sum`. Each is one request
//! to the server and one reply, however large the tree.

use crate::args::SshArgs;
use crate::args::{DuArgs, LsArgs, MkdirArgs, MvArgs, RmArgs, StatArgs, SumArgs};
use anyhow::bail;
use serde_json::json;
use sprat_engine::report::counted;
use sprat_engine::ssh::Launched;
use sprat_engine::text::printable;
use sprat_engine::Credentials;
use sprat_engine::{remote, Endpoint, TransferError};
use sprat_engine::{NsEntry, NsKind, Request, SpecialKind, SumAlgo};
use std::ffi::OsStr;

/// A server's address and a path on it.
type Place = (String, Vec<u8>);

/// The servers a command's arguments name (`sprat://HOST:PORT/PATH`, or `[USER@]HOST:PATH`
/// through a one-shot server started over ssh, which lives as long as the returned
/// [`Launched`]), each argument's server address and path, and the credentials for them
/// (`given`, or the one-time token and pinned keys of the servers started).
fn remotes(
    args: &[&OsStr],
    given: &Credentials,
    ssh: &SshArgs,
) -> anyhow::Result<(Launched, Vec<Place>)> {
    let launched = sprat_engine::ssh::resolve(args, given, &crate::ssh_options(ssh)?)?;
    let mut places = Vec::new();
    for e in &launched.endpoints {
        match e {
            Endpoint::Remote { addr, path, .. } => places.push((addr.clone(), path.clone())),
            Endpoint::Local(p) => {
                return Err(TransferError::Usage(format!(
                    "'{}' is not a sprat://HOST:PORT/PATH URL or a [USER@]HOST:PATH",
                    p.display()
                ))
                .into())
            }
        }
    }
    Ok((launched, places))
}

/// [`remotes`] for a command of one argument.
fn remote(
    arg: &OsStr,
    given: &Credentials,
    ssh: &SshArgs,
) -> anyhow::Result<(Launched, String, Vec<u8>, Credentials)> {
    let (launched, mut places) = remotes(&[arg], given, ssh)?;
    let (addr, path) = places.remove(0);
    let key = launched.credentials.clone();
    Ok((launched, addr, path, key))
}

/// A path for JSON output: exact (the encoder escapes it).
fn shown(path: &[u8]) -> String {
    sprat_engine::relpath::display_bytes(path).into_owned()
}

/// A path for a terminal: its control characters escaped (see `sprat_engine::text`).
fn printed(path: &[u8]) -> String {
    printable(&sprat_engine::relpath::display_bytes(path)).into_owned()
}

fn kind_name(e: &NsEntry) -> &'static str {
    match (e.kind, e.special()) {
        (NsKind::File, _) => "file",
        (NsKind::Dir, _) => "directory",
        (NsKind::Symlink, _) => "symlink",
        (NsKind::Special, Some((SpecialKind::Fifo, ..))) => "fifo",
        (NsKind::Special, Some((SpecialKind::Socket, ..))) => "socket",
        (NsKind::Special, Some((SpecialKind::CharDevice, ..))) => "character device",
        (NsKind::Special, Some((SpecialKind::BlockDevice, ..))) => "block device",
        (NsKind::Special, None) => "special",
        (NsKind::Partial, _) => "partial",
        (NsKind::Failed, _) => "failed",
    }
}

/// A device's number as `ls -l` shows it (`8, 0`), `None` for anything else.
fn device_number(e: &NsEntry) -> Option<String> {
    match e.special()? {
        (SpecialKind::CharDevice | SpecialKind::BlockDevice, major, minor) => {
            Some(format!("{major}, {minor}"))
        }
        _ => None,
    }
}

/// `drwxr-xr-x`-style permissions.
fn mode_string(e: &NsEntry) -> String {
    let mut s = String::with_capacity(10);
    s.push(match e.kind {
        NsKind::Dir => 'd',
        NsKind::Symlink => 'l',
        NsKind::File => '-',
        NsKind::Special => match e.special() {
            Some((SpecialKind::Fifo, ..)) => 'p',
            Some((SpecialKind::Socket, ..)) => 's',
            Some((SpecialKind::CharDevice, ..)) => 'c',
            Some((SpecialKind::BlockDevice, ..)) => 'b',
            None => '?',
        },
        // Not `p`, which `ls -l` shows for a FIFO.
        NsKind::Partial => '~',
        NsKind::Failed => '!',
    });
    let m = e.mode & 0o7777;
    for (shift, special, lower, upper) in [
        (6, 0o4000, 's', 'S'),
        (3, 0o2000, 's', 'S'),
        (0, 0o1000, 't', 'T'),
    ] {
        let bits = (m >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(match (bits & 1 != 0, m & special != 0) {
            (true, true) => lower,
            (false, true) => upper,
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// `YYYY-MM-DD HH:MM:SS` in UTC.
fn utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The owner and group of `e` as shown: the server's names (escaped), or the ids where a
/// name is missing or `numeric`; `?` when the server sent none.
fn owner_names(e: &NsEntry, numeric: bool) -> (String, String) {
    match &e.owner {
        None => ("?".into(), "?".into()),
        Some(o) => {
            let name = |n: &[u8], id: u32| {
                if numeric || n.is_empty() {
                    id.to_string()
                } else {
                    printed(n)
                }
            };
            (name(&o.user, o.uid), name(&o.group, o.gid))
        }
    }
}

/// The size shown for an entry: a symlink's is the length of its target, as `ls -l` and
/// `stat` show it (the listing carries no data size for it); a special file's is 0 (a
/// device's listed size is its number, see [`device_number`]).
fn shown_size(e: &NsEntry) -> u64 {
    match e.kind {
        NsKind::Symlink => e.target.len() as u64,
        NsKind::Special => 0,
        _ => e.size,
    }
}

/// A size as `ls -lh` shows it: bytes below 1024, else one decimal (under 10) or none in the
/// largest unit of 1024 that keeps the number under 1024 (`4.0K`, `15M`, `1.2G`), rounded up.
fn human_size(bytes: u64) -> String {
    if bytes < 1024 {
        return bytes.to_string();
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    // Rounded up, a value just below the next unit shows as one of it (`1.0M`, not `1024K`).
    while value.ceil() >= 1024.0 && unit < 5 {
        value /= 1024.0;
        unit += 1;
    }
    let letter = ["", "K", "M", "G", "T", "P"][unit];
    let tenths = (value * 10.0).ceil() / 10.0;
    if tenths < 10.0 {
        format!("{tenths:.1}{letter}")
    } else {
        format!("{}{letter}", value.ceil() as u64)
    }
}

/// How long a command waits, in all, for a server that is busy (at its limit of connections)
/// before it gives up, as `cp` tries again for --retry-for.
const BUSY_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `request` again while the server answers that it is busy, which it does before it
/// reads the request (so nothing was done): after 0.5, 1, 2, 4, 8 s and every 8 s then, for
/// [`BUSY_PATIENCE`] in all, with a line on stderr each time.
/// A failure comes back in the user's terms (see [`Launched::in_user_terms`]).
fn when_not_busy<T>(
    launched: &Launched,
    mut request: impl FnMut() -> Result<T, TransferError>,
) -> Result<T, TransferError> {
    let started = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(500);
    loop {
        match request() {
            Err(TransferError::Remote {
                code: sprat_engine::ErrorCode::Busy,
                text,
                ..
            }) if started.elapsed() + pause <= BUSY_PATIENCE => {
                eprintln!(
                    "sprat: server busy ({}); trying again in {:.1} s",
                    printable(&text),
                    pause.as_secs_f64()
                );
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_secs(8));
            }
            done => return done.map_err(|e| launched.in_user_terms(e)),
        }
    }
}

fn entry_json(e: &NsEntry) -> serde_json::Value {
    let owner = e.owner.as_ref();
    let name = |n: &[u8]| (!n.is_empty()).then(|| shown(n));
    json!({
        "uid": owner.map(|o| o.uid),
        "gid": owner.map(|o| o.gid),
        "user": owner.and_then(|o| name(&o.user)),
        "group": owner.and_then(|o| name(&o.group)),
        "path": shown(&e.path),
        "type": kind_name(e),
        "size": shown_size(e),
        "device": device_number(e).map(|n| n.replace(' ', "")),
        "mode": format!("{:04o}", e.mode & 0o7777),
        "mtime": e.mtime_sec,
        "mtime_nsec": e.mtime_nsec,
        "target": if e.kind == NsKind::Symlink { Some(shown(&e.target)) } else { None },
    })
}

fn long_line(e: &NsEntry, name: &str, numeric: bool, human: bool) -> String {
    let (user, group) = owner_names(e, numeric);
    let size = match device_number(e) {
        Some(number) => number,
        None if human => human_size(shown_size(e)),
        None => shown_size(e).to_string(),
    };
    let mut line = format!(
        "{} {user:<8} {group:<8} {size:>12} {} {}",
        mode_string(e),
        utc(e.mtime_sec),
        name
    );
    if e.kind == NsKind::Symlink {
        line.push_str(" -> ");
        line.push_str(&printed(&e.target));
    }
    line
}

pub fn ls(a: &LsArgs, given: &Credentials) -> anyhow::Result<i32> {
    let (launched, addr, path, key) = remote(&a.url, given, &a.ssh)?;
    let key = &key;
    let mut entries = Vec::new();
    when_not_busy(&launched, || {
        entries.clear();
        remote::list(&addr, key, &path, a.recursive, |e| entries.push(e))
    })?;
    // What the server could not list, said on stderr as `ls -R` says it; the rest is listed
    // and the exit code tells (1).
    let mut failed = 0u64;
    entries.retain(|e| {
        if e.kind != NsKind::Failed {
            return true;
        }
        failed += 1;
        eprintln!(
            "sprat: cannot list '{}': {}",
            printed(&sprat_engine::relpath::join(&path, &e.path)),
            printable(&String::from_utf8_lossy(&e.target))
        );
        false
    });
    // A listed file is shown by its own name; a listed directory by its contents.
    let listed_is_dir = entries
        .iter()
        .any(|e| e.path.is_empty() && e.kind == NsKind::Dir);
    if listed_is_dir {
        entries.retain(|e| !e.path.is_empty());
    } else if let Some(e) = entries.first_mut() {
        e.path = sprat_engine::relpath::split_parent(&path).1.to_vec();
    }
    entries.sort_by(|x, y| x.path.cmp(&y.path));
    let mut out = String::new();
    if a.json {
        out = serde_json::to_string(&entries.iter().map(entry_json).collect::<Vec<_>>())? + "\n";
    } else {
        hide_partial_files(&mut entries);
        let mut incomplete = Vec::new();
        for e in &entries {
            let name = printed(&e.path);
            if a.long {
                out.push_str(&long_line(e, &name, a.numeric_ids, a.human_readable));
            } else if e.kind == NsKind::Partial {
                // Names alone are what scripts read: a file that is not there is not named.
                incomplete.push(name);
                continue;
            } else {
                out.push_str(&name);
            }
            out.push('\n');
        }
        if let Some(first) = incomplete.first() {
            eprintln!(
                "sprat: not listed: {} an interrupted copy left incomplete ({first}{}); \
                 `sprat ls -l` marks them with ~, running the copy again completes them",
                counted(incomplete.len() as u64, "file", "files"),
                if incomplete.len() > 1 { ", ..." } else { "" }
            );
        }
    }
    crate::print_quietly(&out)?;
    Ok(if failed > 0 { 1 } else { 0 })
}

/// Leaves out the hidden files in which a large file an interrupted copy left is kept (its
/// partial file and journal, `.NAME.sprat-part` and `.NAME.sprat-part.log`) where the
/// listing has that file as [`NsKind::Partial`]: it stands for them.
fn hide_partial_files(entries: &mut Vec<NsEntry>) {
    let partials: std::collections::HashSet<Vec<u8>> = entries
        .iter()
        .filter(|e| e.kind == NsKind::Partial)
        .map(|e| e.path.clone())
        .collect();
    if partials.is_empty() {
        return;
    }
    entries.retain(|e| {
        let (dir, name) = sprat_engine::relpath::split_parent(&e.path);
        let of = sprat_engine::final_name_of_hidden(name);
        e.kind != NsKind::File
            || of.is_none_or(|f| !partials.contains(&sprat_engine::relpath::join(dir, f)))
    });
}

pub fn stat(a: &StatArgs, given: &Credentials) -> anyhow::Result<i32> {
    let (launched, addr, path, key) = remote(&a.url, given, &a.ssh)?;
    let key = &key;
    let mut e = when_not_busy(&launched, || remote::stat(&addr, key, &path))?;
    e.path = path.clone();
    let out = if a.json {
        serde_json::to_string(&entry_json(&e))? + "\n"
    } else {
        let mut s = format!(
            "  path: {}\n  type: {}\n  size: {}\n  mode: {:04o} ({})\n mtime: {}.{:09} UTC\n",
            printable(&a.url.to_string_lossy()),
            kind_name(&e),
            shown_size(&e),
            e.mode & 0o7777,
            mode_string(&e),
            utc(e.mtime_sec),
            e.mtime_nsec
        );
        if e.kind == NsKind::Symlink {
            s.push_str(&format!("target: {}\n", printed(&e.target)));
        }
        if let Some(number) = device_number(&e) {
            s.push_str(&format!("device: {number}\n"));
        }
        if let Some(o) = &e.owner {
            let (user, group) = owner_names(&e, a.numeric_ids);
            s.push_str(&format!(
                " owner: {user} ({})\n group: {group} ({})\n",
                o.uid, o.gid
            ));
        }
        s
    };
    crate::print_quietly(&out)?;
    Ok(0)
}

pub fn du(a: &DuArgs, given: &Credentials) -> anyhow::Result<i32> {
    let (launched, addr, path, key) = remote(&a.url, given, &a.ssh)?;
    let key = &key;
    let u = when_not_busy(&launched, || remote::du(&addr, key, &path))?;
    let out = if a.json {
        serde_json::to_string(&json!({
            "path": shown(&path), "files": u.files, "dirs": u.dirs, "symlinks": u.symlinks, "bytes": u.bytes,
            "incomplete_files": u.partial_files, "incomplete_bytes": u.partial_bytes,
            "specials": u.specials, "unreadable": u.unreadable,
        }))? + "\n"
    } else {
        let incomplete = if u.partial_files + u.partial_bytes > 0 {
            format!(
                " (and {} kept to resume an interrupted copy, {})",
                counted(u.partial_files, "incomplete file", "incomplete files"),
                sprat_engine::report::human_bytes(u.partial_bytes)
            )
        } else {
            String::new()
        };
        let specials = match u.specials {
            0 => String::new(),
            n => format!(", {}", counted(n, "special file", "special files")),
        };
        format!(
            "{} ({})\t{}, {}, {}{specials}{incomplete}\t{}\n",
            counted(u.bytes, "byte", "bytes"),
            sprat_engine::report::human_bytes(u.bytes),
            counted(u.files, "file", "files"),
            counted(u.dirs, "directory", "directories"),
            counted(u.symlinks, "symlink", "symlinks"),
            printable(&a.url.to_string_lossy())
        )
    };
    crate::print_quietly(&out)?;
    if u.unreadable > 0 {
        eprintln!(
            "sprat: du: {} could not be read on the server (a directory it may not list, or \
             one whose path is longer than a path may be: what it holds is not counted)",
            counted(u.unreadable, "entry", "entries")
        );
        return Ok(1);
    }
    Ok(0)
}

pub fn mkdir(a: &MkdirArgs, given: &Credentials) -> anyhow::Result<i32> {
    let (launched, addr, path, key) = remote(&a.url, given, &a.ssh)?;
    let key = &key;
    let request = Request::Mkdir {
        path,
        parents: a.parents,
    };
    when_not_busy(&launched, || remote::simple(&addr, key, request.clone()))?;
    Ok(0)
}

pub fn rm(a: &RmArgs, given: &Credentials) -> anyhow::Result<i32> {
    let (launched, addr, path, key) = remote(&a.url, given, &a.ssh)?;
    let key = &key;
    let request = Request::Remove {
        path,
        recursive: a.recursive,
    };
    match when_not_busy(&launched, || remote::simple(&addr, key, request.clone())) {
        // `-f`: what is not there is no error, as with rm.
        Err(TransferError::Remote {
            code: sprat_engine::ErrorCode::NotFound,
            ..
        }) if a.force => Ok(0),
        Err(e) => Err(e.into()),
        Ok(_) => Ok(0),
    }
}

pub fn mv(a: &MvArgs, given: &Credentials) -> anyhow::Result<i32> {
    let (launched, places) = remotes(&[&a.from, &a.to], given, &a.ssh)?;
    let key = &launched.credentials;
    let [(addr, from), (to_addr, to)] =
        <[_; 2]>::try_from(places).map_err(|_| anyhow::anyhow!("mv takes two paths"))?;
    if addr != to_addr {
        bail!(TransferError::Usage(format!(
            "mv works within one server; '{to_addr}' is not '{addr}' (use cp, then rm)"
        )));
    }
    let request = Request::Rename { from, to };
    when_not_busy(&launched, || remote::simple(&addr, key, request.clone()))?;
    Ok(0)
}

pub fn sum(a: &SumArgs, given: &Credentials) -> anyhow::Result<i32> {
    let (launched, addr, path, key) = remote(&a.url, given, &a.ssh)?;
    let key = &key;
    let algo = match a.algo.as_str() {
        "xxh3" => SumAlgo::Xxh3,
        "sha256" => SumAlgo::Sha256,
        "md5" => SumAlgo::Md5,
        other => bail!(TransferError::Usage(format!(
            "unknown --algo '{other}' (use xxh3, sha256 or md5)"
        ))),
    };
    let mut sums = Vec::new();
    when_not_busy(&launched, || {
        sums.clear();
        remote::sum(&addr, key, &path, a.recursive, algo, |p, d| {
            sums.push((p, d))
        })
    })?;
    sums.sort();
    // An empty digest names what the server could not read (a directory it may not list).
    let mut unreadable = 0u64;
    sums.retain(|(p, d)| {
        if !d.is_empty() {
            return true;
        }
        unreadable += 1;
        let full = sprat_engine::relpath::join(&path, p);
        eprintln!(
            "sprat: cannot read '{}' on the server (a file or directory it may not read, or \
             one whose path is longer than a path may be): not summed",
            printed(&full)
        );
        false
    });
    // Into a pipe or a file, each name as its bytes are, for `sha256sum -c` and the like;
    // on a terminal, control characters and bytes that are not UTF-8 shown as `\xNN`.
    let raw = !std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut out = Vec::new();
    for (p, d) in sums {
        let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
        let full = sprat_engine::relpath::join(&path, &p);
        out.extend_from_slice(&sum_line(&hex, &full, raw));
    }
    crate::print_bytes_quietly(&out)?;
    Ok(if unreadable > 0 { 1 } else { 0 })
}

/// One line of `sum`'s output as sha256sum writes it: `HEX  NAME`, and for a name holding a
/// backslash, newline or carriage return, a `\` before the line with those written `\\`,
/// `\n` and `\r` (so that `sha256sum -c` reads the name back exactly, and no two names print
/// alike; review 2026-11-30 of sprat in scripts, F4). `raw`: the name's other bytes as they
/// are; otherwise as [`printed`] shows them.
fn sum_line(hex: &str, name: &[u8], raw: bool) -> Vec<u8> {
    let marked = name.iter().any(|b| matches!(b, b'\\' | b'\n' | b'\r'));
    let mut escaped = Vec::with_capacity(name.len() + 4);
    for &b in name {
        match b {
            b'\\' => escaped.extend_from_slice(b"\\\\"),
            b'\n' => escaped.extend_from_slice(b"\\n"),
            b'\r' => escaped.extend_from_slice(b"\\r"),
            b => escaped.push(b),
        }
    }
    let mut line = Vec::with_capacity(hex.len() + escaped.len() + 4);
    if marked {
        line.push(b'\\');
    }
    line.extend_from_slice(hex.as_bytes());
    line.extend_from_slice(b"  ");
    match raw {
        true => line.extend_from_slice(&escaped),
        false => line.extend_from_slice(printed(&escaped).as_bytes()),
    }
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    #[test]
    fn sum_lines_escape_names_as_sha256sum_does() {
        let line = |name: &[u8], raw| {
            String::from_utf8_lossy(&super::sum_line("ab", name, raw)).into_owned()
        };
        assert_eq!(line(b"plain name", true), "ab  plain name\n");
        assert_eq!(line(b"nl\nname", true), "\\ab  nl\\nname\n");
        assert_eq!(line(b"nl\\x0aname", true), "\\ab  nl\\\\x0aname\n");
        assert_eq!(line(b"cr\r", true), "\\ab  cr\\r\n");
        assert_eq!(
            super::sum_line("ab", b"bad\xffname", true),
            b"ab  bad\xffname\n"
        );
        assert_eq!(line(b"bad\xffname", false), "ab  bad\\xffname\n");
    }

    use super::*;

    #[test]
    fn human_sizes_round_up_as_ls_lh_does() {
        for (bytes, shown) in [
            (0, "0"),
            (1023, "1023"),
            (1024, "1.0K"),
            (1025, "1.1K"),
            (4096, "4.0K"),
            (10_239, "10K"),
            (15 * 1048576 + 1, "16M"),
            (3 << 30, "3.0G"),
            (1048575, "1.0M"),
            (1048576 * 1023 + 1, "1.0G"),
            (10 * 1024 * 1024 - 1, "10M"),
        ] {
            assert_eq!(human_size(bytes), shown, "{bytes}");
        }
    }

    #[test]
    fn formats_dates_and_modes() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20");
        assert_eq!(utc(-1), "1969-12-31 23:59:59");
        let e = NsEntry {
            path: Vec::new(),
            kind: NsKind::Dir,
            size: 0,
            mode: 0o1755,
            mtime_sec: 0,
            mtime_nsec: 0,
            target: Vec::new(),
            owner: Some(sprat_engine::NsOwner {
                uid: 0,
                gid: 54_321,
                user: b"root".to_vec(),
                group: Vec::new(),
            }),
        };
        assert_eq!(mode_string(&e), "drwxr-xr-t");
        let partial = NsEntry {
            kind: NsKind::Partial,
            mode: 0,
            ..e.clone()
        };
        assert_eq!(mode_string(&partial), "~---------");
        assert_eq!(owner_names(&e, false), ("root".into(), "54321".into()));
        assert_eq!(owner_names(&e, true), ("0".into(), "54321".into()));
    }
}
