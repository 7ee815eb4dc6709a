//! The gates a region must pass after its bake, judged from what its controllers showed
//! ([`Observation`]) against the configurator's predictions and the region's baseline:
//!
//! - `observable`: at least one answer of the region's controllers at the new version;
//! - `zones_reported`: at least one zone, and every zone seen (before or during the bake)
//!   reported after the bake started;
//! - `max_drop_over_prediction`: a changed deny bucket drops no more of its offered load
//!   than predicted plus the margin (no history: predicted 0);
//! - `max_new_drop`: a deny bucket without a prediction that dropped nothing before drops
//!   at most this share now;
//! - `prometheus:<name>`: a named query stays at or below its `max` (judged in
//!   [`super::query_gate`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::observe::{Baseline, Observation};
use super::prediction::Prediction;
use super::waves_file::Gates;

/// Why a region did not pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateFailure {
    /// The region.
    pub region: String,
    /// The gate: `observable`, `applied`, `zones_reported`, `max_drop_over_prediction`,
    /// `max_new_drop` or `prometheus:<name>`.
    pub gate: String,
    /// The bucket (`service/bucket`) or zone, when the gate is about one.
    pub bucket: Option<String>,
    /// What was predicted (a dropped share) or allowed (a query's `max`).
    pub predicted: Option<f64>,
    /// What was observed (a dropped share, a query's value).
    pub observed: Option<f64>,
    /// The rest, in words.
    pub detail: String,
}

impl fmt::Display for GateFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "region {} gate {}", self.region, self.gate)?;
        if let Some(b) = &self.bucket {
            write!(f, " bucket {b}")?;
        }
        if let Some(p) = self.predicted {
            // A query gate's figure is the most it allows, not a prediction.
            let what = if self.gate.starts_with("prometheus:") {
                "max"
            } else {
                "predicted"
            };
            write!(f, " {what} {p:.4}")?;
        }
        if let Some(o) = self.observed {
            write!(f, " observed {o:.4}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// Judges one region's bake; every failure found, none when it passes.
pub fn judge(
    region: &str,
    gates: &Gates,
    predictions: &[Prediction],
    baseline: &Baseline,
    seen: &Observation,
) -> Vec<GateFailure> {
    let fail = |gate: &str, bucket: Option<String>, p, o, detail: String| GateFailure {
        region: region.to_string(),
        gate: gate.to_string(),
        bucket,
        predicted: p,
        observed: o,
        detail,
    };
    if seen.samples == 0 {
        return vec![fail(
            "observable",
            None,
            None,
            None,
            format!(
                "no answer from the region's controllers at the new version during the bake ({} polls missed{})",
                seen.missed,
                seen.last_miss
                    .as_deref()
                    .map(|m| format!("; last: {m}"))
                    .unwrap_or_default()
            ),
        )];
    }
    let mut out = Vec::new();
    if seen.zones.is_empty() {
        out.push(fail(
            "zones_reported",
            None,
            None,
            None,
            "no zone reports to the region's controllers: the region cannot be observed".into(),
        ));
    }
    for (zone, _) in seen.zones.iter().filter(|(_, reported)| !**reported) {
        out.push(fail(
            "zones_reported",
            Some(zone.clone()),
            None,
            None,
            format!("zone {zone} did not report during the bake"),
        ));
    }
    for (key, t) in &seen.buckets {
        let Some(observed) = t.dropped_share().filter(|_| t.deny) else {
            continue;
        };
        match predictions
            .iter()
            .find(|p| format!("{}/{}", p.service, p.bucket) == *key)
        {
            Some(p) => {
                let predicted = p.predicted_drop.unwrap_or(0.0);
                if observed > predicted + gates.max_drop_over_prediction {
                    out.push(fail(
                        "max_drop_over_prediction",
                        Some(key.clone()),
                        Some(predicted),
                        Some(observed),
                        format!(
                            "dropped {:.2}% of its offered load over the bake, predicted {:.2}% (+{:.2}% allowed); limit {} → {}",
                            observed * 100.0,
                            predicted * 100.0,
                            gates.max_drop_over_prediction * 100.0,
                            limit(p.old_limit),
                            limit(p.new_limit),
                        ),
                    ));
                }
            }
            None if baseline.dropped.get(key).copied().unwrap_or(0.0) <= 0.0
                && observed > gates.max_new_drop =>
            {
                out.push(fail(
                    "max_new_drop",
                    Some(key.clone()),
                    Some(0.0),
                    Some(observed),
                    format!(
                        "dropped nothing before the wave and {:.2}% of its offered load after (at most {:.2}% allowed)",
                        observed * 100.0,
                        gates.max_new_drop * 100.0
                    ),
                ));
            }
            None => {}
        }
    }
    out
}

fn limit(l: Option<f64>) -> String {
    l.map_or_else(|| "none".into(), |v| format!("{v}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drive::rollout::observe::BucketTotals;

    fn gates() -> Gates {
        Gates {
            max_drop_over_prediction: 0.02,
            max_new_drop: 0.01,
            prometheus: Vec::new(),
        }
    }

    fn prediction(predicted: f64) -> Prediction {
        Prediction {
            service: "pay".into(),
            bucket: "a".into(),
            old_limit: Some(200.0),
            new_limit: Some(20.0),
            mode: "deny".into(),
            predicted_drop: Some(predicted),
        }
    }

    fn seen(buckets: &[(&str, bool, f64, f64)]) -> Observation {
        Observation {
            samples: 10,
            buckets: buckets
                .iter()
                .map(|(k, deny, offered, dropped)| {
                    (
                        (*k).to_string(),
                        BucketTotals {
                            deny: *deny,
                            offered: *offered,
                            dropped: *dropped,
                        },
                    )
                })
                .collect(),
            zones: [("z".to_string(), true)].into(),
            ..Observation::default()
        }
    }

    #[test]
    fn a_bucket_dropping_more_than_predicted_fails_and_names_the_figures() {
        let f = judge(
            "r1",
            &gates(),
            &[prediction(0.05)],
            &Baseline::default(),
            &seen(&[("pay/a", true, 1000.0, 900.0)]),
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].gate, "max_drop_over_prediction");
        assert_eq!(f[0].bucket.as_deref(), Some("pay/a"));
        assert_eq!((f[0].predicted, f[0].observed), (Some(0.05), Some(0.9)));
        let line = f[0].to_string();
        assert!(
            line.starts_with("region r1 gate max_drop_over_prediction bucket pay/a predicted 0.0500 observed 0.9000"),
            "{line}"
        );
        let within = judge(
            "r1",
            &gates(),
            &[prediction(0.88)],
            &Baseline::default(),
            &seen(&[("pay/a", true, 1000.0, 900.0)]),
        );
        assert!(within.is_empty(), "0.90 is within 0.88 + 0.02: {within:?}");
    }

    #[test]
    fn a_query_gate_failure_names_its_max_not_a_prediction() {
        let f = GateFailure {
            region: "r1".into(),
            gate: "prometheus:errors".into(),
            bucket: None,
            predicted: Some(0.5),
            observed: Some(0.9),
            detail: "query value 0.9 is above its max 0.5".into(),
        };
        assert_eq!(
            f.to_string(),
            "region r1 gate prometheus:errors max 0.5000 observed 0.9000: query value 0.9 is above its max 0.5"
        );
    }

    #[test]
    fn new_drops_of_an_unchanged_bucket_fail_unless_it_dropped_before_or_is_shadow() {
        let observed = seen(&[
            ("pay/b", true, 1000.0, 50.0),
            ("pay/c", true, 1000.0, 50.0),
            ("pay/d", false, 1000.0, 0.0),
        ]);
        let baseline = Baseline {
            dropped: [("pay/b".to_string(), 0.0), ("pay/c".to_string(), 3.0)].into(),
            zones: vec!["z".into()],
        };
        let f = judge("r1", &gates(), &[], &baseline, &observed);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].gate, "max_new_drop");
        assert_eq!(f[0].bucket.as_deref(), Some("pay/b"));
    }

    #[test]
    fn an_unobservable_region_or_a_silent_zone_does_not_pass() {
        let none = Observation {
            missed: 5,
            last_miss: Some("refused".into()),
            ..Observation::default()
        };
        let f = judge("r1", &gates(), &[], &Baseline::default(), &none);
        assert_eq!(f[0].gate, "observable");
        assert!(f[0].detail.contains("refused"));
        let mut quiet = seen(&[]);
        quiet.zones.insert("y".into(), false);
        let f = judge("r1", &gates(), &[], &Baseline::default(), &quiet);
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].gate.as_str(), f[0].bucket.as_deref()),
            ("zones_reported", Some("y"))
        );
        let mut no_zone = seen(&[]);
        no_zone.zones.clear();
        assert_eq!(
            judge("r1", &gates(), &[], &Baseline::default(), &no_zone)[0].gate,
            "zones_reported"
        );
    }
}
