//! Where a controller's config comes from after start: a directory polled by content
//! version, or a clone of the config repo fetched every few seconds and read at one branch
//! (`main`, or the region's `regions/<region>` that a staged rollout moves; version =
//! commit id). An invalid change is logged and the old snapshot kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use grl_config::{self as config, ConfigErrors, Snapshot};

/// Takes a new valid snapshot.
pub type Apply = Arc<dyn Fn(Snapshot) + Send + Sync>;
/// Told of every followed change refused as invalid (the old snapshot stays).
pub type Refused = Arc<dyn Fn() + Send + Sync>;

/// Why config could not be followed.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// A git operation failed.
    #[error("git: {0}")]
    Git(#[from] git2::Error),
    /// A local file operation failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The config is invalid.
    #[error("{0}")]
    Invalid(#[from] ConfigErrors),
    /// The branch to follow does not exist in the repo.
    #[error(
        "branch `{branch}` does not exist in {url} (a region's branch `regions/<region>` is \
         created by the configurator's first rollout; until then follow `main`)"
    )]
    NoSuchRef {
        /// The repo.
        url: String,
        /// The branch.
        branch: String,
    },
}

/// Polls `root` every `period`; applies each valid change from content version `last`.
///
/// Reading and validating run on a blocking thread, off the runtime that serves `Tier`,
/// `Control` and `/metrics`, so a slow or hostile file delays only the next config.
pub async fn follow_dir(
    root: PathBuf,
    period: Duration,
    mut last: String,
    apply: Apply,
    refused: Refused,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut unreadable: Option<String> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let (dir, seen) = (root.clone(), last.clone());

        let loaded = tokio::task::spawn_blocking(move || load_changed(&dir, &seen)).await;
        if !matches!(loaded, Ok(Loaded::Unreadable(_))) {
            unreadable = None;
        }
        match loaded {
            Ok(Loaded::Same) => {}
            Ok(Loaded::Unreadable(e)) => {
                // Counted and logged once per distinct problem, not on every poll.
                let text = e.to_string();
                if unreadable.as_ref() != Some(&text) {
                    warn!(dir = %root.display(), error = %text, "config dir unreadable, old snapshot kept");
                    refused();
                    unreadable = Some(text);
                }
                continue;
            }
            Ok(Loaded::Valid(version, s)) => {
                info!(dir = %root.display(), version = %version, "config dir changed");
                last = version;
                apply(s);
            }
            Ok(Loaded::Invalid(version, e)) => {
                warn!(dir = %root.display(), error = %e, "config change refused, old snapshot kept");
                last = version;
                refused();
            }
            Err(e) => warn!(dir = %root.display(), error = %e, "config load failed"),
        }
    }
}

/// What one look at a config dir found.
enum Loaded {
    /// The content version is the one in force (or last refused).
    Same,
    /// A file could not be read (not a regular file, too large, I/O error).
    Unreadable(config::ConfigError),
    /// A new valid snapshot, with its content version.
    Valid(String, Snapshot),
    /// A new content version that is invalid.
    Invalid(String, ConfigErrors),
}

/// Reads and validates `root` unless its content version is `last` (blocking).
fn load_changed(root: &Path, last: &str) -> Loaded {
    let files = match config::read_config_files(root) {
        Ok(f) => f,
        Err(e) => return Loaded::Unreadable(e),
    };
    let version = config::content_version(&files);
    if version == last {
        return Loaded::Same;
    }
    match config::from_files(&version, files) {
        Ok(s) => Loaded::Valid(version, s),
        Err(e) => Loaded::Invalid(version, e),
    }
}

/// The git file mode of a symbolic link.
const LINK_MODE: i32 = 0o120_000;
/// Why a symbolic link in the config repo is refused.
const LINK_REFUSED: &str = "is a symbolic link (config files must be regular files)";

/// A private clone of the config repo, read at one branch.
pub struct GitFollower {
    url: String,
    branch: String,
    _dir: tempfile::TempDir,
    repo: git2::Repository,
}

/// The branch name of `config_ref`: `main`, `regions/eu-1`, or the same with `refs/heads/`.
pub fn branch_of(config_ref: &str) -> &str {
    config_ref.strip_prefix("refs/heads/").unwrap_or(config_ref)
}

impl std::fmt::Debug for GitFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitFollower")
            .field("url", &self.url)
            .field("branch", &self.branch)
            .finish_non_exhaustive()
    }
}

impl GitFollower {
    /// Clones `url` into a temporary directory, to read it at `config_ref` (a branch).
    pub fn clone(url: &str, config_ref: &str) -> Result<Self, FollowError> {
        let dir = tempfile::tempdir()?;
        let repo = git2::Repository::clone(url, dir.path())?;
        Ok(Self {
            url: url.to_string(),
            branch: branch_of(config_ref).to_string(),
            _dir: dir,
            repo,
        })
    }

    /// The branch followed.
    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// Fetches `origin` and reads the config at the branch followed.
    pub fn fetch(&self) -> Result<(String, Vec<(String, String)>), FollowError> {
        self.repo.find_remote("origin")?.fetch(
            &["+refs/heads/*:refs/remotes/origin/*"],
            None,
            None,
        )?;
        self.read_main()
    }

    /// The commit id of the branch followed and the config files in its tree.
    pub fn read_main(&self) -> Result<(String, Vec<(String, String)>), FollowError> {
        let commit = self
            .repo
            .find_reference(&format!("refs/remotes/origin/{}", self.branch))
            .map_err(|e| match e.code() {
                git2::ErrorCode::NotFound => FollowError::NoSuchRef {
                    url: self.url.clone(),
                    branch: self.branch.clone(),
                },
                _ => e.into(),
            })?
            .peel_to_commit()?;
        let tree = commit.tree()?;
        let mut files = Vec::new();
        for dir in ["services", "limits"] {
            let Ok(entry) = tree.get_path(Path::new(dir)) else {
                continue;
            };
            let Some(sub) = entry.to_object(&self.repo)?.into_tree().ok() else {
                continue;
            };
            let odb = self.repo.odb()?;
            for e in &sub {
                let Ok(name) = e.name() else { continue };
                if e.filemode() == LINK_MODE && (name.ends_with(".yaml") || name.ends_with(".yml"))
                {
                    // Its blob is the link's target, a path: refused whole, never read.
                    return Err(FollowError::Invalid(ConfigErrors(vec![
                        config::ConfigError::new(format!("{dir}/{name}"), None, "", LINK_REFUSED),
                    ])));
                }
                // The size is read from the header, so a huge blob is refused unread.
                let (size, kind) = odb.read_header(e.id())?;
                let limit = config::bounds::MAX_FILE_BYTES;
                if kind == git2::ObjectType::Blob && size > limit {
                    return Err(FollowError::Invalid(ConfigErrors(vec![
                        config::ConfigError::new(
                            format!("{dir}/{name}"),
                            None,
                            "",
                            format!("file is {size} bytes, more than the {limit} allowed"),
                        ),
                    ])));
                }
                if let Ok(blob) = e.to_object(&self.repo)?.into_blob() {
                    let text = String::from_utf8_lossy(blob.content()).into_owned();
                    files.push((format!("{dir}/{name}"), text));
                }
            }
        }
        files.sort();
        Ok((commit.id().to_string(), files))
    }

    /// Loads the snapshot at the branch followed.
    pub fn load(&self) -> Result<Snapshot, FollowError> {
        let (id, files) = self.read_main()?;
        Ok(config::from_files(&id, files)?)
    }

    /// Fetches every `period` on a blocking thread; applies each valid new commit.
    pub fn follow(
        self,
        period: Duration,
        apply: Apply,
        refused: Refused,
        shutdown: watch::Receiver<bool>,
    ) {
        let mut last = self.read_main().map(|(id, _)| id).unwrap_or_default();
        while !*shutdown.borrow() {
            std::thread::sleep(period);
            match self.fetch() {
                Ok((id, _)) if id == last => {}
                Ok((id, files)) => {
                    last.clone_from(&id);
                    match config::from_files(&id, files) {
                        Ok(s) => {
                            info!(url = %self.url, branch = %self.branch, commit = %id, "config commit picked up");
                            apply(s);
                        }
                        Err(e) => {
                            warn!(url = %self.url, commit = %id, error = %e, "config commit refused, old snapshot kept");
                            refused();
                        }
                    }
                }
                Err(e) => warn!(url = %self.url, error = %e, "config fetch failed"),
            }
        }
    }
}
