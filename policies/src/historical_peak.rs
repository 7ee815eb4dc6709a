//! `historical-peak`: the largest rate seen in the window (or a high quantile of it)
//! plus a buffer. Parameters: `window` (default `28d`), `buffer` (fraction, default
//! `0.25`), `quantile` (optional, e.g. `0.999`, used instead of the maximum to ignore
//! rare spikes).

use crate::duration;
use crate::params::{Params, SpecError};
use crate::policy::FromSpec;
use crate::policy::{Context, Policy, Recommendation, Refusal};
use crate::series::Series;
use std::time::Duration;

/// Peak (or quantile) of the window times `1 + buffer`.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoricalPeak {
    /// How much history to look at.
    pub window: Duration,
    /// Headroom as a fraction of the peak (0.25 = 25 %).
    pub buffer: f64,
    /// Use this quantile of the window instead of its maximum.
    pub quantile: Option<f64>,
}

impl Default for HistoricalPeak {
    fn default() -> Self {
        HistoricalPeak {
            window: Duration::from_secs(28 * 86_400),
            buffer: 0.25,
            quantile: None,
        }
    }
}

impl FromSpec for HistoricalPeak {
    const KIND: &'static str = "historical-peak";

    fn from_params(params: &Params<'_>) -> Result<Self, SpecError> {
        Ok(HistoricalPeak {
            window: params.duration("window", "28d")?,
            buffer: params.f64_in("buffer", 0.25, 0.0, 100.0)?,
            quantile: params.opt_f64_in("quantile", 0.0, 1.0)?,
        })
    }
}

impl Policy for HistoricalPeak {
    fn kind(&self) -> &'static str {
        Self::KIND
    }

    fn window(&self) -> Duration {
        self.window
    }

    fn recommend(&self, history: &Series, ctx: &Context) -> Result<Recommendation, Refusal> {
        let window = duration::secs(self.window);
        let recent = history.window(ctx.now.saturating_sub(window), ctx.now);
        let (key, observed) = match self.quantile {
            None => ("observed_peak", recent.max()),
            Some(q) => ("observed_quantile", recent.quantile(q)),
        };
        let observed = observed.ok_or_else(|| {
            Refusal::new(format!(
                "no history in the last {}",
                duration::format(self.window)
            ))
        })?;
        let mut rec = Recommendation::new(Self::KIND, observed * (1.0 + self.buffer))
            .with("window", duration::format(self.window))
            .with(key, observed)
            .with("buffer", self.buffer)
            .with("points", recent.len());
        if let Some(q) = self.quantile {
            rec = rec.with("quantile", q);
        }
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::series::Point;

    fn series(values: &[f64]) -> Series {
        let points = values
            .iter()
            .enumerate()
            .map(|(i, &value)| Point {
                ts: i as i64 * 60,
                value,
            })
            .collect();
        Series::new(60, points)
    }

    fn ctx(now: i64) -> Context {
        Context {
            now,
            previous_limit: None,
        }
    }

    #[test]
    fn peak_times_one_plus_buffer() {
        let s = series(&[10.0, 80.0, 30.0, 40.0]);
        let r = HistoricalPeak::default().recommend(&s, &ctx(240)).unwrap();
        assert_eq!(r.rps, 100.0);
        assert_eq!(r.evidence["observed_peak"], 80.0);
        assert_eq!(r.evidence["buffer"], 0.25);
        assert_eq!(r.evidence["window"], "28d");
        assert_eq!(r.evidence["points"], 4);
        assert_eq!(r.evidence["policy"], "historical-peak");
    }

    #[test]
    fn only_the_window_before_now_counts() {
        let s = series(&[500.0, 10.0, 20.0, 999.0]);
        let p = HistoricalPeak {
            window: Duration::from_secs(120),
            buffer: 0.5,
            quantile: None,
        };
        // now = 180: window [60, 180) holds 10 and 20; 500 is too old, 999 is the future.
        assert_eq!(p.recommend(&s, &ctx(180)).unwrap().rps, 30.0);
    }

    #[test]
    fn quantile_variant() {
        let values: Vec<f64> = (0..=100).map(f64::from).collect();
        let p = HistoricalPeak {
            quantile: Some(0.9),
            buffer: 0.0,
            ..HistoricalPeak::default()
        };
        let r = p.recommend(&series(&values), &ctx(101 * 60)).unwrap();
        assert_eq!(r.rps, 90.0);
        assert_eq!(r.evidence["observed_quantile"], 90.0);
        assert_eq!(r.evidence["quantile"], 0.9);
        assert!(!r.evidence.contains_key("observed_peak"));
    }

    #[test]
    fn empty_history_is_refused() {
        let err = HistoricalPeak::default()
            .recommend(&Series::default(), &ctx(1_000_000))
            .unwrap_err();
        assert_eq!(err.reason, "no history in the last 28d");
    }
}
