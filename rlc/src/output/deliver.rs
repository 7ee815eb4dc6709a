//! After the commit: the new config to the controller (direct mode) or the pull request
//! opened or updated (review mode). Failures here do not undo the commit.

use tracing::{info, warn};

use crate::output::git_store::{GitStore, GitStoreError, MAIN_BRANCH, PR_BRANCH};
use crate::output::github::GitHubTarget;
use crate::output::github::{GitHubClient, GitHubError, PullRequest};
use crate::output::to_controllers::PushError;

/// Sends the config at `commit` (read from `store`, the run's clone) to every controller
/// in `addrs` (a region's active/standby controllers all hold the same config). Tries them
/// all; the first failure is returned.
pub async fn push_commit(
    store: GitStore,
    addrs: &[String],
    auth: &crate::output::to_controllers::ControllerAuth,
    commit: &str,
) -> Result<(), DeliveryError> {
    let files = read_commit(store, commit).await?;
    let mut first_error = None;
    for addr in addrs {
        if let Err(e) = send(addr, auth, commit, files.clone()).await {
            warn!(controller = %addr, error = %e, "controller push failed; it will pick the commit up from the repo");
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

async fn read_commit(
    store: GitStore,
    commit: &str,
) -> Result<Vec<(String, String)>, DeliveryError> {
    let c = commit.to_string();
    tokio::task::spawn_blocking(move || -> Result<_, GitStoreError> {
        let mut files = store.files_under(&c, "services")?;
        files.extend(store.files_under(&c, "limits")?);
        Ok(files)
    })
    .await?
    .map_err(|source| DeliveryError::Read {
        commit: commit.to_string(),
        source,
    })
}

async fn send(
    addr: &str,
    auth: &crate::output::to_controllers::ControllerAuth,
    commit: &str,
    files: Vec<(String, String)>,
) -> Result<(), DeliveryError> {
    let resp = crate::output::to_controllers::apply_config(addr, commit, files, auth).await?;
    info!(controller = addr, version = %resp.version, buckets = resp.buckets, "controller updated");
    Ok(())
}

/// After a run that committed nothing: asks each controller in `addrs` which config version
/// it runs and sends `main_commit`'s config to those that run another one (a previous run's
/// delivery failed, or the controller restarted on an older config). Returns whether it
/// sent to any; an unreachable controller is an error after the others were brought up to
/// date.
pub async fn resync(
    store: GitStore,
    addrs: &[String],
    auth: &crate::output::to_controllers::ControllerAuth,
    main_commit: &str,
) -> Result<bool, DeliveryError> {
    let mut behind = Vec::new();
    let mut first_error: Option<DeliveryError> = None;
    for addr in addrs {
        match crate::output::to_controllers::config_version(addr, auth).await {
            // A controller marks the overrides and scheduled limits in force after a `+`.
            Ok(running) if running.split('+').next() == Some(main_commit) => {}
            Ok(running) => {
                warn!(
                    controller = %addr,
                    running = %running,
                    main = main_commit,
                    "the controller runs another config than main; sending main's"
                );
                behind.push(addr.clone());
            }
            Err(e) => {
                warn!(controller = %addr, error = %e, "cannot ask the controller for its config version");
                first_error.get_or_insert(e.into());
            }
        }
    }
    let sent = !behind.is_empty();
    if sent && let Err(e) = push_commit(store, &behind, auth, main_commit).await {
        first_error.get_or_insert(e);
    }
    first_error.map_or(Ok(sent), Err)
}

/// Opens or updates the review pull request from [`PR_BRANCH`] with `body`.
pub async fn open_pull_request(gh: &GitHubTarget, body: &str) -> Result<(), DeliveryError> {
    let result = upsert(gh, body).await;
    match result {
        Ok(pr) => {
            info!(url = %pr.url, number = pr.number, created = pr.created, "pull request up to date");
            Ok(())
        }
        Err(e) => {
            warn!(error = %e, "opening the pull request failed; the branch is pushed");
            Err(e.into())
        }
    }
}

async fn upsert(gh: &GitHubTarget, body: &str) -> Result<PullRequest, GitHubError> {
    GitHubClient::with_extra_ca(&gh.api_base, &gh.token, &gh.repo, gh.ca_file.as_deref())?
        .upsert_pull_request(PR_BRANCH, MAIN_BRANCH, "rlc: rate limit changes", body)
        .await
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
