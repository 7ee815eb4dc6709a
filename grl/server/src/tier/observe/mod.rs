//! What an operator sees of a tier: its Prometheus metrics ([`metrics`]), the `Tier.Status`
//! and `Tier.Explain` answers ([`status`], with the per-child detail of `status_detail`),
//! and how long its ticks take ([`tick_times`]).

pub mod metrics;
pub mod status;
mod status_detail;
pub mod tick_times;
