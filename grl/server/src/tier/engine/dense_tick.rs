//! A tick worked by bucket index: when every fresh child of a tier without a parent
//! reported by index at the version in force (a controller fed by zone aggregators of wire
//! version 2), the sums, ratios and per-child allowances are arrays indexed like the
//! version's buckets ([`Rules::dense`]) instead of maps keyed by names. The arithmetic is
//! the one of [`ratios`] (`drop_ratio`, `share`): a child is told the same thing either way
//! (a test holds the two ways to it), only the cost differs — the names of 22,000 buckets
//! are never hashed or allocated per row.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::child::Child;
use super::node_config::NodeConfig;
use super::ratios::SentRatio;
use super::ratios::{self, Computed, RatioKey};
use super::rules::Rules;
use super::scopes::Owned;
use grl_config::Scope;
use grl_core::proto;

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
        self.reported(i).unwrap_or(0.0)
    }

    /// The group's offered sum in bucket `i`, `None` where nobody reported it.
    fn reported(&self, i: usize) -> Option<f64> {
        let v = self.offered[i];
        (!v.is_nan()).then_some(v)
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
    /// The rate horizon the children's rates are counted over.
    horizon_secs: f64,
}

/// Whether `c` reports by index at `rules`.
fn by_index_at<L>(c: &Child<L>, rules: &Arc<Rules>) -> bool {
    c.rates.is_empty()
        && c.indexed
            .as_ref()
            .is_some_and(|x| Arc::ptr_eq(&x.rules, rules))
}

/// Whether `c`'s rows can be summed by index at `rules`: by index, or none at all (a child
/// that has not had the config yet: it is told by name, and adds nothing).
fn summable_at<L>(c: &Child<L>, rules: &Arc<Rules>) -> bool {
    c.rates.is_empty()
        && c.indexed
            .as_ref()
            .is_none_or(|x| Arc::ptr_eq(&x.rules, rules))
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
    /// child reported rows by name or at another version (a child without rows, one that
    /// has not had the config yet, does not count).
    pub fn of<L>(
        cfg: &NodeConfig,
        owned: &Owned,
        rules: &Arc<Rules>,
        children: &[&Child<L>],
    ) -> Option<Self> {
        let dense = rules.dense()?;
        if cfg.has_parent || !children.iter().all(|c| summable_at(c, rules)) {
            return None;
        }
        let n = dense.len();
        let mut sums = Self {
            rules: rules.clone(),
            global: owned.owns(Scope::Global, "").then(|| Group::new("", n)),
            regions: Vec::new(),
            zones: Vec::new(),
            all: Group::new("", n),
            horizon_secs: cfg.rate_horizon_secs(),
        };
        for c in children {
            let Some(x) = &c.indexed else { continue };
            let ri = owned
                .owns(Scope::Region, &c.zone)
                .then(|| group_at(&mut sums.regions, &c.region, n));
            let zi = owned
                .owns(Scope::Zone, &c.zone)
                .then(|| group_at(&mut sums.zones, &c.zone, n));
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
            .map(|g| {
                let limit = dense.limit_in(i, |j| g.sum(j));
                ratios::drop_ratio(g.sum(i), limit, self.horizon_secs)
            })
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
                    let limit = dense.limit_in(i, |j| g.sum(j));
                    computed.insert(
                        (service.clone(), b.name.clone(), g.key.clone()),
                        Computed {
                            offered: sum,
                            limit,
                            ratio: ratios::drop_ratio(sum, limit, self.horizon_secs),
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
    /// and the child's share of the limit by its offered rate; made in one pass straight
    /// into the packed form, with what to remember as sent and whether anything moved
    /// enough to tell (as the round by name decides it). `None` when `c` does not report
    /// by index at these sums' version. `ordinals`: the child's services as positions in
    /// the version's service list, ascending ([`Child::service_ordinals`]); `children`:
    /// how many children report each of those services, by position.
    pub(crate) fn packed_for<L>(
        &self,
        cfg: &NodeConfig,
        owned: &Owned,
        c: &Child<L>,
        ordinals: &[u32],
        children: &[u32],
    ) -> Option<PackedForChild> {
        if !by_index_at(c, &self.rules) {
            return None;
        }
        let rows = &c.indexed.as_ref()?.rows;
        let dense = self.rules.dense()?;
        let lens: Vec<usize> = self.rules.services().values().map(Vec::len).collect();
        let group = |groups: &'_ [Group], key: &str| groups.iter().position(|g| g.key == key);
        let (region, zone) = (group(&self.regions, &c.region), group(&self.zones, &c.zone));
        let own_ms = cfg.validity().as_millis() as u32;
        let horizon = cfg.rate_horizon_secs();
        let n = rows.len();
        let mut out = PackedForChild {
            sent: Vec::with_capacity(n),
            packed: proto::PackedRatios {
                config_version: self.rules.version.clone(),
                index_delta: Vec::with_capacity(n),
                ratio: Vec::with_capacity(n),
                allowed: Vec::with_capacity(n),
                valid_at: Vec::new(),
                valid_for_ms: Vec::new(),
            },
            valid_for_ms: 0,
            changed: false,
        };
        let before = &c.sent.ratios;
        let (mut at, mut previous) = (0, 0u32);
        for &o in ordinals {
            let (Some(&len), Some(&first)) =
                (lens.get(o as usize), dense.service_first.get(o as usize))
            else {
                continue;
            };
            let n = children.get(o as usize).copied().unwrap_or(1);
            for i in first as usize..first as usize + len {
                let Some(scope) = dense.limited_scope[i].filter(|s| owned.owns(*s, &c.zone)) else {
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
                    Scope::Region => region.map(|at| &self.regions[at]),
                    Scope::Zone => zone.map(|at| &self.zones[at]),
                };
                // As by name: a global bucket always has a sum, a region's or a zone's only
                // where someone in it reported the bucket.
                let sum = match scope {
                    Scope::Global => g.map(|g| g.sum(i)),
                    Scope::Region | Scope::Zone => g.and_then(|g| g.reported(i)),
                };
                let limit = g.map_or(dense.limit[i], |g| dense.limit_in(i, |j| g.sum(j)));
                let ratio = ratios::drop_ratio(sum.unwrap_or(0.0), limit, horizon);
                let allowed = sum.and_then(|sum| ratios::share(limit, own, sum, n, horizon));
                let key = dense.key[i];
                out.changed = out.changed
                    || before.get(out.sent.len()).is_none_or(|old| {
                        old.key != key
                            || ratios::changed(old.ratio, ratio)
                            || ratios::allowance_changed(old.allowed, allowed)
                    });
                out.sent.push(SentRatio {
                    key,
                    ratio,
                    allowed,
                });
                let p = &mut out.packed;
                p.index_delta.push(i as u32 - previous);
                previous = i as u32;
                p.ratio.push(ratio as f32);
                p.allowed.push(allowed.map_or(f32::NAN, |a| a as f32));
            }
        }
        out.changed |= out.sent.len() != before.len();
        if !out.sent.is_empty() {
            out.valid_for_ms = own_ms;
        }
        Some(out)
    }
}

/// One child's instruction by index, see [`IndexedSums::packed_for`].
#[derive(Debug)]
pub(crate) struct PackedForChild {
    /// What to remember as sent.
    pub sent: Vec<SentRatio>,
    /// The ratios and allowances, packed.
    pub packed: proto::PackedRatios,
    /// Their validity (every one is computed here: the same).
    pub valid_for_ms: u32,
    /// Whether a ratio or an allowance moved enough since the last instruction to tell.
    pub changed: bool,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use grl_config::Scope;
    use grl_core::{packed, proto};
    use tokio::sync::mpsc;
    use tokio::time::Instant;

    use crate::tier::engine::node::Node;

    use crate::tier::engine::node_config::NodeConfig;
    use crate::tier::engine::rules::Rules;

    /// Three services, each with global, region and zone buckets, one without a limit, and
    /// two with priority classes (a region's and a global one).
    fn rules() -> Rules {
        let files = ["ads", "pay", "search"].map(|svc| {
            let text = format!(
                "service: {svc}\nbuckets:\n\
                 - {{ name: g, match: {{ caller: a }}, scope: global, mode: deny, policy: {{ kind: fixed, rps: 250 }} }}\n\
                 - {{ name: r, match: {{ caller: b }}, scope: region, mode: deny, policy: {{ kind: fixed, rps: 300 }} }}\n\
                 - {{ name: z, match: {{ caller: c }}, scope: zone, mode: deny, policy: {{ kind: fixed, rps: 80 }} }}\n\
                 - {{ name: s, match: {{ caller: d }}, scope: zone, mode: shadow, policy: {{ kind: historical-peak }} }}\n\
                 - {{ name: p, match: {{ caller: e }}, scope: region, mode: deny, policy: {{ kind: fixed, rps: 150 }}, priorities: [hi, mid, lo], min_share: {{ lo: 0.1 }} }}\n\
                 - {{ name: q, match: {{ caller: f }}, scope: global, mode: deny, policy: {{ kind: fixed, rps: 400 }}, priorities: [hi, lo] }}\n"
            );
            (format!("services/{svc}.yaml"), text)
        });
        Rules::from_snapshot(&grl_config::from_files("v1", files).unwrap(), &[], 0, 0)
    }

    fn controller(scopes: Vec<Scope>) -> Node {
        Node::new(NodeConfig {
            level: proto::Level::Global,
            id: "ctl".into(),
            zone: String::new(),
            region: String::new(),
            interval: Duration::from_secs(1),
            scopes,
            has_parent: false,
            validity_intervals: 5,
        })
    }

    /// Zone `z`'s report: every bucket of the services it lists, some over their limits,
    /// by index (`packed`) or by name.
    fn zone_report(rules: &Rules, z: usize, packed: bool) -> proto::Report {
        let services: Vec<String> = if z == 2 {
            vec!["search".into(), "ads".into()]
        } else {
            rules.services().keys().cloned().collect()
        };
        let mut rows = Vec::new();
        for svc in &services {
            for (j, b) in rules.services()[svc].iter().enumerate() {
                let index = rules.index_of(svc, j).unwrap();
                let offered = 20.0 + ((index as usize * 7 + z * 13) % 11) as f64 * 17.5;
                if (index as usize + z).is_multiple_of(5) {
                    continue;
                }
                rows.push((index, svc.clone(), b.name.clone(), offered));
            }
        }
        rows.sort_by_key(|r| r.0);
        let mut r = proto::Report {
            reporter_id: format!("zone-{z}"),
            level: proto::Level::Zone as i32,
            zone: format!("z{z}"),
            region: if z < 2 { "eu" } else { "us" }.into(),
            services,
            config_version: rules.version.clone(),
            interval_ms: 1000,
            wire_version: packed::WIRE_VERSION,
            ..Default::default()
        };
        if packed {
            let rows: Vec<packed::IndexedRow> = rows
                .iter()
                .map(|(index, .., offered)| packed::IndexedRow {
                    index: *index,
                    offered: f64::from(*offered as f32),
                    dropped: 0.0,
                    shadow_dropped: 0.0,
                    clients: 3,
                })
                .collect();
            r.packed = packed::pack_rows(&rules.version, &rows);
        } else {
            r.rates = rows
                .iter()
                .map(|(_, service, bucket, offered)| proto::BucketRate {
                    service: service.clone(),
                    bucket: bucket.clone(),
                    offered: f64::from(*offered as f32),
                    clients: 3,
                    ..Default::default()
                })
                .collect();
        }
        r
    }

    /// Per zone, per bucket index: the ratio and allowance (-1: none) it was told.
    type Told = BTreeMap<usize, BTreeMap<u32, (f32, f32)>>;

    /// What each zone was last told after a tick, and whether the tick was by index.
    fn told(scopes: Vec<Scope>, packed: bool) -> (Told, bool) {
        let node = controller(scopes);
        let rules = rules();
        let t0 = Instant::now();
        node.set_rules(rules.clone(), t0);
        let mut downs = Vec::new();
        // Zone 4 has not had the config yet: a hello without rows.
        for z in 0..5 {
            let (link, down) = mpsc::channel(64);
            let mut r = zone_report(&rules, z, packed);
            if z == 4 {
                (r.rates, r.packed) = (Vec::new(), None);
                r.config_version.clear();
            }
            node.on_report(z as u64, link, &r, None, t0).unwrap();
            downs.push(down);
        }
        let t1 = t0 + Duration::from_millis(300);
        node.tick(t1);
        let by_index = node.lock().indexed.is_some();
        let told = downs
            .iter_mut()
            .enumerate()
            .map(|(z, down)| {
                let i = std::iter::from_fn(|| down.try_recv().ok())
                    .last()
                    .unwrap()
                    .unwrap();
                assert!(i.ratios.is_empty(), "zone {z} told by name: {i:?}");
                let p = i.packed.as_ref().unwrap();
                let list = packed::unpack_ratios(p, i.valid_for_ms).unwrap();
                let m = list
                    .iter()
                    .map(|r| {
                        (
                            r.index,
                            (r.ratio as f32, r.allowed.map_or(-1.0, |a| a as f32)),
                        )
                    })
                    .collect();
                (z, m)
            })
            .collect();
        (told, by_index)
    }

    #[tokio::test]
    async fn a_tick_by_index_tells_every_child_what_a_tick_by_name_tells_it() {
        for scopes in [
            vec![Scope::Global, Scope::Region],
            vec![Scope::Global, Scope::Region, Scope::Zone],
            vec![Scope::Global],
        ] {
            let (by_index, was_indexed) = told(scopes.clone(), true);
            let (by_name, was_named) = told(scopes.clone(), false);
            assert!(
                was_indexed,
                "{scopes:?}: packed reports not worked by index"
            );
            assert!(!was_named, "{scopes:?}: named reports worked by index");
            assert_eq!(by_index.len(), by_name.len());
            let mut dropping = 0;
            for (z, named) in &by_name {
                let indexed = &by_index[z];
                assert_eq!(
                    indexed.keys().collect::<Vec<_>>(),
                    named.keys().collect::<Vec<_>>(),
                    "{scopes:?} zone {z}: other buckets"
                );
                for (i, (ratio, allowed)) in named {
                    let (r, a) = indexed[i];
                    dropping += usize::from(*ratio > 0.0);
                    assert!(
                        (r - ratio).abs() <= 1e-6
                            && (a - allowed).abs() <= 1e-3 * allowed.abs().max(1.0),
                        "{scopes:?} zone {z} bucket {i}: by index ({r}, {a}), by name ({ratio}, {allowed})"
                    );
                }
            }
            assert!(
                dropping > 0,
                "{scopes:?}: no bucket over its limit, nothing compared"
            );
        }
    }
}
