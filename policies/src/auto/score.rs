//! The rolling-origin backtest `auto` runs on a bucket's own window, scoring every candidate
//! at the same origins (each horizon is sorted once and shared by all candidates).

use super::candidates::Candidate;
use crate::policy::Context;
use crate::series::Series;

/// Where the inner backtest's origins fall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Origins {
    /// Data before the first origin.
    pub warmup_secs: i64,
    /// History each candidate sees before an origin (at most; less near the start).
    pub window_secs: i64,
    /// Span after an origin a limit is scored on.
    pub horizon_secs: i64,
    /// Distance between origins.
    pub stride_secs: i64,
}

/// One candidate's figures on the inner backtest.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Score {
    /// Origins where the candidate produced a limit and the horizon had data.
    pub scored: usize,
    /// Origins where it refused.
    pub refused: usize,
    /// Points above their origin's limit.
    pub exceeded: usize,
    /// Points scored.
    pub points: usize,
    /// `exceeded / points` (0 when nothing was scored).
    pub exceedance_rate: f64,
    /// Mean over scored origins of limit / max actual in the horizon (NaN if none).
    pub peak_headroom: f64,
}

/// Scores every candidate on `series` (already cut to the bucket's window, ending at `end`).
/// Returns one score per candidate, in order, and the number of origins tried.
pub(crate) fn score_all(
    candidates: &[Candidate],
    series: &Series,
    end: i64,
    origins: Origins,
) -> (Vec<Score>, usize) {
    let mut sums = vec![(0usize, 0usize, 0usize, 0usize, 0.0f64, 0usize); candidates.len()];
    let Some(start) = series.start() else {
        return (finish(&sums), 0);
    };
    let mut tried = 0;
    let mut t = start + origins.warmup_secs;
    let mut horizon: Vec<f64> = Vec::new();
    while t + origins.horizon_secs <= end {
        tried += 1;
        horizon.clear();
        horizon.extend(
            series
                .range(t, t + origins.horizon_secs)
                .iter()
                .map(|p| p.value),
        );
        horizon.sort_unstable_by(f64::total_cmp);
        let history = series.window(t - origins.window_secs, t);
        let ctx = Context {
            now: t,
            previous_limit: None,
        };
        for (c, s) in candidates.iter().zip(sums.iter_mut()) {
            let (scored, refused, exceeded, points, headroom, headroom_n) = s;
            match c.policy.recommend(&history, &ctx) {
                Err(_) => *refused += 1,
                Ok(_) if horizon.is_empty() => {}
                Ok(rec) => {
                    *scored += 1;
                    *points += horizon.len();
                    *exceeded += horizon.len() - horizon.partition_point(|&v| v <= rec.rps);
                    let max = horizon[horizon.len() - 1];
                    if max > 0.0 {
                        *headroom += rec.rps / max;
                        *headroom_n += 1;
                    }
                }
            }
        }
        t += origins.stride_secs.max(1);
    }
    (finish(&sums), tried)
}

fn finish(sums: &[(usize, usize, usize, usize, f64, usize)]) -> Vec<Score> {
    sums.iter()
        .map(
            |&(scored, refused, exceeded, points, headroom, headroom_n)| Score {
                scored,
                refused,
                exceeded,
                points,
                exceedance_rate: if points > 0 {
                    exceeded as f64 / points as f64
                } else {
                    0.0
                },
                peak_headroom: if headroom_n > 0 {
                    headroom / headroom_n as f64
                } else {
                    f64::NAN
                },
            },
        )
        .collect()
}
