//! One wave: move its regions (each after reading its baseline), wait until their
//! controllers run the new version, bake while summing their `Status`, judge the gates.

use std::collections::BTreeMap;

use tokio::time::Instant;
use tracing::info;

use super::{Driver, now_ms};
use crate::drive::rollout::controllers::{self, ControllerView};
use crate::drive::rollout::gates::{self, GateFailure};
use crate::drive::rollout::observe::{Baseline, Observation, commit_of, leader_status};
use crate::drive::rollout::outcome::{RolloutOutcome, short};
use crate::drive::rollout::state::{RegionState, RolloutRecord, RolloutState, WaveRecord};
use crate::drive::rollout::{RolloutError, query_gate};

impl Driver<'_> {
    pub(super) async fn waves(
        &mut self,
        r: &mut RolloutRecord,
    ) -> Result<RolloutOutcome, RolloutError> {
        while r.wave < r.plan.waves.len() {
            if let Some(stop) = self.at_wave_boundary(r).await? {
                return Ok(stop);
            }
            let w = r.wave;
            let todo: Vec<String> = r
                .regions
                .iter()
                .filter(|g| g.wave == w && g.state != RegionState::Passed)
                .map(|g| g.region.clone())
                .collect();
            if todo.is_empty() {
                self.advance(r).await?;
                continue;
            }
            let views = controllers::discover(&self.s.controllers, &self.s.auth).await;
            let addrs = controllers::by_region(&views);
            let unknown: Vec<GateFailure> = todo
                .iter()
                .filter(|g| addrs.get(*g).is_none_or(Vec::is_empty))
                .map(|g| unobservable(g, &views))
                .collect();
            if !unknown.is_empty() {
                return self.fail(r, w, unknown).await;
            }
            if let Err(f) = self.move_wave(r, &todo, &addrs).await? {
                return self.fail(r, w, vec![f]).await;
            }
            match self.wait_applied(r, &todo, &addrs).await? {
                Step::Go | Step::Expedited => {}
                Step::Stop(out) => return Ok(out),
                Step::Fail(f) => return self.fail(r, w, f).await,
            }
            let now = now_ms();
            r.bake_started_at_ms = Some(now);
            self.history.set_rollout_wave(&r.id, w, Some(now)).await?;
            if let Some(reason) = r.expedite_reason.clone() {
                info!(rollout = %r.id, wave = w + 1, reason = %reason, "bake skipped (expedited)");
                self.pass(r, w, &todo, "expedited").await?;
                continue;
            }
            match self.bake(r, &todo, &addrs).await? {
                Step::Go => self.pass(r, w, &todo, "passed").await?,
                Step::Expedited => self.pass(r, w, &todo, "expedited").await?,
                Step::Stop(out) => return Ok(out),
                Step::Fail(f) => return self.fail(r, w, f).await,
            }
        }
        self.history
            .set_rollout_state(
                &r.id,
                &[RolloutState::Running, RolloutState::Paused],
                RolloutState::Passed,
                None,
            )
            .await?;
        info!(rollout = %r.id, commit = %r.commit, "rollout passed every wave");
        Ok(RolloutOutcome::Passed {
            id: r.id.clone(),
            commit: r.commit.clone(),
        })
    }

    /// Moves the wave's pending regions, each after reading its baseline.
    async fn move_wave(
        &mut self,
        r: &mut RolloutRecord,
        todo: &[String],
        addrs: &BTreeMap<String, Vec<String>>,
    ) -> Result<Result<(), GateFailure>, RolloutError> {
        let files = self.repo.controller_files(&r.commit).await?;
        for name in todo {
            let Some(i) = r.regions.iter().position(|g| &g.region == name) else {
                continue;
            };
            if r.regions[i].state != RegionState::Pending {
                continue;
            }
            let region_addrs = &addrs[name];
            let baseline =
                match leader_status(region_addrs, &self.s.auth, true, self.call_timeout()).await {
                    Ok(st) => Baseline::from_status(&st),
                    Err(e) => {
                        return Ok(Err(failure(
                            name,
                            "observable",
                            None,
                            format!("the region's controllers did not answer before the move: {e}"),
                        )));
                    }
                };
            let (region, commit, from) = (
                name.clone(),
                r.commit.clone(),
                r.regions[i].from_commit.clone(),
            );
            self.repo
                .with(move |s| s.move_region(&region, &commit, from.as_deref()))
                .await?;
            let g = &mut r.regions[i];
            g.state = RegionState::Moved;
            g.moved_at_ms = Some(now_ms());
            g.baseline = Some(baseline);
            self.history.update_rollout_region(&r.id, g).await?;
            self.s.metrics.moved(false);
            info!(rollout = %r.id, region = %name, commit = %r.commit, from = g.from_commit.as_deref().unwrap_or(""), "region moved");
            controllers::apply(region_addrs, &self.s.auth, &r.commit, &files).await;
        }
        Ok(Ok(()))
    }

    /// Waits until every controller of the wave's regions that answers runs the commit.
    async fn wait_applied(
        &mut self,
        r: &mut RolloutRecord,
        todo: &[String],
        addrs: &BTreeMap<String, Vec<String>>,
    ) -> Result<Step, RolloutError> {
        let deadline = Instant::now() + r.plan.apply_timeout;
        loop {
            let mut behind = Vec::new();
            for name in todo {
                for addr in &addrs[name] {
                    let running = tokio::time::timeout(
                        self.call_timeout(),
                        crate::output::to_controllers::config_version(addr, &self.s.auth),
                    )
                    .await;
                    match running {
                        Ok(Ok(v)) if commit_of(&v) == r.commit => {}
                        Ok(Ok(v)) => behind.push((name.clone(), format!("{addr} runs {v}"))),
                        Ok(Err(e)) => behind.push((name.clone(), e.to_string())),
                        Err(_) => behind.push((name.clone(), format!("{addr}: no answer"))),
                    }
                }
            }
            if behind.is_empty() {
                return Ok(Step::Go);
            }
            if Instant::now() >= deadline {
                let f = behind
                    .into_iter()
                    .map(|(g, why)| {
                        failure(
                            &g,
                            "applied",
                            None,
                            format!(
                                "the region's controllers did not run {} within {:?}: {why}",
                                short(&r.commit),
                                r.plan.apply_timeout
                            ),
                        )
                    })
                    .collect();
                return Ok(Step::Fail(f));
            }
            tokio::time::sleep(self.s.poll).await;
            if let Some(out) = self.mid_wave(r).await? {
                return Ok(Step::Stop(out));
            }
        }
    }

    /// Observes the wave's regions for the bake time, then judges them.
    async fn bake(
        &mut self,
        r: &mut RolloutRecord,
        todo: &[String],
        addrs: &BTreeMap<String, Vec<String>>,
    ) -> Result<Step, RolloutError> {
        let bake = r.plan.waves[r.wave].bake;
        info!(rollout = %r.id, wave = r.wave + 1, regions = %todo.join(","), bake_secs = bake.as_secs(), "baking");
        let baselines: BTreeMap<String, Baseline> = todo
            .iter()
            .map(|g| {
                let b = r
                    .region(g)
                    .and_then(|g| g.baseline.clone())
                    .unwrap_or_default();
                (g.clone(), b)
            })
            .collect();
        let mut seen: BTreeMap<String, Observation> = baselines
            .iter()
            .map(|(g, b)| (g.clone(), Observation::expecting(b)))
            .collect();
        let start = Instant::now();
        loop {
            let left = bake.saturating_sub(start.elapsed());
            tokio::time::sleep(left.min(self.s.poll)).await;
            if let Some(out) = self.mid_wave(r).await? {
                return Ok(Step::Stop(out));
            }
            if let Some(reason) = &r.expedite_reason {
                info!(rollout = %r.id, wave = r.wave + 1, reason = %reason, baked_secs = start.elapsed().as_secs(), "bake cut short (expedited by an operator)");
                return Ok(Step::Expedited);
            }
            for name in todo {
                let o = seen.get_mut(name).expect("every region observed");
                match leader_status(&addrs[name], &self.s.auth, true, self.call_timeout()).await {
                    Ok(st) if commit_of(&st.config_version) == r.commit => {
                        o.add(&st, start.elapsed());
                    }
                    Ok(st) => o.miss(format!("the region runs {}", st.config_version)),
                    Err(e) => o.miss(e),
                }
            }
            if start.elapsed() >= bake {
                break;
            }
        }
        let mut failures = Vec::new();
        for name in todo {
            failures.extend(gates::judge(
                name,
                &r.plan.gates,
                &r.predictions,
                &baselines[name],
                &seen[name],
            ));
            if !r.plan.gates.prometheus.is_empty() {
                match &self.s.prometheus {
                    Some(url) => failures.extend(
                        query_gate::judge_queries(url, name, &r.plan.gates.prometheus).await,
                    ),
                    None => failures.extend(r.plan.gates.prometheus.iter().map(|q| {
                        failure(
                            name,
                            &format!("prometheus:{}", q.name),
                            None,
                            "no --prometheus to ask: the gate cannot be read".into(),
                        )
                    })),
                }
            }
            let o = &seen[name];
            info!(rollout = %r.id, region = %name, samples = o.samples, missed = o.missed, zones = o.zones.len(), "bake observed");
        }
        Ok(if failures.is_empty() {
            Step::Go
        } else {
            Step::Fail(failures)
        })
    }

    async fn pass(
        &mut self,
        r: &mut RolloutRecord,
        w: usize,
        todo: &[String],
        result: &str,
    ) -> Result<(), RolloutError> {
        for g in r.regions.iter_mut().filter(|g| todo.contains(&g.region)) {
            g.state = RegionState::Passed;
            self.history.update_rollout_region(&r.id, g).await?;
        }
        self.history
            .record_rollout_wave(
                &r.id,
                &WaveRecord {
                    wave: w,
                    result: result.into(),
                    at_ms: now_ms(),
                    failures: Vec::new(),
                },
            )
            .await?;
        self.s.metrics.wave(result);
        info!(rollout = %r.id, wave = w + 1, regions = %todo.join(","), result, "wave done");
        self.advance(r).await
    }

    async fn advance(&mut self, r: &mut RolloutRecord) -> Result<(), RolloutError> {
        r.wave += 1;
        r.bake_started_at_ms = None;
        self.history.set_rollout_wave(&r.id, r.wave, None).await?;
        Ok(())
    }
}

/// What a step of a wave came to.
enum Step {
    Go,
    /// The bake was cut short: an operator expedited the rollout meanwhile.
    Expedited,
    Stop(RolloutOutcome),
    Fail(Vec<GateFailure>),
}

fn failure(region: &str, gate: &str, bucket: Option<String>, detail: String) -> GateFailure {
    GateFailure {
        region: region.to_string(),
        gate: gate.to_string(),
        bucket,
        predicted: None,
        observed: None,
        detail,
    }
}

/// The failure of a region none of whose controllers answered.
fn unobservable(region: &str, views: &[ControllerView]) -> GateFailure {
    let down: Vec<String> = views.iter().filter_map(|v| v.error.clone()).collect();
    failure(
        region,
        "observable",
        None,
        format!(
            "no --controller answered as a controller of this region, so nothing moved{}",
            if down.is_empty() {
                String::new()
            } else {
                format!(" (unreachable: {})", down.join("; "))
            }
        ),
    )
}
