//! `rlc backtest --series FILE --policy SPEC [--events FILE [--bucket S/B]] [--json]`: how
//! a policy would have done, and what each planned event's limit would have done on the
//! traffic of its window.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use policies::event::{EventScore, EventScoreError, score_event};
use policies::{BacktestConfig, Series, backtest, from_spec};
use rlc::decide::guards::fmt_rps;

use super::args::positive_duration;

/// `rlc backtest`.
#[derive(Debug, Clone, Args)]
pub(crate) struct BacktestCmd {
    /// A `timestamp,value` CSV.
    #[arg(long)]
    pub series: PathBuf,
    /// The policy as YAML or JSON, e.g. `{ kind: historical-peak, window: 7d, buffer: 0.25 }`.
    #[arg(long)]
    pub policy: String,
    /// Scored horizon after each origin (default: the policy's own horizon, e.g. `7d` for
    /// forecast, peak-trend and auto; else 1d). Must be above zero (`0s` would never
    /// advance: refused, exit 2).
    #[arg(long, value_parser = positive_duration)]
    pub horizon: Option<std::time::Duration>,
    /// Distance between origins (default: the horizon). Must be above zero.
    #[arg(long, value_parser = positive_duration)]
    pub stride: Option<std::time::Duration>,
    /// An events file (the form of the config repo's `events.yaml`): every event whose
    /// window falls in the series is scored too: the policy's limit at the window's start
    /// (from the history before it), raised as the event says, against the window's traffic.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// With `--events`: only the events that affect this bucket (`SERVICE/BUCKET`, or a
    /// whole service by `SERVICE`); by default every event of the file.
    #[arg(long, requires = "events", value_name = "SERVICE/BUCKET")]
    pub bucket: Option<String>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs the backtest and prints the figures.
pub(crate) fn execute(cmd: BacktestCmd) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&cmd.series)
        .with_context(|| format!("reading {}", cmd.series.display()))?;
    let series = Series::from_csv_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", cmd.series.display()))?;
    let spec: serde_json::Value =
        grl_config::yaml::parse("--policy", &cmd.policy).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut params = spec
        .as_object()
        .cloned()
        .context("--policy must be a mapping with a `kind`")?;
    let kind = params
        .remove("kind")
        .and_then(|k| k.as_str().map(str::to_string))
        .context("--policy needs `kind`")?;
    let policy = from_spec(&kind, &params).map_err(|e| anyhow::anyhow!("--policy: {e}"))?;
    let horizon = cmd.horizon.unwrap_or_else(|| {
        policy
            .horizon()
            .unwrap_or(std::time::Duration::from_secs(86_400))
    });
    let stride = cmd.stride.unwrap_or(horizon);
    let cfg = BacktestConfig {
        window_secs: policy.window().as_secs() as i64,
        horizon_secs: horizon.as_secs() as i64,
        stride_secs: stride.as_secs() as i64,
    };
    let report = backtest(&*policy, &series, &cfg);
    let events = match &cmd.events {
        Some(path) => score_events(path, cmd.bucket.as_deref(), &*policy, &series)?,
        None => Vec::new(),
    };
    if cmd.json {
        let mut out = serde_json::to_value(report)?;
        if cmd.events.is_some() {
            out["events"] = serde_json::Value::Array(
                events
                    .iter()
                    .map(|(name, r)| match r {
                        Ok(score) => serde_json::to_value(score).unwrap_or_default(),
                        Err(e) => serde_json::json!({ "name": name, "error": e.to_string() }),
                    })
                    .collect(),
            );
        }
        println!("{out}");
    } else {
        println!("origins            {}", report.origins);
        println!("exceedance rate    {:.5}", report.exceedance_rate);
        println!("peak headroom      {:.3}", report.peak_headroom);
        println!("median headroom    {:.3}", report.median_headroom);
        println!("refused            {}", report.refused);
        if cmd.events.is_some() {
            print!("\n{}", events_table(&events));
        }
    }
    Ok(())
}

/// Each event of `path` that affects `bucket` (all without one), scored on `series`.
fn score_events(
    path: &std::path::Path,
    bucket: Option<&str>,
    policy: &dyn policies::Policy,
    series: &Series,
) -> anyhow::Result<Vec<(String, Result<EventScore, EventScoreError>)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let shown = path.display().to_string();
    let events = rlc::input::events::file::parse(&shown, &text).map_err(|e| {
        let lines: Vec<String> = e.iter().map(|e| format!("\n  {e}")).collect();
        anyhow::anyhow!("--events refused:{}", lines.concat())
    })?;
    Ok(events
        .iter()
        .filter(|e| match bucket.map(|b| b.split_once('/')) {
            None => true,
            Some(Some((s, b))) => e.affects(s, b),
            Some(None) => e.touches(bucket.unwrap_or_default()),
        })
        .map(|e| {
            (
                e.name.clone(),
                score_event(policy, series, &e.name, e.from, e.until, e.raise),
            )
        })
        .collect())
}

/// The events as a table: the limit without and with the event, and the points above each.
fn events_table(events: &[(String, Result<EventScore, EventScoreError>)]) -> String {
    if events.is_empty() {
        return "no event of the file affects this series\n".to_string();
    }
    let mut out = format!(
        "{:<20} {:<20} {:<20} {:>10} {:>12} {:>12} {:>7} {:>11} {:>17}\n",
        "event",
        "from",
        "until",
        "limit",
        "event limit",
        "actual peak",
        "points",
        "over limit",
        "over event limit"
    );
    for (name, r) in events {
        match r {
            Ok(s) => out.push_str(&format!(
                "{:<20} {:<20} {:<20} {:>10} {:>12} {:>12} {:>7} {:>11} {:>17}\n",
                s.name,
                rlc::input::capacity::utc(s.from),
                rlc::input::capacity::utc(s.until),
                fmt_rps(s.limit),
                fmt_rps(s.event_limit),
                fmt_rps(s.actual_peak),
                s.points,
                s.over_limit,
                s.over_event_limit
            )),
            Err(e) => out.push_str(&format!("{name:<20} not scored: {e}\n")),
        }
    }
    out
}
