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
    /// The rate is outside the range a config limit may take.
    #[error(
        "rps must be a finite number between {} and {}",
        grl_config::bounds::MIN_LIMIT_RPS,
        grl_config::bounds::MAX_LIMIT_RPS
    )]
    BadRps,
    /// The ttl is zero.
    #[error("ttl must be > 0")]
    NoTtl,
    /// The ttl is longer than [`MAX_TTL_SECONDS`] (a raw 2^64-1 would wrap to "now").
    #[error("ttl must be at most {MAX_TTL_SECONDS} seconds (30 days)")]
    TtlTooLong,
    /// A name is too long or holds control or bidirectional characters.
    #[error("{field} {problem}")]
    BadName {
        /// Which field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// Too many overrides are in force already.
    #[error("{MAX_OVERRIDES} overrides are in force already")]
    TooMany,
}

/// The longest an override may last: 30 days.
pub const MAX_TTL_SECONDS: u64 = 30 * 24 * 3600;
/// The most overrides in force at once.
pub const MAX_OVERRIDES: usize = 1_000;
/// Longest `reason` or `who` kept, in bytes (longer ones are refused).
pub const MAX_TEXT_BYTES: usize = 1_024;

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
        for (field, value) in [
            ("service", &req.service),
            ("caller", &req.caller),
            ("procedure", &req.procedure),
        ] {
            if let Some(problem) = grl_config::bounds::name_problem(value) {
                return Err(InvalidOverride::BadName { field, problem });
            }
        }
        for (field, value) in [("reason", &req.reason), ("who", &req.who)] {
            if value.len() > MAX_TEXT_BYTES
                || value.chars().any(grl_config::bounds::is_forbidden_char)
            {
                return Err(InvalidOverride::BadName {
                    field,
                    problem: format!(
                        "must be at most {MAX_TEXT_BYTES} bytes without control or bidirectional characters"
                    ),
                });
            }
        }
        if !grl_config::bounds::limit_in_range(req.rps) {
            return Err(InvalidOverride::BadRps);
        }
        if req.ttl_seconds == 0 {
            return Err(InvalidOverride::NoTtl);
        }
        if req.ttl_seconds > MAX_TTL_SECONDS {
            return Err(InvalidOverride::TtlTooLong);
        }
        if self.items.len() >= MAX_OVERRIDES {
            return Err(InvalidOverride::TooMany);
        }
        self.next += 1;
        let o = proto::Override {
            id: self.next.to_string(),
            service: req.service.clone(),
            caller: req.caller.clone(),
            procedure: req.procedure.clone(),
            rps: req.rps,
            expires_at_unix: now_unix.saturating_add(req.ttl_seconds),
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
                    ..Default::default()
                });
        }
        by_service
            .into_iter()
            .map(|(s, buckets)| proto::ServiceRules {
                service: s.to_string(),
                first_index: None,
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
        assert_eq!(
            o.set(&req("s", "c", 1e300, 1), 0),
            Err(InvalidOverride::BadRps)
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

    /// Issue 12: a raw TTL of 2^64-1 wrapped `expires_at` around to "now"; a TTL of
    /// `99999999999d` was accepted.
    #[test]
    fn huge_ttls_are_refused_not_wrapped() {
        let mut o = Overrides::default();
        assert_eq!(
            o.set(&req("s", "c", 1.0, u64::MAX), 1_700_000_000),
            Err(InvalidOverride::TtlTooLong)
        );
        assert_eq!(
            o.set(&req("s", "c", 1.0, MAX_TTL_SECONDS + 1), 1_700_000_000),
            Err(InvalidOverride::TtlTooLong)
        );
        let ok = o
            .set(&req("s", "c", 1.0, MAX_TTL_SECONDS), 1_700_000_000)
            .unwrap();
        assert_eq!(ok.expires_at_unix, 1_700_000_000 + MAX_TTL_SECONDS);
        assert!(o.expire(1_700_000_001).is_empty());
    }

    #[test]
    fn bidi_names_and_too_many_overrides_are_refused() {
        let mut o = Overrides::default();
        assert!(matches!(
            o.set(&req("s", "c\u{202E}", 1.0, 1), 0),
            Err(InvalidOverride::BadName {
                field: "caller",
                ..
            })
        ));
        for i in 0..MAX_OVERRIDES {
            o.set(&req("s", &format!("c{i}"), 1.0, 60), 0).unwrap();
        }
        assert_eq!(
            o.set(&req("s", "x", 1.0, 60), 0),
            Err(InvalidOverride::TooMany)
        );
    }
}
