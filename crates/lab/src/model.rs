//! The transfer model: per-file overhead and rate of each stage, fitted from measurements, and
//! what follows from them (bottleneck stage, the file size where storage stops being the limit,
//! the pipeline's predicted time, the transfer nodes a link needs). Pure arithmetic: no I/O.
//!
//! Each stage `s` moves a file of `x` bytes in `t0_s + x / R_s` seconds (`t0`: per-file
//! overhead, `R`: rate). A data set of `N` files and `B` bytes therefore takes
//! `T = N * t0 + B / R` in one stage alone, which [`fit_overhead`] fits by least squares.

use serde::Serialize;

/// One measurement: `files` files of `bytes` bytes in all took `seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    pub files: f64,
    pub bytes: f64,
    pub seconds: f64,
}

/// Per-file overhead and rate of a stage.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StageCost {
    /// Seconds per file besides its bytes.
    pub t0_s: f64,
    /// Bytes per second once per-file costs are set aside.
    pub rate_bytes_per_s: f64,
}

impl StageCost {
    /// Seconds this stage alone needs for `files` files of `bytes` bytes in all.
    pub fn time(&self, files: f64, bytes: f64) -> f64 {
        files * self.t0_s + bytes / self.rate_bytes_per_s
    }
}

/// A fitted [`StageCost`] and how well it explains the samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fit {
    #[serde(flatten)]
    pub cost: StageCost,
    /// Coefficient of determination of the fit (1 = perfect).
    pub r2: f64,
}

/// Why a fit is impossible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FitError {
    #[error("need at least 2 samples, got {0}")]
    TooFewSamples(usize),
    #[error(
        "the samples do not separate per-file cost from per-byte cost (vary the number of files)"
    )]
    Degenerate,
    #[error(
        "the fit gives a non-positive rate: the samples are too noisy or per-file costs hide it"
    )]
    NoRate,
}

/// Least-squares fit of `seconds = files * t0 + bytes / R` (no intercept: nothing costs
/// nothing). Two unknowns, `t0` and `1/R`, from the 2x2 normal equations.
pub fn fit_overhead(samples: &[Sample]) -> Result<Fit, FitError> {
    if samples.len() < 2 {
        return Err(FitError::TooFewSamples(samples.len()));
    }
    let (mut nn, mut nb, mut bb, mut nt, mut bt) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for s in samples {
        nn += s.files * s.files;
        nb += s.files * s.bytes;
        bb += s.bytes * s.bytes;
        nt += s.files * s.seconds;
        bt += s.bytes * s.seconds;
    }
    let det = nn * bb - nb * nb;
    if det.abs() <= f64::EPSILON * nn * bb {
        return Err(FitError::Degenerate);
    }
    let t0 = (nt * bb - bt * nb) / det;
    let inv_rate = (nn * bt - nb * nt) / det;
    if inv_rate <= 0.0 {
        return Err(FitError::NoRate);
    }
    let cost = StageCost {
        t0_s: t0,
        rate_bytes_per_s: 1.0 / inv_rate,
    };
    let mean = samples.iter().map(|s| s.seconds).sum::<f64>() / samples.len() as f64;
    let ss_tot: f64 = samples.iter().map(|s| (s.seconds - mean).powi(2)).sum();
    let ss_res: f64 = samples
        .iter()
        .map(|s| (s.seconds - cost.time(s.files, s.bytes)).powi(2))
        .sum();
    let r2 = if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        1.0
    };
    Ok(Fit { cost, r2 })
}

/// The three stages of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stages {
    pub read: StageCost,
    pub network: StageCost,
    pub write: StageCost,
}

impl Stages {
    fn named(&self) -> [(&'static str, StageCost); 3] {
        [
            ("read", self.read),
            ("network", self.network),
            ("write", self.write),
        ]
    }

    /// The stage that takes longest for files of `size` bytes, and its seconds per file.
    pub fn bottleneck(&self, size: f64) -> (&'static str, f64) {
        self.named()
            .into_iter()
            .map(|(name, c)| (name, c.time(1.0, size)))
            .fold(("read", f64::NEG_INFINITY), |best, c| {
                if c.1 > best.1 {
                    c
                } else {
                    best
                }
            })
    }

    /// The file size below which storage (the slower of read and write) takes longer per
    /// file than the network: where `t0_st + x / R_st = t0_net + x / R_net`. `None` when
    /// one of them is slower at every size.
    pub fn storage_bound_below(&self) -> Option<f64> {
        let storage = [self.read, self.write]
            .into_iter()
            .max_by(|a, b| a.t0_s.total_cmp(&b.t0_s))?;
        let net = self.network;
        let slope = 1.0 / net.rate_bytes_per_s - 1.0 / storage.rate_bytes_per_s;
        let x = (storage.t0_s - net.t0_s) / slope;
        (slope > 0.0 && x > 0.0).then_some(x)
    }

    /// Predicted seconds of the pipeline for `files` files of `bytes` bytes cut into
    /// `batches` batches over `streams` parallel pipelines: `T_R + T_W + (n/p) * T_max`,
    /// with `T_s` one batch's time in stage `s`.
    pub fn pipeline_time(&self, files: f64, bytes: f64, batches: f64, streams: f64) -> f64 {
        let per_batch = |c: StageCost| c.time(files / batches, bytes / batches);
        let (r, n, w) = (
            per_batch(self.read),
            per_batch(self.network),
            per_batch(self.write),
        );
        r + w + (batches / streams) * r.max(n).max(w)
    }
}

/// Transfer nodes needed so that a link of `link_bytes_per_s` is full: each node reads at
/// `read_bytes_per_s` and writes at `write_bytes_per_s`; `max(N / R_node, N / W_node)`,
/// rounded up.
pub fn nodes_for_link(link_bytes_per_s: f64, read_bytes_per_s: f64, write_bytes_per_s: f64) -> u64 {
    (link_bytes_per_s / read_bytes_per_s)
        .max(link_bytes_per_s / write_bytes_per_s)
        .ceil()
        .max(1.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(cost: StageCost, points: &[(f64, f64)]) -> Vec<Sample> {
        points
            .iter()
            .map(|&(files, bytes)| Sample {
                files,
                bytes,
                seconds: cost.time(files, bytes),
            })
            .collect()
    }

    #[test]
    fn fit_recovers_overhead_and_rate_with_a_fixed_total() {
        let truth = StageCost {
            t0_s: 40e-6,
            rate_bytes_per_s: 500e6,
        };
        // Fixed total bytes, files varied (as `sprat bench overhead` does), plus one other size.
        let pts = [(1e3, 1e9), (1e4, 1e9), (1e5, 1e9), (2e4, 5e8)];
        let fit = fit_overhead(&samples(truth, &pts)).unwrap();
        assert!((fit.cost.t0_s - truth.t0_s).abs() < 1e-9, "{fit:?}");
        assert!((fit.cost.rate_bytes_per_s / truth.rate_bytes_per_s - 1.0).abs() < 1e-6);
        assert!(fit.r2 > 0.999_999);
    }

    #[test]
    fn fit_refuses_what_it_cannot_separate() {
        let one = [Sample {
            files: 1.0,
            bytes: 1.0,
            seconds: 1.0,
        }];
        assert_eq!(fit_overhead(&one), Err(FitError::TooFewSamples(1)));
        // Files and bytes in the same proportion: t0 and 1/R cannot be told apart.
        let prop: Vec<Sample> = (1..5)
            .map(|k| Sample {
                files: k as f64,
                bytes: 4096.0 * k as f64,
                seconds: k as f64,
            })
            .collect();
        assert_eq!(fit_overhead(&prop), Err(FitError::Degenerate));
    }

    #[test]
    fn small_files_are_storage_bound_and_large_ones_network_bound() {
        let stages = Stages {
            read: StageCost {
                t0_s: 50e-6,
                rate_bytes_per_s: 2e9,
            },
            network: StageCost {
                t0_s: 1e-6,
                rate_bytes_per_s: 100e6,
            },
            write: StageCost {
                t0_s: 30e-6,
                rate_bytes_per_s: 1e9,
            },
        };
        assert_eq!(stages.bottleneck(4096.0).0, "read");
        assert_eq!(stages.bottleneck(64e6).0, "network");
        let x = stages.storage_bound_below().unwrap();
        // At the threshold the two costs meet.
        let t_storage = stages.read.time(1.0, x);
        let t_net = stages.network.time(1.0, x);
        assert!((t_storage - t_net).abs() < 1e-12, "{x}");
        assert!(x > 4096.0 && x < 64e6);
        // One pipeline, one batch: the sum of the stages, plus the slowest once more.
        let t = stages.pipeline_time(100.0, 1e6, 1.0, 1.0);
        let (r, n, w) = (
            stages.read.time(100.0, 1e6),
            stages.network.time(100.0, 1e6),
            stages.write.time(100.0, 1e6),
        );
        assert!((t - (r + w + r.max(n).max(w))).abs() < 1e-12);
        assert_eq!(nodes_for_link(12.5e9, 2e9, 1e9), 13);
        assert_eq!(nodes_for_link(1e6, 2e9, 1e9), 1);
    }
}
