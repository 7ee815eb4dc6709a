//! The capacity guard: for every scope of a service's planned capacity, the sum of its
//! `deny` limits that can be in force at once stays within capacity × utilisation.
//!
//! **What counts in a scope.** The service's total capacity (see [`crate::input::capacity::timeline`]) holds
//! every deny limit: a global bucket's once, a per-region bucket's once per region the
//! capacity file names, a per-zone bucket's once per zone it names. A region's capacity
//! holds its per-region limits once and its per-zone limits once per zone of that region; a
//! zone's holds its per-zone limits. Shadow buckets drop nothing and do not count; a bucket
//! marked `in_addition` only refuses requests another bucket already counts, so it does not
//! count either.
//!
//! **The rule.** When a scope's sum is above its budget, the computed limits are multiplied
//! by one common factor, none below its `floor` guard
//! ([`policies::capacity::fit_to_budget`]); fixed limits (contracts) count but never move.
//! Scopes are fitted widest first (total, regions, zones), each only lowering. The guard runs
//! after every other guard, so it may lower a limit by more than `max_decrease`: capacity is
//! a bound, not a preference. Limits are rounded down to a tenth so the sum stays within.
//!
//! An event's window is checked the same way with the limits in force during it
//! ([`cap_windows`]): there only the event's raised limits are scaled, never below the
//! bucket's limit outside the window.

use grl_config::{Mode, Scope, ServiceConfig};
use policies::capacity::{Share, fit_to_budget};
use serde_json::json;

use crate::decide::guards::{GuardNote, GuardSettings, Outcome, fmt_rps};
use crate::decide::plan::BucketPlan;
use crate::decide::plan::Scheduled;
use crate::input::capacity::PlannedCapacity;
use crate::input::capacity::file::Area;

/// One limit in force, as the guard counts it.
#[derive(Debug, Clone)]
struct Counted {
    scope: Scope,
    rps: f64,
    floor: f64,
    scalable: bool,
}

/// What fitting one scope did to one limit.
#[derive(Debug, Clone)]
struct Lowered {
    index: usize,
    before: f64,
    after: f64,
    why: String,
}

/// How many times a limit of `bucket` scope counts in `area`'s capacity (`total`: the area
/// is part of the service's total).
fn weight(capacity: &PlannedCapacity, bucket: Scope, area: Option<&Area>) -> f64 {
    let n = |k: usize| k.max(1) as f64;
    match (area, bucket) {
        (None, Scope::Global) => 1.0,
        (None, Scope::Region) => n(capacity.regions().len()),
        (None, Scope::Zone) => n(capacity.zones(None)),
        (Some(Area::Region(_)), Scope::Region) => 1.0,
        (Some(Area::Region(r)), Scope::Zone) => n(capacity.zones(Some(r))),
        (Some(Area::Zone { .. }), Scope::Zone) => 1.0,
        _ => 0.0,
    }
}

/// Fits `limits` to every scope of `capacity` over `[from, until)`, widest first, and says
/// which limits each scope lowered; `scaled` names those that may be (`computed limit`) and
/// `floor` what they stay above (`its floor`).
fn fit_all(
    capacity: &PlannedCapacity,
    service: &str,
    limits: &mut [Counted],
    (from, until): (i64, i64),
    (scaled, floor): (&str, &str),
) -> Vec<Lowered> {
    let until = until.max(from + 1);
    let mut scopes: Vec<(Option<&Area>, String, Option<f64>)> = vec![(
        None,
        capacity.total_name(),
        capacity.total_min_over(from, until),
    )];
    for (area, steps) in &capacity.areas {
        if area.scope() != Scope::Global {
            scopes.push((
                Some(area),
                area.name().to_string(),
                steps.min_over(from, until),
            ));
        }
    }
    let mut lowered = Vec::new();
    for (area, name, cap) in scopes {
        let Some(cap) = cap else { continue };
        let budget = cap * capacity.utilization;
        let counted: Vec<usize> = (0..limits.len())
            .filter(|&i| weight(capacity, limits[i].scope, area) > 0.0)
            .collect();
        let shares: Vec<Share> = counted
            .iter()
            .map(|&i| Share {
                limit: limits[i].rps,
                floor: limits[i].floor,
                weight: weight(capacity, limits[i].scope, area),
                fixed: !limits[i].scalable,
            })
            .collect();
        let fit = fit_to_budget(&shares, budget);
        if fit.factor >= 1.0 && fit.met {
            continue;
        }
        let why = format!(
            "{service}'s deny limits sum to {} rps where {name} capacity {} × {} allows {}: \
             each {scaled} × {:.3}{}",
            fmt_rps(fit.before),
            fmt_rps(cap),
            capacity.utilization,
            fmt_rps(budget),
            fit.factor,
            if fit.met {
                format!(", none below {floor}")
            } else {
                format!(
                    "; fixed limits and floors alone sum to {} rps: the capacity cannot be met",
                    fmt_rps(fit.after)
                )
            }
        );
        for (k, &i) in counted.iter().enumerate() {
            let after = round_down(fit.limits[k]);
            if limits[i].scalable && after < limits[i].rps {
                lowered.push(Lowered {
                    index: i,
                    before: limits[i].rps,
                    after,
                    why: why.clone(),
                });
                limits[i].rps = after;
            }
        }
    }
    lowered
}

/// Rounds down to a tenth (limits are written with one decimal; rounding up could exceed).
fn round_down(rps: f64) -> f64 {
    (rps * 10.0 + 1e-9).floor() / 10.0
}

/// The capacity guard on the limits in force outside any window, as of `now` (see the
/// module docs). Each bucket it lowers gets a `capacity` guard note and `capacity` evidence.
pub fn guard_limits(
    capacity: &PlannedCapacity,
    svc: &ServiceConfig,
    plans: &mut [BucketPlan],
    settings: &GuardSettings,
    now: i64,
) {
    let mut counted = Vec::new();
    let mut owner: Vec<Option<usize>> = Vec::new();
    for b in svc
        .buckets
        .iter()
        .filter(|b| b.mode == Mode::Deny && !b.in_addition)
    {
        match plans.iter().position(|p| p.bucket == b.name) {
            Some(i) => {
                let Some(rps) = plans[i].guarded.limit else {
                    continue;
                };
                let floor = settings
                    .with_overrides(&b.guards)
                    .ok()
                    .and_then(|s| s.floor)
                    .unwrap_or(0.0);
                counted.push(Counted {
                    scope: b.scope,
                    rps,
                    floor,
                    scalable: true,
                });
                owner.push(Some(i));
            }
            None => {
                if let Some(rps) = b.limit.filter(|_| !crate::decide::plan::is_computed(b)) {
                    counted.push(Counted {
                        scope: b.scope,
                        rps,
                        floor: rps,
                        scalable: false,
                    });
                    owner.push(None);
                }
            }
        }
    }
    for l in fit_all(
        capacity,
        &svc.name,
        &mut counted,
        (now, now + 1),
        ("computed limit", "its floor"),
    ) {
        let Some(i) = owner[l.index] else { continue };
        let p = &mut plans[i];
        p.guarded.notes.push(GuardNote {
            guard: "capacity",
            detail: format!("{}: {} → {}", l.why, fmt_rps(l.before), fmt_rps(l.after)),
            before: Some(l.before),
            after: Some(l.after),
        });
        p.guarded.limit = Some(l.after);
        p.guarded.outcome = match p.previous {
            None => Outcome::New,
            Some(prev) if prev == l.after => Outcome::Unchanged,
            Some(_) => Outcome::Changed,
        };
        p.evidence.insert(
            "guards".into(),
            json!(
                p.guarded
                    .notes
                    .iter()
                    .map(|n| format!("{}: {}", n.guard, n.detail))
                    .collect::<Vec<_>>()
            ),
        );
        p.evidence
            .insert("outcome".into(), json!(p.guarded.outcome.as_str()));
        p.evidence.insert(
            "capacity".into(),
            json!({ "file": capacity.path, "utilization": capacity.utilization }),
        );
    }
}

/// The capacity guard on each future event window: the limits in force during it (an
/// event's raised limit where there is one, else the bucket's limit) fitted like the limits
/// outside windows, scaling only the raised limits, never below the bucket's limit outside.
/// A raised limit left at that limit is removed, with a note.
pub fn cap_windows(
    capacity: &PlannedCapacity,
    svc: &ServiceConfig,
    plans: &mut [BucketPlan],
    now: i64,
) {
    let mut windows: Vec<(i64, i64)> = plans
        .iter()
        .flat_map(|p| p.schedule.entries.iter())
        .filter(|e| e.event.is_some() && e.until > now)
        .map(|e| (e.from, e.until))
        .collect();
    windows.sort_unstable();
    windows.dedup();
    for (from, until) in windows {
        let mut counted = Vec::new();
        let mut owner: Vec<Option<(usize, usize)>> = Vec::new();
        for b in svc
            .buckets
            .iter()
            .filter(|b| b.mode == Mode::Deny && !b.in_addition)
        {
            let Some(i) = plans.iter().position(|p| p.bucket == b.name) else {
                if let Some(rps) = b.limit.filter(|_| !crate::decide::plan::is_computed(b)) {
                    counted.push(Counted {
                        scope: b.scope,
                        rps,
                        floor: rps,
                        scalable: false,
                    });
                    owner.push(None);
                }
                continue;
            };
            let Some(base) = plans[i].guarded.limit else {
                continue;
            };
            let overlapping = plans[i]
                .schedule
                .entries
                .iter()
                .position(|e| e.from < until && e.until > from);
            let (rps, scalable) = match overlapping.map(|k| &plans[i].schedule.entries[k]) {
                Some(e) => (
                    e.rps,
                    e.event.is_some() && (e.from, e.until) == (from, until),
                ),
                None => (base, false),
            };
            counted.push(Counted {
                scope: b.scope,
                rps,
                floor: base.min(rps),
                scalable,
            });
            owner.push(overlapping.filter(|_| scalable).map(|k| (i, k)));
        }
        let window = (from.max(now), until);
        for l in fit_all(
            capacity,
            &svc.name,
            &mut counted,
            window,
            ("raised limit", "the bucket's limit outside the window"),
        ) {
            let Some((i, k)) = owner[l.index] else {
                continue;
            };
            let entry: &mut Scheduled = &mut plans[i].schedule.entries[k];
            entry.wanted.get_or_insert(l.before);
            entry.rps = l.after;
            let name = entry.event.clone().unwrap_or_default();
            let note = format!("event {name}: during it, {}", l.why);
            plans[i].schedule.notes.push(note);
        }
        for p in plans.iter_mut() {
            let base = p.guarded.limit.unwrap_or(0.0);
            let before = p.schedule.entries.len();
            p.schedule
                .entries
                .retain(|e| !(e.event.is_some() && e.wanted.is_some() && e.rps <= base));
            if p.schedule.entries.len() < before {
                p.schedule.notes.push(format!(
                    "capacity leaves no room above the limit {} from {}: no scheduled limit written",
                    fmt_rps(base),
                    crate::input::capacity::utc(from)
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests;
