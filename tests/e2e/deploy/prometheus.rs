//! `deploy/prometheus.yml`: the file the compose service runs with, loading the alerting rules,
//! and scraping every GRL/RLC process's `--metrics-listen` exactly once and nothing else.

use std::collections::BTreeSet;

use anyhow::{Result, anyhow, bail, ensure};
use serde_yaml::Value;

use super::compose_file::{Compose, host_port};
use super::{deploy_file, read_yaml, repo_root};

#[test]
fn prometheus_scrapes_exactly_the_metrics_listeners() -> Result<()> {
    let compose = Compose::load()?;
    let (config_file, alerts_file) = (deploy_file("prometheus.yml"), deploy_file("alerts.yml"));
    let prom = read_yaml(&config_file)?;

    // The compose service mounts this very file as its --config.file, and every rule file.
    let cmd = compose.command("prometheus")?.unwrap_or_default();
    let config = cmd
        .iter()
        .find_map(|a| a.strip_prefix("--config.file="))
        .ok_or_else(|| anyhow!("prometheus: no --config.file= in its command"))?;
    ensure!(
        compose.mounted_source("prometheus", config)? == repo_root().join(&config_file),
        "prometheus: --config.file is not {config_file}"
    );
    let rules: Vec<&str> = prom["rule_files"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    ensure!(!rules.is_empty(), "prometheus.yml loads no rule_files");
    for r in &rules {
        compose.mounted_source("prometheus", r)?;
    }
    ensure!(
        rules
            .iter()
            .any(|r| compose.mounted_source("prometheus", r).ok()
                == Some(repo_root().join(&alerts_file))),
        "prometheus.yml does not load {alerts_file}"
    );

    let mut targets = Vec::new();
    for job in prom["scrape_configs"]
        .as_sequence()
        .ok_or_else(|| anyhow!("no scrape_configs"))?
    {
        for sc in job["static_configs"].as_sequence().into_iter().flatten() {
            for t in sc["targets"].as_sequence().into_iter().flatten() {
                let t = t
                    .as_str()
                    .ok_or_else(|| anyhow!("non-string target {t:?}"))?;
                let (host, port) = host_port(t)?;
                targets.push((host.to_string(), port));
            }
        }
    }
    let scraped: BTreeSet<(String, u16)> = targets.iter().cloned().collect();
    ensure!(
        scraped.len() == targets.len(),
        "a target is scraped twice: {targets:?}"
    );

    let mut listening = BTreeSet::new();
    for inv in compose.invocations()? {
        let (_, port) = host_port(inv.flag("metrics-listen")?)?;
        listening.insert((inv.service.clone(), port));
    }
    if let Some(t) = scraped.difference(&listening).next() {
        bail!(
            "prometheus.yml scrapes {}:{} but no compose service exports metrics there",
            t.0,
            t.1
        );
    }
    if let Some(l) = listening.difference(&scraped).next() {
        bail!(
            "service {} exports metrics on port {} but prometheus.yml does not scrape it",
            l.0,
            l.1
        );
    }
    Ok(())
}
