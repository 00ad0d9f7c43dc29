//! Which paths of a source a transfer selects: rsync's include/exclude rules (`--exclude`,
//! `--include` and their `-from` files) and a list of paths (`--files-from`).
//!
//! Pure logic on relative paths (no I/O): the scanner asks [`Filter::excluded`] of every entry
//! it finds and does not descend into an excluded directory; `--delete` asks
//! [`Filter::protected`] of the destination's entries. Not for: reading rule files or parsing
//! command lines (the binary does that), or the wire form of the rules (`sprat-proto`).
//!
//! The semantics are rsync's "INCLUDE/EXCLUDE PATTERN RULES" (its `exclude.c` and
//! `wildmatch.c`):
//! - rules are tried in order and the first that matches decides; a path no rule matches is
//!   included;
//! - a pattern ending in `/` matches only a directory;
//! - a pattern starting with `/` is anchored at the root of the transfer; otherwise a pattern
//!   without a `/` (a trailing one aside) and without `**` is matched against the last
//!   component of the path, and one with an inner `/` or with `**` against the end of the
//!   path at a component boundary (one starting with `**` against the whole path with a `/`
//!   in front);
//! - `*` matches any run of bytes but `/`, `**` any run including `/`, `?` one byte but `/`,
//!   `[...]` one byte of a class (`!` or `^` negates it, ranges and `[:alpha:]`-style
//!   classes; never `/`); a backslash escapes the next byte, but only in a pattern with a
//!   wildcard in it (elsewhere it is an ordinary byte);
//! - a pattern ending in `***` also matches the directory it names: `dir/***` is `dir/` and
//!   `dir/**` in one rule.
//!
//! Matching is on bytes (names need not be UTF-8), each rule compiled once into an anchored
//! regular expression. globset was not used: its `**` matches whole components only and
//! `a/**/b` matches `a/b`, while rsync's `**` is any run of bytes, so that `/foo/**/bar` does not
//! match `foo/bar` (rsync's own example); and globset reads `{a,b}` as alternatives, which
//! rsync takes literally.

use regex::bytes::Regex;
use std::fmt::Write;
use std::sync::Arc;

/// Whether a rule includes or excludes what it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleKind {
    Include,
    Exclude,
}

/// A pattern that cannot be compiled: the pattern as given, its place among the rules
/// (from 0), and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad pattern '{pattern}': {why}")]
pub struct FilterError {
    pub pattern: String,
    pub index: usize,
    pub why: String,
}

/// What part of a path a rule is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    /// The last component.
    Name,
    /// The whole relative path.
    Path,
    /// `/` and the whole relative path (a pattern starting with `**`).
    RootedPath,
}

#[derive(Debug)]
struct Rule {
    kind: RuleKind,
    /// The pattern as given.
    pattern: Vec<u8>,
    subject: Subject,
    /// A trailing `/`: matches directories only.
    dir_only: bool,
    /// A trailing `***`: a directory is matched with a `/` after its path.
    wild3: bool,
    matcher: Matcher,
}

/// How a rule's subject is compared: a pattern without wildcards byte for byte (as rsync
/// does; a long list of names compiles at once), one with wildcards by a regular expression.
#[derive(Debug)]
enum Matcher {
    /// The subject is `bytes`, or (`tail`) ends with `/` and `bytes`.
    Literal {
        bytes: Vec<u8>,
        tail: bool,
    },
    Regex(Regex),
}

/// An ordered list of include/exclude rules; empty: everything is included. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    rules: Arc<[Rule]>,
    /// The name the rules see the transfer's root as (see [`Filter::with_base`]).
    base: Option<Arc<[u8]>>,
}

impl Filter {
    /// Compiles `rules`, in order. An empty pattern, an unbalanced `[`, an unknown `[:class:]`
    /// or a pattern ending in a lone backslash is an error naming the pattern.
    pub fn new<P: AsRef<[u8]>>(
        rules: impl IntoIterator<Item = (RuleKind, P)>,
    ) -> Result<Filter, FilterError> {
        let rules = rules
            .into_iter()
            .enumerate()
            .map(|(i, (kind, p))| Rule::compile(kind, p.as_ref(), i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Filter {
            rules: rules.into(),
            base: None,
        })
    }

    /// The same rules, matched as rsync matches them where the transfer's root is the
    /// source's parent (`rsync -a SRC DST/`, or a single file): against `name/PATH`, `name`
    /// being the source's own name, so that `/name/x` and `name/x` name `x` below it; and
    /// [`Filter::root_excluded`] says whether the source itself is left out. `name` is one
    /// component (not empty, no `/`, not `.` or `..`; otherwise the rules stay as they were).
    pub fn with_base(mut self, name: &[u8]) -> Filter {
        let one_component =
            !name.is_empty() && !name.contains(&b'/') && name != b"." && name != b"..";
        self.base = one_component.then(|| name.into());
        self
    }

    /// The name given to [`Filter::with_base`], if any.
    pub fn base(&self) -> Option<&[u8]> {
        self.base.as_deref()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether the rules leave out the transfer's root itself, a directory or not: only with
    /// a base (see [`Filter::with_base`]); a root rsync copies the contents of is never.
    pub fn root_excluded(&self, is_dir: bool) -> bool {
        self.base
            .as_deref()
            .is_some_and(|name| self.first_match_excludes(name, is_dir))
    }

    /// The rules as given, in order (to send them to a server).
    pub fn rules(&self) -> impl Iterator<Item = (RuleKind, &[u8])> {
        self.rules.iter().map(|r| (r.kind, r.pattern.as_slice()))
    }

    /// Whether the entry at `path` (relative to the transfer's root; never the root itself)
    /// is excluded: the first rule that matches it is an exclude. Its parents are not
    /// looked at: a scan never reaches an entry below an excluded directory.
    pub fn excluded(&self, path: &[u8], is_dir: bool) -> bool {
        if path.is_empty() || self.rules.is_empty() {
            return false;
        }
        let Some(name) = self.base.as_deref() else {
            return self.first_match_excludes(path, is_dir);
        };
        // `name/PATH` is made only for a rule that looks past the last component, once: the
        // scan asks this of every entry, and most rules (`*.log`) match a name alone.
        let mut full: Option<Vec<u8>> = None;
        self.rules
            .iter()
            .find(|r| match r.subject {
                Subject::Name => r.matches(path, is_dir),
                Subject::Path | Subject::RootedPath => {
                    let full = full.get_or_insert_with(|| crate::relpath::join(name, path));
                    r.matches(full, is_dir)
                }
            })
            .is_some_and(|r| r.kind == RuleKind::Exclude)
    }

    /// Whether the first rule that matches `path` (as the rules see it) is an exclude.
    fn first_match_excludes(&self, path: &[u8], is_dir: bool) -> bool {
        self.rules
            .iter()
            .find(|r| r.matches(path, is_dir))
            .is_some_and(|r| r.kind == RuleKind::Exclude)
    }

    /// Whether `--delete` must leave the destination's entry at `path` alone: it, or a
    /// directory it is in, is excluded (rsync's receiver neither deletes an excluded entry nor
    /// descends into an excluded directory).
    pub fn protected(&self, path: &[u8], is_dir: bool) -> bool {
        if self.is_empty() {
            return false;
        }
        crate::relpath::ancestors(path).any(|dir| self.excluded(dir, true))
            || self.excluded(path, is_dir)
    }
}

impl Rule {
    fn compile(kind: RuleKind, given: &[u8], index: usize) -> Result<Rule, FilterError> {
        let bad = |why: &str| FilterError {
            pattern: String::from_utf8_lossy(given).into_owned(),
            index,
            why: why.to_string(),
        };
        if given.is_empty() {
            return Err(bad("empty pattern"));
        }
        let mut p = given;
        let dir_only = p.len() > 1 && p.ends_with(b"/");
        if dir_only {
            p = &p[..p.len() - 1];
        }
        let slashes = p.iter().filter(|&&b| b == b'/').count();
        let anchored = p.starts_with(b"/");
        let wild = p.iter().any(|b| b"*?[".contains(b));
        let wild2 = wild && p.windows(2).any(|w| w == b"**");
        let wild2_prefix = wild2 && p.starts_with(b"**");
        let wild3 = wild2 && p.ends_with(b"***");
        let body = if anchored { &p[1..] } else { p };
        let subject = if slashes == 0 && !wild2 {
            Subject::Name
        } else if wild2_prefix {
            Subject::RootedPath
        } else {
            Subject::Path
        };
        // Where the pattern may start: at the start of its subject, or (unanchored, with an
        // inner slash or `**`) after any `/` in it.
        let tail = !anchored && subject == Subject::Path;
        let matcher = if wild {
            let mut re = String::from(r"(?s-u)\A");
            if tail {
                re.push_str("(?:.*/)?");
            }
            translate(body, &mut re).map_err(&bad)?;
            re.push_str(r"\z");
            Matcher::Regex(Regex::new(&re).map_err(|e| bad(&e.to_string()))?)
        } else {
            Matcher::Literal {
                bytes: body.to_vec(),
                tail,
            }
        };
        Ok(Rule {
            kind,
            pattern: given.to_vec(),
            subject,
            dir_only,
            wild3,
            matcher,
        })
    }

    fn matches(&self, path: &[u8], is_dir: bool) -> bool {
        if self.dir_only && !is_dir {
            return false;
        }
        let mut subject = match self.subject {
            Subject::Name => {
                let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
                std::borrow::Cow::Borrowed(name)
            }
            Subject::Path => std::borrow::Cow::Borrowed(path),
            Subject::RootedPath => {
                let mut s = Vec::with_capacity(path.len() + 2);
                s.push(b'/');
                s.extend_from_slice(path);
                std::borrow::Cow::Owned(s)
            }
        };
        if is_dir && self.wild3 {
            subject.to_mut().push(b'/');
        }
        match &self.matcher {
            Matcher::Regex(regex) => regex.is_match(&subject),
            Matcher::Literal { bytes, tail } => {
                let s: &[u8] = &subject;
                s == bytes.as_slice()
                    || (*tail
                        && s.len() > bytes.len()
                        && s.ends_with(bytes)
                        && s[s.len() - bytes.len() - 1] == b'/')
            }
        }
    }
}

fn literal(re: &mut String, b: u8) {
    let _ = write!(re, r"\x{b:02X}");
}

/// Translates rsync wildcards (`wildmatch`) into a regular expression.
fn translate(p: &[u8], re: &mut String) -> Result<(), &'static str> {
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            b'\\' => {
                i += 1;
                let &b = p.get(i).ok_or("ends with a lone backslash")?;
                literal(re, b);
            }
            b'*' => {
                let run = p[i..].iter().take_while(|&&b| b == b'*').count();
                re.push_str(if run > 1 { ".*" } else { "[^/]*" });
                i += run - 1;
            }
            b'?' => re.push_str("[^/]"),
            b'[' => i = class(p, i, re)?,
            b => literal(re, b),
        }
        i += 1;
    }
    Ok(())
}

/// POSIX classes rsync's wildmatch knows (`[[:alpha:]]`).
const CLASSES: [&str; 12] = [
    "alnum", "alpha", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space",
    "upper", "xdigit",
];

/// Translates the class starting at `p[start] == '['`; returns the index of its `]`.
fn class(p: &[u8], start: usize, re: &mut String) -> Result<usize, &'static str> {
    const UNBALANCED: &str = "unbalanced '['";
    let mut j = start + 1;
    let negated = matches!(p.get(j), Some(b'!' | b'^'));
    if negated {
        j += 1;
    }
    let mut items = String::new();
    let mut prev: Option<u8> = None;
    let mut first = true;
    loop {
        let &c = p.get(j).ok_or(UNBALANCED)?;
        if c == b']' && !first {
            break;
        }
        first = false;
        if c == b'\\' {
            j += 1;
            let &e = p.get(j).ok_or(UNBALANCED)?;
            literal(&mut items, e);
            prev = Some(e);
        } else if let (b'-', Some(lo), Some(&next)) = (c, prev, p.get(j + 1)) {
            if next == b']' {
                literal(&mut items, c);
                prev = Some(c);
            } else {
                j += 1;
                let mut hi = next;
                if hi == b'\\' {
                    j += 1;
                    hi = *p.get(j).ok_or(UNBALANCED)?;
                }
                if lo <= hi {
                    let _ = write!(items, r"\x{lo:02X}-\x{hi:02X}");
                }
                prev = None;
            }
        } else if c == b'[' && p.get(j + 1) == Some(&b':') {
            let s = j + 2;
            let end = s + p[s..].iter().position(|&b| b == b']').ok_or(UNBALANCED)?;
            if end > s && p[end - 1] == b':' {
                let name = std::str::from_utf8(&p[s..end - 1]).unwrap_or("");
                if !CLASSES.contains(&name) {
                    return Err("unknown character class");
                }
                let _ = write!(items, "[:{name}:]");
                prev = None;
                j = end;
            } else {
                // Not `[:name:]`: a plain '['.
                literal(&mut items, c);
                prev = Some(c);
            }
        } else {
            literal(&mut items, c);
            prev = Some(c);
        }
        j += 1;
    }
    let neg = if negated { "^" } else { "" };
    let _ = write!(re, "[[^/]&&[{neg}{items}]]");
    Ok(j)
}

/// A transfer's selection of its source: the rules, and with `--files-from` the paths to
/// copy (nothing else is scanned). The default selects everything.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub filter: Filter,
    /// Normalised relative paths (see [`normalize_listed`]), sorted, without duplicates.
    pub files_from: Option<Arc<[Vec<u8>]>>,
    /// `-x`: directories on another file system than the root's are selected, empty; what
    /// is mounted on them is not (as `rsync -x`, `du -x`).
    pub one_file_system: bool,
}

impl Selection {
    /// Selects everything (no rules, no list).
    pub fn is_all(&self) -> bool {
        self.filter.is_empty() && self.files_from.is_none()
    }

    /// Sets the list of paths of `--files-from` (normalised, sorted, deduplicated; entries
    /// that name the root itself are dropped).
    pub fn with_files<P: AsRef<[u8]>>(mut self, paths: impl IntoIterator<Item = P>) -> Self {
        let mut list: Vec<Vec<u8>> = paths
            .into_iter()
            .filter_map(|p| normalize_listed(p.as_ref()))
            .collect();
        list.sort();
        list.dedup();
        self.files_from = Some(list.into());
        self
    }
}

/// A `--files-from` entry as a path relative to the source, as rsync reads it: leading
/// slashes removed, empty and `.` components dropped, `..` resolved away (never above the
/// source: `../foo` is `foo`). `None` when nothing is left (the source itself).
pub fn normalize_listed(entry: &[u8]) -> Option<Vec<u8>> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in entry.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    (!parts.is_empty()).then(|| parts.join(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(rules: &[&str]) -> Filter {
        Filter::new(rules.iter().map(|r| {
            let (kind, p) = r.split_at(2);
            let kind = match kind {
                "+ " => RuleKind::Include,
                "- " => RuleKind::Exclude,
                _ => panic!("rule {r}"),
            };
            (kind, p.as_bytes())
        }))
        .unwrap()
    }

    /// Whether `path` (a directory if it ends in `/`) is excluded.
    fn out(f: &Filter, path: &str) -> bool {
        let (p, dir) = match path.strip_suffix('/') {
            Some(p) => (p, true),
            None => (path, false),
        };
        f.excluded(p.as_bytes(), dir)
    }

    #[test]
    fn rsync_man_page_examples() {
        // "- *.o" would exclude all names ending with .o
        let f = filter(&["- *.o"]);
        assert!(out(&f, "a.o") && out(&f, "x/y/b.o") && out(&f, "d.o/"));
        assert!(!out(&f, "a.c") && !out(&f, "a.o/b"));
        // "- /foo" would exclude a file (or directory) named foo in the transfer-root
        let f = filter(&["- /foo"]);
        assert!(out(&f, "foo") && out(&f, "foo/"));
        assert!(!out(&f, "x/foo") && !out(&f, "foobar"));
        // "- foo/" would exclude any directory named foo
        let f = filter(&["- foo/"]);
        assert!(out(&f, "foo/") && out(&f, "a/b/foo/"));
        assert!(!out(&f, "foo") && !out(&f, "a/foo"));
        // "- foo/*/bar" would exclude any file/directory named bar which is at two levels
        // below a directory named foo (if foo is in the transfer)
        let f = filter(&["- foo/*/bar"]);
        assert!(out(&f, "foo/x/bar") && out(&f, "a/foo/x/bar/") && out(&f, "a/b/foo/y/bar"));
        assert!(!out(&f, "foo/bar") && !out(&f, "foo/x/y/bar") && !out(&f, "xfoo/x/bar"));
        // "- /foo/**/bar" would exclude any file/directory named bar that was two or more
        // levels below a top-level directory named foo (note that /foo/bar is not excluded)
        let f = filter(&["- /foo/**/bar"]);
        assert!(out(&f, "foo/x/bar") && out(&f, "foo/x/y/bar/"));
        assert!(!out(&f, "foo/bar") && !out(&f, "a/foo/x/bar"));
        // "+ */" "+ *.c" "- *" would include all directories and .c source files but nothing
        // else
        let f = filter(&["+ */", "+ *.c", "- *"]);
        assert!(!out(&f, "d/") && !out(&f, "d/e/") && !out(&f, "d/x.c") && !out(&f, "x.c"));
        assert!(out(&f, "x.h") && out(&f, "d/x.o") && out(&f, "link"));
        // "+ foo/" "+ foo/bar.c" "- *" would include only the foo directory and foo/bar.c
        let f = filter(&["+ foo/", "+ foo/bar.c", "- *"]);
        assert!(!out(&f, "foo/") && !out(&f, "foo/bar.c"));
        assert!(out(&f, "foo/baz.c") && out(&f, "bar/") && out(&f, "foo"));
    }

    #[test]
    fn first_match_wins_and_no_match_is_included() {
        let f = filter(&["+ keep.log", "- *.log"]);
        assert!(!out(&f, "a/keep.log") && out(&f, "a/other.log") && !out(&f, "a/x.txt"));
        let f = filter(&["- *.log", "+ keep.log"]);
        assert!(out(&f, "a/keep.log"));
        assert!(!out(&Filter::default(), "anything"));
    }

    #[test]
    fn triple_star_matches_the_directory_and_everything_below() {
        let f = filter(&["- cache/***"]);
        assert!(out(&f, "cache/") && out(&f, "cache/x") && out(&f, "a/cache/x/y/"));
        // A file named like the directory is not matched: `dir/***` is `dir/` and `dir/**`.
        assert!(!out(&f, "cache") && !out(&f, "xcache/y"));
        let f = filter(&["+ /keep/***", "- *"]);
        assert!(!out(&f, "keep/") && !out(&f, "keep/a/b"));
        assert!(out(&f, "other/") && out(&f, "x"));
    }

    #[test]
    fn double_star_crosses_slashes_and_single_star_does_not() {
        let f = filter(&["- /a/*"]);
        assert!(out(&f, "a/x") && !out(&f, "a/x/y"));
        let f = filter(&["- /a/**"]);
        assert!(out(&f, "a/x") && out(&f, "a/x/y") && !out(&f, "a/"));
        // A leading `**` matches at the root too (rsync matches it against "/" + path).
        let f = filter(&["- **/tmp"]);
        assert!(out(&f, "tmp") && out(&f, "a/b/tmp") && !out(&f, "a/xtmp"));
        // `**` without a slash: matched against the path's tail at a boundary.
        let f = filter(&["- foo**"]);
        assert!(out(&f, "foobar") && out(&f, "a/foo/b") && !out(&f, "a/xfoo"));
    }

    #[test]
    fn classes_question_marks_and_escapes() {
        let f = filter(&["- file[0-9].txt"]);
        assert!(out(&f, "file3.txt") && !out(&f, "filex.txt") && !out(&f, "file10.txt"));
        let f = filter(&["- [!a]*"]);
        assert!(out(&f, "bcd") && !out(&f, "abc"));
        let f = filter(&["- []x]"]);
        assert!(out(&f, "]") && out(&f, "x") && !out(&f, "y"));
        let f = filter(&["- [[:digit:]]?"]);
        assert!(out(&f, "1a") && !out(&f, "a1") && !out(&f, "1"));
        // `?` and classes never match a slash.
        let f = filter(&["- /a?b", "- /c[^x]d"]);
        assert!(out(&f, "a.b") && !out(&f, "a/b") && out(&f, "c.d") && !out(&f, "c/d"));
        // A backslash escapes in a wildcard pattern, and is literal in a plain one.
        let f = filter(&[r"- \*x*"]);
        assert!(out(&f, "*xy") && !out(&f, "axy"));
        let f = filter(&[r"- a\b"]);
        assert!(out(&f, r"a\b") && !out(&f, "ab"));
        // Braces are literal (rsync has no alternatives).
        let f = filter(&["- {a,b}*"]);
        assert!(out(&f, "{a,b}x") && !out(&f, "a"));
    }

    #[test]
    fn literal_patterns_with_slashes_match_the_path_tail() {
        let f = filter(&["- sub/foo"]);
        assert!(out(&f, "sub/foo") && out(&f, "x/sub/foo/") && !out(&f, "xsub/foo"));
        assert!(!out(&f, "sub/foo/bar"));
    }

    #[test]
    fn bad_patterns_are_named() {
        for (p, why) in [
            ("", "empty pattern"),
            ("a[bc", "unbalanced '['"),
            ("[", "unbalanced '['"),
            ("x[[:nope:]]", "unknown character class"),
            ("a*\\", "ends with a lone backslash"),
        ] {
            let e = Filter::new([(RuleKind::Include, "ok"), (RuleKind::Exclude, p)]).unwrap_err();
            assert_eq!(e.pattern, p);
            assert_eq!(e.index, 1);
            assert_eq!(e.why, why, "{p}");
        }
    }

    #[test]
    fn protected_entries_are_excluded_or_below_an_excluded_directory() {
        let f = filter(&["- keep/", "- *.tmp"]);
        assert!(f.protected(b"keep", true) && f.protected(b"keep/a/b", false));
        assert!(f.protected(b"x/y.tmp", false) && !f.protected(b"x/y", false));
        assert!(!f.protected(b"keep", false));
    }

    #[test]
    fn listed_paths_are_normalised_like_rsync() {
        let n = |s: &str| normalize_listed(s.as_bytes()).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(n("/bin"), Some("bin".into()));
        assert_eq!(n("a//b/./c/"), Some("a/b/c".into()));
        assert_eq!(n("../foo"), Some("foo".into()));
        assert_eq!(n("a/../../b"), Some("b".into()));
        assert_eq!(n("."), None);
        let s = Selection::default().with_files(["b", "a", "./b", "."]);
        assert_eq!(&*s.files_from.unwrap(), &[b"a".to_vec(), b"b".to_vec()]);
    }

    /// With a base (rsync's `SRC DST/`), paths are matched as `base/PATH`, and the root is
    /// matched by its name.
    #[test]
    fn a_base_puts_the_sources_name_in_front_of_every_path() {
        let f = filter(&["- /src/keep", "- src/tmp", "- /x.log", "- *.bak"]).with_base(b"src");
        assert_eq!(f.base(), Some(&b"src"[..]));
        assert!(f.excluded(b"keep", true));
        assert!(f.excluded(b"tmp", true));
        assert!(f.excluded(b"a/b.bak", false));
        assert!(!f.excluded(b"x.log", false));
        assert!(!f.excluded(b"d", false));
        assert!(f.protected(b"keep/p", false));
        assert!(!f.root_excluded(true));
        let f = filter(&["- src/"]).with_base(b"src");
        assert!(f.root_excluded(true));
        assert!(!f.root_excluded(false));
        let f = filter(&["- *.log"]).with_base(b"c.log");
        assert!(f.root_excluded(false));
        // Without a base the root is never excluded, and a bad name sets none.
        assert!(!filter(&["- *.log"]).root_excluded(false));
        for bad in [&b""[..], b".", b"..", b"a/b"] {
            assert_eq!(filter(&["- x"]).with_base(bad).base(), None);
        }
    }
}
