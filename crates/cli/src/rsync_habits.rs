//! rsync options that `sprat cp` does not take, each answered with what to do instead.
//!
//! Left to the argument parser, an unknown option gets its nearest spelling as a tip, which
//! for rsync's options is often another option altogether (`--stats` → `--streams`,
//! `--list-only` → `--size-only`). This looks at `sprat cp`'s arguments before they are
//! parsed and, for an rsync option sprat does not have, says what sprat does or offers
//! instead. Options sprat takes as rsync does (`-a`, `-P`, `-h`, `-rlptgoD`...) are in
//! `args.rs`; everything else is left to the parser.

use std::ffi::OsString;

/// What `-z`, `--compress` and `--compress-level` are answered.
pub const NO_COMPRESSION: &str = "sprat does not compress what it sends (on the fast networks \
     it is made for, compressing costs more time than it saves); leave it out";

/// rsync's long options sprat does not take, with their short letters, and what to say.
const ANSWERS: &[(&str, Option<char>, &str)] = &[
    (
        "stats",
        None,
        "sprat prints its report after every copy (--json for it as JSON, -q for none)",
    ),
    (
        "list-only",
        None,
        "to list a server's files use `sprat ls -l URL` (-R for the whole tree)",
    ),
    (
        "delete-excluded",
        None,
        "not supported: --delete keeps what --exclude rules leave out at the destination",
    ),
    (
        "filter",
        Some('F'),
        "rsync's filter rules are not supported: use --include, --exclude and --exclude-from, \
         which take the same patterns",
    ),
    (
        "cvs-exclude",
        Some('C'),
        "not supported: name what to leave out with --exclude rules",
    ),
    (
        "max-size",
        None,
        "not supported: sprat selects files by name (--include, --exclude, --files-from), \
         not by size",
    ),
    (
        "min-size",
        None,
        "not supported: sprat selects files by name (--include, --exclude, --files-from), \
         not by size",
    ),
    (
        "relative",
        Some('R'),
        "not supported: name the paths below SRC in a file for --files-from",
    ),
    (
        "inplace",
        None,
        "not needed: sprat writes each file under a hidden name and shows it only once it is \
         whole, and an interrupted large file resumes on the next run by itself",
    ),
    (
        "append",
        None,
        "not needed: an interrupted large file resumes on the next run by itself, from its \
         verified part",
    ),
    (
        "append-verify",
        None,
        "not needed: an interrupted large file resumes on the next run by itself, from its \
         verified part",
    ),
    (
        "timeout",
        None,
        "use --stall-timeout DURATION (e.g. --stall-timeout 60s): a copy that moves nothing \
         for that long fails (or reconnects, see --retry-for)",
    ),
    (
        "contimeout",
        None,
        "not supported: a connection that does not open fails after 10 s, and the copy tries \
         again for --retry-for",
    ),
    (
        "remove-source-files",
        None,
        "not supported: sprat never deletes from the source; remove it after a copy that \
         exits 0",
    ),
    (
        "link-dest",
        None,
        "not supported: sprat does not make hard-linked snapshots",
    ),
    (
        "compare-dest",
        None,
        "not supported: sprat compares with DST only",
    ),
    (
        "copy-dest",
        None,
        "not supported: sprat compares with DST only",
    ),
    (
        "backup",
        Some('b'),
        "not supported: sprat keeps no backups of the files it replaces",
    ),
    (
        "backup-dir",
        None,
        "not supported: sprat keeps no backups of the files it replaces",
    ),
    (
        "itemize-changes",
        Some('i'),
        "use -n (--dry-run) to list what a copy would send, or -v to list each file as it \
         completes",
    ),
    (
        "existing",
        None,
        "not supported: sprat copies every file DST lacks (--ignore-existing skips the ones \
         it has)",
    ),
    (
        "copy-links",
        Some('L'),
        "not supported: sprat copies symlinks as links, never what they point to",
    ),
    (
        "prune-empty-dirs",
        Some('m'),
        "not supported: sprat copies every directory the rules select, empty or not",
    ),
    (
        "chmod",
        None,
        "not supported: sprat copies the source's permission bits",
    ),
    (
        "delete-before",
        None,
        "use --delete (it removes what the source lacks before copying)",
    ),
    (
        "delete-during",
        None,
        "use --delete (it removes what the source lacks before copying)",
    ),
    (
        "delete-after",
        None,
        "use --delete (it removes what the source lacks before copying)",
    ),
    (
        "delete-delay",
        None,
        "use --delete (it removes what the source lacks before copying)",
    ),
    ("compress-level", None, NO_COMPRESSION),
    (
        "delete-missing-args",
        None,
        "not supported: with --files-from, a listed path the source lacks fails the copy \
         (exit 1); --delete removes what the source lacks from a directory",
    ),
    (
        "ignore-missing-args",
        None,
        "not supported: with --files-from, a listed path the source lacks fails the copy \
         (exit 1); remove it from the list",
    ),
    (
        "ignore-errors",
        None,
        "not needed: a file that fails is named in the report (exit 1) and the rest is \
         copied; --delete removes extras before copying",
    ),
    (
        "force",
        None,
        "not needed: --delete removes a directory with everything below it (with \
         --delete, --force-delete is sprat's: go on when DST shares no entry with SRC)",
    ),
    (
        "safe-links",
        None,
        "not supported: sprat copies symlinks as links, as they are, and never follows one",
    ),
    (
        "copy-unsafe-links",
        None,
        "not supported: sprat copies symlinks as links, as they are, and never follows one",
    ),
    (
        "copy-dirlinks",
        None,
        "not supported: sprat copies symlinks as links, as they are, and never follows one",
    ),
    (
        "keep-dirlinks",
        Some('K'),
        "not supported: a symlink at the destination is replaced, never followed",
    ),
    (
        "preallocate",
        None,
        "not needed: sprat writes each file whole, so file systems allocate it in few \
         extents",
    ),
    (
        "no-perms",
        None,
        "not supported: sprat always copies permission bits (the umask applies only to \
         the directories it makes above DST)",
    ),
    (
        "no-times",
        None,
        "not supported: sprat always copies mtimes (re-syncs compare them)",
    ),
    (
        "omit-dir-times",
        Some('O'),
        "not supported: sprat sets directories' mtimes as the source's",
    ),
    (
        "omit-link-times",
        Some('J'),
        "not needed: sprat sets symlinks' mtimes as the source's",
    ),
    ("no-owner", None, "use --no-owners (owners and groups)"),
    ("no-group", None, "use --no-owners (owners and groups)"),
    (
        "super",
        None,
        "not needed: owners and groups are copied when the writing side runs as root",
    ),
    (
        "fake-super",
        None,
        "not supported: owners are copied only where the writing side runs as root",
    ),
    (
        "chown",
        None,
        "sprat copies owners and groups by name when the writing side runs as root (by \
         number with --numeric-ids; --no-owners leaves them): no mapping",
    ),
    (
        "usermap",
        None,
        "sprat copies owners and groups by name when the writing side runs as root (by \
         number with --numeric-ids; --no-owners leaves them): no mapping",
    ),
    (
        "groupmap",
        None,
        "sprat copies owners and groups by name when the writing side runs as root (by \
         number with --numeric-ids; --no-owners leaves them): no mapping",
    ),
    (
        "fuzzy",
        Some('y'),
        "not supported: sprat sends whole files, with no delta against similar ones",
    ),
    (
        "no-whole-file",
        None,
        "not supported: sprat sends whole files (no delta transfer); a re-sync skips \
         the files that are up to date",
    ),
    (
        "max-delete",
        None,
        "not supported: see first what --delete would remove with -n (--dry-run); a \
         --delete that would empty DST is refused",
    ),
    (
        "modify-window",
        Some('@'),
        "not supported: mtimes are compared to the nanosecond the file systems \
         keep; onto one that rounds them, re-sync with --size-only",
    ),
    (
        "temp-dir",
        Some('T'),
        "not needed: each file is written where it goes, unnamed until it is whole",
    ),
    (
        "delay-updates",
        None,
        "not needed: each file appears whole or not at all",
    ),
    (
        "partial-dir",
        None,
        "not needed: an interrupted large file resumes on the next run from a hidden \
         partial file beside it",
    ),
    (
        "log-file",
        None,
        "-v lists each file as it completes; --json-events prints the transfer's \
         events as JSON lines",
    ),
    (
        "out-format",
        None,
        "-v lists each file as it completes; --json-events prints the transfer's \
         events as JSON lines",
    ),
    (
        "8-bit-output",
        Some('8'),
        "not supported: names that are not UTF-8 are printed with \\xNN escapes",
    ),
    (
        "ipv4",
        Some('4'),
        "give the address in the URL (sprat://192.0.2.1/PATH or sprat://[2001:db8::1]/PATH)",
    ),
    (
        "ipv6",
        Some('6'),
        "give the address in the URL (sprat://192.0.2.1/PATH or sprat://[2001:db8::1]/PATH)",
    ),
    (
        "address",
        None,
        "not supported: the system chooses the local address",
    ),
    (
        "checksum-choice",
        None,
        "sprat always checks content with XXH3-128 (-c compares by it)",
    ),
    (
        "from0",
        Some('0'),
        "not supported: --files-from reads one path per line",
    ),
    (
        "dirs",
        Some('d'),
        "not supported: sprat copies whole trees; choose what with --include and \
         --exclude",
    ),
    (
        "crtimes",
        Some('N'),
        "not supported: sprat copies mtimes, not creation times",
    ),
    (
        "atimes",
        Some('U'),
        "not supported: sprat copies mtimes, not access times",
    ),
    ("open-noatime", None, "not supported"),
    (
        "write-batch",
        None,
        "not supported: sprat has no batch files (see --plan for a transfer split into \
         shards)",
    ),
    (
        "only-write-batch",
        None,
        "not supported: sprat has no batch files",
    ),
    (
        "read-batch",
        None,
        "not supported: sprat has no batch files",
    ),
    (
        "stop-after",
        None,
        "not supported: stop the copy with Ctrl-C; the same command resumes it",
    ),
    (
        "stop-at",
        None,
        "not supported: stop the copy with Ctrl-C; the same command resumes it",
    ),
    ("copy-as", None, "not supported: run sprat as that user"),
    (
        "iconv",
        None,
        "not supported: names are copied as the bytes they are",
    ),
    ("debug", None, "use -v, -vv or -vvv"),
    (
        "no-motd",
        None,
        "not needed: a sprat server prints no message of the day",
    ),
    ("outbuf", None, "not supported"),
    (
        "msgs2stderr",
        None,
        "not needed: sprat's messages go to standard error",
    ),
    (
        "password-file",
        None,
        "use --token-file FILE (or the SPRAT_TOKEN environment variable)",
    ),
    (
        "port",
        None,
        "give the port in the URL: sprat://HOST:PORT/PATH",
    ),
];

/// `args` (the whole command line) with `-h` as `--help` where it is the only argument of a
/// command whose `-h` is rsync's or ls's --human-readable (`sprat cp -h`, as `rsync -h`).
/// Global options before the command (`sprat -v cp -h`) are allowed.
pub fn lone_h_is_help(mut args: Vec<OsString>) -> Vec<OsString> {
    let Some(at) = args
        .iter()
        .skip(1)
        .position(|a| !a.to_string_lossy().starts_with('-'))
        .map(|i| i + 1)
    else {
        return args;
    };
    if args.len() == at + 2
        && ["cp", "ls", "du"].iter().any(|c| args[at] == *c)
        && args[at + 1] == "-h"
    {
        args[at + 1] = "--help".into();
    }
    args
}

/// A word on the command line's shape when it has no command where one must come first, as
/// when rsync's or scp's habit is typed (`sprat -av SRC DST`, `sprat SRC DST`): `commands`
/// are sprat's command names, `globals` the options allowed before one. `None` when the line
/// starts well (or is left to the parser: `sprat`, `sprat --help`).
pub fn missing_command(
    args: &[OsString],
    commands: &[String],
    globals: &[String],
) -> Option<String> {
    let first = args.get(1)?.to_string_lossy();
    let is_global = |a: &str| {
        globals.iter().any(|g| g == a) || a.trim_start_matches('-').chars().all(|c| c == 'v')
    };
    if first.starts_with('-') {
        if is_global(&first) || args.len() < 4 {
            return None;
        }
        return Some(format!(
            "a command comes first, then its options: to copy, `sprat cp {first} SRC DST` \
             (`sprat --help` lists the commands)"
        ));
    }
    // A path (`./data`, `run.tar`, `host:dir`) or a word followed by two more (`sync a b`);
    // a lone mistyped command (`lss URL`) is left to the parser, which names the nearest.
    let looks_like_a_path = first.contains(['/', '.', ':']);
    if commands.iter().any(|c| *c == first)
        || !(looks_like_a_path && args.len() >= 3 || args.len() >= 4)
    {
        return None;
    }
    Some(format!(
        "'{first}' is not a sprat command: to copy, `sprat cp [OPTIONS] SRC DST` (`sprat \
         --help` lists the commands)"
    ))
}

/// The message for the first rsync option in `args` (the whole command line) that `sprat cp`
/// does not take, if its arguments have one. `cp_shorts` are the short options `sprat cp`
/// has (so that they are not mistaken for rsync's), each with whether it takes a value.
pub fn unsupported(
    args: &[OsString],
    cp_shorts: &[(char, bool)],
    cp_valued_longs: &[String],
) -> Option<String> {
    let at = args
        .iter()
        .skip(1)
        .position(|a| !a.to_string_lossy().starts_with('-'))?
        + 1;
    if args[at] != "cp" {
        return None;
    }
    let mut value_next = false;
    for arg in args[at + 1..].iter().map(|a| a.to_string_lossy()) {
        // The value of the option before (`--exclude --stats` excludes a name).
        if std::mem::take(&mut value_next) {
            continue;
        }
        if arg == "--" {
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or(long);
            if let Some((_, _, answer)) = ANSWERS.iter().find(|(n, _, _)| *n == name) {
                return Some(format!("--{name} is rsync's: {answer}"));
            }
            value_next = !long.contains('=') && cp_valued_longs.iter().any(|v| v == name);
        } else if let Some(cluster) = arg.strip_prefix('-') {
            for (i, letter) in cluster.char_indices() {
                match cp_shorts.iter().find(|(c, _)| *c == letter) {
                    // The rest of the cluster is this option's value, or the next argument.
                    Some((_, true)) => {
                        value_next = i + letter.len_utf8() == cluster.len();
                        break;
                    }
                    Some((_, false)) => continue,
                    None => {}
                }
                if let Some((name, _, answer)) =
                    ANSWERS.iter().find(|(_, short, _)| *short == Some(letter))
                {
                    return Some(format!("-{letter} (--{name}) is rsync's: {answer}"));
                }
                break;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str) -> Option<String> {
        let args: Vec<OsString> = line.split(' ').map(OsString::from).collect();
        unsupported(
            &args,
            &[('a', false), ('v', false), ('e', true), ('h', false)],
            &["exclude".to_string(), "rsh".to_string()],
        )
    }

    #[test]
    fn an_rsync_option_sprat_lacks_is_answered_by_name() {
        let said = check("sprat cp --stats src dst").unwrap_or_default();
        assert!(
            said.starts_with("--stats is rsync's: sprat prints its report"),
            "{said}"
        );
        let said = check("sprat -v cp --max-size=10M src dst").unwrap_or_default();
        assert!(said.starts_with("--max-size is rsync's"), "{said}");
        let said = check("sprat cp -avL / backup").unwrap_or_default();
        assert!(said.starts_with("-L (--copy-links) is rsync's"), "{said}");
        // Not the parser's nearest spelling, which names another option altogether.
        for (line, answer) in [
            ("sprat cp --max-delete=10 a b", "-n (--dry-run)"),
            ("sprat cp --no-owner a b", "--no-owners"),
            ("sprat cp -aT /tmp a b", "unnamed until it is whole"),
            ("sprat cp --modify-window 1 a b", "--size-only"),
        ] {
            let said = check(line).unwrap_or_default();
            assert!(said.contains(answer), "{line}: {said}");
        }
    }

    #[test]
    fn a_line_without_its_command_is_told_how_to_copy() {
        let args = |line: &str| line.split(' ').map(OsString::from).collect::<Vec<_>>();
        let commands = ["cp".to_string(), "ls".to_string()];
        let globals = ["--help".to_string(), "--version".to_string()];
        let said = |line: &str| missing_command(&args(line), &commands, &globals);
        assert!(said("sprat -av src dst").is_some_and(|m| m.contains("sprat cp -av SRC DST")));
        assert!(said("sprat src/ dst").is_some_and(|m| m.contains("'src/' is not a sprat command")));
        assert!(said("sprat sync a b").is_some());
        for fine in [
            "sprat cp a b",
            "sprat -v cp a b",
            "sprat --help",
            "sprat",
            "sprat lss x",
        ] {
            assert_eq!(said(fine), None, "{fine}");
        }
    }

    #[test]
    fn a_lone_h_asks_for_help() {
        let args = |line: &str| line.split(' ').map(OsString::from).collect::<Vec<_>>();
        assert_eq!(lone_h_is_help(args("sprat cp -h")), args("sprat cp --help"));
        assert_eq!(
            lone_h_is_help(args("sprat -vv cp -h")),
            args("sprat -vv cp --help")
        );
        assert_eq!(lone_h_is_help(args("sprat -h")), args("sprat -h"));
        assert_eq!(
            lone_h_is_help(args("sprat cp -h a b")),
            args("sprat cp -h a b")
        );
        assert_eq!(lone_h_is_help(args("sprat rm -h")), args("sprat rm -h"));
    }

    #[test]
    fn sprat_options_values_and_other_commands_are_left_to_the_parser() {
        assert_eq!(check("sprat cp -avh src dst"), None);
        // -e takes the rest of its cluster as its value: `-essh -x` is not read as -x.
        assert_eq!(check("sprat cp -exi src dst"), None);
        assert_eq!(check("sprat cp src dst -- --stats"), None);
        assert_eq!(check("sprat ls --stats"), None);
        assert_eq!(check("sprat cp --streams 4 src dst"), None);
        // Values of options, however they look.
        assert_eq!(check("sprat cp --exclude --stats src dst"), None);
        assert_eq!(check("sprat cp -e --stats src dst"), None);
        assert!(check("sprat cp --rsh=x --stats src dst").is_some());
    }
}
