//! Buckets as the client sees them: one cell per bucket name, and the resolver that maps a
//! (caller, procedure) pair to a cell; which bucket refused a request, and the headers
//! that say so, in `refusal`.
//!
//! A [`BucketCell`] is created the first time a config names a bucket and is kept for the
//! life of the client (cell ids are stable, so a pair can hold its cell id in an
//! `AtomicU32` and counts never move between unrelated buckets). Cell 0 stands for
//! "matched no bucket" and is never limited. The [`Resolver`] is an immutable snapshot of
//! one config version (matcher + cell ids) behind an `ArcSwap`; only the slow path (a pair
//! seen for the first time, or overflow) loads it.

pub(crate) mod refusal;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use grl_core::config::{MatchRule, Matcher, Mode};
use grl_core::metric_names::UNMATCHED_BUCKET;
use grl_core::proto;
use grl_core::wire::{InvalidEnum, match_rule, mode_from_wire};

use crate::buckets::refusal::RefusingBucket;
use crate::table::DECISIONS;

/// The cell id of "no bucket".
pub(crate) const UNMATCHED: u32 = 0;

/// The state of one bucket shared between the hot path and the control plane.
pub(crate) struct BucketCell {
    /// The bucket's name (`""` for the unmatched cell).
    pub(crate) name: String,
    /// The current drop threshold, `ratio × 2^64`; 0 = never drop.
    pub(crate) threshold: AtomicU64,
    /// The bucket is in shadow mode.
    pub(crate) shadow: AtomicBool,
    /// Decisions of requests whose pair did not fit in the table.
    pub(crate) overflow: [AtomicU64; DECISIONS],
    /// Requests decided elsewhere and recorded here ([`crate::Client::record`]), also
    /// counted in their pairs: the window estimate of this client's own offered rate leaves
    /// them out, since they arrive in batches.
    pub(crate) recorded: AtomicU64,
}

impl BucketCell {
    pub(crate) fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            threshold: AtomicU64::new(0),
            shadow: AtomicBool::new(false),
            overflow: Default::default(),
            recorded: AtomicU64::new(0),
        }
    }

    /// The drop ratio the threshold stands for.
    pub(crate) fn ratio(&self) -> f64 {
        self.threshold.load(Ordering::Relaxed) as f64 / 2f64.powi(64)
    }
}

/// `ratio × 2^64`, saturating: ≤ 0 (or NaN) never drops, ≥ 1 always drops.
pub(crate) fn threshold(ratio: f64) -> u64 {
    if ratio.is_nan() || ratio <= 0.0 {
        0
    } else if ratio >= 1.0 {
        u64::MAX
    } else {
        (ratio * 2f64.powi(64)) as u64
    }
}

/// One config version's view: which cell a pair belongs to.
pub(crate) struct Resolver {
    matcher: Matcher,
    /// Config bucket index → cell id.
    cell_of: Vec<u32>,
    /// Config bucket index → whether it applies in addition to a more specific bucket.
    in_addition: Vec<bool>,
    /// Every cell known when this resolver was built, by id.
    pub(crate) cells: Vec<Arc<BucketCell>>,
    /// What a refusal says, by cell id, for the cells of this config.
    refusals: Vec<Option<Arc<RefusingBucket>>>,
}

impl Resolver {
    /// A resolver that matches nothing.
    pub(crate) fn empty(cells: Vec<Arc<BucketCell>>) -> Self {
        Self {
            matcher: Matcher::default(),
            cell_of: Vec::new(),
            in_addition: Vec::new(),
            cells,
            refusals: Vec::new(),
        }
    }

    /// The cell id of a pair.
    pub(crate) fn resolve(&self, caller: &str, procedure: &str) -> u32 {
        self.matcher
            .find(caller, procedure)
            .map_or(UNMATCHED, |i| self.cell_of[i])
    }

    /// The cell id of the bucket that applies to a pair in addition to its own
    /// ([`Matcher::find_in_addition`]); [`UNMATCHED`] when none does.
    pub(crate) fn resolve_in_addition(&self, caller: &str, procedure: &str) -> u32 {
        let own = self.matcher.find(caller, procedure);
        self.matcher
            .find_in_addition(caller, procedure, own, |i| self.in_addition[i])
            .map_or(UNMATCHED, |i| self.cell_of[i])
    }

    /// Whether any bucket applies in addition.
    pub(crate) fn has_in_addition(&self) -> bool {
        self.in_addition.contains(&true)
    }

    /// The cell of a pair.
    pub(crate) fn cell(&self, id: u32) -> &BucketCell {
        &self.cells[id as usize]
    }

    /// What a refusal by cell `id` says; `None` for a cell not in this config.
    pub(crate) fn refusal(&self, id: u32) -> Option<&Arc<RefusingBucket>> {
        self.refusals.get(id as usize)?.as_ref()
    }
}

/// One bucket of a service's wire rules, decoded.
pub(crate) struct RuleSet {
    pub(crate) names: Vec<String>,
    pub(crate) modes: Vec<Mode>,
    limits: Vec<Option<f64>>,
    rules: Vec<MatchRule>,
    overrides: Vec<bool>,
    in_addition: Vec<bool>,
}

impl RuleSet {
    /// Decodes the rules of `service` from an instruction's config; a service the config
    /// does not name has no buckets.
    pub(crate) fn from_wire(
        config: &[proto::ServiceRules],
        service: &str,
    ) -> Result<Self, InvalidEnum> {
        let mut set = RuleSet {
            names: Vec::new(),
            modes: Vec::new(),
            limits: Vec::new(),
            rules: Vec::new(),
            overrides: Vec::new(),
            in_addition: Vec::new(),
        };
        for b in config
            .iter()
            .filter(|s| s.service == service)
            .flat_map(|s| &s.buckets)
        {
            set.modes.push(mode_from_wire(b.mode)?);
            set.names.push(b.name.clone());
            set.limits.push(b.limit_rps);
            set.rules.push(match_rule(b));
            set.overrides.push(b.is_override);
            set.in_addition.push(b.in_addition);
        }
        Ok(set)
    }

    /// The resolver of these rules of `service`, given each bucket's cell id.
    pub(crate) fn resolver(
        &self,
        service: &str,
        cell_of: Vec<u32>,
        cells: Vec<Arc<BucketCell>>,
    ) -> Resolver {
        let matcher = Matcher::new(self.rules.iter().zip(self.overrides.iter().copied()));
        let mut refusals = vec![None; cells.len()];
        for ((&id, name), limit) in cell_of.iter().zip(&self.names).zip(&self.limits) {
            // A name repeated (an override named as a bucket) is stated as its first rule.
            if let Some(slot @ None) = refusals.get_mut(id as usize) {
                *slot = RefusingBucket::new(service, name, *limit).map(Arc::new);
            }
        }
        Resolver {
            matcher,
            cell_of,
            in_addition: self.in_addition.clone(),
            cells,
            refusals,
        }
    }
}

/// The registry of cells: ids by name, grown by the control plane only.
pub(crate) struct Registry {
    pub(crate) cells: Vec<Arc<BucketCell>>,
    by_name: HashMap<String, u32>,
}

impl Registry {
    pub(crate) fn new() -> Self {
        Self {
            cells: vec![Arc::new(BucketCell::new(UNMATCHED_BUCKET))],
            by_name: HashMap::new(),
        }
    }

    /// The id of a bucket's cell, created if new.
    pub(crate) fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.by_name.get(name) {
            return *id;
        }
        let id = self.cells.len() as u32;
        self.cells.push(Arc::new(BucketCell::new(name)));
        self.by_name.insert(name.to_string(), id);
        id
    }

    /// The id of a known bucket.
    pub(crate) fn get(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, caller: &str, procedure: &str, is_override: bool) -> proto::BucketRule {
        proto::BucketRule {
            name: name.into(),
            caller: caller.into(),
            procedure: procedure.into(),
            scope: proto::Scope::Global as i32,
            mode: proto::Mode::Deny as i32,
            limit_rps: Some(1.0),
            is_override,
            in_addition: false,
        }
    }

    #[test]
    fn resolves_most_specific_and_overrides_first() {
        let config = vec![proto::ServiceRules {
            service: "svc".into(),
            first_index: None,
            buckets: vec![
                rule("gw", "gw", "", false),
                rule("pay", "", "Pay/*", false),
                rule("incident", "gw", "Pay/Card", true),
            ],
        }];
        let set = RuleSet::from_wire(&config, "svc").unwrap();
        let mut reg = Registry::new();
        let ids: Vec<u32> = set.names.iter().map(|n| reg.id(n)).collect();
        let r = set.resolver("svc", ids, reg.cells.clone());
        assert_eq!(r.cell(r.resolve("gw", "Refund")).name, "gw");
        assert_eq!(r.cell(r.resolve("web", "Pay/Cash")).name, "pay");
        assert_eq!(r.cell(r.resolve("gw", "Pay/Card")).name, "incident");
        assert_eq!(r.resolve("web", "Refund"), UNMATCHED);
        assert!(
            RuleSet::from_wire(&config, "other")
                .unwrap()
                .names
                .is_empty()
        );
    }

    #[test]
    fn thresholds_saturate() {
        assert_eq!(threshold(0.0), 0);
        assert_eq!(threshold(-1.0), 0);
        assert_eq!(threshold(f64::NAN), 0);
        assert_eq!(threshold(1.5), u64::MAX);
        assert_eq!(threshold(0.5), 1 << 63);
    }
}
