//! Unit tests of the forecast policy on synthetic series with known structure.

use super::*;
use crate::series::Point;
use std::f64::consts::TAU;

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;
const STEP: i64 = 300;
/// A Monday 00:00 UTC, so the synthetic week starts on a weekday boundary.
const T0: i64 = 1_700_438_400;

/// Seeded xorshift + Box–Muller: deterministic noise without a dependency.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(1e-12), self.uniform());
        (-2.0 * u.ln()).sqrt() * (TAU * v).cos()
    }
}

const BASE: f64 = 1_000.0;
const SLOPE_PER_DAY: f64 = 10.0;
const DAILY_AMP: f64 = 0.3;
const WEEKLY_AMP: f64 = 0.15;

/// Noise-free truth: a linear trend times daily and weekly sine factors (seasonality
/// proportional to the level, as in request traffic and in the model).
fn truth(ts: i64) -> f64 {
    let t = (ts - T0) as f64;
    (BASE + SLOPE_PER_DAY * t / DAY as f64)
        * (1.0 + DAILY_AMP * (TAU * t / DAY as f64).sin())
        * (1.0 + WEEKLY_AMP * (TAU * t / WEEK as f64).sin())
}

/// `days` of 5-minute samples of `truth` with 2 % noise, dropping a `drop` fraction.
fn synthetic(days: i64, drop: f64, seed: u64) -> Series {
    let mut rng = Rng(seed);
    let mut points = Vec::new();
    for ts in (0..days * DAY / STEP).map(|i| T0 + i * STEP) {
        let noise = 1.0 + 0.02 * rng.normal();
        if rng.uniform() >= drop {
            points.push(Point {
                ts,
                value: truth(ts) * noise,
            });
        }
    }
    Series::new(STEP, points)
}

fn ctx(now: i64) -> Context {
    Context {
        now,
        previous_limit: None,
    }
}

fn mean(f: impl Fn(i64) -> f64, from: i64, to: i64) -> f64 {
    let n = (to - from) / STEP;
    (0..n).map(|i| f(from + i * STEP)).sum::<f64>() / n as f64
}

fn half_range(values: impl Iterator<Item = f64> + Clone) -> f64 {
    let max = values.clone().fold(f64::MIN, f64::max);
    let min = values.fold(f64::MAX, f64::min);
    (max - min) / 2.0
}

/// Checks the fitted model against the truth; tolerances: slope 20 %, daily amplitude
/// 10 %, weekly amplitude 25 %, any predicted point 6 %.
fn assert_recovers_structure(series: &Series) {
    let now = T0 + 35 * DAY;
    let model = Forecast::default().fit(series, &ctx(now)).unwrap();
    assert_eq!(model.seasonality, Seasonality::Weekly);

    // Trend: mean of next week's prediction minus mean of last week's fit, per day.
    let slope =
        |f: &dyn Fn(i64) -> f64| (mean(f, now, now + WEEK) - mean(f, now - WEEK, now)) / 7.0;
    let (fitted, expected) = (slope(&|t| model.predict(t)), slope(&truth));
    assert!((expected / SLOPE_PER_DAY - 1.0).abs() < 0.01);
    assert!(
        (fitted / expected - 1.0).abs() < 0.2,
        "slope {fitted} vs {expected}"
    );

    // Daily amplitude on the first predicted day.
    let day = (0..DAY / STEP).map(|i| now + i * STEP);
    let fitted = half_range(day.clone().map(|t| model.predict(t)));
    let expected = half_range(day.map(truth));
    assert!(
        (fitted / expected - 1.0).abs() < 0.1,
        "daily {fitted} vs {expected}"
    );

    // Weekly amplitude: spread of the daily means over the predicted week.
    let daily_means = |f: &dyn Fn(i64) -> f64| {
        (0..7)
            .map(|d| mean(f, now + d * DAY, now + (d + 1) * DAY))
            .collect::<Vec<_>>()
    };
    let fitted = half_range(daily_means(&|t| model.predict(t)).into_iter());
    let expected = half_range(daily_means(&truth).into_iter());
    assert!(
        (fitted / expected - 1.0).abs() < 0.25,
        "weekly {fitted} vs {expected}"
    );

    for i in 0..WEEK / STEP {
        let t = now + i * STEP;
        let err = model.predict(t) / truth(t) - 1.0;
        assert!(
            err.abs() < 0.06,
            "at {t}: predicted {} truth {}",
            model.predict(t),
            truth(t)
        );
    }
}

#[test]
fn recovers_trend_and_seasonality() {
    assert_recovers_structure(&synthetic(35, 0.0, 7));
}

#[test]
fn recovers_structure_with_20_percent_of_points_missing() {
    let series = synthetic(35, 0.2, 11);
    assert!(series.coverage(T0, T0 + 35 * DAY) < 0.85);
    assert_recovers_structure(&series);
}

#[test]
fn a_missing_day_is_skipped() {
    let s = synthetic(35, 0.0, 3);
    let gap = (T0 + 20 * DAY, T0 + 21 * DAY + 3_600);
    let points = s
        .points
        .into_iter()
        .filter(|p| p.ts < gap.0 || p.ts >= gap.1)
        .collect();
    assert_recovers_structure(&Series::new(STEP, points));
}

#[test]
fn limit_covers_the_next_week_with_evidence() {
    let series = synthetic(42, 0.0, 5);
    let now = T0 + 35 * DAY;
    let rec = Forecast::default().recommend(&series, &ctx(now)).unwrap();
    let actual_peak = series.window(now, now + WEEK).max().unwrap();
    assert!(rec.rps > actual_peak, "{} <= {actual_peak}", rec.rps);
    assert!(rec.rps < 1.5 * actual_peak, "{} too generous", rec.rps);
    let interval = &rec.evidence["interval"];
    let (lower, upper) = (
        interval["lower"].as_f64().unwrap(),
        interval["upper"].as_f64().unwrap(),
    );
    let predicted = rec.evidence["predicted_peak"].as_f64().unwrap();
    // The evidence reconciles (issue 40): the predicted peak lies in its interval and the
    // limit is the interval's upper bound plus the buffer.
    assert!(
        lower <= predicted && predicted <= upper,
        "{}",
        rec.evidence["interval"]
    );
    assert!(rec.evidence["fitted_peak"].as_f64().unwrap() <= upper);
    assert!((rec.evidence["proposed_rps"].as_f64().unwrap() - rec.rps).abs() < 1e-9);
    assert!((rec.rps - upper * 1.1).abs() < 1e-6 * rec.rps);
    assert_eq!(rec.evidence["model"], "log-seasonal-trend/weekly");
    assert!(rec.evidence["fit_mape"].as_f64().unwrap() < 0.05);
    assert_eq!(rec.evidence["days"], 28);
}

#[test]
fn recovers_compound_growth() {
    // +5 % a week, compounded, on a daily cycle.
    let points = (0..35 * DAY / STEP)
        .map(|i| {
            let ts = T0 + i * STEP;
            let t = (ts - T0) as f64;
            let season = 1.0 + 0.3 * (TAU * t / DAY as f64).sin();
            Point {
                ts,
                value: 500.0 * 1.05f64.powf(t / WEEK as f64) * season,
            }
        })
        .collect();
    let model = Forecast::default()
        .fit(&Series::new(STEP, points), &ctx(T0 + 35 * DAY))
        .unwrap();
    assert!(
        (model.growth_per_week() - 0.05).abs() < 0.005,
        "{}",
        model.growth_per_week()
    );
}

#[test]
fn short_history_falls_back_to_daily_then_refuses() {
    let now = T0 + 35 * DAY;
    let series = synthetic(35, 0.0, 1);
    let five_days = series.window(now - 5 * DAY, now);
    let rec = Forecast::default()
        .recommend(&five_days, &ctx(now))
        .unwrap();
    assert_eq!(rec.evidence["model"], "log-seasonal-trend/daily");
    assert!(rec.rps.is_finite() && rec.rps > 0.0);

    let two_days = series.window(now - 2 * DAY, now);
    let err = Forecast::default()
        .recommend(&two_days, &ctx(now))
        .unwrap_err();
    assert!(err.reason.contains("2 usable days"), "{}", err.reason);
    assert!(err.reason.contains("needs 3"), "{}", err.reason);

    let err = Forecast::default()
        .recommend(&Series::default(), &ctx(now))
        .unwrap_err();
    assert!(err.reason.contains("0 usable days"), "{}", err.reason);
}

#[test]
fn sparse_days_do_not_count() {
    // 20 days, but only one sample in three: every day is below the 50 % coverage bar.
    let now = T0 + 20 * DAY;
    let s = synthetic(20, 0.0, 2);
    let sparse = Series::new(STEP, s.points.into_iter().step_by(3).collect());
    assert!(Forecast::default().recommend(&sparse, &ctx(now)).is_err());
}

#[test]
fn zeros_and_constant_series_are_handled() {
    let points = (0..21 * DAY / STEP)
        .map(|i| Point {
            ts: T0 + i * STEP,
            value: 0.0,
        })
        .collect();
    let rec = Forecast::default()
        .recommend(&Series::new(STEP, points), &ctx(T0 + 21 * DAY))
        .unwrap();
    assert!(rec.rps.is_finite() && rec.rps >= 0.0);

    let points = (0..21 * DAY / STEP)
        .map(|i| Point {
            ts: T0 + i * STEP,
            value: 50.0,
        })
        .collect();
    let rec = Forecast::default()
        .recommend(&Series::new(STEP, points), &ctx(T0 + 21 * DAY))
        .unwrap();
    assert!((rec.rps - 55.0).abs() < 1e-6, "{}", rec.rps);
}
