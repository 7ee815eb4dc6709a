//! What one bucket may still admit at one client: a budget of requests that its allowance
//! refills and its admissions spend, and the drop ratio that spends it over the next
//! window.
//!
//! The tiers give each client an allowance (requests per second). A threshold computed
//! from an estimate of the offered rate alone cannot hold it: at a few requests a second
//! a 50 ms window cannot know the rate, and a burst is over before it is measured. So the
//! client keeps the books: every window the allowance refills the budget and what was
//! admitted spends it, and the next window's ratio admits what the budget holds out of
//! what the window is expected to offer. Whatever the estimate gets wrong is paid back (an
//! overdraft) or saved (credit) for the next windows, so over a few intervals a client
//! admits its allowance at any rate and in any shape of traffic.
//!
//! A budget admits whole requests: while it holds part of one it waits for the rest, so a
//! client at a few requests a second admits at a steady cadence instead of by chance. Each
//! budget starts at a random fraction of a request ([`Budget::starting_at`]), so clients
//! that got their allowance in the same instant and send in step (a deploy, a cron, a load
//! generator) admit at spread-out instants rather than all in the same window.
//!
//! Bounds: credit is capped at what the caller's normal silences earn ([`Budget::cap`]:
//! four windows for steady traffic, the longest recent gap for bursts on a schedule, plus
//! the budget's fraction of a request, see [`Budget::settle`]), and at least the credit
//! random arrivals need ([`poisson_credit`]), so a steady caller cannot save up for a
//! surge while a bursty one gets its average and a random one is not dropped under its
//! allowance; an overdraft is bounded by what the client admitted recently
//! ([`Budget::floor`]), so a batch of hits is paid back in full and a stale debt is not
//! held forever.
//!
//! # Random arrivals under the allowance
//!
//! A budget is a token bucket: refilled at the allowance `a`, holding at most its cap `C`
//! (in requests). Poisson arrivals at `ρ a` (`ρ < 1`) into it are the arrivals of an M/D/1
//! queue with `C` places, and the share they lose decays as `(1 - ρ) e^{-θ C}`, with `θ > 0`
//! solving `ρ (e^θ - 1) = θ` (the queue's large-deviation rate). [`poisson_credit`] is the
//! `C` that makes that share [`DROP_SHARE`]: 3 requests at `ρ = 0.3`, 4 at 0.5, 11 at 0.8,
//! 32 at 0.95 (the largest `ρ` it plans for). The tests check the share a real budget
//! drops on simulated arrivals over many seeds: 0.16-0.32 % at allowances of 0.5 to 50
//! requests a second and `ρ` from 0.3 to 0.95. What it costs: a client that held its
//! credit when a step comes admits it on top of its allowance, once.

/// The budget of one bucket at one client, in requests.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Budget {
    tokens: f64,
    /// The credit random arrivals need, held for a while ([`Budget::noise_credit`]).
    credit: f64,
}

/// How many windows' allowance steady traffic may hold as credit.
const CREDIT_WINDOWS: f64 = 4.0;

/// The share of random arrivals a budget may drop under its allowance
/// ([`poisson_credit`]).
pub(crate) const DROP_SHARE: f64 = 0.002;

/// How long a budget holds the credit random arrivals needed ([`Budget::noise_credit`]),
/// in seconds.
const CREDIT_HOLD_SECS: f64 = 30.0;

/// The credit, in requests, under which a budget drops at most [`DROP_SHARE`] of Poisson
/// arrivals offered at `load` times its allowance (see the module doc): at least one
/// request; `load` is taken as at most 0.95.
pub(crate) fn poisson_credit(load: f64) -> f64 {
    let rho = if load.is_finite() {
        load.clamp(0.0, 0.95)
    } else {
        0.95
    };
    if rho <= 1e-3 {
        return 1.0;
    }
    // ρ (e^θ - 1) - θ is negative just above 0 (slope ρ - 1) and grows without bound.
    let (mut lo, mut hi) = (1e-9, 1.0f64);
    while rho * hi.exp_m1() < hi {
        hi *= 2.0;
    }
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if rho * mid.exp_m1() < mid {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (((1.0 - rho) / DROP_SHARE).ln() / hi).max(1.0)
}

impl Budget {
    /// An empty budget (no credit, no overdraft).
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A budget holding `phase` (taken modulo 1) of a request: where a budget that admits
    /// whole requests is found at a random instant of its cadence, so each client given a
    /// different phase (see [`phase_of`]) admits at a different point of it.
    pub(crate) fn starting_at(phase: f64) -> Self {
        Self {
            tokens: phase.rem_euclid(1.0),
            credit: 0.0,
        }
    }

    /// A budget at `phase` (see [`Budget::starting_at`]) refilled by `refilled` requests,
    /// counted up to one whole request: the budget a client would hold had it kept the
    /// allowance since the last request it admitted, without saving credit. It is how a
    /// first budget starts when the client cannot count on the bucket being under its limit
    /// (see `apply::apply_ratio`): a caller under its allowance is not dropped at its next
    /// request for lack of a part of one (starting at its phase alone dropped it whenever
    /// the allowance came between two requests less than a request's refill apart), and
    /// clients that start together admit at most one request each beyond their allowance.
    pub(crate) fn resuming(phase: f64, refilled: f64) -> Self {
        let refilled = if refilled.is_finite() {
            refilled.clamp(0.0, 1.0)
        } else {
            1.0
        };
        let mut b = Self::starting_at(phase);
        b.tokens += refilled;
        b
    }

    /// A budget at `phase` (see [`Budget::starting_at`]) that also holds the credit random
    /// arrivals at `load` times its allowance need ([`poisson_credit`]): the budget of a
    /// client given its first allowance while the bucket is under its limit. A budget that
    /// had run at that load would hold it; starting from less than a request drops the
    /// requests that come before the refill (a sparse caller, whose reports are often
    /// empty, starts again each time it gets an allowance back). Over the limit a first
    /// budget holds no credit: it must not admit more than its allowance; nor does one
    /// given in the first intervals of a spell of traffic, when the tiers may not have
    /// heard every client that began with it (see `apply::apply_ratio`).
    pub(crate) fn starting_under_limit(phase: f64, load: f64) -> Self {
        let credit = poisson_credit(load);
        Self {
            tokens: phase.rem_euclid(1.0) + credit,
            credit,
        }
    }

    /// Requests the budget holds now (negative: owed).
    #[cfg(test)]
    pub(crate) fn tokens(&self) -> f64 {
        self.tokens
    }

    /// The credit a budget may hold at allowance `allowed` (requests per second), for a
    /// caller whose bursts come `gap_secs` apart (0 for traffic that does not come in
    /// bursts on a schedule), with `window_secs` windows: four windows' allowance, or the
    /// allowance over the gap and one window, and at least `credit` requests (what random
    /// arrivals need, [`Budget::noise_credit`]).
    pub(crate) fn cap(allowed: f64, window_secs: f64, gap_secs: f64, credit: f64) -> f64 {
        let secs = (CREDIT_WINDOWS * window_secs).max(gap_secs + window_secs);
        if allowed > 0.0 {
            (allowed * secs).max(credit).max(1.0)
        } else {
            0.0
        }
    }

    /// The credit random arrivals at `load` times the allowance need ([`poisson_credit`]),
    /// after a window of `secs`: the largest it needed over about [`CREDIT_HOLD_SECS`]
    /// (it decays at that time constant). A load read off a few requests is noisy, and a
    /// cap that fell with each low reading would throw away the credit it is there for.
    pub(crate) fn noise_credit(&mut self, load: f64, secs: f64) -> f64 {
        let decay = (-secs.max(0.0) / CREDIT_HOLD_SECS).exp();
        self.credit = poisson_credit(load).max(self.credit * decay);
        self.credit
    }

    /// The largest overdraft at allowance `allowed`: an interval's allowance, or what was
    /// admitted over the recent windows (`admitted_recently`) if more.
    pub(crate) fn floor(allowed: f64, interval_secs: f64, admitted_recently: u64) -> f64 {
        -(allowed * interval_secs).max(admitted_recently as f64)
    }

    /// A window of `secs` at allowance `allowed` in which `admitted` requests were let
    /// through: refill, spend, and keep within the floor and the cap. The floor bounds the
    /// debt this window adds; a debt already owed is paid back, unless the rate falls under the allowance
    /// ([`Budget::after_fall`]).
    ///
    /// Above the cap the budget drops whole requests and keeps its fraction of one (its
    /// phase), so it holds at most `cap` and a part of a request. Cutting to the cap
    /// itself would give every client of a caller that paused the same budget, and from
    /// then on they would all admit in the same windows (a second of all of them, then
    /// seconds of none); with its phase, each resumes its own cadence.
    pub(crate) fn settle(&mut self, allowed: f64, secs: f64, admitted: u64, floor: f64, cap: f64) {
        let refilled = self.tokens + allowed * secs;
        let mut t = refilled - admitted as f64;
        if cap <= 0.0 {
            t = t.min(0.0);
        } else if t >= cap + 1.0 {
            t -= (t - cap).floor();
        }
        self.tokens = t.max(floor.min(0.0).min(refilled));
    }

    /// What the budget holds with a window's refill at allowance `allowed` (requests;
    /// negative: owed).
    pub(crate) fn available(&self, allowed: f64, window_secs: f64) -> f64 {
        self.tokens + allowed * window_secs
    }

    /// Whether the budget, with what allowance `allowed` refilled over the `since` seconds
    /// of the current window, holds `need` requests.
    pub(crate) fn covers(&self, allowed: f64, since: f64, need: f64) -> bool {
        self.tokens + allowed * since >= need
    }

    /// The rate fell to `load` times the allowance (see `window::window`): what the budget
    /// owes is forgotten, and it holds at least the credit random arrivals at that load
    /// need, as a budget that had run at that load would. A surge spends a budget down to
    /// nothing; without this the traffic left after it would wait for the refill.
    pub(crate) fn after_fall(&mut self, load: f64) {
        self.forgive_debt();
        self.tokens = self.tokens.max(poisson_credit(load));
    }

    /// Forgets what the budget owes, keeping its fraction of a request (its phase: clients
    /// forgiven in the same window must not all resume at the same point of their
    /// cadence); credit is kept.
    pub(crate) fn forgive_debt(&mut self) {
        if self.tokens < 0.0 {
            self.tokens = self.tokens.rem_euclid(1.0);
        }
    }

    /// Spends `n` requests at once (a batch admitted whole); the window that counts them
    /// must not spend them again.
    pub(crate) fn charge(&mut self, n: f64) {
        self.tokens -= n;
    }

    /// The drop ratio for the next window of `window_secs` at allowance `allowed` when it is
    /// expected to offer `expected` requests per second: it admits what the budget and the
    /// window's refill hold in whole requests, all of it when that covers the expected
    /// requests (at least one), nothing while it holds less than one request, unless the
    /// window may owe the rest of one (`owed`: what it may owe beyond the budget, under the
    /// limit an interval's allowance, see `Book::room`; a sparse caller whose budget began
    /// with less than a request would otherwise drop its next requests under the limit). A
    /// burst larger than expected is held to what the budget holds by the bucket's room,
    /// first come first served (`decide::room`), not by this ratio: a ratio sized for the
    /// last bursts would drop most of a smaller one after a step down.
    pub(crate) fn ratio(&self, allowed: f64, window_secs: f64, expected: f64, owed: f64) -> f64 {
        let mut available = self.available(allowed, window_secs);
        if available < 1.0 {
            if available + owed.max(0.0) < 1.0 {
                return 1.0;
            }
            available = 1.0;
        }
        let want = (expected * window_secs).max(1.0);
        if want <= available {
            0.0
        } else {
            1.0 - available.floor() / want
        }
    }
}

/// A phase in `[0, 1)` for the budget of bucket `bucket` at client `client`: a hash with a
/// per-process random seed, so that clients (and restarts of one client) differ.
pub(crate) fn phase_of(client: &str, bucket: u32) -> f64 {
    use std::hash::BuildHasher;
    let h = foldhash::fast::RandomState::default().hash_one((client, bucket));
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: f64 = 0.05;

    /// Simulates a client at allowance `a` offering `offered[i]` requests in window `i`,
    /// admitting each request with probability `1 - ratio` by error diffusion (exact and
    /// deterministic); returns what it admitted, leaving out the first two seconds (the
    /// budget starts empty).
    fn run(a: f64, offered: &[u64], gap_secs: f64) -> u64 {
        let mut b = Budget::new();
        let (mut admitted_total, mut est, mut frac) = (0u64, 0.0f64, 0.0f64);
        let mut recent = std::collections::VecDeque::new();
        for (i, &n) in offered.iter().enumerate() {
            let r = b.ratio(a, W, est, 0.0);
            let mut admitted = 0;
            for _ in 0..n {
                frac += 1.0 - r;
                if frac >= 1.0 {
                    frac -= 1.0;
                    admitted += 1;
                }
            }
            if i >= 40 {
                admitted_total += admitted;
            }
            recent.push_back(admitted);
            if recent.len() > 80 {
                recent.pop_front();
            }
            b.settle(
                a,
                W,
                admitted,
                Budget::floor(a, 1.0, recent.iter().sum()),
                Budget::cap(a, W, gap_secs, 0.0),
            );
            est = crate::control::shape::estimate(est, n, W).0;
        }
        admitted_total
    }

    #[test]
    fn a_steady_caller_admits_its_allowance() {
        // 1,500 rps against 100: 20 s, 18 measured.
        let got = run(100.0, &[75; 400], 0.0);
        assert!((1790..=1810).contains(&got), "{got}");
    }

    #[test]
    fn a_few_requests_a_second_admit_the_allowance() {
        // 2 rps (one request every ten windows) against 0.5 rps: 42 s, 40 measured.
        let offered: Vec<u64> = (0..840).map(|i| u64::from(i % 10 == 0)).collect();
        let got = run(0.5, &offered, 0.45);
        assert!(
            (19..=21).contains(&got),
            "admitted {got} of 80 where 20 were due"
        );
        // Half a request a second against 0.125: 82 s, 80 measured.
        let offered: Vec<u64> = (0..1640).map(|i| u64::from(i % 40 == 0)).collect();
        let got = run(0.125, &offered, 1.95);
        assert!(
            (9..=11).contains(&got),
            "admitted {got} of 40 where 10 were due"
        );
    }

    #[test]
    fn bursts_admit_the_allowance_over_the_seconds() {
        // 4,000 requests in three windows every second against 2,000 rps: 12 s, 10 measured.
        let second: Vec<u64> = [1334, 1333, 1333]
            .into_iter()
            .chain(std::iter::repeat_n(0, 17))
            .collect();
        let offered: Vec<u64> = second.iter().copied().cycle().take(240).collect();
        let got = run(2000.0, &offered, 0.85);
        assert!(
            (19_000..=21_000).contains(&got),
            "admitted {got} where 20,000 were due"
        );
    }

    #[test]
    fn a_batch_is_paid_back_in_full() {
        // One call of 5,000 hits a second against 2,000 rps: 12 s, 10 measured.
        let offered: Vec<u64> = (0..240)
            .map(|i| if i % 20 == 0 { 5000 } else { 0 })
            .collect();
        let got = run(2000.0, &offered, 0.95);
        assert!(
            (15_000..=25_000).contains(&got),
            "admitted {got} where 20,000 were due"
        );
    }

    #[test]
    fn phases_spread_clients_over_the_cadence() {
        let phases: Vec<f64> = (0..1000).map(|i| phase_of(&format!("c{i}"), 3)).collect();
        assert!(phases.iter().all(|p| (0.0..1.0).contains(p)));
        for q in 0..4 {
            let lo = f64::from(q) / 4.0;
            let n = phases
                .iter()
                .filter(|p| (lo..lo + 0.25).contains(*p))
                .count();
            assert!((200..=300).contains(&n), "quarter {q}: {n} of 1000");
        }
        let b = Budget::starting_at(1.75);
        assert!((b.tokens() - 0.75).abs() < 1e-12);
    }

    #[test]
    fn a_resumed_budget_holds_its_refill_up_to_one_request_past_its_phase() {
        for (refilled, tokens) in [(0.0, 0.3), (0.5, 0.8), (1.0, 1.3), (40.0, 1.3)] {
            let b = Budget::resuming(0.3, refilled);
            assert!((b.tokens() - tokens).abs() < 1e-12, "{refilled}: {b:?}");
        }
        assert!((Budget::resuming(0.3, f64::INFINITY).tokens() - 1.3).abs() < 1e-12);
        assert!((Budget::resuming(0.3, -2.0).tokens() - 0.3).abs() < 1e-12);
        // A caller under its allowance is admitted at its next request: the allowance came
        // between two requests `gap` apart, `since` after the first.
        let (allowed, gap) = (2.0, 0.6);
        for phase in [0.0, 0.5, 0.99] {
            for since in [0.01, 0.3, 0.59] {
                let b = Budget::resuming(phase, allowed * since);
                assert!(b.covers(allowed, gap - since, 1.0), "{phase} {since}");
            }
        }
    }

    #[test]
    fn credit_and_overdraft_are_bounded() {
        let mut b = Budget::new();
        for _ in 0..100 {
            b.settle(100.0, W, 0, -100.0, Budget::cap(100.0, W, 0.0, 0.0));
        }
        assert!((b.tokens() - 20.0).abs() < 1e-9, "four windows' credit");
        let mut phased = Budget::starting_at(0.3);
        for _ in 0..100 {
            phased.settle(100.0, W, 0, -100.0, Budget::cap(100.0, W, 0.0, 0.0));
        }
        assert!(
            (phased.tokens() - 20.3).abs() < 1e-9,
            "the cap and the budget's phase: {}",
            phased.tokens()
        );
        assert_eq!(b.ratio(100.0, W, 100.0, 0.0), 0.0);
        assert!((b.ratio(100.0, W, 1000.0, 0.0) - 0.5).abs() < 1e-9);
        let mut part = Budget::new();
        part.settle(1.0, W, 0, -1.0, 1.0);
        assert_eq!(
            part.ratio(1.0, W, 0.1, 0.0),
            1.0,
            "a tenth of a request waits for the rest"
        );
        assert_eq!(
            part.ratio(1.0, W, 0.1, 1.0),
            0.0,
            "under the limit the window may owe the rest of one"
        );
        assert_eq!(
            part.ratio(1.0, W, 0.1, 0.5),
            1.0,
            "but no more than it may owe"
        );
        for _ in 0..18 {
            part.settle(1.0, W, 0, -1.0, 1.0);
        }
        assert_eq!(
            part.ratio(1.0, W, 0.1, 0.0),
            0.0,
            "a whole request is admitted"
        );
        assert!(
            (part.ratio(1.0, W, 80.0, 0.0) - 0.75).abs() < 1e-9,
            "one request of a window expected to hold four"
        );
        b.settle(100.0, W, 10_000, Budget::floor(100.0, 1.0, 500), 20.0);
        assert_eq!(b.tokens(), -500.0, "owes at most what it admitted recently");
        assert_eq!(b.ratio(100.0, W, 1000.0, 0.0), 1.0);
        b.settle(100.0, W, 0, Budget::floor(100.0, 1.0, 0), 20.0);
        assert_eq!(b.tokens(), -495.0, "a debt is paid back, not forgiven");
    }

    /// The share a budget at allowance `a` drops of Poisson arrivals at `rho * a`, with its
    /// cap for random arrivals, over `seeds` runs of `secs` seconds (each request admitted
    /// by error diffusion at the window's ratio).
    fn poisson_dropped(a: f64, rho: f64, seeds: u64, secs: usize) -> f64 {
        let (mut offered, mut dropped) = (0u64, 0u64);
        for seed in 0..seeds {
            let mut rng = crate::sim::Rng::new(seed);
            let mut b = Budget::starting_at(rng.unit());
            let mut frac = rng.unit();
            let cap = Budget::cap(a, W, 0.0, poisson_credit(rho));
            for _ in 0..(secs as f64 / W) as usize {
                let n = rng.poisson(rho * a * W);
                let r = b.ratio(a, W, rho * a, 0.0);
                let mut admitted = 0;
                for _ in 0..n {
                    frac += 1.0 - r;
                    if frac >= 1.0 {
                        frac -= 1.0;
                        admitted += 1;
                    }
                }
                offered += n;
                dropped += n - admitted;
                b.settle(a, W, admitted, Budget::floor(a, 1.0, 0), cap);
            }
        }
        dropped as f64 / offered.max(1) as f64
    }

    #[test]
    fn random_arrivals_under_the_allowance_are_dropped_at_most_the_planned_share() {
        for a in [0.5, 5.0, 50.0] {
            for rho in [0.3, 0.5, 0.8, 0.95] {
                let secs = (10_000.0_f64 / (rho * a)).max(200.0) as usize;
                let share = poisson_dropped(a, rho, 10, secs);
                eprintln!(
                    "allowance {a} rps, offered {rho} of it: credit {:.1}, dropped {:.4} %",
                    poisson_credit(rho),
                    100.0 * share
                );
                assert!(
                    share <= 2.0 * DROP_SHARE,
                    "allowance {a}, load {rho}: dropped {share:.4}"
                );
            }
        }
    }

    #[test]
    fn the_credit_random_arrivals_need_grows_with_the_load() {
        let c: Vec<f64> = [0.0, 0.2, 0.4, 0.8, 0.95, 2.0]
            .iter()
            .map(|r| poisson_credit(*r))
            .collect();
        assert_eq!(c[0], 1.0);
        assert!(c.windows(2).all(|w| w[0] <= w[1]), "{c:?}");
        assert!(
            (1.5..3.0).contains(&c[1]) && (9.0..13.0).contains(&c[3]),
            "{c:?}"
        );
        assert_eq!(c[4], c[5], "planned for at most 0.95");
    }
}
