//! Gives `sprat --version` the commit it was built from (`SPRAT_COMMIT`): `git describe` of
//! the work tree, or `unknown` outside one (a source archive).

fn main() {
    let commit = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--exclude", "*"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SPRAT_COMMIT={commit}");
    // A new commit or a checkout changes HEAD or the ref it points to.
    for path in [
        "../../.git/HEAD",
        "../../.git/refs/heads",
        "../../.git/index",
    ] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
