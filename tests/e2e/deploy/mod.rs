//! The deployment files in `deploy/` and the demo stack `docker-compose.yml`, checked against
//! the contract and against real tools, one module per asset:
//!
//! - [`compose`]: the stack's services, commands, mounts and dependencies (the file itself is
//!   read by [`compose_file`], whose commands are parsed against the CLI [`contract`]);
//! - [`dockerfile`]: the image that builds and ships every binary the stack runs;
//! - [`prometheus`]: the scrape config against the processes' `--metrics-listen`;
//! - [`alerts`]: the alerting rules and their promtool unit tests;
//! - [`grafana`]: the dashboard and its provisioning;
//! - [`promql`]: every alert and dashboard query, parsed by a real Prometheus and limited to
//!   the contract's metrics;
//! - [`seed`]: the config-repo seeding script; [`traffic`]: the demo traffic profile.
//!
//! Nothing here needs Docker: the compose file is read as YAML and cross-checked (commands
//! against the CLI contract and the real binaries' `--help`, scrape targets against the
//! processes' `--metrics-listen`, mounts against the repo), the rules go through `promtool`,
//! and every dashboard query is parsed by a real Prometheus.
//!
//! [`dashboard_exprs`] and [`substitute_grafana_vars`] are public so that other end-to-end
//! tests can run the dashboard's queries against a Prometheus that has data.

mod alerts;
mod compose;
mod compose_file;
mod contract;
mod dockerfile;
mod grafana;
mod prometheus;
mod promql;
mod seed;
mod traffic;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_yaml::Value;

pub(crate) use grafana::{dashboard_exprs, substitute_grafana_vars};

/// The folder of the deployment files, relative to the repository root.
const DEPLOY_DIR: &str = "deploy";

/// The repository root (the parent of `tests/`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `deploy/<name>`, relative to the repository root.
fn deploy_file(name: &str) -> String {
    format!("{DEPLOY_DIR}/{name}")
}

/// The text of a file given relative to the repository root.
fn read_repo_file(rel: &str) -> Result<String> {
    let path = repo_root().join(rel);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// A YAML file given relative to the repository root.
fn read_yaml(rel: &str) -> Result<Value> {
    serde_yaml::from_str(&read_repo_file(rel)?).with_context(|| format!("{rel} is not valid YAML"))
}
