//! `sprat plan` and `sprat cp --plan`: a tree split into shards (`sprat_lab::plan`), each
//! copied by an ordinary `sprat cp` of its path list, then finished once: every directory made
//! and given its attributes, and the destination checked against the plan.

use crate::args::PlanArgs;
use anyhow::Context;
use sprat_engine::config::Selection;
use sprat_engine::text::printable;
use sprat_engine::{Credentials, Endpoint, TransferError, TransferOptions};
use sprat_lab::model::StageCost;
use sprat_lab::plan::{self, PlanDir, PlanOptions};
use std::path::Path;

/// Most missing paths `--finish` names one by one (then a count).
const NAMED_MISSING: usize = 1000;

/// `sprat plan`.
pub fn plan(a: PlanArgs) -> anyhow::Result<i32> {
    let rate = a.rate.bytes_per_s();
    if rate <= 0.0 {
        anyhow::bail!(TransferError::Usage("--rate must be above 0".into()));
    }
    let options = PlanOptions {
        shards: a.shards as usize,
        cost: StageCost {
            t0_s: a.per_file.as_secs_f64(),
            rate_bytes_per_s: rate,
        },
        scan_threads: a.scan_threads,
    };
    let made = plan::make(&a.src, options).map_err(|e| TransferError::Usage(e.to_string()))?;
    plan::dir::write(&made, &a.out)?;
    let s = &made.summary;
    let text = if a.json {
        serde_json::to_string(s)? + "\n"
    } else {
        let mut text = format!(
            "plan {} -> {}: {} files, {} symlinks and special files, {} directories, {} in {} \
             shards\n",
            a.src.display(),
            a.out.display(),
            s.files,
            s.symlinks,
            s.dirs,
            sprat_engine::report::human_bytes(s.bytes),
            s.shards.len()
        );
        for (k, shard) in s.shards.iter().enumerate() {
            text.push_str(&format!(
                "  shard {k}: {} paths, {}, predicted {:.2} s\n",
                shard.paths,
                sprat_engine::report::human_bytes(shard.bytes),
                shard.predicted_s
            ));
        }
        text.push_str(&format!(
            "  longest shard / mean: {:.3} (model: {:.0} us per file, {:.0} MB/s)\n",
            s.imbalance,
            s.per_file_s * 1e6,
            s.rate_bytes_per_s / 1e6
        ));
        if s.skipped_special > 0 {
            text.push_str(&format!(
                "  left out: {} entries of a type sprat does not copy (not a file, directory, \
                 symlink, FIFO, socket or device)\n",
                s.skipped_special
            ));
        }
        text
    };
    crate::print_quietly(&text)?;
    Ok(0)
}

/// Reads the plan `--plan` names.
pub fn open(dir: &Path) -> anyhow::Result<PlanDir> {
    PlanDir::open(dir).map_err(|e| TransferError::Usage(format!("--plan: {e}")).into())
}

/// What `--shard K` copies: the shard's paths, as `--files-from` would take them.
pub fn shard_selection(plan: &PlanDir, k: usize) -> anyhow::Result<Selection> {
    if k >= plan.shards() {
        anyhow::bail!(TransferError::Usage(format!(
            "--shard {k}: the plan {} has shards 0 to {}",
            plan.path.display(),
            plan.shards().saturating_sub(1)
        )));
    }
    let paths = plan
        .shard(k)
        .map_err(|e| TransferError::Usage(format!("--plan: {e}")))?;
    Ok(Selection::default().with_files(paths))
}

/// `sprat cp --plan DIR --finish SRC DST`.
pub fn finish(
    plan: &PlanDir,
    src: &Endpoint,
    dst: &Endpoint,
    key: &Credentials,
    options: &TransferOptions,
    json: bool,
    quiet: bool,
) -> anyhow::Result<i32> {
    let usage = |e: plan::PlanError| TransferError::Usage(format!("--plan: {e}"));
    // 1. Every directory, made where missing and given the source's mode and mtime: a copy
    //    of the directories alone (after the shards wrote into them).
    let dirs = plan.dirs().map_err(usage)?;
    let mut dir_options = options.clone();
    dir_options.selection = Selection::default().with_files(&dirs);
    // Every directory is set whatever the destination has: no listing of it is needed; with
    // `--ignore-existing` still none is made over a file the shards left (see
    // `TransferOptions::keeps_existing`).
    dir_options.keep_existing = options.keeps_existing();
    dir_options.skip = sprat_engine::config::SkipRule::Never;
    let made = sprat_engine::copy_retrying(src, dst, key, &dir_options, &mut |n| {
        eprintln!("sprat: {}", printable(&n.to_string()))
    })
    .context("--finish: setting the directories")?;
    // A planned directory the source no longer has was removed after the plan: said, not a
    // failure that no run of the shards could ever fix.
    let (gone, failed): (Vec<_>, Vec<_>) = made
        .failures
        .iter()
        .partition(|f| f.error.ends_with(sprat_engine::scan::LISTED_NOT_FOUND));
    for f in &gone {
        eprintln!(
            "sprat: note: {}: in the plan, but no longer at the source (removed since the plan)",
            printable(&f.path)
        );
    }
    if made.failed > gone.len() as u64 {
        for f in &failed {
            eprintln!(
                "sprat: failed: {}: {}",
                printable(&f.path),
                printable(&f.error)
            );
        }
        return Ok(1);
    }
    // 2. Every planned file at the destination with the source's size and mtime: what a
    //    dry run would still send or fix, of the planned paths. The dry run covers the whole
    //    tree (both sides scanned in parallel, faster than one look-up per planned path), and
    //    what the source gained since the plan is not the plan's.
    let paths = plan.all_paths().map_err(usage)?;
    let planned: std::collections::HashSet<String> = paths
        .iter()
        .map(|p| sprat_engine::relpath::display_path(p))
        .collect();
    let mut check = options.clone();
    check.selection = Selection::default();
    // What the shards' rule leaves at the destination on purpose counts as there (`-u`: a
    // newer copy, `--ignore-existing`: any); the others leave size and mtime as the source's.
    use sprat_engine::config::SkipRule;
    check.skip = match options.skip {
        rule @ (SkipRule::Update | SkipRule::IgnoreExisting) => rule,
        _ => SkipRule::QuickCheck,
    };
    check.delete = false;
    let left = sprat_engine::dry_run(src, dst, key, &check).context("--finish: checking")?;
    // A device file not at the destination is what a writing side that does not create
    // devices leaves out (each shard's report counted it as not kept): said, not a failure
    // that running the shards again would fix.
    let (devices, missing): (Vec<_>, Vec<_>) = left
        .files
        .iter()
        .filter(|(p, _)| planned.contains(p))
        .partition(|(_, a)| *a == sprat_engine::Action::Device);
    // Below directories the destination cannot list, nothing can be checked from here (each
    // shard's writer checked what it sent there): said, not a failure.
    let (unchecked, missing): (Vec<_>, Vec<_>) = missing
        .into_iter()
        .partition(|(_, a)| *a == sprat_engine::Action::Check);
    if !unchecked.is_empty() {
        eprintln!(
            "sprat: note: {} not checked ({}{}): they are below directories the destination \
             cannot list (a server not running as root and its own 0000 directories)",
            sprat_engine::report::counted(
                unchecked.len() as u64,
                "planned entry",
                "planned entries"
            ),
            printable(&unchecked[0].0),
            if unchecked.len() > 1 { ", ..." } else { "" }
        );
    }
    if !devices.is_empty() {
        eprintln!(
            "sprat: note: {} not at the destination ({}{}): the writing side creates devices \
             only when it runs as root, and from the network only with --keep-devices",
            sprat_engine::report::counted(devices.len() as u64, "device file", "device files"),
            printable(&devices[0].0),
            if devices.len() > 1 { ", ..." } else { "" }
        );
    }
    // What the source gained since the plan, which no shard copied: said, not left behind
    // silently (a run directory still being written when it was planned).
    let planned_dirs: std::collections::HashSet<String> = dirs
        .iter()
        .map(|p| sprat_engine::relpath::display_path(p))
        .collect();
    let unplanned: Vec<&String> = left
        .files
        .iter()
        .filter(|(p, a)| {
            !matches!(
                a,
                sprat_engine::Action::Attrs
                    | sprat_engine::Action::Delete
                    | sprat_engine::Action::Check
            ) && !planned.contains(p)
                && !planned_dirs.contains(p)
        })
        .map(|(p, _)| p)
        .collect();
    if json {
        let value = serde_json::json!({
            "event": "finish",
            "finish": true,
            "directories": dirs.len(),
            "planned": paths.len(),
            "missing_or_different": missing.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            "devices_not_made": devices.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            "not_in_plan": unplanned,
        });
        crate::print_quietly(&format!("{value}\n"))?;
    }
    for (path, action) in missing.iter().take(NAMED_MISSING) {
        let what = match action {
            sprat_engine::Action::Attrs => "mode or mtime differs at the destination",
            sprat_engine::Action::Special => "missing at the destination, or another type there",
            _ => "missing at the destination, or another size or mtime",
        };
        eprintln!("sprat: not finished: {}: {what}", printable(path));
    }
    if missing.len() > NAMED_MISSING {
        eprintln!(
            "sprat: not finished: {} more not listed",
            missing.len() - NAMED_MISSING
        );
    }
    for path in unplanned.iter().take(NAMED_MISSING) {
        eprintln!(
            "sprat: not in the plan: {}: made at the source after `sprat plan`, copied by no \
             shard (a plain `sprat cp` of the same SRC and DST copies it, or plan again)",
            printable(path)
        );
    }
    if unplanned.len() > NAMED_MISSING {
        eprintln!(
            "sprat: not in the plan: {} more not listed",
            unplanned.len() - NAMED_MISSING
        );
    }
    let whole = missing.is_empty() && unplanned.is_empty();
    if !json && !quiet {
        let unplanned_text = if unplanned.is_empty() {
            String::new()
        } else {
            format!(
                "; {} at the source not in the plan",
                sprat_engine::report::counted(unplanned.len() as u64, "entry", "entries")
            )
        };
        let text = if missing.is_empty() {
            format!(
                "finish {src} -> {dst}: {} directories set; every one of the {} planned files \
                 and links the source still has is at the destination{unplanned_text}\n",
                dirs.len(),
                paths.len()
            )
        } else {
            format!(
                "finish {src} -> {dst}: {} directories set; {} of {} planned files missing or \
                 different (run the shards that failed again){unplanned_text}\n",
                dirs.len(),
                missing.len(),
                paths.len()
            )
        };
        crate::print_quietly(&text)?;
    }
    Ok(if whole { 0 } else { 1 })
}
