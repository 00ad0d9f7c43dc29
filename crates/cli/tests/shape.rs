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
