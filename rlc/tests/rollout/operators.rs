//! Operators' hands on a rollout: `rlc rollout pause`, `resume`, `rollback` and `abort`;
//! a change landing during a rollout waits for it; `--expedite --reason` on a rollout it
//! starts, and `rlc rollout expedite --reason` on one already in progress: another process
//! records the reason in the run history, the running `rlc rollout run` reads it at its next
//! poll, cuts the bake in progress short and skips the remaining ones.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rlc::drive::rollout::state::{RegionState, RolloutState};
use rlc::run_log::RunLog;

use super::fleet::{Fleet, REGIONS, text, until, wait_exit};
use super::{BAKE, BAKE_MS, GENEROUS, stdout};

/// An operator pauses (the wave in progress finishes, the next does not start), resumes
/// (driven by `rlc rollout resume` itself), rolls the passed rollout back, then aborts the
/// next one mid-wave (its regions stay where they are). The rollout's state lives in
/// PostgreSQL here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_pause_resume_roll_back_and_abort_on_postgres() -> Result<()> {
    let mut fleet = Fleet::start(Some(BAKE), 150.0, 150.0).await?;
    let pg = test_support::postgres::fresh_database()?;
    fleet.db = pg.url().to_string();
    let base = fleet.base.clone();
    let raised = fleet.commit_limit(400.0)?;
    let mut run = fleet.spawn_run(&[])?;
    until(GENEROUS, "r1 runs the new commit", || async {
        Ok(fleet.version("r1").await? == raised)
    })
    .await?;
    let paused = fleet
        .rollout(vec!["pause".into(), "--db".into(), fleet.db.clone()])
        .await?;
    assert!(paused.status.success(), "{}", text(&paused));
    assert_eq!(wait_exit(&mut run, GENEROUS).await?, 10, "{}", run.output());
    assert!(
        run.output().contains("paused before wave 2"),
        "{}",
        run.output()
    );
    assert_eq!(
        fleet.versions().await?,
        [raised.as_str(), base.as_str(), base.as_str()],
        "r2 and r3 wait"
    );
    assert_eq!(fleet.status_json().await?["state"], "paused");

    let resumed = fleet
        .rollout(
            std::iter::once("resume".to_string())
                .chain(fleet.drive_args())
                .collect(),
        )
        .await?;
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed));
    assert_eq!(
        fleet.versions().await?,
        [raised.as_str(), raised.as_str(), raised.as_str()]
    );

    let back = fleet
        .rollout(
            std::iter::once("rollback".to_string())
                .chain(fleet.drive_args())
                .collect(),
        )
        .await?;
    assert_eq!(back.status.code(), Some(0), "{}", text(&back));
    assert_eq!(
        fleet.versions().await?,
        [base.as_str(), base.as_str(), base.as_str()]
    );
    for r in REGIONS {
        assert_eq!(
            fleet.remote.tip(&format!("regions/{r}")),
            Some(base.clone()),
            "{r}"
        );
    }
    let s = fleet.status_json().await?;
    assert_eq!(s["state"], "rolled-back", "{s:#}");

    let next = fleet.commit_limit(350.0)?;
    let mut run = fleet.spawn_run(&[])?;
    until(GENEROUS, "r1 runs the next commit", || async {
        Ok(fleet.version("r1").await? == next)
    })
    .await?;
    let aborted = fleet
        .rollout(vec!["abort".into(), "--db".into(), fleet.db.clone()])
        .await?;
    assert!(aborted.status.success(), "{}", text(&aborted));
    assert_eq!(wait_exit(&mut run, GENEROUS).await?, 10, "{}", run.output());
    assert!(run.output().contains("aborted"), "{}", run.output());
    assert_eq!(
        fleet.versions().await?,
        [next.as_str(), base.as_str(), base.as_str()],
        "r1 stays, the rest never moved"
    );
    Ok(())
}

/// A commit that lands during a rollout waits for it: the driver finishes the rollout in
/// progress, then rolls out `main`'s new head; a second configurator started meanwhile
/// moves nothing and says why. An expedited rollout skips its bakes, recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_landing_during_a_rollout_waits_for_it_and_expedite_skips_the_bakes() -> Result<()>
{
    let fleet = Fleet::start(Some(BAKE), 150.0, 150.0).await?;
    let first = fleet.commit_limit(400.0)?;
    let mut run = fleet.spawn_run(&[])?;
    until(GENEROUS, "r1 runs the first commit", || async {
        Ok(fleet.version("r1").await? == first)
    })
    .await?;
    let second = fleet.commit_limit(450.0)?;
    let other = fleet.run_to_end().await?;
    assert_eq!(other.status.code(), Some(0), "{}", text(&other));
    assert!(
        stdout(&other).contains("is in progress"),
        "{}",
        text(&other)
    );
    assert_eq!(
        fleet.version("r2").await?,
        fleet.base,
        "the second driver moved nothing"
    );

    assert_eq!(wait_exit(&mut run, GENEROUS).await?, 0, "{}", run.output());
    assert_eq!(
        fleet.versions().await?,
        [second.as_str(), second.as_str(), second.as_str()]
    );
    let history = RunLog::connect(&fleet.db).await?;
    let a = history.rollout_of_commit(&first).await?.unwrap();
    let b = history.rollout_of_commit(&second).await?.unwrap();
    assert_eq!(
        (a.state, b.state),
        (RolloutState::Passed, RolloutState::Passed)
    );
    assert!(
        b.started_at_ms >= a.finished_at_ms.unwrap(),
        "the second waited for the first"
    );

    let urgent = fleet.commit_limit(500.0)?;
    let started = std::time::Instant::now();
    let mut args: Vec<String> = std::iter::once("run".to_string())
        .chain(fleet.drive_args())
        .collect();
    args.extend([
        "--expedite".into(),
        "--reason".into(),
        "INC-42 partner outage".into(),
    ]);
    let out = fleet.rollout(args).await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        started.elapsed() < Duration::from_millis(2 * BAKE_MS as u64),
        "no bake: {:?}",
        started.elapsed()
    );
    assert_eq!(
        fleet.versions().await?,
        [urgent.as_str(), urgent.as_str(), urgent.as_str()]
    );
    let c = history.rollout_of_commit(&urgent).await?.unwrap();
    assert_eq!(c.expedite_reason.as_deref(), Some("INC-42 partner outage"));
    assert!(
        c.waves.iter().all(|w| w.result == "expedited"),
        "{:?}",
        c.waves
    );
    Ok(())
}

/// Each wave's bake: far longer than the test may take.
const LONG_BAKE: Duration = Duration::from_secs(600);

/// A rollout baking 600 s per wave, expedited from another process during wave 1's bake:
/// it finishes within seconds, every region runs the change, both waves are recorded as
/// `expedited` with the operator's reason, and `rlc rollout status` shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_expedites_a_rollout_in_progress_and_its_bakes_are_skipped() -> Result<()> {
    let fleet = Fleet::start(Some("600s"), 150.0, 150.0).await?;
    let base = fleet.base.clone();
    let urgent = fleet.commit_limit(400.0)?;
    // Migrated before the driver starts, so that the two do not migrate it at once.
    let history = RunLog::connect(&fleet.db).await?;
    let mut run = fleet.spawn_run(&[])?;
    until(GENEROUS, "wave 1 bakes with r1 on the change", || async {
        let Some(r) = history.latest_rollout().await? else {
            return Ok(false);
        };
        Ok(r.state == RolloutState::Running
            && r.wave == 0
            && r.bake_started_at_ms.is_some()
            && fleet.version("r1").await? == urgent)
    })
    .await
    .with_context(|| run.output_tail(60))?;
    let before = history.latest_rollout().await?.expect("a rollout");
    assert_eq!(before.expedite_reason, None);
    assert_eq!(
        fleet.versions().await?,
        [urgent.as_str(), base.as_str(), base.as_str()],
        "r2 and r3 wait for r1's bake"
    );

    let reason = "INC-77 partner outage: raise now";
    let asked = Instant::now();
    let out = fleet
        .rollout(
            ["expedite", "--db", &fleet.db, "--reason", reason]
                .map(String::from)
                .to_vec(),
        )
        .await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        stdout(&out).contains(&format!("rollout {}: expedited", before.id)),
        "{}",
        text(&out)
    );

    let code = wait_exit(&mut run, GENEROUS).await?;
    let took = asked.elapsed();
    let output = run.output();
    assert_eq!(code, 0, "{output}");
    assert!(
        took < LONG_BAKE / 10,
        "the rollout ended {took:?} after the expedite, not after a 600 s bake: {output}"
    );
    assert!(output.contains("passed every wave"), "{output}");
    assert!(
        output.contains("bake cut short (expedited by an operator)"),
        "the log says the bake was cut short: {output}"
    );
    assert_eq!(
        fleet.versions().await?,
        [urgent.as_str(), urgent.as_str(), urgent.as_str()]
    );
    for r in REGIONS {
        assert_eq!(
            fleet.remote.tip(&format!("regions/{r}")),
            Some(urgent.clone())
        );
    }

    let after = history
        .rollout(&before.id)
        .await?
        .expect("the same rollout");
    assert_eq!(after.state, RolloutState::Passed);
    assert_eq!(after.expedite_reason.as_deref(), Some(reason));
    assert_eq!(
        after
            .waves
            .iter()
            .map(|w| w.result.as_str())
            .collect::<Vec<_>>(),
        ["expedited", "expedited"],
        "{:?}",
        after.waves
    );
    assert!(
        after.regions.iter().all(|g| g.state == RegionState::Passed),
        "{:?}",
        after.regions
    );
    let table = fleet
        .rollout(["status", "--db", &fleet.db].map(String::from).to_vec())
        .await?;
    let table = stdout(&table);
    assert!(table.contains(&format!("expedited: {reason}")), "{table}");
    assert!(table.contains("wave 1: expedited"), "{table}");

    let again = fleet
        .rollout(
            ["expedite", "--db", &fleet.db, "--reason", "too late"]
                .map(String::from)
                .to_vec(),
        )
        .await?;
    assert_ne!(again.status.code(), Some(0), "{}", text(&again));
    assert!(
        text(&again).contains("is passed: cannot expedite it"),
        "a finished rollout is not expedited: {}",
        text(&again)
    );
    Ok(())
}

/// A paused rollout resumed with `rlc rollout resume --expedite --reason`: the reason is
/// recorded on the rollout taken up and its remaining wave is not baked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_with_expedite_skips_the_remaining_bakes_of_a_paused_rollout() -> Result<()> {
    let fleet = Fleet::start(Some(BAKE), 150.0, 150.0).await?;
    let raised = fleet.commit_limit(400.0)?;
    let history = RunLog::connect(&fleet.db).await?;
    let mut run = fleet.spawn_run(&[])?;
    until(GENEROUS, "r1 runs the new commit", || async {
        Ok(fleet.version("r1").await? == raised)
    })
    .await
    .with_context(|| run.output_tail(40))?;
    let paused = fleet
        .rollout(["pause", "--db", &fleet.db].map(String::from).to_vec())
        .await?;
    assert!(paused.status.success(), "{}", text(&paused));
    assert_eq!(wait_exit(&mut run, GENEROUS).await?, 10, "{}", run.output());

    let reason = "INC-78 resume it now";
    let mut args: Vec<String> = std::iter::once("resume".to_string())
        .chain(fleet.drive_args())
        .collect();
    args.extend(["--expedite".into(), "--reason".into(), reason.into()]);
    let resumed = fleet.rollout(args).await?;
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed));
    assert!(
        text(&resumed).contains("rollout expedited: its remaining bakes are skipped"),
        "{}",
        text(&resumed)
    );
    assert_eq!(
        fleet.versions().await?,
        [raised.as_str(), raised.as_str(), raised.as_str()]
    );
    let r = history.latest_rollout().await?.context("a rollout")?;
    assert_eq!(r.state, RolloutState::Passed);
    assert_eq!(r.expedite_reason.as_deref(), Some(reason));
    assert_eq!(
        r.waves
            .iter()
            .map(|w| w.result.as_str())
            .collect::<Vec<_>>(),
        ["passed", "expedited"],
        "wave 1 baked before the pause, wave 2 did not: {:?}",
        r.waves
    );
    Ok(())
}
