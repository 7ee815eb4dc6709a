//! Driving a rollout wave by wave: start one for `main`'s head (or take over the one in
//! progress), move each wave's regions, wait until their controllers run the new version,
//! bake, judge, and go on or roll back. Operators' requests (`rlc rollout pause`, `abort`,
//! `rollback`) are read from the run history at every poll ([`stop`]); a wave's steps are
//! in [`wave`].

mod stop;
mod wave;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use tokio::time::Instant;
use tracing::{info, warn};

use super::controllers::{self, ControllerView};
use super::observe::commit_of;
use super::outcome::RolloutOutcome;
use super::prediction::{self, Prediction};
use super::repo::Repo;
use super::state::{RegionRecord, RegionState, RolloutRecord, RolloutState};
use super::waves_file::{PLAN_FILE, RolloutPlan};
use super::{RolloutError, RolloutMetrics};
use crate::input::source::MetricsSource;
use crate::output::to_controllers::ControllerAuth;
use crate::run_log::{Owner, RunLog};

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
    /// `--expedite --reason`: skip the bakes (and so the gates) of the rollout this starts
    /// or takes up (an operator expedites a rollout another process drives with `rlc
    /// rollout expedite`).
    pub expedite: Option<String>,
    /// The run that committed what is rolled out, if a run drives it.
    pub run_id: Option<String>,
    /// Where the merged pull request is (PR mode), for a comment when a gate fails.
    pub github: Option<crate::output::github::GitHubTarget>,
    /// Where the waves and moves are counted.
    pub metrics: RolloutMetrics,
}

/// Drives the rollout in progress, or `main`'s head, to its end; then, when `main` moved
/// meanwhile (a change that waited), the new head. Returns each rollout's outcome.
pub async fn run(
    settings: &RolloutSettings,
    history: &RunLog,
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
    history: &RunLog,
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
            repo.with(move |s| s.move_region(&r, &c, Some(&tip)))
                .await?;
        }
    }
    let files = repo.controller_files(commit).await?;
    controllers::apply(&settings.controllers, &settings.auth, commit, &files).await;
    Ok(())
}

struct Driver<'a> {
    s: &'a RolloutSettings,
    history: &'a RunLog,
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
        Ok(self
            .history
            .claim_rollout(&r.id, &self.owner, stale)
            .await?)
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
                let mut active = active;
                if let (Some(reason), None) = (&self.s.expedite, &active.expedite_reason)
                    && self
                        .history
                        .set_rollout_expedite(&active.id, reason)
                        .await?
                {
                    info!(rollout = %active.id, reason = %reason, "rollout expedited: its remaining bakes are skipped");
                    active.expedite_reason = Some(reason.clone());
                }
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

    fn call_timeout(&self) -> Duration {
        (self.s.poll * 5).max(Duration::from_secs(2))
    }
}
