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
        ..Default::default()
    }
}

/// The wire form of one bucket: one rule, or one per priority class (see
/// `BucketRule.class_of`), with the limit in force at `at_unix`.
pub fn bucket_rules(b: &Bucket, is_override: bool, at_unix: i64) -> Vec<proto::BucketRule> {
    let one = bucket_rule(b, is_override, at_unix);
    let Some(default) = b.default_class() else {
        return vec![one];
    };
    let count = b.priorities.len() as u32;
    b.priorities
        .iter()
        .enumerate()
        .map(|(rank, c)| proto::BucketRule {
            name: crate::config::class_bucket_name(&b.name, &c.name),
            class_of: b.name.clone(),
            class_rank: rank as u32,
            class_count: count,
            min_share: c.min_share,
            class_default: rank == default,
            ..one.clone()
        })
        .collect()
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
                .flat_map(|b| bucket_rules(b, false, at_unix))
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

/// A priority class's place in its bucket (see `BucketRule.class_of`): positions `first .. first + count` of the rules (or of
/// the version's bucket indices) hold the bucket's classes, highest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassSpan {
    /// The position of the bucket's highest class.
    pub first: usize,
    /// This class's rank (0: the highest).
    pub rank: usize,
    /// How many classes the bucket has.
    pub count: usize,
}

/// The class span of each of a service's rules, `None` for a bucket without classes (or
/// whose classes are not sent whole and in order: then each is held to the whole limit,
/// as an older tier would).
pub fn class_spans(rules: &[proto::BucketRule]) -> Vec<Option<ClassSpan>> {
    let mut out = vec![None; rules.len()];
    let mut at = 0;
    while at < rules.len() {
        let r = &rules[at];
        let count = r.class_count as usize;
        if r.class_of.is_empty() || r.class_rank != 0 || count == 0 {
            at += 1;
            continue;
        }
        let whole = rules.get(at..at + count).is_some_and(|group| {
            group.iter().enumerate().all(|(k, c)| {
                c.class_of == r.class_of
                    && c.class_rank as usize == k
                    && c.class_count == r.class_count
            })
        });
        if !whole {
            at += 1;
            continue;
        }
        for rank in 0..count {
            out[at + rank] = Some(ClassSpan {
                first: at,
                rank,
                count,
            });
        }
        at += count;
    }
    out
}
