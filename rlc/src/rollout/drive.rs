//! Driving a rollout wave by wave: start one for `main`'s head (or take over the one in
//! progress), move each wave's regions, wait until their controllers run the new version,
//! bake, judge, and go on or roll back. Operators' requests (`rlc rollout pause`, `abort`,
//! `rollback`) are read from the run history at every poll.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use tokio::time::Instant;
use tracing::{info, warn};

use super::controllers::{self, ControllerView};
use super::gates::{self, GateFailure};
use super::observe::{Baseline, Observation, commit_of, leader_status};
use super::plan_file::{PLAN_FILE, RolloutPlan};
use super::prediction::{self, Prediction};
use super::repo::Repo;
use super::state::{RegionRecord, RegionState, RolloutRecord, RolloutState, WaveRecord};
use super::{EXIT_GATE_FAILED, EXIT_STOPPED, RolloutError, RolloutMetrics, query_gate};
use crate::history::{History, Owner};
use crate::push::ControllerAuth;
use crate::source::MetricsSource;

/// How often a driver shows it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// A driver silent this long is taken for dead and its rollout taken over.
pub const STALE_AFTER: Duration = Duration::from_secs(20);

/// What a rollout driver needs.
#[derive(Debug, Clone)]
pub struct RolloutSettings {
    /// The config repo (URL or path).
    pub config_repo: String,
    /// The driver's clone of it.
    pub workdir: PathBuf,
    /// Every region's controllers; each is asked its region.
    pub controllers: Vec<String>,
    /// TLS and token for the controllers.
    pub auth: ControllerAuth,
    /// Prometheus, for the `gates.prometheus` queries.
    pub prometheus: Option<String>,
    /// How often the controllers are asked during a bake.
    pub poll: Duration,
    /// "now" for the predictions' history (unix seconds); `None`: the wall clock.
    pub now: Option<i64>,
    /// `--expedite --reason`: skip the bakes (and so the gates) of a rollout this starts.
    pub expedite: Option<String>,
    /// The run that committed what is rolled out, if a run drives it.
    pub run_id: Option<String>,
    /// Where the merged pull request is (PR mode), for a comment when a gate fails.
    pub github: Option<crate::run::GitHubTarget>,
    /// Where the waves and moves are counted.
    pub metrics: RolloutMetrics,
}

/// How one rollout ended (or why none ran).
#[derive(Debug, Clone, PartialEq)]
pub enum RolloutOutcome {
    /// No `rollout.yaml` at `main`'s head: every region gets `main` at once.
    NoPlan {
        /// `main`'s head.
        commit: String,
    },
    /// Every region runs `main`'s head already.
    UpToDate {
        /// `main`'s head.
        commit: String,
    },
    /// Every wave passed.
    Passed {
        /// The rollout.
        id: String,
        /// The commit rolled out.
        commit: String,
    },
    /// A gate failed; the regions moved were put back.
    Failed {
        /// The rollout.
        id: String,
        /// The commit.
        commit: String,
        /// The wave (1-based).
        wave: usize,
        /// Every failure found.
        failures: Vec<GateFailure>,
        /// The regions put back, and the commit each runs again.
        rolled_back: Vec<(String, Option<String>)>,
    },
    /// An operator paused it; it resumes after `rlc rollout resume`.
    Paused {
        /// The rollout.
        id: String,
        /// The next wave (1-based).
        wave: usize,
    },
    /// An operator aborted it.
    Aborted {
        /// The rollout.
        id: String,
    },
    /// An operator rolled it back.
    RolledBack {
        /// The rollout.
        id: String,
        /// The regions put back.
        rolled_back: Vec<(String, Option<String>)>,
    },
    /// Another live process drives the rollout in progress; `main`'s head waits for it.
    InProgressElsewhere {
        /// The rollout.
        id: String,
        /// Its commit.
        commit: String,
        /// Its driver.
        owner: String,
    },
    /// `main`'s head was rolled out before and that rollout did not pass; it is not tried
    /// again (a new commit is).
    AlreadyDone {
        /// The rollout.
        id: String,
        /// The commit.
        commit: String,
        /// How it ended.
        state: RolloutState,
    },
}

impl RolloutOutcome {
    /// The process exit code: 0 done (or waiting for another driver), 9 a gate failed,
    /// 10 paused or stopped by an operator.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Failed { .. }
            | Self::AlreadyDone {
                state: RolloutState::Failed,
                ..
            } => EXIT_GATE_FAILED,
            Self::Paused { .. }
            | Self::Aborted { .. }
            | Self::RolledBack { .. }
            | Self::AlreadyDone { .. } => EXIT_STOPPED,
            Self::NoPlan { .. }
            | Self::UpToDate { .. }
            | Self::Passed { .. }
            | Self::InProgressElsewhere { .. } => 0,
        }
    }

    /// What to print, one line per fact.
    pub fn lines(&self) -> Vec<String> {
        let back = |rb: &[(String, Option<String>)]| {
            rb.iter()
                .map(|(r, c)| format!("{r} → {}", c.as_deref().map_or("(none)", short)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Self::NoPlan { commit } => vec![format!(
                "no {PLAN_FILE} in the config repo: every region gets {} at once (no staged rollout)",
                short(commit)
            )],
            Self::UpToDate { commit } => {
                vec![format!("rollout: every region runs {} already", short(commit))]
            }
            Self::Passed { id, commit } => {
                vec![format!("rollout {id}: {} passed every wave", short(commit))]
            }
            Self::Failed {
                id,
                commit,
                wave,
                failures,
                rolled_back,
            } => {
                let mut out: Vec<String> = failures
                    .iter()
                    .map(|f| format!("rollout {id}: wave {wave} failed: {f}"))
                    .collect();
                out.push(format!(
                    "rollout {id}: {} stopped; rolled back: {}",
                    short(commit),
                    back(rolled_back)
                ));
                out
            }
            Self::Paused { id, wave } => vec![format!(
                "rollout {id}: paused before wave {wave} (rlc rollout resume continues it)"
            )],
            Self::Aborted { id } => vec![format!(
                "rollout {id}: aborted; the regions stay where they are"
            )],
            Self::RolledBack { id, rolled_back } => vec![format!(
                "rollout {id}: rolled back: {}",
                back(rolled_back)
            )],
            Self::InProgressElsewhere { id, commit, owner } => vec![format!(
                "rollout {id} of {} is in progress ({owner} drives it); main's head waits for it",
                short(commit)
            )],
            Self::AlreadyDone { id, commit, state } => vec![format!(
                "rollout {id} of main's head {} ended {}; not tried again (a new commit is)",
                short(commit),
                state.as_str()
            )],
        }
    }
}

/// The first 12 characters of a commit id.
pub fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

/// Drives the rollout in progress, or `main`'s head, to its end; then, when `main` moved
/// meanwhile (a change that waited), the new head. Returns each rollout's outcome.
pub async fn run(
    settings: &RolloutSettings,
    history: &History,
    source: &dyn MetricsSource,
) -> Result<Vec<RolloutOutcome>, RolloutError> {
    let repo = Repo::open(&settings.config_repo, &settings.workdir).await?;
    let mut driver = Driver {
        s: settings,
        history,
        repo,
        owner: Owner::current().to_string(),
        last_beat: Instant::now(),
    };
    let mut outcomes = Vec::new();
    loop {
        let outcome = driver.drive_one(source).await?;
        for line in outcome.lines() {
            info!(rollout_outcome = %line, "rollout");
        }
        let again = matches!(outcome, RolloutOutcome::Passed { .. });
        outcomes.push(outcome);
        if !again {
            return Ok(outcomes);
        }
    }
}

/// Rolls back rollout `id` now (`rlc rollout rollback` when no live process drives it):
/// every region it moved goes back to the commit its branch held before.
pub async fn rollback_now(
    settings: &RolloutSettings,
    history: &History,
    id: &str,
) -> Result<RolloutOutcome, RolloutError> {
    let repo = Repo::open(&settings.config_repo, &settings.workdir).await?;
    let mut driver = Driver {
        s: settings,
        history,
        repo,
        owner: Owner::current().to_string(),
        last_beat: Instant::now(),
    };
    let Some(mut r) = history.rollout(id).await? else {
        return Err(RolloutError::Lost { id: id.to_string() });
    };
    if !driver.claim(&r).await? {
        return Ok(RolloutOutcome::InProgressElsewhere {
            owner: r.owner.clone().unwrap_or_default(),
            id: r.id,
            commit: r.commit,
        });
    }
    let outcome = driver.operator_rollback(&mut r).await;
    let _ = history.release_rollout(id, &driver.owner).await;
    outcome
}

/// Sends `main`'s head to every controller at once (no `rollout.yaml`: today's behaviour)
/// and moves the existing branch of each region found to it, so that a controller
/// following its region's branch keeps the same version after a restart.
pub async fn all_at_once(settings: &RolloutSettings, commit: &str) -> Result<(), RolloutError> {
    let mut repo = Repo::open(&settings.config_repo, &settings.workdir).await?;
    let views = controllers::discover(&settings.controllers, &settings.auth).await;
    for region in controllers::by_region(&views).keys() {
        let (r, c) = (region.clone(), commit.to_string());
        let tip = repo.with(move |s| s.region_tip(&r)).await?;
        if let Some(tip) = tip.filter(|t| t != commit) {
            let r = region.clone();
            repo.with(move |s| s.move_region(&r, &c, Some(&tip))).await?;
        }
    }
    let files = repo.controller_files(commit).await?;
    controllers::apply(&settings.controllers, &settings.auth, commit, &files).await;
    Ok(())
}

struct Driver<'a> {
    s: &'a RolloutSettings,
    history: &'a History,
    repo: Repo,
    owner: String,
    last_beat: Instant,
}

/// A new sortable rollout id.
fn new_id() -> String {
    let suffix: u16 = rand::random();
    format!("{}-{suffix:04x}", Utc::now().format("%Y%m%dT%H%M%SZ"))
}

fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

impl Driver<'_> {
    async fn claim(&self, r: &RolloutRecord) -> Result<bool, RolloutError> {
        let stale = now_ms() - STALE_AFTER.as_millis() as i64;
        Ok(self.history.claim_rollout(&r.id, &self.owner, stale).await?)
    }

    async fn drive_one(
        &mut self,
        source: &dyn MetricsSource,
    ) -> Result<RolloutOutcome, RolloutError> {
        let head = self.repo.main_tip().await?;
        let mut r = match self.history.active_rollout().await? {
            Some(active) => {
                if !self.claim(&active).await? {
                    return Ok(RolloutOutcome::InProgressElsewhere {
                        owner: active.owner.clone().unwrap_or_default(),
                        id: active.id,
                        commit: active.commit,
                    });
                }
                info!(rollout = %active.id, commit = %active.commit, wave = active.wave + 1, "resuming the rollout in progress");
                active
            }
            None => match self.start(&head, source).await? {
                Ok(r) => r,
                Err(done) => return Ok(done),
            },
        };
        let outcome = self.waves(&mut r).await;
        if let Err(e) = self.history.release_rollout(&r.id, &self.owner).await {
            warn!(rollout = %r.id, error = %e, "releasing the rollout failed");
        }
        outcome
    }

    /// Records a new rollout of `head`, or says why none starts.
    async fn start(
        &mut self,
        head: &str,
        source: &dyn MetricsSource,
    ) -> Result<Result<RolloutRecord, RolloutOutcome>, RolloutError> {
        let Some(text) = self.repo.file(head, PLAN_FILE).await? else {
            return Ok(Err(RolloutOutcome::NoPlan {
                commit: head.to_string(),
            }));
        };
        let plan = RolloutPlan::parse(&text)?;
        if let Some(prev) = self.history.rollout_of_commit(head).await? {
            return Ok(Err(match prev.state {
                RolloutState::Passed => RolloutOutcome::UpToDate {
                    commit: head.to_string(),
                },
                state => RolloutOutcome::AlreadyDone {
                    id: prev.id,
                    commit: prev.commit,
                    state,
                },
            }));
        }
        let views = controllers::discover(&self.s.controllers, &self.s.auth).await;
        let mut regions = Vec::new();
        for (w, wave) in plan.waves.iter().enumerate() {
            for region in &wave.regions {
                let from = self.region_version(region, &views).await?;
                regions.push(RegionRecord {
                    region: region.clone(),
                    wave: w,
                    state: if from.as_deref() == Some(head) {
                        RegionState::Passed
                    } else {
                        RegionState::Pending
                    },
                    from_commit: from,
                    moved_at_ms: None,
                    baseline: None,
                });
            }
        }
        if regions.iter().all(|r| r.state == RegionState::Passed) {
            return Ok(Err(RolloutOutcome::UpToDate {
                commit: head.to_string(),
            }));
        }
        let predictions = self.predictions(head, &regions, source).await?;
        let now = now_ms();
        let r = RolloutRecord {
            id: new_id(),
            commit: head.to_string(),
            run_id: self.s.run_id.clone(),
            plan,
            predictions,
            state: RolloutState::Running,
            wave: 0,
            bake_started_at_ms: None,
            expedite_reason: self.s.expedite.clone(),
            reason: None,
            requested: None,
            owner: Some(self.owner.clone()),
            heartbeat_at_ms: Some(now),
            started_at_ms: now,
            finished_at_ms: None,
            regions,
            waves: Vec::new(),
        };
        if !self.history.insert_rollout(&r).await? {
            return Ok(Err(RolloutOutcome::InProgressElsewhere {
                id: String::new(),
                commit: head.to_string(),
                owner: "another configurator".into(),
            }));
        }
        info!(
            rollout = %r.id,
            commit = %r.commit,
            waves = r.plan.waves.len(),
            changed_buckets = r.predictions.len(),
            expedite = r.expedite_reason.as_deref().unwrap_or(""),
            "rollout started"
        );
        for p in &r.predictions {
            info!(rollout = %r.id, bucket = %format!("{}/{}", p.service, p.bucket), old_limit = ?p.old_limit, new_limit = ?p.new_limit, mode = %p.mode, predicted_drop = ?p.predicted_drop, "prediction");
        }
        Ok(Ok(r))
    }

    /// The commit a region runs now: its branch's tip, else the version its controllers
    /// report if the repo has that commit.
    async fn region_version(
        &mut self,
        region: &str,
        views: &[ControllerView],
    ) -> Result<Option<String>, RolloutError> {
        let r = region.to_string();
        if let Some(tip) = self.repo.with(move |s| s.region_tip(&r)).await? {
            return Ok(Some(tip));
        }
        let running = views
            .iter()
            .filter(|v| v.region.as_deref() == Some(region))
            .find_map(|v| v.version.as_deref().map(|v| commit_of(v).to_string()));
        match running {
            Some(c) => {
                let known = c.clone();
                let has = self.repo.with(move |s| Ok(s.has_commit(&known))).await?;
                Ok(has.then_some(c))
            }
            None => Ok(None),
        }
    }

    /// The changed buckets between each region's version and `head`, with predictions.
    async fn predictions(
        &mut self,
        head: &str,
        regions: &[RegionRecord],
        source: &dyn MetricsSource,
    ) -> Result<Vec<Prediction>, RolloutError> {
        let new = self.repo.snapshot(head).await?;
        let mut changed = Vec::new();
        let mut seen = BTreeSet::new();
        let froms: BTreeSet<Option<String>> = regions
            .iter()
            .filter(|r| r.state == RegionState::Pending)
            .map(|r| r.from_commit.clone())
            .collect();
        for from in froms {
            let old = match &from {
                Some(c) => self.repo.snapshot(c).await.unwrap_or_default(),
                None => grl_config::Snapshot::default(),
            };
            for (q, p) in prediction::changed_buckets(&old, &new) {
                if seen.insert((p.service.clone(), p.bucket.clone())) {
                    changed.push((q, p));
                }
            }
        }
        let now = self.s.now.unwrap_or_else(|| Utc::now().timestamp());
        Ok(prediction::predict(source, changed, now).await?)
    }

    async fn waves(&mut self, r: &mut RolloutRecord) -> Result<RolloutOutcome, RolloutError> {
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
                Step::Go => {}
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
            let baseline = match leader_status(region_addrs, &self.s.auth, true, self.call_timeout()).await {
                Ok(st) => Baseline::from_status(&st),
                Err(e) => {
                    return Ok(Err(failure(name, "observable", None, format!(
                        "the region's controllers did not answer before the move: {e}"
                    ))));
                }
            };
            let (region, commit, from) = (name.clone(), r.commit.clone(), r.regions[i].from_commit.clone());
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
                        crate::push::config_version(addr, &self.s.auth),
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
                        failure(&g, "applied", None, format!(
                            "the region's controllers did not run {} within {:?}: {why}",
                            short(&r.commit),
                            r.plan.apply_timeout
                        ))
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
                let b = r.region(g).and_then(|g| g.baseline.clone()).unwrap_or_default();
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
                    Some(url) => failures
                        .extend(query_gate::judge_queries(url, name, &r.plan.gates.prometheus).await),
                    None => failures.extend(r.plan.gates.prometheus.iter().map(|q| {
                        failure(name, &format!("prometheus:{}", q.name), None,
                            "no --prometheus to ask: the gate cannot be read".into())
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

    /// A gate failed: records why, puts every region moved back, stops the rollout.
    async fn fail(
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
            super::notify::comment(gh, &r.commit, &outcome.lines().join("\n")).await;
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
                None => warn!(rollout = %r.id, region = %name, "no previous version known; the region stays on the rolled-out commit"),
            }
            r.regions[i].state = RegionState::RolledBack;
            self.history.update_rollout_region(&r.id, &r.regions[i]).await?;
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
    async fn at_wave_boundary(
        &mut self,
        r: &mut RolloutRecord,
    ) -> Result<Option<RolloutOutcome>, RolloutError> {
        if let Some(out) = self.mid_wave(r).await? {
            return Ok(Some(out));
        }
        Ok((r.state == RolloutState::Paused).then(|| RolloutOutcome::Paused {
            id: r.id.clone(),
            wave: r.wave + 1,
        }))
    }

    /// Heartbeats, and reads the operator's requests during a wave: a rollback is carried
    /// out at once, an abort stops the driver; a pause waits for the wave's end.
    async fn mid_wave(
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

    async fn operator_rollback(
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

    fn call_timeout(&self) -> Duration {
        (self.s.poll * 5).max(Duration::from_secs(2))
    }
}

/// What a step of a wave came to.
enum Step {
    Go,
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
    let down: Vec<String> = views
        .iter()
        .filter_map(|v| v.error.clone())
        .collect();
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
