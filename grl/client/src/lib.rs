//! The GRL client: the in-process data plane that decides every request locally, and
//! [`layer`], a tower layer that puts it in front of any HTTP or gRPC service.
//!
//! This is the crate services link: it depends on the contract (`grl-core`), tokio, tonic
//! and tower, and on nothing that serves, parses YAML or talks to git.
//!
//! [`Client::decide`] is the hot path: it reads (caller, procedure) into words and hashes
//! them, finds the pair in a fixed-capacity table allocated once, compares one random draw
//! with the pair's drop threshold and bumps the counter shard its thread owns with a plain
//! store (no locked instruction; see `local`). No lock, no allocation for a known pair, no
//! I/O, no clock read, no tracing, and no cache line written by two threads.
//!
//! [`Client::decide_explained`] decides the same way and also tells which bucket refused a
//! dropped request, with the response headers naming it made once per config version
//! (`refusal`), for a data plane that says so in its answer (`grl sidecar`).
//!
//! Why per-pair thresholds instead of a bucket snapshot behind an atomic pointer: the
//! per-request cost is then one table lookup; the control plane pays instead, copying each
//! bucket's threshold into its pairs once per instruction (≤ `max_pairs` stores a second).
//! The config snapshot (the matcher) *is* behind an `ArcSwap`, read only on the slow path
//! (first sight of a pair, or a pair past `max_pairs`).
//!
//! Memory is bounded by `max_pairs`: past it, a request still gets its bucket from the
//! matcher (no allocation) and is counted in the bucket's overflow counters, exported with
//! `caller="__overflow__", procedure="__overflow__"`.
//!
//! [`Client::spawn`] runs the control plane: a report every interval over one gRPC stream to
//! the zone aggregator, instructions applied as they arrive, ratios zeroed when they expire
//! (fail-open), reconnection with jittered exponential backoff.
//!
//! Following the load: an instruction gives, per bucket, the rate this client may admit (its
//! share of the bucket's allowed rate). Every `window` (50 ms) the background task measures
//! each bucket's offered rate from the counters `decide` already keeps and rewrites the
//! bucket's threshold as `max(0, 1 - target / offered_now)`, so a surge is cut and its end
//! is let through within a window, with no round trip; a sharp change is also reported at
//! once (an urgent report) so that the tiers re-share the bucket without waiting for the
//! interval. The target is the allowance less what the client admitted beyond it in the
//! windows before (an estimate's noise and a caller's bursts are paid back, so every
//! second stays at the allowance). `decide` is unchanged: it still reads one threshold per
//! pair.
//!
//! A data plane that enforces by itself (Envoy's `rate_limit_quota` filter behind
//! `grl sidecar`) uses [`Client::admission`] (the rate it may admit per bucket) and
//! [`Client::record`] (the requests it decided, counted as offered load toward the tiers);
//! recorded batches are left out of the window estimate, which follows this client's own
//! decisions.
//!
//! ```
//! use std::time::Duration;
//! use grl_client::{Client, ClientConfig, Decision};
//! let client = Client::new(ClientConfig::new("payments", "http://127.0.0.1:7001"));
//! assert_eq!(client.decide("gateway", "pay.Pay/Card"), Decision::Allow);
//! ```

mod buckets;
mod control;
mod error;
pub mod layer;
mod local;
mod metrics;
mod pair_key;
#[cfg(test)]
mod sim;
mod table;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

use grl_core::proto;

pub use buckets::refusal::{Explained, GRL_BUCKET, RATELIMIT_POLICY, RefusingBucket};
pub use error::ClientError;
pub use metrics::{
    CLIENT_CLASS_REQUESTS_TOTAL, CLIENT_CONFIG_INFO, CLIENT_CONNECTED, CLIENT_DROP_RATIO,
    CLIENT_FAIL_OPEN, CLIENT_OVERFLOW_TOTAL, CLIENT_PAIRS, CLIENT_UNKNOWN_CLASSES_TOTAL,
};

use buckets::{BucketCell, ClassCell, Resolver};
use control::Control;
use table::{DECISIONS, PairEntry, PairTable};

/// A pair's entry in one table: none when no bucket applies, or the resolver and cell id
/// when the table is full.
type PairLookup<'a> = Result<Option<&'a PairEntry>, (Arc<Resolver>, u32)>;
/// A pair's entry, or past `max_pairs` the resolver and the pair's cell id.
type PairFound<'a> = Result<&'a PairEntry, (Arc<Resolver>, u32)>;

/// What to do with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Decision {
    /// Let it through.
    Allow = 0,
    /// Refuse it (deny mode).
    Drop = 1,
    /// Shadow mode would have refused it: let it through, counted as a virtual drop.
    ShadowDrop = 2,
}

/// What a data plane that enforces by itself may admit in one bucket
/// ([`Client::admission`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admission {
    /// No limit applies now: no bucket, a shadow bucket, or no instruction in force.
    Unlimited,
    /// At most this many requests per second in the bucket (this client's allowance, or the
    /// recorded usage's part of it).
    PerSecond(f64),
    /// Refuse this fraction of requests (the tiers sent a ratio and no rate).
    Ratio(f64),
}

impl Decision {
    /// The decision of counter index `i` (0, 1 or 2): a table load, not a chain of compares.
    #[inline(always)]
    pub(crate) fn from_index(i: usize) -> Self {
        const BY_INDEX: [Decision; 4] = [
            Decision::Allow,
            Decision::Drop,
            Decision::ShadowDrop,
            Decision::ShadowDrop,
        ];
        BY_INDEX[i & 3]
    }

    /// Whether the request must be refused.
    pub fn is_drop(self) -> bool {
        self == Decision::Drop
    }

    /// Two buckets' decisions on one request: refused if either refuses, else a virtual
    /// drop if either would have refused it.
    pub(crate) fn and(self, other: Decision) -> Decision {
        match (self, other) {
            (Decision::Drop, _) | (_, Decision::Drop) => Decision::Drop,
            (Decision::ShadowDrop, _) | (_, Decision::ShadowDrop) => Decision::ShadowDrop,
            _ => Decision::Allow,
        }
    }
}

/// How a client is set up.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The service this client protects (the destination of the requests it decides).
    pub service: String,
    /// The zone this instance runs in.
    pub zone: String,
    /// The region this instance runs in.
    pub region: String,
    /// The zone aggregator's URL, e.g. `http://127.0.0.1:7001`.
    pub aggregator: String,
    /// The reporting interval.
    pub interval: Duration,
    /// How often the background task measures each bucket's offered rate and recomputes its
    /// drop threshold from the allowance (`max(0, 1 - target / offered_now)`); capped at
    /// `interval`. After a step down, traffic is refused for about 1.4 windows at worst.
    pub window: Duration,
    /// Ratios without their own validity expire this many intervals after receipt.
    pub expiry_intervals: u32,
    /// Bound on distinct (caller, procedure) pairs held; past it requests count as overflow.
    pub max_pairs: usize,
    /// Unique per instance, e.g. `host:pid`.
    pub id: String,
    /// TLS to the aggregator (feature `tls`): the CA to check it with and, for mutual TLS,
    /// this client's certificate and key; files are read again on every reconnect. With it
    /// a bare `host:port` aggregator is dialled as `https://`; `http://` is refused.
    #[cfg(feature = "tls")]
    pub tls: Option<grl_core::tls::ClientTls>,
}

impl ClientConfig {
    /// Defaults: zone/region `""`, 1 s interval, 50 ms window, 5 intervals of validity, 10,000 pairs,
    /// id from the process id.
    pub fn new(service: impl Into<String>, aggregator: impl Into<String>) -> Self {
        Self {
            service: service.into(),
            zone: String::new(),
            region: String::new(),
            aggregator: aggregator.into(),
            interval: Duration::from_secs(1),
            window: Duration::from_millis(50),
            expiry_intervals: 5,
            max_pairs: 10_000,
            id: format!("client-{}", std::process::id()),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

/// Cumulative counts of one bucket since the client started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketTotals {
    /// The bucket (`""` for requests that matched none).
    pub bucket: String,
    /// Every request offered.
    pub offered: u64,
    /// Let through.
    pub allowed: u64,
    /// Refused.
    pub dropped: u64,
    /// Let through but counted as virtual drops (shadow mode).
    pub shadow_dropped: u64,
}

/// A snapshot of the client's state.
#[derive(Debug, Clone)]
pub struct ClientStatus {
    /// The config version held (`""` before the first).
    pub config_version: String,
    /// No valid instruction is held: everything is allowed.
    pub fail_open: bool,
    /// The stream to the aggregator is up.
    pub connected: bool,
    /// The current drop ratio of every bucket of the config.
    pub ratios: BTreeMap<String, f64>,
    /// Distinct (caller, procedure) pairs held.
    pub pairs: usize,
    /// Requests counted as overflow so far.
    pub overflow: u64,
    /// Requests of a priority class their bucket does not list, so far (counted in the
    /// bucket's default class).
    pub unknown_classes: u64,
    /// Heap bytes held by the pair table.
    pub table_bytes: usize,
}

pub(crate) struct Inner {
    pub(crate) cfg: ClientConfig,
    pub(crate) table: PairTable,
    /// The pairs' buckets that apply in addition (see [`Resolver::resolve_in_addition`]),
    /// made when the first config with such a bucket arrives.
    pub(crate) also: std::sync::OnceLock<PairTable>,
    /// The current config has a bucket that applies in addition.
    pub(crate) also_on: AtomicBool,
    pub(crate) resolver: ArcSwap<Resolver>,
    /// Control-plane state; never taken by `decide`.
    pub(crate) control: Mutex<Control>,
    pub(crate) fail_open: AtomicBool,
    pub(crate) connected: AtomicBool,
    pub(crate) overflow: AtomicU64,
    /// The current config has a bucket with priority classes.
    pub(crate) classes_on: AtomicBool,
    /// Requests of a class their bucket does not list (counted in its default class).
    pub(crate) unknown_classes: AtomicU64,
}

/// The in-process rate limiter client. Cheap to clone: every clone shares one state.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("service", &self.inner.cfg.service)
            .field("id", &self.inner.cfg.id)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client with no config (everything allowed) and no connection; does no I/O.
    pub fn new(cfg: ClientConfig) -> Client {
        let control = Control::new(control::stream::window_of(&cfg), cfg.interval);
        let resolver = ArcSwap::from_pointee(control.empty_resolver());
        Client {
            inner: Arc::new(Inner {
                table: PairTable::new(cfg.max_pairs),
                also: std::sync::OnceLock::new(),
                also_on: AtomicBool::new(false),
                cfg,
                resolver,
                control: Mutex::new(control),
                fail_open: AtomicBool::new(true),
                connected: AtomicBool::new(false),
                overflow: AtomicU64::new(0),
                classes_on: AtomicBool::new(false),
                unknown_classes: AtomicU64::new(0),
            }),
        }
    }

    /// The client's config.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.cfg
    }

    /// Decides one request of `caller` calling `procedure`: the hot path. Where a bucket
    /// applies in addition to the one the request falls in, each decides and counts it, and
    /// the request is refused if either says drop.
    #[inline]
    pub fn decide(&self, caller: &str, procedure: &str) -> Decision {
        let d = self.decide_own(caller, procedure);
        if self.inner.also_on.load(Ordering::Relaxed) {
            self.decide_in_addition(caller, procedure, d)
        } else {
            d
        }
    }

    /// Decides one request of priority class `class` (e.g. `critical`) of `caller` calling
    /// `procedure`: as [`decide`](Self::decide), in that class of the request's bucket when
    /// the bucket has priority classes (when it must shed, its lowest classes go first). A
    /// class the bucket does not list counts in its default class (`default` if listed,
    /// else its lowest) and in [`ClientStatus::unknown_classes`]; `""` (no class) counts
    /// in the default class without counting as unknown; a bucket without classes ignores the class.
    #[inline]
    pub fn decide_in_class(&self, caller: &str, procedure: &str, class: &str) -> Decision {
        if !self.inner.classes_on.load(Ordering::Relaxed) {
            return self.decide(caller, procedure);
        }
        self.decide_classed(caller, procedure, class)
    }

    /// [`decide_in_class`](Self::decide_in_class) where the config has classes.
    fn decide_classed(&self, caller: &str, procedure: &str, class: &str) -> Decision {
        let own = self.decide_own_in_class(caller, procedure, class).0;
        if self.inner.also_on.load(Ordering::Relaxed) {
            self.decide_in_addition(caller, procedure, own)
        } else {
            own
        }
    }

    /// The decision of the request's own bucket in class `class`, and the cell of the
    /// class that decided it when that is not the pair's own.
    pub(crate) fn decide_own_in_class(
        &self,
        caller: &str,
        procedure: &str,
        class: &str,
    ) -> (Decision, Option<u32>) {
        let (pair, found, resolver) = self.pair_and_class(caller, procedure, class);
        match found {
            ClassCell::Other(cell) => {
                let c = resolver.cell(cell);
                let d = c.draw();
                count_direct(c, pair.ok(), d, 1);
                (d, Some(cell))
            }
            _ => {
                let d = match pair {
                    Ok(e) => e.decide(),
                    Err((resolver, id)) => self.decide_overflow(&resolver, id),
                };
                (d, None)
            }
        }
    }

    /// A request's pair (the resolver and cell id past `max_pairs`), where class `class`
    /// of its bucket is decided, and the resolver that says so (one load on the hot path);
    /// counts an unknown class.
    fn pair_and_class(
        &self,
        caller: &str,
        procedure: &str,
        class: &str,
    ) -> (PairFound<'_>, ClassCell, arc_swap::Guard<Arc<Resolver>>) {
        let pair = self.pair(caller, procedure);
        let id = match &pair {
            Ok(e) => e.cell.load(Ordering::Relaxed),
            Err((_, id)) => *id,
        };
        let resolver = self.inner.resolver.load();
        let found = resolver.class_cell(id, class);
        if found == ClassCell::Unknown && !class.is_empty() {
            self.inner.unknown_classes.fetch_add(1, Ordering::Relaxed);
        }
        (pair, found, resolver)
    }

    /// The decision of the request's own bucket: its pair's threshold, or (a pair not yet
    /// in the table) the bucket the config's matcher gives. The lookup `decide` and
    /// `decide_explained` share.
    #[inline(always)]
    pub(crate) fn decide_own(&self, caller: &str, procedure: &str) -> Decision {
        let table = &self.inner.table;
        let key = table.key(caller, procedure);
        match table.get(&key, caller, procedure) {
            Some(e) => e.decide(),
            None => self.decide_new(caller, procedure),
        }
    }

    /// The decision of the bucket that applies in addition, combined with `own`'s.
    #[inline(never)]
    fn decide_in_addition(&self, caller: &str, procedure: &str, own: Decision) -> Decision {
        own.and(self.decide_also(caller, procedure))
    }

    /// The decision of the bucket that applies in addition (allowed when none does).
    #[inline]
    fn decide_also(&self, caller: &str, procedure: &str) -> Decision {
        match self.also_pair(caller, procedure) {
            Ok(None) => Decision::Allow,
            Ok(Some(e)) => e.decide(),
            Err((resolver, id)) => self.decide_overflow(&resolver, id),
        }
    }

    /// Decides one call that stands for `n` requests (e.g. Envoy's `hits_addend`): admitted
    /// or refused whole, and all `n` counted as offered under that decision. Batches are not
    /// drawn at random (ten calls a second could not hold a share): a batch is admitted once
    /// the bucket's budget (the book its single requests spend too) holds half of it, and is
    /// then charged whole, so over a few calls the admitted share is the allowance's; a
    /// batch admitted beyond it is paid back by the calls after it. Without an allowance (a
    /// bare ratio) a running sum of the batches' admitted fractions plays the budget's part.
    /// Not the hot path.
    pub fn decide_n(&self, caller: &str, procedure: &str, n: u64) -> Decision {
        self.decide_n_explained(caller, procedure, n).decision
    }

    /// [`decide_n`](Self::decide_n) in one bucket: the pair's (`Ok(None)`: no bucket
    /// applies, allowed), or the bucket's overflow when the table is full.
    fn decide_batch(&self, pair: PairLookup<'_>, n: u64) -> Decision {
        let (pair, id, ratio, shadow) = match pair {
            Ok(None) => return Decision::Allow,
            Ok(Some(e)) => (
                Some(e),
                e.cell.load(Ordering::Relaxed),
                e.ratio(),
                e.is_shadow(),
            ),
            Err((resolver, id)) => {
                let cell = resolver.cell(id);
                (None, id, cell.ratio(), cell.shadow.load(Ordering::Relaxed))
            }
        };
        let d = match (
            self.inner
                .batch_refused(id, ratio, n, tokio::time::Instant::now()),
            shadow,
        ) {
            (false, _) => Decision::Allow,
            (true, false) => Decision::Drop,
            (true, true) => Decision::ShadowDrop,
        };
        match pair {
            Some(e) => e.add(d, n),
            None => {
                let resolver = self.inner.resolver.load();
                resolver.cell(id).overflow[d as usize].fetch_add(n, Ordering::Relaxed);
                self.inner.overflow.fetch_add(n, Ordering::Relaxed);
            }
        }
        d
    }

    /// The cell of class `class` of the bucket a pair falls in, when that is not the
    /// pair's own cell (a bucket with classes, a class other than its default), with the
    /// pair's entry (`None` past `max_pairs`); counts an unknown class.
    pub(crate) fn class_cell_of(
        &self,
        caller: &str,
        procedure: &str,
        class: &str,
    ) -> Option<(u32, Option<&PairEntry>)> {
        match self.pair_and_class(caller, procedure, class) {
            (pair, ClassCell::Other(cell), _) => Some((cell, pair.ok())),
            _ => None,
        }
    }

    /// Decides a batch of `n` requests in cell `cell` directly, as
    /// [`decide_n`](Self::decide_n) decides a pair's, counted in the cell's direct counters
    /// and, as a class's single requests are, in the pair's rows (`pair`).
    pub(crate) fn decide_batch_direct(
        &self,
        (cell, pair): (u32, Option<&PairEntry>),
        n: u64,
    ) -> Decision {
        let resolver = self.inner.resolver.load();
        let c = resolver.cell(cell);
        let refused = self
            .inner
            .batch_refused(cell, c.ratio(), n, tokio::time::Instant::now());
        let d = c.decision(refused);
        count_direct(c, pair, d, n);
        d
    }

    /// The slow path: a pair not in the table yet (or that will never fit).
    #[cold]
    #[inline(never)]
    fn decide_new(&self, caller: &str, procedure: &str) -> Decision {
        match self.pair(caller, procedure) {
            Ok(e) => e.decide(),
            Err((resolver, id)) => self.decide_overflow(&resolver, id),
        }
    }

    /// Decides a request of a pair past `max_pairs` in cell `id`, counted as overflow.
    #[cold]
    #[inline(never)]
    fn decide_overflow(&self, resolver: &Resolver, id: u32) -> Decision {
        let cell = resolver.cell(id);
        let d = cell.draw();
        cell.overflow[d as usize].fetch_add(1, Ordering::Relaxed);
        self.inner.overflow.fetch_add(1, Ordering::Relaxed);
        d
    }

    /// The pair's entry, added to the table if new; the resolver and the pair's cell id
    /// when the table is full.
    fn pair(&self, caller: &str, procedure: &str) -> Result<&PairEntry, (Arc<Resolver>, u32)> {
        self.pair_in(&self.inner.table, Resolver::resolve, caller, procedure)
    }

    /// The pair's entry for the bucket that applies in addition (`Ok(None)`: none does).
    fn also_pair(&self, caller: &str, procedure: &str) -> PairLookup<'_> {
        let table = self
            .inner
            .also
            .get_or_init(|| PairTable::new(self.inner.cfg.max_pairs));
        match self.pair_in(table, Resolver::resolve_in_addition, caller, procedure) {
            Ok(e) if e.cell.load(Ordering::Relaxed) == buckets::UNMATCHED => Ok(None),
            Ok(e) => Ok(Some(e)),
            Err((_, buckets::UNMATCHED)) => Ok(None),
            Err(full) => Err(full),
        }
    }

    /// [`pair`](Self::pair) in `table`, whose pairs `resolve` maps to cells.
    fn pair_in<'a>(
        &self,
        table: &'a PairTable,
        resolve: fn(&Resolver, &str, &str) -> u32,
        caller: &str,
        procedure: &str,
    ) -> Result<&'a PairEntry, (Arc<Resolver>, u32)> {
        let inner = &*self.inner;
        let key = table.key(caller, procedure);
        if let Some(e) = table.get(&key, caller, procedure) {
            return Ok(e);
        }
        let resolver = inner.resolver.load_full();
        let id = resolve(&resolver, caller, procedure);
        let cell = resolver.cell(id);
        let entry = table.insert(&key, caller, procedure, || {
            PairEntry::new(
                key,
                caller,
                procedure,
                id,
                cell.threshold.load(Ordering::Relaxed),
                cell.shadow.load(Ordering::Relaxed),
            )
        });
        match entry {
            Some(e) => {
                let now = inner.resolver.load();
                if !Arc::ptr_eq(&resolver, &now) {
                    // The config changed while this pair was being added: resolve again.
                    e.cell
                        .store(resolve(&now, caller, procedure), Ordering::Relaxed);
                    control::sync_pair(e, &now.cells);
                }
                Ok(e)
            }
            None => Err((resolver, id)),
        }
    }

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
            (pair, ClassCell::Other(cell), _) => {
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
        self.inner
            .record_counts(id, total, elapsed, tokio::time::Instant::now(), count);
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
        self.inner
            .record_counts(id, total, elapsed, tokio::time::Instant::now(), count);
    }

    /// The name of the bucket `caller` calling `procedure` falls in under the current
    /// config; `None` when it matches none. Not the hot path.
    pub fn bucket(&self, caller: &str, procedure: &str) -> Option<String> {
        self.bucket_in_class(caller, procedure, "")
    }

    /// The name of the bucket, or of its class (`bucket#class`) when the bucket has
    /// priority classes, that decides `caller` calling `procedure` in class `class` (see
    /// [`decide_in_class`](Self::decide_in_class)); `None` when no bucket matches. Not the
    /// hot path.
    pub fn bucket_in_class(&self, caller: &str, procedure: &str, class: &str) -> Option<String> {
        let resolver = self.inner.resolver.load();
        let id = class_id(&resolver, resolver.resolve(caller, procedure), class);
        (id != buckets::UNMATCHED).then(|| resolver.cells[id as usize].name.clone())
    }

    /// The name of the bucket that applies to `caller` calling `procedure` in addition to
    /// [`bucket`](Self::bucket)'s; `None` when none does. Not the hot path.
    pub fn bucket_in_addition(&self, caller: &str, procedure: &str) -> Option<String> {
        let resolver = self.inner.resolver.load();
        let id = resolver.resolve_in_addition(caller, procedure);
        (id != buckets::UNMATCHED).then(|| resolver.cells[id as usize].name.clone())
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

    /// Starts the control-plane task on the current tokio runtime: reports every interval,
    /// applies instructions, expires ratios, reconnects with jittered backoff. It runs until
    /// aborted.
    pub fn spawn(&self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(control::stream::run(self.inner.clone()))
    }

    /// Appends the Prometheus text exposition of this client's metrics to `out`.
    pub fn encode_metrics(&self, out: &mut String) {
        metrics::encode(&self.inner, out);
    }

    /// Cumulative counts per bucket, sorted by bucket name (unmatched under `""`).
    pub fn bucket_totals(&self) -> Vec<BucketTotals> {
        self.inner.bucket_totals()
    }

    /// Config version, fail-open, ratios, connection state.
    pub fn status(&self) -> ClientStatus {
        self.inner.status()
    }

    /// Applies one instruction as if it had just arrived from the aggregator: config (when
    /// `has_config`), then ratios with their expiry counted from now.
    pub fn apply_instruction(&self, ins: &proto::Instruction) {
        self.inner
            .apply_instruction(ins, tokio::time::Instant::now());
    }

    /// Ends a window: measures each bucket's offered rate since the last call and recomputes
    /// the thresholds of the buckets that have an allowance (the background task does this
    /// every `window`; exposed for clients driven without it). Returns whether the rates
    /// jumped enough to send an urgent report.
    pub fn end_window(&self) -> bool {
        self.inner.window(tokio::time::Instant::now()).is_some()
    }

    /// Zeroes the ratios whose validity has passed (the background task does this on a
    /// timer; exposed for clients driven without it).
    pub fn expire(&self) {
        self.inner.expire(tokio::time::Instant::now());
    }
}

/// Counts `n` requests decided `d` in cell `c` directly (a class's cell, decided without
/// a pair of its own), and in the pair's rows when the pair is held.
fn count_direct(c: &BucketCell, pair: Option<&PairEntry>, d: Decision, n: u64) {
    c.direct[d as usize].fetch_add(n, Ordering::Relaxed);
    if let Some(e) = pair {
        count_in_pair(c, e, d, n);
    }
}

/// Counts `n` decisions `d` of class cell `c` in their pair `e` too (its
/// `grl_requests_total` rows hold every class), marked to be taken back out of the book of
/// the pair's cell (see `BucketCell::paired`).
fn count_in_pair(c: &BucketCell, e: &PairEntry, d: Decision, n: u64) {
    e.add(d, n);
    c.paired_into
        .store(e.cell.load(Ordering::Relaxed), Ordering::Relaxed);
    c.paired[d as usize].fetch_add(n, Ordering::Release);
}

/// The cell that decides class `class` of the bucket in cell `id`: its class's, or `id`
/// itself (no classes, the pair's own class, an unknown class or none).
fn class_id(resolver: &Resolver, id: u32, class: &str) -> u32 {
    if id == buckets::UNMATCHED {
        return id;
    }
    match resolver.class_cell(id, class) {
        ClassCell::Other(cell) => cell,
        _ => id,
    }
}

/// Recorded usage as counts by decision: in shadow mode at ratio `r`, that share of the
/// allowed requests counts as virtually dropped.
fn recorded_counts(allowed: u64, denied: u64, shadow: Option<f64>) -> [u64; DECISIONS] {
    let virtual_drops = shadow.map_or(0, |r| ((allowed as f64 * r).round() as u64).min(allowed));
    [allowed - virtual_drops, denied, virtual_drops]
}
