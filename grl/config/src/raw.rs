//! The config files as written: serde structs as close to the YAML as possible.
//!
//! Validation happens in `super::load`, which turns these into the typed [`super::Snapshot`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::yaml::Value;
use crate::{Mode, Scope};

/// `services/<service>.yaml`: written by people.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceFile {
    /// The destination service being protected.
    pub service: String,
    /// Optional free text for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The priority classes of its buckets, highest first, for buckets that list none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priorities: Option<Vec<String>>,
    /// The buckets of this service.
    #[serde(default)]
    pub buckets: Vec<BucketEntry>,
}

/// One bucket as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BucketEntry {
    /// Unique within the service.
    pub name: String,
    /// Which requests belong to the bucket.
    #[serde(rename = "match")]
    pub matcher: MatchEntry,
    /// Over which traffic the limit holds.
    pub scope: Scope,
    /// Enforce or only count virtual drops.
    pub mode: Mode,
    /// How the configurator computes the limit.
    pub policy: PolicyEntry,
    /// Per-bucket overrides of the configurator's guards (`floor`, `cap`, `max_decrease`…).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub guards: BTreeMap<String, Value>,
    /// Also count and decide the requests this bucket matches when a more specific bucket
    /// takes them (a procedure-wide limit that protects the procedure whoever calls it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_addition: bool,
    /// Its priority classes, highest first: when the bucket must shed, the lowest go
    /// first. Absent: the service's list, if any; `[]`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priorities: Option<Vec<String>>,
    /// The share of the limit a class keeps whatever the classes above it offer, by class.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub min_share: BTreeMap<String, f64>,
    /// Optional free text for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `match: { caller: …, procedure: … }`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MatchEntry {
    /// Exact caller name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// Exact procedure, or a prefix when it ends with `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub procedure: Option<String>,
}

/// `policy: { kind: …, <params> }`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct PolicyEntry {
    /// The policy's registered name, e.g. `historical-peak`.
    pub kind: String,
    /// Everything else: the policy's own parameters.
    #[serde(flatten)]
    pub params: BTreeMap<String, Value>,
}

/// `limits/<service>.yaml`: written by the configurator.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct LimitsFile {
    /// The service these limits belong to.
    pub service: String,
    /// Computed limit per bucket name.
    #[serde(default)]
    pub limits: BTreeMap<String, LimitEntry>,
    /// Run metadata the configurator adds (run id, time); ignored by the GRL.
    #[serde(flatten)]
    pub meta: BTreeMap<String, Value>,
}

/// One computed limit with the configurator's evidence.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct LimitEntry {
    /// Requests per second.
    pub rps: f64,
    /// Limits in force only for a while, instead of `rps`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scheduled: Vec<ScheduledEntry>,
    /// Evidence fields (policy, observed peak, coverage, guard outcomes…).
    #[serde(flatten)]
    pub evidence: BTreeMap<String, Value>,
}

/// `scheduled: [{ rps, effective: { from, until }, reason }]`: a limit in force only
/// between two instants.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledEntry {
    /// Requests per second meanwhile.
    pub rps: f64,
    /// When it is in force.
    pub effective: Effective,
    /// Why (an event's name), for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// `effective: { from, until }`, RFC 3339 instants with an offset; `until` excluded.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Effective {
    /// When it takes effect.
    pub from: String,
    /// When it ends.
    pub until: String,
}
