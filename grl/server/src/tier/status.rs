//! A tier's state as an operator sees it: the `Tier.Status` answer, also the source of
//! `/metrics`.

use tokio::time::Instant;

use super::FastMap;
use super::node::Node;
use grl_core::proto;

impl Node {
    /// The `Tier.Status` answer (without overrides; the controller adds them).
    pub fn status(&self, now: Instant) -> proto::StatusResponse {
        let fail_open = self.fail_open(now);
        let s = self.lock();
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
        let buckets = match &s.indexed {
            Some(x) if std::sync::Arc::ptr_eq(&x.rules, &s.rules) => {
                // As of the last tick, from its sums by index (a quarter of an interval old
                // at most): a scrape must not walk every child's rows under the lock.
                let mut i = 0;
                let mut buckets = Vec::with_capacity(s.rules.bucket_count());
                for (svc, rules) in s.rules.services() {
                    for b in rules {
                        let (offered, own) = x.bucket_status(i);
                        buckets.push(bucket_status(svc, b, offered, own));
                        i += 1;
                    }
                }
                buckets
            }
            _ => {
                let mut offered_by: FastMap<(&str, &str), f64> = FastMap::default();
                for ((service, bucket, ..), r) in s.children.rows(now) {
                    *offered_by.entry((service, bucket)).or_default() += r.offered;
                }
                let mut own_by: FastMap<(&str, &str), f64> = FastMap::default();
                for ((service, bucket, _), c) in &s.computed {
                    let r = own_by.entry((service, bucket)).or_insert(c.ratio);
                    *r = r.max(c.ratio);
                }
                let mut buckets = Vec::new();
                for (svc, rules) in s.rules.services() {
                    for b in rules {
                        let key = (svc.as_str(), b.name.as_str());
                        let offered = offered_by.get(&key).copied().unwrap_or(0.0);
                        buckets.push(bucket_status(svc, b, offered, own_by.get(&key).copied()));
                    }
                }
                buckets
            }
        };
        let buckets = buckets
            .into_iter()
            .map(|(mut b, own)| {
                let from_parent = s
                    .parent
                    .ratios
                    .get(&(b.service.clone(), b.bucket.clone()))
                    .filter(|p| p.expires > now)
                    .map(|p| p.ratio);
                b.drop_ratio = own.or(from_parent).unwrap_or(0.0);
                b
            })
            .collect();
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

/// A bucket's status line, and the ratio computed here for it (if any).
fn bucket_status(
    service: &str,
    b: &proto::BucketRule,
    offered: f64,
    own: Option<f64>,
) -> (proto::BucketStatus, Option<f64>) {
    let status = proto::BucketStatus {
        service: service.to_string(),
        bucket: b.name.clone(),
        scope: b.scope,
        mode: b.mode,
        limit_rps: b.limit_rps,
        offered,
        drop_ratio: 0.0,
    };
    (status, own)
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
