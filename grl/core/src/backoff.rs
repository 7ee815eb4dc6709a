//! The one backoff of the project: exponential from a base delay, capped, with "equal jitter"
//! (each delay drawn uniformly in its upper half), so that many clients that lost the same
//! server do not come back in step. Used by the client's control stream, the tiers' uplink to
//! their parent and the configurator's metrics source.

use std::time::Duration;

use rand::Rng;

/// Why a backoff's settings were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackoffError {
    /// The base delay must be above zero.
    #[error("backoff base delay must be greater than zero")]
    ZeroBase,
    /// The cap must not be below the base.
    #[error("backoff cap {max:?} is below its base delay {base:?}")]
    CapBelowBase {
        /// The base delay given.
        base: Duration,
        /// The cap given.
        max: Duration,
    },
}

/// Validated backoff settings: delay `attempt` (0-based) is `base · 2^attempt`, capped at
/// `max`, then drawn uniformly in `[d/2, d]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Backoff {
    /// Backoff from `base` doubling up to `max`; refuses a zero base or a cap below it.
    pub fn new(base: Duration, max: Duration) -> Result<Self, BackoffError> {
        if base.is_zero() {
            return Err(BackoffError::ZeroBase);
        }
        if max < base {
            return Err(BackoffError::CapBelowBase { base, max });
        }
        Ok(Self { base, max })
    }

    /// The first delay before jitter.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The largest delay.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The delay before attempt `attempt` (0-based), drawn with `rng`.
    pub fn delay_with(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let d = self
            .base
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.max);
        let half = d / 2;
        half + d.saturating_sub(half).mul_f64(rng.random::<f64>())
    }

    /// The delay before attempt `attempt` (0-based), drawn from the thread's generator.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.delay_with(attempt, &mut rand::rng())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn delays_double_stay_in_their_upper_half_and_are_capped() {
        let b = Backoff::new(100 * MS, 2000 * MS).unwrap();
        for attempt in 0..40 {
            let full = (100 * MS * 2u32.pow(attempt.min(20))).min(2000 * MS);
            for _ in 0..200 {
                let d = b.delay(attempt);
                assert!(
                    d >= full / 2 && d <= full,
                    "attempt {attempt}: {d:?} vs {full:?}"
                );
            }
        }
    }

    #[test]
    fn delays_are_jittered() {
        let b = Backoff::new(100 * MS, 2000 * MS).unwrap();
        let draws: std::collections::BTreeSet<_> = (0..50).map(|_| b.delay(3)).collect();
        assert!(draws.len() > 40, "{draws:?}");
    }

    #[test]
    fn bad_settings_are_refused() {
        assert_eq!(
            Backoff::new(Duration::ZERO, MS),
            Err(BackoffError::ZeroBase)
        );
        assert_eq!(
            Backoff::new(2 * MS, MS),
            Err(BackoffError::CapBelowBase {
                base: 2 * MS,
                max: MS
            })
        );
    }
}
