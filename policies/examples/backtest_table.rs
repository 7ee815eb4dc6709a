//! Prints the backtest table of `POLICIES.md`: every series in `tests/data/traffic/`, and each
//! one times a +5 %/week ramp, against historical-peak (buffer 0.25), forecast, peak-trend
//! and auto (defaults). Window / horizon: 28d / 7d, except elb (only 14 days of data):
//! 7d / 1d. Origins every day (stride 1d). A second table counts auto's choices.
//!
//! Run: `cargo run --release -p policies --example backtest_table`

use policies::backtest::{BacktestConfig, backtest};
use policies::{Context, Policy, Series, from_spec};
use std::collections::BTreeMap;
use std::path::PathBuf;

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/traffic");
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
        let series = Series::from_csv_str(&std::fs::read_to_string(path)?)?;
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
    for (name, series) in &rows {
        let (window, horizon) = if name.starts_with("elb") {
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
        for (kind, params) in specs {
            let policy: Box<dyn Policy> = from_spec(kind, params.as_object().expect("object"))?;
            let r = backtest(policy.as_ref(), series, &cfg);
            println!(
                "| {name} | {window} / {horizon} | {kind} | {} | {} | {:.4} | {:.3} | {:.2} |",
                r.origins, r.refused, r.exceedance_rate, r.peak_headroom, r.median_headroom
            );
            if kind == "auto" {
                choices.push((name.clone(), tally(policy.as_ref(), series, &cfg)));
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
    Ok(())
}

/// How often auto chose each candidate at the backtest's origins.
fn tally(policy: &dyn Policy, series: &Series, cfg: &BacktestConfig) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
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
        let key = match policy.recommend(&history, &ctx) {
            Ok(rec) => rec.evidence["chosen"].as_str().unwrap_or("?").to_string(),
            Err(_) => "refused".to_string(),
        };
        *out.entry(key).or_default() += 1;
        t += cfg.stride_secs;
    }
    out
}
