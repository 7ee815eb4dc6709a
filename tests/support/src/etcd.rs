//! A real etcd (the engine of the controllers' leader election) on free ports of
//! 127.0.0.1, with its data in a temporary directory; killed when dropped.
//!
//! The binary comes from `GRL_TEST_ETCD` (default `/usr/bin/etcd`, Debian's `etcd-server`,
//! which `bash tests/run.sh` installs).

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
    process: ChildGuard,
    _dir: TempDir,
}

impl Etcd {
    /// Starts etcd and returns once `/health` answers 200 OK.
    pub async fn start() -> Result<Etcd> {
        let bin = test_binary("GRL_TEST_ETCD", "/usr/bin/etcd", "etcd")?;
        let dir = tempfile::Builder::new().prefix("grl-etcd-").tempdir()?;
        let (client, peer) = (free_port(), free_port());
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let process = spawn(
            Command::new(bin)
                .arg("--name=grl-test")
                .arg(format!("--data-dir={}", dir.path().join("data").display()))
                .arg(format!("--listen-client-urls={url}"))
                .arg(format!("--advertise-client-urls={url}"))
                .arg(format!("--listen-peer-urls={peer_url}"))
                .arg(format!("--initial-advertise-peer-urls={peer_url}"))
                .arg(format!("--initial-cluster=grl-test={peer_url}")),
        )?;
        let etcd = Etcd {
            url,
            process,
            _dir: dir,
        };
        if let Err(e) =
            wait_for_http_ok(&format!("{}/health", etcd.url), Duration::from_secs(30)).await
        {
            anyhow::bail!(
                "etcd did not become healthy: {e}\n{}",
                etcd.process.output_tail(20)
            );
        }
        Ok(etcd)
    }

    /// The client URL, e.g. `http://127.0.0.1:23790`.
    pub fn url(&self) -> &str {
        &self.url
    }
}
