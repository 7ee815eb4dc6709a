//! The heart of a run, without I/O: from a config snapshot and fetched history to guarded
//! limits, the new `limits/` files and the review table.

use std::collections::BTreeMap;

use grl_config::raw::LimitsFile;
use grl_config::{Bucket, LimitSource, Mode, ServiceConfig, yaml};
use policies::{BacktestConfig, BacktestReport, Context, Series, backtest, from_spec};
use serde_json::{Value, json};

use crate::guards::{self, GuardSettings, Guarded, Outcome};
use crate::limits_file::{self, LimitLine};
use crate::pr_description::PrRow;

/// What the configurator decided for one bucket, with everything a reviewer needs.
#[derive(Debug, Clone)]
pub struct BucketPlan {
    /// The service.
    pub service: String,
    /// The bucket.
    pub bucket: String,
    /// The bucket's caller rule.
    pub caller: Option<String>,
    /// The bucket's procedure rule, as written.
    pub procedure: Option<String>,
    /// The policy kind.
    pub policy: String,
    /// Enforce or shadow.
    pub mode: Mode,
    /// The limit in force before this run.
    pub previous: Option<f64>,
    /// The policy's proposal, or why there is none.
    pub proposal: Result<f64, String>,
    /// The guarded result.
    pub guarded: Guarded,
    /// Fraction of expected points present in the history.
    pub coverage: Option<f64>,
    /// Evidence written beside the limit.
    pub evidence: BTreeMap<String, Value>,
    /// How the proposed limit would have fared over the history it came from.
    pub backtest: Option<BacktestReport>,
    /// Shadow → deny readiness, or an enforced bucket's unexpected drops.
    pub lifecycle: Option<crate::lifecycle::LifecycleVerdict>,
}

impl BucketPlan {
    /// The observed (or predicted) peak the policy reported, if any.
    pub fn observed_peak(&self) -> Option<f64> {
        ["observed_peak", "observed_quantile", "predicted_peak"]
            .iter()
            .find_map(|k| self.evidence.get(*k).and_then(Value::as_f64))
    }

    /// A row of the review table.
    pub fn pr_row(&self) -> PrRow {
        let mut notes: Vec<String> = self
            .guarded
            .notes
            .iter()
            .map(|n| n.detail.clone())
            .collect();
        if self.mode == Mode::Shadow {
            notes.push("shadow mode".into());
        }
        if let Some(b) = &self.backtest
            && b.origins > 0
        {
            notes.push(format!(
                "backtest: {:.2}% over, {:.2}x peak headroom",
                b.exceedance_rate * 100.0,
                b.peak_headroom
            ));
        }
        PrRow {
            service: self.service.clone(),
            bucket: self.bucket.clone(),
            old: self.previous,
            new: self.guarded.limit,
            policy: self.policy.clone(),
            observed_peak: self.observed_peak(),
            coverage: self.coverage,
            notes: notes.join("; "),
        }
    }
}

/// Whether the configurator computes this bucket's limit (fixed buckets need no history).
pub fn is_computed(bucket: &Bucket) -> bool {
    bucket.policy.kind != "fixed"
}

/// The history a bucket's policy asks for, in seconds (or `None` if the spec is invalid).
pub fn window_secs(bucket: &Bucket) -> Option<i64> {
    from_spec(&bucket.policy.kind, &bucket.policy.params)
        .ok()
        .map(|p| p.window().as_secs() as i64)
}

/// Decides one bucket's limit from its history.
pub fn plan_bucket(
    service: &str,
    bucket: &Bucket,
    previous: Option<f64>,
    history: &Series,
    now: i64,
    settings: &GuardSettings,
    run_id: &str,
) -> BucketPlan {
    let mut evidence: BTreeMap<String, Value> = BTreeMap::new();
    let settings = match settings.with_overrides(&bucket.guards) {
        Ok(s) => s,
        Err(e) => {
            return refused(service, bucket, previous, settings, format!("invalid {e}"));
        }
    };
    let policy = match from_spec(&bucket.policy.kind, &bucket.policy.params) {
        Ok(p) => p,
        Err(e) => {
            return refused(
                service,
                bucket,
                previous,
                &settings,
                format!("invalid policy.{e}"),
            );
        }
    };
    let window = policy.window().as_secs() as i64;
    let start = now - window;
    let coverage = history.coverage(start, now);
    let ctx = Context {
        now,
        previous_limit: previous,
    };
    let proposal = match policy.recommend(history, &ctx) {
        Ok(rec) => {
            evidence.extend(rec.evidence);
            Ok(rec.rps)
        }
        Err(refusal) => Err(refusal.reason),
    };
    let guarded = guards::apply(&settings, proposal.clone(), previous, Some(coverage));
    let backtest = guarded.limit.and(backtest_over(&*policy, history, now));
    evidence.insert("policy".into(), json!(bucket.policy.kind));
    evidence.insert("coverage".into(), json!(round3(coverage)));
    evidence.insert("outcome".into(), json!(guarded.outcome.as_str()));
    evidence.insert("run".into(), json!(run_id));
    if let Some(p) = previous {
        evidence.insert("previous".into(), json!(p));
    }
    if let Ok(p) = proposal {
        evidence.insert("proposed".into(), json!(guards::round_rps(p)));
    }
    if !guarded.notes.is_empty() {
        let notes: Vec<String> = guarded
            .notes
            .iter()
            .map(|n| format!("{}: {}", n.guard, n.detail))
            .collect();
        evidence.insert("guards".into(), json!(notes));
    }
    if let Some(b) = &backtest {
        evidence.insert(
            "backtest".into(),
            json!({
                "origins": b.origins,
                "exceedance_rate": round3(b.exceedance_rate),
                "peak_headroom": round3(b.peak_headroom),
                "median_headroom": round3(b.median_headroom),
            }),
        );
    }
    BucketPlan {
        coverage: Some(coverage),
        evidence,
        backtest,
        ..unscored(service, bucket, previous, proposal, guarded)
    }
}

fn refused(
    service: &str,
    bucket: &Bucket,
    previous: Option<f64>,
    settings: &GuardSettings,
    reason: String,
) -> BucketPlan {
    let guarded = guards::apply(settings, Err(reason.clone()), previous, None);
    unscored(service, bucket, previous, Err(reason), guarded)
}

/// The plan of a bucket with its identity, proposal and guarded outcome, and no coverage,
/// evidence, backtest or lifecycle yet.
fn unscored(
    service: &str,
    bucket: &Bucket,
    previous: Option<f64>,
    proposal: Result<f64, String>,
    guarded: Guarded,
) -> BucketPlan {
    BucketPlan {
        service: service.to_string(),
        bucket: bucket.name.clone(),
        caller: bucket.rule.caller.clone(),
        procedure: bucket.rule.procedure.as_ref().map(|p| p.as_written()),
        policy: bucket.policy.kind.clone(),
        mode: bucket.mode,
        previous,
        proposal,
        guarded,
        coverage: None,
        evidence: BTreeMap::new(),
        backtest: None,
        lifecycle: None,
    }
}

/// Scores the policy on the history it used: one-day horizons over the last week of it.
fn backtest_over(
    policy: &dyn policies::Policy,
    history: &Series,
    now: i64,
) -> Option<BacktestReport> {
    const DAY: i64 = 86_400;
    let first = history.points.first()?.ts;
    let span = now - first;
    if span < 8 * DAY {
        return None;
    }
    let window = (span - 7 * DAY).min(policy.window().as_secs() as i64);
    let cfg = BacktestConfig {
        window_secs: window,
        horizon_secs: DAY,
        stride_secs: DAY,
    };
    let report = backtest(policy, &history.window(now - window - 7 * DAY, now), &cfg);
    (report.origins > 0).then_some(report)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The limits in force before this run, read leniently from `limits/<service>.yaml`:
/// entries for buckets that no longer exist are dropped (and the file is then rewritten).
pub fn previous_limits(
    service: &ServiceConfig,
    limits_text: Option<&str>,
) -> (BTreeMap<String, f64>, bool) {
    let mut out = BTreeMap::new();
    let Some(text) = limits_text else {
        return (out, false);
    };
    let Ok(file) = yaml::parse::<LimitsFile>(&limits_file::path(&service.name), text) else {
        return (out, true);
    };
    let mut stale = false;
    for (name, entry) in file.limits {
        let known = service
            .bucket(&name)
            .is_some_and(|b| b.limit_source != LimitSource::Fixed);
        if known && entry.rps.is_finite() && entry.rps > 0.0 {
            out.insert(name, entry.rps);
        } else {
            stale = true;
        }
    }
    (out, stale)
}

/// The evidence of each bucket's entry in `limits/<service>.yaml` (e.g. `shadow_since`).
pub fn previous_evidence(
    service: &str,
    limits_text: Option<&str>,
) -> BTreeMap<String, BTreeMap<String, Value>> {
    let Some(text) = limits_text else {
        return BTreeMap::new();
    };
    let Ok(file) = yaml::parse::<LimitsFile>(&limits_file::path(service), text) else {
        return BTreeMap::new();
    };
    file.limits
        .into_iter()
        .map(|(name, entry)| {
            let ev = entry
                .evidence
                .iter()
                .map(|(k, v)| (k.clone(), yaml::to_json(v)))
                .collect();
            (name, ev)
        })
        .collect()
}

/// The new `limits/<service>.yaml`, or `None` when no limit of the service changes.
pub fn limits_file_for(service: &str, plans: &[&BucketPlan], force: bool) -> Option<String> {
    let changed = plans
        .iter()
        .any(|p| matches!(p.guarded.outcome, Outcome::New | Outcome::Changed));
    if !changed && !force {
        return None;
    }
    let lines: BTreeMap<String, LimitLine> = plans
        .iter()
        .filter_map(|p| {
            Some((
                p.bucket.clone(),
                LimitLine {
                    rps: p.guarded.limit?,
                    evidence: p.evidence.clone(),
                },
            ))
        })
        .collect();
    Some(limits_file::render(service, &lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use policies::Point;

    fn bucket(policy: &str) -> Bucket {
        let text = format!(
            "service: s\nbuckets:\n  - name: b\n    match: {{ caller: c }}\n    scope: global\n    mode: deny\n    policy: {policy}\n"
        );
        let snap = grl_config::from_files("v", [("services/s.yaml".to_string(), text)]).unwrap();
        snap.service("s").unwrap().buckets[0].clone()
    }

    fn flat(now: i64, days: i64, rps: f64, peak: f64) -> Series {
        let mut pts: Vec<Point> = (0..days * 288)
            .map(|i| Point {
                ts: now - days * 86_400 + i * 300,
                value: rps,
            })
            .collect();
        let n = pts.len();
        pts[n / 2].value = peak;
        Series::new(300, pts)
    }

    #[test]
    fn historical_peak_gives_peak_times_buffer() {
        let now = 1_800_000_000;
        let b = bucket("{ kind: historical-peak, window: 28d, buffer: 0.25 }");
        let p = plan_bucket(
            "s",
            &b,
            None,
            &flat(now, 28, 100.0, 1000.0),
            now,
            &GuardSettings::default(),
            "r1",
        );
        assert_eq!(p.guarded.limit, Some(1250.0));
        assert_eq!(p.guarded.outcome, Outcome::New);
        assert_eq!(p.evidence["run"], json!("r1"));
        assert!(p.backtest.is_some());
        let text = limits_file_for("s", &[&p], false).unwrap();
        assert!(text.contains("rps: 1250"), "{text}");
    }

    #[test]
    fn gappy_history_keeps_previous_limit_with_reason() {
        let now = 1_800_000_000;
        let b = bucket("{ kind: historical-peak }");
        let mut s = flat(now, 28, 100.0, 1000.0);
        s.points.retain(|p| (p.ts / 86_400) % 2 == 0);
        let p = plan_bucket(
            "s",
            &b,
            Some(700.0),
            &s,
            now,
            &GuardSettings::default(),
            "r",
        );
        assert_eq!(
            (p.guarded.limit, p.guarded.outcome),
            (Some(700.0), Outcome::KeptPrevious)
        );
        assert!(p.pr_row().notes.contains("coverage"), "{:?}", p.pr_row());
        assert!(
            limits_file_for("s", &[&p], false).is_none(),
            "no change, no file"
        );
    }

    #[test]
    fn stale_limit_entries_are_dropped() {
        let b = bucket("{ kind: historical-peak }");
        let svc = ServiceConfig::new("s".into(), "services/s.yaml".into(), vec![b]);
        let (prev, stale) = previous_limits(
            &svc,
            Some("service: s\nlimits:\n  b: { rps: 5 }\n  gone: { rps: 6 }\n"),
        );
        assert_eq!(
            prev.into_iter().collect::<Vec<_>>(),
            [("b".to_string(), 5.0)]
        );
        assert!(stale);
    }
}
