#![allow(clippy::unwrap_used)]
//! A plan run as a real Slurm array: `scripts/slurm/local-cluster.sh` starts munged, slurmctld
//! and slurmd on this host (its own configuration, ports and state in a temporary directory),
//! `scripts/slurm/submit.sh` plans a tree into 4 shards, submits `sprat-array.sbatch` as a
//! 4-task array pushing to a real server, and the finishing job after it; the server's tree
//! must equal the source.

mod common;

use common::{bin, server, tmp};
use sprat_testkit::{assert_trees_equal, make_fidelity_tree, make_many_files};
use std::path::{Path, PathBuf};
use std::process::Command;

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/slurm")
}

/// The cluster, stopped when dropped.
struct Cluster {
    dir: PathBuf,
    conf: String,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        let out = Command::new(scripts().join("local-cluster.sh"))
            .arg("start")
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "local-cluster.sh start failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let conf = String::from_utf8_lossy(&out.stdout)
            .trim()
            .strip_prefix("export SLURM_CONF=")
            .unwrap()
            .to_string();
        Cluster {
            dir: dir.to_path_buf(),
            conf,
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(scripts().join("local-cluster.sh"))
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

#[test]
fn a_four_task_slurm_array_and_its_finishing_job_copy_the_tree_exactly() {
    let t = tmp();
    let src = t.path().join("src");
    make_fidelity_tree(&src);
    make_many_files(&src.join("many"), 2000, 2000, 11);
    let root = t.path().join("root");
    let server = server(&root);
    let cluster = Cluster::start(&t.path().join("slurm"));

    let token = server.token_file().unwrap().to_str().unwrap().to_string();
    let plan = t.path().join("plan");
    let out = Command::new(scripts().join("submit.sh"))
        .args(["--wait", "4"])
        .arg(&plan)
        .arg(&src)
        .arg(server.url("tree"))
        .arg("--time=5")
        .env("SLURM_CONF", &cluster.conf)
        .env("SPRAT", bin())
        .env("SPRAT_ARGS", format!("--token-file {token}"))
        // The jobs' known_servers file: the test's own, not the user's.
        .env("XDG_CONFIG_HOME", t.path().join("config"))
        .output()
        .unwrap();
    let logs: String = std::fs::read_dir(&plan)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
                .map(|e| {
                    format!(
                        "--- {}\n{}",
                        e.file_name().to_string_lossy(),
                        std::fs::read_to_string(e.path()).unwrap_or_default()
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(
        out.status.success(),
        "submit.sh failed:\n{}{}\n{logs}\n--- slurmctld log\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(cluster.dir.join("log/slurmctld.log")).unwrap_or_default()
    );
    // Two job ids: the array and the finishing job.
    let ids = String::from_utf8_lossy(&out.stdout);
    assert_eq!(ids.split_whitespace().count(), 2, "{ids}");
    for k in 0..4 {
        assert!(
            plan.join(format!("shard-{k}.log")).exists(),
            "task {k} did not run\n{logs}"
        );
    }
    let finish = std::fs::read_to_string(plan.join("finish.log")).unwrap();
    assert!(finish.contains("is at the destination"), "{finish}");
    assert_trees_equal(&src, &root.join("tree"));

    // A shard that fails (a node lost, a copy given up) cancels the finishing job: --wait
    // must say so and name the shard, not exit 0 as on success (before, it did, with a third
    // of the data missing).
    let flaky = t.path().join("sprat-flaky");
    std::fs::write(
        &flaky,
        format!(
            "#!/bin/sh\nif [ \"${{SLURM_ARRAY_TASK_ID:-}}\" = 1 ]; then echo 'simulated node failure' >&2; exit 6; fi\nexec {} \"$@\"\n",
            bin().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&flaky, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let plan = t.path().join("plan-flaky");
    let out = Command::new(scripts().join("submit.sh"))
        .args(["--wait", "3"])
        .arg(&plan)
        .arg(&src)
        .arg(server.url("flaky"))
        .arg("--time=5")
        .env("SLURM_CONF", &cluster.conf)
        .env("SPRAT", &flaky)
        .env("SPRAT_ARGS", format!("--token-file {token}"))
        .env("XDG_CONFIG_HOME", t.path().join("config"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("did not complete"), "{said}");
    assert!(said.contains("shards that did not complete: 1 "), "{said}");
}
