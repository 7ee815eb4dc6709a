//! The Grafana dashboard `deploy/grafana/grl-dashboard.json` and its provisioning: panels with
//! queries over defined variables, covering what an operator needs, on the provisioned
//! Prometheus datasource, mounted where the provider looks.

use std::collections::BTreeSet;

use anyhow::{Context, Result, anyhow, ensure};

use super::compose_file::Compose;
use super::{deploy_file, read_repo_file, read_yaml, repo_root};

/// The dashboard's file, relative to the repository root.
fn dashboard_file() -> String {
    deploy_file("grafana/grl-dashboard.json")
}

/// The parsed dashboard.
fn dashboard() -> Result<serde_json::Value> {
    let text = read_repo_file(&dashboard_file())?;
    serde_json::from_str(&text).context("grl-dashboard.json is not valid JSON")
}

/// Every panel, rows' nested panels included (rows themselves excluded).
fn panels(dash: &serde_json::Value) -> Vec<&serde_json::Value> {
    fn walk<'a>(list: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
        for p in list.as_array().into_iter().flatten() {
            if p["type"] == "row" {
                walk(&p["panels"], out);
            } else {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    out
}

/// (panel title, PromQL expr) of every query of the GRL dashboard, with Grafana variables
/// (`$service`, `$__rate_interval`) left in: pass an expr through [`substitute_grafana_vars`]
/// before sending it to Prometheus.
pub(crate) fn dashboard_exprs() -> Vec<(String, String)> {
    let dash = dashboard().expect("grl-dashboard.json");
    panels(&dash)
        .into_iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_string();
            p["targets"].as_array().into_iter().flatten().map(move |t| {
                (
                    title.clone(),
                    t["expr"].as_str().unwrap_or_default().to_string(),
                )
            })
        })
        .collect()
}

/// Replaces Grafana's variables with values Prometheus accepts: interval variables with a
/// duration, and template variables (used in `=~` matchers) with the regex `.*`.
pub(crate) fn substitute_grafana_vars(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').map_or(braced.len(), |e| e + 1);
            (
                braced[..end.saturating_sub(1)]
                    .split(':')
                    .next()
                    .unwrap_or_default(),
                end + 1,
            )
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        out.push_str(match name {
            "" => "$",
            "__rate_interval" | "__interval" => "1m",
            "__range" => "1h",
            "__interval_ms" => "60000",
            "__range_s" => "3600",
            _ => ".*",
        });
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

/// Names of `$var`/`${var}` references in a text.
fn var_refs(text: &str) -> BTreeSet<String> {
    text.split('$')
        .skip(1)
        .map(|s| {
            let s = s.strip_prefix('{').unwrap_or(s);
            s.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

#[test]
fn dashboard_panels_have_queries_and_defined_variables() -> Result<()> {
    let dash = dashboard()?;
    ensure!(
        dash["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "the dashboard needs a fixed uid"
    );
    let vars: BTreeSet<String> = dash["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(str::to_string))
        .collect();
    let mut ids = BTreeSet::new();
    let all = panels(&dash);
    ensure!(
        all.len() >= 8,
        "expected at least 8 panels, found {}",
        all.len()
    );
    for p in &all {
        let title = p["title"].as_str().unwrap_or_default();
        ensure!(!title.is_empty(), "a panel has no title: {p}");
        ensure!(
            ids.insert(
                p["id"]
                    .as_u64()
                    .ok_or_else(|| anyhow!("panel {title}: no id"))?
            ),
            "panel {title}: duplicate id"
        );
        ensure!(
            p["gridPos"]["w"].as_u64().is_some(),
            "panel {title}: no gridPos"
        );
        let targets = p["targets"]
            .as_array()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| anyhow!("panel {title}: no targets"))?;
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            ensure!(
                !expr.trim().is_empty(),
                "panel {title}: a target has an empty expr"
            );
            for v in var_refs(expr) {
                ensure!(
                    v.starts_with("__") || vars.contains(&v),
                    "panel {title}: ${v} is not a dashboard variable"
                );
            }
        }
    }
    // The dashboard covers what an operator needs.
    let exprs = dashboard_exprs();
    for (what, needle) in [
        ("offered vs admitted", "grl_requests_total"),
        ("drop ratios", "grl_tier_drop_ratio"),
        ("virtual drops", "shadow_dropped"),
        ("fail-open clients", "grl_client_fail_open"),
        ("config version", "grl_tier_config_info"),
        ("rlc runs", "rlc_runs_total"),
        ("limit changes", "rlc_limit_changes_total"),
    ] {
        ensure!(
            exprs.iter().any(|(_, e)| e.contains(needle)),
            "no panel shows {what} ({needle})"
        );
    }
    Ok(())
}

#[test]
fn grafana_provisioning_matches_compose_and_dashboard() -> Result<()> {
    let compose = Compose::load()?;
    let dash = dashboard()?;
    let prov = "/etc/grafana/provisioning";
    let ds = read_yaml(&deploy_file(
        "grafana/provisioning/datasources/prometheus.yml",
    ))?;
    let ds = &ds["datasources"][0];
    ensure!(
        ds["type"].as_str() == Some("prometheus"),
        "the provisioned datasource must be Prometheus"
    );
    ensure!(
        ds["url"].as_str() == Some("http://prometheus:9090"),
        "the datasource must point at the prometheus service"
    );
    compose.service("prometheus")?;
    let uid = ds["uid"]
        .as_str()
        .ok_or_else(|| anyhow!("the provisioned datasource needs a uid"))?;
    for p in panels(&dash) {
        let title = p["title"].as_str().unwrap_or_default();
        ensure!(
            p["datasource"]["uid"].as_str() == Some(uid),
            "panel {title}: datasource uid must be {uid}"
        );
        for t in p["targets"].as_array().into_iter().flatten() {
            ensure!(
                t["datasource"]["uid"].as_str().is_none_or(|u| u == uid),
                "panel {title}: target datasource uid must be {uid}"
            );
        }
    }
    ensure!(
        compose
            .mounted_source("grafana", &format!("{prov}/datasources/prometheus.yml"))?
            .is_file(),
        "grafana: datasource provisioning is not mounted"
    );
    let providers = read_yaml(&deploy_file("grafana/provisioning/dashboards/grl.yml"))?;
    compose.mounted_source("grafana", &format!("{prov}/dashboards/grl.yml"))?;
    let dir = providers["providers"][0]["options"]["path"]
        .as_str()
        .ok_or_else(|| anyhow!("dashboard provider has no options.path"))?;
    ensure!(
        compose.mounted_source("grafana", &format!("{dir}/grl-dashboard.json"))?
            == repo_root().join(dashboard_file()),
        "grafana: grl-dashboard.json is not mounted in the provider's folder {dir}"
    );
    Ok(())
}
