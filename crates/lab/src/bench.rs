//! Subsystem benchmarks: each storage stage measured on its own, for the limits that a whole
//! transfer is judged against.
//!
//! `read`: the tree scanned and every file read to nothing by parallel threads, in the
//! scanner's order (inode order within each directory); the time covers scan and reads.
//! `overhead`: all of these plus the network (synthetic files, memory to memory) and end to
//! end (a push to a server on loopback), at several numbers of files for one total size,
//! each fitted to `T = N * t0 + B / R`.
//! `write`: a tree loaded into memory first (untimed), then written as plain files by
//! [`sprat_store::limit::write_plain`]; the time covers the write alone.
//! `copy`: `read` and `write` at once, a copy's limit on a host whose CPUs serve both.

use crate::model::{fit_overhead, Fit, Sample, Stages};
use serde::Serialize;
use sprat_engine::sync::{lock, unpoisoned};
use sprat_engine::TransferError;
use sprat_store::limit::MemEntry;
use sprat_store::read::DirCursor;
use sprat_store::{EntryType, Root, ScanOptions};
use std::path::Path;
use std::time::Instant;

/// What one subsystem run measured.
#[derive(Debug, Clone, Serialize)]
pub struct SubsystemRun {
    /// `read`, `write`, `copy`, `network` or `end_to_end`.
    pub subsystem: &'static str,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    pub files_per_s: f64,
    pub threads: usize,
}

impl SubsystemRun {
    pub fn new(subsystem: &'static str, tree: &TreeCounts, seconds: f64, threads: usize) -> Self {
        let s = seconds.max(1e-9);
        SubsystemRun {
            subsystem,
            files: tree.files,
            dirs: tree.dirs,
            symlinks: tree.symlinks,
            bytes: tree.bytes,
            seconds,
            mb_per_s: tree.bytes as f64 / 1e6 / s,
            files_per_s: tree.files as f64 / s,
            threads,
        }
    }
}

/// How many entries and bytes a tree has.
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeCounts {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
}

/// A tree held in memory.
pub struct MemTree {
    pub entries: Vec<MemEntry>,
    pub counts: TreeCounts,
}

/// Times scanning `src` and reading every file in it to nothing with `threads` threads.
pub fn read_limit(src: &Path, threads: usize) -> Result<SubsystemRun, TransferError> {
    let started = Instant::now();
    let root = Root::open(src)?;
    let (tx, rx) = crossbeam_channel::bounded::<Vec<sprat_store::ScanEntry>>(64);
    let counts = std::sync::Mutex::new(TreeCounts::default());
    let first_error = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        let root = &root;
        s.spawn(move || sprat_store::scan(root, ScanOptions::default(), tx));
        for _ in 0..threads.max(1) {
            let rx = rx.clone();
            let (counts, first_error) = (&counts, &first_error);
            s.spawn(move || {
                let mut cursor = DirCursor::new(root);
                let mut buf = Vec::new();
                let mut mine = TreeCounts::default();
                for listing in rx {
                    for e in listing {
                        match e.kind {
                            EntryType::File => {
                                buf.clear();
                                match cursor.read_file(&e.path, None, e.size, &mut buf) {
                                    Ok((n, _)) => mine.bytes += n,
                                    Err(err) => {
                                        let mut slot = lock(first_error);
                                        slot.get_or_insert(err);
                                    }
                                }
                                mine.files += 1;
                            }
                            EntryType::Dir => mine.dirs += 1,
                            EntryType::Symlink => mine.symlinks += 1,
                            EntryType::Special => {}
                        }
                    }
                }
                let mut c = lock(counts);
                c.files += mine.files;
                c.dirs += mine.dirs;
                c.symlinks += mine.symlinks;
                c.bytes += mine.bytes;
            });
        }
    });
    if let Some(err) = unpoisoned(first_error.into_inner()) {
        return Err(err.into());
    }
    let counts = unpoisoned(counts.into_inner());
    Ok(SubsystemRun::new(
        "read",
        &counts,
        started.elapsed().as_secs_f64(),
        threads,
    ))
}

/// Counts the files, directories, symlinks and file bytes of the tree at `src` from a scan
/// (no file data is read). Fails on the first entry that cannot be examined, naming it.
pub fn count_tree(src: &Path) -> Result<TreeCounts, TransferError> {
    let u = sprat_store::namespace::usage(&Root::open(src)?, b"", &Default::default())?;
    Ok(TreeCounts {
        files: u.files,
        dirs: u.dirs,
        symlinks: u.symlinks,
        bytes: u.bytes,
    })
}

/// Loads the tree at `src` into memory: directories (parents first), files with their data
/// and permission bits, symlinks with their targets. Refuses a tree larger than half of the
/// memory available, and any entry it cannot read.
pub fn load_tree(src: &Path) -> Result<MemTree, TransferError> {
    let root = Root::open(src)?;
    let (tx, rx) = crossbeam_channel::bounded(64);
    let mut scanned = Vec::new();
    std::thread::scope(|s| {
        let root = &root;
        s.spawn(move || sprat_store::scan(root, ScanOptions::default(), tx));
        for listing in rx {
            scanned.extend(listing);
        }
    });
    let total: u64 = scanned.iter().map(|e| e.size).sum();
    if let Some(avail) = sprat_engine::host_memory::meminfo_bytes("MemAvailable") {
        if total > avail / 2 {
            return Err(TransferError::Usage(format!(
                "'{}' holds {total} bytes, more than half of the memory available ({avail} bytes)",
                src.display()
            )));
        }
    }
    scanned.sort_by(|a, b| a.path.cmp(&b.path));
    let mut entries = Vec::with_capacity(scanned.len());
    let mut tree = TreeCounts::default();
    let mut cursor = DirCursor::new(&root);
    for e in scanned {
        if let Some(why) = e.error {
            return Err(TransferError::Local(format!(
                "cannot read '{}' in '{}': {why}",
                sprat_store::display_path(&e.path),
                src.display()
            )));
        }
        match e.kind {
            EntryType::Dir => {
                tree.dirs += 1;
                entries.push(MemEntry::Dir { path: e.path });
            }
            EntryType::File => {
                let mut data = Vec::with_capacity(e.size as usize);
                cursor.read_file(&e.path, None, e.size, &mut data)?;
                tree.files += 1;
                tree.bytes += data.len() as u64;
                entries.push(MemEntry::File {
                    path: e.path,
                    mode: e.attrs.mode,
                    data,
                });
            }
            EntryType::Symlink => {
                tree.symlinks += 1;
                entries.push(MemEntry::Symlink {
                    path: e.path,
                    target: e.link_target.unwrap_or_default(),
                });
            }
            EntryType::Special => {}
        }
    }
    Ok(MemTree {
        entries,
        counts: tree,
    })
}

/// Times writing `tree` as plain files into `dst` (created; it must be missing or empty).
pub fn write_limit(
    tree: &MemTree,
    dst: &Path,
    threads: usize,
) -> Result<SubsystemRun, TransferError> {
    let nonempty = std::fs::read_dir(dst).is_ok_and(|mut d| d.next().is_some());
    if nonempty {
        return Err(TransferError::Usage(format!(
            "destination '{}' is not empty",
            dst.display()
        )));
    }
    let started = Instant::now();
    let root = Root::create_local(dst)?;
    sprat_store::limit::write_plain(&root, &tree.entries, threads)?;
    Ok(SubsystemRun::new(
        "write",
        &tree.counts,
        started.elapsed().as_secs_f64(),
        threads,
    ))
}

/// What `sprat bench copy` measured: the read limit and the write limit run at the same time,
/// on the same CPUs and disks, as a copy on one host runs them.
#[derive(Debug, Clone, Serialize)]
pub struct CopyLimitRun {
    /// The whole: until both the reading and the writing are done.
    #[serde(flatten)]
    pub both: SubsystemRun,
    /// How long the reading took (it starts with the writing).
    pub read_seconds: f64,
    /// How long the writing took.
    pub write_seconds: f64,
    pub read_threads: usize,
}

/// Times reading `src` to nothing with `read_threads` threads and writing `tree` (a copy of it
/// loaded before) into `dst` with `write_threads` threads, both started together. On a host
/// where both share the CPUs, this, not the slower of the two alone, bounds a copy.
pub fn copy_limit(
    src: &Path,
    tree: &MemTree,
    dst: &Path,
    read_threads: usize,
    write_threads: usize,
) -> Result<CopyLimitRun, TransferError> {
    let started = Instant::now();
    let (read, write) = std::thread::scope(|s| {
        let reading = s.spawn(|| read_limit(src, read_threads));
        let write = write_limit(tree, dst, write_threads);
        let read = reading.join().unwrap_or_else(|_| {
            Err(TransferError::Local(
                "a thread of the read limit panicked".into(),
            ))
        });
        (read, write)
    });
    let (read, write) = (read?, write?);
    let both = SubsystemRun::new(
        "copy",
        &tree.counts,
        started.elapsed().as_secs_f64(),
        write_threads,
    );
    Ok(CopyLimitRun {
        both,
        read_seconds: read.seconds,
        write_seconds: write.seconds,
        read_threads,
    })
}

/// What `sprat bench overhead` measured and fitted.
#[derive(Debug, Clone, Serialize)]
pub struct OverheadReport {
    pub total_bytes: u64,
    /// Every run: subsystem, files, bytes, seconds.
    pub runs: Vec<SubsystemRun>,
    pub read: Option<Fit>,
    pub network: Option<Fit>,
    pub write: Option<Fit>,
    pub end_to_end: Option<Fit>,
    /// Whether the end-to-end per-file overhead lies between the largest subsystem's and the
    /// sum of the subsystems' (`None` when a fit is missing).
    pub end_to_end_between_max_and_sum: Option<bool>,
    /// The model's prediction for each point (from the fitted subsystems) beside the
    /// measured end-to-end time: (files, predicted seconds, measured seconds).
    pub predictions: Vec<(u64, f64, f64)>,
}

/// Settings of an overhead run.
#[derive(Debug, Clone)]
pub struct OverheadPlan {
    /// Scratch directory on the storage to measure (data sets, server root).
    pub dir: std::path::PathBuf,
    pub total: u64,
    /// Numbers of files, one data set each.
    pub points: Vec<u64>,
    /// Drop caches before each storage run (needs root): cold figures.
    pub drop_caches: Option<fn() -> std::io::Result<()>>,
    pub options: sprat_engine::TransferOptions,
}

/// For a fixed total size, measures read, network (memory to memory), write and end to end
/// (a push to a server on loopback writing to disk) at each number of files, and fits
/// `T = N * t0 + B / R` to each. Data sets are made in `plan.dir` and removed as it goes.
pub fn overhead(
    plan: &OverheadPlan,
    mut progress: impl FnMut(&SubsystemRun),
) -> Result<OverheadReport, TransferError> {
    use crate::dataset::{self, DatasetSpec, SizeDist};
    use sprat_engine::{push_input, PushInput};
    use sprat_engine::{Credentials, ServerIdentity, ServerTls, TokenKey, Trust};
    use sprat_engine::{ExportsConfig, Server, ServerConfig};
    if plan.points.len() < 2 {
        return Err(TransferError::Usage(
            "--points needs at least two numbers of files to fit".into(),
        ));
    }
    let srv_root = plan.dir.join("server");
    std::fs::create_dir_all(&srv_root).map_err(|e| {
        TransferError::Local(format!("cannot create '{}': {e}", srv_root.display()))
    })?;
    let token: [u8; 32] = rand::random();
    let identity = ServerIdentity::ephemeral().map_err(|e| TransferError::Local(e.to_string()))?;
    let tls = ServerTls::new(&identity, false)
        .map_err(|e| TransferError::Local(format!("cannot set up TLS: {e}")))?;
    let server = Server::bind(
        ServerConfig {
            exports: ExportsConfig::Default {
                root: srv_root.clone(),
                read_only: false,
                key: Some(TokenKey::from_token(&token)),
            },
            tls,
            options: plan.options.clone(),
            max_connections: 64,
            max_connections_per_address: 64,
            max_client_memory: sprat_engine::DEFAULT_CLIENT_MEMORY,
            idle_timeout: sprat_engine::DEFAULT_IDLE_TIMEOUT,
            third_party: true,
        },
        "127.0.0.1:0",
    )?;
    let addr = server.local_addr()?.to_string();
    std::thread::Builder::new()
        .name("sprat-bench-server".into())
        .spawn(move || server.run())
        .map_err(|e| TransferError::Local(format!("cannot start the server: {e}")))?;
    let key = Credentials::new(
        Some(TokenKey::from_token(&token)),
        Trust::pinned(identity.fingerprint),
    );
    let cold = || plan.drop_caches.map_or(Ok(()), |f| f());
    let cold = || cold().map_err(|e| TransferError::Local(format!("cannot drop caches: {e}")));
    let remove = |p: &Path| {
        let _ = std::fs::remove_dir_all(p);
    };
    let mut runs = Vec::new();
    let mut predictions_input = Vec::new();
    for &files in &plan.points {
        let size = plan.total / files.max(1);
        let spec = DatasetSpec {
            files: Some(files),
            total: None,
            dist: SizeDist::Fixed(size),
            per_dir: 1000,
            depth: 1,
            seed: files,
            threads: 8,
        };
        let set = plan.dir.join(format!("set-{files}"));
        remove(&set);
        dataset::generate(&set, &spec)?;
        let mut record = |mut run: SubsystemRun, name: &'static str| {
            run.subsystem = name;
            progress(&run);
            runs.push(run);
        };
        cold()?;
        record(read_limit(&set, 16)?, "read");
        let tree = load_tree(&set)?;
        let wdst = plan.dir.join(format!("write-{files}"));
        remove(&wdst);
        cold()?;
        let w = write_limit(&tree, &wdst, 8)?;
        drop(tree);
        remove(&wdst);
        record(w, "write");
        let sizes = vec![size; files as usize];
        let n = push_input(
            PushInput::Synthetic(sizes),
            &addr,
            b"",
            &key,
            &plan.options,
            "memory".into(),
            "memory".into(),
        )?;
        record(from_report(&n, n.streams), "network");
        let dest = format!("e2e-{files}");
        cold()?;
        let source = Root::open_local_source(&set)?;
        let e = push_input(
            PushInput::Source(source),
            &addr,
            dest.as_bytes(),
            &key,
            &plan.options,
            set.display().to_string(),
            dest.clone(),
        )?;
        if e.failed > 0 {
            return Err(TransferError::Local(format!(
                "the end-to-end run of {files} files had {} failures",
                e.failed
            )));
        }
        record(from_report(&e, e.streams), "end_to_end");
        predictions_input.push((files, e.seconds));
        remove(&srv_root.join(&dest));
        remove(&set);
    }
    let fit = |name: &str| {
        let samples: Vec<Sample> = runs
            .iter()
            .filter(|r| r.subsystem == name)
            .map(|r| Sample {
                files: r.files as f64,
                bytes: r.bytes as f64,
                seconds: r.seconds,
            })
            .collect();
        fit_overhead(&samples).ok()
    };
    let (read, network, write, end_to_end) =
        (fit("read"), fit("network"), fit("write"), fit("end_to_end"));
    let between = match (read, network, write, end_to_end) {
        (Some(r), Some(n), Some(w), Some(e)) => {
            let t = [r.cost.t0_s, n.cost.t0_s, w.cost.t0_s];
            let max = t.iter().copied().fold(f64::MIN, f64::max);
            Some(e.cost.t0_s >= max && e.cost.t0_s <= t.iter().sum::<f64>())
        }
        _ => None,
    };
    let predictions = match (read, network, write) {
        (Some(r), Some(n), Some(w)) => {
            let stages = Stages {
                read: r.cost,
                network: n.cost,
                write: w.cost,
            };
            let batches = (plan.total as f64 / plan.options.batch_size as f64)
                .ceil()
                .max(1.0);
            predictions_input
                .iter()
                .map(|&(files, measured)| {
                    // Each subsystem was measured with all its threads, so its fitted rate is
                    // the whole stage's: one pipeline of `batches` batches.
                    let t = stages.pipeline_time(files as f64, plan.total as f64, batches, 1.0);
                    (files, t, measured)
                })
                .collect()
        }
        _ => Vec::new(),
    };
    Ok(OverheadReport {
        total_bytes: plan.total,
        runs,
        read,
        network,
        write,
        end_to_end,
        end_to_end_between_max_and_sum: between,
        predictions,
    })
}

fn from_report(r: &sprat_engine::Report, threads: usize) -> SubsystemRun {
    let counts = TreeCounts {
        files: r.files,
        dirs: r.dirs,
        symlinks: r.symlinks,
        bytes: r.bytes,
    };
    SubsystemRun::new("network", &counts, r.seconds, threads)
}
