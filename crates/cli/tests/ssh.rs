//! End-to-end tests of `[USER@]HOST:PATH` arguments: a private sshd on loopback (its own
//! host key, client key and port, see `sprat_testkit::sshd`) runs the `sprat serve
//! --one-shot` the client starts through `-e "ssh ..."` with `--remote-sprat` naming the
//! binary under test. Push and pull of a tree compared exactly, a re-run that skips
//! everything, `--via-ssh` (streams through the ssh connection), the namespace commands,
//! paths relative to the remote home, the errors (no sprat on the remote, ssh refused),
//! `SPRAT_RSH`, a copy between two remotes, and the secrets: the one-time token is on no
//! command line, the server exits when the client is done, and the known-servers file is
//! not touched.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::OsString;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::{assert_error_names, assert_exit, assert_ok, bin, s, tmp};
use sprat_testkit::{
    assert_trees_equal, make_fidelity_tree, make_file, make_many_files, parse_json_report,
    random_bytes, run_sprat, spawn_sprat, Sshd,
};

/// `sprat CMD -e RSH --remote-sprat BIN ARGS...`.
fn args(sshd: &Sshd, cmd: &str, rest: &[&str]) -> Vec<OsString> {
    args_with(&sshd.rsh(), cmd, rest)
}

/// [`args`] with another remote shell.
fn args_with(rsh: &str, cmd: &str, rest: &[&str]) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![cmd.into(), "-e".into(), rsh.into()];
    v.push("--remote-sprat".into());
    v.push(bin().into());
    v.extend(rest.iter().map(OsString::from));
    v
}

fn run(sshd: &Sshd, cmd: &str, rest: &[&str]) -> Output {
    run_sprat(bin(), args(sshd, cmd, rest), &[])
}

#[track_caller]
fn run_ok(sshd: &Sshd, cmd: &str, rest: &[&str]) -> String {
    let out = run(sshd, cmd, rest);
    if !out.status.success() {
        panic!(
            "sprat {cmd} failed:\n{}\n--- sshd log ---\n{}",
            sprat_testkit::describe(&out),
            sshd.log()
        );
    }
    assert_ok(&out, None);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Makes a file, with its parent directories.
fn file(path: &Path, content: &[u8], mode: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    make_file(path, content, mode);
}

/// `127.0.0.1:PATH`.
fn remote(path: &Path) -> String {
    format!("127.0.0.1:{}", s(path))
}

/// The one-shot servers running below `sshd`.
fn one_shot_servers(sshd: &Sshd) -> Vec<sprat_testkit::sshd::Session> {
    sshd.sessions()
        .into_iter()
        .filter(|p| p.args.iter().any(|a| a == "--one-shot"))
        .collect()
}

/// Waits until no one-shot server runs below `sshd`; panics after `limit`. (A server that
/// outlived its ssh session would have left sshd's tree: see the token test for a check by
/// process id.)
fn assert_servers_gone(sshd: &Sshd, limit: Duration) {
    let until = Instant::now() + limit;
    while !one_shot_servers(sshd).is_empty() {
        assert!(
            Instant::now() < until,
            "the one-shot server still runs after the client finished: {:?}",
            one_shot_servers(sshd)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `text` holds a run of 32 or more hex digits (the token is 64).
fn has_long_hex(text: &str) -> bool {
    let mut run = 0;
    for c in text.chars() {
        run = if c.is_ascii_hexdigit() { run + 1 } else { 0 };
        if run >= 32 {
            return true;
        }
    }
    false
}

#[test]
fn push_and_pull_over_ssh_copy_a_tree_exactly_and_a_rerun_skips() {
    let sshd = Sshd::start();
    let t = tmp();
    let src = t.path().join("src");
    make_fidelity_tree(&src);
    let known = t.path().join("known_servers");
    let dst = t.path().join("remote/dst");
    let out = run_ok(
        &sshd,
        "cp",
        &[
            "--json",
            "--known-servers",
            s(&known),
            s(&src),
            &remote(&dst),
        ],
    );
    let report = parse_json_report(out.as_bytes());
    assert_trees_equal(&src, &dst);
    assert!(report.files() > 0);
    // The report names the endpoints as given, not the one-shot server's address.
    assert_eq!(report.value["destination"], remote(&dst).as_str());
    assert_eq!(report.value["direction"], "push");
    // The server's key came over ssh: the known-servers file is neither read nor written.
    assert!(
        !known.exists(),
        "a HOST:PATH copy wrote {}",
        known.display()
    );

    // A re-run finds everything up to date.
    let out = run_ok(&sshd, "cp", &["--json", s(&src), &remote(&dst)]);
    let again = parse_json_report(out.as_bytes());
    assert_eq!(again.value["up_to_date"], report.files(), "{out}");
    assert_eq!(again.files(), 0, "{out}");

    // Pull it back.
    let back = t.path().join("back");
    let out = run_ok(&sshd, "cp", &["--json", &remote(&dst), s(&back)]);
    assert_eq!(parse_json_report(out.as_bytes()).value["direction"], "pull");
    assert_trees_equal(&src, &back);
    assert_servers_gone(&sshd, Duration::from_secs(5));
}

#[test]
fn via_ssh_tunnels_the_streams_through_the_ssh_connection() {
    let sshd = Sshd::start();
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 300, 5000, 7);
    file(&src.join("big"), &random_bytes(5 << 20, 3), 0o640);
    let dst = t.path().join("dst");
    let out = run(&sshd, "cp", &["-vv", "--via-ssh", s(&src), &remote(&dst)]);
    assert_ok(&out, None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("go through ssh"), "{err}");
    // The one-shot server listened on the remote's loopback, where only ssh reaches it.
    assert!(err.contains("--listen 127.0.0.1:0"), "{err}");
    assert_trees_equal(&src, &dst);

    let back = t.path().join("back");
    run_ok(&sshd, "cp", &["--via-ssh", &remote(&dst), s(&back)]);
    assert_trees_equal(&src, &back);
    assert_servers_gone(&sshd, Duration::from_secs(5));
}

#[test]
fn the_token_is_on_no_command_line_and_the_server_ends_with_the_client() {
    let sshd = Sshd::start();
    let t = tmp();
    let src = t.path().join("src");
    file(&src.join("slow"), &random_bytes(800 << 10, 1), 0o644);
    let dst = t.path().join("dst");
    // Slowed down so that the remote server can be looked at while it serves.
    let mut child = spawn_sprat(
        bin(),
        args(
            &sshd,
            "cp",
            &["--bwlimit", "100KB/s", s(&src), &remote(&dst)],
        ),
        &[],
    );
    let until = Instant::now() + Duration::from_secs(20);
    let server = loop {
        if let Some(p) = one_shot_servers(&sshd).into_iter().next() {
            break p;
        }
        assert!(
            Instant::now() < until,
            "no one-shot server appeared below sshd"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    // Exactly what the client asked for: no token, no key.
    let expected: Vec<String> = [s(bin()), "serve", "--one-shot", "--root", "/"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    assert_eq!(server.args, expected);
    for p in sshd.sessions() {
        for text in p.args.iter().chain(&p.environ) {
            assert!(
                !has_long_hex(text),
                "pid {} shows a secret: {text:?}",
                p.pid
            );
        }
    }
    // Nor on the client's side (its ssh processes).
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(args) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&args).replace('\0', " ");
        if text.contains(&sshd.port().to_string()) {
            assert!(
                !has_long_hex(&text),
                "a command line shows a secret: {text}"
            );
        }
    }
    let out = child.wait_or_panic(Duration::from_secs(60));
    assert_ok(&out, None);
    assert_trees_equal(&src, &dst);
    // The server seen above has exited (not merely left sshd's tree, as an orphan would).
    let until = Instant::now() + Duration::from_secs(5);
    while Path::new(&format!("/proc/{}", server.pid)).exists() {
        assert!(
            Instant::now() < until,
            "the one-shot server {} still runs after the client finished",
            server.pid
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn streams_that_cannot_connect_directly_go_through_ssh() {
    // The client runs in a network namespace of its own: it reaches sshd only through a unix
    // socket (the file system crosses namespaces), so the one-shot server's address, a
    // loopback port of this host, cannot be reached from it, as behind a NAT or a firewall.
    let sshd = Sshd::start();
    let t = tmp();
    let sock = t.path().join("sshd.sock");
    sshd.unix_bridge(&sock);
    let src = t.path().join("src");
    make_many_files(&src, 100, 3000, 5);
    let dst = t.path().join("dst");
    let rsh = format!("{} -o 'ProxyCommand=nc -U {}'", sshd.rsh(), s(&sock));
    let script = "ip link set lo up && exec \"$@\"";
    let mut v: Vec<OsString> = ["-n", "sh", "-c", script, "sh"]
        .iter()
        .map(OsString::from)
        .collect();
    v.push(bin().into());
    v.extend(args_with(&rsh, "cp", &["-vv", s(&src), &remote(&dst)]));
    let out = run_sprat(Path::new("unshare"), v, &[]);
    assert_ok(&out, None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("directly"), "{err}");
    assert!(err.contains("go through ssh"), "{err}");
    assert_trees_equal(&src, &dst);
    assert_servers_gone(&sshd, Duration::from_secs(5));
}

#[test]
fn namespace_commands_accept_host_colon_path() {
    let sshd = Sshd::start();
    let t = tmp();
    let root = t.path().join("tree");
    file(&root.join("a/one.txt"), b"one\n", 0o644);
    file(&root.join("b.txt"), b"bee\n", 0o600);

    let out = run_ok(&sshd, "ls", &[&remote(&root)]);
    assert_eq!(out, "a\nb.txt\n");
    let out = run_ok(&sshd, "ls", &["-R", &remote(&root)]);
    assert_eq!(out, "a\na/one.txt\nb.txt\n");
    let out = run_ok(&sshd, "stat", &["--json", &remote(&root.join("b.txt"))]);
    assert!(
        out.contains("\"size\":4") && out.contains("\"mode\":\"0600\""),
        "{out}"
    );
    let out = run_ok(&sshd, "du", &["--json", &remote(&root)]);
    assert!(out.contains("\"files\":2"), "{out}");
    run_ok(&sshd, "mkdir", &["-p", &remote(&root.join("c/d"))]);
    assert!(root.join("c/d").is_dir());
    run_ok(
        &sshd,
        "mv",
        &[&remote(&root.join("b.txt")), &remote(&root.join("c/b.txt"))],
    );
    assert_eq!(std::fs::read(root.join("c/b.txt")).unwrap(), b"bee\n");
    let out = run_ok(
        &sshd,
        "sum",
        &["--algo", "md5", &remote(&root.join("a/one.txt"))],
    );
    // md5("one\n")
    assert!(
        out.starts_with("5bbf5a52328e7439ae6e719dfe712200  "),
        "{out}"
    );
    run_ok(&sshd, "rm", &["-r", &remote(&root.join("c"))]);
    assert!(!root.join("c").exists());
    assert_servers_gone(&sshd, Duration::from_secs(5));
}

#[test]
fn relative_paths_are_relative_to_the_remote_home() {
    let sshd = Sshd::start();
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap();
    let dir = tempfile::Builder::new()
        .prefix("sprat-ssh-home-test-")
        .tempdir_in(&home)
        .unwrap();
    let name = dir
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 20, 100, 1);
    run_ok(&sshd, "cp", &[s(&src), &format!("127.0.0.1:{name}/dst")]);
    assert_trees_equal(&src, &dir.path().join("dst"));
    let out = run_ok(&sshd, "ls", &[&format!("root@127.0.0.1:{name}")]);
    assert_eq!(out, "dst\n");
}

#[test]
fn a_remote_without_sprat_is_named_in_one_line() {
    let sshd = Sshd::start();
    let t = tmp();
    let src = t.path().join("src");
    file(&src.join("f"), b"x", 0o644);
    let mut v: Vec<OsString> = vec!["cp".into(), "-e".into(), sshd.rsh().into()];
    v.extend(["--remote-sprat", "/nonexistent/sprat"].map(OsString::from));
    v.push(src.into());
    v.push(remote(&t.path().join("dst")).into());
    let out = run_sprat(bin(), v, &[]);
    assert_exit(&out, 4);
    let line = assert_error_names(&out, &["sprat not found on 127.0.0.1 (ssh exit 127)"]);
    assert!(line.contains("--remote-sprat"), "{line}");
    assert!(!t.path().join("dst").exists());
}

#[test]
fn a_refused_ssh_login_names_the_host_and_says_why() {
    let sshd = Sshd::start();
    let t = tmp();
    // Another key than the one sshd knows.
    let key = t.path().join("stranger");
    let made = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key)
        .status()
        .unwrap();
    assert!(made.success());
    let rsh = sshd.rsh().replace(s(&sshd.client_key()), s(&key));
    let v: Vec<OsString> = ["ls", "-e", &rsh, "127.0.0.1:/"]
        .iter()
        .map(OsString::from)
        .collect();
    let out = run_sprat(bin(), v, &[]);
    assert_exit(&out, 4);
    let line = assert_error_names(&out, &["ssh to 127.0.0.1 failed (exit 255)"]);
    assert!(line.contains("Permission denied"), "{line}");
}

#[test]
fn the_remote_shell_comes_from_sprat_rsh_and_local_paths_with_colons_stay_local() {
    let sshd = Sshd::start();
    let t = tmp();
    let root = t.path().join("r");
    file(&root.join("x"), b"x", 0o644);
    let v: Vec<OsString> = ["ls", "--remote-sprat", s(bin()), &remote(&root)]
        .iter()
        .map(OsString::from)
        .collect();
    let out = run_sprat(bin(), v, &[("SPRAT_RSH", &sshd.rsh())]);
    assert_ok(&out, None);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "x\n");

    // `./a:b` and `/dir/a:b` are local paths, as with scp.
    let weird = t.path().join("a:b");
    file(&weird.join("f"), b"f", 0o644);
    let out = common::cp_local(&[], s(&weird), t.path().join("c:d"));
    assert_ok(&out, None);
    assert_trees_equal(&weird, &t.path().join("c:d"));
}

#[test]
fn a_copy_between_two_remotes_goes_from_one_server_to_the_other() {
    let sshd = Sshd::start();
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 50, 3000, 9);
    let dst = t.path().join("dst");
    // Two logins, so two one-shot servers: the source pushes to the destination.
    run_ok(
        &sshd,
        "cp",
        &[&remote(&src), &format!("root@127.0.0.1:{}", s(&dst))],
    );
    assert_trees_equal(&src, &dst);

    // Through ssh, the source's server could not reach the destination's: refused.
    let other = t.path().join("other");
    let out = run(
        &sshd,
        "cp",
        &[
            "--via-ssh",
            &remote(&src),
            &format!("root@127.0.0.1:{}", s(&other)),
        ],
    );
    assert_exit(&out, 2);
    assert_error_names(&out, &["go through ssh"]);
    assert!(!other.exists());
    assert_servers_gone(&sshd, Duration::from_secs(5));
}

#[test]
fn a_one_shot_server_takes_its_token_from_stdin_and_exits_when_stdin_closes() {
    use std::io::{BufRead, BufReader, Write};
    let t = tmp();
    let root = t.path().join("root");
    file(&root.join("f"), b"eff", 0o644);
    let mut server = std::process::Command::new(bin())
        .args(["serve", "--one-shot", "--listen", "127.0.0.1:0", "--root"])
        .arg(&root)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let token = "0123456789abcdef0123456789abcdef";
    let mut stdin = server.stdin.take().unwrap();
    writeln!(stdin, "{token}").unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let addr = lines.next().unwrap().unwrap();
    let addr = addr.strip_prefix("listening on ").unwrap().to_string();
    let fingerprint = lines.next().unwrap().unwrap();
    let fingerprint = fingerprint
        .strip_prefix("fingerprint ")
        .unwrap()
        .to_string();
    // It serves that token, with the key it printed.
    let url = format!("sprat://{addr}/");
    let ls = |token: &str| {
        run_sprat(
            bin(),
            ["ls", "--server-fingerprint", &fingerprint, &url],
            &[("SPRAT_TOKEN", token)],
        )
    };
    let out = ls(token);
    assert_ok(&out, None);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "f\n");
    assert_exit(&ls("another-token-of-enough-bytes"), 3);
    // Its stdin closes: it exits at once.
    drop(stdin);
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(status) = server.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        if Instant::now() > until {
            let _ = server.kill();
            panic!("the one-shot server still runs 5 s after its stdin closed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The process ids of `parent`'s children named `name` (from /proc).
fn children_named(parent: u32, name: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `PID (COMM) STATE PPID ...`: COMM may hold spaces, so read after its last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        if comm == name && ppid == Some(&parent.to_string()) {
            found.push(pid);
        }
    }
    found
}

/// ssh dying in the middle of a copy (a dropped link, a killed ssh) takes the one-shot server
/// with it: the copy ends at once naming ssh (exit 4), instead of dialling the dead server's
/// port until `--retry-for` runs out; run again, it resumes and completes.
#[test]
fn a_copy_whose_ssh_dies_ends_at_once_naming_ssh_and_a_rerun_completes() {
    let sshd = Sshd::start();
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 400, 20_000, 11);
    let dst = t.path().join("dst");
    let rest = ["--bwlimit", "1MB/s", s(&src), &remote(&dst)];
    let mut child = spawn_sprat(bin(), args(&sshd, "cp", &rest), &[]);
    let started = Instant::now();
    let ssh = loop {
        let found = children_named(child.pid(), "ssh");
        if !found.is_empty() && dst.exists() {
            break found;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no copy under way"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_millis(500));
    for pid in ssh {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
    }
    let killed = Instant::now();
    let out = child.wait_or_panic(Duration::from_secs(60));
    assert_exit(&out, 4);
    assert_error_names(&out, &["ssh to 127.0.0.1 ended during the copy"]);
    assert!(
        killed.elapsed() < Duration::from_secs(20),
        "ended {:?} after ssh died",
        killed.elapsed()
    );
    run_ok(&sshd, "cp", &[s(&src), &remote(&dst)]);
    assert_trees_equal(&src, &dst);
}

/// Output of the remote shell's start-up files without a last newline runs into the server's
/// first line: the copy still finds it (before, "started no server").
#[test]
fn remote_shell_noise_without_a_newline_does_not_stop_the_copy() {
    let sshd = Sshd::start();
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 20, 1000, 5);
    let dst = t.path().join("dst");
    let noisy = format!("printf 'Welcome! '; {}", s(bin()));
    let mut v: Vec<OsString> = vec!["cp".into(), "-e".into(), sshd.rsh().into()];
    v.extend(["--remote-sprat", noisy.as_str()].map(OsString::from));
    v.push(src.clone().into());
    v.push(remote(&dst).into());
    let out = run_sprat(bin(), v, &[]);
    assert_ok(&out, None);
    assert_trees_equal(&src, &dst);
}

/// The ssh path stalls in the middle of a copy whose streams go through it (`--via-ssh`): the
/// copy must not hang; it fails within `--stall-timeout` and `--retry-for` and their own
/// deadlines, however each run ends.
#[test]
fn a_stalled_ssh_path_does_not_hang_a_copy_through_it() {
    let sshd = Sshd::start();
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 200, 100_000, 13);
    let dst = t.path().join("dst");
    let to = std::net::SocketAddr::from(([127, 0, 0, 1], sshd.port()));
    let relay = common::RelayProc::start(to, &["--stall-after", "3MB"]);
    let rsh = sshd.rsh().replace(
        &format!("-p {}", sshd.port()),
        &format!("-p {}", relay.addr.port()),
    );
    let rest = [
        "--via-ssh",
        "--stall-timeout",
        "3s",
        "--retry-for",
        "15s",
        s(&src),
        &remote(&dst),
    ];
    let started = Instant::now();
    let mut child = spawn_sprat(bin(), args_with(&rsh, "cp", &rest), &[]);
    let out = child.wait_or_panic(Duration::from_secs(120));
    assert_exit(&out, 6);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "ended after {:?}",
        started.elapsed()
    );
}

/// Remote paths through symlinks (`/scratch -> /lustre/scratch`, `current -> run42`) work as
/// with scp and rsync: the one-shot server exports `/`, where nothing lies outside (before,
/// "path leads outside the exported root", exit 5). Inside the tree written, a symlink is
/// still never followed.
#[test]
fn remote_paths_through_symlinks_are_followed_as_scp_does() {
    let sshd = Sshd::start();
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 30, 1000, 17);
    let real = t.path().join("lustre/scratch");
    std::fs::create_dir_all(&real).unwrap();
    std::os::unix::fs::symlink(&real, t.path().join("scratch")).unwrap();
    std::os::unix::fs::symlink("lustre", t.path().join("rel-link")).unwrap();
    run_ok(
        &sshd,
        "cp",
        &[s(&src), &remote(&t.path().join("scratch/run"))],
    );
    assert_trees_equal(&src, &real.join("run"));
    run_ok(
        &sshd,
        "cp",
        &[s(&src), &remote(&t.path().join("rel-link/scratch/run2"))],
    );
    assert_trees_equal(&src, &real.join("run2"));
    // Pulled through the symlink, and from a symlink to the source directory itself.
    std::os::unix::fs::symlink(real.join("run"), t.path().join("current")).unwrap();
    let back = t.path().join("back");
    run_ok(
        &sshd,
        "cp",
        &[&remote(&t.path().join("scratch/run")), s(&back)],
    );
    assert_trees_equal(&src, &back);
    let back2 = t.path().join("back2");
    run_ok(
        &sshd,
        "cp",
        &[&remote(&t.path().join("current")), s(&back2)],
    );
    assert_trees_equal(&src, &back2);
}

/// Errors and reports of a copy over ssh speak of what the user wrote: the host (not the
/// address the one-shot server listened on) and the path with its leading `/`; `HOST:` (the
/// remote home) as `HOST:NAME`.
#[test]
fn errors_and_reports_over_ssh_name_the_host_and_path_the_user_wrote() {
    let sshd = Sshd::start();
    let t = tmp();
    let missing = t.path().join("not-there");
    let out = run(&sshd, "cp", &[&remote(&missing), s(&t.path().join("dst"))]);
    assert_exit(&out, 2);
    let line = assert_error_names(
        &out,
        &["127.0.0.1 (over ssh)", &format!("'{}'", s(&missing))],
    );
    assert!(!line.contains("127.0.0.1:"), "{line}");
    let src = t.path().join("d00");
    file(&src.join("f"), b"f", 0o644);
    let out = run_ok(&sshd, "cp", &["-n", s(&src), "127.0.0.1:"]);
    assert!(out.contains("127.0.0.1:d00"), "{out}");
    // A refusal names the arguments as written.
    file(&src.join("sub/g"), b"g", 0o644);
    let (inner, outer) = (remote(&src.join("sub")), remote(&src));
    let out = run(&sshd, "cp", &["--delete", &inner, &outer]);
    assert_exit(&out, 2);
    assert_error_names(
        &out,
        &[&format!("'{inner}' is inside the destination '{outer}'")],
    );
}

/// A copy over ssh interrupted (Ctrl-C) leaves no ssh control directory behind in TMPDIR.
#[test]
fn an_interrupted_copy_over_ssh_leaves_no_control_directory() {
    let sshd = Sshd::start();
    let t = tmp();
    let src = t.path().join("src");
    make_many_files(&src, 200, 20_000, 19);
    let tmpdir = t.path().join("tmpdir");
    std::fs::create_dir(&tmpdir).unwrap();
    let dst = t.path().join("dst");
    let rest = ["--bwlimit", "1MB/s", s(&src), &remote(&dst)];
    let mut child = spawn_sprat(bin(), args(&sshd, "cp", &rest), &[("TMPDIR", s(&tmpdir))]);
    let started = Instant::now();
    while !dst.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no copy under way"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        std::fs::read_dir(&tmpdir).unwrap().count(),
        1,
        "a control directory"
    );
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.pid() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let out = child.wait_or_panic(Duration::from_secs(30));
    assert_exit(&out, 130);
    let left: Vec<_> = std::fs::read_dir(&tmpdir).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Namespace commands over ssh name the host and path as the user wrote them in errors too.
#[test]
fn namespace_errors_over_ssh_name_the_host_and_path_the_user_wrote() {
    let sshd = Sshd::start();
    let t = tmp();
    let missing = t.path().join("not-there");
    for cmd in ["stat", "ls", "du"] {
        let out = run(&sshd, cmd, &[&remote(&missing)]);
        assert!(!out.status.success());
        let line = assert_error_names(
            &out,
            &["127.0.0.1 (over ssh)", &format!("'{}", s(&missing))],
        );
        assert!(!line.contains("127.0.0.1:"), "{cmd}: {line}");
    }
}

/// Several sources go into `HOST:` (the remote home) and into `HOST:DIR/` as one source
/// would: into the home, not the remote `/` (where they went before), and never through a
/// symlink at `DIR/NAME` (the one-shot server exports `/`, where the way to a path follows
/// links, so only the refusal of a link at NAME kept it out of where it points).
#[test]
fn several_sources_over_ssh_go_into_the_home_and_never_through_a_link() {
    let sshd = Sshd::start();
    let t = tmp();
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap();
    let unique = t.path().file_name().unwrap().to_str().unwrap().to_string();
    let names = [format!("{unique}-a"), format!("{unique}-b")];
    let sources: Vec<_> = names.iter().map(|n| t.path().join(n)).collect();
    for (src, name) in sources.iter().zip(&names) {
        file(&src.join("f"), name.as_bytes(), 0o644);
    }
    let out = run(&sshd, "cp", &[s(&sources[0]), s(&sources[1]), "127.0.0.1:"]);
    let landed: Vec<_> = names.iter().map(|n| home.join(n)).collect();
    let at_root: Vec<_> = names.iter().map(|n| Path::new("/").join(n)).collect();
    let in_home = landed.iter().all(|d| d.join("f").is_file());
    for dir in landed.iter().chain(&at_root) {
        if !dir.starts_with(t.path()) && dir.exists() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    assert_ok(&out, None);
    assert!(in_home, "{}", sprat_testkit::describe(&out));

    let (dst, outside) = (t.path().join("dst"), t.path().join("outside"));
    file(&outside.join("existing"), b"keep", 0o644);
    std::fs::create_dir_all(&dst).unwrap();
    std::os::unix::fs::symlink(&outside, dst.join(&names[0])).unwrap();
    let into = format!("{}/", remote(&dst));
    let out = run(&sshd, "cp", &[s(&sources[0]), s(&sources[1]), &into]);
    assert_exit(&out, 2);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is a symbolic link"),
        "{}",
        sprat_testkit::describe(&out)
    );
    let there: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(there, ["existing"]);
    assert_trees_equal(&sources[1], &dst.join(&names[1]));
}
