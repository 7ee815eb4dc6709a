//! `deploy/alerts.yml` and its unit tests `deploy/alerts_test.yml`: both pass `promtool`, and
//! every alert has a case where it fires and one where it stays quiet.

use std::collections::BTreeSet;
use std::process::Command;

use anyhow::{Context, Result, anyhow, ensure};
use serde_yaml::Value;

use super::{deploy_file, read_yaml, repo_root};

/// Runs `promtool args...` in the repository root; an error with its output if it fails.
fn promtool(args: &[&str]) -> Result<()> {
    let promtool = test_support::prometheus::test_binary(
        "GRL_TEST_PROMTOOL",
        "/usr/bin/promtool",
        "promtool",
    )?;
    let out = Command::new(&promtool)
        .args(args)
        .current_dir(repo_root())
        .output()
        .with_context(|| format!("running {}", promtool.display()))?;
    ensure!(
        out.status.success(),
        "promtool {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn alerting_rules_pass_promtool_check_and_unit_tests() -> Result<()> {
    promtool(&["check", "rules", &deploy_file("alerts.yml")])?;
    promtool(&["test", "rules", &deploy_file("alerts_test.yml")])
}

/// (alert name, expr) of every alerting rule.
pub(super) fn alert_rules() -> Result<Vec<(String, String)>> {
    let doc = read_yaml(&deploy_file("alerts.yml"))?;
    let mut out = Vec::new();
    for group in doc["groups"]
        .as_sequence()
        .ok_or_else(|| anyhow!("alerts.yml: no groups"))?
    {
        for rule in group["rules"].as_sequence().into_iter().flatten() {
            if let Some(name) = rule["alert"].as_str() {
                let expr = rule["expr"]
                    .as_str()
                    .ok_or_else(|| anyhow!("alert {name}: no expr"))?;
                out.push((name.to_string(), expr.to_string()));
            }
        }
    }
    Ok(out)
}

#[test]
fn every_alert_has_a_firing_and_a_quiet_unit_test() -> Result<()> {
    let alerts = alert_rules()?;
    ensure!(
        alerts.len() >= 6,
        "expected at least 6 alerts, found {}",
        alerts.len()
    );
    let tests = read_yaml(&deploy_file("alerts_test.yml"))?;
    ensure!(
        tests["rule_files"]
            .as_sequence()
            .into_iter()
            .flatten()
            .any(|f| f.as_str() == Some("alerts.yml")),
        "alerts_test.yml must load alerts.yml"
    );
    let (mut firing, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    for t in tests["tests"].as_sequence().into_iter().flatten() {
        for case in t["alert_rule_test"].as_sequence().into_iter().flatten() {
            let name = case["alertname"].as_str().unwrap_or_default().to_string();
            match case.get("exp_alerts").and_then(Value::as_sequence) {
                Some(exp) if !exp.is_empty() => firing.insert(name),
                _ => quiet.insert(name),
            };
        }
    }
    let names: BTreeSet<String> = alerts.iter().map(|(n, _)| n.clone()).collect();
    ensure!(
        names.len() == alerts.len(),
        "duplicate alert names in alerts.yml"
    );
    for name in &names {
        ensure!(
            firing.contains(name),
            "alert {name} has no unit test where it fires"
        );
        ensure!(
            quiet.contains(name),
            "alert {name} has no unit test where it stays quiet"
        );
    }
    for name in firing.union(&quiet) {
        ensure!(
            names.contains(name),
            "alerts_test.yml tests unknown alert {name}"
        );
    }
    for (kind, want) in [
        ("shadow", "grl_requests_total"),
        ("client fail-open", "grl_client_fail_open"),
        ("tier fail-open", "grl_tier_fail_open"),
        ("rlc failing", "rlc_runs_total"),
        ("rlc stale", "rlc_last_success_timestamp_seconds"),
        ("limit change", "grl_tier_limit_rps"),
        ("config refused", "grl_controller_apply_total"),
    ] {
        ensure!(
            alerts.iter().any(|(_, e)| e.contains(want)),
            "no {kind} alert (on {want})"
        );
    }
    Ok(())
}
