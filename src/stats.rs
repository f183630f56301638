//! Summary statistics of repeated measurements.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Durations of repeated calls, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Stats {
    pub(crate) count: usize,
    pub total_ms: f64,
    pub(crate) mean_ms: f64,
    pub median_ms: f64,
    /// Nearest-rank 90th percentile: the ceil(0.9·n)-th smallest sample.
    pub(crate) p90_ms: f64,
    pub(crate) min_ms: f64,
    pub(crate) max_ms: f64,
}

impl Stats {
    /// None for no samples.
    pub fn of(samples_ms: &[f64]) -> Option<Stats> {
        if samples_ms.is_empty() {
            return None;
        }
        let mut s = samples_ms.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let total: f64 = s.iter().sum();
        let median = if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 };
        let rank = ((0.9 * n as f64).ceil() as usize).clamp(1, n);
        Some(Stats {
            count: n,
            total_ms: total,
            mean_ms: total / n as f64,
            median_ms: median,
            p90_ms: s[rank - 1],
            min_ms: s[0],
            max_ms: s[n - 1],
        })
    }
}

/// At most `max` samples: all of them, in order, when there are that few;
/// else `max` evenly spaced ranks of the sorted samples (minimum and maximum
/// included), which keeps the distribution a median or a bootstrap needs.
pub(crate) fn bounded<T: Copy + PartialOrd>(samples: &[T], max: usize) -> Vec<T> {
    if samples.len() <= max {
        return samples.to_vec();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    if max < 2 {
        return sorted.into_iter().take(max).collect();
    }
    let last = sorted.len() - 1;
    (0..max).map(|i| sorted[i * last / (max - 1)]).collect()
}

/// The spread of per-repeat medians: (max − min) / median, in percent; None
/// for fewer than two, or a median of zero.
pub(crate) fn spread_pct(medians: &[f64]) -> Option<f64> {
    if medians.len() < 2 {
        return None;
    }
    let s = Stats::of(medians)?;
    (s.median_ms > 0.0).then(|| (s.max_ms - s.min_ms) / s.median_ms * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_statistics() {
        let s = Stats::of(&[5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        assert_eq!(s.count, 10);
        assert_eq!(s.total_ms, 55.0);
        assert_eq!(s.mean_ms, 5.5);
        assert_eq!(s.median_ms, 5.5);
        assert_eq!(s.p90_ms, 9.0);
        assert_eq!((s.min_ms, s.max_ms), (1.0, 10.0));
        let odd = Stats::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((odd.median_ms, odd.p90_ms), (2.0, 3.0));
        assert!(Stats::of(&[]).is_none());
        assert_eq!(spread_pct(&[0.9, 1.1, 1.0]).map(|p| p.round()), Some(20.0));
        assert_eq!(spread_pct(&[1.0]), None);
    }

    #[test]
    fn bounded_keeps_few_samples_in_order_and_spaces_many_by_rank() {
        assert_eq!(bounded(&[3, 1, 2], 3), [3, 1, 2]);
        let many: Vec<i64> = (0..101).rev().collect();
        let kept = bounded(&many, 5);
        assert_eq!(kept, [0, 25, 50, 75, 100]);
        assert_eq!(bounded(&many, 1), [0]);
    }
}
