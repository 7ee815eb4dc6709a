//! A tier's state as an operator sees it: the `Tier.Status` answer, also the source of
//! `/metrics`.

use tokio::time::Instant;

use super::node::Node;
use grl_core::proto;

impl Node {
    /// The `Tier.Status` answer (without overrides; the controller adds them).
    pub fn status(&self, now: Instant) -> proto::StatusResponse {
        let fail_open = self.fail_open(now);
        let s = self.lock();
        let totals = s.children.totals(now);
        let children = s
            .children
            .iter()
            .map(|c| proto::ChildStatus {
                id: c.id.clone(),
                level: c.level as i32,
                zone: c.zone.clone(),
                seconds_since_report: now.saturating_duration_since(c.last_report).as_secs_f64(),
                stale: s.children.is_stale(c, now),
            })
            .collect();
        let mut buckets = Vec::new();
        for (svc, rules) in s.rules.services() {
            for b in rules {
                let offered: f64 = totals
                    .iter()
                    .filter(|(k, _)| &k.service == svc && k.bucket == b.name)
                    .map(|(_, r)| r.offered)
                    .sum();
                let own = s
                    .computed
                    .iter()
                    .filter(|(k, _)| &k.0 == svc && k.1 == b.name)
                    .map(|(_, c)| c.ratio)
                    .reduce(f64::max);
                let from_parent = s
                    .parent
                    .ratios
                    .get(&(svc.clone(), b.name.clone()))
                    .filter(|p| p.expires > now)
                    .map(|p| p.ratio);
                buckets.push(proto::BucketStatus {
                    service: svc.clone(),
                    bucket: b.name.clone(),
                    scope: b.scope,
                    mode: b.mode,
                    limit_rps: b.limit_rps,
                    offered,
                    drop_ratio: own.or(from_parent).unwrap_or(0.0),
                });
            }
        }
        proto::StatusResponse {
            level: self.cfg.level as i32,
            zone: self.cfg.zone.clone(),
            region: self.cfg.region.clone(),
            config_version: s.rules.version.clone(),
            fail_open,
            children,
            buckets,
            overrides: Vec::new(),
            has_parent: self.cfg.has_parent,
            parent_connected: s.parent.connected,
            leading: s.role.leading,
            leader: s.role.leader.clone().unwrap_or_default(),
            learning: s.learn_until.is_some_and(|t| now < t),
        }
    }
}

/// The offered sum of one bucket over this tier's fresh children (for tests and tools).
pub fn offered(status: &proto::StatusResponse, service: &str, bucket: &str) -> f64 {
    status
        .buckets
        .iter()
        .filter(|b| b.service == service && b.bucket == bucket)
        .map(|b| b.offered)
        .sum()
}

/// `drop_ratio` of a bucket in a status answer, 0 when unknown.
pub fn drop_ratio(status: &proto::StatusResponse, service: &str, bucket: &str) -> f64 {
    status
        .buckets
        .iter()
        .find(|b| b.service == service && b.bucket == bucket)
        .map_or(0.0, |b| b.drop_ratio)
}
