//! Robust growth of a series' busy-hours level: Theil–Sen on a daily high quantile of the log
//! rate, used by `peak-trend` (whose pairwise-slope estimator `forecast` shares).
//!
//! The history is cut into days ending at `now`; a day with under half its samples is skipped
//! (gaps). Each day's level is `ln(m + c)`, `m` the day's 90th percentile rate and `c` 1 % of
//! the median of those levels (so a day at zero is allowed). The 90th percentile follows the
//! busy hours, which is what a limit has to hold (a median follows the night on diurnal
//! traffic, and on bursty traffic the peaks grew where the day_levels fell), while a burst
//! shorter than a tenth of a day does not move it. The slope is the
//! median of pairwise slopes between days a multiple of 7 days apart when there are 14 usable
//! days or more (seasonal differences: the weekly pattern cancels), else between any two days.

use crate::series::{Series, quantile_in_place};

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;
/// A day counts when at least this fraction of its samples is present.
pub(crate) const MIN_DAY_COVERAGE: f64 = 0.5;
/// Fewest usable days for a growth estimate at all.
pub const MIN_DAYS: usize = 3;
/// The quantile of each day's samples taken as that day's level.
const DAILY_QUANTILE: f64 = 0.9;
/// Added to daily levels, as a fraction of their median, before the log (a zero median day
/// is allowed); small, because the offset damps the growth estimate by about as much.
const OFFSET: f64 = 0.01;
/// From this many usable days on, only pairs a multiple of a week apart are compared.
const MIN_DAYS_WEEKLY: usize = 14;

/// A growth estimate of a series' level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Growth {
    /// Slope of the log level in 1/second (0.05/week growth is `ln(1.05) / 604800`).
    pub slope: f64,
    /// Usable days the estimate is based on.
    pub days: usize,
    /// True when only pairs a multiple of 7 days apart were compared.
    pub weekly_pairs: bool,
}

impl Growth {
    /// Growth per week as a fraction (0.05 = +5 % a week).
    pub fn per_week(&self) -> f64 {
        (self.slope * WEEK as f64).exp_m1()
    }
}

/// The growth of `history`'s points in `[.., now)`, or `None` with fewer than [`MIN_DAYS`]
/// usable days (the caller windows the history).
pub fn growth(history: &Series, now: i64) -> Option<Growth> {
    let step = history.step_secs.max(1);
    let per_day = (DAY / step).max(1) as f64;
    let points = &history.points[..history.points.partition_point(|p| p.ts < now)];
    let first = points.first()?;
    let day_of = |ts: i64| ((now - 1 - ts).div_euclid(DAY)) as usize;
    let mut by_day: Vec<Vec<f64>> = vec![Vec::new(); day_of(first.ts) + 1];
    for p in points {
        by_day[day_of(p.ts)].push(p.value);
    }
    let day_levels: Vec<(f64, f64)> = by_day
        .iter_mut()
        .enumerate()
        .filter(|(_, v)| v.len() as f64 >= MIN_DAY_COVERAGE * per_day)
        .filter_map(|(k, v)| {
            let t = -((k as f64) + 0.5) * DAY as f64;
            quantile_in_place(v, DAILY_QUANTILE).map(|m| (t, m))
        })
        .collect();
    if day_levels.len() < MIN_DAYS {
        return None;
    }
    let mut levels: Vec<f64> = day_levels.iter().map(|d| d.1).collect();
    let typical = quantile_in_place(&mut levels, 0.5).unwrap_or(0.0);
    let offset = if typical > 0.0 {
        OFFSET * typical
    } else {
        levels.last().copied().filter(|m| *m > 0.0).unwrap_or(1.0) * OFFSET
    };
    let daily: Vec<(f64, f64)> = day_levels
        .iter()
        .map(|&(t, m)| (t, (m + offset).ln()))
        .collect();
    let weekly_pairs = daily.len() >= MIN_DAYS_WEEKLY;
    let lag = if weekly_pairs { WEEK } else { DAY };
    Some(Growth {
        slope: theil_sen_slope(&daily, lag as f64),
        days: daily.len(),
        weekly_pairs,
    })
}

/// Median of pairwise slopes between points whose times differ by a multiple of `lag`
/// (seasonal differences: a weekly pattern cancels out); plain Theil–Sen when `lag` is a day
/// and the points are daily.
pub(crate) fn theil_sen_slope(daily: &[(f64, f64)], lag: f64) -> f64 {
    let mut slopes = Vec::with_capacity(daily.len() * daily.len() / 2);
    for (i, a) in daily.iter().enumerate() {
        for b in &daily[i + 1..] {
            let dt = a.0 - b.0;
            let k = (dt / lag).round();
            if k != 0.0 && (dt - k * lag).abs() < 1.0 {
                slopes.push((a.1 - b.1) / dt);
            }
        }
    }
    quantile_in_place(&mut slopes, 0.5).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::Point;

    fn series(days: i64, now: i64, f: impl Fn(i64) -> f64) -> Series {
        let points = (0..days * 288)
            .map(|i| {
                let ts = now - days * DAY + i * 300;
                Point { ts, value: f(ts) }
            })
            .collect();
        Series::new(300, points)
    }

    #[test]
    fn recovers_a_steady_weekly_growth_through_a_weekly_pattern() {
        let now = 1_700_000_000 - 1_700_000_000 % WEEK;
        let s = series(28, now, |ts| {
            let weeks = (ts - now) as f64 / WEEK as f64;
            let weekend = if ts.rem_euclid(WEEK) < 2 * DAY {
                0.5
            } else {
                1.0
            };
            1_000.0 * 1.1f64.powf(weeks) * weekend
        });
        let g = growth(&s, now).unwrap();
        assert!((g.per_week() - 0.1).abs() < 2e-3, "{g:?}");
        assert_eq!((g.days, g.weekly_pairs), (28, true));
    }

    #[test]
    fn bursts_do_not_move_a_flat_level() {
        let now = 1_700_000_000;
        let s = series(21, now, |ts| {
            if ts.rem_euclid(3 * DAY) < 3_600 {
                50_000.0
            } else {
                100.0
            }
        });
        let g = growth(&s, now).unwrap();
        assert_eq!(g.per_week(), 0.0, "{g:?}");
    }

    #[test]
    fn short_or_gappy_history_has_no_estimate() {
        let now = 1_700_000_000;
        assert_eq!(growth(&series(2, now, |_| 5.0), now), None);
        let mut s = series(10, now, |_| 5.0);
        s.points.retain(|p| p.ts.rem_euclid(DAY) < DAY / 3);
        assert_eq!(growth(&s, now), None, "no day has half its samples");
        assert_eq!(growth(&Series::default(), now), None);
    }
}
