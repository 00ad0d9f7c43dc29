//! Splitting a data set into shards of equal predicted time: pure arithmetic on units (a file,
//! a symlink, or a group of hard links that must travel together), no I/O.
//!
//! Each unit costs `files * t0 + bytes / R` (the model's [`StageCost`]). Units much larger
//! than a shard's share (more than a sixteenth of it) are placed first, each on the shard
//! with the least predicted time so far (longest first). The rest are cut, in path order, into
//! contiguous runs that fill each shard up to its share, so that a shard's files mostly share
//! directories with each other rather than with every other shard's.

use crate::model::StageCost;

/// What the splitter places: one or more paths that go to the same shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// Index of the unit's first path in the caller's path order (units are placed in this
    /// order within a run).
    pub order: usize,
    /// Regular files (hard links of one file count once) and symlinks in the unit.
    pub files: u64,
    /// Bytes the unit's data takes (a hard-link group's once).
    pub bytes: u64,
}

/// Which shard each unit went to, and each shard's totals.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// `shard_of[i]` is the shard of `units[i]`.
    pub shard_of: Vec<usize>,
    pub shards: Vec<ShardLoad>,
}

/// One shard's share.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShardLoad {
    pub units: u64,
    pub files: u64,
    pub bytes: u64,
    /// Predicted seconds (`files * t0 + bytes / R`).
    pub seconds: f64,
}

impl Split {
    /// The longest shard's predicted time over the mean (1.0: perfectly even).
    pub fn imbalance(&self) -> f64 {
        let n = self.shards.len().max(1) as f64;
        let total: f64 = self.shards.iter().map(|s| s.seconds).sum();
        let longest = self.shards.iter().map(|s| s.seconds).fold(0.0, f64::max);
        if total > 0.0 {
            longest / (total / n)
        } else {
            1.0
        }
    }
}

/// Splits `units` (in path order) into `shards` shards of about equal predicted time under
/// `cost`. Every unit goes to exactly one shard; `shards` must be at least 1.
pub fn split(units: &[Unit], shards: usize, cost: StageCost) -> Split {
    let shards = shards.max(1);
    let time = |u: &Unit| cost.time(u.files as f64, u.bytes as f64);
    let total: f64 = units.iter().map(time).sum();
    let share = total / shards as f64;
    let mut loads = vec![ShardLoad::default(); shards];
    let mut shard_of = vec![usize::MAX; units.len()];
    let place = |loads: &mut [ShardLoad], k: usize, u: &Unit| {
        let l = &mut loads[k];
        l.units += 1;
        l.files += u.files;
        l.bytes += u.bytes;
        l.seconds += time(u);
    };

    // Large units first, longest first, each on the least loaded shard.
    let large = share / 16.0;
    let mut big: Vec<usize> = (0..units.len())
        .filter(|&i| time(&units[i]) > large)
        .collect();
    big.sort_by(|&a, &b| time(&units[b]).total_cmp(&time(&units[a])));
    for &i in &big {
        let k = (0..shards)
            .min_by(|&a, &b| loads[a].seconds.total_cmp(&loads[b].seconds))
            .unwrap_or(0);
        place(&mut loads, k, &units[i]);
        shard_of[i] = k;
    }

    // The rest in path order, cut into runs: each shard takes units while that brings it
    // closer to the even share of what is left.
    let mut rest: f64 = units
        .iter()
        .zip(&shard_of)
        .filter(|(_, &k)| k == usize::MAX)
        .map(|(u, _)| time(u))
        .sum();
    let mut k = 0;
    for (i, u) in units.iter().enumerate() {
        if shard_of[i] != usize::MAX {
            continue;
        }
        let t = time(u);
        while k + 1 < shards {
            // What every shard from k on would hold if the rest were spread evenly.
            let ahead: f64 = loads[k..].iter().map(|l| l.seconds).sum::<f64>() + rest;
            let even = ahead / (shards - k) as f64;
            if loads[k].seconds + t / 2.0 <= even {
                break;
            }
            k += 1;
        }
        place(&mut loads, k, u);
        shard_of[i] = k;
        rest -= t;
    }
    Split {
        shard_of,
        shards: loads,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const COST: StageCost = StageCost {
        t0_s: 50e-6,
        rate_bytes_per_s: 535e6,
    };

    fn files(sizes: &[u64]) -> Vec<Unit> {
        sizes
            .iter()
            .enumerate()
            .map(|(order, &bytes)| Unit {
                order,
                files: 1,
                bytes,
            })
            .collect()
    }

    #[test]
    fn equal_small_files_split_evenly_into_contiguous_runs() {
        let units = files(&[4096; 1000]);
        let s = split(&units, 4, COST);
        assert!(s.imbalance() < 1.01, "{:?}", s.shards);
        assert!(
            s.shard_of.windows(2).all(|w| w[0] <= w[1]),
            "not contiguous"
        );
        assert_eq!(s.shards.iter().map(|l| l.files).sum::<u64>(), 1000);
    }

    #[test]
    fn a_file_larger_than_a_share_is_kept_whole_and_the_rest_fills_around_it() {
        let mut sizes = vec![4096u64; 20_000];
        sizes.push(4 << 30); // 4 GiB: more than the small files together
        let units = files(&sizes);
        let s = split(&units, 4, COST);
        let big_shard = s.shard_of[20_000];
        assert_eq!(
            s.shards[big_shard].units, 1,
            "the large file's shard takes no more"
        );
        // The three other shards share the small files evenly.
        let others: Vec<f64> = (0..4)
            .filter(|&k| k != big_shard)
            .map(|k| s.shards[k].seconds)
            .collect();
        let (lo, hi) = (
            others.iter().cloned().fold(f64::MAX, f64::min),
            others.iter().cloned().fold(0.0, f64::max),
        );
        assert!(hi / lo < 1.02, "{others:?}");
    }

    #[test]
    fn small_files_and_large_files_mixed_are_balanced_by_time_not_bytes() {
        // 20,000 small files then 20 large ones: per-file costs count.
        let mut sizes = vec![4096u64; 20_000];
        sizes.extend([64u64 << 20; 20]);
        let s = split(&files(&sizes), 4, COST);
        assert!(s.imbalance() < 1.05, "{:?}", s.shards);
    }

    #[test]
    fn more_shards_than_units_leaves_some_empty() {
        let s = split(&files(&[1, 2]), 5, COST);
        assert_eq!(s.shards.iter().filter(|l| l.units > 0).count(), 2);
        assert_eq!(s.shards.len(), 5);
    }

    proptest! {
        #[test]
        fn every_unit_lands_in_exactly_one_shard_and_totals_add_up(
            sizes in proptest::collection::vec(0u64..(256 << 20), 0..400),
            shards in 1usize..12,
        ) {
            let units = files(&sizes);
            let s = split(&units, shards, COST);
            prop_assert_eq!(s.shard_of.len(), units.len());
            prop_assert!(s.shard_of.iter().all(|&k| k < shards));
            prop_assert_eq!(s.shards.iter().map(|l| l.bytes).sum::<u64>(), sizes.iter().sum::<u64>());
            prop_assert_eq!(s.shards.iter().map(|l| l.units).sum::<u64>(), units.len() as u64);
            // No shard is longer than an even share plus the longest unit.
            let total: f64 = s.shards.iter().map(|l| l.seconds).sum();
            let longest_unit = units.iter().map(|u| COST.time(1.0, u.bytes as f64)).fold(0.0, f64::max);
            for l in &s.shards {
                prop_assert!(l.seconds <= total / shards as f64 + longest_unit + 1e-9);
            }
        }
    }
}
