//! Why a bucket's limit is what it is: one [`Explanation`] per bucket, taken from the plan a
//! run computes ([`BucketPlan`]) — the policy and its parameters, the window's observed peak
//! and when, the candidates `auto` weighed with their backtests, every guard that changed
//! the number and by how much, the shadow evidence and the limit — plus, for `rlc explain`,
//! the bucket's value after each of the last runs ([`crate::run_log::BucketRun`]).
//!
//! Nothing here computes a limit: every figure is one the planner already produced. It is
//! shown as text for a terminal ([`Explanation::to_text`]), as a collapsible Markdown section
//! for the pull request ([`Explanation::to_markdown`]), and as JSON (its `Serialize` form).

mod facts;
mod markdown;
mod text;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use grl_config::{Bucket, Mode};
use serde::Serialize;
use serde_json::Value;

pub use markdown::anchor;

use crate::decide::class_fate::ClassFates;
use crate::decide::plan::BucketPlan;
use crate::run_log::BucketRun;

/// Evidence keys the plan (not the policy) writes; the rest are the policy's own figures.
const PLAN_KEYS: &[&str] = &[
    "policy",
    "coverage",
    "outcome",
    "run",
    "previous",
    "proposed",
    "guards",
    "backtest",
    "flag",
    "shadow_since",
    "chosen",
    "chosen_spec",
    "chosen_backtest",
    "chosen_because",
    "runner_up",
    "runner_up_backtest",
    "candidates",
    "backtest_origins",
    "auto_reason",
    "capacity",
];

/// Why one bucket's limit is what it is (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// The service.
    pub service: String,
    /// The bucket.
    pub bucket: String,
    /// The `main` commit of the config repo the bucket was planned from.
    pub commit: String,
    /// The moment the window ends (unix seconds): the run's (or the explanation's) "now".
    pub now: i64,
    /// `deny` or `shadow`.
    pub mode: String,
    /// The policy, its parameters and its own figures.
    pub policy: PolicyPart,
    /// The window the policy read.
    pub window: Option<WindowPart>,
    /// The window's largest offered rate and when it was seen (`None`: no data).
    pub observed_peak: Option<PeakPart>,
    /// The policy's proposal before the guards (`None`: it refused, or a fixed limit).
    pub proposed: Option<f64>,
    /// Why the policy gave no proposal, if it did not.
    pub refusal: Option<String>,
    /// What `auto` weighed (only for `auto` buckets that ran a backtest or said why not).
    pub auto: Option<AutoPart>,
    /// How the proposal would have fared over the history it came from.
    pub backtest: Option<BacktestPart>,
    /// Every guard that acted, in the order they apply.
    pub guards: Vec<GuardStep>,
    /// The limit in force before this plan.
    pub previous_limit: Option<f64>,
    /// The limit written (`None`: not enforced).
    pub limit: Option<f64>,
    /// `new`, `changed`, `unchanged`, `kept-previous`, `no-limit` or `fixed`.
    pub outcome: String,
    /// The shadow → deny evidence (`None` for a fixed limit, or a bucket without a limit).
    pub drops: Option<DropsPart>,
    /// The limits in force only for a while (events), and what the run did to them.
    pub scheduled: crate::decide::plan::LimitSchedule,
    /// How each priority class would fare at the limit (buckets with classes and a limit).
    pub classes: Option<ClassesPart>,
    /// The bucket after each of the last runs, newest first (`rlc explain` only).
    pub history: Option<HistoryPart>,
}

/// The policy that computed the limit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyPart {
    /// Its kind, e.g. `historical-peak`.
    pub kind: String,
    /// Its parameters as written in the service file (defaults are not filled in).
    pub params: serde_json::Map<String, Value>,
    /// The figures it reported (window, buffer, quantile, growth, forecast bound, …).
    pub figures: BTreeMap<String, Value>,
}

/// The history window the policy read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowPart {
    /// First second of the window (unix seconds).
    pub start: i64,
    /// End of the window (unix seconds, exclusive).
    pub end: i64,
    /// Fraction of the window's expected points that had data.
    pub coverage: Option<f64>,
}

/// The window's observed peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeakPart {
    /// Requests per second.
    pub rps: f64,
    /// When it was first seen (unix seconds; the start of its step).
    pub at: i64,
    /// The same time, RFC 3339 in UTC.
    pub at_utc: String,
}

/// What `auto` weighed and what it chose.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoPart {
    /// The candidate it recommended with.
    pub chosen: String,
    /// The next best, if any.
    pub runner_up: Option<String>,
    /// The pick rule's steps in words.
    pub because: Option<String>,
    /// Why it did not (or could not) follow the backtest, if so.
    pub note: Option<String>,
    /// Every candidate's backtest over the bucket's own window, simplest first.
    pub candidates: Vec<CandidatePart>,
}

/// One candidate of `auto` and its backtest figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidatePart {
    /// Its label, e.g. `historical-peak+50%`.
    pub label: String,
    /// Origins it was scored at.
    pub origins: Option<u64>,
    /// Distinct points of the window above its limit.
    pub exceeded_points: Option<u64>,
    /// Fraction of the scored (point, origin) pairs above its limit.
    pub exceedance_rate: Option<f64>,
    /// Mean of limit / largest actual rate over the scored horizons.
    pub peak_headroom: Option<f64>,
}

/// A backtest's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BacktestPart {
    /// Origins scored.
    pub origins: usize,
    /// Fraction of the scored points above the limit.
    pub exceedance_rate: f64,
    /// Mean of limit / largest actual rate per horizon.
    pub peak_headroom: f64,
}

/// One guard that acted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuardStep {
    /// Its name, e.g. `max-increase`.
    pub guard: String,
    /// The number it was given (`None`: the policy gave none).
    pub before: Option<f64>,
    /// The number it passed on (`None`: no limit).
    pub after: Option<f64>,
    /// `after - before`, when both are numbers.
    pub change: Option<f64>,
    /// What it did, in words.
    pub detail: String,
}

/// What the bucket dropped, or would have dropped in shadow mode, lately.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DropsPart {
    /// `shadow` (virtual drops: what enforcing would have dropped) or `deny` (real drops).
    pub mode: String,
    /// Drops as a fraction of offered load over the last days.
    pub fraction: f64,
    /// The days looked at.
    pub days: f64,
    /// When the bucket went into shadow (unix seconds; shadow buckets only).
    pub shadow_since: Option<i64>,
    /// Days in shadow (shadow buckets only).
    pub days_in_shadow: Option<f64>,
    /// `ready`, `not-ready`, `unexpected-drops` or `ok`.
    pub verdict: String,
    /// Why, in words.
    pub reason: String,
}

/// How a bucket's priority classes would fare at its limit: the figures, or why they are
/// not known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassesPart {
    /// Each class's fate over the window (`None`: not known, see `note`).
    #[serde(flatten)]
    pub fates: Option<ClassFates>,
    /// Why the figures are not known, if they are not.
    pub note: Option<String>,
}

/// The bucket's value after each of the last runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryPart {
    /// The run history database, without password (`None`: none to read).
    pub database: Option<String>,
    /// Why there are no runs to show, if there are none.
    pub note: Option<String>,
    /// The runs, newest first.
    pub runs: Vec<BucketRun>,
}

impl Explanation {
    /// The explanation of `plan`, the plan of `bucket` made from `commit` at `now`.
    pub fn of(plan: &BucketPlan, bucket: &Bucket, commit: &str, now: i64) -> Explanation {
        let ev = &plan.evidence;
        let window = crate::decide::plan::window_secs(bucket).map(|secs| WindowPart {
            start: now - secs,
            end: now,
            coverage: plan.coverage,
        });
        let observed_peak = match (
            ev.get("observed_peak").and_then(Value::as_f64),
            plan.observed_peak_at,
        ) {
            (Some(rps), Some(at)) => Some(PeakPart {
                rps,
                at,
                at_utc: utc(at),
            }),
            _ => None,
        };
        let guards = plan
            .guarded
            .notes
            .iter()
            .map(|n| GuardStep {
                guard: n.guard.to_string(),
                before: n.before,
                after: n.after,
                change: n.before.zip(n.after).map(|(b, a)| a - b),
                detail: n.detail.clone(),
            })
            .collect();
        let drops = plan.lifecycle.as_ref().map(|v| DropsPart {
            mode: plan.mode.to_string(),
            fraction: v.drop_fraction,
            days: crate::decide::lifecycle::LifecycleSettings::default().min_days,
            shadow_since: (plan.mode == Mode::Shadow)
                .then(|| {
                    ev.get("shadow_since")
                        .and_then(crate::decide::lifecycle::shadow_since_of)
                })
                .flatten(),
            days_in_shadow: v.days_in_shadow,
            verdict: v.status.to_string(),
            reason: v.reason.clone(),
        });
        Explanation {
            service: plan.service.clone(),
            bucket: plan.bucket.clone(),
            commit: commit.to_string(),
            now,
            mode: plan.mode.to_string(),
            policy: PolicyPart {
                kind: bucket.policy.kind.clone(),
                params: bucket.policy.params.clone(),
                figures: ev
                    .iter()
                    .filter(|(k, _)| !PLAN_KEYS.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            },
            window,
            observed_peak,
            proposed: plan.proposal.as_ref().ok().copied(),
            refusal: plan.proposal.as_ref().err().cloned(),
            auto: auto_part(ev),
            backtest: plan
                .backtest
                .as_ref()
                .filter(|b| b.origins > 0)
                .map(|b| BacktestPart {
                    origins: b.origins,
                    exceedance_rate: b.exceedance_rate,
                    peak_headroom: b.peak_headroom,
                }),
            guards,
            previous_limit: plan.previous,
            limit: plan.guarded.limit,
            outcome: plan.guarded.outcome.as_str().to_string(),
            drops,
            scheduled: plan.schedule.clone(),
            classes: plan.classes.as_ref().map(|c| match c {
                Ok(f) => ClassesPart {
                    fates: Some(f.clone()),
                    note: None,
                },
                Err(why) => ClassesPart {
                    fates: None,
                    note: Some(why.clone()),
                },
            }),
            history: None,
        }
    }

    /// The explanation of a bucket whose limit is fixed in its service file (no history is
    /// read, no guard applies).
    pub fn fixed(service: &str, bucket: &Bucket, commit: &str, now: i64) -> Explanation {
        Explanation {
            service: service.to_string(),
            bucket: bucket.name.clone(),
            commit: commit.to_string(),
            now,
            mode: bucket.mode.to_string(),
            policy: PolicyPart {
                kind: bucket.policy.kind.clone(),
                params: bucket.policy.params.clone(),
                figures: BTreeMap::new(),
            },
            window: None,
            observed_peak: None,
            proposed: None,
            refusal: None,
            auto: None,
            backtest: None,
            guards: Vec::new(),
            previous_limit: bucket.limit,
            limit: bucket.limit,
            outcome: "fixed".into(),
            drops: None,
            scheduled: crate::decide::plan::LimitSchedule::default(),
            classes: None,
            history: None,
        }
    }

    /// `service/bucket`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.service, self.bucket)
    }
}

/// What `auto` wrote in the evidence, if this is an `auto` bucket.
fn auto_part(ev: &BTreeMap<String, Value>) -> Option<AutoPart> {
    let chosen = ev.get("chosen")?.as_str()?.to_string();
    let text = |k: &str| ev.get(k).and_then(Value::as_str).map(str::to_string);
    let candidates = ev
        .get("candidates")
        .and_then(Value::as_object)
        .map(|all| {
            all.iter()
                .map(|(label, f)| CandidatePart {
                    label: label.clone(),
                    origins: f.get("origins").and_then(Value::as_u64),
                    exceeded_points: f.get("exceeded_points").and_then(Value::as_u64),
                    exceedance_rate: f.get("exceedance_rate").and_then(Value::as_f64),
                    peak_headroom: f.get("peak_headroom").and_then(Value::as_f64),
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    Some(AutoPart {
        chosen,
        runner_up: text("runner_up"),
        because: text("chosen_because"),
        note: text("auto_reason"),
        candidates: simplest_first(candidates),
    })
}

/// `auto`'s candidates in its own order (simplest first), whatever order the JSON map kept.
fn simplest_first(mut candidates: Vec<CandidatePart>) -> Vec<CandidatePart> {
    let order = policies::auto::Auto::default().candidate_labels();
    candidates.sort_by_key(|c| {
        order
            .iter()
            .position(|l| *l == c.label)
            .unwrap_or(order.len())
    });
    candidates
}

/// `2026-11-20T14:35:00Z`.
fn utc(unix: i64) -> String {
    DateTime::<Utc>::from_timestamp(unix, 0).map_or_else(
        || unix.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

#[cfg(test)]
mod tests;
