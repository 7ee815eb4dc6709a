//! Reading a config directory from disk. Only regular files inside the directory are read:
//! a symbolic link that leads out of it (`services/evil.yaml -> /etc/shadow`, or to the
//! process's own TLS key) is refused unread, so no file outside the directory can reach a
//! parser, an error or a log; links that stay inside (a Kubernetes `..data` projection, a
//! git-sync checkout) are followed. Anything else named `*.yaml` (a FIFO, a device, a
//! directory) is refused without being opened, so it cannot block the reader; so is a file
//! larger than [`bounds::MAX_FILE_BYTES`] or a directory with more than [`bounds::MAX_FILES`]
//! config files. Every refusal names the file, never its content or a link's target.

use std::fs;
use std::path::{Path, PathBuf};

use crate::ConfigError;
use crate::bounds;

/// Why a link is refused.
const OUTSIDE: &str = "is a symbolic link that leads out of the config directory (config \
                       files must be regular files inside it)";

/// The config files below `root` as `(relative path, content)`, sorted by path.
///
/// `root` must be a directory (it may itself be a symbolic link). `services/` and
/// `limits/` must resolve inside it, and so must every `*.yaml` file in them.
pub fn read_config_files(root: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let at = |file: &str, message: String| ConfigError::new(file, None, "", message);
    let shown = root.display().to_string();
    match fs::metadata(root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(at(&shown, "is not a directory".into())),
        Err(e) => return Err(at(&shown, e.to_string())),
    }
    let base = fs::canonicalize(root).map_err(|e| at(&shown, e.to_string()))?;
    let mut files = Vec::new();
    for dir in ["services", "limits"] {
        let d = root.join(dir);
        if !d.is_dir() {
            continue;
        }
        let real = fs::canonicalize(&d).map_err(|e| at(dir, e.to_string()))?;
        if !real.starts_with(&base) {
            return Err(at(dir, OUTSIDE.into()));
        }
        let entries = fs::read_dir(&real).map_err(|e| at(dir, e.to_string()))?;
        for entry in entries {
            let entry = entry.map_err(|e| at(dir, e.to_string()))?;
            let path = real.join(entry.file_name());
            if !is_yaml(&path) {
                continue;
            }
            let rel = format!("{dir}/{}", entry.file_name().to_string_lossy());
            if files.len() >= bounds::MAX_FILES {
                return Err(at(
                    dir,
                    format!("more than {} config files", bounds::MAX_FILES),
                ));
            }
            let text = read_inside(&base, &path).map_err(|m| at(&rel, m))?;
            files.push((rel, text));
        }
    }
    files.sort();
    Ok(files)
}

/// Reads `path` if it is, or links to, a regular file inside `base` (canonical).
fn read_inside(base: &Path, path: &Path) -> Result<String, String> {
    let meta = fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    let (target, meta) = if meta.file_type().is_symlink() {
        let target = resolve_inside(base, path)?;
        let meta = fs::symlink_metadata(&target).map_err(|e| e.to_string())?;
        (target, meta)
    } else {
        (path.to_path_buf(), meta)
    };
    // Checked before opening: opening a FIFO for reading blocks until a writer appears.
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    read_regular(&target, &meta)
}

/// The canonical target of the link `path`, if it stays inside `base`.
fn resolve_inside(base: &Path, path: &Path) -> Result<PathBuf, String> {
    match fs::canonicalize(path) {
        Ok(t) if t.starts_with(base) => Ok(t),
        Ok(_) => Err(OUTSIDE.into()),
        Err(_) => Err("is a symbolic link whose target does not exist".into()),
    }
}

/// Reads the regular file `path` of at most [`bounds::MAX_FILE_BYTES`], whose metadata
/// (taken without following links) is `meta`.
fn read_regular(path: &Path, meta: &fs::Metadata) -> Result<String, String> {
    use std::io::Read as _;
    let limit = bounds::MAX_FILE_BYTES as u64;
    if meta.len() > limit {
        return Err(format!(
            "file is {} bytes, more than the {limit} allowed",
            meta.len()
        ));
    }
    let file = fs::File::open(path).map_err(|e| e.to_string())?;
    same_file(&file, meta)?;
    let mut text = String::new();
    file.take(limit + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > limit {
        return Err(format!("file grew beyond the {limit} bytes allowed"));
    }
    Ok(text)
}

/// Refuses an opened file that is not the one checked: the path was replaced (by a link
/// out of the directory, say) between the check and the open.
#[cfg(unix)]
fn same_file(file: &fs::File, checked: &fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let opened = file.metadata().map_err(|e| e.to_string())?;
    if (opened.dev(), opened.ino()) == (checked.dev(), checked.ino()) {
        Ok(())
    } else {
        Err("was replaced while it was being read".into())
    }
}

#[cfg(not(unix))]
fn same_file(_: &fs::File, _: &fs::Metadata) -> Result<(), String> {
    Ok(())
}

/// Whether `path` names a YAML file (`.yaml` or `.yml`): the only files a config holds.
pub(crate) fn is_yaml(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}
