//! Incident overrides: extra deny rules for a caller and/or procedure of a service, set
//! through `Control.SetOverride`, expiring by themselves.

use std::collections::BTreeMap;

use grl_core::proto;

/// Why an override was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidOverride {
    /// No service named.
    #[error("service is required")]
    NoService,
    /// Neither caller nor procedure named.
    #[error("caller or procedure is required")]
    NoMatch,
    /// The rate is not a finite number > 0.
    #[error("rps must be a finite number > 0")]
    BadRps,
    /// The ttl is zero.
    #[error("ttl must be > 0")]
    NoTtl,
}

/// The overrides in force, with a generation that changes whenever they do.
#[derive(Debug, Default)]
pub struct Overrides {
    next: u64,
    items: BTreeMap<String, proto::Override>,
    generation: u64,
}

impl Overrides {
    /// Adds an override from a request at `now_unix` (seconds).
    pub fn set(
        &mut self,
        req: &proto::SetOverrideRequest,
        now_unix: u64,
    ) -> Result<proto::Override, InvalidOverride> {
        if req.service.is_empty() {
            return Err(InvalidOverride::NoService);
        }
        if req.caller.is_empty() && req.procedure.is_empty() {
            return Err(InvalidOverride::NoMatch);
        }
        if !(req.rps.is_finite() && req.rps > 0.0) {
            return Err(InvalidOverride::BadRps);
        }
        if req.ttl_seconds == 0 {
            return Err(InvalidOverride::NoTtl);
        }
        self.next += 1;
        let o = proto::Override {
            id: self.next.to_string(),
            service: req.service.clone(),
            caller: req.caller.clone(),
            procedure: req.procedure.clone(),
            rps: req.rps,
            expires_at_unix: now_unix + req.ttl_seconds,
            reason: req.reason.clone(),
            who: req.who.clone(),
        };
        self.items.insert(o.id.clone(), o.clone());
        self.generation += 1;
        Ok(o)
    }

    /// The overrides in force.
    pub fn list(&self) -> Vec<proto::Override> {
        self.items.values().cloned().collect()
    }

    /// Clears one override by id, or all of a service when `id` is empty; returns how many.
    pub fn clear(&mut self, id: &str, service: &str) -> Vec<proto::Override> {
        let gone: Vec<String> = self
            .items
            .values()
            .filter(|o| {
                if id.is_empty() {
                    o.service == service
                } else {
                    o.id == id
                }
            })
            .map(|o| o.id.clone())
            .collect();
        self.remove(&gone)
    }

    /// Removes overrides that expired at `now_unix`; returns them.
    pub fn expire(&mut self, now_unix: u64) -> Vec<proto::Override> {
        let gone: Vec<String> = self
            .items
            .values()
            .filter(|o| o.expires_at_unix <= now_unix)
            .map(|o| o.id.clone())
            .collect();
        self.remove(&gone)
    }

    fn remove(&mut self, ids: &[String]) -> Vec<proto::Override> {
        let out: Vec<_> = ids.iter().filter_map(|id| self.items.remove(id)).collect();
        if !out.is_empty() {
            self.generation += 1;
        }
        out
    }

    /// Changes whenever the set of overrides does.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The overrides as bucket rules: `override-<id>`, global, deny, limit = rps.
    pub fn rules(&self) -> Vec<proto::ServiceRules> {
        let mut by_service: BTreeMap<&str, Vec<proto::BucketRule>> = BTreeMap::new();
        for o in self.items.values() {
            by_service
                .entry(&o.service)
                .or_default()
                .push(proto::BucketRule {
                    name: format!("override-{}", o.id),
                    caller: o.caller.clone(),
                    procedure: o.procedure.clone(),
                    scope: proto::Scope::Global as i32,
                    mode: proto::Mode::Deny as i32,
                    limit_rps: Some(o.rps),
                    is_override: true,
                });
        }
        by_service
            .into_iter()
            .map(|(s, buckets)| proto::ServiceRules {
                service: s.to_string(),
                buckets,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(service: &str, caller: &str, rps: f64, ttl: u64) -> proto::SetOverrideRequest {
        proto::SetOverrideRequest {
            service: service.into(),
            caller: caller.into(),
            rps,
            ttl_seconds: ttl,
            ..Default::default()
        }
    }

    #[test]
    fn set_list_expire_clear() {
        let mut o = Overrides::default();
        assert_eq!(
            o.set(&req("", "c", 1.0, 1), 0),
            Err(InvalidOverride::NoService)
        );
        assert_eq!(
            o.set(&req("s", "", 1.0, 1), 0),
            Err(InvalidOverride::NoMatch)
        );
        assert_eq!(
            o.set(&req("s", "c", 0.0, 1), 0),
            Err(InvalidOverride::BadRps)
        );
        assert_eq!(
            o.set(&req("s", "c", 1.0, 0), 0),
            Err(InvalidOverride::NoTtl)
        );
        let a = o.set(&req("s", "c", 5.0, 10), 100).unwrap();
        o.set(&req("s", "d", 5.0, 60), 100).unwrap();
        o.set(&req("t", "d", 5.0, 60), 100).unwrap();
        let rules = o.rules();
        assert_eq!(rules[0].buckets[0].name, format!("override-{}", a.id));
        assert!(rules[0].buckets[0].is_override);
        let g = o.generation();
        assert_eq!(o.expire(109).len(), 0);
        assert_eq!(o.expire(110).len(), 1);
        assert!(o.generation() > g);
        assert_eq!(o.clear("", "s").len(), 1);
        assert_eq!(o.list().len(), 1);
    }
}
