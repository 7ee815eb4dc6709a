//! Forecast demand above planned capacity: the review's own section, and what
//! `rlc_capacity_shortfall_services` counts.
//!
//! The configurator sees each bucket's traffic summed over every zone, so the demand it can
//! forecast is the service's total (its computed buckets' offered load summed), and it is
//! compared with the service's total capacity (the global entry, or the regions', or the
//! zones' sum; see [`crate::input::capacity::timeline`]). The demand of each day of the horizon is the
//! `forecast` model's expected peak that day ([`policies::capacity::forecast_demand`]); a
//! day whose demand is above that day's least capacity × utilisation is a shortfall, and
//! the worst such day is reported. Each event still to come adds its own check: the
//! horizon's peak demand raised by the event, against the least capacity of its window.

use policies::capacity::Demand;
use policies::event::{Raise, expected_peak};
use serde::Serialize;

use crate::decide::guards::fmt_rps;
use crate::decide::plan::BucketPlan;
use crate::input::capacity::PlannedCapacity;
use crate::input::capacity::{day, utc};
use crate::input::events::{Event, Targets};

/// Forecast demand above a service's planned capacity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shortfall {
    /// The service.
    pub service: String,
    /// The capacity compared with: `global`, a region, or regions joined by ` + `.
    pub area: String,
    /// When the demand peaks (unix seconds).
    pub at: i64,
    /// The demand then (requests per second).
    pub demand: f64,
    /// The planned capacity then.
    pub capacity: f64,
    /// The utilisation planned.
    pub utilization: f64,
    /// How the demand was obtained.
    pub method: &'static str,
    /// The event that raises the demand, if any.
    pub event: Option<String>,
}

impl Shortfall {
    /// `orders, global: forecast peak 52000 rps on 2026-12-24 against 40000 planned capacity
    /// × 0.8 (32000 rps)`.
    pub fn line(&self) -> String {
        let what = match &self.event {
            Some(e) => format!("{} peak with event {e}", self.method),
            None => format!("{} peak", self.method),
        };
        format!(
            "{}, {}: {what} {} rps on {} against {} planned capacity × {} ({} rps)",
            self.service,
            self.area,
            fmt_rps(self.demand),
            day(self.at),
            fmt_rps(self.capacity),
            self.utilization,
            fmt_rps(self.capacity * self.utilization)
        )
    }
}

/// The shortfalls of `service` (see the module docs): `demand` is its forecast over the
/// horizon, `plans` its buckets' plans (for an event's raise of one bucket), `events` those
/// still to come.
///
/// `fixed` is the part of the demand that fixed limits stand for (contracts an event does
/// not raise).
#[allow(clippy::too_many_arguments)]
pub fn find(
    service: &str,
    capacity: &PlannedCapacity,
    demand: &Demand,
    fixed: f64,
    plans: &[BucketPlan],
    events: &[Event],
    service_peak: Option<f64>,
    now: i64,
) -> Vec<Shortfall> {
    let u = capacity.utilization;
    let method = demand.method.as_str();
    let shortfall = |at: i64, demand: f64, cap: f64, event: Option<String>| Shortfall {
        service: service.to_string(),
        area: capacity.total_name(),
        at,
        demand,
        capacity: cap,
        utilization: u,
        method,
        event,
    };
    let mut out = Vec::new();
    let worst = demand
        .days
        .iter()
        .filter_map(|d| {
            let cap = capacity.total_min_over(d.start, d.start + 86_400)?;
            (d.peak > cap * u).then_some((d, cap))
        })
        .max_by(|(a, ca), (b, cb)| (a.peak / ca).total_cmp(&(b.peak / cb)));
    if let Some((d, cap)) = worst {
        out.push(shortfall(d.at, d.peak, cap, None));
    }
    let peak = demand.peak() - fixed;
    for e in events
        .iter()
        .filter(|e| e.until > now && e.touches(service))
    {
        let raised = match (&e.targets, e.raise) {
            (Targets::Services(_), Raise::Multiplier(m)) => Some(fixed + peak * m),
            (Targets::Services(_), Raise::Rps(rps)) => service_peak
                .filter(|p| *p > 0.0)
                .map(|p| fixed + peak * rps / p),
            (Targets::Buckets(_), raise) => Some(
                fixed
                    + peak
                    + plans
                        .iter()
                        .filter(|p| e.affects(service, &p.bucket))
                        .filter_map(|p| {
                            let bucket_peak = expected_peak(&p.evidence)?;
                            Some(bucket_peak * (raise.factor(Some(bucket_peak))? - 1.0))
                        })
                        .sum::<f64>(),
            ),
        };
        let Some(raised) = raised else { continue };
        let Some(cap) = capacity.total_min_over(e.from.max(now), e.until) else {
            continue;
        };
        if raised > cap * u {
            out.push(shortfall(
                e.from.max(now),
                raised,
                cap,
                Some(e.name.clone()),
            ));
        }
    }
    out
}

/// The review's section: one line per shortfall, or `None` without any.
pub fn section(shortfalls: &[Shortfall]) -> Option<(String, String)> {
    if shortfalls.is_empty() {
        return None;
    }
    let mut body = String::from(
        "Forecast demand above planned capacity × utilisation (capacity/<service>.yaml). \
         Limits stay within the capacity; the traffic above them will be dropped unless \
         capacity is added:\n\n",
    );
    for s in shortfalls {
        body.push_str(&format!("- {} (peak at {})\n", s.line(), utc(s.at)));
    }
    Some(("Capacity shortfall".to_string(), body))
}
