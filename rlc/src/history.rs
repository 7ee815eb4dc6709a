//! Run history: every configurator run and the recommendation it made per bucket, kept in an
//! embedded SQLite file by default or in PostgreSQL when a `postgres://` URL is given.
//!
//! One code path serves both databases through sqlx's `Any` driver; the schema lives in the
//! root `migrations/` folder, is embedded at build time and applied by [`History::connect`].
//! Timestamps are stored as unix milliseconds (`BIGINT`) and evidence as JSON text, which both
//! databases read the same way.

mod error;
mod url;

use chrono::{DateTime, TimeZone, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyConnection, AnyPool, Connection};
use sqlx::{FromRow, Row};
use std::time::Duration;

pub use error::HistoryError;
pub use url::DatabaseUrl;

/// How long connecting to the database may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Schema of the run-history database, embedded from the workspace's `migrations/` folder.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// State of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Started and not finished (or the process died).
    Running,
    /// New limits were committed.
    Committed,
    /// The run found nothing to change.
    NoChange,
    /// The run failed; see its error.
    Failed,
}

impl RunStatus {
    /// The stored name: `running`, `committed`, `no-change` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Committed => "committed",
            RunStatus::NoChange => "no-change",
            RunStatus::Failed => "failed",
        }
    }

    /// Parses a stored name (see [`RunStatus::as_str`]).
    pub fn parse(s: &str) -> Option<RunStatus> {
        [Self::Running, Self::Committed, Self::NoChange, Self::Failed]
            .into_iter()
            .find(|st| st.as_str() == s)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One configurator run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Sortable id, e.g. `20261129T201500Z-3fa9`.
    pub id: String,
    /// What started the run (`cron`, `commit`, `manual`, ...).
    pub trigger: String,
    /// Publish mode (`direct`, `pr`, `dry-run`, ...).
    pub mode: String,
    /// When the run started (millisecond precision).
    pub started_at: DateTime<Utc>,
    /// When the run finished, if it did.
    pub finished_at: Option<DateTime<Utc>>,
    /// Current state.
    pub status: RunStatus,
    /// Commit id the run produced, if any.
    pub commit: Option<String>,
    /// Error message of a failed run.
    pub error: Option<String>,
}

/// What a run recommended for one bucket, and what it did with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecommendationRecord {
    /// Service (file `limits/<service>.yaml`).
    pub service: String,
    /// Bucket within the service.
    pub bucket: String,
    /// Policy that computed the limit.
    pub policy: String,
    /// Limit before the run.
    pub previous_limit: Option<f64>,
    /// Limit the policy proposed.
    pub proposed_limit: Option<f64>,
    /// Limit written after guards.
    pub applied_limit: Option<f64>,
    /// `changed`, `unchanged`, `kept-previous`, `refused`, ...
    pub outcome: String,
    /// Inputs and reasoning (peaks, coverage, guard decisions) as JSON.
    pub evidence: serde_json::Value,
}

/// Row shape of `rlc_runs`.
#[derive(FromRow)]
struct RunRow {
    id: String,
    trigger_source: String,
    mode: String,
    started_at_ms: i64,
    finished_at_ms: Option<i64>,
    status: String,
    commit_id: Option<String>,
    error: Option<String>,
}

/// `SELECT` of all `rlc_runs` columns, for the run queries.
macro_rules! select_runs {
    ($rest:literal) => {
        concat!(
            "SELECT id, trigger_source, mode, started_at_ms, finished_at_ms, status, commit_id, \
             error FROM rlc_runs ",
            $rest
        )
    };
}

/// Handle on the run-history database; cheap to clone.
#[derive(Debug, Clone)]
pub struct History {
    pool: AnyPool,
    db: String,
}

impl History {
    /// Connects to `url` (`sqlite://<path>`, a bare file path, or `postgres://...`), creating
    /// the SQLite file and its parent directories if needed, and applies the migrations.
    pub async fn connect(url: &str) -> Result<History, HistoryError> {
        let target = DatabaseUrl::parse(url)?;
        let db = target.display_name().clone();
        target.prepare()?;
        sqlx::any::install_default_drivers();
        let connect_err = |source| HistoryError::Connect {
            db: db.clone(),
            source,
        };
        // One direct connection first: a pool would retry until its timeout and report only
        // "pool timed out", hiding the cause (refused, bad password, unknown database, ...).
        let probe = tokio::time::timeout(
            CONNECT_TIMEOUT,
            AnyConnection::connect(target.connect_url()),
        )
        .await
        .unwrap_or_else(|_| Err(sqlx::Error::Io(std::io::ErrorKind::TimedOut.into())))
        .map_err(connect_err)?;
        let _ = probe.close().await;
        let pool = AnyPoolOptions::new()
            .max_connections(if target.is_sqlite() { 1 } else { 5 })
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect(target.connect_url())
            .await
            .map_err(connect_err)?;
        MIGRATOR
            .run(&pool)
            .await
            .map_err(|source| HistoryError::Migrate {
                db: db.clone(),
                source,
            })?;
        tracing::debug!(db = %db, "run history ready");
        Ok(History { pool, db })
    }

    /// Closes the connections (waits for them to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The database this handle talks to, without password.
    pub fn database(&self) -> &str {
        &self.db
    }

    /// Records the start of a run and returns its new id.
    pub async fn start_run(&self, trigger: &str, mode: &str) -> Result<String, HistoryError> {
        let now = Utc::now();
        let mut attempt = 0;
        loop {
            let id = new_run_id(now);
            let res = sqlx::query(
                "INSERT INTO rlc_runs (id, trigger_source, mode, started_at_ms, status) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&id)
            .bind(trigger)
            .bind(mode)
            .bind(now.timestamp_millis())
            .bind(RunStatus::Running.as_str())
            .execute(&self.pool)
            .await;
            match res {
                Ok(_) => return Ok(id),
                Err(e) if attempt < 5 && is_unique_violation(&e) => attempt += 1,
                Err(source) => return Err(self.query_err("start run", source)),
            }
        }
    }

    /// Records (or replaces) the recommendation for one bucket of a run.
    pub async fn record_recommendation(
        &self,
        run_id: &str,
        rec: &RecommendationRecord,
    ) -> Result<(), HistoryError> {
        sqlx::query(
            "INSERT INTO rlc_recommendations (run_id, service, bucket, policy, previous_limit, \
             proposed_limit, applied_limit, outcome, evidence) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (run_id, service, bucket) DO UPDATE SET policy = excluded.policy, \
             previous_limit = excluded.previous_limit, proposed_limit = excluded.proposed_limit, \
             applied_limit = excluded.applied_limit, outcome = excluded.outcome, \
             evidence = excluded.evidence",
        )
        .bind(run_id)
        .bind(&rec.service)
        .bind(&rec.bucket)
        .bind(&rec.policy)
        .bind(rec.previous_limit)
        .bind(rec.proposed_limit)
        .bind(rec.applied_limit)
        .bind(&rec.outcome)
        .bind(rec.evidence.to_string())
        // sqlx 0.9's Any driver sends a NULL f64 as float4; a cached (persistent) statement
        // would then keep float4 and reject the next non-NULL f64 on PostgreSQL. An unnamed
        // statement is typed from each call's own arguments.
        .persistent(false)
        .execute(&self.pool)
        .await
        .map_err(|e| self.query_err("record recommendation", e))?;
        Ok(())
    }

    /// Marks a run finished with `status`, the commit it produced and its error, if any.
    pub async fn finish_run(
        &self,
        run_id: &str,
        status: RunStatus,
        commit: Option<&str>,
        error: Option<&str>,
    ) -> Result<(), HistoryError> {
        let done = sqlx::query(
            "UPDATE rlc_runs SET finished_at_ms = $1, status = $2, commit_id = $3, error = $4 \
             WHERE id = $5",
        )
        .bind(Utc::now().timestamp_millis())
        .bind(status.as_str())
        .bind(commit)
        .bind(error)
        .bind(run_id)
        .execute(&self.pool)
        .await
        .map_err(|e| self.query_err("finish run", e))?;
        if done.rows_affected() == 0 {
            return Err(HistoryError::UnknownRun {
                db: self.db.clone(),
                run_id: run_id.into(),
            });
        }
        Ok(())
    }

    /// One run by id.
    pub async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, HistoryError> {
        let row: Option<RunRow> = sqlx::query_as(select_runs!("WHERE id = $1"))
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.query_err("read run", e))?;
        row.map(|r| self.to_record(r)).transpose()
    }

    /// The `limit` most recent runs, newest first.
    pub async fn recent_runs(&self, limit: i64) -> Result<Vec<RunRecord>, HistoryError> {
        let sql = select_runs!("ORDER BY started_at_ms DESC, id DESC LIMIT $1");
        let rows: Vec<RunRow> = sqlx::query_as(sql)
            .bind(limit.max(0))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.query_err("list runs", e))?;
        rows.into_iter().map(|r| self.to_record(r)).collect()
    }

    /// The recommendations of a run, ordered by service and bucket.
    pub async fn recommendations(
        &self,
        run_id: &str,
    ) -> Result<Vec<RecommendationRecord>, HistoryError> {
        let rows: Vec<AnyRow> = sqlx::query(
            "SELECT service, bucket, policy, previous_limit, proposed_limit, applied_limit, \
             outcome, evidence FROM rlc_recommendations WHERE run_id = $1 \
             ORDER BY service, bucket",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.query_err("list recommendations", e))?;
        rows.iter().map(|row| self.to_recommendation(row)).collect()
    }

    fn to_recommendation(&self, row: &AnyRow) -> Result<RecommendationRecord, HistoryError> {
        let get = |e: sqlx::Error| self.query_err("read recommendation", e);
        let evidence: String = row.try_get("evidence").map_err(get)?;
        Ok(RecommendationRecord {
            service: row.try_get("service").map_err(get)?,
            bucket: row.try_get("bucket").map_err(get)?,
            policy: row.try_get("policy").map_err(get)?,
            previous_limit: row.try_get("previous_limit").map_err(get)?,
            proposed_limit: row.try_get("proposed_limit").map_err(get)?,
            applied_limit: row.try_get("applied_limit").map_err(get)?,
            outcome: row.try_get("outcome").map_err(get)?,
            evidence: serde_json::from_str(&evidence).map_err(|e| self.corrupt(e.to_string()))?,
        })
    }

    fn to_record(&self, r: RunRow) -> Result<RunRecord, HistoryError> {
        let status = RunStatus::parse(&r.status).ok_or_else(|| {
            self.corrupt(format!("run {} has unknown status {:?}", r.id, r.status))
        })?;
        let time = |ms: i64| {
            Utc.timestamp_millis_opt(ms)
                .single()
                .ok_or_else(|| self.corrupt(format!("run {} has bad timestamp {ms}", r.id)))
        };
        Ok(RunRecord {
            started_at: time(r.started_at_ms)?,
            finished_at: r.finished_at_ms.map(time).transpose()?,
            id: r.id.clone(),
            trigger: r.trigger_source,
            mode: r.mode,
            status,
            commit: r.commit_id,
            error: r.error,
        })
    }

    fn query_err(&self, what: &'static str, source: sqlx::Error) -> HistoryError {
        HistoryError::Query {
            db: self.db.clone(),
            what,
            source,
        }
    }

    fn corrupt(&self, detail: String) -> HistoryError {
        HistoryError::Corrupt {
            db: self.db.clone(),
            detail,
        }
    }
}

/// A new sortable run id: UTC start second plus 4 random hex digits.
fn new_run_id(now: DateTime<Utc>) -> String {
    let suffix: u16 = rand::rng().random();
    format!("{}-{suffix:04x}", now.format("%Y%m%dT%H%M%SZ"))
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(sqlx::error::DatabaseError::is_unique_violation)
}

#[cfg(test)]
mod tests;
