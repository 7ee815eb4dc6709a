//! Run history at fleet size: days of runs every five minutes, recorded through the
//! configurator's own recording code, and the database's size afterwards. Shared by the
//! tests (`fleet.rs`) and the fleet bench (`benches/fleet`), which includes this file.

use std::path::Path;
use std::time::Instant;

use rlc::run_log::{RecommendationRecord, RunLog, RunStatus};

/// What a simulation recorded and the database's size at its end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Simulated {
    /// Runs recorded.
    pub(crate) runs: usize,
    /// Recommendation rows stored (only changed decisions are).
    pub(crate) rows: usize,
    /// The database's size in bytes (a SQLite file with its `-wal`, or what PostgreSQL
    /// reports for the database).
    pub(crate) bytes: u64,
}

impl Simulated {
    /// The size in MiB.
    pub(crate) fn mib(&self) -> f64 {
        self.bytes as f64 / (1 << 20) as f64
    }
}

/// Records `days` of runs every five minutes over `buckets` buckets (20 a service), each
/// bucket's limit changing once every `change_days` days (staggered), with 90-day
/// retention, in `db`. `file`: the SQLite file to measure (empty: ask the database).
pub(crate) async fn simulate(
    db: &str,
    file: &Path,
    buckets: usize,
    days: i64,
    change_days: f64,
) -> Simulated {
    let h = RunLog::connect(db).await.expect("history database");
    let runs = (days * 288) as usize;
    let start = chrono::Utc::now() - chrono::Duration::days(days);
    let period = ((change_days * 288.0) as usize).max(1);
    let mut limits: Vec<f64> = (0..buckets).map(|b| 100.0 + b as f64).collect();
    let t = Instant::now();
    let mut rows = 0;
    for run in 0..runs {
        let at = start + chrono::Duration::minutes(5 * run as i64);
        let id = h.start_run_at("schedule", "direct", at).await.unwrap();
        let mut recs = Vec::with_capacity(buckets);
        for (b, limit) in limits.iter_mut().enumerate() {
            let changed = run > 0 && (b + run) % period == 0;
            if changed {
                *limit *= 1.06;
            }
            let outcome = match (run, changed) {
                (0, _) => "new",
                (_, true) => "changed",
                _ => "unchanged",
            };
            recs.push(RecommendationRecord {
                service: format!("svc{:04}", b / 20),
                bucket: format!("b{:02}", b % 20),
                policy: "historical-peak".into(),
                previous_limit: Some(*limit),
                proposed_limit: Some(*limit * 1.01),
                applied_limit: Some(*limit),
                outcome: outcome.into(),
                evidence: serde_json::json!({
                    "evidence": { "observed_peak": *limit / 1.25, "coverage": 1.0, "window": "28d" },
                    "guards": [], "refusal": null,
                }),
            });
        }
        let summary =
            serde_json::json!({ "buckets": buckets, "outcomes": { "unchanged": buckets } });
        rows += h
            .finish_run_recording_changes(
                &id,
                &recs,
                &summary,
                RunStatus::Committed,
                Some("0123456789abcdef0123456789abcdef01234567"),
                None,
            )
            .await
            .unwrap();
        let before = at - chrono::Duration::days(90);
        h.prune_runs(
            before.timestamp_millis(),
            std::time::Duration::from_secs(10),
        )
        .await
        .unwrap();
        if run % 2016 == 0 {
            eprintln!(
                "  history simulation: day {}, {rows} recommendations, {:.0?}",
                run / 288,
                t.elapsed()
            );
        }
    }
    let bytes = if file.as_os_str().is_empty() {
        let b = h.size_bytes().await.unwrap();
        h.close().await;
        b
    } else {
        h.close().await;
        let wal = file.with_extension("db-wal");
        std::fs::metadata(file).map_or(0, |m| m.len())
            + std::fs::metadata(&wal).map_or(0, |m| m.len())
    };
    let got = Simulated { runs, rows, bytes };
    eprintln!(
        "history simulation: {runs} runs over {days} days, {rows} recommendations, {:.1} MiB, {:.0?}",
        got.mib(),
        t.elapsed()
    );
    got
}
