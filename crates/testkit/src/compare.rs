//! Strict comparison of two directory trees, and snapshots of a tree's state.
//!
//! Both trees are walked with `symlink_metadata`, so a symlink is compared as a link (its target
//! string and its own mtime) and never followed. For every relative path the comparison checks
//! the file type, the content of regular files, the permission bits (`mode & 0o7777`), the mtime
//! in seconds and nanoseconds, and the link target. Every difference found is listed in one panic
//! message, each naming the relative path, so one failing run shows all that is wrong.
//!
//! The root directories' own mode and mtime are compared only when asked
//! ([`CompareOptions::root_metadata`]): sprat copies them onto a destination it creates, but the
//! root of a server export is not a copy of anything.
//!
//! Not for large trees: a snapshot holds the content of every regular file in memory.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// What kind of file system object an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// A FIFO, socket or device node.
    Other,
}

/// One entry of a tree, as read with `symlink_metadata`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The kind of entry.
    pub kind: EntryKind,
    /// Permission bits, `mode & 0o7777`.
    pub mode: u32,
    /// Modification time: seconds and nanoseconds.
    pub mtime: (i64, i64),
    /// Size in bytes as reported by the metadata.
    pub size: u64,
    /// The link target, for symlinks.
    pub target: Option<PathBuf>,
    /// The content, for regular files.
    pub content: Option<Vec<u8>>,
}

impl Entry {
    fn read(path: &Path, with_content: bool) -> Entry {
        let md = fs::symlink_metadata(path).unwrap_or_else(|e| panic!("lstat {path:?}: {e}"));
        let ft = md.file_type();
        let kind = if ft.is_file() {
            EntryKind::File
        } else if ft.is_dir() {
            EntryKind::Dir
        } else if ft.is_symlink() {
            EntryKind::Symlink
        } else {
            debug_assert!(
                ft.is_fifo() || ft.is_socket() || ft.is_block_device() || ft.is_char_device()
            );
            EntryKind::Other
        };
        let target = (kind == EntryKind::Symlink)
            .then(|| fs::read_link(path).unwrap_or_else(|e| panic!("readlink {path:?}: {e}")));
        let content = (kind == EntryKind::File && with_content)
            .then(|| fs::read(path).unwrap_or_else(|e| panic!("read {path:?}: {e}")));
        Entry {
            kind,
            mode: md.mode() & 0o7777,
            mtime: (md.mtime(), md.mtime_nsec()),
            size: md.len(),
            target,
            content,
        }
    }
}

/// The state of a whole tree: its root directory and every entry below it by relative path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeSnapshot {
    /// The root directory itself (its content field is always `None`).
    pub root: Entry,
    /// Every entry below the root, keyed by path relative to the root.
    pub entries: BTreeMap<PathBuf, Entry>,
}

impl TreeSnapshot {
    /// Relative paths of the regular files in the tree.
    pub fn files(&self) -> impl Iterator<Item = (&PathBuf, &Entry)> {
        self.entries
            .iter()
            .filter(|(_, e)| e.kind == EntryKind::File)
    }

    /// True if any regular file's content contains `needle`.
    pub fn any_file_contains(&self, needle: &[u8]) -> bool {
        self.files().any(|(_, e)| {
            e.content
                .as_deref()
                .is_some_and(|c| c.windows(needle.len()).any(|w| w == needle))
        })
    }
}

/// Reads every entry below `root` (not following symlinks), with file contents.
pub fn walk_tree(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let rd = fs::read_dir(&dir).unwrap_or_else(|e| panic!("read_dir {dir:?}: {e}"));
        for item in rd {
            let item = item.unwrap_or_else(|e| panic!("read_dir {dir:?}: {e}"));
            let child_rel = rel.join(item.file_name());
            let entry = Entry::read(&root.join(&child_rel), true);
            if entry.kind == EntryKind::Dir {
                stack.push(child_rel.clone());
            }
            out.insert(child_rel, entry);
        }
    }
    out
}

/// Takes a snapshot of the tree at `root`, which must be a directory.
pub fn snapshot(root: &Path) -> TreeSnapshot {
    let root_entry = Entry::read(root, false);
    assert_eq!(
        root_entry.kind,
        EntryKind::Dir,
        "snapshot: {root:?} is not a directory"
    );
    TreeSnapshot {
        root: root_entry,
        entries: walk_tree(root),
    }
}

/// What [`assert_trees_equal_with`] compares.
#[derive(Clone, Copy, Debug)]
pub struct CompareOptions {
    /// Compare the root directories' own mode and mtime too.
    pub root_metadata: bool,
    /// Compare permission bits.
    pub modes: bool,
    /// Compare mtimes (seconds and nanoseconds).
    pub mtimes: bool,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            root_metadata: false,
            modes: true,
            mtimes: true,
        }
    }
}

impl CompareOptions {
    /// Everything, including the root directories' own mode and mtime.
    pub fn with_root() -> Self {
        CompareOptions {
            root_metadata: true,
            ..CompareOptions::default()
        }
    }
}

fn fmt_time(t: (i64, i64)) -> String {
    format!("{}.{:09}", t.0, t.1)
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    let common = a.len().min(b.len());
    (0..common)
        .find(|&i| a[i] != b[i])
        .or((a.len() != b.len()).then_some(common))
}

fn compare_meta(rel: &Path, a: &Entry, b: &Entry, opts: &CompareOptions, diffs: &mut Vec<String>) {
    if opts.modes && a.kind != EntryKind::Symlink && a.mode != b.mode {
        diffs.push(format!(
            "{rel:?}: mode differs: source {:04o}, destination {:04o}",
            a.mode, b.mode
        ));
    }
    if opts.mtimes && a.mtime != b.mtime {
        diffs.push(format!(
            "{rel:?}: mtime differs ({:?}): source {}, destination {}",
            a.kind,
            fmt_time(a.mtime),
            fmt_time(b.mtime)
        ));
    }
}

/// Lists every difference between two snapshots (empty when they are equal).
pub fn diff_snapshots(a: &TreeSnapshot, b: &TreeSnapshot, opts: &CompareOptions) -> Vec<String> {
    let mut diffs = Vec::new();
    if opts.root_metadata {
        compare_meta(Path::new("<root>"), &a.root, &b.root, opts, &mut diffs);
    }
    for (rel, ea) in &a.entries {
        let Some(eb) = b.entries.get(rel) else {
            diffs.push(format!("{rel:?}: missing in destination ({:?})", ea.kind));
            continue;
        };
        if ea.kind != eb.kind {
            diffs.push(format!(
                "{rel:?}: type differs: source {:?}, destination {:?}",
                ea.kind, eb.kind
            ));
            continue;
        }
        match ea.kind {
            EntryKind::File => {
                let (ca, cb) = (
                    ea.content.as_deref().unwrap_or_default(),
                    eb.content.as_deref().unwrap_or_default(),
                );
                if let Some(off) = first_difference(ca, cb) {
                    diffs.push(format!(
                        "{rel:?}: content differs from byte {off} (source {} bytes, destination {} bytes)",
                        ca.len(),
                        cb.len()
                    ));
                }
            }
            EntryKind::Symlink => {
                if ea.target != eb.target {
                    diffs.push(format!(
                        "{rel:?}: link target differs: source {:?}, destination {:?}",
                        ea.target, eb.target
                    ));
                }
            }
            EntryKind::Dir | EntryKind::Other => {}
        }
        compare_meta(rel, ea, eb, opts, &mut diffs);
    }
    for (rel, eb) in &b.entries {
        if !a.entries.contains_key(rel) {
            diffs.push(format!(
                "{rel:?}: unexpected in destination ({:?})",
                eb.kind
            ));
        }
    }
    diffs
}

/// Formats a list of differences for a panic message, at most 60 lines.
pub fn format_diffs(title: &str, diffs: &[String]) -> String {
    let mut msg = format!("{title}: {} difference(s):\n", diffs.len());
    for d in diffs.iter().take(60) {
        msg.push_str("  - ");
        msg.push_str(d);
        msg.push('\n');
    }
    if diffs.len() > 60 {
        msg.push_str(&format!("  ... and {} more\n", diffs.len() - 60));
    }
    msg
}

/// Panics, listing every difference, unless tree `b` equals tree `a` (root metadata excluded).
#[track_caller]
pub fn assert_trees_equal(a: &Path, b: &Path) {
    assert_trees_equal_with(a, b, &CompareOptions::default());
}

/// Panics, listing every difference, unless tree `b` equals tree `a` as `opts` says.
#[track_caller]
pub fn assert_trees_equal_with(a: &Path, b: &Path, opts: &CompareOptions) {
    let sa = snapshot(a);
    assert!(
        b.exists() || fs::symlink_metadata(b).is_ok(),
        "destination tree {b:?} does not exist (source {a:?})"
    );
    let sb = snapshot(b);
    let diffs = diff_snapshots(&sa, &sb, opts);
    if !diffs.is_empty() {
        panic!(
            "{}",
            format_diffs(
                &format!("trees differ: source {a:?}, destination {b:?}"),
                &diffs
            )
        );
    }
}

/// Checks the promise "nothing half-written left claiming to be whole" after a failed copy.
///
/// Every regular file in `dst` whose relative path is also a regular file in `src` must have
/// exactly the source's content. Returns one message per violation. Files in `dst` under names
/// that do not exist in `src` (a writer's temporary files) are not violations; they are returned
/// separately as the second list so a test can report them.
pub fn partial_copy_violations(src: &Path, dst: &Path) -> (Vec<String>, Vec<PathBuf>) {
    let mut violations = Vec::new();
    let mut strays = Vec::new();
    if fs::symlink_metadata(dst).is_err() {
        return (violations, strays);
    }
    let s = walk_tree(src);
    let d = walk_tree(dst);
    for (rel, ed) in &d {
        match s.get(rel) {
            Some(es) if es.kind == EntryKind::File && ed.kind == EntryKind::File => {
                let (cs, cd) = (
                    es.content.as_deref().unwrap_or_default(),
                    ed.content.as_deref().unwrap_or_default(),
                );
                if let Some(off) = first_difference(cs, cd) {
                    violations.push(format!(
                        "{rel:?} exists under its final name with wrong content (from byte {off}; source {} bytes, destination {} bytes)",
                        cs.len(),
                        cd.len()
                    ));
                }
            }
            Some(es) if es.kind != ed.kind => violations.push(format!(
                "{rel:?}: type differs: source {:?}, destination {:?}",
                es.kind, ed.kind
            )),
            Some(_) => {}
            None => strays.push(rel.clone()),
        }
    }
    (violations, strays)
}
