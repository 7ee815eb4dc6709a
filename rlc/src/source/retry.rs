//! Retrying transient failures with jittered exponential backoff.

use rand::Rng;
use std::future::Future;
use std::time::Duration;

/// How often and how patiently to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Retries after the first attempt (total attempts = `retries + 1`).
    pub retries: u32,
    /// Delay before the first retry; doubles after each retry.
    pub base: Duration,
    /// Upper bound on one delay.
    pub max: Duration,
}

impl Backoff {
    /// The delay before retry number `retry` (0-based): `base · 2^retry` capped at `max`,
    /// then "equal jitter": uniformly in `[d/2, d]`, so that many clients retrying together
    /// spread out.
    pub fn delay(&self, retry: u32, rng: &mut impl Rng) -> Duration {
        let d = self
            .base
            .saturating_mul(1u32 << retry.min(16))
            .min(self.max);
        let half = d / 2;
        half + d.saturating_sub(half).mul_f64(rng.random::<f64>())
    }
}

/// Runs `op` until it succeeds, fails with an error `retryable` refuses, or the attempts run
/// out. Returns the last error with the number of attempts made.
pub async fn retry<T, E, F, Fut>(
    backoff: &Backoff,
    retryable: impl Fn(&E) -> bool,
    mut on_retry: impl FnMut(u32, &E, Duration),
    mut op: F,
) -> Result<T, (E, u32)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt <= backoff.retries && retryable(&e) => {
                let delay = backoff.delay(attempt - 1, &mut rand::rng());
                on_retry(attempt, &e, delay);
                tokio::time::sleep(delay).await;
            }
            Err(e) => return Err((e, attempt)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Backoff = Backoff {
        retries: 3,
        base: Duration::from_millis(100),
        max: Duration::from_millis(300),
    };
    /// Short delays for tests that really sleep.
    const FAST: Backoff = Backoff {
        retries: 3,
        base: Duration::from_millis(1),
        max: Duration::from_millis(2),
    };

    #[test]
    fn delay_doubles_with_jitter_and_is_capped() {
        let mut rng = rand::rng();
        for _ in 0..100 {
            let d0 = B.delay(0, &mut rng);
            assert!(
                d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100),
                "{d0:?}"
            );
            let d1 = B.delay(1, &mut rng);
            assert!(
                d1 >= Duration::from_millis(100) && d1 <= Duration::from_millis(200),
                "{d1:?}"
            );
            let d9 = B.delay(9, &mut rng);
            assert!(
                d9 >= Duration::from_millis(150) && d9 <= Duration::from_millis(300),
                "{d9:?}"
            );
        }
    }

    #[tokio::test]
    async fn gives_up_after_retries_and_reports_attempts() {
        let mut calls = 0;
        let r: Result<(), _> = retry(
            &FAST,
            |_: &&str| true,
            |_, _, _| {},
            || {
                calls += 1;
                async { Err("down") }
            },
        )
        .await;
        assert_eq!(r, Err(("down", 4)));
        assert_eq!(calls, 4);
    }

    #[tokio::test]
    async fn stops_at_a_permanent_error_and_succeeds_after_a_transient_one() {
        let r: Result<(), _> = retry(
            &FAST,
            |e: &&str| *e != "bad",
            |_, _, _| {},
            || async { Err("bad") },
        )
        .await;
        assert_eq!(r, Err(("bad", 1)));
        let mut calls = 0;
        let r = retry(
            &FAST,
            |_: &&str| true,
            |_, _, _| {},
            || {
                calls += 1;
                let c = calls;
                async move { if c < 3 { Err("flaky") } else { Ok(c) } }
            },
        )
        .await;
        assert_eq!(r, Ok(3));
    }
}
