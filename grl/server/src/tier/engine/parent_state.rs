//! What a tier keeps from its parent: per bucket, the parent's ratio and this tier's
//! allowance with their expiry; whether the stream to the parent is up; how long the latest
//! instruction holds (past it, the children fail open); the parent's wire and config
//! versions. Filled by `parent` when an instruction arrives.

use std::collections::BTreeMap;

use tokio::time::Instant;

/// One bucket's instruction from the parent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FromParent {
    /// The drop ratio.
    pub ratio: f64,
    /// When it stops being valid.
    pub expires: Instant,
    /// This tier's allowance, when the parent gave one (valid as long as the ratio).
    pub allowed: Option<f64>,
}

/// What came from the parent.
#[derive(Debug, Default)]
pub(crate) struct Parent {
    /// Ratios and allowances by (service, bucket).
    pub ratios: BTreeMap<(String, String), FromParent>,
    /// Whether the stream to the parent is up.
    pub connected: bool,
    /// When the parent's latest instruction stops being valid.
    pub valid_until: Option<Instant>,
    /// The wire version the parent speaks (from its instructions).
    pub wire_version: u32,
    /// The config version of the parent's latest instruction: rows go up packed only
    /// when this tier holds the same version (a tier following its own config may not).
    pub config_version: String,
    /// Whether the parent's latest instruction said this tier's zone is shared with other
    /// aggregators (see [`super::scopes`]).
    pub zone_shared: bool,
}
