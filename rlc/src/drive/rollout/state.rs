//! A rollout's state as the run history keeps it (tables `rlc_rollouts`,
//! `rlc_rollout_regions`, `rlc_rollout_waves`): what is rolled out, the wave it is at and
//! where each region is, so that a configurator that restarts resumes it.

use serde::{Deserialize, Serialize};

use super::gates::GateFailure;
use super::observe::Baseline;
use super::prediction::Prediction;
use super::waves_file::RolloutPlan;

/// A rollout's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutState {
    /// Moving and baking waves.
    Running,
    /// Held by an operator: the wave in progress finishes its bake and gates, no new wave
    /// starts until `rlc rollout resume`.
    Paused,
    /// Every wave passed.
    Passed,
    /// A gate failed; the regions moved were rolled back.
    Failed,
    /// Stopped by an operator; the regions stay where they are.
    Aborted,
    /// Every region moved was put back on its previous version by `rlc rollout rollback`.
    RolledBack,
}

impl RolloutState {
    /// Every state.
    pub const ALL: [RolloutState; 6] = [
        Self::Running,
        Self::Paused,
        Self::Passed,
        Self::Failed,
        Self::Aborted,
        Self::RolledBack,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Passed => "passed",
            Self::Failed => "failed",
            Self::Aborted => "aborted",
            Self::RolledBack => "rolled-back",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<RolloutState> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether the rollout is still to be driven (running or paused).
    pub fn is_active(self) -> bool {
        matches!(self, Self::Running | Self::Paused)
    }
}

/// Where a region is in a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegionState {
    /// Not moved yet.
    Pending,
    /// Moved to the new version; its wave is baking.
    Moved,
    /// Its wave passed.
    Passed,
    /// Moved back to the version it ran before.
    RolledBack,
}

impl RegionState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Moved => "moved",
            Self::Passed => "passed",
            Self::RolledBack => "rolled-back",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<RegionState> {
        [Self::Pending, Self::Moved, Self::Passed, Self::RolledBack]
            .into_iter()
            .find(|st| st.as_str() == s)
    }
}

/// One rollout of a commit of `main`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutRecord {
    /// Sortable id, e.g. `20261204T120000Z-1a2b`.
    pub id: String,
    /// The commit of `main` rolled out.
    pub commit: String,
    /// The configurator run that committed it, when a run started the rollout.
    pub run_id: Option<String>,
    /// `rollout.yaml` as read when the rollout started.
    pub plan: RolloutPlan,
    /// The changed buckets and their predicted dropped shares.
    pub predictions: Vec<Prediction>,
    /// The state.
    pub state: RolloutState,
    /// The index of the wave in progress (the number of waves once done).
    pub wave: usize,
    /// When the wave in progress started baking (unix ms), once its regions run the new
    /// version.
    pub bake_started_at_ms: Option<i64>,
    /// Why the bake is skipped, when it is (`--expedite --reason`).
    pub expedite_reason: Option<String>,
    /// Why the rollout stopped (a gate's failure, an operator's abort).
    pub reason: Option<String>,
    /// An operator's request not yet carried out (`rollback`).
    pub requested: Option<String>,
    /// The process driving it (`host:pid`), if any.
    pub owner: Option<String>,
    /// When its driver last showed it is alive (unix ms).
    pub heartbeat_at_ms: Option<i64>,
    /// Start (unix ms).
    pub started_at_ms: i64,
    /// End (unix ms), once it stopped.
    pub finished_at_ms: Option<i64>,
    /// Every region of the plan.
    pub regions: Vec<RegionRecord>,
    /// The verdict of every wave judged so far.
    pub waves: Vec<WaveRecord>,
}

impl RolloutRecord {
    /// A region's record.
    pub fn region(&self, name: &str) -> Option<&RegionRecord> {
        self.regions.iter().find(|r| r.region == name)
    }

    /// The process driving this rollout, if it is alive: not a process of this host that is
    /// gone, and heard of since `stale_before_ms`.
    pub fn live_owner(&self, stale_before_ms: i64) -> Option<&str> {
        let owner = self.owner.as_deref()?;
        let dead = crate::run_log::Owner::parse(owner).is_some_and(|o| o.is_dead_local_process())
            || self.heartbeat_at_ms.unwrap_or(0) < stale_before_ms;
        (!dead).then_some(owner)
    }

    /// The commit a region's branch points at by this rollout's account.
    pub fn region_commit(&self, r: &RegionRecord) -> Option<String> {
        match r.state {
            RegionState::Moved | RegionState::Passed => Some(self.commit.clone()),
            RegionState::Pending | RegionState::RolledBack => r.from_commit.clone(),
        }
    }
}

/// One region of a rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegionRecord {
    /// The region.
    pub region: String,
    /// The index of its wave.
    pub wave: usize,
    /// The commit its branch held before the rollout (`None`: no branch, no version known).
    pub from_commit: Option<String>,
    /// Where it is.
    pub state: RegionState,
    /// When its branch was moved (unix ms).
    pub moved_at_ms: Option<i64>,
    /// What its controllers showed just before it moved.
    pub baseline: Option<Baseline>,
}

/// A wave's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaveRecord {
    /// The wave's index.
    pub wave: usize,
    /// `passed`, `failed` or `expedited`.
    pub result: String,
    /// When it was judged (unix ms).
    pub at_ms: i64,
    /// Why it failed (empty when it passed).
    pub failures: Vec<GateFailure>,
}
