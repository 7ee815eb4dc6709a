//! The rollout's clone of the config repo: its git work runs on blocking threads, the clone
//! handed there and back, as a run does with its own.

use std::path::Path;

use grl_config::Snapshot;

use super::RolloutError;
use crate::output::git_store::{GitStore, GitStoreError};

/// A clone of the config repo used by one rollout driver.
#[derive(Debug)]
pub struct Repo(Option<GitStore>);

impl Repo {
    /// Opens (or creates) the clone of `remote` in `dir` and fetches.
    pub async fn open(remote: &str, dir: &Path) -> Result<Repo, RolloutError> {
        let (remote, dir) = (remote.to_string(), dir.to_path_buf());
        let store = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir).map_err(|e| GitStoreError::Open {
                remote: crate::secrets::redact_url(&remote),
                dir: dir.display().to_string(),
                source: git2::Error::from_str(&e.to_string()),
            })?;
            GitStore::open(&remote, &dir)
        })
        .await??;
        Ok(Repo(Some(store)))
    }

    /// Runs `f` with the clone on a blocking thread.
    pub async fn with<T, F>(&mut self, f: F) -> Result<T, RolloutError>
    where
        T: Send + 'static,
        F: FnOnce(&GitStore) -> Result<T, GitStoreError> + Send + 'static,
    {
        let store = self.0.take().ok_or(RolloutError::RepoLost)?;
        let (store, result) = tokio::task::spawn_blocking(move || {
            let r = f(&store);
            (store, r)
        })
        .await?;
        self.0 = Some(store);
        Ok(result?)
    }

    /// `main`'s tip, after a fetch.
    pub async fn main_tip(&mut self) -> Result<String, RolloutError> {
        self.with(GitStore::refresh).await
    }

    /// The content of `path` at `commit`.
    pub async fn file(&mut self, commit: &str, path: &str) -> Result<Option<String>, RolloutError> {
        let (c, p) = (commit.to_string(), path.to_string());
        self.with(move |s| s.file_at(&c, &p)).await
    }

    /// The files a controller is sent for `commit` (`services/`, `limits/`).
    pub async fn controller_files(
        &mut self,
        commit: &str,
    ) -> Result<Vec<(String, String)>, RolloutError> {
        let c = commit.to_string();
        self.with(move |s| {
            let mut files = s.files_under(&c, "services")?;
            files.extend(s.files_under(&c, "limits")?);
            Ok(files)
        })
        .await
    }

    /// The validated config at `commit`.
    pub async fn snapshot(&mut self, commit: &str) -> Result<Snapshot, RolloutError> {
        let c = commit.to_string();
        let files = self.with(move |s| s.config_files(&c)).await?;
        Ok(grl_config::from_files(commit, files)?)
    }
}
