//! The time series that policies read: request rates at a regular step, sorted by
//! timestamp, with gaps (missing timestamps) allowed.

mod csv;

pub use csv::{SeriesError, read_points};

/// One sample: a unix timestamp in seconds and a rate in requests per second.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Point {
    /// Unix time in seconds.
    pub ts: i64,
    /// Requests per second; never NaN or infinite inside a [`Series`].
    pub value: f64,
}

/// A series of rates at a nominal step. Points are sorted by timestamp, unique, finite;
/// a missing sample is simply an absent point.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Series {
    /// Nominal spacing between samples, in seconds (at least 1).
    pub step_secs: i64,
    /// The samples, sorted by `ts`.
    pub points: Vec<Point>,
}

impl Series {
    /// Builds a series: sorts by timestamp, drops non-finite values (NaN marks a missing
    /// sample), keeps the last of duplicate timestamps, and clamps the step to at least 1 s.
    pub fn new(step_secs: i64, mut points: Vec<Point>) -> Self {
        points.retain(|p| p.value.is_finite());
        points.sort_by_key(|p| p.ts); // stable: among equal ts the later input stays later
        let mut unique: Vec<Point> = Vec::with_capacity(points.len());
        for p in points {
            match unique.last_mut() {
                Some(last) if last.ts == p.ts => *last = p,
                _ => unique.push(p),
            }
        }
        Series {
            step_secs: step_secs.max(1),
            points: unique,
        }
    }

    /// Parses `timestamp,value` CSV; see [`SeriesError`] for what is rejected.
    ///
    /// The rows are read by [`read_points`] (header, timestamp forms, refusals); an empty
    /// value or `NaN` is a missing sample. The step is the median spacing of consecutive
    /// timestamps.
    pub fn from_csv_str(text: &str) -> Result<Series, SeriesError> {
        csv::parse(text)
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True when the series has no points.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Timestamp of the first point.
    pub fn start(&self) -> Option<i64> {
        self.points.first().map(|p| p.ts)
    }

    /// One step past the last point: the exclusive end of the data.
    pub fn end(&self) -> Option<i64> {
        self.points.last().map(|p| p.ts + self.step_secs)
    }

    /// Fraction of the samples expected in `[start, end)` at this step that are present,
    /// between 0 and 1; 0 for an empty range.
    pub fn coverage(&self, start: i64, end: i64) -> f64 {
        if end <= start {
            return 0.0;
        }
        let expected = (end - start + self.step_secs - 1) / self.step_secs;
        let present = self.range(start, end).len();
        (present as f64 / expected as f64).min(1.0)
    }

    /// The points with `start <= ts < end`, as a series with the same step.
    pub fn window(&self, start: i64, end: i64) -> Series {
        Series {
            step_secs: self.step_secs,
            points: self.range(start, end).to_vec(),
        }
    }

    /// The points with `start <= ts < end`, borrowed.
    pub fn range(&self, start: i64, end: i64) -> &[Point] {
        let lo = self.points.partition_point(|p| p.ts < start);
        let hi = self.points.partition_point(|p| p.ts < end).max(lo);
        &self.points[lo..hi]
    }

    /// Largest value, or `None` when empty.
    pub fn max(&self) -> Option<f64> {
        self.points.iter().map(|p| p.value).reduce(f64::max)
    }

    /// The `q`-quantile of the values (`q` clamped to `[0, 1]`), interpolating linearly
    /// between order statistics (R's type 7); `None` when empty or `q` is NaN.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let mut values: Vec<f64> = self.points.iter().map(|p| p.value).collect();
        quantile_in_place(&mut values, q)
    }

    /// A copy with every value replaced by `f(ts, value)`; handy for scaling or ramps.
    pub fn map_values(&self, f: impl Fn(i64, f64) -> f64) -> Series {
        let points = self
            .points
            .iter()
            .map(|p| Point {
                ts: p.ts,
                value: f(p.ts, p.value),
            })
            .collect();
        Series::new(self.step_secs, points)
    }
}

/// Type-7 quantile of `values` (reordered in place); `None` when empty or `q` is NaN.
pub(crate) fn quantile_in_place(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() || q.is_nan() {
        return None;
    }
    let pos = q.clamp(0.0, 1.0) * (values.len() - 1) as f64;
    let lo = pos.floor() as usize;
    // Two order statistics by selection, not a full sort (this runs per backtest origin).
    let (_, lo_value, above) = values.select_nth_unstable_by(lo, f64::total_cmp);
    let lo_value = *lo_value;
    let hi_value = if pos.ceil() as usize == lo {
        lo_value
    } else {
        above.iter().copied().min_by(f64::total_cmp)?
    };
    Some(lo_value + (hi_value - lo_value) * (pos - lo as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(values: &[(i64, f64)]) -> Vec<Point> {
        values
            .iter()
            .map(|&(ts, value)| Point { ts, value })
            .collect()
    }

    #[test]
    fn new_sorts_drops_non_finite_and_dedups() {
        let s = Series::new(
            10,
            pts(&[
                (20, 2.0),
                (0, f64::NAN),
                (10, 1.0),
                (20, 3.0),
                (30, f64::INFINITY),
            ]),
        );
        assert_eq!(s.points, pts(&[(10, 1.0), (20, 3.0)]));
        assert_eq!(Series::new(0, vec![]).step_secs, 1);
    }

    #[test]
    fn coverage_counts_expected_slots() {
        let s = Series::new(10, pts(&[(0, 1.0), (10, 1.0), (30, 1.0)]));
        assert_eq!(s.coverage(0, 40), 0.75);
        assert_eq!(s.coverage(0, 35), 0.75);
        assert_eq!(s.coverage(40, 40), 0.0);
        assert_eq!(s.coverage(40, 100), 0.0);
    }

    #[test]
    fn window_is_half_open() {
        let s = Series::new(10, pts(&[(0, 1.0), (10, 2.0), (20, 3.0)]));
        assert_eq!(s.window(10, 20).points, pts(&[(10, 2.0)]));
        assert_eq!(s.window(20, 10).points, vec![]);
        assert_eq!(s.start(), Some(0));
        assert_eq!(s.end(), Some(30));
    }

    #[test]
    fn max_and_quantiles() {
        let s = Series::new(1, pts(&[(0, 4.0), (1, 1.0), (2, 3.0), (3, 2.0)]));
        assert_eq!(s.max(), Some(4.0));
        assert_eq!(s.quantile(0.0), Some(1.0));
        assert_eq!(s.quantile(1.0), Some(4.0));
        assert_eq!(s.quantile(0.5), Some(2.5));
        assert_eq!(s.quantile(2.0), Some(4.0));
        assert_eq!(Series::default().max(), None);
        assert_eq!(Series::default().quantile(0.5), None);
    }
}
