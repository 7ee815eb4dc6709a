//! The regions' branches, `regions/<region>`, that a staged rollout moves and each region's
//! controllers follow (`grl controller --config-ref regions/<region>`).
//!
//! A branch only ever points at a commit of `main`. Moving it forward is a fast-forward push
//! (or its creation). Moving it back, a rollback, points it again at the commit it held
//! before the rollout: no commit is rewritten or made, so every version a controller has
//! run stays in the history it fetched. That one push is forced (the remote must allow
//! non-fast-forward updates of `refs/heads/regions/*`), right after checking that the
//! branch still is where the rollout put it.

use git2::{Oid, PushOptions};

use super::{GitStore, GitStoreError, MAIN_BRANCH, callbacks};

/// The branch a region's controllers follow.
pub fn region_branch(region: &str) -> String {
    format!("regions/{region}")
}

impl GitStore {
    /// Fetches every branch of `origin` (the work tree is left alone) and returns `main`'s
    /// tip.
    pub fn refresh(&self) -> Result<String, GitStoreError> {
        self.fetch_refs()?;
        self.remote_branch(MAIN_BRANCH)?
            .map(|id| id.to_string())
            .ok_or_else(|| GitStoreError::NoMain {
                remote: self.remote.clone(),
            })
    }

    /// The commit `regions/<region>` points at, as last fetched (`None`: no such branch).
    pub fn region_tip(&self, region: &str) -> Result<Option<String>, GitStoreError> {
        Ok(self
            .remote_branch(&region_branch(region))?
            .map(|id| id.to_string()))
    }

    /// Whether `commit` is a commit of this repository (as last fetched).
    pub fn has_commit(&self, commit: &str) -> bool {
        Oid::from_str(commit).is_ok_and(|id| self.repo.find_commit(id).is_ok())
    }

    /// Whether `ancestor` is `commit` or in its history.
    pub fn is_ancestor(&self, ancestor: &str, commit: &str) -> Result<bool, GitStoreError> {
        let (a, c) = (self.resolve(ancestor)?, self.resolve(commit)?);
        Ok(a == c
            || self
                .repo
                .graph_descendant_of(c, a)
                .map_err(|e| self.local("compare histories", e))?)
    }

    /// Points `regions/<region>` at `commit` on the remote. `expected` is where the branch
    /// must be now (`None`: it must not exist); a move to a commit that is not a descendant
    /// of `expected` (a rollback) is pushed forced, after checking `expected` again.
    pub fn move_region(
        &self,
        region: &str,
        commit: &str,
        expected: Option<&str>,
    ) -> Result<(), GitStoreError> {
        let branch = region_branch(region);
        let refname = format!("refs/heads/{branch}");
        self.fetch_refs()?;
        let now = self.region_tip(region)?;
        if now.as_deref() == Some(commit) {
            return Ok(());
        }
        if now.as_deref() != expected {
            return Err(GitStoreError::Refused {
                remote: self.remote.clone(),
                refname,
                reason: format!(
                    "the branch is at {} where the rollout expected {}; someone else moved it",
                    now.as_deref().unwrap_or("(none)"),
                    expected.unwrap_or("(none)")
                ),
            });
        }
        let forward = match expected {
            None => true,
            Some(old) => self.is_ancestor(old, commit)?,
        };
        let spec = format!("{}{commit}:{refname}", if forward { "" } else { "+" });
        let push_err = |source| GitStoreError::Push {
            remote: self.remote.clone(),
            refname: refname.clone(),
            source,
        };
        let mut remote = self.repo.find_remote("origin").map_err(push_err)?;
        let mut verdicts: Vec<(String, Option<String>)> = Vec::new();
        {
            let mut cb = callbacks();
            cb.push_update_reference(|name, status| {
                verdicts.push((name.to_string(), status.map(str::to_string)));
                Ok(())
            });
            let mut opts = PushOptions::new();
            opts.remote_callbacks(cb);
            remote
                .push(&[spec.as_str()], Some(&mut opts))
                .map_err(push_err)?;
        }
        match verdicts.into_iter().find(|(name, _)| *name == refname) {
            Some((_, None)) => {
                tracing::info!(region, branch = %branch, commit, forward, "region branch moved");
                Ok(())
            }
            Some((_, Some(reason))) => Err(GitStoreError::Refused {
                remote: self.remote.clone(),
                refname,
                reason,
            }),
            None => Err(GitStoreError::Refused {
                remote: self.remote.clone(),
                refname,
                reason: "the remote did not confirm the update".into(),
            }),
        }
    }
}
