//! `sprat cp`'s file selection options (`--exclude`, `--include`, `--exclude-from`,
//! `--include-from`, `--files-from`) turned into the engine's [`Selection`]: the rules in the
//! order given across all four options, rule files and lists read, every pattern checked.
//! Errors are one line naming the option and the pattern or file (exit 2). What the rules
//! mean is `sprat_store::filter`'s.

use crate::args::CpArgs;
use anyhow::{anyhow, bail};
use clap::ArgMatches;
use sprat_engine::config::{Filter, RuleKind, Selection};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// One rule as given, with where it came from (for messages).
struct Given {
    kind: RuleKind,
    pattern: Vec<u8>,
    from: String,
}

/// What `cp`'s selection options make: the selection, and the directories a `--files-from`
/// list names as `DIR/` or `.`, whose entries one level down it copies too, as rsync does
/// (added once the source is known: see `main::list_entries_of`).
pub struct Listed {
    pub selection: Selection,
    /// Paths relative to SRC (empty: SRC itself).
    pub entries_of: Vec<Vec<u8>>,
}

/// The selection `a`'s options make; `matches` are `cp`'s, for the order of the options.
pub fn selection<'a>(a: &'a CpArgs, matches: Option<&ArgMatches>) -> anyhow::Result<Listed> {
    if a.recursive && a.files_from.is_some() {
        // rsync's `-r --files-from` copies listed directories whole; sprat's list copies
        // what it names, a directory without its contents: refused rather than half done.
        anyhow::bail!(sprat_engine::TransferError::Usage(
            "-r with --files-from (rsync: listed directories with everything below them) is \
             not supported: --files-from copies what it lists, a directory without its \
             contents; list the files below it too (find DIR >> LIST), or copy the \
             directory on its own"
                .into()
        ));
    }
    // Every rule option's values with their positions on the command line.
    let at = |id: &str, n: usize| -> Vec<usize> {
        matches
            .and_then(|m| m.indices_of(id))
            .map(|i| i.collect())
            .unwrap_or_else(|| (0..n).collect())
    };
    let mut options: Vec<(usize, Source<'a>)> = Vec::new();
    let mut add = |id: &str, items: Vec<Source<'a>>| {
        let positions = at(id, items.len());
        options.extend(positions.into_iter().zip(items));
    };
    add(
        "exclude",
        a.exclude
            .iter()
            .map(|p| Source::Pattern(RuleKind::Exclude, p))
            .collect(),
    );
    add(
        "include",
        a.include
            .iter()
            .map(|p| Source::Pattern(RuleKind::Include, p))
            .collect(),
    );
    add(
        "exclude_from",
        a.exclude_from
            .iter()
            .map(|f| Source::File(RuleKind::Exclude, f))
            .collect(),
    );
    add(
        "include_from",
        a.include_from
            .iter()
            .map(|f| Source::File(RuleKind::Include, f))
            .collect(),
    );
    options.sort_by_key(|(i, _)| *i);
    let mut rules: Vec<Given> = Vec::new();
    for (_, source) in options {
        match source {
            Source::Pattern(kind, p) => {
                let option = match kind {
                    RuleKind::Exclude => "--exclude",
                    RuleKind::Include => "--include",
                };
                rules.push(Given {
                    kind,
                    pattern: p.as_bytes().to_vec(),
                    from: option.to_string(),
                });
            }
            Source::File(kind, file) => read_rules(kind, file, &mut rules)?,
        }
    }
    let filter = Filter::new(rules.iter().map(|r| (r.kind, &r.pattern))).map_err(|e| {
        let from = rules.get(e.index).map_or("a rule", |r| r.from.as_str());
        anyhow!("{from}: {e}")
    })?;
    let selection = Selection {
        filter,
        files_from: None,
        one_file_system: a.one_file_system,
    };
    let mut entries_of = Vec::new();
    let selection = match &a.files_from {
        Some(file) => selection.with_files(read_list(file, &mut entries_of)?),
        None => selection,
    };
    Ok(Listed {
        selection,
        entries_of,
    })
}

/// Where rules come from: an option's pattern, or a file of them.
enum Source<'a> {
    Pattern(RuleKind, &'a std::ffi::OsString),
    File(RuleKind, &'a Path),
}

fn option_of_file(kind: RuleKind) -> &'static str {
    match kind {
        RuleKind::Exclude => "--exclude-from",
        RuleKind::Include => "--include-from",
    }
}

/// Reads `file` (`-`: standard input) whole.
fn read(option: &str, file: &Path) -> anyhow::Result<Vec<u8>> {
    if file.as_os_str() == OsStr::new("-") {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut out)
            .map_err(|e| anyhow!("{option} -: cannot read standard input: {e}"))?;
        return Ok(out);
    }
    std::fs::read(file).map_err(|e| anyhow!("{option} '{}': cannot read: {e}", file.display()))
}

/// The lines of a rule file or list that count: blank lines and whole-line comments (`#`,
/// `;`) left out, a CR before the LF dropped.
fn lines(text: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    text.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with(b"#") && !l.starts_with(b";"))
}

/// Adds the rules of an `--exclude-from` or `--include-from` file, as rsync reads them: one
/// pattern per line, taken as the option's kind unless it starts with `- ` (exclude) or `+ `
/// (include); a line of just `!` clears the rules given so far.
fn read_rules(kind: RuleKind, file: &Path, rules: &mut Vec<Given>) -> anyhow::Result<()> {
    let option = option_of_file(kind);
    let text = read(option, file)?;
    for (n, line) in lines(&text) {
        if line == b"!" {
            rules.clear();
            continue;
        }
        let (kind, pattern) = match line {
            [b'-', b' ', rest @ ..] => (RuleKind::Exclude, rest),
            [b'+', b' ', rest @ ..] => (RuleKind::Include, rest),
            _ => (kind, line),
        };
        rules.push(Given {
            kind,
            pattern: pattern.to_vec(),
            from: format!("{option} '{}' line {n}", file.display()),
        });
    }
    Ok(())
}

/// The paths of a `--files-from` file.
fn read_list(file: &Path, entries_of: &mut Vec<Vec<u8>>) -> anyhow::Result<Vec<Vec<u8>>> {
    let text = read("--files-from", file)?;
    let mut list = Vec::new();
    for (n, line) in lines(&text) {
        let at = || format!("--files-from '{}' line {n}", file.display());
        if line.contains(&0) {
            bail!("{}: the path holds a NUL byte", at());
        }
        // rsync reads a directory listed as `DIR/` or `.` as the directory and its entries
        // one level down (see [`Listed::entries_of`]); `A/./B` as B copied to `B` (the `-R`
        // marker), which sprat refuses: it puts each listed path at the same path in DST
        // (review 2026-11-30 of the filters, F4).
        let shown = String::from_utf8_lossy(line);
        if line == b"." || line.ends_with(b"/") || line.ends_with(b"/.") {
            entries_of.push(sprat_engine::config::normalize_listed(line).unwrap_or_default());
        }
        if line.windows(3).any(|w| w == b"/./") {
            bail!(
                "{}: '{shown}' holds `/./`, rsync's mark of where the destination's path \
                 starts; sprat puts each listed path at the same path in DST: list it from \
                 that point, with SRC the directory above it",
                at()
            );
        }
        list.push(line.to_vec());
    }
    Ok(list)
}
