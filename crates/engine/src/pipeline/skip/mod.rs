//! What the destination already has. Before a copy sends anything, the destination's entries
//! (a listing streamed by the server in one reply, or a scan of a local destination) are
//! indexed by path; every regular file of the source is then checked against it, as rsync's
//! quick check does: a file of the same size and mtime (to the nanosecond where the file
//! system keeps it) is not sent; if only its mode differs, just its attributes are set.
//! `--ignore-existing` skips every file the destination has at all; `--ignore-times` checks
//! nothing and sends everything. `--checksum` compares content: the index then holds the
//! XXH3-128 digest of each of the destination's files (computed where the destination lives),
//! a source file of the same size gets [`Verdict::Compare`] and, once its own digest is
//! computed (on the source's side, many at once: `pipeline::digest`), [`DestIndex::compared`]
//! decides; files of another size are sent without a digest. Directories always travel (they
//! cost no data, and their attributes are set at the end); a symlink the destination has with
//! the same target and mtime is not made again. Pure logic, no I/O: the roles build the index.

use crate::measurement::progress::Progress;
use paths::PathTable;
use sprat_proto::namespace::{NsEntry, NsKind, MAX_PARTIAL_RANGES};
use sprat_proto::{DestCheck, KeepRule};
use sprat_store::partial::{Coverage, Identity, Seen};
use sprat_store::{EntryType, ScanEntry};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

mod paths;

/// How a copy decides what the destination already has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SkipRule {
    /// Skip regular files of the same size and mtime (the default, like `rsync -a`).
    #[default]
    QuickCheck,
    /// Skip every file the destination has, whatever its size and mtime.
    IgnoreExisting,
    /// Skip regular files of the same size and the same content (XXH3-128 digests of both
    /// copies, like `rsync --checksum`); set the attributes of those whose mode or mtime
    /// differs.
    Checksum,
    /// Skip regular files of the same size, whatever their mtime (like `rsync --size-only`);
    /// set the attributes of those whose mode or mtime differs.
    SizeOnly,
    /// Skip regular files whose mtime at the destination is newer than the source's (like
    /// `rsync --update`); the others as [`SkipRule::QuickCheck`].
    Update,
    /// Send everything.
    Never,
}

/// What the destination has at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestEntry {
    pub is_file: bool,
    /// A directory (neither this nor `is_file`: a symlink or a special file).
    pub is_dir: bool,
    pub size: u64,
    pub mode: u32,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
    /// XXH3-128 of its content, when the index was made for `--checksum` and the file could
    /// be read.
    pub digest: Option<u128>,
    /// Its (uid, gid), when the index knows them (a scan of a local destination, a listing
    /// that carries owners).
    pub owner: Option<(u32, u32)>,
    /// The names of its owner and group on the destination's side (empty: none), when the
    /// listing carried any.
    pub owner_names: Option<Box<(Vec<u8>, Vec<u8>)>>,
    /// A symlink's target, by its XXH3-128 (see [`target_digest`]).
    pub link_target: Option<u128>,
}

/// What the index keeps of a symlink's target: its XXH3-128.
pub fn target_digest(target: &[u8]) -> u128 {
    sprat_store::checksum(target)
}

/// What to do with one source entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Send,
    /// The destination has it already: send nothing.
    Skip,
    /// The destination has its content: set its mode and mtime only.
    FixAttrs,
    /// The destination has part of it (a partial file an interrupted run left, of the same
    /// size and mtime): send only the missing ranges.
    Resume(Coverage),
    /// `--checksum`: the destination has a file of this size and knows its digest; the
    /// source's digest decides ([`DestIndex::compared`]).
    Compare,
    /// What the destination has at this path is unknown: it lies below a directory of the
    /// destination that could not be listed (`dir`; a writer that is not root and a `0000`
    /// directory of its own). With `rule`, a whole file goes for the writer to check as the
    /// rule says (see [`KeepRule`]); without one (`-u`), the copy cannot tell what to do.
    Unknown {
        dir: Vec<u8>,
        rule: Option<KeepRule>,
    },
    /// The rule keeps what the destination has as it is, whatever its content (`--ignore-
    /// existing`, for a symlink or special file too; `-u` and a file newer there): a regular
    /// file is counted as left alone, and not even its attributes are sent (`-X` sends those of an up-to-date file, which would give a kept
    /// file the source's mtime over another content).
    Kept,
}

/// A partial file at the destination: the source file it is a copy of, and what it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialEntry {
    pub id: Identity,
    pub present: Coverage,
    /// Its journal's inode number, where this side's own scan found it (0 from a listing).
    pub journal_ino: u64,
}

impl PartialEntry {
    /// As a listing told it (its journal not looked at on this side).
    pub fn told(id: Identity, present: Coverage) -> PartialEntry {
        PartialEntry {
            id,
            present,
            journal_ino: 0,
        }
    }

    /// As the index found it (see [`Superseded`]).
    pub fn seen(&self) -> Seen {
        Seen {
            id: self.id,
            journal_ino: self.journal_ino,
        }
    }

    /// As a listing entry for `path` (the file's final path).
    pub fn to_listed(&self, path: Vec<u8>) -> NsEntry {
        NsEntry {
            path,
            kind: NsKind::Partial,
            size: self.id.size,
            mode: 0,
            mtime_sec: self.id.mtime_sec,
            mtime_nsec: self.id.mtime_nsec,
            target: [
                &self.id.version.to_le_bytes()[..],
                &self.present.encode(MAX_PARTIAL_RANGES),
            ]
            .concat(),
            owner: None,
        }
    }
}

/// A digest as `Sums` carry it (the 16 bytes of XXH3-128, big-endian, as `sprat sum` prints).
pub fn digest_bytes(digest: u128) -> Vec<u8> {
    digest.to_be_bytes().to_vec()
}

/// The XXH3-128 digest of `Sums` bytes (`None` unless 16 bytes).
pub fn digest_from_bytes(bytes: &[u8]) -> Option<u128> {
    Some(u128::from_be_bytes(bytes.try_into().ok()?))
}

/// What the index keeps of a [`DestEntry`], in 40 bytes: its digest, which only
/// `--checksum` gives, is kept apart by the entry's position in the table, and the names of
/// its owner and group, which most entries share with many others, once for all of them.
struct Kept {
    size: u64,
    mtime_sec: i64,
    mtime_nsec: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    /// The owner's and group's names: their position in [`DestIndex::names`] plus one;
    /// 0: none.
    names: u32,
    is_file: bool,
    is_dir: bool,
    has_owner: bool,
}

/// What the destination has at a path, for a dry run (see [`DestIndex::at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum There {
    File,
    /// A directory, with its permission bits and mtime.
    Dir {
        mode: u32,
        mtime: (i64, u32),
    },
    /// A symlink or a special file.
    Other,
}

impl Kept {
    fn owner(&self) -> Option<(u32, u32)> {
        self.has_owner.then_some((self.uid, self.gid))
    }
}

/// Pairs of owner and group names, each kept once, by position.
#[derive(Default)]
struct NamePairs {
    hasher: std::hash::RandomState,
    /// Positions in `pairs`, found by the hash of their pair.
    slots: hashbrown::HashTable<u32>,
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl NamePairs {
    /// Where the pair of `user` and `group` is, if kept.
    fn find(&self, user: &[u8], group: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one((user, group));
        let pairs = &self.pairs;
        let same = |&at: &u32| {
            let (u, g) = &pairs[at as usize];
            u == user && g == group
        };
        self.slots.find(hash, same).copied()
    }

    /// Where `pair` is, kept now if it was not; `None` once 4,294,967,295 pairs are kept.
    fn position(&mut self, pair: (Vec<u8>, Vec<u8>)) -> Option<u32> {
        if let Some(at) = self.find(&pair.0, &pair.1) {
            return Some(at);
        }
        let at = u32::try_from(self.pairs.len())
            .ok()
            .filter(|&at| at < u32::MAX)?;
        let hash = self.hasher.hash_one((pair.0.as_slice(), pair.1.as_slice()));
        self.pairs.push(pair);
        let (hasher, pairs) = (&self.hasher, &self.pairs);
        self.slots.insert_unique(hash, at, |&at| {
            let (u, g) = &pairs[at as usize];
            hasher.hash_one((u.as_slice(), g.as_slice()))
        });
        Some(at)
    }

    fn get(&self, at: u32) -> Option<&(Vec<u8>, Vec<u8>)> {
        self.pairs.get(at as usize)
    }
}

/// The destination's entries by path (relative to the copy's root).
#[derive(Default)]
pub struct DestIndex {
    entries: PathTable<Kept>,
    /// Digests of the entries that have one (`--checksum`), by position in `entries`.
    digests: HashMap<u32, u128>,
    /// The targets of the symlinks (see [`target_digest`]), by position in `entries`: a
    /// symlink the destination has already, with the same target and mtime, is not made
    /// again.
    link_targets: HashMap<u32, u128>,
    /// Every pair of owner and group names the entries carry, once.
    names: NamePairs,
    /// Partial files by the final path of their file.
    partials: HashMap<Vec<u8>, PartialEntry>,
    /// Temporary names left by a writer that was killed (see
    /// [`sprat_store::write::is_leftover_temp`]): not entries, but debris to remove.
    leftovers: Vec<Vec<u8>>,
    /// Directories of the destination that could not be listed: what is below them is
    /// unknown (see [`Verdict::Unknown`]).
    unlisted: std::collections::HashSet<Vec<u8>>,
    /// The destination is written across the network, where a writer clears the setuid and
    /// setgid bits of regular files unless told to keep them: a file lacking only those
    /// bits of its source's mode counts as having the source's mode.
    setid_cleared: bool,
    /// The copy sets owners with the same ids as the source's (a local copy as root): a
    /// file whose owner or group alone differs gets its attributes set.
    owners_compared: bool,
    /// Owners are compared by name where both sides have one (the copy maps them by name):
    /// the source's names, looked up once each.
    source_names: Option<std::sync::Mutex<sprat_store::owner::NameCache>>,
}

impl DestIndex {
    /// This index is of a destination written across the network (a server's tree for a
    /// push, a pulling client's tree), whose writer may clear setuid and setgid bits: a file
    /// that lacks only those is not sent its attributes again on every run.
    pub fn written_by_peer(mut self) -> DestIndex {
        self.setid_cleared = true;
        self
    }

    /// This index's copy gives every file its source's numeric owner and group (a local copy
    /// run as root): a file whose owner alone differs is not left as it is.
    pub fn comparing_owners(mut self) -> DestIndex {
        self.owners_compared = true;
        self
    }

    /// This index's copy gives every file its source's owner and group mapped by name
    /// (a push to a server that applies owners, a pull as root): an entry that carries its
    /// owner (a listing asked with them) is compared by name where both sides have one,
    /// by id otherwise; `by_name` false (`--numeric-ids`): by id.
    pub fn comparing_owners_by_name(mut self, by_name: bool) -> DestIndex {
        self.owners_compared = true;
        self.source_names = by_name.then(Default::default);
        self
    }

    fn insert(&mut self, path: Vec<u8>, entry: DestEntry) {
        if is_leftover(&path) {
            self.leftovers.push(path);
            return;
        }
        let (uid, gid) = entry.owner.unwrap_or_default();
        let names = entry
            .owner_names
            .map_or(0, |pair| self.names.position(*pair).map_or(0, |at| at + 1));
        let kept = Kept {
            size: entry.size,
            mtime_sec: entry.mtime_sec,
            mtime_nsec: entry.mtime_nsec,
            mode: entry.mode,
            uid,
            gid,
            names,
            is_file: entry.is_file,
            is_dir: entry.is_dir,
            has_owner: entry.owner.is_some(),
        };
        // A path the table has no room for is left out: its file is sent again.
        let Some(at) = self.entries.insert(&path, kept) else {
            return;
        };
        // A path listed again replaces all it had.
        match entry.digest {
            Some(d) => self.digests.insert(at, d),
            None => self.digests.remove(&at),
        };
        match entry.link_target {
            Some(t) => self.link_targets.insert(at, t),
            None => self.link_targets.remove(&at),
        };
    }

    /// The leftover temporary names found (paths relative to the copy's root), sorted; the
    /// index forgets them.
    pub fn take_leftovers(&mut self) -> Vec<Vec<u8>> {
        let mut out = std::mem::take(&mut self.leftovers);
        out.sort();
        out
    }

    /// Records that the destination's directory `path` could not be listed (an entry the
    /// scan or listing could not examine): nothing below it is known.
    pub fn insert_unlisted(&mut self, path: Vec<u8>) {
        self.unlisted.insert(path);
    }

    /// The directory that could not be listed at or above `path`, if any.
    pub(crate) fn unlisted_above(&self, path: &[u8]) -> Option<&[u8]> {
        if self.unlisted.is_empty() {
            return None;
        }
        let mut at = path;
        loop {
            if let Some(dir) = self.unlisted.get(at) {
                return Some(dir);
            }
            if at.is_empty() {
                return None;
            }
            at = sprat_store::split_parent(at).0;
        }
    }

    /// Adds an entry of a scan of the destination (one that could not be examined: a
    /// directory that could not be listed, see [`DestIndex::insert_unlisted`]).
    pub fn insert_scanned(&mut self, e: ScanEntry) {
        if e.error.is_some() {
            return self.insert_unlisted(e.path);
        }
        let entry = DestEntry {
            is_file: e.kind == EntryType::File,
            is_dir: e.kind == EntryType::Dir,
            size: e.size,
            mode: e.attrs.mode,
            mtime_sec: e.attrs.mtime_sec,
            mtime_nsec: e.attrs.mtime_nsec,
            digest: None,
            owner: Some((e.attrs.uid, e.attrs.gid)),
            owner_names: None,
            link_target: match e.kind {
                EntryType::Symlink => e.link_target.as_deref().map(target_digest),
                _ => None,
            },
        };
        self.insert(e.path, entry);
    }

    /// The destination's partial copy of `path` as this index found it, if it has one (see
    /// [`sprat_store::partial`]). Called for every entry planned: an index without partial
    /// copies answers without hashing the path.
    pub fn partial_at(&self, path: &[u8]) -> Option<Seen> {
        if self.partials.is_empty() {
            return None;
        }
        self.partials.get(path).map(PartialEntry::seen)
    }

    /// Adds a partial file of the file at `path`.
    pub fn insert_partial(&mut self, path: Vec<u8>, partial: PartialEntry) {
        self.partials.insert(path, partial);
    }

    /// Records the digest of a regular file already in the index (a digest of anything else
    /// is dropped: it cannot make the index larger than its listing).
    pub fn set_digest(&mut self, path: &[u8], digest: u128) {
        if let Some((at, _)) = self.entries.get(path).filter(|(_, d)| d.is_file) {
            self.digests.insert(at, digest);
        }
    }

    /// At most the bytes [`DestIndex::insert_listed`] of `e` may take, its share of the tables'
    /// growth included (each at most doubles: per entry 2 x 40 bytes of [`Kept`], 2 x 8 of
    /// where its path ends, 2 x 8/7 slots of 5 bytes, twice its path; a pair of owner and
    /// group names not held yet, twice its names and 128 bytes), so that a server can charge
    /// a pulling client's index to its memory budget before it grows.
    pub fn listed_cost(&self, e: &NsEntry) -> u64 {
        const PER_ENTRY: usize = 112;
        const PER_NAME_PAIR: usize = 128;
        let names = e.owner.as_ref().map_or(0, |o| {
            if self.names.find(&o.user, &o.group).is_some() {
                0
            } else {
                PER_NAME_PAIR + 2 * (o.user.len() + o.group.len())
            }
        });
        (PER_ENTRY + 2 * (e.path.len() + e.target.len()) + names) as u64
    }

    /// Adds what a listing (or a pulling client's index) says is there.
    pub fn insert_listed(&mut self, e: NsEntry) {
        if e.kind == NsKind::Failed {
            return self.insert_unlisted(e.path);
        }
        if e.kind == NsKind::Partial {
            let (version, ranges) = e.target.split_at(e.target.len().min(8));
            let version = version.try_into().map(u64::from_le_bytes);
            if let (Ok(version), Some(present)) = (version, Coverage::decode(ranges)) {
                let id = Identity {
                    size: e.size,
                    mtime_sec: e.mtime_sec,
                    mtime_nsec: e.mtime_nsec,
                    version,
                };
                self.insert_partial(e.path, PartialEntry::told(id, present));
            }
            return;
        }
        let entry = DestEntry {
            is_file: e.kind == NsKind::File,
            is_dir: e.kind == NsKind::Dir,
            size: e.size,
            mode: e.mode,
            mtime_sec: e.mtime_sec,
            mtime_nsec: e.mtime_nsec,
            digest: None,
            owner: e.owner.as_ref().map(|o| (o.uid, o.gid)),
            owner_names: e
                .owner
                .filter(|o| !o.user.is_empty() || !o.group.is_empty())
                .map(|o| Box::new((o.user, o.group))),
            link_target: (e.kind == NsKind::Symlink).then(|| target_digest(&e.target)),
        };
        self.insert(e.path, entry);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len() + self.partials.len()
    }

    /// What the destination has at `path`, if anything.
    pub(crate) fn at(&self, path: &[u8]) -> Option<There> {
        let (_, k) = self.entries.get(path)?;
        Some(match (k.is_file, k.is_dir) {
            (true, _) => There::File,
            (_, true) => There::Dir {
                mode: k.mode,
                mtime: (k.mtime_sec, k.mtime_nsec),
            },
            _ => There::Other,
        })
    }

    /// Decides for one scanned source entry.
    pub fn verdict(&self, e: &ScanEntry, rule: SkipRule) -> Verdict {
        if self.leaves_alone(e, rule) {
            return Verdict::Kept;
        }
        if e.kind == EntryType::Symlink && rule != SkipRule::Never && self.has_same_symlink(e) {
            return Verdict::Skip;
        }
        if e.kind != EntryType::File
            || e.error.is_some()
            || rule == SkipRule::Never
            || (self.entries.is_empty() && self.partials.is_empty() && self.unlisted.is_empty())
        {
            return Verdict::Send;
        }
        let Some((at, d)) = self.entries.get(&e.path) else {
            if let Some(dir) = self.unlisted_above(&e.path) {
                let rule = match rule {
                    SkipRule::QuickCheck | SkipRule::SizeOnly => Some(KeepRule::SameSizeAndTime),
                    SkipRule::IgnoreExisting => Some(KeepRule::Present),
                    SkipRule::Checksum | SkipRule::Never => return Verdict::Send,
                    SkipRule::Update => None,
                };
                return Verdict::Unknown {
                    dir: dir.to_vec(),
                    rule,
                };
            }
            // `--checksum` trusts no size and mtime: a partial file of another content with
            // the same size and mtime would make a mix, and it is started afresh; but one of
            // this very version of the source file (its inode and change time, which no user
            // sets: a run cut short, and `--retry-for` running it again) is resumed. Before,
            // a link that dropped every few MB never let a large file finish.
            return self.resume(e, rule == SkipRule::Checksum);
        };
        match rule {
            SkipRule::IgnoreExisting => Verdict::Kept,
            SkipRule::Never => Verdict::Send,
            SkipRule::SizeOnly => {
                if d.is_file && d.size == e.size {
                    self.attrs_verdict(d, e)
                } else {
                    self.resume(e, false)
                }
            }
            SkipRule::Update
                if d.is_file
                    && (d.mtime_sec, d.mtime_nsec) > (e.attrs.mtime_sec, e.attrs.mtime_nsec) =>
            {
                Verdict::Kept
            }
            SkipRule::QuickCheck | SkipRule::Update => {
                let same_content = d.is_file
                    && d.size == e.size
                    && d.mtime_sec == e.attrs.mtime_sec
                    && d.mtime_nsec == e.attrs.mtime_nsec;
                if same_content {
                    self.attrs_verdict(d, e)
                } else {
                    self.resume(e, false)
                }
            }
            SkipRule::Checksum => {
                if d.is_file && d.size == e.size && self.digests.contains_key(&at) {
                    Verdict::Compare
                } else {
                    Verdict::Send
                }
            }
        }
    }

    /// Whether `--ignore-existing` leaves what the destination has at the path of `e`, a
    /// symlink or special file of the source, as it is (see [`Verdict::Kept`]).
    pub fn leaves_alone(&self, e: &ScanEntry, rule: SkipRule) -> bool {
        rule == SkipRule::IgnoreExisting
            && matches!(e.kind, EntryType::Symlink | EntryType::Special)
            && e.error.is_none()
            && !e.path.is_empty()
            && self.entries.get(&e.path).is_some()
    }

    /// Whether the destination has the symlink `e` already: a symlink with the same target,
    /// mtime and (where the copy sets them) owner, as rsync leaves one. It is not made again
    /// (before, every run made every symlink anew: a new inode, and the report counted each).
    fn has_same_symlink(&self, e: &ScanEntry) -> bool {
        let (Some(target), None) = (&e.link_target, &e.error) else {
            return false;
        };
        let Some((at, d)) = self.entries.get(&e.path) else {
            return false;
        };
        !d.is_file
            && !d.is_dir
            && self.link_targets.get(&at) == Some(&target_digest(target))
            && (d.mtime_sec, d.mtime_nsec) == (e.attrs.mtime_sec, e.attrs.mtime_nsec)
            && (!self.owners_compared || self.same_owner(d, e))
    }

    /// Decides for a source file that got [`Verdict::Compare`], from its own digest (`None`:
    /// it could not be read, and is sent, where its error will be reported).
    pub fn compared(&self, e: &ScanEntry, source_digest: Option<u128>) -> Verdict {
        match self.entries.get(&e.path) {
            Some((at, d))
                if d.is_file
                    && d.size == e.size
                    && source_digest.is_some()
                    && self.digests.get(&at).copied() == source_digest =>
            {
                self.attrs_verdict(d, e)
            }
            _ => Verdict::Send,
        }
    }
}

impl DestIndex {
    /// For a file whose content the destination has: nothing to do if its mode, mtime (and
    /// owner, when compared) are the same too, else only they are set.
    fn attrs_verdict(&self, d: &Kept, e: &ScanEntry) -> Verdict {
        let (had, sent) = (d.mode & 0o7777, e.attrs.mode & 0o7777);
        let setid = sprat_store::write::SETID_BITS;
        let same_mode = had == sent || (self.setid_cleared && had == sent & !setid);
        let same_owner = !self.owners_compared || self.same_owner(d, e);
        let same = same_mode
            && same_owner
            && d.mtime_sec == e.attrs.mtime_sec
            && d.mtime_nsec == e.attrs.mtime_nsec;
        if same {
            Verdict::Skip
        } else {
            Verdict::FixAttrs
        }
    }

    /// Whether the destination's owner and group of `d` are what the copy would give it
    /// for `e`: by name where both sides have one (and names are compared), by id
    /// otherwise (a writer keeps the id of a name it does not know). An entry whose owner
    /// the index does not know is taken as right.
    fn same_owner(&self, d: &Kept, e: &ScanEntry) -> bool {
        let Some((uid, gid)) = d.owner() else {
            return true;
        };
        let pair = d.names.checked_sub(1).and_then(|at| self.names.get(at));
        let (du, dg) = match (&self.source_names, pair) {
            (Some(_), Some(names)) => (names.0.as_slice(), names.1.as_slice()),
            _ => (&b""[..], &b""[..]),
        };
        let Some(names) = &self.source_names else {
            return (uid, gid) == (e.attrs.uid, e.attrs.gid);
        };
        let mut names = crate::sync::lock(names);
        let same =
            |dest_name: &[u8], src_name: Option<&[u8]>, dest_id: u32, src_id: u32| match src_name {
                Some(n) if !dest_name.is_empty() => n == dest_name,
                _ => dest_id == src_id,
            };
        let user_same = same(du, names.user(e.attrs.uid), uid, e.attrs.uid);
        user_same && same(dg, names.group(e.attrs.gid), gid, e.attrs.gid)
    }

    /// Resume from a partial file of this very source file, if there is one: of the same
    /// size, mtime and version (a file of the same size and mtime put in its place, or
    /// written in place with its mtime put back, is another version: resuming would mix the
    /// two). A source entry of unknown version (0: a dry run's listing of a server) is taken
    /// on its size and mtime; the writer checks the version again before it resumes.
    fn resume(&self, e: &ScanEntry, same_version_only: bool) -> Verdict {
        let id = Identity {
            size: e.size,
            mtime_sec: e.attrs.mtime_sec,
            mtime_nsec: e.attrs.mtime_nsec,
            version: e.version,
        };
        let same = |p: &Identity| match same_version_only {
            true => id.version != 0 && *p == id,
            false => {
                *p == id
                    || (id.version == 0
                        && *p
                            == Identity {
                                version: p.version,
                                ..id
                            })
            }
        };
        match self.partials.get(&e.path) {
            Some(p) if same(&p.id) && p.present.bytes() > 0 => Verdict::Resume(p.present.clone()),
            _ => Verdict::Send,
        }
    }
}

/// Whether the last component of `path` is a temporary name left by a killed writer.
pub fn is_leftover(path: &[u8]) -> bool {
    sprat_store::write::is_leftover_temp(sprat_store::split_parent(path).1)
}

impl SkipRule {
    /// Whether a file this rule skips keeps its content at the destination even where the
    /// source's differs (so `-H` does not link that name again).
    pub fn keeps_destination_content(self) -> bool {
        matches!(
            self,
            SkipRule::IgnoreExisting | SkipRule::Update | SkipRule::SizeOnly
        )
    }

    /// How a pulling client asks the server for this rule.
    pub fn as_check(self) -> DestCheck {
        match self {
            SkipRule::QuickCheck => DestCheck::QuickCheck,
            SkipRule::IgnoreExisting => DestCheck::IgnoreExisting,
            SkipRule::Checksum => DestCheck::Checksum,
            SkipRule::SizeOnly => DestCheck::SizeOnly,
            SkipRule::Update => DestCheck::Update,
            SkipRule::Never => DestCheck::None,
        }
    }

    /// The rule a pulling client asked for.
    pub fn from_check(check: DestCheck) -> SkipRule {
        match check {
            DestCheck::QuickCheck => SkipRule::QuickCheck,
            DestCheck::IgnoreExisting => SkipRule::IgnoreExisting,
            DestCheck::Checksum => SkipRule::Checksum,
            DestCheck::SizeOnly => SkipRule::SizeOnly,
            DestCheck::Update => SkipRule::Update,
            DestCheck::None => SkipRule::Never,
        }
    }
}

/// A path whose partial copy at the destination a copy does not resume, and that partial
/// copy as the index found it (see [`SkipCounts::supersedes`]).
pub type Superseded = (Vec<u8>, Seen);

/// What the check spared a copy (counted on the sending side); also counted as done in the
/// transfer's progress, if it has one.
#[derive(Debug, Default)]
pub struct SkipCounts {
    files: AtomicU64,
    bytes: AtomicU64,
    attrs_fixed: AtomicU64,
    progress: Option<Progress>,
    /// Paths whose partial copy at the destination this copy does not resume (see
    /// [`SkipCounts::supersedes`]).
    superseded: std::sync::Mutex<Vec<Superseded>>,
}

impl SkipCounts {
    /// Counts that also add to `progress`.
    pub fn with_progress(progress: Progress) -> SkipCounts {
        SkipCounts {
            progress: Some(progress),
            ..SkipCounts::default()
        }
    }

    fn done(&self, files: u64, bytes: u64) {
        if let Some(p) = &self.progress {
            p.add_skipped(files, bytes);
        }
    }

    pub fn skipped(&self, bytes: u64) {
        self.files.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.done(1, bytes);
    }

    /// Files sent before the destination's listing was in that the destination had already:
    /// `kept` were kept as they were, `fixed` had their attributes set. Their bytes were sent
    /// (not counted as spared; their acknowledgements counted them as done).
    pub fn kept_by_destination(&self, kept: u64, fixed: u64) {
        self.files.fetch_add(kept, Ordering::Relaxed);
        self.attrs_fixed.fetch_add(fixed, Ordering::Relaxed);
        self.done(kept + fixed, 0);
    }

    /// Bytes of a file being resumed that the destination had already (counted in the
    /// bytes not sent).
    pub fn resumed(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.done(0, bytes);
    }

    /// A file whose attributes alone are set: the write counts it as a file done, its
    /// bytes are done here.
    pub fn fixed(&self, bytes: u64) {
        self.attrs_fixed.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.done(0, bytes);
    }

    /// Notes that the destination's partial copy of `path` (an interrupted copy's, as the
    /// index found it) is not what this copy finishes the file from: the file arrives whole
    /// (as a small file, a symlink, another version), is up to date or left alone. Once the
    /// copy succeeded, such partial copies are removed (see [`SkipCounts::take_superseded`]);
    /// they would stay for ever otherwise.
    pub fn supersedes(&self, path: &[u8], seen: Seen) {
        let mut paths = self.superseded.lock().unwrap_or_else(|p| p.into_inner());
        paths.push((path.to_vec(), seen));
    }

    /// The paths [`SkipCounts::supersedes`] noted.
    pub fn take_superseded(&self) -> Vec<Superseded> {
        std::mem::take(&mut self.superseded.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// (files not sent because up to date, their bytes plus those of fixed files, files whose
    /// attributes alone were set).
    pub fn totals(&self) -> (u64, u64, u64) {
        (
            self.files.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
            self.attrs_fixed.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprat_store::Attrs;

    fn file(path: &[u8], size: u64, mode: u32, sec: i64, nsec: u32) -> ScanEntry {
        ScanEntry {
            path: path.to_vec(),
            kind: EntryType::File,
            size,
            attrs: Attrs {
                mode,
                mtime_sec: sec,
                mtime_nsec: nsec,
                ..Attrs::default()
            },
            ino: 1,
            dev: 0,
            nlink: 1,
            version: 0,
            link_target: None,
            special: None,
            error: None,
        }
    }

    fn index() -> DestIndex {
        let mut i = DestIndex::default();
        let d = |size, mode, sec, nsec| DestEntry {
            is_file: true,
            is_dir: false,
            size,
            mode,
            mtime_sec: sec,
            mtime_nsec: nsec,
            digest: None,
            owner: None,
            owner_names: None,
            link_target: None,
        };
        i.insert(b"same".to_vec(), d(10, 0o644, 5, 7));
        i.insert(b"mode".to_vec(), d(10, 0o600, 5, 7));
        i.insert(b"newer".to_vec(), d(10, 0o644, 6, 0));
        i.insert(b"nsec".to_vec(), d(10, 0o644, 5, 8));
        i.insert(
            b"dir".to_vec(),
            DestEntry {
                is_file: false,
                is_dir: false,
                ..d(10, 0o755, 5, 7)
            },
        );
        i
    }

    #[test]
    fn setid_bits_a_peer_cleared_are_no_difference_across_the_network() {
        let q = SkipRule::QuickCheck;
        let suid = file(b"same", 10, 0o4644, 5, 7);
        // A local destination keeps them: their absence is a difference to fix.
        assert_eq!(index().verdict(&suid, q), Verdict::FixAttrs);
        let remote = index().written_by_peer();
        assert_eq!(remote.verdict(&suid, q), Verdict::Skip);
        assert_eq!(
            remote.verdict(&file(b"same", 10, 0o6644, 5, 7), q),
            Verdict::Skip
        );
        // Any other difference still counts.
        assert_eq!(
            remote.verdict(&file(b"same", 10, 0o4640, 5, 7), q),
            Verdict::FixAttrs
        );
        assert_eq!(
            remote.verdict(&file(b"mode", 10, 0o4644, 5, 7), q),
            Verdict::FixAttrs
        );
    }

    #[test]
    fn the_quick_check_compares_size_and_mtime_to_the_nanosecond() {
        let i = index();
        let q = SkipRule::QuickCheck;
        assert_eq!(i.verdict(&file(b"same", 10, 0o644, 5, 7), q), Verdict::Skip);
        assert_eq!(
            i.verdict(&file(b"mode", 10, 0o644, 5, 7), q),
            Verdict::FixAttrs
        );
        assert_eq!(
            i.verdict(&file(b"newer", 10, 0o644, 5, 7), q),
            Verdict::Send
        );
        assert_eq!(i.verdict(&file(b"nsec", 10, 0o644, 5, 7), q), Verdict::Send);
        assert_eq!(i.verdict(&file(b"same", 11, 0o644, 5, 7), q), Verdict::Send);
        assert_eq!(i.verdict(&file(b"dir", 10, 0o755, 5, 7), q), Verdict::Send);
        assert_eq!(
            i.verdict(&file(b"absent", 10, 0o644, 5, 7), q),
            Verdict::Send
        );
    }

    #[test]
    fn ignore_existing_skips_any_file_present_and_never_skips_nothing() {
        let i = index();
        let newer = file(b"newer", 99, 0o644, 1, 0);
        assert_eq!(i.verdict(&newer, SkipRule::IgnoreExisting), Verdict::Kept);
        assert_eq!(i.verdict(&newer, SkipRule::Never), Verdict::Send);
        let same = file(b"same", 10, 0o644, 5, 7);
        assert_eq!(i.verdict(&same, SkipRule::Never), Verdict::Send);
    }

    #[test]
    fn a_partial_file_is_resumed_on_size_mtime_and_version_and_with_checksum_on_version_only() {
        let mut i = DestIndex::default();
        let mut present = Coverage::default();
        present.add(0, 40);
        let id = Identity {
            size: 100,
            mtime_sec: 5,
            mtime_nsec: 7,
            version: 9,
        };
        i.insert_partial(b"big".to_vec(), PartialEntry::told(id, present.clone()));
        let big = ScanEntry {
            version: 9,
            ..file(b"big", 100, 0o644, 5, 7)
        };
        for rule in [SkipRule::QuickCheck, SkipRule::SizeOnly, SkipRule::Update] {
            assert_eq!(
                i.verdict(&big, rule),
                Verdict::Resume(present.clone()),
                "{rule:?}"
            );
        }
        // `--checksum`: only a partial file of this very version (not of an unknown one).
        assert_eq!(
            i.verdict(&big, SkipRule::Checksum),
            Verdict::Resume(present.clone())
        );
        let unknown = file(b"big", 100, 0o644, 5, 7);
        assert_eq!(i.verdict(&unknown, SkipRule::Checksum), Verdict::Send);
        assert_eq!(i.verdict(&big, SkipRule::Never), Verdict::Send);
        // Another version of the file (its mtime): sent whole.
        let other = file(b"big", 100, 0o644, 6, 7);
        assert_eq!(i.verdict(&other, SkipRule::QuickCheck), Verdict::Send);
        // Another file of the same size and mtime (another inode or change time): sent whole.
        let replaced = ScanEntry {
            version: 10,
            ..big.clone()
        };
        assert_eq!(i.verdict(&replaced, SkipRule::QuickCheck), Verdict::Send);
        // A source of unknown version (a dry run's listing of a server): size and mtime.
        let listed = file(b"big", 100, 0o644, 5, 7);
        assert_eq!(
            i.verdict(&listed, SkipRule::QuickCheck),
            Verdict::Resume(present.clone())
        );
        // The version travels with a listed partial file.
        let mut j = DestIndex::default();
        j.insert_listed(PartialEntry::told(id, present.clone()).to_listed(b"big".to_vec()));
        assert_eq!(
            j.verdict(&big, SkipRule::QuickCheck),
            Verdict::Resume(present)
        );
        assert_eq!(j.verdict(&replaced, SkipRule::QuickCheck), Verdict::Send);
    }

    #[test]
    fn size_only_skips_files_of_the_same_size_and_fixes_their_mtime() {
        let i = index();
        let r = SkipRule::SizeOnly;
        assert_eq!(i.verdict(&file(b"same", 10, 0o644, 5, 7), r), Verdict::Skip);
        // Another mtime (older or newer) or mode: only the attributes are set.
        for (path, sec) in [(&b"newer"[..], 5), (b"nsec", 5), (b"same", 1)] {
            assert_eq!(
                i.verdict(&file(path, 10, 0o644, sec, 7), r),
                Verdict::FixAttrs
            );
        }
        assert_eq!(
            i.verdict(&file(b"mode", 10, 0o644, 5, 7), r),
            Verdict::FixAttrs
        );
        // Another size, a directory in its place, or nothing there: sent.
        assert_eq!(i.verdict(&file(b"same", 11, 0o644, 5, 7), r), Verdict::Send);
        assert_eq!(i.verdict(&file(b"dir", 10, 0o755, 5, 7), r), Verdict::Send);
        assert_eq!(
            i.verdict(&file(b"absent", 10, 0o644, 5, 7), r),
            Verdict::Send
        );
    }

    #[test]
    fn update_skips_files_newer_at_the_destination_and_checks_the_rest() {
        let i = index();
        let u = SkipRule::Update;
        // The destination's copy is newer (6 s against 5; 5.8 against 5.7): left alone,
        // whatever its size.
        assert_eq!(
            i.verdict(&file(b"newer", 99, 0o644, 5, 7), u),
            Verdict::Kept
        );
        assert_eq!(i.verdict(&file(b"nsec", 3, 0o644, 5, 7), u), Verdict::Kept);
        // Older or the same mtime: the quick check decides.
        assert_eq!(
            i.verdict(&file(b"newer", 10, 0o644, 7, 0), u),
            Verdict::Send
        );
        assert_eq!(i.verdict(&file(b"same", 10, 0o644, 5, 7), u), Verdict::Skip);
        assert_eq!(i.verdict(&file(b"same", 11, 0o644, 5, 7), u), Verdict::Send);
        assert_eq!(
            i.verdict(&file(b"mode", 10, 0o644, 5, 7), u),
            Verdict::FixAttrs
        );
        // A directory where the source has a file is no newer copy of it.
        assert_eq!(i.verdict(&file(b"dir", 10, 0o644, 1, 0), u), Verdict::Send);
    }

    /// The destination of the `--checksum` tests: digests 0xAB.. of content "same".
    fn summed() -> DestIndex {
        let mut i = DestIndex::default();
        let d = |size, mode, sec| DestEntry {
            is_file: true,
            is_dir: false,
            size,
            mode,
            mtime_sec: sec,
            mtime_nsec: 0,
            digest: None,
            owner: None,
            owner_names: None,
            link_target: None,
        };
        for (path, entry) in [
            (&b"same"[..], d(10, 0o644, 5)),
            (b"touched", d(10, 0o644, 9)),
            (b"mode", d(10, 0o600, 5)),
            (b"changed", d(10, 0o644, 5)),
            (b"shorter", d(4, 0o644, 5)),
            (b"unread", d(10, 0o644, 5)),
        ] {
            i.insert(path.to_vec(), entry);
            if path != b"unread" {
                i.set_digest(path, 0xAB);
            }
        }
        i
    }

    #[test]
    fn checksum_compares_digests_of_files_of_the_same_size_only() {
        let i = summed();
        let c = SkipRule::Checksum;
        let src = |path: &[u8], size| file(path, size, 0o644, 5, 0);
        // Same size: the source's digest decides, whatever the mtimes say.
        for path in [&b"same"[..], b"touched", b"mode", b"changed"] {
            assert_eq!(i.verdict(&src(path, 10), c), Verdict::Compare, "{path:?}");
        }
        // Another size, no digest at the destination, absent, not a file: sent unread.
        assert_eq!(i.verdict(&src(b"shorter", 10), c), Verdict::Send);
        assert_eq!(i.verdict(&src(b"unread", 10), c), Verdict::Send);
        assert_eq!(i.verdict(&src(b"absent", 10), c), Verdict::Send);
        assert_eq!(index().verdict(&src(b"dir", 10), c), Verdict::Send);

        // Same content, same attributes: nothing to do.
        assert_eq!(i.compared(&src(b"same", 10), Some(0xAB)), Verdict::Skip);
        // Same content, another mtime or mode: only the attributes are set.
        assert_eq!(
            i.compared(&src(b"touched", 10), Some(0xAB)),
            Verdict::FixAttrs
        );
        assert_eq!(i.compared(&src(b"mode", 10), Some(0xAB)), Verdict::FixAttrs);
        // Another content (the same size and mtime that fool the quick check), or a source
        // file that could not be read: sent.
        assert_eq!(i.compared(&src(b"changed", 10), Some(0xCD)), Verdict::Send);
        assert_eq!(i.compared(&src(b"same", 10), None), Verdict::Send);
        assert_eq!(i.compared(&src(b"unread", 10), None), Verdict::Send);
        assert_eq!(
            i.verdict(&src(b"changed", 10), SkipRule::QuickCheck),
            Verdict::Skip,
            "the quick check alone misses it"
        );
    }

    #[test]
    fn a_listing_costs_no_more_than_charged_and_owner_names_are_kept_once() {
        use sprat_proto::namespace::NsOwner;
        assert_eq!(std::mem::size_of::<Kept>(), 40);
        let mut i = DestIndex::default().comparing_owners_by_name(true);
        let mut charged = 0u64;
        for n in 0..100_000u32 {
            let (user, group) = match n % 3 {
                0 => (b"alice".to_vec(), b"lab".to_vec()),
                1 => (b"bob".to_vec(), b"lab".to_vec()),
                _ => (format!("user{}", n % 40).into_bytes(), b"g".to_vec()),
            };
            let e = NsEntry {
                path: format!("dir{}/{}file{n}", n % 100, "x".repeat(n as usize % 50)).into_bytes(),
                kind: NsKind::File,
                size: u64::from(n),
                mode: 0o644,
                mtime_sec: 5,
                mtime_nsec: 0,
                target: Vec::new(),
                owner: Some(NsOwner {
                    uid: 1000 + n % 3,
                    gid: 100,
                    user,
                    group,
                }),
            };
            charged += i.listed_cost(&e);
            i.insert_listed(e);
        }
        let pairs = &i.names.pairs;
        let names: usize = pairs.iter().map(|(u, g)| u.len() + g.len() + 48).sum();
        let held = i.entries.footprint() + names + i.names.slots.allocation_size();
        assert!(held as u64 <= charged, "held {held} > charged {charged}");
        assert_eq!(pairs.len(), 42, "each pair of names once");

        // Owners are compared by name where both sides have one: the same names are the
        // same owner whatever the ids, other names another owner.
        i.insert_listed(NsEntry {
            path: b"by-name".to_vec(),
            kind: NsKind::File,
            size: 1,
            mode: 0o644,
            mtime_sec: 5,
            mtime_nsec: 0,
            target: Vec::new(),
            owner: Some(NsOwner {
                uid: 4242,
                gid: 4242,
                user: b"root".to_vec(),
                group: b"root".to_vec(),
            }),
        });
        let q = SkipRule::QuickCheck;
        let root_file = file(b"by-name", 1, 0o644, 5, 0);
        assert_eq!(
            i.verdict(&root_file, q),
            Verdict::Skip,
            "root is root by name"
        );
        let bobs = file(b"dir1/xfile1", 1, 0o644, 5, 0);
        assert_eq!(i.verdict(&bobs, q), Verdict::FixAttrs, "root is not bob");
    }

    #[test]
    fn digests_of_what_the_index_lacks_are_dropped_and_bytes_roundtrip() {
        let mut i = index();
        i.set_digest(b"absent", 1);
        i.set_digest(b"dir", 1);
        assert_eq!(i.len(), 5);
        let (dir, _) = i.entries.get(b"dir").expect("dir is indexed");
        assert_eq!(i.digests.get(&dir), None);
        let d = 0x0123_4567_89ab_cdef_0011_2233_4455_6677u128;
        assert_eq!(digest_from_bytes(&digest_bytes(d)), Some(d));
        assert_eq!(digest_from_bytes(&[1; 32]), None);
        assert_eq!(
            SkipRule::from_check(SkipRule::Checksum.as_check()),
            SkipRule::Checksum
        );
    }
}
