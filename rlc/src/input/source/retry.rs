//! Retrying transient failures, waiting between attempts with the project's one jittered
//! exponential [`Backoff`] (from `grl-core`).

use std::future::Future;
use std::time::Duration;

use grl_core::backoff::Backoff;

/// How often and how patiently to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Retry {
    /// Retries after the first attempt (total attempts = `retries + 1`).
    pub retries: u32,
    /// The waits between attempts.
    pub backoff: Backoff,
}

/// Runs `op` until it succeeds, fails with an error `retryable` refuses, or the attempts run
/// out. Returns the last error with the number of attempts made.
pub(super) async fn retry<T, E, F, Fut>(
    policy: &Retry,
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
            Err(e) if attempt <= policy.retries && retryable(&e) => {
                let delay = policy.backoff.delay(attempt - 1);
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

    /// Short delays for tests that really sleep.
    fn fast() -> Retry {
        Retry {
            retries: 3,
            backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(2)).unwrap(),
        }
    }

    #[tokio::test]
    async fn gives_up_after_retries_and_reports_attempts() {
        let mut calls = 0;
        let r: Result<(), _> = retry(
            &fast(),
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
            &fast(),
            |e: &&str| *e != "bad",
            |_, _, _| {},
            || async { Err("bad") },
        )
        .await;
        assert_eq!(r, Err(("bad", 1)));
        let mut calls = 0;
        let r = retry(
            &fast(),
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
