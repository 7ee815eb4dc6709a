//! A planned event through the whole path, with real processes: `events.yaml` in the config
//! repo → the run commits a scheduled limit for the event's window → the run pushes it to a
//! real `grl controller` → the controller switches to it at the window's start by its own
//! clock and back at its end → clients under load see the new drop ratio within two
//! intervals. The window is a few seconds long, a few seconds after the run.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use serde_json::Value;
use test_support::git_remote::BareRemote;
use test_support::ports::free_addr;
use test_support::process::{ChildGuard, spawn, target_bin, wait_for_tcp};

use crate::reliability::controller_version;

const ORDERS: &str = "\
service: orders
buckets:
  - name: web
    match: { caller: web }
    scope: global
    mode: deny
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
";

/// The tiers' reporting interval, and the load generator's report period.
const INTERVAL_MS: i64 = 500;
const REPORT_MS: i64 = 250;
/// What the clients offer: 600 rps of web against a limit of 125 (375 in the window).
const OFFERED: f64 = 600.0;

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// 28 days of `orders/web` between 60 and 100 rps ending now: historical-peak +25 % = 125.
fn write_history(dir: &std::path::Path, end: i64) -> Result<()> {
    let dir = dir.join("orders");
    std::fs::create_dir_all(&dir)?;
    let end = end - end.rem_euclid(300);
    let csv: String = (0..=28 * 288)
        .map(|i| {
            let ts = end - 28 * 86_400 + i * 300;
            let phase = std::f64::consts::TAU * (ts % 86_400) as f64 / 86_400.0;
            format!("{ts},{:.3}\n", 80.0 + 20.0 * phase.sin())
        })
        .collect();
    std::fs::write(dir.join("web.csv"), csv)?;
    Ok(())
}

/// The drop fraction each report of the load generator saw for `web`: `(unix_ms, fraction)`.
fn web_drops(loadgen: &ChildGuard) -> Vec<(i64, f64)> {
    loadgen
        .output()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["bucket"] == "web" && v["offered"].as_f64().is_some_and(|o| o > 0.0))
        .map(|v| {
            (
                v["unix_ms"].as_i64().unwrap_or_default(),
                v["dropped"].as_f64().unwrap_or_default() / v["offered"].as_f64().unwrap_or(1.0),
            )
        })
        .collect()
}

/// The first report at or after `from_ms` from which every report before `to_ms` drops
/// `want` ± `tolerance`; `None` if there is none.
fn settled_at(
    drops: &[(i64, f64)],
    from_ms: i64,
    to_ms: i64,
    want: f64,
    tolerance: f64,
) -> Option<i64> {
    let span: Vec<&(i64, f64)> = drops
        .iter()
        .filter(|(t, _)| *t >= from_ms && *t < to_ms)
        .collect();
    (0..span.len())
        .find(|&i| span[i..].iter().all(|(_, f)| (f - want).abs() <= tolerance))
        .map(|i| span[i].0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_event_window_switches_a_real_controller_and_its_clients_and_back() -> Result<()> {
    let work = tempfile::tempdir()?;
    let grl = target_bin("grl")?;
    let config = work.path().join("controller-config");
    std::fs::create_dir_all(config.join("services"))?;
    std::fs::write(config.join("services/orders.yaml"), ORDERS)?;
    let (ctl, agg) = (free_addr(), free_addr());
    let interval = INTERVAL_MS.to_string();
    let controller = spawn(
        Command::new(&grl)
            .args(["controller", "--listen", &ctl.to_string()])
            .args(["--metrics-listen", &free_addr().to_string()])
            .args(["--interval-ms", &interval, "--region", "eu"])
            .arg("--config")
            .arg(&config),
    )?;
    wait_for_tcp(ctl, Duration::from_secs(60))
        .await
        .with_context(|| controller.output_tail(20))?;
    let aggregator = spawn(Command::new(&grl).args([
        "aggregator",
        "--listen",
        &agg.to_string(),
        "--zone",
        "eu-1a",
        "--region",
        "eu",
        "--controller",
        &ctl.to_string(),
        "--interval-ms",
        &interval,
    ]))?;
    wait_for_tcp(agg, Duration::from_secs(60))
        .await
        .with_context(|| aggregator.output_tail(20))?;

    // The window opens 25 s from now (the run commits and pushes before) and lasts 6 s.
    let from = unix_now() + 25;
    let until = from + 6;
    let events = format!(
        "events:\n  - name: flash-sale\n    from: \"{}\"\n    until: \"{}\"\n    buckets: [orders/web]\n    multiplier: 3\n    reason: a six-second sale\n",
        rlc::input::capacity::utc(from),
        rlc::input::capacity::utc(until)
    );
    let remote = BareRemote::with_files(&[
        ("services/orders.yaml", ORDERS),
        ("events.yaml", events.as_str()),
    ])?;
    let history = work.path().join("history");
    write_history(&history, unix_now())?;
    let profile = work.path().join("profile.csv");
    std::fs::write(
        &profile,
        format!("second,caller,procedure,rps\n0,web,Any/Call,{OFFERED}\n"),
    )?;
    let loadgen = spawn(Command::new(&grl).args([
        "loadgen",
        "--service",
        "orders",
        "--aggregator",
        &agg.to_string(),
        "--zone",
        "eu-1a",
        "--region",
        "eu",
        "--clients",
        "3",
        "--duration",
        "90",
        "--interval-ms",
        &interval,
        "--report-ms",
        &REPORT_MS.to_string(),
        "--profile",
        profile.to_str().context("profile path")?,
    ]))?;

    let out = Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args([
            "run",
            "--once",
            "--mode",
            "direct",
            "--config-repo",
            &remote.url(),
        ])
        .arg("--db")
        .arg(format!(
            "sqlite://{}",
            work.path().join("runs.db").display()
        ))
        .arg("--workdir")
        .arg(work.path().join("checkout"))
        .arg("--history-dir")
        .arg(&history)
        .args(["--controller", &ctl.to_string(), "--progress", "off"])
        .output()?;
    let pushed_at = unix_now();
    ensure!(
        out.status.code() == Some(0),
        "rlc run: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        pushed_at < from - 2,
        "the run must commit and push before the window opens ({pushed_at} vs {from})"
    );

    let head = remote.log("main")[0].0.clone();
    let limits = remote
        .read_file_at("main", "limits/orders.yaml")
        .context("the committed limits file")?;
    let wanted = format!(
        "  web:\n    rps: 125.0\n    scheduled:\n    - rps: 375.0\n      effective:\n        from: {}\n        until: {}\n      reason: 'events.yaml: flash-sale'\n",
        rlc::input::capacity::utc(from),
        rlc::input::capacity::utc(until)
    );
    ensure!(limits.contains(&wanted), "{wanted}\nin\n{limits}");
    let running = controller_version(ctl).await?;
    ensure!(
        running == format!("{head}+s0"),
        "the controller runs the commit, before the window (`+s0`): {running}"
    );

    let deadline =
        std::time::Instant::now() + Duration::from_secs((until - unix_now()).max(0) as u64 + 30);
    let end_ms = (until + 3) * 1000;
    while web_drops(&loadgen).last().is_none_or(|(t, _)| *t < end_ms) {
        ensure!(
            std::time::Instant::now() < deadline,
            "the load generator never reported past the window: {}",
            loadgen.output_tail(10)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drops = web_drops(&loadgen);
    let (outside, inside) = (1.0 - 125.0 / OFFERED, 1.0 - 375.0 / OFFERED);
    // 150 requests a report: a binomial spread of 0.04 around the ratio; 0.15 is over 3.5 of it.
    let tolerance = 0.15;
    let lag = 2 * INTERVAL_MS + REPORT_MS;
    let before = settled_at(&drops, (from - 4) * 1000, from * 1000, outside, tolerance);
    ensure!(
        before.is_some_and(|t| t <= (from - 3) * 1000),
        "before the window the clients drop {outside:.3}: {drops:?}"
    );
    let switched = settled_at(&drops, from * 1000, until * 1000, inside, tolerance);
    eprintln!(
        "measured: clients at the event's ratio {} ms after the window opened",
        switched.map_or(-1, |t| t - from * 1000)
    );
    ensure!(
        switched.is_some_and(|t| t <= from * 1000 + lag),
        "within two intervals of {from}, the clients drop {inside:.3} until {until}: {:?}",
        drops
            .iter()
            .filter(|(t, _)| *t >= (from - 1) * 1000 && *t < (until + 1) * 1000)
            .collect::<Vec<_>>()
    );
    let back = settled_at(&drops, until * 1000, end_ms, outside, tolerance);
    eprintln!(
        "measured: clients back at the usual ratio {} ms after the window closed",
        back.map_or(-1, |t| t - until * 1000)
    );
    ensure!(
        back.is_some_and(|t| t <= until * 1000 + lag),
        "within two intervals of {until}, the clients drop {outside:.3} again: {:?}",
        drops
            .iter()
            .filter(|(t, _)| *t >= until * 1000 - 1000)
            .collect::<Vec<_>>()
    );
    drop(loadgen);
    drop(aggregator);
    drop(controller);
    Ok(())
}
