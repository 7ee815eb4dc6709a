//! Usage decided elsewhere (an Envoy enforcing by itself reports what it let through and
//! refused, [`crate::Client::record`]): its rate per bucket, measured as a sliding sum of
//! the batches because it arrives in batches, and how the bucket's allowance is split
//! between it and this client's own decisions.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::Inner;
use crate::control::Control;
use crate::decide::buckets::BucketCell;

/// The recorded usage of one bucket.
#[derive(Debug, Default, Clone)]
pub(crate) struct Recorded {
    /// The cell's `recorded` count at the end of the last window.
    pub(crate) base: u64,
    /// Batches of the last `horizon`: when each arrived and its size.
    batches: VecDeque<(Instant, u64)>,
    /// How far back batches are summed: twice the span the last batch covered, and at
    /// least [`Inner::recorded_horizon`].
    horizon: Duration,
    /// Requests per second recorded over that horizon: a periodic batch keeps it steady.
    pub(crate) rate: f64,
}

impl Recorded {
    /// Forgets batches older than the horizon and sums the rest.
    pub(crate) fn since(&mut self, now: Instant, least: Duration) {
        let horizon = self.horizon.max(least);
        while self
            .batches
            .front()
            .is_some_and(|(t, _)| now - *t >= horizon)
        {
            self.batches.pop_front();
        }
        let sum: u64 = self.batches.iter().map(|(_, n)| n).sum();
        self.rate = sum as f64 / horizon.as_secs_f64();
    }

    /// Counts a batch of `n` requests over `span` recorded at `now`: a data plane that
    /// reports every 5 s is summed over 10 s, so that its rate does not fall to 0 between
    /// its reports.
    fn add(&mut self, n: u64, span: Duration, now: Instant, least: Duration) {
        self.batches.push_back((now, n));
        self.horizon = (span * 2).max(least);
        self.since(now, least);
    }

    /// The part of allowance `a` for this client's own decisions when they offer `own`
    /// requests per second: all of it, or, when usage decided elsewhere is recorded in the
    /// same bucket, the part in proportion to `own` (the rest is the recording data
    /// plane's: [`Recorded::share`]).
    pub(crate) fn local_share(&self, a: f64, own: f64) -> f64 {
        if self.rate > 0.0 {
            a * own / (own + self.rate)
        } else {
            a
        }
    }

    /// The part of allowance `a` for usage decided elsewhere: in proportion to the recorded
    /// rate, or all of it while none is measured yet (a data plane that just started).
    pub(crate) fn share(&self, a: f64, own: f64) -> f64 {
        if self.rate > 0.0 {
            a * self.rate / (own + self.rate)
        } else {
            a
        }
    }
}

/// Adds `n` recorded requests over `span` to cell `id`'s bookkeeping and has `count` add
/// them to a pair or the overflow, under the control lock, so that a window sees both or
/// neither. `count` gets the cell and, in a shadow bucket, the share its allowance would
/// have refused of the data plane's bucket-wide recorded rate.
pub(crate) fn record_counts(
    inner: &Inner,
    id: u32,
    n: u64,
    span: Duration,
    now: Instant,
    count: impl FnOnce(&BucketCell, Option<f64>),
) {
    let least = inner.recorded_horizon();
    let mut c = inner.lock();
    let Control {
        books, registry, ..
    } = &mut *c;
    let Some(cell) = registry.cells.get(id as usize) else {
        return;
    };
    let Some(b) = books.get_mut(id as usize) else {
        return;
    };
    b.recorded.add(n, span, now, least);
    let own = b.shape.expected();
    let shadow = cell
        .shadow
        .load(Ordering::Relaxed)
        .then(|| match (b.allowed, b.expires) {
            (Some(a), Some(t)) if now < t => {
                crate::control::local_ratio(b.recorded.share(a, own), b.recorded.rate)
            }
            _ => cell.ratio(),
        });
    count(cell, shadow);
    cell.recorded.fetch_add(n, Ordering::Relaxed);
}
