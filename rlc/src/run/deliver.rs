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

/// After a run that committed nothing: asks the controller at `addr` which config version
/// it runs and, when that is not `main_commit` (a previous run's delivery failed, or the
/// controller restarted on an older config), sends `main_commit`'s config. Returns whether
/// it sent.
pub(super) async fn resync(
    store: GitStore,
    addr: &str,
    auth: &crate::push::ControllerAuth,
    main_commit: &str,
) -> Result<bool, DeliveryError> {
    let running = match crate::push::config_version(addr, auth).await {
        Ok(v) => v,
        Err(e) => {
            warn!(controller = addr, error = %e, "cannot ask the controller for its config version");
            return Err(e.into());
        }
    };
    if running == main_commit {
        return Ok(false);
    }
    warn!(
        controller = addr,
        running = %running,
        main = main_commit,
        "the controller runs another config than main; sending main's"
    );
    push_commit(store, addr, auth, main_commit)
        .await
        .map(|()| true)
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
