//! Credential files on disk (TLS keys and certificates, the admin token): their
//! permissions judged as ssh judges a private key's, and the content stamp that tells a
//! rewritten file from an unchanged one.
//!
//! A token file that others may write is refused: whoever can write it can make themselves
//! admin. A key or token that others may read is accepted with a warning. Changes are
//! noticed by content, not by modification time and length, so a rotation that keeps both
//! (`cp -p`, `rsync -a` of a same-sized file) is still seen.

use std::io::Read as _;
use std::path::Path;

use tracing::warn;

/// Largest credential file read (certificate chains and CA bundles included).
pub const MAX_CREDENTIAL_BYTES: u64 = 1 << 20;

/// What identifies a version of some files: their contents (`None`: missing or unreadable).
pub(crate) type Stamp = Vec<Option<Vec<u8>>>;

/// The contents of `paths` (each up to [`MAX_CREDENTIAL_BYTES`]), to notice any rewrite.
pub(crate) fn stamp<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Stamp {
    paths
        .into_iter()
        .map(|p| {
            let mut buf = Vec::new();
            std::fs::File::open(p)
                .and_then(|f| f.take(MAX_CREDENTIAL_BYTES).read_to_end(&mut buf))
                .ok()?;
            Some(buf)
        })
        .collect()
}

/// The permission bits of `path` (following links, as a reader does); `None` if unknown.
#[cfg(unix)]
pub fn mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt as _;
    Some(std::fs::metadata(path).ok()?.permissions().mode() & 0o7777)
}

/// The permission bits of `path`; unknown off Unix.
#[cfg(not(unix))]
pub fn mode(_: &Path) -> Option<u32> {
    None
}

/// Whether the group or others may write the file at `path`.
pub fn writable_by_others(path: &Path) -> Option<u32> {
    mode(path).filter(|m| m & 0o022 != 0)
}

/// Whether others (not only the group) may read the file at `path`.
pub fn readable_by_others(path: &Path) -> Option<u32> {
    mode(path).filter(|m| m & 0o004 != 0)
}

/// Logs a warning when others may read the secret `what` at `path`; returns whether it did.
pub fn warn_if_readable(what: &str, path: &Path) -> bool {
    match readable_by_others(path) {
        Some(m) => {
            warn!(
                file = %path.display(), mode = %format!("{m:04o}"),
                "{what} is readable by others; chmod o-r it"
            );
            true
        }
        None => false,
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn chmod(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn modes_are_judged_as_ssh_does() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("k");
        std::fs::write(&p, "x").unwrap();
        chmod(&p, 0o600);
        assert_eq!(writable_by_others(&p), None);
        assert_eq!(readable_by_others(&p), None);
        chmod(&p, 0o644);
        assert_eq!(readable_by_others(&p), Some(0o644));
        assert!(warn_if_readable("key", &p));
        chmod(&p, 0o620);
        assert_eq!(writable_by_others(&p), Some(0o620));
        chmod(&p, 0o666);
        assert_eq!(writable_by_others(&p), Some(0o666));
    }

    #[test]
    fn a_rewrite_keeping_mtime_and_length_changes_the_stamp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t");
        std::fs::write(&p, "aaaa").unwrap();
        let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
        let before = stamp([p.as_path()]);
        std::fs::write(&p, "bbbb").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_ne!(stamp([p.as_path()]), before);
        assert_eq!(stamp([d.path().join("missing").as_path()]), vec![None]);
    }
}
