//! The `sprat` binary: parses the command line, hands validated settings to the engine, and
//! turns errors into one line on stderr and a documented exit code.

/// mimalloc, not glibc's allocator: with glibc's per-thread arenas a TLS server spent a third
/// more CPU on a push of 1 MiB files (rustls copies every record into a new `Vec`, on many
/// threads). Version 2 (the crate's `v2` feature): version 3 kept up to three times more
/// memory resident in a server under 32 copies. See "The allocator" in docs/performance.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `eprintln!` that never panics: a line for a stderr that is gone (`sprat ... 2>&1 | head`,
/// a closed terminal) is dropped, as the report on a closed stdout is (`print_quietly`).
/// Defined before the modules, so that theirs is this one too.
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod args;
mod bench;
mod client_config;
mod demo;
mod doctor;
mod gen;
mod model;
mod namespace;
mod one_shot;
mod progress;
mod relay;
mod rsync_habits;
mod selection;
mod serve_config;
mod shards;
mod units;

use anyhow::Context;
use args::{Cli, Command, ConnectArgs, CpArgs, ServeArgs, Tuning, VerifyArgs};
use client_config::{ClientConfig, ServerAlias};
use sprat_engine::config::{IoBackend, PublishChoice, ReadOrder, SkipRule};
use sprat_engine::measurement::listing::FileLog;
use sprat_engine::measurement::pace::Pace;
use sprat_engine::text::printable;
use sprat_engine::{
    Credentials, Fingerprint, KnownServers, ServerAccess, ServerIdentity, ServerTls, TokenKey,
    Trust,
};
use sprat_engine::{Endpoint, ExportsConfig, Server, ServerConfig, TransferError, TransferOptions};
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// On Ctrl-C (or SIGTERM, SIGHUP) during a copy: a line saying that nothing is lost and how
/// to go on, then the exit a signal's death would give (128 + the signal). What was being
/// written is left as a kill leaves it: no file half written under its name, and a large
/// file's partial copy kept for the next run.
///
/// With `--json` or `--json-events` (`json`), stdout gets the error in the report's place, as
/// for any other error: `{"error": ..., "exit_code": 128 + the signal}` (review 2026-11-30 of
/// sprat in scripts, F2: it was left empty).
fn say_how_to_resume_when_interrupted(json: bool) {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            // After a progress line that was being redrawn, on a line of its own.
            let fresh_line = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                "\n"
            } else {
                ""
            };
            let line = "interrupted: no file is left half written under its name; run the \
                        same command again to go on (whole files are skipped, a large file \
                        resumes from its partial copy)";
            eprintln!("{fresh_line}sprat: {line}");
            if json {
                let failed = serde_json::json!({"error": line, "exit_code": 128 + signal});
                let _ = print_quietly(&format!("{failed}\n"));
            }
            sprat_engine::ssh::launch::remove_control_dirs();
            std::process::exit(128 + signal);
        }
    });
}

fn main() {
    let command = <Cli as clap::CommandFactory>::command();
    let args = rsync_habits::lone_h_is_help(std::env::args_os().collect());
    refuse_rsync_options_sprat_lacks(&command, &args);
    // The raw matches too: `cp`'s rule options are applied in the order they were given.
    let matches = command.get_matches_from(args);
    let cli =
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    raise_open_file_limit();
    init_diagnostics(cli.verbose);
    let cp_matches = matches.subcommand_matches("cp");
    // `cp`, `ls`, `stat`, `du`... with --json (or --json-events) get an error as JSON too, in
    // their report's place (review 2026-11-30 of sprat in scripts, F6: only `cp` did).
    let flag = |m: &clap::ArgMatches, id: &str| {
        m.try_get_one::<bool>(id)
            .ok()
            .flatten()
            .copied()
            .unwrap_or(false)
    };
    let json = matches
        .subcommand()
        .is_some_and(|(_, m)| flag(m, "json") || flag(m, "json_events"));
    if cp_matches.is_some() {
        say_how_to_resume_when_interrupted(json);
    }
    let code = match run(cli, cp_matches) {
        Ok(code) => code,
        Err(e) => {
            let code = e
                .downcast_ref::<TransferError>()
                .map(|t| t.exit_code())
                .unwrap_or(2);
            // Errors carry peers' texts and file names: shown escaped, on one line.
            let line = error_line(&e);
            eprintln!("sprat: error: {}", printable(&line));
            if json {
                // A script reading the report gets the error in its place.
                let failed = serde_json::json!({"error": line, "exit_code": code});
                let _ = print_quietly(&format!("{failed}\n"));
            }
            code
        }
    };
    std::process::exit(code);
}

/// Exits with a usage error (2) that says what to do instead when `sprat cp` is given an rsync
/// option it does not take (see `rsync_habits`), before the parser suggests a look-alike.
fn refuse_rsync_options_sprat_lacks(command: &clap::Command, args: &[OsString]) {
    let commands: Vec<String> = command
        .get_subcommands()
        .flat_map(|c| std::iter::once(c.get_name()).chain(c.get_all_aliases()))
        .map(str::to_string)
        .chain(["help".to_string()])
        .collect();
    let globals: Vec<String> = command
        .get_arguments()
        .flat_map(|a| {
            let long = a.get_long().map(|l| format!("--{l}"));
            let short = a.get_short().map(|c| format!("-{c}"));
            long.into_iter().chain(short)
        })
        .chain(["--help", "-h", "--version", "-V"].map(str::to_string))
        .collect();
    if let Some(word) = rsync_habits::missing_command(args, &commands, &globals) {
        eprintln!("sprat: error: {word}");
        std::process::exit(2);
    }
    let Some(cp) = command.find_subcommand("cp") else {
        return;
    };
    let shorts: Vec<(char, bool)> = cp
        .get_arguments()
        .chain(command.get_arguments())
        .filter_map(|a| Some((a.get_short()?, a.get_action().takes_values())))
        .collect();
    let valued_longs: Vec<String> = cp
        .get_arguments()
        .chain(command.get_arguments())
        .filter(|a| a.get_action().takes_values())
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    if let Some(answer) = rsync_habits::unsupported(args, &shorts, &valued_longs) {
        eprintln!("sprat: error: {answer}");
        std::process::exit(2);
    }
}

/// An error and its causes on one line, each cause once: errors that show their source in
/// their own text (a file error names its OS error) add nothing when the chain repeats it.
fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Diagnostics (`tracing`) go to stderr: none by default, so that what a command prints is
/// unchanged; the first `-v` is `cp`'s list of files, `-vv` info, `-vvv` debug; `RUST_LOG`
/// overrides them.
fn init_diagnostics(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 | 1 => "off",
        2 => "sprat=info,sprat_engine=info",
        _ => "sprat=debug,sprat_engine=debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// Raises the soft limit on open files to the hard limit (often 1024 against 500,000 or
/// more): readers, writers and streams each hold descriptors, and a limit hit mid-transfer is
/// a failure, not a slowdown.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        let _ = setrlimit(Resource::Nofile, raised);
    }
}

/// Lets created files get exactly the permission bits of their source, as `cp -a` and
/// `rsync -a` do; sprat never creates anything with wider bits than the source's.
pub fn preserve_modes_exactly() {
    sprat_engine::clear_umask();
}

fn run(cli: Cli, cp_matches: Option<&clap::ArgMatches>) -> anyhow::Result<i32> {
    match cli.command {
        Command::Serve(a) => serve(a),
        Command::Cp(a) => cp(*a, cp_matches, cli.verbose > 0),
        Command::Verify(a) => verify(a),
        Command::Plan(a) => shards::plan(a),
        Command::Relay(a) => relay::run(a),
        Command::Doctor(mut a) => {
            let urls: Vec<&OsStr> = a.url.iter().map(OsString::as_os_str).collect();
            let c = client(&a.connect, &urls)?;
            a.url = c.urls.into_iter().next();
            doctor::run(a, c.key)
        }
        Command::Ls(mut a) => {
            let c = client(&a.connect, &[&a.url])?;
            a.url = c.url(0);
            namespace::ls(&a, &c.key)
        }
        Command::Stat(mut a) => {
            let c = client(&a.connect, &[&a.url])?;
            a.url = c.url(0);
            namespace::stat(&a, &c.key)
        }
        Command::Du(mut a) => {
            let c = client(&a.connect, &[&a.url])?;
            a.url = c.url(0);
            namespace::du(&a, &c.key)
        }
        Command::Mkdir(mut a) => {
            let c = client(&a.connect, &[&a.url])?;
            a.url = c.url(0);
            namespace::mkdir(&a, &c.key)
        }
        Command::Rm(mut a) => {
            let c = client(&a.connect, &[&a.url])?;
            a.url = c.url(0);
            namespace::rm(&a, &c.key)
        }
        Command::Mv(mut a) => {
            let c = client(&a.connect, &[&a.from, &a.to])?;
            (a.from, a.to) = (c.url(0), c.url(1));
            namespace::mv(&a, &c.key)
        }
        Command::Sum(mut a) => {
            let c = client(&a.connect, &[&a.url])?;
            a.url = c.url(0);
            namespace::sum(&a, &c.key)
        }
        Command::Demo(a) => demo::run(a),
        Command::Gen(a) => gen::run(a),
        Command::Bench(c) => bench::run(c),
        Command::Model(a) => model::run(a),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            // Made in memory first: clap_complete panics when its output fails, and a closed
            // pipe (`sprat completions zsh | head`) is no error.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "sprat", &mut script);
            print_quietly(&String::from_utf8_lossy(&script))?;
            Ok(0)
        }
        Command::Man { dir } => man_pages(&dir),
    }
}

/// Turns tuning flags into engine options (validated by the engine) for a transfer over the
/// `network` or between local file systems.
pub fn options(t: &Tuning, streams: Option<usize>, network: bool) -> TransferOptions {
    TransferOptions {
        streams,
        tcp_buffer: t.tcp_buffer.0,
        batch_size: t.batch_size.0.unwrap_or(if network {
            sprat_engine::config::NETWORK_BATCH_SIZE
        } else {
            sprat_engine::config::LOCAL_BATCH_SIZE
        }),
        batch_files: t.batch_files,
        small_file_threshold: t.small_file_threshold,
        chunk_size: t.chunk_size,
        scan_threads: t.scan_threads,
        read_threads: t.read_threads,
        write_threads: t.write_threads,
        durable: t.durable,
        io_backend: match t.io {
            args::IoChoice::Threads => IoBackend::Threads,
            args::IoChoice::Uring => IoBackend::Uring,
        },
        read_order: match t.read_order {
            args::OrderChoice::Inode => ReadOrder::Scan,
            args::OrderChoice::Physical => ReadOrder::Physical,
        },
        publish: match t.publish {
            args::PublishArg::Auto => PublishChoice::Auto,
            args::PublishArg::Rename => PublishChoice::Rename,
        },
        keep_setid: t.keep_setuid,
        keep_devices: t.keep_devices,
        owners: !t.no_owners,
        numeric_ids: t.numeric_ids,
        skip: SkipRule::QuickCheck,
        delete: false,
        slow_start_opening: network,
        ..TransferOptions::default()
    }
}

/// A client command's servers and credentials: its URL arguments with aliases of the
/// configuration file resolved (`sprat://ALIAS/PATH`), the credentials for them, and the
/// file's defaults.
pub struct Client {
    pub urls: Vec<OsString>,
    pub key: Credentials,
    pub config: ClientConfig,
}

impl Client {
    /// The `i`th URL as resolved.
    pub fn url(&self, i: usize) -> OsString {
        self.urls.get(i).cloned().unwrap_or_default()
    }
}

/// Reads the configuration file (`--config`, `SPRAT_CONFIG` or the default one), resolves
/// the aliases among `urls` and gathers the credentials (see [`credentials`]).
pub fn client(c: &ConnectArgs, urls: &[&OsStr]) -> anyhow::Result<Client> {
    let config = ClientConfig::load(c.config.as_deref())?;
    let mut resolved = Vec::with_capacity(urls.len());
    let mut aliases = Vec::new();
    for url in urls {
        let (url, alias) = config.resolve(url)?;
        resolved.push(url);
        aliases.extend(alias);
    }
    // A local copy needs no token: a missing default token file is then no error.
    let remote = resolved
        .iter()
        .any(|u| u.as_bytes().starts_with(b"sprat://"));
    let key = credentials(c, &config, &aliases, remote)?;
    Ok(Client {
        urls: resolved,
        key,
        config,
    })
}

/// What a client brings to its connections: the token and how it recognises servers, each
/// from the command line if given there, else from the configuration file. The general token
/// is `--token-file`'s, else `SPRAT_TOKEN`, else `[defaults] token_file`; a server named by
/// an alias gets its own `token_file` and `fingerprint` unless `--token-file` and
/// `--server-fingerprint` say otherwise. The file's default token is read only for a command
/// that talks to a server (`remote`).
pub fn credentials(
    c: &ConnectArgs,
    config: &ClientConfig,
    aliases: &[(&str, &ServerAlias)],
    remote: bool,
) -> anyhow::Result<Credentials> {
    let defaults = &config.defaults;
    let token = match (token(c.token_file.as_deref())?, &defaults.token_file) {
        (Some(t), _) => Some(t),
        (None, Some(file)) if remote => Some(config_token(config, "defaults", file)?),
        (None, _) => None,
    };
    let pins = c
        .server_fingerprint
        .iter()
        .map(|f| {
            Fingerprint::parse(f).map_err(|why| anyhow::anyhow!("--server-fingerprint: {why}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let known = c
        .known_servers
        .clone()
        .or_else(|| defaults.known_servers.clone())
        .or_else(KnownServers::default_path)
        .map(|p| std::sync::Arc::new(KnownServers::new(p)));
    let trust = Trust {
        encrypt: !(c.no_encryption || defaults.no_encryption == Some(true)),
        pins,
        known,
    };
    let mut key = Credentials::new(token, trust);
    let mut seen: Vec<(&str, &ServerAlias)> = Vec::new();
    for &(name, alias) in aliases {
        // One server, one token and one key: two aliases of it must agree.
        if let Some((other, first)) = seen
            .iter()
            .find(|(_, a)| a.addr.eq_ignore_ascii_case(&alias.addr))
        {
            if first.token_file != alias.token_file || first.fingerprint != alias.fingerprint {
                anyhow::bail!(TransferError::Usage(format!(
                    "the aliases '{other}' and '{name}' name one server, {}, with different \
                     token files or fingerprints: a command uses one token and one key per \
                     server",
                    alias.addr
                )));
            }
            continue;
        }
        seen.push((name, alias));
        let token = match (&c.token_file, &alias.token_file) {
            (None, Some(file)) => Some(config_token(config, &format!("servers.{name}"), file)?),
            _ => None,
        };
        let pins = match (c.server_fingerprint.is_empty(), alias.fingerprint) {
            (true, Some(f)) => vec![f],
            _ => Vec::new(),
        };
        key = key.with_server(&alias.addr, ServerAccess { token, pins });
    }
    Ok(key)
}

/// Reads the token file a configuration file's `[table]` names in its key `token_file`.
fn config_token(config: &ClientConfig, table: &str, file: &Path) -> anyhow::Result<TokenKey> {
    let shown = printable(&file.display().to_string()).into_owned();
    let raw = std::fs::read(file)
        .map_err(|e| config.error(table, "token_file", &format!("cannot read '{shown}': {e}")))?;
    if raw.trim_ascii().is_empty() {
        return Err(config.error(table, "token_file", &format!("'{shown}' is empty")));
    }
    warn_if_readable_by_others(file, "token file");
    Ok(TokenKey::from_token(raw.trim_ascii()))
}

/// How `[USER@]HOST:PATH` arguments are reached (`-e/--rsh` or `SPRAT_RSH`,
/// `--remote-sprat`, `--via-ssh`).
pub fn ssh_options(a: &args::SshArgs) -> anyhow::Result<sprat_engine::ssh::SshOptions> {
    let env = std::env::var("SPRAT_RSH").ok();
    Ok(sprat_engine::ssh::SshOptions::new(
        a.rsh.as_deref(),
        env.as_deref(),
        a.remote_sprat.as_deref(),
        a.via_ssh,
    )?)
}

/// Reads the token from `--token-file` or `SPRAT_TOKEN`; `None` when neither is given.
pub fn token(file: Option<&Path>) -> anyhow::Result<Option<TokenKey>> {
    Ok(read_token(file)?.map(|t| TokenKey::from_token(&t.secret)))
}

/// Fewest bytes a server's token may have: the token is the only key to the server, and a
/// short one can be guessed.
pub(crate) const MIN_TOKEN_LEN: usize = 16;

/// A token and where it came from, in words for messages.
struct Token {
    secret: Vec<u8>,
    from: String,
}

/// Reads the token (surrounding white space removed) from `--token-file` or `SPRAT_TOKEN`;
/// `None` when neither is given. A token file that group or others may read is reported on
/// stderr (the copy is not refused: the file is the operator's).
fn read_token(file: Option<&Path>) -> anyhow::Result<Option<Token>> {
    let (raw, from) = match file {
        Some(f) => {
            let shown = printable(&f.display().to_string()).into_owned();
            let raw =
                std::fs::read(f).with_context(|| format!("cannot read token file '{shown}'"))?;
            warn_if_readable_by_others(f, "token file");
            (raw, format!("token file '{shown}' (--token-file)"))
        }
        None => match std::env::var_os("SPRAT_TOKEN") {
            Some(v) => (
                std::os::unix::ffi::OsStrExt::as_bytes(v.as_os_str()).to_vec(),
                "SPRAT_TOKEN (environment)".to_string(),
            ),
            None => return Ok(None),
        },
    };
    let secret = raw.trim_ascii();
    if secret.is_empty() {
        anyhow::bail!("the {from} is empty");
    }
    Ok(Some(Token {
        secret: secret.to_vec(),
        from,
    }))
}

/// Warns on stderr when group or others may read the file at `path`, which holds a token
/// (`what` names it: "token file", "config file").
pub(crate) fn warn_if_readable_by_others(path: &Path, what: &str) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o044 != 0 {
        let shown = printable(&path.display().to_string()).into_owned();
        eprintln!(
            "sprat: warning: {what} '{shown}' holds a token and can be read by group or others \
             (mode {mode:04o}): anyone who reads it can use the server; chmod 600 '{shown}'"
        );
    }
}

/// Most connections a server serves at once unless told otherwise.
const DEFAULT_MAX_CONNECTIONS: usize = 64;

fn serve(a: ServeArgs) -> anyhow::Result<i32> {
    let opts = options(&a.tuning, None, true);
    opts.validate()?;
    if a.tuning.keep_devices && !rustix::process::geteuid().is_root() {
        eprintln!(
            "sprat: note: --keep-devices changes nothing here: only a server running as root \
             can create device files (clients are told \"not kept: N device files\")"
        );
    }
    // What is exported, where to listen and what errors name it as.
    let (exports, listen, max_connections, key_file, what) = match &a.config {
        Some(file) => {
            let c = serve_config::read(file)?;
            let listen = a.listen.or(c.listen).ok_or_else(|| {
                anyhow::anyhow!(
                    "config '{}': no address to listen on: set key 'listen' or give --listen",
                    file.display()
                )
            })?;
            let max = a.max_connections.or(c.max_connections);
            let key_file = a.key_file.clone().or(c.key_file);
            let what = format!("the exports of config '{}'", file.display());
            (ExportsConfig::Named(c.exports), listen, max, key_file, what)
        }
        None if a.one_shot => {
            let Some(root) = &a.root else {
                anyhow::bail!("--one-shot needs --root DIR");
            };
            let key = TokenKey::from_token(&one_shot::read_token()?);
            let listen = a.listen.unwrap_or_else(|| {
                one_shot::default_listen(std::env::var("SSH_CONNECTION").ok().as_deref())
            });
            let exports = ExportsConfig::Default {
                root: root.clone(),
                read_only: a.read_only,
                key: Some(key),
            };
            let what = format!("'{}'", root.display());
            (exports, listen, a.max_connections, None, what)
        }
        None => {
            let (Some(root), Some(listen)) = (&a.root, a.listen) else {
                anyhow::bail!("give --root DIR and --listen HOST:PORT, or --config FILE");
            };
            let token = read_token(a.token_file.as_deref())?;
            if let Some(t) = &token {
                if t.secret.len() < MIN_TOKEN_LEN {
                    anyhow::bail!(
                        "the {} holds a token of {} bytes: a server's token must have at least \
                         {MIN_TOKEN_LEN} (make one with `head -c 32 /dev/urandom | base64 > \
                         token`)",
                        t.from,
                        t.secret.len()
                    );
                }
            }
            let key = token.map(|t| TokenKey::from_token(&t.secret));
            if key.is_none() && !a.no_auth {
                anyhow::bail!(
                    "no token: pass --token-file FILE or set SPRAT_TOKEN (or --no-auth to let \
                     anyone in)"
                );
            }
            if key.is_some() && a.no_auth {
                anyhow::bail!("--no-auth conflicts with the token given; choose one");
            }
            let exports = ExportsConfig::Default {
                root: root.clone(),
                read_only: a.read_only,
                key,
            };
            let what = format!("'{}'", root.display());
            (exports, listen, a.max_connections, a.key_file.clone(), what)
        }
    };
    // A one-shot server's key lives as long as it does: its fingerprint travels over ssh.
    let (identity, key_file) = if a.one_shot {
        (
            ServerIdentity::ephemeral()?,
            Path::new("(memory)").to_path_buf(),
        )
    } else {
        let key_file = match key_file {
            Some(f) => f,
            None => ServerIdentity::default_path()?,
        };
        (ServerIdentity::load_or_create(&key_file)?, key_file)
    };
    let tls = ServerTls::new(&identity, a.no_encryption)
        .map_err(|e| anyhow::anyhow!("cannot set up TLS with '{}': {e}", key_file.display()))?;
    preserve_modes_exactly();
    let max_client_memory = a
        .max_client_memory
        .unwrap_or_else(sprat_engine::default_client_memory);
    if max_client_memory < sprat_engine::MIN_CLIENT_MEMORY {
        anyhow::bail!(TransferError::Usage(format!(
            "--max-client-memory must be at least {} MiB (one client may hold half of it, \
             which must take the largest batch)",
            sprat_engine::MIN_CLIENT_MEMORY >> 20
        )));
    }
    let max_connections = max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS).max(1);
    let per_address = a
        .max_connections_per_address
        .unwrap_or_else(|| sprat_engine::default_connections_per_address(max_connections));
    if per_address == 0 || per_address > max_connections {
        anyhow::bail!(TransferError::Usage(format!(
            "--max-connections-per-address must be between 1 and --max-connections \
             ({max_connections})"
        )));
    }
    let config = ServerConfig {
        exports,
        tls,
        options: opts,
        max_connections,
        max_connections_per_address: per_address,
        max_client_memory,
        idle_timeout: a.idle_timeout,
        third_party: !a.no_third_party,
    };
    let server = Server::bind(config, &listen.to_string())
        .with_context(|| format!("cannot serve {what}"))?;
    let addr = server.local_addr()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {addr}")?;
    writeln!(out, "fingerprint {}", identity.fingerprint)?;
    out.flush()?;
    drop(out);
    if a.one_shot {
        one_shot::exit_when_stdin_closes();
    }
    let stop = server.stop_handle()?;
    let Some(stopped) = stop_on_signal(stop, a.stop_timeout) else {
        anyhow::bail!("cannot catch SIGTERM and SIGINT");
    };
    server.run()?;
    // Stopped by a signal: once the transfers running have finished (or the grace ended).
    Ok(stopped.recv().unwrap_or(0))
}

/// The first SIGTERM or SIGINT stops `stop`'s server from accepting connections and lets
/// what it serves finish for `grace`; a second one stops it at once. The channel returned
/// gives the exit status once the server may stop.
fn stop_on_signal(
    stop: sprat_engine::StopHandle,
    grace: std::time::Duration,
) -> Option<std::sync::mpsc::Receiver<i32>> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).ok()?;
    let (done, stopped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut received = signals.forever();
        let Some(signal) = received.next() else {
            return;
        };
        let name = if signal == SIGINT {
            "SIGINT"
        } else {
            "SIGTERM"
        };
        let serving = stop.stop_accepting();
        if serving == 0 {
            eprintln!("sprat serve: stopping ({name}): no transfer running");
            let _ = done.send(0);
            return;
        }
        let count = |n: usize| sprat_engine::report::counted(n as u64, "connection", "connections");
        eprintln!(
            "sprat serve: stopping ({name}): accepting no new connection; waiting up to {} s \
             for {} to finish (a second signal stops at once)",
            grace.as_secs(),
            count(serving)
        );
        std::thread::spawn(move || {
            match stop.wait_drained(grace) {
                0 => eprintln!("sprat serve: stopped: every transfer finished"),
                left => eprintln!(
                    "sprat serve: stopped after {} s with {} still open (their clients resume \
                     when they run again)",
                    grace.as_secs(),
                    count(left)
                ),
            }
            let _ = done.send(0);
        });
        if let Some(again) = received.next() {
            eprintln!("sprat serve: stopped at once (a second signal)");
            std::process::exit(128 + again);
        }
    });
    Some(stopped)
}

/// `sprat cp SRC... DIR`, as cp and rsync take several sources (a shell glob): each goes
/// inside DIR under its own name, or, given with a trailing `/` (or naming a server's root),
/// its contents go into DIR itself, as with rsync. One copy after another, each with its
/// report; a source that fails does not stop the others, and the exit code is the worst.
fn cp_several(a: CpArgs, matches: Option<&clap::ArgMatches>, verbose: bool) -> anyhow::Result<i32> {
    if a.json || a.json_events || a.plan.is_some() || a.dry_run {
        anyhow::bail!(TransferError::Usage(
            "several sources are copied one after another: not with --json, --json-events, \
             --plan or --dry-run (give one SRC)"
                .into()
        ));
    }
    let mut paths: Vec<OsString> = [a.src.clone(), a.dst.clone()]
        .into_iter()
        .chain(a.more.iter().cloned())
        .collect();
    let dir = paths.pop().unwrap_or_default();
    let local_dir = !dir.as_bytes().starts_with(b"sprat://")
        && sprat_engine::ssh::SshTarget::parse(&dir).is_none();
    if local_dir && Path::new(&dir).exists() && !Path::new(&dir).is_dir() {
        anyhow::bail!(TransferError::Usage(format!(
            "destination '{}' is not a directory: with several sources, DST is the directory \
             they go into",
            printable(&dir.to_string_lossy())
        )));
    }
    // Each source's target, all found first: two sources of one name (`a/x b/x DIR`) would
    // have the second re-sync over the first, so they are refused, as cp refuses them.
    let targets: Vec<(OsString, Vec<u8>)> = paths
        .into_iter()
        .map(|src| {
            let target = target_inside(dir.as_bytes(), src.as_bytes());
            (src, target)
        })
        .collect();
    // `--delete` makes each target a copy of its source alone: a source whose contents go
    // into DIR itself (`a/`, `.`, a server's root) would delete what the others put there.
    let into_dir_itself = targets.iter().any(|(_, t)| t.as_slice() == dir.as_bytes());
    if a.delete && into_dir_itself {
        anyhow::bail!(TransferError::Usage(
            "--delete with several sources, one of them going into DIR itself (ending with /, \
             `.`, a server's root): each copy would delete what the others put there; copy \
             them one at a time, or name each so that it goes inside DIR"
                .into()
        ));
    }
    for (i, (src, target)) in targets.iter().enumerate() {
        let named = |t: &Vec<u8>| t.as_slice() != dir.as_bytes();
        if named(target) && targets[..i].iter().any(|(_, t)| t == target) {
            anyhow::bail!(TransferError::Usage(format!(
                "two sources would go to '{}' (the last: '{}'): copy them one at a time",
                printable(&String::from_utf8_lossy(target)),
                printable(&src.to_string_lossy())
            )));
        }
    }
    // Each goes to DIR/ as a copy of that one source would (to `DIR/NAME`, or into DIR
    // itself): so a symlink at `DIR/NAME` is refused there as it is for one source, and `HOST:`
    // stays the remote home.
    let mut into = dir.clone();
    if !names_a_directory_to_copy_into(dir.as_bytes()) {
        into.push("/");
    }
    let mut worst = 0;
    for (src, _) in targets {
        let mut one = a.clone();
        one.src = src;
        one.dst = into.clone();
        one.more.clear();
        let code = match cp(one, matches, verbose) {
            Ok(code) => code,
            Err(e) => {
                let line = error_line(&e);
                eprintln!("sprat: error: {}", printable(&line));
                e.downcast_ref::<TransferError>()
                    .map(|t| t.exit_code())
                    .unwrap_or(2)
            }
        };
        worst = worst.max(code);
    }
    Ok(worst)
}

/// Where `src` goes among several copied into `dir`: `dir/NAME`, NAME being the last name of
/// its path (of a URL's or `HOST:PATH`'s path part), or `dir` itself for a source that ends with
/// `/` or names a root.
fn target_inside(dir: &[u8], src: &[u8]) -> Vec<u8> {
    let path = match src.strip_prefix(b"sprat://") {
        Some(rest) => rest
            .iter()
            .position(|&b| b == b'/')
            .map_or(&b""[..], |i| &rest[i..]),
        None => src,
    };
    // `HOST:PATH` (as the copy itself reads it): the path after the host.
    let remote = sprat_engine::ssh::SshTarget::parse(OsStr::from_bytes(path));
    let path = remote.as_ref().map_or(path, |t| &t.path[..]);
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or_default();
    let mut target = dir.to_vec();
    if !name.is_empty() && name != b"." && name != b".." {
        if !target.ends_with(b"/") {
            target.push(b'/');
        }
        target.extend_from_slice(name);
    }
    target
}

/// Slowest `--bwlimit`: a 4 MiB chunk then takes 42 s, within the default --stall-timeout.
const MIN_BWLIMIT: f64 = 100_000.0;

fn cp(mut a: CpArgs, matches: Option<&clap::ArgMatches>, verbose: bool) -> anyhow::Result<i32> {
    if a.compress {
        anyhow::bail!(TransferError::Usage(format!(
            "-z/--compress: {}",
            rsync_habits::NO_COMPRESSION
        )));
    }
    if !a.more.is_empty() {
        return cp_several(a, matches, verbose);
    }
    if let Some(info) = &a.info {
        if info.split(',').all(|flag| flag == "progress2") {
            a.progress = true;
        } else {
            anyhow::bail!(TransferError::Usage(format!(
                "--info={info}: sprat takes rsync's --info=progress2 only (its --progress: the \
                 whole transfer's progress); -v lists each file as it completes"
            )));
        }
    }
    a.progress |= a.partial_progress;
    let plan = a.plan.as_deref().map(shards::open).transpose()?;
    let (selection, entries_of) = match (&plan, a.shard) {
        (Some(plan), Some(k)) => (shards::shard_selection(plan, k)?, Vec::new()),
        (Some(_), None) if !a.finish => anyhow::bail!(TransferError::Usage(
            "--plan needs --shard K (copy one shard) or --finish (once all are done)".into()
        )),
        _ => {
            let listed = selection::selection(&a, matches)?;
            (listed.selection, listed.entries_of)
        }
    };
    for arg in [&a.src, &a.dst] {
        let text = arg.to_string_lossy();
        if let Some(rest) = text.strip_prefix("sprat:").filter(|r| !r.starts_with("//")) {
            anyhow::bail!(TransferError::Usage(format!(
                "'{text}' is not a sprat URL (sprat://HOST:PORT/PATH): did you mean \
                 'sprat://{}'?",
                rest.trim_start_matches('/')
            )));
        }
    }
    let client = client(&a.connect, &[&a.src, &a.dst])?;
    let progress_default = apply_defaults(&mut a, &client.config.defaults, matches);
    // `HOST:PATH` arguments start their servers here, which live as long as `launched`.
    let urls = [client.url(0), client.url(1)];
    let launched =
        sprat_engine::ssh::resolve(&[&urls[0], &urls[1]], &client.key, &ssh_options(&a.ssh)?)?;
    let key = launched.credentials.clone();
    let (src, mut dst) = (launched.endpoints[0].clone(), launched.endpoints[1].clone());
    let named_dst = dst.clone();
    let over_ssh = !launched.servers.is_empty();
    preserve_modes_exactly();
    let network = !matches!((&src, &dst), (Endpoint::Local(_), Endpoint::Local(_)));
    if let Endpoint::Local(p) = &src {
        // As rsync -a: a symlink to a file is copied as the link; say so, since its data
        // is what someone naming it often wants (a link to a directory is followed).
        let link_to_file = std::fs::symlink_metadata(p).is_ok_and(|m| m.is_symlink())
            && std::fs::metadata(p).is_ok_and(|m| m.is_file());
        if let (true, Ok(target)) = (link_to_file, std::fs::read_link(p)) {
            eprintln!(
                "sprat: note: '{}' is a symbolic link: it is copied as the link (to '{}'), as \
                 rsync -a does; to copy the data, name the file it points to",
                printable(&p.display().to_string()),
                printable(&target.display().to_string())
            );
        }
    }
    if a.tuning.keep_setuid && matches!(dst, Endpoint::Remote { .. }) {
        eprintln!(
            "sprat: note: --keep-setuid keeps the bits in what this client writes (a pull); a \
             server keeps those of what it is sent only when it runs with `sprat serve \
             --keep-setuid`"
        );
    }
    if a.tuning.keep_devices && matches!(dst, Endpoint::Remote { .. }) {
        eprintln!(
            "sprat: note: --keep-devices creates devices in what this client writes (a pull); \
             a server creates those it is sent only when it runs as root with `sprat serve \
             --keep-devices`"
        );
    }
    let mut options = options(&a.tuning, a.streams.0, network);
    options.transport = launched.transport();
    options.hard_links = a.hard_links;
    options.reflink = a.reflink == args::ReflinkArg::Auto;
    options.xattrs = a.xattrs;
    options.acls = a.acls;
    options.skip = if a.checksum {
        SkipRule::Checksum
    } else if a.ignore_existing {
        SkipRule::IgnoreExisting
    } else if a.ignore_times {
        SkipRule::Never
    } else if a.size_only {
        SkipRule::SizeOnly
    } else if a.update {
        SkipRule::Update
    } else {
        SkipRule::QuickCheck
    };
    options.delete = a.delete;
    options.force_delete = a.force_delete;
    options.selection = list_entries_of(selection, &entries_of, &src, &key)?;
    if a.files_from.is_some() && !source_is_a_directory(&src, &key) {
        // rsync refuses it too; taken as "SRC's contents", the file went to DST itself
        // (review 2026-11-30 of the newest changes, F1).
        anyhow::bail!(TransferError::Usage(format!(
            "--files-from lists paths inside SRC, and '{}' is not a directory",
            printable(&launched.shown[0])
        )));
    }
    options.stall_timeout = a.stall_timeout;
    options.retry_for = a.retry_for;
    if a.one_file_system && matches!(src, Endpoint::Remote { .. }) {
        anyhow::bail!(TransferError::Usage(
            "-x/--one-file-system is for a local copy or a push: a pull's source is scanned by \
             its server, which does not take it"
                .into()
        ));
    }
    if let Some(rate) = a.bwlimit.map(|r| r.bytes_per_s()).filter(|&r| r > 0.0) {
        if rate < MIN_BWLIMIT {
            anyhow::bail!(TransferError::Usage(format!(
                "--bwlimit of {:.1} KB/s: the slowest rate is 100KB/s",
                rate / 1000.0
            )));
        }
        if matches!(
            (&src, &dst),
            (Endpoint::Remote { .. }, Endpoint::Remote { .. })
        ) {
            anyhow::bail!(TransferError::Usage(
                "--bwlimit does not apply to a copy between two servers (the source server \
                 sends to the other directly)"
                    .into()
            ));
        }
        options.bwlimit = Some(Pace::new(rate as u64));
        // A batch or chunk is paced whole: a session moving no byte while one has its time
        // is not stalled.
        let largest = options.chunk_size.max(options.batch_size).max(4 << 20);
        let paced = std::time::Duration::from_secs_f64(2.0 * largest as f64 / rate);
        if !options.stall_timeout.is_zero() {
            options.stall_timeout = options.stall_timeout.max(paced);
        }
    }
    // A copy follows at once unless this is a dry run or the end of a plan: then its
    // options are checked before DST is asked about, as a push's session is dialled
    // meanwhile (a dry run and `--finish` check theirs as before).
    let copy_follows = !(a.dry_run || plan.is_some() && a.finish);
    if copy_follows {
        options.validate()?;
    }
    // The rules as rsync matches them: against `NAME/PATH` where SRC goes to `DST/NAME`, and
    // against a single file's own name; SRC itself left out by them is not copied at all.
    if rules_leave_out_the_source(&a, &src, &key, &mut options)? {
        let shown = printable(&launched.shown[0]);
        eprintln!(
            "sprat: note: '{shown}' itself is left out by the --exclude/--include rules (as \
             rsync matches them, by its own name: SRC goes to DST/NAME, or is a single \
             file): nothing to copy"
        );
        let report = sprat_engine::Report::new(
            "copy",
            launched.shown[0].clone(),
            launched.shown[1].clone(),
            &Default::default(),
            std::time::Duration::ZERO,
            0,
            Default::default(),
        );
        let text = match (a.json || a.json_events, a.dry_run) {
            (false, _) => String::new(),
            (true, false) => serde_json::to_string(&report)? + "\n",
            (true, true) => {
                let nothing = sprat_engine::DryRun {
                    dry_run: true,
                    ..Default::default()
                };
                serde_json::to_string(&nothing)? + "\n"
            }
        };
        print_quietly(&text)?;
        return Ok(0);
    }
    // `DST/` (or `.`): SRC goes inside it, under its own name, as with cp, scp and rsync
    // (`SRC/ DST/`: its contents); a single file goes inside a DST that is a directory too.
    let found = sprat_engine::into_directory(
        &src,
        dst,
        &key,
        names_a_directory_to_copy_into(a.dst.as_bytes()),
        // With --files-from the listed paths are relative to SRC and land at the same paths
        // in DST whatever the slashes, as rsync's (review 2026-11-30 of protocol 23, F7:
        // `SRC DST/` put them in DST/NAME).
        names_its_contents(a.src.as_bytes()) || a.files_from.is_some(),
        copy_follows.then_some(sprat_engine::DialAhead {
            tcp_buffer: a.tuning.tcp_buffer.0,
            // `--delete` lists and removes at DST/NAME before the copy's session opens.
            server_checks_link: !a.delete,
            // Over ssh the destination is shown as named (see below), not as the server
            // found it.
            server_picks_dir: !over_ssh,
        }),
    )?;
    dst = found.endpoint;
    options.no_link_at_dst = found.link_left_to_server;
    options.dst_or_parent = found.or_parent_left_to_server;
    let (src_shown, mut dst_shown) = (launched.shown[0].clone(), launched.shown[1].clone());
    // Into `DST/`: shown as DST/NAME, where the copy goes.
    if let Some(name) = dst.name().filter(|_| dst != named_dst) {
        let name = String::from_utf8_lossy(&name);
        let dir = dst_shown.trim_end_matches('/');
        // `HOST:` is the remote home: `HOST:NAME`, not `HOST:/NAME`.
        let slash = if dir.ends_with(':') { "" } else { "/" };
        dst_shown = format!("{dir}{slash}{name}");
    }
    if verbose && !a.quiet && (!a.json || a.json_events) {
        // The source's own name: what `-v` shows for a single file copied.
        options.file_log = Some(file_log(a.json_events, src.name().unwrap_or_default()));
    }
    if let (Some(plan), true) = (&plan, a.finish) {
        // --json-events: the finish's one JSON line, as its only event.
        let json = a.json || a.json_events;
        return shards::finish(plan, &src, &dst, &key, &options, json, a.quiet);
    }
    if a.dry_run {
        let names = (src_shown.as_str(), dst_shown.as_str());
        return dry_run(&src, &dst, &key, &options, a.json, names);
    }
    let shown = || {
        use std::io::IsTerminal;
        a.progress
            || (!a.quiet
                && !a.json
                && progress_default.unwrap_or_else(|| {
                    std::io::stdout().is_terminal() && std::io::stderr().is_terminal()
                }))
    };
    let mode = if a.json_events {
        Some(progress::Mode::Json)
    } else if !shown() {
        None
    } else if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        Some(progress::Mode::Terminal)
    } else {
        // Asked for (`--progress`, `-P`) into a file or a pipe: whole lines, no escapes.
        Some(progress::Mode::Lines)
    };
    let reporter = mode.map(|m| {
        let selection = options.selection.clone();
        progress::start(
            m,
            options.progress.clone(),
            src.clone(),
            key.clone(),
            selection,
            options.hard_links,
        )
    });
    // A failed attempt's line starts on a line of its own, not behind the progress line.
    let clear = if mode == Some(progress::Mode::Terminal) {
        "\r\x1b[2K"
    } else {
        ""
    };
    let copied = sprat_engine::copy_retrying(&src, &dst, &key, &options, &mut |n| {
        eprintln!("{clear}sprat: {}", printable(&n.to_string()))
    });
    if let Some(r) = reporter {
        r.finish();
    }
    let mut report = copied.map_err(|e| launched.in_user_terms(e))?;
    if over_ssh {
        // The endpoints as the user named them, not the servers' addresses.
        report.source = src_shown;
        report.destination = dst_shown;
    }
    if plan.is_some() {
        // A planned path the source no longer has was removed after the plan: said, not a
        // failure that no run of the shard could ever fix.
        let gone = |f: &sprat_engine::report::Failure| {
            f.error.ends_with(sprat_engine::scan::LISTED_NOT_FOUND)
        };
        for f in report.failures.iter().filter(|f| gone(f)) {
            eprintln!(
                "sprat: note: {}: in the plan, but no longer at the source (removed since the plan)",
                printable(&f.path)
            );
        }
        let removed = report.failures.iter().filter(|f| gone(f)).count() as u64;
        report.failures.retain(|f| !gone(f));
        report.failed = report.failed.saturating_sub(removed);
    }
    for f in &report.failures {
        // The root of the copy (a single file's, or DST itself) by the name the user gave.
        let path = match f.path.as_str() {
            "" | "." => &report.destination,
            path => path,
        };
        eprintln!(
            "sprat: failed: {}: {}",
            printable(path),
            printable(&f.error)
        );
        if a.json_events {
            let event = serde_json::json!({"event": "failed", "path": f.path, "error": f.error});
            print_quietly(&format!("{event}\n"))?;
        }
    }
    if report.failed as usize > report.failures.len() {
        eprintln!(
            "sprat: failed: {} more not listed",
            report.failed as usize - report.failures.len()
        );
    }
    let text = if a.json || a.json_events {
        serde_json::to_string(&report)? + "\n"
    } else if a.quiet {
        String::new()
    } else {
        report.to_string()
    };
    print_quietly(&text)?;
    // A full destination is a fatal I/O error (exit 5) wherever it was met: writing a file,
    // or before a large one that could not fit was started (that one failed alone, and the
    // others went on).
    let full = report
        .failures
        .iter()
        .filter(|f| f.error.contains(NO_SPACE))
        .count();
    if full > 0 {
        eprintln!(
            "sprat: error: {}: its file system is full: {} did not fit; free space, then run \
             the same command again",
            printable(&report.destination),
            sprat_engine::report::counted(full as u64, "file", "files")
        );
        return Ok(5);
    }
    Ok(if report.failed > 0 { 1 } else { 0 })
}

/// How the OS says a file system is full (`ENOSPC`), as failures carry it.
const NO_SPACE: &str = "No space left on device";

/// Takes the options of `cp` that the command line leaves out from the configuration file's
/// `[defaults]`; returns its `progress` (shown always or never; `None`: on a terminal).
fn apply_defaults(
    a: &mut CpArgs,
    d: &client_config::Defaults,
    matches: Option<&clap::ArgMatches>,
) -> Option<bool> {
    let given = |id: &str| {
        matches.is_some_and(|m| m.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
    };
    let t = &mut a.tuning;
    macro_rules! take {
        ($($field:ident).+, $key:ident) => {
            if let Some(v) = d.$key.filter(|_| !given(stringify!($key))) {
                $($field).+ = v;
            }
        };
    }
    take!(a.streams, streams);
    take!(t.tcp_buffer, tcp_buffer);
    take!(t.batch_size, batch_size);
    take!(t.durable, durable);
    take!(t.numeric_ids, numeric_ids);
    take!(t.no_owners, no_owners);
    take!(t.keep_setuid, keep_setuid);
    take!(t.keep_devices, keep_devices);
    take!(a.hard_links, hard_links);
    take!(a.xattrs, xattrs);
    take!(a.acls, acls);
    take!(a.retry_for, retry_for);
    take!(a.stall_timeout, stall_timeout);
    if !given("bwlimit") && d.bwlimit.is_some() {
        a.bwlimit = d.bwlimit;
    }
    // -c, -I, --ignore-existing, --size-only and -u exclude each other: any of them
    // replaces the file's.
    let rules = [
        "checksum",
        "ignore_times",
        "ignore_existing",
        "size_only",
        "update",
    ];
    if !rules.iter().any(|r| given(r)) {
        take!(a.checksum, checksum);
    }
    d.progress.filter(|_| !given("progress"))
}

/// `sprat cp -v`: each completed file's path on stdout, escaped, or as a JSON event; the
/// source's own name (`single`) for a single file copied.
fn file_log(json: bool, single: Vec<u8>) -> FileLog {
    FileLog::new(move |path, logged| {
        let path = if path.is_empty() { &single[..] } else { path };
        let deleted = logged == sprat_engine::measurement::listing::Logged::Deleted;
        let line = if json {
            let event = serde_json::json!({
                "event": if deleted { "deleted" } else { "file" },
                "path": sprat_engine::relpath::display_bytes(path),
            });
            format!("{event}\n")
        } else {
            // As rsync -v says it.
            format!(
                "{}{}\n",
                if deleted { "deleting " } else { "" },
                printable(&sprat_engine::relpath::display_bytes(path))
            )
        };
        // A closed pipe (`sprat cp -v ... | head`) is not the copy's failure.
        let _ = print_quietly(&line);
    })
}

/// `sprat cp --dry-run`: what would be sent and fixed, one line each, then a summary.
fn dry_run(
    src: &Endpoint,
    dst: &Endpoint,
    key: &Credentials,
    options: &TransferOptions,
    json: bool,
    (src_shown, dst_shown): (&str, &str),
) -> anyhow::Result<i32> {
    let plan = sprat_engine::dry_run(src, dst, key, options)?;
    let text = if json {
        serde_json::to_string(&plan)? + "\n"
    } else {
        let mut text = String::new();
        for (path, action) in &plan.files {
            let verb = match action {
                sprat_engine::Action::Send => "send",
                sprat_engine::Action::Attrs => "attrs",
                sprat_engine::Action::Delete => "delete",
                sprat_engine::Action::Mkdir => "mkdir",
                sprat_engine::Action::Link => "link",
                sprat_engine::Action::Special => "special",
                sprat_engine::Action::Device => "device",
                sprat_engine::Action::Check => "check",
            };
            text.push_str(&format!("{verb} {}\n", printable(path)));
        }
        let specials = match plan.specials {
            0 => String::new(),
            n => format!(
                ", {}",
                sprat_engine::report::counted(n, "special file", "special files")
            ),
        };
        let check = match plan.check {
            0 => String::new(),
            n => format!(
                ", send {} for the destination to check below directories it cannot list",
                sprat_engine::report::counted(n, "file", "files")
            ),
        };
        text.push_str(&format!(
            "dry run {} -> {}: would send {} ({}), make {}{specials} and {}, set the \
             attributes of {}, leave {} up to date{check}{}; nothing was changed\n",
            printable(src_shown),
            printable(dst_shown),
            sprat_engine::report::counted(plan.send, "file", "files"),
            sprat_engine::report::human_bytes(plan.send_bytes),
            sprat_engine::report::counted(plan.mkdir, "directory", "directories"),
            sprat_engine::report::counted(plan.links, "symlink", "symlinks"),
            plan.attrs,
            plan.up_to_date,
            if options.delete {
                format!(", delete {}", plan.delete)
            } else {
                String::new()
            }
        ));
        text
    };
    print_quietly(&text)?;
    Ok(0)
}

/// [`print_quietly`] of bytes that need not be UTF-8 (names as they are).
pub(crate) fn print_bytes_quietly(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(TransferError::Local(format!("cannot write to standard output: {e}")).into()),
        Ok(()) => Ok(()),
    }
}

/// Writes to stdout; a closed pipe (`sprat ... | head`) is not an error. One that cannot be
/// written (a full disk under `> FILE`) is an I/O error, exit 5, not a usage error (review
/// 2026-11-30 of sprat in scripts, F3: exit 2 after a complete copy).
pub(crate) fn print_quietly(text: &str) -> anyhow::Result<()> {
    print_bytes_quietly(text.as_bytes())
}

fn verify(a: VerifyArgs) -> anyhow::Result<i32> {
    use sprat_engine::report::counted;
    // What is not a local directory is a mistake in the command, not a difference.
    for tree in [&a.a, &a.b] {
        let shown = tree.display();
        if tree.to_string_lossy().starts_with("sprat://") {
            anyhow::bail!(TransferError::Usage(format!(
                "'{shown}' is a server's: verify compares two local trees; to check a copy on \
                 a server, run the copy again with -c -n (nothing to send: identical), or \
                 compare `sprat sum -r` with sha256sum"
            )));
        }
        match std::fs::metadata(tree) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => anyhow::bail!(TransferError::Usage(format!(
                "'{shown}' is not a directory: verify compares two trees"
            ))),
            Err(e) => anyhow::bail!(TransferError::Usage(format!("'{shown}': {e}"))),
        }
    }
    let xattr = sprat_engine::compare::xattr_scopes;
    let also = sprat_engine::compare::AlsoCompare {
        xattrs: xattr(a.xattrs, a.acls),
        owners: a.owners,
        hard_links: a.hard_links,
    };
    // What was compared, so that "identical" claims no more.
    let mut compared = vec!["content", "modes", "mtimes", "symlinks"];
    for (on, what) in [
        (a.xattrs, "xattrs"),
        (a.acls, "ACLs"),
        (a.owners, "owners"),
        (a.hard_links, "hard links"),
    ] {
        if on {
            compared.push(what);
        }
    }
    match sprat_engine::compare::compare_trees_also(&a.a, &a.b, true, also) {
        Ok(s) => {
            let specials = match s.specials {
                0 => String::new(),
                n => format!("{}, ", counted(n, "special file", "special files")),
            };
            print_quietly(&format!(
                "identical: {}, {}, {}, {specials}{} (compared: {})\n",
                counted(s.files, "file", "files"),
                counted(s.dirs, "directory", "directories"),
                counted(s.symlinks, "symlink", "symlinks"),
                counted(s.bytes, "byte", "bytes"),
                compared.join(", ")
            ))?;
            Ok(0)
        }
        Err(diffs) => {
            for d in diffs {
                eprintln!("sprat: differs: {}", printable(&d.to_string()));
            }
            Ok(1)
        }
    }
}

/// `sprat man DIR`: `sprat.1` and `sprat-COMMAND.1` for each command, from the command
/// definitions (clap_mangen).
fn man_pages(dir: &Path) -> anyhow::Result<i32> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let cmd = <Cli as clap::CommandFactory>::command();
    let write = |name: &str, page: clap::Command| -> anyhow::Result<()> {
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(page).render(&mut out)?;
        std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))
    };
    for sub in cmd.get_subcommands() {
        let name = format!("sprat-{}", sub.get_name());
        let bin = format!("sprat {}", sub.get_name());
        write(&name, sub.clone().display_name(name.clone()).bin_name(bin))?;
    }
    write("sprat", cmd)?;
    Ok(0)
}

/// Whether DST was given as a directory to copy into: with a trailing `/` (`DIR/`,
/// `sprat://HOST/DIR/`, the `HOST:` of scp), or as `.` or `..` (here, the parent).
fn names_a_directory_to_copy_into(dst: &[u8]) -> bool {
    dst.ends_with(b"/")
        || dst.ends_with(b":")
        || dst == b"."
        || dst == b".."
        || dst.ends_with(b"/.")
        || dst.ends_with(b"/..")
}

/// `selection` with the entries one level down of each directory in `dirs` (paths relative
/// to `src`; empty: SRC itself) added to its `--files-from` list, as rsync copies a directory
/// listed as `DIR/` or `.`: read here, or asked of the source's server (one listing each). A
/// directory that is not there adds nothing (the list's own line for it fails as missing).
fn list_entries_of(
    selection: sprat_engine::config::Selection,
    dirs: &[Vec<u8>],
    src: &Endpoint,
    key: &sprat_engine::Credentials,
) -> anyhow::Result<sprat_engine::config::Selection> {
    let Some(listed) = selection.files_from.clone().filter(|_| !dirs.is_empty()) else {
        return Ok(selection);
    };
    let join = sprat_engine::relpath::join;
    let mut paths: Vec<Vec<u8>> = listed.to_vec();
    for dir in dirs {
        match src {
            Endpoint::Local(p) => {
                let at = p.join(std::ffi::OsStr::from_bytes(dir));
                // A symlink there is not followed, as a server's listing of it does not
                // (SRC itself, `.`, is taken as the copy takes it).
                let link =
                    !dir.is_empty() && std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_symlink());
                let Some(entries) = std::fs::read_dir(&at).ok().filter(|_| !link) else {
                    continue;
                };
                for e in entries {
                    let e =
                        e.with_context(|| format!("--files-from: listing '{}'", at.display()))?;
                    paths.push(join(dir, e.file_name().as_bytes()));
                }
            }
            Endpoint::Remote { addr, path, .. } => {
                let listed = sprat_engine::remote::list(addr, key, &join(path, dir), false, |e| {
                    if !e.path.is_empty() {
                        paths.push(join(dir, &e.path));
                    }
                });
                match listed {
                    Err(TransferError::Remote {
                        code: sprat_engine::ErrorCode::NotFound,
                        ..
                    })
                    | Ok(()) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    // The directories themselves stay listed; SRC itself (`.`) is the root, never a path.
    Ok(selection.with_files(paths))
}

/// Whether `src` is a directory (a local symlink to one counts, as the copy follows it; a
/// server is asked, and one that cannot say is taken at its word later by the copy).
fn source_is_a_directory(src: &Endpoint, key: &sprat_engine::Credentials) -> bool {
    match src {
        Endpoint::Local(p) => std::fs::metadata(p).map_or(true, |m| m.is_dir()),
        Endpoint::Remote { addr, path, .. } => sprat_engine::remote::stat(addr, key, path)
            .map_or(true, |e| e.kind != sprat_engine::NsKind::File),
    }
}

/// Whether SRC was given as its contents, as rsync reads `SRC/` and `SRC/.`.
fn names_its_contents(src: &[u8]) -> bool {
    src.ends_with(b"/") || src.ends_with(b"/.") || src == b"."
}

/// Sets `options`' rules to match as rsync's do where its transfer's root is SRC's parent:
/// SRC going to `DST/NAME` (`DST/`, or one of several sources), where the rules see SRC's
/// entries as `NAME/PATH` (`/NAME/keep` names `DST/NAME/keep`; before, the rules were
/// matched below SRC there too, and `--delete` removed what such a rule protects: review
/// 2026-11-30 of the filters, F1); and a single file, which the rules see by its name (they
/// were not applied to it at all, F2). Returns whether they leave out SRC itself: then
/// nothing is copied, as rsync copies nothing. A server is asked what SRC is only where that
/// decides it (a rule for directories alone, or one that would leave out a file). Not with
/// `--files-from` (its paths and the rules are relative to SRC, as rsync's) or a plan.
fn rules_leave_out_the_source(
    a: &CpArgs,
    src: &Endpoint,
    key: &sprat_engine::Credentials,
    options: &mut sprat_engine::TransferOptions,
) -> anyhow::Result<bool> {
    let selection = &options.selection;
    if selection.filter.is_empty() || selection.files_from.is_some() || a.plan.is_some() {
        return Ok(false);
    }
    let Some(name) = src.name() else {
        return Ok(false);
    };
    let into =
        names_a_directory_to_copy_into(a.dst.as_bytes()) && !names_its_contents(a.src.as_bytes());
    let based = selection.filter.clone().with_base(&name);
    let (as_file, as_dir) = (based.root_excluded(false), based.root_excluded(true));
    let kind_decides = match into {
        true => as_file != as_dir,
        false => as_file,
    };
    let is_dir = match kind_decides {
        false => None,
        true => Some(match src {
            Endpoint::Local(p) => std::fs::metadata(p).is_ok_and(|m| m.is_dir()),
            Endpoint::Remote { addr, path, .. } => sprat_engine::remote::stat(addr, key, path)
                .is_ok_and(|e| e.kind == sprat_engine::NsKind::Dir),
        }),
    };
    if into {
        options.selection.filter = based;
    }
    // Not asked (`None`): into `DST/` the rules leave out a file and a directory alike;
    // otherwise only a file is matched by its name.
    let left_out = match is_dir {
        Some(true) => into && as_dir,
        Some(false) => as_file,
        None => into && as_file,
    };
    // A source that is not there (or a server that cannot be reached) is not "left out":
    // the copy goes on and says what is wrong, as it would without rules.
    let there = || match src {
        Endpoint::Local(p) => p.symlink_metadata().is_ok(),
        Endpoint::Remote { addr, path, .. } => sprat_engine::remote::stat(addr, key, path).is_ok(),
    };
    Ok(left_out && there())
}
