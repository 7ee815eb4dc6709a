//! One run per work directory: an advisory lock (`flock`) on `<workdir>.lock`, held for the
//! whole run. The kernel drops it when the process dies, however it dies, so a killed run
//! never leaves a stale lock; and while it is held, lock files that git left in the clone
//! (a run killed mid-checkout or mid-fetch) can be removed safely.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::RunError;

/// The held lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub(super) struct WorkdirLock {
    _file: File,
    path: PathBuf,
}

impl WorkdirLock {
    /// Takes the lock of `workdir` (creating its parent directories), or fails at once if
    /// another process holds it.
    pub(super) fn acquire(workdir: &Path) -> Result<WorkdirLock, RunError> {
        let mut name = workdir.as_os_str().to_owned();
        name.push(".lock");
        let path = PathBuf::from(name);
        let io_err = |source| RunError::Workdir {
            dir: workdir.display().to_string(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io_err)?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(RunError::Busy {
                    lock: path.display().to_string(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err(e)),
        }
        // Who holds it, for people looking at the file; the lock itself is the flock.
        let _ = file.set_len(0);
        let _ = writeln!(file, "{}", crate::run_log::Owner::current());
        Ok(WorkdirLock { _file: file, path })
    }

    /// The lock file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("checkout");
        let first = WorkdirLock::acquire(&work).unwrap();
        assert!(first.path().exists());
        let err = WorkdirLock::acquire(&work).unwrap_err();
        assert!(
            matches!(err, RunError::Busy { .. }) && err.to_string().contains("checkout.lock"),
            "{err}"
        );
        drop(first);
        WorkdirLock::acquire(&work).expect("free again");
    }
}
