//! Test helper: a real Prometheus filled with synthetic `grl_requests_total` history.
//!
//! Writes counters as OpenMetrics (timestamps in seconds, `# EOF` last, nothing in the last
//! 3 hours), backfills them with `promtool tsdb create-blocks-from openmetrics`, and starts
//! `prometheus` on a free 127.0.0.1 port; [`TestProm`] kills it on drop. Also included by
//! `benches/source.rs` through `#[path]`, hence the `allow(dead_code)`.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One synthetic counter series: its labels (inside the braces) and its rate in requests per
/// second over the interval that ends at a timestamp.
pub struct SeriesSpec {
    /// E.g. `service="payments",caller="gw",procedure="Pay/Card",decision="allowed"`.
    pub labels: String,
    /// Rate (rps) over `(t - spacing, t]`.
    pub rate: Box<dyn Fn(i64) -> f64 + Send + Sync>,
}

/// Writes `grl_requests_total` counters for `series`, one sample every `spacing` seconds
/// from `start` to `end`, each series' samples in time order.
pub fn write_openmetrics(path: &Path, series: &[SeriesSpec], start: i64, end: i64, spacing: i64) {
    let f = std::fs::File::create(path).expect("create openmetrics file");
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    writeln!(w, "# HELP grl_requests Offered requests by decision.").unwrap();
    writeln!(w, "# TYPE grl_requests counter").unwrap();
    for s in series {
        let mut counter = 0.0f64;
        let mut t = start;
        while t <= end {
            if t > start {
                counter += (s.rate)(t) * spacing as f64;
            }
            writeln!(w, "grl_requests_total{{{}}} {counter:.3} {t}", s.labels).unwrap();
            t += spacing;
        }
    }
    writeln!(w, "# EOF").unwrap();
    w.flush().unwrap();
}

/// Backfills `om_file` into TSDB blocks under `data_dir`.
pub fn create_blocks(om_file: &Path, data_dir: &Path) {
    std::fs::create_dir_all(data_dir).unwrap();
    let out = Command::new("promtool")
        .args([
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--max-block-duration=200h",
        ])
        .arg(om_file)
        .arg(data_dir)
        .output()
        .expect("run promtool (apt-get install prometheus)");
    assert!(
        out.status.success(),
        "promtool failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running Prometheus, killed on drop.
pub struct TestProm {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    log: PathBuf,
}

impl TestProm {
    /// Starts Prometheus on `data_dir` (config and log go to `work_dir`) and waits until it
    /// answers `/-/ready`.
    pub async fn start(data_dir: &Path, work_dir: &Path) -> TestProm {
        let config = work_dir.join("prometheus.yml");
        std::fs::write(&config, "global:\n  scrape_interval: 1m\n").unwrap();
        let log = work_dir.join("prometheus.log");
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data_dir.display()))
            .arg("--storage.tsdb.retention.time=400d")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start prometheus (apt-get install prometheus)");
        let mut p = TestProm {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        };
        p.wait_ready().await;
        p
    }

    async fn wait_ready(&mut self) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(r) = http.get(format!("{}/-/ready", self.url)).send().await
                && r.status().is_success()
            {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "prometheus exited ({status}): {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready after 90 s: {}",
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for TestProm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
