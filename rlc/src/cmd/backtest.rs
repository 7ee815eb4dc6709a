//! `rlc backtest --series FILE --policy SPEC [--json]`: how a policy would have done.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use policies::{BacktestConfig, Series, backtest, from_spec};

use super::run::positive_duration;

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
    if cmd.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("origins            {}", report.origins);
        println!("exceedance rate    {:.5}", report.exceedance_rate);
        println!("peak headroom      {:.3}", report.peak_headroom);
        println!("median headroom    {:.3}", report.median_headroom);
        println!("refused            {}", report.refused);
    }
    Ok(())
}
