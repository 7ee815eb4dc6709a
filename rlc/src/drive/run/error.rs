//! Why a run failed, each failure naming the part that failed, and the exit code it maps to
//! ([`crate::drive::exit`]).

use crate::drive::exit;
use crate::input::source::SourceError;
use crate::output::git_store::GitStoreError;
use crate::run_log::RunLogError;

/// Why a run failed; each names the part that failed. See [`RunError::exit_code`].
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run history database.
    #[error("run history database: {0}")]
    Database(#[from] RunLogError),
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
    Cache(#[from] crate::input::cache::CacheError),
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
