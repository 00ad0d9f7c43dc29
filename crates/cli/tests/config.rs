#![allow(clippy::unwrap_used)]
//! The client's configuration file (`--config FILE`, `SPRAT_CONFIG`,
//! `$XDG_CONFIG_HOME/sprat/config.toml`) against real servers: an alias `sprat://ALIAS/PATH`
//! brings its server's URL, token file and fingerprint (two aliases in one copy each their
//! own), `[defaults]` stand in for options the command line leaves out, and a mistake in the
//! file is one line naming the file, the table and the key.

mod common;

use common::{assert_error_names, assert_exit, assert_ok, bin, server_with, tmp};
use sprat_testkit::{make_file, run_sprat, Server, ServerOptions};

/// Writes a file (mode 0644), making its parent directories.
fn put(path: &Path, content: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    make_file(path, content, 0o644);
}
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A server with its own token (`token`).
fn server_with_token(root: &Path, token: &str) -> Server {
    server_with(
        root,
        &ServerOptions {
            token: Some(token.into()),
            ..ServerOptions::default()
        },
    )
}

/// Writes `text` as `config.toml` in `dir` and returns its path.
fn config(dir: &Path, text: &str) -> PathBuf {
    let file = dir.join("config.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Writes `token` into `dir/name` (mode 0600) and returns its path.
fn token_file(dir: &Path, name: &str, token: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let file = dir.join(name);
    std::fs::write(&file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    file
}

/// `[servers.NAME]` for `server`'s `path`, with a token file and, if given, a fingerprint.
fn alias(
    name: &str,
    server: &Server,
    path: &str,
    token: &Path,
    fingerprint: Option<&str>,
) -> String {
    let mut text = format!(
        "[servers.{name}]\nurl = \"{}\"\ntoken_file = \"{}\"\n",
        server.url(path),
        token.display()
    );
    if let Some(f) = fingerprint {
        text.push_str(&format!("fingerprint = \"{f}\"\n"));
    }
    text
}

/// Runs `sprat ARGS` with `--config FILE` after the command's name.
fn sprat(file: &Path, args: &[&str]) -> Output {
    let mut all: Vec<OsString> = vec![args[0].into(), "--config".into(), file.into()];
    all.extend(args[1..].iter().map(OsString::from));
    run_sprat(bin(), all, &[])
}

fn report(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn an_alias_brings_its_url_path_and_token_to_cp_and_ls() {
    let t = tmp();
    let server = server_with_token(&t.path().join("root"), "token-of-server-a-0123");
    std::fs::create_dir(t.path().join("root/runs")).unwrap();
    let token = token_file(t.path(), "a.token", "token-of-server-a-0123");
    let file = config(
        t.path(),
        &alias("lab", &server, "runs", &token, Some(server.fingerprint())),
    );
    let src = t.path().join("src");
    put(&src.join("d/f.txt"), b"pushed through an alias");

    // Push: sprat://lab/42 is runs/42 on the server, with the alias's token (none given).
    let out = sprat(&file, &["cp", src.to_str().unwrap(), "sprat://lab/42"]);
    assert_ok(&out, Some(&server));
    assert_eq!(
        std::fs::read(t.path().join("root/runs/42/d/f.txt")).unwrap(),
        b"pushed through an alias"
    );
    // List it through the alias.
    let out = sprat(&file, &["ls", "sprat://lab/42/d"]);
    assert_ok(&out, Some(&server));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "f.txt");
    // Pull it back; the report names the server's real address.
    let back = t.path().join("back");
    let out = sprat(
        &file,
        &["cp", "--json", "sprat://lab/42", back.to_str().unwrap()],
    );
    assert_ok(&out, Some(&server));
    assert_eq!(
        std::fs::read(back.join("d/f.txt")).unwrap(),
        b"pushed through an alias"
    );
    let source = report(&out)["source"].as_str().unwrap().to_string();
    assert_eq!(source, server.url("runs/42"));
    // The alias's path is a root for what follows it: `..` cannot leave the server's root.
    let out = sprat(&file, &["ls", "sprat://lab/../.."]);
    assert_exit(&out, 2);
}

#[test]
fn the_default_file_is_read_from_xdg_config_home() {
    let t = tmp();
    let server = server_with_token(&t.path().join("root"), "token-of-the-default-file");
    let token = token_file(t.path(), "t", "token-of-the-default-file");
    let home = t.path().join("xdg");
    std::fs::create_dir_all(home.join("sprat")).unwrap();
    std::fs::write(
        home.join("sprat/config.toml"),
        alias("lab", &server, "", &token, None),
    )
    .unwrap();
    put(&server.root().join("here"), b"x");
    let home = home.to_str().unwrap();
    let out = run_sprat(bin(), ["ls", "sprat://lab/"], &[("XDG_CONFIG_HOME", home)]);
    assert_ok(&out, Some(&server));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "here");
    // SPRAT_CONFIG names another file, which wins; one that is missing is an error.
    let other = config(t.path(), "");
    let out = run_sprat(
        bin(),
        ["ls", "sprat://lab/"],
        &[
            ("XDG_CONFIG_HOME", home),
            ("SPRAT_CONFIG", other.to_str().unwrap()),
        ],
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &["no server alias"]);
    let out = run_sprat(
        bin(),
        ["ls", "sprat://lab/"],
        &[(
            "SPRAT_CONFIG",
            t.path().join("nowhere.toml").to_str().unwrap(),
        )],
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &["nowhere.toml"]);
}

#[test]
fn two_aliases_in_a_third_party_copy_each_bring_their_own_token() {
    let t = tmp();
    let a = server_with_token(&t.path().join("a"), "token-of-server-a-0123");
    let b = server_with_token(&t.path().join("b"), "token-of-server-b-4567");
    let ta = token_file(t.path(), "a.token", "token-of-server-a-0123");
    let tb = token_file(t.path(), "b.token", "token-of-server-b-4567");
    let file = config(
        t.path(),
        &format!(
            "{}{}",
            alias("a", &a, "", &ta, Some(a.fingerprint())),
            alias("b", &b, "", &tb, Some(b.fingerprint()))
        ),
    );
    put(&a.root().join("data/one"), b"from a to b");
    let out = sprat(&file, &["cp", "sprat://a/data", "sprat://b/copy"]);
    assert_ok(&out, Some(&a));
    assert_eq!(
        std::fs::read(b.root().join("copy/one")).unwrap(),
        b"from a to b"
    );
    // --token-file replaces both aliases' tokens: B refuses A's token.
    let out = sprat(
        &file,
        &[
            "cp",
            "--token-file",
            ta.to_str().unwrap(),
            "--retry-for",
            "0s",
            "sprat://a/data",
            "sprat://b/copy2",
        ],
    );
    assert_exit(&out, 3);
}

#[test]
fn the_fingerprint_of_an_alias_refuses_a_server_with_another_key() {
    let t = tmp();
    // A server with a key of its own (not the one every server of this test process shares).
    let server = server_with(
        &t.path().join("root"),
        &ServerOptions {
            extra_args: vec!["--key-file".into(), t.path().join("other.key").into()],
            ..ServerOptions::default()
        },
    );
    let pinned = server_with(&t.path().join("pinned"), &ServerOptions::default());
    assert_ne!(server.fingerprint(), pinned.fingerprint());
    let token = token_file(t.path(), "t", sprat_testkit::DEFAULT_TOKEN);
    let file = config(
        t.path(),
        &alias("lab", &server, "", &token, Some(pinned.fingerprint())),
    );
    put(&t.path().join("src/f"), b"never sent");
    let out = sprat(
        &file,
        &[
            "cp",
            t.path().join("src").to_str().unwrap(),
            "sprat://lab/x",
        ],
    );
    assert_exit(&out, 3);
    assert_error_names(&out, &[server.fingerprint()]);
    assert!(!server.root().join("x").exists());
    let out = sprat(&file, &["ls", "sprat://lab/"]);
    assert_exit(&out, 3);
    // --server-fingerprint replaces the alias's.
    let out = sprat(
        &file,
        &[
            "ls",
            "--server-fingerprint",
            server.fingerprint(),
            "sprat://lab/",
        ],
    );
    assert_ok(&out, Some(&server));
}

#[test]
fn defaults_apply_unless_the_command_line_says_otherwise() {
    let t = tmp();
    let server = server_with_token(&t.path().join("root"), "token-of-the-defaults-0");
    let token = token_file(t.path(), "t", "token-of-the-defaults-0");
    let file = config(
        t.path(),
        &format!(
            "[defaults]\ntoken_file = \"{}\"\nstreams = 2\ndurable = true\n",
            token.display()
        ),
    );
    put(&t.path().join("src/f"), b"defaults");
    let src = t.path().join("src");
    let src = src.to_str().unwrap();
    // The file's token, streams and durability.
    let out = sprat(&file, &["cp", "--json", src, &server.url("one")]);
    assert_ok(&out, Some(&server));
    let r = report(&out);
    assert_eq!(r["streams"], 2, "{r}");
    assert_eq!(r["durable"], true, "{r}");
    // The command line's streams; the rest still from the file.
    let out = sprat(
        &file,
        &["cp", "--json", "--streams", "3", src, &server.url("two")],
    );
    assert_ok(&out, Some(&server));
    let r = report(&out);
    assert_eq!(r["streams"], 3, "{r}");
    assert_eq!(r["durable"], true, "{r}");
    // SPRAT_TOKEN comes before the file's token_file: a wrong one is refused.
    let mut args: Vec<OsString> = vec!["ls".into(), "--config".into(), file.clone().into()];
    args.push(server.url("").into());
    let out = run_sprat(bin(), &args, &[("SPRAT_TOKEN", "not-the-servers-token-00")]);
    assert_exit(&out, 3);
    // --config /dev/null: no file, so no token at all.
    let out = run_sprat(bin(), ["ls", "--config", "/dev/null", &server.url("")], &[]);
    assert_exit(&out, 3);
}

#[test]
fn a_mistake_in_the_file_is_one_line_naming_the_file_table_and_key() {
    let t = tmp();
    let server = server_with(&t.path().join("root"), &ServerOptions::default());
    let url = server.url("");
    let cases: Vec<(String, &str, Vec<&str>)> = vec![
        (
            "[defaults]\nstreems = 4\n".into(),
            &url,
            vec!["[defaults]", "streems"],
        ),
        (
            "[defaults]\nprogress = \"yes\"\n".into(),
            &url,
            vec!["[defaults]", "progress"],
        ),
        (
            "[defaults]\nbwlimit = true\n".into(),
            &url,
            vec!["[defaults]", "bwlimit"],
        ),
        (
            format!("[servers.lab]\nurl = \"{url}\"\ntoken_file = \"missing.token\"\n"),
            "sprat://lab/",
            vec!["[servers.lab]", "token_file", "missing.token"],
        ),
        (
            format!("[servers.lab]\nurl = \"{url}\"\nfingerprint = \"SHA256:nope\"\n"),
            &url,
            vec!["[servers.lab]", "fingerprint"],
        ),
        (
            "[servers.lab]\nurl = \"sprat://nohost/x\"\n".into(),
            &url,
            vec!["[servers.lab]", "url"],
        ),
        ("[defaults\n".into(), &url, vec!["line 1"]),
        ("".into(), "sprat://lab/", vec!["no server alias", "'lab'"]),
    ];
    for (text, target, names) in cases {
        let file = config(t.path(), &text);
        let shown = file.display().to_string();
        for out in [
            sprat(&file, &["ls", target]),
            sprat(&file, &["cp", t.path().to_str().unwrap(), target]),
        ] {
            assert_exit(&out, 2);
            let line = assert_error_names(&out, &[&shown]);
            for name in &names {
                assert!(
                    line.contains(name),
                    "{text:?}: {line:?} does not name {name}"
                );
            }
        }
    }
    // A file that cannot be read, where the default one is, is an error too.
    let home = t.path().join("xdg");
    std::fs::create_dir_all(home.join("sprat/config.toml")).unwrap();
    let out = run_sprat(
        bin(),
        ["ls", &url],
        &[("XDG_CONFIG_HOME", home.to_str().unwrap())],
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &["config.toml"]);
}

/// Makes `dst/f` differ from `src/f` in content only (same size, same mtime).
fn change_content_only(src: &Path, dst: &Path) {
    let mtime = std::fs::metadata(src.join("f"))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::write(dst.join("f"), b"XXXXXXXX").unwrap();
    let f = std::fs::File::options()
        .write(true)
        .open(dst.join("f"))
        .unwrap();
    f.set_modified(mtime).unwrap();
}

#[test]
fn checksum_from_the_file_gives_way_to_the_command_lines_choice() {
    let t = tmp();
    let file = config(t.path(), "[defaults]\nchecksum = true\n");
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    put(&src.join("f"), b"original");
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    assert_ok(&sprat(&file, &["cp", s, d]), None);
    // The file's -c finds the change that kept size and mtime.
    change_content_only(&src, &dst);
    assert_ok(&sprat(&file, &["cp", s, d]), None);
    assert_eq!(std::fs::read(dst.join("f")).unwrap(), b"original");
    // --ignore-existing on the command line replaces it: the file is left alone.
    change_content_only(&src, &dst);
    assert_ok(&sprat(&file, &["cp", "--ignore-existing", s, d]), None);
    assert_eq!(std::fs::read(dst.join("f")).unwrap(), b"XXXXXXXX");
}

#[test]
fn progress_from_the_file_is_shown_off_a_terminal_but_not_with_quiet() {
    let t = tmp();
    let file = config(t.path(), "[defaults]\nprogress = true\n");
    let src = t.path().join("src");
    put(&src.join("f"), b"progress");
    let s = src.to_str().unwrap();
    // Off a terminal, a progress line is written at the end at least.
    let shown = |out: &Output| String::from_utf8_lossy(&out.stderr).contains("ETA");
    let to = |name: &str| t.path().join(name).to_str().unwrap().to_string();
    let out = sprat(&file, &["cp", s, &to("a")]);
    assert_ok(&out, None);
    assert!(shown(&out), "{out:?}");
    let out = sprat(&file, &["cp", "--quiet", s, &to("b")]);
    assert_ok(&out, None);
    assert!(!shown(&out), "{out:?}");
    let out = run_sprat(bin(), ["cp", s, &to("c")], &[]);
    assert_ok(&out, None);
    assert!(!shown(&out), "{out:?}");
}

#[test]
fn a_local_copy_does_not_read_the_default_token_file() {
    let t = tmp();
    let file = config(t.path(), "[defaults]\ntoken_file = \"missing.token\"\n");
    let src = t.path().join("src");
    put(&src.join("f"), b"local");
    let dst = t.path().join("dst");
    let out = sprat(&file, &["cp", src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_ok(&out, None);
    assert_eq!(std::fs::read(dst.join("f")).unwrap(), b"local");
    // A copy to a server does, and says where the name comes from.
    let out = sprat(&file, &["ls", "sprat://127.0.0.1:9/"]);
    assert_exit(&out, 2);
    assert_error_names(&out, &["[defaults]: key 'token_file'"]);
}

/// Whether this test runs as root with setpriv(1) at hand (to run sprat as another user).
fn root_with_setpriv() -> bool {
    rustix::process::geteuid().is_root() && Path::new("/usr/bin/setpriv").exists()
}

/// A default file in a directory the user cannot search (another user's home, kept in
/// $HOME or $XDG_CONFIG_HOME by `setpriv` or `su`) is no file for that user; named
/// explicitly, it is an error.
#[test]
fn a_default_file_the_user_cannot_reach_is_no_file() {
    use std::os::unix::fs::PermissionsExt;
    if !root_with_setpriv() {
        eprintln!("skipped: needs root and /usr/bin/setpriv");
        return;
    }
    let t = tmp();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let private = t.path().join("private");
    std::fs::create_dir_all(private.join("sprat")).unwrap();
    std::fs::write(private.join("sprat/config.toml"), "[defaults]\n").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let src = t.path().join("src");
    put(&src.join("f"), b"as nobody");
    let out_dir = t.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let as_nobody = |extra: &[&str], dst: &str| {
        let mut cmd = std::process::Command::new("/usr/bin/setpriv");
        cmd.args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(bin())
            .arg("cp")
            .args(extra)
            .arg(&src)
            .arg(out_dir.join(dst))
            .env("XDG_CONFIG_HOME", &private);
        cmd.output().unwrap()
    };
    let out = as_nobody(&[], "a");
    assert_ok(&out, None);
    assert_eq!(std::fs::read(out_dir.join("a/f")).unwrap(), b"as nobody");
    let named = private.join("sprat/config.toml");
    let out = as_nobody(&["--config", named.to_str().unwrap()], "b");
    assert_exit(&out, 2);
    assert_error_names(&out, &["config.toml"]);
}

#[test]
fn two_aliases_of_one_server_must_agree_on_token_and_key() {
    let t = tmp();
    let a = token_file(t.path(), "a.token", "token-number-one-0123");
    let b = token_file(t.path(), "b.token", "token-number-two-4567");
    let text = format!(
        "[servers.one]\nurl = \"sprat://127.0.0.1:9/x\"\ntoken_file = \"{}\"\n\
         [servers.two]\nurl = \"sprat://127.0.0.1:9/y\"\ntoken_file = \"{}\"\n",
        a.display(),
        b.display()
    );
    let file = config(t.path(), &text);
    let out = sprat(&file, &["mv", "sprat://one/f", "sprat://two/f"]);
    assert_exit(&out, 2);
    let line = assert_error_names(&out, &["'one' and 'two'"]);
    assert!(line.contains("127.0.0.1:9"), "{line}");
}
