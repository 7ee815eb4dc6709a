//! Rolling-origin backtest: how often a policy's limits would have been exceeded on a
//! series, and how much headroom they would have left.

use crate::policy::{Context, Policy};
use crate::series::{Series, quantile_in_place};

/// Where the origins fall and what each one scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BacktestConfig {
    /// History handed to the policy before each origin.
    pub window_secs: i64,
    /// Span after each origin that the limit is scored on.
    pub horizon_secs: i64,
    /// Distance between origins.
    pub stride_secs: i64,
}

impl BacktestConfig {
    /// A config whose stride equals the horizon (consecutive, non-overlapping horizons).
    pub fn new(window_secs: i64, horizon_secs: i64) -> Self {
        BacktestConfig {
            window_secs,
            horizon_secs,
            stride_secs: horizon_secs,
        }
    }
}

/// The figures of one backtest.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BacktestReport {
    /// Origins tried (scored plus refused).
    pub origins: usize,
    /// Origins where the policy refused; they are not scored.
    pub refused: usize,
    /// Origins scored: a limit was produced and the horizon had data.
    pub scored: usize,
    /// Fraction of all scored points above their origin's limit (NaN if none scored).
    pub exceedance_rate: f64,
    /// Mean over scored origins of limit / max actual in the horizon (NaN if none).
    pub peak_headroom: f64,
    /// Mean over scored origins of limit / median actual in the horizon (NaN if none).
    pub median_headroom: f64,
}

/// Runs `policy` at each origin `t = start + window, t + stride, ...` while
/// `t + horizon <= end` (the series' first point and one step past its last): history is
/// `[t - window, t)`, the context's `now` is `t` and `previous_limit` the last limit
/// produced, and the limit is scored on the points in `[t, t + horizon)`.
///
/// Origins whose horizon holds no points are neither scored nor counted as refused;
/// origins whose horizon maximum (or median) is not positive are left out of that mean.
pub fn backtest(policy: &dyn Policy, series: &Series, cfg: &BacktestConfig) -> BacktestReport {
    let mut report = BacktestReport {
        origins: 0,
        refused: 0,
        scored: 0,
        exceedance_rate: f64::NAN,
        peak_headroom: f64::NAN,
        median_headroom: f64::NAN,
    };
    let (Some(start), Some(end)) = (series.start(), series.end()) else {
        return report;
    };
    let stride = cfg.stride_secs.max(1);
    let (mut points, mut exceeded) = (0usize, 0usize);
    let (mut peak_sum, mut peak_n, mut median_sum, mut median_n) = (0.0, 0usize, 0.0, 0usize);
    let mut previous_limit = None;
    let mut t = start + cfg.window_secs;
    while t + cfg.horizon_secs <= end {
        report.origins += 1;
        let history = series.window(t - cfg.window_secs, t);
        let ctx = Context {
            now: t,
            previous_limit,
        };
        match policy.recommend(&history, &ctx) {
            Err(_) => report.refused += 1,
            Ok(rec) => {
                previous_limit = Some(rec.rps);
                let actual = series.range(t, t + cfg.horizon_secs);
                if !actual.is_empty() {
                    report.scored += 1;
                    points += actual.len();
                    exceeded += actual.iter().filter(|p| p.value > rec.rps).count();
                    let mut values: Vec<f64> = actual.iter().map(|p| p.value).collect();
                    let median = quantile_in_place(&mut values, 0.5).unwrap_or(0.0);
                    let max = values.iter().copied().max_by(f64::total_cmp).unwrap_or(0.0);
                    if max > 0.0 {
                        peak_sum += rec.rps / max;
                        peak_n += 1;
                    }
                    if median > 0.0 {
                        median_sum += rec.rps / median;
                        median_n += 1;
                    }
                }
            }
        }
        t += stride;
    }
    if points > 0 {
        report.exceedance_rate = exceeded as f64 / points as f64;
    }
    if peak_n > 0 {
        report.peak_headroom = peak_sum / peak_n as f64;
    }
    if median_n > 0 {
        report.median_headroom = median_sum / median_n as f64;
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Recommendation, Refusal};
    use crate::series::Point;
    use std::time::Duration;

    /// Recommends the last value of the history times 2; refuses on empty history.
    #[derive(Debug)]
    struct LastTimesTwo;

    impl Policy for LastTimesTwo {
        fn kind(&self) -> &'static str {
            "last-times-two"
        }
        fn window(&self) -> Duration {
            Duration::from_secs(2)
        }
        fn recommend(&self, h: &Series, _: &Context) -> Result<Recommendation, Refusal> {
            let last = h.points.last().ok_or_else(|| Refusal::new("empty"))?;
            Ok(Recommendation::new(self.kind(), last.value * 2.0))
        }
    }

    fn series(values: &[(i64, f64)]) -> Series {
        Series::new(
            1,
            values
                .iter()
                .map(|&(ts, value)| Point { ts, value })
                .collect(),
        )
    }

    #[test]
    fn hand_made_series_gives_exact_figures() {
        // ts:     0  1  2  3  4  5  6  7
        // value:  1  2  5  3  4  9  1  1
        let s = series(&[
            (0, 1.),
            (1, 2.),
            (2, 5.),
            (3, 3.),
            (4, 4.),
            (5, 9.),
            (6, 1.),
            (7, 1.),
        ]);
        let cfg = BacktestConfig::new(2, 3);
        let r = backtest(&LastTimesTwo, &s, &cfg);
        // Origins t = 2 and t = 5 (t + 3 <= end = 8).
        // t=2: history [0,2) last 2 -> limit 4; horizon 5,3,4 -> 1 exceedance; max 5, median 4.
        // t=5: history [3,5) last 4 -> limit 8; horizon 9,1,1 -> 1 exceedance; max 9, median 1.
        assert_eq!(r.origins, 2);
        assert_eq!(r.refused, 0);
        assert_eq!(r.scored, 2);
        assert_eq!(r.exceedance_rate, 2.0 / 6.0);
        assert_eq!(r.peak_headroom, (4.0 / 5.0 + 8.0 / 9.0) / 2.0);
        assert_eq!(r.median_headroom, (4.0 / 4.0 + 8.0 / 1.0) / 2.0);
    }

    #[test]
    fn refusals_and_stride_are_counted() {
        // A gap at [2, 4) makes the origin t = 4 (history [2,4)) refuse.
        let s = series(&[(0, 1.), (1, 1.), (4, 3.), (5, 1.), (6, 1.), (7, 1.)]);
        let cfg = BacktestConfig {
            window_secs: 2,
            horizon_secs: 1,
            stride_secs: 2,
        };
        let r = backtest(&LastTimesTwo, &s, &cfg);
        // Origins t = 2, 4, 6: t=2 limit 2 vs [2,3) empty -> not scored; t=4 refused;
        // t=6 limit 2 (last of [4,6) is 1) vs 1 -> no exceedance, headroom 2.
        assert_eq!((r.origins, r.refused, r.scored), (3, 1, 1));
        assert_eq!(r.exceedance_rate, 0.0);
        assert_eq!(r.peak_headroom, 2.0);
        assert_eq!(r.median_headroom, 2.0);
    }

    #[test]
    fn too_short_series_has_no_origins() {
        let r = backtest(
            &LastTimesTwo,
            &series(&[(0, 1.), (1, 1.)]),
            &BacktestConfig::new(2, 1),
        );
        assert_eq!((r.origins, r.scored), (0, 0));
        assert!(r.exceedance_rate.is_nan());
        let r = backtest(
            &LastTimesTwo,
            &Series::default(),
            &BacktestConfig::new(2, 1),
        );
        assert_eq!(r.origins, 0);
    }
}
