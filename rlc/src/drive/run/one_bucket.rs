//! One bucket planned now, exactly as a run plans it (the same checkout read, history fetch,
//! policy, guards and lifecycle review), without committing, pushing or recording anything:
//! what `rlc explain` shows.
//!
//! It works in a temporary clone and a temporary history cache, so it never waits for (or
//! disturbs) a run holding the work directory; only the bucket's service is fetched.

use std::sync::Arc;

use grl_config::Bucket;

use super::checkout::Planner;
use super::{Progress, ProgressMode, RunError, RunSettings, blocking, read_checkout, with_store};
use crate::decide::plan::{self, BucketPlan};
use crate::input::cache::HistoryCache;
use crate::input::source::MetricsSource;
use crate::output::git_store::GitStore;

/// Names listed in an "unknown service or bucket" error, at most.
const LISTED: usize = 30;

/// A bucket planned now.
#[derive(Debug, Clone)]
pub struct BucketNow {
    /// The `main` commit it was planned from.
    pub commit: String,
    /// The end of its window (unix seconds).
    pub now: i64,
    /// The bucket as configured.
    pub bucket: Bucket,
    /// Its plan; `None` for a bucket whose limit is fixed in the service file.
    pub plan: Option<BucketPlan>,
}

/// Why a bucket could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum OneBucketError {
    /// No such service in the config repo.
    #[error("no service `{service}` in the config repo at {commit}; its services: {known}")]
    UnknownService {
        /// The service asked for.
        service: String,
        /// The commit read.
        commit: String,
        /// The services there are.
        known: String,
    },
    /// No such bucket in the service.
    #[error("no bucket `{bucket}` in service `{service}` at {commit}; its buckets: {known}")]
    UnknownBucket {
        /// The service.
        service: String,
        /// The bucket asked for.
        bucket: String,
        /// The commit read.
        commit: String,
        /// The buckets it has.
        known: String,
    },
    /// Reading the checkout, fetching the history or planning failed, as a run would.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Plans `service/bucket` from `main` of `settings.config_repo` with `source`'s history, at
/// `settings.now` (or the wall clock), with `settings.guards`.
pub async fn plan_bucket_now(
    settings: &RunSettings,
    source: Arc<dyn MetricsSource>,
    service: &str,
    bucket: &str,
) -> Result<BucketNow, OneBucketError> {
    let scratch = tempfile::Builder::new()
        .prefix("rlc-explain")
        .tempdir()
        .map_err(|source| RunError::Workdir {
            dir: std::env::temp_dir().display().to_string(),
            source,
        })?;
    let (remote, clone) = (
        settings.config_repo.clone(),
        scratch.path().join("checkout"),
    );
    let store = blocking(move || GitStore::open(&remote, &clone)).await?;
    let (_store, (checkout, files)) = with_store(store, read_checkout).await?;
    let snapshot = grl_config::from_files(
        &checkout.commit,
        files
            .iter()
            .filter(|(p, _)| p.starts_with("services/"))
            .cloned(),
    )
    .map_err(RunError::from)?;
    let Some(svc) = snapshot.service(service) else {
        return Err(OneBucketError::UnknownService {
            service: service.to_string(),
            commit: checkout.commit,
            known: listing(snapshot.services.keys()),
        });
    };
    let Some(config) = svc.bucket(bucket).cloned() else {
        return Err(OneBucketError::UnknownBucket {
            service: service.to_string(),
            bucket: bucket.to_string(),
            commit: checkout.commit,
            known: listing(svc.buckets.iter().map(|b| &b.name)),
        });
    };
    let now = settings
        .now
        .unwrap_or_else(|| chrono::Utc::now().timestamp());
    if !plan::is_computed(&config) {
        return Ok(BucketNow {
            commit: checkout.commit,
            now,
            bucket: config,
            plan: None,
        });
    }
    let cache =
        HistoryCache::open(&scratch.path().join("history-cache")).map_err(RunError::from)?;
    let progress = Progress::start("explain", ProgressMode::Off, None);
    let mut planner = Planner::new(&*source, cache, settings, now, "explain", &progress);
    let planned = planner
        .plan_service(&checkout.commit, files, service)
        .await?;
    let plan = planned
        .service_plans(service)
        .iter()
        .find(|p| p.bucket == bucket)
        .cloned();
    Ok(BucketNow {
        commit: checkout.commit,
        now,
        bucket: config,
        plan,
    })
}

/// `a, b, c` (sorted), cut at [`LISTED`] names with how many more there are.
fn listing<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let mut names: Vec<&str> = names.map(String::as_str).collect();
    names.sort_unstable();
    if names.is_empty() {
        return "none".to_string();
    }
    let more = names.len().saturating_sub(LISTED);
    names.truncate(LISTED);
    let mut out = names.join(", ");
    if more > 0 {
        out.push_str(&format!(" and {more} more"));
    }
    out
}
