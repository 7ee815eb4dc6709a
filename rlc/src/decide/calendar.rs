//! A service's plans meet its planned capacity and its events, in this order: the capacity
//! guard on the limits as of "now"; each event's scheduled limit raised from those limits;
//! the capacity guard on each event's window; the scheduled limits settled against the
//! limits file's; and the service's forecast demand compared with its capacity.

use std::collections::BTreeMap;

use grl_config::{Bucket, ServiceConfig};
use policies::capacity::forecast_demand;
use policies::{Point, Series};
use serde_json::json;

use crate::decide::capacity_guard::{cap_windows, guard_limits};
use crate::decide::guards::GuardSettings;
use crate::decide::plan::{self, BucketPlan};
use crate::decide::scheduled_limits as schedule;
use crate::decide::shortfall::{self, Shortfall};
use crate::input::capacity::PlannedCapacity;
use crate::input::events::Event;
use crate::output::limits_file::LimitLine;

/// The horizon demand is forecast over when no bucket's policy names one.
const DEFAULT_HORIZON_SECS: i64 = 7 * 86_400;
/// The history demand is forecast from.
const DEMAND_WINDOW_SECS: i64 = 28 * 86_400;

/// Applies `capacity` and `events` to the plans of `svc` (see the module docs);
/// `computed` are its computed buckets and `offered` their series, in the plans' order.
/// Returns the lines of buckets without a plan that keep scheduled limits, and the
/// service's shortfalls.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    svc: &ServiceConfig,
    plans: &mut [BucketPlan],
    computed: &[&Bucket],
    offered: &[Vec<(i64, f64)>],
    limits_text: Option<&str>,
    capacity: Option<&PlannedCapacity>,
    events: &[Event],
    settings: &GuardSettings,
    now: i64,
) -> (BTreeMap<String, LimitLine>, Vec<Shortfall>) {
    let demand_series = service_series(computed, offered);
    let service_peak = demand_series
        .range(now - DEMAND_WINDOW_SECS, now)
        .iter()
        .map(|p| p.value)
        .reduce(f64::max);
    if let Some(cap) = capacity {
        guard_limits(cap, svc, plans, settings, now);
    }
    let existing = schedule::existing(&svc.name, limits_text);
    schedule::raise(svc, plans, events, &existing, service_peak, settings, now);
    if let Some(cap) = capacity {
        cap_windows(cap, svc, plans, now);
    }
    schedule::settle(svc, plans, &existing, settings);
    let unplanned = svc
        .buckets
        .iter()
        .filter(|b| !plan::is_computed(b))
        .filter_map(|b| {
            let kept = schedule::kept_unplanned(&existing, &b.name, now);
            let rps = b.limit?;
            (!kept.is_empty()).then(|| {
                let line = LimitLine {
                    rps,
                    evidence: [("policy".to_string(), json!(b.policy.kind))].into(),
                    scheduled: kept
                        .iter()
                        .map(|k| {
                            plan::Scheduled {
                                from: k.from,
                                until: k.until,
                                rps: k.rps,
                                reason: k.reason.clone(),
                                event: None,
                                raise: None,
                                wanted: None,
                            }
                            .entry()
                        })
                        .collect(),
                };
                (b.name.clone(), line)
            })
        })
        .collect();
    let shortfalls = match capacity {
        Some(cap) => {
            let horizon = computed
                .iter()
                .filter_map(|b| {
                    policies::from_spec(&b.policy.kind, &b.policy.params)
                        .ok()?
                        .horizon()
                })
                .map(|h| h.as_secs() as i64)
                .max()
                .unwrap_or(DEFAULT_HORIZON_SECS);
            let fixed: f64 = svc
                .buckets
                .iter()
                .filter(|b| !plan::is_computed(b) && !b.in_addition)
                .filter_map(|b| b.limit)
                .sum();
            match forecast_demand(&demand_series, now, DEMAND_WINDOW_SECS, horizon) {
                Some(mut demand) => {
                    for d in &mut demand.days {
                        d.peak += fixed;
                    }
                    shortfall::find(
                        &svc.name,
                        cap,
                        &demand,
                        fixed,
                        plans,
                        events,
                        service_peak,
                        now,
                    )
                }
                None => Vec::new(),
            }
        }
        None => Vec::new(),
    };
    (unplanned, shortfalls)
}

/// The service's offered load: its computed buckets' series summed step by step (a bucket
/// marked `in_addition` counts requests another bucket counts too, so it is left out).
fn service_series(computed: &[&Bucket], offered: &[Vec<(i64, f64)>]) -> Series {
    let mut sums: BTreeMap<i64, f64> = BTreeMap::new();
    let mut step = i64::MAX;
    for (b, points) in computed.iter().zip(offered) {
        if b.in_addition {
            continue;
        }
        for w in points.windows(2) {
            step = step.min(w[1].0 - w[0].0);
        }
        for &(ts, v) in points {
            *sums.entry(ts).or_default() += v;
        }
    }
    Series::new(
        if step == i64::MAX { 300 } else { step },
        sums.into_iter()
            .map(|(ts, value)| Point { ts, value })
            .collect(),
    )
}
