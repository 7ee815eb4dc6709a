//! Why a run failed or could not deliver its commit, and the exit codes of `rlc run --once`.

use crate::git_store::GitStoreError;
use crate::github::GitHubError;
use crate::history::HistoryError;
use crate::push::PushError;
use crate::source::SourceError;

/// Exit codes of `rlc run --once`, as documented in the README.
pub mod exit {
    /// Committed, or nothing to change.
    pub const OK: i32 = 0;
    /// Anything else (e.g. the local work directory or the history cache cannot be used,
    /// or a task of the run panicked).
    pub const OTHER: i32 = 1;
    /// Bad usage.
    pub const USAGE: i32 = 2;
    /// The metrics source failed.
    pub const SOURCE: i32 = 3;
    /// The config repo failed.
    pub const GIT: i32 = 4;
    /// The run history database failed.
    pub const DATABASE: i32 = 5;
    /// The config is invalid.
    pub const CONFIG: i32 = 6;
    /// Committed, but the controller (or the pull request) could not be updated; also when
    /// nothing was committed but the controller runs another version than `main` and could
    /// not be brought up to date.
    pub const DELIVERY: i32 = 7;
    /// The metrics source answered with no usable data for any bucket (every series empty,
    /// NaN or infinite): a dead metrics pipeline, not a quiet week. Nothing was changed.
    pub const NO_DATA: i32 = 8;
}

/// Why a run failed; each names the part that failed. See [`RunError::exit_code`].
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run history database.
    #[error("run history database: {0}")]
    Database(#[from] HistoryError),
    /// The metrics source (Prometheus or files).
    #[error("metrics source: {0}")]
    Source(#[from] SourceError),
    /// The git config repo.
    #[error("config repo: {0}")]
    Git(#[from] GitStoreError),
    /// The config at the checked-out commit (or the one the run would write) is invalid.
    #[error("config: {0}")]
    Config(#[from] grl_config::ConfigErrors),
    /// The local work directory (where the clone is kept) cannot be created or is not a
    /// directory: a problem of this machine, not of the config repo.
    #[error("work directory {dir}: {source}")]
    Workdir {
        /// The directory.
        dir: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Another run holds the work directory's lock.
    #[error("another rlc run is using this work directory (lock {lock} is held)")]
    Busy {
        /// The lock file.
        lock: String,
    },
    /// The metrics source answered, but with no usable value for any bucket: every series
    /// was empty, NaN or infinite. Nothing was changed.
    #[error(
        "metrics source {source_desc}: no usable data for any of the {buckets} bucket(s) \
         (every series empty, NaN or infinite); nothing changed"
    )]
    NoData {
        /// The source.
        source_desc: String,
        /// Buckets asked for.
        buckets: usize,
    },
    /// The history cache could not be read or written.
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    /// A series the fetch phase stored was not in the history cache when planning (the
    /// cache was changed under the run).
    #[error("history cache: {series} is missing after the fetch phase stored it")]
    CacheMiss {
        /// `service/bucket measure`.
        series: String,
    },
    /// A task of the run (the git work runs on blocking threads) panicked or was cancelled.
    #[error("run task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl RunError {
    /// The process exit code for `rlc run --once` (see [`exit`]).
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Source(_) => exit::SOURCE,
            RunError::Git(_) => exit::GIT,
            RunError::Database(_) => exit::DATABASE,
            RunError::Config(_) => exit::CONFIG,
            RunError::NoData { .. } => exit::NO_DATA,
            RunError::Workdir { .. }
            | RunError::Busy { .. }
            | RunError::Task(_)
            | RunError::Cache(_)
            | RunError::CacheMiss { .. } => exit::OTHER,
        }
    }
}

/// The commit landed but could not be delivered: the controller was not updated, or the
/// pull request not opened. The run still counts as committed.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// Reading the committed files to send them to the controller.
    #[error("reading commit {commit} for the controller: {source}")]
    Read {
        /// The commit.
        commit: String,
        /// Cause.
        #[source]
        source: GitStoreError,
    },
    /// The controller refused the snapshot or could not be reached.
    #[error(transparent)]
    Controller(#[from] PushError),
    /// The code host refused to open or update the pull request.
    #[error("pull request: {0}")]
    PullRequest(#[from] GitHubError),
    /// The task reading the commit panicked.
    #[error("reading the commit for the controller: {0}")]
    Task(#[from] tokio::task::JoinError),
}
