//! The noise model of `diff` and `check`: the Hodges–Lehmann estimate of the
//! ratio B/A of two rows' instances with its distribution-free (Moses)
//! interval, relative and absolute thresholds together, the between-repeat
//! spread of each run, and a verdict that says "inconclusive" rather than
//! guess. docs/ci.md, "How a verdict is reached", is this file in prose.
//!
//! Why this estimator: kernel and region samples are multi-modal (one kernel
//! name, several shapes: a flash-attention kernel of prefill and decode runs
//! 7.9 ms and 0.15 ms) and heavy-tailed. The median of such samples jumps
//! between modes, and a bootstrap interval of its change spans ±100%: a row
//! whose every instance doubled read "noise". The median of all pairwise log
//! ratios log(b_j / a_i) instead is the shift itself whenever B is A scaled
//! (pairs of one mode sit at the shift, pairs across modes fall symmetrically
//! to both sides of it), and its interval comes from the ranks of those pairs
//! alone, without assuming a shape of the distribution.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Each side enters the estimate with at most this many samples (evenly
/// spaced ranks of its sorted samples): the interval is then that of the
/// smaller sample, wider, never narrower than the full one's.
pub(crate) const SAMPLE_CAP: usize = 1000;
/// The interval's coverage.
pub(crate) const CONFIDENCE: f64 = 0.95;
/// The normal quantile of [`CONFIDENCE`] (two-sided).
const Z: f64 = 1.959_963_984_540_054;
/// Samples are floored here before their logarithm: an instance without GPU
/// work (0 ms) is as long as the samples' resolution, 1 ns.
const FLOOR_MS: f64 = 1e-6;

/// When a difference counts: both thresholds exceeded, with enough samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Thresholds {
    /// A row changes only when its median moved by more than this many percent ...
    pub(crate) relative_pct: f64,
    /// ... and by more than this many milliseconds.
    pub(crate) absolute_ms: f64,
    /// Fewer samples than this in either run: inconclusive.
    pub(crate) min_samples: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds { relative_pct: 10.0, absolute_ms: 0.01, min_samples: 10 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
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
    pub(crate) fn as_str(self) -> &'static str {
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
pub(crate) struct Side {
    pub(crate) samples: usize,
    /// The instances the samples stand for: as many, or more where the run
    /// kept a bounded subset of them.
    #[serde(default)]
    pub(crate) instances: usize,
    pub(crate) median_ms: f64,
    pub(crate) min_ms: f64,
    pub(crate) max_ms: f64,
    /// The row's time in the whole run: every instance, where the samples are
    /// a bounded subset of them (the samples' mean times the instances).
    #[serde(default)]
    pub(crate) total_ms: f64,
    /// The spread of the per-repeat medians, (max − min) / median, in percent
    /// (`runner.run.repeat` > 1); the run's own noise between repeats.
    pub(crate) repeat_spread_pct: Option<f64>,
}

impl Side {
    /// None for no samples. `instances`: how many the samples stand for (at
    /// least as many as there are samples).
    pub(crate) fn of(samples_ms: &[f64], repeat_medians_ms: &[f64], instances: usize) -> Option<Side> {
        let s = crate::stats::Stats::of(samples_ms)?;
        Some(Side {
            samples: s.count,
            instances: instances.max(s.count),
            median_ms: s.median_ms,
            min_ms: s.min_ms,
            max_ms: s.max_ms,
            total_ms: s.mean_ms * instances.max(s.count) as f64,
            repeat_spread_pct: crate::stats::spread_pct(repeat_medians_ms),
        })
    }
}

/// The comparison of one row's two sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Change {
    /// How much longer B's instances are than A's, in percent: the
    /// Hodges–Lehmann estimate, the median of the ratios of every pair of an
    /// instance of A and one of B.
    pub(crate) change_pct: f64,
    /// How B's total time (over its instances) differs from A's: the change
    /// of the sum, not the estimate's share of it (a slowdown of some
    /// instances moves the median ratio and the sum by different amounts).
    pub(crate) delta_ms: f64,
    /// The 95% distribution-free interval of `change_pct` (None with fewer
    /// than 2 samples on a side).
    pub(crate) ci_low_pct: Option<f64>,
    pub(crate) ci_high_pct: Option<f64>,
    /// The relative threshold a slowdown must pass: the configured one, or
    /// the larger between-repeat spread of the two runs when that is larger.
    pub(crate) threshold_pct: f64,
    pub(crate) verdict: Verdict,
    /// Why, in words.
    pub(crate) reason: String,
}

/// Compare A's samples with B's; `more` says how to get more samples, for
/// the reason of a row that has too few.
pub(crate) fn compare(a: &[f64], b: &[f64], a_side: &Side, b_side: &Side, t: &Thresholds, more: &str) -> Change {
    let noise = a_side.repeat_spread_pct.into_iter().chain(b_side.repeat_spread_pct).fold(0.0, f64::max);
    let threshold_pct = t.relative_pct.max(noise);
    let shift = (a.len() >= 2 && b.len() >= 2).then(|| log_shift(a, b));
    let pct = |log: f64| (log.exp() - 1.0) * 100.0;
    let change_pct = shift.map_or_else(|| ratio_of_medians(a_side, b_side), |s| pct(s.estimate));
    let total_a = a_side.total_ms;
    let ms = |pct: f64| pct / 100.0 * total_a;
    let mut c = Change {
        change_pct,
        delta_ms: b_side.total_ms - a_side.total_ms,
        ci_low_pct: shift.map(|s| pct(s.low)),
        ci_high_pct: shift.map(|s| pct(s.high)),
        threshold_pct,
        verdict: Verdict::Inconclusive,
        reason: String::new(),
    };
    let few = a_side.samples.min(b_side.samples);
    let alike = quantiles_alike(a, b, a_side, t);
    if few < t.min_samples {
        c.reason = format!(
            "too few samples: {} in A, {} in B, {} needed ({more})",
            a_side.samples, b_side.samples, t.min_samples
        );
        if alike && a.len() == b.len() {
            c.verdict = Verdict::Unchanged;
            c.reason += &format!(
                "; each instance within ±{}% or ±{} ms over the run of its counterpart by rank",
                t.relative_pct, t.absolute_ms
            );
        }
        return c;
    }
    let (Some(lo), Some(hi)) = (c.ci_low_pct, c.ci_high_pct) else {
        c.reason = "no interval".into();
        return c;
    };
    let past = |pct: f64, limit: f64| pct.abs() > limit && ms(pct).abs() > t.absolute_ms;
    let within = |pct: f64| pct.abs() <= t.relative_pct || ms(pct).abs() <= t.absolute_ms;
    let ci_text = format!("{:.0}% interval [{lo:+.1}%, {hi:+.1}%]", CONFIDENCE * 100.0);
    let limits = format!("±{threshold_pct:.1}% and ±{} ms over the run", t.absolute_ms);
    if lo > 0.0 && past(change_pct, threshold_pct) {
        c.verdict = Verdict::Slower;
        c.reason = format!("{ci_text} above 0; the change is past {limits}");
    } else if hi < 0.0 && past(change_pct, threshold_pct) {
        c.verdict = Verdict::Faster;
        c.reason = format!("{ci_text} below 0; the change is past {limits}");
    } else if within(lo) && within(hi) {
        c.verdict = Verdict::Unchanged;
        c.reason = format!("{ci_text} within ±{}% or ±{} ms over the run", t.relative_pct, t.absolute_ms);
    } else if alike {
        c.verdict = Verdict::Unchanged;
        c.reason = format!(
            "{ci_text}, but every one of {QUANTILES} quantiles of B is within ±{}% or ±{} ms over the run of A's",
            t.relative_pct, t.absolute_ms
        );
    } else if threshold_pct > t.relative_pct && past(change_pct, t.relative_pct) && (lo > 0.0 || hi < 0.0) {
        // Past the budget, but within the noise the runs show between their
        // own repeats: neither a regression nor unchanged.
        c.reason = format!(
            "{ci_text}: past the budget's {}% but within the runs' own {threshold_pct:.1}% spread between repeats; rerun with more repeats",
            t.relative_pct
        );
    } else {
        c.reason = format!("noise: {ci_text} reaches past {limits}");
    }
    c
}

/// How many quantiles [`quantiles_alike`] compares at most.
pub(crate) const QUANTILES: usize = 19;

/// Whether the two distributions agree within the budget (the configured
/// one, not widened) at each of [`QUANTILES`] evenly spaced quantiles, or at
/// every rank where a side has fewer samples. This is what "unchanged" means
/// to a reader of the two sample sets, and it holds where the interval of the
/// shift is too wide to say so: a run against itself, a row of noisy
/// instances that did not move.
fn quantiles_alike(a: &[f64], b: &[f64], a_side: &Side, t: &Thresholds) -> bool {
    if a.is_empty() || b.is_empty() {
        return false;
    }
    let sorted = |x: &[f64]| {
        let mut v = x.to_vec();
        v.sort_by(f64::total_cmp);
        v
    };
    let (a, b) = (sorted(a), sorted(b));
    let k = a.len().min(b.len()).min(QUANTILES);
    let at = |v: &[f64], i: usize| v[((i as f64 + 0.5) / k as f64 * v.len() as f64) as usize];
    // Per instance: the absolute budget is over the run's instances.
    let instances = a_side.instances as f64;
    (0..k).all(|i| {
        let (qa, qb) = (at(&a, i), at(&b, i));
        let pct = if qa > 0.0 {
            (qb / qa - 1.0).abs() * 100.0
        } else if qb > 0.0 {
            f64::INFINITY
        } else {
            0.0
        };
        pct <= t.relative_pct || (qb - qa).abs() * instances <= t.absolute_ms
    })
}

/// Where there is no interval: the ratio of the medians (0 when A's is 0).
fn ratio_of_medians(a: &Side, b: &Side) -> f64 {
    if a.median_ms > 0.0 {
        (b.median_ms / a.median_ms - 1.0) * 100.0
    } else {
        0.0
    }
}

/// A shift of log(B) against log(A), with its interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Shift {
    pub(crate) estimate: f64,
    pub(crate) low: f64,
    pub(crate) high: f64,
}

/// The Hodges–Lehmann shift of log(B) against log(A) (the median of
/// log b_j − log a_i over all pairs) and its Moses interval: the order
/// statistics of those differences at the ranks the Mann–Whitney statistic
/// bounds at [`CONFIDENCE`] (normal approximation). Exact order statistics of
/// the pairs, found by bisection over their value with a linear count per step,
/// so [`SAMPLE_CAP`]² pairs are never held. Needs two samples on each side.
pub(crate) fn log_shift(a: &[f64], b: &[f64]) -> Shift {
    let logs = |x: &[f64]| {
        let mut v: Vec<f64> = x.iter().map(|v| v.max(FLOOR_MS).ln()).collect();
        v.sort_by(f64::total_cmp);
        crate::stats::bounded(&v, SAMPLE_CAP)
    };
    let (x, y) = (logs(a), logs(b));
    let (m, n) = (x.len() as f64, y.len() as f64);
    let pairs = x.len() as u64 * y.len() as u64;
    let estimate = (kth_difference(&x, &y, pairs.div_ceil(2)) + kth_difference(&x, &y, pairs / 2 + 1)) / 2.0;
    let reach = Z * (m * n * (m + n + 1.0) / 12.0).sqrt();
    let k = ((m * n / 2.0 - reach).floor() as u64).clamp(1, pairs);
    Shift { estimate, low: kth_difference(&x, &y, k), high: kth_difference(&x, &y, pairs + 1 - k) }
}

/// The k-th smallest (1-based) of y_j − x_i over sorted `x` and `y`.
fn kth_difference(x: &[f64], y: &[f64], k: u64) -> f64 {
    let (mut lo, mut hi) = (y[0] - x[x.len() - 1], y[y.len() - 1] - x[0]);
    if count_at_most(x, y, lo) >= k {
        return lo;
    }
    // count(lo) < k <= count(hi): halve until the two are neighbours.
    for _ in 0..200 {
        let mid = lo + (hi - lo) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        if count_at_most(x, y, mid) >= k {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    largest_at_most(x, y, hi)
}

/// How many y_j − x_i are at most `t`.
fn count_at_most(x: &[f64], y: &[f64], t: f64) -> u64 {
    // As x_i grows, so does the last j with y_j − x_i ≤ t.
    let (mut j, mut count) = (0usize, 0u64);
    for &xi in x {
        while j < y.len() && y[j] - xi <= t {
            j += 1;
        }
        count += j as u64;
    }
    count
}

/// The largest y_j − x_i that is at most `t`: the pair value itself, so that
/// equal samples give exactly 0.
fn largest_at_most(x: &[f64], y: &[f64], t: f64) -> f64 {
    let (mut j, mut best) = (0usize, f64::NEG_INFINITY);
    for &xi in x {
        while j < y.len() && y[j] - xi <= t {
            j += 1;
        }
        if j > 0 {
            best = best.max(y[j - 1] - xi);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(s: &[f64]) -> Side {
        Side::of(s, &[], s.len()).unwrap()
    }

    fn cmp(a: &[f64], b: &[f64]) -> Change {
        compare(a, b, &side(a), &side(b), &Thresholds::default(), "")
    }

    /// Samples around `center` with a fixed ±2% wobble.
    fn wobble(center: f64, n: usize) -> Vec<f64> {
        (0..n).map(|i| center * (1.0 + 0.02 * (((i * 7919) % 101) as f64 / 50.0 - 1.0))).collect()
    }

    #[test]
    fn a_clear_slowdown_is_slower_with_its_size() {
        let (a, b) = (wobble(1.0, 50), wobble(1.5, 50));
        let c = cmp(&a, &b);
        assert_eq!(c.verdict, Verdict::Slower, "{c:?}");
        assert!((c.change_pct - 50.0).abs() < 1.0, "{c:?}");
        assert!(c.ci_low_pct.unwrap() > 45.0 && c.ci_high_pct.unwrap() < 55.0, "{c:?}");
        // 50 instances of 1 ms, each 0.5 ms longer: 25 ms over the run.
        assert!((c.delta_ms - 25.0).abs() < 0.5, "{c:?}");
        assert_eq!(cmp(&b, &a).verdict, Verdict::Faster);
    }

    /// Two shapes of one kernel, 7.9 ms and 0.15 ms, half the launches each:
    /// every launch twice as long is +100% with a narrow interval, where the
    /// change of medians (which falls between the shapes) was "noise".
    #[test]
    fn every_instance_of_a_bimodal_row_doubled_is_slower_by_100_percent() {
        let a: Vec<f64> =
            (0..68).map(|i| if i % 2 == 0 { 7.86 } else { 0.155 } * (1.0 + 0.002 * (i % 7) as f64)).collect();
        let b: Vec<f64> = a.iter().map(|v| v * 2.0).collect();
        let c = cmp(&a, &b);
        assert_eq!(c.verdict, Verdict::Slower, "{c:?}");
        assert!((c.change_pct - 100.0).abs() < 1e-9, "{c:?}");
        assert!(c.ci_low_pct.unwrap() > 95.0 && c.ci_high_pct.unwrap() < 105.0, "{c:?}");
        let slight: Vec<f64> = a.iter().map(|v| v * 1.25).collect();
        assert_eq!(cmp(&a, &slight).verdict, Verdict::Slower);
        // Against itself: exactly 0, and unchanged.
        let same = cmp(&a, &a);
        assert_eq!((same.change_pct, same.verdict), (0.0, Verdict::Unchanged), "{same:?}");
    }

    #[test]
    fn the_same_distribution_is_unchanged() {
        let (a, b) = (wobble(1.0, 50), wobble(1.0, 60));
        assert_eq!(cmp(&a, &b).verdict, Verdict::Unchanged);
    }

    #[test]
    fn both_thresholds_must_be_exceeded_and_the_absolute_one_is_over_the_run() {
        // +50% per instance, 0.005 ms each: 0.25 ms over 50 instances, past 0.01 ms.
        let (a, b) = (wobble(0.01, 50), wobble(0.015, 50));
        assert_eq!(cmp(&a, &b).verdict, Verdict::Slower);
        // The same per instance with a budget of 1 ms over the run: unchanged.
        let t = Thresholds { absolute_ms: 1.0, ..Thresholds::default() };
        let c = compare(&a, &b, &side(&a), &side(&b), &t, "");
        assert_eq!(c.verdict, Verdict::Unchanged, "{c:?}");
    }

    #[test]
    fn few_samples_or_wide_noise_are_inconclusive() {
        let (a, b) = (wobble(1.0, 5), wobble(2.0, 5));
        let c = cmp(&a, &b);
        assert_eq!(c.verdict, Verdict::Inconclusive);
        assert!(c.reason.starts_with("too few samples: 5 in A, 5 in B, 10 needed"), "{}", c.reason);
        // Spread over a factor of 3 in both runs, B's +8% and its slowest
        // three +30%: an interval past ±10%, quantiles apart past 10%.
        let a: Vec<f64> = (0..12).map(|i| 1.0 + 0.2 * i as f64).collect();
        let b: Vec<f64> = a.iter().enumerate().map(|(i, v)| v * if i < 9 { 1.08 } else { 1.3 }).collect();
        let c = cmp(&a, &b);
        assert_eq!(c.verdict, Verdict::Inconclusive, "{c:?}");
        assert!(c.reason.starts_with("noise:"), "{}", c.reason);
    }

    #[test]
    fn a_change_within_the_repeat_spread_is_inconclusive_never_unchanged() {
        let (a, b) = (wobble(1.0, 50), wobble(1.15, 50));
        assert_eq!(cmp(&a, &b).verdict, Verdict::Slower);
        let noisy = Side::of(&a, &[0.9, 1.0, 1.1], a.len()).unwrap();
        assert_eq!(noisy.repeat_spread_pct.map(|p| p.round()), Some(20.0));
        let c = compare(&a, &b, &noisy, &side(&b), &Thresholds::default(), "");
        assert_eq!(c.threshold_pct.round(), 20.0);
        assert_eq!(c.verdict, Verdict::Inconclusive, "{c:?}");
        // +376% with repeats spread 400%: not "unchanged".
        let big = wobble(4.76, 50);
        let wild = Side::of(&a, &[0.5, 1.0, 4.5], a.len()).unwrap();
        let c = compare(&a, &big, &wild, &side(&big), &Thresholds::default(), "");
        assert_eq!(c.verdict, Verdict::Inconclusive, "{c:?}");
    }

    /// The order statistics of the pairs, against every pair listed and sorted.
    #[test]
    fn pairwise_order_statistics_equal_the_brute_force_ones() {
        let x: Vec<f64> = (0..37).map(|i| ((i * 31) % 17) as f64 * 0.37).collect();
        let y: Vec<f64> = (0..23).map(|i| ((i * 13) % 11) as f64 * 0.91 - 2.0).collect();
        let (mut xs, mut ys) = (x.clone(), y.clone());
        xs.sort_by(f64::total_cmp);
        ys.sort_by(f64::total_cmp);
        let mut all: Vec<f64> = xs.iter().flat_map(|a| ys.iter().map(move |b| b - a)).collect();
        all.sort_by(f64::total_cmp);
        for k in [1, 2, 100, 425, 426, 800, all.len() as u64] {
            assert_eq!(kth_difference(&xs, &ys, k), all[k as usize - 1], "k = {k}");
        }
    }
}
