//! Recording a finished run at fleet size: the run's summary, and a recommendation row only
//! for the buckets whose decision changed since the bucket's last record.
//!
//! A bucket's decision is its policy, written limit and whether a limit was computed at all
//! (`new`, `changed` and `unchanged` are one class: the limit says the rest; `kept-previous`
//! and `no-limit` are their own); `rlc_service_state` keeps the last one recorded per
//! bucket, one row per service. A fleet run every five minutes over 22,000 buckets so
//! adds rows for the few buckets that changed, not 22,000 rows; the run's `summary` (JSON)
//! still counts every bucket by outcome.

use std::collections::{BTreeMap, HashMap};

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{
    RecommendationRecord, RunLog, RunLogError, RunStatus, insert_recommendation, update_finished,
};

/// What identifies a bucket's decision: policy, outcome class and written limit.
fn digest(rec: &RecommendationRecord) -> String {
    let class = match rec.outcome.as_str() {
        "new" | "changed" | "unchanged" => "computed",
        other => other,
    };
    format!(
        "{}|{class}|{}",
        rec.policy,
        rec.applied_limit
            .map_or_else(|| "none".to_string(), |l| format!("{:016x}", l.to_bits()))
    )
}

impl RunLog {
    /// Records a finished run in one transaction: `summary` and the status on its row, and
    /// a recommendation for each bucket of `recs` whose decision differs from the one last
    /// recorded for it (every bucket the first time). `recs` holds every bucket of the
    /// config: services absent from it are forgotten. Returns the recommendations written.
    ///
    /// The last decisions are kept per service (one row each, its buckets' digests), so a
    /// run reads one row per service and compares buckets only where a service changed.
    pub async fn finish_run_recording_changes(
        &self,
        run_id: &str,
        recs: &[RecommendationRecord],
        summary: &serde_json::Value,
        status: RunStatus,
        commit: Option<&str>,
        error: Option<&str>,
    ) -> Result<usize, RunLogError> {
        let err = |what: &'static str| move |e: sqlx::Error| self.query_err(what, e);
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(err("begin the run's record"))?;
        let rows: Vec<AnyRow> = sqlx::query("SELECT service, digests FROM rlc_service_state")
            .fetch_all(&mut *tx)
            .await
            .map_err(err("read service states"))?;
        let mut last: HashMap<String, String> = HashMap::with_capacity(rows.len());
        for row in rows {
            last.insert(
                row.try_get("service").map_err(err("read service state"))?,
                row.try_get("digests").map_err(err("read service state"))?,
            );
        }
        let mut by_service: BTreeMap<&str, Vec<&RecommendationRecord>> = BTreeMap::new();
        for rec in recs {
            by_service.entry(&rec.service).or_default().push(rec);
        }
        let mut recorded = 0;
        for (service, mut recs) in by_service.iter().map(|(s, r)| (*s, r.clone())) {
            recs.sort_by(|a, b| a.bucket.cmp(&b.bucket));
            let digests: String = recs
                .iter()
                .map(|r| format!("{}\t{}\n", r.bucket, digest(r)))
                .collect();
            let before = last.remove(service);
            if before.as_deref() == Some(digests.as_str()) {
                continue;
            }
            let old: HashMap<&str, &str> = before
                .as_deref()
                .unwrap_or("")
                .lines()
                .filter_map(|l| l.split_once('\t'))
                .collect();
            for rec in recs {
                if old.get(rec.bucket.as_str()) == Some(&digest(rec).as_str()) {
                    continue;
                }
                insert_recommendation(&mut tx, run_id, rec)
                    .await
                    .map_err(err("record recommendation"))?;
                recorded += 1;
            }
            sqlx::query(
                "INSERT INTO rlc_service_state (service, digests, run_id) VALUES ($1, $2, $3) \
                 ON CONFLICT (service) DO UPDATE SET digests = excluded.digests, \
                 run_id = excluded.run_id",
            )
            .bind(service)
            .bind(&digests)
            .bind(run_id)
            .execute(&mut *tx)
            .await
            .map_err(err("record service state"))?;
        }
        for service in last.keys() {
            sqlx::query("DELETE FROM rlc_service_state WHERE service = $1")
                .bind(service)
                .execute(&mut *tx)
                .await
                .map_err(err("forget service state"))?;
        }
        let done = update_finished(&mut tx, run_id, status, commit, error)
            .await
            .map_err(err("finish run"))?;
        if done == 0 {
            return Err(RunLogError::UnknownRun {
                db: self.db.clone(),
                run_id: run_id.into(),
            });
        }
        sqlx::query("UPDATE rlc_runs SET summary = $1 WHERE id = $2")
            .bind(summary.to_string())
            .bind(run_id)
            .execute(&mut *tx)
            .await
            .map_err(err("record run summary"))?;
        tx.commit().await.map_err(err("commit the run's record"))?;
        Ok(recorded)
    }

    /// A run's summary (counts by outcome, phase times, fetches), if it has one.
    pub async fn run_summary(
        &self,
        run_id: &str,
    ) -> Result<Option<serde_json::Value>, RunLogError> {
        let row: Option<AnyRow> = sqlx::query("SELECT summary FROM rlc_runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.query_err("read run summary", e))?;
        let Some(row) = row else { return Ok(None) };
        let text: Option<String> = row
            .try_get("summary")
            .map_err(|e| self.query_err("read run summary", e))?;
        text.map(|t| serde_json::from_str(&t).map_err(|e| self.corrupt(e.to_string())))
            .transpose()
    }
}
