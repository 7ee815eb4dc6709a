//! Errors of the run-history store; each names the database, never its password.

/// Errors of the run-history store. Each names the database (never its password).
#[derive(Debug, thiserror::Error)]
pub enum RunLogError {
    /// The URL is neither SQLite nor PostgreSQL.
    #[error(
        "run history database URL {url:?} is not supported (use sqlite://<path> or postgres://...)"
    )]
    UnsupportedUrl {
        /// The URL with its password removed.
        url: String,
    },
    /// The directory for the SQLite file could not be created.
    #[error("run history database {db}: cannot create directory {dir}: {source}")]
    CreateDir {
        /// Database name.
        db: String,
        /// Directory that could not be created.
        dir: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The database could not be reached or opened.
    #[error("run history database {db}: cannot connect: {source}")]
    Connect {
        /// Database name.
        db: String,
        /// Cause.
        #[source]
        source: sqlx::Error,
    },
    /// Applying the schema failed.
    #[error("run history database {db}: migrations failed: {source}")]
    Migrate {
        /// Database name.
        db: String,
        /// Cause.
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// A statement failed.
    #[error("run history database {db}: {what} failed: {source}")]
    Query {
        /// Database name.
        db: String,
        /// What was being done.
        what: &'static str,
        /// Cause.
        #[source]
        source: sqlx::Error,
    },
    /// A run id that is not in the database.
    #[error("run history database {db}: no run {run_id}")]
    UnknownRun {
        /// Database name.
        db: String,
        /// The run id asked for.
        run_id: String,
    },
    /// A stored value could not be understood.
    #[error("run history database {db}: bad stored value: {detail}")]
    Corrupt {
        /// Database name.
        db: String,
        /// What was wrong.
        detail: String,
    },
}
