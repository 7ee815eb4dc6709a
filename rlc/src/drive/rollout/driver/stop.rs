//! How a rollout stops early: a failed gate (record it, put every region moved back), or an
//! operator's request read at every poll (pause at the next wave, abort, roll back now).

use tokio::time::Instant;
use tracing::{info, warn};

use super::{Driver, HEARTBEAT, now_ms};
use crate::drive::rollout::RolloutError;
use crate::drive::rollout::controllers;
use crate::drive::rollout::gates::GateFailure;
use crate::drive::rollout::observe::{commit_of, leader_status};
use crate::drive::rollout::outcome::RolloutOutcome;
use crate::drive::rollout::state::{RegionState, RolloutRecord, RolloutState, WaveRecord};

impl Driver<'_> {
    /// A gate failed: records why, puts every region moved back, stops the rollout.
    pub(super) async fn fail(
        &mut self,
        r: &mut RolloutRecord,
        w: usize,
        failures: Vec<GateFailure>,
    ) -> Result<RolloutOutcome, RolloutError> {
        for f in &failures {
            warn!(
                rollout = %r.id,
                wave = w + 1,
                region = %f.region,
                gate = %f.gate,
                bucket = f.bucket.as_deref().unwrap_or(""),
                predicted = ?f.predicted,
                observed = ?f.observed,
                detail = %f.detail,
                "rollout gate failed"
            );
        }
        self.history
            .record_rollout_wave(
                &r.id,
                &WaveRecord {
                    wave: w,
                    result: "failed".into(),
                    at_ms: now_ms(),
                    failures: failures.clone(),
                },
            )
            .await?;
        self.s.metrics.wave("failed");
        let rolled_back = self.roll_back(r).await?;
        let reason = format!(
            "wave {} failed: {}",
            w + 1,
            failures
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        );
        self.history
            .set_rollout_state(
                &r.id,
                &[RolloutState::Running, RolloutState::Paused],
                RolloutState::Failed,
                Some(&reason),
            )
            .await?;
        let outcome = RolloutOutcome::Failed {
            id: r.id.clone(),
            commit: r.commit.clone(),
            wave: w + 1,
            failures,
            rolled_back,
        };
        if let Some(gh) = &self.s.github {
            crate::drive::rollout::notify::comment(gh, &r.commit, &outcome.lines().join("\n"))
                .await;
        }
        Ok(outcome)
    }

    /// Puts every region this rollout moved back on the commit its branch held before, and
    /// waits (up to the apply timeout) until their controllers run it.
    async fn roll_back(
        &mut self,
        r: &mut RolloutRecord,
    ) -> Result<Vec<(String, Option<String>)>, RolloutError> {
        let views = controllers::discover(&self.s.controllers, &self.s.auth).await;
        let addrs = controllers::by_region(&views);
        let mut back = Vec::new();
        for i in 0..r.regions.len() {
            if !matches!(r.regions[i].state, RegionState::Moved | RegionState::Passed) {
                continue;
            }
            let name = r.regions[i].region.clone();
            let from = r.regions[i].from_commit.clone();
            match &from {
                Some(f) => {
                    let (g, to, at) = (name.clone(), f.clone(), r.commit.clone());
                    self.repo
                        .with(move |s| s.move_region(&g, &to, Some(&at)))
                        .await?;
                    let files = self.repo.controller_files(f).await?;
                    if let Some(a) = addrs.get(&name) {
                        controllers::apply(a, &self.s.auth, f, &files).await;
                    }
                    self.s.metrics.moved(true);
                    warn!(rollout = %r.id, region = %name, to = %f, "region rolled back");
                }
                None => {
                    warn!(rollout = %r.id, region = %name, "no previous version known; the region stays on the rolled-out commit");
                }
            }
            r.regions[i].state = RegionState::RolledBack;
            self.history
                .update_rollout_region(&r.id, &r.regions[i])
                .await?;
            back.push((name, from));
        }
        let deadline = Instant::now() + r.plan.apply_timeout;
        for (name, from) in &back {
            let (Some(f), Some(a)) = (from, addrs.get(name)) else {
                continue;
            };
            while Instant::now() < deadline {
                match leader_status(a, &self.s.auth, false, self.call_timeout()).await {
                    Ok(st) if commit_of(&st.config_version) == f => break,
                    _ => tokio::time::sleep(self.s.poll).await,
                }
            }
        }
        Ok(back)
    }

    /// Reads the operator's requests between waves: a rollback is carried out, a pause or
    /// an abort stops the driver.
    pub(super) async fn at_wave_boundary(
        &mut self,
        r: &mut RolloutRecord,
    ) -> Result<Option<RolloutOutcome>, RolloutError> {
        if let Some(out) = self.mid_wave(r).await? {
            return Ok(Some(out));
        }
        Ok(
            (r.state == RolloutState::Paused).then(|| RolloutOutcome::Paused {
                id: r.id.clone(),
                wave: r.wave + 1,
            }),
        )
    }

    /// Heartbeats, and reads the operator's requests during a wave: a rollback is carried
    /// out at once, an abort stops the driver; a pause waits for the wave's end.
    pub(super) async fn mid_wave(
        &mut self,
        r: &mut RolloutRecord,
    ) -> Result<Option<RolloutOutcome>, RolloutError> {
        if self.last_beat.elapsed() >= HEARTBEAT {
            if !self.history.rollout_heartbeat(&r.id, &self.owner).await? {
                return Err(RolloutError::Lost { id: r.id.clone() });
            }
            self.last_beat = Instant::now();
        }
        let Some(fresh) = self.history.rollout(&r.id).await? else {
            return Err(RolloutError::Lost { id: r.id.clone() });
        };
        *r = fresh;
        if r.requested.as_deref() == Some("rollback") {
            return self.operator_rollback(r).await.map(Some);
        }
        Ok(match r.state {
            RolloutState::Running | RolloutState::Paused => None,
            RolloutState::Aborted => {
                info!(rollout = %r.id, "rollout aborted by an operator; the regions stay where they are");
                Some(RolloutOutcome::Aborted { id: r.id.clone() })
            }
            _ => Some(RolloutOutcome::Aborted { id: r.id.clone() }),
        })
    }

    pub(super) async fn operator_rollback(
        &mut self,
        r: &mut RolloutRecord,
    ) -> Result<RolloutOutcome, RolloutError> {
        info!(rollout = %r.id, "rollback requested by an operator");
        let rolled_back = self.roll_back(r).await?;
        self.history
            .set_rollout_state(
                &r.id,
                &[
                    RolloutState::Running,
                    RolloutState::Paused,
                    RolloutState::Aborted,
                    RolloutState::Passed,
                ],
                RolloutState::RolledBack,
                Some("rolled back by an operator"),
            )
            .await?;
        Ok(RolloutOutcome::RolledBack {
            id: r.id.clone(),
            rolled_back,
        })
    }
}
