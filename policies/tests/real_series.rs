//! Policies on the real traffic series in `tests/data/traffic/` (copied from NAB).

use policies::backtest::{BacktestConfig, BacktestReport, backtest};
use policies::{Context, Policy, Series, from_spec};
use std::path::PathBuf;

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;
const SERIES: [&str; 7] = [
    "Twitter_volume_AAPL",
    "Twitter_volume_FB",
    "Twitter_volume_IBM",
    "Twitter_volume_KO",
    "Twitter_volume_PFE",
    "elb_request_count_8c0756",
    "nyc_taxi",
];

fn load(name: &str) -> Series {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/traffic")
        .join(format!("{name}.csv"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Series::from_csv_str(&text).unwrap()
}

/// Window and horizon per series: elb has only 14 days, so it gets 7 days / 1 day.
fn window_horizon(name: &str) -> (&'static str, &'static str) {
    if name.starts_with("elb") {
        ("7d", "1d")
    } else {
        ("28d", "7d")
    }
}

fn policy(kind: &str, params: serde_json::Value) -> Box<dyn Policy> {
    from_spec(kind, params.as_object().unwrap()).unwrap()
}

fn both(name: &str, series: &Series, stride: i64) -> (BacktestReport, BacktestReport) {
    let (window, horizon) = window_horizon(name);
    let hp = policy(
        "historical-peak",
        serde_json::json!({ "window": window, "buffer": 0.25 }),
    );
    let fc = policy(
        "forecast",
        serde_json::json!({ "window": window, "horizon": horizon }),
    );
    let cfg = BacktestConfig {
        window_secs: hp.window().as_secs() as i64,
        horizon_secs: policies::duration::parse(horizon).unwrap().as_secs() as i64,
        stride_secs: stride,
    };
    (
        backtest(hp.as_ref(), series, &cfg),
        backtest(fc.as_ref(), series, &cfg),
    )
}

#[test]
fn all_series_parse_with_their_documented_step() {
    for (name, step) in SERIES.iter().zip([300, 300, 300, 300, 300, 300, 1_800]) {
        let s = load(name);
        assert_eq!(s.step_secs, step, "{name}");
        assert!(s.len() > 4_000, "{name}");
    }
}

#[test]
fn forecast_on_real_series_is_finite_and_above_the_median() {
    for name in ["nyc_taxi", "Twitter_volume_AAPL"] {
        let s = load(name);
        let now = s.end().unwrap();
        let history = s.window(now - 28 * DAY, now);
        let ctx = Context {
            now,
            previous_limit: None,
        };
        let rec = policy("forecast", serde_json::json!({}))
            .recommend(&history, &ctx)
            .unwrap();
        let median = history.quantile(0.5).unwrap();
        assert!(
            rec.rps.is_finite() && rec.rps > median,
            "{name}: {} vs median {median}",
            rec.rps
        );
        assert_eq!(rec.evidence["model"], "log-seasonal-trend/weekly", "{name}");
    }
}

/// The target: on no series is forecast worse on both figures at once, i.e. a
/// higher exceedance rate *and* a larger mean peak headroom than historical-peak.
#[test]
fn forecast_is_never_worse_on_both_figures() {
    for name in SERIES {
        let s = load(name);
        let (hp, fc) = both(name, &s, DAY);
        assert!(
            hp.scored >= 7 && fc.scored == hp.scored,
            "{name}: {hp:?} {fc:?}"
        );
        let worse_on_both =
            fc.exceedance_rate > hp.exceedance_rate && fc.peak_headroom > hp.peak_headroom;
        assert!(
            !worse_on_both,
            "{name}: forecast {fc:?} vs historical-peak {hp:?}"
        );
    }
}

/// The series times a ramp of +5 % of its first week's level per week, as in POLICIES.md.
fn ramp(series: &Series) -> Series {
    let start = series.start().unwrap();
    series.map_values(|ts, v| v * (1.0 + 0.05 * (ts - start) as f64 / WEEK as f64))
}

/// The backtest of POLICIES.md for `kind` with its defaults at the series' window and
/// horizon (historical-peak with buffer 0.25): origins every day.
fn run(name: &str, series: &Series, kind: &str) -> BacktestReport {
    let (window, horizon) = window_horizon(name);
    let params = match kind {
        "historical-peak" => serde_json::json!({ "window": window, "buffer": 0.25 }),
        _ => serde_json::json!({ "window": window, "horizon": horizon }),
    };
    let p = policy(kind, params);
    let cfg = BacktestConfig {
        window_secs: p.window().as_secs() as i64,
        horizon_secs: policies::duration::parse(horizon).unwrap().as_secs() as i64,
        stride_secs: DAY,
    };
    backtest(p.as_ref(), series, &cfg)
}

/// Real series under a +5 %/week ramp: historical-peak's 28-day peak lags the growth and
/// is exceeded; peak-trend never goes below it (growth is never negative), projects the
/// growth of the busy hours, and is exceeded less for little more headroom.
#[test]
fn growth_exceeds_historical_peak_more_than_peak_trend() {
    for name in ["nyc_taxi", "Twitter_volume_IBM", "Twitter_volume_KO"] {
        let s = ramp(&load(name));
        let hp = run(name, &s, "historical-peak");
        let pt = run(name, &s, "peak-trend");
        let what = format!("{name}: peak-trend {pt:?} vs historical-peak {hp:?}");
        assert!(hp.scored >= 20 && pt.scored == hp.scored, "{what}");
        assert!(pt.exceedance_rate < hp.exceedance_rate, "{what}");
        assert!(pt.peak_headroom <= 1.5 * hp.peak_headroom, "{what}");
    }
}

/// Forecast's tail is tamed: on the bursty tweet series its mean peak headroom stays within
/// 2x historical-peak's (it was 45x on AAPL before the cap).
#[test]
fn forecast_headroom_stays_within_twice_historical_peak() {
    for name in SERIES {
        let s = load(name);
        let hp = run(name, &s, "historical-peak");
        let fc = run(name, &s, "forecast");
        assert!(
            fc.peak_headroom <= 2.0 * hp.peak_headroom,
            "{name}: forecast {fc:?} vs historical-peak {hp:?}"
        );
    }
}

/// The ramps on which historical-peak's misses are bursts that no admissible candidate holds
/// (holding one more point takes 1.12x its limit on AAPL, where only candidates above the
/// 1.5x headroom bound held the window's bursts, 1.72x on FB, 1.48x on elb, with no growth of
/// the busy hours to announce them): auto misses them too. See POLICIES.md.
const RAMPS_MISSED_BY_BURSTS: [&str; 3] = [
    "Twitter_volume_AAPL",
    "Twitter_volume_FB",
    "elb_request_count_8c0756",
];

/// The targets for `auto` against historical-peak (buffer 0.25), on every series and
/// its ramp: never more exceedances; on flat series at most 1.10x the peak headroom; on ramps
/// where historical-peak exceeds, strictly fewer exceedances with at most 1.5x the headroom.
#[test]
fn auto_meets_the_targets_on_every_series_and_its_ramp() {
    for name in SERIES {
        let flat = load(name);
        for (shape, s) in [("flat", flat.clone()), ("ramp", ramp(&flat))] {
            let hp = run(name, &s, "historical-peak");
            let auto = run(name, &s, "auto");
            let what = format!("{name} {shape}: auto {auto:?} vs historical-peak {hp:?}");
            assert!(hp.scored >= 7 && auto.scored == hp.scored, "{what}");
            assert_eq!(auto.refused, 0, "{what}");
            assert!(auto.exceedance_rate <= hp.exceedance_rate, "{what}");
            if shape == "flat" {
                assert!(auto.peak_headroom <= 1.10 * hp.peak_headroom, "{what}");
            } else {
                assert!(auto.peak_headroom <= 1.5 * hp.peak_headroom, "{what}");
                if hp.exceedance_rate > 0.0 && !RAMPS_MISSED_BY_BURSTS.contains(&name) {
                    assert!(auto.exceedance_rate < hp.exceedance_rate, "{what}");
                }
            }
        }
    }
}
