//! A bare git repository on disk standing in for the config repo's remote: created with
//! files on `main`, inspected by branch, and changed by "a person" pushing a commit.
//!
//! Commits are written straight into the bare repository with git2, which is what a push
//! amounts to for anyone reading the remote afterwards.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use git2::build::TreeUpdateBuilder;
use git2::{FileMode, Oid, Repository, RepositoryInitOptions, Signature, Sort};
use tempfile::TempDir;

/// A temporary bare repository whose `HEAD` is `main`; deleted on drop.
#[derive(Debug)]
pub struct BareRemote {
    dir: TempDir,
}

impl BareRemote {
    /// Creates the bare repository with one commit on `main` holding `files`
    /// (`(path, content)`, paths relative with `/`, directories created as needed).
    pub fn with_files<P: AsRef<str>, C: AsRef<str>>(files: &[(P, C)]) -> Result<BareRemote> {
        let dir = tempfile::Builder::new().prefix("grl-remote-").tempdir()?;
        let mut opts = RepositoryInitOptions::new();
        opts.bare(true).initial_head("main");
        Repository::init_opts(dir.path(), &opts).context("creating a bare repository")?;
        let remote = BareRemote { dir };
        remote.commit_files("main", files, "Initial config")?;
        Ok(remote)
    }

    /// The path of the bare repository.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A `file://` URL for cloning and pushing.
    pub fn url(&self) -> String {
        format!("file://{}", self.dir.path().display())
    }

    fn repo(&self) -> Result<Repository> {
        Repository::open_bare(self.dir.path()).context("opening the bare remote")
    }

    /// Commits `files` on top of `branch` as a person would and returns the commit id.
    ///
    /// Listed files are added or replaced, all others kept. A missing `branch` is created
    /// from `main` (or as a root commit if `main` does not exist yet either).
    pub fn commit_files<P: AsRef<str>, C: AsRef<str>>(
        &self,
        branch: &str,
        files: &[(P, C)],
        message: &str,
    ) -> Result<String> {
        let repo = self.repo()?;
        let parent = match repo.revparse_single(&format!("refs/heads/{branch}")) {
            Ok(obj) => Some(obj.peel_to_commit()?),
            Err(_) => repo
                .revparse_single("refs/heads/main")
                .ok()
                .map(|obj| obj.peel_to_commit())
                .transpose()?,
        };
        let base = match &parent {
            Some(commit) => commit.tree()?,
            None => repo.find_tree(repo.treebuilder(None)?.write()?)?,
        };
        let mut update = TreeUpdateBuilder::new();
        for (path, content) in files {
            let blob = repo.blob(content.as_ref().as_bytes())?;
            update.upsert(path.as_ref(), blob, FileMode::Blob);
        }
        let tree = repo.find_tree(update.create_updated(&repo, &base)?)?;
        let who = Signature::now("Test Person", "person@example.invalid")?;
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        let id = repo.commit(
            Some(&format!("refs/heads/{branch}")),
            &who,
            &who,
            message,
            &tree,
            &parents,
        )?;
        Ok(id.to_string())
    }

    /// Commits a symbolic link at `path` pointing to `target` on `main`, as `git add` of a
    /// link records it (mode 120000, the blob holding the target's path); returns the
    /// commit id.
    pub fn commit_symlink(&self, path: &str, target: &str) -> Result<String> {
        let repo = self.repo()?;
        let parent = repo.revparse_single("refs/heads/main")?.peel_to_commit()?;
        let blob = repo.blob(target.as_bytes())?;
        let mut update = TreeUpdateBuilder::new();
        update.upsert(path, blob, FileMode::Link);
        let tree = repo.find_tree(update.create_updated(&repo, &parent.tree()?)?)?;
        let who = Signature::now("Test Person", "person@example.invalid")?;
        let id = repo.commit(
            Some("refs/heads/main"),
            &who,
            &who,
            &format!("link {path}"),
            &tree,
            &[&parent],
        )?;
        Ok(id.to_string())
    }

    /// The content of `path` at the tip of `branch`, or `None` if either does not exist
    /// (or the file is not UTF-8).
    pub fn read_file_at(&self, branch: &str, path: &str) -> Option<String> {
        let repo = self.repo().ok()?;
        let tree = repo
            .revparse_single(&format!("refs/heads/{branch}"))
            .ok()?
            .peel_to_tree()
            .ok()?;
        let entry = tree.get_path(Path::new(path)).ok()?;
        let blob = repo.find_blob(entry.id()).ok()?;
        String::from_utf8(blob.content().to_vec()).ok()
    }

    /// The commits reachable from `branch` along first parents, newest first, as
    /// `(id, full message)`; empty if the branch does not exist.
    pub fn log(&self, branch: &str) -> Vec<(String, String)> {
        let Ok(repo) = self.repo() else {
            return Vec::new();
        };
        let Some(tip) = branch_tip(&repo, branch) else {
            return Vec::new();
        };
        let Ok(mut walk) = repo.revwalk() else {
            return Vec::new();
        };
        if walk.push(tip).is_err() || walk.set_sorting(Sort::TOPOLOGICAL).is_err() {
            return Vec::new();
        }
        let _ = walk.simplify_first_parent();
        walk.filter_map(|id| {
            let commit = repo.find_commit(id.ok()?).ok()?;
            Some((
                commit.id().to_string(),
                commit.message().unwrap_or_default().to_owned(),
            ))
        })
        .collect()
    }

    /// Points branch `name` at `commit` (created if missing, moved if not), as a push of
    /// that commit to it would; returns `commit`.
    pub fn set_branch(&self, name: &str, commit: &str) -> Result<String> {
        let repo = self.repo()?;
        repo.reference(
            &format!("refs/heads/{name}"),
            Oid::from_str(commit)?,
            true,
            "set",
        )?;
        Ok(commit.to_string())
    }

    /// The commit branch `name` points at, if it exists.
    pub fn tip(&self, name: &str) -> Option<String> {
        branch_tip(&self.repo().ok()?, name).map(|id| id.to_string())
    }

    /// Whether the local branch `name` exists in the remote.
    pub fn branch_exists(&self, name: &str) -> bool {
        self.repo()
            .is_ok_and(|repo| branch_tip(&repo, name).is_some())
    }

    /// The names of all branches, sorted.
    pub fn branches(&self) -> Vec<String> {
        let Ok(repo) = self.repo() else {
            return Vec::new();
        };
        let Ok(refs) = repo.references_glob("refs/heads/*") else {
            return Vec::new();
        };
        let mut names: Vec<String> = refs
            .filter_map(|r| Some(r.ok()?.shorthand().ok()?.to_owned()))
            .collect();
        names.sort();
        names
    }
}

fn branch_tip(repo: &Repository, branch: &str) -> Option<Oid> {
    repo.refname_to_id(&format!("refs/heads/{branch}")).ok()
}

/// Every file under `dir` (recursively, following no symlinks) as `(relative path with `/`,
/// content)`, sorted by path: a template directory such as `config-repo/` in the form
/// [`BareRemote::with_files`] takes. Panics on unreadable or non-UTF-8 files.
pub fn copy_dir_files(dir: &Path) -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let entries =
            std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        for entry in entries {
            let path: PathBuf = entry.expect("directory entry").path();
            let kind = std::fs::symlink_metadata(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .file_type();
            if kind.is_dir() {
                walk(root, &path, out);
            } else if kind.is_file() {
                let rel = path.strip_prefix(root).expect("under root");
                let rel: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                let content = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
                out.push((rel.join("/"), content));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// A `git daemon` serving one bare remote over `git://` with pushes enabled, so that the
/// remote's hooks run (libgit2 runs no hooks when pushing to a path).
#[derive(Debug)]
pub struct GitDaemon {
    _child: crate::process::ChildGuard,
    url: String,
}

impl GitDaemon {
    /// Serves `remote`; `refuse_pushes` installs a `pre-receive` hook that declines every push.
    pub fn serve(remote: &BareRemote, refuse_pushes: bool) -> Result<GitDaemon> {
        if refuse_pushes {
            let hook = remote.path().join("hooks/pre-receive");
            std::fs::create_dir_all(hook.parent().unwrap_or(remote.path()))?;
            std::fs::write(&hook, "#!/bin/sh\necho 'pushes are frozen' >&2\nexit 1\n")?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))?;
        }
        let base = remote.path().parent().context("remote has no parent dir")?;
        let name = remote
            .path()
            .file_name()
            .context("remote has no name")?
            .to_string_lossy()
            .into_owned();
        let port = crate::ports::free_port();
        let child = crate::process::spawn(
            std::process::Command::new("git")
                .arg("daemon")
                .arg("--reuseaddr")
                .arg("--export-all")
                .arg("--enable=receive-pack")
                .arg(format!("--base-path={}", base.display()))
                .arg("--listen=127.0.0.1")
                .arg(format!("--port={port}"))
                .arg(base),
        )?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "git daemon did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        Ok(GitDaemon {
            _child: child,
            url: format!("git://127.0.0.1:{port}/{name}"),
        })
    }

    /// The `git://` URL of the served remote.
    pub fn url(&self) -> &str {
        &self.url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_dir_files_lists_nested_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("services")).unwrap();
        std::fs::write(dir.path().join("services/a.yaml"), "a: 1\n").unwrap();
        std::fs::write(dir.path().join("README.md"), "hi\n").unwrap();
        assert_eq!(
            copy_dir_files(dir.path()),
            vec![
                ("README.md".to_owned(), "hi\n".to_owned()),
                ("services/a.yaml".to_owned(), "a: 1\n".to_owned()),
            ]
        );
    }
}
