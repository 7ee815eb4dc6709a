//! Prints the backtest table of `POLICIES.md`: every series in `tests/data/traffic/`, and each
//! one times a +5 %/week ramp, against historical-peak (buffer 0.25), forecast, peak-trend
//! and auto (defaults). Window / horizon: 28d / 7d, or 7d / 1d for a series shorter than
//! 35 days (elb holds 14 days of data). Origins every day (stride 1d). A second
//! table counts auto's choices, a third checks auto against the targets of `POLICIES.md`.
//!
//! Run: `cargo run --release -p policies --example backtest_table [DIR]`; `DIR` (default
//! `tests/data/traffic/`) holds `timestamp,value` CSV files, so the same table can be made for
//! your own series.

use policies::backtest::{BacktestConfig, BacktestReport, backtest};
use policies::{Context, Policy, Recommendation, Refusal, Series, from_spec};
use std::collections::BTreeMap;
use std::path::PathBuf;

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/traffic"),
        PathBuf::from,
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    files.sort();
    let mut rows = Vec::new();
    for path in &files {
        let name = path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let parsed = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| Series::from_csv_str(&text).map_err(|e| e.to_string()));
        let series = match parsed {
            Ok(series) => series,
            Err(e) => {
                eprintln!("skipped {}: {e}", path.display());
                continue;
            }
        };
        let start = series.start().unwrap_or_default();
        let ramp = series.map_values(|ts, v| v * (1.0 + 0.05 * (ts - start) as f64 / WEEK as f64));
        rows.push((name.clone(), series));
        rows.push((format!("{name} x ramp +5%/week"), ramp));
    }
    println!(
        "| series | window / horizon | policy | origins | refused | exceedance rate | peak headroom | median headroom |"
    );
    println!("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |");
    let mut choices = Vec::new();
    let mut verdicts = Vec::new();
    for (name, series) in &rows {
        let span = series.end().unwrap_or_default() - series.start().unwrap_or_default();
        let (window, horizon) = if span < 35 * DAY {
            ("7d", "1d")
        } else {
            ("28d", "7d")
        };
        let cfg = BacktestConfig {
            window_secs: policies::duration::parse(window)?.as_secs() as i64,
            horizon_secs: policies::duration::parse(horizon)?.as_secs() as i64,
            stride_secs: DAY,
        };
        let specs = [
            (
                "historical-peak",
                serde_json::json!({ "window": window, "buffer": 0.25 }),
            ),
            (
                "forecast",
                serde_json::json!({ "window": window, "horizon": horizon }),
            ),
            (
                "peak-trend",
                serde_json::json!({ "window": window, "horizon": horizon }),
            ),
            (
                "auto",
                serde_json::json!({ "window": window, "horizon": horizon }),
            ),
        ];
        let mut hp: Option<(Box<dyn Policy>, BacktestReport)> = None;
        for (kind, params) in specs {
            let policy: Box<dyn Policy> = from_spec(kind, params.as_object().expect("object"))?;
            let r = backtest(policy.as_ref(), series, &cfg);
            println!(
                "| {name} | {window} / {horizon} | {kind} | {} | {} | {:.4} | {:.3} | {:.2} |",
                r.origins, r.refused, r.exceedance_rate, r.peak_headroom, r.median_headroom
            );
            if kind == "auto" {
                choices.push((name.clone(), tally(policy.as_ref(), series, &cfg)));
                if let Some((hp_policy, hp)) = &hp {
                    let ramp = name.contains(" x ramp");
                    let catch = if ramp && hp.exceedance_rate > 0.0 {
                        match catch_one(hp_policy.as_ref(), series, &cfg) {
                            Some((x, day)) => format!("{x:.2}x (day {day})"),
                            None => "-".to_string(),
                        }
                    } else {
                        "-".to_string()
                    };
                    verdicts.push((name.clone(), verdict(ramp, hp, &r), catch));
                }
            }
            if kind == "historical-peak" {
                hp = Some((policy, r));
            }
        }
    }
    println!();
    println!("| series | auto's choices over the origins |");
    println!("| --- | --- |");
    for (name, tally) in choices {
        let cells: Vec<String> = tally.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!("| {name} | {} |", cells.join(", "));
    }
    println!();
    println!(
        "| series | auto / historical-peak: exceedance rates, peak headroom ratio | targets | limit that catches one of historical-peak's exceeded points (ramps) |"
    );
    println!("| --- | --- | --- | --- |");
    for (name, verdict, catch) in verdicts {
        println!("| {name} | {verdict} | {catch} |");
    }
    Ok(())
}

/// auto against historical-peak (buffer 0.25) by the targets of `POLICIES.md`: never more
/// exceedances; flat series at most 1.10x the peak headroom; ramps at most 1.5x, and strictly
/// fewer exceedances where historical-peak exceeds at all.
fn verdict(ramp: bool, hp: &BacktestReport, auto: &BacktestReport) -> String {
    let over = |r: &BacktestReport| r.exceedance_rate;
    let headroom = auto.peak_headroom / hp.peak_headroom;
    if hp.scored == 0 || auto.scored == 0 {
        return "- | no origin scored".to_string();
    }
    let mut missed = Vec::new();
    if over(auto) > over(hp) {
        missed.push("more exceedances");
    }
    if !ramp && headroom > 1.10 {
        missed.push("headroom > 1.10x");
    }
    if ramp && headroom > 1.5 {
        missed.push("headroom > 1.5x");
    }
    if ramp && over(hp) > 0.0 && over(auto) >= over(hp) {
        missed.push("not fewer exceedances");
    }
    let result = if missed.is_empty() {
        "met".to_string()
    } else {
        format!("**missed**: {}", missed.join(", "))
    };
    format!(
        "{:.5} / {:.5}, {headroom:.3}x | {result}",
        over(auto),
        over(hp)
    )
}

/// The least multiple of `hp`'s limit, at any origin, that is needed to hold one more of the
/// points it let through, and that origin's day since the series' start: how much larger a
/// limit must be, at the best-placed origin, for a policy to exceed strictly less.
fn catch_one(hp: &dyn Policy, series: &Series, cfg: &BacktestConfig) -> Option<(f64, i64)> {
    let start = series.start()?;
    let mut best: Option<(f64, i64)> = None;
    for (t, rec) in recommendations(hp, series, cfg) {
        let Ok(rec) = rec else { continue };
        let least_over = series
            .range(t, t + cfg.horizon_secs)
            .iter()
            .map(|p| p.value / rec.rps)
            .filter(|&x| x > 1.0)
            .min_by(f64::total_cmp);
        if let Some(x) = least_over
            && best.is_none_or(|(b, _)| x < b)
        {
            best = Some((x, (t - start) / DAY));
        }
    }
    best
}

/// How often auto chose each candidate at the backtest's origins.
fn tally(policy: &dyn Policy, series: &Series, cfg: &BacktestConfig) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (_, rec) in recommendations(policy, series, cfg) {
        let key = match rec {
            Ok(rec) => rec.evidence["chosen"].as_str().unwrap_or("?").to_string(),
            Err(_) => "refused".to_string(),
        };
        *out.entry(key).or_default() += 1;
    }
    out
}

/// What `policy` recommends at each of the backtest's origins, with the origin.
fn recommendations(
    policy: &dyn Policy,
    series: &Series,
    cfg: &BacktestConfig,
) -> Vec<(i64, Result<Recommendation, Refusal>)> {
    let mut out = Vec::new();
    let (Some(start), Some(end)) = (series.start(), series.end()) else {
        return out;
    };
    let mut t = start + cfg.window_secs;
    while t + cfg.horizon_secs <= end {
        let history = series.window(t - cfg.window_secs, t);
        let ctx = Context {
            now: t,
            previous_limit: None,
        };
        out.push((t, policy.recommend(&history, &ctx)));
        t += cfg.stride_secs;
    }
    out
}
