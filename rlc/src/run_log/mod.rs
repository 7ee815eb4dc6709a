//! The run log (the "run history database" of the CLI's flags and errors; not the history
//! cache of metrics series, [`crate::input::cache`]): every configurator run and the
//! recommendation it made per bucket (and the staged rollouts' rows, see
//! [`crate::drive::rollout::records`]), kept in an
//! embedded SQLite file by default or in PostgreSQL when a `postgres://` URL is given.
//!
//! One code path serves both databases through sqlx's `Any` driver; the schema lives in the
//! root `migrations/` folder, is embedded at build time and applied by [`RunLog::connect`].
//! Timestamps are stored as unix milliseconds (`BIGINT`) and evidence as JSON text, which both
//! databases read the same way.

mod bucket_runs;
mod changes;
mod error;
mod migrate;
mod retention;
mod url;

use chrono::{DateTime, TimeZone, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyConnection, AnyPool, Connection};
use sqlx::{FromRow, Row};
use std::time::Duration;

pub use bucket_runs::{BucketDecision, BucketRun};
pub use error::RunLogError;
pub use url::DatabaseUrl;

/// How long connecting to the database may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a running run updates its heartbeat ([`RunLog::heartbeat`]).
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);

/// A `running` row whose heartbeat is older than this is taken for a dead run, whatever
/// host ran it.
pub const STALE_AFTER: Duration = Duration::from_secs(10 * 60);

pub use migrate::MIGRATOR;

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
    /// The metrics source gave no usable value for any bucket (every series empty, NaN or
    /// infinite): nothing was changed, and the run does not count as a success.
    NoData,
    /// The process died mid-run (killed, crashed); a later run found the row still
    /// `running` with its owner gone and marked it.
    Aborted,
}

impl RunStatus {
    /// The stored name: `running`, `committed`, `no-change`, `failed`, `no-data` or
    /// `aborted`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Committed => "committed",
            RunStatus::NoChange => "no-change",
            RunStatus::Failed => "failed",
            RunStatus::NoData => "no-data",
            RunStatus::Aborted => "aborted",
        }
    }

    /// Parses a stored name (see [`RunStatus::as_str`]).
    pub fn parse(s: &str) -> Option<RunStatus> {
        [
            Self::Running,
            Self::Committed,
            Self::NoChange,
            Self::Failed,
            Self::NoData,
            Self::Aborted,
        ]
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
pub struct RunLog {
    pub(crate) pool: AnyPool,
    db: String,
    sqlite: bool,
}

impl RunLog {
    /// Connects to `url` (`sqlite://<path>`, a bare file path, or `postgres://...`), creating
    /// the SQLite file and its parent directories if needed, and applies the migrations.
    pub async fn connect(url: &str) -> Result<RunLog, RunLogError> {
        let target = DatabaseUrl::parse(url)?;
        let db = target.display_name().clone();
        target.prepare()?;
        sqlx::any::install_default_drivers();
        let connect_err = |source| RunLogError::Connect {
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
        // No idle timeout and no lifetime: with either, sqlx 0.9 spawns a pool maintenance
        // task, and one was seen spinning when its runtime shut down with the pool still
        // held (a test process at full CPU for 20 minutes in `Runtime::drop`). A
        // connection is checked before each use (`test_before_acquire`), so one the
        // server closed is replaced, not handed out.
        let pool = AnyPoolOptions::new()
            .max_connections(if target.is_sqlite() { 1 } else { 5 })
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect(target.connect_url())
            .await
            .map_err(connect_err)?;
        migrate::run(&pool, target.is_sqlite())
            .await
            .map_err(|source| RunLogError::Migrate {
                db: db.clone(),
                source,
            })?;
        tracing::debug!(db = %db, "run history ready");
        Ok(RunLog {
            pool,
            db,
            sqlite: target.is_sqlite(),
        })
    }

    /// Closes the connections (waits for them to be returned).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The database this handle talks to, without password.
    pub fn database(&self) -> &str {
        &self.db
    }

    /// Records the start of a run by this process (see [`Owner::current`]) and returns its
    /// new id.
    pub async fn start_run(&self, trigger: &str, mode: &str) -> Result<String, RunLogError> {
        self.start_run_at(trigger, mode, Utc::now()).await
    }

    /// [`RunLog::start_run`] for a run that started at `now` (a replay or a simulation of
    /// past runs).
    pub async fn start_run_at(
        &self,
        trigger: &str,
        mode: &str,
        now: DateTime<Utc>,
    ) -> Result<String, RunLogError> {
        let owner = Owner::current().to_string();
        let mut attempt = 0;
        loop {
            let id = new_run_id(now);
            let res = sqlx::query(
                "INSERT INTO rlc_runs (id, trigger_source, mode, started_at_ms, status, owner, \
                 heartbeat_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&id)
            .bind(trigger)
            .bind(mode)
            .bind(now.timestamp_millis())
            .bind(RunStatus::Running.as_str())
            .bind(&owner)
            .bind(now.timestamp_millis())
            .execute(&self.pool)
            .await;
            match res {
                Ok(_) => return Ok(id),
                Err(e) if attempt < 5 && is_unique_violation(&e) => attempt += 1,
                Err(source) => return Err(self.query_err("start run", source)),
            }
        }
    }

    /// Shows that run `run_id` is still alive (see [`RunLog::abort_stale_runs`]).
    pub async fn heartbeat(&self, run_id: &str) -> Result<(), RunLogError> {
        sqlx::query("UPDATE rlc_runs SET heartbeat_at_ms = $1 WHERE id = $2 AND status = $3")
            .bind(Utc::now().timestamp_millis())
            .bind(run_id)
            .bind(RunStatus::Running.as_str())
            .execute(&self.pool)
            .await
            .map_err(|e| self.query_err("heartbeat", e))?;
        Ok(())
    }

    /// Marks `aborted` every `running` run whose process is gone: its owner is a process of
    /// this host that no longer exists, or its heartbeat is older than [`STALE_AFTER`] (any
    /// host; rows from before heartbeats count from their start). Returns their ids.
    pub async fn abort_stale_runs(&self) -> Result<Vec<String>, RunLogError> {
        let rows: Vec<AnyRow> = sqlx::query(
            "SELECT id, owner, started_at_ms, heartbeat_at_ms FROM rlc_runs WHERE status = $1",
        )
        .bind(RunStatus::Running.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.query_err("list running runs", e))?;
        let now = Utc::now().timestamp_millis();
        let stale_before = now - STALE_AFTER.as_millis() as i64;
        let mut aborted = Vec::new();
        for row in rows {
            let get = |e: sqlx::Error| self.query_err("read running run", e);
            let id: String = row.try_get("id").map_err(get)?;
            let owner: Option<String> = row.try_get("owner").map_err(get)?;
            let started: i64 = row.try_get("started_at_ms").map_err(get)?;
            let beat: Option<i64> = row.try_get("heartbeat_at_ms").map_err(get)?;
            let owner = owner.as_deref().and_then(Owner::parse);
            let why = if owner.as_ref().is_some_and(Owner::is_dead_local_process) {
                "its process is gone"
            } else if beat.unwrap_or(started) < stale_before {
                "no heartbeat for over 10 minutes"
            } else {
                continue;
            };
            let msg = format!("aborted: the run did not finish ({why}); marked by a later run");
            let done = sqlx::query(
                "UPDATE rlc_runs SET status = $1, finished_at_ms = $2, error = $3 \
                 WHERE id = $4 AND status = $5",
            )
            .bind(RunStatus::Aborted.as_str())
            .bind(now)
            .bind(&msg)
            .bind(&id)
            .bind(RunStatus::Running.as_str())
            .execute(&self.pool)
            .await
            .map_err(|e| self.query_err("mark run aborted", e))?;
            if done.rows_affected() > 0 {
                tracing::warn!(run = %id, reason = why, "a run left `running` by a dead process was marked aborted");
                aborted.push(id);
            }
        }
        Ok(aborted)
    }

    /// Records (or replaces) the recommendation for one bucket of a run.
    pub async fn record_recommendation(
        &self,
        run_id: &str,
        rec: &RecommendationRecord,
    ) -> Result<(), RunLogError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| self.query_err("record recommendation", e))?;
        insert_recommendation(&mut conn, run_id, rec)
            .await
            .map_err(|e| self.query_err("record recommendation", e))?;
        Ok(())
    }

    /// Records a run's recommendations and marks it finished, in one transaction: either the
    /// whole record is written or none of it (the row then stays `running` and a later run
    /// marks it `aborted`).
    pub async fn finish_run_with(
        &self,
        run_id: &str,
        recs: &[RecommendationRecord],
        status: RunStatus,
        commit: Option<&str>,
        error: Option<&str>,
    ) -> Result<(), RunLogError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| self.query_err("begin the run's record", e))?;
        for rec in recs {
            insert_recommendation(&mut tx, run_id, rec)
                .await
                .map_err(|e| self.query_err("record recommendation", e))?;
        }
        let done = update_finished(&mut tx, run_id, status, commit, error)
            .await
            .map_err(|e| self.query_err("finish run", e))?;
        if done == 0 {
            return Err(RunLogError::UnknownRun {
                db: self.db.clone(),
                run_id: run_id.into(),
            });
        }
        tx.commit()
            .await
            .map_err(|e| self.query_err("commit the run's record", e))
    }

    /// Marks a run finished with `status`, the commit it produced and its error, if any.
    /// The error is stored scrubbed of registered secrets ([`crate::secrets::scrub`]).
    pub async fn finish_run(
        &self,
        run_id: &str,
        status: RunStatus,
        commit: Option<&str>,
        error: Option<&str>,
    ) -> Result<(), RunLogError> {
        self.finish_run_with(run_id, &[], status, commit, error)
            .await
    }

    /// One run by id.
    pub async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, RunLogError> {
        let row: Option<RunRow> = sqlx::query_as(select_runs!("WHERE id = $1"))
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.query_err("read run", e))?;
        row.map(|r| self.to_record(r)).transpose()
    }

    /// The `limit` most recent runs, newest first.
    pub async fn recent_runs(&self, limit: i64) -> Result<Vec<RunRecord>, RunLogError> {
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
    ) -> Result<Vec<RecommendationRecord>, RunLogError> {
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

    fn to_recommendation(&self, row: &AnyRow) -> Result<RecommendationRecord, RunLogError> {
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

    fn to_record(&self, r: RunRow) -> Result<RunRecord, RunLogError> {
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

    pub(crate) fn query_err(&self, what: &'static str, source: sqlx::Error) -> RunLogError {
        RunLogError::Query {
            db: self.db.clone(),
            what,
            source,
        }
    }

    pub(crate) fn corrupt(&self, detail: String) -> RunLogError {
        RunLogError::Corrupt {
            db: self.db.clone(),
            detail,
        }
    }
}

/// Inserts (or replaces) one recommendation row.
async fn insert_recommendation(
    conn: &mut AnyConnection,
    run_id: &str,
    rec: &RecommendationRecord,
) -> Result<(), sqlx::Error> {
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
    .execute(conn)
    .await?;
    Ok(())
}

/// Marks a run finished; returns the rows changed (0: no such run). The error is stored
/// scrubbed of registered secrets ([`crate::secrets::scrub`]).
async fn update_finished(
    conn: &mut AnyConnection,
    run_id: &str,
    status: RunStatus,
    commit: Option<&str>,
    error: Option<&str>,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE rlc_runs SET finished_at_ms = $1, status = $2, commit_id = $3, error = $4 \
         WHERE id = $5",
    )
    .bind(Utc::now().timestamp_millis())
    .bind(status.as_str())
    .bind(commit)
    .bind(error.map(|e| crate::secrets::scrub(e).into_owned()))
    .bind(run_id)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The process running a run: `host:pid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Host name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`, else `unknown`).
    pub host: String,
    /// Process id.
    pub pid: u32,
}

impl Owner {
    /// This process.
    pub fn current() -> Owner {
        Owner {
            host: host_name(),
            pid: std::process::id(),
        }
    }

    /// Parses `host:pid`.
    pub fn parse(s: &str) -> Option<Owner> {
        let (host, pid) = s.rsplit_once(':')?;
        Some(Owner {
            host: host.to_string(),
            pid: pid.parse().ok()?,
        })
    }

    /// Whether this is a process of this host that no longer exists (Linux: no
    /// `/proc/<pid>`). `false` when that cannot be told (another host, no `/proc`).
    pub fn is_dead_local_process(&self) -> bool {
        self.host == host_name()
            && std::path::Path::new("/proc/self").exists()
            && !std::path::Path::new(&format!("/proc/{}", self.pid)).exists()
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.pid)
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// A new sortable run id: UTC start second plus 4 random hex digits.
fn new_run_id(now: DateTime<Utc>) -> String {
    let suffix: u16 = rand::rng().random();
    format!("{}-{suffix:04x}", now.format("%Y%m%dT%H%M%SZ"))
}

pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(sqlx::error::DatabaseError::is_unique_violation)
}

#[cfg(test)]
mod tests;
