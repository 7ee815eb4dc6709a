//! `rlc serve` firing on its own schedule, as a process: runs start on their slot, never
//! overlap, skip nothing, and each run's commit reaches a real controller. The fleet bench
//! checks the same at 22,000 buckets and `*/5 * * * *`; here the schedule is every minute
//! and the config the small fleet of `fleet.rs`, so that two slots fit a test.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use rlc::run_log::{RunLog, RunRecord, RunStatus};
use test_support::ports::free_addr;
use test_support::process::{spawn, target_bin, wait_for_tcp};

use crate::fleet::{Fleet, PAY, SEARCH};
use crate::reliability::controller_version;

/// The finished runs the schedule started, oldest first.
async fn scheduled_runs(db: &str) -> Result<Vec<RunRecord>> {
    let h = RunLog::connect(db).await?;
    let mut runs: Vec<RunRecord> = h
        .recent_runs(100)
        .await?
        .into_iter()
        .filter(|r| r.trigger == "schedule" && r.finished_at.is_some())
        .collect();
    h.close().await;
    runs.sort_by_key(|r| r.started_at);
    Ok(runs)
}

/// Polls the run history every second for up to `secs` until `n` scheduled runs finished.
async fn wait_for_runs(
    db: &str,
    n: usize,
    secs: u64,
    log: impl Fn() -> String,
) -> Result<Vec<RunRecord>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let runs = scheduled_runs(db).await.unwrap_or_default();
        if runs.len() >= n {
            return Ok(runs);
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "{} of {n} scheduled runs finished in {secs} s; rlc serve:\n{}",
            runs.len(),
            log()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Seconds past the minute at which a run started.
fn past_the_minute(r: &RunRecord) -> f64 {
    r.started_at.timestamp_millis().rem_euclid(60_000) as f64 / 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_a_schedule_starts_each_run_on_its_slot_and_each_commit_reaches_the_controller()
-> Result<()> {
    let fleet = Fleet::start().await?;
    let remote = fleet.remote()?;

    let start_config = fleet.dir("controller-config");
    std::fs::create_dir_all(start_config.join("services"))?;
    std::fs::write(start_config.join("services/pay.yaml"), PAY)?;
    std::fs::write(start_config.join("services/search.yaml"), SEARCH)?;
    let ctl = free_addr();
    let controller = spawn(
        Command::new(target_bin("grl")?)
            .args(["controller", "--listen", &ctl.to_string()])
            .args(["--metrics-listen", &free_addr().to_string()])
            .arg("--config")
            .arg(&start_config),
    )?;
    wait_for_tcp(ctl, Duration::from_secs(60))
        .await
        .with_context(|| controller.output_tail(20))?;

    let db = format!("sqlite://{}", fleet.dir("serve.db").display());
    let metrics = free_addr();
    // Commits are not watched within the test (an hour between looks): every run here is
    // the schedule's.
    let serve = spawn(
        Command::new(env!("CARGO_BIN_EXE_rlc"))
            .args(["serve", "--schedule", "* * * * *", "--mode", "direct"])
            .args(["--config-repo", &remote.url(), "--db", &db])
            .args(["--prometheus", &fleet.prometheus.url()])
            .args(["--controller", &ctl.to_string()])
            .args(["--metrics-listen", &metrics.to_string()])
            .args(["--watch-interval-secs", "3600", "--progress", "log"])
            .arg("--workdir")
            .arg(fleet.dir("serve-checkout"))
            .env("RUST_LOG", "info"),
    )?;
    let log = || serve.output_tail(40);

    let first = wait_for_runs(&db, 1, 150, log).await?;
    let first = &first[0];
    ensure!(first.status == RunStatus::Committed, "{first:?}\n{}", log());
    let first_commit = first.commit.clone().context("the first run's commit")?;
    ensure!(
        controller_version(ctl).await? == first_commit,
        "the controller runs the first scheduled run's commit"
    );

    // A person raises a buffer: the next slot's run commits new limits.
    remote.commit_files(
        "main",
        &[(
            "services/pay.yaml",
            PAY.replacen("buffer: 0.25", "buffer: 0.6", 1),
        )],
        "person: more buffer for gateway-all",
    )?;
    let runs = wait_for_runs(&db, 2, 150, log).await?;
    let second = &runs[1];
    ensure!(
        second.status == RunStatus::Committed,
        "{second:?}\n{}",
        log()
    );
    let head = remote.log("main")[0].0.clone();
    ensure!(
        second.commit.as_deref() == Some(head.as_str()) && head != first_commit,
        "the second run committed main's head: {second:?}, head {head}"
    );
    ensure!(
        controller_version(ctl).await? == head,
        "the controller runs the second scheduled run's commit"
    );

    for r in [&runs[0], &runs[1]] {
        let late = past_the_minute(r);
        eprintln!("measured: run {} started {late:.3} s after its slot", r.id);
        ensure!(
            late < 2.0,
            "run {} started {late:.3} s after its slot",
            r.id
        );
    }
    let first_end = runs[0].finished_at.context("first run's end")?;
    ensure!(
        runs[1].started_at >= first_end,
        "runs overlap: {:?}",
        &runs[..2]
    );
    ensure!(
        (runs[1].started_at - runs[0].started_at).num_seconds() <= 61,
        "the second run is the next slot's: {:?}",
        &runs[..2]
    );
    let body = reqwest::get(format!("http://{metrics}/metrics"))
        .await?
        .text()
        .await?;
    let skipped = body
        .lines()
        .find(|l| l.starts_with("rlc_schedule_skipped_total"))
        .and_then(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .context("rlc_schedule_skipped_total")?;
    ensure!(skipped == 0.0, "slots skipped: {skipped}");
    Ok(())
}
