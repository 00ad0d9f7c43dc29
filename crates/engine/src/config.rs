//! Validated transfer settings with defaults that need no tuning for trees of small files.

pub use crate::pipeline::skip::SkipRule;
pub use sprat_store::batch_read::{IoBackend, ReadOrder};
pub use sprat_store::filter::{normalize_listed, Filter, FilterError, RuleKind, Selection};
pub use sprat_store::write::PublishChoice;
use std::time::Duration;

/// An option out of its range: which option, and the whole message (that names it too).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct OptionError {
    /// The option, as on the command line (`--streams`).
    pub option: String,
    pub why: String,
}

/// How a transfer is shaped: batch sizes, chunking, stream and thread counts.
#[derive(Debug, Clone)]
pub struct TransferOptions {
    /// Parallel TCP connections of a session; `None`: chosen from the measured round trip and
    /// grown while throughput grows (see `tune`).
    pub streams: Option<usize>,
    /// A push lists its destination before it opens its session, rather than on a
    /// connection of its own beside it: for a server that admits one connection at a time
    /// from this address (set by the retry after a busy refusal).
    pub list_first: bool,
    /// Socket send and receive buffer to request; `None`: the best the host allows (kernel
    /// autotuning unless explicit buffers reach a larger window).
    pub tcp_buffer: Option<u64>,
    /// Target bytes of one batch.
    pub batch_size: u64,
    /// Most entries in one batch.
    pub batch_files: usize,
    /// Files larger than this travel as chunks.
    pub small_file_threshold: u64,
    /// Size of a large file's chunks.
    pub chunk_size: u64,
    pub scan_threads: usize,
    pub read_threads: usize,
    pub write_threads: usize,
    /// Sync every batch to stable storage before it counts as written.
    pub durable: bool,
    /// How readers read a batch's data.
    pub io_backend: IoBackend,
    /// In which order a batch's files are read.
    pub read_order: ReadOrder,
    /// How written files appear under their final names.
    pub publish: PublishChoice,
    /// Regular files whose content arrived from a network peer keep their setuid and setgid
    /// bits (a server's pushes, a client's pulls); by default they are cleared. A local copy
    /// always keeps them.
    pub keep_setid: bool,
    /// Character and block devices whose description arrived from a network peer are
    /// created (by a writer running as root: a server's pushes, a client's pulls); by default
    /// they are not, and counted as not kept. A local copy run as root always creates them.
    pub keep_devices: bool,
    /// The writing side replaces nothing the destination has (see
    /// [`TransferOptions::keeps_existing`]), whatever `skip` says.
    pub keep_existing: bool,
    /// A push's destination is `DST/NAME`, NAME being the source's own (the user named `DST/`):
    /// the server refuses it if it is a symlink, instead of the client asking first (see
    /// `roles::endpoint::into_directory`); a third-party copy passes it to its source server.
    pub no_link_at_dst: bool,
    /// A single file's push to `DST` that nobody asked about: the destination is `DST/NAME`,
    /// NAME the source's own, and the server puts the file there if `DST` is a directory,
    /// else at `DST` itself (see `roles::endpoint::into_directory`, and `or_parent` in
    /// `sprat_proto::Operation::Push`). Ignored by every other copy.
    pub dst_or_parent: bool,
    /// Owners and groups are copied (as `rsync -a` does): applied by a writer running as
    /// root, left as the writing user's by anyone else. On a server: whether it applies the
    /// owners clients ask for (`sprat serve --no-owners` refuses them).
    pub owners: bool,
    /// Owners and groups are taken as the numeric ids sent, not mapped by name.
    pub numeric_ids: bool,
    /// `-H`: files that are hard links of each other at the source are made hard links of
    /// each other at the destination.
    pub hard_links: bool,
    /// `-X`: extended attributes are copied (`user.*`; `trusted.*` and `security.*` too
    /// when both sides run as root).
    pub xattrs: bool,
    /// `-A`: POSIX ACLs are copied.
    pub acls: bool,
    /// A local copy clones large files where the file system shares blocks between files
    /// (`--reflink auto`, the default), instead of reading and writing their data.
    pub reflink: bool,
    /// What of the destination a copy leaves alone (files already there).
    pub skip: SkipRule,
    /// Once the copy succeeded, remove what the destination has and the source does not.
    pub delete: bool,
    /// With `delete`: go on even where it would remove every entry DST holds (none of them
    /// in the source), which is otherwise refused as the likely slip of naming the directory
    /// SRC was meant to go into.
    pub force_delete: bool,
    /// What of the source is copied (`--exclude`, `--include`, `--files-from`); applied by
    /// whichever side scans the source, and protecting excluded entries from `delete`.
    pub selection: Selection,
    /// A session whose connections move no byte for this long is failed as stalled (zero:
    /// never).
    pub stall_timeout: Duration,
    /// How long a transfer that lost its connection keeps trying again (zero: no retries).
    pub retry_for: Duration,
    /// Set from outside to stop the transfer's session.
    pub cancel: crate::sync::Cancel,
    /// Asked before each run whether the transport is gone for good (see
    /// [`crate::sync::TransportWatch`]).
    pub transport: crate::sync::TransportWatch,
    /// Counts what is done as the transfer goes, for a live display.
    pub progress: crate::measurement::progress::Progress,
    /// Told the path of every regular file the transfer completes (`cp -v`); `None`: nobody
    /// asked, and nothing is collected.
    pub file_log: Option<crate::measurement::listing::FileLog>,
    /// The rate all the transfer's connections together keep to (`cp --bwlimit`).
    pub bwlimit: Option<crate::measurement::pace::Pace>,
    /// The first batches grow as TCP's slow start does (see `plan::FIRST_OPENING_BATCH_SIZE`),
    /// so that on a long path every stream carries its share of the first round trips; off
    /// for copies between local file systems, which have no slow start, and once `path_rtt`
    /// says the path is short.
    pub slow_start_opening: bool,
    /// The path's round trip once the session measured it.
    pub path_rtt: crate::tune::PathRtt,
}

/// Default of [`TransferOptions::stall_timeout`].
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of [`TransferOptions::retry_for`].
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(600);

/// Upper bound on batch and chunk sizes (keeps every frame below the protocol's limit).
pub const MAX_BATCH_SIZE: u64 = 64 << 20;
/// Batch size of a copy between local file systems: larger batches cost the storage stages
/// less (docs/performance.md).
pub const LOCAL_BATCH_SIZE: u64 = 4 << 20;
/// Batch size over the network: a batch is written only once it has arrived whole, and at
/// the end of a transfer over many streams each stream's last batch arrives at its share of
/// the link; 1 MiB ends 100k x 4 KiB at 100 ms 0.1 s sooner than 4 MiB and costs nothing on
/// loopback (docs/performance.md).
pub const NETWORK_BATCH_SIZE: u64 = 1 << 20;

/// Most bytes of encoded batches a source holds ready for the streams.
pub const READY_BATCH_BYTES: u64 = 32 << 20;

impl Default for TransferOptions {
    fn default() -> Self {
        TransferOptions {
            streams: None,
            list_first: false,
            tcp_buffer: None,
            batch_size: NETWORK_BATCH_SIZE,
            batch_files: 1024,
            small_file_threshold: 1 << 20,
            chunk_size: 4 << 20,
            scan_threads: 4,
            read_threads: 8,
            write_threads: 4,
            durable: false,
            io_backend: IoBackend::Uring,
            read_order: ReadOrder::Scan,
            publish: PublishChoice::Auto,
            keep_setid: false,
            keep_devices: false,
            keep_existing: false,
            no_link_at_dst: false,
            dst_or_parent: false,
            owners: true,
            numeric_ids: false,
            hard_links: false,
            reflink: true,
            xattrs: false,
            acls: false,
            skip: SkipRule::QuickCheck,
            delete: false,
            force_delete: false,
            selection: Selection::default(),
            stall_timeout: DEFAULT_STALL_TIMEOUT,
            retry_for: DEFAULT_RETRY_FOR,
            cancel: crate::sync::Cancel::default(),
            transport: Default::default(),
            progress: Default::default(),
            file_log: None,
            bwlimit: None,
            slow_start_opening: true,
            path_rtt: Default::default(),
        }
    }
}

impl TransferOptions {
    /// Whether the writing side replaces nothing the destination has at a path (a file, a
    /// link, a special file; no directory made over a file): `--ignore-existing`, or a copy
    /// asked so whatever its check (`--finish` of a plan copied with `--ignore-existing`).
    pub fn keeps_existing(&self) -> bool {
        self.keep_existing || self.skip == crate::pipeline::skip::SkipRule::IgnoreExisting
    }

    /// What of `-H`, `-X`, `-A` this copy asks of a sending server.
    pub fn meta_flags(&self) -> sprat_proto::MetaFlags {
        sprat_proto::MetaFlags {
            hard_links: self.hard_links,
            xattrs: self.xattrs,
            acls: self.acls,
        }
    }

    /// These options with `-H`, `-X`, `-A` as a client asked for them (a server sending).
    pub fn with_meta(mut self, meta: sprat_proto::MetaFlags) -> TransferOptions {
        self.hard_links = meta.hard_links;
        self.xattrs = meta.xattrs;
        self.acls = meta.acls;
        self
    }

    /// The extended attributes the sending side reads (a scope of `sprat_store::xattr`):
    /// `user.*` with `-X`, and `trusted.*` and `security.*` too when this process runs as
    /// root (no one else can read `trusted.*`); ACLs with `-A`. 0: none, nothing is read.
    pub fn xattr_scope(&self) -> u8 {
        use sprat_store::xattr::{ACL, SYSTEM, USER};
        let mut scope = 0;
        if self.xattrs {
            scope |= USER;
            if sprat_store::owner::running_as_root() {
                scope |= SYSTEM;
            }
        }
        if self.acls {
            scope |= ACL;
        }
        scope
    }

    /// These options for one transfer: with a record of the path's round trip of its own.
    pub fn for_one_transfer(&self) -> TransferOptions {
        TransferOptions {
            path_rtt: Default::default(),
            ..self.clone()
        }
    }

    /// Batches the planner makes small at the start: one for each stream a session may start
    /// at once (see `plan::OPENING_BATCH_SIZE`).
    pub fn opening_batches(&self) -> usize {
        self.streams.unwrap_or(crate::tune::WIDE_START_STREAMS)
    }

    /// Batches the source may hold ready: one for each stream a session may start at once
    /// (on a long path every stream then has data for its first round trip), within
    /// [`READY_BATCH_BYTES`] (a chunk of a large file is a batch of its own, of `chunk_size`).
    pub fn ready_batches(&self) -> usize {
        let streams = self.opening_batches();
        let largest = self.batch_size.max(self.chunk_size).max(1);
        let affordable = (READY_BATCH_BYTES / largest).max(1) as usize;
        self.read_threads.max(streams.min(affordable))
    }

    /// Checks ranges; the error names the option.
    pub fn validate(&self) -> Result<(), OptionError> {
        let check = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                let option = what.split_whitespace().next().unwrap_or(what).to_string();
                Err(OptionError {
                    option,
                    why: what.to_string(),
                })
            }
        };
        check(
            self.streams.is_none_or(|n| (1..=64).contains(&n)),
            "--streams must be between 1 and 64",
        )?;
        check(
            self.tcp_buffer
                .is_none_or(|b| (4096..=1 << 30).contains(&b)),
            "--tcp-buffer must be between 4KiB and 1GiB",
        )?;
        check(
            (4096..=MAX_BATCH_SIZE).contains(&self.batch_size),
            "--batch-size must be between 4KiB and 64MiB",
        )?;
        check(
            (4096..=MAX_BATCH_SIZE).contains(&self.chunk_size),
            "--chunk-size must be between 4KiB and 64MiB",
        )?;
        check(
            self.small_file_threshold <= MAX_BATCH_SIZE,
            "--small-file-threshold must be at most 64MiB",
        )?;
        check(
            (1..=65536).contains(&self.batch_files),
            "--batch-files must be between 1 and 65536",
        )?;
        for (n, name) in [
            (self.scan_threads, "--scan-threads"),
            (self.read_threads, "--read-threads"),
            (self.write_threads, "--write-threads"),
        ] {
            check(
                (1..=256).contains(&n),
                &format!("{name} must be between 1 and 256"),
            )?;
        }
        Ok(())
    }
}

/// The wire form of `selection`, for the server that scans the source.
pub fn wire_selection(selection: &Selection) -> sprat_proto::Selection {
    sprat_proto::Selection {
        rules: selection
            .filter
            .rules()
            .map(|(kind, p)| (kind == RuleKind::Include, p.to_vec()))
            .collect(),
        files_from: selection.files_from.as_ref().map(|l| l.to_vec()),
        base: selection.filter.base().map(<[u8]>::to_vec),
    }
}

/// A selection received from a peer, compiled (a bad pattern is the peer's bad request).
pub fn selection_from_wire(wire: sprat_proto::Selection) -> Result<Selection, FilterError> {
    let kind = |include: bool| match include {
        true => RuleKind::Include,
        false => RuleKind::Exclude,
    };
    let mut filter = Filter::new(wire.rules.into_iter().map(|(i, p)| (kind(i), p)))?;
    if let Some(name) = &wire.base {
        filter = filter.with_base(name);
    }
    let selection = Selection {
        filter,
        files_from: None,
        one_file_system: false,
    };
    Ok(match wire.files_from {
        Some(list) => selection.with_files(list),
        None => selection,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_option_out_of_range_is_named() {
        let bad = TransferOptions {
            streams: Some(0),
            ..TransferOptions::default()
        };
        let e = bad.validate().expect_err("0 streams is out of range");
        assert_eq!(e.option, "--streams");
        assert_eq!(e.to_string(), "--streams must be between 1 and 64");
        let threads = TransferOptions {
            write_threads: 0,
            ..TransferOptions::default()
        };
        assert_eq!(
            threads.validate().map_err(|e| e.option),
            Err("--write-threads".to_string())
        );
        assert!(TransferOptions::default().validate().is_ok());
    }
}
