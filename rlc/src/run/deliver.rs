//! After the commit: the new config to the controller (direct mode) or the pull request
//! opened or updated (review mode). Failures here do not undo the commit.

use tracing::{info, warn};

use super::{DeliveryError, GitHubTarget};
use crate::git_store::{GitStore, GitStoreError, MAIN_BRANCH, PR_BRANCH};
use crate::github::{GitHubClient, GitHubError, PullRequest};

/// Sends the config at `commit` (read from `store`, the run's clone) to the controller at
/// `addr`.
pub(super) async fn push_commit(
    store: GitStore,
    addr: &str,
    auth: &crate::push::ControllerAuth,
    commit: &str,
) -> Result<(), DeliveryError> {
    let result = send(store, addr, auth, commit).await;
    if let Err(e) = &result {
        warn!(controller = addr, error = %e, "controller push failed; it will pick the commit up from the repo");
    }
    result
}

async fn send(
    store: GitStore,
    addr: &str,
    auth: &crate::push::ControllerAuth,
    commit: &str,
) -> Result<(), DeliveryError> {
    let c = commit.to_string();
    let files = tokio::task::spawn_blocking(move || -> Result<_, GitStoreError> {
        let mut files = store.files_under(&c, "services")?;
        files.extend(store.files_under(&c, "limits")?);
        Ok(files)
    })
    .await?
    .map_err(|source| DeliveryError::Read {
        commit: commit.to_string(),
        source,
    })?;
    let resp = crate::push::apply_config(addr, commit, files, auth).await?;
    info!(controller = addr, version = %resp.version, buckets = resp.buckets, "controller updated");
    Ok(())
}

/// Opens or updates the review pull request from [`PR_BRANCH`] with `body`.
pub(super) async fn open_pull_request(gh: &GitHubTarget, body: &str) -> Result<(), DeliveryError> {
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
