//! The serve loop's timing: waits for the next schedule slot on a [`Clock`], starts one run
//! at a time (a slot or a person's commit), and after a run that outlasted later slots skips
//! them, counting and logging each, so the next run starts at the first slot after the
//! previous run ended.

use std::fmt;
use std::future::Future;

use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use tracing::{info, warn};

use super::Schedule;
use super::clock::Clock;
use crate::drive::serve_metrics::RlcMetrics;

/// What started a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// The schedule slot of this time.
    Schedule(DateTime<Utc>),
    /// A person's commit to `services/` (its id).
    Commit(String),
}

impl Trigger {
    /// The run's trigger as run history records it: `schedule` or `commit <id>`.
    pub fn label(&self) -> String {
        match self {
            Trigger::Schedule(_) => "schedule".into(),
            Trigger::Commit(id) => format!("commit {id}"),
        }
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Schedule(at) => write!(f, "schedule {}", at.to_rfc3339()),
            Trigger::Commit(id) => write!(f, "commit {id}"),
        }
    }
}

/// Slots counted one by one after a run before the rest are skipped in one step (a clock
/// stepped by years must not count minutes for long).
const MAX_COUNTED_SKIPS: u64 = 100_000;

/// The next slot of a schedule, on a clock.
#[derive(Debug)]
pub struct Ticker<C> {
    schedule: Schedule,
    clock: C,
    next: Option<DateTime<Utc>>,
}

impl<C: Clock> Ticker<C> {
    /// A ticker whose first slot is the first schedule time after the clock's now.
    pub fn new(schedule: Schedule, clock: C) -> Self {
        let next = schedule.next_after(clock.now());
        Self {
            schedule,
            clock,
            next,
        }
    }

    /// The slot waited for next (`None`: the schedule has no more times).
    pub fn next_run(&self) -> Option<DateTime<Utc>> {
        self.next
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Waits for the next slot and returns its time; never completes when there is none.
    /// Cancel-safe: dropped before the slot, the slot stays next.
    pub async fn wait(&mut self) -> DateTime<Utc> {
        let Some(slot) = self.next else {
            return std::future::pending().await;
        };
        self.clock.sleep_until(slot).await;
        self.next = self.schedule.next_after(slot);
        slot
    }

    /// Called when a run ended: slots that came while it was going are skipped (the next slot
    /// is the first after now). Returns how many were skipped.
    pub fn run_ended(&mut self) -> u64 {
        let now = self.clock.now();
        let mut skipped = 0;
        while let Some(slot) = self.next
            && slot <= now
        {
            skipped += 1;
            self.next = if skipped < MAX_COUNTED_SKIPS {
                self.schedule.next_after(slot)
            } else {
                self.schedule.next_after(now)
            };
        }
        skipped
    }
}

/// The serve loop: runs `run` for each schedule slot and each commit id from `commits`, one
/// run at a time, until `stop` completes (checked between runs). Keeps
/// `rlc_next_run_timestamp_seconds` and `rlc_schedule_skipped_total` in `metrics`.
pub async fn drive<C, S, F, Fut>(
    ticker: &mut Ticker<C>,
    mut commits: S,
    stop: impl Future<Output = ()>,
    metrics: &RlcMetrics,
    mut run: F,
) where
    C: Clock,
    S: Stream<Item = String> + Unpin,
    F: FnMut(Trigger) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut stop = std::pin::pin!(stop);
    loop {
        metrics.set_next_run(ticker.next_run());
        let trigger = tokio::select! {
            slot = ticker.wait() => Trigger::Schedule(slot),
            Some(id) = commits.next() => Trigger::Commit(id),
            () = &mut stop => return,
        };
        info!(trigger = %trigger, "run triggered");
        run(trigger).await;
        let skipped = ticker.run_ended();
        if skipped > 0 {
            metrics.schedule_skipped.inc_by(skipped);
            warn!(
                skipped,
                next = ?ticker.next_run().map(|t| t.to_rfc3339()),
                "schedule slots passed while a run was going; skipped"
            );
        }
    }
}

#[cfg(test)]
mod tests;
