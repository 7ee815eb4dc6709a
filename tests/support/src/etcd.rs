//! A real etcd (the engine of the controllers' leader election) on free ports of
//! 127.0.0.1, with its data in a temporary directory; killed when dropped. It can be
//! stopped and started again on the same data and ports (an etcd outage).
//!
//! The binary comes from `GRL_TEST_ETCD` (default `/usr/bin/etcd`, Debian's `etcd-server`,
//! which `bash tests/run.sh` installs).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use tempfile::TempDir;

use crate::ports::free_port;
use crate::process::{ChildGuard, spawn, wait_for_http_ok};
use crate::prometheus::test_binary;

/// A running single-member etcd cluster.
#[derive(Debug)]
pub struct Etcd {
    url: String,
    peer_url: String,
    bin: PathBuf,
    process: Option<ChildGuard>,
    dir: TempDir,
}

impl Etcd {
    /// Starts etcd and returns once `/health` answers 200 OK.
    pub async fn start() -> Result<Etcd> {
        let bin = test_binary("GRL_TEST_ETCD", "/usr/bin/etcd", "etcd")?;
        let dir = tempfile::Builder::new().prefix("grl-etcd-").tempdir()?;
        let mut etcd = Etcd {
            url: format!("http://127.0.0.1:{}", free_port()),
            peer_url: format!("http://127.0.0.1:{}", free_port()),
            bin,
            process: None,
            dir,
        };
        etcd.restart().await?;
        Ok(etcd)
    }

    /// Kills etcd (SIGKILL) and waits for it to exit; its data and ports stay for
    /// [`Etcd::restart`].
    pub fn stop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    /// Starts etcd (again) on the same data directory and ports and returns once
    /// `/health` answers 200 OK.
    pub async fn restart(&mut self) -> Result<()> {
        self.stop();
        let (url, peer_url) = (&self.url, &self.peer_url);
        let process = spawn(
            Command::new(&self.bin)
                .arg("--name=grl-test")
                .arg(format!(
                    "--data-dir={}",
                    self.dir.path().join("data").display()
                ))
                .arg(format!("--listen-client-urls={url}"))
                .arg(format!("--advertise-client-urls={url}"))
                .arg(format!("--listen-peer-urls={peer_url}"))
                .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                .arg(format!("--initial-cluster=grl-test={peer_url}")),
        )?;
        let process = self.process.insert(process);
        if let Err(e) = wait_for_http_ok(&format!("{url}/health"), Duration::from_secs(30)).await {
            anyhow::bail!(
                "etcd did not become healthy: {e}\n{}",
                process.output_tail(20)
            );
        }
        Ok(())
    }

    /// The client URL, e.g. `http://127.0.0.1:23790`.
    pub fn url(&self) -> &str {
        &self.url
    }
}
