//! Planned capacity: `capacity/<service>.yaml` in the config repo ([`file`]), read into
//! numbers over time ([`timeline`]: a query evaluated at the run's "now"). The guard that
//! keeps a service's limits within it is [`crate::decide::capacity_guard`]; the report of
//! forecast demand above it, [`crate::decide::shortfall`].
//!
//! [`read`] is what a run calls: every capacity file of the checkout validated against its
//! services, and every query evaluated, or every problem at once, each naming file, line
//! and field.

pub mod file;
pub mod timeline;

use std::collections::BTreeMap;

use grl_config::{ConfigError, ConfigErrors, Snapshot};

use crate::input::source::{MetricsSource, SourceError};
pub use file::{Area, CapacityFile};
pub use timeline::{PlannedCapacity, Steps};

/// Why the planned capacity could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    /// A capacity file is invalid, or a query returned nothing usable.
    #[error(transparent)]
    Config(#[from] ConfigErrors),
    /// The metrics source failed while evaluating a query.
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// Whether `path` is a capacity file (`capacity/<name>.yaml`).
pub fn is_capacity_file(path: &str) -> bool {
    path.strip_prefix(&format!("{}/", file::DIR))
        .is_some_and(|n| !n.contains('/') && (n.ends_with(".yaml") || n.ends_with(".yml")))
}

/// The planned capacity of every service with a capacity file among `files`, validated
/// against `snapshot` (the service exists; its per-region and per-zone limits can be
/// counted), its queries evaluated by `source` at `now`.
pub async fn read(
    files: &BTreeMap<String, String>,
    snapshot: &Snapshot,
    source: &dyn MetricsSource,
    now: i64,
) -> Result<BTreeMap<String, PlannedCapacity>, CapacityError> {
    let mut errors = Vec::new();
    let mut parsed = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| is_capacity_file(p)) {
        match file::parse(path, text, snapshot) {
            Ok(f) => parsed.push(f),
            Err(mut e) => errors.append(&mut e),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors).into());
    }
    let mut out = BTreeMap::new();
    for f in parsed {
        let mut areas: BTreeMap<Area, Steps> = BTreeMap::new();
        let mut lines = BTreeMap::new();
        for e in &f.entries {
            let rps = match &e.amount {
                file::Amount::Rps(rps) => *rps,
                file::Amount::Query(expr) => {
                    let what = format!("{}:{}: {}.query", f.path, line(e.amount_line), e.field);
                    match source.instant(&what, expr, now).await? {
                        Some(v) if v.is_finite() && v > 0.0 => v,
                        got => {
                            errors.push(ConfigError::new(
                                &f.path,
                                e.amount_line,
                                format!("{}.query", e.field),
                                match got {
                                    None => format!(
                                        "returned nothing at {} (no series from {}): today's capacity is unknown",
                                        utc(now),
                                        source.describe()
                                    ),
                                    Some(v) => format!(
                                        "returned {v} at {}: a capacity must be above 0",
                                        utc(now)
                                    ),
                                },
                            ));
                            continue;
                        }
                    }
                }
            };
            areas
                .entry(e.area.clone())
                .or_default()
                .0
                .push((e.from, rps));
            lines
                .entry(e.area.clone())
                .or_insert_with(|| (e.field.clone(), e.line));
        }
        for steps in areas.values_mut() {
            steps.0.sort_by_key(|(from, _)| *from);
        }
        let planned = PlannedCapacity {
            service: f.service.clone(),
            path: f.path,
            utilization: f.utilization,
            areas,
            lines,
        };
        if let Some(svc) = snapshot.service(&f.service) {
            errors.extend(check_topology(&planned, svc));
        }
        out.insert(f.service, planned);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(ConfigErrors(errors).into())
    }
}

fn line(l: Option<usize>) -> String {
    l.map_or_else(|| "?".into(), |l| l.to_string())
}

/// `2026-12-24T18:00:00Z`: an instant as the review and the limits file write it.
pub fn utc(unix: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp(unix, 0).map_or_else(
        || unix.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

/// `2026-12-24`: the day of an instant, in UTC.
pub fn day(unix: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp(unix, 0)
        .map_or_else(|| unix.to_string(), |t| t.format("%Y-%m-%d").to_string())
}

/// Refuses a capacity that cannot count a service's limits: a per-region (per-zone) deny
/// bucket against a wider capacity whose regions (zones) the file does not name.
pub fn check_topology(
    capacity: &PlannedCapacity,
    svc: &grl_config::ServiceConfig,
) -> Vec<grl_config::ConfigError> {
    let mut errors = Vec::new();
    let total_scope = capacity.total_areas().first().map(|a| a.scope());
    for b in svc
        .buckets
        .iter()
        .filter(|b| b.mode == grl_config::Mode::Deny && !b.in_addition)
    {
        let mut missing = Vec::new();
        if b.scope == grl_config::Scope::Region
            && total_scope.is_some_and(|s| s != grl_config::Scope::Region)
            && capacity.regions().is_empty()
        {
            missing.push((
                capacity.total_areas()[0].clone(),
                "the service's regions (a `scope: region` entry each, or `region:` on its zones)"
                    .to_string(),
            ));
        }
        if b.scope == grl_config::Scope::Zone {
            if total_scope.is_some_and(|s| s != grl_config::Scope::Zone)
                && capacity.zones(None) == 0
            {
                missing.push((
                    capacity.total_areas()[0].clone(),
                    "the service's zones (a `scope: zone` entry each)".to_string(),
                ));
            }
            for area in capacity.areas.keys() {
                if let Area::Region(r) = area
                    && capacity.zones(Some(r)) == 0
                {
                    missing.push((
                        area.clone(),
                        format!("the zones of {r} (`scope: zone` entries with `region: {r}`)"),
                    ));
                }
            }
        }
        for (area, what) in missing {
            let (field, line) = capacity.lines.get(&area).cloned().unwrap_or_default();
            errors.push(grl_config::ConfigError::new(
                &capacity.path,
                line,
                field,
                format!(
                    "bucket `{}` has a limit per {}: name {what} so that its limit counts once for each in the {} capacity",
                    b.name,
                    if b.scope == grl_config::Scope::Region { "region" } else { "zone" },
                    area.name()
                ),
            ));
        }
    }
    errors
}
