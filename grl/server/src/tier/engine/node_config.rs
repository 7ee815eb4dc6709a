//! What kind of tier a node is ([`NodeConfig`]): its level, place, interval, the scopes it
//! computes, whether it has a parent, and how long its ratios stay valid.

use std::time::Duration;

use grl_config::Scope;
use grl_core::proto;

/// What kind of tier a node is.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Zone (aggregators), Region (controllers with a parent) or Global.
    pub level: proto::Level,
    /// This tier's id when reporting to its parent.
    pub id: String,
    /// Zone ("" above zones).
    pub zone: String,
    /// Region ("" for a global controller that serves several regions).
    pub region: String,
    /// Reporting interval.
    pub interval: Duration,
    /// Scopes whose ratios this tier computes; the others come from the parent.
    pub scopes: Vec<Scope>,
    /// Whether this tier reports to a parent.
    pub has_parent: bool,
    /// Ratios computed here are valid this many intervals.
    pub validity_intervals: u32,
}

impl NodeConfig {
    /// How long a ratio computed here stays valid.
    pub fn validity(&self) -> Duration {
        self.interval * self.validity_intervals
    }

    /// The longest time a client counts a reported rate over, in seconds (the horizon of
    /// [`ratios::noise_margin`](super::ratios::noise_margin)).
    pub fn rate_horizon_secs(&self) -> f64 {
        grl_core::wire::rate_horizon(self.interval).as_secs_f64()
    }
}
