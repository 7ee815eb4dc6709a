//! A service's planned capacity over time: each area's steps with numbers (a query already
//! evaluated), read at an instant or over a window.
//!
//! An area's capacity at `t` is its last step whose `from` is at or before `t`, else its
//! undated entry (today's capacity); an area with neither has no capacity known at `t`.
//! The **total** capacity of the service is its global entry, or else the sum of its
//! regions, or else the sum of its zones: what the service's traffic as a whole (what the
//! configurator sees) can be compared with.

use std::collections::{BTreeMap, BTreeSet};

use super::file::Area;

/// The capacity of one area: `(from, rps)` steps, the undated one (`None`) first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Steps(pub Vec<(Option<i64>, f64)>);

impl Steps {
    /// The capacity in force at `t`.
    pub fn at(&self, t: i64) -> Option<f64> {
        let mut found = None;
        for &(from, rps) in &self.0 {
            match from {
                None => found = found.or(Some(rps)),
                Some(f) if f <= t => found = Some(rps),
                Some(_) => {}
            }
        }
        found
    }

    /// The least capacity in force at any time of `[from, until)`; `None` when some part of
    /// it has none known.
    pub fn min_over(&self, from: i64, until: i64) -> Option<f64> {
        let mut least = self.at(from)?;
        for &(step, rps) in &self.0 {
            if let Some(s) = step
                && s > from
                && s < until
            {
                least = least.min(rps);
            }
        }
        Some(least)
    }
}

/// A service's planned capacity with numbers (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCapacity {
    /// The service.
    pub service: String,
    /// The file it comes from.
    pub path: String,
    /// The fraction of the capacity the service's limits may add up to.
    pub utilization: f64,
    /// Each area's steps.
    pub areas: BTreeMap<Area, Steps>,
    /// Each area's first line in the file, for errors.
    pub lines: BTreeMap<Area, (String, Option<usize>)>,
}

impl PlannedCapacity {
    /// The regions the file names (region entries and the regions of zone entries).
    pub fn regions(&self) -> BTreeSet<&str> {
        self.areas
            .keys()
            .filter_map(|a| match a {
                Area::Region(r) => Some(r.as_str()),
                Area::Zone { region, .. } => region.as_deref(),
                Area::Global => None,
            })
            .collect()
    }

    /// The zones the file names in `region` (`None`: in any region).
    pub fn zones(&self, region: Option<&str>) -> usize {
        self.areas
            .keys()
            .filter(|a| match (a, region) {
                (Area::Zone { .. }, None) => true,
                (Area::Zone { region: r, .. }, Some(want)) => r.as_deref() == Some(want),
                _ => false,
            })
            .count()
    }

    /// What the total is made of: the global entry, or the regions, or the zones.
    pub fn total_areas(&self) -> Vec<&Area> {
        for scope in [
            grl_config::Scope::Global,
            grl_config::Scope::Region,
            grl_config::Scope::Zone,
        ] {
            let areas: Vec<&Area> = self.areas.keys().filter(|a| a.scope() == scope).collect();
            if !areas.is_empty() {
                return areas;
            }
        }
        Vec::new()
    }

    /// `global`, `eu-1`, or `eu-1 + us-1`: the name of the total.
    pub fn total_name(&self) -> String {
        self.total_areas()
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(" + ")
    }

    /// The total capacity at `t` (`None` when a part of it has none known then).
    pub fn total_at(&self, t: i64) -> Option<f64> {
        self.total_areas()
            .iter()
            .map(|a| self.areas[*a].at(t))
            .sum()
    }

    /// The least total capacity over `[from, until)`.
    pub fn total_min_over(&self, from: i64, until: i64) -> Option<f64> {
        let mut edges: Vec<i64> = vec![from];
        for a in self.total_areas() {
            edges.extend(
                self.areas[a]
                    .0
                    .iter()
                    .filter_map(|(f, _)| *f)
                    .filter(|f| *f > from && *f < until),
            );
        }
        edges
            .into_iter()
            .map(|t| self.total_at(t))
            .try_fold(f64::INFINITY, |least, c| c.map(|c| least.min(c)))
            .filter(|c| c.is_finite())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Step = (Option<i64>, f64);

    fn planned(areas: Vec<(Area, Vec<Step>)>) -> PlannedCapacity {
        PlannedCapacity {
            service: "orders".into(),
            path: "capacity/orders.yaml".into(),
            utilization: 0.8,
            lines: BTreeMap::new(),
            areas: areas.into_iter().map(|(a, s)| (a, Steps(s))).collect(),
        }
    }

    #[test]
    fn a_step_takes_over_at_its_time() {
        let s = Steps(vec![
            (None, 1000.0),
            (Some(100), 4000.0),
            (Some(200), 3000.0),
        ]);
        assert_eq!(s.at(99), Some(1000.0));
        assert_eq!(s.at(100), Some(4000.0));
        assert_eq!(s.at(250), Some(3000.0));
        assert_eq!(s.min_over(50, 150), Some(1000.0));
        assert_eq!(s.min_over(120, 300), Some(3000.0));
        assert_eq!(Steps(vec![(Some(100), 5.0)]).at(50), None);
    }

    #[test]
    fn the_total_is_global_else_the_regions_else_the_zones() {
        let zone = |z: &str, r: &str| Area::Zone {
            zone: z.into(),
            region: Some(r.into()),
        };
        let p = planned(vec![
            (Area::Region("eu-1".into()), vec![(None, 100.0)]),
            (
                Area::Region("us-1".into()),
                vec![(None, 50.0), (Some(10), 70.0)],
            ),
            (zone("eu-1a", "eu-1"), vec![(None, 60.0)]),
            (zone("eu-1b", "eu-1"), vec![(None, 60.0)]),
        ]);
        assert_eq!(p.total_name(), "eu-1 + us-1");
        assert_eq!(p.total_at(0), Some(150.0));
        assert_eq!(p.total_at(10), Some(170.0));
        assert_eq!(p.total_min_over(0, 20), Some(150.0));
        assert_eq!(
            p.regions().into_iter().collect::<Vec<_>>(),
            ["eu-1", "us-1"]
        );
        assert_eq!(
            (p.zones(Some("eu-1")), p.zones(Some("us-1")), p.zones(None)),
            (2, 0, 2)
        );
        let g = planned(vec![(Area::Global, vec![(Some(10), 9.0)])]);
        assert_eq!(g.total_at(0), None);
        assert_eq!(g.total_min_over(0, 20), None);
        assert_eq!(g.total_min_over(10, 20), Some(9.0));
    }
}
