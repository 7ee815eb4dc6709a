//! Staged rollouts: a commit of `main` reaches the regions wave by wave, as `rollout.yaml`
//! at the config repo's root says ([`waves_file`]), each wave gated on what it did.
//!
//! Each region's controllers follow the branch `regions/<region>` (`grl controller
//! --config-ref regions/<region>`), which only the rollout moves ([`crate::output::git_store`]'s
//! `move_region`); right after a move the region's controllers are also sent the config
//! (`ApplyConfig`, [`controllers`]). Once they run it, the wave bakes: every poll the
//! regions' controllers' `Status` is summed ([`observe`]); after the bake the [`gates`]
//! (and [`query_gate`]s) judge it against the configurator's [`prediction`]s. Pass: the next
//! wave. Fail: every region moved goes back to the commit its branch held before (the
//! branch moved back, no commit made or rewritten), the rollout stops, and the reason goes
//! to the run history ([`state`]), the log, `rlc_rollout_waves_total{result}` ([`metrics`])
//! and, in PR mode, a comment on the merged pull request.
//!
//! [`drive`] runs it; its state lives in the run history database, so a configurator that
//! restarts resumes the rollout at the wave it was at (baking that wave again in full).
//! One process drives a rollout at a time (an owner with a heartbeat, as runs have). A
//! commit that lands during a rollout waits for it: the driver rolls out `main`'s head once
//! the rollout in progress is done (commits in between go out together).

pub mod controllers;
pub mod driver;
pub mod gates;
pub mod metrics;
pub mod notify;
pub mod observe;
pub mod outcome;
pub mod prediction;
pub mod query_gate;
pub mod records;
pub mod repo;
pub mod state;
pub mod status;
pub mod waves_file;

pub use driver::{RolloutSettings, rollback_now, run};
pub use metrics::RolloutMetrics;
pub use outcome::RolloutOutcome;
pub use waves_file::{PLAN_FILE, RolloutPlan};

use crate::input::source::SourceError;
use crate::output::git_store::GitStoreError;
use crate::run_log::RunLogError;

/// Exit code of `rlc rollout run` (and `rlc run --once`) when a gate failed and the regions
/// already moved were rolled back.
pub const EXIT_GATE_FAILED: i32 = 9;
/// Exit code when an operator paused or aborted the rollout, or another process drives it.
pub const EXIT_STOPPED: i32 = 10;

/// Why a rollout could not be driven (a gate failing is not an error: see
/// [`RolloutOutcome::Failed`]).
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// The config repo.
    #[error("config repo: {0}")]
    Git(#[from] GitStoreError),
    /// The run history database.
    #[error("run history database: {0}")]
    Database(#[from] RunLogError),
    /// `rollout.yaml` or the config rolled out is invalid.
    #[error("config: {0}")]
    Config(#[from] grl_config::ConfigErrors),
    /// The metrics source the predictions read.
    #[error("metrics source: {0}")]
    Source(#[from] SourceError),
    /// Another process took the rollout over (this one had been silent too long).
    #[error("rollout {id}: another process drives it now")]
    Lost {
        /// The rollout.
        id: String,
    },
    /// A blocking task of the rollout panicked.
    #[error("rollout task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// The clone was lost by a panicked git task.
    #[error("the rollout's clone of the config repo was lost by a failed task")]
    RepoLost,
}

impl RolloutError {
    /// The process exit code, as `rlc run --once` maps the same failures.
    pub fn exit_code(&self) -> i32 {
        use crate::drive::exit;
        match self {
            RolloutError::Git(_) => exit::GIT,
            RolloutError::Database(_) => exit::DATABASE,
            RolloutError::Config(_) => exit::CONFIG,
            RolloutError::Source(_) => exit::SOURCE,
            RolloutError::Lost { .. } => EXIT_STOPPED,
            RolloutError::Task(_) | RolloutError::RepoLost => exit::OTHER,
        }
    }
}
