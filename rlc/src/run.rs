//! One configurator run: database → git checkout → history → policies → guards → commit →
//! push to the controller, recorded in the run history. Anything failing before the commit
//! leaves the config repo and the controller untouched.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use grl_config::{self as config, Mode, Snapshot};
use policies::{Point, Series};
use tracing::{info, warn};

use crate::git_store::{FileChange, GitStore, Proposal, PublishMode, PublishOutcome};
use crate::guards::{GuardSettings, Outcome};
use crate::history::{History, RecommendationRecord, RunStatus};
use crate::lifecycle::{self, LifecycleSettings};
use crate::limits_file;
use crate::plan::{self, BucketPlan};
use crate::pr_description;
use crate::source::{BucketQuery, Measure, MetricsSource, fetch_all};

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
    /// The controller to push to after a direct-mode commit.
    pub controller: Option<String>,
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
}

/// A GitHub repository to open the review pull request in.
#[derive(Debug, Clone)]
pub struct GitHubTarget {
    /// API base URL, e.g. `https://api.github.com`.
    pub api_base: String,
    /// A token allowed to open pull requests.
    pub token: String,
    /// `owner/name`.
    pub repo: String,
    /// Extra PEM CA certificates to trust for the API (a private CA), beside the system's.
    pub ca_file: Option<PathBuf>,
}

/// What a successful run did.
#[derive(Debug, Clone)]
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
    /// Set when the commit landed but the controller could not be updated.
    pub push_error: Option<String>,
}

/// Why a run failed; each names the part that failed. See [`RunError::exit_code`].
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run history database.
    #[error("run history database: {0}")]
    Database(#[from] crate::history::HistoryError),
    /// The metrics source (Prometheus or files).
    #[error("metrics source: {0}")]
    Source(#[from] crate::source::SourceError),
    /// The git config repo.
    #[error("config repo: {0}")]
    Git(#[from] crate::git_store::GitStoreError),
    /// The config at the checked-out commit (or the one the run would write) is invalid.
    #[error("config: {0}")]
    Config(#[from] grl_config::ConfigErrors),
    /// The run's own machinery (a task panicked).
    #[error("internal: {0}")]
    Internal(String),
}

impl RunError {
    /// The process exit code for `rlc run --once`.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Source(_) => 3,
            RunError::Git(_) => 4,
            RunError::Database(_) => 5,
            RunError::Config(_) => 6,
            RunError::Internal(_) => 1,
        }
    }
}

/// Runs the configurator once.
pub async fn run_once(
    settings: &RunSettings,
    source: Arc<dyn MetricsSource>,
) -> Result<RunReport, RunError> {
    let started = Instant::now();
    let history = History::connect(&settings.db).await?;
    let mode_name = match settings.mode {
        PublishMode::Direct => "direct",
        PublishMode::Pr => "pr",
    };
    let run_id = history.start_run(&settings.trigger, mode_name).await?;
    info!(run = %run_id, trigger = %settings.trigger, mode = mode_name, "run started");
    let result = publish(settings, source, &run_id).await;
    match result {
        Ok((outcome, plans, description)) => {
            for p in &plans {
                history.record_recommendation(&run_id, &record(p)).await?;
            }
            let (status, commit, branch) = match &outcome {
                PublishOutcome::NoChange { .. } => (RunStatus::NoChange, None, None),
                PublishOutcome::Committed { commit, branch, .. } => (
                    RunStatus::Committed,
                    Some(commit.clone()),
                    Some(branch.clone()),
                ),
            };
            let push_error = match (
                &commit,
                settings.mode,
                &settings.controller,
                &settings.github,
            ) {
                (Some(c), PublishMode::Direct, Some(addr), _) => {
                    push_commit(settings, addr, c).await.err()
                }
                (Some(_), PublishMode::Pr, _, Some(gh)) => {
                    open_pull_request(gh, &description).await.err()
                }
                _ => None,
            };
            history
                .finish_run(&run_id, status, commit.as_deref(), push_error.as_deref())
                .await?;
            info!(
                run = %run_id,
                status = status.as_str(),
                commit = commit.as_deref().unwrap_or(""),
                buckets = plans.len(),
                seconds = started.elapsed().as_secs_f64(),
                "run finished"
            );
            Ok(RunReport {
                run_id,
                status,
                commit,
                branch,
                plans,
                description,
                push_error,
            })
        }
        Err(e) => {
            warn!(run = %run_id, error = %e, "run failed; nothing committed");
            let _ = history
                .finish_run(&run_id, RunStatus::Failed, None, Some(&e.to_string()))
                .await;
            Err(e)
        }
    }
}

type Published = (PublishOutcome, Vec<BucketPlan>, String);

async fn publish(
    settings: &RunSettings,
    source: Arc<dyn MetricsSource>,
    run_id: &str,
) -> Result<Published, RunError> {
    let settings = settings.clone();
    let run_id = run_id.to_string();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let mut store = GitStore::open(&settings.config_repo, &settings.workdir)?;
        let failure: Arc<Mutex<Option<RunError>>> = Arc::default();
        let mut last: Option<(Vec<BucketPlan>, String)> = None;
        let outcome = store.publish(settings.mode, settings.max_attempts, |checkout| {
            let built = handle.block_on(build(
                &settings,
                &*source,
                &checkout.dir,
                &checkout.commit,
                &run_id,
            ));
            match built {
                Ok((proposal, plans, description)) => {
                    last = Some((plans, description));
                    Ok(proposal)
                }
                Err(e) => {
                    let msg = e.to_string();
                    *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    Err(msg.into())
                }
            }
        });
        if let Some(e) = failure.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e);
        }
        let outcome = outcome?;
        let (plans, description) = last.unwrap_or_default();
        Ok((outcome, plans, description))
    })
    .await
    .map_err(|e| RunError::Internal(e.to_string()))?
}

/// Reads the checkout, fetches history, plans every bucket and builds the proposal.
async fn build(
    settings: &RunSettings,
    source: &dyn MetricsSource,
    dir: &std::path::Path,
    commit: &str,
    run_id: &str,
) -> Result<(Option<Proposal>, Vec<BucketPlan>, String), RunError> {
    let files = config::read_config_files(dir)
        .map_err(|e| RunError::Internal(format!("reading checkout {}: {e}", dir.display())))?;
    let service_files: Vec<_> = files
        .iter()
        .filter(|(p, _)| p.starts_with("services/"))
        .cloned()
        .collect();
    let snapshot = config::from_files(commit, service_files.clone())?;
    let limits_texts: HashMap<&str, &str> = files
        .iter()
        .filter(|(p, _)| p.starts_with("limits/"))
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let now = settings
        .now
        .unwrap_or_else(|| chrono::Utc::now().timestamp());
    let plans = plan_all(settings, source, &snapshot, &limits_texts, now, run_id).await?;

    let mut new_files: BTreeMap<String, String> = BTreeMap::new();
    for svc in snapshot.services.values() {
        let path = limits_file::path(&svc.name);
        let (_, stale) = plan::previous_limits(svc, limits_texts.get(path.as_str()).copied());
        let svc_plans: Vec<&BucketPlan> = plans.iter().filter(|p| p.service == svc.name).collect();
        if let Some(text) = plan::limits_file_for(&svc.name, &svc_plans, stale) {
            new_files.insert(path, text);
        }
    }
    let rows: Vec<_> = plans.iter().map(BucketPlan::pr_row).collect();
    let sections: Vec<_> = lifecycle_section(&plans).into_iter().collect();
    let description = pr_description::render(run_id, &rows, &sections);
    if new_files.is_empty() {
        return Ok((None, plans, description));
    }
    let mut candidate: BTreeMap<String, String> = files.into_iter().collect();
    candidate.extend(new_files.clone());
    config::from_files(commit, candidate)?;
    let changed = plans
        .iter()
        .filter(|p| matches!(p.guarded.outcome, Outcome::New | Outcome::Changed))
        .count();
    let proposal = Proposal {
        files: new_files
            .into_iter()
            .map(|(path, content)| FileChange { path, content })
            .collect(),
        message: format!(
            "rlc: update {changed} limit{}\n\nRlc-Run: {run_id}\n",
            if changed == 1 { "" } else { "s" }
        ),
        description: description.clone(),
    };
    Ok((Some(proposal), plans, description))
}

async fn plan_all(
    settings: &RunSettings,
    source: &dyn MetricsSource,
    snapshot: &Snapshot,
    limits_texts: &HashMap<&str, &str>,
    now: i64,
    run_id: &str,
) -> Result<Vec<BucketPlan>, RunError> {
    let mut targets = Vec::new();
    for svc in snapshot.services.values() {
        let path = limits_file::path(&svc.name);
        let (previous, _) = plan::previous_limits(svc, limits_texts.get(path.as_str()).copied());
        for b in svc.buckets.iter().filter(|b| plan::is_computed(b)) {
            targets.push((svc, b, previous.get(&b.name).copied()));
        }
    }
    let windows: Vec<i64> = targets
        .iter()
        .map(|(_, b, _)| plan::window_secs(b).unwrap_or(28 * 86_400))
        .collect();
    let longest = windows.iter().copied().max().unwrap_or(0);
    let queries: Vec<BucketQuery> = targets
        .iter()
        .map(|(svc, b, _)| BucketQuery {
            service: svc.name.clone(),
            bucket: b.name.clone(),
            caller: b.rule.caller.clone(),
            procedure: b.rule.procedure.as_ref().map(|p| p.as_written()),
        })
        .collect();
    info!(buckets = queries.len(), source = %source.describe(), "fetching history");
    let total = queries.len();
    let fetched = fetch_all(
        source,
        &queries,
        Measure::Offered,
        now - longest,
        now,
        settings.concurrency.max(1),
        move |done, _| {
            if done == total || done % 100 == 0 {
                info!(done, total, "history fetched");
            }
        },
    )
    .await;
    let mut plans = Vec::with_capacity(targets.len());
    let mut offered = Vec::with_capacity(targets.len());
    for ((svc, bucket, previous), series) in targets.into_iter().zip(fetched) {
        let series = series?;
        offered.push(series.points.clone());
        let history = Series::new(
            series.step_secs.max(1),
            series
                .points
                .into_iter()
                .map(|(ts, value)| Point { ts, value })
                .collect(),
        );
        plans.push(plan::plan_bucket(
            &svc.name,
            bucket,
            previous,
            &history,
            now,
            &settings.guards,
            run_id,
        ));
    }
    lifecycle(source, &mut plans, &offered, limits_texts, now).await?;
    Ok(plans)
}

/// Shadow buckets: days in shadow (kept as `shadow_since` evidence) and virtual drops;
/// enforced buckets: drops against what their backtest predicted.
async fn lifecycle(
    source: &dyn MetricsSource,
    plans: &mut [BucketPlan],
    offered: &[Vec<(i64, f64)>],
    limits_texts: &HashMap<&str, &str>,
    now: i64,
) -> Result<(), RunError> {
    let settings = LifecycleSettings::default();
    let since = now - (settings.min_days * 86_400.0) as i64;
    let mut previous: HashMap<String, _> = HashMap::new();
    for p in plans.iter() {
        let path = limits_file::path(&p.service);
        previous.entry(p.service.clone()).or_insert_with(|| {
            plan::previous_evidence(&p.service, limits_texts.get(path.as_str()).copied())
        });
    }
    for (measure, mode) in [
        (Measure::ShadowDropped, Mode::Shadow),
        (Measure::Dropped, Mode::Deny),
    ] {
        let idx: Vec<usize> = (0..plans.len())
            .filter(|&i| plans[i].mode == mode && plans[i].guarded.limit.is_some())
            .collect();
        let queries: Vec<BucketQuery> = idx.iter().map(|&i| query_of(&plans[i])).collect();
        let drops = fetch_all(source, &queries, measure, since, now, 8, |_, _| {}).await;
        for (&i, d) in idx.iter().zip(drops) {
            let d = d?;
            let fraction = lifecycle::drop_fraction(&offered[i], &d.points, since);
            let p = &mut plans[i];
            let verdict = if mode == Mode::Shadow {
                let shadow_since = previous
                    .get(&p.service)
                    .and_then(|m| m.get(&p.bucket))
                    .and_then(|ev| ev.get("shadow_since"))
                    .and_then(serde_json::Value::as_i64)
                    .unwrap_or(now);
                p.evidence
                    .insert("shadow_since".into(), shadow_since.into());
                lifecycle::shadow_verdict(&settings, shadow_since, now, fraction)
            } else {
                let expected = p.backtest.as_ref().map(|b| b.exceedance_rate);
                lifecycle::deny_verdict(&settings, fraction, expected)
            };
            p.lifecycle = Some(verdict);
        }
    }
    Ok(())
}

fn query_of(p: &BucketPlan) -> BucketQuery {
    BucketQuery {
        service: p.service.clone(),
        bucket: p.bucket.clone(),
        caller: p.caller.clone(),
        procedure: p.procedure.clone(),
    }
}

/// The review section of the shadow → deny lifecycle.
fn lifecycle_section(plans: &[BucketPlan]) -> Option<(String, String)> {
    let mut rows = String::from(
        "| bucket | mode | verdict | drops (7 d) | days in shadow | why |\n|---|---|---|---:|---:|---|\n",
    );
    let mut any = false;
    for p in plans {
        let Some(v) = &p.lifecycle else { continue };
        if v.status == "ok" {
            continue;
        }
        any = true;
        rows.push_str(&format!(
            "| {}/{} | {} | {} | {:.3}% | {} | {} |\n",
            p.service,
            p.bucket,
            p.mode,
            v.status,
            v.drop_fraction * 100.0,
            v.days_in_shadow.map_or("—".into(), |d| format!("{d:.1}")),
            v.reason.replace('|', "\\|")
        ));
    }
    any.then(|| ("Shadow → deny".to_string(), rows))
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

async fn push_commit(settings: &RunSettings, addr: &str, commit: &str) -> Result<(), String> {
    let repo = settings.config_repo.clone();
    let workdir = settings.workdir.clone();
    let c = commit.to_string();
    let files = tokio::task::spawn_blocking(move || -> Result<Vec<(String, String)>, String> {
        let store = GitStore::open(&repo, &workdir).map_err(|e| e.to_string())?;
        let mut files = store
            .files_under(&c, "services")
            .map_err(|e| e.to_string())?;
        files.extend(store.files_under(&c, "limits").map_err(|e| e.to_string())?);
        Ok(files)
    })
    .await
    .map_err(|e| e.to_string())??;
    match crate::push::apply_config(addr, commit, files).await {
        Ok(resp) => {
            info!(controller = addr, version = %resp.version, buckets = resp.buckets, "controller updated");
            Ok(())
        }
        Err(e) => {
            warn!(controller = addr, error = %e, "controller push failed; it will pick the commit up from the repo");
            Err(e.to_string())
        }
    }
}

async fn open_pull_request(gh: &GitHubTarget, body: &str) -> Result<(), String> {
    let client = crate::github::GitHubClient::with_extra_ca(
        &gh.api_base,
        &gh.token,
        &gh.repo,
        gh.ca_file.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    match client
        .upsert_pull_request(
            crate::git_store::PR_BRANCH,
            crate::git_store::MAIN_BRANCH,
            "rlc: rate limit changes",
            body,
        )
        .await
    {
        Ok(pr) => {
            info!(url = %pr.url, number = pr.number, created = pr.created, "pull request up to date");
            Ok(())
        }
        Err(e) => {
            warn!(error = %e, "opening the pull request failed; the branch is pushed");
            Err(e.to_string())
        }
    }
}
