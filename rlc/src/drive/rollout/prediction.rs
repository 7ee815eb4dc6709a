//! What a rollout expects of each changed bucket: the buckets whose limit or mode differ
//! between the version a region runs and the one rolled out, and for each that will deny,
//! the share of the last day's offered load its new limit would have dropped (the
//! prediction the `max_drop_over_prediction` gate holds the region to).

use grl_config::{Mode, Snapshot};
use serde::{Deserialize, Serialize};

use crate::input::source::{BucketQuery, Measure, MetricsSource, RangeSeries, SourceError};

/// The history a prediction reads: the last 24 hours.
pub const PREDICTION_WINDOW_SECS: i64 = 86_400;

/// One bucket whose limit or mode the rolled-out version changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The service.
    pub service: String,
    /// The bucket.
    pub bucket: String,
    /// The limit before (none: not enforced, or a new bucket).
    pub old_limit: Option<f64>,
    /// The limit rolled out (none: not enforced).
    pub new_limit: Option<f64>,
    /// The mode rolled out (`deny` or `shadow`).
    pub mode: String,
    /// The share of the last 24 hours of offered load the new limit would have dropped;
    /// none for a shadow or unlimited bucket, or one with no history.
    pub predicted_drop: Option<f64>,
}

/// The buckets of `new` whose limit or mode differ from `old` (or are new), with their
/// match rules for the history query.
pub fn changed_buckets(old: &Snapshot, new: &Snapshot) -> Vec<(BucketQuery, Prediction)> {
    new.buckets()
        .filter_map(|(service, b)| {
            let before = old.service(service).and_then(|s| s.bucket(&b.name));
            let same = before.is_some_and(|o| o.limit == b.limit && o.mode == b.mode);
            (!same).then(|| {
                (
                    BucketQuery::of(service, b),
                    Prediction {
                        service: service.to_string(),
                        bucket: b.name.clone(),
                        old_limit: before.and_then(|o| o.limit),
                        new_limit: b.limit,
                        mode: b.mode.as_str().to_string(),
                        predicted_drop: None,
                    },
                )
            })
        })
        .collect()
}

/// The share of `history`'s offered load above `limit`: Σ max(0, rate − limit) / Σ rate
/// over its points (each the peak of its step, so the share errs high). `None` when the
/// history holds no load.
pub fn dropped_share(history: &RangeSeries, limit: f64) -> Option<f64> {
    let offered: f64 = history.points.iter().map(|p| p.1).sum();
    if offered <= 0.0 {
        return None;
    }
    let over: f64 = history.points.iter().map(|p| (p.1 - limit).max(0.0)).sum();
    Some(over / offered)
}

/// Fills in the prediction of each changed deny bucket with a limit from the 24 hours of
/// `source`'s history before `now`.
pub async fn predict(
    source: &dyn MetricsSource,
    changed: Vec<(BucketQuery, Prediction)>,
    now: i64,
) -> Result<Vec<Prediction>, SourceError> {
    let mut out = Vec::with_capacity(changed.len());
    for (q, mut p) in changed {
        if p.mode == Mode::Deny.as_str()
            && let Some(limit) = p.new_limit
        {
            let history = source
                .fetch(&q, Measure::Offered, now - PREDICTION_WINDOW_SECS, now)
                .await?;
            p.predicted_drop = dropped_share(&history, limit).map(|s| (s * 1e4).round() / 1e4);
        }
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(limits: &str, mode: &str) -> Snapshot {
        let service = format!(
            "service: pay\nbuckets:\n  - name: a\n    match: {{ caller: x }}\n    scope: global\n    mode: {mode}\n    policy: {{ kind: historical-peak }}\n  - name: b\n    match: {{ caller: y }}\n    scope: global\n    mode: deny\n    policy: {{ kind: fixed, rps: 5 }}\n"
        );
        grl_config::from_files(
            "v",
            vec![
                ("services/pay.yaml".into(), service),
                ("limits/pay.yaml".into(), limits.into()),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_changed_limit_or_mode_is_a_change_and_nothing_else_is() {
        let old = snapshot("service: pay\nlimits:\n  a: { rps: 100 }\n", "shadow");
        assert!(changed_buckets(&old, &old).is_empty());
        let raised = snapshot("service: pay\nlimits:\n  a: { rps: 120 }\n", "shadow");
        let c = changed_buckets(&old, &raised);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].1.bucket, "a");
        assert_eq!(
            (c[0].1.old_limit, c[0].1.new_limit),
            (Some(100.0), Some(120.0))
        );
        assert_eq!(c[0].0.caller.as_deref(), Some("x"));
        let promoted = snapshot("service: pay\nlimits:\n  a: { rps: 100 }\n", "deny");
        let c = changed_buckets(&old, &promoted);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].1.mode, "deny");
        let all_new = changed_buckets(&Snapshot::default(), &old);
        assert_eq!(all_new.len(), 2, "every bucket of a first version is new");
    }

    #[test]
    fn the_dropped_share_is_the_load_above_the_limit() {
        let s = RangeSeries {
            step_secs: 300,
            points: vec![(1, 100.0), (2, 300.0), (3, 0.0)],
            invalid: 0,
        };
        assert_eq!(dropped_share(&s, 200.0), Some(0.25));
        assert_eq!(dropped_share(&s, 400.0), Some(0.0));
        assert_eq!(dropped_share(&RangeSeries::empty(300), 1.0), None);
    }
}
