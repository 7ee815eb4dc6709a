//! Staged rollouts end to end (issue #27): three regions, each a real `grl controller`
//! process following `regions/<region>` of a bare config remote, with an aggregator and
//! clients offering real traffic; the `rlc` binary driving the rollout (or the library, where
//! a test needs its counters); SQLite and PostgreSQL for the rollout's state; the GitHub
//! stand-in for the comment on a merged pull request; a real Prometheus scraping the
//! controllers for the query gates ([`query_gate`]). Operators' commands are in
//! [`operators`].

mod fleet;
mod operators;
mod query_gate;

use std::time::Duration;

use anyhow::{Context, Result};
use fleet::{Fleet, NOW, REGIONS, scrape, text, until, wait_exit};
use rlc::drive::rollout::state::{RegionState, RolloutState};
use rlc::run_log::RunLog;

const BAKE: &str = "3s";
const BAKE_MS: i64 = 3_000;
/// Long enough for any wait here on two busy cores.
const GENEROUS: Duration = Duration::from_secs(90);

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A good change reaches r1, then r2 and r3 once r1 baked and passed; each region's
/// controller, its `grl_config_version_info` and `rlc rollout status` agree on the version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_change_moves_r1_then_r2_and_r3_after_the_bake() -> Result<()> {
    let fleet = Fleet::start(Some(BAKE), 150.0, 150.0).await?;
    let base = fleet.base.clone();
    let raised = fleet.commit_limit(400.0)?;
    let metrics = test_support::ports::free_addr();
    let mut run = fleet.spawn_run(&["--metrics-listen", &metrics.to_string()])?;

    until(GENEROUS, "r1 runs the new commit", || async {
        Ok(fleet.version("r1").await? == raised)
    })
    .await
    .with_context(|| run.output_tail(40))?;
    let s = fleet.status_json().await?;
    assert_eq!(s["state"], "running", "{s:#}");
    // During r1's bake (once it passes, wave 2 moves at once).
    for r in ["r2", "r3"] {
        assert_eq!(fleet.version(r).await?, base, "{r} waits for r1's bake");
    }
    until(GENEROUS, "wave 1 passed", || async {
        Ok(scrape(metrics)
            .await?
            .get(r#"rlc_rollout_waves_total{result="passed"}"#)
            == Some(&1.0))
    })
    .await
    .with_context(|| run.output_tail(40))?;
    assert_eq!(s["regions"][0]["region"], "r1");
    assert_eq!(s["regions"][0]["branch"], raised.as_str());
    assert_eq!(s["regions"][0]["running"][0], raised.as_str(), "{s:#}");
    for (i, r) in [(1, "r2"), (2, "r3")] {
        assert_eq!(s["regions"][i]["region"], r);
        assert_eq!(s["regions"][i]["state"], "pending", "{s:#}");
        assert_eq!(s["regions"][i]["running"][0], base.as_str(), "{s:#}");
    }

    let code = wait_exit(&mut run, GENEROUS).await?;
    let out = run.output();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("passed every wave"), "{out}");
    assert_eq!(
        fleet.versions().await?,
        [raised.as_str(), raised.as_str(), raised.as_str()]
    );
    for r in REGIONS {
        assert_eq!(
            fleet.remote.tip(&format!("regions/{r}")),
            Some(raised.clone())
        );
        let region = fleet.region(r);
        let m = scrape(region.metrics).await?;
        let key = format!(r#"grl_config_version_info{{region="{r}",version="{raised}"}}"#);
        assert_eq!(m.get(&key), Some(&1.0), "{r}: {m:#?}");
        let st = rlc::output::to_controllers::status(
            &region.addr.to_string(),
            &Default::default(),
            true,
        )
        .await?;
        let b = st
            .buckets
            .iter()
            .find(|b| b.bucket == "gateway-pay")
            .unwrap();
        assert_eq!(b.limit_rps, Some(400.0), "{r} enforces the new limit");
    }

    let history = RunLog::connect(&fleet.db).await?;
    let r = history.latest_rollout().await?.unwrap();
    assert_eq!(
        (r.state, r.commit.as_str()),
        (RolloutState::Passed, raised.as_str())
    );
    let moved = |name: &str| r.region(name).unwrap().moved_at_ms.unwrap();
    for later in ["r2", "r3"] {
        assert!(
            moved(later) - moved("r1") >= BAKE_MS,
            "{later} moved {} ms after r1, less than the bake",
            moved(later) - moved("r1")
        );
    }
    assert_eq!(
        r.waves
            .iter()
            .map(|w| w.result.as_str())
            .collect::<Vec<_>>(),
        ["passed", "passed"]
    );
    let p = &r.predictions[0];
    assert_eq!(
        (p.bucket.as_str(), p.old_limit, p.new_limit),
        ("gateway-pay", Some(300.0), Some(400.0))
    );
    assert_eq!(p.predicted_drop, Some(0.0));

    let table = fleet
        .rollout(
            ["status", "--db", &fleet.db]
                .iter()
                .map(ToString::to_string)
                .chain(
                    fleet
                        .regions
                        .iter()
                        .flat_map(|g| ["--controller".to_string(), g.addr.to_string()]),
                )
                .collect(),
        )
        .await?;
    let table = stdout(&table);
    println!("{table}");
    assert!(table.contains("passed  2 waves done"), "{table}");
    for r in REGIONS {
        assert!(
            table
                .lines()
                .any(|l| l.contains(r) && l.matches(&raised[..12]).count() == 2),
            "{r}'s branch and version are shown: {table}"
        );
    }
    Ok(())
}

/// A limit cut far below the traffic (the history said the bucket was quiet, so the cut is
/// predicted to drop nothing): r1 moves, drops ~90 %, its gate fails, r1 goes back to the
/// previous version within a bake, r2 and r3 never move; the reason names the region, the
/// bucket and both shares on standard output, in the log and in the run history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_dropping_more_than_predicted_fails_wave_1_and_r1_goes_back() -> Result<()> {
    let fleet = Fleet::start(Some(BAKE), 15.0, 200.0).await?;
    let base = fleet.base.clone();
    let cut = fleet.commit_limit(20.0)?;
    let mut run = fleet.spawn_run(&[])?;
    let line = fleet.wave_1_failed(&mut run, &base, &cut).await?;
    let out = run.output();
    assert!(
        line.contains("region r1 gate max_drop_over_prediction bucket payments/gateway-pay predicted 0.0000 observed 0."),
        "{line}"
    );
    let observed: f64 = line
        .split("observed ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no observed share: {line}"));
    assert!(observed > 0.7, "a 10x cut drops most of the load: {line}");
    assert!(
        out.contains("rollout gate failed") && out.contains("gate=max_drop_over_prediction"),
        "the log names the gate: {out}"
    );
    assert_eq!(
        fleet.versions().await?,
        [base.as_str(), base.as_str(), base.as_str()],
        "r1 is back"
    );
    assert_eq!(fleet.remote.tip("regions/r1"), Some(base.clone()));
    assert_eq!(
        fleet.remote.tip("main"),
        Some(cut.clone()),
        "main keeps the change"
    );

    let history = RunLog::connect(&fleet.db).await?;
    let r = history.latest_rollout().await?.unwrap();
    assert_eq!(r.state, RolloutState::Failed);
    assert!(
        r.reason
            .as_deref()
            .unwrap()
            .contains("payments/gateway-pay"),
        "{:?}",
        r.reason
    );
    let f = &r.waves[0].failures[0];
    assert_eq!(
        (f.region.as_str(), f.gate.as_str()),
        ("r1", "max_drop_over_prediction")
    );
    assert_eq!(f.predicted, Some(0.0));
    // The same share as the line printed above, held to the same bound (a 10x cut drops
    // 90 % once in force; the bake also counts the second the new limit takes to apply).
    assert!(f.observed.unwrap() > 0.7, "{f:?}");
    assert_eq!(r.region("r1").unwrap().state, RegionState::RolledBack);
    assert_eq!(r.region("r2").unwrap().state, RegionState::Pending);

    let table = fleet
        .rollout(vec!["status".into(), "--db".into(), fleet.db.clone()])
        .await?;
    let table = stdout(&table);
    println!("{table}");
    assert!(table.contains("failed  wave 1/2"), "{table}");
    assert!(
        table.contains("wave 1: failed")
            && table.contains("bucket payments/gateway-pay predicted 0.0000 observed 0."),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("1     r1      rolled-back")),
        "{table}"
    );

    let again = fleet.run_to_end().await?;
    assert_eq!(again.status.code(), Some(9), "{}", text(&again));
    assert!(
        stdout(&again).contains("not tried again"),
        "{}",
        text(&again)
    );
    assert_eq!(
        fleet.versions().await?,
        [base.as_str(), base.as_str(), base.as_str()]
    );
    Ok(())
}

/// The configurator killed during wave 1's bake: the next start takes the same rollout up
/// where it was (r1 stays moved, wave 1 bakes again) and finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configurator_killed_during_a_bake_resumes_the_same_rollout() -> Result<()> {
    let fleet = Fleet::start(Some("4s"), 150.0, 150.0).await?;
    let raised = fleet.commit_limit(400.0)?;
    let mut run = fleet.spawn_run(&[])?;
    until(GENEROUS, "r1 runs the new commit", || async {
        Ok(fleet.version("r1").await? == raised)
    })
    .await?;
    run.kill();
    let history = RunLog::connect(&fleet.db).await?;
    let before = history.latest_rollout().await?.unwrap();
    assert_eq!(before.state, RolloutState::Running);
    assert_eq!(before.wave, 0);
    assert_eq!(before.region("r1").unwrap().state, RegionState::Moved);
    assert_eq!(fleet.version("r2").await?, fleet.base, "nothing else moved");

    let out = fleet.run_to_end().await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stdout(&out).contains(&format!("rollout {}:", before.id)),
        "the same rollout finished: {}",
        text(&out)
    );
    assert!(
        text(&out).contains("resuming the rollout in progress"),
        "{}",
        text(&out)
    );
    let after = history.rollout(&before.id).await?.unwrap();
    assert_eq!(after.state, RolloutState::Passed);
    assert_eq!(
        after.region("r1").unwrap().moved_at_ms,
        before.region("r1").unwrap().moved_at_ms,
        "r1 was not moved again"
    );
    assert_eq!(
        fleet.versions().await?,
        [raised.as_str(), raised.as_str(), raised.as_str()]
    );
    Ok(())
}

/// A region whose controller is down cannot be observed: its wave does not pass, nothing
/// moves, and the failure is counted (`rlc_rollout_waves_total{result="failed"}`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_whose_controller_is_down_does_not_pass_and_nothing_moves() -> Result<()> {
    let mut fleet = Fleet::start(Some(BAKE), 150.0, 150.0).await?;
    let raised = fleet.commit_limit(400.0)?;
    fleet.regions[0].controller.kill();
    let history = RunLog::connect(&fleet.db).await?;
    let metrics = rlc::drive::rollout::RolloutMetrics::default();
    let settings = rlc::drive::rollout::RolloutSettings {
        config_repo: fleet.remote.url(),
        workdir: fleet::path(&fleet, "rollout-clone"),
        controllers: fleet.regions.iter().map(|r| r.addr.to_string()).collect(),
        auth: Default::default(),
        prometheus: None,
        poll: Duration::from_millis(200),
        now: Some(NOW),
        expedite: None,
        run_id: None,
        github: None,
        metrics: metrics.clone(),
    };
    let source = rlc::input::source::FileSource::open(fleet::path(&fleet, "history"))?;
    let outcomes = rlc::drive::rollout::run(&settings, &history, &source).await?;
    let Some(rlc::drive::rollout::RolloutOutcome::Failed {
        failures,
        rolled_back,
        ..
    }) = outcomes.last()
    else {
        panic!("{outcomes:?}");
    };
    assert_eq!(
        (failures[0].region.as_str(), failures[0].gate.as_str()),
        ("r1", "observable")
    );
    assert!(rolled_back.is_empty(), "nothing had moved");
    for r in REGIONS {
        assert_eq!(
            fleet.remote.tip(&format!("regions/{r}")),
            Some(fleet.base.clone()),
            "{r}"
        );
    }
    assert_ne!(fleet.version("r2").await?, raised);
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    assert!(
        out.contains(r#"rlc_rollout_waves_total{result="failed"} 1"#),
        "{out}"
    );
    Ok(())
}

/// An incident override set on every region's controller during a rollout takes effect at
/// once in every region, moved or not, and the rollout goes on (the override's `+o1`
/// version suffix is the same commit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_during_a_rollout_takes_effect_at_once_in_every_region() -> Result<()> {
    let fleet = Fleet::start(Some("4s"), 150.0, 150.0).await?;
    let raised = fleet.commit_limit(400.0)?;
    let mut run = fleet.spawn_run(&[])?;
    until(GENEROUS, "r1 runs the new commit", || async {
        Ok(fleet.version("r1").await? == raised)
    })
    .await?;
    let mut cmd = std::process::Command::new(test_support::process::target_bin("grl")?);
    cmd.args([
        "override",
        "set",
        "--service",
        "payments",
        "--caller",
        "gateway",
    ])
    .args(["--rps", "5", "--ttl", "10m", "--reason", "INC-7"]);
    for r in &fleet.regions {
        cmd.args(["--controller", &r.addr.to_string()]);
    }
    let set = tokio::task::spawn_blocking(move || cmd.output()).await??;
    assert!(set.status.success(), "{}", text(&set));
    for r in REGIONS {
        let addr = fleet.region(r).addr.to_string();
        until(
            Duration::from_secs(5),
            &format!("{r} drops by the override"),
            || {
                let addr = addr.clone();
                async move {
                    let st = rlc::output::to_controllers::status(&addr, &Default::default(), true)
                        .await?;
                    Ok(st.buckets.iter().any(|b| b.is_override && b.dropped > 0.0))
                }
            },
        )
        .await?;
    }
    assert_eq!(wait_exit(&mut run, GENEROUS).await?, 0, "{}", run.output());
    for r in REGIONS {
        let v = fleet.version(r).await?;
        assert!(v.starts_with(&format!("{raised}+o")), "{r} runs {v}");
    }
    Ok(())
}

/// Without `rollout.yaml`: today's behaviour, every region at once, and the run says so;
/// with it, `rlc run --once --mode direct` rolls its own commit out wave by wave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlc_run_without_rollout_yaml_updates_every_region_at_once_and_with_it_rolls_out()
-> Result<()> {
    let fleet = Fleet::start(None, 150.0, 150.0).await?;
    let run = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rlc"));
        cmd.args(["run", "--once", "--mode", "direct"])
            .args(fleet.drive_args())
            .args(extra)
            .env("RUST_LOG", "info");
        tokio::task::spawn_blocking(move || cmd.output())
    };
    let out = run(&["--min-coverage", "0"]).await??;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stdout(&out)
            .contains("no rollout.yaml in the config repo: every controller got main at once"),
        "{}",
        text(&out)
    );
    let head = fleet.remote.tip("main").unwrap();
    assert_ne!(head, fleet.base, "the run committed");
    assert_eq!(
        fleet.versions().await?,
        [head.as_str(), head.as_str(), head.as_str()]
    );

    fleet.remote.commit_files(
        "main",
        &[("rollout.yaml", fleet::plan("2s"))],
        "stage rollouts",
    )?;
    std::fs::write(
        fleet::path(&fleet, "history/payments/gateway-pay.csv"),
        (0..600)
            .map(|i| format!("{},{}\n", NOW - 86_400 + i * 300, 100 + i % 7))
            .collect::<String>(),
    )?;
    let out = run(&["--min-coverage", "0"]).await??;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let staged = fleet.remote.tip("main").unwrap();
    assert!(stdout(&out).contains("passed every wave"), "{}", text(&out));
    assert_eq!(
        fleet.versions().await?,
        [staged.as_str(), staged.as_str(), staged.as_str()]
    );
    let history = RunLog::connect(&fleet.db).await?;
    let r = history.rollout_of_commit(&staged).await?.unwrap();
    assert!(r.run_id.is_some(), "the run that committed is recorded");
    Ok(())
}

/// `rlc promote` (shadow → deny) goes through the waves like any change: the promoted
/// bucket is a changed bucket with a prediction, and each region enforces it only when its
/// wave comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_to_deny_rolls_out_wave_by_wave() -> Result<()> {
    let fleet = Fleet::start(Some(BAKE), 150.0, 150.0).await?;
    let promote = std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args(["promote", "payments", "batch", "--mode", "direct"])
        .args(["--config-repo", &fleet.remote.url()])
        .arg("--workdir")
        .arg(fleet::path(&fleet, "promote"))
        .output()?;
    assert!(promote.status.success(), "{}", text(&promote));
    let promoted = fleet.remote.tip("main").unwrap();
    assert_ne!(promoted, fleet.base);
    let mode = |name: &'static str| {
        let addr = fleet.region(name).addr.to_string();
        async move {
            let st = rlc::output::to_controllers::status(&addr, &Default::default(), false).await?;
            let b = st
                .buckets
                .iter()
                .find(|b| b.bucket == "batch")
                .context("batch")?;
            anyhow::Ok(b.mode)
        }
    };
    let (deny, shadow) = (
        grl_core::proto::Mode::Deny as i32,
        grl_core::proto::Mode::Shadow as i32,
    );
    assert_eq!(mode("r1").await?, shadow);
    let mut run = fleet.spawn_run(&[])?;
    until(GENEROUS, "r1 enforces batch", || async {
        Ok(mode("r1").await? == deny)
    })
    .await?;
    assert_eq!(mode("r2").await?, shadow, "r2 waits for r1's bake");
    assert_eq!(wait_exit(&mut run, GENEROUS).await?, 0, "{}", run.output());
    for r in REGIONS {
        assert_eq!(mode(r).await?, deny, "{r}");
    }
    let r = RunLog::connect(&fleet.db)
        .await?
        .latest_rollout()
        .await?
        .unwrap();
    let p = r.predictions.iter().find(|p| p.bucket == "batch").unwrap();
    assert_eq!((p.mode.as_str(), p.new_limit), ("deny", Some(50.0)));
    Ok(())
}

/// In PR mode, when the rollout of a merged pull request fails a gate, the reason is
/// commented on that pull request (through the GitHub stand-in, every request checked
/// against GitHub's description).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_pr_mode_a_failed_rollout_is_commented_on_the_merged_pull_request() -> Result<()> {
    const TOKEN: &str = "ghp_rollout_standin_0123456789";
    let fleet = Fleet::start(Some(BAKE), 15.0, 200.0).await?;
    let gh =
        test_support::github::GitHubStandIn::start(fleet.remote.path(), "acme", "config", TOKEN)
            .await?;
    fleet.remote.commit_files(
        "rlc/limits",
        &[("limits/payments.yaml", fleet::limits(20.0))],
        "rlc: rate limit changes",
    )?;
    let n = gh
        .seed("rlc/limits", "main", "rlc: rate limit changes")
        .await?;
    gh.merge(n).await?;
    let mut args: Vec<String> = std::iter::once("run".to_string())
        .chain(fleet.drive_args())
        .collect();
    args.extend(
        [
            "--mode",
            "pr",
            "--github-repo",
            "acme/config",
            "--github-api",
            &gh.api_url(),
        ]
        .map(String::from),
    );
    args.extend([
        "--github-ca".to_string(),
        gh.ca_file().display().to_string(),
    ]);
    let mut cmd = fleet.rlc(&[]);
    cmd.args(args).env("RLC_GITHUB_TOKEN", TOKEN);
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    assert_eq!(out.status.code(), Some(9), "{}", text(&out));
    assert!(!text(&out).contains(TOKEN), "the token is never shown");
    let comments = gh.comments().await?;
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert_eq!(comments[0]["number"], n);
    let body = comments[0]["body"].as_str().unwrap_or_default();
    assert!(
        body.contains("region r1 gate max_drop_over_prediction bucket payments/gateway-pay predicted 0.0000 observed 0."),
        "{body}"
    );
    let (_, violations) = gh.log().await?;
    assert!(violations.is_empty(), "{violations:#?}");
    assert_eq!(fleet.versions().await?, [fleet.base.as_str(); 3]);
    Ok(())
}
