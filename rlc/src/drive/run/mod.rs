//! One configurator run, flowing one way: read the checkout → fetch history → plan → guards
//! → render files → commit and push → deliver (controller or pull request) → record.
//!
//! The git work runs on blocking threads ([`tokio::task::spawn_blocking`]) that return
//! values; the orchestration stays async. The git step only writes and pushes: when the
//! branch moved under the run (someone pushed after the fetch), the run reads the new
//! checkout and plans again only the services whose files changed, from the history already
//! fetched ([`checkout`]). Anything failing before the push leaves the config repo and the
//! controller untouched; every failure is a typed [`RunError`] that maps to an exit code.
//!
//! At fleet size: history goes through the history cache ([`crate::input::cache`]), so a run
//! fetches only what is new since the last one and holds one service's history at a time;
//! the run history records only the buckets whose decision changed
//! ([`RunLog::finish_run_recording_changes`]) and old runs are pruned by
//! `history_retention`; [`progress`] shows the phase and buckets done, and times each phase.
//!
//! Crash safety: a run holds its work directory's lock (an `flock`, gone with the process)
//! and heartbeats its history row; the next run clears git lock files a killed run left,
//! and marks `running` rows of dead runs `aborted`. A run that commits nothing still checks
//! that the controller runs `main`'s version, and pushes it if not (a run whose delivery
//! failed is made good by the next one).

mod checkout;
mod error;
mod lock;
mod metrics;
mod one_bucket;
pub mod progress;
mod render;
mod sync;
#[cfg(test)]
mod tests;

use crate::drive::exit;
pub use crate::output::deliver::DeliveryError;
use crate::output::github::GitHubTarget;
pub use error::RunError;
pub use one_bucket::{BucketNow, OneBucketError, plan_bucket_now};
pub use progress::{Progress, ProgressMode};
pub use sync::FetchStats;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::decide::guards::GuardSettings;
use crate::decide::plan::BucketPlan;
use crate::input::cache::HistoryCache;
use crate::input::source::MetricsSource;
use crate::output::git_store::{Checkout, GitStore, GitStoreError, PublishMode, PushOutcome};
use crate::run_log::{RecommendationRecord, RunLog, RunStatus};
use checkout::{Planned, Planner};

/// Everything a run needs to know.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The config repo remote (URL or path).
    pub config_repo: String,
    /// Where the local clone lives.
    pub workdir: PathBuf,
    /// Commit to `main` or to the review branch.
    pub mode: PublishMode,
    /// Run history database URL (`sqlite://…` or `postgres://…`).
    pub db: String,
    /// The controllers to push to after a direct-mode commit (several for a region's
    /// active/standby controllers; none: no push).
    pub controllers: Vec<String>,
    /// TLS and bearer token for the controller push.
    pub controller_auth: crate::output::to_controllers::ControllerAuth,
    /// Guard thresholds.
    pub guards: GuardSettings,
    /// Concurrent history queries.
    pub concurrency: usize,
    /// "now" for the run (unix seconds); `None` = the wall clock.
    pub now: Option<i64>,
    /// What started the run: `manual`, `schedule`, `commit <id>`.
    pub trigger: String,
    /// Attempts when `main` moved under the run.
    pub max_attempts: u32,
    /// Where to open or update the pull request in PR mode (none: the branch only).
    pub github: Option<GitHubTarget>,
    /// The history cache's directory (none: a temporary one, for this run only).
    pub history_cache: Option<PathBuf>,
    /// Runs older than this are deleted from the run history at the end of each run (none:
    /// kept forever).
    pub history_retention: Option<Duration>,
    /// How the run shows its progress.
    pub progress: ProgressMode,
    /// Where each phase's time is observed (`rlc serve`'s metrics), if anywhere.
    pub metrics: Option<Arc<crate::drive::serve_metrics::RlcMetrics>>,
}

/// The most time a run spends pruning the run history; the rest is pruned by the next run.
pub const PRUNE_BUDGET: Duration = Duration::from_secs(10);

/// What a successful run did.
#[derive(Debug)]
pub struct RunReport {
    /// The run's id in the history.
    pub run_id: String,
    /// Committed or nothing to do.
    pub status: RunStatus,
    /// The commit made, if any.
    pub commit: Option<String>,
    /// The branch it went to.
    pub branch: Option<String>,
    /// Every bucket's decision.
    pub plans: Vec<BucketPlan>,
    /// The review text (Markdown).
    pub description: String,
    /// Set when the commit landed but the controller (or the pull request) could not be
    /// updated.
    pub push_error: Option<DeliveryError>,
    /// Fetch → plan → push rounds (1 unless the branch moved under the run).
    pub attempts: u32,
    /// Pushes refused because someone pushed to the branch after the run's fetch (each was
    /// followed by a re-read; nothing of theirs was overwritten).
    pub push_conflicts: u32,
    /// Services planned again after such a re-read because their files had changed.
    pub replanned: Vec<String>,
    /// Runs found left `running` by a dead process and marked `aborted` by this run.
    pub aborted_runs: Vec<String>,
    /// Set when nothing was committed but the controller ran another version than `main`
    /// and was sent `main`'s config.
    pub resynced_controller: bool,
    /// `main` has a `rollout.yaml`: the controllers were left to the staged rollout
    /// ([`crate::drive::rollout`]), which the caller runs next.
    pub staged_rollout: bool,
    /// Seconds each phase took (checkout, fetch, plan, commit, deliver, record, prune).
    pub phases: Vec<(&'static str, f64)>,
    /// How the history was fetched (in full, incrementally) and the cache's size.
    pub fetches: FetchStats,
    /// Recommendations written to the run history (the buckets whose decision changed).
    pub recorded: usize,
    /// Old runs deleted from the run history by retention.
    pub pruned_runs: u64,
    /// Forecast demand above planned capacity, by service (see [`crate::input::capacity`]).
    pub shortfalls: Vec<crate::decide::shortfall::Shortfall>,
}

impl RunReport {
    /// The process exit code for `rlc run --once` (see [`exit`]).
    pub fn exit_code(&self) -> i32 {
        if self.push_error.is_some() {
            exit::DELIVERY
        } else {
            exit::OK
        }
    }
}

/// Runs the configurator once.
pub async fn run_once(
    settings: &RunSettings,
    source: Arc<dyn MetricsSource>,
) -> Result<RunReport, RunError> {
    let started = Instant::now();
    let lock = lock::WorkdirLock::acquire(&settings.workdir)?;
    let cleared = crate::output::git_store::clear_stale_locks(&settings.workdir);
    let history = RunLog::connect(&settings.db).await?;
    let aborted_runs = history.abort_stale_runs().await?;
    let mode_name = match settings.mode {
        PublishMode::Direct => "direct",
        PublishMode::Pr => "pr",
    };
    let run_id = history.start_run(&settings.trigger, mode_name).await?;
    let _heartbeat = Heartbeat::start(history.clone(), run_id.clone());
    let mut progress = Progress::start(&run_id, settings.progress, settings.metrics.clone());
    info!(
        run = %run_id,
        trigger = %settings.trigger,
        mode = mode_name,
        lock = %lock.path().display(),
        stale_git_locks_removed = cleared.len(),
        aborted_runs = aborted_runs.len(),
        "run started"
    );
    let (cache, _temporary_cache) = open_cache(settings)?;
    let published = match publish(settings, &*source, cache, &run_id, &history, &progress).await {
        Ok(p) => p,
        Err(e) => {
            let status = match e {
                RunError::NoData { .. } => RunStatus::NoData,
                _ => RunStatus::Failed,
            };
            progress.finish();
            warn!(run = %run_id, status = status.as_str(), error = %e, "run failed; nothing committed");
            if let Err(db) = history
                .finish_run(&run_id, status, None, Some(&e.to_string()))
                .await
            {
                warn!(run = %run_id, error = %db, "recording the failed run failed");
            }
            return Err(e);
        }
    };
    let plans: Vec<BucketPlan> = published.planned.plans().cloned().collect();
    let shortfalls: Vec<_> = published.planned.shortfalls().cloned().collect();
    let (status, commit, branch) = match &published.pushed {
        None => (RunStatus::NoChange, None, None),
        Some((commit, branch)) => (
            RunStatus::Committed,
            Some(commit.clone()),
            Some(branch.clone()),
        ),
    };
    progress.phase("deliver", 0);
    let mut resynced_controller = false;
    // With rollout.yaml the regions' controllers are moved by the staged rollout
    // (crate::drive::rollout), which the caller runs after the run; not all at once here.
    let staged_rollout = published
        .store
        .file_at(&published.planned.commit, crate::drive::rollout::PLAN_FILE)
        .is_ok_and(|f| f.is_some());
    let controllers: &[String] = if staged_rollout {
        &[]
    } else {
        &settings.controllers
    };
    let push_error = match (&commit, settings.mode, &settings.github) {
        (Some(c), PublishMode::Direct, _) if !controllers.is_empty() => {
            crate::output::deliver::push_commit(
                published.store,
                controllers,
                &settings.controller_auth,
                c,
            )
            .await
            .err()
        }
        (None, PublishMode::Direct, _) if !controllers.is_empty() => {
            match crate::output::deliver::resync(
                published.store,
                controllers,
                &settings.controller_auth,
                &published.planned.commit,
            )
            .await
            {
                Ok(pushed) => {
                    resynced_controller = pushed;
                    None
                }
                Err(e) => Some(e),
            }
        }
        (Some(_), PublishMode::Pr, Some(gh)) => {
            crate::output::deliver::open_pull_request(gh, &published.description)
                .await
                .err()
        }
        _ => None,
    };
    progress.phase("record", plans.len());
    let records: Vec<RecommendationRecord> = plans.iter().map(record).collect();
    let summary = summary(&plans, &published.fetches, &progress.timings());
    let recorded = history
        .finish_run_recording_changes(
            &run_id,
            &records,
            &summary,
            status,
            commit.as_deref(),
            push_error.as_ref().map(ToString::to_string).as_deref(),
        )
        .await?;
    drop(records);
    let pruned_runs = match settings.history_retention {
        Some(keep) => {
            progress.phase("prune", 0);
            let before = chrono::Utc::now()
                - chrono::Duration::from_std(keep).unwrap_or(chrono::TimeDelta::MAX);
            match history
                .prune_runs(before.timestamp_millis(), PRUNE_BUDGET)
                .await
            {
                Ok(n) => {
                    if n > 0 {
                        info!(run = %run_id, pruned_runs = n, "old runs pruned from the run history");
                    }
                    n
                }
                Err(e) => {
                    warn!(run = %run_id, error = %e, "pruning the run history failed; the next run tries again");
                    0
                }
            }
        }
        None => 0,
    };
    let phases = progress.finish();
    info!(
        run = %run_id,
        status = status.as_str(),
        commit = commit.as_deref().unwrap_or(""),
        buckets = plans.len(),
        recorded,
        attempts = published.attempts,
        push_conflicts = published.attempts - 1,
        fetched_full = published.fetches.full,
        fetched_incremental = published.fetches.incremental,
        cache_bytes = published.fetches.cache_bytes,
        phases = %phases.iter().map(|(p, s)| format!("{p}={s:.2}s")).collect::<Vec<_>>().join(" "),
        seconds = started.elapsed().as_secs_f64(),
        "run finished"
    );
    Ok(RunReport {
        run_id,
        status,
        commit,
        branch,
        plans,
        description: published.description,
        push_error,
        attempts: published.attempts,
        push_conflicts: published.attempts - 1,
        replanned: published.replanned,
        aborted_runs,
        resynced_controller,
        staged_rollout,
        phases,
        fetches: published.fetches,
        recorded,
        pruned_runs,
        shortfalls,
    })
}

/// The history cache of `settings`, or a temporary one (deleted when the guard drops).
fn open_cache(
    settings: &RunSettings,
) -> Result<(HistoryCache, Option<tempfile::TempDir>), RunError> {
    let workdir_err = |source| RunError::Workdir {
        dir: settings.workdir.display().to_string(),
        source,
    };
    match &settings.history_cache {
        Some(dir) => Ok((HistoryCache::open(dir)?, None)),
        None => {
            let tmp = tempfile::Builder::new()
                .prefix("rlc-history-cache")
                .tempdir()
                .map_err(workdir_err)?;
            Ok((HistoryCache::open(tmp.path())?, Some(tmp)))
        }
    }
}

/// The run's summary for its history row: buckets by outcome, fetches, phase times.
fn summary(
    plans: &[BucketPlan],
    fetches: &FetchStats,
    phases: &[(&str, f64)],
) -> serde_json::Value {
    let mut outcomes = std::collections::BTreeMap::<&str, usize>::new();
    for p in plans {
        *outcomes.entry(p.guarded.outcome.as_str()).or_default() += 1;
    }
    serde_json::json!({
        "buckets": plans.len(),
        "outcomes": outcomes,
        "fetches": { "full": fetches.full, "incremental": fetches.incremental, "cache_bytes": fetches.cache_bytes },
        "phases": phases.iter().map(|(p, s)| (p.to_string(), serde_json::json!(s))).collect::<serde_json::Map<_, _>>(),
    })
}

/// Updates the run's heartbeat every [`crate::run_log::HEARTBEAT_INTERVAL`] until dropped.
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Heartbeat {
    fn start(history: RunLog, run_id: String) -> Heartbeat {
        Heartbeat(tokio::spawn(async move {
            let mut tick = tokio::time::interval(crate::run_log::HEARTBEAT_INTERVAL);
            tick.tick().await;
            loop {
                tick.tick().await;
                if let Err(e) = history.heartbeat(&run_id).await {
                    warn!(run = %run_id, error = %e, "run heartbeat failed");
                }
            }
        }))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the git step left: the plans it pushed (or found already there), the commit and
/// branch if it pushed, and the clone for delivery.
struct Published {
    planned: Planned,
    description: String,
    pushed: Option<(String, String)>,
    attempts: u32,
    replanned: Vec<String>,
    store: GitStore,
    fetches: FetchStats,
}

/// Reads, plans, renders and pushes; on a branch that moved under the run, reads again and
/// re-plans the changed services, up to `settings.max_attempts` rounds. Right before each
/// push the run history is written to (the heartbeat): a database that went away mid-run
/// fails the run before anything is committed, so no commit lands without its record.
async fn publish(
    settings: &RunSettings,
    source: &dyn MetricsSource,
    cache: HistoryCache,
    run_id: &str,
    history: &RunLog,
    progress: &Progress,
) -> Result<Published, RunError> {
    let now = settings
        .now
        .unwrap_or_else(|| chrono::Utc::now().timestamp());
    let mut planner = Planner::new(source, cache, settings, now, run_id, progress);
    progress.phase("checkout", 0);
    std::fs::create_dir_all(&settings.workdir).map_err(|source| RunError::Workdir {
        dir: settings.workdir.display().to_string(),
        source,
    })?;
    let (remote, workdir) = (settings.config_repo.clone(), settings.workdir.clone());
    let store = blocking(move || GitStore::open(&remote, &workdir)).await?;
    let (mut store, (mut checkout, files)) = with_store(store, read_checkout).await?;
    let mut planned = planner.plan(&checkout.commit, files, None).await?;
    if planned.computed_buckets > 0 && planned.buckets_with_data == 0 {
        return Err(RunError::NoData {
            source_desc: source.describe(),
            buckets: planned.computed_buckets,
        });
    }
    let mut replanned: Vec<String> = Vec::new();
    let max_attempts = settings.max_attempts.max(1);
    let mut attempt = 1;
    loop {
        progress.phase("commit", 0);
        let (proposal, description) = render::proposal(&planned, run_id)?;
        let Some(proposal) = proposal else {
            info!(base = %checkout.commit, "nothing proposed");
            return Ok(Published {
                planned,
                description,
                pushed: None,
                attempts: attempt,
                replanned,
                store,
                fetches: planner.fetch_stats(),
            });
        };
        history.heartbeat(run_id).await?;
        let (mode, co) = (settings.mode, checkout.clone());
        let (s, outcome) = with_store(store, move |s| s.publish_on(&co, mode, &proposal)).await?;
        store = s;
        let (refname, reason) = match outcome {
            PushOutcome::Moved { refname, reason } => (refname, reason),
            done => {
                let pushed = match done {
                    PushOutcome::Pushed { commit, branch } => Some((commit, branch)),
                    _ => None,
                };
                return Ok(Published {
                    planned,
                    description,
                    pushed,
                    attempts: attempt,
                    replanned,
                    store,
                    fetches: planner.fetch_stats(),
                });
            }
        };
        if attempt >= max_attempts {
            return Err(store.contended(refname, attempt, reason).into());
        }
        warn!(
            refname = %refname,
            attempt,
            "branch moved under the run (someone pushed); re-reading and re-planning changed services"
        );
        attempt += 1;
        progress.phase("checkout", 0);
        let (s, (co, files)) = with_store(store, read_checkout).await?;
        store = s;
        checkout = co;
        planned = planner
            .plan(&checkout.commit, files, Some(&planned))
            .await?;
        for s in &planned.planned {
            if !replanned.contains(s) {
                replanned.push(s.clone());
            }
        }
    }
}

/// Fetches `main` and reads its config files.
fn read_checkout(store: &mut GitStore) -> Result<(Checkout, Vec<(String, String)>), GitStoreError> {
    let checkout = store.fetch()?;
    let files = store.config_files(&checkout.commit)?;
    Ok((checkout, files))
}

/// Runs `f` on a blocking thread.
async fn blocking<T, F>(f: F) -> Result<T, RunError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, GitStoreError> + Send + 'static,
{
    Ok(tokio::task::spawn_blocking(f).await??)
}

/// Runs `f` with the store on a blocking thread and gives the store back.
async fn with_store<T, F>(store: GitStore, f: F) -> Result<(GitStore, T), RunError>
where
    T: Send + 'static,
    F: FnOnce(&mut GitStore) -> Result<T, GitStoreError> + Send + 'static,
{
    let (store, result) = tokio::task::spawn_blocking(move || {
        let mut store = store;
        let result = f(&mut store);
        (store, result)
    })
    .await?;
    Ok((store, result?))
}

fn record(p: &BucketPlan) -> RecommendationRecord {
    RecommendationRecord {
        service: p.service.clone(),
        bucket: p.bucket.clone(),
        policy: p.policy.clone(),
        previous_limit: p.previous,
        proposed_limit: p.proposal.as_ref().ok().copied(),
        applied_limit: p.guarded.limit,
        outcome: p.guarded.outcome.as_str().to_string(),
        evidence: serde_json::json!({
            "evidence": p.evidence,
            "guards": p.guarded.notes,
            "refusal": p.proposal.as_ref().err(),
        }),
    }
}
