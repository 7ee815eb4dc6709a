//! [`RangeSeries`]: a rate series at a fixed step, and helpers to build one.

use std::collections::BTreeMap;

/// A request-rate series: one point per step, each the peak rate (requests per second)
/// within the step that ends at its timestamp. Missing points are gaps (no data).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RangeSeries {
    /// Seconds between consecutive points.
    pub step_secs: i64,
    /// `(unix seconds, requests per second)`, sorted by time, no duplicate timestamps.
    pub points: Vec<(i64, f64)>,
    /// Values the source returned that are no rate (NaN, infinite or negative) and were
    /// left out of `points`. A bucket with any is refused by the planner (a broken metrics
    /// source must not set limits).
    pub invalid: usize,
}

impl RangeSeries {
    /// An empty series at `step_secs`.
    pub fn empty(step_secs: i64) -> Self {
        RangeSeries {
            step_secs,
            points: Vec::new(),
            invalid: 0,
        }
    }

    /// Whether the series holds no point.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The highest rate, `None` when empty.
    pub fn max(&self) -> Option<f64> {
        self.points
            .iter()
            .map(|p| p.1)
            .fold(None, |m, v| Some(m.map_or(v, |m: f64| m.max(v))))
    }

    /// Builds a series from points at a finer resolution: each point goes to the step that
    /// ends at or after it (`ceil(t / step) * step`), keeping the maximum per step.
    /// Values that are no rate (see [`is_rate`]) are dropped and counted in `invalid`.
    pub fn max_per_step(step_secs: i64, points: impl IntoIterator<Item = (i64, f64)>) -> Self {
        let step = step_secs.max(1);
        let mut by_step: BTreeMap<i64, f64> = BTreeMap::new();
        let mut invalid = 0;
        for (t, v) in points {
            if !is_rate(v) {
                invalid += 1;
                continue;
            }
            let slot = t.div_euclid(step) * step + if t.rem_euclid(step) == 0 { 0 } else { step };
            by_step
                .entry(slot)
                .and_modify(|m| *m = m.max(v))
                .or_insert(v);
        }
        RangeSeries {
            step_secs,
            points: by_step.into_iter().collect(),
            invalid,
        }
    }

    /// Sorts points and drops duplicate timestamps (keeping the first) and values that are
    /// no rate (counted in `invalid`).
    pub(crate) fn normalise(&mut self) {
        let before = self.points.len();
        self.points.retain(|p| is_rate(p.1));
        self.invalid += before - self.points.len();
        self.points.sort_by_key(|p| p.0);
        self.points.dedup_by_key(|p| p.0);
    }
}

/// Whether `v` can be a request rate: finite and not negative.
pub(crate) fn is_rate(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_per_step_keeps_the_peak_of_each_step() {
        let s = RangeSeries::max_per_step(
            300,
            [
                (60, 1.0),
                (300, 5.0),
                (301, 2.0),
                (600, 3.0),
                (900, f64::NAN),
            ],
        );
        assert_eq!(s.points, vec![(300, 5.0), (600, 3.0)]);
        assert_eq!(s.max(), Some(5.0));
        assert_eq!(s.invalid, 1, "the NaN is counted");
    }

    #[test]
    fn empty_series_has_no_max() {
        assert_eq!(RangeSeries::empty(60).max(), None);
    }
}
