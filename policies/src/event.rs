//! Planned events in numbers: how an event raises a limit for its window ([`Raise`]), and
//! what an event's limit would have done on past traffic ([`score_event`]).
//!
//! An event says what the traffic will be during its window: a multiple of the usual
//! (`multiplier`), or an absolute rate (`rps`). A limit is its policy's figure for the
//! expected peak with the policy's own headroom on top, so the event's limit keeps that
//! headroom: the limit times the multiplier, or the limit times `rps` over the expected peak
//! it was computed for.
//!
//! ```
//! use policies::event::Raise;
//! assert_eq!(Raise::Multiplier(3.0).limit(1250.0, Some(1000.0)), Some(3750.0));
//! assert_eq!(Raise::Rps(4000.0).limit(1250.0, Some(1000.0)), Some(5000.0));
//! assert_eq!(Raise::Rps(4000.0).limit(1250.0, None), None);
//! ```

use crate::policy::{Context, Policy};
use crate::series::Series;

/// How an event changes the expected traffic of what it affects.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Raise {
    /// The usual traffic times this factor (> 0).
    Multiplier(f64),
    /// This many requests per second (> 0).
    Rps(f64),
}

impl Raise {
    /// The factor this raise applies to a limit computed for an expected peak of `peak`
    /// (`None` for an absolute rate without a known peak).
    pub fn factor(self, peak: Option<f64>) -> Option<f64> {
        match self {
            Raise::Multiplier(m) => Some(m),
            Raise::Rps(rps) => peak.filter(|p| *p > 0.0).map(|p| rps / p),
        }
    }

    /// The limit for the event's window, from the `limit` in force outside it and the
    /// expected `peak` that limit was computed for.
    pub fn limit(self, limit: f64, peak: Option<f64>) -> Option<f64> {
        self.factor(peak).map(|f| limit * f)
    }

    /// `x3` or `4000 rps`, for people.
    pub fn describe(self) -> String {
        match self {
            Raise::Multiplier(m) => format!("x{m}"),
            Raise::Rps(rps) => format!("{rps} rps"),
        }
    }
}

/// The peak a policy's limit was computed for, from its evidence: the predicted peak when
/// it forecast one, else the observed peak (or quantile) of its window.
pub fn expected_peak(
    evidence: &std::collections::BTreeMap<String, serde_json::Value>,
) -> Option<f64> {
    ["predicted_peak", "observed_peak", "observed_quantile"]
        .iter()
        .find_map(|k| evidence.get(*k).and_then(serde_json::Value::as_f64))
}

/// What one event's limit would have done on the traffic of its window.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EventScore {
    /// The event's name.
    pub name: String,
    /// Its window's start (unix seconds, included).
    pub from: i64,
    /// Its window's end (unix seconds, excluded).
    pub until: i64,
    /// The policy's limit at `from`, from the history before it.
    pub limit: f64,
    /// The event's limit for the window (`limit` raised).
    pub event_limit: f64,
    /// The largest rate seen in the window.
    pub actual_peak: f64,
    /// Points of the window.
    pub points: usize,
    /// Points above `limit`.
    pub over_limit: usize,
    /// Points above `event_limit`.
    pub over_event_limit: usize,
}

/// Why an event could not be scored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventScoreError {
    /// The series holds no point inside the window.
    #[error("the series has no point between its start and end")]
    NoTraffic,
    /// The policy refused at the window's start.
    #[error("the policy refused at the start of the window: {0}")]
    Refused(String),
    /// An absolute rate, and the policy reported no peak to scale it by.
    #[error("the policy reported no expected peak to scale an absolute rate by")]
    NoPeak,
}

/// Runs `policy` at `from` on the history before it, raises its limit by `raise`, and
/// counts the points of `[from, until)` above each limit.
pub fn score_event(
    policy: &dyn Policy,
    series: &Series,
    name: &str,
    from: i64,
    until: i64,
    raise: Raise,
) -> Result<EventScore, EventScoreError> {
    let window = series.range(from, until);
    if window.is_empty() {
        return Err(EventScoreError::NoTraffic);
    }
    let history = series.window(from - policy.window().as_secs() as i64, from);
    let rec = policy
        .recommend(
            &history,
            &Context {
                now: from,
                previous_limit: None,
            },
        )
        .map_err(|r| EventScoreError::Refused(r.reason))?;
    let event_limit = raise
        .limit(rec.rps, expected_peak(&rec.evidence))
        .ok_or(EventScoreError::NoPeak)?;
    Ok(EventScore {
        name: name.to_string(),
        from,
        until,
        limit: rec.rps,
        event_limit,
        actual_peak: window.iter().map(|p| p.value).fold(0.0, f64::max),
        points: window.len(),
        over_limit: window.iter().filter(|p| p.value > rec.rps).count(),
        over_event_limit: window.iter().filter(|p| p.value > event_limit).count(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::historical_peak::HistoricalPeak;
    use crate::series::Point;

    #[test]
    fn an_absolute_rate_scales_the_limit_by_the_expected_peak() {
        assert_eq!(Raise::Rps(500.0).factor(Some(250.0)), Some(2.0));
        assert_eq!(Raise::Rps(500.0).factor(Some(0.0)), None);
        assert_eq!(Raise::Multiplier(0.5).limit(100.0, None), Some(50.0));
    }

    #[test]
    fn a_tripled_window_beats_the_limit_and_not_the_event_limit() {
        let step = 300;
        let (from, until) = (20 * 86_400, 20 * 86_400 + 4 * 3_600);
        let pts = (0..28 * 288)
            .map(|i| {
                let ts = i * step;
                let base = 100.0 + (i % 7) as f64;
                let value = if (from..until).contains(&ts) {
                    base * 3.0
                } else {
                    base
                };
                Point { ts, value }
            })
            .collect();
        let s = Series::new(step, pts);
        let policy = HistoricalPeak {
            window: std::time::Duration::from_secs(14 * 86_400),
            buffer: 0.25,
            quantile: None,
        };
        let score = score_event(&policy, &s, "sale", from, until, Raise::Multiplier(3.0)).unwrap();
        assert_eq!(score.limit, 106.0 * 1.25);
        assert_eq!(score.event_limit, 106.0 * 1.25 * 3.0);
        assert_eq!(score.points, 48);
        assert_eq!(score.over_limit, 48);
        assert_eq!(score.over_event_limit, 0);
        assert_eq!(
            score_event(
                &policy,
                &s,
                "later",
                40 * 86_400,
                41 * 86_400,
                Raise::Multiplier(2.0)
            ),
            Err(EventScoreError::NoTraffic)
        );
    }
}
