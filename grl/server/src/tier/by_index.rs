//! A tick worked by bucket index: when every fresh child of a tier without a parent
//! reported by index at the version in force (a controller fed by zone aggregators of wire
//! version 2), the sums, ratios and per-child allowances are arrays indexed like the
//! version's buckets ([`Rules::dense`]) instead of maps keyed by names. The arithmetic is
//! the one of [`ratios`] (`drop_ratio`, `share`): a child is told the same thing either way
//! (a test holds the two ways to it), only the cost differs — the names of 22,000 buckets
//! are never hashed or allocated per row.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::children::Child;
use super::node::{ChildRatio, NodeConfig};
use super::packing::OutRatio;
use super::ratios::{self, Computed, RatioKey};
use super::rules::Rules;
use grl_config::Scope;

/// One group of a scope (a region, a zone, or the whole for global): the offered sum of
/// each bucket over the fresh children in it, NaN where none reported the bucket.
#[derive(Debug, Clone)]
struct Group {
    /// The scope key ([`ratios::scope_key`]): "" for global, the region or the zone.
    key: String,
    offered: Vec<f64>,
}

impl Group {
    fn new(key: &str, n: usize) -> Self {
        Self {
            key: key.to_string(),
            offered: vec![f64::NAN; n],
        }
    }

    fn add(&mut self, i: usize, offered: f64) {
        let v = &mut self.offered[i];
        *v = if v.is_nan() { offered } else { *v + offered };
    }

    /// The group's offered sum in bucket `i` (0 where nobody reported it).
    fn sum(&self, i: usize) -> f64 {
        let v = self.offered[i];
        if v.is_nan() { 0.0 } else { v }
    }
}

/// A tick's sums by index, kept until the next tick so that the rounds of instructions in
/// between read them too.
#[derive(Debug, Clone)]
pub struct IndexedSums {
    /// The version the sums are by.
    pub rules: Arc<Rules>,
    /// Global scope: one group (when this tier owns the scope).
    global: Option<Group>,
    /// Region scope: a group per region seen (when owned).
    regions: Vec<Group>,
    /// Zone scope: a group per zone seen (when owned).
    zones: Vec<Group>,
    /// Every fresh child's offered rate per bucket, NaN where none reported it.
    all: Group,
}

/// Whether `c` reports by index at `rules`.
fn by_index_at<L>(c: &Child<L>, rules: &Arc<Rules>) -> bool {
    c.rates.is_empty()
        && c.indexed
            .as_ref()
            .is_some_and(|x| Arc::ptr_eq(&x.rules, rules))
}

/// The position of the group `key` in `groups`, added if new.
fn group_at(groups: &mut Vec<Group>, key: &str, n: usize) -> usize {
    groups.iter().position(|g| g.key == key).unwrap_or_else(|| {
        groups.push(Group::new(key, n));
        groups.len() - 1
    })
}

impl IndexedSums {
    /// The sums of `children` (the fresh ones) by index, or `None` when the tick must be
    /// worked by name: the version is not worked by index, this tier has a parent, or a
    /// child reported by name or at another version.
    pub fn of<L>(cfg: &NodeConfig, rules: &Arc<Rules>, children: &[&Child<L>]) -> Option<Self> {
        let dense = rules.dense()?;
        if cfg.has_parent || !children.iter().all(|c| by_index_at(c, rules)) {
            return None;
        }
        let n = dense.len();
        let owns = |s: Scope| cfg.scopes.contains(&s);
        let mut sums = Self {
            rules: rules.clone(),
            global: owns(Scope::Global).then(|| Group::new("", n)),
            regions: Vec::new(),
            zones: Vec::new(),
            all: Group::new("", n),
        };
        for c in children {
            let Some(x) = &c.indexed else { continue };
            let ri = owns(Scope::Region).then(|| group_at(&mut sums.regions, &c.region, n));
            let zi = owns(Scope::Zone).then(|| group_at(&mut sums.zones, &c.zone, n));
            for &(i, r) in &x.rows {
                let i = i as usize;
                sums.all.add(i, r.offered);
                let group = match dense.limited_scope[i] {
                    Some(Scope::Global) => sums.global.as_mut(),
                    Some(Scope::Region) => ri.map(|at| &mut sums.regions[at]),
                    Some(Scope::Zone) => zi.map(|at| &mut sums.zones[at]),
                    None => None,
                };
                if let Some(g) = group {
                    g.add(i, r.offered);
                }
            }
        }
        Some(sums)
    }

    /// Bucket `i` as the status shows it: the offered rate over every fresh child, and
    /// the largest ratio over the groups computed for it (none: no group computed).
    pub fn bucket_status(&self, i: usize) -> (f64, Option<f64>) {
        let Some(dense) = self.rules.dense() else {
            return (0.0, None);
        };
        let groups: &[Group] = match dense.limited_scope.get(i).copied().flatten() {
            Some(Scope::Global) => self.global.as_slice(),
            Some(Scope::Region) => &self.regions,
            Some(Scope::Zone) => &self.zones,
            None => &[],
        };
        let global = dense.limited_scope[i] == Some(Scope::Global);
        let ratio = groups
            .iter()
            .filter(|g| global || !g.offered[i].is_nan())
            .map(|g| ratios::drop_ratio(g.sum(i), dense.limit[i]))
            .reduce(f64::max);
        (self.all.sum(i), ratio)
    }

    /// The tick's ratios and offered sums by name, as the tick by name makes them (for
    /// `/metrics`, the status and the children still worked by name).
    pub fn by_name(
        &self,
    ) -> (
        BTreeMap<RatioKey, Computed>,
        BTreeMap<(String, String), f64>,
    ) {
        let (mut computed, mut offered) = (BTreeMap::new(), BTreeMap::new());
        let Some(dense) = self.rules.dense() else {
            return (computed, offered);
        };
        let mut i = 0;
        for (service, buckets) in self.rules.services() {
            for b in buckets {
                let groups: &[Group] = match dense.limited_scope[i] {
                    Some(Scope::Global) => self.global.as_slice(),
                    Some(Scope::Region) => &self.regions,
                    Some(Scope::Zone) => &self.zones,
                    None => &[],
                };
                for g in groups {
                    let global = dense.limited_scope[i] == Some(Scope::Global);
                    if g.offered[i].is_nan() && !global {
                        continue;
                    }
                    let sum = g.sum(i);
                    let limit = dense.limit[i];
                    computed.insert(
                        (service.clone(), b.name.clone(), g.key.clone()),
                        Computed {
                            offered: sum,
                            limit,
                            ratio: ratios::drop_ratio(sum, limit),
                        },
                    );
                }
                if !self.all.offered[i].is_nan() {
                    offered.insert((service.clone(), b.name.clone()), self.all.sum(i));
                }
                i += 1;
            }
        }
        (computed, offered)
    }

    /// What child `c` is told, as `ratios_for` by name tells it: per bucket of its
    /// services with a limit in a scope this tier owns, the ratio over the child's group
    /// and the child's share of the limit by its offered rate. `None` when `c` does not
    /// report by index at these sums' version. `ordinals`: the child's services as
    /// positions in the version's service list, ascending ([`Child::service_ordinals`]).
    pub(crate) fn ratios_for<'a, L>(
        &'a self,
        cfg: &NodeConfig,
        c: &Child<L>,
        ordinals: &[u32],
    ) -> Option<Vec<ChildRatio<'a>>> {
        if !by_index_at(c, &self.rules) {
            return None;
        }
        let rows = &c.indexed.as_ref()?.rows;
        let dense = self.rules.dense()?;
        let services: Vec<_> = self.rules.services().iter().collect();
        let group = |groups: &'a [Group], key: &str| groups.iter().find(|g| g.key == key);
        let (region, zone) = (group(&self.regions, &c.region), group(&self.zones, &c.zone));
        let own_ms = cfg.validity().as_millis() as u32;
        let mut out = Vec::with_capacity(rows.len());
        // Ordinals ascend, so do the buckets' indices: one pass over the child's rows.
        let mut at = 0;
        for &o in ordinals {
            let (Some((service, buckets)), Some(&first)) = (
                services.get(o as usize),
                dense.service_first.get(o as usize),
            ) else {
                continue;
            };
            for (j, b) in buckets.iter().enumerate() {
                let i = first as usize + j;
                let Some(scope) = dense.limited_scope[i].filter(|s| cfg.scopes.contains(s)) else {
                    continue;
                };
                while at < rows.len() && (rows[at].0 as usize) < i {
                    at += 1;
                }
                let own = match rows.get(at) {
                    Some((x, r)) if *x as usize == i => r.offered,
                    _ => 0.0,
                };
                let g = match scope {
                    Scope::Global => self.global.as_ref(),
                    Scope::Region => region,
                    Scope::Zone => zone,
                };
                let sum = g.map_or(0.0, |g| g.sum(i));
                let limit = dense.limit[i];
                out.push(ChildRatio {
                    key: dense.key[i],
                    out: OutRatio {
                        index: Some(i as u32),
                        service,
                        bucket: &b.name,
                        ratio: ratios::drop_ratio(sum, limit),
                        valid_for_ms: own_ms,
                        allowed: (own > 0.0).then(|| ratios::share(limit, own, sum)),
                    },
                });
            }
        }
        Some(out)
    }
}
