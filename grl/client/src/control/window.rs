//! Following the load between instructions: every window the control task counts what
//! each bucket was offered and admitted, feeds it to the bucket's [`Shape`] and
//! [`Budget`], rewrites the bucket's threshold and refills its room (the ceiling of the
//! next window, `decide::room`) from what the budget holds, and sends an urgent report
//! when the shape changed for real.
//!
//! [`Shape`]: crate::control::shape::Shape
//! [`Budget`]: crate::control::budget::Budget

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use grl_core::proto;

use crate::control::budget::Budget;
use crate::control::shape::Change;
use crate::control::{Control, report};
use crate::decide::buckets::threshold;
use crate::decide::table::DECISIONS;
use crate::{Decision, Inner};

/// Ends a window at `now`: counts each active bucket's window into its shape and
/// budget, recomputes the threshold of every bucket that has an allowance, and returns
/// an urgent report (every bucket's rows) when a bucket's rate rose or fell for real
/// (see [`Shape::push`](crate::control::shape::Shape::push)).
pub(crate) fn window(inner: &Inner, now: Instant) -> Option<proto::Report> {
    let mut c = inner.lock();
    inner.collect(&mut c);
    let secs = c.window_at.map_or(0.0, |t| (now - t).as_secs_f64());
    c.window_at = Some(now);
    let (w, interval) = (inner.window_secs(), inner.cfg.interval);
    let horizon = inner.recorded_horizon();
    let mut urgent = false;
    let mut changed = false;
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
        let cell = &registry.cells[id as usize];
        let recorded = cell.recorded.load(Ordering::Relaxed);
        let batch = recorded - b.recorded.base;
        b.recorded.base = recorded;
        if secs <= 0.0 {
            continue;
        }
        b.recorded.since(now, horizon);
        let offered = delta.iter().sum::<u64>().saturating_sub(batch);
        let admitted = delta[Decision::Allow as usize].saturating_sub(batch);
        let charged = b.batch_charged.min(admitted);
        b.batch_charged -= charged;
        b.largest_batch = b
            .largest_batch
            .map(|(age, n)| (age + 1, n))
            .filter(|(age, _)| *age <= b.shape.windows());
        let was_idle = b.shape.offered_in_ring() == 0;
        let young = b.shape.is_young();
        // A start long past is forgotten, so that a later rise does not extend it.
        if b.started_until.is_some_and(|t| t <= now) {
            b.started_until = None;
        }
        let change = b.shape.push(offered, admitted, secs);
        if offered > 0 || change != Change::None {
            tracing::trace!(client = %inner.cfg.id, cell = id, offered, admitted, ?change, allowed = ?b.allowed, expected = b.shape.expected(), budget = ?b.budget, started = b.started_until.is_some(), "window");
        }
        // A bucket new to this client (it has held it for less than the ring) has no
        // allowance and admits at the group's ratio until the tiers hear of its traffic, so
        // its first request is news at once, even alone. Once the ring is full, one request
        // after a silence is what a sparse caller sends anyway: a report at it would end
        // its horizon at an arrival and over-state the rate (a hundred callers at one
        // request in 25 s were told as 1.13-1.23x their rate), and the budget or the
        // group's ratio holds it.
        let news_without_allowance =
            change == Change::None && offered > 0 && was_idle && young && b.allowed.is_none();
        let told = if news_without_allowance {
            Change::Start
        } else {
            change
        };
        if let Some(i) = told.index() {
            inner.rate_changes[i].fetch_add(1, Ordering::Relaxed);
        }
        urgent |= news_without_allowance;
        match change {
            Change::None => {}
            Change::Start => {
                urgent = true;
                b.started_until = Some(now + interval);
            }
            Change::Rise | Change::Learned => {
                urgent = true;
                if was_idle {
                    // The first requests of a new bucket: a start too (its first window
                    // holds part of a step, so its rate says little of it).
                    b.started_until = Some(now + interval);
                } else if let Some(t) = b.started_until {
                    // Instructions the tiers computed from the start's rate may still
                    // come for a tick and a round trip after they hear the rise. (Only
                    // a start still holding: one long past, extended, made a caller
                    // rising alone seconds after its start wait half an interval for the
                    // room the tiers already gave it.)
                    b.started_until = Some(t.max(now + interval / 2));
                }
            }
            Change::Refined => urgent = true,
            Change::Fall => {
                urgent = true;
                b.started_until = None;
                if let Some(a) = b.allowed {
                    // The tiers re-share from a mix of fresh and interval-old rates
                    // for a while: keep at least this allowance meanwhile.
                    b.hold = Some((now + interval, a));
                    // What the surge over-admitted is not paid back by the traffic
                    // that is left once it is under the allowance: that would drop
                    // requests of a caller back under its limit.
                    let share = b.local_share(a);
                    if b.shape.expected() < share {
                        b.budget.after_fall(b.shape.expected() / share);
                    }
                }
            }
        }
        if let (Some(a), Some(_)) = (b.allowed, b.expires) {
            let share = b.local_share(a);
            if !std::mem::take(&mut b.unsettled) {
                let floor =
                    Budget::floor(share, interval.as_secs_f64(), b.shape.admitted_in_ring());
                let batch = b.largest_batch.map_or(0.0, |(_, n)| n as f64);
                // The credit random arrivals need is sized by the rate over the last
                // half minute: the short-term estimate of a sparse caller jumps at each
                // request and decays to nothing between them.
                let credit = b.budget.noise_credit(b.shape.credit_rate() / share, secs);
                let cap = Budget::cap(share, w, b.shape.burst_gap_secs(), credit).max(batch);
                b.budget.settle(share, secs, admitted - charged, floor, cap);
                if was_idle {
                    // The first window of a bucket idle at this client was decided
                    // before anything said it would count anything: what it admitted
                    // beyond the budget is not owed (the next windows are decided on
                    // the budget; paying back a first burst would drop the caller
                    // for seconds after it).
                    b.budget.forgive_debt();
                }
            }
            let t = threshold(b.budget_ratio(share, w, interval.as_secs_f64()));
            changed |= cell.threshold.swap(t, Ordering::Relaxed) != t;
            changed |= cell
                .room
                .set(Some(b.room(share, w, interval.as_secs_f64())));
        } else {
            changed |= cell.room.set(None);
        }
    }
    if changed {
        inner.sync_pairs(&c.registry);
    }
    if !urgent {
        return None;
    }
    c.seq += 1;
    let mut report = report::report_with(inner, &c);
    report.urgent = true;
    Some(report)
}
