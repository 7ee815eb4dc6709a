//! Errors of the git store, each naming the remote, ref or path involved.

use super::MAIN_BRANCH;

/// Errors of the git store; each names the remote, ref or path involved.
#[derive(Debug, thiserror::Error)]
pub enum GitStoreError {
    /// The local clone could not be created or opened.
    #[error("git: cannot set up a clone of {remote} in {dir}: {source}")]
    Open {
        /// Remote (credentials removed).
        remote: String,
        /// Local directory.
        dir: String,
        /// Cause.
        #[source]
        source: git2::Error,
    },
    /// Fetching failed.
    #[error("git fetch from remote {remote} failed: {source}")]
    Fetch {
        /// Remote (credentials removed).
        remote: String,
        /// Cause.
        #[source]
        source: git2::Error,
    },
    /// The remote has no `main` branch.
    #[error("git remote {remote} has no branch {MAIN_BRANCH}")]
    NoMain {
        /// Remote (credentials removed).
        remote: String,
    },
    /// The remote refused a ref update (hook, protection, permissions, ...).
    #[error("git remote {remote} refused push of {refname}: {reason}")]
    Refused {
        /// Remote (credentials removed).
        remote: String,
        /// Ref that was refused, e.g. `refs/heads/main`.
        refname: String,
        /// What the remote said.
        reason: String,
    },
    /// The push could not be performed at all.
    #[error("git push of {refname} to remote {remote} failed: {source}")]
    Push {
        /// Remote (credentials removed).
        remote: String,
        /// Ref being pushed.
        refname: String,
        /// Cause.
        #[source]
        source: git2::Error,
    },
    /// Others kept pushing to the ref; the RLC gave up.
    #[error(
        "git remote {remote} refused push of {refname}: still not a fast-forward after \
         {attempts} attempts ({reason})"
    )]
    Contended {
        /// Remote (credentials removed).
        remote: String,
        /// Ref being pushed.
        refname: String,
        /// Attempts made.
        attempts: u32,
        /// Last rejection.
        reason: String,
    },
    /// The caller's proposal builder failed.
    #[error("building the proposal failed: {0}")]
    Build(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The config repo is a local repository with a working tree: git refuses a push to
    /// its checked-out branch, so every run would fail at its end.
    #[error(
        "config repo {remote} is a repository with a working tree; rlc pushes its commits, \
         and git refuses a push to a checked-out branch. Give a bare repository instead \
         (`git clone --bare {remote} {remote}.git`, then --config-repo {remote}.git) or the \
         repository's server URL"
    )]
    NotBare {
        /// The path given.
        remote: String,
    },
    /// A proposal names a path outside the repository or inside `.git`.
    #[error("proposal path {path:?} is invalid: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// A config file in the repository is a symbolic link: its blob is the link's target
    /// (a path), which is never read as config nor followed.
    #[error("config repo file {path} is a symbolic link (config files must be regular files)")]
    SymbolicLink {
        /// The path of the link inside the repository.
        path: String,
    },
    /// A local repository operation failed.
    #[error("git: {what} failed in {dir}: {source}")]
    Local {
        /// What was being done.
        what: String,
        /// Local clone directory.
        dir: String,
        /// Cause.
        #[source]
        source: git2::Error,
    },
}
