//! The dashboard's core panels return data from a real stack: a `grl controller`, a
//! `grl aggregator` and a `grl loadgen` as processes, scraped by a real Prometheus.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use test_support::process::{spawn, target_bin};
use test_support::prometheus::Prometheus;

const SERVICES: &str = "service: payments
buckets:
  - name: gateway-pay
    match: { caller: gateway }
    scope: global
    mode: deny
    policy: { kind: fixed, rps: 100 }
  - name: refunds
    match: { procedure: \"Refund/*\" }
    scope: global
    mode: shadow
    policy: { kind: fixed, rps: 50 }
";

/// Panels an operator needs first; every one must show data.
const CORE_PANELS: &[&str] = &[
    "Offered vs admitted per bucket",
    "Dropped requests per bucket",
    "Drop ratio per bucket",
    "Offered load summed by the tiers",
    "Virtual drops of shadow buckets",
    "Clients failing open",
    "Tiers failing open",
    "Config version in force",
    "Children and stale children per tier",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_dashboard_panels_return_data_from_a_live_stack() -> Result<()> {
    let grl = target_bin("grl")?;
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("config/services"))?;
    std::fs::write(dir.path().join("config/services/payments.yaml"), SERVICES)?;
    let profile = dir.path().join("profile.csv");
    std::fs::write(
        &profile,
        "second,caller,procedure,rps\n0,gateway,Pay/Charge,300\n0,web,Refund/Full,150\n",
    )?;
    let (ctl, ctl_m, agg, agg_m, load_m) = (
        test_support::ports::free_addr(),
        test_support::ports::free_addr(),
        test_support::ports::free_addr(),
        test_support::ports::free_addr(),
        test_support::ports::free_addr(),
    );
    let _controller = spawn(
        std::process::Command::new(&grl)
            .args([
                "controller",
                "--listen",
                &ctl.to_string(),
                "--metrics-listen",
                &ctl_m.to_string(),
            ])
            .args(["--interval-ms", "500", "--config"])
            .arg(dir.path().join("config")),
    )?;
    test_support::process::wait_for_tcp(ctl, Duration::from_secs(20)).await?;
    let _aggregator = spawn(std::process::Command::new(&grl).args([
        "aggregator",
        "--listen",
        &agg.to_string(),
        "--zone",
        "z1",
        "--region",
        "r1",
        "--controller",
        &ctl.to_string(),
        "--metrics-listen",
        &agg_m.to_string(),
        "--interval-ms",
        "500",
    ]))?;
    test_support::process::wait_for_tcp(agg, Duration::from_secs(20)).await?;
    let _loadgen = spawn(
        std::process::Command::new(&grl)
            .args([
                "loadgen",
                "--aggregator",
                &agg.to_string(),
                "--zone",
                "z1",
                "--region",
                "r1",
            ])
            .args([
                "--clients",
                "2",
                "--duration",
                "90",
                "--service",
                "payments",
                "--interval-ms",
                "500",
            ])
            .args(["--metrics-listen", &load_m.to_string(), "--profile"])
            .arg(&profile),
    )?;
    let targets: Vec<String> = [ctl_m, agg_m, load_m]
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    let prometheus = Prometheus::start_with(None, &targets).await?;

    let panels: Vec<(String, String)> = crate::deploy::dashboard_exprs()
        .into_iter()
        .filter(|(title, _)| CORE_PANELS.contains(&title.as_str()))
        .collect();
    for core in CORE_PANELS {
        assert!(
            panels.iter().any(|(t, _)| t == core),
            "panel `{core}` is missing"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pending = panels.clone();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for (title, expr) in pending {
            let q = crate::deploy::substitute_grafana_vars(&expr);
            let data = prometheus
                .query(&q)
                .await
                .with_context(|| format!("{title}: {q}"))?;
            let empty = data["result"].as_array().is_none_or(Vec::is_empty);
            if empty {
                still.push((title, expr));
            }
        }
        pending = still;
        if !pending.is_empty() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "panels with no data after 60 s: {:?}",
                pending
                    .iter()
                    .map(|(t, e)| format!("{t}: {e}"))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    let dropped = prometheus
        .query_scalar(
            "sum(rate(grl_requests_total{bucket=\"gateway-pay\",decision=\"dropped\"}[1m]))",
        )
        .await?;
    assert!(dropped > 0.0, "the over-limit bucket drops ({dropped}/s)");
    Ok(())
}
