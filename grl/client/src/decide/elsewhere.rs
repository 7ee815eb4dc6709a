//! Requests decided elsewhere: what a data plane that enforces by itself (Envoy's rate
//! limit quota filter behind `grl sidecar`) may admit per bucket ([`Client::admission`]),
//! and the usage it decided, recorded as this client's offered load ([`Client::record`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::buckets::{self, BucketCell, ClassCell};
use super::table::{DECISIONS, PairEntry};
use super::{Decision, PairLookup, class_id, count_direct};
use crate::control::recorded;
use crate::{Admission, Client};

impl Client {
    /// Records requests of `caller` calling `procedure` that were decided elsewhere over the
    /// last `elapsed` (e.g. by an Envoy applying this client's
    /// [`admission`](Self::admission)): `allowed` let through and `denied` refused. They
    /// count as offered load toward the tiers and in the metrics like decisions of this
    /// client; in a shadow bucket, the share of those let through that the bucket's
    /// allowance would have refused counts as shadow drops. They count in the bucket that
    /// applies in addition too, if any. Not the hot path: it may add the pair.
    pub fn record(
        &self,
        caller: &str,
        procedure: &str,
        allowed: u64,
        denied: u64,
        elapsed: Duration,
    ) {
        if allowed.saturating_add(denied) == 0 {
            return;
        }
        self.record_in(
            self.pair(caller, procedure).map(Some),
            allowed,
            denied,
            elapsed,
        );
        if self.inner.also_on.load(Ordering::Relaxed) {
            self.record_in(self.also_pair(caller, procedure), allowed, denied, elapsed);
        }
    }

    /// [`record`](Self::record) of usage in priority class `class` (see
    /// [`decide_in_class`](Self::decide_in_class)): counted in that class of the pair's
    /// bucket, and in the pair's rows. A bucket without classes ignores the class.
    pub fn record_in_class(
        &self,
        caller: &str,
        procedure: &str,
        class: &str,
        allowed: u64,
        denied: u64,
        elapsed: Duration,
    ) {
        if !self.inner.classes_on.load(Ordering::Relaxed) {
            return self.record(caller, procedure, allowed, denied, elapsed);
        }
        if allowed.saturating_add(denied) == 0 {
            return;
        }
        match self.pair_and_class(caller, procedure, class) {
            (pair, ClassCell::Other(cell)) => {
                self.record_in_class_cell(cell, pair.ok(), allowed, denied, elapsed);
            }
            (pair, ..) => self.record_in(pair.map(Some), allowed, denied, elapsed),
        }
        if self.inner.also_on.load(Ordering::Relaxed) {
            self.record_in(self.also_pair(caller, procedure), allowed, denied, elapsed);
        }
    }

    /// [`record`](Self::record) in the class cell `id`, and in the pair's rows when the
    /// pair is held (as [`decide_in_class`](Self::decide_in_class) counts).
    fn record_in_class_cell(
        &self,
        id: u32,
        pair: Option<&PairEntry>,
        allowed: u64,
        denied: u64,
        elapsed: Duration,
    ) {
        let count = |cell: &BucketCell, shadow: Option<f64>| {
            for (i, n) in recorded_counts(allowed, denied, shadow)
                .into_iter()
                .enumerate()
            {
                count_direct(cell, pair, Decision::from_index(i), n);
            }
        };
        let total = allowed.saturating_add(denied);
        self.record_now(id, (total, elapsed), count);
    }

    /// [`record`](Self::record) in one bucket.
    fn record_in(&self, pair: PairLookup<'_>, allowed: u64, denied: u64, elapsed: Duration) {
        let total = allowed.saturating_add(denied);
        let (pair, id) = match pair {
            Ok(None) => return,
            Ok(Some(e)) => (Some(e), e.cell.load(Ordering::Relaxed)),
            Err((_, id)) => (None, id),
        };
        let count = |cell: &BucketCell, shadow: Option<f64>| {
            let counts = recorded_counts(allowed, denied, shadow);
            match pair {
                Some(e) => {
                    for (i, n) in counts.into_iter().enumerate() {
                        e.add(Decision::from_index(i), n);
                    }
                }
                None => {
                    for (i, n) in counts.into_iter().enumerate() {
                        cell.overflow[i].fetch_add(n, Ordering::Relaxed);
                    }
                    self.inner.overflow.fetch_add(total, Ordering::Relaxed);
                }
            }
        };
        self.record_now(id, (total, elapsed), count);
    }

    /// What `caller` calling `procedure` may admit now, for a data plane that enforces by
    /// itself (e.g. Envoy's rate limit quota filter): [`Admission::Unlimited`] when no
    /// bucket matches, the bucket is in shadow mode, or no instruction is in force
    /// (fail-open); otherwise the part of this client's allowance for usage decided
    /// elsewhere (all of it, or, when the client also decides requests of the bucket
    /// itself, the part in proportion to the recorded rate), or the drop ratio when the
    /// tiers sent no rate. The caller splits it over its own sub-buckets.
    pub fn admission(&self, caller: &str, procedure: &str) -> Admission {
        self.admission_in_class(caller, procedure, "")
    }

    /// [`admission`](Self::admission) for usage of priority class `class` (see
    /// [`decide_in_class`](Self::decide_in_class)): that class's allowance when the bucket
    /// has classes.
    pub fn admission_in_class(&self, caller: &str, procedure: &str, class: &str) -> Admission {
        let resolver = self.inner.resolver.load();
        let id = class_id(&resolver, resolver.resolve(caller, procedure), class);
        if id == buckets::UNMATCHED
            || resolver.cells[id as usize].shadow.load(Ordering::Relaxed)
            || self.inner.fail_open.load(Ordering::Relaxed)
        {
            return Admission::Unlimited;
        }
        self.inner.admission(id, tokio::time::Instant::now())
    }

    /// Records `n` requests over `span` in cell `id` now (see
    /// [`recorded::record_counts`]), `count` adding them where they are counted.
    fn record_now(
        &self,
        id: u32,
        (n, span): (u64, Duration),
        count: impl FnOnce(&BucketCell, Option<f64>),
    ) {
        recorded::record_counts(&self.inner, id, n, span, tokio::time::Instant::now(), count);
    }
}

/// Recorded usage as counts by decision: in shadow mode at ratio `r`, that share of the
/// allowed requests counts as virtually dropped.
fn recorded_counts(allowed: u64, denied: u64, shadow: Option<f64>) -> [u64; DECISIONS] {
    let virtual_drops = shadow.map_or(0, |r| ((allowed as f64 * r).round() as u64).min(allowed));
    [allowed - virtual_drops, denied, virtual_drops]
}
