//! `rlc serve --schedule "*/5 * * * *"` at fleet size: when each run started against its
//! slot, whether runs overlapped or slots were skipped, whether the controller ended on
//! `main`'s commit.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What to serve.
pub(crate) struct Check<'a> {
    pub(crate) remote: &'a Path,
    pub(crate) work: &'a Path,
    pub(crate) db: &'a str,
    pub(crate) source: &'a str,
    pub(crate) controller: &'a str,
    /// Runs to wait for.
    pub(crate) slots: usize,
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The log line's timestamp (RFC 3339 at its start) as unix seconds.
fn stamp(line: &str) -> Option<f64> {
    let t = chrono::DateTime::parse_from_rfc3339(line.split_whitespace().next()?).ok()?;
    Some(t.timestamp_millis() as f64 / 1000.0)
}

impl Check<'_> {
    /// Serves until `slots` runs finished; `version` is the controller's running version.
    pub(crate) async fn run(&self, version: impl Fn() -> String) -> serde_json::Value {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = self.work.with_extension("serve.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_rlc"))
            .args(["serve", "--schedule", "*/5 * * * *", "--mode", "direct"])
            .arg("--config-repo")
            .arg(self.remote)
            .arg("--workdir")
            .arg(self.work)
            .args([
                "--db",
                self.db,
                "--prometheus",
                self.source,
                "--controller",
                self.controller,
            ])
            .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
            .args([
                "--progress",
                "log",
                "--progress-interval",
                "30s",
                "--prometheus-timeout",
                "120s",
            ])
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("rlc serve");
        let deadline = Instant::now() + Duration::from_secs(self.slots as u64 * 300 + 900);
        let finished = |text: &str| text.lines().filter(|l| l.contains("run finished")).count();
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if finished(&text) >= self.slots || Instant::now() > deadline {
                break;
            }
        }
        let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
            .await
            .and_then(reqwest::Response::error_for_status)
            .map(reqwest::Response::text);
        let metrics = match metrics {
            Ok(body) => body.await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let _ = child.kill();
        let _ = child.wait();
        let text = strip_ansi(&std::fs::read_to_string(&log).unwrap_or_default());
        let starts: Vec<f64> = text
            .lines()
            .filter(|l| l.contains("run started"))
            .filter_map(stamp)
            .collect();
        let ends: Vec<f64> = text
            .lines()
            .filter(|l| l.contains("run finished"))
            .filter_map(stamp)
            .collect();
        let delays: Vec<f64> = starts.iter().map(|s| s.rem_euclid(300.0)).collect();
        let overlaps = starts
            .iter()
            .skip(1)
            .zip(&ends)
            .filter(|(next, end)| next < end)
            .count();
        let durations: Vec<f64> = starts
            .iter()
            .zip(&ends)
            .map(|(s, e)| ((e - s) * 10.0).round() / 10.0)
            .collect();
        let skipped = metrics
            .lines()
            .find(|l| l.starts_with("rlc_schedule_skipped_total"))
            .and_then(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .unwrap_or(-1.0);
        let head = Command::new("git")
            .arg("-C")
            .arg(self.remote)
            .args(["rev-parse", "main"])
            .output()
            .unwrap();
        let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
        let commits = text.lines().filter(|l| l.contains("limits pushed")).count();
        serde_json::json!({
            "runs": ends.len(),
            "commits": commits,
            "start_delay_s": delays.iter().map(|d| (d * 100.0).round() / 100.0).collect::<Vec<_>>(),
            "run_s": durations,
            "overlaps": overlaps,
            "skipped_slots": skipped,
            "controller_at_main": version() == head,
            "log": log.display().to_string(),
        })
    }
}
