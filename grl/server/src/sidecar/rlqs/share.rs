//! What each Envoy bucket of a rate limit quota stream may admit: a GRL bucket's allowance
//! split over the Envoy buckets that fall in it ([`shares`]), whether a share moved enough
//! to be pushed ([`moved`]), and the strategy Envoy's filter enforces for it ([`strategy`]).

use std::time::Duration;

use grl_client::Admission;

use super::super::envoy::types::{RateLimitStrategy, TokenBucket, rate_limit_strategy};
use super::super::metrics::RlqsStrategy;

/// A relative move of a share smaller than this is not pushed (it goes with the next
/// answer or refresh).
pub const PUSH_CHANGE: f64 = 0.05;

/// The fill interval of every token bucket sent. Envoy refills continuously at
/// `tokens_per_fill / fill_interval` and rebuilds a bucket only when `max_tokens` or
/// `tokens_per_fill` change (it compares the interval's nanoseconds only), so one long
/// interval makes every rate exact and every change visible.
const FILL_INTERVAL: Duration = Duration::from_secs(3600);

/// What one Envoy bucket may admit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Share {
    /// Everything.
    All,
    /// At most this many requests per second.
    PerSecond(f64),
}

/// Splits one GRL bucket's `admission` over Envoy buckets offering `offered` requests per
/// second each, never more than the admission in all: while their total is under it, each
/// may admit its own rate plus an even part of the unused rest (an idle or new bucket keeps
/// room to start); above it, the admission is split by offered rate, each bucket weighing
/// at least a tenth of an even share (one that just started is not refused outright). A
/// ratio (tiers that send no rate) applies to each bucket's own offered rate.
pub fn shares(admission: Admission, offered: &[f64]) -> Vec<Share> {
    let total: f64 = offered.iter().sum();
    let floor = total / (10.0 * offered.len() as f64);
    let weights: f64 = offered.iter().map(|o| o.max(floor)).sum();
    offered
        .iter()
        .map(|&o| match admission {
            Admission::Unlimited => Share::All,
            Admission::PerSecond(a) if total <= a => {
                Share::PerSecond(o + (a - total) / offered.len() as f64)
            }
            Admission::PerSecond(a) => Share::PerSecond(a * o.max(floor) / weights),
            Admission::Ratio(r) if r >= 1.0 => Share::PerSecond(0.0),
            Admission::Ratio(r) if o > 0.0 => Share::PerSecond(o * (1.0 - r)),
            Admission::Ratio(_) => Share::All,
        })
        .collect()
}

/// Whether a share moved enough to push a new assignment.
pub(super) fn moved(before: Share, now: Share) -> bool {
    match (before, now) {
        (Share::All, Share::All) => false,
        (Share::PerSecond(a), Share::PerSecond(b)) => {
            (a - b).abs() > PUSH_CHANGE * a.abs().max(b.abs())
        }
        _ => true,
    }
}

/// The strategy Envoy's quota filter enforces for `share`: a blanket rule or a token
/// bucket (Envoy reads the fill interval in whole seconds).
pub fn strategy(share: Share) -> (RateLimitStrategy, RlqsStrategy) {
    use rate_limit_strategy::{BlanketRule, Strategy};
    let bucket = |max: u32, per_fill: u32, every: Duration| {
        Strategy::TokenBucket(TokenBucket {
            max_tokens: max,
            tokens_per_fill: Some(per_fill),
            fill_interval: prost_types::Duration::try_from(every).ok(),
        })
    };
    let (strategy, kind) = match share {
        Share::All => (
            Strategy::BlanketRule(BlanketRule::AllowAll as i32),
            RlqsStrategy::AllowAll,
        ),
        Share::PerSecond(a) if (a * FILL_INTERVAL.as_secs_f64()).round() >= 1.0 => {
            let cap = f64::from(u32::MAX);
            let per_fill = (a * FILL_INTERVAL.as_secs_f64()).round();
            // Beyond u32 tokens an hour (over a million a second), a one-second interval.
            let (per_fill, every) = if per_fill <= cap {
                (per_fill, FILL_INTERVAL)
            } else {
                (a.round().min(cap), Duration::from_secs(1))
            };
            (
                bucket(a.ceil().clamp(1.0, cap) as u32, per_fill as u32, every),
                RlqsStrategy::TokenBucket,
            )
        }
        Share::PerSecond(_) => (
            Strategy::BlanketRule(BlanketRule::DenyAll as i32),
            RlqsStrategy::DenyAll,
        ),
    };
    (
        RateLimitStrategy {
            strategy: Some(strategy),
        },
        kind,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rate_limit_strategy::{BlanketRule, Strategy};

    #[test]
    fn shares_map_to_strategies_envoy_enforces() {
        let s = |share| strategy(share).0.strategy.unwrap();
        let bucket = |max, per_fill, secs| {
            Strategy::TokenBucket(TokenBucket {
                max_tokens: max,
                tokens_per_fill: Some(per_fill),
                fill_interval: Some(prost_types::Duration {
                    seconds: secs,
                    nanos: 0,
                }),
            })
        };
        assert_eq!(
            s(Share::All),
            Strategy::BlanketRule(BlanketRule::AllowAll as i32)
        );
        assert_eq!(s(Share::PerSecond(250.4)), bucket(251, 901_440, 3600));
        assert_eq!(s(Share::PerSecond(20.0)), bucket(20, 72_000, 3600));
        assert_eq!(s(Share::PerSecond(0.4)), bucket(1, 1440, 3600));
        assert_eq!(s(Share::PerSecond(0.1)), bucket(1, 360, 3600));
        assert_eq!(s(Share::PerSecond(2e6)), bucket(2_000_000, 2_000_000, 1));
        assert_eq!(
            s(Share::PerSecond(0.0001)),
            Strategy::BlanketRule(BlanketRule::DenyAll as i32)
        );
        assert_eq!(
            s(Share::PerSecond(0.0)),
            Strategy::BlanketRule(BlanketRule::DenyAll as i32)
        );
    }

    #[test]
    fn a_grl_buckets_allowance_is_split_by_offered_rate() {
        let per = |v: Vec<Share>| -> Vec<f64> {
            v.into_iter()
                .map(|s| match s {
                    Share::PerSecond(a) => a,
                    Share::All => f64::INFINITY,
                })
                .collect()
        };
        assert_eq!(
            per(shares(Admission::PerSecond(20.0), &[30.0, 10.0])),
            [15.0, 5.0]
        );
        // Under the allowance: own rate plus an even part of the unused rest.
        assert_eq!(
            per(shares(Admission::PerSecond(20.0), &[0.0, 0.0])),
            [10.0, 10.0]
        );
        assert_eq!(
            per(shares(Admission::PerSecond(20.0), &[12.0, 0.0])),
            [16.0, 4.0]
        );
        // Over it: an idle bucket still weighs a tenth of an even share.
        assert_eq!(
            per(shares(Admission::PerSecond(21.0), &[200.0, 0.0])),
            [20.0, 1.0]
        );
        assert_eq!(
            per(shares(Admission::Ratio(0.75), &[200.0, 0.0])),
            [50.0, f64::INFINITY]
        );
        assert_eq!(per(shares(Admission::Ratio(1.0), &[5.0])), [0.0]);
        assert_eq!(
            shares(Admission::Unlimited, &[1.0, 2.0]),
            [Share::All, Share::All]
        );
    }

    #[test]
    fn small_moves_are_not_pushed() {
        assert!(!moved(Share::PerSecond(100.0), Share::PerSecond(103.0)));
        assert!(moved(Share::PerSecond(100.0), Share::PerSecond(110.0)));
        assert!(moved(Share::All, Share::PerSecond(110.0)));
        assert!(!moved(Share::All, Share::All));
    }
}
