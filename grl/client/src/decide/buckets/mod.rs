//! Buckets as the client sees them: one cell per bucket name, and the resolver that maps a
//! (caller, procedure) pair to a cell; which bucket refused a request, and the headers
//! that say so, in `refusal`.
//!
//! A [`BucketCell`] is created the first time a config names a bucket and is kept for the
//! life of the client (cell ids are stable, so a pair can hold its cell id in an
//! `AtomicU32` and counts never move between unrelated buckets). Cell 0 stands for
//! "matched no bucket" and is never limited. The [`Resolver`] is an immutable snapshot of
//! one config version (matcher + cell ids) behind an `ArcSwap`; only the slow path (a pair
//! seen for the first time, or overflow) loads it. A decision in a priority class finds
//! its class in its pair's copy of the bucket's classes (`decide::class_table`) and that
//! class's cell in the `directory` of cells by id, without loading the resolver.

pub(crate) mod directory;
pub(crate) mod refusal;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use grl_core::config::split_class;
use grl_core::config::{MatchRule, Matcher, Mode};
use grl_core::metric_names::UNMATCHED_BUCKET;
use grl_core::proto;
use grl_core::wire::{ClassSpan, InvalidEnum, class_spans, match_rule, mode_from_wire};

use crate::Decision;
use crate::decide::buckets::refusal::RefusingBucket;
use crate::decide::room::Room;
use crate::decide::table::DECISIONS;
use crate::local;

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
    /// Decisions made on this cell directly rather than through a pair of its own
    /// (requests of a priority class other than their pair's,
    /// [`crate::Client::decide_in_class`]) where no pair counted them (past `max_pairs`).
    pub(crate) direct: [AtomicU64; DECISIONS],
    /// The direct decisions counted in a pair instead (so that the pair's
    /// `grl_requests_total` rows hold every class of its bucket) whose cell is
    /// `paired_into`: the control task adds them to this cell's book and takes them back
    /// out of that cell's. One shard per owned shard index and a shared one, as a pair's
    /// counts (see `table`): a classed decision writes only its own thread's line, with a
    /// plain store.
    paired: Box<[CachePadded<[AtomicU64; DECISIONS]>]>,
    /// The cell whose pairs also counted this cell's paired decisions (the default class).
    pub(crate) paired_into: AtomicU32,
    /// Requests decided elsewhere and recorded here ([`crate::Client::record`]), also
    /// counted in their pairs: the window estimate of this client's own offered rate leaves
    /// them out, since they arrive in batches.
    pub(crate) recorded: AtomicU64,
    /// What its pairs may still admit in the current window (see `room`).
    pub(crate) room: Room,
}

impl BucketCell {
    pub(crate) fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            threshold: AtomicU64::new(0),
            shadow: AtomicBool::new(false),
            overflow: Default::default(),
            direct: Default::default(),
            paired: (0..=local::owned_shards())
                .map(|_| CachePadded::new(Default::default()))
                .collect(),
            paired_into: AtomicU32::new(UNMATCHED),
            recorded: AtomicU64::new(0),
            room: Room::default(),
        }
    }

    /// Counts `n` decisions `d` of this class that pair `into`'s pair counted too, in the
    /// shard of this thread (`local::claim`'s index). `Release`, so that the control task,
    /// reading these first, never sees more than the pairs have counted.
    #[inline]
    pub(crate) fn add_paired(&self, shard: usize, into: u32, d: Decision, n: u64) {
        if self.paired_into.load(Ordering::Relaxed) != into {
            self.paired_into.store(into, Ordering::Relaxed);
        }
        let own = self.paired.len() - 1;
        let counter = &self.paired[shard.min(own)][d as usize];
        local::add(counter, n, shard < own, Ordering::Release);
    }

    /// The paired counts per decision, summed over shards.
    pub(crate) fn paired(&self) -> [u64; DECISIONS] {
        local::sum(self.paired.iter().map(|s| &**s), Ordering::Acquire)
    }

    /// A decision drawn against the cell's threshold, in its mode (not counted).
    pub(crate) fn draw(&self) -> Decision {
        local::claim();
        let (_, hit) = local::shard_and_hit(self.threshold.load(Ordering::Relaxed));
        self.decision(hit)
    }

    /// The decision for a request the cell refuses (`refused`) or not, in its mode.
    #[inline]
    pub(crate) fn decision(&self, refused: bool) -> Decision {
        match (refused, self.shadow.load(Ordering::Relaxed)) {
            (false, _) => Decision::Allow,
            (true, false) => Decision::Drop,
            (true, true) => Decision::ShadowDrop,
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
    /// The priority classes of a bucket with classes, by the cell id its pairs resolve to
    /// (its default class's).
    classes: Vec<Option<Arc<Classes>>>,
}

/// A bucket's priority classes as the resolver holds them (each pair holds a copy its
/// decisions read, see `decide::class_table`).
pub(crate) struct Classes {
    /// Class names, highest first.
    names: Vec<String>,
    /// Their cell ids.
    cells: Vec<u32>,
}

impl Classes {
    /// Each class's name and cell id, highest first.
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = (&str, u32)> {
        self.names
            .iter()
            .map(String::as_str)
            .zip(self.cells.iter().copied())
    }
}

/// Which cell a request of a priority class is decided in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClassCell {
    /// The pair's own (a bucket without classes, or the default class).
    Own,
    /// Another class's cell.
    Other(u32),
    /// The bucket does not list the class: the default class's, counted as unknown.
    Unknown,
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
            classes: Vec::new(),
        }
    }

    /// Where a request of class `class` whose pair resolves to cell `id` is decided.
    #[inline]
    pub(crate) fn class_cell(&self, id: u32, class: &str) -> ClassCell {
        let Some(Some(c)) = self.classes.get(id as usize) else {
            return ClassCell::Own;
        };
        match c.names.iter().position(|n| n == class) {
            Some(k) if c.cells[k] == id => ClassCell::Own,
            Some(k) => ClassCell::Other(c.cells[k]),
            None => ClassCell::Unknown,
        }
    }

    /// Whether any bucket of this config has priority classes.
    pub(crate) fn has_classes(&self) -> bool {
        self.classes.iter().any(Option::is_some)
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

    /// The priority classes of the bucket whose pairs resolve to cell `id` (its default
    /// class's), if it has any.
    pub(crate) fn classes_of(&self, id: u32) -> Option<&Classes> {
        self.classes.get(id as usize)?.as_deref()
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
    /// Each rule's place among its bucket's priority classes.
    spans: Vec<Option<ClassSpan>>,
    /// Which rule of a bucket with classes is its default class.
    class_default: Vec<bool>,
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
            spans: Vec::new(),
            class_default: Vec::new(),
        };
        for s in config.iter().filter(|s| s.service == service) {
            set.spans
                .extend(class_spans(&s.buckets).into_iter().map(|span| {
                    span.map(|x| ClassSpan {
                        first: x.first + set.names.len(),
                        ..x
                    })
                }));
            for b in &s.buckets {
                set.push(b)?;
            }
        }
        Ok(set)
    }

    fn push(&mut self, b: &proto::BucketRule) -> Result<(), InvalidEnum> {
        let set = self;
        {
            set.modes.push(mode_from_wire(b.mode)?);
            set.names.push(b.name.clone());
            set.limits.push(b.limit_rps);
            set.rules.push(match_rule(b));
            set.overrides.push(b.is_override);
            set.in_addition.push(b.in_addition);
            set.class_default.push(b.class_default);
        }
        Ok(())
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
        // A pair of a bucket with classes resolves to its default class; the other
        // classes are found from there ([`Resolver::class_cell`]).
        let mut classes = vec![None; cells.len()];
        let mut resolved = cell_of.clone();
        for span in self.spans.iter().flatten().filter(|s| s.rank == 0) {
            let group = span.first..span.first + span.count;
            let default = group
                .clone()
                .find(|&k| self.class_default[k])
                .unwrap_or(group.end - 1);
            let class = Classes {
                names: group
                    .clone()
                    .map(|k| {
                        split_class(&self.names[k])
                            .1
                            .unwrap_or_default()
                            .to_string()
                    })
                    .collect(),
                cells: group.clone().map(|k| cell_of[k]).collect(),
            };
            if let Some(slot) = classes.get_mut(cell_of[default] as usize) {
                *slot = Some(Arc::new(class));
            }
            for k in group {
                resolved[k] = cell_of[default];
            }
        }
        Resolver {
            matcher,
            cell_of: resolved,
            in_addition: self.in_addition.clone(),
            cells,
            refusals,
            classes,
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
            ..Default::default()
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
