//! File-size distributions for generated data sets: a fixed size, the GridFTP histogram shipped
//! inside the program, and a log-uniform range. Pure functions of a seeded random generator, so
//! the same seed gives the same sizes on every machine.

use rand::Rng;

/// The published GridFTP file-size histogram (see the file's header for its source).
const GRIDFTP_HISTOGRAM: &str = include_str!("../../data/gridftp-file-size-hist.tsv");

/// One bin of a size histogram: sizes in `[min, max]`, drawn uniformly, with a weight.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bin {
    min: u64,
    max: u64,
    weight: f64,
}

/// How file sizes are drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum SizeDist {
    /// Every file has this size.
    Fixed(u64),
    /// A histogram: `(cumulative probability, min, max)` per bin, the last one ending at 1.
    Histogram(Vec<(f64, u64, u64)>),
    /// Sizes whose logarithm is uniform in `[ln min, ln max]`.
    LogUniform { min: u64, max: u64 },
}

/// Why a distribution could not be made; the message names the option.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DistError {
    #[error("--dist '{0}': expected loguniform:MIN:MAX")]
    Shape(String),
    #[error("--dist: {0}")]
    Size(String),
    #[error("--dist '{0}': MAX must be at least MIN (and at most --max-size)")]
    Order(String),
    #[error("unknown distribution '{0}' (use gridftp or loguniform:MIN:MAX)")]
    Unknown(String),
    #[error("--max-size leaves nothing of the gridftp distribution")]
    NothingLeft,
    #[error("bad histogram line '{0}'")]
    Histogram(String),
}

impl SizeDist {
    /// Parses `gridftp` or `loguniform:MIN:MAX` (sizes read by `parse_size`); `max_size`
    /// drops the part of the distribution above it (the rest keeps its relative weights).
    pub fn parse<E: std::fmt::Display>(
        text: &str,
        max_size: Option<u64>,
        parse_size: impl Fn(&str) -> Result<u64, E>,
    ) -> Result<SizeDist, DistError> {
        let parse_size = |t: &str| parse_size(t).map_err(|e| DistError::Size(e.to_string()));
        if text == "gridftp" {
            return SizeDist::gridftp(max_size);
        }
        if let Some(rest) = text.strip_prefix("loguniform:") {
            let (lo, hi) = rest
                .split_once(':')
                .ok_or_else(|| DistError::Shape(text.to_string()))?;
            let min = parse_size(lo)?.max(1);
            let mut max = parse_size(hi)?;
            if let Some(cap) = max_size {
                max = max.min(cap);
            }
            if max < min {
                return Err(DistError::Order(text.to_string()));
            }
            return Ok(SizeDist::LogUniform { min, max });
        }
        Err(DistError::Unknown(text.to_string()))
    }

    /// The GridFTP histogram, cut at `max_size` if given.
    pub fn gridftp(max_size: Option<u64>) -> Result<SizeDist, DistError> {
        let mut bins = parse_histogram(GRIDFTP_HISTOGRAM)?;
        if let Some(cap) = max_size {
            bins.retain(|b| b.min <= cap);
            if let Some(last) = bins.last_mut() {
                if last.max > cap {
                    // Keep the part of the bin below the cap, with its share of the weight.
                    let kept = (cap - last.min + 1) as f64 / (last.max - last.min + 1) as f64;
                    last.weight *= kept;
                    last.max = cap;
                }
            }
        }
        let total: f64 = bins.iter().map(|b| b.weight).sum();
        if bins.is_empty() || total <= 0.0 {
            return Err(DistError::NothingLeft);
        }
        let mut acc = 0.0;
        let cumulative = bins
            .iter()
            .map(|b| {
                acc += b.weight / total;
                (acc, b.min, b.max)
            })
            .collect();
        Ok(SizeDist::Histogram(cumulative))
    }

    /// Draws one size.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        match self {
            SizeDist::Fixed(n) => *n,
            SizeDist::Histogram(bins) => {
                let u: f64 = rng.random();
                let i = bins
                    .partition_point(|&(c, _, _)| c < u)
                    .min(bins.len().saturating_sub(1));
                match bins.get(i) {
                    Some(&(_, min, max)) => rng.random_range(min..=max),
                    None => 0,
                }
            }
            SizeDist::LogUniform { min, max } => {
                let (lo, hi) = ((*min as f64).ln(), (*max as f64).ln());
                let x = lo + (hi - lo) * rng.random::<f64>();
                (x.exp().round() as u64).clamp(*min, *max)
            }
        }
    }

    /// The mean size (exact for fixed and histogram, closed form for log-uniform).
    pub fn mean(&self) -> f64 {
        match self {
            SizeDist::Fixed(n) => *n as f64,
            SizeDist::Histogram(bins) => {
                let mut prev = 0.0;
                bins.iter()
                    .map(|&(c, min, max)| {
                        let p = c - prev;
                        prev = c;
                        p * (min as f64 + max as f64) / 2.0
                    })
                    .sum()
            }
            SizeDist::LogUniform { min, max } if min == max => *min as f64,
            SizeDist::LogUniform { min, max } => {
                (*max as f64 - *min as f64) / ((*max as f64).ln() - (*min as f64).ln())
            }
        }
    }
}

/// Parses the tab-separated histogram: `bin min_bytes max_bytes probability`, `#` comments.
fn parse_histogram(text: &str) -> Result<Vec<Bin>, DistError> {
    let mut bins = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.starts_with("bin") || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let bad = || DistError::Histogram(line.to_string());
        if f.len() != 4 {
            return Err(bad());
        }
        bins.push(Bin {
            min: f[1].parse().map_err(|_| bad())?,
            max: f[2].parse().map_err(|_| bad())?,
            weight: f[3].parse().map_err(|_| bad())?,
        });
    }
    Ok(bins)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn shipped_histogram_sums_to_one() {
        let bins = parse_histogram(GRIDFTP_HISTOGRAM).expect("histogram parses");
        assert_eq!(bins.len(), 45);
        let sum: f64 = bins.iter().map(|b| b.weight).sum();
        assert!((sum - 1.0).abs() < 1e-6, "sum {sum}");
    }

    #[test]
    fn capped_gridftp_mean_is_about_one_mib() {
        let d = SizeDist::gridftp(Some(16 << 20)).expect("cap keeps bins");
        let mean = d.mean() / (1 << 20) as f64;
        assert!((0.85..1.05).contains(&mean), "mean {mean} MiB");
        let uncapped = SizeDist::gridftp(None).expect("histogram").mean();
        assert!(uncapped > 30e6, "uncapped mean {uncapped}");
    }

    #[test]
    fn samples_respect_the_cap_and_follow_the_mean() {
        let cap = 16 << 20;
        let d = SizeDist::gridftp(Some(cap)).expect("cap keeps bins");
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let n = 200_000;
        let sizes: Vec<u64> = (0..n).map(|_| d.sample(&mut rng)).collect();
        assert!(sizes.iter().all(|&s| (1..=cap).contains(&s)));
        let mean = sizes.iter().sum::<u64>() as f64 / n as f64;
        assert!(
            (mean / d.mean() - 1.0).abs() < 0.05,
            "{mean} vs {}",
            d.mean()
        );
    }

    #[test]
    fn loguniform_stays_in_range() {
        let parse = |s: &str| s.parse::<u64>().map_err(|e| e.to_string());
        let d = SizeDist::parse("loguniform:100:10000", None, parse).expect("parses");
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let sizes: Vec<u64> = (0..10_000).map(|_| d.sample(&mut rng)).collect();
        assert!(sizes.iter().all(|&s| (100..=10_000).contains(&s)));
        // Log-uniform: as many sizes below the geometric midpoint (1000) as above it.
        let below = sizes.iter().filter(|&&s| s < 1000).count();
        assert!((4_500..5_500).contains(&below), "{below}");
        assert!(SizeDist::parse("loguniform:10:5", None, parse).is_err());
        assert!(SizeDist::parse("pareto", None, parse).is_err());
    }
}
