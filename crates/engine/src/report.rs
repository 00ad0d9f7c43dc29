//! The final report of a transfer: counts, rates, stage busy times and the bottleneck.
//!
//! A stage's busy time is the time its workers spent working (not waiting on a queue), summed
//! and divided by the number of workers: roughly how long the stage alone would have taken.
//! The network stage is timed by the receiver, from a batch header's arrival to its last byte.
//! The stage with the largest busy time bounded the run.

use crate::text::printable;
use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// Busy seconds of each stage (`network` is absent for a local copy).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Stages {
    pub scan_read_s: f64,
    pub network_s: Option<f64>,
    pub write_s: f64,
}

/// How a session used the network: what it measured, what it chose, how it ended.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PathReport {
    /// Round trip measured at session start (authentication exchange), in ms.
    pub rtt_ms: f64,
    /// Whether the stream count was automatic (chosen and adapted by sprat).
    pub auto_streams: bool,
    /// Streams the session started with.
    pub streams_start: usize,
    /// Most streams open at once.
    pub streams_max: usize,
    /// Streams still carrying data at the end.
    pub streams_end: usize,
    /// Socket buffer requested per connection; `None`: kernel autotuning.
    pub tcp_buffer: Option<u64>,
    /// Largest window one stream can reach with these buffers on this host.
    pub window_bytes: u64,
    /// Bandwidth-delay product the windows cover (streams x window).
    pub covered_bytes_per_s: f64,
    /// Time from the first stream running out of data to the last one finishing.
    pub tail_s: f64,
    /// Average time a stream sat idle at the end while others still carried data.
    pub tail_idle_s: f64,
}

/// One file that did not arrive.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub path: String,
    pub error: String,
}

/// How a file whose data was damaged on the way fails ([`Failure::error`] ends with it).
pub(crate) const CORRUPTED_IN_TRANSIT: &str = "data corrupted in transit";
/// How a large file left incomplete, and kept to resume, fails.
pub(crate) const KEPT_TO_RESUME: &str = "not put in place (kept to resume)";

impl Failure {
    /// Whether the same command run again may well copy the file: its data was damaged on
    /// the way, or part of it is still missing (not sent, or found damaged in its partial
    /// file) while the rest is kept.
    pub fn is_worth_another_run(&self) -> bool {
        self.error.ends_with(CORRUPTED_IN_TRANSIT) || self.error.ends_with(KEPT_TO_RESUME)
    }
}

/// What a transfer did.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub direction: &'static str,
    pub source: String,
    pub destination: String,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// FIFOs, sockets and devices made.
    pub specials: u64,
    pub bytes: u64,
    pub failed: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    pub files_per_s: f64,
    /// Streams the copy used at most (a third-party copy: those of the source server's push
    /// to the destination, as its `Done` says).
    pub streams: usize,
    pub stages: Stages,
    pub bottleneck: &'static str,
    /// Whether every batch was synced to stable storage before it counted as written.
    pub durable: bool,
    /// File system syncs the writing side made.
    pub syncs: u64,
    /// Files the destination had already (same size and mtime, or `--ignore-existing`): not
    /// sent.
    pub up_to_date: u64,
    /// Files whose content the destination had: only their mode and mtime were set.
    pub attrs_fixed: u64,
    /// Large files a local copy cloned (they share the source's blocks: no data was read or
    /// written; counted in `files` and `bytes` too).
    pub cloned: u64,
    /// Large files a local copy copied inside the kernel (`copy_file_range`: their bytes did
    /// not pass through sprat's memory; counted in `files` and `bytes` too).
    pub kernel_copied: u64,
    /// Bytes of those files, which did not travel.
    pub bytes_not_sent: u64,
    /// Entries removed from the destination because the source does not have them
    /// (`--delete`; a directory counts once, with everything below it).
    pub deleted: u64,
    /// Runs of the transfer it took (more than 1 when connections were lost and the transfer
    /// was started again, see `--retry-for`, or when files damaged on the way were sent
    /// again). What runs that completed sent is counted as sent; what a run cut short wrote
    /// counts as up to date in the run after it (see `counts_since_attempt`).
    pub attempts: u32,
    /// The first run whose counts are in this report: 1, or the run after the last one that
    /// was cut short (what that one wrote counts as up to date).
    pub counts_since_attempt: u32,
    /// What the files not sent are, when the copy's rule left some alone without finding
    /// them the same (`-u`: newer at the destination; `--ignore-existing`: there at all).
    #[serde(skip)]
    pub not_sent_are: Option<&'static str>,
    /// What the writing side wrote without all that came with it, by its own rule (not
    /// failures), of the regular files this run wrote or whose mode it set: those whose
    /// setuid or setgid bits it cleared, whose `trusted.*` or `security.*` attributes it did
    /// not set, that it left owned by itself though their owners were sent, and whose mtime
    /// its file system could not hold.
    #[serde(serialize_with = "not_kept_json")]
    pub not_kept: sprat_proto::NotKept,
    /// The first failures (all are counted in `failed`).
    pub failures: Vec<Failure>,
    /// How the connections were protected (transfers over the network only): `TLS 1.3
    /// (SUITE)` or `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encryption: Option<String>,
    /// Network measurements and choices (transfers over the network only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathReport>,
    /// A push spread over several servers: what each server took (empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<ServerShare>,
}

/// One server's part of a transfer spread over several servers.
#[derive(Debug, Clone, Serialize)]
pub struct ServerShare {
    /// The server's address as the user named it.
    pub server: String,
    /// Regular files it wrote (those its share held) and their bytes, chunks included.
    pub files: u64,
    pub bytes: u64,
    /// Its bytes over the transfer's whole time.
    pub mb_per_s: f64,
    /// Most streams open to it at once.
    pub streams: usize,
    /// Round trip measured to it, in ms.
    pub rtt_ms: f64,
}

impl ServerShare {
    /// What `counts` (the server at `server`'s part) amounts to over a transfer of `seconds`.
    pub fn new(server: &str, counts: &Counts, streams: usize, rtt_ms: f64, seconds: f64) -> Self {
        ServerShare {
            server: server.to_string(),
            files: counts.files,
            bytes: counts.bytes,
            mb_per_s: counts.bytes as f64 / seconds.max(1e-9) / 1e6,
            streams,
            rtt_ms,
        }
    }
}

/// [`Report::not_kept`] in JSON: `{"setid": N, "xattrs": N, "owners": N, "mtimes": N,
/// "devices": N}`.
fn not_kept_json<S: serde::Serializer>(n: &sprat_proto::NotKept, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(5))?;
    map.serialize_entry("setid", &n.setid)?;
    map.serialize_entry("xattrs", &n.xattrs)?;
    map.serialize_entry("owners", &n.owners)?;
    map.serialize_entry("mtimes", &n.mtimes)?;
    map.serialize_entry("devices", &n.devices)?;
    map.end()
}

/// Most failures listed in a report.
pub const MAX_LISTED_FAILURES: usize = 100;

impl Report {
    /// Records whether the transfer was durable.
    pub fn with_durable(mut self, durable: bool) -> Report {
        self.durable = durable;
        self
    }

    /// Adds what the check against the destination spared (see `pipeline::skip`).
    pub(crate) fn with_skipped(self, counts: &crate::pipeline::skip::SkipCounts) -> Report {
        let (up_to_date, bytes, fixed) = counts.totals();
        self.with_not_sent(up_to_date, fixed, bytes)
    }

    /// Adds what the destination had already: files not sent, files whose attributes alone
    /// were sent, and the bytes of both.
    pub(crate) fn with_not_sent(mut self, up_to_date: u64, attrs_fixed: u64, bytes: u64) -> Report {
        self.up_to_date = up_to_date;
        self.attrs_fixed = attrs_fixed;
        self.bytes_not_sent = bytes;
        self
    }

    /// Adds how many large files a local copy cloned.
    pub(crate) fn with_cloned(mut self, files: u64) -> Report {
        self.cloned = files;
        self
    }

    /// Adds how many large files a local copy copied inside the kernel.
    pub(crate) fn with_kernel_copied(mut self, files: u64) -> Report {
        self.kernel_copied = files;
        self
    }

    /// Records one more failure (listed while under the report's limit).
    pub(crate) fn add_failure(&mut self, path: &[u8], error: &str) {
        self.failed += 1;
        if self.failures.len() < MAX_LISTED_FAILURES {
            self.failures.push(Failure {
                path: sprat_store::display_path(path),
                error: error.to_string(),
            });
        }
    }

    /// This report of a run that followed `earlier`, a run of the same transfer that
    /// completed with files to send again, as one report of both: what `earlier` sent
    /// counts as sent (this run found it up to date), and the time is `elapsed`, from
    /// `earlier`'s start to now.
    pub(crate) fn after(mut self, earlier: &Report, elapsed: Duration) -> Report {
        // This run found what the earlier one sent up to date.
        self.up_to_date = self.up_to_date.saturating_sub(earlier.files);
        self.bytes_not_sent = self.bytes_not_sent.saturating_sub(earlier.bytes);
        self.files += earlier.files;
        self.bytes += earlier.bytes;
        self.dirs = self.dirs.max(earlier.dirs);
        self.symlinks = self.symlinks.max(earlier.symlinks);
        self.specials = self.specials.max(earlier.specials);
        self.syncs += earlier.syncs;
        self.cloned += earlier.cloned;
        self.kernel_copied += earlier.kernel_copied;
        self.not_kept.add(&earlier.not_kept);
        self.deleted += earlier.deleted;
        self.attrs_fixed = self.attrs_fixed.max(earlier.attrs_fixed);
        self.stages.scan_read_s += earlier.stages.scan_read_s;
        self.stages.write_s += earlier.stages.write_s;
        if let (Some(n), Some(e)) = (&mut self.stages.network_s, earlier.stages.network_s) {
            *n += e;
        }
        self.streams = self.streams.max(earlier.streams);
        self.counts_since_attempt = earlier.counts_since_attempt;
        self.seconds = elapsed.as_secs_f64().max(1e-9);
        self.mb_per_s = self.bytes as f64 / self.seconds / 1e6;
        self.files_per_s = self.files as f64 / self.seconds;
        self
    }

    /// Adds what the session measured and chose on the network.
    pub fn with_path(mut self, path: PathReport) -> Report {
        self.streams = path.streams_max;
        self.path = Some(path);
        self
    }

    /// Fills in rates and the bottleneck from counts and stage times.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        direction: &'static str,
        source: String,
        destination: String,
        counts: &Counts,
        elapsed: Duration,
        streams: usize,
        stages: Stages,
    ) -> Report {
        let seconds = elapsed.as_secs_f64().max(1e-9);
        let mut candidates = vec![("read", stages.scan_read_s), ("write", stages.write_s)];
        if let Some(n) = stages.network_s {
            candidates.push(("network", n));
        }
        // A run whose stages were all but idle (a re-run with everything up to date) had no
        // bottleneck worth naming: "none" rather than whichever stage came first.
        let bottleneck = candidates
            .iter()
            .copied()
            .fold(
                ("none", 0.001),
                |best, c| if c.1 > best.1 { c } else { best },
            )
            .0;
        Report {
            direction,
            source,
            destination,
            files: counts.files,
            dirs: counts.dirs,
            symlinks: counts.symlinks,
            specials: counts.specials,
            bytes: counts.bytes,
            failed: counts.failed,
            seconds,
            mb_per_s: counts.bytes as f64 / seconds / 1e6,
            files_per_s: counts.files as f64 / seconds,
            streams,
            stages,
            bottleneck,
            durable: false,
            syncs: counts.syncs,
            up_to_date: 0,
            attrs_fixed: 0,
            cloned: 0,
            kernel_copied: 0,
            bytes_not_sent: 0,
            deleted: 0,
            attempts: 1,
            counts_since_attempt: 1,
            not_sent_are: None,
            not_kept: counts.not_kept,
            failures: counts.failures.clone(),
            encryption: None,
            path: None,
            servers: Vec::new(),
        }
    }
}

/// Running totals of what arrived.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub specials: u64,
    pub bytes: u64,
    pub failed: u64,
    pub failures: Vec<Failure>,
    pub syncs: u64,
    /// Regular files sent before the destination's listing was in that the receiver had
    /// already, and kept instead of writing them again (see `KeepRule`).
    pub kept: u64,
    /// Files sent before the listing whose attributes alone the receiver set (their content
    /// was the same).
    pub kept_fixed: u64,
    /// What the written batches held (whatever became of each entry), for the check
    /// against the sender's totals.
    pub received: sprat_proto::Totals,
    /// What the writer wrote without all that came with it (see [`sprat_proto::NotKept`]).
    pub not_kept: sprat_proto::NotKept,
    /// The paths that failed last, so that a large file failing in each of its chunks counts
    /// and is listed once (see [`RECENT_FAILURES`]).
    recent_failures: std::collections::VecDeque<Vec<u8>>,
}

/// How many of the last failed paths [`Counts`] remembers to tell a file failing again (in
/// another of its chunks) from a new one: the chunks of one file fail close together, so a
/// few suffice, and memory stays bounded whatever the number of failures.
const RECENT_FAILURES: usize = 256;

impl Counts {
    /// Adds what another part of the same transfer counted (a server's share of it), the
    /// failures listed up to the cap.
    pub fn absorb(&mut self, other: &Counts) {
        self.add_totals(
            other.files,
            other.symlinks,
            other.bytes,
            other.syncs,
            other.failed,
        );
        self.dirs += other.dirs;
        self.specials += other.specials;
        self.not_kept.add(&other.not_kept);
        self.extend_failures(&other.failures);
    }

    /// Adds what the report of another part of the same transfer counted, directories aside.
    pub fn absorb_report(&mut self, r: &Report) {
        self.add_totals(r.files, r.symlinks, r.bytes, r.syncs, r.failed);
        self.specials += r.specials;
        self.extend_failures(&r.failures);
    }

    fn add_totals(&mut self, files: u64, symlinks: u64, bytes: u64, syncs: u64, failed: u64) {
        self.files += files;
        self.symlinks += symlinks;
        self.bytes += bytes;
        self.syncs += syncs;
        self.failed += failed;
    }

    fn extend_failures(&mut self, failures: &[Failure]) {
        let room = MAX_LISTED_FAILURES.saturating_sub(self.failures.len());
        self.failures.extend(failures.iter().take(room).cloned());
    }

    /// Records one failed path, unless it failed just before (another chunk of the same
    /// large file): a file is counted and listed once, with its first error.
    pub fn add_failure(&mut self, path: &[u8], error: &str) {
        if self.recent_failures.iter().any(|p| p == path) {
            return;
        }
        if self.recent_failures.len() == RECENT_FAILURES {
            self.recent_failures.pop_front();
        }
        self.recent_failures.push_back(path.to_vec());
        self.failed += 1;
        if self.failures.len() < MAX_LISTED_FAILURES {
            self.failures.push(Failure {
                path: sprat_store::display_path(path),
                error: error.to_string(),
            });
        }
    }

    pub fn add_outcome(&mut self, o: &crate::pipeline::sink::BatchOutcome) {
        self.files += o.files;
        self.dirs += o.dirs;
        self.symlinks += o.symlinks;
        self.specials += o.specials;
        self.bytes += o.bytes;
        self.kept += o.kept;
        self.kept_fixed += o.kept_fixed;
        self.received.add(&o.got);
        self.not_kept.add(&o.not_kept);
        for (p, e) in &o.failures {
            self.add_failure(p, e);
        }
        self.failed += o.unlisted;
    }
}

impl Report {
    /// The lines of [`Report::not_kept`]: each with the writing side's rule that left it out
    /// and how to keep it. Owners are shown only to a client running as root: anyone else
    /// cannot expect them to be kept (as with rsync), and the JSON report counts them anyway.
    fn fmt_not_kept(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = &self.not_kept;
        let (writer, keep_setid) = match self.direction {
            "push" | "third-party" => ("the server", "`sprat serve --keep-setuid` keeps them"),
            _ => ("this side", "`sprat cp --keep-setuid` keeps them"),
        };
        if n.setid > 0 {
            writeln!(
                f,
                "  not kept: the setuid/setgid bits of {} ({writer} clears them from the \
                 network; {keep_setid})",
                counted(n.setid, "file", "files")
            )?;
        }
        if n.xattrs > 0 {
            writeln!(
                f,
                "  not kept: the trusted.*/security.* attributes of {} ({writer} sets them only \
                 when it runs as root and keeps setuid bits)",
                counted(n.xattrs, "file", "files")
            )?;
        }
        if n.mtimes > 0 {
            writeln!(
                f,
                "  not kept: the mtimes of {} (out of the range of the destination's file \
                 system, which set the nearest it holds; a re-run sends them again)",
                counted(n.mtimes, "file", "files")
            )?;
        }
        if n.devices > 0 {
            let rule = match self.direction {
                "push" | "third-party" => {
                    "the server creates them only when it runs as root and was started with \
                     `sprat serve --keep-devices`"
                }
                "copy" => "only root creates them",
                _ => {
                    "this side creates them only when it runs as root, and from the network \
                      only with `sprat cp --keep-devices`"
                }
            };
            writeln!(
                f,
                "  not kept: {} ({rule})",
                counted(n.devices, "device file", "device files")
            )?;
        }
        if n.owners > 0 && sprat_store::owner::running_as_root() {
            writeln!(
                f,
                "  not kept: the owners of {} ({writer} sets owners only when it runs as root, \
                 without --no-owners; they are its own)",
                counted(n.owners, "file", "files")
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Paths as given, or from a peer: shown with their control characters escaped.
        writeln!(
            f,
            "{} {} -> {}",
            self.direction,
            printable(&self.source),
            printable(&self.destination)
        )?;
        let specials = match self.specials {
            0 => String::new(),
            n => format!("{}, ", counted(n, "special file", "special files")),
        };
        writeln!(
            f,
            "  {}, {}, {}, {specials}{} in {:.2} s",
            counted(self.files, "file", "files"),
            counted(self.dirs, "directory", "directories"),
            counted(self.symlinks, "symlink", "symlinks"),
            human_bytes(self.bytes),
            self.seconds
        )?;
        if self.up_to_date > 0 || self.attrs_fixed > 0 {
            writeln!(
                f,
                "  {}: {}, {} of them with mode or mtime fixed ({} not sent)",
                self.not_sent_are.unwrap_or("up to date already"),
                counted(self.up_to_date + self.attrs_fixed, "file", "files"),
                self.attrs_fixed,
                human_bytes(self.bytes_not_sent)
            )?;
        } else if self.bytes_not_sent > 0 {
            // Not sent, and no file up to date: ranges of large files a partial copy at the
            // destination held (an interrupted copy's, or another transfer's writing the
            // same file at once), resumed.
            writeln!(
                f,
                "  resumed: {} already held by a partial copy at the destination were not sent again",
                human_bytes(self.bytes_not_sent)
            )?;
        }
        if self.cloned > 0 {
            let (noun, verb) = if self.cloned == 1 {
                ("file", "shares its")
            } else {
                ("files", "share their")
            };
            writeln!(
                f,
                "  cloned: {} large {noun} {verb} blocks with the source (reflink: no data read or written)",
                self.cloned
            )?;
        }
        if self.kernel_copied > 0 {
            let noun = if self.kernel_copied == 1 {
                "file"
            } else {
                "files"
            };
            writeln!(
                f,
                "  copied inside the kernel: {} large {noun} (copy_file_range: the bytes did not pass through sprat)",
                self.kernel_copied
            )?;
        }
        if self.attempts > 1 && self.failed == 0 {
            let counts = match self.counts_since_attempt {
                1 => String::new(),
                n if n == self.attempts => "; the counts are the last attempt's".into(),
                n => format!(
                    "; the counts are those of attempts {n} to {}",
                    self.attempts
                ),
            };
            writeln!(
                f,
                "  completed on attempt {} (earlier attempts failed and the transfer \
                 resumed){counts}",
                self.attempts
            )?;
        } else if self.attempts > 1 {
            writeln!(
                f,
                "  ran {} times; what still failed is listed above",
                self.attempts
            )?;
        }
        if self.deleted > 0 {
            writeln!(
                f,
                "  deleted: {} the source does not have",
                counted(self.deleted, "entry", "entries")
            )?;
        }
        self.fmt_not_kept(f)?;
        let over = match self.streams {
            // A copy that opened none (nothing to send) or a source server that did not say.
            0 => "no stream".to_string(),
            1 => "1 stream".to_string(),
            n => format!("{n} streams"),
        };
        // A few large files a second read as such, not as 0.
        let digits = if self.files_per_s < 10.0 { 1 } else { 0 };
        writeln!(
            f,
            "  {:.1} MB/s, {:.digits$} files/s over {over}",
            self.mb_per_s, self.files_per_s,
        )?;
        let pct = |s: f64| 100.0 * s / self.seconds;
        write!(
            f,
            "  stage busy time: read {:.2} s ({:.0}%)",
            self.stages.scan_read_s,
            pct(self.stages.scan_read_s)
        )?;
        if let Some(n) = self.stages.network_s {
            write!(f, ", network {:.2} s ({:.0}%)", n, pct(n))?;
        }
        writeln!(
            f,
            ", write {:.2} s ({:.0}%); bottleneck: {}",
            self.stages.write_s,
            pct(self.stages.write_s),
            self.bottleneck
        )?;
        if let Some(p) = &self.path {
            let buffers = match p.tcp_buffer {
                Some(b) => format!("buffers {} requested", human_bytes(b)),
                None => "buffers autotuned".to_string(),
            };
            let streams = if p.streams_start == p.streams_max {
                format!("{}", p.streams_start)
            } else {
                format!("{} -> {}", p.streams_start, p.streams_max)
            };
            writeln!(
                f,
                "  path: RTT {} ms; streams {streams} ({}); {buffers}, window up to {} per stream",
                if p.rtt_ms < 1.0 {
                    format!("{:.3}", p.rtt_ms)
                } else {
                    format!("{:.1}", p.rtt_ms)
                },
                if p.auto_streams { "auto" } else { "fixed" },
                human_bytes(p.window_bytes),
            )?;
            writeln!(
                f,
                "  tail: {:.2} s from the first stream running dry to the last finishing; \
                 streams idle {:.2} s on average",
                p.tail_s, p.tail_idle_s
            )?;
        }
        for share in &self.servers {
            let of_all = 100.0 * share.bytes as f64 / self.bytes.max(1) as f64;
            writeln!(
                f,
                "  server {}: {}, {} ({of_all:.0}%), {:.1} MB/s over {} stream{}, RTT {:.3} ms",
                printable(&share.server),
                counted(share.files, "file", "files"),
                human_bytes(share.bytes),
                share.mb_per_s,
                share.streams,
                if share.streams == 1 { "" } else { "s" },
                share.rtt_ms
            )?;
        }
        if let Some(e) = &self.encryption {
            let e = if e == "none" {
                "none (plain TCP, --no-encryption): anyone on the path can read and change the data"
            } else {
                e
            };
            writeln!(f, "  encryption: {e}")?;
        }
        if self.durable {
            writeln!(
                f,
                "  durable: every batch synced before it counted ({} syncs)",
                self.syncs
            )?;
        }
        if self.failed > 0 {
            writeln!(f, "  FAILED: {} item(s) did not arrive", self.failed)?;
        }
        Ok(())
    }
}

/// `n` and its noun, singular for one: `1 file`, `2 files`, `0 directories`.
pub fn counted(n: u64, one: &str, many: &str) -> String {
    match n {
        1 => format!("1 {one}"),
        _ => format!("{n} {many}"),
    }
}

/// `1.5 GiB`-style sizes.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_failing_in_each_of_its_chunks_counts_once() {
        let mut counts = Counts::default();
        for _ in 0..18 {
            counts.add_failure(b"big", "changed while being read");
        }
        counts.add_failure(b"other", "permission denied");
        counts.add_failure(b"big", "changed while being read");
        assert_eq!(counts.failed, 2);
        assert_eq!(counts.failures.len(), 2);
        // Memory stays bounded: only the last few paths are remembered.
        for i in 0..(RECENT_FAILURES as u32 * 2) {
            counts.add_failure(&i.to_le_bytes(), "x");
        }
        assert_eq!(counts.recent_failures.len(), RECENT_FAILURES);
        assert_eq!(counts.failed, 2 + RECENT_FAILURES as u64 * 2);
    }

    fn report(stages: Stages) -> Report {
        Report::new(
            "push",
            "a".into(),
            "b".into(),
            &Counts::default(),
            Duration::from_secs(1),
            1,
            stages,
        )
    }

    #[test]
    fn the_busiest_stage_is_the_bottleneck() {
        let stages = Stages {
            scan_read_s: 0.2,
            network_s: Some(0.7),
            write_s: 0.5,
        };
        assert_eq!(report(stages).bottleneck, "network");
    }

    #[test]
    fn a_few_files_a_second_are_shown_with_a_decimal() {
        let counts = |files| Counts {
            files,
            ..Counts::default()
        };
        let shown = |files, secs| {
            let r = Report::new(
                "push",
                "a".into(),
                "b".into(),
                &counts(files),
                Duration::from_secs_f64(secs),
                1,
                Stages::default(),
            );
            r.to_string()
        };
        assert!(
            shown(1, 2.0).contains(", 0.5 files/s over"),
            "{}",
            shown(1, 2.0)
        );
        assert!(
            shown(1000, 2.0).contains(", 500 files/s over"),
            "{}",
            shown(1000, 2.0)
        );
    }

    #[test]
    fn a_run_with_idle_stages_has_no_bottleneck() {
        assert_eq!(report(Stages::default()).bottleneck, "none");
        let local = Stages {
            scan_read_s: 0.0,
            network_s: None,
            write_s: 0.0,
        };
        assert_eq!(report(local).bottleneck, "none");
    }
}
