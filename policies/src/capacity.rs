//! Planned capacity in numbers: the one rule that shares a capacity among limits that
//! would exceed it ([`fit_to_budget`]), and a service's forecast demand, day by day over a
//! horizon ([`forecast_demand`]), to compare with its planned capacity.
//!
//! # The scale-down rule
//! Limits that may be scaled are multiplied by **one common factor** `f` (so each keeps its
//! share of the sum: a bucket with twice the limit keeps twice the room), chosen so that the
//! counted sum equals the budget; a limit that `f` would put below its floor stays at its
//! floor, and the others share what is left with a new common factor. Fixed limits (a
//! contract) count but are never scaled. Each limit counts `weight` times (a limit per
//! region counts once per region inside a global capacity).
//!
//! ```
//! use policies::capacity::{Share, fit_to_budget};
//! let shares = [
//!     Share { limit: 600.0, floor: 0.0, weight: 1.0, fixed: false },
//!     Share { limit: 400.0, floor: 0.0, weight: 1.0, fixed: false },
//!     Share { limit: 300.0, floor: 0.0, weight: 1.0, fixed: true },
//! ];
//! let fit = fit_to_budget(&shares, 800.0);
//! assert_eq!(fit.limits, vec![300.0, 200.0, 300.0]);
//! assert!(fit.met);
//! ```

use crate::forecast::Model;
use crate::series::Series;

const DAY: i64 = 86_400;

/// One limit counted against a capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// The limit as the policy and the other guards left it (requests per second).
    pub limit: f64,
    /// The lowest it may be scaled to (its `floor` guard; 0 without one).
    pub floor: f64,
    /// How many times it counts in the capacity's scope (its areas inside the scope).
    pub weight: f64,
    /// A limit that counts but is never scaled (a `fixed` policy: a contract).
    pub fixed: bool,
}

/// What [`fit_to_budget`] made of the limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// Each limit after the rule, in the order given (unchanged when the sum fits).
    pub limits: Vec<f64>,
    /// The common factor applied to the limits that were not held at their floor (1: none
    /// scaled).
    pub factor: f64,
    /// The counted sum before.
    pub before: f64,
    /// The counted sum after.
    pub after: f64,
    /// False when fixed limits and floors alone exceed the budget (every scalable limit is
    /// then at its floor, and the sum is still above the budget).
    pub met: bool,
}

/// Scales `shares` down so that their counted sum (each `limit × weight`) is at most
/// `budget`, by the rule in the module docs. Nothing changes when the sum already fits.
pub fn fit_to_budget(shares: &[Share], budget: f64) -> Fit {
    let sum =
        |limits: &[f64]| -> f64 { limits.iter().zip(shares).map(|(l, s)| l * s.weight).sum() };
    let mut limits: Vec<f64> = shares.iter().map(|s| s.limit).collect();
    let before = sum(&limits);
    if before <= budget {
        return Fit {
            limits,
            factor: 1.0,
            before,
            after: before,
            met: true,
        };
    }
    let fixed: f64 = shares
        .iter()
        .filter(|s| s.fixed)
        .map(|s| s.limit * s.weight)
        .sum();
    let mut floored: Vec<bool> = shares.iter().map(|s| s.fixed).collect();
    let factor = loop {
        let held: f64 = shares
            .iter()
            .zip(&floored)
            .filter(|(s, f)| **f && !s.fixed)
            .map(|(s, _)| s.floor.min(s.limit) * s.weight)
            .sum();
        let free: f64 = shares
            .iter()
            .zip(&floored)
            .filter(|(_, f)| !**f)
            .map(|(s, _)| s.limit * s.weight)
            .sum();
        let factor = if free > 0.0 {
            ((budget - fixed - held) / free).clamp(0.0, 1.0)
        } else {
            0.0
        };
        let mut moved = false;
        for (s, f) in shares.iter().zip(floored.iter_mut()) {
            if !*f && s.limit * factor < s.floor {
                *f = true;
                moved = true;
            }
        }
        if !moved {
            break factor;
        }
    };
    for ((l, s), f) in limits.iter_mut().zip(shares).zip(&floored) {
        if s.fixed {
            continue;
        }
        *l = if *f {
            s.floor.min(s.limit)
        } else {
            s.limit * factor
        };
    }
    let after = sum(&limits);
    Fit {
        limits,
        factor,
        before,
        after,
        met: after <= budget * (1.0 + 1e-9),
    }
}

/// The expected peak of one day of the horizon.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DayDemand {
    /// Start of the day (unix seconds; days are cut at `now`).
    pub start: i64,
    /// The day's expected peak rate (requests per second).
    pub peak: f64,
    /// When in the day the forecast path peaks (unix seconds).
    pub at: i64,
}

/// How a demand figure was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemandMethod {
    /// The `forecast` policy's model: trend and seasonality, and the median of the day's
    /// peak above the fitted path.
    Forecast,
    /// Too little history for the model: the window's observed peak, every day.
    ObservedPeak,
}

impl DemandMethod {
    /// `forecast` or `observed peak`, as the pull request says it.
    pub fn as_str(self) -> &'static str {
        match self {
            DemandMethod::Forecast => "forecast",
            DemandMethod::ObservedPeak => "observed peak",
        }
    }
}

/// A service's demand over the horizon.
#[derive(Debug, Clone, PartialEq)]
pub struct Demand {
    /// One entry per day of the horizon, in order.
    pub days: Vec<DayDemand>,
    /// How the figures were obtained.
    pub method: DemandMethod,
}

impl Demand {
    /// The largest day's peak (0 with no days).
    pub fn peak(&self) -> f64 {
        self.days.iter().map(|d| d.peak).fold(0.0, f64::max)
    }
}

/// The expected peak of each day in `[now, now + horizon_secs)` of the rates in `history`
/// (the service's offered load), from the `forecast` model fitted on `[now - window_secs,
/// now)`: the median of the day's actual peak (its fitted peak raised by the median daily
/// excess the history showed). With too little history for the model, the window's
/// observed peak stands for every day. `None` when the window holds no data.
pub fn forecast_demand(
    history: &Series,
    now: i64,
    window_secs: i64,
    horizon_secs: i64,
) -> Option<Demand> {
    let recent = history.window(now - window_secs, now);
    let observed = recent
        .points
        .iter()
        .copied()
        .reduce(|a, b| if b.value > a.value { b } else { a })?;
    let step = history.step_secs.max(1);
    let days = (horizon_secs.max(DAY) + DAY - 1) / DAY;
    let starts = (0..days).map(|d| now + d * DAY);
    match Model::fit(&recent, now) {
        Ok(model) => Some(Demand {
            days: starts
                .map(|start| {
                    let end = start + DAY;
                    let mut at = start;
                    let mut ts = start;
                    while ts < end {
                        if model.predict(ts) > model.predict(at) {
                            at = ts;
                        }
                        ts += step;
                    }
                    DayDemand {
                        start,
                        peak: model.peak(start, end, step, 0.5).upper,
                        at,
                    }
                })
                .collect(),
            method: DemandMethod::Forecast,
        }),
        Err(_) => Some(Demand {
            days: starts
                .map(|start| DayDemand {
                    start,
                    peak: observed.value,
                    at: start,
                })
                .collect(),
            method: DemandMethod::ObservedPeak,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::Point;

    fn share(limit: f64, floor: f64) -> Share {
        Share {
            limit,
            floor,
            weight: 1.0,
            fixed: false,
        }
    }

    #[test]
    fn a_sum_that_fits_is_left_alone() {
        let fit = fit_to_budget(&[share(100.0, 0.0), share(200.0, 0.0)], 300.0);
        assert_eq!(fit.limits, vec![100.0, 200.0]);
        assert_eq!((fit.factor, fit.met), (1.0, true));
    }

    #[test]
    fn limits_scale_by_one_factor_and_keep_their_shares() {
        let fit = fit_to_budget(
            &[share(600.0, 0.0), share(300.0, 0.0), share(100.0, 0.0)],
            800.0,
        );
        assert_eq!(fit.limits, vec![480.0, 240.0, 80.0]);
        assert!((fit.factor - 0.8).abs() < 1e-12);
        assert!((fit.after - 800.0).abs() < 1e-9);
    }

    #[test]
    fn a_floor_holds_and_the_others_share_the_rest() {
        let fit = fit_to_budget(
            &[share(600.0, 0.0), share(300.0, 0.0), share(100.0, 90.0)],
            500.0,
        );
        assert_eq!(fit.limits[2], 90.0);
        assert!(
            (fit.limits[0] / fit.limits[1] - 2.0).abs() < 1e-9,
            "{fit:?}"
        );
        assert!((fit.after - 500.0).abs() < 1e-9, "{fit:?}");
        assert!(fit.met);
    }

    #[test]
    fn fixed_limits_count_but_never_move_and_floors_can_make_it_unmeetable() {
        let shares = [
            Share {
                limit: 700.0,
                floor: 0.0,
                weight: 1.0,
                fixed: true,
            },
            share(500.0, 200.0),
        ];
        let fit = fit_to_budget(&shares, 800.0);
        assert_eq!(fit.limits, vec![700.0, 200.0]);
        assert!(!fit.met, "700 fixed + floor 200 > 800: {fit:?}");
    }

    #[test]
    fn weights_count_a_limit_once_per_area() {
        let shares = [
            Share {
                limit: 100.0,
                floor: 0.0,
                weight: 3.0,
                fixed: false,
            },
            share(300.0, 0.0),
        ];
        let fit = fit_to_budget(&shares, 300.0);
        assert_eq!(fit.limits, vec![50.0, 150.0]);
    }

    fn daily(days: i64, now: i64, base: f64, growth_per_day: f64) -> Series {
        let pts = (0..days * 288)
            .map(|i| {
                let ts = now - days * DAY + i * 300;
                let phase = std::f64::consts::TAU * (ts % DAY) as f64 / DAY as f64;
                let level = base
                    * (1.0 + growth_per_day).powf((ts - (now - days * DAY)) as f64 / DAY as f64);
                Point {
                    ts,
                    value: level * (1.0 + 0.5 * phase.sin()),
                }
            })
            .collect();
        Series::new(300, pts)
    }

    #[test]
    fn demand_follows_the_trend_day_by_day() {
        let now = 1_800_000_000 - 1_800_000_000 % DAY;
        let s = daily(28, now, 1000.0, 0.02);
        let d = forecast_demand(&s, now, 28 * DAY, 7 * DAY).unwrap();
        assert_eq!(d.method, DemandMethod::Forecast);
        assert_eq!(d.days.len(), 7);
        let last_seen = s.max().unwrap();
        assert!(d.days[6].peak > d.days[0].peak, "{d:?}");
        assert!(
            d.days[6].peak > last_seen,
            "growth carries on: {d:?} vs {last_seen}"
        );
        for day in &d.days {
            assert!(day.at >= day.start && day.at < day.start + DAY);
            // sin peaks at a quarter of the day.
            assert!((day.at - day.start - DAY / 4).abs() <= 1_800, "{day:?}");
        }
    }

    #[test]
    fn too_little_history_uses_the_observed_peak() {
        let now = 1_800_000_000;
        let s = daily(2, now, 100.0, 0.0);
        let d = forecast_demand(&s, now, 28 * DAY, 7 * DAY).unwrap();
        assert_eq!(d.method, DemandMethod::ObservedPeak);
        assert_eq!(d.peak(), s.max().unwrap());
        assert!(forecast_demand(&Series::new(300, Vec::new()), now, DAY, DAY).is_none());
    }
}
