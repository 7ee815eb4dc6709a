//! Building trees from a proposal: validated paths, whole-file contents written on top of an
//! existing tree through an in-memory index (the work tree is never touched).

use super::{FileChange, GitStoreError};
use git2::{Index, IndexEntry, IndexTime, Oid, Repository, Tree};

/// File mode of a regular, non-executable file.
const REGULAR_FILE: u32 = 0o100_644;

/// Checks that `path` is a plain relative path inside the repository.
pub(crate) fn validate_path(path: &str) -> Result<(), GitStoreError> {
    let bad = |reason: &str| {
        Err(GitStoreError::InvalidPath {
            path: path.to_string(),
            reason: reason.to_string(),
        })
    };
    if path.is_empty() {
        return bad("empty path");
    }
    if path.starts_with('/') || path.contains('\\') || path.contains('\0') {
        return bad("must be relative and use '/' separators");
    }
    for part in path.split('/') {
        match part {
            "" => return bad("empty path component"),
            "." | ".." => return bad("'.' and '..' are not allowed"),
            p if p.eq_ignore_ascii_case(".git") => return bad("'.git' is not allowed"),
            _ => {}
        }
    }
    Ok(())
}

/// Writes `files` (whole contents) on top of `base` and returns the new tree's id. Files of
/// `base` that are not mentioned are kept as they are.
pub(crate) fn apply(
    repo: &Repository,
    base: &Tree<'_>,
    files: &[FileChange],
) -> Result<Oid, git2::Error> {
    let mut index = Index::new()?;
    index.read_tree(base)?;
    for file in files {
        let id = repo.blob(file.content.as_bytes())?;
        index.add(&IndexEntry {
            ctime: IndexTime::new(0, 0),
            mtime: IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode: REGULAR_FILE,
            uid: 0,
            gid: 0,
            file_size: u32::try_from(file.content.len()).unwrap_or(u32::MAX),
            id,
            flags: 0,
            flags_extended: 0,
            path: file.path.as_bytes().to_vec(),
        })?;
    }
    index.write_tree_to(repo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_paths_that_escape_or_touch_git() {
        for bad in [
            "",
            "/etc/passwd",
            "a//b",
            "../x",
            "limits/./a",
            ".git/config",
            "a\\b",
            "x/",
        ] {
            assert!(validate_path(bad).is_err(), "{bad:?} should be rejected");
        }
        for good in [
            "limits/checkout.yaml",
            "a",
            "deep/er/file.yaml",
            ".github/x",
        ] {
            assert!(validate_path(good).is_ok(), "{good:?} should be accepted");
        }
    }
}
