//! Child processes owned by a test: killed when dropped, with their output kept in a log
//! file, plus waits for a server to accept TCP connections or answer HTTP 200.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// A running child process that is killed (SIGKILL) and reaped when dropped.
///
/// Its stdout and stderr both go to an anonymous temporary file; [`ChildGuard::output`]
/// reads it back, which is what an error message about a server that would not start needs.
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
    program: String,
    log: File,
}

/// Spawns `cmd` with stdin closed and stdout/stderr captured in a temporary log file.
///
/// The error names the program, so a missing binary is easy to diagnose.
pub fn spawn(cmd: &mut Command) -> Result<ChildGuard> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let log = tempfile::tempfile().context("creating a log file for a child process")?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log.try_clone()?)
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    Ok(ChildGuard {
        child,
        program,
        log,
    })
}

impl ChildGuard {
    /// The operating system's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The program this guard started, as given to [`spawn`].
    pub fn program(&self) -> &str {
        &self.program
    }

    /// Returns the exit status if the process has already exited, without blocking.
    pub fn try_exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Everything the process wrote to stdout and stderr so far (lossy UTF-8).
    pub fn output(&self) -> String {
        let mut log = &self.log;
        let mut bytes = Vec::new();
        if log.seek(SeekFrom::Start(0)).is_ok() {
            let _ = log.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The last `lines` lines of [`ChildGuard::output`], for error messages.
    pub fn output_tail(&self, lines: usize) -> String {
        let output = self.output();
        let all: Vec<&str> = output.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Kills the process (if it still runs) and waits for it to exit.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls until something accepts TCP connections on `addr`, or fails after `timeout`.
pub async fn wait_for_tcp(addr: SocketAddr, timeout: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = Duration::from_millis(10);
    loop {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                bail!("nothing accepted TCP connections on {addr} within {timeout:?}: {e}")
            }
            Err(_) => {}
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(250));
    }
}

/// Polls `url` with GET until it answers 200 OK, or fails after `timeout` with the last
/// status or error seen.
pub async fn wait_for_http_ok(url: &str, timeout: Duration) -> Result<()> {
    let client = http_client_builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = Duration::from_millis(20);
    loop {
        let last = match client.get(url).send().await {
            Ok(resp) if resp.status() == reqwest::StatusCode::OK => return Ok(()),
            Ok(resp) => format!("status {}", resp.status()),
            Err(e) => format!("error {e}"),
        };
        if tokio::time::Instant::now() >= deadline {
            bail!("{url} did not answer 200 OK within {timeout:?}; last: {last}");
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(250));
    }
}

/// A reqwest client builder with rustls on the `ring` provider installed (the workspace
/// builds reqwest without a provider of its own, so that only one TLS stack is compiled).
pub fn http_client_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// A binary built by `cargo build --bins` in the test binary's target directory
/// (`bash tests/run.sh` builds them before the tests).
pub fn target_bin(name: &str) -> anyhow::Result<std::path::PathBuf> {
    // The test binary is <target>/debug/deps/e2e-<hash>; the binaries are in <target>/debug.
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .ok_or_else(|| anyhow::anyhow!("unexpected test binary path {}", exe.display()))?;
    let bin = dir.join(name);
    anyhow::ensure!(
        bin.is_file(),
        "binary `{name}` not found at {}: build the binaries first (`cargo build --bins`, as \
         `bash tests/run.sh` does)",
        bin.display()
    );
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_captures_output_and_kills_on_drop() {
        let mut guard =
            spawn(Command::new("sh").args(["-c", "echo hello; exec sleep 30"])).expect("sh exists");
        let pid = guard.id();
        for _ in 0..200 {
            if guard.output().contains("hello") {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(guard.output_tail(1), "hello");
        assert!(guard.try_exited().is_none());
        drop(guard);
        let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
        assert!(!proc_dir.exists(), "child {pid} still exists after drop");
    }

    #[test]
    fn spawn_names_a_missing_program() {
        let err = spawn(&mut Command::new("/nonexistent/grl-test-binary")).unwrap_err();
        assert!(format!("{err:#}").contains("/nonexistent/grl-test-binary"));
    }
}
