//! Publishing a proposal: build on the freshest `main`, commit with the RLC identity, push,
//! and start over on a newer `main` when someone pushed in between.

use super::{
    Checkout, GitStore, GitStoreError, MAIN_BRANCH, PR_BRANCH, Proposal, PublishMode,
    PublishOutcome, RLC_AUTHOR_EMAIL, RLC_AUTHOR_NAME, callbacks, tree,
};
use git2::{ErrorCode, Oid, PushOptions, Signature};

/// Why a push did not land.
enum PushFailure {
    /// The ref moved on the remote; rebuilding on the new tip may succeed.
    NotFastForward(String),
    /// Anything else; retrying will not help.
    Fatal(GitStoreError),
}

impl GitStore {
    /// Publishes what `build` proposes, as one commit by the RLC.
    ///
    /// Each attempt fetches, checks out `main` and calls `build` with that checkout; `build`
    /// returns the full content of the files that should exist (or `None`). When `main`
    /// already has exactly that content the result is [`PublishOutcome::NoChange`] and nothing
    /// is pushed. Otherwise:
    /// - [`PublishMode::Direct`]: the commit goes on top of `main` and is pushed
    ///   fast-forward-only to `refs/heads/main`;
    /// - [`PublishMode::Pr`]: if [`PR_BRANCH`] holds commits by someone other than the RLC
    ///   that are not on `main`, the commit goes on top of the branch (fast-forward push);
    ///   otherwise the branch is rebuilt from `main` and force-updated in place. When the
    ///   branch already carries exactly this proposal, nothing is pushed (`NoChange`).
    ///
    /// A push rejected because the ref moved starts a new attempt (a new `build` on the new
    /// base), up to `max_attempts` (at least 1). A remote that refuses the ref for any other
    /// reason gives [`GitStoreError::Refused`]; the remote is left as it was.
    pub fn publish<F>(
        &mut self,
        mode: PublishMode,
        max_attempts: u32,
        mut build: F,
    ) -> Result<PublishOutcome, GitStoreError>
    where
        F: FnMut(&Checkout) -> Result<Option<Proposal>, Box<dyn std::error::Error + Send + Sync>>,
    {
        let max_attempts = max_attempts.max(1);
        let (branch, refname) = match mode {
            PublishMode::Direct => (MAIN_BRANCH, "refs/heads/main".to_string()),
            PublishMode::Pr => (PR_BRANCH, format!("refs/heads/{PR_BRANCH}")),
        };
        let mut attempt = 1;
        loop {
            let checkout = self.fetch()?;
            let base = checkout.commit.clone();
            let Some(proposal) = build(&checkout).map_err(GitStoreError::Build)? else {
                tracing::info!(base = %base, "nothing proposed");
                return Ok(PublishOutcome::NoChange { base });
            };
            let Some((commit, force)) = self.prepare_commit(mode, &base, &proposal)? else {
                tracing::info!(base = %base, branch, "limits already up to date");
                return Ok(PublishOutcome::NoChange { base });
            };
            match self.push(&refname, commit, force) {
                Ok(()) => {
                    tracing::info!(commit = %commit, branch, base = %base, attempt, "limits pushed");
                    return Ok(PublishOutcome::Committed {
                        commit: commit.to_string(),
                        branch: branch.to_string(),
                        base,
                        attempts: attempt,
                    });
                }
                Err(PushFailure::NotFastForward(reason)) if attempt < max_attempts => {
                    tracing::warn!(refname = %refname, attempt, reason = %reason, "ref moved, rebuilding");
                    attempt += 1;
                }
                Err(PushFailure::NotFastForward(reason)) => {
                    return Err(GitStoreError::Contended {
                        remote: self.remote.clone(),
                        refname,
                        attempts: attempt,
                        reason,
                    });
                }
                Err(PushFailure::Fatal(e)) => {
                    tracing::warn!(refname = %refname, error = %e, "push failed");
                    return Err(e);
                }
            }
        }
    }

    /// Creates the commit for `proposal` (not yet on any ref). Returns it and whether the push
    /// must be forced, or `None` when there is nothing to commit.
    fn prepare_commit(
        &self,
        mode: PublishMode,
        base: &str,
        proposal: &Proposal,
    ) -> Result<Option<(Oid, bool)>, GitStoreError> {
        for file in &proposal.files {
            tree::validate_path(&file.path)?;
        }
        let base_id = Oid::from_str(base).map_err(|e| self.local("parse base id", e))?;
        let base_commit = self
            .repo
            .find_commit(base_id)
            .map_err(|e| self.local("read main", e))?;
        let base_tree = base_commit.tree().map_err(|e| self.local("read main", e))?;
        let on_base = tree::apply(&self.repo, &base_tree, &proposal.files)
            .map_err(|e| self.local("build tree", e))?;
        if on_base == base_tree.id() {
            return Ok(None);
        }

        let tip = match mode {
            PublishMode::Direct => None,
            PublishMode::Pr => self.remote_branch(PR_BRANCH)?,
        };
        let (parent, new_tree, force) = match tip {
            Some(tip) if self.has_foreign_commits(tip, base_id)? => {
                let tip_commit = self
                    .repo
                    .find_commit(tip)
                    .map_err(|e| self.local("read branch", e))?;
                let tip_tree = tip_commit
                    .tree()
                    .map_err(|e| self.local("read branch", e))?;
                let new_tree = tree::apply(&self.repo, &tip_tree, &proposal.files)
                    .map_err(|e| self.local("build tree", e))?;
                if new_tree == tip_tree.id() {
                    return Ok(None);
                }
                (tip_commit, new_tree, false)
            }
            Some(tip) => {
                let tip_commit = self
                    .repo
                    .find_commit(tip)
                    .map_err(|e| self.local("read branch", e))?;
                let same_base = tip_commit.parent_ids().eq([base_id]);
                if same_base && tip_commit.tree_id() == on_base {
                    return Ok(None);
                }
                (base_commit, on_base, true)
            }
            None => (base_commit, on_base, false),
        };
        let tree = self
            .repo
            .find_tree(new_tree)
            .map_err(|e| self.local("read tree", e))?;
        let sig = Signature::now(RLC_AUTHOR_NAME, RLC_AUTHOR_EMAIL)
            .map_err(|e| self.local("make signature", e))?;
        let commit = self
            .repo
            .commit(None, &sig, &sig, &proposal.message, &tree, &[&parent])
            .map_err(|e| self.local("commit", e))?;
        Ok(Some((commit, force)))
    }

    /// Whether `tip` has commits not on `main` (`base`) whose author is not the RLC.
    fn has_foreign_commits(&self, tip: Oid, base: Oid) -> Result<bool, GitStoreError> {
        let err = |e| self.local("walk review branch", e);
        let mut walk = self.repo.revwalk().map_err(err)?;
        walk.push(tip).map_err(err)?;
        walk.hide(base).map_err(err)?;
        for id in walk {
            let commit = self.repo.find_commit(id.map_err(err)?).map_err(err)?;
            if commit.author().email_bytes() != RLC_AUTHOR_EMAIL.as_bytes() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Pushes `commit` to `refname` on `origin`, reading the remote's per-ref verdict (libgit2
    /// returns `Ok` from `push` even when the remote refuses a ref).
    fn push(&self, refname: &str, commit: Oid, force: bool) -> Result<(), PushFailure> {
        let fatal = |source| {
            PushFailure::Fatal(GitStoreError::Push {
                remote: self.remote.clone(),
                refname: refname.to_string(),
                source,
            })
        };
        let mut remote = self.repo.find_remote("origin").map_err(fatal)?;
        let spec = format!("{}{commit}:{refname}", if force { "+" } else { "" });
        let mut verdicts: Vec<(String, Option<String>)> = Vec::new();
        let result = {
            let mut cb = callbacks();
            cb.push_update_reference(|name, status| {
                verdicts.push((name.to_string(), status.map(str::to_string)));
                Ok(())
            });
            let mut opts = PushOptions::new();
            opts.remote_callbacks(cb);
            remote.push(&[spec.as_str()], Some(&mut opts))
        };
        match result {
            Err(e) if e.code() == ErrorCode::NotFastForward => {
                return Err(PushFailure::NotFastForward(e.message().to_string()));
            }
            Err(e) => return Err(fatal(e)),
            Ok(()) => {}
        }
        let verdict = verdicts.into_iter().find(|(name, _)| name == refname);
        match verdict {
            Some((_, None)) => Ok(()),
            Some((_, Some(reason))) if is_not_fast_forward(&reason) => {
                Err(PushFailure::NotFastForward(reason))
            }
            Some((_, Some(reason))) => Err(self.refused(refname, reason)),
            None => Err(self.refused(refname, "the remote did not confirm the update".into())),
        }
    }

    fn refused(&self, refname: &str, reason: String) -> PushFailure {
        PushFailure::Fatal(GitStoreError::Refused {
            remote: self.remote.clone(),
            refname: refname.to_string(),
            reason,
        })
    }
}

/// Whether a remote's rejection means "the ref moved" rather than "not allowed".
fn is_not_fast_forward(reason: &str) -> bool {
    let r = reason.to_ascii_lowercase();
    r.contains("non-fast-forward")
        || r.contains("fetch first")
        || r.contains("stale info")
        || r.contains("failed to lock")
}
