//! In PR mode, a failed rollout is told on the pull request whose merge it rolled out: the
//! configurator's review branch's pull request merged last.

use tracing::warn;

use crate::output::git_store::{MAIN_BRANCH, PR_BRANCH};
use crate::output::github::GitHubClient;
use crate::output::github::GitHubTarget;

/// Comments `text` on the pull request from the review branch merged last; failures are
/// logged (the rollout's record and exit code already carry the reason).
pub async fn comment(gh: &GitHubTarget, commit: &str, text: &str) {
    let body = format!(
        "Staged rollout of `{commit}` stopped: a gate failed and the regions already moved \
         were rolled back.\n\n```\n{text}\n```\n"
    );
    let result = async {
        let client =
            GitHubClient::with_extra_ca(&gh.api_base, &gh.token, &gh.repo, gh.ca_file.as_deref())?;
        match client.last_merged(PR_BRANCH, MAIN_BRANCH).await? {
            Some(n) => client.comment(n, &body).await.map(|()| true),
            None => Ok(false),
        }
    }
    .await;
    match result {
        Ok(true) => {}
        Ok(false) => warn!(
            commit,
            "no merged pull request to comment the failed rollout on"
        ),
        Err(e) => {
            warn!(commit, error = %e, "commenting the failed rollout on the pull request failed");
        }
    }
}
