//! 30 simulated days of run history at a five-minute cadence at fleet size, through the
//! configurator's own recording code, and the OpenMetrics export of the fleet's series.

use std::path::Path;
use std::time::Instant;

use rlc::history::{History, RecommendationRecord, RunStatus};

use super::synthetic;

/// Records `days` of runs every five minutes over `buckets` buckets, each bucket's limit
/// changing once every `change_days` days (staggered), with 90-day retention; returns the
/// database's size in MiB (`file`: the SQLite file, whose `-wal` is counted too; empty:
/// ask the database).
pub(crate) async fn simulate(
    db: &str,
    file: &Path,
    buckets: usize,
    days: i64,
    change_days: f64,
) -> f64 {
    let h = History::connect(db).await.expect("history database");
    let runs = days * 288;
    let start = chrono::Utc::now() - chrono::Duration::days(days);
    let period = ((change_days * 288.0) as usize).max(1);
    let mut limits: Vec<f64> = (0..buckets).map(|b| 100.0 + b as f64).collect();
    let t = Instant::now();
    let mut recorded = 0;
    for run in 0..runs as usize {
        let at = start + chrono::Duration::minutes(5 * run as i64);
        let id = h.start_run_at("schedule", "direct", at).await.unwrap();
        let mut recs = Vec::with_capacity(buckets);
        for (b, limit) in limits.iter_mut().enumerate() {
            let changed = run > 0 && (b + run) % period == 0;
            if changed {
                *limit *= 1.06;
            }
            recs.push(RecommendationRecord {
                service: synthetic::service(b / 20),
                bucket: format!("b{:02}", b % 20),
                policy: "historical-peak".into(),
                previous_limit: Some(*limit),
                proposed_limit: Some(*limit * 1.01),
                applied_limit: Some(*limit),
                outcome: if run == 0 { "new" } else if changed { "changed" } else { "unchanged" }.into(),
                evidence: serde_json::json!({
                    "evidence": { "observed_peak": *limit / 1.25, "coverage": 1.0, "window": "28d" },
                    "guards": [], "refusal": null,
                }),
            });
        }
        let summary =
            serde_json::json!({ "buckets": buckets, "outcomes": { "unchanged": buckets } });
        recorded += h
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
                "  history simulation: day {}, {recorded} recommendations, {:.0?}",
                run / 288,
                t.elapsed()
            );
        }
    }
    let bytes = if file.as_os_str().is_empty() {
        h.size_bytes().await.unwrap()
    } else {
        h.close().await;
        let wal = file.with_extension("db-wal");
        std::fs::metadata(file).map_or(0, |m| m.len())
            + std::fs::metadata(&wal).map_or(0, |m| m.len())
    };
    eprintln!(
        "history simulation: {runs} runs over {days} days, {recorded} recommendations, {:.1} MiB, {:.0?}",
        bytes as f64 / (1 << 20) as f64,
        t.elapsed()
    );
    bytes as f64 / (1 << 20) as f64
}

/// Writes the fleet's series as `grl_requests_total` counters (1-minute samples from
/// `start` to `end`) for promtool.
pub(crate) fn write_openmetrics(path: &Path, services: usize, start: i64, end: i64, origin: i64) {
    let mut specs = Vec::new();
    for s in 0..services {
        for p in 0..synthetic::CALLERS * synthetic::PROCEDURES {
            let (caller, procedure) = synthetic::pair(s, p);
            specs.push(test_support::traffic::CounterSpec {
                labels: format!(
                    r#"service="{}",caller="{caller}",procedure="{procedure}",bucket="",decision="allowed""#,
                    synthetic::service(s)
                ),
                rate: Box::new(move |t| synthetic::rate(s, p, t, origin)),
            });
        }
    }
    test_support::traffic::write_counters_file(path, &specs, start, end, 60).unwrap();
    eprintln!("wrote {} series to {}", specs.len(), path.display());
}
