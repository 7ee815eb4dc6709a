//! `rlc rollout expedite --reason TEXT` on a rollout already in progress: another process
//! records the reason in the run history, the running `rlc rollout run` reads it at its next
//! poll, cuts the bake in progress short and skips the remaining ones.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rlc::history::History;
use rlc::rollout::state::{RegionState, RolloutState};

use super::fleet::{Fleet, REGIONS, text, until, wait_exit};
use super::{GENEROUS, stdout};

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
    let history = History::connect(&fleet.db).await?;
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
