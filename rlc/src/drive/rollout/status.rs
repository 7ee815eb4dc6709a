//! What `rlc rollout status` shows: a rollout's state, each region's place in it (the
//! commit its branch holds, and the version its controllers report when asked), each
//! wave's verdict with the failed gates' figures, and the predictions.

use std::collections::BTreeMap;
use std::fmt::Write;

use chrono::{TimeZone, Utc};
use serde::Serialize;

use super::controllers::ControllerView;
use super::gates::GateFailure;
use super::outcome::short;
use super::prediction::Prediction;
use super::state::RolloutRecord;

/// The view of one rollout (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct StatusView {
    /// The rollout's id.
    pub id: String,
    /// The commit rolled out.
    pub commit: String,
    /// `running`, `paused`, `passed`, `failed`, `aborted` or `rolled-back`.
    pub state: String,
    /// The wave in progress (1-based; the number of waves + 1 once all passed).
    pub wave: usize,
    /// The number of waves.
    pub waves: usize,
    /// RFC 3339 start.
    pub started_at: String,
    /// RFC 3339 end, once it stopped.
    pub finished_at: Option<String>,
    /// The driving process, if any.
    pub owner: Option<String>,
    /// Why its bakes are skipped, if they are.
    pub expedite_reason: Option<String>,
    /// Why it stopped.
    pub reason: Option<String>,
    /// Every region.
    pub regions: Vec<RegionView>,
    /// Every wave judged.
    pub verdicts: Vec<WaveView>,
    /// The changed buckets and their predictions.
    pub predictions: Vec<Prediction>,
}

/// A region in the view.
#[derive(Debug, Clone, Serialize)]
pub struct RegionView {
    /// The region.
    pub region: String,
    /// Its wave (1-based).
    pub wave: usize,
    /// `pending`, `moved`, `passed` or `rolled-back`.
    pub state: String,
    /// The commit its branch holds by the rollout's account.
    pub branch: Option<String>,
    /// The commit it held before the rollout.
    pub from: Option<String>,
    /// The versions its controllers report (only with `--controller`).
    pub running: Vec<String>,
}

/// A wave's verdict in the view.
#[derive(Debug, Clone, Serialize)]
pub struct WaveView {
    /// The wave (1-based).
    pub wave: usize,
    /// `passed`, `failed` or `expedited`.
    pub result: String,
    /// RFC 3339.
    pub at: String,
    /// The failed gates.
    pub failures: Vec<GateFailure>,
}

fn time(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms)
        .single()
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

impl StatusView {
    /// The view of `r`, with the versions `views` (the controllers asked) report.
    pub fn new(r: &RolloutRecord, views: &[ControllerView]) -> StatusView {
        let mut running: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for v in views {
            if let (Some(region), Some(version)) = (&v.region, &v.version) {
                running.entry(region).or_default().push(version.clone());
            }
        }
        StatusView {
            id: r.id.clone(),
            commit: r.commit.clone(),
            state: r.state.as_str().into(),
            wave: r.wave + 1,
            waves: r.plan.waves.len(),
            started_at: time(r.started_at_ms),
            finished_at: r.finished_at_ms.map(time),
            owner: r.owner.clone(),
            expedite_reason: r.expedite_reason.clone(),
            reason: r.reason.clone(),
            regions: r
                .regions
                .iter()
                .map(|g| RegionView {
                    region: g.region.clone(),
                    wave: g.wave + 1,
                    state: g.state.as_str().into(),
                    branch: r.region_commit(g),
                    from: g.from_commit.clone(),
                    running: running.get(g.region.as_str()).cloned().unwrap_or_default(),
                })
                .collect(),
            verdicts: r
                .waves
                .iter()
                .map(|w| WaveView {
                    wave: w.wave + 1,
                    result: w.result.clone(),
                    at: time(w.at_ms),
                    failures: w.failures.clone(),
                })
                .collect(),
            predictions: r.predictions.clone(),
        }
    }

    /// The terminal table.
    pub fn render(&self, asked_controllers: bool) -> String {
        let mut out = String::new();
        let wave = if self.wave > self.waves {
            format!("{} waves done", self.waves)
        } else {
            format!("wave {}/{}", self.wave, self.waves)
        };
        let _ = writeln!(
            out,
            "rollout {}  commit {}  {}  {wave}  started {}{}",
            self.id,
            short(&self.commit),
            self.state,
            self.started_at,
            self.finished_at
                .as_deref()
                .map(|f| format!("  ended {f}"))
                .unwrap_or_default()
        );
        if let Some(reason) = &self.expedite_reason {
            let _ = writeln!(out, "expedited: {reason}");
        }
        let mut rows = vec![[
            "WAVE".to_string(),
            "REGION".into(),
            "STATE".into(),
            "BRANCH".into(),
            "RUNS".into(),
        ]];
        for g in &self.regions {
            let runs = if !asked_controllers {
                "-".to_string()
            } else if g.running.is_empty() {
                "(no controller answered)".into()
            } else {
                g.running
                    .iter()
                    .map(|v| {
                        v.split_once('+').map_or(short(v).to_string(), |(c, rest)| {
                            format!("{}+{rest}", short(c))
                        })
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            rows.push([
                g.wave.to_string(),
                g.region.clone(),
                g.state.clone(),
                g.branch.as_deref().map_or("(none)", short).to_string(),
                runs,
            ]);
        }
        out.push('\n');
        out.push_str(&table(&rows));
        if !self.verdicts.is_empty() {
            out.push('\n');
        }
        for w in &self.verdicts {
            let _ = writeln!(out, "wave {}: {} at {}", w.wave, w.result, w.at);
            for f in &w.failures {
                let _ = writeln!(out, "  {f}");
            }
        }
        if let Some(reason) = &self.reason
            && self.verdicts.iter().all(|w| w.failures.is_empty())
        {
            let _ = writeln!(out, "reason: {reason}");
        }
        if !self.predictions.is_empty() {
            let _ = writeln!(
                out,
                "\nchanged buckets (predicted dropped share of the last 24 h):"
            );
            for p in &self.predictions {
                let _ = writeln!(
                    out,
                    "  {}/{}  {} → {}  {}  {}",
                    p.service,
                    p.bucket,
                    p.old_limit.map_or("none".into(), |l| format!("{l}")),
                    p.new_limit.map_or("none".into(), |l| format!("{l}")),
                    p.mode,
                    p.predicted_drop
                        .map_or("no prediction".into(), |d| format!("{:.2}%", d * 100.0))
                );
            }
        }
        out
    }
}

/// Left-aligned columns separated by two spaces.
fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}
