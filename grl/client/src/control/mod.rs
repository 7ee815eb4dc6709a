//! The client's control plane: everything but the per-request decision. This module holds
//! its state, the books of every bucket (counts, allowance, expiry, traffic shape, budget),
//! expiring ratios (fail-open) and folding the pairs' counters into per-bucket totals; its
//! children do the rest: the stream to the aggregator (`stream`), each 50 ms window
//! (`window`: shape, budget, thresholds), what goes up (`report`, and by bucket index in
//! `indexed`), applying instructions and configs (`apply`), the traffic shape's estimates
//! (`shape`), the budget (`budget`) and usage recorded for a data plane that enforces by
//! itself (`recorded`).
//!
//! Everything here runs on the background task (or a test driving it) under one lock that
//! the hot path never takes. The hot path only reads the thresholds written here.
//!
//! `Inner`'s control-plane methods (the lock, expiry, folding counts, status) live here;
//! each stage is a module of functions over `Inner` and the locked [`Control`].

pub(crate) mod apply;
pub(crate) mod budget;
pub(crate) mod indexed;
pub(crate) mod recorded;
pub(crate) mod report;
pub(crate) mod shape;
pub(crate) mod stream;
pub(crate) mod window;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use crate::decide::buckets::{Registry, Resolver};
use crate::decide::sync_pair;
use crate::decide::table::{DECISIONS, PairEntry, PairTable};
use crate::{BucketTotals, ClientStatus, Inner};
use budget::Budget;
use indexed::Indexing;
use recorded::Recorded;
use shape::Shape;

/// Bookkeeping of one cell, by cell id.
#[derive(Debug, Clone)]
pub(crate) struct Book {
    /// Cumulative counts folded in so far.
    pub(crate) totals: [u64; DECISIONS],
    /// Overflow counts already folded into `totals`.
    overflow_seen: [u64; DECISIONS],
    /// The cell's direct counts (see `BucketCell::direct`) already added to `totals`.
    direct_seen: [u64; DECISIONS],
    /// The cell's paired counts (see `BucketCell::paired`) already seen.
    paired_seen: [u64; DECISIONS],
    /// Counts of other classes' decisions folded into this book with their pairs, still to
    /// be taken back out (see `Inner::collect`).
    owed: [u64; DECISIONS],
    /// When the current ratio stops being valid.
    pub(crate) expires: Option<Instant>,
    /// The rate this client may admit in this bucket, when the instruction gave one.
    pub(crate) allowed: Option<f64>,
    /// `totals` at the end of the last window.
    pub(crate) window_base: [u64; DECISIONS],
    /// The recent windows: rates, changes, gaps.
    pub(crate) shape: Shape,
    /// What the allowance still lets through.
    pub(crate) budget: Budget,
    /// After an urgent report of a fall: until when, and at least what, the allowance stays
    /// (the tiers re-share from a mix of fresh and interval-old rates meanwhile, which would
    /// make this client's share look too small).
    pub(crate) hold: Option<(Instant, f64)>,
    /// After the first requests that followed a silence (a [`Change::Start`]
    /// (crate::control::shape::Change::Start)): until when an allowance given under the limit is
    /// not applied (an interval, and at least half of one after a rise). The tiers shared
    /// the headroom from a rate counted over the silence, well under a step's; over the
    /// limit their allowance holds at once (a bucket one caller floods from idle), under it
    /// the client admits freely until its rate is known, as it did before anything was told
    /// (a bucket under its limit drops nothing).
    pub(crate) started_until: Option<Instant>,
    /// The current window began without an allowance (the first instruction, or one after
    /// failing open): what it admitted meanwhile is not charged to the budget.
    pub(crate) unsettled: bool,
    /// Usage of the bucket decided elsewhere.
    pub(crate) recorded: Recorded,
    /// The admitted fractions of the batches decided so far, in requests, less what was
    /// admitted: the ledger of batches decided while the bucket has a ratio but no
    /// allowance (see [`Inner::batch_refused`]).
    batch_credit: f64,
    /// Requests of admitted batches already charged to the budget that the next windows
    /// must not charge again (a batch's count may land in the window after its decision).
    pub(crate) batch_charged: u64,
    /// The largest batch seen within the shape's windows, and how many windows ago: the
    /// budget may save up to it, so that a batch larger than the usual credit is still
    /// admitted in its share.
    pub(crate) largest_batch: Option<(usize, u64)>,
    /// The tiers' last word was that the bucket is over its limit (a drop ratio above 0).
    pub(crate) over_limit: bool,
}

impl Book {
    fn new(windows: usize, interval_windows: usize) -> Self {
        Self {
            totals: [0; DECISIONS],
            overflow_seen: [0; DECISIONS],
            direct_seen: [0; DECISIONS],
            paired_seen: [0; DECISIONS],
            owed: [0; DECISIONS],
            expires: None,
            allowed: None,
            window_base: [0; DECISIONS],
            shape: Shape::new(windows, interval_windows),
            budget: Budget::new(),
            hold: None,
            started_until: None,
            unsettled: false,
            recorded: Recorded::default(),
            batch_credit: 0.0,
            batch_charged: 0,
            largest_batch: None,
            over_limit: false,
        }
    }

    /// The part of allowance `a` for this client's own decisions (see
    /// [`Recorded::local_share`]).
    pub(crate) fn local_share(&self, a: f64) -> f64 {
        self.recorded.local_share(a, self.shape.expected())
    }

    /// The drop ratio of the next window of `window_secs` at allowance `share`: what the
    /// budget holds of what the window is expected to offer, and under the limit at least
    /// one request while the window may still owe it (what [`Book::room`] lets it owe, an
    /// interval's allowance, `interval_secs`); nothing in the first window after a spell
    /// with no request in the ring, whose requests come before anything says they will
    /// (what it admits beyond the budget is not owed: see `window::window`).
    pub(crate) fn budget_ratio(&self, share: f64, window_secs: f64, interval_secs: f64) -> f64 {
        if self.shape.offered_in_ring() == 0 {
            return 0.0;
        }
        let owed = self.may_owe(share, interval_secs);
        self.budget
            .ratio(share, window_secs, self.shape.expected(), owed)
    }

    /// What a window may owe beyond its budget at allowance `share`: under the limit an
    /// interval's allowance (`interval_secs`), over it nothing.
    fn may_owe(&self, share: f64, interval_secs: f64) -> f64 {
        if self.over_limit {
            0.0
        } else {
            share * interval_secs
        }
    }

    /// The most the next window of `window_secs` at allowance `share` may admit (the
    /// bucket's room, see `decide::room`), in whole requests: what the budget holds with
    /// the window's refill, and under the limit what it may owe on top (an interval's
    /// allowance, `interval_secs`: a caller rising alone borrows until the tiers hear of
    /// it and give it more, as the ratio lets it; on a loaded machine a window that ends
    /// late is not cut to a nominal window's refill). The first window after a spell with
    /// no request in the ring, whose ratio admits what comes (see [`Book::budget_ratio`]),
    /// may admit an interval's allowance, and at least one request, beyond what the budget
    /// holds (what it owes is forgiven after that window, see `window::window`): a sparse
    /// caller, whose every request follows an empty ring, is not dropped for want of a
    /// part of one. Over the limit a window admits what the budget holds and no more.
    pub(crate) fn room(&self, share: f64, window_secs: f64, interval_secs: f64) -> u64 {
        let available = self.budget.available(share, window_secs);
        let room = if self.shape.offered_in_ring() == 0 {
            available.max(0.0) + (share * interval_secs).max(1.0)
        } else {
            available + self.may_owe(share, interval_secs)
        };
        room.max(0.0).floor() as u64
    }

    /// Drops the allowance and what it had earned or owed (expired, or out of the config).
    pub(crate) fn forget_allowance(&mut self) {
        self.expires = None;
        self.allowed = None;
        self.budget = Budget::new();
    }
}

/// The control plane's state.
pub(crate) struct Control {
    pub(crate) registry: Registry,
    pub(crate) books: Vec<Book>,
    /// Cell ids of the buckets in the current config.
    pub(crate) active: Vec<u32>,
    pub(crate) version: String,
    /// Until when the last instruction keeps the client out of fail-open.
    pub(crate) valid_until: Option<Instant>,
    pub(crate) seq: u64,
    /// When the last window ended.
    pub(crate) window_at: Option<Instant>,
    /// Windows a bucket's shape keeps (see [`ring_windows`]).
    windows: usize,
    /// Windows in one report interval.
    interval_windows: usize,
    /// Bucket indices on the link (wire version 2).
    pub(crate) indexing: Indexing,
}

/// How many windows a bucket's shape keeps: the rate horizon ([`rate_horizon`]: four
/// intervals, and at least four seconds, so that bursts up to two seconds apart are held
/// whole), capped at 2,000 windows.
///
/// [`rate_horizon`]: grl_core::wire::rate_horizon
pub(crate) fn ring_windows(window: Duration, interval: Duration) -> usize {
    let span = grl_core::wire::rate_horizon(interval);
    let w = window.as_secs_f64().max(1e-3);
    ((span.as_secs_f64() / w).ceil() as usize).clamp(2, 2_000)
}

impl Control {
    /// The state of a client with `window` and `interval`, before any config.
    pub(crate) fn new(window: Duration, interval: Duration) -> Self {
        let windows = ring_windows(window, interval);
        let interval_windows =
            ((interval.as_secs_f64() / window.as_secs_f64().max(1e-3)).round() as usize).max(1);
        Self {
            interval_windows,
            registry: Registry::new(),
            books: vec![Book::new(windows, interval_windows)],
            active: Vec::new(),
            version: String::new(),
            valid_until: None,
            seq: 0,
            window_at: None,
            windows,
            indexing: Indexing::default(),
        }
    }

    /// The resolver of an empty config.
    pub(crate) fn empty_resolver(&self) -> Resolver {
        Resolver::empty(self.registry.cells.clone())
    }

    /// The cell id of bucket `name`, with a book for it.
    pub(crate) fn id(&mut self, name: &str) -> u32 {
        let id = self.registry.id(name);
        if self.books.len() <= id as usize {
            self.books.resize(
                id as usize + 1,
                Book::new(self.windows, self.interval_windows),
            );
        }
        id
    }
}

impl Inner {
    /// Copies every cell's threshold and mode into the pairs that belong to it.
    pub(crate) fn sync_pairs(&self, registry: &Registry) {
        for e in self.pairs() {
            sync_pair(e, &registry.cells);
        }
    }

    /// Every pair entry: the table's, then those of the buckets that apply in addition.
    pub(crate) fn pairs(&self) -> impl Iterator<Item = &PairEntry> {
        self.table
            .iter()
            .chain(self.also.get().into_iter().flat_map(PairTable::iter))
    }

    /// How far back recorded batches are summed: two intervals, and at least two seconds
    /// (Envoy's quota filter reports once a second by default).
    pub(crate) fn recorded_horizon(&self) -> Duration {
        (self.cfg.interval * 2).max(Duration::from_secs(2))
    }

    /// The length of a window in seconds.
    pub(crate) fn window_secs(&self) -> f64 {
        crate::control::stream::window_of(&self.cfg).as_secs_f64()
    }

    /// The number of windows in one interval (at least one).
    pub(crate) fn interval_windows(&self) -> usize {
        let w = self.window_secs();
        ((self.cfg.interval.as_secs_f64() / w).round() as usize).max(1)
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Control> {
        // A panic while holding the lock leaves consistent-enough counters: keep going.
        self.control
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Zeroes the ratios that expired by `now`; fails open when the last instruction did.
    pub(crate) fn expire(&self, now: Instant) {
        let mut c = self.lock();
        let mut changed = false;
        if c.valid_until.is_some_and(|t| t <= now) {
            c.valid_until = None;
            if !self.fail_open.swap(true, Ordering::Relaxed) {
                warn!(service = %self.cfg.service, "instructions expired, failing open");
            }
            for b in &mut c.books {
                b.expires = Some(now);
            }
        }
        let Control {
            books, registry, ..
        } = &mut *c;
        for (b, cell) in books.iter_mut().zip(&registry.cells) {
            if b.expires.is_some_and(|t| t <= now) {
                b.forget_allowance();
                cell.threshold.store(0, Ordering::Relaxed);
                cell.room.set(None);
                changed = true;
            }
        }
        if changed {
            self.sync_pairs(&c.registry);
        }
    }

    /// Whether a batch of `n` requests in cell `id` at drop ratio `ratio` is refused at
    /// `now`. With an allowance the batch is decided on the bucket's budget, the same book
    /// its single requests spend: admitted once what the budget holds (with the current
    /// window's refill so far) covers half of it, and then charged whole at once. Without
    /// one (a ratio from tiers that give no allowance) a running credit gains each batch's
    /// admitted part, `n × (1 - ratio)`, and the batch is admitted once the credit covers
    /// half of it. Deterministic either way, so that a few batches a second are admitted
    /// in the share the allowance (or the ratio) says.
    pub(crate) fn batch_refused(&self, id: u32, ratio: f64, n: u64, now: Instant) -> bool {
        let mut c = self.lock();
        let window_at = c.window_at;
        let Some(b) = c.books.get_mut(id as usize) else {
            return false;
        };
        // A batch as large as the largest is seen again now: its age starts over (kept, a
        // steady batch aged out after the shape's windows and the cap fell under it).
        b.largest_batch = match b.largest_batch {
            Some((age, m)) if m > n => Some((age, m)),
            _ => Some((0, n)),
        };
        let held = b.expires.is_some_and(|t| now < t) && !b.unsettled;
        if let (Some(a), true) = (b.allowed, held) {
            let share = b.local_share(a);
            let since = window_at.map_or(0.0, |t| (now - t).as_secs_f64().max(0.0));
            let refused = !b.budget.covers(share, since, n as f64 / 2.0);
            if !refused {
                b.budget.charge(n as f64);
                b.batch_charged += n;
            }
            return refused;
        }
        let n = n as f64;
        let credit = (b.batch_credit + n * (1.0 - ratio.clamp(0.0, 1.0))).min(n);
        if credit >= n / 2.0 {
            b.batch_credit = credit - n;
            false
        } else {
            b.batch_credit = credit;
            true
        }
    }

    /// The next time [`Inner::expire`] has something to do.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let c = self.lock();
        c.books
            .iter()
            .filter_map(|b| b.expires)
            .chain(c.valid_until)
            .min()
    }

    /// Folds every pair's and cell's new counts into the cells' totals.
    pub(crate) fn collect(&self, c: &mut Control) {
        let classes = self.classes_on.load(Ordering::Relaxed);
        let paired: Vec<(usize, [u64; DECISIONS])> = c
            .registry
            .cells
            .iter()
            .filter(|_| classes)
            .map(|cell| {
                let counts = cell.paired();
                (cell.paired_into.load(Ordering::Relaxed) as usize, counts)
            })
            .collect();
        // What the pairs add to each book this round, where classes may take some back.
        let mut added = vec![[0u64; DECISIONS]; if classes { c.books.len() } else { 0 }];
        for e in self.pairs() {
            let now = e.totals();
            let id = e.cell.load(Ordering::Relaxed) as usize;
            for (i, n) in now.iter().enumerate() {
                let before = e.reported[i].swap(*n, Ordering::Relaxed);
                c.books[id].totals[i] += n - before;
                if let Some(a) = added.get_mut(id) {
                    a[i] += n - before;
                }
            }
        }
        let Control {
            books, registry, ..
        } = c;
        for (b, cell) in books.iter_mut().zip(&registry.cells) {
            for i in 0..DECISIONS {
                let n = cell.overflow[i].load(Ordering::Relaxed);
                b.totals[i] += n - b.overflow_seen[i];
                b.overflow_seen[i] = n;
                let n = cell.direct[i].load(Ordering::Relaxed);
                b.totals[i] += n - b.direct_seen[i];
                b.direct_seen[i] = n;
            }
        }
        // A class's decisions that its pair counted too went into the default class's
        // book with the pair's counts: take them back out, never more than the pairs
        // added this round (a book's totals never fall: each window counts their rise),
        // the rest owed to the next rounds.
        for (id, (into, paired)) in paired.into_iter().enumerate() {
            for (i, n) in paired.into_iter().enumerate() {
                let delta = n - books[id].paired_seen[i];
                books[id].paired_seen[i] = n;
                // Counted in a pair instead of in the cell's direct counts: the class's.
                books[id].totals[i] += delta;
                if into != id
                    && let Some(b) = books.get_mut(into)
                {
                    b.owed[i] += delta;
                }
            }
        }
        for (b, added) in books.iter_mut().zip(&added) {
            for ((total, owed), added) in b.totals.iter_mut().zip(&mut b.owed).zip(added) {
                let take = (*owed).min(*added);
                *total -= take;
                *owed -= take;
            }
        }
    }

    /// What a data plane enforcing by itself may admit in bucket `id` (matched, not in
    /// shadow mode, not failing open): the allowance while the bucket's instruction holds.
    pub(crate) fn admission(&self, id: u32, now: Instant) -> crate::Admission {
        let c = self.lock();
        let Some(b) = c.books.get(id as usize) else {
            return crate::Admission::Unlimited;
        };
        if b.expires.is_none_or(|t| now >= t) {
            return crate::Admission::Unlimited;
        }
        match b.allowed {
            Some(a) => crate::Admission::PerSecond(b.recorded.share(a, b.shape.expected())),
            None => match c.registry.cells[id as usize].ratio() {
                r if r > 0.0 => crate::Admission::Ratio(r),
                _ => crate::Admission::Unlimited,
            },
        }
    }

    /// Cumulative totals per bucket (unmatched requests under bucket `""`).
    pub(crate) fn bucket_totals(&self) -> Vec<BucketTotals> {
        let mut c = self.lock();
        self.collect(&mut c);
        let mut out: Vec<BucketTotals> = c
            .books
            .iter()
            .zip(&c.registry.cells)
            .map(|(b, cell)| BucketTotals {
                bucket: cell.name.clone(),
                offered: b.totals.iter().sum(),
                allowed: b.totals[0],
                dropped: b.totals[1],
                shadow_dropped: b.totals[2],
            })
            .collect();
        out.sort_by(|a, b| a.bucket.cmp(&b.bucket));
        out
    }

    /// A snapshot for operators and tests.
    pub(crate) fn status(&self) -> ClientStatus {
        let c = self.lock();
        let ratios: BTreeMap<String, f64> = c
            .active
            .iter()
            .map(|id| {
                let cell = &c.registry.cells[*id as usize];
                (cell.name.clone(), cell.ratio())
            })
            .collect();
        ClientStatus {
            config_version: c.version.clone(),
            fail_open: self.fail_open.load(Ordering::Relaxed),
            connected: self.connected.load(Ordering::Relaxed),
            ratios,
            pairs: self.table.len(),
            overflow: self.overflow.load(Ordering::Relaxed),
            unknown_classes: self.unknown_classes.load(Ordering::Relaxed),
            table_bytes: self.table.allocated_bytes(),
        }
    }
}

/// The drop ratio that admits `allowed` out of `offered_now` requests per second:
/// `max(0, 1 - allowed / offered_now)`, 0 when nothing is offered.
pub(crate) fn local_ratio(allowed: f64, offered_now: f64) -> f64 {
    if offered_now > 0.0 {
        (1.0 - allowed / offered_now).max(0.0)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests;
