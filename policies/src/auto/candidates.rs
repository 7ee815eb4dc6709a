//! The candidates `auto` chooses from, simplest first.

use crate::forecast::Forecast;
use crate::historical_peak::HistoricalPeak;
use crate::peak_trend::PeakTrend;
use crate::policy::Policy;
use serde_json::{Value, json};
use std::time::Duration;

/// One candidate policy, built for a given window and horizon.
#[derive(Debug)]
pub(crate) struct Candidate {
    /// Short name used in evidence and PR notes, e.g. `historical-peak+50%`.
    pub label: &'static str,
    /// The policy.
    pub policy: Box<dyn Policy>,
}

impl Candidate {
    /// The spec that builds this candidate on its own (`kind` plus parameters).
    pub(super) fn spec(&self, window: Duration, horizon: Duration) -> Value {
        let w = crate::duration::format(window);
        let h = crate::duration::format(horizon);
        match self.label {
            "historical-peak+25%" => {
                json!({"kind": "historical-peak", "window": w, "buffer": 0.25})
            }
            "historical-peak+50%" => json!({"kind": "historical-peak", "window": w, "buffer": 0.5}),
            "historical-peak+100%" => {
                json!({"kind": "historical-peak", "window": w, "buffer": 1.0})
            }
            "peak-trend" => json!({"kind": "peak-trend", "window": w, "horizon": h}),
            _ => json!({"kind": "forecast", "window": w, "horizon": h}),
        }
    }
}

/// The candidates for `window` and `horizon`, simplest first: historical-peak with buffers
/// 0.25, 0.5 and 1.0, peak-trend (buffer 0.25), and forecast (its defaults) if `with_forecast`.
pub(crate) fn candidates(
    window: Duration,
    horizon: Duration,
    with_forecast: bool,
) -> Vec<Candidate> {
    let hp = |label, buffer| Candidate {
        label,
        policy: Box::new(HistoricalPeak {
            window,
            buffer,
            quantile: None,
        }),
    };
    let mut out = vec![
        hp("historical-peak+25%", 0.25),
        hp("historical-peak+50%", 0.5),
        hp("historical-peak+100%", 1.0),
        Candidate {
            label: "peak-trend",
            policy: Box::new(PeakTrend {
                window,
                horizon,
                ..PeakTrend::default()
            }),
        },
    ];
    if with_forecast {
        out.push(Candidate {
            label: "forecast",
            policy: Box::new(Forecast {
                window,
                horizon,
                ..Forecast::default()
            }),
        });
    }
    out
}
