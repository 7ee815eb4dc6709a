//! The heart of a run, without I/O: from a config snapshot and fetched history to guarded
//! limits, the new `limits/` files and the review table.

use std::collections::BTreeMap;

use grl_config::raw::{Effective, LimitsFile, ScheduledEntry};
use grl_config::{Bucket, LimitSource, Mode, ScheduledLimit, ServiceConfig, yaml};
use policies::{BacktestConfig, BacktestReport, Context, Series, backtest, from_spec};
use serde::Serialize;
use serde_json::{Value, json};

use crate::decide::class_fate::ClassFates;
use crate::decide::guards::{self, GuardSettings, Guarded, Outcome, fmt_rps};
use crate::input::capacity::utc;
pub use crate::input::is_computed;
use crate::output::limits_file::{self, LimitLine};

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
    /// When (unix seconds) the window's largest rate was seen (the first time, if several).
    pub observed_peak_at: Option<i64>,
    /// Evidence written beside the limit.
    pub evidence: BTreeMap<String, Value>,
    /// How the proposed limit would have fared over the history it came from.
    pub backtest: Option<BacktestReport>,
    /// Shadow → deny readiness, or an enforced bucket's unexpected drops.
    pub lifecycle: Option<crate::decide::lifecycle::LifecycleVerdict>,
    /// Why the proposal is more than [`HIGH_PROPOSAL_RATIO`] times the observed peak, if it is.
    pub high_proposal: Option<String>,
    /// Limits in force only for a while (events), written beside the limit.
    pub schedule: LimitSchedule,
    /// How the bucket's priority classes would fare at its limit, or why that is not
    /// known (`None`: no classes, or no limit).
    pub classes: Option<Result<ClassFates, String>>,
}

/// A proposal above this multiple of its window's observed peak is flagged for the reviewer.
pub const HIGH_PROPOSAL_RATIO: f64 = 3.0;

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
        if let Some(flag) = &self.high_proposal {
            notes.push(flag.clone());
        }
        notes.extend(self.schedule.summary());
        if let Some(choice) = auto_choice(&self.evidence) {
            notes.push(choice);
        } else if let Some(b) = &self.backtest
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

/// One scheduled limit of a bucket, as a run writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scheduled {
    /// When it starts (unix seconds, included).
    pub from: i64,
    /// When it ends (unix seconds, excluded).
    pub until: i64,
    /// The limit meanwhile.
    pub rps: f64,
    /// The `reason` written.
    pub reason: String,
    /// The event it comes from (`None`: an entry of the limits file kept as written).
    pub event: Option<String>,
    /// How the event raised the limit (`x3`, `4000 rps`).
    pub raise: Option<String>,
    /// The raised limit before the capacity guard lowered it, if it did.
    pub wanted: Option<f64>,
}

impl Scheduled {
    /// The entry as the limits file writes it.
    pub fn entry(&self) -> ScheduledEntry {
        ScheduledEntry {
            rps: self.rps,
            effective: Effective {
                from: utc(self.from),
                until: utc(self.until),
            },
            reason: self.reason.clone(),
        }
    }

    pub(crate) fn same_as(&self, l: &ScheduledLimit) -> bool {
        (self.from, self.until, self.rps, self.reason.as_str())
            == (l.from, l.until, l.rps, l.reason.as_str())
    }
}

/// A bucket's scheduled limits after a run, and what the run did to them.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct LimitSchedule {
    /// The entries to write, by start.
    pub entries: Vec<Scheduled>,
    /// Whether they differ from the limits file's.
    pub changed: bool,
    /// What was removed or could not be written, and what capacity did, in words.
    pub notes: Vec<String>,
}

impl LimitSchedule {
    /// The review's words for it: each event's limit, then the notes.
    pub fn summary(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .entries
            .iter()
            .filter_map(|e| {
                let name = e.event.as_ref()?;
                let capped = e
                    .wanted
                    .map(|w| format!(", lowered from {} by capacity", fmt_rps(w)))
                    .unwrap_or_default();
                Some(format!(
                    "event {name} ({}): {} from {} until {}{capped}",
                    e.raise.as_deref().unwrap_or("?"),
                    fmt_rps(e.rps),
                    utc(e.from),
                    utc(e.until)
                ))
            })
            .collect();
        out.extend(self.notes.iter().cloned());
        out
    }
}

/// One bucket's line in the pull-request table (rendered by
/// [`crate::output::pr_description`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PrRow {
    /// Service the bucket belongs to (the `limits/<service>.yaml` file).
    pub service: String,
    /// Bucket name inside the service.
    pub bucket: String,
    /// Limit in force before this run (requests per second), if any.
    pub old: Option<f64>,
    /// Limit proposed by this run (requests per second); `None` when the bucket is removed.
    pub new: Option<f64>,
    /// Name of the policy that computed the limit.
    pub policy: String,
    /// Highest offered rate seen in the history window (requests per second).
    pub observed_peak: Option<f64>,
    /// Fraction (0..=1) of the history window that had samples.
    pub coverage: Option<f64>,
    /// Free text for the reviewer (guard decisions, warnings). Pipes are escaped.
    pub notes: String,
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
    let peak_point = history.range(start, now).iter().copied().reduce(|a, b| {
        if b.value > a.value || a.value.is_nan() {
            b
        } else {
            a
        }
    });
    let observed_peak = peak_point.map(|p| p.value).filter(|v| !v.is_nan());
    let proposal = match policy.recommend(history, &ctx) {
        Ok(rec) => {
            evidence.extend(rec.evidence);
            Ok(rec.rps)
        }
        Err(refusal) => Err(refusal.reason),
    };
    let guarded = guards::apply(
        &settings,
        proposal.clone(),
        previous,
        Some(coverage),
        observed_peak,
    );
    let backtest = match chosen_backtest(&evidence) {
        Some(report) => guarded.limit.and(Some(report)),
        None => guarded.limit.and(backtest_over(&*policy, history, now)),
    };
    if let Some(peak) = observed_peak {
        evidence
            .entry("observed_peak".into())
            .or_insert(json!(peak));
    }
    let high_proposal = match (&proposal, observed_peak) {
        (Ok(p), Some(peak)) if peak > 0.0 && *p > HIGH_PROPOSAL_RATIO * peak => {
            Some(high_proposal_note(*p, peak, &evidence, &guarded))
        }
        _ => None,
    };
    if let Some(flag) = &high_proposal {
        evidence.insert("flag".into(), json!(flag));
    }
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
        observed_peak_at: peak_point.filter(|p| !p.value.is_nan()).map(|p| p.ts),
        evidence,
        backtest,
        high_proposal,
        ..unscored(service, bucket, previous, proposal, guarded)
    }
}

/// The PR note of an `auto` bucket: "auto → peak-trend: 0.00% over, 1.40x headroom;
/// runner-up forecast 0.00% over, 3.10x" (or the reason it used the simplest candidate).
fn auto_choice(evidence: &BTreeMap<String, Value>) -> Option<String> {
    let chosen = evidence.get("chosen")?.as_str()?;
    let figures = |v: &Value| -> Option<(f64, f64)> {
        Some((
            v.get("exceedance_rate")?.as_f64()? * 100.0,
            v.get("peak_headroom")?.as_f64()?,
        ))
    };
    let mut note = format!("auto → {chosen}");
    match evidence.get("chosen_backtest").and_then(figures) {
        Some((over, headroom)) => {
            note.push_str(&format!(": {over:.2}% over, {headroom:.2}x headroom"));
        }
        None => {
            if let Some(reason) = evidence.get("auto_reason").and_then(Value::as_str) {
                note.push_str(&format!(" ({reason})"));
            }
        }
    }
    if let Some(runner) = evidence.get("runner_up").and_then(Value::as_str) {
        note.push_str(&format!("; runner-up {runner}"));
        if let Some((over, headroom)) = evidence.get("runner_up_backtest").and_then(figures) {
            note.push_str(&format!(" {over:.2}% over, {headroom:.2}x"));
        }
    }
    Some(note)
}

/// The backtest an `auto` policy already ran for the candidate it chose, if any: scoring
/// `auto` again over past origins would repeat that work several times over.
fn chosen_backtest(evidence: &BTreeMap<String, Value>) -> Option<BacktestReport> {
    let b = evidence.get("chosen_backtest")?;
    let origins = b.get("origins")?.as_u64()? as usize;
    Some(BacktestReport {
        origins,
        refused: 0,
        scored: origins,
        exceedance_rate: b.get("exceedance_rate")?.as_f64()?,
        peak_headroom: b.get("peak_headroom")?.as_f64()?,
        median_headroom: f64::NAN,
    })
}

/// Why a proposal is far above the observed peak, from the policy's own evidence.
fn high_proposal_note(
    proposal: f64,
    peak: f64,
    evidence: &BTreeMap<String, Value>,
    guarded: &Guarded,
) -> String {
    let num = |k: &str| evidence.get(k).and_then(Value::as_f64);
    let mut why = Vec::new();
    if let Some(chosen) = evidence.get("chosen").and_then(Value::as_str) {
        why.push(format!("auto chose {chosen}"));
    }
    if let Some(upper) = evidence
        .get("interval")
        .and_then(|i| i.get("upper"))
        .and_then(Value::as_f64)
        && let Some(predicted) = num("predicted_peak")
    {
        why.push(format!(
            "forecast's upper bound {} is {:.1}x its predicted peak {}",
            guards::fmt_rps(upper),
            upper / predicted.max(f64::MIN_POSITIVE),
            guards::fmt_rps(predicted)
        ));
    }
    if let Some(g) = num("growth_per_week").filter(|g| *g > 0.0) {
        let horizon = evidence
            .get("horizon")
            .and_then(Value::as_str)
            .unwrap_or("the horizon");
        why.push(format!(
            "growth +{:.1}%/week projected over {horizon}",
            g * 100.0
        ));
    }
    if let Some(b) = num("buffer").filter(|b| *b > 0.0) {
        why.push(format!("buffer +{:.0}%", b * 100.0));
    }
    if let Some(q) = num("observed_quantile") {
        why.push(format!("quantile {}", guards::fmt_rps(q)));
    }
    let after = match guarded.limit {
        Some(l) if l < proposal => format!("; guards lowered it to {}", guards::fmt_rps(l)),
        _ => String::new(),
    };
    format!(
        "proposal {} is {:.1}x the observed peak {} (above {HIGH_PROPOSAL_RATIO}x): {}{after}",
        guards::fmt_rps(proposal),
        proposal / peak,
        guards::fmt_rps(peak),
        if why.is_empty() {
            "the policy gave no reason".to_string()
        } else {
            why.join(", ")
        }
    )
}

/// The plan of a bucket whose limit cannot be computed for `reason`: the previous limit (if
/// any) is kept, with the reason as a `policy-refused` guard note.
pub fn refused(
    service: &str,
    bucket: &Bucket,
    previous: Option<f64>,
    settings: &GuardSettings,
    reason: String,
) -> BucketPlan {
    let guarded = guards::apply(settings, Err(reason.clone()), previous, None, None);
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
        procedure: bucket
            .rule
            .procedure
            .as_ref()
            .map(grl_config::ProcedurePattern::as_written),
        policy: bucket.policy.kind.clone(),
        mode: bucket.mode,
        previous,
        proposal,
        guarded,
        coverage: None,
        observed_peak_at: None,
        evidence: BTreeMap::new(),
        backtest: None,
        lifecycle: None,
        high_proposal: None,
        schedule: LimitSchedule::default(),
        classes: None,
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
        let bucket = service.bucket(&name);
        let known = bucket.is_some_and(|b| b.limit_source != LimitSource::Fixed);
        if known && entry.rps.is_finite() && entry.rps > 0.0 {
            out.insert(name, entry.rps);
        } else if bucket.is_none() || entry.scheduled.is_empty() {
            // A fixed bucket's entry stays for its scheduled limits (see `limits_file_for`).
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

/// The new `limits/<service>.yaml`, or `None` when no limit of the service changes and no
/// scheduled limit either. `unplanned` are the lines of buckets without a plan (a fixed
/// limit) that keep scheduled limits.
pub fn limits_file_for(
    service: &str,
    plans: &[&BucketPlan],
    unplanned: &BTreeMap<String, LimitLine>,
    force: bool,
) -> Option<String> {
    let changed = plans.iter().any(|p| {
        matches!(p.guarded.outcome, Outcome::New | Outcome::Changed) || p.schedule.changed
    });
    if !changed && !force {
        return None;
    }
    let mut lines: BTreeMap<String, LimitLine> = unplanned.clone();
    lines.extend(plans.iter().filter_map(|p| {
        Some((
            p.bucket.clone(),
            LimitLine {
                rps: p.guarded.limit?,
                evidence: p.evidence.clone(),
                scheduled: p.schedule.entries.iter().map(Scheduled::entry).collect(),
            },
        ))
    }));
    Some(limits_file::render(service, &lines))
}

#[cfg(test)]
mod tests;
