//! Prints the backtest table of `POLICIES.md`: every series in `tests/data/traffic/` (plus
//! AAPL and nyc_taxi under a +5 %/week ramp) against historical-peak (buffer 0.25) and
//! forecast (defaults). Window / horizon: 28d / 7d, except elb (only 14 days of data):
//! 7d / 1d. Origins every day (stride 1d).
//!
//! Run: `cargo run --release -p policies --example backtest_table`

use policies::backtest::{BacktestConfig, backtest};
use policies::{Policy, Series, from_spec};
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
        if name == "Twitter_volume_AAPL" || name == "nyc_taxi" {
            let start = series.start().unwrap_or_default();
            let ramp =
                series.map_values(|ts, v| v * (1.0 + 0.05 * (ts - start) as f64 / WEEK as f64));
            rows.push((format!("{name} x ramp +5%/week"), ramp));
        }
        rows.push((name, series));
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    println!(
        "| series | window / horizon | policy | origins | refused | exceedance rate | peak headroom | median headroom |"
    );
    println!("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |");
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
        ];
        for (kind, params) in specs {
            let policy: Box<dyn Policy> = from_spec(kind, params.as_object().expect("object"))?;
            let r = backtest(policy.as_ref(), series, &cfg);
            println!(
                "| {name} | {window} / {horizon} | {kind} | {} | {} | {:.4} | {:.3} | {:.2} |",
                r.origins, r.refused, r.exceedance_rate, r.peak_headroom, r.median_headroom
            );
        }
    }
    Ok(())
}
