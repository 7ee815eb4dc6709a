//! Each bucket's scheduled limits for a run: those its events give it, and those its
//! limits file already holds, merged by these rules:
//!
//! - an event still to come or in force gives the bucket a scheduled limit for its window:
//!   the bucket's limit (as the policy and the guards left it, before the capacity guard:
//!   the window's own capacity is checked after) raised by the event
//!   ([`policies::event::Raise`]; an `rps` given for services is the service's total, so it
//!   raises each bucket by the factor that brings the service's observed peak to it), then
//!   held to the bucket's `floor` and `cap` guards; its `reason` is `events.yaml: NAME`;
//! - an entry of the file that an event wrote (`reason: "events.yaml: NAME"`) is replaced by
//!   what the event gives now; one whose event is gone from `events.yaml` is removed;
//! - any other entry is kept as written while it is to come or in force, and wins over an
//!   event that overlaps it (the event's limit is then not written, and the review says so);
//! - an entry whose window has ended is removed;
//! - a raised limit within the `hysteresis` guard of the one already written for the same
//!   event and window keeps the written one (no commit for noise).
//!
//! Every removal and every event that could not be written is a note in the review.

use std::collections::BTreeMap;

use grl_config::raw::LimitsFile;
use grl_config::{ScheduledLimit, ServiceConfig, yaml};
use policies::event::{Raise, expected_peak};

use crate::decide::guards::{GuardSettings, fmt_rps, round_rps};
use crate::decide::plan::{BucketPlan, LimitSchedule, Scheduled};
use crate::input::capacity::utc;
use crate::input::events::{Event, Targets};

/// The `reason` of a scheduled limit an event wrote: this prefix and the event's name.
pub const EVENT_REASON: &str = "events.yaml: ";

/// The scheduled limits of each bucket in the limits file `text` of `service` (none when
/// it has none or cannot be read).
pub fn existing(service: &str, text: Option<&str>) -> BTreeMap<String, Vec<ScheduledLimit>> {
    let Some(file) = text.and_then(|t| {
        yaml::parse::<LimitsFile>(&crate::output::limits_file::path(service), t).ok()
    }) else {
        return BTreeMap::new();
    };
    file.limits
        .into_iter()
        .map(|(bucket, entry)| {
            let limits = entry
                .scheduled
                .iter()
                .filter_map(|s| {
                    Some(ScheduledLimit {
                        from: crate::input::capacity::file::instant(&s.effective.from).ok()?,
                        until: crate::input::capacity::file::instant(&s.effective.until).ok()?,
                        rps: s.rps,
                        reason: s.reason.clone(),
                    })
                })
                .collect();
            (bucket, limits)
        })
        .filter(|(_, l): &(String, Vec<ScheduledLimit>)| !l.is_empty())
        .collect()
}

/// The entries of a bucket without a plan (a fixed limit) that stay: those still to come
/// or in force.
pub fn kept_unplanned(
    existing: &BTreeMap<String, Vec<ScheduledLimit>>,
    bucket: &str,
    now: i64,
) -> Vec<ScheduledLimit> {
    existing
        .get(bucket)
        .map(|l| l.iter().filter(|s| s.until > now).cloned().collect())
        .unwrap_or_default()
}

/// Gives each planned bucket of `svc` its scheduled limits from `events` and the limits
/// file's `existing` entries (rules in the module docs); `service_peak` is the service's
/// observed peak, for an `rps` given for services.
pub fn raise(
    svc: &ServiceConfig,
    plans: &mut [BucketPlan],
    events: &[Event],
    existing: &BTreeMap<String, Vec<ScheduledLimit>>,
    service_peak: Option<f64>,
    settings: &GuardSettings,
    now: i64,
) {
    for p in plans.iter_mut() {
        let mut schedule = LimitSchedule::default();
        let mine: Vec<&Event> = events
            .iter()
            .filter(|e| e.until > now && e.affects(&svc.name, &p.bucket))
            .collect();
        for old in existing.get(&p.bucket).into_iter().flatten() {
            if old.until <= now {
                schedule.notes.push(format!(
                    "scheduled limit {} ({} until {}) has ended: removed",
                    fmt_rps(old.rps),
                    utc(old.from),
                    utc(old.until)
                ));
            } else if let Some(name) = old.reason.strip_prefix(EVENT_REASON) {
                if !mine.iter().any(|e| e.name == name) {
                    schedule.notes.push(format!(
                        "event {name} no longer affects this bucket in events.yaml: its scheduled limit {} ({} until {}) removed",
                        fmt_rps(old.rps),
                        utc(old.from),
                        utc(old.until)
                    ));
                }
            } else {
                schedule.entries.push(Scheduled {
                    from: old.from,
                    until: old.until,
                    rps: old.rps,
                    reason: old.reason.clone(),
                    event: None,
                    raise: None,
                    wanted: None,
                });
            }
        }
        let bucket_settings = svc
            .bucket(&p.bucket)
            .and_then(|b| settings.with_overrides(&b.guards).ok())
            .unwrap_or_else(|| settings.clone());
        // The limit as the policy and the other guards made it: the capacity of today may
        // have lowered it, but the window has its own capacity, checked after.
        let usual = p
            .guarded
            .notes
            .iter()
            .find(|n| n.guard == "capacity")
            .and_then(|n| n.before)
            .or(p.guarded.limit);
        for e in mine {
            let Some(base) = usual else {
                schedule.notes.push(format!(
                    "event {}: the bucket has no limit to raise",
                    e.name
                ));
                continue;
            };
            let factor = match (&e.targets, e.raise) {
                (Targets::Services(_), Raise::Rps(rps)) => {
                    service_peak.filter(|p| *p > 0.0).map(|p| rps / p)
                }
                (_, raise) => raise.factor(expected_peak(&p.evidence)),
            };
            let Some(factor) = factor else {
                schedule.notes.push(format!(
                    "event {}: no observed peak to scale {} by: no scheduled limit written",
                    e.name,
                    e.raise.describe()
                ));
                continue;
            };
            let mut rps = base * factor;
            if let Some(floor) = bucket_settings.floor {
                rps = rps.max(floor);
            }
            if let Some(cap) = bucket_settings.cap {
                rps = rps.min(cap);
            }
            if let Some(kept) = schedule
                .entries
                .iter()
                .find(|k| k.event.is_none() && k.from < e.until && k.until > e.from)
            {
                schedule.notes.push(format!(
                    "event {}: the limits file's scheduled limit {} ({} until {}, `{}`) overlaps it and is kept: the event's limit is not written",
                    e.name,
                    fmt_rps(kept.rps),
                    utc(kept.from),
                    utc(kept.until),
                    kept.reason
                ));
                continue;
            }
            schedule.entries.push(Scheduled {
                from: e.from,
                until: e.until,
                rps: round_rps(rps),
                reason: format!("{EVENT_REASON}{}", e.name),
                event: Some(e.name.clone()),
                raise: Some(e.raise.describe()),
                wanted: None,
            });
        }
        schedule.entries.sort_by_key(|s| s.from);
        p.schedule = schedule;
    }
}

/// The last step, after the capacity guard: a raised limit within the hysteresis of the one
/// written for the same event and window keeps it (unless that one is above what capacity
/// allows), and each bucket learns whether its entries differ from the file's.
pub fn settle(
    svc: &ServiceConfig,
    plans: &mut [BucketPlan],
    existing: &BTreeMap<String, Vec<ScheduledLimit>>,
    settings: &GuardSettings,
) {
    for p in plans.iter_mut() {
        let old = existing.get(&p.bucket).map_or(&[][..], Vec::as_slice);
        let hysteresis = svc
            .bucket(&p.bucket)
            .and_then(|b| settings.with_overrides(&b.guards).ok())
            .map_or(settings.hysteresis, |s| s.hysteresis);
        for e in p.schedule.entries.iter_mut().filter(|e| e.event.is_some()) {
            if let Some(o) = old.iter().find(|o| {
                (o.from, o.until, o.reason.as_str()) == (e.from, e.until, e.reason.as_str())
            }) && (e.rps - o.rps).abs() < hysteresis * o.rps
                && (e.wanted.is_none() || o.rps <= e.rps)
            {
                e.rps = o.rps;
            }
        }
        p.schedule.changed = p.schedule.entries.len() != old.len()
            || p.schedule
                .entries
                .iter()
                .zip(old)
                .any(|(e, o)| !e.same_as(o));
    }
}

#[cfg(test)]
mod tests;
