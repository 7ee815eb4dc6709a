//! Log rate limiting: at most one warning per period for a kind of event a peer can repeat at
//! will (a refused report, a refused call), so that a hostile peer cannot fill the logs. The
//! tiers' report admission and the sidecar's RLQS server use it.

/// At most one refusal warning per period, so that a hostile child cannot fill the logs: the
/// counters still count every refusal, and the next warning says how many were not logged.
#[derive(Debug)]
pub struct RefusalLog {
    period: std::time::Duration,
    last: Option<tokio::time::Instant>,
    unlogged: u64,
}

impl RefusalLog {
    /// A log that lets one warning through per `period`.
    pub fn new(period: std::time::Duration) -> Self {
        Self {
            period,
            last: None,
            unlogged: 0,
        }
    }

    /// Whether a refusal at `now` is logged; `Some(n)` with the refusals not logged since the
    /// previous warning, `None` when this one is not logged either.
    pub fn admit(&mut self, now: tokio::time::Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < self.period)
        {
            self.unlogged += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_warnings_are_one_a_period_and_say_how_many_were_not_logged() {
        let mut log = RefusalLog::new(std::time::Duration::from_secs(1));
        let t0 = tokio::time::Instant::now();
        assert_eq!(log.admit(t0), Some(0));
        for i in 1..=99 {
            assert_eq!(
                log.admit(t0 + std::time::Duration::from_millis(i * 10)),
                None
            );
        }
        assert_eq!(log.admit(t0 + std::time::Duration::from_secs(1)), Some(99));
        assert_eq!(log.admit(t0 + std::time::Duration::from_millis(1500)), None);
        assert_eq!(log.admit(t0 + std::time::Duration::from_secs(3)), Some(1));
    }
}
