//! The bucket rules a tier holds, in wire form: from a config snapshot (plus incident
//! overrides) at the top, or from the parent's instructions below it.

use std::collections::BTreeMap;

use super::FastMap;

use super::ratios::Limited;
use grl_config::Snapshot;
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
}

/// Where the buckets of one service sit in its rules.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slots {
    /// The first position of each bucket name.
    pub position: FastMap<String, usize>,
    /// For each position, whether it is its name's first (an override ahead of a config
    /// bucket of the same name makes the later one a repeat).
    pub first: Vec<bool>,
}

impl Rules {
    /// The rules of a snapshot, with `overrides` put ahead of their service's buckets.
    /// The version gains `+o<generation>` when overrides exist, so children refetch.
    pub fn from_snapshot(s: &Snapshot, overrides: &[proto::ServiceRules], generation: u64) -> Self {
        let mut services: BTreeMap<String, Vec<proto::BucketRule>> = BTreeMap::new();
        for o in overrides {
            services
                .entry(o.service.clone())
                .or_default()
                .extend(o.buckets.iter().cloned());
        }
        for sr in wire::service_rules(s, &[]) {
            services.entry(sr.service).or_default().extend(sr.buckets);
        }
        let version = if overrides.is_empty() {
            s.version.clone()
        } else {
            format!("{}+o{generation}", s.version)
        };
        Self::new(version, services)
    }

    /// Rules received from the parent.
    pub fn from_wire(version: &str, config: &[proto::ServiceRules]) -> Self {
        Self::new(
            version.to_string(),
            config
                .iter()
                .map(|s| (s.service.clone(), s.buckets.clone()))
                .collect(),
        )
    }

    fn new(version: String, services: BTreeMap<String, Vec<proto::BucketRule>>) -> Self {
        let index = services
            .iter()
            .map(|(svc, buckets)| {
                let mut slots = Slots {
                    position: FastMap::with_capacity_and_hasher(buckets.len(), Default::default()),
                    first: Vec::with_capacity(buckets.len()),
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
        Self {
            version,
            services,
            index,
        }
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
                })
            })
            .collect()
    }

    /// Every bucket with a limit and a valid scope.
    pub fn limited(&self) -> Vec<Limited> {
        self.services
            .iter()
            .flat_map(|(svc, buckets)| {
                buckets.iter().filter_map(move |b| {
                    Some(Limited {
                        service: svc.clone(),
                        bucket: b.name.clone(),
                        scope: wire::scope_from_wire(b.scope).ok()?,
                        limit: b.limit_rps?,
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

    /// Number of buckets.
    pub fn bucket_count(&self) -> usize {
        self.services.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAY: &str = "service: pay\nbuckets:\n  - name: g\n    match: { caller: gw }\n    scope: global\n    mode: deny\n    policy: { kind: fixed, rps: 100 }\n  - name: s\n    match: { caller: x }\n    scope: zone\n    mode: shadow\n    policy: { kind: historical-peak }\n";

    #[test]
    fn snapshot_rules_with_overrides_first() {
        let s = grl_config::from_files("v1", [("services/pay.yaml".into(), PAY.into())]).unwrap();
        let plain = Rules::from_snapshot(&s, &[], 0);
        assert_eq!(plain.version, "v1");
        assert_eq!(
            plain.limited().len(),
            1,
            "a bucket with no limit is not limited"
        );
        let o = proto::ServiceRules {
            service: "pay".into(),
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
        let r = Rules::from_snapshot(&s, &[o], 3);
        assert_eq!(r.version, "v1+o3");
        assert_eq!(r.services["pay"][0].name, "override-1");
        assert_eq!(r.bucket_count(), 3);
        let back = Rules::from_wire(&r.version, &r.for_services(&["pay".into()]));
        assert_eq!(back, r);
    }
}
