//! How a rollout ended, as the driver reports it and the commands print it, with the exit
//! code each means.

use super::gates::GateFailure;
use super::state::RolloutState;
use super::waves_file::PLAN_FILE;
use super::{EXIT_GATE_FAILED, EXIT_STOPPED};

/// How one rollout ended (or why none ran).
#[derive(Debug, Clone, PartialEq)]
pub enum RolloutOutcome {
    /// No `rollout.yaml` at `main`'s head: every region gets `main` at once.
    NoPlan {
        /// `main`'s head.
        commit: String,
    },
    /// Every region runs `main`'s head already.
    UpToDate {
        /// `main`'s head.
        commit: String,
    },
    /// Every wave passed.
    Passed {
        /// The rollout.
        id: String,
        /// The commit rolled out.
        commit: String,
    },
    /// A gate failed; the regions moved were put back.
    Failed {
        /// The rollout.
        id: String,
        /// The commit.
        commit: String,
        /// The wave (1-based).
        wave: usize,
        /// Every failure found.
        failures: Vec<GateFailure>,
        /// The regions put back, and the commit each runs again.
        rolled_back: Vec<(String, Option<String>)>,
    },
    /// An operator paused it; it resumes after `rlc rollout resume`.
    Paused {
        /// The rollout.
        id: String,
        /// The next wave (1-based).
        wave: usize,
    },
    /// An operator aborted it.
    Aborted {
        /// The rollout.
        id: String,
    },
    /// An operator rolled it back.
    RolledBack {
        /// The rollout.
        id: String,
        /// The regions put back.
        rolled_back: Vec<(String, Option<String>)>,
    },
    /// Another live process drives the rollout in progress; `main`'s head waits for it.
    InProgressElsewhere {
        /// The rollout.
        id: String,
        /// Its commit.
        commit: String,
        /// Its driver.
        owner: String,
    },
    /// `main`'s head was rolled out before and that rollout did not pass; it is not tried
    /// again (a new commit is).
    AlreadyDone {
        /// The rollout.
        id: String,
        /// The commit.
        commit: String,
        /// How it ended.
        state: RolloutState,
    },
}

impl RolloutOutcome {
    /// The process exit code: 0 done (or waiting for another driver), 9 a gate failed,
    /// 10 paused or stopped by an operator.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Failed { .. }
            | Self::AlreadyDone {
                state: RolloutState::Failed,
                ..
            } => EXIT_GATE_FAILED,
            Self::Paused { .. }
            | Self::Aborted { .. }
            | Self::RolledBack { .. }
            | Self::AlreadyDone { .. } => EXIT_STOPPED,
            Self::NoPlan { .. }
            | Self::UpToDate { .. }
            | Self::Passed { .. }
            | Self::InProgressElsewhere { .. } => 0,
        }
    }

    /// What to print, one line per fact.
    pub fn lines(&self) -> Vec<String> {
        let back = |rb: &[(String, Option<String>)]| {
            rb.iter()
                .map(|(r, c)| format!("{r} → {}", c.as_deref().map_or("(none)", short)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Self::NoPlan { commit } => vec![format!(
                "no {PLAN_FILE} in the config repo: every region gets {} at once (no staged rollout)",
                short(commit)
            )],
            Self::UpToDate { commit } => {
                vec![format!(
                    "rollout: every region runs {} already",
                    short(commit)
                )]
            }
            Self::Passed { id, commit } => {
                vec![format!("rollout {id}: {} passed every wave", short(commit))]
            }
            Self::Failed {
                id,
                commit,
                wave,
                failures,
                rolled_back,
            } => {
                let mut out: Vec<String> = failures
                    .iter()
                    .map(|f| format!("rollout {id}: wave {wave} failed: {f}"))
                    .collect();
                out.push(format!(
                    "rollout {id}: {} stopped; rolled back: {}",
                    short(commit),
                    back(rolled_back)
                ));
                out
            }
            Self::Paused { id, wave } => vec![format!(
                "rollout {id}: paused before wave {wave} (rlc rollout resume continues it)"
            )],
            Self::Aborted { id } => vec![format!(
                "rollout {id}: aborted; the regions stay where they are"
            )],
            Self::RolledBack { id, rolled_back } => {
                vec![format!("rollout {id}: rolled back: {}", back(rolled_back))]
            }
            Self::InProgressElsewhere { id, commit, owner } => vec![format!(
                "rollout {id} of {} is in progress ({owner} drives it); main's head waits for it",
                short(commit)
            )],
            Self::AlreadyDone { id, commit, state } => vec![format!(
                "rollout {id} of main's head {} ended {}; not tried again (a new commit is)",
                short(commit),
                state.as_str()
            )],
        }
    }
}

/// The first 12 characters of a commit id.
pub fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}
