//! The admin bearer token file: read with its permissions checked (a file the group or
//! others may write is refused), and re-read when its content changes, so a rotation by
//! `mv`, by a Kubernetes `..data` swap or by a `cp -p` that keeps time and size is seen.
//! The token is compared in constant time and never logged.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use subtle::ConstantTimeEq;
use tracing::{info, warn};

use super::cred_file::{self, Stamp, stamp};

/// Why an admin token file is unusable.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// It cannot be read.
    #[error("admin token file {path}: {source}")]
    Read {
        /// Its path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// It holds no token (or one too short to be a secret).
    #[error("admin token file {path}: the token must be at least 16 characters")]
    TooShort {
        /// Its path.
        path: PathBuf,
    },
    /// The group or others may write it, so they may make themselves admin.
    #[error(
        "admin token file {path} is writable by group or others (mode {mode:04o}); \
         `chmod go-w` it"
    )]
    LoosePermissions {
        /// Its path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// Reads a token file: its content without surrounding whitespace, at least 16 bytes. A
/// file the group or others may write is refused.
pub fn read_token(path: &Path) -> Result<String, TokenError> {
    if let Some(mode) = cred_file::writable_by_others(path) {
        return Err(TokenError::LoosePermissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    let t = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let t = t.trim();
    if t.len() < 16 {
        return Err(TokenError::TooShort {
            path: path.to_path_buf(),
        });
    }
    Ok(t.to_string())
}

/// The admin bearer token, re-read when its file's content changes (a change that does
/// not load keeps the previous token).
#[derive(Debug)]
pub(crate) struct Token {
    path: PathBuf,
    /// The token's name in the audit trail: its file's name (never the token).
    pub(crate) name: String,
    current: Mutex<(Stamp, String)>,
}

impl Token {
    pub(crate) fn load(path: PathBuf) -> Result<Self, TokenError> {
        let s = stamp([path.as_path()]);
        let t = read_token(&path)?;
        cred_file::warn_if_readable("admin token file", &path);
        let name = path
            .file_name()
            .map_or_else(|| "token".into(), |n| n.to_string_lossy().into_owned());
        Ok(Self {
            path,
            name,
            current: Mutex::new((s, t)),
        })
    }

    /// Constant-time comparison with the current token (the length is not hidden).
    pub(crate) fn matches(&self, given: &str) -> bool {
        let now = stamp([self.path.as_path()]);
        let mut cur = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cur.0 != now {
            cur.0 = now;
            match read_token(&self.path) {
                Ok(t) => {
                    cur.1 = t;
                    info!(file = %self.path.display(), "admin token file changed; new token in use");
                }
                Err(e) => {
                    warn!(error = %e, "admin token file changed but does not load; kept the old token");
                }
            }
        }
        bool::from(given.as_bytes().ct_eq(cur.1.as_bytes()))
    }
}
