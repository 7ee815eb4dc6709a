//! `peak-trend`: the window's peak projected over the horizon by a robust growth estimate,
//! plus a buffer.
//!
//! Parameters: `window` (default `28d`), `horizon` (span the limit must hold for, default
//! `7d`), `buffer` (fraction, default `0.25`), `quantile` (optional, e.g. `0.999`, instead of
//! the maximum), `max_growth` (largest growth per week believed, default `0.5`).
//!
//! # Rule
//! `g` is the growth per week of the busy hours' level from [`crate::trend`] (Theil–Sen on
//! each day's 90th percentile, pairs a week apart), clamped to `[0, max_growth]`. The
//! limit is `peak × (1 + g)^(horizon in weeks) × (1 + buffer)`. With `g = 0` this is exactly
//! `historical-peak`, so flat traffic keeps its tight headroom; on growing traffic the
//! limit grows ahead of the traffic instead of lagging it by the growth of a horizon.
//!
//! The peak itself is not scaled by its age: an old burst multiplied by weeks of an
//! estimated growth is an extrapolation of a noise-prone estimate (on real tweet counts it
//! cost 25 % more headroom for the same exceedances).
//!
//! Growth is never negative: a falling estimate would lower the limit below a peak that
//! was actually seen within the window, and traffic that fell can come back; the window
//! forgets old peaks anyway. With fewer than 3 usable days no growth is estimated (`g = 0`,
//! said in the evidence).

use crate::duration;
use crate::params::{Params, SpecError};
use crate::policy::FromSpec;
use crate::policy::{Context, Policy, Recommendation, Refusal};
use crate::series::{Series, quantile_in_place};
use crate::trend;
use std::time::Duration;

const WEEK: f64 = 7.0 * 86_400.0;

/// Peak of the window, projected over the horizon by its growth, times `1 + buffer`.
#[derive(Debug, Clone, PartialEq)]
pub struct PeakTrend {
    /// How much history to look at.
    pub window: Duration,
    /// How far ahead the limit must hold.
    pub horizon: Duration,
    /// Headroom as a fraction of the projected peak (0.25 = 25 %).
    pub buffer: f64,
    /// Use this quantile of the window instead of its maximum.
    pub quantile: Option<f64>,
    /// Largest growth per week used (0.5 = +50 % a week).
    pub max_growth: f64,
}

impl Default for PeakTrend {
    fn default() -> Self {
        PeakTrend {
            window: Duration::from_secs(28 * 86_400),
            horizon: Duration::from_secs(7 * 86_400),
            buffer: 0.25,
            quantile: None,
            max_growth: 0.5,
        }
    }
}

impl FromSpec for PeakTrend {
    const KIND: &'static str = "peak-trend";

    fn from_params(params: &Params<'_>) -> Result<Self, SpecError> {
        Ok(PeakTrend {
            window: params.duration("window", "28d")?,
            horizon: params.duration("horizon", "7d")?,
            buffer: params.f64_in("buffer", 0.25, 0.0, 100.0)?,
            quantile: params.opt_f64_in("quantile", 0.0, 1.0)?,
            max_growth: params.f64_in("max_growth", 0.5, 0.0, 10.0)?,
        })
    }
}

impl Policy for PeakTrend {
    fn kind(&self) -> &'static str {
        Self::KIND
    }

    fn window(&self) -> Duration {
        self.window
    }

    fn horizon(&self) -> Option<Duration> {
        Some(self.horizon)
    }

    fn recommend(&self, history: &Series, ctx: &Context) -> Result<Recommendation, Refusal> {
        let recent = history.range(ctx.now.saturating_sub(duration::secs(self.window)), ctx.now);
        if recent.is_empty() {
            return Err(Refusal::new(format!(
                "no history in the last {}",
                duration::format(self.window)
            )));
        }
        let window = Series {
            step_secs: history.step_secs,
            points: recent.to_vec(),
        };
        let estimate = trend::growth(&window, ctx.now);
        let raw = estimate.map_or(0.0, |g| g.per_week());
        let growth = raw.clamp(0.0, self.max_growth);
        let observed_peak = recent.iter().map(|p| p.value).fold(f64::MIN, f64::max);
        let reference = match self.quantile {
            None => observed_peak,
            Some(q) => {
                let mut values: Vec<f64> = recent.iter().map(|p| p.value).collect();
                quantile_in_place(&mut values, q).unwrap_or(observed_peak)
            }
        };
        let projected = reference * (1.0 + growth).powf(self.horizon.as_secs_f64() / WEEK);
        let mut rec = Recommendation::new(Self::KIND, projected * (1.0 + self.buffer))
            .with("window", duration::format(self.window))
            .with("horizon", duration::format(self.horizon))
            .with("observed_peak", observed_peak)
            .with("projected_peak", projected)
            .with("growth_per_week", growth)
            .with("buffer", self.buffer)
            .with("points", recent.len());
        match estimate {
            Some(g) => {
                rec = rec
                    .with("growth_estimate_per_week", raw)
                    .with("growth_days", g.days);
            }
            None => {
                rec = rec.with(
                    "growth_note",
                    format!(
                        "fewer than {} usable days: no growth assumed",
                        trend::MIN_DAYS
                    ),
                );
            }
        }
        if let Some(q) = self.quantile {
            rec = rec.with("quantile", q).with("observed_quantile", reference);
        }
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::historical_peak::HistoricalPeak;
    use crate::series::Point;

    const DAY: i64 = 86_400;

    fn series(days: i64, now: i64, f: impl Fn(i64) -> f64) -> Series {
        let points = (0..days * 288)
            .map(|i| {
                let ts = now - days * DAY + i * 300;
                Point { ts, value: f(ts) }
            })
            .collect();
        Series::new(300, points)
    }

    fn ctx(now: i64) -> Context {
        Context {
            now,
            previous_limit: None,
        }
    }

    #[test]
    fn flat_traffic_gives_historical_peak() {
        let now = 1_700_000_000;
        let s = series(28, now, |ts| 100.0 + (ts / 300 % 7) as f64);
        let pt = PeakTrend::default().recommend(&s, &ctx(now)).unwrap();
        let hp = HistoricalPeak::default().recommend(&s, &ctx(now)).unwrap();
        assert_eq!(pt.rps, hp.rps);
        assert_eq!(pt.evidence["growth_per_week"], 0.0);
        assert_eq!(pt.evidence["observed_peak"], 106.0);
    }

    #[test]
    fn growth_is_projected_to_the_end_of_the_horizon() {
        let now = 1_700_000_000;
        // +10 % a week, compounding; the last point is 5 minutes before now.
        let s = series(28, now, |ts| 100.0 * 1.1f64.powf((ts - now) as f64 / WEEK));
        let r = PeakTrend::default().recommend(&s, &ctx(now)).unwrap();
        let growth = r.evidence["growth_per_week"].as_f64().unwrap();
        assert!((growth - 0.1).abs() < 2e-3, "{growth}");
        // Level at now is 100, at the horizon's end 110, plus 25 %.
        assert!((r.rps - 137.5).abs() < 0.5, "{}", r.rps);
        let hp = HistoricalPeak::default().recommend(&s, &ctx(now)).unwrap();
        assert!(r.rps > hp.rps * 1.09);
    }

    #[test]
    fn decline_is_not_projected_and_growth_is_capped() {
        let now = 1_700_000_000;
        let falling = series(28, now, |ts| 100.0 * 0.8f64.powf((ts - now) as f64 / WEEK));
        let r = PeakTrend::default().recommend(&falling, &ctx(now)).unwrap();
        assert_eq!(r.evidence["growth_per_week"], 0.0);
        assert!(r.evidence["growth_estimate_per_week"].as_f64().unwrap() < -0.19);
        assert_eq!(r.rps, falling.max().unwrap() * 1.25);
        let soaring = series(28, now, |ts| 100.0 * 4f64.powf((ts - now) as f64 / WEEK));
        let p = PeakTrend {
            max_growth: 0.5,
            ..PeakTrend::default()
        };
        let r = p.recommend(&soaring, &ctx(now)).unwrap();
        assert_eq!(r.evidence["growth_per_week"], 0.5);
    }

    #[test]
    fn short_history_assumes_no_growth_and_empty_is_refused() {
        let now = 1_700_000_000;
        let s = series(2, now, |_| 40.0);
        let r = PeakTrend::default().recommend(&s, &ctx(now)).unwrap();
        assert_eq!(r.rps, 50.0);
        assert!(r.evidence.contains_key("growth_note"));
        let err = PeakTrend::default()
            .recommend(&Series::default(), &ctx(now))
            .unwrap_err();
        assert_eq!(err.reason, "no history in the last 28d");
    }
}
