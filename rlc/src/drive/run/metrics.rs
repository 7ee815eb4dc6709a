//! How a finished run counts in `rlc serve`'s metrics ([`RlcMetrics`]): its status, its
//! buckets' outcomes, its fetches, conflicts, aborted runs and resyncs.

use super::{RunError, RunReport};
use crate::drive::serve_metrics::{FetchKindLabel, OutcomeLabel, RlcMetrics, StatusLabel};

impl RlcMetrics {
    /// Records a finished run. A run that found no usable data counts as `no-data`, other
    /// errors as `failed`.
    pub fn observe(&self, result: Result<&RunReport, &RunError>, seconds: f64) {
        self.duration.observe(seconds);
        match result {
            Ok(report) => {
                self.runs
                    .get_or_create(&StatusLabel {
                        status: report.status.as_str().into(),
                    })
                    .inc();
                self.last_success.set(chrono::Utc::now().timestamp() as f64);
                self.push_conflicts.inc_by(u64::from(report.push_conflicts));
                self.aborted.inc_by(report.aborted_runs.len() as u64);
                self.resyncs.inc_by(u64::from(report.resynced_controller));
                for (kind, n) in [
                    ("full", report.fetches.full),
                    ("incremental", report.fetches.incremental),
                ] {
                    self.history_fetches
                        .get_or_create(&FetchKindLabel { kind: kind.into() })
                        .inc_by(n as u64);
                }
                self.history_cache_bytes
                    .set(i64::try_from(report.fetches.cache_bytes).unwrap_or(i64::MAX));
                self.pruned_runs.inc_by(report.pruned_runs);
                let short: std::collections::BTreeSet<&str> = report
                    .shortfalls
                    .iter()
                    .map(|s| s.service.as_str())
                    .collect();
                self.capacity_shortfall_services
                    .set(i64::try_from(short.len()).unwrap_or(i64::MAX));
                self.buckets.clear();
                for p in &report.plans {
                    self.buckets
                        .get_or_create(&OutcomeLabel {
                            outcome: p.guarded.outcome.as_str().into(),
                        })
                        .inc();
                    if matches!(p.guarded.outcome.as_str(), "new" | "changed") {
                        self.limit_changes.inc();
                    }
                }
            }
            Err(e) => {
                let status = match e {
                    RunError::NoData { .. } => crate::run_log::RunStatus::NoData,
                    _ => crate::run_log::RunStatus::Failed,
                };
                self.runs
                    .get_or_create(&StatusLabel {
                        status: status.as_str().into(),
                    })
                    .inc();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_without_usable_data_counts_as_no_data_not_failed() {
        let m = RlcMetrics::default();
        let no_data = RunError::NoData {
            source_desc: "prometheus at http://127.0.0.1:9".into(),
            buckets: 2,
        };
        m.observe(Err(&no_data), 1.0);
        let text = m.encode();
        assert!(
            text.contains("rlc_runs_total{status=\"no-data\"} 1"),
            "{text}"
        );
        assert!(!text.contains("status=\"failed\""), "{text}");
        assert!(text.contains("rlc_runs_aborted_total 0"), "{text}");
        assert!(text.contains("rlc_controller_resyncs_total 0"), "{text}");
    }
}
