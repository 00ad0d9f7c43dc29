//! End-to-end tests of named exports (`sprat serve --config FILE`) against real servers on
//! loopback: two exports with their own roots and tokens, each token reaching only its own
//! (push, pull, ls, rm, and every other request refused for another export, with nothing
//! read or written there), a read-only export, confinement below each export's root (`..`,
//! symlinks to another export or out of every root), third-party copies between exports of
//! two servers, the old `--root` flags unchanged, and one clear line for each mistake in the
//! configuration file.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use common::{assert_error_names, assert_exit, assert_ok, bin, s, server, server_with, tmp};
use sprat_testkit::{
    assert_no_panic, assert_trees_equal, describe, make_file, make_many_files, parse_json_report,
    run_sprat, run_sprat_timeout, snapshot, Server, ServerOptions,
};

const TOKEN_A: &str = "token-of-alpha-5c0d81";
const TOKEN_B: &str = "token-of-beta-92e7aa";
const TOKEN_BOTH: &str = "token-of-both-3f61b0";
const TOKEN_NONE: &str = "token-of-nothing-17d2";

/// What lives in beta and must never show through alpha's token.
const BETA_ONLY: &[u8] = b"BETA-ONLY-CONTENT-4e1f";
/// What lives outside every export.
const SECRET: &[u8] = b"SECRET-OUTSIDE-EVERY-EXPORT-a93c";

/// A server with two exports: `alpha` (root `alpha/`, token A from a token file, and the
/// shared token) and `beta` (root `beta/`, token B inline, and the shared token), and a
/// directory `outside/` that no export holds; its key in `server.key`. Client token files
/// are in `client/`.
struct Site {
    t: tempfile::TempDir,
    srv: Server,
}

impl Site {
    fn start(beta_read_only: bool) -> Site {
        let t = tmp();
        let dir = t.path();
        for d in ["alpha", "beta/data", "outside", "tokens", "client"] {
            fs::create_dir_all(dir.join(d)).unwrap();
        }
        make_file(&dir.join("beta/data/beta-only.txt"), BETA_ONLY, 0o644);
        make_file(&dir.join("outside/secret.txt"), SECRET, 0o644);
        make_file(
            &dir.join("tokens/a"),
            format!("{TOKEN_A}\n").as_bytes(),
            0o600,
        );
        for (name, token) in [
            ("a", TOKEN_A),
            ("b", TOKEN_B),
            ("both", TOKEN_BOTH),
            ("none", TOKEN_NONE),
        ] {
            make_file(&dir.join("client").join(name), token.as_bytes(), 0o600);
        }
        let config = format!(
            "# two exports\n\
             listen = \"127.0.0.1:0\"\n\
             key_file = \"server.key\"\n\
             [[export]]\n\
             name = \"alpha\"\n\
             root = \"alpha\"\n\
             token_files = [\"tokens/a\"]\n\
             tokens = [\"{TOKEN_BOTH}\"]\n\
             [[export]]\n\
             name = \"beta\"\n\
             root = \"{}\"\n\
             tokens = [\"{TOKEN_B}\", \"{TOKEN_BOTH}\"]\n\
             read_only = {beta_read_only}\n",
            s(&dir.join("beta"))
        );
        let file = dir.join("sprat.toml");
        make_file(&file, config.as_bytes(), 0o600);
        let srv = config_server(dir, &file);
        Site { t, srv }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.t.path().join(rel)
    }

    fn token(&self, name: &str) -> PathBuf {
        self.path("client").join(name)
    }

    fn url(&self, path: &str) -> String {
        self.srv.url(path)
    }

    /// Runs `sprat CMD --token-file client/TOKEN REST...` (`args` is `[CMD, REST...]`).
    fn run(&self, token: &str, args: &[&str]) -> Output {
        run_with(&self.token(token), args)
    }

    /// [`Site::run`], which must succeed; returns stdout.
    #[track_caller]
    fn ok(&self, token: &str, args: &[&str]) -> String {
        let out = self.run(token, args);
        assert_ok(&out, Some(&self.srv));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Starts `sprat serve --config FILE` (the fixture adds `--listen 127.0.0.1:0`).
fn config_server(dir: &Path, file: &Path) -> Server {
    let opts = ServerOptions {
        token: None,
        config: Some(file.to_path_buf()),
        ..ServerOptions::default()
    };
    server_with(dir, &opts)
}

/// Runs `sprat CMD --token-file TOKEN REST...` (`args` is `[CMD, REST...]`).
fn run_with(token: &Path, args: &[&str]) -> Output {
    let mut v: Vec<OsString> = vec![args[0].into(), "--token-file".into(), token.into()];
    v.extend(args[1..].iter().map(OsString::from));
    run_sprat(bin(), v, &[])
}

fn lines(out: &str) -> Vec<&str> {
    out.lines().collect()
}

#[test]
fn two_exports_each_serve_their_own_token_and_root() {
    let site = Site::start(false);
    let src = site.path("src");
    make_many_files(&src, 30, 2000, 1);
    // The file's key_file, relative to the file, holds the server's key.
    let key = fs::read(site.path("server.key")).unwrap();
    assert!(!key.is_empty());

    // Push into each export with its own token: each lands in its own root.
    site.ok("a", &["cp", s(&src), &site.url("alpha/run1")]);
    assert_trees_equal(&src, &site.path("alpha/run1"));
    site.ok("b", &["cp", s(&src), &site.url("beta/run1")]);
    assert_trees_equal(&src, &site.path("beta/run1"));
    assert!(!site.path("alpha/beta").exists() && !site.path("beta/alpha").exists());

    // Pull back from each.
    site.ok("a", &["cp", &site.url("alpha/run1"), s(&site.path("pa"))]);
    assert_trees_equal(&src, &site.path("pa"));
    site.ok("b", &["cp", &site.url("beta/run1"), s(&site.path("pb"))]);
    assert_trees_equal(&src, &site.path("pb"));

    // Listings: an export's paths are relative to its root.
    assert_eq!(lines(&site.ok("a", &["ls", &site.url("alpha")])), ["run1"]);
    assert_eq!(
        lines(&site.ok("b", &["ls", &site.url("beta")])),
        ["data", "run1"]
    );
    let du = site.ok("a", &["du", "--json", &site.url("alpha/run1")]);
    assert!(du.contains("\"files\":30"), "{du}");

    // The server's root lists the exports the token reaches, and only those.
    assert_eq!(lines(&site.ok("a", &["ls", &site.url("")])), ["alpha"]);
    assert_eq!(lines(&site.ok("b", &["ls", &site.url("")])), ["beta"]);
    assert_eq!(
        lines(&site.ok("both", &["ls", "-l", &site.url("")]))
            .iter()
            .map(|l| l.rsplit(' ').next().unwrap())
            .collect::<Vec<_>>(),
        ["alpha", "beta"]
    );
    let all = site.ok("a", &["ls", "-R", &site.url("")]);
    assert!(all.lines().all(|l| l.starts_with("alpha")), "{all}");
    assert_eq!(all.lines().count(), 1 + 1 + 30 + count_dirs(&src), "{all}");
    let stat = site.ok("a", &["stat", "--json", &site.url("")]);
    assert!(stat.contains("\"type\":\"directory\""), "{stat}");

    // rm in each, with its token; the other export keeps its copy.
    site.ok("a", &["rm", "-r", &site.url("alpha/run1")]);
    assert!(!site.path("alpha/run1").exists());
    assert_trees_equal(&src, &site.path("beta/run1"));
    site.ok("b", &["rm", "-r", &site.url("beta/run1")]);
    assert!(!site.path("beta/run1").exists());
    assert!(site.path("beta/data/beta-only.txt").exists());

    // A token of both reaches both.
    site.ok("both", &["mkdir", "-p", &site.url("alpha/x/y")]);
    site.ok("both", &["mkdir", "-p", &site.url("beta/x/y")]);
    assert!(site.path("alpha/x/y").is_dir() && site.path("beta/x/y").is_dir());
}

/// Directories below `dir` (not `dir` itself).
fn count_dirs(dir: &Path) -> usize {
    sprat_testkit::walk_tree(dir)
        .values()
        .filter(|e| e.kind == sprat_testkit::EntryKind::Dir)
        .count()
}

#[test]
fn another_exports_token_is_refused_and_nothing_leaks_or_is_written() {
    let site = Site::start(false);
    let src = site.path("src");
    make_many_files(&src, 5, 100, 2);
    site.ok("a", &["cp", s(&src), &site.url("alpha/mine")]);
    let beta_before = snapshot(&site.path("beta"));
    let alpha_before = snapshot(&site.path("alpha"));
    let pulled = site.path("pulled");

    let refused: Vec<Vec<String>> = [
        vec!["cp", s(&src), &site.url("beta/x")],
        vec!["cp", &site.url("beta/data"), s(&pulled)],
        vec!["cp", &site.url("beta/data/beta-only.txt"), s(&pulled)],
        vec!["ls", &site.url("beta")],
        vec!["ls", "-R", "--json", &site.url("beta/data")],
        vec!["stat", &site.url("beta/data/beta-only.txt")],
        vec!["du", &site.url("beta")],
        vec!["sum", "-r", &site.url("beta/data")],
        vec!["mkdir", "-p", &site.url("beta/new")],
        vec!["rm", "-r", &site.url("beta/data")],
        vec!["mv", &site.url("beta/data"), &site.url("beta/moved")],
        vec!["mv", &site.url("alpha/mine"), &site.url("beta/mine")],
        vec!["mv", &site.url("beta/data"), &site.url("alpha/stolen")],
        vec!["cp", &site.url("beta/data"), &site.url("alpha/stolen")],
        vec!["cp", &site.url("alpha/mine"), &site.url("beta/mine")],
    ]
    .into_iter()
    .map(|v| v.into_iter().map(String::from).collect())
    .collect();
    for args in &refused {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = site.run("a", &args);
        assert_exit(&out, 3);
        assert_error_names(&out, &["export 'beta'"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !stdout.contains("beta-only") && !stdout.contains("data"),
            "{args:?} showed beta's names:\n{}",
            describe(&out)
        );
    }
    assert!(!pulled.exists(), "a refused pull wrote {pulled:?}");
    assert_eq!(snapshot(&site.path("beta")), beta_before, "beta changed");
    assert_eq!(snapshot(&site.path("alpha")), alpha_before, "alpha changed");

    // A name that is no export is refused the same way (nothing tells it from another's).
    let out = site.run("a", &["ls", &site.url("gamma")]);
    assert_exit(&out, 3);
    assert_error_names(&out, &["export 'gamma'"]);
    // A token of no export is refused in the handshake.
    let out = site.run("none", &["ls", &site.url("alpha")]);
    assert_exit(&out, 3);
    // The server's root holds only exports: nothing can be written there (`src/`: its
    // contents into the root itself; `src` alone goes into an export named `src`).
    let contents = format!("{}/", s(&src));
    let out = site.run("a", &["cp", &contents, &site.url("")]);
    assert_exit(&out, 2);
    assert_error_names(&out, &["server's root"]);
    let out = site.run("a", &["cp", s(&src), &site.url("")]);
    assert_exit(&out, 3);
    assert_error_names(&out, &["export 'src'"]);
    let out = site.run("a", &["mkdir", &site.url("newexport")]);
    assert_exit(&out, 3);
    assert_eq!(snapshot(&site.path("alpha")), alpha_before, "alpha changed");
    assert_eq!(snapshot(&site.path("beta")), beta_before, "beta changed");
    assert_eq!(
        fs::read_dir(site.t.path()).unwrap().count(),
        8,
        "something appeared beside the exports"
    );
}

#[test]
fn a_read_only_export_refuses_writes_and_serves_reads() {
    let site = Site::start(true);
    let src = site.path("src");
    make_many_files(&src, 5, 100, 3);
    let beta_before = snapshot(&site.path("beta"));
    for args in [
        vec!["cp", s(&src), &site.url("beta/x")],
        vec!["mkdir", &site.url("beta/new")],
        vec!["rm", &site.url("beta/data/beta-only.txt")],
        vec!["mv", &site.url("beta/data"), &site.url("beta/moved")],
    ] {
        let out = site.run("b", &args);
        assert_exit(&out, 5);
        assert_error_names(&out, &["export 'beta' is read-only"]);
    }
    assert_eq!(snapshot(&site.path("beta")), beta_before, "beta changed");
    // Reads work, and the other export stays writable with a token of both.
    site.ok(
        "b",
        &["cp", &site.url("beta/data"), s(&site.path("pulled"))],
    );
    assert_trees_equal(&site.path("beta/data"), &site.path("pulled"));
    site.ok("both", &["cp", s(&src), &site.url("alpha/x")]);
    assert_trees_equal(&src, &site.path("alpha/x"));
    // A third-party copy within the server, from the read-only export to the writable one.
    site.ok(
        "both",
        &["cp", &site.url("beta/data"), &site.url("alpha/from-beta")],
    );
    assert_trees_equal(&site.path("beta/data"), &site.path("alpha/from-beta"));
    let out = site.run(
        "both",
        &["cp", &site.url("alpha/x"), &site.url("beta/from-alpha")],
    );
    assert_exit(&out, 5);
    assert!(!site.path("beta/from-alpha").exists());
}

#[test]
fn paths_are_confined_to_each_exports_root() {
    let site = Site::start(false);
    let alpha = site.path("alpha");
    make_file(&alpha.join("file.txt"), b"alpha's own", 0o644);
    // Links out of alpha: to beta's root (absolute and relative) and out of every root.
    symlink(site.path("beta"), alpha.join("to_beta")).unwrap();
    symlink("../beta", alpha.join("up")).unwrap();
    symlink(site.path("outside"), alpha.join("esc")).unwrap();
    let beta_before = snapshot(&site.path("beta"));
    let outside_before = snapshot(&site.path("outside"));
    let src = site.path("src");
    make_many_files(&src, 3, 100, 4);

    // Through the links: refused (token A reaches only alpha).
    let must_fail: Vec<Vec<String>> = [
        vec!["ls", &site.url("alpha/to_beta/data")],
        vec!["ls", "-R", &site.url("alpha/up/data")],
        vec!["stat", &site.url("alpha/up/data/beta-only.txt")],
        vec!["sum", &site.url("alpha/to_beta/data/beta-only.txt")],
        vec!["sum", &site.url("alpha/esc/secret.txt")],
        vec!["du", &site.url("alpha/up/data")],
        vec!["cp", &site.url("alpha/esc/secret.txt"), s(&site.path("p1"))],
        vec!["cp", &site.url("alpha/up/data"), s(&site.path("p2"))],
        vec!["cp", s(&src), &site.url("alpha/to_beta/pushed")],
        vec!["cp", s(&src), &site.url("alpha/esc/pushed")],
        vec!["mkdir", "-p", &site.url("alpha/up/new/deeper")],
        vec!["rm", &site.url("alpha/up/data/beta-only.txt")],
        vec!["rm", &site.url("alpha/esc/secret.txt")],
        vec![
            "mv",
            &site.url("alpha/file.txt"),
            &site.url("alpha/esc/file.txt"),
        ],
        // `..` never reaches the server (the client refuses such a URL).
        vec!["ls", &site.url("alpha/../beta/data")],
        vec!["cp", s(&src), &site.url("alpha/../beta/pushed")],
    ]
    .into_iter()
    .map(|v| v.into_iter().map(String::from).collect())
    .collect();
    for args in &must_fail {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = site.run("a", &args);
        assert_no_panic(&out);
        assert!(
            !out.status.success(),
            "{args:?} succeeded:\n{}",
            describe(&out)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !stdout.contains("beta-only") && !stdout.contains("secret"),
            "{args:?} showed what is outside alpha:\n{}",
            describe(&out)
        );
    }
    for p in ["p1", "p2"] {
        assert!(!site.path(p).exists(), "{p} was pulled");
    }
    // The whole export pulled: the links come as links, nothing of what they point to.
    site.ok("a", &["cp", &site.url("alpha"), s(&site.path("whole"))]);
    let whole = snapshot(&site.path("whole"));
    assert!(!whole.any_file_contains(BETA_ONLY) && !whole.any_file_contains(SECRET));
    assert_eq!(
        fs::read_link(site.path("whole/up")).unwrap(),
        Path::new("../beta")
    );
    let listed = site.ok("a", &["ls", "-R", &site.url("")]);
    assert!(
        !listed.contains("beta-only") && !listed.contains("secret"),
        "{listed}"
    );
    assert_eq!(snapshot(&site.path("beta")), beta_before, "beta changed");
    assert_eq!(
        snapshot(&site.path("outside")),
        outside_before,
        "outside changed"
    );
}

#[test]
fn third_party_copy_between_exports_of_two_servers() {
    let t = tmp();
    let dir = t.path();
    for d in ["s1/src/data", "s2/dst", "s2/other", "s2/ro", "client"] {
        fs::create_dir_all(dir.join(d)).unwrap();
    }
    make_many_files(&dir.join("s1/src/data"), 40, 3000, 5);
    make_file(&dir.join("s2/ro/seed.txt"), b"seed", 0o644);
    make_file(&dir.join("client/t"), b"shared-third-party-token", 0o600);
    make_file(&dir.join("client/u"), b"other-export-token-4b2f", 0o600);
    let export = |name: &str, root: &str, token: &str, ro: bool| {
        format!(
            "[[export]]\nname = \"{name}\"\nroot = \"{}\"\ntokens = [\"{token}\"]\n\
             read_only = {ro}\n",
            s(&dir.join(root))
        )
    };
    let c1 = dir.join("s1.toml");
    make_file(
        &c1,
        export("src", "s1/src", "shared-third-party-token", false).as_bytes(),
        0o600,
    );
    let c2 = dir.join("s2.toml");
    let text = export("dst", "s2/dst", "shared-third-party-token", false)
        + &export("other", "s2/other", "other-export-token-4b2f", false)
        + &export("ro", "s2/ro", "shared-third-party-token", true);
    make_file(&c2, text.as_bytes(), 0o600);
    let (s1, s2) = (config_server(dir, &c1), config_server(dir, &c2));
    let tok = dir.join("client/t");
    let ok = |args: &[&str]| {
        let out = run_with(&tok, args);
        assert_ok(&out, Some(&s2));
        out
    };

    // From an export of one server to an export of another, twice (the second a re-sync).
    let out = ok(&["cp", "--json", &s1.url("src/data"), &s2.url("dst/copy")]);
    let report = parse_json_report(&out.stdout);
    assert_eq!(report.get("direction"), "third-party", "{}", report.value);
    assert_eq!(report.files(), 40, "{}", report.value);
    assert_trees_equal(&dir.join("s1/src/data"), &dir.join("s2/dst/copy"));
    ok(&["cp", &s1.url("src/data"), &s2.url("dst/copy")]);
    assert_trees_equal(&dir.join("s1/src/data"), &dir.join("s2/dst/copy"));
    // Within one server, between two of its exports.
    ok(&["cp", &s2.url("ro/seed.txt"), &s2.url("dst/seed.txt")]);
    assert_eq!(fs::read(dir.join("s2/dst/seed.txt")).unwrap(), b"seed");

    // Into an export of another token, or a read-only one, or from an export not the
    // token's: refused, nothing written.
    let other_before = snapshot(&dir.join("s2/other"));
    let out = run_with(&tok, &["cp", &s1.url("src/data"), &s2.url("other/copy")]);
    assert_exit(&out, 3);
    assert_error_names(&out, &["export 'other'"]);
    let out = run_with(&tok, &["cp", &s1.url("src/data"), &s2.url("ro/copy")]);
    assert_exit(&out, 5);
    assert_error_names(&out, &["export 'ro' is read-only"]);
    let out = run_with(&tok, &["cp", &s2.url("other"), &s2.url("dst/stolen")]);
    assert_exit(&out, 3);
    assert_error_names(&out, &["export 'other'"]);
    let out = run_with(&tok, &["cp", &s1.url("nope/data"), &s2.url("dst/c")]);
    assert_exit(&out, 3);
    assert_error_names(&out, &["export 'nope'"]);
    assert_eq!(snapshot(&dir.join("s2/other")), other_before);
    assert!(!dir.join("s2/ro/copy").exists() && !dir.join("s2/dst/stolen").exists());
    assert!(!dir.join("s2/dst/c").exists());
    // The other token sees only its own export on s2, and nothing on s1.
    let u = dir.join("client/u");
    let out = run_with(&u, &["ls", &s2.url("")]);
    assert_ok(&out, Some(&s2));
    assert_eq!(lines(&String::from_utf8_lossy(&out.stdout)), ["other"]);
    assert_exit(&run_with(&u, &["ls", &s1.url("")]), 3);
}

#[test]
fn the_old_flags_still_serve_one_root_without_an_export_name() {
    let t = tmp();
    let root = t.path().join("root");
    let srv = server(&root);
    let src = t.path().join("src");
    make_many_files(&src, 5, 100, 6);
    let token = srv.token_file().unwrap().to_path_buf();
    let out = run_with(&token, &["cp", s(&src), &srv.url("x")]);
    assert_ok(&out, Some(&srv));
    assert_trees_equal(&src, &root.join("x"));
    let out = run_with(&token, &["ls", &srv.url("")]);
    assert_ok(&out, Some(&srv));
    assert_eq!(lines(&String::from_utf8_lossy(&out.stdout)), ["x"]);

    // --config is a usage error beside the flags of the default export.
    let config = t.path().join("sprat.toml");
    make_file(&config, b"", 0o600);
    for flag in [
        vec!["--root", s(&root)],
        vec!["--token-file", s(&token)],
        vec!["--read-only"],
        vec!["--no-auth"],
    ] {
        let mut args = vec!["serve", "--config", s(&config), "--listen", "127.0.0.1:0"];
        args.extend(&flag);
        let out = run_sprat_timeout(bin(), &args, &[], Duration::from_secs(20)).unwrap();
        assert_exit(&out, 2);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("'--config <FILE>' cannot be used with") && stderr.contains(flag[0]),
            "{flag:?}:\n{}",
            describe(&out)
        );
    }
}

#[test]
fn each_mistake_in_the_config_file_is_one_line_naming_file_export_and_key() {
    let t = tmp();
    let dir = t.path();
    fs::create_dir_all(dir.join("data")).unwrap();
    fs::create_dir_all(dir.join("a-directory")).unwrap();
    let good = "[[export]]\nname = \"alpha\"\nroot = \"data\"\ntokens = [\"t\"]\n";
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "unknown key",
            good.replace("root =", "roots = \"x\"\nroot ="),
            vec!["export 'alpha'", "unknown key `roots`"],
        ),
        (
            "missing root",
            good.replace("root = \"data\"\n", ""),
            vec!["export 'alpha'", "missing key `root`"],
        ),
        (
            "duplicate names",
            format!("{good}{good}"),
            vec!["export 'alpha'", "key 'name'", "another export"],
        ),
        (
            "root that does not exist",
            good.replace("\"data\"", "\"no-such-dir\""),
            vec!["export 'alpha'", "key 'root'", "no-such-dir"],
        ),
        (
            "token file that does not exist",
            good.replace("tokens = [\"t\"]", "token_files = [\"no-such-token\"]"),
            vec!["export 'alpha'", "key 'token_files'", "no-such-token"],
        ),
        (
            "token file that cannot be read",
            good.replace("tokens = [\"t\"]", "token_files = [\"a-directory\"]"),
            vec!["export 'alpha'", "key 'token_files'", "a-directory"],
        ),
        (
            "name with a slash",
            good.replace("\"alpha\"", "\"al/pha\""),
            vec!["export 'al/pha'", "key 'name'", "'/'"],
        ),
        (
            "name ..",
            good.replace("\"alpha\"", "\"..\""),
            vec!["export '..'", "key 'name'", "'..'"],
        ),
        (
            "no token",
            good.replace("tokens = [\"t\"]", ""),
            vec!["export 'alpha'", "no token"],
        ),
        (
            "unknown top-level key",
            format!("lissen = \"127.0.0.1:0\"\n{good}"),
            vec!["unknown key `lissen`"],
        ),
    ];
    for (i, (what, text, names)) in cases.iter().enumerate() {
        let file = dir.join(format!("bad-{i}.toml"));
        make_file(&file, text.as_bytes(), 0o600);
        let out = run_sprat_timeout(
            bin(),
            ["serve", "--config", s(&file), "--listen", "127.0.0.1:0"],
            &[],
            Duration::from_secs(20),
        )
        .unwrap_or_else(|e| panic!("{what}: the server started: {e:?}"));
        assert_exit(&out, 2);
        let line = assert_error_names(&out, &[&format!("config '{}'", s(&file))]);
        for name in names {
            assert!(line.contains(name), "{what}: {line:?} does not name {name}");
        }
        assert!(out.stdout.is_empty(), "{what}: {}", describe(&out));
    }
}

#[test]
fn serve_help_shows_the_config_file_format() {
    let out = run_sprat(bin(), ["serve", "--help"], &[]);
    assert_exit(&out, 0);
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--config <FILE>",
        "sprat://HOST:PORT/EXPORT/PATH",
        "[[export]]",
        "name = ",
        "root = ",
        "tokens = [",
        "token_files = [",
        "read_only = true",
        "listen = ",
    ] {
        assert!(
            help.contains(needle),
            "serve --help lacks {needle:?}:\n{help}"
        );
    }
}
