//! Limit policies for the global rate limiter: pure functions from a bucket's history of
//! offered load to a recommended limit, plus a backtest to judge them.
//!
//! - [`series`]: the [`Series`] of rates a policy reads (gaps allowed), with CSV input.
//! - [`policy`]: the [`Policy`] trait, its [`Context`], [`Recommendation`] and [`Refusal`].
//! - [`registry`]: [`from_spec`] builds a policy from a spec's `kind` and parameters.
//! - [`fixed`], [`historical_peak`], [`forecast`], [`peak_trend`]: the policies.
//! - [`auto`](mod@auto): picks one of the others per bucket from its own backtest.
//! - [`trend`]: the robust growth estimate `peak-trend` and `forecast` share.
//! - [`backtest`](mod@backtest): rolling-origin exceedance and headroom figures.
//! - [`duration`]: `28d`-style durations.
//! - [`guard_settings`]: the configurator's guard thresholds and their per-bucket overrides.
//! - [`capacity`]: sharing a planned capacity among limits, and a service's forecast demand.
//! - [`event`](mod@event): how a planned event raises a limit, and its backtest.
//!
//! No I/O and no clock: time comes in through [`Context::now`].
//!
//! # Example
//! ```
//! use policies::{Context, Point, Series, from_spec};
//!
//! // One day of 5-minute samples between 100 and 200 rps.
//! let points = (0..288)
//!     .map(|i| Point { ts: i * 300, value: 100.0 + (i % 101) as f64 })
//!     .collect();
//! let history = Series::new(300, points);
//!
//! let spec = serde_json::json!({ "window": "28d", "buffer": 0.25 });
//! let policy = from_spec("historical-peak", spec.as_object().unwrap()).unwrap();
//! let ctx = Context { now: 288 * 300, previous_limit: None };
//! let rec = policy.recommend(&history, &ctx).unwrap();
//! assert_eq!(rec.rps, 200.0 * 1.25);
//! assert_eq!(rec.evidence["observed_peak"], 200.0);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod auto;
pub mod backtest;
pub mod capacity;
pub mod duration;
pub mod event;
pub mod fixed;
pub mod forecast;
pub mod guard_settings;
pub mod historical_peak;
mod params;
pub mod peak_trend;
pub mod policy;
pub mod registry;
pub mod series;
pub mod trend;

pub use backtest::{BacktestConfig, BacktestReport, backtest};
pub use params::{Params, SpecError};
pub use policy::FromSpec;
pub use policy::{Context, Policy, Recommendation, Refusal};
pub use registry::{KINDS, from_spec};
pub use series::{Point, Series, SeriesError};
