//! The bucket rules a tier holds, in wire form: from a config snapshot (plus incident
//! overrides) at the top, or from the parent's instructions below it; and each bucket's
//! index in the version (wire version 2 keys rows and ratios by it, see
//! `grl_core::packed`): services in name order, each service's buckets in rule order.

use std::collections::BTreeMap;

use crate::tier::FastMap;

use super::priorities::{self, ClassSpan};
use super::ratios::SentRatio;
use super::ratios::{Limited, LimitedClass};
use grl_config::{Scope, Snapshot};
use grl_core::proto;
use grl_core::wire;

/// A versioned set of bucket rules per service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rules {
    /// The config version ("" before the first config).
    pub version: String,
    /// Rules by service; overrides first.
    services: BTreeMap<String, Vec<proto::BucketRule>>,
    /// Position of each bucket in its service's rules, by service and name (every report
    /// row is checked against it: a linear search made a 1,000-bucket report quadratic).
    index: FastMap<String, Slots>,
    /// The services with a known first bucket index, by that index (ascending).
    by_index: Vec<(u32, String)>,
    /// Every bucket by index, when the version can be worked by index (see [`Dense`]).
    dense: Option<Dense>,
}

/// What a tier needs of each bucket to work a version by index, without a name: arrays
/// indexed by the bucket's index. Built only when every service's first index is known,
/// the services tile the indices from 0 without gaps, and no service repeats a bucket name
/// (an incident override of a config bucket): otherwise the tier works by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dense {
    /// The bucket's scope, `None` when it has no limit (nothing to compute) or an unknown
    /// scope.
    pub limited_scope: Vec<Option<Scope>>,
    /// Its limit (meaningful where `limited_scope` is set); a class's is its bucket's.
    pub limit: Vec<f64>,
    /// Where the bucket is one priority class of a bucket with classes: its place among
    /// them, by index ([`ClassSpan::first`] is an index of the version).
    pub class: Vec<Option<ClassSpan>>,
    /// Each class's floor, a share of its bucket's limit (0 for a bucket without classes).
    pub floor: Vec<f64>,
    /// [`SentRatio::key_of`] its service and name.
    pub key: Vec<u64>,
    /// The first index of each service, in index order (which is [`Rules::services`]
    /// order).
    pub service_first: Vec<u32>,
}

/// Where the buckets of one service sit in its rules.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slots {
    /// The first position of each bucket name.
    pub position: FastMap<String, usize>,
    /// For each position, whether it is its name's first (an override ahead of a config
    /// bucket of the same name makes the later one a repeat).
    pub first: Vec<bool>,
    /// The index of the service's first bucket in the version (`None`: the parent sent
    /// none, an older sender).
    pub first_index: Option<u32>,
}

impl Rules {
    /// The rules of a snapshot at `at_unix` (the limits in force then), with `overrides`
    /// put ahead of their service's buckets. The version gains `+o<generation>` when
    /// overrides exist and `+s<epoch>` when limits are scheduled ([`Snapshot::schedule_epoch`]),
    /// so children refetch when either changes.
    pub fn from_snapshot(
        s: &Snapshot,
        overrides: &[proto::ServiceRules],
        generation: u64,
        at_unix: i64,
    ) -> Self {
        let mut services: BTreeMap<String, Vec<proto::BucketRule>> = BTreeMap::new();
        for o in overrides {
            services
                .entry(o.service.clone())
                .or_default()
                .extend(o.buckets.iter().cloned());
        }
        for sr in wire::service_rules(s, &[], at_unix) {
            services.entry(sr.service).or_default().extend(sr.buckets);
        }
        let mut version = s.version.clone();
        if !overrides.is_empty() {
            version.push_str(&format!("+o{generation}"));
        }
        if let Some(epoch) = s.schedule_epoch(at_unix) {
            version.push_str(&format!("+s{epoch}"));
        }
        let mut next = 0u32;
        let first_index = services
            .iter()
            .map(|(svc, b)| {
                let first = next;
                next = next.saturating_add(b.len() as u32);
                (svc.clone(), first)
            })
            .collect();
        Self::new(version, services, &first_index)
    }

    /// Rules received from the parent.
    pub fn from_wire(version: &str, config: &[proto::ServiceRules]) -> Self {
        let first_index = config
            .iter()
            .filter_map(|s| Some((s.service.clone(), s.first_index?)))
            .collect();
        Self::new(
            version.to_string(),
            config
                .iter()
                .map(|s| (s.service.clone(), s.buckets.clone()))
                .collect(),
            &first_index,
        )
    }

    fn new(
        version: String,
        services: BTreeMap<String, Vec<proto::BucketRule>>,
        first_index: &FastMap<String, u32>,
    ) -> Self {
        let index = services
            .iter()
            .map(|(svc, buckets)| {
                let mut slots = Slots {
                    position: FastMap::with_capacity_and_hasher(buckets.len(), Default::default()),
                    first: Vec::with_capacity(buckets.len()),
                    first_index: first_index.get(svc).copied(),
                };
                for (i, b) in buckets.iter().enumerate() {
                    let first = !slots.position.contains_key(&b.name);
                    if first {
                        slots.position.insert(b.name.clone(), i);
                    }
                    slots.first.push(first);
                }
                (svc.clone(), slots)
            })
            .collect();
        let mut by_index: Vec<(u32, String)> = first_index
            .iter()
            .filter(|(svc, _)| services.contains_key(*svc))
            .map(|(svc, i)| (*i, svc.clone()))
            .collect();
        by_index.sort_unstable();
        let dense = Dense::of(&services, &index, &by_index);
        Self {
            version,
            services,
            index,
            by_index,
            dense,
        }
    }

    /// The version by index, when it can be worked so (see [`Dense`]).
    pub fn dense(&self) -> Option<&Dense> {
        self.dense.as_ref()
    }

    /// Rules by service, in config order (overrides first).
    pub fn services(&self) -> &BTreeMap<String, Vec<proto::BucketRule>> {
        &self.services
    }

    /// The wire form for the named services.
    pub fn for_services(&self, services: &[String]) -> Vec<proto::ServiceRules> {
        services
            .iter()
            .filter_map(|s| {
                self.services.get(s).map(|b| proto::ServiceRules {
                    service: s.clone(),
                    buckets: b.clone(),
                    first_index: self.index.get(s).and_then(|slots| slots.first_index),
                })
            })
            .collect()
    }

    /// Every bucket with a limit and a valid scope.
    pub fn limited(&self) -> Vec<Limited> {
        self.services
            .iter()
            .flat_map(|(svc, buckets)| {
                let spans = priorities::spans(buckets);
                // Each bucket with classes, by its first position: its classes' names and
                // floors (kept once, shared by its classes).
                let mut groups: FastMap<usize, LimitedClass> = FastMap::default();
                for span in spans.iter().flatten().filter(|s| s.rank == 0) {
                    let group = &buckets[span.first..span.first + span.count];
                    groups.insert(
                        span.first,
                        LimitedClass {
                            siblings: group.iter().map(|b| b.name.clone()).collect(),
                            floors: group.iter().map(|b| b.min_share).collect(),
                            rank: 0,
                        },
                    );
                }
                buckets.iter().zip(spans).filter_map(move |(b, span)| {
                    Some(Limited {
                        service: svc.clone(),
                        bucket: b.name.clone(),
                        scope: wire::scope_from_wire(b.scope).ok()?,
                        limit: b.limit_rps?,
                        class: span.map(|s| LimitedClass {
                            rank: s.rank,
                            ..groups[&s.first].clone()
                        }),
                    })
                })
            })
            .collect()
    }

    /// A bucket by service and name.
    pub fn bucket(&self, service: &str, name: &str) -> Option<&proto::BucketRule> {
        let i = *self.index.get(service)?.position.get(name)?;
        self.services.get(service)?.get(i)
    }

    /// Where the buckets of `service` sit in its rules.
    pub fn slots(&self, service: &str) -> Option<&Slots> {
        self.index.get(service)
    }

    /// The index in this version of the bucket at `position` in `service`'s rules, when
    /// the service's first index is known.
    pub fn index_of(&self, service: &str, position: usize) -> Option<u32> {
        let first = self.index.get(service)?.first_index?;
        let len = self.services.get(service)?.len();
        (position < len).then(|| first.checked_add(position as u32))?
    }

    /// The service and position of the bucket at `index` in this version, if this tier
    /// holds its service.
    pub fn locate(&self, index: u32) -> Option<(&str, usize)> {
        let at = self.by_index.partition_point(|(first, _)| *first <= index);
        let (first, svc) = self.by_index.get(at.checked_sub(1)?)?;
        let position = (index - first) as usize;
        (position < self.services.get(svc)?.len()).then_some((svc.as_str(), position))
    }

    /// Number of buckets.
    pub fn bucket_count(&self) -> usize {
        self.services.values().map(Vec::len).sum()
    }
}

impl Dense {
    fn of(
        services: &BTreeMap<String, Vec<proto::BucketRule>>,
        index: &FastMap<String, Slots>,
        by_index: &[(u32, String)],
    ) -> Option<Self> {
        if by_index.len() != services.len() || index.values().any(|s| s.first.contains(&false)) {
            return None;
        }
        let mut d = Dense::default();
        for ((first, svc), (name, buckets)) in by_index.iter().zip(services) {
            if svc != name || *first as usize != d.key.len() {
                return None;
            }
            d.service_first.push(*first);
            for (b, span) in buckets.iter().zip(priorities::spans(buckets)) {
                d.class.push(span.map(|s| ClassSpan {
                    first: s.first + *first as usize,
                    ..s
                }));
                d.floor.push(b.min_share);
                let scope = wire::scope_from_wire(b.scope).ok();
                d.limited_scope
                    .push(scope.filter(|_| b.limit_rps.is_some()));
                d.limit.push(b.limit_rps.unwrap_or(f64::INFINITY));
                d.key.push(SentRatio::key_of(svc, &b.name));
            }
        }
        Some(d)
    }

    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.key.len()
    }

    /// The limit of bucket `i` in a group whose offered sum in bucket `j` is `sum(j)`: its
    /// own, or for a priority class its part of its bucket's ([`priorities::class_limit`]).
    pub fn limit_in(&self, i: usize, sum: impl Fn(usize) -> f64) -> f64 {
        match self.class[i] {
            None => self.limit[i],
            Some(c) => priorities::class_limit(
                self.limit[i],
                c.rank,
                c.count,
                |k| sum(c.first + k),
                |k| self.floor[c.first + k],
            ),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAY: &str = "service: pay\nbuckets:\n  - name: g\n    match: { caller: gw }\n    scope: global\n    mode: deny\n    policy: { kind: fixed, rps: 100 }\n  - name: s\n    match: { caller: x }\n    scope: zone\n    mode: shadow\n    policy: { kind: historical-peak }\n";

    #[test]
    fn snapshot_rules_with_overrides_first() {
        let s = grl_config::from_files("v1", [("services/pay.yaml".into(), PAY.into())]).unwrap();
        let plain = Rules::from_snapshot(&s, &[], 0, 0);
        assert_eq!(plain.version, "v1");
        assert_eq!(
            plain.limited().len(),
            1,
            "a bucket with no limit is not limited"
        );
        let o = proto::ServiceRules {
            service: "pay".into(),
            first_index: None,
            buckets: vec![proto::BucketRule {
                name: "override-1".into(),
                caller: "bad".into(),
                scope: proto::Scope::Global as i32,
                mode: proto::Mode::Deny as i32,
                limit_rps: Some(5.0),
                is_override: true,
                ..Default::default()
            }],
        };
        let r = Rules::from_snapshot(&s, &[o], 3, 0);
        assert_eq!(r.version, "v1+o3");
        assert_eq!(r.services["pay"][0].name, "override-1");
        assert_eq!(r.bucket_count(), 3);
        let back = Rules::from_wire(&r.version, &r.for_services(&["pay".into()]));
        assert_eq!(back, r);
    }

    /// Version `v1` of two services, `pay` and `ads`, with the same buckets.
    fn pay_and_ads() -> grl_config::Snapshot {
        let ads = PAY.replace("service: pay", "service: ads");
        grl_config::from_files(
            "v1",
            [
                ("services/pay.yaml".into(), PAY.into()),
                ("services/ads.yaml".into(), ads),
            ],
        )
        .unwrap()
    }

    #[test]
    fn every_bucket_has_one_index_that_both_ends_locate() {
        let s = pay_and_ads();
        let top = Rules::from_snapshot(&s, &[], 0, 0);
        assert_eq!(top.index_of("ads", 0), Some(0));
        assert_eq!(top.index_of("ads", 1), Some(1));
        assert_eq!(top.index_of("pay", 0), Some(2));
        assert_eq!(top.index_of("pay", 2), None, "past the service's buckets");
        assert_eq!(top.locate(3), Some(("pay", 1)));
        assert_eq!(top.locate(4), None);
        // A tier below holds only its children's services, with their indices.
        let below = Rules::from_wire(&top.version, &top.for_services(&["pay".into()]));
        assert_eq!(below.index_of("pay", 1), Some(3));
        assert_eq!(below.locate(3), Some(("pay", 1)));
        assert_eq!(below.locate(1), None, "a service it does not hold");
        // From an older parent: no index at all.
        let mut old = top.for_services(&["pay".into()]);
        old[0].first_index = None;
        let old = Rules::from_wire(&top.version, &old);
        assert_eq!((old.index_of("pay", 0), old.locate(2)), (None, None));
    }

    #[test]
    fn a_whole_version_is_worked_by_index_and_a_part_or_an_override_by_name() {
        let s = pay_and_ads();
        let top = Rules::from_snapshot(&s, &[], 0, 0);
        let d = top.dense().expect("a whole snapshot works by index");
        assert_eq!(d.len(), top.bucket_count());
        assert_eq!(d.service_first, [0, 2]);
        for i in 0..d.len() as u32 {
            let (svc, position) = top.locate(i).unwrap();
            let b = &top.services()[svc][position];
            assert_eq!(d.key[i as usize], SentRatio::key_of(svc, &b.name));
            assert_eq!(d.limit[i as usize], b.limit_rps.unwrap_or(f64::INFINITY));
        }
        assert_eq!(
            d.limited_scope,
            [Some(Scope::Global), None, Some(Scope::Global), None],
            "a bucket without a limit has nothing to compute"
        );
        let whole = Rules::from_wire(
            &top.version,
            &top.for_services(&["ads".into(), "pay".into()]),
        );
        assert_eq!(whole.dense(), top.dense(), "the same arrays below");
        let part = Rules::from_wire(&top.version, &top.for_services(&["pay".into()]));
        assert!(part.dense().is_none(), "indices 2.. only: worked by name");
        let again = proto::ServiceRules {
            service: "pay".into(),
            first_index: None,
            buckets: vec![proto::BucketRule {
                name: "g".into(),
                scope: proto::Scope::Global as i32,
                limit_rps: Some(5.0),
                is_override: true,
                ..Default::default()
            }],
        };
        assert!(
            Rules::from_snapshot(&s, &[again], 1, 0).dense().is_none(),
            "an override repeating a bucket's name: worked by name"
        );
    }
}
