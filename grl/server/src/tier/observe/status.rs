//! A tier's state as an operator sees it: the `Tier.Status` answer (also the source of
//! `/metrics`) and the `Tier.Explain` answer (which bucket a request falls in here, and
//! why).

use tokio::time::Instant;

use super::status_detail::Detail;
use crate::tier::FastMap;
use crate::tier::engine::node::Node;
use grl_core::config::Role;
use grl_core::proto;

/// The `Tier.Status` answer for every service, without detail (without overrides; the
/// controller adds them).
pub fn status(node: &Node, now: Instant) -> proto::StatusResponse {
    status_of(node, now, &proto::StatusRequest::default())
}

/// The `Tier.Status` answer to `req`: its service only, if it names one, and each
/// bucket's dropped rates and top zones if it asks for detail.
pub fn status_of(node: &Node, now: Instant, req: &proto::StatusRequest) -> proto::StatusResponse {
    let wanted = |svc: &str| req.service.is_empty() || req.service == svc;
    let fail_open = node.fail_open(now);
    let started = std::time::Instant::now();
    let s = node.lock();
    let locked = started.elapsed();
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
                if !wanted(svc) {
                    i += rules.len();
                    continue;
                }
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
                if !wanted(service) {
                    continue;
                }
                *offered_by.entry((service, bucket)).or_default() += r.offered;
            }
            let mut own_by: FastMap<(&str, &str), f64> = FastMap::default();
            for ((service, bucket, _), c) in &s.computed {
                let r = own_by.entry((service, bucket)).or_insert(c.ratio);
                *r = r.max(c.ratio);
            }
            let mut buckets = Vec::new();
            for (svc, rules) in s.rules.services().iter().filter(|(svc, _)| wanted(svc)) {
                for b in rules {
                    let key = (svc.as_str(), b.name.as_str());
                    let offered = offered_by.get(&key).copied().unwrap_or(0.0);
                    buckets.push(bucket_status(svc, b, offered, own_by.get(&key).copied()));
                }
            }
            buckets
        }
    };
    let keys: Vec<(&str, &str)> = s
        .rules
        .services()
        .iter()
        .filter(|(svc, _)| wanted(svc))
        .flat_map(|(svc, rules)| rules.iter().map(move |b| (svc.as_str(), b.name.as_str())))
        .collect();
    let detail = req.detail.then(|| {
        let first = match req.service.as_str() {
            _ if s.rules.dense().is_none() => None,
            "" => Some(0),
            svc => s.rules.slots(svc).and_then(|x| x.first_index),
        };
        Detail::of(&s.children, now, &s.rules, &keys, first)
    });
    let buckets: Vec<proto::BucketStatus> = buckets
        .into_iter()
        .enumerate()
        .map(|(p, (mut b, own))| {
            let from_parent = s
                .parent
                .ratios
                .get(&(b.service.clone(), b.bucket.clone()))
                .filter(|p| p.expires > now)
                .map(|p| p.ratio);
            b.drop_ratio = own.or(from_parent).unwrap_or(0.0);
            if let Some(d) = &detail {
                d.fill(p, &mut b);
            }
            b
        })
        .collect();
    tracing::debug!(
        buckets = buckets.len(),
        detail = req.detail,
        waited_ms = locked.as_secs_f64() * 1e3,
        held_ms = (started.elapsed() - locked).as_secs_f64() * 1e3,
        "status answered"
    );
    proto::StatusResponse {
        level: node.cfg.level as i32,
        zone: node.cfg.zone.clone(),
        region: node.cfg.region.clone(),
        config_version: s.rules.version.clone(),
        fail_open,
        children,
        buckets,
        overrides: Vec::new(),
        has_parent: node.cfg.has_parent,
        parent_connected: s.parent.connected,
        leading: s.role.leading,
        leader: s.role.leader.clone().unwrap_or_default(),
        learning: s.learn_until.is_some_and(|t| now < t),
    }
}

/// The `Tier.Explain` answer: every rule of the service in the order a client tries
/// them, and the state here of the bucket the request falls in (and of the one that
/// applies in addition, if any).
pub fn explain(node: &Node, now: Instant, req: &proto::ExplainRequest) -> proto::ExplainResponse {
    let (version, rules) = {
        let s = node.lock();
        let rules = s.rules.services().get(&req.service).cloned();
        (s.rules.version.clone(), rules)
    };
    let Some(rules) = rules else {
        return proto::ExplainResponse {
            config_version: version,
            ..Default::default()
        };
    };
    let written: Vec<_> = rules.iter().map(grl_core::wire::match_rule).collect();
    let matcher =
        grl_core::config::Matcher::new(written.iter().zip(&rules).map(|(m, b)| (m, b.is_override)));
    let considered = matcher.explain(
        &written,
        (&req.caller, &req.procedure),
        |i| rules[i].in_addition,
        |i| rules[i].name.clone(),
    );
    let status = status_of(
        node,
        now,
        &proto::StatusRequest {
            service: req.service.clone(),
            detail: true,
        },
    );
    let state = |role: Role| {
        let c = considered.iter().find(|c| c.role == role)?;
        // The status lists the service's buckets in rule order.
        status.buckets.get(c.index).cloned()
    };
    proto::ExplainResponse {
        config_version: status.config_version.clone(),
        service_known: true,
        bucket: state(Role::Wins),
        in_addition: state(Role::InAddition),
        considered: considered
            .iter()
            .map(|c| proto::ConsideredRule {
                bucket: rules[c.index].name.clone(),
                rule: written[c.index].to_string(),
                matched: c.matched,
                role: c.role.as_str().into(),
                reason: c.reason.clone(),
                is_override: rules[c.index].is_override,
            })
            .collect(),
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
        is_override: b.is_override,
        ..Default::default()
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
