//! The binary's shape (issue 17, point 4): `--version` names the commit, shell completions
//! and manual pages come from the command definitions.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use sprat_testkit::run::run_sprat;

fn sprat(args: &[&str]) -> std::process::Output {
    let out = run_sprat(bin(), args.to_vec(), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    out
}

#[test]
fn version_names_the_package_and_the_commit() {
    let text = String::from_utf8(sprat(&["--version"]).stdout).unwrap();
    let want = format!("sprat {} (", env!("CARGO_PKG_VERSION"));
    assert!(
        text.starts_with(&want) && text.trim_end().ends_with(')'),
        "{text}"
    );
}

/// Built in a git work tree (a checkout or a linked worktree, whose `.git` is a file), the
/// commit is the work tree's HEAD at build time (which is this run's: cargo rebuilds when
/// HEAD moves).
#[test]
fn version_names_the_commit_of_the_work_tree() {
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    let Some(head) = head
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    else {
        eprintln!("not in a git work tree (or no git): nothing to compare");
        return;
    };
    let text = String::from_utf8(sprat(&["--version"]).stdout).unwrap();
    assert!(
        text.contains(&format!("({head}")),
        "{text} does not name {head}"
    );
}

#[test]
fn completions_cover_the_commands_and_their_options() {
    for shell in ["bash", "zsh", "fish"] {
        let text = String::from_utf8(sprat(&["completions", shell]).stdout).unwrap();
        for word in ["serve", "cp", "retry-for", "json-events"] {
            assert!(text.contains(word), "{shell}: no {word}");
        }
    }
}

#[test]
fn manual_pages_are_written_for_every_command() {
    let t = tmp();
    let dir = t.path().join("man");
    sprat(&["man", dir.to_str().unwrap()]);
    let top = std::fs::read_to_string(dir.join("sprat.1")).unwrap();
    assert!(top.starts_with(".ie") || top.contains(".TH sprat"), "{top}");
    let cp = std::fs::read_to_string(dir.join("sprat-cp.1")).unwrap();
    assert!(cp.contains(".TH sprat-cp") && cp.contains("retry"), "{cp}");
    assert!(dir.join("sprat-serve.1").exists());
}

/// `sprat completions zsh | head` (a reader that goes away): exit 0, no panic. The script is
/// larger than a pipe's buffer, so the write meets the closed pipe whatever the timing.
#[test]
fn completions_into_a_closed_pipe_are_no_error() {
    for shell in ["zsh", "powershell"] {
        let mut child = std::process::Command::new(bin())
            .args(["completions", shell])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{shell}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{shell}: {stderr}");
    }
}
