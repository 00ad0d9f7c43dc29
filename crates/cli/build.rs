//! Gives `sprat --version` the commit it was built from (`SPRAT_COMMIT`): the build
//! environment's `SPRAT_COMMIT` if set (a packager building from an archive), else `git
//! describe` of the work tree (a checkout, a linked worktree, or the checkout `cargo install
//! --git` makes), else `unknown` (a source archive).

use std::process::Command;

/// What `git ARGS` prints on success, trimmed; `None` without git or outside a work tree.
fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=SPRAT_COMMIT");
    if let Some(given) = std::env::var("SPRAT_COMMIT")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
    {
        println!("cargo:rustc-env=SPRAT_COMMIT={given}");
        return;
    }
    let commit = git(&["describe", "--always", "--dirty", "--exclude", "*"])
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SPRAT_COMMIT={commit}");
    // A new commit or a checkout changes HEAD, the index or the refs. In a linked worktree
    // HEAD and the index are its own, the refs the repository's.
    let dirs = [
        git(&["rev-parse", "--absolute-git-dir"]),
        git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]),
    ];
    let watched = [
        (0, "HEAD"),
        (0, "index"),
        (1, "refs/heads"),
        (1, "packed-refs"),
    ];
    let mut any = false;
    for (dir, name) in watched {
        if let Some(path) = dirs[dir]
            .as_ref()
            .map(|d| std::path::Path::new(d).join(name))
        {
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
                any = true;
            }
        }
    }
    if !any {
        // Not in a work tree: rebuilt when the package's files change (cargo's default).
        println!("cargo:rerun-if-changed=.");
        return;
    }
    // An edit of any crate's sources makes the work tree dirty without touching the files
    // above: without this, a build after it would still carry the clean commit's name.
    if let Some(crates) = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .and_then(|dir| dir.parent().map(std::path::Path::to_path_buf))
    {
        println!("cargo:rerun-if-changed={}", crates.display());
    }
}
