//! A source that changes while it is read, and what a killed writer leaves behind.
//!
//! A large file modified in place, grown or removed while a copy reads it is reported by name
//! with exit 1, and its destination never carries the final name with mixed content (no file,
//! or the old one whole). To make the change land mid-copy without guessing at timings, the
//! copy goes through a rate-capped `sprat relay` and is written with `--publish rename`: the
//! change is made once the file's temporary name appears at the destination (its first chunk
//! is written), while the readers, a few batches ahead at most, still have most of its chunks
//! to read. Temporary names left by a killed server (`kill -9`) or planted ones are removed
//! by the next copy into that tree, in every direction; resumable partial names are kept.

#![allow(clippy::unwrap_used)]

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{cp, cp_local, server, server_with, tmp, RelayProc};
use sprat_testkit::{assert_no_panic, assert_trees_equal, describe, Server, ServerOptions};

const BIG: usize = 64 << 20;
const OLD: &[u8] = b"the old, complete content of big";

/// A server that writes under temporary names renamed into place (`--publish rename`).
fn renaming_server(root: &Path) -> Server {
    let opts = ServerOptions {
        extra_args: vec!["--publish".into(), "rename".into()],
        ..ServerOptions::default()
    };
    server_with(root, &opts)
}

/// A relay slow enough that a 64 MiB file takes about a second to cross.
fn slow_relay(server: &Server) -> RelayProc {
    RelayProc::start(server.addr(), &["--rate", "400mbit"])
}

/// A source with a 64 MiB file `big` (not all one byte value) and a few small files.
fn make_source(src: &Path) {
    make_source_of(src, BIG);
}

/// The same with `big` of `size` bytes.
fn make_source_of(src: &Path, size: usize) {
    fs::create_dir_all(src.join("small")).unwrap();
    let data: Vec<u8> = (0..size).map(|i| (i / 4096) as u8).collect();
    fs::write(src.join("big"), data).unwrap();
    for i in 0..20 {
        fs::write(src.join(format!("small/f{i}")), format!("small file {i}")).unwrap();
    }
}

/// Whether `dir` holds a temporary name of `big` (its first chunk is being written).
fn has_temp_of_big(dir: &Path) -> bool {
    fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(".big.sprat-"))
    })
}

/// Runs `change` once `dir` holds a temporary name of `big` (polled every millisecond), on
/// a thread of its own; `done` stops it waiting. Returns whether the change was made.
fn when_big_is_being_written(
    dir: PathBuf,
    done: Arc<AtomicBool>,
    change: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<bool> {
    std::thread::spawn(move || {
        while !done.load(Ordering::SeqCst) {
            if has_temp_of_big(&dir) {
                change();
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    })
}

/// Overwrites 4 KiB in the middle of `path` in place (same size, new mtime).
fn overwrite_in_place(path: &Path) {
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&[0xEE; 4096], (BIG / 2) as u64).unwrap();
}

/// Appends a few bytes to `path`.
fn append(path: &Path) {
    let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(b"grown").unwrap();
}

/// Runs `copy` while `change` is made to the source once the destination `dst_dir` shows
/// `big` being written.
fn copy_while_changing(
    dst_dir: &Path,
    change: impl FnOnce() + Send + 'static,
    copy: impl FnOnce() -> Output,
) -> Output {
    let done = Arc::new(AtomicBool::new(false));
    let watcher = when_big_is_being_written(dst_dir.to_path_buf(), done.clone(), change);
    let out = copy();
    done.store(true, Ordering::SeqCst);
    let changed = watcher.join().unwrap();
    assert!(
        changed,
        "big was never seen being written:\n{}",
        describe(&out)
    );
    out
}

/// Exit 1, `big` named with `why`, the small files copied, and at `dst/big` nothing or the
/// old content whole; no temporary name left.
#[track_caller]
fn assert_big_failed(out: &Output, why: &str, dst: &Path, server: Option<&Server>) {
    assert_no_panic(out);
    let log = server.map(|s| s.stderr_log()).unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n--- server ---\n{log}",
        describe(out)
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.lines().any(|l| l.contains("big") && l.contains(why)),
        "no line names big as {why:?}:\n{text}"
    );
    // Named once, counted once, however many of its chunks failed or were not sent.
    let named = text
        .lines()
        .filter(|l| l.starts_with("sprat: failed: big:"))
        .count();
    assert_eq!(named, 1, "{text}");
    assert!(text.contains("FAILED: 1 item(s)"), "{text}");
    match fs::read(dst.join("big")) {
        Ok(data) => assert!(data == OLD, "dst/big has new or mixed content"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
    }
    for i in 0..20 {
        assert_eq!(
            fs::read(dst.join(format!("small/f{i}"))).unwrap(),
            format!("small file {i}").as_bytes()
        );
    }
    assert_no_temp_names(dst);
}

/// Every temporary name below `root` (a writer's, its long form, or the probe).
fn temp_names(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            }
            if name.starts_with('.') && name.contains(".sprat-") && !name.contains("sprat-part") {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[track_caller]
fn assert_no_temp_names(root: &Path) {
    let left = temp_names(root);
    assert!(left.is_empty(), "temporary names left: {left:?}");
}

#[derive(Clone, Copy, Debug)]
enum Dir {
    Push,
    Pull,
    ThirdParty,
}

#[derive(Clone, Copy, Debug)]
enum Change {
    /// 4 KiB in the middle rewritten, size kept.
    InPlace,
    /// A few bytes appended.
    Grow,
    /// Removed.
    Vanish,
}

/// A copy in direction `dir` (through the slow relay in front of the destination's server, or
/// the pull's) during which the source's `big` undergoes `change`: `big` alone fails, named.
fn big_changes_while_read(dir: Dir, change: Change) {
    let t = tmp();
    let (src_root, dst_root) = (t.path().join("a"), t.path().join("b"));
    let src = src_root.join("src");
    make_source(&src);
    let (source_srv, dest_srv) = (server(&src_root), renaming_server(&dst_root));
    // The server the copy reaches over the network (behind the relay in the faulty run).
    let (dst, reached) = match dir {
        Dir::Push | Dir::ThirdParty => (dst_root.join("dst"), &dest_srv),
        Dir::Pull => (t.path().join("dst"), &source_srv),
    };
    let relay = slow_relay(reached);
    fs::create_dir_all(&dst).unwrap();
    if !matches!(change, Change::Vanish) {
        fs::write(dst.join("big"), OLD).unwrap();
    }
    let big = src.join("big");
    let opts = [
        "--chunk-size",
        "1MiB",
        "--publish",
        "rename",
        "--retry-for",
        "0s",
    ];
    // The copy, reaching the server with `url`.
    let copy = |url: &dyn Fn(&str) -> String| match dir {
        Dir::Push => cp(&dest_srv, &opts, &src, url("dst")),
        Dir::Pull => cp(&source_srv, &opts, url("src"), &dst),
        Dir::ThirdParty => cp(&source_srv, &opts, source_srv.url("src"), url("dst")),
    };
    let out = copy_while_changing(
        &dst,
        move || match change {
            Change::InPlace => overwrite_in_place(&big),
            Change::Grow => append(&big),
            Change::Vanish => fs::remove_file(&big).unwrap(),
        },
        || copy(&|p| relay.url(p)),
    );
    let why = match change {
        Change::Vanish => "vanished",
        _ => "changed while being read",
    };
    let writer = match dir {
        Dir::Pull => None,
        _ => Some(&dest_srv),
    };
    assert_big_failed(&out, why, &dst, writer);
    // Nothing of it is kept to resume: it was another version of the file.
    assert!(!dst.join(".big.sprat-part").exists());
    assert!(!dst.join(".big.sprat-part.log").exists());
    // Run again with the source still: the destination ends equal to it.
    let again = copy(&|p| reached.url(p));
    common::assert_ok(&again, writer);
    assert_trees_equal(&src, &dst);
}

#[test]
fn push_of_a_large_file_changed_in_place_while_read_fails_it_alone() {
    big_changes_while_read(Dir::Push, Change::InPlace);
}

#[test]
fn push_of_a_large_file_that_vanishes_while_read_fails_it_alone() {
    big_changes_while_read(Dir::Push, Change::Vanish);
}

#[test]
fn pull_of_a_large_file_that_grows_while_read_fails_it_alone() {
    big_changes_while_read(Dir::Pull, Change::Grow);
}

#[test]
fn pull_of_a_large_file_that_vanishes_while_read_fails_it_alone() {
    big_changes_while_read(Dir::Pull, Change::Vanish);
}

#[test]
fn third_party_copy_of_a_large_file_changed_while_read_fails_it_alone() {
    big_changes_while_read(Dir::ThirdParty, Change::InPlace);
}

#[test]
fn third_party_copy_of_a_large_file_that_vanishes_while_read_fails_it_alone() {
    big_changes_while_read(Dir::ThirdParty, Change::Vanish);
}

/// A thread appending to a file a byte at a time until stopped.
struct Grower {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Grower {
    /// Starts appending to `path`; returns once the first byte is written.
    fn start(path: PathBuf) -> Grower {
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let (stopped, running) = (stop.clone(), started.clone());
        let thread = std::thread::spawn(move || {
            let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
            while !stopped.load(Ordering::SeqCst) {
                f.write_all(b"x").unwrap();
                running.store(true, Ordering::SeqCst);
                std::thread::yield_now();
            }
        });
        while !started.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        Grower { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap();
    }
}

/// A local copy has no network to slow down: the file grows all the while the copy runs
/// (every append changes its size, so any chunk read after the first is refused).
#[test]
fn local_copy_of_a_large_file_that_keeps_growing_fails_it_alone() {
    let t = tmp();
    let src = t.path().join("src");
    make_source(&src);
    let dst = t.path().join("dst");
    fs::create_dir_all(&dst).unwrap();
    fs::write(dst.join("big"), OLD).unwrap();
    let grower = Grower::start(src.join("big"));
    let out = cp_local(&["--chunk-size", "256KiB"], &src, &dst);
    grower.stop();
    assert_big_failed(&out, "changed while being read", &dst, None);
}

/// A single file copied alone that keeps growing fails by its own name (its path within the
/// copy is empty: the error said `read '.'`).
#[test]
fn a_single_large_file_that_keeps_growing_is_named_in_its_error() {
    let t = tmp();
    let src = t.path().join("src");
    make_source(&src);
    let dst = t.path().join("dst");
    fs::create_dir_all(&dst).unwrap();
    let grower = Grower::start(src.join("big"));
    let out = cp_local(
        &["--chunk-size", "256KiB"],
        src.join("big"),
        dst.join("big"),
    );
    grower.stop();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("read 'big': changed while being read"),
        "{stderr}"
    );
    assert!(!stderr.contains("'.'"), "{stderr}");
    assert!(!dst.join("big").exists(), "{stderr}");
}

/// Plants every form of temporary name (and resumable partial names, which stay, and a user's
/// files named like temporary ones, which stay too) in `dst`; returns what must stay.
fn plant_leftovers(dst: &Path) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let temp = |dir: &str, name: &str, tag: &str| {
        let t = sprat_store::write::temp_name_for(name.as_bytes(), tag);
        dst.join(dir).join(std::ffi::OsStr::from_bytes(&t))
    };
    fs::create_dir_all(dst.join("small")).unwrap();
    let planted = [
        temp("", "big", "sprat-0123abcd"),
        temp("small", "f1", "sprat-deadbeef"),
        dst.join(".sprat-89abcdef.0123456789abcdef"),
        dst.join(".sprat-probe-sprat-00c0ffee"),
    ];
    for p in planted {
        fs::write(p, b"debris").unwrap();
    }
    std::os::unix::fs::symlink("nowhere", temp("small", "link", "sprat-0000beef")).unwrap();
    // A user's files that only look like debris (no check of their names): kept.
    for name in [".q.sprat-12345678", ".data.csv.sprat-0f0f0f0f"] {
        fs::write(dst.join("small").join(name), b"the user's").unwrap();
    }
    // A partial file of `big` whose journal is not one: replaced by the copy of `big`.
    fs::write(dst.join(".big.sprat-part"), b"resumable").unwrap();
    fs::write(dst.join(".big.sprat-part.log"), b"no journal").unwrap();
    // A partial file of a file the source does not have: kept for a later run.
    fs::write(dst.join(".gone.sprat-part"), b"resumable").unwrap();
    fs::write(dst.join(".gone.sprat-part.log"), b"resumable log").unwrap();
    vec![
        dst.join(".gone.sprat-part"),
        dst.join(".gone.sprat-part.log"),
        dst.join("small/.q.sprat-12345678"),
        dst.join("small/.data.csv.sprat-0f0f0f0f"),
    ]
}

/// The leftovers are gone, the partial files of `big` used up, the others kept, and apart
/// from them `dst` equals `src`.
#[track_caller]
fn assert_cleaned(out: &Output, src: &Path, dst: &Path, kept: &[PathBuf], server: Option<&Server>) {
    common::assert_ok(out, server);
    assert!(!dst.join(".big.sprat-part").exists());
    assert!(!dst.join(".big.sprat-part.log").exists());
    for k in kept {
        assert!(k.exists(), "{} was removed", k.display());
        // Its directory's mtime as the copy left it.
        let dir = fs::File::open(k.parent().unwrap()).unwrap();
        let mtime = dir.metadata().unwrap().modified().unwrap();
        fs::remove_file(k).unwrap();
        dir.set_modified(mtime).unwrap();
    }
    assert_no_temp_names(dst);
    assert_trees_equal(src, dst);
}

#[test]
fn leftover_temporary_names_are_removed_by_the_next_copy_in_every_direction() {
    let t = tmp();
    let src = t.path().join("src");
    make_source_of(&src, 3 << 20);
    let (root_a, root_b) = (t.path().join("a"), t.path().join("b"));
    let (a, b) = (server(&root_a), server(&root_b));

    // Local.
    let dst = t.path().join("local");
    let kept = plant_leftovers(&dst);
    let out = cp_local(&[], &src, &dst);
    assert_cleaned(&out, &src, &dst, &kept, None);

    // Push.
    let dst = root_b.join("pushed");
    let kept = plant_leftovers(&dst);
    let out = cp(&b, &[], &src, b.url("pushed"));
    assert_cleaned(&out, &src, &dst, &kept, Some(&b));

    // Pull.
    let dst = t.path().join("pulled");
    let kept = plant_leftovers(&dst);
    let out = cp(&b, &[], b.url("pushed"), &dst);
    assert_cleaned(&out, &src, &dst, &kept, Some(&b));

    // Third party (the source server removes them on the destination with its ticket).
    fs::create_dir_all(root_a.join("src")).unwrap();
    let out = cp_local(&[], &src, root_a.join("src"));
    common::assert_ok(&out, None);
    let dst = root_b.join("third");
    let kept = plant_leftovers(&dst);
    let out = cp(&a, &[], a.url("src"), b.url("third"));
    assert_cleaned(&out, &src, &dst, &kept, Some(&b));
}

/// A server killed (`kill -9`) while it writes a large file leaves its partial file (and
/// maybe temporary names of small files); the next push into the tree resumes the one,
/// removes the others and completes the copy.
#[test]
fn a_push_after_a_killed_server_leaves_no_temporary_names() {
    let t = tmp();
    let src = t.path().join("src");
    make_source(&src);
    let root = t.path().join("root");
    let dst = root.join("dst");
    fs::create_dir_all(&dst).unwrap();
    let mut first = renaming_server(&root);
    let relay = slow_relay(&first);
    let done = Arc::new(AtomicBool::new(false));
    let (watch_dir, stop) = (dst.clone(), done.clone());
    let pid = first.pid();
    let killer = std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            if has_temp_of_big(&watch_dir) {
                // Only the server this test started, by its PID.
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    });
    let opts = [
        "--chunk-size",
        "1MiB",
        "--publish",
        "rename",
        "--retry-for",
        "0s",
    ];
    let out = cp(&first, &opts, &src, relay.url("dst"));
    done.store(true, Ordering::SeqCst);
    assert!(killer.join().unwrap(), "never saw big being written");
    assert_ne!(out.status.code(), Some(0), "{}", describe(&out));
    first.kill();
    assert!(
        dst.join(".big.sprat-part").exists(),
        "the killed server left no partial file"
    );
    drop(relay);

    let second = renaming_server(&root);
    let out = cp(&second, &["--publish", "rename"], &src, second.url("dst"));
    common::assert_ok(&out, Some(&second));
    assert_no_temp_names(&dst);
    assert!(!dst.join(".big.sprat-part").exists());
    assert_trees_equal(&src, &dst);
}
