//! What a node's lock guards ([`State`]: rules, children, what came from the parent, the
//! scopes computed here, the last tick's results, the role), how the node reaches a child
//! ([`Link`]), its byte counters, and which children a round of instructions looks at.
//! `node` owns the lock and the operations; `instruct` and `parent` work on this state.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::admission::ReportLimits;
use super::children::Children;
use super::dense_tick::IndexedSums;
use super::leadership::Leadership;
use super::parent_state::Parent;
use super::ratios::{Computed, RatioKey, Totals};
use super::rules::Rules;
use super::scopes::Owned;
use crate::net::log_limit::RefusalLog;
use grl_core::proto;

/// How a tier reaches one child: the sending half of its instruction stream.
pub type Link = mpsc::Sender<Result<proto::Instruction, tonic::Status>>;

/// The mutable state of a node.
#[derive(Debug)]
pub(crate) struct State {
    pub rules: Arc<Rules>,
    /// The rules before the last change: a child's packed rows sent just before it heard
    /// of the change are read with them.
    pub previous_rules: Option<Arc<Rules>>,
    pub config_gen: u64,
    pub children: Children<Link>,
    pub parent: Parent,
    /// The scopes this tier computes, child by child (see [`Owned`]).
    pub owned: Owned,
    pub computed: BTreeMap<RatioKey, Computed>,
    /// The last tick's sums by index, when it was worked so (see [`IndexedSums`]).
    pub indexed: Option<IndexedSums>,
    /// Offered rate by (service, bucket) over all fresh children, as of the last tick.
    pub bucket_offered: BTreeMap<(String, String), f64>,
    /// What the last tick summed for the parent (see [`Node::upward_report`](super::node::Node::upward_report)): the
    /// children's rows are summed once per tick, for the ratios, the offered sums and this.
    pub upward: Totals,
    pub seq: u64,
    pub limits: ReportLimits,
    pub refusal_log: RefusalLog,
    /// Whether this tier leads (always, without an election) and who does.
    pub role: Leadership,
    /// A tier that just started, or a newly elected leader, sends nothing to its children
    /// before this (it learns), and tells its parent its sums are partial.
    pub learn_until: Option<Instant>,
    /// How long a child joining during the learning can still extend it.
    pub learn_cap: Option<Instant>,
    /// The partition hold (see [`super::hold`]).
    pub hold: Duration,
}

/// Control-plane byte counters (encoded protobuf sizes).
#[derive(Debug, Default)]
pub struct Bytes {
    /// Bytes of reports received from children.
    pub reports_in: AtomicU64,
    /// Bytes of instructions sent to children.
    pub instructions_out: AtomicU64,
}

/// Which children a round of instructions looks at.
pub(super) enum Round<'a> {
    /// The one with this id (it just reported for the first time).
    Child(&'a str),
    /// Every child (a tick).
    All,
    /// Those that heard nothing for [`REINSTRUCT_AFTER`](super::instruct::REINSTRUCT_AFTER) of an interval.
    Due,
}
