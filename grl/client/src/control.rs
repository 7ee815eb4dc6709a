//! The control-plane side of the client: applying instructions, expiring ratios (fail-open),
//! folding counters into per-bucket totals, following the load between instructions
//! (every window: offered rate measured, threshold recomputed from the allowance) and
//! building reports.
//!
//! Everything here runs on the background task (or a test driving it) under one lock that
//! the hot path never takes. The hot path only reads the thresholds written here.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn};

use grl_core::proto;

use super::buckets::{BucketCell, Registry, Resolver, RuleSet, UNMATCHED, threshold};
use super::table::{DECISIONS, PairEntry};
use super::{BucketTotals, ClientStatus, Decision, Inner};

/// Bookkeeping of one cell, by cell id.
#[derive(Default, Clone)]
struct Book {
    /// Cumulative counts folded in so far.
    totals: [u64; DECISIONS],
    /// `totals` at the last report.
    reported: [u64; DECISIONS],
    /// Overflow counts already folded into `totals`.
    overflow_seen: [u64; DECISIONS],
    /// When the current ratio stops being valid.
    expires: Option<Instant>,
    /// The rate this client may admit in this bucket, when the instruction gave one.
    allowed: Option<f64>,
    /// `totals` at the end of the last window.
    window_base: [u64; DECISIONS],
    /// The offered rate now (requests per second), see [`estimate`].
    offered_now: f64,
    /// The offered rate last reported.
    reported_rate: f64,
    /// After an urgent report of a fall: until when, and at least what, the allowance stays
    /// (the tiers re-share from a mix of fresh and interval-old rates meanwhile, which would
    /// make this client's share look too small).
    hold: Option<(Instant, f64)>,
    /// The last window counted nothing (one empty window is taken as a pause of the
    /// caller, not a fall: the estimate stays).
    idle: bool,
    /// The cell's `recorded` count at the end of the last window.
    recorded_base: u64,
    /// The cell's `recorded` count at the last report.
    recorded_reported: u64,
    /// Recorded batches of the last `recorded_horizon`: when each arrived and its size.
    recorded_batches: VecDeque<(Instant, u64)>,
    /// How far back recorded batches are summed: twice the span the last batch covered,
    /// and at least [`Inner::recorded_horizon`].
    recorded_horizon: Duration,
    /// Requests per second recorded over that horizon: usage decided elsewhere arrives in
    /// batches (an Envoy reports once a second), so it is measured as a sliding sum, which
    /// a periodic batch keeps steady.
    recorded_rate: f64,
    /// Consecutive windows whose rate was more than twice, or less than half, the last
    /// reported one: an urgent report goes at the second (a lone burst, e.g. a caller
    /// catching up after a pause, is not news).
    far: u8,
    /// How many requests this client admitted beyond its share so far (negative: fewer),
    /// bounded as [`Book::settle`] says. The next window aims at the share minus this, see
    /// [`Book::target`].
    carry: f64,
    /// The current window began without an allowance (the first instruction, or one after
    /// failing open): what it admitted meanwhile is not held against the share.
    unsettled: bool,
}

impl Book {
    /// Forgets recorded batches older than the horizon and sums the rest.
    fn recorded_since(&mut self, now: Instant, least: Duration) {
        let horizon = self.recorded_horizon.max(least);
        while self
            .recorded_batches
            .front()
            .is_some_and(|(t, _)| now - *t >= horizon)
        {
            self.recorded_batches.pop_front();
        }
        let sum: u64 = self.recorded_batches.iter().map(|(_, n)| n).sum();
        self.recorded_rate = sum as f64 / horizon.as_secs_f64();
    }

    /// The part of allowance `a` for this client's own decisions: all of it, or, when
    /// usage decided elsewhere is recorded in the same bucket, the part in proportion to
    /// the own offered rate (the rest is the recording data plane's: [`Inner::admission`]).
    fn local_share(&self, a: f64) -> f64 {
        if self.recorded_rate > 0.0 {
            a * self.offered_now / (self.offered_now + self.recorded_rate)
        } else {
            a
        }
    }

    /// The rate this client aims to admit in the next `window` out of allowance `a`: its
    /// share, less what it admitted beyond it in the windows before ([`Book::carry`]). A
    /// threshold set from an estimate of the offered rate admits too much on average
    /// (`share / estimate` is convex in the estimate), and a caller's bursts move it
    /// further; paying the excess back next window keeps every second at the share.
    fn target(&self, a: f64, window: Duration) -> f64 {
        (self.local_share(a) - self.carry / window.as_secs_f64()).max(0.0)
    }

    /// Adds a window's admissions to [`Book::carry`]: `admitted` requests over `secs` out
    /// of allowance `a`. While `limiting` (the estimate in force put the client's offered
    /// rate above its share) every request above or below the share counts. Otherwise the
    /// client earns no credit, pays down what it owes by what it left unused, and owes
    /// only what it admitted beyond the share and the window's noise (a burst the estimate
    /// did not see coming; a rate that sits at its share is not cut for its noise). Credit
    /// is bounded by [`CARRY_WINDOWS`] windows' share, debt by one `interval`'s share. A
    /// bucket whose usage is partly decided elsewhere carries nothing.
    fn settle(&mut self, a: f64, admitted: u64, secs: f64, limiting: bool, pace: Pace) {
        if self.recorded_rate > 0.0 {
            self.carry = 0.0;
            return;
        }
        let share = self.local_share(a);
        let due = share * secs;
        let excess = admitted as f64 - due;
        let carry = if limiting {
            self.carry + excess
        } else {
            let noise = 3.0 * due.sqrt() + 2.0;
            let owed = if excess > 0.0 {
                (excess - noise).max(0.0)
            } else {
                excess
            };
            (self.carry.max(0.0) + owed).max(0.0)
        };
        let credit = share * pace.window.as_secs_f64() * CARRY_WINDOWS;
        self.carry = carry.clamp(-credit, share * pace.interval.as_secs_f64());
    }

    /// The part of allowance `a` for usage decided elsewhere: in proportion to the recorded
    /// rate, or all of it while none is measured yet (a data plane that just started).
    fn recorded_share(&self, a: f64) -> f64 {
        if self.recorded_rate > 0.0 {
            a * self.recorded_rate / (self.offered_now + self.recorded_rate)
        } else {
            a
        }
    }

    /// Counts a batch of `n` requests over `span` recorded at `now`: a data plane that
    /// reports every 5 s is summed over 10 s, so that its rate does not fall to 0 between
    /// its reports.
    fn add_recorded(&mut self, n: u64, span: Duration, now: Instant, least: Duration) {
        self.recorded_batches.push_back((now, n));
        self.recorded_horizon = (span * 2).max(least);
        self.recorded_since(now, least);
    }
}

/// How many windows' share a client may carry as credit (see [`Book::settle`]): enough to
/// even out a window's noise, short enough that a caller cannot save up for a burst.
const CARRY_WINDOWS: f64 = 4.0;

/// A client's window and reporting interval, as [`Book::settle`] bounds the carry by them.
#[derive(Debug, Clone, Copy)]
struct Pace {
    window: Duration,
    interval: Duration,
}

/// The control plane's state.
pub(crate) struct Control {
    registry: Registry,
    books: Vec<Book>,
    /// Cell ids of the buckets in the current config.
    active: Vec<u32>,
    version: String,
    /// Until when the last instruction keeps the client out of fail-open.
    valid_until: Option<Instant>,
    seq: u64,
    /// When the last window ended.
    window_at: Option<Instant>,
    /// When the last report was built.
    report_at: Option<Instant>,
}

impl Control {
    pub(crate) fn new() -> Self {
        Self {
            registry: Registry::new(),
            books: vec![Book::default()],
            active: Vec::new(),
            version: String::new(),
            valid_until: None,
            seq: 0,
            window_at: None,
            report_at: None,
        }
    }

    /// The resolver of an empty config.
    pub(crate) fn empty_resolver(&self) -> Resolver {
        Resolver::empty(self.registry.cells.clone())
    }

    fn id(&mut self, name: &str) -> u32 {
        let id = self.registry.id(name);
        if self.books.len() <= id as usize {
            self.books.resize(id as usize + 1, Book::default());
        }
        id
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Control> {
        // A panic while holding the lock leaves consistent-enough counters: keep going.
        self.control
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Applies one instruction received at `now`.
    pub(crate) fn apply_instruction(&self, ins: &proto::Instruction, now: Instant) {
        let mut c = self.lock();
        let default_valid = if ins.valid_for_ms > 0 {
            Duration::from_millis(ins.valid_for_ms.into())
        } else {
            self.cfg.interval * self.cfg.expiry_intervals
        };
        if ins.has_config {
            self.apply_config(&mut c, ins);
        }
        for r in ins.ratios.iter().filter(|r| r.service == self.cfg.service) {
            let Some(id) = c.registry.get(&r.bucket).filter(|id| c.active.contains(id)) else {
                debug!(bucket = %r.bucket, "ratio for a bucket not in the config, ignored");
                continue;
            };
            let valid = if r.valid_for_ms > 0 {
                Duration::from_millis(r.valid_for_ms.into())
            } else {
                default_valid
            };
            let book = &mut c.books[id as usize];
            book.expires = Some(now + valid);
            let had = book.allowed.is_some();
            book.allowed = r.allowed.filter(|a| a.is_finite() && *a >= 0.0);
            if !had && book.allowed.is_some() {
                book.carry = 0.0;
                book.unsettled = true;
            }
            if let (Some(a), Some((until, held))) = (book.allowed, book.hold) {
                if now < until {
                    book.allowed = Some(a.max(held));
                } else {
                    book.hold = None;
                }
            }
            let ratio = match book.allowed {
                Some(a) => local_ratio(book.target(a, self.cfg.window), book.offered_now),
                None => r.ratio,
            };
            c.registry.cells[id as usize]
                .threshold
                .store(threshold(ratio), Ordering::Relaxed);
        }
        c.valid_until = Some(now + default_valid);
        self.fail_open.store(false, Ordering::Relaxed);
        self.sync_pairs(&c.registry);
    }

    fn apply_config(&self, c: &mut Control, ins: &proto::Instruction) {
        let rules = match RuleSet::from_wire(&ins.config, &self.cfg.service) {
            Ok(rules) => rules,
            Err(e) => {
                warn!(version = %ins.config_version, error = %e, "config refused, keeping the last one");
                return;
            }
        };
        // Fold counts under the old bucket mapping before pairs move.
        self.collect(c);
        let ids: Vec<u32> = rules.names.iter().map(|n| c.id(n)).collect();
        for &old in &c.active {
            if !ids.contains(&old) {
                c.registry.cells[old as usize]
                    .threshold
                    .store(0, Ordering::Relaxed);
                c.books[old as usize].expires = None;
                c.books[old as usize].allowed = None;
            }
        }
        for (id, mode) in ids.iter().zip(&rules.modes) {
            let shadow = *mode == grl_core::config::Mode::Shadow;
            c.registry.cells[*id as usize]
                .shadow
                .store(shadow, Ordering::Relaxed);
        }
        let resolver = rules.resolver(ids.clone(), c.registry.cells.clone());
        c.active = ids;
        c.version = ins.config_version.clone();
        for e in self.table.iter() {
            e.cell.store(
                resolver.resolve(e.caller(), e.procedure()),
                Ordering::Relaxed,
            );
        }
        self.resolver.store(Arc::new(resolver));
        debug!(version = %c.version, buckets = c.active.len(), "config applied");
    }

    /// Copies every cell's threshold and mode into the pairs that belong to it.
    fn sync_pairs(&self, registry: &Registry) {
        for e in self.table.iter() {
            sync_pair(e, &registry.cells);
        }
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
                b.expires = None;
                b.allowed = None;
                cell.threshold.store(0, Ordering::Relaxed);
                changed = true;
            }
        }
        if changed {
            self.sync_pairs(&c.registry);
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
    fn collect(&self, c: &mut Control) {
        for e in self.table.iter() {
            let now = e.totals();
            let id = e.cell.load(Ordering::Relaxed) as usize;
            for (i, n) in now.iter().enumerate() {
                let before = e.reported[i].swap(*n, Ordering::Relaxed);
                c.books[id].totals[i] += n - before;
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
            }
        }
    }

    /// The report of the interval that ends now.
    pub(crate) fn report(&self) -> proto::Report {
        let mut c = self.lock();
        self.collect(&mut c);
        // Also bounds how long a pair created during a ratio change can hold a stale one.
        self.sync_pairs(&c.registry);
        c.seq += 1;
        let now = Instant::now();
        let secs = c
            .report_at
            .map(|t| (now - t).as_secs_f64())
            .filter(|s| *s > 0.0)
            .unwrap_or(self.cfg.interval.as_secs_f64());
        c.report_at = Some(now);
        let mut rates = Vec::new();
        let Control {
            books,
            registry,
            active,
            ..
        } = &mut *c;
        for (id, b) in books.iter_mut().enumerate() {
            let delta: [u64; DECISIONS] = std::array::from_fn(|i| b.totals[i] - b.reported[i]);
            b.reported = b.totals;
            let recorded = registry.cells[id].recorded.load(Ordering::Relaxed);
            let batch = recorded - b.recorded_reported;
            b.recorded_reported = recorded;
            let is_active = active.contains(&(id as u32));
            if id as u32 == UNMATCHED || (!is_active && delta.iter().all(|d| *d == 0)) {
                continue;
            }
            let row = self.bucket_rate(&registry.cells[id].name, &delta, batch, b, secs);
            b.reported_rate = row.offered;
            rates.push(row);
        }
        self.report_with(&c, rates)
    }

    /// One bucket's row of a report: the decisions `delta` counted over `secs`, of which
    /// `batch` were recorded; recorded usage enters as the book's recorded rate rather than
    /// as the batches that happened to arrive in `secs`. Drops are scaled likewise. The row
    /// also carries the book's cumulative totals, exact whatever `secs` was.
    fn bucket_rate(
        &self,
        bucket: &str,
        delta: &[u64; DECISIONS],
        batch: u64,
        book: &Book,
        secs: f64,
    ) -> proto::BucketRate {
        let counted = delta.iter().sum::<u64>();
        let offered = counted.saturating_sub(batch) as f64 / secs + book.recorded_rate;
        let scale = if counted > 0 {
            offered / counted as f64
        } else {
            0.0
        };
        proto::BucketRate {
            service: self.cfg.service.clone(),
            bucket: bucket.to_string(),
            zone: self.cfg.zone.clone(),
            region: self.cfg.region.clone(),
            offered,
            dropped: delta[1] as f64 * scale,
            shadow_dropped: delta[2] as f64 * scale,
            clients: 1,
            offered_total: book.totals.iter().sum(),
            dropped_total: book.totals[Decision::Drop as usize],
            shadow_dropped_total: book.totals[Decision::ShadowDrop as usize],
        }
    }

    /// How far back recorded batches are summed: two intervals, and at least two seconds
    /// (Envoy's quota filter reports once a second by default).
    fn recorded_horizon(&self) -> Duration {
        (self.cfg.interval * 2).max(Duration::from_secs(2))
    }

    /// A report carrying `rates` (empty for the hello sent on connect).
    pub(crate) fn report_with(&self, c: &Control, rates: Vec<proto::BucketRate>) -> proto::Report {
        proto::Report {
            reporter_id: self.cfg.id.clone(),
            level: proto::Level::Client as i32,
            zone: self.cfg.zone.clone(),
            region: self.cfg.region.clone(),
            services: vec![self.cfg.service.clone()],
            config_version: c.version.clone(),
            interval_ms: self.cfg.interval.as_millis() as u32,
            rates,
            seq: c.seq,
            urgent: false,
        }
    }

    /// Ends a window at `now`: measures each active bucket's offered rate since the last
    /// window, recomputes the threshold of every bucket that has an allowance, and returns
    /// an urgent report (the window's rates) when a bucket's rate jumped to more than twice,
    /// or less than half, of what was last reported, and stayed there a second window, or
    /// fell to under a quarter of it in one window that counted something.
    pub(crate) fn window(&self, now: Instant) -> Option<proto::Report> {
        let mut c = self.lock();
        self.collect(&mut c);
        let secs = c.window_at.map_or(0.0, |t| (now - t).as_secs_f64());
        c.window_at = Some(now);
        let mut urgent = false;
        let mut changed = false;
        let mut rates = Vec::new();
        let horizon = self.recorded_horizon();
        let pace = Pace {
            window: self.cfg.window,
            interval: self.cfg.interval,
        };
        let Control {
            books,
            registry,
            active,
            ..
        } = &mut *c;
        for &id in active.iter() {
            let b = &mut books[id as usize];
            let delta: [u64; DECISIONS] = std::array::from_fn(|i| b.totals[i] - b.window_base[i]);
            b.window_base = b.totals;
            if secs <= 0.0 {
                continue;
            }
            let recorded = registry.cells[id as usize].recorded.load(Ordering::Relaxed);
            let batch = recorded - b.recorded_base;
            b.recorded_base = recorded;
            b.recorded_since(now, horizon);
            let count: u64 = delta.iter().sum::<u64>().saturating_sub(batch);
            let pause = count == 0 && !b.idle;
            b.idle = count == 0;
            let (now_rate, jumped) = if pause {
                (b.offered_now, false)
            } else {
                estimate(b.offered_now, count, secs)
            };
            let offered_before = b.offered_now;
            b.offered_now = now_rate;
            // Compared with what was reported, which includes the recorded rate.
            let now_rate = now_rate + b.recorded_rate;
            let fell = now_rate < 0.5 * b.reported_rate;
            let far = fell || now_rate > 2.0 * b.reported_rate;
            b.far = if far && (jumped || b.far > 0) {
                b.far.saturating_add(1)
            } else {
                0
            };
            // A fall to under a quarter, in a window that counted something, is news at once:
            // the other instances of the bucket are cut for this one's share until the tiers
            // hear of it. A stall that looks like one costs at most this instance's share for
            // the few windows until its rise is reported.
            let sharp_fall = jumped && count > 0 && now_rate < SHARP_FALL * b.reported_rate;
            if b.far == 2 || (b.far == 1 && sharp_fall) {
                urgent = true;
                if fell && let Some(a) = b.allowed {
                    b.hold = Some((now + self.cfg.interval, a));
                }
            }
            rates.push(self.bucket_rate(&registry.cells[id as usize].name, &delta, batch, b, secs));
            if let (Some(a), Some(_)) = (b.allowed, b.expires) {
                let cell = &registry.cells[id as usize];
                if !std::mem::take(&mut b.unsettled) {
                    let limiting = b.local_share(a) < offered_before;
                    let admitted = delta[Decision::Allow as usize].saturating_sub(batch);
                    b.settle(a, admitted, secs, limiting, pace);
                }
                let t = threshold(local_ratio(b.target(a, self.cfg.window), b.offered_now));
                changed |= cell.threshold.swap(t, Ordering::Relaxed) != t;
            }
        }
        if changed {
            self.sync_pairs(&c.registry);
        }
        if !urgent {
            return None;
        }
        for &id in &c.active.clone() {
            let recorded = c.registry.cells[id as usize]
                .recorded
                .load(Ordering::Relaxed);
            let b = &mut c.books[id as usize];
            b.reported = b.totals;
            b.recorded_reported = recorded;
            b.reported_rate = b.offered_now + b.recorded_rate;
            b.far = 0;
        }
        c.seq += 1;
        c.report_at = Some(now);
        let mut report = self.report_with(&c, rates);
        report.urgent = true;
        Some(report)
    }

    /// Adds `n` recorded requests over `span` to cell `id`'s bookkeeping and has `count` add
    /// them to a pair or the overflow, under the control lock, so that a window sees both or
    /// neither. `count` gets the cell and, in a shadow bucket, the share its allowance would
    /// have refused of the data plane's bucket-wide recorded rate.
    pub(crate) fn record_counts(
        &self,
        id: u32,
        n: u64,
        span: Duration,
        now: Instant,
        count: impl FnOnce(&BucketCell, Option<f64>),
    ) {
        let least = self.recorded_horizon();
        let mut c = self.lock();
        let Control {
            books, registry, ..
        } = &mut *c;
        let Some(cell) = registry.cells.get(id as usize) else {
            return;
        };
        let Some(b) = books.get_mut(id as usize) else {
            return;
        };
        b.add_recorded(n, span, now, least);
        let shadow = cell
            .shadow
            .load(Ordering::Relaxed)
            .then(|| match (b.allowed, b.expires) {
                (Some(a), Some(t)) if now < t => local_ratio(b.recorded_share(a), b.recorded_rate),
                _ => cell.ratio(),
            });
        count(cell, shadow);
        cell.recorded.fetch_add(n, Ordering::Relaxed);
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
            Some(a) => crate::Admission::PerSecond(b.recorded_share(a)),
            None => match c.registry.cells[id as usize].ratio() {
                r if r > 0.0 => crate::Admission::Ratio(r),
                _ => crate::Admission::Unlimited,
            },
        }
    }

    /// The hello report sent when a stream opens.
    pub(crate) fn hello(&self) -> proto::Report {
        let c = self.lock();
        self.report_with(&c, Vec::new())
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
            table_bytes: self.table.allocated_bytes(),
        }
    }
}

/// A window whose rate fell under this fraction of the reported one is reported at once
/// (other jumps must hold a second window).
const SHARP_FALL: f64 = 0.25;

/// The offered-rate estimate after a window of `count` requests over `secs`, from the
/// previous estimate `prev`; also says whether the window replaced the estimate. A count
/// too far from the expected one to be counting noise (more than 3 Poisson standard
/// deviations + 2) replaces it at once, so a step is followed within one window; otherwise
/// the window is blended in, which smooths the noise of small counts.
pub(crate) fn estimate(prev: f64, count: u64, secs: f64) -> (f64, bool) {
    let rate = count as f64 / secs;
    let expected = prev * secs;
    if (count as f64 - expected).abs() > 3.0 * expected.sqrt() + 2.0 {
        (rate, true)
    } else {
        (0.7 * prev + 0.3 * rate, false)
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

/// Copies a pair's cell threshold and mode into the pair.
pub(crate) fn sync_pair(e: &PairEntry, cells: &[Arc<super::buckets::BucketCell>]) {
    let cell = &cells[e.cell.load(Ordering::Relaxed) as usize];
    e.threshold
        .store(cell.threshold.load(Ordering::Relaxed), Ordering::Relaxed);
    e.shadow
        .store(cell.shadow.load(Ordering::Relaxed), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_replaces_the_estimate_and_noise_is_blended() {
        let (r, jumped) = estimate(100.0, 75, 0.05);
        assert!(jumped);
        assert_eq!(r, 1500.0);
        let (r, jumped) = estimate(1500.0, 5, 0.05);
        assert!(jumped);
        assert_eq!(r, 100.0);
        let (r, jumped) = estimate(100.0, 6, 0.05);
        assert!(!jumped);
        assert!((r - 106.0).abs() < 1e-9, "{r}");
        assert_eq!(estimate(0.0, 0, 0.05), (0.0, false));
    }

    /// A client with bucket `b` (caller `gateway`) allowed `allowed` rps, and a function
    /// that offers `n` requests and ends the window 50 ms after the last one.
    fn following_client(allowed: f64) -> (crate::Client, impl FnMut(u64) -> bool) {
        let client = crate::Client::new(crate::ClientConfig::new("payments", "http://x:1"));
        let rule = proto::BucketRule {
            name: "b".into(),
            caller: "gateway".into(),
            scope: proto::Scope::Global as i32,
            mode: proto::Mode::Deny as i32,
            limit_rps: Some(allowed),
            ..Default::default()
        };
        client.apply_instruction(&proto::Instruction {
            has_config: true,
            config: vec![proto::ServiceRules {
                service: "payments".into(),
                buckets: vec![rule],
            }],
            ratios: vec![proto::DropRatio {
                service: "payments".into(),
                bucket: "b".into(),
                allowed: Some(allowed),
                ..Default::default()
            }],
            ..Default::default()
        });
        let c = client.clone();
        let mut now = Instant::now();
        let window = move |n: u64| {
            for _ in 0..n {
                c.decide("gateway", "pay.Pay/Card");
            }
            now += Duration::from_millis(50);
            c.inner.window(now).is_some()
        };
        (client, window)
    }

    #[test]
    fn a_fall_under_a_quarter_is_reported_at_once_other_jumps_after_two_windows() {
        let (client, mut window) = following_client(1000.0);
        window(0);
        // 2,000 rps settles and is reported (a rise from nothing, held two windows).
        assert!(!window(100));
        assert!(window(100), "a rise held two windows is reported");
        for _ in 0..5 {
            assert!(!window(100), "a steady rate is not news");
        }
        // A fall to 40 % is far (under half) but not sharp: reported at the second window.
        assert!(!window(40));
        assert!(window(40), "a fall to 40 % held two windows is reported");
        for _ in 0..5 {
            assert!(!window(40));
        }
        // A fall to 10 % of the reported rate is reported from its first window.
        assert!(window(4), "a fall under a quarter is reported at once");
        // An empty window is a pause, not a fall.
        for _ in 0..5 {
            window(40);
        }
        assert!(!window(0), "one empty window is a pause");
        drop(client);
    }

    #[test]
    fn every_report_carries_the_counts_so_far_urgent_ones_included() {
        let (client, _) = following_client(1000.0);
        let offer = |n: u64| {
            for _ in 0..n {
                client.decide("gateway", "pay.Pay/Card");
            }
        };
        let row = |r: &proto::Report| r.rates.iter().find(|r| r.bucket == "b").cloned().unwrap();
        let totals = || {
            let t = client.bucket_totals();
            let b = t.iter().find(|t| t.bucket == "b").unwrap();
            (b.offered, b.dropped, b.shadow_dropped)
        };
        let mut now = Instant::now();
        assert!(client.inner.window(now).is_none());
        client.inner.report();
        // A rise to 2,000 rps, held two windows: the urgent report's rate is the second
        // window's, its totals count both windows.
        offer(100);
        now += Duration::from_millis(50);
        assert!(client.inner.window(now).is_none());
        offer(100);
        now += Duration::from_millis(50);
        let urgent = client.inner.window(now).expect("an urgent report");
        let b = row(&urgent);
        assert!((b.offered - 2_000.0).abs() < 1e-6, "{b:?}");
        assert_eq!(b.offered_total, 200, "{b:?}");
        assert_eq!(
            (b.offered_total, b.dropped_total, b.shadow_dropped_total),
            totals()
        );
        // The next regular report goes on from there.
        offer(50);
        let b = row(&client.inner.report());
        assert_eq!(b.offered_total, 250, "{b:?}");
        assert_eq!(
            (b.offered_total, b.dropped_total, b.shadow_dropped_total),
            totals()
        );
    }

    #[test]
    fn recorded_batches_count_toward_the_tiers_but_not_the_window_estimate() {
        let (client, mut window) = following_client(1000.0);
        window(0);
        assert!(!window(100));
        assert!(window(100));
        for _ in 0..4 {
            // An Envoy's usage report: 5,000 requests at once, every window.
            client.record(
                "gateway",
                "pay.Pay/Card",
                4000,
                1000,
                Duration::from_secs(1),
            );
            assert!(
                !window(100),
                "a recorded batch is not a jump of this client's rate"
            );
        }
        let b = client.bucket_totals();
        let b = b.iter().find(|b| b.bucket == "b").unwrap();
        assert_eq!(b.offered, 6 * 100 + 4 * 5000);
        // The local decisions split by the threshold; the recorded ones as reported.
        assert!(b.allowed >= 4 * 4000 && b.dropped >= 4 * 1000, "{b:?}");
    }

    #[test]
    fn admissions_beyond_the_share_are_paid_back_and_bounded() {
        let pace = Pace {
            window: Duration::from_millis(25),
            interval: Duration::from_secs(1),
        };
        let w = pace.window;
        let mut b = Book::default();
        // A share of 1,000 rps is 25 requests a window.
        b.settle(1000.0, 40, 0.025, true, pace);
        assert_eq!(b.carry, 15.0);
        assert!(
            (b.target(1000.0, w) - 400.0).abs() < 1e-9,
            "15 fewer next window"
        );
        b.settle(1000.0, 10, 0.025, true, pace);
        assert_eq!(b.carry, 0.0, "paid back");
        b.settle(1000.0, 0, 0.025, true, pace);
        b.settle(1000.0, 0, 0.025, true, pace);
        assert_eq!(b.carry, -50.0, "credit while limited");
        assert!((b.target(1000.0, w) - 3000.0).abs() < 1e-9);
        for _ in 0..10 {
            b.settle(1000.0, 0, 0.025, true, pace);
        }
        assert_eq!(b.carry, -100.0, "at most four windows' credit");
        b.settle(1000.0, 20, 0.025, false, pace);
        assert_eq!(b.carry, 0.0, "no credit under the share");
        b.settle(1000.0, 40, 0.025, false, pace);
        assert_eq!(b.carry, 0.0, "noise above the share is not owed");
        b.settle(1000.0, 100, 0.025, false, pace);
        assert_eq!(
            b.carry,
            75.0 - (3.0 * 5.0 + 2.0),
            "a burst beyond the noise is"
        );
        b.settle(1000.0, 15, 0.025, false, pace);
        assert_eq!(b.carry, 48.0, "paid down by the unused share");
        b.settle(1000.0, 10_000, 0.025, true, pace);
        assert_eq!(b.carry, 1000.0, "at most an interval's share owed");
        assert_eq!(b.target(1000.0, w), 0.0);
    }

    #[test]
    fn a_bursty_caller_is_held_to_its_allowance_over_the_windows() {
        // 1,000 rps allowed; the caller alternates 2,000 and 6,000 rps every 50 ms window.
        // Each window's threshold comes from the window before (a jump replaces the
        // estimate), so without paying back it would admit about 1,670 rps.
        let (client, mut window) = following_client(1000.0);
        window(0);
        for i in 0..100 {
            window(if i % 2 == 0 { 100 } else { 300 });
        }
        let b = client.bucket_totals();
        let b = b.iter().find(|b| b.bucket == "b").unwrap();
        assert_eq!(b.offered, 50 * 100 + 50 * 300);
        // 100 windows of 50 ms: 5,000 allowed (a burst's debt may be outstanding at the end).
        assert!(
            (4600..=5400).contains(&b.allowed),
            "admitted {} of an allowance of 5,000",
            b.allowed
        );
    }

    #[test]
    fn what_was_admitted_while_failing_open_is_not_paid_back() {
        let (client, mut window) = following_client(1000.0);
        let allowed = |c: &crate::Client| {
            let t = c.bucket_totals();
            t.iter().find(|b| b.bucket == "b").unwrap().allowed
        };
        window(0);
        for _ in 0..6 {
            window(200); // 4,000 rps against 1,000: a quarter admitted
        }
        client
            .inner
            .expire(Instant::now() + Duration::from_secs(3600));
        assert!(client.status().fail_open);
        for _ in 0..200 {
            assert_eq!(
                client.decide("gateway", "pay.Pay/Card"),
                crate::Decision::Allow
            );
        }
        // The allowance is back in the middle of the window that failed open.
        client.apply_instruction(&proto::Instruction {
            ratios: vec![proto::DropRatio {
                service: "payments".into(),
                bucket: "b".into(),
                allowed: Some(1000.0),
                ..Default::default()
            }],
            ..Default::default()
        });
        window(0);
        let before = allowed(&client);
        window(200);
        let admitted = allowed(&client) - before;
        assert!(
            (25..=80).contains(&admitted),
            "admitted {admitted} of 200 where about 50 were due"
        );
    }

    #[test]
    fn local_ratio_admits_the_allowance() {
        assert_eq!(local_ratio(100.0, 0.0), 0.0);
        assert_eq!(local_ratio(100.0, 50.0), 0.0);
        assert!((local_ratio(100.0, 1500.0) - 14.0 / 15.0).abs() < 1e-12);
        assert_eq!(local_ratio(0.0, 10.0), 1.0);
    }
}
