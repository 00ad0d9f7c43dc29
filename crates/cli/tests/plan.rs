#![allow(clippy::unwrap_used)]
//! `sprat plan` and `sprat cp --plan`: a tree split into shards, the shards copied at the same
//! time by separate processes (local and to a real server), finished, and compared with the
//! source; hard links kept in one shard; what `--finish` finds missing; bad input.

mod common;

use common::{assert_error_names, assert_exit, assert_ok, bin, cp_args, server, tmp};
use sprat_testkit::{
    assert_trees_equal, make_fidelity_tree, make_many_files, run_sprat, spawn_sprat,
};
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

fn plan(src: &Path, shards: u32, out: &Path) -> std::process::Output {
    let shards = shards.to_string();
    run_sprat(
        bin(),
        [
            "plan".as_ref(),
            src.as_os_str(),
            "--shards".as_ref(),
            shards.as_ref(),
            "--out".as_ref(),
            out.as_os_str(),
            "--json".as_ref(),
        ],
        &[],
    )
}

fn shard_paths(plan: &Path, k: usize) -> Vec<Vec<u8>> {
    std::fs::read(plan.join(format!("shard-{k:05}.paths")))
        .unwrap()
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Runs `sprat cp --plan PLAN ARGS... SRC DST` (local paths, or a server's URL with `extra`).
fn cp_plan(plan: &Path, args: &[&str], src: &Path, dst: impl AsRef<std::ffi::OsStr>) -> Output {
    let mut all = vec!["--plan", plan.to_str().unwrap()];
    all.extend(args);
    run_sprat(bin(), cp_args(None, &all, src, dst), &[])
}

/// A tree with the fidelity tree's odd names, symlinks and empty directories, plus enough
/// small files that every shard gets some.
fn source(dir: &Path) {
    make_fidelity_tree(dir);
    make_many_files(&dir.join("many"), 2000, 3000, 7);
}

/// Runs every shard at once, each as its own `sprat cp` process, then `--finish`.
fn copy_all_shards(plan: &Path, shards: usize, extra: &[&str], dst: &str, src: &Path) {
    let server_args = extra.to_vec();
    let children: Vec<_> = (0..shards)
        .map(|k| {
            let k = k.to_string();
            let mut args: Vec<&str> = vec!["cp", "--plan", plan.to_str().unwrap(), "--shard", &k];
            args.extend(&server_args);
            args.extend([src.to_str().unwrap(), dst]);
            spawn_sprat(bin(), args, &[])
        })
        .collect();
    for mut c in children {
        let out = c.wait_or_panic(Duration::from_secs(120));
        assert_ok(&out, None);
    }
}

#[test]
fn four_local_shards_at_once_then_finish_equal_the_source() {
    let t = tmp();
    let (src, plan_dir, dst) = (
        t.path().join("src"),
        t.path().join("plan"),
        t.path().join("dst"),
    );
    source(&src);
    let out = plan(&src, 4, &plan_dir);
    assert_ok(&out, None);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["shards"].as_array().unwrap().len(), 4);
    assert!(summary["imbalance"].as_f64().unwrap() < 1.2, "{summary}");

    // Every path in exactly one shard.
    let mut seen = HashSet::new();
    for k in 0..4 {
        let paths = shard_paths(&plan_dir, k);
        assert!(!paths.is_empty(), "shard {k} is empty");
        for p in paths {
            assert!(seen.insert(p.clone()), "{p:?} is in two shards");
        }
    }

    copy_all_shards(&plan_dir, 4, &[], dst.to_str().unwrap(), &src);
    let out = cp_plan(&plan_dir, &["--finish"], &src, &dst);
    assert_ok(&out, None);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("is at the destination"),
        "{out:?}"
    );
    // Directories' mtimes are only right after --finish; the comparison checks them.
    assert_trees_equal(&src, &dst);
    // -q: nothing on stdout once all is there.
    let out = cp_plan(&plan_dir, &["--finish", "-q"], &src, &dst);
    assert_ok(&out, None);
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[test]
fn shards_pushed_to_a_server_at_once_then_finish_equal_the_source() {
    let t = tmp();
    let (src, plan_dir, root) = (
        t.path().join("src"),
        t.path().join("plan"),
        t.path().join("root"),
    );
    source(&src);
    assert_ok(&plan(&src, 3, &plan_dir), None);
    let server = server(&root);
    let url = server.url("tree");
    let auth: Vec<String> = server
        .client_args()
        .into_iter()
        .map(|a| a.into_string().unwrap())
        .collect();
    let auth: Vec<&str> = auth.iter().map(String::as_str).collect();
    copy_all_shards(&plan_dir, 3, &auth, &url, &src);

    let mut finish: Vec<&str> = vec!["--plan", plan_dir.to_str().unwrap(), "--finish"];
    finish.extend(&auth);
    let out = run_sprat(bin(), cp_args(None, &finish, &src, &url), &[]);
    assert_ok(&out, Some(&server));
    assert_trees_equal(&src, &root.join("tree"));
}

#[test]
fn hard_links_of_one_file_are_planned_into_one_shard() {
    let t = tmp();
    let (src, plan_dir) = (t.path().join("src"), t.path().join("plan"));
    make_many_files(&src, 400, 1000, 3);
    std::fs::write(src.join("data"), vec![7u8; 50_000]).unwrap();
    for name in ["a-link", "m-link", "z-link"] {
        std::fs::hard_link(src.join("data"), src.join(name)).unwrap();
    }
    assert_eq!(std::fs::metadata(src.join("data")).unwrap().nlink(), 4);
    assert_ok(&plan(&src, 4, &plan_dir), None);
    let holding: Vec<usize> = (0..4)
        .filter(|&k| {
            shard_paths(&plan_dir, k)
                .iter()
                .any(|p| p.ends_with(b"link") || p == b"data")
        })
        .collect();
    assert_eq!(
        holding.len(),
        1,
        "hard links spread over shards {holding:?}"
    );
    let paths = shard_paths(&plan_dir, holding[0]);
    for name in ["data", "a-link", "m-link", "z-link"] {
        assert!(paths.contains(&name.as_bytes().to_vec()), "{name} missing");
    }
}

#[test]
fn finish_names_a_file_that_no_shard_copied_and_exits_1() {
    let t = tmp();
    let (src, plan_dir, dst) = (
        t.path().join("src"),
        t.path().join("plan"),
        t.path().join("dst"),
    );
    make_many_files(&src, 300, 100, 5);
    assert_ok(&plan(&src, 2, &plan_dir), None);
    // Only shard 0 runs.
    let out = cp_plan(&plan_dir, &["--shard", "0"], &src, &dst);
    assert_ok(&out, None);
    let finish = || cp_plan(&plan_dir, &["--finish"], &src, &dst);
    let out = finish();
    assert_exit(&out, 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let missing = String::from_utf8_lossy(&shard_paths(&plan_dir, 1)[0]).into_owned();
    assert!(
        stderr.contains(&format!("not finished: {missing}:")),
        "{missing} not named:\n{stderr}"
    );
    // Shard 1 run later: finished.
    let out = cp_plan(&plan_dir, &["--shard", "1"], &src, &dst);
    assert_ok(&out, None);
    assert_ok(&finish(), None);
    assert_trees_equal(&src, &dst);
}

/// Files and directories made at the source after the plan are in no shard: `--finish` names
/// them and exits 1 (before, every step exited 0 and they were never copied); a plain re-sync
/// then copies them and `--finish` is whole again.
#[test]
fn finish_names_what_the_source_gained_after_the_plan() {
    let t = tmp();
    let (src, plan_dir, dst) = (
        t.path().join("src"),
        t.path().join("plan"),
        t.path().join("dst"),
    );
    make_many_files(&src, 200, 100, 9);
    assert_ok(&plan(&src, 2, &plan_dir), None);
    std::fs::write(src.join("d000/late-file"), b"written after the plan").unwrap();
    std::fs::create_dir_all(src.join("late-dir/sub")).unwrap();
    std::fs::write(src.join("late-dir/sub/f"), b"f").unwrap();
    for k in ["0", "1"] {
        assert_ok(&cp_plan(&plan_dir, &["--shard", k], &src, &dst), None);
    }
    let out = cp_plan(&plan_dir, &["--finish"], &src, &dst);
    assert_exit(&out, 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for named in [
        "not in the plan: d000/late-file:",
        "not in the plan: late-dir/:",
    ] {
        assert!(stderr.contains(named), "{named}: {stderr}");
    }
    for flag in ["--json", "--json-events"] {
        let json = cp_plan(&plan_dir, &["--finish", flag], &src, &dst);
        let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert!(
            value["not_in_plan"]
                .as_array()
                .is_some_and(|a| a.len() >= 2),
            "{value}"
        );
    }
    assert_ok(&run_sprat(bin(), cp_args(None, &[], &src, &dst), &[]), None);
    assert_ok(&cp_plan(&plan_dir, &["--finish"], &src, &dst), None);
    assert_trees_equal(&src, &dst);
    // A planned file removed from the source since: its shard notes it and succeeds (review 18
    // F11: it failed on every re-run, and Slurm never ran the finishing job).
    let gone = String::from_utf8_lossy(&shard_paths(&plan_dir, 0)[0]).into_owned();
    std::fs::remove_file(src.join(&gone)).unwrap();
    let out = cp_plan(&plan_dir, &["--shard", "0"], &src, &dst);
    assert_ok(&out, None);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "note: {gone}: in the plan, but no longer at the source"
        )),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A planned directory removed from the source since: a note, not a failure no run of
    // the shards could ever fix.
    std::fs::remove_dir_all(src.join("d001")).unwrap();
    let out = cp_plan(&plan_dir, &["--finish"], &src, &dst);
    assert_ok(&out, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("d001: in the plan, but no longer at the source"),
        "{stderr}"
    );
}

#[test]
fn bad_plans_shards_and_sources_are_one_line_errors() {
    let t = tmp();
    let (src, plan_dir) = (t.path().join("src"), t.path().join("plan"));
    make_many_files(&src, 10, 10, 1);
    assert_ok(&plan(&src, 2, &plan_dir), None);
    let dst = t.path().join("dst");

    let out = cp_plan(&plan_dir, &["--shard", "2"], &src, &dst);
    assert_exit(&out, 2);
    assert_error_names(&out, &["--shard 2"]);

    let out = cp_plan(&plan_dir, &[], &src, &dst);
    assert_exit(&out, 2);
    assert_error_names(&out, &["--shard"]);

    // A plan directory that is not empty is not overwritten.
    let out = plan(&src, 2, &plan_dir);
    assert_exit(&out, 2);
    assert_error_names(&out, &["not empty"]);

    // A cut-off shard list is refused, naming the file.
    let list = plan_dir.join("shard-00001.paths");
    let bytes = std::fs::read(&list).unwrap();
    std::fs::write(&list, &bytes[..bytes.len() - 1]).unwrap();
    let out = cp_plan(&plan_dir, &["--shard", "1"], &src, &dst);
    assert_exit(&out, 2);
    assert_error_names(&out, &["shard-00001.paths"]);

    // Not a plan at all.
    let out = cp_plan(&src, &["--shard", "0"], &src, &dst);
    assert_exit(&out, 2);
    assert_error_names(&out, &["plan.json"]);

    // A single file cannot be planned.
    let file = t.path().join("single");
    std::fs::write(&file, b"one file").unwrap();
    let out = plan(&file, 2, &t.path().join("plan2"));
    assert_exit(&out, 2);
    assert_error_names(&out, &["not a directory"]);
}

/// `-u` shards leave a file newer at the destination as it is, and `--finish -u` counts it
/// as there (it reported it unfinished, exit 1).
#[test]
fn finish_counts_what_update_leaves_on_purpose() {
    let t = tmp();
    let (src, dst, plan_dir) = (
        t.path().join("src"),
        t.path().join("dst"),
        t.path().join("plan"),
    );
    make_many_files(&src, 40, 100, 3);
    std::fs::write(src.join("f"), b"NEW").unwrap();
    let old = std::fs::File::options()
        .write(true)
        .open(src.join("f"))
        .unwrap();
    old.set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000))
        .unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::write(dst.join("f"), b"NEWER AND LONGER").unwrap();
    assert_ok(&plan(&src, 2, &plan_dir), None);
    for k in ["0", "1"] {
        assert_ok(&cp_plan(&plan_dir, &["-u", "--shard", k], &src, &dst), None);
    }
    let out = cp_plan(&plan_dir, &["-u", "--finish"], &src, &dst);
    assert_ok(&out, None);
    assert_eq!(std::fs::read(dst.join("f")).unwrap(), b"NEWER AND LONGER");
    // Without -u the same destination is not what the plan would make.
    let out = cp_plan(&plan_dir, &["--finish"], &src, &dst);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        sprat_testkit::describe(&out)
    );
}

/// `--ignore-existing` through a plan: a file the destination has where the source has a
/// directory stays a file after the shards and after `--finish`, which made the directory
/// over it before (review 2026-11-29 of `--ignore-existing`, #6).
#[test]
fn finish_with_ignore_existing_keeps_a_file_where_the_source_has_a_directory() {
    let t = tmp();
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/x"), b"x").unwrap();
    std::fs::write(src.join("f"), b"f").unwrap();
    let plan_dir = t.path().join("plan");
    assert_eq!(plan(&src, 1, &plan_dir).status.code(), Some(0));
    let dst = t.path().join("dst");
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::write(dst.join("d"), b"kept").unwrap();
    let shard = cp_plan(
        &plan_dir,
        &["--shard", "0", "--ignore-existing"],
        &src,
        &dst,
    );
    assert_eq!(
        shard.status.code(),
        Some(1),
        "{}",
        sprat_testkit::describe(&shard)
    );
    let finish = cp_plan(&plan_dir, &["--finish", "--ignore-existing"], &src, &dst);
    assert_ne!(
        finish.status.code(),
        Some(0),
        "{}",
        sprat_testkit::describe(&finish)
    );
    assert_eq!(std::fs::read(dst.join("d")).unwrap(), b"kept");
    assert_eq!(std::fs::read(dst.join("f")).unwrap(), b"f");
}
