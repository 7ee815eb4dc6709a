//! The forecast model: a robust trend plus seasonal-profile decomposition of
//! `ln(rate + c)`, and the distribution of daily peaks around it.

use statrs::distribution::{ContinuousCDF, Gumbel};

use crate::policy::Refusal;
use crate::series::{Series, quantile_in_place};
use crate::trend::theil_sen_slope;

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;
/// Width of a seasonal bin: coarser than the usual 1–5 min scrape step, so that each bin
/// of a 4-week weekly profile holds enough samples for a stable median.
const MIN_BIN_SECS: i64 = 1_800;
/// A day counts when at least this fraction of its samples is present.
const MIN_DAY_COVERAGE: f64 = 0.5;
/// Fewest usable days for a daily profile, and for a weekly one.
pub(crate) const MIN_DAYS_DAILY: usize = 3;
pub(crate) const MIN_DAYS_WEEKLY: usize = 14;
/// Refits of trend and profile (each uses the other's last estimate).
const ITERATIONS: usize = 2;

/// Which seasonal profile the model uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seasonality {
    /// One profile per slot of the week (>= 14 usable days of history).
    Weekly,
    /// One profile per slot of the day (3 to 13 usable days).
    Daily,
}

impl Seasonality {
    /// `weekly` or `daily`.
    pub fn name(self) -> &'static str {
        match self {
            Seasonality::Weekly => "weekly",
            Seasonality::Daily => "daily",
        }
    }

    fn period(self) -> i64 {
        match self {
            Seasonality::Weekly => WEEK,
            Seasonality::Daily => DAY,
        }
    }
}

/// A fitted model: `ln(rate + offset) = level + slope * (ts - now) + profile[bin(ts)] + noise`.
#[derive(Debug, Clone)]
pub struct Model {
    /// The seasonal profile in use.
    pub seasonality: Seasonality,
    /// Number of usable days the fit used.
    pub days: usize,
    /// Number of points the fit used.
    pub points: usize,
    /// Mean absolute percentage error of the fitted values (points with rate > 0).
    pub fit_mape: f64,
    /// Root mean square error of the fit in log space (about a relative error).
    pub fit_rmse_log: f64,
    offset: f64,
    now: i64,
    level: f64,
    slope: f64,
    bin_secs: i64,
    profile: Vec<f64>,
    /// Per usable day: max of `ln(rate + offset)` minus the max of the fit that day.
    day_excess: Vec<f64>,
}

/// The model's view of the peak of a future span.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeakForecast {
    /// Peak of the fitted path (trend and season, no noise).
    pub peak: f64,
    /// The most likely actual peak: the fitted path's peak plus the median daily excess
    /// (within `[lower, upper]`).
    pub median: f64,
    /// Lower bound of the actual peak at the level asked for.
    pub lower: f64,
    /// Upper bound of the actual peak at the level asked for, at most the fitted peak times
    /// the largest daily excess seen in the history.
    pub upper: f64,
    /// True when the Gumbel quantile was above the largest excess seen and was capped to it.
    pub tail_capped: bool,
}

impl Model {
    /// Fits the points of `history` in `[now - window, now)` (the caller windows it).
    pub fn fit(history: &Series, now: i64) -> Result<Model, Refusal> {
        let step = history.step_secs.max(1);
        let per_day = (DAY / step).max(1) as f64;
        let day_of = |ts: i64| ((now - 1 - ts).div_euclid(DAY)) as usize;
        let points: Vec<_> = history.points.iter().filter(|p| p.ts < now).collect();
        let oldest_day = points.first().map_or(0, |p| day_of(p.ts) + 1);
        let mut count = vec![0usize; oldest_day];
        for p in &points {
            count[day_of(p.ts)] += 1;
        }
        let usable: Vec<bool> = count
            .iter()
            .map(|&c| c as f64 >= MIN_DAY_COVERAGE * per_day)
            .collect();
        let days = usable.iter().filter(|&&u| u).count();
        let seasonality = if days >= MIN_DAYS_WEEKLY {
            Seasonality::Weekly
        } else if days >= MIN_DAYS_DAILY {
            Seasonality::Daily
        } else {
            return Err(Refusal::new(format!(
                "history has {days} usable days (days with at least {:.0}% of samples); \
                 forecast needs {MIN_DAYS_DAILY} for a daily profile and {MIN_DAYS_WEEKLY} for a weekly one",
                MIN_DAY_COVERAGE * 100.0
            )));
        };
        let pts: Vec<(usize, f64, f64)> = points
            .iter()
            .filter(|p| usable[day_of(p.ts)])
            .map(|p| (day_of(p.ts), (p.ts - now) as f64, p.value))
            .collect();
        let mut values: Vec<f64> = pts.iter().map(|p| p.2).collect();
        let median = quantile_in_place(&mut values, 0.5).unwrap_or(0.0);
        let max = values.iter().copied().max_by(f64::total_cmp).unwrap_or(0.0);
        let offset = if median > 0.0 {
            0.05 * median
        } else if max > 0.0 {
            0.05 * max
        } else {
            1.0
        };

        let bin_secs = step.max(MIN_BIN_SECS);
        let period = seasonality.period();
        let bins = ((period + bin_secs - 1) / bin_secs) as usize;
        let mut model = Model {
            seasonality,
            days,
            points: pts.len(),
            fit_mape: 0.0,
            fit_rmse_log: 0.0,
            offset,
            now,
            level: 0.0,
            slope: 0.0,
            bin_secs,
            profile: vec![0.0; bins],
            day_excess: Vec::new(),
        };
        let z: Vec<f64> = pts.iter().map(|p| (p.2 + offset).ln()).collect();
        let bin: Vec<usize> = pts.iter().map(|p| model.bin(p.1 as i64 + now)).collect();
        let daily_bin: Vec<usize> = pts
            .iter()
            .map(|p| ((p.1 as i64 + now).rem_euclid(DAY) / bin_secs) as usize)
            .collect();
        let mut resid = vec![0.0; z.len()];
        for _ in 0..ITERATIONS {
            // Trend on daily medians of the deseasonalised log rate.
            let mut by_day: Vec<Vec<f64>> = vec![Vec::new(); oldest_day];
            for (i, p) in pts.iter().enumerate() {
                by_day[p.0].push(z[i] - model.profile[bin[i]]);
            }
            let daily: Vec<(f64, f64)> = by_day
                .iter_mut()
                .enumerate()
                .filter_map(|(k, v)| {
                    let t = -((k as f64) + 0.5) * DAY as f64;
                    quantile_in_place(v, 0.5).map(|m| (t, m))
                })
                .collect();
            let lag = if seasonality == Seasonality::Weekly {
                7
            } else {
                1
            };
            model.slope = theil_sen_slope(&daily, lag as f64 * DAY as f64);
            let mut offsets: Vec<f64> = daily.iter().map(|(t, d)| d - model.slope * t).collect();
            model.level = quantile_in_place(&mut offsets, 0.5).unwrap_or(0.0);
            // Seasonal profile: median detrended value per bin, daily fallback for thin bins.
            for (i, p) in pts.iter().enumerate() {
                resid[i] = z[i] - model.level - model.slope * p.1;
            }
            model.profile = profile(&resid, &bin, &daily_bin, bins, bin_secs);
            let mean = model.profile.iter().sum::<f64>() / bins as f64;
            model.profile.iter_mut().for_each(|s| *s -= mean);
            model.level += mean;
        }

        // Fit quality and the peak excess of each day.
        let (mut sq, mut ape, mut n_ape) = (0.0, 0.0, 0usize);
        let mut day_peaks = vec![(f64::NEG_INFINITY, f64::NEG_INFINITY); oldest_day];
        for (i, p) in pts.iter().enumerate() {
            let f = model.log_at(p.1, bin[i]);
            sq += (z[i] - f).powi(2);
            if p.2 > 0.0 {
                ape += ((f.exp() - offset) - p.2).abs() / p.2;
                n_ape += 1;
            }
            let peaks = &mut day_peaks[p.0];
            peaks.0 = peaks.0.max(z[i]);
            peaks.1 = peaks.1.max(f);
        }
        model.fit_rmse_log = (sq / z.len().max(1) as f64).sqrt();
        model.fit_mape = ape / n_ape.max(1) as f64;
        model.day_excess = day_peaks
            .iter()
            .filter(|(a, f)| a.is_finite() && f.is_finite())
            .map(|(a, f)| a - f)
            .collect();
        Ok(model)
    }

    fn bin(&self, ts: i64) -> usize {
        (ts.rem_euclid(self.seasonality.period()) / self.bin_secs) as usize
    }

    fn log_at(&self, t_rel: f64, bin: usize) -> f64 {
        self.level + self.slope * t_rel + self.profile[bin]
    }

    /// The fitted (noise-free) rate at `ts`, in the series' units.
    pub fn predict(&self, ts: i64) -> f64 {
        let f = self.log_at((ts - self.now) as f64, self.bin(ts));
        (f.exp() - self.offset).max(0.0)
    }

    /// Fitted growth per week as a fraction (0.05 = +5 % a week).
    pub fn growth_per_week(&self) -> f64 {
        (self.slope * WEEK as f64).exp_m1()
    }

    /// The peak of `[start, end)` sampled every `step` seconds: the fitted path's peak and
    /// the `level` bounds of the actual peak (see the module docs of `forecast`).
    pub fn peak(&self, start: i64, end: i64, step: i64, level: f64) -> PeakForecast {
        let mut peak_log = f64::NEG_INFINITY;
        let mut ts = start;
        while ts < end || ts == start {
            peak_log = peak_log.max(self.log_at((ts - self.now) as f64, self.bin(ts)));
            ts += step.max(1);
        }
        // Gumbel fit to the daily peak excess from its median and 90th percentile (robust:
        // holidays and outages in the lower tail do not widen it); the peak of `days`
        // independent days is Gumbel with its location shifted by beta * ln(days).
        let mut excess = self.day_excess.clone();
        let q50 = quantile_in_place(&mut excess, 0.5).unwrap_or(0.0);
        let q90 = quantile_in_place(&mut excess, 0.9).unwrap_or(0.0);
        // The standard Gumbel's quantile; the fit is `mu + beta * q` (a flat series fits
        // `beta = 0`, a scale the distribution itself refuses).
        let standard = Gumbel::new(0.0, 1.0).expect("the standard Gumbel is valid");
        let gumbel = |p: f64| standard.inverse_cdf(p);
        let beta = ((q90 - q50) / (gumbel(0.9) - gumbel(0.5))).max(0.0);
        let days = ((end - start) as f64 / DAY as f64).max(1.0);
        let mu = q50 - beta * gumbel(0.5) + beta * days.ln();
        // The tail is capped at the largest daily excess seen in the window: the bound never
        // predicts a burst larger, relative to the fitted level, than any burst observed.
        let seen = excess.last().copied().unwrap_or(0.0);
        let upper = mu + beta * gumbel(level);
        let lower = (mu + beta * gumbel(1.0 - level)).min(seen);
        let to_rate = |log: f64| (log.exp() - self.offset).max(0.0);
        let middle = (mu + beta * gumbel(0.5)).min(upper.min(seen)).max(lower);
        PeakForecast {
            peak: to_rate(peak_log),
            median: to_rate(peak_log + middle),
            lower: to_rate(peak_log + lower),
            upper: to_rate(peak_log + upper.min(seen)),
            tail_capped: upper > seen,
        }
    }
}

/// Median residual per bin; bins with fewer than 2 samples take the median of their
/// slot of the day instead (0 if that is empty too).
fn profile(
    resid: &[f64],
    bin: &[usize],
    daily_bin: &[usize],
    bins: usize,
    bin_secs: i64,
) -> Vec<f64> {
    let day_bins = ((DAY + bin_secs - 1) / bin_secs) as usize;
    let mut by_bin: Vec<Vec<f64>> = vec![Vec::new(); bins];
    let mut by_day_bin: Vec<Vec<f64>> = vec![Vec::new(); day_bins];
    for i in 0..resid.len() {
        by_bin[bin[i]].push(resid[i]);
        by_day_bin[daily_bin[i]].push(resid[i]);
    }
    let daily: Vec<f64> = by_day_bin
        .iter_mut()
        .map(|v| quantile_in_place(v, 0.5).unwrap_or(0.0))
        .collect();
    by_bin
        .iter_mut()
        .enumerate()
        .map(|(b, v)| {
            if v.len() >= 2 {
                quantile_in_place(v, 0.5).unwrap_or(0.0)
            } else {
                daily[(b as i64 * bin_secs % DAY / bin_secs) as usize % day_bins]
            }
        })
        .collect()
}
