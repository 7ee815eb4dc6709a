//! `rlc explain` as a process against a real Prometheus backfilled with 28 days of real
//! traffic (one known spike, and virtual drops for a shadow bucket), a bare git remote and
//! the SQLite run history written by real `rlc run`s; and the pull request's explanations.

use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use rlc::decide::guards::{GuardSettings, Outcome};
use rlc::drive::run::{RunSettings, run_once};
use rlc::input::source::{BatchedPrometheusSource, PromSettings};
use rlc::output::git_store::PublishMode;
use serde_json::Value;
use test_support::git_remote::BareRemote;
use test_support::prometheus::Prometheus;
use test_support::traffic::{self, OpenMetricsWriter};

const SERVICES: &str = "\
service: payments
buckets:
  - name: gateway-pay
    match: { caller: gateway, procedure: \"Pay/*\" }
    scope: global
    mode: deny
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
  - name: partner-acme
    match: { caller: partner-acme }
    scope: region
    mode: deny
    policy: { kind: fixed, rps: 500 }
  - name: refunds
    match: { procedure: \"Refund/*\" }
    scope: global
    mode: shadow
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
  - name: checkout
    match: { caller: web, procedure: \"Checkout/*\" }
    scope: global
    mode: deny
    policy: { kind: historical-peak, window: 7d, buffer: 0.25 }
    priorities: [critical, default, sheddable]
    min_share: { sheddable: 0.05 }
";

/// checkout's classes: their names, floors and shares of its traffic at every moment.
const CLASSES: [(&str, f64, f64); 3] = [
    ("critical", 0.0, 0.3),
    ("default", 0.0, 0.4),
    ("sheddable", 0.05, 0.3),
];

/// Of refunds' offered load, the share shadow mode would have dropped: 1 in 101.
const VIRTUAL_DROPS: f64 = 1.0 / 101.0;

/// What the backfilled history holds.
struct Known {
    /// gateway-pay's spike: its rate and when it starts (ten minutes long).
    spike_rps: f64,
    spike_at: i64,
    /// When refunds went into shadow (its `shadow_since`).
    shadow_since: i64,
    /// checkout's rate during its spike (out of its 7-day window: its limit is under it).
    checkout_spike_rps: f64,
}

/// 28 days of gateway-pay (the elb series, median 1000 rps) with a ten-minute spike at three
/// times its largest rate nine days before the end; refunds at a median of 50 rps allowed,
/// and 1 % of that shadow-dropped; checkout at a median of 100 rps with the same spike, its
/// classes' counters in the shares of [`CLASSES`].
fn history() -> (String, Known) {
    let end = traffic::backfill_end();
    let elb = traffic::repeat_to_span(
        &traffic::load_series("elb_request_count_8c0756"),
        28 * 86_400,
    );
    let mut gateway = traffic::scale_and_shift(&elb, 1000.0, end);
    let spike_rps = (3.0 * gateway.iter().map(|p| p.1).fold(0.0, f64::max)).round();
    let spike_at = end - 9 * 86_400;
    for p in &mut gateway {
        if (spike_at..spike_at + 600).contains(&p.0) {
            p.1 = spike_rps;
        }
    }
    let refunds = traffic::scale_and_shift(&elb, 50.0, end);
    let dropped: Vec<_> = refunds.iter().map(|&(t, v)| (t, v / 100.0)).collect();
    let mut w = OpenMetricsWriter::new();
    let labels = |caller, procedure, decision| {
        [
            ("service", "payments"),
            ("caller", caller),
            ("procedure", procedure),
            ("bucket", ""),
            ("decision", decision),
        ]
    };
    let name = "grl_requests_total";
    w.add_counter_series(
        name,
        &labels("gateway", "Pay/Charge", "allowed"),
        &gateway,
        60,
    );
    w.add_counter_series(name, &labels("web", "Refund/Full", "allowed"), &refunds, 60);
    let shadow = labels("web", "Refund/Full", "shadow_dropped");
    w.add_counter_series(name, &shadow, &dropped, 60);
    let mut checkout = traffic::scale_and_shift(&elb, 100.0, end);
    let checkout_spike_rps = (3.0 * checkout.iter().map(|p| p.1).fold(0.0, f64::max)).round();
    for p in &mut checkout {
        if (spike_at..spike_at + 600).contains(&p.0) {
            p.1 = checkout_spike_rps;
        }
    }
    w.add_counter_series(
        name,
        &labels("web", "Checkout/Buy", "allowed"),
        &checkout,
        60,
    );
    for (class, _, share) in CLASSES {
        let part: Vec<_> = checkout.iter().map(|&(t, v)| (t, v * share)).collect();
        w.add_counter_series(
            "grl_client_class_requests_total",
            &[
                ("service", "payments"),
                ("bucket", "checkout"),
                ("class", class),
                ("decision", "allowed"),
            ],
            &part,
            60,
        );
    }
    let known = Known {
        spike_rps,
        spike_at,
        shadow_since: end - 10 * 86_400,
        checkout_spike_rps,
    };
    (w.finish(), known)
}

struct Setup {
    prometheus: Prometheus,
    remote: BareRemote,
    known: Known,
    /// gateway-pay's limit before the first run: a twentieth of its proposal, so that
    /// max-increase (at most ×2 a run) still acts after two runs.
    first_limit: f64,
    work: tempfile::TempDir,
}

async fn setup() -> Result<Setup> {
    let (openmetrics, known) = history();
    let prometheus = Prometheus::start_with_backfill(&openmetrics).await?;
    let first_limit = (known.spike_rps * 1.25 / 20.0).round();
    let limits = format!(
        "service: payments\nlimits:\n  gateway-pay: {{ rps: {first_limit} }}\n  \
         refunds: {{ rps: 1000, shadow_since: {} }}\n",
        known.shadow_since
    );
    let remote = BareRemote::with_files(&[
        ("services/payments.yaml", SERVICES),
        ("limits/payments.yaml", limits.as_str()),
    ])?;
    Ok(Setup {
        prometheus,
        remote,
        known,
        first_limit,
        work: tempfile::tempdir()?,
    })
}

impl Setup {
    fn db(&self) -> String {
        format!("sqlite://{}", self.work.path().join("history.db").display())
    }

    /// `rlc <args> --config-repo … --prometheus … --db …`.
    fn rlc(&self, args: &[&str]) -> Result<Output> {
        Ok(std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
            .args(args)
            .args(["--config-repo", &self.remote.url()])
            .args(["--prometheus", &self.prometheus.url(), "--db", &self.db()])
            .arg("--workdir")
            .arg(self.work.path().join("checkout"))
            .output()?)
    }

    /// `rlc explain SERVICE BUCKET --json`, parsed.
    fn explain_json(&self, bucket: &str) -> Result<Value> {
        let out = self.rlc(&["explain", "payments", bucket, "--json"])?;
        ensure!(
            out.status.success(),
            "explain {bucket}: {}",
            text(&out.stderr)
        );
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    /// gateway-pay's limit on `main`.
    fn limit_on_main(&self) -> Result<f64> {
        let files = ["services/payments.yaml", "limits/payments.yaml"]
            .iter()
            .filter_map(|p| Some((p.to_string(), self.remote.read_file_at("main", p)?)))
            .collect::<Vec<_>>();
        let snap = grl_config::from_files("main", files)?;
        snap.service("payments")
            .and_then(|s| s.bucket("gateway-pay"))
            .and_then(|b| b.limit)
            .context("gateway-pay has a limit on main")
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn near(got: f64, want: f64, tolerance: f64) -> bool {
    (got / want - 1.0).abs() <= tolerance
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_states_the_peak_the_policy_the_guard_and_the_last_runs() -> Result<()> {
    let s = setup().await?;
    let mut committed = Vec::new();
    for _ in 0..2 {
        let out = s.rlc(&["run", "--once", "--mode", "direct"])?;
        ensure!(out.status.success(), "rlc run: {}", text(&out.stderr));
        committed.push(s.limit_on_main()?);
    }
    assert_eq!(
        committed,
        [2.0 * s.first_limit, 4.0 * s.first_limit],
        "max-increase doubled the limit at each run"
    );

    let e = s.explain_json("gateway-pay")?;
    assert_eq!(e["policy"]["kind"], "historical-peak", "{e}");
    assert_eq!(e["policy"]["params"]["buffer"], 0.25, "{e}");
    assert_eq!(e["policy"]["params"]["window"], "28d", "{e}");
    let peak = &e["observed_peak"];
    let peak_rps = peak["rps"].as_f64().context("the peak")?;
    assert!(
        near(peak_rps, s.known.spike_rps, 0.01),
        "{peak} vs the spike {}",
        s.known.spike_rps
    );
    let at = peak["at"].as_i64().context("the peak's time")?;
    assert!(
        (s.known.spike_at - 300..=s.known.spike_at + 600).contains(&at),
        "peak at {at}, the spike started at {}",
        s.known.spike_at
    );
    let proposed = e["proposed"].as_f64().context("a proposal")?;
    assert!(near(proposed, 1.25 * peak_rps, 0.001), "{e}");
    assert_eq!(e["previous_limit"], committed[1], "{e}");
    let guards = e["guards"].as_array().context("guards")?;
    let raised = guards
        .iter()
        .find(|g| g["guard"] == "max-increase")
        .with_context(|| format!("max-increase acted: {guards:?}"))?;
    assert_eq!(raised["before"].as_f64(), Some(proposed), "{raised}");
    assert_eq!(
        raised["after"].as_f64(),
        Some(2.0 * committed[1]),
        "{raised}"
    );
    let change = raised["change"].as_f64().context("change")?;
    assert!(
        (change - (2.0 * committed[1] - proposed)).abs() < 1e-6,
        "{raised}"
    );
    assert_eq!(e["limit"].as_f64(), Some(2.0 * committed[1]), "{e}");
    assert_eq!(e["outcome"], "changed", "{e}");

    let runs = e["history"]["runs"].as_array().context("the last runs")?;
    assert_eq!(runs.len(), 2, "{runs:?}");
    for (run, (limit, before)) in runs
        .iter()
        .zip([(committed[1], committed[0]), (committed[0], s.first_limit)])
    {
        assert_eq!(run["status"], "committed", "{run}");
        assert_eq!(run["recorded"], true, "{run}");
        let d = &run["decision"];
        assert_eq!(d["applied_limit"].as_f64(), Some(limit), "{run}");
        assert_eq!(d["previous_limit"].as_f64(), Some(before), "{run}");
        assert!(d["guards"].to_string().contains("max-increase"), "{run}");
    }

    let out = s.rlc(&["explain", "payments", "gateway-pay"])?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    eprintln!("rlc explain payments gateway-pay:\n{shown}");
    let fmt = rlc::decide::guards::fmt_rps;
    for want in [
        format!(
            "payments/gateway-pay: {} → {} rps (changed)\n",
            fmt(committed[1]),
            fmt(2.0 * committed[1])
        ),
        "  Policy         historical-peak { ".to_string(),
        format!(
            "  Observed peak  {} rps at {}\n",
            fmt(peak_rps),
            peak["at_utc"].as_str().unwrap_or("?")
        ),
        format!(
            "  Guards         max-increase: {} → {} (",
            fmt(proposed),
            fmt(2.0 * committed[1])
        ),
        format!("  {} ", runs[0]["run_id"].as_str().context("run id")?),
        format!(
            "direct committed: {} rps (changed from {}",
            fmt(committed[1]),
            fmt(committed[0])
        ),
    ] {
        assert!(shown.contains(&want), "{want:?} in\n{shown}");
    }
    assert!(shown.contains("  Last runs      from sqlite://"), "{shown}");

    let r = s.explain_json("refunds")?;
    let drops = &r["drops"];
    assert_eq!(drops["mode"], "shadow", "{r}");
    let fraction = drops["fraction"].as_f64().context("virtual drops")?;
    assert!(
        near(fraction, VIRTUAL_DROPS, 0.05),
        "{drops} vs {VIRTUAL_DROPS}"
    );
    assert_eq!(drops["shadow_since"], s.known.shadow_since, "{drops}");
    assert_eq!(drops["verdict"], "not-ready", "1 % is above 0.1 %: {drops}");
    Ok(())
}

/// checkout's limit comes from its last 7 days; the spike nine days ago is three times its
/// peak. At that limit the spike would keep the critical class, shed the default class in
/// part and the sheddable class down to its 5 % floor: `rlc explain` shows each class's
/// share dropped at the peak, as the tiers would part the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_how_each_priority_class_would_fare_at_the_limit() -> Result<()> {
    let s = setup().await?;
    let e = s.explain_json("checkout")?;
    let limit = e["limit"].as_f64().context("a limit")?;
    let c = &e["classes"];
    assert_eq!(c["limit"].as_f64(), Some(limit), "{c}");
    let spike = s.known.checkout_spike_rps;
    assert!(
        limit < 0.8 * spike,
        "the 7-day limit {limit} is under the spike {spike}"
    );
    let at = c["peak_at"].as_i64().context("the classes' peak")?;
    assert!(
        (s.known.spike_at..=s.known.spike_at + 900).contains(&at),
        "peak at {at}, the spike started at {}: {c}",
        s.known.spike_at
    );
    // What each class keeps at the spike: floors first, then the highest classes.
    let floors: f64 = CLASSES.iter().map(|k| (k.1 * limit).min(k.2 * spike)).sum();
    let mut left = limit - floors;
    let classes = c["classes"].as_array().context("classes")?;
    assert_eq!(classes.len(), CLASSES.len(), "{c}");
    for ((name, floor, share), got) in CLASSES.iter().zip(classes) {
        let offered = share * spike;
        let kept_floor = (floor * limit).min(offered);
        let kept = kept_floor + (offered - kept_floor).min(left.max(0.0));
        left -= kept - kept_floor;
        let want = 1.0 - kept / offered;
        assert_eq!(got["class"], *name, "{c}");
        let rps = got["rps_at_peak"].as_f64().context("rps")?;
        assert!(near(rps, offered, 0.01), "{name}: {rps} vs {offered}: {c}");
        let dropped = got["dropped_at_peak"].as_f64().context("dropped")?;
        assert!(
            (dropped - want).abs() <= 0.01,
            "{name} dropped {dropped} at the spike, want {want:.3}: {c}"
        );
    }
    let dropped = |k: usize| classes[k]["dropped_at_peak"].as_f64().unwrap_or(-1.0);
    assert!(
        dropped(0) < 0.01 && dropped(1) > 0.1 && dropped(2) > 0.9,
        "critical kept, default cut, sheddable down to its floor: {c}"
    );

    let out = s.rlc(&["explain", "payments", "checkout"])?;
    ensure!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    eprintln!("rlc explain payments checkout:\n{shown}");
    assert!(shown.contains("  Classes        at "), "{shown}");
    assert!(
        shown.contains("sheddable (keeps 5%): ") && shown.contains("critical: "),
        "{shown}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_changed_row_of_the_pull_request_links_to_its_explanation() -> Result<()> {
    let s = setup().await?;
    let settings = RunSettings {
        config_repo: s.remote.url(),
        workdir: s.work.path().join("pr-checkout"),
        mode: PublishMode::Pr,
        db: s.db(),
        controllers: Vec::new(),
        controller_auth: Default::default(),
        guards: GuardSettings::default(),
        concurrency: 4,
        now: None,
        trigger: "test".into(),
        max_attempts: 3,
        github: None,
        history_cache: None,
        history_retention: None,
        progress: rlc::drive::run::ProgressMode::Off,
        metrics: None,
    };
    let source = Arc::new(BatchedPrometheusSource::new(
        &s.prometheus.url(),
        PromSettings::default(),
    )?);
    let report = run_once(&settings, source).await?;
    let d = &report.description;
    let changed: Vec<_> = report
        .plans
        .iter()
        .filter(|p| matches!(p.guarded.outcome, Outcome::New | Outcome::Changed))
        .collect();
    assert!(!changed.is_empty(), "{d}");
    for p in &changed {
        let name = format!("{}/{}", p.service, p.bucket);
        let row = d
            .lines()
            .find(|l| l.starts_with(&format!("| [{name}](#")))
            .with_context(|| format!("a linked row for {name} in\n{d}"))?;
        let anchor = &row[row.find("](#").unwrap() + 3..row.find(") |").unwrap()];
        let cells: Vec<&str> = row.split(" | ").collect();
        let (old, new, peak) = (cells[1], cells[2], cells[5]);
        let start = d
            .find(&format!("<a name=\"{anchor}\"></a>\n<details>"))
            .with_context(|| format!("the section {anchor} in\n{d}"))?;
        let section = &d[start..start + d[start..].find("</details>").unwrap()];
        let summary = if old == "—" {
            format!("<summary><b>{name}: {new} rps (")
        } else {
            format!("<summary><b>{name}: {old} → {new} rps (")
        };
        assert!(section.contains(&summary), "{summary:?} in\n{section}");
        assert!(
            section.contains(&format!("- **Observed peak**: {peak} rps at ")),
            "the row's peak {peak} in\n{section}"
        );
        assert!(section.contains(&format!("{} {{ ", p.policy)), "{section}");
        for note in &p.guarded.notes {
            assert!(section.contains(note.guard), "{} in\n{section}", note.guard);
        }
    }
    let gateway = changed
        .iter()
        .find(|p| p.bucket == "gateway-pay")
        .context("gateway-pay changed")?;
    assert_eq!(gateway.guarded.notes[0].guard, "max-increase");
    assert!(
        d.contains(&format!(
            "- **Guards**: max-increase: {} → {} (",
            rlc::decide::guards::fmt_rps(gateway.proposal.clone().unwrap()),
            rlc::decide::guards::fmt_rps(2.0 * s.first_limit)
        )),
        "{d}"
    );
    assert!(
        changed.iter().any(|p| p.bucket == "checkout"),
        "checkout is new: {d}"
    );
    assert!(
        d.contains("- **Classes**:\n  - at ")
            && d.contains("  - sheddable (keeps 5%): ")
            && d.contains("  - critical: "),
        "checkout's classes at its limit in the pull request: {d}"
    );
    assert_eq!(
        d.matches("<details>").count(),
        changed.len(),
        "one section per changed bucket: {d}"
    );
    Ok(())
}

/// A config repo and offline history for the cases that need no Prometheus.
fn offline() -> Result<(BareRemote, tempfile::TempDir)> {
    let remote = BareRemote::with_files(&[("services/payments.yaml", SERVICES)])?;
    let work = tempfile::tempdir()?;
    let dir = work.path().join("history/payments");
    std::fs::create_dir_all(&dir)?;
    let now = chrono::Utc::now().timestamp();
    let csv: String = (0..=28 * 288)
        .map(|i| format!("{},{}\n", now - 28 * 86_400 + i * 300, 800 + i % 288))
        .collect();
    std::fs::write(dir.join("gateway-pay.csv"), csv)?;
    Ok((remote, work))
}

fn explain_offline(remote: &BareRemote, work: &std::path::Path, args: &[&str]) -> Result<Output> {
    Ok(std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
        .arg("explain")
        .args(args)
        .args(["--config-repo", &remote.url(), "--history-dir"])
        .arg(work.join("history"))
        .arg("--db")
        .arg(format!("sqlite://{}", db_path(work).display()))
        .output()?)
}

fn db_path(work: &std::path::Path) -> PathBuf {
    work.join("no-runs-yet.db")
}

#[test]
fn an_unknown_service_or_bucket_is_refused_naming_what_exists() -> Result<()> {
    let (remote, work) = offline()?;
    let out = explain_offline(&remote, work.path(), &["payments", "gateway-pai"])?;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("no bucket `gateway-pai` in service `payments`")
            && err.contains("its buckets: checkout, gateway-pay, partner-acme, refunds"),
        "{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "nothing explained: {}",
        text(&out.stdout)
    );
    let out = explain_offline(&remote, work.path(), &["payment", "gateway-pay"])?;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("no service `payment` in the config repo")
            && err.contains("its services: payments"),
        "{err}"
    );
    Ok(())
}

#[test]
fn without_a_run_history_it_says_so_and_creates_none() -> Result<()> {
    let (remote, work) = offline()?;
    let out = explain_offline(&remote, work.path(), &["payments", "gateway-pay"])?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains(&format!(
            "  Last runs      no run history: sqlite://{} does not exist (give --db or RLC_DB)\n",
            db_path(work.path()).display()
        )),
        "{shown}"
    );
    assert!(shown.contains("  Observed peak  1087 rps at "), "{shown}");
    assert!(
        !db_path(work.path()).exists(),
        "explain creates no database"
    );
    let out = explain_offline(
        &remote,
        work.path(),
        &["payments", "partner-acme", "--json"],
    )?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let fixed: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(
        (fixed["limit"].as_f64(), &fixed["outcome"]),
        (Some(500.0), &Value::from("fixed"))
    );
    Ok(())
}
