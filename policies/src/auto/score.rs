//! The rolling-origin backtest `auto` runs on a bucket's own window, scoring every candidate
//! at the same origins, each point of the window counted once per candidate.

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
///
/// Horizons overlap (origins are `horizon / 7` apart), so a point is scored by several
/// origins. For the pick rule it counts once ([`Score::exceeded`], [`Score::points`]), as
/// exceeded if the limit of any origin that scored it was below it: the evidence for a
/// larger limit is how many points beat the smaller one, not how many origins happened to
/// see the same burst. [`Score::exceedance_rate`] keeps the meaning it has in
/// [`crate::backtest`] (over all scored point-origin pairs), so that the evidence compares
/// with every other policy's backtest.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Score {
    /// Origins where the candidate produced a limit and the horizon had data.
    pub scored: usize,
    /// Origins where it refused.
    pub refused: usize,
    /// Distinct points above the limit of an origin that scored them.
    pub exceeded: usize,
    /// Distinct points scored.
    pub points: usize,
    /// Fraction of the scored (point, origin) pairs above that origin's limit, as in
    /// [`crate::backtest::BacktestReport`] (0 when nothing was scored).
    pub exceedance_rate: f64,
    /// Mean over scored origins of limit / max actual in the horizon (NaN if none).
    pub peak_headroom: f64,
}

/// What one candidate has gathered so far: per point of the window, whether it was scored
/// and whether it was exceeded, plus the per-origin figures.
struct Tally {
    scored: usize,
    refused: usize,
    /// Per point of the window: 0 not scored, 1 scored, 2 exceeded.
    marks: Vec<u8>,
    /// (point, origin) pairs scored and exceeded.
    pairs: usize,
    pairs_exceeded: usize,
    headroom_sum: f64,
    headroom_n: usize,
}

impl Tally {
    /// Nothing gathered yet, over a window of `points` points.
    fn new(points: usize) -> Tally {
        Tally {
            scored: 0,
            refused: 0,
            marks: vec![0; points],
            pairs: 0,
            pairs_exceeded: 0,
            headroom_sum: 0.0,
            headroom_n: 0,
        }
    }

    fn score(&self) -> Score {
        let points = self.marks.iter().filter(|&&m| m > 0).count();
        let exceeded = self.marks.iter().filter(|&&m| m == 2).count();
        Score {
            scored: self.scored,
            refused: self.refused,
            exceeded,
            points,
            exceedance_rate: if self.pairs > 0 {
                self.pairs_exceeded as f64 / self.pairs as f64
            } else {
                0.0
            },
            peak_headroom: if self.headroom_n > 0 {
                self.headroom_sum / self.headroom_n as f64
            } else {
                f64::NAN
            },
        }
    }
}

/// Scores every candidate on `series` (already cut to the bucket's window, ending at `end`).
/// Returns one score per candidate, in order, and the number of origins tried.
pub(crate) fn score_all(
    candidates: &[Candidate],
    series: &Series,
    end: i64,
    origins: Origins,
) -> (Vec<Score>, usize) {
    let Some(start) = series.start() else {
        return (vec![Tally::new(0).score(); candidates.len()], 0);
    };
    let all = series.range(start, end);
    let mut tallies: Vec<Tally> = candidates.iter().map(|_| Tally::new(all.len())).collect();
    let mut tried = 0;
    let mut t = start + origins.warmup_secs;
    while t + origins.horizon_secs <= end {
        tried += 1;
        let first = all.partition_point(|p| p.ts < t);
        let last = all.partition_point(|p| p.ts < t + origins.horizon_secs);
        let horizon = &all[first..last];
        let max = horizon
            .iter()
            .map(|p| p.value)
            .fold(f64::NEG_INFINITY, f64::max);
        let history = series.window(t - origins.window_secs, t);
        let ctx = Context {
            now: t,
            previous_limit: None,
        };
        for (c, tally) in candidates.iter().zip(tallies.iter_mut()) {
            match c.policy.recommend(&history, &ctx) {
                Err(_) => tally.refused += 1,
                Ok(_) if horizon.is_empty() => {}
                Ok(rec) => {
                    tally.scored += 1;
                    tally.pairs += horizon.len();
                    for (mark, p) in tally.marks[first..last].iter_mut().zip(horizon) {
                        // A limit that is not a number holds nothing.
                        let held = matches!(
                            p.value.partial_cmp(&rec.rps),
                            Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
                        );
                        tally.pairs_exceeded += usize::from(!held);
                        *mark = (*mark).max(if held { 1 } else { 2 });
                    }
                    if max > 0.0 {
                        tally.headroom_sum += rec.rps / max;
                        tally.headroom_n += 1;
                    }
                }
            }
        }
        t += origins.stride_secs.max(1);
    }
    (tallies.iter().map(Tally::score).collect(), tried)
}
