//! Command-line arguments as the user types them (step one of two: `main` turns them into
//! validated engine settings).

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;

/// sprat moves trees of many small files fast: packed batches, a pipelined read/network/write,
/// several streams, every file checksummed.
#[derive(Debug, Parser)]
#[command(name = "sprat", version = VERSION, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// More output: `sprat cp -v` lists each file as it completes; `-vv`, `-vvv` diagnostics.
    ///
    /// `sprat cp -v` lists each file on stdout as it completes, and each entry --delete
    /// removed as `deleting PATH`, like `rsync -v`.
    /// Diagnostics on stderr (every command) start one level up: `-vv` sessions, streams and
    /// refusals, `-vvv` every join, adaptation step and commit. `RUST_LOG` (e.g.
    /// `RUST_LOG=sprat_engine=debug`) sets the diagnostics whatever the count.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// The version `--version` prints: the package's, and the commit it was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("SPRAT_COMMIT"), ")");

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Export a directory tree to sprat clients.
    Serve(ServeArgs),
    /// Copy a tree: local to server (push), server to local (pull), or local to local.
    ///
    /// SRC and DST are local paths or sprat://HOST:PORT/PATH (PATH relative to the server's
    /// root). DST names the destination tree itself: afterwards it holds the contents of SRC
    /// (like `rsync -a SRC/ DST/`) and is created if missing. `DST/` (a trailing slash, or
    /// `.`, `..`, a server's root `sprat://HOST:PORT/`) is a directory to copy into, as with
    /// cp, scp and rsync: SRC goes to DST/NAME; `SRC/ DST/` puts SRC's contents into DST. A
    /// single file goes inside DST also when DST is an existing directory. A symlink already
    /// at DST/NAME is refused then (NAME is SRC's, not a name you typed), never followed.
    ///
    /// Several sources, `sprat cp SRC... DIR` (a shell glob): each goes inside DIR under its
    /// own name (one given with a trailing `/`: its contents, as with rsync), one copy after
    /// another, each with its report; the exit code is the worst of theirs.
    ///
    /// A push or a pull may name several servers that export the same shared file system,
    /// sprat://HOST:PORT,HOST:PORT,.../PATH: its data is spread over all of them, each taking
    /// work as fast as it moves it, and the report has a line per server. They should share
    /// one key (`sprat serve --key-file`) if the client pins a fingerprint.
    ///
    /// `-v` lists each regular file on stdout (control characters escaped) as it completes:
    /// for a push once the server acknowledged the batch holding it, for a pull or a local
    /// copy once it is written; files already up to date are not listed, and a copy between
    /// two servers lists nothing (only the servers see its files). Not with --json; with
    /// --json-events, as events.
    ///
    /// Exit codes: 0 all files arrived and verified; 1 some files failed (listed on stderr);
    /// 2 bad usage or missing source; 3 authentication failed; 4 connection error;
    /// 5 fatal I/O error (destination unwritable, disk full, read-only server); 6 gave up after
    /// --retry-for (the connection kept failing); 129, 130, 143 stopped by SIGHUP, SIGINT
    /// (Ctrl-C) or SIGTERM: run the same command again to go on.
    Cp(Box<CpArgs>),
    /// List a directory on a server (one request however large): `ls [-l] [-R] URL`.
    ///
    /// Like every command that asks a server (`stat`, `du`, `sum`, `mkdir`, `rm`, `mv`), it
    /// gives up with exit 4 when the server sends nothing for 60 s (a server still at a long
    /// request says so every 10 s, so a large `du` or `rm -r` is waited for).
    Ls(LsArgs),
    /// Describe one entry on a server (a symlink is described, not followed).
    Stat(StatArgs),
    /// Count files, directories and bytes under a path, computed on the server.
    Du(DuArgs),
    /// Make a directory on a server (`-p`: with its parents, no error if it exists).
    Mkdir(MkdirArgs),
    /// Remove a file, symlink or empty directory on a server (`-r`: a whole tree, one request).
    Rm(RmArgs),
    /// Rename or move within one server; into an existing directory if TO is one.
    Mv(MvArgs),
    /// Checksums computed on the server where the data lives, printed like sha256sum (into
    /// a pipe or a file, names exactly as sha256sum writes them, so that `sha256sum -c` run
    /// where the data is reads them back).
    Sum(SumArgs),
    /// WAN emulation for tests and benchmarks: forward connections with a one-way delay, a
    /// shared rate cap and a TCP-like window (prints `listening on HOST:PORT` first).
    Relay(RelayArgs),
    /// This host's TCP buffer settings, what they allow on a long path (measured against a
    /// server, or for --rtt, or for 1/10/30/100 ms) and what to change.
    ///
    /// Example: `sprat doctor sprat://HOST:PORT/ --rate 10gbit`.
    Doctor(DoctorArgs),
    /// Split a local tree into N shards of equal predicted time (per-file overhead and
    /// bytes) for `sprat cp --plan PLANDIR --shard K` runs on one host or many, keeping hard
    /// links of one file together; then `sprat cp --plan PLANDIR --finish` once all are done.
    ///
    /// Example (a Slurm array, see scripts/slurm/): `sprat plan /data/run --shards 8 --out
    /// plan`, then `sprat cp --plan plan --shard $SLURM_ARRAY_TASK_ID /data/run
    /// sprat://dtn:7400/run` for K in 0..7, then `sprat cp --plan plan --finish /data/run
    /// sprat://dtn:7400/run`.
    Plan(PlanArgs),
    /// Compare two local trees (content, modes, mtimes, symlinks; with -X, -A, -H and
    /// --owners also what cp keeps with them); exit 1 if they differ.
    Verify(VerifyArgs),
    /// Demonstration: make a data set, start a server on loopback, push it, pull it back,
    /// verify both copies and print the reports.
    Demo(DemoArgs),
    /// Make a data set for tests and benchmarks: files of a fixed size or drawn from a
    /// distribution, spread over directories, incompressible, the same for the same seed.
    ///
    /// Examples: `sprat gen --files 100000 --size 4KiB DIR`;
    /// `sprat gen --total 2GiB --dist gridftp --max-size 16MiB DIR`.
    Gen(GenArgs),
    /// Predict a transfer from per-stage costs (per-file overhead and rate of read, network
    /// and write): the bottleneck by file size, the size below which storage bounds it, the
    /// pipeline's time for a data set, and the transfer nodes a link needs.
    ///
    /// Example: `sprat model --read 60us,900MB/s --network 5us,1GB/s --write 40us,700MB/s
    /// --files 100000 --total 400MB --link 100Gbit`.
    Model(ModelArgs),
    /// Measure one storage subsystem on its own (the limits a copy is judged against).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Print a shell completion script: `sprat completions bash > /etc/bash_completion.d/sprat`
    /// (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell the script is for.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages, made from the same definitions as `--help`: `sprat.1` and one
    /// `sprat-COMMAND.1` per command, into DIR.
    Man {
        /// Directory to write the pages into (created if missing), e.g.
        /// /usr/local/share/man/man1.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct ModelArgs {
    /// Read stage: per-file overhead and rate, `T0,RATE` (e.g. `60us,900MB/s`).
    #[arg(long, value_name = "T0,RATE")]
    pub read: String,
    /// Network stage: per-file overhead and rate (e.g. `5us,1GB/s` or `0us,10Gbit`).
    #[arg(long, value_name = "T0,RATE")]
    pub network: String,
    /// Write stage: per-file overhead and rate.
    #[arg(long, value_name = "T0,RATE")]
    pub write: String,
    /// Files in the data set to predict (with --run: counted in SRC instead).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 100_000,
        conflicts_with = "run"
    )]
    pub files: u64,
    /// Total size of the data set, e.g. 400MB, 2GiB (with --run: counted in SRC instead).
    #[arg(long, value_name = "SIZE", default_value = "400MB", value_parser = crate::units::size,
          conflicts_with = "run")]
    pub total: u64,
    /// Independent pipelines p in T_R + T_W + (n/p) * T_max. Costs fitted by `sprat bench
    /// overhead` are already those of a whole stage with all its threads, so the default 1
    /// takes them as they are; use the number of transfer nodes (or sessions) that each have
    /// the given costs. A --run copy chooses its own streams, as `sprat cp` does.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub streams: usize,
    /// Compare the prediction with a real run: count the files and bytes of the local tree
    /// SRC, predict the copy's time, then copy SRC to DST exactly as `sprat cp SRC DST`
    /// does (DST a local path or sprat://HOST:PORT/PATH, missing or an empty directory) and
    /// print predicted and measured seconds and their ratio. SRC is scanned first, so its
    /// metadata is in the cache for the run. The options below (--batch-size, ...) apply to
    /// the copy as to the prediction.
    #[arg(long, num_args = 2, value_names = ["SRC", "DST"])]
    pub run: Option<Vec<OsString>>,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// A link to fill (e.g. 100Gbit, 10GB/s): print the transfer nodes it needs (also
    /// `--nodes RATE`).
    #[arg(long, value_name = "RATE", visible_alias = "nodes")]
    pub link: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    // --batch-size (the size the data set travels in) and the other pipeline settings.
    #[command(flatten)]
    pub tuning: Tuning,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Write limit: load SRC into memory (untimed), then time writing it into DST as plain
    /// files (no temporary names, no checksums, no mtimes) with parallel threads.
    Write(BenchWriteArgs),
    /// Network limit: files of the given sizes made up in memory, pushed to a server over
    /// the usual session and streams; the server verifies and drops them (memory to memory).
    ///
    /// Example: `sprat bench network --files 100000 --size 4KiB sprat://HOST:PORT/`.
    Network(BenchNetworkArgs),
    /// Per-file overhead of every subsystem: for one total size, data sets of several numbers
    /// of files are read, written, sent memory to memory and pushed end to end (to a server
    /// on loopback writing into DIR); `T = N * t0 + B / R` is fitted to each, and the model's
    /// predicted end-to-end time is printed beside the measured one.
    ///
    /// Example: `sprat bench overhead --dir /scratch/sprat-bench --drop-caches`.
    Overhead(BenchOverheadArgs),
    /// Read limit: scan SRC and read every file to nothing with parallel threads, in the
    /// order sprat reads (inode order within each directory).
    Read(BenchReadArgs),
    /// Copy limit on one host: load SRC into memory (untimed), then time the read limit of
    /// SRC and the write limit of its loaded copy into DST at the same time. Where reading and
    /// writing share the CPUs (a local copy, or both ends on one machine), this bounds a copy
    /// better than either limit alone.
    ///
    /// Example: `sprat bench copy --drop-caches /data/set /scratch/out`.
    Copy(BenchCopyArgs),
}

#[derive(Debug, Args)]
pub struct BenchCopyArgs {
    /// Tree to read, and to load into memory first (at most half of the available memory).
    pub src: PathBuf,
    /// Destination directory (created; must be missing or empty).
    pub dst: PathBuf,
    /// Reading threads (`--threads` sets the writing threads).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub read_threads: usize,
    #[command(flatten)]
    pub common: BenchCommon,
}

#[derive(Debug, Args)]
pub struct BenchReadArgs {
    /// Tree to read.
    pub src: PathBuf,
    #[command(flatten)]
    pub common: BenchCommon,
}

#[derive(Debug, Args)]
pub struct BenchWriteArgs {
    /// Tree to load into memory (at most half of the available memory).
    pub src: PathBuf,
    /// Destination directory (created; must be missing or empty).
    pub dst: PathBuf,
    #[command(flatten)]
    pub common: BenchCommon,
}

#[derive(Debug, Args)]
pub struct BenchNetworkArgs {
    /// The server: sprat://HOST:PORT/ (the path is ignored: nothing is written).
    pub url: std::ffi::OsString,
    #[command(flatten)]
    pub sizes: SizeSpecArgs,
    /// Parallel TCP connections (a number or `auto`, as for `sprat cp`).
    #[arg(long, value_name = "N|auto", default_value = "auto", value_parser = parse_streams)]
    pub streams: Auto<usize>,
    /// Target size of a batch.
    #[arg(long, value_name = "SIZE", default_value = "4MiB", value_parser = crate::units::size)]
    pub batch_size: u64,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BenchOverheadArgs {
    /// Scratch directory on the storage to measure (created; data sets are made and removed
    /// in it).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Total size of every data set.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = crate::units::size)]
    pub total: u64,
    /// Numbers of files, comma-separated (at least two).
    #[arg(
        long,
        value_name = "N,N,...",
        default_value = "1000,4000,16000,64000",
        value_delimiter = ','
    )]
    pub points: Vec<u64>,
    /// `sync` and drop the caches (needs root) before each storage run: cold figures.
    #[arg(long)]
    pub drop_caches: bool,
    /// Print one JSON object: `read`, `network`, `write`, `end_to_end`, each with `t0_s`,
    /// `rate_bytes_per_s` and `r2`, and every run.
    #[arg(long)]
    pub json: bool,
}

/// Options every storage benchmark takes.
#[derive(Debug, Args)]
pub struct BenchCommon {
    /// Reader or writer threads.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub threads: usize,
    /// `sync` and drop the page cache, dentries and inodes (needs root) right before the
    /// timed part (for `write`: after loading the tree), so it starts cold.
    #[arg(long)]
    pub drop_caches: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The configuration file of `sprat serve --config`, shown by `sprat serve --help`.
const SERVE_CONFIG_HELP: &str = r#"Named exports (--config FILE, a TOML file): each export has a name, a root and its own tokens;
URLs name the export first, sprat://HOST:PORT/EXPORT/PATH, and a token reaches only the
exports that list it (`sprat ls sprat://HOST:PORT/` lists them). Relative paths in the file
are relative to the file's directory. The flags --listen, --max-connections and --key-file
override the file's keys.

    listen = "0.0.0.0:7400"                   # required here or as --listen
    max_connections = 64                      # optional (default 64)
    key_file = "/etc/sprat/server.key"        # optional, as --key-file

    [[export]]
    name = "runs"                             # one path component: no '/', not '.' or '..'
    root = "/data/runs"                       # an existing directory
    token_files = ["/etc/sprat/runs.token"]   # one token per file, and/or
    tokens = ["kq3Xb6..."]                    # inline (keep the file private)

    [[export]]
    name = "public"
    root = "/data/public"
    tokens = ["9f2c71..."]
    read_only = true                          # refuse every write (default false)
    owners = false                            # never apply the owners clients push here
                                              # (default true: a root server does, by name)
"#;

#[derive(Debug, Args)]
#[command(after_help = SERVE_CONFIG_HELP)]
pub struct ServeArgs {
    /// Directory to export (the default export: URL paths are relative to it); clients
    /// cannot reach outside it. Or --config for named exports.
    #[arg(long, value_name = "DIR", required_unless_present = "config")]
    pub root: Option<PathBuf>,
    /// TOML file declaring named exports, each with its root, tokens and read_only, and the
    /// listen address (see below). Not with --root, --token-file, --read-only or --no-auth.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["root", "token_file", "read_only", "no_auth"]
    )]
    pub config: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port. The first line on stdout is
    /// `listening on HOST:PORT`, the second `fingerprint SHA256:...` (the server's key). With
    /// --config, overrides the file's `listen`.
    #[arg(long, value_name = "HOST:PORT", required_unless_present_any = ["config", "one_shot"])]
    pub listen: Option<SocketAddr>,
    /// File holding the shared token (otherwise the SPRAT_TOKEN environment variable).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The server's private key, created (mode 0600) if missing; its fingerprint is the
    /// second line on stdout, `fingerprint SHA256:...`, which clients pin. Default:
    /// $XDG_STATE_HOME/sprat/server.key or ~/.local/state/sprat/server.key.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Also accept clients connecting without TLS (their --no-encryption), for trusted
    /// networks only: their data, paths and requests cross the network in the clear.
    #[arg(long)]
    pub no_encryption: bool,
    /// Refuse every write (pushes); pulls still work.
    #[arg(long)]
    pub read_only: bool,
    /// Accept clients without a token. Anyone who can connect can then read and write the root.
    #[arg(long)]
    pub no_auth: bool,
    /// Most client connections served at once (each may hold one batch in memory; the
    /// streams of third-party copies this server makes count too); default 64. With
    /// --config, overrides the file's `max_connections`.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub max_connections: Option<usize>,
    /// Most of those from one client address (default: three quarters of
    /// --max-connections), so that one client host leaves places to the others.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub max_connections_per_address: Option<usize>,
    /// Most memory the data of clients may take at once: received batches waiting to be
    /// written, pulling clients' indexes, the directories a push must remember until its
    /// commit. One client address may hold half of it; a batch waits for room (its client is
    /// slowed down), an index or a directory that finds none fails (a pull's index takes
    /// about 200 bytes a file). At least 320MiB; by default an eighth of this machine's
    /// memory, and at least 1GiB.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size)]
    pub max_client_memory: Option<u64>,
    /// Close a session whose connections move no byte for this long, and a connection that
    /// sends no namespace request for this long; a write to a client that reads nothing for
    /// this long fails. `0s`: never.
    #[arg(long, value_name = "DURATION", default_value = "5min", value_parser = crate::units::duration)]
    pub idle_timeout: std::time::Duration,
    /// On SIGTERM or SIGINT: accept no new connection, and let the transfers running finish
    /// for at most this long before stopping (a second signal stops at once). A transfer cut
    /// then resumes when its client runs again. `0s`: stop at once.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = crate::units::duration)]
    pub stop_timeout: std::time::Duration,
    /// Refuse to push to another server when a client asks (third-party copies, `sprat cp
    /// sprat://A/... sprat://B/...` with this server as A).
    #[arg(long)]
    pub no_third_party: bool,
    /// Internal: the server a client starts through ssh for a [USER@]HOST:PATH argument.
    /// Reads its token from the first line of stdin, uses a key kept in memory, listens by
    /// default on the address the ssh connection arrived at (SSH_CONNECTION), and exits
    /// when stdin closes.
    #[arg(long, hide = true, conflicts_with_all = ["config", "token_file", "no_auth", "key_file", "no_encryption"])]
    pub one_shot: bool,
    #[command(flatten)]
    pub tuning: Tuning,
}

#[derive(Debug, Args, Clone)]
#[command(after_help = crate::client_config::CLIENT_CONFIG_HELP, disable_help_flag = true)]
pub struct CpArgs {
    /// Source: local path, sprat://HOST:PORT/PATH, sprat://ALIAS/PATH (a server of the
    /// config file, see below), or [USER@]HOST:PATH (over ssh); for a pull to local files also
    /// sprat://HOST:PORT,HOST:PORT,.../PATH (servers sharing one file system, all used at once).
    pub src: OsString,
    /// Destination: local path, sprat://HOST:PORT/PATH, sprat://ALIAS/PATH or
    /// [USER@]HOST:PATH; for a push also sprat://HOST:PORT,HOST:PORT,.../PATH (servers sharing
    /// one file system, all used at once).
    pub dst: OsString,
    /// Paths after DST: several sources, as `cp a b DIR` takes them (the last path is the
    /// directory they go into; see the command's help).
    #[arg(hide = true)]
    pub more: Vec<OsString>,
    /// Print help.
    #[arg(long, action = clap::ArgAction::HelpLong)]
    pub help: Option<bool>,
    /// As rsync's -h/--human-readable: accepted, and changes nothing (the report's sizes and
    /// rates always have units). Help is --help only, so that `-avh` copies as with rsync.
    #[arg(short = 'h', long = "human-readable")]
    pub human_readable: bool,
    /// rsync's -l, -p, -t, -o, -g and -D (what -a stands for, long names included), -E
    /// (--executability), -W (--whole-file), -S (--sparse), --no-i-r, -s (--protect-args),
    /// --blocking-io and --mkpath: accepted, and change nothing. sprat always copies symlinks
    /// as links, permission bits and mtimes, owners and groups when the writing side runs as
    /// root, whole files (no deltas), keeps sparse files sparse, scans in parallel rather
    /// than incrementally, never hands paths to a remote shell, makes DST's missing parents,
    /// and recreates FIFOs, sockets and devices (devices from the network only with
    /// --keep-devices; see there).
    #[arg(short = 'l', long = "links", hide = true)]
    pub links: bool,
    #[arg(short = 'p', long = "perms", hide = true)]
    pub perms: bool,
    #[arg(short = 't', long = "times", hide = true)]
    pub times: bool,
    #[arg(short = 'o', long = "owner", hide = true)]
    pub owner: bool,
    #[arg(short = 'g', long = "group", hide = true)]
    pub group: bool,
    #[arg(short = 'D', long = "devices", hide = true)]
    pub devices: bool,
    #[arg(long = "specials", hide = true)]
    pub specials: bool,
    #[arg(short = 'E', long = "executability", hide = true)]
    pub executability: bool,
    #[arg(long = "no-inc-recursive", visible_alias = "no-i-r", hide = true)]
    pub no_inc_recursive: bool,
    #[arg(
        short = 's',
        long = "protect-args",
        visible_alias = "secluded-args",
        hide = true
    )]
    pub protect_args: bool,
    #[arg(long = "blocking-io", hide = true)]
    pub blocking_io: bool,
    #[arg(long = "mkpath", hide = true)]
    pub mkpath: bool,
    #[arg(short = 'W', long = "whole-file", hide = true)]
    pub whole_file: bool,
    #[arg(short = 'S', long = "sparse", hide = true)]
    pub sparse: bool,
    /// Stay on SRC's file system, as `rsync -x`: a directory where another file system is
    /// mounted is copied empty, and nothing of what is mounted there (a local copy or a push;
    /// a server scanning its own tree for a pull does not take it).
    #[arg(short = 'x', long)]
    pub one_file_system: bool,
    /// rsync's --info=FLAGS: `progress2` is --progress (sprat's progress is always the whole
    /// transfer's); other flags are refused.
    #[arg(long, value_name = "FLAGS", hide = true)]
    pub info: Option<String>,
    /// Print the final report as one JSON object on stdout; a copy that stops on an error
    /// prints {"error", "exit_code"} there instead (not for options the command line itself
    /// rejects, which print their usage error alone).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub ssh: SshArgs,
    /// Parallel TCP connections: a number, or `auto` to size them from the measured round
    /// trip and the host's TCP buffer limits and add more while throughput grows. A single
    /// small file goes on one, whatever the number.
    #[arg(long, value_name = "N|auto", default_value = "auto", value_parser = parse_streams)]
    pub streams: Auto<usize>,
    /// Print nothing but errors (not even the files -v lists).
    #[arg(long, short)]
    pub quiet: bool,
    /// Keep the bytes the copy moves, all its connections together, at or under RATE (e.g.
    /// `10MB/s`, `100mbit`; as with rsync, a bare number is KiB/s and `K`, `M`, `G` are
    /// KiB/s, MiB/s, GiB/s; at least `100KB/s`; `0`: no limit), like rsync's --bwlimit:
    /// a push paces what it sends, a pull what it reads (the server then slows down with
    /// TCP's flow control), a local copy what it hands to its writers. Paced a batch or
    /// chunk at a time, so the rate holds over a few of them, not within one;
    /// --stall-timeout is raised to at least twice the time of a 4 MiB chunk at RATE. Not
    /// for a copy between two servers.
    #[arg(long, value_name = "RATE", value_parser = crate::units::Rate::parse)]
    pub bwlimit: Option<crate::units::Rate>,
    /// Show live progress on stderr (files and bytes done of the total, MB/s, files/s, time
    /// elapsed and left) even when the output is not a terminal; by default it is shown when
    /// stdout and stderr are both terminals (and not with --quiet or --json).
    #[arg(long)]
    pub progress: bool,
    /// Write progress as JSON lines on stdout, about once a second and once at the end:
    /// {"event":"progress", "elapsed_s", "files_done", "files_total", "bytes_done",
    /// "bytes_total", "files_skipped", "bytes_skipped", "mb_per_s", "files_per_s", "eta_s"}
    /// (done counts what the destination had already too, which skipped counts apart; the
    /// rates are the copy's; totals and eta_s null until known), then one
    /// {"event":"failed","path","error"} per failed file, and the final report (as with
    /// --json) last. With -v, also {"event":"file","path"} for each file as it completes,
    /// and {"event":"deleted","path"} for each entry --delete removed.
    #[arg(long, conflicts_with = "dry_run")]
    pub json_events: bool,
    /// Skip every file the destination already has, whatever its size and mtime (by default
    /// a file is skipped when the destination has it with the same size and mtime, and only
    /// its mode is set if that alone differs).
    #[arg(long, conflicts_with = "ignore_times")]
    pub ignore_existing: bool,
    /// Send every file, even those the destination has with the same size and mtime.
    #[arg(long, short = 'I')]
    pub ignore_times: bool,
    /// Skip every regular file the destination has with the same size, whatever its mtime
    /// (like rsync --size-only), setting only the mode and mtime of those where they differ:
    /// for a destination whose files another tool copied without their mtimes (`scp -r`,
    /// `cp -r`). A file changed without changing its size is not sent.
    #[arg(long, conflicts_with_all = ["ignore_times", "ignore_existing", "checksum"])]
    pub size_only: bool,
    /// Skip every regular file whose copy at the destination has a newer mtime than the
    /// source's (like rsync -u); the others are compared as usual (size and mtime).
    #[arg(long, short = 'u', conflicts_with_all = ["ignore_times", "ignore_existing", "checksum", "size_only"])]
    pub update: bool,
    /// Archive mode, as rsync's -a: accepted so that `-aHAX` reads as with rsync, and
    /// changes nothing: sprat always copies recursively, with symlinks as links, permission
    /// bits, mtimes, and owners and groups (when the writing side runs as root). rsync's
    /// -rlptgoD, -W, -S and -h are accepted likewise.
    #[arg(long, short = 'a')]
    pub archive: bool,
    /// Accepted for the habit of `cp -r` and `rsync -r`, and changes nothing: sprat always
    /// copies a directory with everything below it.
    #[arg(long, short = 'r')]
    pub recursive: bool,
    /// Accepted for rsync's habit, and changes nothing: an interrupted large file is always
    /// kept as a partial file, and resumed by the next run.
    #[arg(long)]
    pub partial: bool,
    /// As rsync's -P: --progress (partial files are always kept, see --partial).
    #[arg(short = 'P')]
    pub partial_progress: bool,
    /// rsync's -z: refused with a word on why (sprat does not compress).
    #[arg(long, short = 'z', hide = true)]
    pub compress: bool,
    /// Keep hard links, like rsync -H: files that are hard links of each other at the
    /// source (in the tree copied) are made hard links of each other at the destination,
    /// the first name met carrying the data and the others made as links to it once every
    /// file is written, whatever batch or stream each travels in. A re-run links again
    /// what the destination has as separate files. FIFOs, sockets and devices too. Without -H
    /// each name is a file of its own.
    #[arg(long, short = 'H')]
    pub hard_links: bool,
    /// Large files in a local copy onto a file system that shares blocks between files (XFS,
    /// Btrfs): `auto` clones each where the source and destination allow it, like `cp
    /// --reflink=auto` (no data is read or written; the copy shares the source's blocks
    /// until either is changed), and copies it otherwise (a file of 1 to 64 MiB on one file
    /// system inside the kernel, with copy_file_range, like cp); `never` always reads, checks
    /// and writes the bytes, for a physically separate copy. Not with -X, -A or --bwlimit,
    /// which copy.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = ReflinkArg::Auto)]
    pub reflink: ReflinkArg,
    /// Copy extended attributes, like rsync -X: `user.*` always; `trusted.*` and
    /// `security.*` too when both the reading and the writing side run as root (others
    /// cannot read or set them; they are left alone) and the writer keeps setuid bits (a
    /// local copy; a pull with --keep-setuid; a push to `sprat serve --keep-setuid`), since
    /// file capabilities are as strong as a setuid bit. At most 64 KiB of names and values per
    /// file (a file with more fails, by name). Attributes of symlinks are not copied. A
    /// destination's attributes in those namespaces that the source lacks are removed, and
    /// a re-run compares and fixes them (every file the destination has is then checked
    /// there, without its data being sent).
    #[arg(long, short = 'X')]
    pub xattrs: bool,
    /// Copy POSIX ACLs, like rsync -A (the access ACL of files and directories, the default
    /// ACL of directories), as Linux keeps them (`system.posix_acl_*` attributes), without
    /// translation between systems; the mode stays consistent with the ACL. Re-runs compare
    /// and fix them as with -X.
    #[arg(long, short = 'A')]
    pub acls: bool,
    /// Compare content, not mtimes (like rsync -c): a file the destination has with the same
    /// size is compared by XXH3-128 digests, each computed where its copy lives (a server
    /// reads its own files, several at a time) and only the digests cross the network; a
    /// match is not sent (only its mode and mtime are set if they differ), a mismatch is
    /// sent, a file of another size is sent without reading it first. Reads every such
    /// file on both sides. Not with --ignore-times, --ignore-existing, --size-only or -u.
    #[arg(long, short = 'c', conflicts_with_all = ["ignore_times", "ignore_existing"])]
    pub checksum: bool,
    /// Print what a copy would send (`send PATH`) and of which files it would set only the
    /// mode and mtime (`attrs PATH`), then a summary; change nothing (the two sides are only
    /// listed). SRC may be a directory or a single file (compared where its copy would go).
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Remove from the destination what the source does not have, before copying (only inside
    /// DST; a directory goes with everything below it; symlinks are removed, never followed).
    /// With --dry-run, list it as `delete PATH`. A DST that has entries and none of them in
    /// the source is refused, nothing removed (it is almost always the directory SRC was meant
    /// to go into: name DST/NAME; --force-delete goes on).
    #[arg(long)]
    pub delete: bool,
    /// With --delete, remove the destination's entries even when none of them is in the
    /// source (a mirror whose every top-level name changed, such as dated directories):
    /// without it such a --delete is refused.
    #[arg(long, requires = "delete")]
    pub force_delete: bool,
    /// Leave out what matches PATTERN, as rsync does: rules from --exclude, --include and
    /// their -from files are tried in the order given and the first that matches decides
    /// (none: copied). A leading `/` anchors at the root of the transfer, as rsync's: SRC
    /// itself for `sprat cp SRC DST` (rsync's `SRC/ DST/`), SRC's parent where SRC goes to
    /// DST/NAME (`DST/`, as rsync's `SRC DST/`: `/NAME/x`), and a single file is matched by
    /// its name (excluded: nothing copied); a pattern without `/` matches
    /// the last name at any depth, one with an inner `/` or `**` the end of the path; a
    /// trailing `/` matches only directories; `*` matches within a name, `**` across `/`,
    /// `?` one character, `[...]` a class; `dir/***` is dir and everything below. An excluded
    /// directory is not even scanned (include its parents to reach a file inside). With
    /// --delete, what is excluded at the destination is kept. Repeatable.
    #[arg(long, value_name = "PATTERN", allow_hyphen_values = true)]
    pub exclude: Vec<OsString>,
    /// Copy what matches PATTERN even if a later rule excludes it (see --exclude).
    /// Repeatable.
    #[arg(long, value_name = "PATTERN", allow_hyphen_values = true)]
    pub include: Vec<OsString>,
    /// Exclude patterns read from FILE (`-`: standard input), one per line; blank lines and
    /// lines starting with `#` or `;` are ignored, `- PAT` / `+ PAT` name the kind, and a
    /// line `!` clears the rules so far. Repeatable; in order with --exclude and --include.
    #[arg(long, value_name = "FILE")]
    pub exclude_from: Vec<PathBuf>,
    /// Include patterns read from FILE (as --exclude-from, the kind being include).
    #[arg(long, value_name = "FILE")]
    pub include_from: Vec<PathBuf>,
    /// Copy only the paths listed in FILE (`-`: standard input), one per line, relative to
    /// SRC (blank lines and `#`/`;` comments ignored); the directories leading to them are
    /// made, a listed directory is copied without its contents, and a listed path that does
    /// not exist fails (exit 1). As with rsync, a line `DIR/` or `.` copies that directory
    /// and its entries one level down (a symlink there is not followed); a line `A/./B`
    /// (rsync's mark: B copied to `B`) is refused. Not with --delete.
    #[arg(long, value_name = "FILE", conflicts_with = "delete")]
    pub files_from: Option<PathBuf>,
    /// Copy a part of a plan made by `sprat plan` (with --shard K or --finish). SRC is the
    /// planned source (or the same tree under another path, as another host mounts it).
    #[arg(long, value_name = "PLANDIR", conflicts_with_all = ["files_from", "exclude", "include",
          "exclude_from", "include_from", "delete"])]
    pub plan: Option<PathBuf>,
    /// The shard of --plan to copy, from 0 to N-1 (a Slurm array index can be passed as is):
    /// an ordinary copy of that shard's files (resumable, verified, re-run safe) and the
    /// directories leading to them.
    #[arg(long, value_name = "K", requires = "plan", conflicts_with = "finish")]
    pub shard: Option<usize>,
    /// Once every shard of --plan is done: make every planned directory and set the modes
    /// and mtimes of all of them, then check that the destination has every planned file with
    /// the source's size and mtime (exit 1 naming what is missing or different).
    #[arg(long, requires = "plan", conflicts_with = "dry_run")]
    pub finish: bool,
    /// A session whose connections move no byte for this long is taken as stalled: its
    /// connections are closed and the transfer runs again (see --retry-for). `0s`: never.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = crate::units::duration)]
    pub stall_timeout: std::time::Duration,
    /// When connections are lost, reset or stalled, or the server goes away (a restart, a
    /// lost link), run the transfer again, waiting 1 s, 2 s, 4 s ... (at most 60 s) between
    /// runs, for this long without progress (a run that copied something before it failed
    /// starts the time again); each run sends only what is not at the destination yet
    /// (complete files are skipped, a large file cut in the middle resumes). Then exit 6.
    /// `0s`: no retries. A server that cannot be reached at all on the first run is
    /// reported at once (exit 4).
    #[arg(long, value_name = "DURATION", default_value = "10min", value_parser = crate::units::long_duration)]
    pub retry_for: std::time::Duration,
    #[command(flatten)]
    pub tuning: Tuning,
}

/// Settings shared by client and server; the defaults need no tuning.
#[derive(Debug, Args, Clone)]
pub struct Tuning {
    /// Target size of a batch of packed small files (e.g. 4MiB), or `auto`: 4 MiB for a copy
    /// between local file systems, 1 MiB over the network (a batch is written once it has
    /// arrived whole, so smaller batches end a transfer over many streams sooner).
    #[arg(long, value_name = "SIZE|auto", default_value = "auto", value_parser = parse_auto_size)]
    pub batch_size: Auto<u64>,
    /// Most entries in one batch.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub batch_files: usize,
    /// Files larger than this are split into chunks sent over all streams.
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = crate::units::size)]
    pub small_file_threshold: u64,
    /// Size of the chunks of large files.
    #[arg(long, value_name = "SIZE", default_value = "4MiB", value_parser = crate::units::size)]
    pub chunk_size: u64,
    /// Socket send and receive buffer per connection (e.g. 16MiB), or `auto`: kernel
    /// autotuning, unless explicit buffers reach a larger window on this host (see `sprat
    /// doctor`). An explicit size is capped by net.core.rmem_max/wmem_max and turns
    /// autotuning off for the socket.
    #[arg(long, value_name = "SIZE|auto", default_value = "auto", value_parser = parse_auto_size)]
    pub tcp_buffer: Auto<u64>,
    /// Threads listing directories.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub scan_threads: usize,
    /// Threads reading files into batches.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub read_threads: usize,
    /// Threads writing batches to disk.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub write_threads: usize,
    /// Make every batch durable (one syncfs per batch, shared by concurrent batches) before it
    /// counts as written and is acknowledged; without it nothing is synced (like cp and rsync).
    /// On `serve`: every push is durable whatever the client asks.
    #[arg(long)]
    pub durable: bool,
    /// How a batch's files are read: `threads` = pread, one batch per reader thread;
    /// `uring` = all reads of a batch in flight on one io_uring per reader (falls back to
    /// pread where the kernel has no io_uring or forbids it).
    #[arg(long, value_name = "HOW", value_enum, default_value_t = IoChoice::Uring)]
    pub io: IoChoice,
    /// Order of the reads within a batch: `inode` (the scanner's, a cheap proxy for disk
    /// layout) or `physical` (by data address from FIEMAP; inode order where not supported).
    #[arg(long, value_name = "ORDER", value_enum, default_value_t = OrderChoice::Inode)]
    pub read_order: OrderChoice,
    /// How written files appear under their final names: `auto` = an unnamed file (O_TMPFILE)
    /// linked in once complete, where the destination allows it, else `rename` = a hidden
    /// temporary name renamed into place. Either way a name appears only for a complete file.
    #[arg(long, value_name = "HOW", value_enum, default_value_t = PublishArg::Auto)]
    pub publish: PublishArg,
    /// Keep the setuid and setgid bits of regular files whose content comes from the
    /// network. By default they are cleared, so that a peer cannot create set-user-ID or
    /// set-group-ID programs owned by the user writing them (a server often runs as root).
    /// On `serve`: the files clients push; on `cp`: the files a pull writes (what a push
    /// keeps is the server's choice). A local copy always keeps them, like `cp -a`;
    /// directories always keep theirs (a setgid directory passes its group on).
    #[arg(long)]
    pub keep_setuid: bool,
    /// Create the character and block devices whose description comes from the network
    /// (the writing side must run as root). By default they are not created and the report
    /// counts them ("not kept: N device files"), since a device file gives whoever may open
    /// it the device itself. On `serve`: those clients push; on `cp`: those a pull writes. A
    /// local copy run as root always creates them, like `cp -a`; FIFOs and sockets are
    /// always created.
    #[arg(long)]
    pub keep_devices: bool,
    /// Do not copy owners and groups. By default, like `rsync -a`, each file, directory and
    /// link gets the owner and group of its source, matched by user and group name (a name
    /// unknown on the writing side keeps the numeric id), when the writing side runs as
    /// root; anyone else leaves what it writes owned by itself (the report counts them: "not
    /// kept: the owners of N files", shown to a client running as root). On `serve`: the
    /// server never applies the owners clients push (they stay the server's user's).
    #[arg(long)]
    pub no_owners: bool,
    /// Copy owners and groups as numeric ids, not matched by name (like rsync's
    /// `--numeric-ids`). On `cp`: for a push, the server uses the ids as sent.
    #[arg(long)]
    pub numeric_ids: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReflinkArg {
    Auto,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PublishArg {
    Auto,
    Rename,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IoChoice {
    Threads,
    Uring,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OrderChoice {
    Inode,
    Physical,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// One local tree.
    pub a: PathBuf,
    /// The other local tree.
    pub b: PathBuf,
    /// Compare extended attributes too (`user.*`; `trusted.*` and `security.*` as root), as
    /// `cp -X` keeps them.
    #[arg(short = 'X', long)]
    pub xattrs: bool,
    /// Compare POSIX ACLs too, as `cp -A` keeps them.
    #[arg(short = 'A', long)]
    pub acls: bool,
    /// Compare which files are hard links of each other, as `cp -H` keeps them.
    #[arg(short = 'H', long)]
    pub hard_links: bool,
    /// Compare owners and groups (numeric ids) too, as a copy written as root keeps them.
    #[arg(long)]
    pub owners: bool,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to put the data set and copies (default: a new temporary directory, removed after).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Number of small files in the data set.
    #[arg(long, value_name = "N", default_value_t = 3000)]
    pub files: usize,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The local tree to split (a directory).
    pub src: PathBuf,
    /// How many shards.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub shards: u32,
    /// Where to write the plan: a new or empty directory that the shards' hosts can read.
    #[arg(long, value_name = "PLANDIR")]
    pub out: PathBuf,
    /// The model's per-file overhead (t0 in T = N * t0 + B / R): what a file costs besides
    /// its bytes. Measure yours with `sprat bench overhead`.
    #[arg(long, value_name = "TIME", default_value = "50us", value_parser = crate::units::duration)]
    pub per_file: std::time::Duration,
    /// The model's rate (R in T = N * t0 + B / R).
    #[arg(long, value_name = "RATE", default_value = "535MB/s", value_parser = crate::units::Rate::parse)]
    pub rate: crate::units::Rate,
    /// Threads scanning the tree.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub scan_threads: usize,
    /// Print the plan's summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct GenArgs {
    /// Directory to fill (created if missing; must be empty).
    pub dir: PathBuf,
    #[command(flatten)]
    pub sizes: SizeSpecArgs,
    /// Files per directory.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub per_dir: u64,
    /// Levels of directories above the files (0: all files directly in DIR).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub depth: u32,
    /// Writer threads.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub threads: usize,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// How many files and of which sizes (for `gen` and `bench network`).
#[derive(Debug, Args)]
pub struct SizeSpecArgs {
    /// Number of files.
    #[arg(long, value_name = "N")]
    pub files: Option<u64>,
    /// Total bytes (e.g. 2GiB): sizes are drawn until the set holds exactly this much; with
    /// --files, each file gets TOTAL / N bytes.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size)]
    pub total: Option<u64>,
    /// Every file this size (default 4KiB unless --dist is given).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size, conflicts_with = "dist")]
    pub size: Option<u64>,
    /// Size distribution: `gridftp` (the published GridFTP histogram, built in; its mean is
    /// ~38 MB, so cap it with --max-size) or `loguniform:MIN:MAX`.
    #[arg(long, value_name = "DIST")]
    pub dist: Option<String>,
    /// Drop the distribution's part above this size (with --dist gridftp and 16MiB the mean
    /// file is ~0.95 MiB).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size)]
    pub max_size: Option<u64>,
    /// Seed of the sizes and contents: the same seed makes the same set.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
}

/// How every command that talks to a server proves itself and recognises the server.
#[derive(Debug, Args, Clone)]
pub struct ConnectArgs {
    /// The client's configuration file: defaults for options and servers named by an alias
    /// (`sprat://ALIAS/PATH`), see `sprat cp --help`. Default: $SPRAT_CONFIG, else
    /// $XDG_CONFIG_HOME/sprat/config.toml or ~/.config/sprat/config.toml, ignored if missing;
    /// `/dev/null`: none. (Not the server's file of `sprat serve --config`.)
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// File holding the shared token. Otherwise, in this order: the `token_file` of the
    /// server's alias in the config file, the SPRAT_TOKEN environment variable, the config
    /// file's `[defaults] token_file`.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Where servers' keys are pinned on first use, like ssh's known_hosts (default
    /// $XDG_CONFIG_HOME/sprat/known_servers or ~/.config/sprat/known_servers). A server whose
    /// key changed is refused.
    #[arg(long, value_name = "FILE")]
    pub known_servers: Option<PathBuf>,
    /// Accept only a server presenting this key (`SHA256:...`, as `sprat serve` prints on its
    /// second line); the known-servers file is then neither read nor written. Repeat for a
    /// copy between two servers. Replaces the `fingerprint` of aliases in the config file.
    #[arg(long, value_name = "SHA256:...")]
    pub server_fingerprint: Vec<String>,
    /// Connect without TLS: data, paths and requests cross the network in the clear, for
    /// trusted networks only (the server must allow it with its own --no-encryption).
    #[arg(long)]
    pub no_encryption: bool,
}

/// How `[USER@]HOST:PATH` arguments reach their host: a one-shot server started through ssh.
#[derive(Debug, Args, Clone)]
pub struct SshArgs {
    /// Remote shell for HOST:PATH arguments, split as a shell would, like rsync's -e (e.g.
    /// "ssh -p 2222 -i key"); default $SPRAT_RSH, else ssh. It must accept OpenSSH's -o
    /// options (the connection is made a master, for --via-ssh and its fallback).
    #[arg(short = 'e', long = "rsh", value_name = "COMMAND")]
    pub rsh: Option<String>,
    /// The command that runs sprat on a HOST:PATH remote (default sprat, found on the
    /// remote's PATH), run by the remote's shell like rsync's --rsync-path.
    #[arg(long, value_name = "PATH")]
    pub remote_sprat: Option<String>,
    /// Carry the data streams to a HOST:PATH remote through the ssh connection instead of
    /// connecting to its one-shot server directly (done anyway when a direct connection
    /// fails within 3 s).
    #[arg(long)]
    pub via_ssh: bool,
}

#[derive(Debug, Args)]
#[command(disable_help_flag = true)]
pub struct LsArgs {
    /// sprat://HOST:PORT/PATH, sprat://ALIAS/PATH (a server named in the config file), or
    /// [USER@]HOST:PATH (over ssh).
    pub url: OsString,
    /// Print help.
    #[arg(long, action = clap::ArgAction::HelpLong)]
    pub help: Option<bool>,
    /// With -l, sizes in units of 1024 (`4.0K`, `1.5M`), as `ls -lh`.
    #[arg(short = 'h', long = "human-readable")]
    pub human_readable: bool,
    /// Long listing: mode, owner, group, size, mtime (UTC), name, link target (owner and
    /// group by their names on the server; ids without a name there as numbers).
    #[arg(short = 'l')]
    pub long: bool,
    /// The whole tree below PATH, in one request.
    #[arg(short = 'R')]
    pub recursive: bool,
    /// As `ls -a`: accepted, and changes nothing (names starting with `.` are always shown).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Print a JSON array of entries (with "uid", "gid", "user" and "group").
    #[arg(long)]
    pub json: bool,
    /// Show owners and groups as numeric ids, not names.
    #[arg(long)]
    pub numeric_ids: bool,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub ssh: SshArgs,
}

#[derive(Debug, Args)]
pub struct StatArgs {
    /// sprat://HOST:PORT/PATH, sprat://ALIAS/PATH (a server named in the config file), or
    /// [USER@]HOST:PATH (over ssh).
    pub url: OsString,
    /// Print a JSON object.
    #[arg(long)]
    pub json: bool,
    /// Show the owner and group as numeric ids, not names.
    #[arg(long)]
    pub numeric_ids: bool,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub ssh: SshArgs,
}

#[derive(Debug, Args)]
#[command(disable_help_flag = true)]
pub struct DuArgs {
    /// sprat://HOST:PORT/PATH, sprat://ALIAS/PATH (a server named in the config file), or
    /// [USER@]HOST:PATH (over ssh).
    pub url: OsString,
    /// Print help.
    #[arg(long, action = clap::ArgAction::HelpLong)]
    pub help: Option<bool>,
    /// As `du -h`: accepted, and changes nothing (the sizes are shown with units already).
    #[arg(short = 'h', long = "human-readable")]
    pub human_readable: bool,
    /// As `du -s`: accepted, and changes nothing (the total is all du prints).
    #[arg(short = 's', long = "summarize")]
    pub summarize: bool,
    /// Print a JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub ssh: SshArgs,
}

#[derive(Debug, Args)]
pub struct MkdirArgs {
    /// sprat://HOST:PORT/PATH, sprat://ALIAS/PATH (a server named in the config file), or
    /// [USER@]HOST:PATH (over ssh).
    pub url: OsString,
    /// Make parent directories as needed; no error if it exists.
    #[arg(short = 'p')]
    pub parents: bool,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub ssh: SshArgs,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    /// sprat://HOST:PORT/PATH, sprat://ALIAS/PATH (a server named in the config file), or
    /// [USER@]HOST:PATH (over ssh).
    pub url: OsString,
    /// Remove a directory and everything below it (-R too, as rm).
    #[arg(short = 'r', short_alias = 'R')]
    pub recursive: bool,
    /// As `rm -f`: what is not there is no error.
    #[arg(short = 'f', long = "force")]
    pub force: bool,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub ssh: SshArgs,
}

#[derive(Debug, Args)]
pub struct MvArgs {
    /// sprat://HOST:PORT/FROM, sprat://ALIAS/FROM or [USER@]HOST:FROM.
    pub from: OsString,
    /// sprat://HOST:PORT/TO, sprat://ALIAS/TO or [USER@]HOST:TO (the same server or host).
    pub to: OsString,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub ssh: SshArgs,
}

#[derive(Debug, Args)]
pub struct SumArgs {
    /// sprat://HOST:PORT/PATH, sprat://ALIAS/PATH (a server named in the config file), or
    /// [USER@]HOST:PATH (over ssh).
    pub url: OsString,
    /// Every file below PATH.
    #[arg(short = 'r')]
    pub recursive: bool,
    /// xxh3 (128-bit, the transfer checksum), sha256 or md5.
    #[arg(long, value_name = "ALGO", default_value = "xxh3")]
    pub algo: String,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub ssh: SshArgs,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// A server to measure the round trip to: sprat://HOST:PORT/.
    pub url: Option<std::ffi::OsString>,
    /// Round trip of the path to advise for (instead of measuring it).
    #[arg(long, value_name = "TIME", value_parser = crate::units::duration)]
    pub rtt: Option<std::time::Duration>,
    /// Bandwidth of the path (e.g. 1gbit, 10gbit).
    #[arg(long, value_name = "RATE", default_value = "10gbit", value_parser = crate::units::Rate::parse)]
    pub rate: crate::units::Rate,
    /// A data set on this host's storage: read it all (as `sprat bench read` does, so run
    /// it where the data would be read from, cold for a fair figure) and say how many
    /// transfer nodes reading like this one the path of --rate needs (max(N/R, N/W) with
    /// --write-rate), and how long the set would take.
    #[arg(long, value_name = "DIR")]
    pub data: Option<std::path::PathBuf>,
    /// With --data: the rate one destination node writes at (measure it there with `sprat
    /// bench write` or `sprat doctor --data` on a copy); without it only the reading side
    /// is sized.
    #[arg(long, value_name = "RATE", requires = "data", value_parser = crate::units::Rate::parse)]
    pub write_rate: Option<crate::units::Rate>,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Address to accept connections on (port 0 picks a free port).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: SocketAddr,
    /// Address to forward every connection to.
    #[arg(long, value_name = "HOST:PORT")]
    pub to: SocketAddr,
    /// One-way delay added in each direction (e.g. 15ms: a 30 ms round trip).
    #[arg(long, value_name = "TIME", default_value = "0ms", value_parser = crate::units::duration)]
    pub delay: std::time::Duration,
    /// Capacity of the path per direction, shared by all connections (e.g. 1gbit; 0 = none).
    #[arg(long, value_name = "RATE", default_value = "0", value_parser = crate::units::Rate::parse)]
    pub rate: crate::units::Rate,
    /// Most bytes in flight per direction and connection (the TCP window it stands for), or
    /// `auto`: the largest window one connection reaches under this host's buffer limits.
    #[arg(long, value_name = "SIZE|auto", default_value = "auto", value_parser = parse_auto_size)]
    pub window: Auto<u64>,
    /// Also forward each port FIRST..=LAST of the --listen address to the same port of the
    /// --to address, over the same links (e.g. a GridFTP server's passive data ports).
    #[arg(long, value_name = "FIRST-LAST", value_parser = parse_port_range)]
    pub ports: Option<std::ops::RangeInclusive<u16>>,
    /// Fault: reset each connection once this many bytes went from client to server (both
    /// sides see the connection break).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size)]
    pub reset_after: Option<u64>,
    /// Fault: forward nothing more in either direction once this many bytes went from client
    /// to server, but keep the connection open (a stalled path).
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size)]
    pub stall_after: Option<u64>,
    /// Fault: flip one bit (the lowest) of the byte at this offset of the client-to-server
    /// stream.
    #[arg(long, value_name = "OFFSET", value_parser = crate::units::size)]
    pub flip_bit_at: Option<u64>,
    /// Fault: hold back the server's first bytes on every connection for this long more (a
    /// busy server: on a short path its hello comes late, as if the path were long).
    #[arg(long, value_name = "TIME", default_value = "0ms", value_parser = crate::units::duration)]
    pub slow_hello: std::time::Duration,
    /// Apply the faults to the Nth connection accepted only (1 = the first); without it, to
    /// every connection.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub fault_connection: Option<u64>,
}

/// A count of 1 or more (0 would refuse everything).
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("0 would refuse every client: at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A value the user may leave to sprat (`auto`: `None`).
#[derive(Debug, Clone, Copy)]
pub struct Auto<T>(pub Option<T>);

/// `auto` or a stream count.
pub(crate) fn parse_streams(text: &str) -> Result<Auto<usize>, ChoiceError> {
    if text == "auto" {
        return Ok(Auto(None));
    }
    match text.parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(Auto(Some(n))),
        _ => Err(ChoiceError(format!(
            "'{text}' is not 'auto' or a number from 1 to 64"
        ))),
    }
}

/// `auto` or a size.
pub(crate) fn parse_auto_size(text: &str) -> Result<Auto<u64>, ChoiceError> {
    if text == "auto" {
        return Ok(Auto(None));
    }
    crate::units::size(text)
        .map(|b| Auto(Some(b)))
        .map_err(|why| ChoiceError(format!("{why}; or 'auto'")))
}

/// A value that is none of the choices an option takes; the text says which are.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ChoiceError(String);

/// Parses `FIRST-LAST` (or a single port) into a range of at most 1024 ports.
pub fn parse_port_range(text: &str) -> Result<RangeInclusive<u16>, ChoiceError> {
    let (first, last) = text.split_once('-').unwrap_or((text, text));
    let port = |p: &str| p.trim().parse::<u16>().ok().filter(|&p| p > 0);
    match (port(first), port(last)) {
        (Some(f), Some(l)) if f <= l && l - f < 1024 => Ok(f..=l),
        (Some(_), Some(_)) => Err(ChoiceError(format!(
            "'{text}' is not a range FIRST-LAST with FIRST <= LAST and at most 1024 ports"
        ))),
        _ => Err(ChoiceError(format!(
            "'{text}' is not a port range FIRST-LAST (ports 1 to 65535)"
        ))),
    }
}
