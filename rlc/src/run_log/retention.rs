//! Run history retention: deleting finished runs older than `--history-retention`, with
//! their recommendations, a few runs per transaction so that a run writing its record
//! waits at most for one small batch. SQLite reuses the freed pages; on PostgreSQL a plain
//! `VACUUM` of the three tables (which blocks neither reads nor writes) follows a prune, so
//! that the space is reused whatever autovacuum's settings.

use std::time::{Duration, Instant};

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{RunLog, RunLogError, RunStatus};

/// Runs deleted per transaction.
const PRUNE_BATCH: usize = 20;

impl RunLog {
    /// Deletes the runs that started before `before_ms` (unix milliseconds) and are not
    /// running, with their recommendations, [`PRUNE_BATCH`] runs per transaction, until
    /// none is left or `budget` has passed (the rest goes at the next call). Returns the
    /// runs deleted.
    pub async fn prune_runs(&self, before_ms: i64, budget: Duration) -> Result<u64, RunLogError> {
        let started = Instant::now();
        let mut pruned = 0u64;
        loop {
            let rows: Vec<AnyRow> = sqlx::query(
                "SELECT id FROM rlc_runs WHERE started_at_ms < $1 AND status <> $2 \
                 ORDER BY started_at_ms LIMIT $3",
            )
            .bind(before_ms)
            .bind(RunStatus::Running.as_str())
            .bind(PRUNE_BATCH as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.query_err("list old runs", e))?;
            let ids: Vec<String> = rows
                .iter()
                .map(|r| r.try_get("id"))
                .collect::<Result<_, _>>()
                .map_err(|e| self.query_err("list old runs", e))?;
            if ids.is_empty() {
                break;
            }
            let list = (1..=ids.len())
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", ");
            let mut tx = self
                .pool
                .begin()
                .await
                .map_err(|e| self.query_err("begin pruning", e))?;
            for table_sql in [
                format!("DELETE FROM rlc_recommendations WHERE run_id IN ({list})"),
                format!("DELETE FROM rlc_runs WHERE id IN ({list})"),
            ] {
                // Only numbered placeholders are formatted in; the ids are bound.
                let mut q = sqlx::query(sqlx::AssertSqlSafe(table_sql));
                for id in &ids {
                    q = q.bind(id);
                }
                q.execute(&mut *tx)
                    .await
                    .map_err(|e| self.query_err("prune old runs", e))?;
            }
            tx.commit()
                .await
                .map_err(|e| self.query_err("commit pruning", e))?;
            pruned += ids.len() as u64;
            if started.elapsed() >= budget {
                tracing::info!(
                    pruned,
                    "history retention: time budget spent, the rest goes next run"
                );
                break;
            }
            tokio::task::yield_now().await;
        }
        if pruned > 0 && !self.sqlite {
            sqlx::raw_sql("VACUUM rlc_recommendations, rlc_runs, rlc_service_state")
                .execute(&self.pool)
                .await
                .map_err(|e| self.query_err("vacuum after pruning", e))?;
        }
        Ok(pruned)
    }

    /// Bytes the database takes: the SQLite file (pages in use and free) or the PostgreSQL
    /// database (`pg_database_size`).
    pub async fn size_bytes(&self) -> Result<u64, RunLogError> {
        let sql = if self.sqlite {
            "SELECT CAST(page_count * page_size AS BIGINT) AS n \
             FROM pragma_page_count(), pragma_page_size()"
        } else {
            "SELECT CAST(pg_database_size(current_database()) AS BIGINT) AS n"
        };
        let row: AnyRow = sqlx::query(sql)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.query_err("database size", e))?;
        let n: i64 = row
            .try_get("n")
            .map_err(|e| self.query_err("database size", e))?;
        Ok(n.max(0) as u64)
    }
}
