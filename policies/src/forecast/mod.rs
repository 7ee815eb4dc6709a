//! `forecast`: predicts the next `horizon` from daily and weekly seasonality and trend,
//! and recommends the upper `level` bound of the predicted peak plus a buffer.
//!
//! Parameters: `window` (history to fit, default `28d`, at least `3d`), `horizon`
//! (span the limit must hold for, default `7d`), `level` (confidence of the upper bound,
//! default `0.99`), `buffer` (fraction added on top, default `0.1`).
//!
//! # Model
//! A robust decomposition of `z = ln(rate + c)` (`c` = 5 % of the median, so zeros are
//! allowed), chosen over a general-purpose library (`augurs`, Prophet-style fits) because
//! it is small, deterministic, copes with gaps by construction and fits 28 days of 5-minute
//! data in well under a millisecond:
//!
//! - **Log scale.** Request traffic is multiplicative: the daily swing and the noise
//!   grow with the level, and growth compounds; in log space both become additive and a
//!   linear trend is a constant growth rate per week.
//! - **Trend.** The history is cut into days ending at `now`; a day with under half its
//!   samples is skipped (gaps). Each day's level is the median of its deseasonalised `z`;
//!   the slope is the Theil–Sen median of pairwise slopes between days a multiple of 7
//!   days apart (seasonal differences, so the weekly pattern cancels; any pair in the daily
//!   fallback). Medians make holidays, outages and bursts count for little.
//! - **Season.** The median detrended `z` per 30-minute slot of the week (slot of the day
//!   for thin slots, or throughout in the daily fallback). Trend and season are refitted
//!   twice, each with the other's last estimate.
//! - **Peak bound.** What a limit has to cover is the *peak* of the horizon, not a typical
//!   point. The model records, for every day of history, how far the day's actual peak
//!   rose above the fitted day's peak (in `z`), fits a Gumbel distribution to those daily
//!   excesses (method of moments), and takes the `level` quantile of the largest excess
//!   among the horizon's days (a Gumbel shifted by `beta * ln(days)`). The bound is the
//!   fitted peak of the horizon plus that excess, back in rate units.
//! - **Tamed tail.** That excess is capped at the largest daily excess seen in the window
//!   (`tail_capped: true` in the evidence when the cap acts): on bursty series a 99 % Gumbel
//!   quantile in log space extrapolates to many times any burst ever seen (147x the horizon's
//!   peak on tweet counts), a limit that protects nothing. With the cap, the bound is at most
//!   the trend-projected fitted peak times the largest burst ratio observed.
//!
//! # Seasonality and short history
//! With 14 or more usable days the profile is weekly; with 3 to 13 it falls back to a
//! daily profile (and any-lag Theil–Sen for the trend); with fewer than 3 the policy
//! refuses and the caller keeps the old limit.

mod model;
#[cfg(test)]
mod tests;

pub use model::{Model, PeakForecast, Seasonality};

use crate::duration;
use crate::params::{Params, SpecError};
use crate::policy::FromSpec;
use crate::policy::{Context, Policy, Recommendation, Refusal};
use crate::series::Series;
use std::time::Duration;

/// Seasonal-trend forecast of the horizon's peak; see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct Forecast {
    /// History to fit.
    pub window: Duration,
    /// How far ahead the limit must hold.
    pub horizon: Duration,
    /// Confidence of the upper bound of the predicted peak, in (0, 1).
    pub level: f64,
    /// Fraction added on top of the upper bound.
    pub buffer: f64,
}

impl Default for Forecast {
    fn default() -> Self {
        Forecast {
            window: Duration::from_secs(28 * 86_400),
            horizon: Duration::from_secs(7 * 86_400),
            level: 0.99,
            buffer: 0.1,
        }
    }
}

impl FromSpec for Forecast {
    const KIND: &'static str = "forecast";

    fn from_params(params: &Params<'_>) -> Result<Self, SpecError> {
        let window = params.duration("window", "28d")?;
        if window.as_secs() < model::MIN_DAYS_DAILY as u64 * 86_400 {
            return Err(SpecError::new(
                "window",
                format!("must be at least {}d", model::MIN_DAYS_DAILY),
            ));
        }
        let level = params.f64_in("level", 0.99, 0.0, 1.0)?;
        if level <= 0.0 || level >= 1.0 {
            return Err(SpecError::new("level", "must be strictly between 0 and 1"));
        }
        Ok(Forecast {
            window,
            horizon: params.duration("horizon", "7d")?,
            level,
            buffer: params.f64_in("buffer", 0.1, 0.0, 100.0)?,
        })
    }
}

/// The shortest window forecast accepts (`3d`).
pub fn min_window() -> Duration {
    Duration::from_secs(model::MIN_DAYS_DAILY as u64 * 86_400)
}

impl Forecast {
    /// Fits the model to the window of `history` before `ctx.now`.
    pub fn fit(&self, history: &Series, ctx: &Context) -> Result<Model, Refusal> {
        let recent = history.window(ctx.now.saturating_sub(duration::secs(self.window)), ctx.now);
        Model::fit(&recent, ctx.now)
    }
}

impl Policy for Forecast {
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
        let model = self.fit(history, ctx)?;
        let end = ctx.now.saturating_add(duration::secs(self.horizon));
        let peak = model.peak(ctx.now, end, history.step_secs, self.level);
        let rps = peak.upper * (1.0 + self.buffer);
        if !rps.is_finite() {
            return Err(Refusal::new("forecast produced a non-finite limit"));
        }
        let name = format!("log-seasonal-trend/{}", model.seasonality.name());
        Ok(Recommendation::new(Self::KIND, rps)
            .with("model", name)
            .with("window", duration::format(self.window))
            .with("horizon", duration::format(self.horizon))
            .with("level", self.level)
            .with("buffer", self.buffer)
            .with("fit_mape", model.fit_mape)
            .with("fit_rmse_log", model.fit_rmse_log)
            .with("growth_per_week", model.growth_per_week())
            // The actual peak's most likely value and its interval, then the limit drawn
            // from them (`proposed_rps` = upper × (1 + buffer), before guards); the fitted
            // path's own peak, without the daily bursts, is shown apart so that it is not
            // read as the peak.
            .with("predicted_peak", peak.median)
            .with("fitted_peak", peak.peak)
            .with(
                "interval",
                serde_json::json!({ "lower": peak.lower, "upper": peak.upper }),
            )
            .with("proposed_rps", rps)
            .with("limit_basis", "interval upper × (1 + buffer)")
            .with("tail_capped", peak.tail_capped)
            .with("days", model.days)
            .with("points", model.points))
    }
}
