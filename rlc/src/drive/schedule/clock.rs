//! The clock the serve loop reads and sleeps on: the system's wall clock in production, or
//! one that follows tokio's (pausable) time so tests run weeks of schedule in milliseconds.

use std::future::Future;

use chrono::{DateTime, Utc};

/// Wall-clock time and sleeping until a wall-clock instant.
pub trait Clock {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;

    /// Completes once [`Clock::now`] has reached `at` (at once if it already has).
    fn sleep_until(&self, at: DateTime<Utc>) -> impl Future<Output = ()> + Send;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

/// The longest single sleep of [`SystemClock`]: it then looks at the wall clock again, so a
/// clock that was stepped (NTP, a suspended machine) delays a run by at most this much.
const SYSTEM_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    #[allow(clippy::manual_async_fn)] // the trait's `+ Send` bound is kept visible
    fn sleep_until(&self, at: DateTime<Utc>) -> impl Future<Output = ()> + Send {
        async move {
            while let Ok(left) = (at - Utc::now()).to_std() {
                if left.is_zero() {
                    break;
                }
                tokio::time::sleep(left.min(SYSTEM_RECHECK)).await;
            }
        }
    }
}

/// A clock that reads tokio's time from a given starting instant: with tokio's time paused
/// (`#[tokio::test(start_paused = true)]`) sleeps end as soon as nothing else can run, so a
/// test sees the same loop fire at the same wall times, without waiting for them.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
    start: DateTime<Utc>,
}

impl TokioClock {
    /// A clock that reads `start` now and moves with tokio's time.
    pub fn starting_at(start: DateTime<Utc>) -> Self {
        Self {
            origin: tokio::time::Instant::now(),
            start,
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = chrono::Duration::from_std(self.origin.elapsed()).unwrap_or_default();
        self.start + elapsed
    }

    fn sleep_until(&self, at: DateTime<Utc>) -> impl Future<Output = ()> + Send {
        let after = (at - self.start).to_std().unwrap_or_default();
        tokio::time::sleep_until(self.origin + after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_sleeps_to_the_wall_time_it_was_asked_for() {
        let start = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
        let clock = TokioClock::starting_at(start);
        assert_eq!(clock.now(), start);
        let later = start + chrono::Duration::days(9);
        clock.sleep_until(later).await;
        assert_eq!(clock.now(), later);
        clock.sleep_until(start).await;
        assert_eq!(clock.now(), later, "a past instant does not wait");
    }

    #[tokio::test]
    async fn system_clock_returns_at_once_for_a_past_instant_and_after_a_near_one() {
        let clock = SystemClock;
        clock
            .sleep_until(Utc::now() - chrono::Duration::hours(1))
            .await;
        let at = Utc::now() + chrono::Duration::milliseconds(50);
        clock.sleep_until(at).await;
        assert!(clock.now() >= at, "woke at {} before {at}", clock.now());
    }
}
