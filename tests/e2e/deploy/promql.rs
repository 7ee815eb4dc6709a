//! Every alert and dashboard query: it uses only metrics of the contract, and a real
//! Prometheus parses it (Grafana's variables substituted).

use std::collections::BTreeSet;

use anyhow::{Result, ensure};
use test_support::prometheus::Prometheus;

use super::alerts::alert_rules;
use super::contract::{CONTRACT_METRICS, HISTOGRAMS};
use super::grafana::{dashboard_exprs, substitute_grafana_vars};

/// Metric names (`grl_*`, `rlc_*`) in a PromQL expression, outside string literals.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut chars = expr.chars().peekable();
    let mut word = String::new();
    let flush = |word: &mut String, names: &mut BTreeSet<String>| {
        if word.starts_with("grl_") || word.starts_with("rlc_") {
            names.insert(word.clone());
        }
        word.clear();
    };
    while let Some(c) = chars.next() {
        if c == '"' || c == '\'' || c == '`' {
            flush(&mut word, &mut names);
            while let Some(d) = chars.next() {
                if d == '\\' {
                    chars.next();
                } else if d == c {
                    break;
                }
            }
        } else if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            flush(&mut word, &mut names);
        }
    }
    flush(&mut word, &mut names);
    names
}

#[test]
fn alerts_and_dashboard_use_only_contract_metrics() -> Result<()> {
    let mut known: BTreeSet<String> = CONTRACT_METRICS
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    for h in HISTOGRAMS {
        for suffix in ["_bucket", "_sum", "_count"] {
            known.insert(format!("{h}{suffix}"));
        }
    }
    let alerts = alert_rules()?
        .into_iter()
        .map(|(n, e)| (format!("alert {n}"), e));
    let panels = dashboard_exprs()
        .into_iter()
        .map(|(t, e)| (format!("panel {t}"), e));
    for (whose, expr) in alerts.chain(panels) {
        for m in metric_names(&expr) {
            ensure!(
                known.contains(&m),
                "{whose}: {m} is not a metric of the contract"
            );
        }
    }
    ensure!(
        metric_names(r#"rate(grl_x_total{job="grl_y"}[5m])"#)
            == BTreeSet::from(["grl_x_total".to_string()])
    );
    Ok(())
}

/// Sends an instant query; returns the answer's `status` (`success` or `error`) and `error`.
async fn query_status(
    prom: &Prometheus,
    client: &reqwest::Client,
    expr: &str,
) -> Result<(String, String)> {
    let url = reqwest::Url::parse_with_params(
        &format!("{}/api/v1/query", prom.url()),
        &[("query", expr)],
    )?;
    let body: serde_json::Value = client.get(url).send().await?.json().await?;
    Ok((
        body["status"].as_str().unwrap_or_default().to_string(),
        body["error"].as_str().unwrap_or_default().to_string(),
    ))
}

#[tokio::test]
async fn dashboard_and_alert_queries_parse_in_a_real_prometheus() -> Result<()> {
    let prom = Prometheus::start_with(None, &[]).await?;
    let client = test_support::process::http_client_builder().build()?;
    // The check can fail: a malformed query is refused.
    let (status, _) = query_status(&prom, &client, "sum(rate(grl_requests_total[5m])").await?;
    ensure!(status == "error", "prometheus accepted a malformed query");
    let (status, _) = query_status(
        &prom,
        &client,
        &substitute_grafana_vars(
            r#"rate(grl_requests_total{service=~"$service"}[$__rate_interval])"#,
        ),
    )
    .await?;
    ensure!(
        status == "success",
        "the substitution of Grafana variables is broken"
    );

    let exprs = dashboard_exprs();
    ensure!(!exprs.is_empty(), "the dashboard has no queries");
    let alerts = alert_rules()?
        .into_iter()
        .map(|(n, e)| (format!("alert {n}"), e));
    let mut failures = Vec::new();
    for (title, expr) in exprs.into_iter().chain(alerts) {
        let sent = substitute_grafana_vars(&expr);
        let (status, error) = query_status(&prom, &client, &sent).await?;
        if status != "success" {
            failures.push(format!("{title}: {error}\n    {sent}"));
        }
    }
    ensure!(
        failures.is_empty(),
        "queries refused by Prometheus:\n{}",
        failures.join("\n")
    );
    Ok(())
}
