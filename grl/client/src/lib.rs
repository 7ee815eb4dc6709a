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

mod control;
mod decide;
mod error;
pub mod layer;
mod local;
mod metrics;
#[cfg(test)]
mod sim;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

use grl_core::proto;

pub use decide::Decision;
pub use decide::buckets::refusal::{Explained, GRL_BUCKET, RATELIMIT_POLICY, RefusingBucket};
pub use error::ClientError;
pub use metrics::{
    CLIENT_CLASS_REQUESTS_TOTAL, CLIENT_CONFIG_INFO, CLIENT_CONNECTED, CLIENT_DROP_RATIO,
    CLIENT_FAIL_OPEN, CLIENT_OVERFLOW_TOTAL, CLIENT_PAIRS, CLIENT_RATE_CHANGES_TOTAL,
    CLIENT_UNKNOWN_CLASSES_TOTAL,
};

use control::Control;
use decide::buckets::Resolver;
use decide::buckets::directory::CellDirectory;
use decide::table::PairTable;

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
    /// Every cell by id (the registry's), for decisions in a class other than the pair's.
    pub(crate) cells: CellDirectory,
    /// Control-plane state; never taken by `decide`.
    pub(crate) control: Mutex<Control>,
    pub(crate) fail_open: AtomicBool,
    pub(crate) connected: AtomicBool,
    pub(crate) overflow: AtomicU64,
    /// The current config has a bucket with priority classes.
    pub(crate) classes_on: AtomicBool,
    /// Requests of a class their bucket does not list (counted in its default class).
    pub(crate) unknown_classes: AtomicU64,
    /// Changes of a bucket's rate told to the aggregator at once, by
    /// `control::shape::Change::index`.
    pub(crate) rate_changes: [AtomicU64; control::shape::Change::TOLD.len()],
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
                cells: CellDirectory::new(),
                control: Mutex::new(control),
                fail_open: AtomicBool::new(true),
                connected: AtomicBool::new(false),
                overflow: AtomicU64::new(0),
                classes_on: AtomicBool::new(false),
                unknown_classes: AtomicU64::new(0),
                rate_changes: Default::default(),
            }),
        }
    }

    /// The client's config.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.cfg
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
        control::apply::apply_instruction(&self.inner, ins, tokio::time::Instant::now());
    }

    /// Ends a window: measures each bucket's offered rate since the last call and recomputes
    /// the thresholds of the buckets that have an allowance (the background task does this
    /// every `window`; exposed for clients driven without it). Returns whether the rates
    /// jumped enough to send an urgent report.
    pub fn end_window(&self) -> bool {
        control::window::window(&self.inner, tokio::time::Instant::now()).is_some()
    }

    /// Zeroes the ratios whose validity has passed (the background task does this on a
    /// timer; exposed for clients driven without it).
    pub fn expire(&self) {
        self.inner.expire(tokio::time::Instant::now());
    }
}
