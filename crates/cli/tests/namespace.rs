//! End-to-end tests of the namespace commands against a real `sprat serve` on loopback:
//! `ls` (`-l`, `-R`, `--json`), `stat`, `du`, `mkdir` (`-p`), `rm` (`-r`), `mv`, `sum` (xxh3,
//! sha256, md5) and third-party `cp` between two servers. Besides the happy paths: the documented
//! exit codes (2 not found / usage, 3 authentication, 4 connection, 5 read-only), a read-only
//! server refusing every change (and being the destination of a third-party copy) while still
//! serving reads, and confinement: neither `..` nor a symlink inside the root that points out of
//! it lets any of these commands read or change anything outside the exported root.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{
    assert_error_names, assert_exit, assert_failed, bin, closed_port, s, server, server_with, tmp,
};
use sprat_testkit::report::serde_json::{self, Value};
use sprat_testkit::{
    assert_no_panic, assert_trees_equal, assert_trees_equal_with, describe, diff_snapshots,
    format_diffs, make_fidelity_tree, make_fifo, make_file, make_many_files, parse_json_report,
    random_bytes, run_sprat, run_sprat_timeout, set_mtime_nofollow, snapshot, walk_tree,
    CompareOptions, EntryKind, Server, ServerOptions, TreeSnapshot, DEFAULT_TOKEN,
};

// ------------------------------------------------------------------------------------ helpers

/// Runs `sprat CMD [the server's token args] REST...`, where `args` is `[CMD, REST...]`.
fn run(srv: &Server, args: &[&str]) -> Output {
    let mut v: Vec<OsString> = vec![args[0].into()];
    v.extend(srv.client_args());
    v.extend(args[1..].iter().map(OsString::from));
    run_sprat(bin(), v, &[])
}

/// Panics unless `out` exited 0 (showing the server's log); returns stdout.
#[track_caller]
fn ok(srv: &Server, out: &Output) -> String {
    assert_no_panic(out);
    assert!(
        out.status.success(),
        "expected success:\n{}\n--- server stderr ---\n{}",
        describe(out),
        srv.stderr_log().trim_end()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `args` against `srv`, panics unless it succeeds, returns stdout.
#[track_caller]
fn run_ok(srv: &Server, args: &[&str]) -> String {
    let out = run(srv, args);
    ok(srv, &out)
}

/// What a failed command printed on stdout besides its error: nothing is expected. With
/// `--json` the error itself goes there too, as `{"error": ..., "exit_code": N}` (which is
/// left out here).
fn stdout_besides_the_error(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(v)
            if v.as_object().is_some_and(|o| {
                o.len() == 2
                    && o.contains_key("error")
                    && o["exit_code"] == out.status.code().unwrap_or(-1)
            }) =>
        {
            String::new()
        }
        _ => text,
    }
}

/// Runs `args` against `srv`, panics unless it succeeds, returns stdout parsed as JSON.
#[track_caller]
fn run_json(srv: &Server, args: &[&str]) -> Value {
    let text = run_ok(srv, args);
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{args:?}: stdout is not one JSON value ({e}):\n{text}"))
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

fn stderr_lower(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_lowercase()
}

/// A path as sprat prints it: its UTF-8 as it is, each other byte as `\xNN`.
fn lossy(p: &Path) -> String {
    let mut out = String::new();
    for chunk in p.as_os_str().as_bytes().utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The names `ls` should print for `dir`: its children (or, with `recursive`, every path below
/// it), sorted by the raw bytes of the path.
fn expected_listing(dir: &Path, recursive: bool) -> Vec<String> {
    let mut paths: Vec<PathBuf> = walk_tree(dir)
        .into_keys()
        .filter(|p| recursive || p.components().count() == 1)
        .collect();
    paths.sort_by(|a, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
    paths.iter().map(|p| lossy(p)).collect()
}

/// The digest `tool` (`sha256sum`, `md5sum`) prints for the content of `path`.
fn system_digest(tool: &str, path: &Path) -> String {
    let out = Command::new(tool)
        .stdin(fs::File::open(path).unwrap())
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
    assert!(out.status.success(), "{tool} < {path:?} failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// Parses `sum` output (`<hex>  <path>` per line) into (path, digest) pairs in output order.
#[track_caller]
fn parse_sums(text: &str, hex_len: usize) -> Vec<(String, String)> {
    text.lines()
        .map(|l| {
            let (hex, path) = l
                .split_once("  ")
                .unwrap_or_else(|| panic!("sum line is not `<hex>  <path>`: {l:?}\n{text}"));
            assert!(
                hex.len() == hex_len && hex.bytes().all(|b| b.is_ascii_hexdigit()),
                "digest {hex:?} is not {hex_len} lowercase hex digits: {l:?}"
            );
            assert_eq!(hex, hex.to_lowercase(), "digest not lowercase: {l:?}");
            (path.to_string(), hex.to_string())
        })
        .collect()
}

fn kind_name(k: EntryKind) -> &'static str {
    match k {
        EntryKind::File => "file",
        EntryKind::Dir => "directory",
        EntryKind::Symlink => "symlink",
        // The fidelity tree's only special file is a FIFO.
        EntryKind::Other => "fifo",
    }
}

/// Differences between one `--json` entry object and the entry as read from disk.
fn json_entry_diffs(rel: &str, obj: &Value, e: &sprat_testkit::Entry) -> Vec<String> {
    let mut d = Vec::new();
    for key in [
        "path",
        "type",
        "size",
        "mode",
        "mtime",
        "mtime_nsec",
        "target",
    ] {
        if obj.get(key).is_none() {
            d.push(format!("{rel:?}: key `{key}` missing in {obj}"));
        }
    }
    if obj["type"] != kind_name(e.kind) {
        d.push(format!(
            "{rel:?}: type {} (expected {:?})",
            obj["type"],
            kind_name(e.kind)
        ));
    }
    if obj["mode"] != format!("{:04o}", e.mode).as_str() {
        d.push(format!(
            "{rel:?}: mode {} (expected \"{:04o}\")",
            obj["mode"], e.mode
        ));
    }
    if obj["mtime"].as_i64() != Some(e.mtime.0) || obj["mtime_nsec"].as_i64() != Some(e.mtime.1) {
        d.push(format!(
            "{rel:?}: mtime {}.{} (expected {}.{:09})",
            obj["mtime"], obj["mtime_nsec"], e.mtime.0, e.mtime.1
        ));
    }
    if e.kind == EntryKind::File && obj["size"].as_u64() != Some(e.size) {
        d.push(format!(
            "{rel:?}: size {} (expected {})",
            obj["size"], e.size
        ));
    }
    match &e.target {
        Some(t) if obj["target"] != lossy(t).as_str() => d.push(format!(
            "{rel:?}: target {} (expected {:?})",
            obj["target"],
            lossy(t)
        )),
        None if !obj["target"].is_null() => {
            d.push(format!("{rel:?}: target {} (expected null)", obj["target"]))
        }
        _ => {}
    }
    d
}

/// A tree whose names exercise byte-order sorting, with a subdirectory, an empty directory and
/// two symlinks (one to a directory, which `ls -R` must not descend into).
fn make_names_tree(dir: &Path) {
    fs::create_dir_all(dir.join("a/inner")).unwrap();
    for name in [
        "b", "B", "a b", "a.txt", "a-b", "_x", "Z", "é.txt", "10", "9", ".hidden", "~tilde",
    ] {
        make_file(&dir.join(name), name.as_bytes(), 0o644);
    }
    make_file(&dir.join("a/b"), b"a/b", 0o644);
    make_file(&dir.join("a/c d"), b"a/c d", 0o644);
    make_file(&dir.join("a/inner/z"), b"z", 0o644);
    fs::create_dir(dir.join("empty")).unwrap();
    symlink("a.txt", dir.join("link")).unwrap();
    symlink("a", dir.join("dirlink")).unwrap();
}

const SECRET: &[u8] = b"TOP-SECRET-CONTENT-OUTSIDE-THE-ROOT-9b3e";

/// A temp dir holding `root/` (served) and `outside/` (secrets). In the root: `keep.txt`,
/// `sub/file.txt`, `esc -> <abs outside>` and `sub/relesc -> ../../outside`.
struct Confined {
    t: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

impl Confined {
    fn new() -> Confined {
        let t = tmp();
        let root = t.path().join("root");
        fs::create_dir_all(root.join("sub")).unwrap();
        make_file(&root.join("keep.txt"), b"keep me", 0o644);
        make_file(&root.join("sub/file.txt"), b"inside the root", 0o644);
        let outside = t.path().join("outside");
        fs::create_dir_all(outside.join("inner")).unwrap();
        make_file(&outside.join("secret.txt"), SECRET, 0o644);
        make_file(&outside.join("inner/secret2.txt"), SECRET, 0o644);
        symlink(&outside, root.join("esc")).unwrap();
        symlink("../../outside", root.join("sub/relesc")).unwrap();
        Confined { t, root, outside }
    }

    /// Everything that must never change: the outside tree and the temp dir's top-level names.
    fn outside_state(&self) -> (TreeSnapshot, Vec<PathBuf>) {
        let mut names: Vec<PathBuf> = fs::read_dir(self.t.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        (snapshot(&self.outside), names)
    }

    fn secret_sha256(&self) -> String {
        system_digest("sha256sum", &self.outside.join("secret.txt"))
    }
}

/// True if `text` shows a name that only exists outside the root.
fn shows_outside_names(text: &str) -> bool {
    text.contains("secret.txt") || text.contains("secret2.txt")
}

// ------------------------------------------------------------------------------------- ls

#[test]
fn ls_lists_children_sorted_by_byte_order() {
    let t = tmp();
    let root = t.path().join("root");
    make_names_tree(&root.join("names"));
    make_file(&root.join("top.txt"), b"top", 0o644);
    let srv = server(&root);

    let expected = [
        ".hidden", "10", "9", "B", "Z", "_x", "a", "a b", "a-b", "a.txt", "b", "dirlink", "empty",
        "link", "~tilde", "é.txt",
    ];
    assert_eq!(expected_listing(&root.join("names"), false), expected);
    for url in [srv.url("names"), srv.url("names/")] {
        let out = run_ok(&srv, &["ls", &url]);
        assert_eq!(lines(&out), expected, "ls {url}:\n{out}");
    }
    // The root itself, with and without the trailing slash.
    for url in [srv.url(""), srv.url("").trim_end_matches('/').to_string()] {
        let out = run_ok(&srv, &["ls", &url]);
        assert_eq!(lines(&out), ["names", "top.txt"], "ls {url}:\n{out}");
    }
    // An empty directory lists nothing.
    assert_eq!(run_ok(&srv, &["ls", &srv.url("names/empty")]), "");
    assert_eq!(run_ok(&srv, &["ls", "-R", &srv.url("names/empty")]), "");
}

#[test]
fn ls_recursive_paths_are_relative_to_the_url() {
    let t = tmp();
    let root = t.path().join("root");
    make_names_tree(&root.join("top/names"));
    let srv = server(&root);

    let expected = [
        ".hidden",
        "10",
        "9",
        "B",
        "Z",
        "_x",
        "a",
        "a b",
        "a-b",
        "a.txt",
        "a/b",
        "a/c d",
        "a/inner",
        "a/inner/z",
        "b",
        "dirlink",
        "empty",
        "link",
        "~tilde",
        "é.txt",
    ];
    assert_eq!(expected_listing(&root.join("top/names"), true), expected);
    let out = run_ok(&srv, &["ls", "-R", &srv.url("top/names")]);
    assert_eq!(lines(&out), expected, "ls -R top/names:\n{out}");

    // From the root, every path carries the prefix `top/names/`.
    let out = run_ok(&srv, &["ls", "-R", &srv.url("")]);
    let mut from_root = vec!["top".to_string(), "top/names".to_string()];
    from_root.extend(expected.iter().map(|p| format!("top/names/{p}")));
    assert_eq!(lines(&out), from_root, "ls -R of the root:\n{out}");

    // A subdirectory's own listing is relative to it.
    let out = run_ok(&srv, &["ls", "-R", &srv.url("top/names/a")]);
    assert_eq!(lines(&out), ["b", "c d", "inner", "inner/z"]);
}

#[test]
fn ls_of_a_file_or_link_prints_its_own_name() {
    let t = tmp();
    let root = t.path().join("root");
    make_names_tree(&root.join("names"));
    let srv = server(&root);
    for (path, name) in [
        ("names/a.txt", "a.txt"),
        ("names/a/inner/z", "z"),
        ("names/a b", "a b"),
        ("names/link", "link"),
    ] {
        for flags in [&[][..], &["-R"][..]] {
            let url = srv.url(path);
            let mut args = vec!["ls"];
            args.extend_from_slice(flags);
            args.push(&url);
            let out = run_ok(&srv, &args);
            assert_eq!(out, format!("{name}\n"), "{args:?}");
        }
    }
    // `-l` of a symlink shows the link itself, with its target.
    let out = run_ok(&srv, &["ls", "-l", &srv.url("names/link")]);
    assert!(
        out.starts_with("lrwxrwxrwx ") && out.trim_end().ends_with(" link -> a.txt"),
        "ls -l names/link:\n{out}"
    );
    // `--json` of a file: one object named by the file's own name.
    let v = run_json(&srv, &["ls", "--json", &srv.url("names/a/c d")]);
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 1, "{v}");
    assert_eq!(arr[0]["path"], "c d", "{v}");
    assert_eq!(arr[0]["type"], "file", "{v}");
    assert_eq!(arr[0]["size"], 5, "{v}");
}

/// Splits an `ls -l` line into mode, size field (12 wide), date and the rest (name [-> target]).
#[track_caller]
fn split_long(line: &str) -> (&str, &str, &str, &str) {
    // MODE USER GROUP SIZE(12, right-aligned) YYYY-MM-DD HH:MM:SS NAME
    let bad = || format!("ls -l line is not `MODE USER GROUP SIZE DATE TIME NAME`: {line:?}");
    assert!(line.len() > 11 && line.as_bytes()[10] == b' ', "{}", bad());
    let mode = &line[..10];
    let (user, rest) = line[11..]
        .split_once(' ')
        .unwrap_or_else(|| panic!("{}", bad()));
    let (group, rest) = rest
        .trim_start()
        .split_once(' ')
        .unwrap_or_else(|| panic!("{}", bad()));
    assert!(!user.is_empty() && !group.is_empty(), "{}", bad());
    let rest = rest.trim_start();
    let (size, rest) = rest.split_once(' ').unwrap_or_else(|| panic!("{}", bad()));
    assert!(
        size.bytes().all(|c| c.is_ascii_digit()) && rest.len() > 20 && rest.as_bytes()[19] == b' ',
        "size field not a number, or no date: {line:?}"
    );
    (mode, size, &rest[..19], &rest[20..])
}

#[test]
fn ls_long_format_modes_sizes_and_utc_times() {
    let t = tmp();
    let root = t.path().join("root");
    let d = root.join("long");
    fs::create_dir_all(d.join("setgid")).unwrap();
    fs::create_dir_all(d.join("sticky")).unwrap();
    make_file(&d.join("f644"), b"hello\n", 0o644);
    make_file(&d.join("exec"), &random_bytes(12345, 1), 0o755);
    make_file(&d.join("none"), b"", 0o000);
    make_file(&d.join("suid"), b"x", 0o4755);
    make_file(&d.join("suid-noexec"), b"yy", 0o4644);
    let sparse = fs::File::create(d.join("sparse")).unwrap();
    sparse.set_len(99_999_999_999).unwrap();
    drop(sparse);
    symlink("f644", d.join("link")).unwrap();
    fs::set_permissions(d.join("setgid"), fs::Permissions::from_mode(0o2775)).unwrap();
    fs::set_permissions(d.join("sticky"), fs::Permissions::from_mode(0o1770)).unwrap();
    for (name, secs, nsec) in [
        ("f644", 1_234_567_890, 5),
        ("exec", 4_500_000_000, 0),
        ("none", 0, 0),
        ("suid", 951_782_400, 1),
        ("suid-noexec", -1, 0),
        ("sparse", 1_700_000_000, 0),
        ("link", 1_500_000_000, 0),
        ("setgid", 1_600_000_000, 0),
        ("sticky", 1_600_000_001, 999_999_999),
    ] {
        set_mtime_nofollow(&d.join(name), secs, nsec);
    }
    let srv = server(&root);

    // (mode, size (None: not checked; a symlink's is its target's length), date, name [-> target])
    let expected: [(&str, Option<u64>, &str, &str); 9] = [
        ("-rwxr-xr-x", Some(12345), "2112-08-07 08:00:00", "exec"),
        ("-rw-r--r--", Some(6), "2009-02-13 23:31:30", "f644"),
        ("lrwxrwxrwx", Some(4), "2017-07-14 02:40:00", "link -> f644"),
        ("----------", Some(0), "1970-01-01 00:00:00", "none"),
        ("drwxrwsr-x", None, "2020-09-13 12:26:40", "setgid"),
        (
            "-rw-r--r--",
            Some(99_999_999_999),
            "2023-11-14 22:13:20",
            "sparse",
        ),
        ("drwxrwx--T", None, "2020-09-13 12:26:41", "sticky"),
        ("-rwsr-xr-x", Some(1), "2000-02-29 00:00:00", "suid"),
        ("-rwSr--r--", Some(2), "1969-12-31 23:59:59", "suid-noexec"),
    ];
    let out = run_ok(&srv, &["ls", "-l", &srv.url("long")]);
    let got = lines(&out);
    assert_eq!(got.len(), expected.len(), "ls -l long:\n{out}");
    let mut failures = Vec::new();
    for (line, (mode, size, date, rest)) in got.iter().zip(expected) {
        let (m, sz, dt, r) = split_long(line);
        if (m, dt, r) != (mode, date, rest)
            || size.is_some_and(|n| sz.trim_start() != n.to_string())
        {
            failures.push(format!(
                "got {line:?}, expected mode {mode} size {size:?} date {date} name {rest:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "ls -l:\n  {}\n{out}",
        failures.join("\n  ")
    );
    // Exactly the documented layout for a file: mode, owner and group (names on the
    // server, at least 8 wide), size (12 wide), date, name.
    let m = std::os::unix::fs::MetadataExt::uid(&fs::metadata(d.join("f644")).unwrap());
    let g = std::os::unix::fs::MetadataExt::gid(&fs::metadata(d.join("f644")).unwrap());
    let name_of = |db: &str, id: u32| {
        fs::read_to_string(db)
            .unwrap()
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.get(2) == Some(&id.to_string().as_str())).then(|| f[0].to_string())
            })
            .unwrap_or_else(|| id.to_string())
    };
    let (user, group) = (name_of("/etc/passwd", m), name_of("/etc/group", g));
    assert_eq!(
        got[1],
        format!(
            "-rw-r--r-- {user:<8} {group:<8} {:>12} 2009-02-13 23:31:30 f644",
            6
        )
    );

    // -l -R from the root: the same lines, named by their path below the URL.
    let out = run_ok(&srv, &["ls", "-l", "-R", &srv.url("")]);
    let rec = lines(&out);
    assert_eq!(rec.len(), expected.len() + 1, "ls -l -R:\n{out}");
    assert!(rec[0].starts_with("drwxr-xr-x ") && rec[0].ends_with(" long"));
    for (line, orig) in rec[1..].iter().zip(&got) {
        let (m, sz, dt, r) = split_long(line);
        let (om, osz, odt, or) = split_long(orig);
        assert_eq!((m, sz, dt), (om, osz, odt), "ls -l -R line {line:?}");
        assert_eq!(r, format!("long/{or}"), "ls -l -R line {line:?}");
    }
}

#[test]
fn ls_json_describes_every_entry_of_the_fidelity_tree() {
    let t = tmp();
    let root = t.path().join("root");
    let fid = root.join("fid");
    make_fidelity_tree(&fid);
    make_fifo(&fid.join("sub/pipe"));
    let srv = server(&root);
    let snap = snapshot(&fid);

    // -R --json: one object per entry, in byte order of the path, matching the disk.
    let v = run_json(&srv, &["ls", "-R", "--json", &srv.url("fid")]);
    let arr = v.as_array().unwrap_or_else(|| panic!("not an array: {v}"));
    let got_paths: Vec<&str> = arr.iter().map(|o| o["path"].as_str().unwrap()).collect();
    assert_eq!(
        got_paths,
        expected_listing(&fid, true),
        "ls -R --json order"
    );
    let by_path: BTreeMap<&str, &Value> = arr
        .iter()
        .map(|o| (o["path"].as_str().unwrap(), o))
        .collect();
    let mut failures = Vec::new();
    for (rel, e) in &snap.entries {
        let key = lossy(rel);
        match by_path.get(key.as_str()) {
            Some(obj) => failures.extend(json_entry_diffs(&key, obj, e)),
            None => failures.push(format!("{key:?} missing from ls -R --json")),
        }
    }
    assert!(
        failures.is_empty(),
        "{}",
        format_diffs("ls -R --json", &failures)
    );
    assert_eq!(by_path["sub/pipe"]["type"], "fifo");
    assert_eq!(by_path["links/to-dir"]["target"], "../sub");

    // Without -R: only the children.
    let v = run_json(&srv, &["ls", "--json", &srv.url("fid")]);
    let got: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    assert_eq!(got, expected_listing(&fid, false));
    let v = run_json(&srv, &["ls", "--json", &srv.url("fid/links")]);
    let links = v.as_array().unwrap();
    for obj in links {
        let name = obj["path"].as_str().unwrap();
        let e = &snap.entries[&PathBuf::from("links").join(name)];
        let d = json_entry_diffs(name, obj, e);
        assert!(d.is_empty(), "ls --json fid/links: {d:?}");
    }
}

#[test]
fn ls_and_du_of_thousands_of_entries() {
    let t = tmp();
    let root = t.path().join("root");
    let stats = make_many_files(&root.join("many"), 3000, 16, 11);
    let srv = server(&root);
    let out = run_ok(&srv, &["ls", "-R", &srv.url("many")]);
    assert_eq!(lines(&out), expected_listing(&root.join("many"), true));
    assert_eq!(lines(&out).len() as u64, stats.files + stats.dirs);
    let out = run_ok(&srv, &["ls", &srv.url("many")]);
    assert_eq!(lines(&out).len() as u64, stats.dirs);
    let v = run_json(&srv, &["du", "--json", &srv.url("many")]);
    assert_eq!(v["files"], stats.files, "{v}");
    assert_eq!(v["dirs"], stats.dirs + 1, "{v}");
    assert_eq!(v["bytes"], stats.bytes, "{v}");
    assert_eq!(v["symlinks"], 0, "{v}");
}

// --------------------------------------------------------------------------------- stat, du

#[test]
fn stat_describes_entries_and_never_follows_links() {
    let t = tmp();
    let root = t.path().join("root");
    let fid = root.join("fid");
    make_fidelity_tree(&fid);
    let srv = server(&root);
    let snap = snapshot(&fid);
    for rel in [
        "small.txt",
        "empty.txt",
        "run.sh",
        "readonly.txt",
        "mtime-far-future.txt",
        "mtime-max-ns.txt",
        "name with spaces.txt",
        "locked_dir",
        "nested_empty/a/b/c",
        "links/to-dir",
        "links/dangling",
        "links/absolute",
        "links/self-loop",
        "link-to-big",
    ] {
        let url_path = format!("fid/{rel}");
        let v = run_json(&srv, &["stat", "--json", &srv.url(&url_path)]);
        assert_eq!(v["path"], url_path.as_str(), "stat --json {url_path}: {v}");
        let d = json_entry_diffs(rel, &v, &snap.entries[Path::new(rel)]);
        assert!(d.is_empty(), "stat --json {url_path}: {d:?}");
    }
    let v = run_json(&srv, &["stat", "--json", &srv.url("fid/big.bin")]);
    assert_eq!(v["size"], sprat_testkit::FIDELITY_BIG_FILE as u64);

    // The root itself.
    let v = run_json(&srv, &["stat", "--json", &srv.url("")]);
    assert_eq!(v["path"], "", "{v}");
    assert_eq!(v["type"], "directory", "{v}");

    // Human-readable output: the link described as a link, with its target.
    let out = run_ok(&srv, &["stat", &srv.url("fid/links/to-dir")]);
    assert!(
        out.contains("symlink") && out.contains("../sub") && !out.contains("directory"),
        "stat of a link to a directory:\n{out}"
    );
    let out = run_ok(&srv, &["stat", &srv.url("fid/locked_dir")]);
    assert!(out.contains("directory") && out.contains("0555"), "{out}");
}

#[test]
fn du_counts_files_dirs_links_and_bytes_on_the_server() {
    let t = tmp();
    let root = t.path().join("root");
    let stats = make_fidelity_tree(&root.join("fid"));
    let small = root.join("small");
    fs::create_dir_all(small.join("x")).unwrap();
    make_file(&small.join("a"), b"12345", 0o644);
    make_file(&small.join("x/b"), b"1234567", 0o644);
    make_file(&small.join("x/c"), b"", 0o644);
    let srv = server(&root);

    let v = run_json(&srv, &["du", "--json", &srv.url("fid")]);
    assert_eq!(v["path"], "fid", "{v}");
    assert_eq!(v["files"], stats.files, "{v}");
    assert_eq!(
        v["dirs"],
        stats.dirs + 1,
        "{v} (the directory itself counts)"
    );
    assert_eq!(v["symlinks"], stats.symlinks, "{v}");
    assert_eq!(v["bytes"], stats.bytes, "{v}");

    let v = run_json(&srv, &["du", "--json", &srv.url("small")]);
    assert_eq!(
        (&v["files"], &v["dirs"], &v["symlinks"], &v["bytes"]),
        (&3.into(), &2.into(), &0.into(), &12.into()),
        "{v}"
    );
    // A file, and a symlink to a directory (counted as a link, not followed).
    let v = run_json(&srv, &["du", "--json", &srv.url("small/x/b")]);
    assert_eq!(
        (&v["files"], &v["dirs"], &v["bytes"]),
        (&1.into(), &0.into(), &7.into()),
        "{v}"
    );
    let v = run_json(&srv, &["du", "--json", &srv.url("fid/links/to-dir")]);
    assert_eq!(
        (&v["files"], &v["dirs"], &v["symlinks"], &v["bytes"]),
        (&0.into(), &0.into(), &1.into(), &0.into()),
        "{v}"
    );
    // The root: both trees plus the root itself.
    let v = run_json(&srv, &["du", "--json", &srv.url("")]);
    assert_eq!(v["files"], stats.files + 3, "{v}");
    assert_eq!(v["dirs"], stats.dirs + 1 + 2 + 1, "{v}");
    assert_eq!(v["bytes"], stats.bytes + 12, "{v}");

    let out = run_ok(&srv, &["du", &srv.url("small")]);
    assert!(out.contains("12"), "du small:\n{out}");
}

// ----------------------------------------------------------------------------- mkdir, rm, mv

#[test]
fn mkdir_and_mkdir_p() {
    let t = tmp();
    let root = t.path().join("root");
    fs::create_dir_all(root.join("existing")).unwrap();
    make_file(&root.join("file"), b"a file", 0o644);
    let srv = server(&root);

    run_ok(&srv, &["mkdir", &srv.url("new")]);
    assert!(root.join("new").is_dir());
    assert_eq!(run_ok(&srv, &["ls", &srv.url("new")]), "");

    // Without -p: an existing directory and a missing parent are errors naming the path.
    let out = run(&srv, &["mkdir", &srv.url("existing")]);
    assert_failed(&out);
    assert_error_names(&out, &["existing"]);
    let out = run(&srv, &["mkdir", &srv.url("no-parent/child")]);
    assert_exit(&out, 2);
    assert_error_names(&out, &["no-parent"]);
    assert!(!root.join("no-parent").exists());

    // -p: the whole chain; no error if it exists.
    run_ok(&srv, &["mkdir", "-p", &srv.url("p1/p2/p3/p4")]);
    assert!(root.join("p1/p2/p3/p4").is_dir());
    run_ok(&srv, &["mkdir", "-p", &srv.url("p1/p2/p3/p4")]);
    run_ok(&srv, &["mkdir", "-p", &srv.url("existing")]);
    run_ok(&srv, &["mkdir", "-p", &srv.url("existing/under")]);
    assert!(root.join("existing/under").is_dir());

    // -p through (or onto) a regular file fails and leaves the file alone.
    for p in ["file", "file/x", "file/x/y"] {
        let out = run(&srv, &["mkdir", "-p", &srv.url(p)]);
        assert_failed(&out);
        assert_error_names(&out, &["file"]);
    }
    assert_eq!(fs::read(root.join("file")).unwrap(), b"a file");
}

#[test]
fn rm_removes_files_links_and_trees_never_link_targets() {
    let t = tmp();
    let root = t.path().join("root");
    let target_outside = t.path().join("elsewhere");
    fs::create_dir_all(&target_outside).unwrap();
    make_file(&target_outside.join("keep"), b"outside the tree", 0o644);
    make_many_files(&root.join("keepme"), 5, 100, 3);

    let tree = root.join("tree");
    fs::create_dir_all(tree.join("a/b/c")).unwrap();
    fs::create_dir_all(tree.join("empty/nested")).unwrap();
    fs::create_dir_all(tree.join("private")).unwrap();
    make_file(&tree.join("a/f1"), b"1", 0o644);
    make_file(&tree.join("a/b/f2"), b"2", 0o000);
    make_file(&tree.join("a/b/c/f3"), b"3", 0o600);
    make_file(&tree.join("private/f4"), b"4", 0o644);
    fs::set_permissions(tree.join("private"), fs::Permissions::from_mode(0o700)).unwrap();
    symlink("../keepme", tree.join("a/to-keepme")).unwrap();
    symlink(&target_outside, tree.join("to-elsewhere")).unwrap();
    symlink("nowhere/at/all", tree.join("dangling")).unwrap();
    make_many_files(&tree.join("many"), 300, 10, 4);

    fs::create_dir_all(root.join("single")).unwrap();
    make_file(&root.join("single/file"), b"f", 0o644);
    symlink("../keepme", root.join("single/dirlink")).unwrap();
    fs::create_dir(root.join("single/empty")).unwrap();
    let srv = server(&root);
    let keepme_before = snapshot(&root.join("keepme"));
    let elsewhere_before = snapshot(&target_outside);

    // A file, a link to a directory (the link goes, the directory stays), an empty directory.
    run_ok(&srv, &["rm", &srv.url("single/file")]);
    assert!(fs::symlink_metadata(root.join("single/file")).is_err());
    run_ok(&srv, &["rm", &srv.url("single/dirlink")]);
    assert!(fs::symlink_metadata(root.join("single/dirlink")).is_err());
    run_ok(&srv, &["rm", &srv.url("single/empty")]);
    assert!(fs::symlink_metadata(root.join("single/empty")).is_err());
    assert!(root.join("single").is_dir());

    // A non-empty directory needs -r; the refusal changes nothing.
    let before = snapshot(&tree);
    for p in ["tree", "tree/a"] {
        let out = run(&srv, &["rm", &srv.url(p)]);
        assert_failed(&out);
        assert_error_names(&out, &[p]);
    }
    assert_eq!(
        diff_snapshots(&before, &snapshot(&tree), &CompareOptions::with_root()),
        Vec::<String>::new()
    );

    // -r: the whole tree, its links removed, never what they point to.
    run_ok(&srv, &["rm", "-r", &srv.url("tree")]);
    assert!(fs::symlink_metadata(&tree).is_err(), "tree still exists");
    assert_eq!(
        diff_snapshots(
            &keepme_before,
            &snapshot(&root.join("keepme")),
            &CompareOptions::with_root()
        ),
        Vec::<String>::new(),
        "rm -r followed a symlink into a directory inside the root"
    );
    assert_eq!(
        diff_snapshots(
            &elsewhere_before,
            &snapshot(&target_outside),
            &CompareOptions::with_root()
        ),
        Vec::<String>::new(),
        "rm -r followed a symlink out of the tree"
    );
    // -r on a single file works too.
    make_file(&root.join("single/again"), b"x", 0o644);
    run_ok(&srv, &["rm", "-r", &srv.url("single/again")]);
    assert!(fs::symlink_metadata(root.join("single/again")).is_err());

    // The root itself is never removed.
    let root_before = snapshot(&root);
    for url in [srv.url(""), srv.url("").trim_end_matches('/').to_string()] {
        for flags in [&["-r"][..], &[][..]] {
            let mut args = vec!["rm"];
            args.extend_from_slice(flags);
            args.push(&url);
            let out = run(&srv, &args);
            assert_failed(&out);
            sprat_testkit::assert_error_line(&out);
        }
    }
    assert_eq!(
        diff_snapshots(&root_before, &snapshot(&root), &CompareOptions::with_root()),
        Vec::<String>::new()
    );
}

#[test]
fn mv_renames_and_moves_into_directories() {
    let t = tmp();
    let root = t.path().join("root");
    make_fidelity_tree(&root.join("fid"));
    fs::create_dir_all(root.join("into")).unwrap();
    make_file(&root.join("file.txt"), b"file content", 0o640);
    set_mtime_nofollow(&root.join("file.txt"), 1_400_000_000, 42);
    let srv = server(&root);

    // Rename a file: content, mode and mtime kept.
    let before = snapshot(&root).entries[Path::new("file.txt")].clone();
    run_ok(&srv, &["mv", &srv.url("file.txt"), &srv.url("renamed.txt")]);
    assert!(fs::symlink_metadata(root.join("file.txt")).is_err());
    assert_eq!(snapshot(&root).entries[Path::new("renamed.txt")], before);

    // Into an existing directory.
    run_ok(&srv, &["mv", &srv.url("renamed.txt"), &srv.url("into")]);
    assert_eq!(
        snapshot(&root).entries[Path::new("into/renamed.txt")],
        before
    );
    assert!(fs::symlink_metadata(root.join("renamed.txt")).is_err());

    // A whole tree to a new name, then into a directory: everything below comes along intact.
    let fid_before = snapshot(&root.join("fid"));
    run_ok(&srv, &["mv", &srv.url("fid"), &srv.url("fid2")]);
    assert!(fs::symlink_metadata(root.join("fid")).is_err());
    let d = diff_snapshots(
        &fid_before,
        &snapshot(&root.join("fid2")),
        &CompareOptions::with_root(),
    );
    assert!(d.is_empty(), "{}", format_diffs("mv fid fid2", &d));
    run_ok(&srv, &["mv", &srv.url("fid2"), &srv.url("into")]);
    let d = diff_snapshots(
        &fid_before,
        &snapshot(&root.join("into/fid2")),
        &CompareOptions::with_root(),
    );
    assert!(d.is_empty(), "{}", format_diffs("mv fid2 into/", &d));

    // A symlink is moved as a link.
    run_ok(
        &srv,
        &[
            "mv",
            &srv.url("into/fid2/links/to-dir"),
            &srv.url("moved-link"),
        ],
    );
    assert_eq!(
        fs::read_link(root.join("moved-link")).unwrap(),
        Path::new("../sub")
    );

    // Failures change nothing: missing source (exit 2), a directory into itself, the root,
    // a destination below a missing directory.
    let state = snapshot(&root);
    let out = run(&srv, &["mv", &srv.url("no-such-entry"), &srv.url("x")]);
    assert_exit(&out, 2);
    assert_error_names(&out, &["no-such-entry"]);
    for (from, to) in [
        ("into", "into/fid2/sub"),
        ("into/fid2", "into/fid2/sub/inner"),
        ("", "elsewhere"),
        ("into/renamed.txt", "missing-dir/x"),
    ] {
        let out = run(&srv, &["mv", &srv.url(from), &srv.url(to)]);
        assert_failed(&out);
        sprat_testkit::assert_error_line(&out);
    }
    // Into itself, however it is named: a usage error that says so, not the kernel's EINVAL.
    for (from, to) in [
        ("into", "into"),
        ("into", "into/"),
        ("into", "into/fid2/sub/x"),
        ("into/renamed.txt", "into/renamed.txt"),
    ] {
        let out = run(&srv, &["mv", &srv.url(from), &srv.url(to)]);
        assert_exit(&out, 2);
        assert_error_names(&out, &["into itself"]);
    }
    let d = diff_snapshots(&state, &snapshot(&root), &CompareOptions::with_root());
    assert!(
        d.is_empty(),
        "{}",
        format_diffs("failed mv changed the tree", &d)
    );
}

#[test]
fn mv_between_two_servers_is_refused() {
    let t = tmp();
    let (root_a, root_b) = (t.path().join("a"), t.path().join("b"));
    fs::create_dir_all(&root_a).unwrap();
    make_file(&root_a.join("f"), b"a", 0o644);
    let (a, b) = (server(&root_a), server(&root_b));
    let out = run(&a, &["mv", &a.url("f"), &b.url("f")]);
    assert_exit(&out, 2);
    sprat_testkit::assert_error_line(&out);
    assert!(root_a.join("f").exists());
    assert!(fs::read_dir(&root_b).unwrap().next().is_none());
}

// ------------------------------------------------------------------------------------- sum

/// A tree for checksums: sizes around buffer and chunk boundaries, names with spaces, a nested
/// directory, an empty directory and a symlink (not summed).
fn make_sum_tree(dir: &Path) -> Vec<PathBuf> {
    fs::create_dir_all(dir.join("sub dir/inner")).unwrap();
    fs::create_dir_all(dir.join("empty")).unwrap();
    // (path, size, seed): the last file has the same content as `one.bin`.
    let files: [(&str, usize, u64); 12] = [
        ("empty.bin", 0, 100),
        ("one.bin", 1, 101),
        ("name with spaces.txt", 100, 102),
        (".hidden", 37, 103),
        ("page-1.bin", 4095, 104),
        ("page.bin", 4096, 105),
        ("chunk+1.bin", 65537, 106),
        ("mid.bin", 1024 * 1024 + 3, 107),
        ("big.bin", 5 * 1024 * 1024 + 7, 108),
        ("sub dir/a.txt", 500, 109),
        ("sub dir/inner/b.bin", 3000, 110),
        ("sub dir/inner/copy-of-one.bin", 1, 101),
    ];
    let mut rels = Vec::new();
    for (rel, size, seed) in files {
        make_file(&dir.join(rel), &random_bytes(size, seed), 0o644);
        rels.push(PathBuf::from(rel));
    }
    symlink("one.bin", dir.join("link-to-one")).unwrap();
    symlink("sub dir", dir.join("link-to-dir")).unwrap();
    rels.sort_by(|a, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
    rels
}

#[test]
fn sum_sha256_and_md5_match_the_system_tools() {
    let t = tmp();
    let root = t.path().join("root");
    let dir = root.join("data/sums");
    let rels = make_sum_tree(&dir);
    let srv = server(&root);

    for (algo, tool, hex_len) in [("sha256", "sha256sum", 64), ("md5", "md5sum", 32)] {
        let expected: Vec<(String, String)> = rels
            .iter()
            .map(|r| {
                (
                    format!("data/sums/{}", lossy(r)),
                    system_digest(tool, &dir.join(r)),
                )
            })
            .collect();
        let out = run_ok(&srv, &["sum", "-r", "--algo", algo, &srv.url("data/sums")]);
        assert_eq!(
            parse_sums(&out, hex_len),
            expected,
            "sum -r --algo {algo}:\n{out}"
        );
        // The exact sha256sum layout: `<hex>  <path>`.
        assert_eq!(
            lines(&out)[0],
            format!("{}  {}", expected[0].1, expected[0].0),
            "{out}"
        );
        // A single file, and a subdirectory (paths joined onto the URL's path).
        let out = run_ok(
            &srv,
            &["sum", "--algo", algo, &srv.url("data/sums/big.bin")],
        );
        assert_eq!(
            out,
            format!(
                "{}  data/sums/big.bin\n",
                system_digest(tool, &dir.join("big.bin"))
            )
        );
        let out = run_ok(
            &srv,
            &["sum", "-r", "--algo", algo, &srv.url("data/sums/sub dir")],
        );
        let sub: Vec<_> = expected
            .iter()
            .filter(|(p, _)| p.starts_with("data/sums/sub dir/"))
            .cloned()
            .collect();
        assert_eq!(parse_sums(&out, hex_len), sub, "sum -r sub dir:\n{out}");
    }
}

#[test]
fn sum_xxh3_is_the_default_and_consistent() {
    let t = tmp();
    let root = t.path().join("root");
    let rels = make_sum_tree(&root.join("sums"));
    let srv = server(&root);

    let out = run_ok(&srv, &["sum", "-r", &srv.url("sums")]);
    let sums = parse_sums(&out, 32);
    let expected_paths: Vec<String> = rels.iter().map(|r| format!("sums/{}", lossy(r))).collect();
    assert_eq!(
        sums.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
        expected_paths,
        "sum -r paths:\n{out}"
    );
    let explicit = run_ok(&srv, &["sum", "-r", "--algo", "xxh3", &srv.url("sums")]);
    assert_eq!(out, explicit, "--algo xxh3 differs from the default");
    let by_path: BTreeMap<_, _> = sums.iter().cloned().collect();
    // XXH3-128 of no bytes.
    assert_eq!(
        by_path["sums/empty.bin"],
        "99aa06d3014798d86001c324468d497f"
    );
    // Same content, same digest; different content, different digests.
    assert_eq!(
        by_path["sums/one.bin"],
        by_path["sums/sub dir/inner/copy-of-one.bin"]
    );
    let mut distinct: Vec<&String> = by_path.values().collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), by_path.len() - 1, "{out}");

    // Summing the same file again, and a copy of it elsewhere, gives the same digest.
    fs::copy(root.join("sums/big.bin"), root.join("big-copy.bin")).unwrap();
    let out = run_ok(&srv, &["sum", &srv.url("big-copy.bin")]);
    assert_eq!(out, format!("{}  big-copy.bin\n", by_path["sums/big.bin"]));
}

#[test]
fn sum_of_a_directory_needs_r_and_unknown_algo_is_usage_error() {
    let t = tmp();
    let root = t.path().join("root");
    make_sum_tree(&root.join("sums"));
    let srv = server(&root);
    let out = run(&srv, &["sum", &srv.url("sums")]);
    assert_failed(&out);
    assert_error_names(&out, &["sums"]);
    assert!(out.stdout.is_empty(), "{}", describe(&out));

    let out = run(&srv, &["sum", "--algo", "crc32", &srv.url("sums/one.bin")]);
    assert_exit(&out, 2);
    sprat_testkit::assert_error_line(&out);

    // An empty directory has nothing to sum.
    assert_eq!(run_ok(&srv, &["sum", "-r", &srv.url("sums/empty")]), "");

    // A symlink named alone is said to be one (it printed nothing and exited 0), whether it
    // points inside the root, outside it or nowhere; below a directory it is passed over.
    std::os::unix::fs::symlink("one.bin", root.join("sums/in")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("sums/out")).unwrap();
    std::os::unix::fs::symlink("nowhere", root.join("sums/dangling")).unwrap();
    for link in ["in", "out", "dangling"] {
        let out = run(&srv, &["sum", &srv.url(&format!("sums/{link}"))]);
        assert_failed(&out);
        assert_error_names(&out, &[link, "symlink"]);
        assert!(out.stdout.is_empty(), "{}", describe(&out));
    }
    let all = run_ok(&srv, &["sum", "-r", &srv.url("sums")]);
    let links = ["in", "out", "dangling"];
    assert!(
        !all.lines()
            .any(|l| links.iter().any(|k| l.ends_with(&format!(" {k}")))),
        "{all}"
    );
}

// --------------------------------------------------------------------------- third-party cp

#[test]
fn third_party_copy_between_two_servers_is_faithful() {
    let t = tmp();
    let (root_a, root_b) = (t.path().join("a"), t.path().join("b"));
    let stats = make_fidelity_tree(&root_a.join("fid"));
    fs::create_dir_all(&root_b).unwrap();
    let (a, b) = (server(&root_a), server(&root_b));
    let a_before = snapshot(&root_a);

    let out = run(&a, &["cp", "--json", &a.url("fid"), &b.url("copy")]);
    ok(&b, &out);
    let report = parse_json_report(&out.stdout);
    assert_eq!(report.get("direction"), "third-party", "{}", report.value);
    assert_eq!(report.files(), stats.files, "{}", report.value);
    assert_eq!(report.bytes(), stats.bytes, "{}", report.value);
    assert_eq!(report.dirs(), stats.dirs + 1, "{}", report.value);
    assert_trees_equal_with(
        &root_a.join("fid"),
        &root_b.join("copy"),
        &CompareOptions::with_root(),
    );
    let d = diff_snapshots(&a_before, &snapshot(&root_a), &CompareOptions::with_root());
    assert!(
        d.is_empty(),
        "{}",
        format_diffs("the source server's tree changed", &d)
    );

    // Again onto the existing copy: still exact. And into a new nested destination.
    let out = run(&a, &["cp", &a.url("fid"), &b.url("copy")]);
    ok(&b, &out);
    assert_trees_equal(&root_a.join("fid"), &root_b.join("copy"));
    let out = run(&a, &["cp", &a.url("fid/sub"), &b.url("copy2/deep/sub")]);
    ok(&b, &out);
    assert_trees_equal(&root_a.join("fid/sub"), &root_b.join("copy2/deep/sub"));

    // The namespace commands see the same thing on both sides.
    let la = run_ok(&a, &["ls", "-l", "-R", &a.url("fid")]);
    let lb = run_ok(&b, &["ls", "-l", "-R", &b.url("copy")]);
    assert_eq!(la, lb);
    let sa = run_ok(&a, &["sum", "-r", &a.url("fid")]);
    let sb = run_ok(&b, &["sum", "-r", &b.url("copy")]);
    assert_eq!(sa.replace("  fid/", "  "), sb.replace("  copy/", "  "));
}

#[test]
fn third_party_copy_within_one_server_and_from_a_read_only_server() {
    let t = tmp();
    let (root_a, root_b) = (t.path().join("a"), t.path().join("b"));
    make_many_files(&root_a.join("src"), 300, 3000, 21);
    fs::create_dir_all(root_a.join("src/empty")).unwrap();
    symlink("d000/f00000.bin", root_a.join("src/link")).unwrap();
    let ro = server_with(&root_a, &ServerOptions::read_only());
    let b = server(&root_b);

    // From the read-only server to a writable one.
    let out = run(&ro, &["cp", "--json", &ro.url("src"), &b.url("dst")]);
    ok(&b, &out);
    assert_eq!(
        parse_json_report(&out.stdout).get("direction"),
        "third-party"
    );
    assert_trees_equal(&root_a.join("src"), &root_b.join("dst"));

    // Both ends on the same server.
    let out = run(&b, &["cp", "--json", &b.url("dst"), &b.url("dst-copy")]);
    ok(&b, &out);
    assert_eq!(
        parse_json_report(&out.stdout).get("direction"),
        "third-party"
    );
    assert_trees_equal(&root_a.join("src"), &root_b.join("dst-copy"));
}

#[test]
fn third_party_copy_into_its_own_subdirectory_terminates() {
    // Same rule as a local copy: refusing (exit 2) is fine; so is a copy of the tree as it was
    // when the copy started. A copy that contains (part of) itself is not.
    let t = tmp();
    let root = t.path().join("root");
    make_many_files(&root.join("src"), 200, 2000, 39);
    let reference = t.path().join("reference");
    make_many_files(&reference, 200, 2000, 39);
    let srv = server(&root);
    let mut args: Vec<OsString> = vec!["cp".into()];
    args.extend(srv.client_args());
    args.push(srv.url("src").into());
    args.push(srv.url("src/copy").into());
    let out = run_sprat_timeout(bin(), args, &[], Duration::from_secs(30)).unwrap_or_else(|e| {
        panic!(
            "a third-party copy into its own subdirectory did not end within 30 s:\n{}",
            describe(&e.output)
        )
    });
    assert_no_panic(&out);
    match out.status.code() {
        Some(2) => {
            sprat_testkit::assert_error_line(&out);
        }
        Some(0) => assert_trees_equal(&reference, &root.join("src/copy")),
        other => panic!(
            "exit code {other:?}: expected 2 (refused) or 0 (a copy of the tree as it was)\n{}",
            describe(&out)
        ),
    }
}

#[test]
fn third_party_copy_errors_change_nothing() {
    let t = tmp();
    let (root_a, root_b, root_c) = (t.path().join("a"), t.path().join("b"), t.path().join("c"));
    make_many_files(&root_a.join("src"), 20, 1000, 22);
    let a = server(&root_a);
    let b = server(&root_b);
    let ro = server_with(&root_c, &ServerOptions::read_only());
    fs::create_dir_all(root_c.join("existing")).unwrap();
    let c_before = snapshot(&root_c);

    // Missing source: exit 2 naming it, nothing on the destination.
    let out = run(&a, &["cp", &a.url("no-such-source"), &b.url("dst")]);
    assert_exit(&out, 2);
    assert_error_names(&out, &["no-such-source"]);
    assert!(common::entries_below(&root_b).is_empty());

    // A read-only destination: exit 5, says read-only, nothing written.
    for dst in ["dst", "existing", "existing/sub"] {
        let out = run(&a, &["cp", &a.url("src"), &ro.url(dst)]);
        assert_exit(&out, 5);
        assert!(
            stderr_lower(&out).contains("read-only"),
            "stderr does not mention read-only:\n{}",
            describe(&out)
        );
    }
    let d = diff_snapshots(&c_before, &snapshot(&root_c), &CompareOptions::with_root());
    assert!(
        d.is_empty(),
        "{}",
        format_diffs("the read-only server's tree changed", &d)
    );

    // A destination server that is not there: exit 4.
    let down = format!("sprat://127.0.0.1:{}/dst", closed_port());
    let out = run(&a, &["cp", &a.url("src"), &down]);
    assert_exit(&out, 4);
    sprat_testkit::assert_error_line(&out);
    // A source server that is not there: exit 4 at once, not retried for `--retry-for`
    // because the destination proved itself (it gave the ticket).
    let down = format!("sprat://127.0.0.1:{}/src", closed_port());
    let out = run(&a, &["cp", "--retry-for", "60s", &down, &b.url("dst")]);
    assert_exit(&out, 4);
    sprat_testkit::assert_error_line(&out);
    assert!(common::entries_below(&root_b).is_empty());

    // A destination server with another token: exit 3, nothing written.
    let root_d = t.path().join("d");
    let other = server_with(
        &root_d,
        &ServerOptions {
            token: Some("another-token-5a1c".to_string()),
            ..ServerOptions::default()
        },
    );
    let out = run(&a, &["cp", &a.url("src"), &other.url("dst")]);
    assert_exit(&out, 3);
    assert!(common::entries_below(&root_d).is_empty());
    assert!(common::entries_below(&root_b).is_empty());
}

#[test]
fn third_party_copy_cannot_read_or_write_outside_the_roots() {
    let c = Confined::new();
    let root_b = c.t.path().join("b");
    fs::create_dir_all(&root_b).unwrap();
    let outside_b = c.t.path().join("outside-b");
    fs::create_dir_all(&outside_b).unwrap();
    make_file(&outside_b.join("precious"), b"precious", 0o644);
    symlink(&outside_b, root_b.join("esc")).unwrap();
    make_many_files(&c.root.join("src"), 5, 100, 23);
    let a = server(&c.root);
    let b = server(&root_b);
    let before = c.outside_state();
    let b_outside_before = snapshot(&outside_b);

    // Reading through the source's escaping links: fail, or copy links as links.
    for (i, p) in ["esc", "esc/inner", "sub/relesc", "sub/relesc/inner", "sub"]
        .iter()
        .enumerate()
    {
        let dst = format!("pulled-{i}");
        let out = run(&a, &["cp", &a.url(p), &b.url(&dst)]);
        assert_no_panic(&out);
        let dst = root_b.join(&dst);
        if dst.is_dir() {
            assert!(
                !snapshot(&dst).any_file_contains(SECRET),
                "cp {p} read a file from outside the source root"
            );
        } else {
            assert!(
                fs::read(&dst).map(|c| c != SECRET).unwrap_or(true),
                "cp {p} read a file from outside the source root"
            );
        }
    }
    // Writing through the destination's escaping link.
    for p in ["esc/x", "esc/deeper/x", "esc"] {
        let out = run(&a, &["cp", &a.url("src"), &b.url(p)]);
        assert_no_panic(&out);
        if p != "esc" {
            assert_failed(&out);
        }
    }
    assert_eq!(c.outside_state(), before, "the source's outside changed");
    let d = diff_snapshots(
        &b_outside_before,
        &snapshot(&outside_b),
        &CompareOptions::with_root(),
    );
    assert!(
        d.is_empty(),
        "{}",
        format_diffs("written outside the destination root", &d)
    );
}

// ---------------------------------------------------------------------------- read-only server

#[test]
fn read_only_server_refuses_changes_and_serves_reads() {
    let t = tmp();
    let root = t.path().join("root");
    make_many_files(&root.join("tree"), 20, 500, 31);
    fs::create_dir_all(root.join("empty")).unwrap();
    make_file(&root.join("file"), b"read only", 0o644);
    let srv = server_with(&root, &ServerOptions::read_only());
    let before = snapshot(&root);

    let refused: Vec<Vec<String>> = vec![
        vec!["mkdir".into(), srv.url("new")],
        vec!["mkdir".into(), "-p".into(), srv.url("new/a/b")],
        vec!["rm".into(), srv.url("file")],
        vec!["rm".into(), srv.url("empty")],
        vec!["rm".into(), "-r".into(), srv.url("tree")],
        vec!["rm".into(), "-r".into(), srv.url("tree/d000/f00001.bin")],
        vec!["mv".into(), srv.url("file"), srv.url("moved")],
        vec!["mv".into(), srv.url("tree"), srv.url("empty")],
    ];
    for args in &refused {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&srv, &args);
        assert_exit(&out, 5);
        assert!(
            stderr_lower(&out).contains("read-only"),
            "{args:?}: stderr does not mention read-only:\n{}",
            describe(&out)
        );
        let d = diff_snapshots(&before, &snapshot(&root), &CompareOptions::with_root());
        assert!(
            d.is_empty(),
            "{}",
            format_diffs(&format!("{args:?} changed the tree"), &d)
        );
    }

    // `mkdir -p` of a directory that is there changes nothing: done, as on a writable one.
    run_ok(&srv, &["mkdir", "-p", &srv.url("tree/d000")]);
    assert!(diff_snapshots(&before, &snapshot(&root), &CompareOptions::with_root()).is_empty());

    // Reads still work.
    let out = run_ok(&srv, &["ls", "-R", &srv.url("")]);
    assert_eq!(lines(&out), expected_listing(&root, true));
    let v = run_json(&srv, &["stat", "--json", &srv.url("file")]);
    assert_eq!(v["size"], 9);
    let v = run_json(&srv, &["du", "--json", &srv.url("tree")]);
    assert_eq!(v["files"], 20);
    let out = run_ok(&srv, &["sum", "--algo", "sha256", &srv.url("file")]);
    assert_eq!(
        out,
        format!("{}  file\n", system_digest("sha256sum", &root.join("file")))
    );
}

// ---------------------------------------------------------------- exit codes: 2, 3 and 4

#[test]
fn missing_path_exits_2_naming_it() {
    let t = tmp();
    let root = t.path().join("root");
    fs::create_dir_all(root.join("dir")).unwrap();
    let srv = server(&root);
    let before = snapshot(&root);
    let m = srv.url("no-such-entry");
    let under = srv.url("dir/no-such-entry");
    let cases: Vec<Vec<&str>> = vec![
        vec!["ls", &m],
        vec!["ls", "-l", &m],
        vec!["ls", "-R", "--json", &under],
        vec!["stat", &m],
        vec!["stat", "--json", &under],
        vec!["du", &m],
        vec!["du", "--json", &under],
        vec!["sum", &m],
        vec!["sum", "-r", "--algo", "md5", &under],
        vec!["rm", &m],
        vec!["rm", "-r", &under],
    ];
    for args in &cases {
        let out = run(&srv, args);
        assert_exit(&out, 2);
        assert_error_names(&out, &["no-such-entry"]);
        assert!(
            stdout_besides_the_error(&out).is_empty(),
            "{args:?} printed:\n{}",
            describe(&out)
        );
    }
    assert_eq!(
        diff_snapshots(&before, &snapshot(&root), &CompareOptions::with_root()),
        Vec::<String>::new()
    );
}

#[test]
fn bad_urls_and_dotdot_paths_exit_2() {
    let t = tmp();
    let root = t.path().join("root");
    fs::create_dir_all(root.join("dir/sub")).unwrap();
    make_file(&root.join("dir/f"), b"f", 0o644);
    let srv = server(&root);
    let before = snapshot(&root);
    let outside_before: Vec<_> = fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let cases: Vec<Vec<String>> = vec![
        vec!["ls".into(), srv.url("..")],
        vec!["ls".into(), "-R".into(), srv.url("dir/../..")],
        vec!["stat".into(), srv.url("../root")],
        vec!["du".into(), srv.url("dir/../../")],
        vec!["sum".into(), "-r".into(), srv.url("..")],
        vec!["mkdir".into(), "-p".into(), srv.url("../escaped")],
        vec!["mkdir".into(), srv.url("dir/../../escaped")],
        vec!["rm".into(), "-r".into(), srv.url("dir/../dir")],
        vec!["rm".into(), "-r".into(), srv.url("..")],
        vec!["mv".into(), srv.url("dir/f"), srv.url("../stolen")],
        vec!["mv".into(), srv.url("../root/dir"), srv.url("x")],
        vec!["ls".into(), s(&root).to_string()],
        vec!["ls".into(), "http://127.0.0.1:1/x".into()],
        vec!["rm".into(), "sprat://127.0.0.1/no-port".into()],
        // A URL of another scheme is no local path (it made a directory `http:` once).
        vec![
            "cp".into(),
            s(&root.join("dir/f")).into(),
            "http://127.0.0.1:1/x".into(),
        ],
        vec![
            "cp".into(),
            "ftp://127.0.0.1:1/x".into(),
            s(&t.path().join("got")).into(),
        ],
    ];
    for args in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&srv, &args);
        assert_exit(&out, 2);
        sprat_testkit::assert_error_line(&out);
    }
    assert_eq!(
        diff_snapshots(&before, &snapshot(&root), &CompareOptions::with_root()),
        Vec::<String>::new()
    );
    let outside_after: Vec<_> = fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(outside_before, outside_after);
}

#[test]
fn wrong_token_exits_3_and_changes_nothing() {
    let t = tmp();
    let root = t.path().join("root");
    make_many_files(&root.join("tree"), 5, 100, 41);
    make_file(&root.join("file"), b"f", 0o644);
    let srv = server(&root);
    let before = snapshot(&root);
    let wrong = t.path().join("wrong-token");
    fs::write(&wrong, "not-the-right-token\n").unwrap();
    let (file, tree, new) = (srv.url("file"), srv.url("tree"), srv.url("new"));
    let cases: Vec<Vec<&str>> = vec![
        vec!["ls", &tree],
        vec!["ls", "-l", "-R", "--json", &tree],
        vec!["stat", &file],
        vec!["du", "--json", &tree],
        vec!["sum", "-r", &tree],
        vec!["mkdir", &new],
        vec!["mkdir", "-p", &new],
        vec!["rm", &file],
        vec!["rm", "-r", &tree],
        vec!["mv", &file, &new],
    ];
    for case in &cases {
        // With --token-file, and with SPRAT_TOKEN.
        let mut args: Vec<&str> = vec![case[0], "--token-file", s(&wrong)];
        args.extend_from_slice(&case[1..]);
        let out = run_sprat(bin(), &args, &[]);
        assert_exit(&out, 3);
        assert!(
            stderr_lower(&out).contains("authentication"),
            "stderr does not mention authentication:\n{}",
            describe(&out)
        );
        assert!(
            stdout_besides_the_error(&out).is_empty(),
            "{args:?} printed:\n{}",
            describe(&out)
        );
        let out = run_sprat(bin(), case, &[("SPRAT_TOKEN", "not-the-right-token")]);
        assert_exit(&out, 3);
        assert!(
            stdout_besides_the_error(&out).is_empty(),
            "{case:?} printed:\n{}",
            describe(&out)
        );
        // No token at all: refused before or at authentication.
        let out = run_sprat(bin(), case, &[]);
        assert_failed(&out);
        assert!(
            matches!(out.status.code(), Some(2) | Some(3)),
            "no token: expected exit 2 or 3:\n{}",
            describe(&out)
        );
    }
    let d = diff_snapshots(&before, &snapshot(&root), &CompareOptions::with_root());
    assert!(
        d.is_empty(),
        "{}",
        format_diffs("a client with a wrong token changed the tree", &d)
    );

    // The right token in SPRAT_TOKEN works.
    let out = run_sprat(
        bin(),
        ["ls", &srv.url("")],
        &[("SPRAT_TOKEN", DEFAULT_TOKEN)],
    );
    assert_eq!(ok(&srv, &out), "file\ntree\n");
}

#[test]
fn no_auth_server_needs_no_token_and_closed_port_exits_4() {
    let t = tmp();
    let root = t.path().join("root");
    fs::create_dir_all(&root).unwrap();
    make_file(&root.join("f"), b"f", 0o644);
    let srv = server_with(&root, &ServerOptions::no_auth());
    let out = run_sprat(bin(), ["ls", &srv.url("")], &[]);
    assert_eq!(ok(&srv, &out), "f\n");
    let out = run_sprat(bin(), ["mkdir", &srv.url("d")], &[]);
    ok(&srv, &out);
    assert!(root.join("d").is_dir());

    let url = format!("sprat://127.0.0.1:{}/x", closed_port());
    for cmd in ["ls", "stat", "du", "sum", "mkdir", "rm"] {
        let out = run_sprat(bin(), [cmd, "--token-file", s(&root.join("f")), &url], &[]);
        assert_exit(&out, 4);
        sprat_testkit::assert_error_line(&out);
    }
}

// ------------------------------------------------------------------ confinement to the root

#[test]
fn escaping_symlinks_and_dotdot_read_nothing_outside() {
    let c = Confined::new();
    let srv = server(&c.root);
    let secret = c.secret_sha256();
    let abs = format!("/{}", s(&c.outside));
    let mut failures = Vec::new();

    // These name something outside the root: they must fail.
    let must_fail: Vec<Vec<String>> = vec![
        vec!["ls".into(), srv.url("esc/inner")],
        vec!["ls".into(), "-R".into(), srv.url("esc/inner")],
        vec!["ls".into(), "--json".into(), srv.url("sub/relesc/inner")],
        vec!["ls".into(), srv.url(&abs)],
        vec!["ls".into(), srv.url("%2e%2e/outside")],
        vec!["stat".into(), srv.url("esc/secret.txt")],
        vec![
            "stat".into(),
            "--json".into(),
            srv.url("sub/relesc/secret.txt"),
        ],
        vec!["du".into(), srv.url("esc/inner")],
        vec!["du".into(), srv.url(&abs)],
        vec!["sum".into(), srv.url("esc/secret.txt")],
        vec![
            "sum".into(),
            "--algo".into(),
            "sha256".into(),
            srv.url("sub/relesc/secret.txt"),
        ],
        vec!["sum".into(), "-r".into(), srv.url("esc/inner")],
        vec!["sum".into(), "-r".into(), srv.url(&abs)],
    ];
    for args in &must_fail {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&srv, &args);
        assert_no_panic(&out);
        let stdout = stdout_besides_the_error(&out);
        if out.status.success() {
            failures.push(format!("{args:?} exited 0:\n{}", describe(&out)));
        }
        if shows_outside_names(&stdout) || stdout.contains(&secret) {
            failures.push(format!(
                "{args:?} showed what is outside:\n{}",
                describe(&out)
            ));
        }
    }

    // These name the links themselves or trees holding them: they may succeed, but must show
    // nothing of what the links point to.
    let may_succeed: Vec<Vec<String>> = vec![
        vec!["ls".into(), srv.url("esc")],
        vec!["ls".into(), "-l".into(), srv.url("esc")],
        vec!["ls".into(), "-R".into(), srv.url("esc")],
        vec![
            "ls".into(),
            "-R".into(),
            "--json".into(),
            srv.url("sub/relesc"),
        ],
        vec!["ls".into(), "-R".into(), srv.url("")],
        vec!["ls".into(), "-l".into(), "-R".into(), srv.url("sub")],
        vec!["stat".into(), srv.url("esc")],
        vec!["du".into(), srv.url("esc")],
        vec!["sum".into(), "-r".into(), srv.url("esc")],
        vec![
            "sum".into(),
            "-r".into(),
            "--algo".into(),
            "sha256".into(),
            srv.url("sub/relesc"),
        ],
        vec![
            "sum".into(),
            "-r".into(),
            "--algo".into(),
            "sha256".into(),
            srv.url(""),
        ],
    ];
    for args in &may_succeed {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&srv, &args);
        assert_no_panic(&out);
        let stdout = String::from_utf8_lossy(&out.stdout);
        if shows_outside_names(&stdout) || stdout.contains(&secret) {
            failures.push(format!(
                "{args:?} showed what is outside:\n{}",
                describe(&out)
            ));
        }
    }

    // Counting on the server counts the links, not what they point to.
    for (p, files, dirs, links, bytes) in
        [("esc", 0, 0, 1, 0), ("sub", 1, 1, 1, 15), ("", 2, 2, 2, 22)]
    {
        let out = run(&srv, &["du", "--json", &srv.url(p)]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let got = (&v["files"], &v["dirs"], &v["symlinks"], &v["bytes"]);
        if got != (&files.into(), &dirs.into(), &links.into(), &bytes.into()) {
            failures.push(format!("du --json {p:?}: {v} (expected files {files}, dirs {dirs}, symlinks {links}, bytes {bytes})\n{}", describe(&out)));
        }
    }
    // Summing the whole root sums exactly the two files inside it.
    let out = run(&srv, &["sum", "-r", "--algo", "sha256", &srv.url("")]);
    let got: Vec<String> = parse_sums(&String::from_utf8_lossy(&out.stdout), 64)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    if got != ["keep.txt", "sub/file.txt"] {
        failures.push(format!("sum -r of the root: {got:?}\n{}", describe(&out)));
    }
    assert!(
        failures.is_empty(),
        "{}\n--- server stderr ---\n{}",
        failures.join("\n"),
        srv.stderr_log()
    );
}

#[test]
fn escaping_symlinks_change_nothing_outside() {
    let c = Confined::new();
    let srv = server(&c.root);
    let before = c.outside_state();
    let mut failures = Vec::new();

    let must_fail: Vec<Vec<String>> = vec![
        vec!["rm".into(), srv.url("esc/secret.txt")],
        vec!["rm".into(), "-r".into(), srv.url("esc/inner")],
        vec!["rm".into(), "-r".into(), srv.url("esc/inner/secret2.txt")],
        vec!["rm".into(), srv.url("sub/relesc/secret.txt")],
        vec!["rm".into(), "-r".into(), srv.url("sub/relesc/inner")],
        vec!["mkdir".into(), srv.url("esc/new")],
        vec!["mkdir".into(), "-p".into(), srv.url("esc/new")],
        vec!["mkdir".into(), "-p".into(), srv.url("esc/new/deeper")],
        vec!["mkdir".into(), "-p".into(), srv.url("sub/relesc/inner/new")],
        vec!["mv".into(), srv.url("keep.txt"), srv.url("esc/moved.txt")],
        vec!["mv".into(), srv.url("keep.txt"), srv.url("esc/inner")],
        vec![
            "mv".into(),
            srv.url("keep.txt"),
            srv.url("sub/relesc/inner"),
        ],
        vec!["mv".into(), srv.url("sub"), srv.url("esc/inner/sub")],
        vec![
            "mv".into(),
            srv.url("esc/secret.txt"),
            srv.url("stolen.txt"),
        ],
        vec!["mv".into(), srv.url("esc/inner"), srv.url("stolen-dir")],
        vec![
            "mv".into(),
            srv.url("sub/relesc/secret.txt"),
            srv.url("sub/stolen.txt"),
        ],
    ];
    for args in &must_fail {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&srv, &args);
        assert_no_panic(&out);
        if out.status.success() {
            failures.push(format!("{args:?} exited 0"));
        }
        if c.outside_state() != before {
            failures.push(format!("{args:?} changed something outside the root"));
        }
        for gone in ["keep.txt", "sub/file.txt"] {
            if !c.root.join(gone).exists() {
                failures.push(format!("{args:?} lost {gone}"));
            }
        }
        for stolen in ["stolen.txt", "stolen-dir", "sub/stolen.txt"] {
            if fs::symlink_metadata(c.root.join(stolen)).is_ok() {
                failures.push(format!("{args:?} brought {stolen} in from outside"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n--- server stderr ---\n{}",
        failures.join("\n"),
        srv.stderr_log()
    );

    // Removing the links themselves removes only the links.
    symlink(&c.outside, c.root.join("esc2")).unwrap();
    run_ok(&srv, &["rm", &srv.url("esc")]);
    run_ok(&srv, &["rm", "-r", &srv.url("esc2")]);
    run_ok(&srv, &["rm", "-r", &srv.url("sub")]);
    for p in ["esc", "esc2", "sub"] {
        assert!(
            fs::symlink_metadata(c.root.join(p)).is_err(),
            "{p} still exists"
        );
    }
    assert_eq!(
        c.outside_state(),
        before,
        "removing the links changed their targets"
    );
}

#[test]
fn mv_onto_an_escaping_symlink_keeps_the_link() {
    // `mv keep.txt esc` where esc -> a directory outside the root: moving into the target is
    // forbidden, so the move must be refused; silently replacing the link by the file loses the
    // link and surprises anyone who meant "into esc/" (as `mv` does with a link to a directory).
    let c = Confined::new();
    let srv = server(&c.root);
    let before = c.outside_state();
    for to in ["esc", "esc/", "sub/relesc"] {
        let out = run(&srv, &["mv", &srv.url("keep.txt"), &srv.url(to)]);
        assert_no_panic(&out);
        assert_eq!(
            c.outside_state(),
            before,
            "mv keep.txt {to} changed the outside"
        );
        assert!(
            !out.status.success(),
            "mv keep.txt {to} exited 0; `esc` is now {:?}\n{}",
            fs::symlink_metadata(c.root.join("esc")).map(|m| m.file_type()),
            describe(&out)
        );
        assert_eq!(fs::read(c.root.join("keep.txt")).unwrap(), b"keep me");
        assert!(fs::symlink_metadata(c.root.join("esc"))
            .unwrap()
            .is_symlink());
        assert!(fs::symlink_metadata(c.root.join("sub/relesc"))
            .unwrap()
            .is_symlink());
    }
}

#[test]
fn third_party_copy_data_does_not_pass_through_the_client() {
    // The client is pointed at one server through a recording relay, then at the other. If the
    // data went through the client, each relay would carry all of it; sent from server to
    // server, at least one relay carries only the client's control traffic.
    let t = tmp();
    let (root_a, root_b) = (t.path().join("a"), t.path().join("b"));
    let stats = make_many_files(&root_a.join("src"), 60, 100_000, 51);
    let (a, b) = (server(&root_a), server(&root_b));

    let relay_a = sprat_testkit::Relay::start(a.addr());
    let out = run(&a, &["cp", &relay_a.url("src"), &b.url("via-relay-a")]);
    ok(&b, &out);
    assert_trees_equal(&root_a.join("src"), &root_b.join("via-relay-a"));
    let relay_b = sprat_testkit::Relay::start(b.addr());
    let out = run(&a, &["cp", &a.url("src"), &relay_b.url("via-relay-b")]);
    ok(&b, &out);
    assert_trees_equal(&root_a.join("src"), &root_b.join("via-relay-b"));

    let (ra, rb) = (relay_a.forwarded(), relay_b.forwarded());
    assert!(
        ra.min(rb) < stats.bytes / 2,
        "both relays carried the data ({ra} and {rb} bytes for {} bytes of files): \
         the third-party copy went through the client",
        stats.bytes
    );
}

/// The server's log says, whatever its verbosity, who changed the tree and how: every
/// transfer done, every mkdir, mv and rm, and a refused one with why; a listing is not logged.
#[test]
fn the_server_logs_every_change_with_who_asked() {
    let t = tmp();
    let root = t.path().join("root");
    fs::create_dir_all(&root).unwrap();
    let src = t.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"data").unwrap();
    let srv = server(&root);
    ok(&srv, &common::cp(&srv, &[], &src, srv.url("pushed")));
    run_ok(&srv, &["mkdir", &srv.url("made")]);
    run_ok(&srv, &["mv", &srv.url("made"), &srv.url("moved")]);
    run_ok(&srv, &["ls", &srv.url("")]);
    run_ok(&srv, &["rm", "-r", &srv.url("pushed")]);
    let refused = run(&srv, &["rm", &srv.url("never-there")]);
    assert!(!refused.status.success());
    let log = srv.stderr_log();
    for line in [
        "push into 'pushed' done",
        "mkdir 'made'",
        "mv 'made' 'moved'",
        "rm -r 'pushed'",
        "rm 'never-there': refused",
    ] {
        let found = log.lines().find(|l| l.contains(line));
        assert!(
            found.is_some_and(|l| l.starts_with("sprat serve: 127.0.0.1:")),
            "no '{line}' line with the client's address in:\n{log}"
        );
    }
    assert!(!log.contains("ls "), "{log}");
}

/// The habits of `rm -rf`, `rm -R`, `ls -la` and `du -sh` work as their Unix namesakes: `-f`
/// makes a missing path no error (without it: exit 2), `-a` and `-s` change nothing.
#[test]
fn unix_habits_on_the_namespace_commands() {
    let t = tmp();
    let root = t.path().join("root");
    fs::create_dir_all(root.join("d/sub")).unwrap();
    fs::write(root.join("d/sub/f"), b"f").unwrap();
    fs::write(root.join(".hidden"), b"h").unwrap();
    let srv = server(&root);
    let listed = run_ok(&srv, &["ls", "-la", &srv.url("")]);
    assert!(listed.contains(".hidden"), "{listed}");
    run_ok(&srv, &["du", "-sh", &srv.url("d")]);
    run_ok(&srv, &["rm", "-R", &srv.url("d/sub")]);
    assert!(!root.join("d/sub").exists());
    run_ok(&srv, &["rm", "-rf", &srv.url("d")]);
    assert!(!root.join("d").exists());
    run_ok(&srv, &["rm", "-rf", &srv.url("d")]);
    assert_exit(&run(&srv, &["rm", "-r", &srv.url("d")]), 2);
}

/// `sum`'s output into a pipe is sha256sum's own, names with a backslash, newline or
/// carriage return escaped its way (a `\` before the line) and other bytes as they are, so
/// that `sha256sum -c` run where the data is checks every file, the right one each; and two
/// names never print alike (review 2026-11-30 of sprat in scripts, F4: `nl\nname` and a file
/// named `nl\x0aname` printed the same, and `sha256sum -c` checked the wrong file).
#[test]
fn sum_output_is_read_back_by_sha256sum_with_odd_names() {
    use std::os::unix::ffi::OsStrExt;
    let t = tmp();
    let root = t.path().join("root");
    let dir = root.join("odd");
    std::fs::create_dir_all(&dir).unwrap();
    let names: [&[u8]; 5] = [
        b"plain",
        b"nl\nname",
        b"nl\\x0aname",
        b"bad\xffname",
        b"back\\slash",
    ];
    for (i, name) in names.iter().enumerate() {
        std::fs::write(dir.join(std::ffi::OsStr::from_bytes(name)), format!("{i}")).unwrap();
    }
    let srv = server(&root);
    let mut v: Vec<OsString> = vec!["sum".into()];
    v.extend(srv.client_args());
    v.extend([
        "-r".into(),
        "--algo".into(),
        "sha256".into(),
        srv.url("odd").into(),
    ]);
    let out = run_sprat(bin(), v, &[]);
    assert!(out.status.success(), "{}", describe(&out));
    let listed = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(listed, names.len(), "one line each, the newline escaped");
    let mut check = std::process::Command::new("sha256sum")
        .arg("-c")
        .current_dir(&root)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    check.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(checked.status.success(), "{checked:?}");
    let said = String::from_utf8_lossy(&checked.stdout);
    assert_eq!(said.matches(": OK").count(), names.len(), "{said}");
}

/// `ls`, `stat` and `du` with `--json` put a failure on stdout as JSON too, as `cp --json`
/// does (`{"error": ..., "exit_code": N}`): stdout was empty (review 2026-11-30 of sprat in
/// scripts, F6).
#[test]
fn namespace_commands_with_json_say_a_failure_as_json() {
    let t = tmp();
    let srv = server(&t.path().join("root"));
    for cmd in ["ls", "stat", "du"] {
        let out = run(&srv, &[cmd, "--json", &srv.url("missing")]);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {}", describe(&out));
        let said: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{cmd}: not JSON ({e}): {}", describe(&out)));
        assert_eq!(said["exit_code"], 2, "{cmd}: {said}");
        assert!(
            said["error"].as_str().unwrap().contains("missing"),
            "{cmd}: {said}"
        );
    }
}
