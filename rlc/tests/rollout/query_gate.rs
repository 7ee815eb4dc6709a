//! The gates on named Prometheus queries (`gates.prometheus` in `rollout.yaml`) against a
//! real Prometheus scraping each region's real controller: a query over its `max` fails the
//! wave and the regions already moved go back, the reason naming the gate and the figure;
//! a query at or below its `max` lets every wave pass.

use anyhow::{Context, Result};
use rlc::drive::rollout::state::{RegionState, RolloutState};
use rlc::run_log::RunLog;
use test_support::prometheus::Prometheus;

use super::fleet::{self, Fleet, REGIONS, text, until, wait_exit};
use super::{GENEROUS, stdout};

/// The drop ratio of `gateway-pay` on the controllers of region `{{region}}` (a controller's
/// `grl_config_version_info` names its region; Prometheus adds `instance`).
const DROPS: &str = "max(max by (instance) (grl_tier_drop_ratio{service=\"payments\",bucket=\"gateway-pay\"}) \
     * on (instance) max by (instance) (grl_config_version_info{region=\"{{region}}\"}))";

/// Waves `[r1], [r2, r3]` baking 4 s; the dropped-share gate is left wide open
/// (`max_drop_over_prediction: 1`) so that only the query gate `gateway_drops` (at most
/// half of `gateway-pay` dropped) judges.
fn plan() -> String {
    format!(
        "waves:\n  - regions: [r1]\n    bake: 4s\n  - regions: [r2, r3]\n    bake: 4s\n\
         gates:\n  max_drop_over_prediction: 1\n  prometheus:\n    - name: gateway_drops\n      \
         query: '{DROPS}'\n      max: 0.5\napply_timeout: 20s\n"
    )
}

/// A Prometheus scraping every region's controller every second, once it has scraped
/// each of them.
async fn prometheus(fleet: &Fleet) -> Result<Prometheus> {
    let targets: Vec<String> = fleet
        .regions
        .iter()
        .map(|r| r.metrics.to_string())
        .collect();
    let prom = Prometheus::start_with(None, &targets).await?;
    until(GENEROUS, "Prometheus scrapes every controller", || async {
        Ok(prom.query_scalar("count(up == 1)").await? == 3.0
            && prom
                .query_scalar("count(grl_config_version_info)")
                .await
                .unwrap_or(0.0)
                == 3.0)
    })
    .await
    .with_context(|| prom.log())?;
    Ok(prom)
}

/// `rlc rollout run` with the fleet's flags, Prometheus (`url`) as the metrics source
/// instead of the history files.
fn run_args(fleet: &Fleet, url: &str) -> Vec<String> {
    let mut args = fleet.drive_args();
    let at = args
        .iter()
        .position(|a| a == "--history-dir")
        .expect("--history-dir");
    args.splice(at..at + 2, ["--prometheus".to_string(), url.to_string()]);
    args
}

/// A 10x cut: in r1 the query reads ~0.9 (over its max 0.5); wave 1 fails on
/// `prometheus:gateway_drops`, r1 goes back, r2 and r3 never move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_gate_over_its_max_fails_the_wave_and_r1_goes_back() -> Result<()> {
    let fleet = Fleet::start(None, 15.0, 200.0).await?;
    let base = fleet.base.clone();
    let prom = prometheus(&fleet).await?;
    let cut = fleet.remote.commit_files(
        "main",
        &[
            ("rollout.yaml", plan()),
            ("limits/payments.yaml", fleet::limits(20.0)),
        ],
        "gateway-pay: 20 rps, with a query gate",
    )?;
    let mut cmd = fleet.rlc(&["run"]);
    cmd.args(run_args(&fleet, &prom.url()));
    let mut run = test_support::process::spawn(&mut cmd)?;
    let line = fleet.wave_1_failed(&mut run, &base, &cut).await?;
    assert!(
        line.contains("region r1 gate prometheus:gateway_drops max 0.5000 observed 0."),
        "{line}"
    );
    let history = RunLog::connect(&fleet.db).await?;
    let r = history.latest_rollout().await?.context("a rollout")?;
    assert_eq!(r.state, RolloutState::Failed);
    let failures = &r.waves[0].failures;
    assert_eq!(
        failures.len(),
        1,
        "only the query gate failed: {failures:?}"
    );
    let f = &failures[0];
    assert_eq!(
        (f.region.as_str(), f.gate.as_str()),
        ("r1", "prometheus:gateway_drops")
    );
    assert_eq!(f.predicted, Some(0.5), "the gate's max");
    let observed = f.observed.context("the query's value")?;
    assert!(
        observed > 0.7,
        "a 10x cut drops most of the load: {observed}"
    );
    assert!(
        r.reason
            .as_deref()
            .is_some_and(|why| why.contains("prometheus:gateway_drops")
                && why.contains(&format!("observed {observed:.4}"))),
        "{:?}",
        r.reason
    );
    assert_eq!(r.region("r1").unwrap().state, RegionState::RolledBack);
    assert_eq!(r.region("r2").unwrap().state, RegionState::Pending);
    assert_eq!(
        fleet.versions().await?,
        [base.as_str(), base.as_str(), base.as_str()],
        "r1 is back"
    );
    assert_eq!(fleet.remote.tip("regions/r1"), Some(base.clone()));
    Ok(())
}

/// A raise that drops nothing: the query reads 0 in every region (at or below its max) and
/// every wave passes; the log shows each region's reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_gate_at_or_below_its_max_lets_every_wave_pass() -> Result<()> {
    let fleet = Fleet::start(None, 150.0, 150.0).await?;
    let prom = prometheus(&fleet).await?;
    let raised = fleet.remote.commit_files(
        "main",
        &[
            ("rollout.yaml", plan()),
            ("limits/payments.yaml", fleet::limits(400.0)),
        ],
        "gateway-pay: 400 rps, with a query gate",
    )?;
    let mut cmd = fleet.rlc(&["run"]);
    cmd.args(run_args(&fleet, &prom.url()));
    let mut run = test_support::process::spawn(&mut cmd)?;
    let code = wait_exit(&mut run, GENEROUS).await?;
    let out = run.output();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("passed every wave"), "{out}");
    for r in REGIONS {
        let read = out
            .lines()
            .find(|l| l.contains("query gate read") && l.contains(&format!("region=\"{r}\" ")))
            .unwrap_or_else(|| panic!("{r}'s query gate reading is logged: {out}"));
        assert!(
            read.contains("gate=prometheus:gateway_drops") && read.contains("value=0 "),
            "{read}"
        );
    }
    assert_eq!(
        fleet.versions().await?,
        [raised.as_str(), raised.as_str(), raised.as_str()]
    );
    let r = RunLog::connect(&fleet.db)
        .await?
        .latest_rollout()
        .await?
        .context("a rollout")?;
    assert_eq!(r.state, RolloutState::Passed);
    assert_eq!(
        r.waves
            .iter()
            .map(|w| w.result.as_str())
            .collect::<Vec<_>>(),
        ["passed", "passed"]
    );
    let table = fleet
        .rollout(["status", "--db", &fleet.db].map(String::from).to_vec())
        .await?;
    assert!(
        stdout(&table).contains("passed  2 waves done"),
        "{}",
        text(&table)
    );
    Ok(())
}
