//! One bucket across the last runs: the value each run left it with, read from the run
//! history, where a run records a bucket only when its decision changed
//! ([`RunLog::finish_run_recording_changes`]). A run that recorded nothing for the bucket
//! left it as the last record before it said.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{RecommendationRecord, RunLog, RunLogError, RunStatus};

/// The decision a run recorded for a bucket.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BucketDecision {
    /// The run that recorded it.
    pub run_id: String,
    /// Policy that computed the limit.
    pub policy: String,
    /// Limit before that run.
    pub previous_limit: Option<f64>,
    /// Limit the policy proposed.
    pub proposed_limit: Option<f64>,
    /// Limit written after the guards.
    pub applied_limit: Option<f64>,
    /// `new`, `changed`, `unchanged`, `kept-previous` or `no-limit`.
    pub outcome: String,
    /// The guards that acted, as `guard: what it did`.
    pub guards: Vec<String>,
}

/// One run and the bucket's value after it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BucketRun {
    /// The run's id.
    pub run_id: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// How it ended (`running` if it has not).
    pub status: RunStatus,
    /// `direct` (to `main`) or `pr` (to the review branch).
    pub mode: String,
    /// The commit it made, if any.
    pub commit: Option<String>,
    /// Whether this run recorded a decision for the bucket (its decision changed then).
    pub recorded: bool,
    /// The bucket's decision after this run: recorded by it, or the last one recorded before
    /// it. `None` for a run that decided nothing (failed, no data, aborted, running) or when
    /// no record reaches back that far (retention, a new bucket).
    pub decision: Option<BucketDecision>,
}

impl RunLog {
    /// The last `n` runs, newest first, each with `service/bucket`'s value after it.
    pub async fn bucket_runs(
        &self,
        service: &str,
        bucket: &str,
        n: usize,
    ) -> Result<Vec<BucketRun>, RunLogError> {
        let runs = self.recent_runs(n as i64).await?;
        // Each run records a bucket at most once, so the decision in force after any of the
        // last `n` runs is among the bucket's `n` latest records.
        let rows: Vec<AnyRow> = sqlx::query(
            "SELECT r.run_id, r.service, r.bucket, r.policy, r.previous_limit, \
             r.proposed_limit, r.applied_limit, r.outcome, r.evidence, u.started_at_ms \
             FROM rlc_recommendations r JOIN rlc_runs u ON u.id = r.run_id \
             WHERE r.service = $1 AND r.bucket = $2 \
             ORDER BY u.started_at_ms DESC, u.id DESC LIMIT $3",
        )
        .bind(service)
        .bind(bucket)
        .bind(n as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.query_err("list a bucket's recommendations", e))?;
        let mut records = Vec::with_capacity(rows.len());
        for row in &rows {
            let get = |e: sqlx::Error| self.query_err("read a bucket's recommendation", e);
            let run_id: String = row.try_get("run_id").map_err(get)?;
            let started: i64 = row.try_get("started_at_ms").map_err(get)?;
            records.push((started, decision(run_id, self.to_recommendation(row)?)));
        }
        Ok(runs
            .into_iter()
            .map(|run| {
                let key = (run.started_at.timestamp_millis(), run.id.as_str());
                let decided = matches!(run.status, RunStatus::Committed | RunStatus::NoChange);
                let last = records
                    .iter()
                    .find(|(started, d)| (*started, d.run_id.as_str()) <= key)
                    .map(|(_, d)| d.clone());
                BucketRun {
                    recorded: last.as_ref().is_some_and(|d| d.run_id == run.id),
                    decision: last.filter(|_| decided),
                    run_id: run.id,
                    started_at: run.started_at,
                    status: run.status,
                    mode: run.mode,
                    commit: run.commit,
                }
            })
            .collect())
    }
}

/// The decision of a stored recommendation, with its guard notes as text.
fn decision(run_id: String, rec: RecommendationRecord) -> BucketDecision {
    let guards = rec
        .evidence
        .get("guards")
        .and_then(serde_json::Value::as_array)
        .map(|notes| {
            notes
                .iter()
                .filter_map(|n| {
                    let guard = n.get("guard")?.as_str()?;
                    let detail = n.get("detail").and_then(|d| d.as_str()).unwrap_or("");
                    Some(format!("{guard}: {detail}"))
                })
                .collect()
        })
        .unwrap_or_default();
    BucketDecision {
        run_id,
        policy: rec.policy,
        previous_limit: rec.previous_limit,
        proposed_limit: rec.proposed_limit,
        applied_limit: rec.applied_limit,
        outcome: rec.outcome,
        guards,
    }
}
