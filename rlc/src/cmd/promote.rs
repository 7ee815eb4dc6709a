//! `rlc promote <service> <bucket>`: shadow → deny as a commit (or PR) like any other.

use std::path::PathBuf;

use clap::Args;
use rlc::drive::promote::promote_text;
use rlc::output::git_store::{FileChange, GitStore, Proposal, PublishMode, PublishOutcome};

/// Where `rlc promote` commits (no controller is pushed to: the controllers following the
/// config repo, or the next `rlc run`, pick the change up).
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum PromoteMode {
    /// Straight to `main`.
    Direct,
    /// To the review branch `rlc/limits`, for a pull request.
    Pr,
}

/// `rlc promote`.
#[derive(Debug, Clone, Args)]
pub(crate) struct PromoteCmd {
    /// The service.
    pub service: String,
    /// The bucket to enforce.
    pub bucket: String,
    /// The config repo: a git URL or a path.
    #[arg(long, env = "RLC_CONFIG_REPO", hide_env_values = true)]
    pub config_repo: String,
    /// Commit to main (`direct`) or to the review branch (`pr`).
    #[arg(long, value_enum, default_value = "pr")]
    pub mode: PromoteMode,
    /// Where the local clone is kept.
    #[arg(long, default_value = ".rlc/promote")]
    pub workdir: PathBuf,
}

/// Flips the mode and publishes the commit.
pub(crate) async fn execute(cmd: PromoteCmd) -> anyhow::Result<()> {
    rlc::output::git_store::check_pushable(&cmd.config_repo)?;
    let outcome = tokio::task::spawn_blocking(move || -> anyhow::Result<PublishOutcome> {
        let mut store = GitStore::open(&cmd.config_repo, &cmd.workdir)?;
        let mode = match cmd.mode {
            PromoteMode::Direct => PublishMode::Direct,
            PromoteMode::Pr => PublishMode::Pr,
        };
        let path = format!("services/{}.yaml", cmd.service);
        let outcome = store.publish(mode, 3, |checkout| {
            let text = checkout
                .file(&path)?
                .ok_or_else(|| format!("{path}: no such file on main"))?;
            let content = promote_text(&path, &text, &cmd.bucket)?;
            Ok(Some(Proposal {
                files: vec![FileChange {
                    path: path.clone(),
                    content,
                }],
                message: format!(
                    "{}: enforce bucket {} (shadow → deny)\n",
                    cmd.service, cmd.bucket
                ),
                description: format!(
                    "Promote `{}/{}` from shadow to deny.",
                    cmd.service, cmd.bucket
                ),
            }))
        })?;
        Ok(outcome)
    })
    .await??;
    match outcome {
        PublishOutcome::Committed { commit, branch, .. } => {
            println!("promoted: commit {commit} on {branch}");
        }
        PublishOutcome::NoChange { .. } => println!("nothing to change"),
    }
    Ok(())
}
