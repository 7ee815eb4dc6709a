//! The rollout's metrics, registered beside the configurator's own ([`RlcMetrics`]):
//! `rlc_rollout_waves_total{result}` (`passed`, `failed`, `expedited`) and
//! `rlc_rollout_region_moves_total{direction}` (`forward`, `back`).
//!
//! [`RlcMetrics`]: crate::drive::serve_metrics::RlcMetrics

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// `result` label of a wave's verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// passed | failed | expedited
    pub result: String,
}

/// `direction` label of a region's move.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabel {
    /// forward (to the version rolled out) | back (a rollback)
    pub direction: String,
}

/// The rollout's counters.
#[derive(Debug, Clone, Default)]
pub struct RolloutMetrics {
    /// `rlc_rollout_waves_total{result}`.
    pub waves: Family<ResultLabel, Counter>,
    /// `rlc_rollout_region_moves_total{direction}`.
    pub moves: Family<DirectionLabel, Counter>,
}

impl RolloutMetrics {
    /// Registers the counters in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "rlc_rollout_waves",
            "Waves of staged rollouts judged, by result (passed, failed, expedited)",
            self.waves.clone(),
        );
        registry.register(
            "rlc_rollout_region_moves",
            "Regions' branches moved by rollouts: forward to a new version, back in a rollback",
            self.moves.clone(),
        );
    }

    /// Counts a wave's verdict.
    pub fn wave(&self, result: &str) {
        self.waves
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }

    /// Counts a region's move.
    pub fn moved(&self, back: bool) {
        self.moves
            .get_or_create(&DirectionLabel {
                direction: if back { "back" } else { "forward" }.to_string(),
            })
            .inc();
    }
}
