//! `sprat demo`, the README's first command, end to end: it makes its data set, starts a real
//! server on loopback, pushes, pulls back, verifies both copies (a FIFO and symlinks among
//! them) and says so; `--dir` keeps what it made.
#![allow(clippy::unwrap_used)]

mod common;

use common::{bin, tmp};
use sprat_testkit::{describe, run_sprat};

#[test]
fn the_demo_pushes_pulls_and_verifies_both_copies() {
    let t = tmp();
    let dir = t.path().join("demo");
    let args = ["demo", "--files", "300", "--dir", dir.to_str().unwrap()];
    let out = run_sprat(bin(), args, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for copy in ["pushed copy", "pulled copy"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("verified {copy}: ")))
            .unwrap_or_else(|| panic!("no verification of the {copy}:\n{stdout}"));
        assert!(line.contains("1 special file identical"), "{line}");
    }
    assert!(stdout.lines().any(|l| l == "demo OK"), "{stdout}");
    // What it made is kept where it was asked to make it.
    assert!(dir.is_dir());
}
