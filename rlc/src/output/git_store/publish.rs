//! Publishing a proposal: [`GitStore::publish_on`] makes one commit by the RLC on the tips a
//! fetch observed and pushes it fast-forward only — the lease described in the
//! [module doc](super) — and [`GitStore::publish`] loops fetch → build → publish for callers
//! that build their proposal synchronously.

use std::collections::BTreeSet;

use super::{
    Checkout, FileChange, GitStore, GitStoreError, MAIN_BRANCH, PR_BRANCH, Proposal, PublishMode,
    PublishOutcome, RLC_AUTHOR_EMAIL, RLC_AUTHOR_NAME, callbacks, tree,
};
use git2::{Commit, ErrorCode, Oid, PushOptions, Signature};

/// Result of one [`GitStore::publish_on`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushOutcome {
    /// The branch already carries the proposal: nothing pushed.
    UpToDate,
    /// The commit was pushed.
    Pushed {
        /// The new commit.
        commit: String,
        /// Branch it was pushed to (`main` or [`PR_BRANCH`]).
        branch: String,
    },
    /// The branch moved on the remote after the fetch (someone pushed): nothing was pushed
    /// and the remote is as they left it. Fetch again and build on the new tip.
    Moved {
        /// The ref that moved, e.g. `refs/heads/rlc/limits`.
        refname: String,
        /// What the remote (or libgit2) said.
        reason: String,
    },
}

/// Why a push did not land.
enum PushFailure {
    /// The ref moved on the remote; rebuilding on the new tip may succeed.
    NotFastForward(String),
    /// Anything else; retrying will not help.
    Fatal(GitStoreError),
}

/// The branch name and full ref a mode publishes to.
fn target(mode: PublishMode) -> (&'static str, String) {
    match mode {
        PublishMode::Direct => (MAIN_BRANCH, format!("refs/heads/{MAIN_BRANCH}")),
        PublishMode::Pr => (PR_BRANCH, format!("refs/heads/{PR_BRANCH}")),
    }
}

impl GitStore {
    /// Commits `proposal` (the full content of the files that should exist) on the tips
    /// `checkout` observed and pushes it, fast-forward only. When the branch already has
    /// exactly that content nothing is pushed ([`PushOutcome::UpToDate`]). Otherwise:
    /// - [`PublishMode::Direct`]: the commit goes on top of `main` (`checkout.commit`);
    /// - [`PublishMode::Pr`]: if [`PR_BRANCH`] holds commits by someone other than the RLC
    ///   that are not on `main`, the commit goes on top of the branch and leaves the files
    ///   those commits changed as they are; otherwise the commit carries `main` + proposal,
    ///   with the branch's tip as first parent (and `main` as second when the tip does not
    ///   contain it), so that it still descends from the tip.
    ///
    /// A push refused because the ref no longer is at the observed tip gives
    /// [`PushOutcome::Moved`]; a remote that refuses the ref for any other reason gives
    /// [`GitStoreError::Refused`]. Either way the remote is left as it was.
    pub fn publish_on(
        &self,
        checkout: &Checkout,
        mode: PublishMode,
        proposal: &Proposal,
    ) -> Result<PushOutcome, GitStoreError> {
        let (branch, refname) = target(mode);
        let base = &checkout.commit;
        let Some(commit) = self.prepare_commit(mode, checkout, proposal)? else {
            tracing::info!(base = %base, branch, "limits already up to date");
            return Ok(PushOutcome::UpToDate);
        };
        match self.push(&refname, commit) {
            Ok(()) => {
                tracing::info!(commit = %commit, branch, base = %base, "limits pushed");
                Ok(PushOutcome::Pushed {
                    commit: commit.to_string(),
                    branch: branch.to_string(),
                })
            }
            Err(PushFailure::NotFastForward(reason)) => {
                tracing::warn!(
                    refname = %refname,
                    observed = checkout_tip(mode, checkout).unwrap_or("(none)"),
                    reason = %reason,
                    "branch moved under the run (someone pushed); nothing pushed"
                );
                Ok(PushOutcome::Moved { refname, reason })
            }
            Err(PushFailure::Fatal(e)) => {
                tracing::warn!(refname = %refname, error = %e, "push failed");
                Err(e)
            }
        }
    }

    /// Publishes what `build` proposes, as one commit by the RLC.
    ///
    /// Each attempt fetches, checks out `main` and calls `build` with that checkout; `build`
    /// returns the full content of the files that should exist (or `None`), which is then
    /// published by [`GitStore::publish_on`]. When the branch moved under the attempt, a new
    /// attempt fetches and builds again, up to `max_attempts` (at least 1), then
    /// [`GitStoreError::Contended`].
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
        let mut attempt = 1;
        loop {
            let checkout = self.fetch()?;
            let base = checkout.commit.clone();
            let Some(proposal) = build(&checkout).map_err(GitStoreError::Build)? else {
                tracing::info!(base = %base, "nothing proposed");
                return Ok(PublishOutcome::NoChange { base });
            };
            match self.publish_on(&checkout, mode, &proposal)? {
                PushOutcome::UpToDate => return Ok(PublishOutcome::NoChange { base }),
                PushOutcome::Pushed { commit, branch } => {
                    return Ok(PublishOutcome::Committed {
                        commit,
                        branch,
                        base,
                        attempts: attempt,
                    });
                }
                PushOutcome::Moved { .. } if attempt < max_attempts => attempt += 1,
                PushOutcome::Moved { refname, reason } => {
                    return Err(self.contended(refname, attempt, reason));
                }
            }
        }
    }

    /// The error for a ref that kept moving under `attempts` attempts.
    pub(crate) fn contended(
        &self,
        refname: String,
        attempts: u32,
        reason: String,
    ) -> GitStoreError {
        GitStoreError::Contended {
            remote: self.remote.clone(),
            refname,
            attempts,
            reason,
        }
    }

    /// Creates the commit for `proposal` (not yet on any ref), or `None` when the branch
    /// already has it.
    fn prepare_commit(
        &self,
        mode: PublishMode,
        checkout: &Checkout,
        proposal: &Proposal,
    ) -> Result<Option<Oid>, GitStoreError> {
        for file in &proposal.files {
            tree::validate_path(&file.path)?;
        }
        let base = self.commit_at(&checkout.commit, "read main")?;
        let base_tree = base.tree().map_err(|e| self.local("read main", e))?;
        let on_base = tree::apply(&self.repo, &base_tree, &proposal.files)
            .map_err(|e| self.local("build tree", e))?;
        if on_base == base_tree.id() {
            return Ok(None);
        }
        let tip = match (mode, &checkout.review_tip) {
            (PublishMode::Pr, Some(tip)) => self.commit_at(tip, "read review branch")?,
            _ => return self.commit(proposal, on_base, &[&base]).map(Some),
        };
        if let Some(theirs) = self.foreign_paths(tip.id(), base.id())? {
            let (kept, mine): (Vec<&FileChange>, Vec<&FileChange>) = proposal
                .files
                .iter()
                .partition(|f| theirs.contains(&f.path));
            for f in kept {
                tracing::info!(
                    path = %f.path,
                    branch = PR_BRANCH,
                    "a person changed this file on the review branch; leaving it as they wrote it"
                );
            }
            let mine: Vec<FileChange> = mine.into_iter().cloned().collect();
            let tip_tree = tip
                .tree()
                .map_err(|e| self.local("read review branch", e))?;
            let new_tree = tree::apply(&self.repo, &tip_tree, &mine)
                .map_err(|e| self.local("build tree", e))?;
            if new_tree == tip_tree.id() {
                return Ok(None);
            }
            return self.commit(proposal, new_tree, &[&tip]).map(Some);
        }
        let has_base = self.contains(tip.id(), base.id())?;
        if has_base && tip.tree_id() == on_base {
            return Ok(None);
        }
        if self.contains(base.id(), tip.id())? {
            self.commit(proposal, on_base, &[&base]).map(Some)
        } else if has_base {
            self.commit(proposal, on_base, &[&tip]).map(Some)
        } else {
            self.commit(proposal, on_base, &[&tip, &base]).map(Some)
        }
    }

    fn commit_at(&self, id: &str, what: &str) -> Result<Commit<'_>, GitStoreError> {
        let oid = Oid::from_str(id).map_err(|e| self.local(what, e))?;
        self.repo.find_commit(oid).map_err(|e| self.local(what, e))
    }

    /// Whether `ancestor` is `id` or in its history.
    fn contains(&self, id: Oid, ancestor: Oid) -> Result<bool, GitStoreError> {
        Ok(id == ancestor
            || self
                .repo
                .graph_descendant_of(id, ancestor)
                .map_err(|e| self.local("compare histories", e))?)
    }

    /// A commit by the RLC of `tree` with `parents`.
    fn commit(
        &self,
        proposal: &Proposal,
        tree: Oid,
        parents: &[&Commit<'_>],
    ) -> Result<Oid, GitStoreError> {
        let tree = self
            .repo
            .find_tree(tree)
            .map_err(|e| self.local("read tree", e))?;
        let sig = Signature::now(RLC_AUTHOR_NAME, RLC_AUTHOR_EMAIL)
            .map_err(|e| self.local("make signature", e))?;
        self.repo
            .commit(None, &sig, &sig, &proposal.message, &tree, parents)
            .map_err(|e| self.local("commit", e))
    }

    /// The paths changed by commits on `tip` that are not on `main` (`base`) and whose
    /// author is not the RLC; `None` when there are no such commits.
    fn foreign_paths(
        &self,
        tip: Oid,
        base: Oid,
    ) -> Result<Option<BTreeSet<String>>, GitStoreError> {
        let err = |e| self.local("walk review branch", e);
        let mut walk = self.repo.revwalk().map_err(err)?;
        walk.push(tip).map_err(err)?;
        walk.hide(base).map_err(err)?;
        let mut paths: Option<BTreeSet<String>> = None;
        for id in walk {
            let commit = self.repo.find_commit(id.map_err(err)?).map_err(err)?;
            if commit.author().email_bytes() == RLC_AUTHOR_EMAIL.as_bytes() {
                continue;
            }
            let tree = commit.tree().map_err(err)?;
            let parent_tree = match commit.parents().next() {
                Some(p) => Some(p.tree().map_err(err)?),
                None => None,
            };
            let diff = self
                .repo
                .diff_tree_to_tree(parent_tree.as_ref(), Some(&tree), None)
                .map_err(err)?;
            let set = paths.get_or_insert_with(BTreeSet::new);
            for d in diff.deltas() {
                for f in [d.new_file(), d.old_file()] {
                    if let Some(p) = f.path() {
                        set.insert(p.to_string_lossy().replace('\\', "/"));
                    }
                }
            }
        }
        Ok(paths)
    }

    /// Pushes `commit` to `refname` on `origin` without force, reading the remote's per-ref
    /// verdict (libgit2 returns `Ok` from `push` even when the remote refuses a ref).
    fn push(&self, refname: &str, commit: Oid) -> Result<(), PushFailure> {
        let fatal = |source| {
            PushFailure::Fatal(GitStoreError::Push {
                remote: self.remote.clone(),
                refname: refname.to_string(),
                source,
            })
        };
        let mut remote = self.repo.find_remote("origin").map_err(fatal)?;
        let spec = format!("{commit}:{refname}");
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

/// The tip a push in `mode` must find on the remote.
fn checkout_tip(mode: PublishMode, checkout: &Checkout) -> Option<&str> {
    match mode {
        PublishMode::Direct => Some(&checkout.commit),
        PublishMode::Pr => checkout.review_tip.as_deref(),
    }
}
