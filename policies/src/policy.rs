//! The [`Policy`] trait every limit policy implements, and what it takes and returns.

use crate::params::{Params, SpecError};
use crate::series::Series;
use std::collections::BTreeMap;
use std::time::Duration;

/// Facts about the run a policy may use besides the history.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Context {
    /// Unix seconds at the end of the history: the moment the new limit starts to apply.
    /// Policies read history in `[now - window, now)` and predict from `now` onwards.
    pub now: i64,
    /// The limit currently in force, if any.
    pub previous_limit: Option<f64>,
}

/// A computed limit and the evidence behind it, as written next to the limit in the
/// config repo so a reviewer can see why it is what it is.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Recommendation {
    /// The recommended limit in requests per second; finite and not negative.
    pub rps: f64,
    /// Named figures that justify `rps` (always includes `policy`, the policy kind).
    pub evidence: BTreeMap<String, serde_json::Value>,
}

impl Recommendation {
    /// A recommendation of `rps` whose evidence starts with `policy: kind`.
    pub fn new(kind: &str, rps: f64) -> Self {
        let mut evidence = BTreeMap::new();
        evidence.insert("policy".to_string(), kind.into());
        Recommendation { rps, evidence }
    }

    /// Adds one piece of evidence (builder style).
    pub fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.evidence.insert(key.to_string(), value.into());
        self
    }
}

/// A policy's refusal to recommend (for example, too little history): the caller keeps
/// the limit in force and reports `reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Refusal {
    /// Why no limit could be computed, in words for an operator.
    pub reason: String,
}

impl Refusal {
    /// A refusal with the given reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Refusal {
            reason: reason.into(),
        }
    }
}

/// A way to compute a bucket's limit from its history of offered load.
///
/// Implementations are pure: no I/O, no clock reads (time comes in [`Context::now`]).
pub trait Policy: Send + Sync + std::fmt::Debug {
    /// The `kind` name used in specs, such as `historical-peak`.
    fn kind(&self) -> &'static str;

    /// How much history before `now` the policy wants (zero when it reads none).
    fn window(&self) -> Duration;

    /// How far ahead the limit is meant to hold, for policies that look ahead (`None`: the
    /// policy has no horizon of its own).
    fn horizon(&self) -> Option<Duration> {
        None
    }

    /// Computes a limit from `history` (points before `ctx.now`; extra points outside
    /// `[now - window, now)` are ignored), or refuses with a reason.
    fn recommend(&self, history: &Series, ctx: &Context) -> Result<Recommendation, Refusal>;
}

/// A policy type that can be built from spec parameters.
pub trait FromSpec: Policy + Sized + 'static {
    /// The `kind` name in specs.
    const KIND: &'static str;
    /// Reads and validates the parameters (unknown ones are rejected by
    /// [`registry`](crate::registry)).
    fn from_params(params: &Params<'_>) -> Result<Self, SpecError>;
}
