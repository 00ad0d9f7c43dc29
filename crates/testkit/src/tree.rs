//! Source-tree generators for end-to-end tests.
//!
//! [`make_fidelity_tree`] builds one tree holding every kind of entry sprat promises to copy
//! faithfully: regular files of assorted sizes (empty ones, sizes around page and chunk
//! boundaries, one larger than a 1 MiB batch), empty and nested empty directories, symlinks
//! (relative, absolute, dangling, self-referencing, pointing at a directory) that must be copied as
//! links and never followed, assorted permission bits (including a 0555 directory that holds
//! files), explicit mtimes with nanoseconds on files, directories and the symlinks themselves,
//! awkward names (spaces, newlines, non-UTF-8 bytes) and a chain of 120 nested directories.
//! [`make_many_files`] builds the "lots of small files" shape sprat is made for.
//!
//! All content is pseudo-random from a fixed seed, so a failure reproduces. Metadata is applied
//! after every entry exists, directories last and deepest first, so that creating a child never
//! disturbs the mtime already set on its parent. Not for benchmarks: sizes are kept small enough
//! for a debug build to copy in a second or two.

use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

/// Counts of what a generator created (not counting the root directory itself).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Regular files.
    pub files: u64,
    /// Directories below the root.
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Sum of the sizes of all regular files.
    pub bytes: u64,
}

/// `len` pseudo-random bytes from `seed`; the same arguments always give the same bytes.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut buf = vec![0u8; len];
    rng.fill_bytes(&mut buf);
    buf
}

/// Sets the access and modification time of `path` itself (a symlink is not followed).
pub fn set_mtime_nofollow(path: &Path, secs: i64, nsec: u32) {
    let ts = rustix::fs::Timespec {
        tv_sec: secs,
        tv_nsec: nsec.into(),
    };
    let times = rustix::fs::Timestamps {
        last_access: ts,
        last_modification: ts,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &times,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap_or_else(|e| panic!("utimensat({path:?}): {e}"));
}

/// Sets the permission bits of `path` (follows symlinks: never call it on a link).
fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod({path:?}, {mode:o}): {e}"));
}

/// Writes `content` to a new file at `path` (parents must exist), then sets its mode.
pub fn make_file(path: &Path, content: &[u8], mode: u32) {
    let mut f = fs::File::create(path).unwrap_or_else(|e| panic!("create({path:?}): {e}"));
    f.write_all(content)
        .unwrap_or_else(|e| panic!("write({path:?}): {e}"));
    drop(f);
    set_mode(path, mode);
}

/// Deterministic, distinct mtimes with non-zero nanoseconds.
fn mtime_for(i: u64) -> (i64, u32) {
    let secs = 1_500_000_000 + (i as i64) * 86_413;
    let nsec = ((i * 987_654_321 + 123_456_789) % 1_000_000_000) as u32;
    (secs, nsec)
}

/// A file waiting for its metadata: path, mode, and an explicit mtime if it needs one.
type PendingFile = (PathBuf, u32, Option<(i64, u32)>);

/// Collects entries first and applies modes and times at the end, in a safe order.
struct Builder {
    root: PathBuf,
    files: Vec<PendingFile>,
    links: Vec<PathBuf>,
    dirs: Vec<(PathBuf, u32)>,
    stats: TreeStats,
    seed: u64,
}

impl Builder {
    fn new(root: &Path, seed: u64) -> Self {
        fs::create_dir_all(root).unwrap_or_else(|e| panic!("mkdir -p {root:?}: {e}"));
        Builder {
            root: root.to_path_buf(),
            files: Vec::new(),
            links: Vec::new(),
            dirs: Vec::new(),
            stats: TreeStats::default(),
            seed,
        }
    }

    fn dir(&mut self, rel: impl AsRef<Path>, mode: u32) -> PathBuf {
        let p = self.root.join(rel.as_ref());
        fs::create_dir(&p).unwrap_or_else(|e| panic!("mkdir {p:?}: {e}"));
        self.dirs.push((p.clone(), mode));
        self.stats.dirs += 1;
        p
    }

    fn file_with(
        &mut self,
        rel: impl AsRef<Path>,
        content: &[u8],
        mode: u32,
        mtime: Option<(i64, u32)>,
    ) {
        let p = self.root.join(rel.as_ref());
        make_file(&p, content, 0o644);
        self.files.push((p, mode, mtime));
        self.stats.files += 1;
        self.stats.bytes += content.len() as u64;
    }

    fn file(&mut self, rel: impl AsRef<Path>, size: usize, mode: u32) {
        self.seed += 1;
        let content = random_bytes(size, self.seed);
        self.file_with(rel, &content, mode, None);
    }

    fn link(&mut self, rel: impl AsRef<Path>, target: impl AsRef<Path>) {
        let p = self.root.join(rel.as_ref());
        symlink(target.as_ref(), &p).unwrap_or_else(|e| panic!("symlink {p:?}: {e}"));
        self.links.push(p);
        self.stats.symlinks += 1;
    }

    /// Applies modes and mtimes: files, then links, then directories deepest first, then root.
    fn finish(self, root_mode: u32) -> TreeStats {
        let mut n: u64 = 0;
        for (p, mode, mtime) in &self.files {
            set_mode(p, *mode);
            n += 1;
            let (s, ns) = mtime.unwrap_or_else(|| mtime_for(n));
            set_mtime_nofollow(p, s, ns);
        }
        for p in &self.links {
            n += 1;
            let (s, ns) = mtime_for(n);
            set_mtime_nofollow(p, s, ns);
        }
        let mut dirs = self.dirs;
        dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
        for (p, mode) in &dirs {
            set_mode(p, *mode);
            n += 1;
            let (s, ns) = mtime_for(n);
            set_mtime_nofollow(p, s, ns);
        }
        set_mode(&self.root, root_mode);
        let (s, ns) = mtime_for(n + 1);
        set_mtime_nofollow(&self.root, s, ns);
        self.stats
    }
}

/// Size of the file in the fidelity tree that is larger than a 1 MiB batch.
pub const FIDELITY_BIG_FILE: usize = 9 * 1024 * 1024;

/// Builds the fidelity tree inside `dir` (created if missing) and returns what it made.
///
/// About 11 MiB in total. The root directory gets mode 0755 and an explicit mtime too.
pub fn make_fidelity_tree(dir: &Path) -> TreeStats {
    let mut b = Builder::new(dir, 0x5eed_f1de);

    // Regular files of assorted sizes and modes.
    b.file("empty.txt", 0, 0o644);
    b.file("empty-private", 0, 0o600);
    b.file("one.bin", 1, 0o644);
    b.file("small.txt", 100, 0o644);
    b.file("page-1.bin", 4095, 0o644);
    b.file("page.bin", 4096, 0o644);
    b.file("page+1.bin", 4097, 0o644);
    b.file("chunk-1.bin", 65535, 0o644);
    b.file("chunk.bin", 65536, 0o644);
    b.file("chunk+1.bin", 65537, 0o644);
    b.file("mid.bin", 1024 * 1024 + 3, 0o600);
    b.file("big.bin", FIDELITY_BIG_FILE, 0o644);
    b.file("run.sh", 300, 0o755);
    b.file("readonly.txt", 50, 0o444);
    b.file("group.txt", 70, 0o640);
    b.file("odd-mode.bin", 90, 0o604);
    // Edge mtimes: zero nanoseconds, the largest nanosecond value, beyond 2038 and 2106.
    b.file_with(
        "mtime-zero-ns.txt",
        b"zero ns\n",
        0o644,
        Some((1_234_567_890, 0)),
    );
    b.file_with(
        "mtime-max-ns.txt",
        b"max ns\n",
        0o644,
        Some((1_234_567_891, 999_999_999)),
    );
    b.file_with(
        "mtime-far-future.txt",
        b"far future\n",
        0o644,
        Some((4_500_000_000, 1)),
    );

    // Awkward names.
    b.file("name with spaces.txt", 33, 0o644);
    b.file("new\nline.txt", 34, 0o644);
    b.file(" leading and trailing space ", 35, 0o644);
    b.file(".hidden", 36, 0o644);
    b.file("-starts-with-dash", 37, 0o644);
    b.file("ünïcödé – 名前.txt", 38, 0o644);
    b.file(
        Path::new(std::ffi::OsStr::from_bytes(b"latin1-\xe9t\xe9.txt")),
        39,
        0o644,
    );
    b.file(
        Path::new(std::ffi::OsStr::from_bytes(b"bad\xff\xfe-bytes")),
        40,
        0o644,
    );

    // Directories: plain, empty, nested empty, private, group, read-only with files inside.
    b.dir("sub", 0o755);
    b.file("sub/a.txt", 500, 0o644);
    b.dir("sub/inner", 0o755);
    b.file("sub/inner/b.bin", 3000, 0o644);
    b.dir("sub/inner/deeper", 0o711);
    b.file("sub/inner/deeper/c.txt", 10, 0o644);
    b.dir("empty_dir", 0o755);
    b.dir("nested_empty", 0o755);
    b.dir("nested_empty/a", 0o755);
    b.dir("nested_empty/a/b", 0o750);
    b.dir("nested_empty/a/b/c", 0o700);
    b.dir("private_dir", 0o700);
    b.file("private_dir/secret.txt", 64, 0o600);
    b.dir("group_dir", 0o750);
    b.file("group_dir/g.bin", 4096, 0o640);
    b.dir("locked_dir", 0o555);
    b.file("locked_dir/x.txt", 20, 0o444);
    b.file("locked_dir/y.bin", 70_000, 0o644);
    b.dir("locked_dir/inner", 0o755);
    b.file("locked_dir/inner/z.txt", 30, 0o644);
    b.dir("dir with space", 0o755);
    b.file("dir with space/file with space", 12, 0o644);

    // Symlinks: copied as links, never followed.
    b.dir("links", 0o755);
    b.link("links/relative", "../small.txt");
    b.link("links/absolute", "/etc/passwd");
    b.link("links/absolute-dangling", "/nonexistent/sprat/target");
    b.link("links/dangling", "does/not/exist");
    b.link("links/to-dir", "../sub");
    b.link("links/self-loop", "self-loop");
    b.link("links/with space", "../name with spaces.txt");
    b.link("link-to-big", "big.bin");

    // A chain of 120 nested directories with a file at the bottom.
    let mut rel = PathBuf::from("deep");
    b.dir(&rel, 0o755);
    for i in 1..120 {
        rel.push(format!("d{i:03}"));
        b.dir(&rel, 0o755);
    }
    b.file(rel.join("bottom.txt"), 123, 0o644);

    b.finish(0o755)
}

/// Builds a tree of 255-byte names (the longest a Linux file name may be): a file, a directory
/// with such a file inside, and a symlink, all inside `dir`.
pub fn make_long_name_tree(dir: &Path) -> TreeStats {
    let mut b = Builder::new(dir, 0x10a9);
    let name = |c: char| c.to_string().repeat(255);
    b.file(name('f'), 1000, 0o644);
    b.dir(name('d'), 0o755);
    b.file(Path::new(&name('d')).join(name('g')), 2000, 0o644);
    b.link(name('l'), name('f'));
    b.file("short.txt", 10, 0o644);
    b.finish(0o755)
}

/// Builds `n` files of `size` bytes each inside `dir` (created if missing), 100 per
/// subdirectory (`d000/f00000.bin`, ...), with random content from `seed`, mode 0644 and
/// distinct mtimes.
pub fn make_many_files(dir: &Path, n: usize, size: usize, seed: u64) -> TreeStats {
    let mut b = Builder::new(dir, seed);
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut buf = vec![0u8; size];
    for i in 0..n {
        if i % 100 == 0 {
            b.dir(format!("d{:03}", i / 100), 0o755);
        }
        rng.fill_bytes(&mut buf);
        let rel = format!("d{:03}/f{i:05}.bin", i / 100);
        b.file_with(rel, &buf, 0o644, None);
    }
    b.finish(0o755)
}

/// Creates a FIFO at `path` with mode 0644.
pub fn make_fifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap_or_else(|e| panic!("mkfifo {path:?}: {e}"));
}

/// Creates a character device node at `path` (needs root); false if not allowed.
pub fn make_char_device(path: &Path, major: u32, minor: u32) -> bool {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o666),
        rustix::fs::makedev(major, minor),
    )
    .is_ok()
}

/// Builds a tree whose entries carry the special permission bits a shared project directory
/// uses (a setgid directory, a sticky world-writable directory) and a file with mode 0000.
pub fn make_special_mode_tree(dir: &Path) -> TreeStats {
    let mut b = Builder::new(dir, 0x5bec);
    b.dir("setgid_dir", 0o2775);
    b.file("setgid_dir/shared.txt", 100, 0o664);
    b.dir("sticky_dir", 0o1777);
    b.file("sticky_dir/mine.txt", 100, 0o644);
    b.file("no-permissions.bin", 1000, 0o000);
    b.file("plain.txt", 10, 0o644);
    b.finish(0o755)
}
