//! The noise model of `diff` and `check`: a bootstrap confidence interval of
//! the change in medians, relative and absolute thresholds together, the
//! between-repeat spread of each run, and a verdict that says "inconclusive"
//! rather than guess. docs/ci.md, "How a verdict is reached", is this file in prose.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Bootstrap resamples per row.
pub const RESAMPLES: usize = 1000;
/// Each side enters the bootstrap with at most this many samples (evenly
/// spaced ranks of its sorted samples): the interval of a median needs the
/// distribution, not every instance, and a row stays milliseconds.
pub const BOOTSTRAP_CAP: usize = 1000;
/// The interval's coverage.
pub const CONFIDENCE: f64 = 0.95;

/// When a difference counts: both thresholds exceeded, with enough samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// A row changes only when its median moved by more than this many percent ...
    pub relative_pct: f64,
    /// ... and by more than this many milliseconds.
    pub absolute_ms: f64,
    /// Fewer samples than this in either run: inconclusive.
    pub min_samples: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds { relative_pct: 10.0, absolute_ms: 0.01, min_samples: 10 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Faster,
    Slower,
    Unchanged,
    /// Too few samples, or an interval that reaches past a threshold on one
    /// side and inside it on the other.
    Inconclusive,
    /// In A only.
    Missing,
    /// In B only.
    New,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::Unchanged => "unchanged",
            Verdict::Inconclusive => "inconclusive",
            Verdict::Missing => "missing",
            Verdict::New => "new",
        }
    }
}

/// One side of a row: what its samples say.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Side {
    pub samples: usize,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// The spread of the per-repeat medians, (max − min) / median, in percent
    /// (`runner.run.repeat` > 1); the run's own noise between repeats.
    pub repeat_spread_pct: Option<f64>,
}

impl Side {
    /// None for no samples.
    pub fn of(samples_ms: &[f64], repeat_medians_ms: &[f64]) -> Option<Side> {
        let s = crate::stats::Stats::of(samples_ms)?;
        Some(Side {
            samples: s.count,
            median_ms: s.median_ms,
            min_ms: s.min_ms,
            max_ms: s.max_ms,
            repeat_spread_pct: crate::stats::spread_pct(repeat_medians_ms),
        })
    }
}

/// The comparison of one row's two sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Change {
    /// B's median over A's, minus 1, in percent.
    pub change_pct: f64,
    pub delta_ms: f64,
    /// The bootstrap interval of `change_pct` (None with fewer than 2 samples on a side).
    pub ci_low_pct: Option<f64>,
    pub ci_high_pct: Option<f64>,
    /// The relative threshold applied: the configured one, or the larger
    /// between-repeat spread of the two runs when that is larger.
    pub threshold_pct: f64,
    pub verdict: Verdict,
    /// Why, in words.
    pub reason: String,
}

/// Compare A's samples with B's. `seed` makes the bootstrap repeatable per row.
pub fn compare(a: &[f64], b: &[f64], a_side: &Side, b_side: &Side, t: &Thresholds, seed: u64) -> Change {
    let (ma, mb) = (a_side.median_ms, b_side.median_ms);
    let change_pct = if ma > 0.0 { (mb / ma - 1.0) * 100.0 } else { 0.0 };
    let delta_ms = mb - ma;
    let noise = a_side.repeat_spread_pct.into_iter().chain(b_side.repeat_spread_pct).fold(0.0, f64::max);
    let threshold_pct = t.relative_pct.max(noise);
    let ci = (a.len() >= 2 && b.len() >= 2 && ma > 0.0).then(|| bootstrap_change_pct(a, b, seed));
    let mut c = Change {
        change_pct,
        delta_ms,
        ci_low_pct: ci.map(|c| c.0),
        ci_high_pct: ci.map(|c| c.1),
        threshold_pct,
        verdict: Verdict::Inconclusive,
        reason: String::new(),
    };
    let few = a_side.samples.min(b_side.samples);
    if few < t.min_samples {
        c.reason = format!(
            "too few samples: {} in A, {} in B, {} needed (infer.iters, runner.run.repeat)",
            a_side.samples, b_side.samples, t.min_samples
        );
        return c;
    }
    let Some((lo, hi)) = ci else {
        c.reason = "no interval: a median of zero".into();
        return c;
    };
    // Milliseconds at the interval's ends.
    let (lo_ms, hi_ms) = (lo / 100.0 * ma, hi / 100.0 * ma);
    let beyond = |pct: f64, ms: f64| pct.abs() > threshold_pct && ms.abs() > t.absolute_ms;
    let within = |pct: f64, ms: f64| pct.abs() <= threshold_pct || ms.abs() <= t.absolute_ms;
    let ci_text = format!("{:.0}% interval [{lo:+.1}%, {hi:+.1}%]", CONFIDENCE * 100.0);
    let limits = format!("±{threshold_pct:.1}% and ±{:.3} ms", t.absolute_ms);
    if lo > 0.0 && beyond(change_pct, delta_ms) {
        c.verdict = Verdict::Slower;
        c.reason = format!("{ci_text} above 0; the median moved past {limits}");
    } else if hi < 0.0 && beyond(change_pct, delta_ms) {
        c.verdict = Verdict::Faster;
        c.reason = format!("{ci_text} below 0; the median moved past {limits}");
    } else if within(lo, lo_ms) && within(hi, hi_ms) {
        c.verdict = Verdict::Unchanged;
        c.reason = format!("{ci_text} within {limits}");
    } else {
        c.reason = format!("noise: {ci_text} reaches past {limits}");
    }
    c
}

/// The percentile interval of 100·(median(B*)/median(A*) − 1) over
/// [`RESAMPLES`] resamples of each side with replacement.
pub fn bootstrap_change_pct(a: &[f64], b: &[f64], seed: u64) -> (f64, f64) {
    // Sorted first, so that a seed draws the same values whatever order the
    // run stored its samples in; then evenly spaced ranks at most.
    let capped = |x: &[f64]| {
        let mut v = x.to_vec();
        v.sort_by(f64::total_cmp);
        crate::stats::bounded(&v, BOOTSTRAP_CAP)
    };
    let (a, b) = (capped(a), capped(b));
    let mut rng = SplitMix64(seed);
    let (mut ra, mut rb) = (vec![0.0; a.len()], vec![0.0; b.len()]);
    let mut changes: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let ma = resampled_median(&a, &mut ra, &mut rng);
            let mb = resampled_median(&b, &mut rb, &mut rng);
            if ma > 0.0 {
                (mb / ma - 1.0) * 100.0
            } else {
                0.0
            }
        })
        .collect();
    changes.sort_by(f64::total_cmp);
    let tail = (1.0 - CONFIDENCE) / 2.0;
    let at = |q: f64| changes[((q * RESAMPLES as f64) as usize).min(RESAMPLES - 1)];
    (at(tail), at(1.0 - tail))
}

fn resampled_median(from: &[f64], into: &mut [f64], rng: &mut SplitMix64) -> f64 {
    for x in into.iter_mut() {
        *x = from[rng.below(from.len())];
    }
    let n = into.len();
    let (_, mid, _) = into.select_nth_unstable_by(n / 2, f64::total_cmp);
    let upper = *mid;
    if n % 2 == 1 {
        upper
    } else {
        let lower = into[..n / 2].iter().copied().fold(f64::MIN, f64::max);
        (lower + upper) / 2.0
    }
}

/// A row's bootstrap seed: FNV-1a of its key, so a row gets the same
/// interval every time the same two runs are compared.
pub fn seed_of(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// SplitMix64 (Steele, Lea, Flood 2014): a small, fast generator, plenty for resampling.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (multiply-shift; the bias is below 2^-32 for these n).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(s: &[f64]) -> Side {
        Side::of(s, &[]).unwrap()
    }

    /// Samples around `center` with a fixed ±2% wobble.
    fn wobble(center: f64, n: usize) -> Vec<f64> {
        (0..n).map(|i| center * (1.0 + 0.02 * (((i * 7919) % 101) as f64 / 50.0 - 1.0))).collect()
    }

    #[test]
    fn a_clear_slowdown_is_slower_with_its_size() {
        let (a, b) = (wobble(1.0, 50), wobble(1.5, 50));
        let c = compare(&a, &b, &side(&a), &side(&b), &Thresholds::default(), 1);
        assert_eq!(c.verdict, Verdict::Slower, "{c:?}");
        assert!((c.change_pct - 50.0).abs() < 1.0, "{c:?}");
        assert!(c.ci_low_pct.unwrap() > 40.0 && c.ci_high_pct.unwrap() < 60.0, "{c:?}");
        let back = compare(&b, &a, &side(&b), &side(&a), &Thresholds::default(), 1);
        assert_eq!(back.verdict, Verdict::Faster);
    }

    #[test]
    fn the_same_distribution_is_unchanged() {
        let (a, b) = (wobble(1.0, 50), wobble(1.0, 60));
        let c = compare(&a, &b, &side(&a), &side(&b), &Thresholds::default(), 7);
        assert_eq!(c.verdict, Verdict::Unchanged, "{c:?}");
    }

    #[test]
    fn both_thresholds_must_be_exceeded() {
        // +50% but 0.005 ms: below the absolute threshold.
        let (a, b) = (wobble(0.01, 50), wobble(0.015, 50));
        let c = compare(&a, &b, &side(&a), &side(&b), &Thresholds::default(), 3);
        assert_eq!(c.verdict, Verdict::Unchanged, "{c:?}");
    }

    #[test]
    fn few_samples_or_wide_noise_are_inconclusive() {
        let (a, b) = (wobble(1.0, 5), wobble(2.0, 5));
        let c = compare(&a, &b, &side(&a), &side(&b), &Thresholds::default(), 1);
        assert_eq!(c.verdict, Verdict::Inconclusive);
        assert!(c.reason.starts_with("too few samples: 5 in A, 5 in B, 10 needed"), "{}", c.reason);
        // Half the samples at 1, half at 1.3, in both runs: B's median may land anywhere between.
        let a: Vec<f64> = (0..20).map(|i| if i % 2 == 0 { 1.0 } else { 1.3 }).collect();
        let b: Vec<f64> = (0..21).map(|i| if i % 2 == 0 { 1.0 } else { 1.3 }).collect();
        let c = compare(&a, &b, &side(&a), &side(&b), &Thresholds::default(), 1);
        assert_eq!(c.verdict, Verdict::Inconclusive, "{c:?}");
        assert!(c.reason.starts_with("noise:"), "{}", c.reason);
    }

    #[test]
    fn repeat_spread_widens_the_threshold() {
        let (a, b) = (wobble(1.0, 50), wobble(1.15, 50));
        let plain = compare(&a, &b, &side(&a), &side(&b), &Thresholds::default(), 1);
        assert_eq!(plain.verdict, Verdict::Slower);
        let noisy = Side::of(&a, &[0.9, 1.0, 1.1]).unwrap();
        assert_eq!(noisy.repeat_spread_pct.map(|p| p.round()), Some(20.0));
        let c = compare(&a, &b, &noisy, &side(&b), &Thresholds::default(), 1);
        assert_eq!(c.threshold_pct.round(), 20.0);
        assert_ne!(c.verdict, Verdict::Slower, "{c:?}");
    }

    #[test]
    fn the_bootstrap_is_repeatable_and_seeded() {
        let (a, b) = (wobble(1.0, 30), wobble(1.1, 30));
        assert_eq!(bootstrap_change_pct(&a, &b, 5), bootstrap_change_pct(&a, &b, 5));
        assert_eq!(seed_of("nsys:A"), seed_of("nsys:A"));
        assert_ne!(seed_of("nsys:A"), seed_of("nsys:B"));
    }
}
