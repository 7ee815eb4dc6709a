//! The git config store: a local clone of the config repository that the RLC reads intent
//! from and publishes computed limits to, either straight to `main` or on the review branch
//! [`PR_BRANCH`].
//!
//! Publishing never loses anyone's work:
//! - every push is a plain fast-forward, never forced: the new commit always descends from
//!   the tip the run observed when it fetched ([`Checkout::commit`] for `main`,
//!   [`Checkout::review_tip`] for the review branch). That makes each push a compare-and-swap
//!   on the observed tip, the lease that libgit2 lacks (it has no `--force-with-lease`): if
//!   anyone pushed to the ref in between, their commit is not an ancestor of ours, the remote
//!   refuses the update as non-fast-forward, and [`GitStore::publish_on`] reports
//!   [`PushOutcome::Moved`] without having changed anything. The caller re-reads and tries
//!   again on top of the new tip.
//! - the review branch is "rebuilt" when it holds only the RLC's own commits, but not by
//!   resetting it: the new commit carries the tree `main` + proposal and has the observed tip
//!   as its first parent (and `main` as a second parent when `main` is not already in its
//!   history), so the pull request shows exactly the proposal and no force is ever needed —
//!   also on remotes whose hooks refuse forced updates. (Checking the remote tip just before
//!   a forced push would still leave a window between the check and the push.)
//! - a person's commits on the review branch are built upon, and files they changed there are
//!   left as they wrote them (the RLC's update of such a file waits until the pull request
//!   is merged or the person's commit is gone).
//! - a remote that refuses a ref for another reason (hook, protection) is reported as an
//!   error (libgit2 reports such refusals only through a callback, which is checked here).

mod error;
mod publish;
mod regions;
mod remote;
mod tree;

#[cfg(test)]
mod tests;

pub use error::GitStoreError;
pub use publish::PushOutcome;
pub use regions::region_branch;

use git2::{
    AutotagOption, FetchOptions, FetchPrune, ObjectType, Oid, Repository, TreeWalkMode,
    TreeWalkResult,
};
use remote::{callbacks, redact};
use std::path::{Path, PathBuf};

/// Author name of commits made by the RLC.
pub const RLC_AUTHOR_NAME: &str = "rlc";
/// Author e-mail of commits made by the RLC; commits with it are reported as `by_rlc`.
pub const RLC_AUTHOR_EMAIL: &str = "rlc@grl.local";
/// Branch that carries proposals in [`PublishMode::Pr`].
pub const PR_BRANCH: &str = "rlc/limits";
/// The branch people and the GRL read limits from.
pub const MAIN_BRANCH: &str = "main";

/// The git file mode of a symbolic link: its blob holds the target's path, and reading it
/// as a config file (or following it in the work tree) is refused.
const LINK_MODE: i32 = 0o120_000;

/// Where [`GitStore::publish`] puts a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishMode {
    /// Commit straight to `main`.
    Direct,
    /// Commit to the review branch [`PR_BRANCH`] (a pull request is opened separately).
    Pr,
}

/// One file of a proposal, with its full new content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// Path inside the repository, `/`-separated, e.g. `limits/checkout.yaml`.
    pub path: String,
    /// The whole content the file should have.
    pub content: String,
}

/// What a run wants the repository to contain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// Files that should exist with exactly this content (others are left alone).
    pub files: Vec<FileChange>,
    /// Commit message (the caller adds the `Rlc-Run: <run id>` trailer).
    pub message: String,
    /// Markdown description, used as the pull-request body.
    pub description: String,
}

/// A work tree checked out at `main`, with the remote tips observed by the fetch that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    /// Directory of the work tree.
    pub dir: PathBuf,
    /// Id of the `main` commit it was built from.
    pub commit: String,
    /// Tip of the review branch [`PR_BRANCH`] seen by the same fetch (`None`: no branch).
    /// A push of the review branch only lands if the branch is still there.
    pub review_tip: Option<String>,
}

impl Checkout {
    /// Content of `path` in the checked-out commit, read from git's objects rather than the
    /// work tree: a symbolic link committed there is refused, never followed out of it.
    pub fn file(&self, path: &str) -> Result<Option<String>, GitStoreError> {
        let store = GitStore {
            repo: Repository::open(&self.dir).map_err(|source| GitStoreError::Local {
                what: "open the clone".into(),
                dir: self.dir.display().to_string(),
                source,
            })?,
            dir: self.dir.clone(),
            remote: String::new(),
        };
        store.file_at(&self.commit, path)
    }
}

/// Result of [`GitStore::publish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// Nothing to commit: `main` (or, in PR mode, the open review branch) already has it.
    NoChange {
        /// The `main` commit the proposal was compared with.
        base: String,
    },
    /// A commit was pushed.
    Committed {
        /// The new commit.
        commit: String,
        /// Branch it was pushed to (`main` or [`PR_BRANCH`]).
        branch: String,
        /// The `main` commit the proposal was built from.
        base: String,
        /// How many build/push rounds it took (1 unless someone pushed concurrently).
        attempts: u32,
    },
}

/// A commit as shown to the trigger logic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// Commit id.
    pub id: String,
    /// Author name.
    pub author_name: String,
    /// Author e-mail.
    pub author_email: String,
    /// Full commit message.
    pub message: String,
    /// Paths added, modified or deleted relative to the first parent.
    pub paths: Vec<String>,
    /// Whether the RLC made it (author e-mail is [`RLC_AUTHOR_EMAIL`]).
    pub by_rlc: bool,
}

/// A local clone of the config repository, with `origin` pointing at the remote.
pub struct GitStore {
    repo: Repository,
    dir: PathBuf,
    remote: String,
}

impl std::fmt::Debug for GitStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitStore")
            .field("dir", &self.dir)
            .field("remote", &self.remote)
            .finish()
    }
}

/// Refuses, before anything is computed, a config repo rlc could never push to: a local
/// path (or `file://` URL) of a repository with a working tree.
pub fn check_pushable(remote: &str) -> Result<(), GitStoreError> {
    let path = remote.strip_prefix("file://").unwrap_or(remote);
    if path.contains("://") || !Path::new(path).exists() {
        return Ok(());
    }
    match Repository::open(path) {
        Ok(repo) if !repo.is_bare() => Err(GitStoreError::NotBare {
            remote: redact(remote),
        }),
        _ => Ok(()),
    }
}

/// Removes the lock files git leaves in the clone at `workdir` when a process dies while
/// writing (`.git/index.lock`, `.git/HEAD.lock`, `.git/config.lock`, `.git/packed-refs.lock`,
/// `.git/refs/**/*.lock`), which would make every later run fail with "failed to lock".
/// Only call it while holding the work directory's run lock: then no live process of ours
/// is writing there. Returns the files removed.
pub fn clear_stale_locks(workdir: &Path) -> Vec<PathBuf> {
    let git = workdir.join(".git");
    let mut found: Vec<PathBuf> = ["index.lock", "HEAD.lock", "config.lock", "packed-refs.lock"]
        .iter()
        .map(|f| git.join(f))
        .filter(|p| p.is_file())
        .collect();
    let mut dirs = vec![git.join("refs")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => dirs.push(p),
                Ok(t) if t.is_file() && p.extension().is_some_and(|x| x == "lock") => {
                    found.push(p);
                }
                _ => {}
            }
        }
    }
    found
        .into_iter()
        .filter(|p| match std::fs::remove_file(p) {
            Ok(()) => {
                tracing::warn!(lock = %p.display(), "removed a git lock left by a run that died");
                true
            }
            Err(e) => {
                tracing::warn!(lock = %p.display(), error = %e, "cannot remove a stale git lock");
                false
            }
        })
        .collect()
}

impl GitStore {
    /// Opens the clone in `workdir` (creating it if needed) for `remote` (a path or URL) and
    /// fetches. An existing clone whose `origin` differs is re-pointed at `remote`.
    pub fn open(remote: &str, workdir: &Path) -> Result<GitStore, GitStoreError> {
        let shown = redact(remote);
        let open_err = |source| GitStoreError::Open {
            remote: shown.clone(),
            dir: workdir.display().to_string(),
            source,
        };
        let repo = if workdir.join(".git").exists() {
            let repo = Repository::open(workdir).map_err(open_err)?;
            match repo.find_remote("origin") {
                Ok(r) if r.url().ok() == Some(remote) => {}
                Ok(_) => repo.remote_set_url("origin", remote).map_err(open_err)?,
                Err(_) => drop(repo.remote("origin", remote).map_err(open_err)?),
            }
            repo
        } else {
            std::fs::create_dir_all(workdir)
                .map_err(|e| open_err(git2::Error::from_str(&e.to_string())))?;
            let repo = Repository::init(workdir).map_err(open_err)?;
            drop(repo.remote("origin", remote).map_err(open_err)?);
            repo
        };
        let store = GitStore {
            repo,
            dir: workdir.to_path_buf(),
            remote: shown,
        };
        store.fetch_refs()?;
        tracing::debug!(remote = %store.remote, dir = %store.dir.display(), "config repo opened");
        Ok(store)
    }

    /// Fetches `origin` and force-checks-out `origin/main` (detached) into the work tree.
    pub fn fetch(&mut self) -> Result<Checkout, GitStoreError> {
        self.fetch_refs()?;
        let main = self
            .remote_branch(MAIN_BRANCH)?
            .ok_or_else(|| GitStoreError::NoMain {
                remote: self.remote.clone(),
            })?;
        let commit = self
            .repo
            .find_commit(main)
            .map_err(|e| self.local("read main", e))?;
        let mut opts = git2::build::CheckoutBuilder::new();
        opts.force().remove_untracked(true);
        self.repo
            .checkout_tree(commit.as_object(), Some(&mut opts))
            .map_err(|e| self.local("check out main", e))?;
        self.repo
            .set_head_detached(main)
            .map_err(|e| self.local("detach HEAD", e))?;
        Ok(Checkout {
            dir: self.dir.clone(),
            commit: main.to_string(),
            review_tip: self.remote_branch(PR_BRANCH)?.map(|id| id.to_string()),
        })
    }

    /// Commits reachable from `new` but not from `old` (all of `new`'s history when `old` is
    /// empty), oldest first.
    pub fn commits_between(&self, old: &str, new: &str) -> Result<Vec<CommitInfo>, GitStoreError> {
        let err = |what: &str, e| self.local(what, e);
        let mut walk = self.repo.revwalk().map_err(|e| err("walk history", e))?;
        walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE)
            .map_err(|e| err("walk history", e))?;
        walk.push(self.resolve(new)?)
            .map_err(|e| err("walk history", e))?;
        if !old.is_empty() {
            walk.hide(self.resolve(old)?)
                .map_err(|e| err("walk history", e))?;
        }
        let mut out = Vec::new();
        for id in walk {
            let id = id.map_err(|e| err("walk history", e))?;
            let commit = self
                .repo
                .find_commit(id)
                .map_err(|e| err("read commit", e))?;
            let tree = commit.tree().map_err(|e| err("read tree", e))?;
            let parent_tree = match commit.parents().next() {
                Some(p) => Some(p.tree().map_err(|e| err("read tree", e))?),
                None => None,
            };
            let diff = self
                .repo
                .diff_tree_to_tree(parent_tree.as_ref(), Some(&tree), None)
                .map_err(|e| err("diff commit", e))?;
            let paths = diff
                .deltas()
                .filter_map(|d| d.new_file().path().or_else(|| d.old_file().path()))
                .map(|p| p.to_string_lossy().replace('\\', "/"))
                .collect();
            let author = commit.author();
            let email = author.email().unwrap_or_default().to_string();
            out.push(CommitInfo {
                id: id.to_string(),
                author_name: author.name().unwrap_or_default().to_string(),
                by_rlc: email == RLC_AUTHOR_EMAIL,
                author_email: email,
                message: commit.message().unwrap_or_default().to_string(),
                paths,
            });
        }
        Ok(out)
    }

    /// Content of `path` at `commit` (an id or ref), or `None` if there is no such file.
    pub fn file_at(&self, commit: &str, path: &str) -> Result<Option<String>, GitStoreError> {
        let tree = self.tree_of(commit)?;
        let entry = match tree.get_path(Path::new(path)) {
            Ok(entry) => entry,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(self.local(&format!("look up {path}"), e)),
        };
        if entry.kind() != Some(ObjectType::Blob) {
            return Ok(None);
        }
        if entry.filemode() == LINK_MODE {
            return Err(GitStoreError::SymbolicLink {
                path: path.to_string(),
            });
        }
        let blob = self
            .repo
            .find_blob(entry.id())
            .map_err(|e| self.local("read file", e))?;
        Ok(Some(self.utf8(path, blob.content())?))
    }

    /// All files below `dir` (recursively; `""` for the whole tree) at `commit`, as
    /// `(path, content)` sorted by path. A missing directory gives an empty list.
    pub fn files_under(
        &self,
        commit: &str,
        dir: &str,
    ) -> Result<Vec<(String, String)>, GitStoreError> {
        let root = self.tree_of(commit)?;
        let dir = dir.trim_matches('/');
        let tree = if dir.is_empty() {
            root
        } else {
            match root.get_path(Path::new(dir)) {
                Ok(e) if e.kind() == Some(ObjectType::Tree) => self
                    .repo
                    .find_tree(e.id())
                    .map_err(|e| self.local("read tree", e))?,
                Ok(_) => return Ok(Vec::new()),
                Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(self.local(&format!("look up {dir}"), e)),
            }
        };
        let mut blobs = Vec::new();
        tree.walk(TreeWalkMode::PreOrder, |parent, entry| {
            if entry.kind() == Some(ObjectType::Blob) {
                let name = entry.name().unwrap_or_default();
                let link = entry.filemode() == LINK_MODE;
                blobs.push((format!("{parent}{name}"), entry.id(), link));
            }
            TreeWalkResult::Ok
        })
        .map_err(|e| self.local("walk tree", e))?;
        let mut out = Vec::with_capacity(blobs.len());
        for (rel, id, link) in blobs {
            let path = if dir.is_empty() {
                rel
            } else {
                format!("{dir}/{rel}")
            };
            if link {
                return Err(GitStoreError::SymbolicLink { path });
            }
            let blob = self
                .repo
                .find_blob(id)
                .map_err(|e| self.local("read file", e))?;
            out.push((path.clone(), self.utf8(&path, blob.content())?));
        }
        out.sort();
        Ok(out)
    }

    /// The config files at `commit`: every file directly inside `services/` and `limits/`
    /// (the layout [`grl_config::read_config_files`] reads from a directory), and the
    /// configurator's own inputs `capacity/*` and `events.yaml`, sorted by path.
    pub fn config_files(&self, commit: &str) -> Result<Vec<(String, String)>, GitStoreError> {
        let mut files = Vec::new();
        for dir in ["services", "limits", "capacity"] {
            let prefix = format!("{dir}/");
            files.extend(
                self.files_under(commit, dir)?
                    .into_iter()
                    .filter(|(p, _)| p.strip_prefix(&prefix).is_some_and(|n| !n.contains('/'))),
            );
        }
        if let Some(events) = self.file_at(commit, "events.yaml")? {
            files.push(("events.yaml".to_string(), events));
        }
        files.sort();
        Ok(files)
    }

    /// Fetches all branches of `origin` (pruning deleted ones) without touching the work tree.
    fn fetch_refs(&self) -> Result<(), GitStoreError> {
        let fetch_err = |source| GitStoreError::Fetch {
            remote: self.remote.clone(),
            source,
        };
        let mut remote = self.repo.find_remote("origin").map_err(fetch_err)?;
        let mut opts = FetchOptions::new();
        opts.remote_callbacks(callbacks())
            .prune(FetchPrune::On)
            .download_tags(AutotagOption::None);
        remote
            .fetch(&[] as &[&str], Some(&mut opts), None)
            .map_err(fetch_err)
    }

    /// Tip of `origin/<branch>` as last fetched.
    fn remote_branch(&self, branch: &str) -> Result<Option<Oid>, GitStoreError> {
        match self
            .repo
            .refname_to_id(&format!("refs/remotes/origin/{branch}"))
        {
            Ok(id) => Ok(Some(id)),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(self.local(&format!("read origin/{branch}"), e)),
        }
    }

    fn resolve(&self, spec: &str) -> Result<Oid, GitStoreError> {
        let obj = self
            .repo
            .revparse_single(spec)
            .map_err(|e| self.local(&format!("find commit {spec}"), e))?;
        let commit = obj
            .peel_to_commit()
            .map_err(|e| self.local(&format!("find commit {spec}"), e))?;
        Ok(commit.id())
    }

    fn tree_of(&self, spec: &str) -> Result<git2::Tree<'_>, GitStoreError> {
        let id = self.resolve(spec)?;
        let commit = self
            .repo
            .find_commit(id)
            .map_err(|e| self.local("read commit", e))?;
        commit.tree().map_err(|e| self.local("read tree", e))
    }

    fn utf8(&self, path: &str, bytes: &[u8]) -> Result<String, GitStoreError> {
        String::from_utf8(bytes.to_vec()).map_err(|_| {
            self.local(
                &format!("read {path}"),
                git2::Error::from_str("file is not UTF-8"),
            )
        })
    }

    fn local(&self, what: &str, source: git2::Error) -> GitStoreError {
        GitStoreError::Local {
            what: what.to_string(),
            dir: self.dir.display().to_string(),
            source,
        }
    }
}
