//! Policies on the real traffic series in `tests/data/traffic/` (copied from NAB).

use policies::backtest::{BacktestConfig, BacktestReport, backtest};
use policies::{Context, Policy, Series, from_spec};
use std::path::PathBuf;

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;
const SERIES: [&str; 4] = [
    "Twitter_volume_AAPL",
    "Twitter_volume_FB",
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
    for (name, step) in SERIES.iter().zip([300, 300, 300, 1_800]) {
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

/// A real series under a +5 %/week ramp: historical-peak's 28-day peak lags the growth and
/// is exceeded; forecast extrapolates it and is not.
#[test]
fn growth_exceeds_historical_peak_but_not_forecast() {
    let name = "Twitter_volume_AAPL";
    let s = load(name);
    let start = s.start().unwrap();
    let ramp = s.map_values(|ts, v| v * (1.0 + 0.05 * (ts - start) as f64 / WEEK as f64));
    let (hp, fc) = both(name, &ramp, WEEK);
    assert!(hp.origins >= 3 && hp.refused == 0 && fc.refused == 0);
    assert!(hp.exceedance_rate > 0.0, "historical-peak {hp:?}");
    assert_eq!(fc.exceedance_rate, 0.0, "forecast {fc:?}");
}
