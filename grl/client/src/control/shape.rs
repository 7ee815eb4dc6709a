//! The shape of one bucket's traffic at one client: the counts of the last windows, what
//! its offered rate is over the time the tiers use a report for, and when it changed for
//! real (a step up or down) rather than by the gaps of bursty or sparse traffic.
//!
//! Pure bookkeeping, fed one window at a time by the control task ([`Shape::push`]).
//!
//! # The rate a report carries ([`Shape::report_rates`])
//!
//! One estimator, a count over a horizon: `N / T`, where `T` is chosen without looking at
//! where the arrivals fall. Assumption: between two changes the arrivals are stationary
//! (Poisson, or any process whose counts over `T` have a finite variance). Then `N / T` is
//! unbiased and, for Poisson arrivals at rate `λ`, its standard deviation is `sqrt(λ / T)`:
//! a client at 0.6 requests a second over a 4 s horizon reports 0.6 ± 0.39, and a hundred
//! such clients sum to 60 ± 3.9 (6.5 %). The horizon is:
//!
//! - dense traffic (no gap longer than a quarter of an interval): the last interval;
//! - anything else: every window since the last change, at most the ring (four intervals and
//!   at least four seconds), so sparse callers are measured over as many requests as the
//!   ring holds.
//!
//! One exception keeps periodic bursts exact: when the traffic comes in runs of three or
//! more requests at once (a timer's or a batch's burst, not a random arrival) and its
//! window counts are more dispersed than Poisson counts can be by chance (three standard
//! deviations of the dispersion over the segment's windows: random arrivals that fill
//! most windows come in long runs too), the horizon
//! is the segment's whole cycles, from the start of its first burst to the start of its
//! last. A horizon that begins and ends at arrivals is biased upward for random arrivals
//! (the rate from the first to the last of `n` Poisson arrivals over-states `λ` by
//! `n / (n - 2)`: 2x for four arrivals, the bias this module once had for sparse callers),
//! but exact for a schedule, whose bursts are not random in time.
//!
//! A report at a change counts only the windows since it (two at a fast rise: 50 ± 14 for a
//! caller at 50 requests a second in 50 ms windows, and once in a while twice the rate),
//! and the next interval's report may be nearly an interval away. So the rate told at a
//! rise or fall is checked each time the segment has doubled, up to an interval, and told
//! again ([`Change::Refined`]) when the longer count differs from it by more than one of
//! its deviations ([`REFINE_DEVIATIONS`]). Measured on simulated steps (300 seeds each,
//! the test below): the mean error of the rate the tiers hold over the interval after a
//! change falls by 5-38 % (0.26 to 0.16 of the rate for a step from idle to 100 requests a
//! second), for about one extra report a change.
//!
//! # Changes ([`Change`])
//!
//! - **A rise** is found by a one-sided CUSUM on the counts of the windows (quasi-Poisson).
//!   The reference `μ0` is the segment's count per window at its upper bound (the count
//!   plus two Poisson deviations and one request, so that the reference's own noise is not
//!   taken for a rise), taken when the statistic leaves zero, with the segment's dispersion
//!   `φ` (variance over mean, at least 1: bursts have a large one, so a burst on its usual
//!   schedule is no rise). With `μ1 = 2 μ0 + 1 / interval_windows` (double, and at least one
//!   more request an interval) each window adds `(n ln(μ1/μ0) - (μ1 - μ0)) / φ` to a
//!   statistic floored at zero, and a rise is said when it passes [`CUSUM_H`] on a window
//!   above the reference, the second of its run. Measured on simulated Poisson arrivals
//!   (the tests below, 100 seeds each): at most about one false rise in 10^4 windows at
//!   0.2 to 2,000 requests a second; a step to ten times the rate found after a median of
//!   11 requests from 2 requests a second, within 3 windows from 10 a second and more, a
//!   fivefold step of a 20 requests a second caller within 4 windows (6 at the 95th
//!   percentile). Below about one request a second the ring holds too few requests to
//!   tell a rise from noise before several requests arrived: there the tiers' noise
//!   margin and the client's budget carry the step. A silence of any length is a
//!   reference (its bound, one request over its windows, allows for its shortness): a
//!   step from idle to 60 requests a second or more is found within 3 windows (median; 5
//!   at the 95th percentile) even by a client that has held the config for only 4 windows
//!   (measured below). The new segment starts where the
//!   statistic last left zero, the start of the rise. Two windows far above anything
//!   recent are also a rise at once.
//! - **A start** is a window of two requests or more after a ring without any (or, for a
//!   client that has held the config for less than the ring, since it had it). It is
//!   reported at once, as a change is, but changes no horizon: counted over the silence
//!   and this window, and a step from idle is then found as a rise. The tiers hear that a
//!   bucket's traffic began within a window instead of at the next interval. One request
//!   after a silence is what a sparse caller sends anyway: reporting at it would end the
//!   report's horizon at an arrival, over-stating the rate by a request over the horizon
//!   (the bias the estimator avoids); two in one window come from a sparse caller about
//!   once in `2 / (rate × window)` of its returns (1 in 80 at 0.5 requests a second).
//! - **A fall** of dense traffic (no gap over a quarter of an interval in the ring, at least
//!   a request a window) is found by the mirror CUSUM: the reference `μ0` is the segment's
//!   count per window at its lower bound (two deviations and a request under it), taken
//!   over half an interval or more, and `μ1 = μ0 / 2`. Measured on simulated arrivals
//!   (tests below, 20 to 100 seeds): about one false fall in 10^4 windows at 2 to 2,000
//!   requests a second; a fall from 60 to 10 requests a second found within 7 windows
//!   (median; 10 at the 95th percentile), a halving of 200 within 6 (12). Any traffic's
//!   fall is also a run of low windows that nothing in the ring explains (longer than
//!   any recent gap, so a bursty caller's silence between bursts is no fall) and that
//!   counting noise cannot explain either (beyond 3 Poisson deviations and 2 requests):
//!   the test for sparse and bursty callers, and for a stop.
//!
//! # The rate the next window expects ([`Shape::expected`])
//!
//! The short-term estimate ([`estimate`]), which follows a step within a window; the budget
//! pays back its errors.

use std::collections::VecDeque;

/// One window: requests offered (decided here, not recorded) and admitted, and its length.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    offered: u32,
    admitted: u32,
    secs: f64,
}

/// A change of a bucket's offered rate that the tiers should hear about at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Nothing the recent history does not explain.
    None,
    /// The CUSUM on the window counts passed its threshold, or two windows stood far
    /// above anything recent.
    Rise,
    /// A run of low windows longer than any recent gap, beyond counting noise.
    Fall,
    /// The first requests after a silence as long as the ring (or, for a client that has
    /// held the config for less than that, since it had it): the tiers should hear that
    /// traffic began at once, though the rate, counted over the silence and this window,
    /// is no change yet (a sparse caller's next request after a quiet spell is the same
    /// rate; a step from idle is found as a rise in the next windows).
    Start,
    /// The rate did not change, but how often the caller's bursts on a schedule come
    /// became known (the second burst since the last change): the rate reported from now
    /// on is the cycles' average, no longer a guess from one burst. Never for random
    /// arrivals, whose reports do not count over cycles.
    Learned,
    /// The rate since the last rise or fall, counted over at least twice the windows it was
    /// told over, lies more than [`REFINE_DEVIATIONS`] of its deviations from what was told:
    /// the tiers should hear the better count at once rather than at the next interval.
    Refined,
}

impl Change {
    /// Every change that sends an urgent report, in the order of [`Change::index`].
    pub(crate) const TOLD: [Change; 5] = [
        Change::Rise,
        Change::Fall,
        Change::Start,
        Change::Learned,
        Change::Refined,
    ];

    /// Its position in [`Change::TOLD`]; `None` for [`Change::None`].
    pub(crate) fn index(self) -> Option<usize> {
        Self::TOLD.iter().position(|c| *c == self)
    }

    /// Its `change` label in `grl_client_rate_changes_total`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Change::None => "none",
            Change::Rise => "rise",
            Change::Fall => "fall",
            Change::Start => "start",
            Change::Learned => "learned",
            Change::Refined => "refined",
        }
    }
}

/// The rate told at a rise or fall, and over how many windows it was counted
/// ([`Shape::refined`]).
#[derive(Debug, Clone, Copy)]
struct Told {
    rate: f64,
    windows: usize,
}

/// How many standard deviations of the longer count the rate told at a change may be off
/// before it is told again ([`Change::Refined`]).
const REFINE_DEVIATIONS: f64 = 1.0;

/// The recent traffic of one bucket at one client.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    ring: VecDeque<Slot>,
    /// Requests offered over the ring (kept as windows come and go).
    ring_offered: u64,
    cap: usize,
    /// Windows since the last change (at most the ring's length).
    segment: usize,
    /// The short-term estimate of the offered rate, requests per second.
    estimate: f64,
    /// The last window counted nothing (one empty window is a pause, not a fall).
    idle: bool,
    /// The segment's cycles have been known (and said, by [`Change::Learned`]).
    cycles_told: bool,
    /// Runs of traffic shorter than this many windows are bursts: while the caller's cycle
    /// is not known, the silence after one is not a fall (a quarter of an interval, as for
    /// [`Shape::dense`]).
    short_run: usize,
    /// Windows in one report interval.
    interval_windows: usize,
    /// The CUSUM that finds rises.
    rise: Cusum,
    /// The CUSUM that finds falls.
    fall: Cusum,
    /// The offered rate averaged over about [`LONG_SECS`] (exponentially weighted).
    long_rate: f64,
    /// Seconds counted into `long_rate` (up to [`LONG_SECS`]): until then it is the plain
    /// mean since the first window.
    long_secs: f64,
    /// The rate told at the last rise or fall, while its segment is shorter than an
    /// interval ([`Shape::refined`]).
    told: Option<Told>,
}

/// A one-sided CUSUM on the counts of windows (quasi-Poisson), against a reference taken
/// when its statistic left zero: each window adds `(n ln(μ1/μ0) - (μ1 - μ0)) / φ`, and a
/// change is said when the statistic passes [`CUSUM_H`] on a window that argues for it,
/// the second of its run (a change is a rate, not one window).
#[derive(Debug, Clone, Copy, Default)]
struct Cusum {
    /// The statistic (log-likelihood ratio, floored at 0).
    stat: f64,
    /// Windows since the statistic last left zero: where a change it finds began.
    run: usize,
    /// Windows of that run that argued for the change.
    hits: usize,
    /// The reference count per window `μ0` (0: no test), the changed one `μ1`, and the
    /// dispersion `φ` (variance over mean, at least 1).
    mu0: f64,
    mu1: f64,
    dispersion: f64,
}

impl Cusum {
    /// Takes a new reference for the run that begins.
    fn refer(&mut self, mu0: f64, mu1: f64, dispersion: f64) {
        *self = Self {
            mu0,
            mu1,
            dispersion: dispersion.max(1.0),
            ..Self::default()
        };
    }

    /// Adds a window of `n` requests; says whether the change is found.
    fn step(&mut self, n: u32) -> bool {
        if self.mu0 <= 0.0 || self.mu1 <= 0.0 {
            return false;
        }
        let llr =
            (f64::from(n) * (self.mu1 / self.mu0).ln() - (self.mu1 - self.mu0)) / self.dispersion;
        self.stat = (self.stat + llr).max(0.0);
        if self.stat > 0.0 {
            self.run += 1;
            self.hits += usize::from(llr > 0.0);
        }
        self.stat > CUSUM_H && self.hits >= 2 && llr > 0.0
    }
}

/// The least reference count per window (its lower bound) at which falls are tested on
/// counts.
const FALL_CUSUM_LEAST: f64 = 1.0;

/// The time constant of [`Shape::credit_rate`]'s long average, in seconds: long enough to
/// hold tens of requests of a caller at one request a second.
const LONG_SECS: f64 = 30.0;

/// The shortest time constant of that average, at the start of a spell of traffic: the
/// ring's span at a 1 s interval.
const LONG_START_SECS: f64 = 4.0;

/// The rise CUSUM's threshold, in log-likelihood units: about one false alarm in 10^4
/// windows of steady Poisson traffic (8 minutes at 50 ms windows), see the tests.
pub(crate) const CUSUM_H: f64 = 6.0;

/// A segment's traffic comes in runs of this many requests or more on average: bursts on a
/// schedule, measured over whole cycles (see the module doc).
const SCHEDULED_RUN: f64 = 3.0;

impl Shape {
    /// A shape keeping `cap` windows (at least 2) for a client reporting every
    /// `interval_windows` windows.
    pub(crate) fn new(cap: usize, interval_windows: usize) -> Self {
        let cap = cap.max(2);
        Self {
            short_run: (interval_windows / 4).max(2),
            interval_windows: interval_windows.max(1),
            rise: Cusum::default(),
            fall: Cusum::default(),
            long_rate: 0.0,
            long_secs: 0.0,
            ring: VecDeque::with_capacity(cap),
            ring_offered: 0,
            cap,
            segment: 0,
            estimate: 0.0,
            idle: false,
            cycles_told: false,
            told: None,
        }
    }

    /// Forgets everything (a bucket that left the config).
    pub(crate) fn clear(&mut self) {
        *self = Self {
            short_run: self.short_run,
            interval_windows: self.interval_windows,
            ..Self::new(self.cap, 0)
        };
    }

    /// Adds a window of `secs` in which `offered` requests were decided here and `admitted`
    /// of them let through (or, in shadow mode, not virtually dropped); says whether the
    /// rate changed for real, or whether its cycles just became known.
    pub(crate) fn push(&mut self, offered: u64, admitted: u64, secs: f64) -> Change {
        let change = self.push_window(offered, admitted, secs);
        if change != Change::None {
            // The report a change sends already carries the cycles, if the new segment
            // holds them and they are what a report counts over.
            self.cycles_told = self.counts_cycles();
            self.told = None;
            if matches!(change, Change::Rise | Change::Fall) {
                self.tell();
            }
            return change;
        }
        if !self.cycles_told && self.counts_cycles() {
            self.cycles_told = true;
            if self.told.is_some() {
                self.tell();
            }
            return Change::Learned;
        }
        if self.refined() {
            return Change::Refined;
        }
        change
    }

    /// Keeps the rate a report tells now (the segment's count) for [`Shape::refined`]; none
    /// for bursts on a schedule, whose report counts whole cycles.
    fn tell(&mut self) {
        self.told = (!self.scheduled()).then(|| Told {
            rate: self.rate_over(self.segment).0,
            windows: self.segment,
        });
    }

    /// Whether the rate told at the last rise or fall should be told again: checked each
    /// time the segment has doubled since it was last checked, until it spans an interval
    /// (from then on the interval's report counts as much). A report at a change counts only
    /// the windows since it (two windows, at a fast rise), whose count has a standard
    /// deviation of `sqrt(φ n)` (quasi-Poisson, `φ` the segment's dispersion); the count
    /// over twice the windows halves its variance, and the difference of the two has the
    /// variance of the longer count. So the rate is told again when the difference passes
    /// [`REFINE_DEVIATIONS`] of those deviations: about 5 % of the checks of a rate told
    /// right, at most four checks a change (2, 4, 8, 16 windows of an interval of 20).
    fn refined(&mut self) -> bool {
        let Some(told) = self.told else {
            return false;
        };
        if told.windows >= self.interval_windows || self.scheduled() {
            self.told = None;
            return false;
        }
        if self.segment < (2 * told.windows).min(self.interval_windows) {
            return false;
        }
        let k = self.segment;
        let secs: f64 = self.ring.iter().rev().take(k).map(|s| s.secs).sum();
        if secs <= 0.0 {
            return false;
        }
        let n = self.sum_offered(k, 0) as f64;
        let (_, dispersion) = self.count_moments(k, 0);
        let rate = n / secs;
        let deviation = (dispersion.max(1.0) * n.max(1.0)).sqrt() / secs;
        let off = (rate - told.rate).abs() > REFINE_DEVIATIONS * deviation;
        self.told = Some(Told {
            rate: if off { rate } else { told.rate },
            windows: k,
        });
        off
    }

    /// [`push`](Self::push) without telling when the cycles became known.
    fn push_window(&mut self, offered: u64, admitted: u64, secs: f64) -> Change {
        let slot = Slot {
            offered: offered.min(u64::from(u32::MAX)) as u32,
            admitted: admitted.min(offered).min(u64::from(u32::MAX)) as u32,
            secs,
        };
        if secs > 0.0 {
            // The long mean covers the current spell of traffic: it starts again after a
            // ring without a request, and weighs its first seconds as the ring would.
            if offered == 0 && self.offered_in_ring() == 0 {
                self.long_secs = 0.0;
                self.long_rate = 0.0;
            }
            self.long_secs = (self.long_secs + secs).min(LONG_SECS);
            let k = secs / self.long_secs.max(LONG_START_SECS);
            self.long_rate += (offered as f64 / secs - self.long_rate) * k;
        }
        let mut change = self.change_with(slot);
        let (cusum_rise, cusum_fall) = self.cusum_step(slot.offered);
        if change == Change::None && cusum_rise {
            change = Change::Rise;
        }
        let cusum_fall = cusum_fall && change == Change::None;
        if cusum_fall {
            change = Change::Fall;
        }
        if change == Change::None && offered >= 2 && self.ring_offered == 0 {
            change = Change::Start;
        }
        if matches!(change, Change::Rise | Change::Fall) {
            self.rise.stat = 0.0;
            self.fall.stat = 0.0;
        }
        if self.ring.len() == self.cap
            && let Some(old) = self.ring.pop_front()
        {
            self.ring_offered -= u64::from(old.offered);
        }
        self.ring.push_back(slot);
        self.ring_offered += u64::from(slot.offered);
        self.segment = (self.segment + 1).min(self.ring.len());
        let pause = offered == 0 && !self.idle;
        self.idle = offered == 0;
        match change {
            Change::None | Change::Learned | Change::Start | Change::Refined if !pause => {
                self.estimate = estimate(self.estimate, offered, secs).0;
            }
            Change::None | Change::Learned | Change::Start | Change::Refined => {}
            Change::Rise => {
                let from = if cusum_rise { self.rise.run } else { 2 };
                self.segment = from.clamp(1, self.ring.len());
                self.estimate = self.rate_over(self.segment).0;
            }
            Change::Fall => {
                let run = if cusum_fall {
                    self.fall.run
                } else if offered == 0 {
                    self.current_gap()
                } else {
                    self.fall_run(slot)
                };
                self.segment = run.clamp(1, self.ring.len());
                self.estimate = self.rate_over(self.segment).0;
            }
        }
        change
    }

    /// Adds a window of `offered` requests to the rise and fall CUSUMs (see the module
    /// doc); says whether each passed its threshold.
    fn cusum_step(&mut self, offered: u32) -> (bool, bool) {
        // A reference is the segment so far, however short (a silence a client held the
        // config for, the first windows after a change), taken when a statistic leaves
        // zero: the upper bound of its count (two deviations and a request) for rises, the
        // lower bound for falls, so the reference's own counting noise is not taken for a
        // change, and a short reference is a wide one. A partial first window of a step
        // (traffic that began mid-window) is corrected within the next windows instead of
        // an interval later.
        let k = self.segment.max(1);
        let (mean, dispersion) = self.count_moments(k, 0);
        let (n, count) = (k as f64, mean * k as f64);
        if self.rise.stat <= 0.0 {
            let mu0 = (count + 2.0 * count.sqrt() + 1.0) / n;
            self.rise.refer(
                mu0,
                2.0 * mu0 + 1.0 / self.interval_windows as f64,
                dispersion,
            );
        }
        if self.fall.stat <= 0.0 {
            // Under a request a window the ring holds too few requests for a test on
            // counts: a sparse caller's fall is a silence longer than its gaps
            // ([`Shape::change_with`]).
            // Nor is traffic with gaps (bursts: their silences are no fall, and the
            // dispersion of a few cycles under-states theirs), or a segment of less than
            // half an interval (the windows of one burst).
            let mu0 = (count - 2.0 * count.sqrt() - 1.0) / n;
            let tested = k >= (self.interval_windows / 2).max(2)
                && self.dense(self.interval_windows)
                && mu0 >= FALL_CUSUM_LEAST;
            let mu0 = if tested { mu0 } else { 0.0 };
            self.fall.refer(mu0, mu0 / 2.0, dispersion);
        }
        (self.rise.step(offered), self.fall.step(offered))
    }

    /// The mean count per window over the newest `k` windows after the newest `skip`, and
    /// their dispersion (variance over mean, at least 1: Poisson counts have 1, bursts
    /// much more).
    fn count_moments(&self, k: usize, skip: usize) -> (f64, f64) {
        let (mut n, mut sum, mut squares) = (0.0, 0.0, 0.0);
        for s in self.ring.iter().rev().skip(skip).take(k) {
            let x = f64::from(s.offered);
            n += 1.0;
            sum += x;
            squares += x * x;
        }
        if n < 2.0 || sum <= 0.0 {
            return (if n > 0.0 { sum / n } else { 0.0 }, 1.0);
        }
        let mean = sum / n;
        let var = (squares - sum * mean) / (n - 1.0);
        (mean, (var / mean).max(1.0))
    }

    /// Whether window `slot`, arriving now, ends a run that the history does not explain.
    fn change_with(&self, slot: Slot) -> Change {
        if self.segment == 0 {
            return if slot.offered > 0 {
                Change::Rise
            } else {
                Change::None
            };
        }
        let k = self.fall_run(slot).max(self.trailing_empty(slot));
        // One short burst says nothing of how often bursts come: its silence is not a fall.
        let pattern_known =
            self.runs_in_segment() >= 2 || self.longest_run() >= k.max(self.short_run);
        // The rate before the run is measured over at least as many windows as the run (a
        // few windows inside a burst would make any silence after it look like a fall).
        let before = (self.segment + 1).saturating_sub(k);
        if k <= self.segment + 1 && pattern_known && (before == 0 || before >= k) {
            // The rate before the run, against what the run held.
            let mean = if before > 0 {
                self.mean_count(before, k - 1)
            } else {
                self.mean_count(self.segment, 0)
            };
            let recent = (self.sum_offered(k - 1, 0) + u64::from(slot.offered)) as f64;
            let expected = mean * k as f64;
            let beyond_noise = expected - recent > 3.0 * expected.sqrt() + 2.0;
            let quarter = recent < 0.25 * expected;
            let half_held = k >= 2 && recent < 0.5 * expected;
            if beyond_noise && (quarter || half_held) {
                return Change::Fall;
            }
        }
        let mean = self.mean_count(self.segment, 0);
        if let Some(last) = self.ring.back() {
            let two = f64::from(last.offered) + f64::from(slot.offered);
            let each_high = |n: u32| f64::from(n) > 2.0 * mean + 3.0 * mean.sqrt() + 2.0;
            let burst_seen = 1.25 * f64::from(self.max_offered(1));
            if each_high(last.offered) && each_high(slot.offered) && two / 2.0 > burst_seen {
                return Change::Rise;
            }
        }
        Change::None
    }

    /// How many windows, `slot` included, a fall must hold: longer than any completed gap
    /// of the ring by a quarter (a bursty caller's silence between bursts is not a fall),
    /// at least one window that counted something or two empty ones (a pause).
    fn fall_run(&self, slot: Slot) -> usize {
        let gap = self.longest_gap();
        let least = if slot.offered == 0 { 2 } else { 1 };
        (gap + 1 + gap / 4).max(least)
    }

    /// The empty windows at the end of the ring, and `slot` if it is empty too (0 when it
    /// is not).
    fn trailing_empty(&self, slot: Slot) -> usize {
        if slot.offered == 0 {
            self.current_gap() + 1
        } else {
            0
        }
    }

    /// The longest run of empty windows between two non-empty ones, in windows (the silence
    /// before the first request is no gap of the traffic).
    fn longest_gap(&self) -> usize {
        let (mut run, mut longest, mut seen) = (0, 0, false);
        for s in &self.ring {
            if s.offered == 0 {
                run += 1;
            } else {
                if seen {
                    longest = longest.max(run);
                }
                seen = true;
                run = 0;
            }
        }
        longest
    }

    /// How many runs of non-empty windows the segment holds.
    fn runs_in_segment(&self) -> usize {
        let mut prev_empty = true;
        let mut runs = 0;
        for s in self
            .ring
            .iter()
            .skip(self.ring.len() - self.segment.min(self.ring.len()))
        {
            if s.offered > 0 && prev_empty {
                runs += 1;
            }
            prev_empty = s.offered == 0;
        }
        runs
    }

    /// The longest run of non-empty windows of the ring.
    fn longest_run(&self) -> usize {
        let (mut run, mut longest) = (0, 0);
        for s in &self.ring {
            run = if s.offered > 0 { run + 1 } else { 0 };
            longest = longest.max(run);
        }
        longest
    }

    /// The largest window of the ring, leaving out the newest `skip`.
    fn max_offered(&self, skip: usize) -> u32 {
        let n = self.ring.len().saturating_sub(skip);
        self.ring
            .iter()
            .take(n)
            .map(|s| s.offered)
            .max()
            .unwrap_or(0)
    }

    /// Requests offered in the newest `k` windows after leaving out the newest `skip`.
    fn sum_offered(&self, k: usize, skip: usize) -> u64 {
        self.ring
            .iter()
            .rev()
            .skip(skip)
            .take(k)
            .map(|s| u64::from(s.offered))
            .sum()
    }

    /// The mean count per window over the newest `k` windows after the newest `skip`.
    fn mean_count(&self, k: usize, skip: usize) -> f64 {
        let n = k.min(self.ring.len().saturating_sub(skip));
        if n == 0 {
            return 0.0;
        }
        self.sum_offered(n, skip) as f64 / n as f64
    }

    /// (offered, admitted) per second over the newest `k` windows.
    fn rate_over(&self, k: usize) -> (f64, f64) {
        let (mut o, mut a, mut secs) = (0u64, 0u64, 0.0);
        for s in self.ring.iter().rev().take(k) {
            o += u64::from(s.offered);
            a += u64::from(s.admitted);
            secs += s.secs;
        }
        if secs > 0.0 {
            (o as f64 / secs, a as f64 / secs)
        } else {
            (0.0, 0.0)
        }
    }

    /// Whether the traffic is dense: its longest recent gap is under a quarter of
    /// `interval_windows`, so that one interval holds many of its ups and downs.
    pub(crate) fn dense(&self, interval_windows: usize) -> bool {
        self.longest_gap()
            .max(self.current_gap())
            .max(self.leading_gap())
            * 4
            <= interval_windows
    }

    /// The empty windows at the start of the segment (before its first request): a ring
    /// that holds one recent request and silence before it is sparse, not dense.
    fn leading_gap(&self) -> usize {
        self.ring
            .iter()
            .skip(self.ring.len() - self.segment.min(self.ring.len()))
            .take_while(|s| s.offered == 0)
            .count()
    }

    /// The empty windows at the end of the ring.
    fn current_gap(&self) -> usize {
        self.ring
            .iter()
            .rev()
            .take_while(|s| s.offered == 0)
            .count()
    }

    /// (offered, admitted) per second for a report: over the last interval
    /// (`interval_windows`) for dense traffic; over every window since the last change for
    /// sparse traffic; over the whole cycles since the last change for bursts on a schedule
    /// (see [`Shape::cycles`]); never across a change. See the module doc for the bias and
    /// spread.
    pub(crate) fn report_rates(&self, interval_windows: usize) -> (f64, f64) {
        if self.dense(interval_windows) {
            return self.rate_over(interval_windows.min(self.segment).max(1));
        }
        match self.cycles().filter(|_| self.scheduled()) {
            Some((from, to)) => self.rate_between(from, to),
            None => self.rate_over(self.segment.max(1)),
        }
    }

    /// Whether a report counts over the segment's whole cycles ([`Shape::report_rates`]).
    /// Only then is their becoming known news ([`Change::Learned`]): for random arrivals
    /// a report counts over the segment whatever their runs, and an urgent report sent at
    /// the arrival that completes a second run ends its count at an arrival (a sparse
    /// caller reported 2 requests over the second or two since its last change: ten times
    /// its rate at 0.05 a second, and a hundred such callers read 1.7x their limit).
    fn counts_cycles(&self) -> bool {
        self.cycles().is_some() && self.scheduled()
    }

    /// Whether the segment's traffic comes in bursts on a schedule rather than random
    /// arrivals: runs of [`SCHEDULED_RUN`] requests or more on average, and window counts
    /// more dispersed than Poisson counts can be by chance. Random arrivals that fill most
    /// windows come in long runs too (at 2.5 requests a window a run holds 33 on average),
    /// and the cycles of such a segment are the span between two runs a window apart.
    fn scheduled(&self) -> bool {
        let runs = self.runs_in_segment();
        let k = self.segment.max(1);
        if runs == 0 || (self.sum_offered(k, 0) as f64) < SCHEDULED_RUN * runs as f64 {
            return false;
        }
        let (mean, dispersion) = self.count_moments(k, 0);
        dispersion > poisson_dispersion_bound(mean, k)
    }

    /// The whole cycles of the segment, as ring positions `[from, to)`: from the start of
    /// its first run of non-empty windows to the start of its last one, so that the span
    /// holds as many bursts as gaps (a burst just begun, a burst cut at the ring's start or
    /// a gap before the first would bias a mean); `None` while the segment holds fewer than
    /// two whole runs.
    fn cycles(&self) -> Option<(usize, usize)> {
        let start = self.ring.len() - self.segment.min(self.ring.len());
        // A run at the start of the range may have begun before it (in a window the ring
        // dropped, or before the change): only runs seen from their first window count.
        let before_empty = match start {
            0 => self.ring.len() < self.cap,
            _ => self.ring[start - 1].offered == 0,
        };
        let (mut first, mut last, mut prev_empty) = (None, None, before_empty);
        for (i, s) in self.ring.iter().enumerate().skip(start) {
            if s.offered > 0 && prev_empty {
                first.get_or_insert(i);
                last = Some(i);
            }
            prev_empty = s.offered == 0;
        }
        match (first, last) {
            (Some(f), Some(l)) if l > f => Some((f, l)),
            _ => None,
        }
    }

    /// (offered, admitted) per second over ring positions `[from, to)`.
    fn rate_between(&self, from: usize, to: usize) -> (f64, f64) {
        let (mut o, mut a, mut secs) = (0u64, 0u64, 0.0);
        for s in self.ring.range(from..to) {
            o += u64::from(s.offered);
            a += u64::from(s.admitted);
            secs += s.secs;
        }
        if secs > 0.0 {
            (o as f64 / secs, a as f64 / secs)
        } else {
            (0.0, 0.0)
        }
    }

    /// The rate a budget's credit for random arrivals is sized by: the upper bound (two
    /// Poisson deviations) of the rate over about the last [`LONG_SECS`] of the current
    /// spell of traffic (an exponentially weighted mean, of deviation `sqrt(rate / 2τ)` for
    /// a time constant `τ`), steadier than the ring's for a sparse caller (at 0.8 requests
    /// a second the ring is empty one time in 25). An upper bound because too small a
    /// credit drops; the budget holds what it was sized for a while
    /// (`Budget::noise_credit`), so a low reading does not cut it.
    pub(crate) fn credit_rate(&self) -> f64 {
        let tau = self.long_secs.max(LONG_START_SECS);
        self.long_rate + 2.0 * (self.long_rate / (2.0 * tau)).sqrt()
    }

    /// How long the current spell of traffic has lasted, in seconds (counted up to
    /// [`LONG_SECS`]; it starts again after a ring without a request).
    pub(crate) fn spell_secs(&self) -> f64 {
        self.long_secs
    }

    /// The offered rate the next window is expected to see, requests per second.
    pub(crate) fn expected(&self) -> f64 {
        self.estimate
    }

    /// Requests offered over the whole ring.
    pub(crate) fn offered_in_ring(&self) -> u64 {
        self.ring_offered
    }

    /// Requests admitted over the whole ring.
    pub(crate) fn admitted_in_ring(&self) -> u64 {
        self.ring.iter().map(|s| u64::from(s.admitted)).sum()
    }

    /// Seconds of the closed windows since the last one that admitted a request (the
    /// whole ring if none did).
    pub(crate) fn secs_since_admitted(&self) -> f64 {
        self.ring
            .iter()
            .rev()
            .take_while(|s| s.admitted == 0)
            .map(|s| s.secs)
            .sum()
    }

    /// Whether the ring holds fewer windows than it keeps: the client has held the bucket
    /// for less than the ring, so a silence in it says nothing yet of the caller's cadence.
    pub(crate) fn is_young(&self) -> bool {
        self.ring.len() < self.cap
    }

    /// How many windows the ring keeps.
    pub(crate) fn windows(&self) -> usize {
        self.cap
    }

    /// The longest recent gap between bursts on a schedule, in seconds (0 for traffic with
    /// no empty window and for random arrivals: their gaps are not a cycle to save for).
    pub(crate) fn burst_gap_secs(&self) -> f64 {
        if self.scheduled() {
            self.longest_gap_secs()
        } else {
            0.0
        }
    }

    /// The longest recent gap in seconds (0 for traffic with no empty window).
    fn longest_gap_secs(&self) -> f64 {
        let mean = self.ring.iter().map(|s| s.secs).sum::<f64>() / self.ring.len().max(1) as f64;
        self.longest_gap() as f64 * mean
    }
}

/// The most a dispersion (variance over mean) measured over `windows` Poisson counts of
/// mean `mean` reaches by chance: three standard deviations over 1, the sample variance of
/// Poisson counts having a variance of about `(m + 2 m²) / n` (`m` the mean, `n` the
/// windows), so the dispersion one of about `(1 / m + 2) / n`.
fn poisson_dispersion_bound(mean: f64, windows: usize) -> f64 {
    let n = windows.saturating_sub(1).max(1) as f64;
    1.0 + 3.0 * ((1.0 / mean.max(1e-3) + 2.0) / n).sqrt()
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Rng, mean_sd};

    const W: f64 = 0.05;

    fn fed(counts: impl IntoIterator<Item = u64>) -> (Shape, Vec<Change>) {
        let mut s = Shape::new(80, 20);
        let changes = counts.into_iter().map(|c| s.push(c, c, W)).collect();
        (s, changes)
    }

    /// A shape that has counted `windows` empty windows (a client holding the config
    /// before its first request).
    fn after_silence(windows: usize) -> Shape {
        let mut s = Shape::new(80, 20);
        for _ in 0..windows {
            s.push(0, 0, W);
        }
        s
    }

    fn changes_of(v: &[Change], kind: Change) -> usize {
        v.iter().filter(|c| **c == kind).count()
    }

    #[test]
    fn a_step_estimate_is_replaced_and_noise_blended() {
        let (r, jumped) = estimate(100.0, 75, 0.05);
        assert!(jumped);
        assert_eq!(r, 1500.0);
        let (r, jumped) = estimate(100.0, 6, 0.05);
        assert!(!jumped);
        assert!((r - 106.0).abs() < 1e-9, "{r}");
        assert_eq!(estimate(0.0, 0, 0.05), (0.0, false));
    }

    #[test]
    fn a_steady_rate_reports_itself_and_a_step_is_a_change_within_two_windows() {
        let (mut s, ch) = fed(std::iter::repeat_n(5, 60));
        assert_eq!(
            changes_of(&ch, Change::Rise),
            1,
            "the start is a rise from nothing"
        );
        assert_eq!(changes_of(&ch, Change::Fall), 0);
        assert!(s.dense(20));
        let (o, _) = s.report_rates(20);
        assert!((o - 100.0).abs() < 1e-6, "{o}");
        assert_eq!(s.push(75, 75, W), Change::None, "one window is not a step");
        assert_eq!(s.push(75, 75, W), Change::Rise, "two are");
        assert!((s.report_rates(20).0 - 1500.0).abs() < 1e-6);
        assert!((s.expected() - 1500.0).abs() < 1e-6);
        for _ in 0..20 {
            assert_eq!(s.push(75, 75, W), Change::None);
        }
        assert_eq!(
            s.push(5, 5, W),
            Change::Fall,
            "a fall under a quarter, at once"
        );
        assert!((s.report_rates(20).0 - 100.0).abs() < 1e-6);
        for _ in 0..20 {
            s.push(5, 5, W);
        }
        assert_eq!(s.push(0, 0, W), Change::None, "one empty window is a pause");
        // At five requests a window, two empty ones are within counting noise (3 deviations
        // + 2); three are not.
        assert_eq!(s.push(0, 0, W), Change::None);
        assert_eq!(s.push(0, 0, W), Change::Fall, "three are a stop");
    }

    #[test]
    fn bursts_once_a_second_are_reported_as_their_average_and_never_as_a_fall() {
        // 4,000 requests in the first three windows of every second (20 windows).
        let second = [1334u64, 1333, 1333]
            .into_iter()
            .chain(std::iter::repeat_n(0, 17));
        let (mut s, ch) = fed(second.clone().cycle().take(20 * 10));
        assert_eq!(changes_of(&ch[40..], Change::Fall), 0, "{ch:?}");
        assert_eq!(changes_of(&ch[40..], Change::Rise), 0, "{ch:?}");
        assert!(!s.dense(20));
        for i in 0..20 {
            let (o, _) = s.report_rates(20);
            assert!((o - 4000.0).abs() <= 400.0, "window {i}: reported {o}");
            s.push([1334, 1333, 1333].get(i).copied().unwrap_or(0), 0, W);
        }
        // The bursts stop: a fall once the silence outlasts every recent gap by a quarter.
        let mut fell_after = None;
        for i in 0..40 {
            if s.push(0, 0, W) == Change::Fall {
                fell_after = Some(i + 1);
                break;
            }
        }
        // The silence had lasted 17 windows when the last cycle ended and the longest gap
        // seen is 17: the last 22 windows (17 + a quarter, and this one) hold under half
        // of what they would have held after 4 more empty windows, none after 5.
        let n = fell_after.expect("a stop of the bursts is a fall");
        assert!((4..=5).contains(&n), "fell after {n} more empty windows");
        assert_eq!(s.report_rates(20).0, 0.0);
    }

    #[test]
    fn bursts_every_two_seconds_are_reported_as_their_average() {
        let cycle = [2667u64, 2667, 2666]
            .into_iter()
            .chain(std::iter::repeat_n(0, 37));
        let (mut s, ch) = fed(cycle.cycle().take(40 * 4));
        assert_eq!(
            changes_of(&ch, Change::Fall),
            0,
            "the end of a burst is no fall, the first one's included: {ch:?}"
        );
        for i in 0..40 {
            let (o, _) = s.report_rates(20);
            assert!((o - 4000.0).abs() <= 400.0, "window {i}: reported {o}");
            s.push([2667, 2667, 2666].get(i).copied().unwrap_or(0), 0, W);
        }
    }

    #[test]
    fn a_burst_in_one_window_every_second_is_its_average_from_the_second_burst() {
        // Silence, then 4,000 requests in one window every second (a batch of hits).
        let mut s = after_silence(30);
        let mut reported = Vec::new();
        for i in 0..120 {
            s.push(if i % 20 == 0 { 4000 } else { 0 }, 0, W);
            reported.push(s.report_rates(20).0);
        }
        for (i, o) in reported.iter().enumerate().skip(20) {
            assert!((o - 4000.0).abs() <= 1.0, "window {i}: {o}");
        }
    }

    #[test]
    fn random_sparse_arrivals_send_no_learned_reports() {
        // Poisson arrivals from 0.05 to 2 requests a second, 100 seeds of 400 windows:
        // their runs are no schedule, so a report never counts over cycles.
        for rate in [0.05, 0.2, 0.5, 2.0] {
            let mut learned = 0;
            for seed in 0..100 {
                let mut rng = Rng::new(seed);
                let mut s = after_silence(80);
                for _ in 0..400 {
                    let n = rng.poisson(rate * W);
                    learned += usize::from(s.push(n, n, W) == Change::Learned);
                }
            }
            assert_eq!(learned, 0, "{rate} a second");
        }
    }

    #[test]
    fn bursts_two_seconds_apart_are_their_average_from_the_second_one() {
        // Silence since the config came, then 8,000 requests over three windows every 2 s.
        let mut s = after_silence(40);
        for i in 0..200 {
            let n = [2667u64, 2667, 2666].get(i % 40).copied().unwrap_or(0);
            let c = s.push(n, n, W);
            assert_ne!(c, Change::Fall, "window {i}");
            if i == 40 {
                assert!(matches!(c, Change::Learned | Change::Rise), "{c:?}");
            } else {
                assert_ne!(c, Change::Learned, "window {i}");
            }
            if i >= 42 {
                let o = s.report_rates(20).0;
                assert!((o - 4000.0).abs() <= 400.0, "window {i}: {o}");
            }
        }
    }

    #[test]
    fn a_surge_that_ends_is_a_fall_at_once() {
        let mut s = after_silence(40);
        for _ in 0..10 {
            s.push(100, 100, W);
        }
        assert_eq!(s.push(0, 0, W), Change::None, "one empty window is a pause");
        assert_eq!(
            s.push(0, 0, W),
            Change::Fall,
            "two are the end of the surge"
        );
        assert_eq!(s.report_rates(20).0, 0.0);
    }

    #[test]
    fn the_first_gap_after_a_short_silence_is_not_a_fall() {
        // A client that got its config 1.5 s before its first burst of a batch every 2 s.
        let mut s = after_silence(30);
        for i in 0..160 {
            let c = s.push(if i % 40 == 0 { 8000 } else { 0 }, 0, W);
            // The first burst is the start of traffic; the second is a rise from the
            // silence before it, or tells the cycle: either way once, and never a fall.
            assert_eq!(c == Change::Start, i == 0, "window {i}: {c:?}");
            assert_eq!(
                c != Change::None && c != Change::Start,
                i == 40,
                "window {i}: the second burst tells the cycle, once: {c:?} {}",
                s.segment
            );
            assert_ne!(c, Change::Fall, "window {i}");
            if i >= 40 {
                let o = s.report_rates(20).0;
                assert!((o - 4000.0).abs() <= 1.0, "window {i}: {o}");
            }
        }
    }

    #[test]
    fn a_few_requests_a_second_are_a_rate_over_the_ring_not_noise() {
        // 2 rps: one request every ten windows.
        let (s, ch) = fed((0..200).map(|i| u64::from(i % 10 == 0)));
        assert_eq!(changes_of(&ch[20..], Change::Fall), 0, "{ch:?}");
        assert_eq!(changes_of(&ch[20..], Change::Rise), 0, "{ch:?}");
        assert!(!s.dense(20));
        let (o, _) = s.report_rates(20);
        assert!((o - 2.0).abs() < 0.3, "{o}");
    }

    #[test]
    fn admitted_rates_follow_the_same_horizon() {
        let mut s = Shape::new(80, 20);
        for _ in 0..40 {
            s.push(10, 4, W);
        }
        let (o, a) = s.report_rates(20);
        assert!(
            (o - 200.0).abs() < 1e-6 && (a - 80.0).abs() < 1e-6,
            "{o} {a}"
        );
        assert_eq!(s.admitted_in_ring(), 160);
    }

    /// What a client at `rate` requests a second of Poisson arrivals reports (50 ms windows,
    /// a 1 s interval): one report a second from the 10th second to the 70th.
    fn poisson_reports(rate: f64, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        let mut s = Shape::new(80, 20);
        let mut out = Vec::new();
        for i in 0..70 * 20 {
            s.push(rng.poisson(rate * W), 0, W);
            if i >= 200 && i % 20 == 19 {
                out.push(s.report_rates(20).0);
            }
        }
        out
    }

    #[test]
    fn random_arrivals_are_reported_without_bias_and_within_the_stated_spread() {
        for rate in [0.05, 0.2, 0.6, 2.0, 6.0, 20.0, 200.0] {
            let reports: Vec<f64> = (0..200)
                .flat_map(|seed| poisson_reports(rate, seed))
                .collect();
            let (mean, sd) = mean_sd(&reports);
            // The reports of one seed overlap by up to four seconds: a quarter of them are
            // independent.
            let se = sd / (reports.len() as f64 / 4.0).sqrt();
            eprintln!("rate {rate}: mean {mean:.4} sd {sd:.4} se {se:.5}");
            assert!(
                (mean - rate).abs() <= 4.0 * se + 0.01 * rate,
                "rate {rate}: reported {mean:.4} on average (se {se:.5})"
            );
            // Counts over at least one interval: a spread of at most sqrt(rate / 1 s).
            assert!(
                sd <= 1.1 * rate.sqrt(),
                "rate {rate}: a report's spread {sd:.4} is over sqrt(rate)"
            );
        }
    }

    /// Asserts that steady Poisson traffic at each of `rates` (20 seeds from `seed0`, 5,000
    /// windows each after 200 of warm-up) is taken for a `change` at most twice in 10^4
    /// windows.
    fn rarely_a_false(change: Change, rates: &[f64], seed0: u64) {
        for &rate in rates {
            let (mut false_changes, mut windows) = (0, 0);
            for seed in 0..20 {
                let mut rng = Rng::new(seed0 + seed);
                let mut s = Shape::new(80, 20);
                for i in 0..5_000 {
                    let c = s.push(rng.poisson(rate * W), 0, W);
                    if i >= 200 {
                        windows += 1;
                        false_changes += usize::from(c == change);
                    }
                }
            }
            eprintln!("rate {rate}: {false_changes} {change:?} in {windows} windows");
            assert!(
                false_changes as f64 <= 2.0 * windows as f64 / 10_000.0,
                "rate {rate}: {false_changes} false {change:?} in {windows} windows"
            );
        }
    }

    #[test]
    fn steady_random_arrivals_rarely_look_like_a_rise() {
        rarely_a_false(Change::Rise, &[0.2, 2.0, 20.0, 200.0, 2000.0], 0);
    }

    #[test]
    fn steady_random_arrivals_rarely_look_like_a_fall() {
        rarely_a_false(Change::Fall, &[2.0, 20.0, 60.0, 200.0, 2000.0], 1000);
    }

    #[test]
    fn a_fall_of_dense_traffic_is_found_within_a_few_windows() {
        // Dense traffic (60 to 1,000 requests a second) that falls to a sixth or a half,
        // random or evenly spaced: the windows it takes, at the median and the 95th
        // percentile of 100 seeds. Counting only runs of near-empty windows, a fall to a sixth of 60
        // requests a second (3 a window to one every other window) was never found: the
        // tiers heard of it at each client's next interval report, up to a second later.
        for (rate, to, even, median_at_most, p95_at_most) in [
            (60.0, 10.0, true, 8, 8),
            (60.0, 10.0, false, 8, 12),
            (200.0, 100.0, false, 8, 16),
            (1000.0, 500.0, false, 4, 6),
        ] {
            let mut found = Vec::new();
            for seed in 0..100 {
                let mut rng = Rng::new(seed);
                let mut s = Shape::new(80, 20);
                let mut acc = 0.0;
                let mut count = |rng: &mut Rng, r: f64| {
                    if even {
                        acc += r * W;
                        let n = acc.floor();
                        acc -= n;
                        n as u64
                    } else {
                        rng.poisson(r * W)
                    }
                };
                for _ in 0..100 {
                    let n = count(&mut rng, rate);
                    s.push(n, n, W);
                }
                let at = (1..=60).find(|_| {
                    let n = count(&mut rng, to);
                    s.push(n, n, W) == Change::Fall
                });
                found.push(at.unwrap_or(usize::MAX));
            }
            found.sort_unstable();
            let (median, p95) = (found[50], found[94]);
            eprintln!("{rate} -> {to} (even {even}): median {median}, 95th percentile {p95}");
            assert!(
                median <= median_at_most && p95 <= p95_at_most,
                "{rate} -> {to} (even {even}): median {median}, 95th percentile {p95} windows"
            );
        }
    }

    #[test]
    fn a_step_from_a_short_silence_is_a_rise_within_a_few_windows() {
        // A client that has held the config for a few windows when its traffic starts (the
        // first calls through a sidecar that just became ready): 60 to 1,000 requests a
        // second from nothing, after 4 to 19 empty windows. (Below three requests a window
        // a silence of a few windows says too little: a request a window is what a
        // reference of one request over a window allows.)
        for rate in [60.0, 200.0, 1000.0] {
            let mut windows = Vec::new();
            for seed in 0..100 {
                let mut rng = Rng::new(seed);
                let mut s = after_silence(4 + seed as usize % 16);
                let first = rng.poisson(rate * W).max(2);
                assert_eq!(
                    s.push(first, 0, W),
                    Change::Start,
                    "the first requests are told"
                );
                let found = (2..=40).find(|_| s.push(rng.poisson(rate * W), 0, W) == Change::Rise);
                windows.push(found.unwrap_or(usize::MAX));
            }
            windows.sort_unstable();
            let (win50, win95) = (windows[50], windows[95]);
            eprintln!("idle -> {rate}: a rise after {win50} windows (median), {win95} (95th)");
            assert!(
                win50 <= 3 && win95 <= 5,
                "rate {rate}: {win50} {win95} windows"
            );
        }
        // A sparse caller's requests after a short silence are no rise (the bound of the
        // steady callers' test: two in 10^4 windows).
        let mut rises = 0;
        for seed in 0..200 {
            let mut rng = Rng::new(seed);
            let mut s = after_silence(1 + seed as usize % 19);
            rises += (0..200)
                .filter(|_| s.push(rng.poisson(0.5 * W), 0, W) == Change::Rise)
                .count();
        }
        assert!(
            rises <= 8,
            "{rises} rises of a 0.5 rps caller in 40,000 windows"
        );
    }

    /// How many requests after a step from `rate` to `factor` times it the rise is found,
    /// and in how many windows, over 100 seeds: (median, 95th percentile) of each.
    fn rise_delays(rate: f64, factor: f64) -> ((u64, u64), (usize, usize)) {
        let (mut requests, mut windows) = (Vec::new(), Vec::new());
        for seed in 0..100 {
            let mut rng = Rng::new(seed);
            let mut s = Shape::new(80, 20);
            for _ in 0..200 {
                s.push(rng.poisson(rate * W), 0, W);
            }
            let mut seen = 0;
            let found = (1..=400).find(|_| {
                let n = rng.poisson(factor * rate * W);
                seen += n;
                s.push(n, 0, W) == Change::Rise
            });
            requests.push(seen);
            windows.push(found.unwrap_or(usize::MAX));
        }
        requests.sort_unstable();
        windows.sort_unstable();
        ((requests[50], requests[95]), (windows[50], windows[95]))
    }

    #[test]
    fn a_step_to_ten_times_the_rate_is_a_rise_within_a_few_requests() {
        for rate in [0.2, 0.5, 2.0, 10.0, 100.0, 1000.0] {
            let ((req50, req95), (win50, win95)) = rise_delays(rate, 10.0);
            eprintln!(
                "rate {rate} -> 10x: found after {req50} requests / {win50} windows (median), \
                 {req95} / {win95} (95th)"
            );
            // Where the ring holds a few requests of the old rate to compare with.
            if (1.25..10.0).contains(&rate) {
                assert!(
                    req50 <= 12 && req95 <= 24,
                    "rate {rate}: {req50} {req95} requests"
                );
            }
            if rate >= 10.0 {
                assert!(
                    win50 <= 3 && win95 <= 5,
                    "rate {rate}: {win50} {win95} windows"
                );
            }
        }
        // A fivefold rise of a dense caller (one instance of ten taking the unused part):
        // within a third of an interval.
        let (_, (win50, win95)) = rise_delays(20.0, 5.0);
        eprintln!("rate 20 -> 5x: {win50} windows (median), {win95} (95th)");
        assert!(win50 <= 4 && win95 <= 6, "{win50} {win95}");
    }

    /// After a rise of random arrivals (10 -> 50 requests a second, a ring whose old rate
    /// left gaps of a quarter interval), every report carries the new rate within its
    /// counting noise: random arrivals that fill most windows also come in long runs, and
    /// taking them for bursts on a schedule reported the span between two runs (two
    /// windows, one request: 10 requests a second, a fifth of the rate), seen in the
    /// precision test's rise-alone cell on a loaded machine.
    #[test]
    fn a_rise_of_random_arrivals_is_reported_at_its_new_rate_not_as_bursts() {
        let (mut reports, mut low) = (Vec::new(), 0);
        for seed in 0..300 {
            let mut rng = Rng::new(7_000 + seed);
            let mut s = Shape::new(80, 20);
            for _ in 0..200 {
                s.push(rng.poisson(10.0 * W), 0, W);
            }
            let mut risen = false;
            for i in 0..80 {
                let c = s.push(rng.poisson(50.0 * W), 0, W);
                risen |= c == Change::Rise;
                // Every window a report could leave in, once the rise is found and the
                // new segment holds half an interval.
                if risen && i >= 10 {
                    let r = s.report_rates(20).0;
                    reports.push(r);
                    low += usize::from(r < 25.0);
                }
            }
        }
        let (mean, sd) = mean_sd(&reports);
        eprintln!(
            "after a rise to 50: mean {mean:.2} sd {sd:.2}, {low} of {} under 25",
            reports.len()
        );
        // A count over at least half an interval: 50 ± 10 (one deviation); under half the
        // rate is 2.5 deviations out, about 1 report in 160 by chance, far fewer on
        // average over longer segments.
        assert!((mean - 50.0).abs() <= 2.0, "reported {mean:.2} on average");
        assert!(
            low * 200 <= reports.len(),
            "{low} of {} reports under half the rate",
            reports.len()
        );
    }

    /// A rate told at a change counts only the windows since it (two, at a fast rise), so
    /// it is told again as the count grows ([`Shape::refined`]). Over the first interval
    /// after steps up and down, from idle to dense and sparse to dense, the rate the
    /// tiers hold is closer to the true one than the rate told at the change alone, and a
    /// change costs few extra reports.
    #[test]
    fn a_rate_told_at_a_change_is_told_again_as_its_count_grows() {
        let steps = [
            (0.0, 100.0),
            (2.0, 20.0),
            (10.0, 50.0),
            (20.0, 100.0),
            (100.0, 300.0),
            (0.5, 15.0),
            (50.0, 10.0),
            (300.0, 100.0),
        ];
        let (mut pooled_with, mut pooled_without) = (0.0, 0.0);
        for (before, after) in steps {
            let (mut with, mut without) = (Vec::new(), Vec::new());
            let (mut changes, mut refines) = (0usize, 0usize);
            for seed in 0..300 {
                let mut rng = Rng::new(11_000 + seed);
                let mut s = Shape::new(80, 20);
                for _ in 0..200 {
                    s.push(rng.poisson(before * W), 0, W);
                }
                // (window of the change, rate told at the change, rate told since)
                let mut told: Option<(usize, f64, f64)> = None;
                for i in 0..80 {
                    let c = s.push(rng.poisson(after * W), 0, W);
                    let now = s.report_rates(20).0 / after;
                    match (c, told) {
                        (Change::Rise | Change::Fall, None) => {
                            told = Some((i, now, now));
                            changes += 1;
                        }
                        (Change::Learned, Some((f, _, _))) => told = Some((f, now, now)),
                        (Change::Refined, Some((f, at, _))) if i < f + 20 => {
                            told = Some((f, at, now));
                            refines += 1;
                        }
                        _ => {}
                    }
                    if let Some((f, at, since)) = told
                        && i < f + 20
                    {
                        without.push((at - 1.0).abs());
                        with.push((since - 1.0).abs());
                    }
                }
            }
            let (w, wo) = (mean_sd(&with).0, mean_sd(&without).0);
            eprintln!(
                "{before} -> {after}: {changes} changes, {refines} told again; mean error \
                 over the interval {w:.3} (at the change alone {wo:.3})"
            );
            assert!(
                changes >= 250,
                "{before} -> {after}: {changes} changes found"
            );
            assert!(w <= wo + 1e-9, "{before} -> {after}: {w:.3} > {wo:.3}");
            // At most four checks a change (2, 4, 8, 16 windows), about a third of them off
            // by one deviation by chance.
            assert!(
                refines <= 2 * changes,
                "{before} -> {after}: {refines} extra reports for {changes} changes"
            );
            pooled_with += w;
            pooled_without += wo;
        }
        assert!(
            pooled_with <= 0.85 * pooled_without,
            "mean error {pooled_with:.3} against {pooled_without:.3} at the change alone"
        );
    }
}
