//! How long a tier's ticks take: a count, a sum and a histogram of durations, kept with
//! atomics by the ticking task and rendered on `/metrics` as
//! `grl_tier_tick_duration_seconds` (a Prometheus histogram), so that an operator (or the
//! region benchmark) reads a tick's p99 with `histogram_quantile` rather than a mean.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// Upper bounds of the duration buckets, in seconds: fine around a tick's budget (a
/// quarter of a 1 s interval, and 50 ms, the region target) and coarse beyond.
pub const BOUNDS_SECONDS: [f64; 16] = [
    0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5,
];

/// Ticks run, the time they held the node (every report and instruction waits for a tick:
/// on a busy tier this is what makes rounds late) and their durations by bucket.
#[derive(Debug, Default)]
pub struct TickTimes {
    /// Ticks run.
    pub ticks: AtomicU64,
    /// Microseconds they held the node's lock, in all.
    pub micros: AtomicU64,
    /// Ticks per bucket of [`BOUNDS_SECONDS`] (not cumulative), and one past the last.
    buckets: [AtomicU64; BOUNDS_SECONDS.len() + 1],
}

impl TickTimes {
    /// Counts one tick that took `d`.
    pub fn record(&self, d: Duration) {
        self.ticks.fetch_add(1, Relaxed);
        self.micros.fetch_add(d.as_micros() as u64, Relaxed);
        let s = d.as_secs_f64();
        let i = BOUNDS_SECONDS.partition_point(|&b| b < s);
        self.buckets[i].fetch_add(1, Relaxed);
    }

    /// What the counters hold now.
    pub fn snapshot(&self) -> TickDurations {
        TickDurations {
            count: self.ticks.load(Relaxed),
            seconds: self.micros.load(Relaxed) as f64 / 1e6,
            buckets: self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
        }
    }
}

/// A snapshot of [`TickTimes`], rendered as a Prometheus histogram.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TickDurations {
    /// Ticks run.
    pub count: u64,
    /// Seconds they took, in all.
    pub seconds: f64,
    /// Ticks per bucket of [`BOUNDS_SECONDS`] and one past the last (empty before any).
    pub buckets: Vec<u64>,
}

impl EncodeMetric for TickDurations {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let mut buckets: Vec<(f64, u64)> = BOUNDS_SECONDS
            .iter()
            .copied()
            .chain([f64::MAX])
            .zip(self.buckets.iter().copied().chain(std::iter::repeat(0)))
            .collect();
        if let Some(last) = buckets.last_mut() {
            last.0 = f64::INFINITY;
        }
        encoder.encode_histogram::<NoLabelSet>(self.seconds, self.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_lands_in_the_first_bucket_at_or_above_its_duration() {
        let t = TickTimes::default();
        for ms in [0, 1, 3, 50, 51, 4_000] {
            t.record(Duration::from_millis(ms));
        }
        let s = t.snapshot();
        assert_eq!(s.count, 6);
        assert!((s.seconds - 4.105).abs() < 1e-9, "{}", s.seconds);
        let at = |bound: f64| s.buckets[BOUNDS_SECONDS.iter().position(|&b| b == bound).unwrap()];
        assert_eq!(at(0.001), 2, "0 and 1 ms: {s:?}");
        assert_eq!(at(0.005), 1, "3 ms: {s:?}");
        assert_eq!(at(0.05), 1, "50 ms: {s:?}");
        assert_eq!(at(0.075), 1, "51 ms: {s:?}");
        assert_eq!(s.buckets[BOUNDS_SECONDS.len()], 1, "4 s: {s:?}");
        assert_eq!(s.buckets.iter().sum::<u64>(), 6);
    }
}
