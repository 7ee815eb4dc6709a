//! Conversions between the wire protocol and the config model, in one place.

/// The largest `Tier` message (a report or an instruction) a tier or client sends or
/// takes, in bytes: set explicitly on every `Tier` server and client. An instruction carries
/// the config of the child's services (up to 60,000 buckets), a report at most 60,000 rows.
pub const MAX_TIER_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// The largest `Control` message (`ApplyConfig` carries every config file, at most 32 MiB
/// in all), in bytes: set explicitly on every `Control` server and client.
pub const MAX_CONTROL_MESSAGE_BYTES: usize = 40 * 1024 * 1024;

/// The longest time a client counts a bucket's offered rate over for a report, at report
/// interval `interval`: four intervals, and at least four seconds (a client's ring of
/// windows). Sparse callers are measured over it, so the tiers size the Poisson noise of a
/// reported rate by it (see `ratios::noise_margin` in the server).
pub fn rate_horizon(interval: std::time::Duration) -> std::time::Duration {
    (interval * 4).max(std::time::Duration::from_secs(4))
}

use crate::config::{Bucket, MatchRule, Mode, ProcedurePattern, Scope, Snapshot};
use crate::proto;

impl From<Scope> for proto::Scope {
    fn from(s: Scope) -> Self {
        match s {
            Scope::Global => proto::Scope::Global,
            Scope::Region => proto::Scope::Region,
            Scope::Zone => proto::Scope::Zone,
        }
    }
}

impl From<Mode> for proto::Mode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Deny => proto::Mode::Deny,
            Mode::Shadow => proto::Mode::Shadow,
        }
    }
}

/// A wire enum value that is unknown or unspecified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} value {value} on the wire")]
pub struct InvalidEnum {
    /// Which enum.
    pub what: &'static str,
    /// The raw value.
    pub value: i32,
}

/// Decodes a wire scope.
pub fn scope_from_wire(v: i32) -> Result<Scope, InvalidEnum> {
    match proto::Scope::try_from(v) {
        Ok(proto::Scope::Global) => Ok(Scope::Global),
        Ok(proto::Scope::Region) => Ok(Scope::Region),
        Ok(proto::Scope::Zone) => Ok(Scope::Zone),
        _ => Err(InvalidEnum {
            what: "scope",
            value: v,
        }),
    }
}

/// Decodes a wire mode.
pub fn mode_from_wire(v: i32) -> Result<Mode, InvalidEnum> {
    match proto::Mode::try_from(v) {
        Ok(proto::Mode::Deny) => Ok(Mode::Deny),
        Ok(proto::Mode::Shadow) => Ok(Mode::Shadow),
        _ => Err(InvalidEnum {
            what: "mode",
            value: v,
        }),
    }
}

/// The wire form of one bucket, with its limit in force at `at_unix`.
pub fn bucket_rule(b: &Bucket, is_override: bool, at_unix: i64) -> proto::BucketRule {
    proto::BucketRule {
        name: b.name.clone(),
        caller: b.rule.caller.clone().unwrap_or_default(),
        procedure: b
            .rule
            .procedure
            .as_ref()
            .map(ProcedurePattern::as_written)
            .unwrap_or_default(),
        scope: proto::Scope::from(b.scope) as i32,
        mode: proto::Mode::from(b.mode) as i32,
        limit_rps: b.limit_at(at_unix),
        is_override,
        in_addition: b.in_addition,
    }
}

/// The wire form of the named services of a snapshot (all when `services` is empty), with
/// the limits in force at `at_unix`.
pub fn service_rules(
    snapshot: &Snapshot,
    services: &[String],
    at_unix: i64,
) -> Vec<proto::ServiceRules> {
    snapshot
        .services
        .values()
        .filter(|s| services.is_empty() || services.contains(&s.name))
        .map(|s| proto::ServiceRules {
            service: s.name.clone(),
            buckets: s
                .buckets
                .iter()
                .map(|b| bucket_rule(b, false, at_unix))
                .collect(),
            first_index: None,
        })
        .collect()
}

/// The match rule of a wire bucket.
pub fn match_rule(r: &proto::BucketRule) -> MatchRule {
    MatchRule {
        caller: (!r.caller.is_empty()).then(|| r.caller.clone()),
        procedure: (!r.procedure.is_empty()).then(|| ProcedurePattern::parse(&r.procedure)),
    }
}
