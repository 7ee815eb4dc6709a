//! A real Prometheus server for a test: optionally backfilled with history by `promtool`,
//! optionally scraping targets, listening on a free port on 127.0.0.1, killed on drop.
//!
//! Binaries come from `GRL_TEST_PROMETHEUS` and `GRL_TEST_PROMTOOL` (defaults
//! `/usr/bin/prometheus`, `/usr/bin/promtool`); `bash tests/run.sh` installs them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use tempfile::TempDir;

use crate::ports::free_addr;
use crate::process::{ChildGuard, spawn, wait_for_http_ok};

/// How long Prometheus may take to load its blocks and report ready.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A running Prometheus with its own data directory; killed and deleted on drop.
#[derive(Debug)]
pub struct Prometheus {
    child: ChildGuard,
    url: String,
    http: reqwest::Client,
    data_dir: PathBuf,
    // Dropped last: the config (and, unless external, the data) outlives the process.
    _dir: TempDir,
}

/// The path of a test binary named by `env_var`, or `default`; an error telling how to get
/// it if it does not exist.
pub fn test_binary(env_var: &str, default: &str, what: &str) -> Result<PathBuf> {
    let path = std::env::var_os(env_var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    ensure!(
        path.is_file(),
        "{what} not found at {} (set {env_var} to override): run tests via \
         `bash tests/run.sh`, which installs {what}",
        path.display()
    );
    Ok(path)
}

/// Writes `openmetrics` to `dir/backfill.om` and converts it into TSDB blocks in `data_dir`
/// with `promtool tsdb create-blocks-from openmetrics --max-block-duration=200h`.
///
/// The hidden `--max-block-duration` flag matters: promtool reads the whole file once per
/// output block, and with the default 2 h blocks four weeks of history take minutes.
async fn backfill(openmetrics: &str, dir: &Path, data_dir: &Path) -> Result<()> {
    ensure!(
        openmetrics.trim_end().ends_with("# EOF"),
        "an OpenMetrics backfill must end with `# EOF`"
    );
    let file = dir.join("backfill.om");
    std::fs::write(&file, openmetrics).with_context(|| format!("writing {}", file.display()))?;
    backfill_file(&file, data_dir).await?;
    // The file is only an intermediate; four weeks of 100 series take about 500 MB.
    let _ = std::fs::remove_file(&file);
    Ok(())
}

/// Converts the OpenMetrics file `om_file` (for example from
/// [`crate::traffic::write_counters_file`]) into TSDB blocks in `data_dir`, with
/// `promtool tsdb create-blocks-from openmetrics --max-block-duration=200h`.
pub async fn backfill_file(om_file: &Path, data_dir: &Path) -> Result<()> {
    let promtool = test_binary("GRL_TEST_PROMTOOL", "/usr/bin/promtool", "Prometheus")?;
    std::fs::create_dir_all(data_dir)?;
    let file = om_file;
    let out = tokio::process::Command::new(&promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg("--max-block-duration=200h")
        .arg(file)
        .arg(data_dir)
        .output()
        .await
        .with_context(|| format!("running {}", promtool.display()))?;
    ensure!(
        out.status.success(),
        "promtool backfill failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

impl Prometheus {
    /// Backfills `openmetrics` (see [`crate::traffic::OpenMetricsWriter`]) and starts
    /// Prometheus on it, with no scrape targets.
    pub async fn start_with_backfill(openmetrics: &str) -> Result<Prometheus> {
        Self::start_with(Some(openmetrics), &[]).await
    }

    /// Starts Prometheus, first backfilling `backfill` if given, scraping each of
    /// `scrape_targets` (`host:port`, path `/metrics`) every second.
    ///
    /// Retention is 400 days, so a backfill of weeks-old history is not deleted at startup.
    /// Returns once `/-/ready` answers 200 OK.
    pub async fn start_with(
        backfill: Option<&str>,
        scrape_targets: &[String],
    ) -> Result<Prometheus> {
        let dir = tempfile::Builder::new()
            .prefix("grl-prometheus-")
            .tempdir()?;
        let data_dir = dir.path().join("data");
        std::fs::create_dir(&data_dir)?;
        if let Some(openmetrics) = backfill {
            self::backfill(openmetrics, dir.path(), &data_dir).await?;
        }
        Self::launch(dir, data_dir, scrape_targets, &[]).await
    }

    /// Starts Prometheus on TSDB blocks that already exist in `data_dir` (for example made
    /// once by [`backfill_file`] and kept across benchmark runs), with no scrape targets.
    /// The data directory is not deleted when the server stops.
    pub async fn start_on_data(data_dir: &Path) -> Result<Prometheus> {
        Self::start_on_data_with(data_dir, &[]).await
    }

    /// [`start_on_data`](Self::start_on_data) with more command-line flags (e.g. a lower
    /// `--query.max-samples`).
    pub async fn start_on_data_with(data_dir: &Path, flags: &[&str]) -> Result<Prometheus> {
        let dir = tempfile::Builder::new()
            .prefix("grl-prometheus-")
            .tempdir()?;
        Self::launch(dir, data_dir.to_path_buf(), &[], flags).await
    }

    async fn launch(
        dir: TempDir,
        data_dir: PathBuf,
        scrape_targets: &[String],
        flags: &[&str],
    ) -> Result<Prometheus> {
        let prometheus = test_binary("GRL_TEST_PROMETHEUS", "/usr/bin/prometheus", "Prometheus")?;
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, config_yaml(scrape_targets))?;

        let addr = free_addr();
        let child = spawn(
            Command::new(&prometheus)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", data_dir.display()))
                .arg("--storage.tsdb.retention.time=400d")
                .arg(format!("--web.listen-address={addr}"))
                .arg("--web.enable-lifecycle")
                .args(flags),
        )?;
        let url = format!("http://{addr}");
        let mut server = Prometheus {
            child,
            url,
            http: crate::process::http_client_builder()
                .timeout(Duration::from_secs(60))
                .build()?,
            data_dir,
            _dir: dir,
        };
        server.wait_ready().await?;
        Ok(server)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let started = Instant::now();
        let ready = format!("{}/-/ready", self.url);
        while started.elapsed() < READY_TIMEOUT {
            if let Some(status) = self.child.try_exited() {
                bail!(
                    "prometheus exited with {status} before it was ready:\n{}",
                    self.child.output_tail(30)
                );
            }
            if wait_for_http_ok(&ready, Duration::from_millis(500))
                .await
                .is_ok()
            {
                return Ok(());
            }
        }
        bail!(
            "prometheus was not ready within {READY_TIMEOUT:?}:\n{}",
            self.child.output_tail(30)
        )
    }

    /// The base URL, `http://127.0.0.1:<port>`, without a trailing slash.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The data directory (TSDB) of this server.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone()
    }

    /// Everything Prometheus logged so far.
    pub fn log(&self) -> String {
        self.child.output()
    }

    /// Runs an instant query at the server's current time and returns the `data` object of
    /// the answer (`{"resultType": ..., "result": ...}`); an error names the query.
    pub async fn query(&self, promql: &str) -> Result<Value> {
        self.query_params(promql, None).await
    }

    /// Runs an instant query evaluated at `time` (unix seconds); see [`Prometheus::query`].
    pub async fn query_at(&self, promql: &str, time: i64) -> Result<Value> {
        self.query_params(promql, Some(time)).await
    }

    /// Runs an instant query whose result must be a vector with exactly one sample, and
    /// returns that sample's value.
    pub async fn query_scalar(&self, promql: &str) -> Result<f64> {
        let data = self.query(promql).await?;
        let result = data["result"]
            .as_array()
            .with_context(|| format!("{promql}: no result array in {data}"))?;
        ensure!(
            result.len() == 1,
            "{promql}: expected one sample, got {}: {data}",
            result.len()
        );
        let value = result[0]["value"][1]
            .as_str()
            .with_context(|| format!("{promql}: no value in {data}"))?;
        value
            .parse()
            .with_context(|| format!("{promql}: value {value:?} is not a number"))
    }

    async fn query_params(&self, promql: &str, time: Option<i64>) -> Result<Value> {
        let mut form = vec![("query", promql.to_owned())];
        if let Some(time) = time {
            form.push(("time", time.to_string()));
        }
        let resp = self
            .http
            .post(format!("{}/api/v1/query", self.url))
            .form(&form)
            .send()
            .await
            .with_context(|| format!("querying {promql}"))?;
        let status = resp.status();
        let body: Value = resp
            .json()
            .await
            .with_context(|| format!("{promql}: answer is not JSON (status {status})"))?;
        ensure!(
            body["status"] == "success",
            "{promql}: query failed with status {status}: {body}"
        );
        Ok(body["data"].clone())
    }

    /// Stops the server and deletes its data directory.
    pub fn stop(self) {
        drop(self);
    }
}

/// A minimal configuration: 1 s scrape and evaluation interval, one static job `targets`
/// with the given `host:port` targets (no job at all if there are none).
fn config_yaml(scrape_targets: &[String]) -> String {
    let mut yaml = String::from("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n");
    if !scrape_targets.is_empty() {
        yaml.push_str(
            "scrape_configs:\n  - job_name: targets\n    static_configs:\n      - targets:\n",
        );
        for target in scrape_targets {
            writeln!(yaml, "          - {target:?}").expect("writing to a String");
        }
    }
    yaml
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_lists_targets() {
        assert!(!config_yaml(&[]).contains("scrape_configs"));
        let yaml = config_yaml(&["127.0.0.1:9000".to_owned()]);
        assert!(yaml.contains("job_name: targets"));
        assert!(yaml.contains("- \"127.0.0.1:9000\""));
    }

    #[test]
    fn missing_binary_says_how_to_get_it() {
        let err = test_binary(
            "GRL_TEST_NO_SUCH_VAR",
            "/nonexistent/prometheus",
            "Prometheus",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("bash tests/run.sh"), "{err}");
    }
}
