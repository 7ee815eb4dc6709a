//! The configurator end to end: a real Prometheus backfilled with 28 days of real traffic,
//! bare git remotes on disk, SQLite and PostgreSQL, the `rlc` binary as a process.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use rlc::decide::guards::{GuardSettings, Outcome};
use rlc::drive::run::{RunError, RunSettings, run_once};
use rlc::input::source::{BatchedPrometheusSource, MetricsSource, PromSettings};
use rlc::output::git_store::PublishMode;
use rlc::run_log::{RunLog, RunStatus};
use test_support::git_remote::{BareRemote, GitDaemon};
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
    mode: deny
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
";

const LIMITS: &str = "service: payments\nlimits:\n  refunds: { rps: 700 }\n";

/// 28 days of real traffic for gateway-pay (elb, stretched, median 1000 rps) and only the
/// last 6 days for refunds (gappy: below the 80% coverage guard). Returns the known peak.
fn history() -> (String, f64) {
    let end = traffic::backfill_end();
    let elb = traffic::repeat_to_span(
        &traffic::load_series("elb_request_count_8c0756"),
        28 * 86_400,
    );
    let gateway = traffic::scale_and_shift(&elb, 1000.0, end);
    let aapl = traffic::load_series("Twitter_volume_AAPL");
    let refunds = traffic::take_last(&traffic::scale_and_shift(&aapl, 50.0, end), 6 * 86_400);
    let peak = gateway.iter().map(|p| p.1).fold(0.0, f64::max);
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
    w.add_counter_series(
        "grl_requests_total",
        &labels("gateway", "Pay/Charge", "allowed"),
        &gateway,
        60,
    );
    w.add_counter_series(
        "grl_requests_total",
        &labels("web", "Refund/Full", "allowed"),
        &refunds,
        60,
    );
    (w.finish(), peak)
}

struct Setup {
    prometheus: Prometheus,
    remote: Arc<BareRemote>,
    peak: f64,
    work: tempfile::TempDir,
}

async fn setup() -> Result<Setup> {
    let (openmetrics, peak) = history();
    let prometheus = Prometheus::start_with_backfill(&openmetrics).await?;
    let remote = BareRemote::with_files(&[
        ("services/payments.yaml", SERVICES),
        ("limits/payments.yaml", LIMITS),
        ("README.md", "config repo\n"),
    ])?;
    Ok(Setup {
        prometheus,
        remote: Arc::new(remote),
        peak,
        work: tempfile::tempdir()?,
    })
}

impl Setup {
    fn settings(&self, mode: PublishMode, db: &str) -> RunSettings {
        RunSettings {
            config_repo: self.remote.url(),
            workdir: self.work.path().join("checkout"),
            mode,
            db: db.to_string(),
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
        }
    }

    fn sqlite(&self) -> String {
        format!("sqlite://{}", self.work.path().join("history.db").display())
    }

    fn source(&self) -> Arc<dyn MetricsSource> {
        Arc::new(
            BatchedPrometheusSource::new(&self.prometheus.url(), PromSettings::default()).unwrap(),
        )
    }
}

fn limits_at(remote: &BareRemote, branch: &str) -> Result<grl_config::Snapshot> {
    let files = ["services/payments.yaml", "limits/payments.yaml"]
        .iter()
        .filter_map(|p| Some((p.to_string(), remote.read_file_at(branch, p)?)))
        .collect::<Vec<_>>();
    grl_config::from_files(branch, files).context("the committed config must be valid")
}

/// A controller on a free port holding only what is pushed to it.
async fn pushed_controller() -> Result<(
    grl::tier::Running,
    std::sync::Arc<grl::tier::controller::Controller>,
)> {
    Ok(grl::tier::controller::start(
        grl::tier::controller::ControllerOptions {
            region: "r".into(),
            parents: Vec::new(),
            election: None,
            interval: Duration::from_millis(500),
            config: grl::tier::controller::ConfigSource::None,
            poll: Duration::from_secs(60),
            security: Default::default(),
        },
        tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        None,
    )
    .await?)
}

async fn direct_run_commits_expected_limits(db: &str, setup: &Setup) -> Result<()> {
    let before = setup.remote.log("main").len();
    // Two controllers, as a region's active and standby: each gets the commit.
    let (controller, ctl) = pushed_controller().await?;
    let (standby, standby_ctl) = pushed_controller().await?;
    let mut settings = setup.settings(PublishMode::Direct, db);
    settings.controllers = vec![controller.addr.to_string(), standby.addr.to_string()];
    let report = run_once(&settings, setup.source()).await?;
    assert!(report.push_error.is_none(), "{:?}", report.push_error);
    let pushed = ctl.snapshot();
    assert_eq!(
        Some(&pushed.version),
        report.commit.as_ref(),
        "the controller runs the new commit"
    );
    assert_eq!(
        Some(&standby_ctl.snapshot().version),
        report.commit.as_ref(),
        "the standby controller runs the new commit too"
    );
    let pushed_limit = pushed
        .service("payments")
        .unwrap()
        .bucket("gateway-pay")
        .unwrap()
        .limit;
    assert_eq!(
        report.status,
        RunStatus::Committed,
        "{}",
        report.description
    );
    assert_eq!(setup.remote.log("main").len(), before + 1);
    let snap = limits_at(&setup.remote, "main")?;
    let svc = snap.service("payments").unwrap();
    let expected = setup.peak * 1.25;
    let got = svc.bucket("gateway-pay").unwrap().limit.unwrap();
    assert!(
        (got / expected - 1.0).abs() < 0.01,
        "limit {got} vs peak×1.25 = {expected}"
    );
    assert_eq!(
        pushed_limit,
        Some(got),
        "the controller enforces the committed limit"
    );
    assert_eq!(
        svc.bucket("partner-acme").unwrap().limit,
        Some(500.0),
        "fixed quota"
    );
    let refunds = svc.bucket("refunds").unwrap();
    assert_eq!(
        refunds.limit,
        Some(700.0),
        "gappy bucket keeps its previous limit"
    );
    assert_eq!(
        refunds.evidence["outcome"],
        serde_json::json!("kept-previous")
    );
    let notes = refunds.evidence["guards"].to_string();
    assert!(
        notes.contains("coverage"),
        "the reason is recorded: {notes}"
    );

    let history = RunLog::connect(db).await?;
    let run = history.run(&report.run_id).await?.unwrap();
    assert_eq!(run.status, RunStatus::Committed);
    assert_eq!(run.commit, report.commit);
    let recs = history.recommendations(&report.run_id).await?;
    let r = recs.iter().find(|r| r.bucket == "refunds").unwrap();
    assert_eq!(r.outcome, Outcome::KeptPrevious.as_str());
    assert!(
        r.evidence.to_string().contains("coverage"),
        "{}",
        r.evidence
    );

    let again = run_once(&setup.settings(PublishMode::Direct, db), setup.source()).await?;
    assert_eq!(again.status, RunStatus::NoChange, "nothing new → no commit");
    assert_eq!(setup.remote.log("main").len(), before + 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_on_sqlite_commits_peak_times_buffer_then_nothing() -> Result<()> {
    let setup = setup().await?;
    let db = setup.sqlite();
    direct_run_commits_expected_limits(&db, &setup).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_mode_on_postgres_records_the_run() -> Result<()> {
    let setup = setup().await?;
    let db = test_support::postgres::fresh_database()?;
    direct_run_commits_expected_limits(db.url(), &setup).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pr_mode_pushes_the_review_branch_with_a_table() -> Result<()> {
    let setup = setup().await?;
    let main_before = setup.remote.log("main");
    let report = run_once(
        &setup.settings(PublishMode::Pr, &setup.sqlite()),
        setup.source(),
    )
    .await?;
    assert_eq!(report.status, RunStatus::Committed);
    assert_eq!(report.branch.as_deref(), Some("rlc/limits"));
    assert_eq!(
        setup.remote.log("main"),
        main_before,
        "main untouched in PR mode"
    );
    assert!(setup.remote.branch_exists("rlc/limits"));
    let snap = limits_at(&setup.remote, "rlc/limits")?;
    assert!(
        snap.service("payments")
            .unwrap()
            .bucket("gateway-pay")
            .unwrap()
            .limit
            .is_some()
    );
    let d = &report.description;
    assert!(
        d.contains("| bucket | old | new | change | policy | observed peak | coverage | notes |"),
        "{d}"
    );
    assert!(
        d.contains("| [payments/gateway-pay](#explain-payments-gateway-pay) | — |"),
        "{d}"
    );
    assert!(d.contains("| payments/refunds | 700 | 700 |"), "{d}");
    Ok(())
}

/// The real source, with a person's commit to `main` made inside the run's first fetch:
/// after the configurator fetched `main`, before it pushes.
struct CommitDuringFetch {
    inner: Arc<dyn MetricsSource>,
    remote: Arc<BareRemote>,
    done: std::sync::atomic::AtomicBool,
}

impl MetricsSource for CommitDuringFetch {
    fn fetch<'a>(
        &'a self,
        q: &'a rlc::input::source::BucketQuery,
        m: rlc::input::source::Measure,
        start: i64,
        end: i64,
    ) -> rlc::input::source::FetchFuture<'a> {
        Box::pin(async move {
            if !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let remote = self.remote.clone();
                tokio::task::spawn_blocking(move || {
                    let edit = [("README.md", "edited by a person\n")];
                    remote.commit_files("main", &edit, "docs: person")
                })
                .await
                .expect("the person's commit")
                .expect("the person's commit");
            }
            self.inner.fetch(q, m, start, end).await
        })
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_concurrent_commit_on_main_is_kept() -> Result<()> {
    let setup = setup().await?;
    let source = Arc::new(CommitDuringFetch {
        inner: setup.source(),
        remote: setup.remote.clone(),
        done: false.into(),
    });
    let report = run_once(
        &setup.settings(PublishMode::Direct, &setup.sqlite()),
        source,
    )
    .await?;
    assert_eq!(report.status, RunStatus::Committed);
    assert_eq!(report.push_conflicts, 1, "the push met the person's commit");
    assert_eq!(
        setup.remote.read_file_at("main", "README.md").as_deref(),
        Some("edited by a person\n")
    );
    let log = setup.remote.log("main");
    assert!(log[1].1.starts_with("docs: person"), "{log:?}");
    assert!(log[0].1.starts_with("rlc: "), "{log:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_down_fails_the_run_and_commits_nothing() -> Result<()> {
    let setup = setup().await?;
    let before = setup.remote.log("main");
    let down = format!("http://127.0.0.1:{}", test_support::ports::free_port());
    let settings = PromSettings {
        retries: 1,
        timeout: Duration::from_secs(2),
        ..PromSettings::default()
    };
    let source: Arc<dyn MetricsSource> = Arc::new(BatchedPrometheusSource::new(&down, settings)?);
    let err = run_once(
        &setup.settings(PublishMode::Direct, &setup.sqlite()),
        source,
    )
    .await
    .expect_err("the run must fail");
    assert!(matches!(err, RunError::Source(_)), "{err}");
    assert!(err.to_string().contains(&down), "names what failed: {err}");
    assert_eq!(setup.remote.log("main"), before, "nothing committed");
    let history = RunLog::connect(&setup.sqlite()).await?;
    let runs = history.recent_runs(5).await?;
    assert_eq!(runs[0].status, RunStatus::Failed);
    assert!(runs[0].error.as_deref().unwrap_or("").contains(&down));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_git_remote_fails_the_run_and_changes_nothing() -> Result<()> {
    let setup = setup().await?;
    let before = setup.remote.log("main");
    let daemon = GitDaemon::serve(&setup.remote, true)?;
    let mut settings = setup.settings(PublishMode::Direct, &setup.sqlite());
    settings.config_repo = daemon.url().to_string();
    let err = run_once(&settings, setup.source())
        .await
        .expect_err("push must be refused");
    assert!(matches!(err, RunError::Git(_)), "{err}");
    assert!(err.to_string().contains("refs/heads/main"), "{err}");
    assert_eq!(setup.remote.log("main"), before);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_fails_before_anything_is_committed() -> Result<()> {
    let setup = setup().await?;
    let before = setup.remote.log("main");
    let db = format!(
        "postgres://grl:grl@127.0.0.1:{}/history",
        test_support::ports::free_port()
    );
    let err = run_once(&setup.settings(PublishMode::Direct, &db), setup.source())
        .await
        .expect_err("the run must fail");
    assert!(matches!(err, RunError::Database(_)), "{err}");
    assert!(err.to_string().contains("127.0.0.1"), "{err}");
    assert_eq!(setup.remote.log("main"), before);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlc_binary_exit_codes_name_the_failure() -> Result<()> {
    let setup = setup().await?;
    let rlc = std::path::PathBuf::from(env!("CARGO_BIN_EXE_rlc"));
    let down = format!("http://127.0.0.1:{}", test_support::ports::free_port());
    let out = std::process::Command::new(&rlc)
        .args([
            "run",
            "--once",
            "--config-repo",
            &setup.remote.url(),
            "--prometheus",
            &down,
        ])
        .args(["--mode", "direct", "--db", &setup.sqlite()])
        .arg("--workdir")
        .arg(setup.work.path().join("bin-checkout"))
        .output()?;
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains(&down));
    let out = std::process::Command::new(&rlc)
        .args([
            "run",
            "--once",
            "--config-repo",
            &setup.remote.url(),
            "--prometheus",
            &setup.prometheus.url(),
        ])
        .args(["--mode", "direct", "--db", &setup.sqlite()])
        .arg("--workdir")
        .arg(setup.work.path().join("bin-checkout"))
        .output()?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("committed"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_after_a_persons_services_commit_but_not_after_its_own() -> Result<()> {
    let setup = setup().await?;
    let rlc = std::path::PathBuf::from(env!("CARGO_BIN_EXE_rlc"));
    let metrics = test_support::ports::free_addr();
    let _serve = test_support::process::spawn(
        std::process::Command::new(&rlc)
            .args([
                "serve",
                "--schedule",
                "0 0 1 1 *",
                "--watch-interval-secs",
                "1",
            ])
            .args([
                "--config-repo",
                &setup.remote.url(),
                "--prometheus",
                &setup.prometheus.url(),
            ])
            .args(["--mode", "direct", "--db", &setup.sqlite()])
            .arg("--metrics-listen")
            .arg(metrics.to_string())
            .arg("--workdir")
            .arg(setup.work.path().join("serve")),
    )?;
    test_support::process::wait_for_http_ok(
        &format!("http://{metrics}/metrics"),
        Duration::from_secs(30),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        setup.remote.log("main").len(),
        1,
        "no run without a trigger"
    );
    let bumped = SERVICES.replace(
        "buffer: 0.25 }\n  - name: partner",
        "buffer: 0.5 }\n  - name: partner",
    );
    setup.remote.commit_files(
        "main",
        &[("services/payments.yaml", bumped.as_str())],
        "payments: more headroom",
    )?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while setup.remote.log("main")[0].1.starts_with("payments:") {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no run after the person's commit"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(setup.remote.log("main")[0].1.starts_with("rlc: "));
    tokio::time::sleep(Duration::from_secs(4)).await;
    let history = RunLog::connect(&setup.sqlite()).await?;
    let runs = history.recent_runs(10).await?;
    assert_eq!(
        runs.len(),
        1,
        "the configurator's own commit triggers nothing: {runs:?}"
    );
    assert!(runs[0].trigger.starts_with("commit "), "{:?}", runs[0]);
    let text = test_support::process::http_client_builder()
        .build()?
        .get(format!("http://{metrics}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    assert!(
        text.contains("rlc_runs_total{status=\"committed\"} 1"),
        "{text}"
    );
    Ok(())
}

#[test]
fn rlc_backtest_prints_the_three_figures_as_json() -> Result<()> {
    let rlc = std::path::PathBuf::from(env!("CARGO_BIN_EXE_rlc"));
    let series = test_support::traffic::data_dir().join("nyc_taxi.csv");
    let run = |policy: &str| -> Result<serde_json::Value> {
        let out = std::process::Command::new(&rlc)
            .args(["backtest", "--series"])
            .arg(&series)
            .args(["--policy", policy, "--horizon", "7d", "--json"])
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(serde_json::from_slice(&out.stdout)?)
    };
    let tight = run("{ kind: historical-peak, window: 28d, buffer: 0.0 }")?;
    let loose = run("{ kind: historical-peak, window: 28d, buffer: 1.0 }")?;
    for r in [&tight, &loose] {
        assert!(r["origins"].as_u64().unwrap() > 20, "{r}");
        for k in ["exceedance_rate", "peak_headroom", "median_headroom"] {
            assert!(r[k].as_f64().is_some(), "{k} in {r}");
        }
    }
    let ex = |r: &serde_json::Value| r["exceedance_rate"].as_f64().unwrap();
    let head = |r: &serde_json::Value| r["peak_headroom"].as_f64().unwrap();
    assert!(
        ex(&tight) > ex(&loose),
        "a bigger buffer throttles less: {tight} vs {loose}"
    );
    assert!(
        (head(&loose) / head(&tight) - 2.0).abs() < 1e-6,
        "headroom doubles with buffer 1.0"
    );
    let bad = std::process::Command::new(&rlc)
        .args(["backtest", "--series"])
        .arg(&series)
        .args(["--policy", "{ kind: magic }", "--json"])
        .output()?;
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("kind"));
    Ok(())
}

/// `auto` and `peak-trend` go through `rlc backtest` like every other kind, scored over their
/// own horizon (7d) when no `--horizon` is given.
#[test]
fn rlc_backtest_runs_auto_and_peak_trend_over_their_horizon() -> Result<()> {
    let rlc = std::path::PathBuf::from(env!("CARGO_BIN_EXE_rlc"));
    let series = test_support::traffic::data_dir().join("Twitter_volume_KO.csv");
    let run = |args: &[&str]| -> Result<serde_json::Value> {
        let out = std::process::Command::new(&rlc)
            .args(["backtest", "--series"])
            .arg(&series)
            .args(args)
            .arg("--json")
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(serde_json::from_slice(&out.stdout)?)
    };
    let auto = run(&["--policy", r#"{"kind":"auto"}"#])?;
    let week = run(&["--policy", r#"{"kind":"auto"}"#, "--horizon", "7d"])?;
    assert_eq!(auto, week, "auto's own horizon is 7d");
    let trend = run(&["--policy", "{ kind: peak-trend }"])?;
    let hp = run(&["--policy", "{ kind: historical-peak }", "--horizon", "7d"])?;
    for r in [&auto, &trend, &hp] {
        assert_eq!(r["origins"], hp["origins"], "{r}");
        assert_eq!(r["refused"], 0, "{r}");
        for k in ["exceedance_rate", "peak_headroom", "median_headroom"] {
            assert!(r[k].as_f64().is_some_and(f64::is_finite), "{k} in {r}");
        }
    }
    let ex = |r: &serde_json::Value| r["exceedance_rate"].as_f64().unwrap();
    assert!(ex(&auto) <= ex(&hp), "auto {auto} vs historical-peak {hp}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_lists_shadow_buckets_ready_to_enforce_and_those_not() -> Result<()> {
    let setup = setup().await?;
    let now = chrono::Utc::now().timestamp();
    let services = SERVICES
        .replace("mode: deny\n    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }\n  - name: partner", "mode: shadow\n    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }\n  - name: partner")
        .replace("scope: global\n    mode: deny\n    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }\n", "scope: global\n    mode: shadow\n    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }\n");
    assert_eq!(services.matches("mode: shadow").count(), 2, "{services}");
    let limits = format!(
        "service: payments\nlimits:\n  gateway-pay: {{ rps: 5000, shadow_since: {} }}\n  refunds: {{ rps: 700, shadow_since: {} }}\n",
        now - 10 * 86_400,
        now - 2 * 86_400
    );
    let remote = BareRemote::with_files(&[
        ("services/payments.yaml", services.as_str()),
        ("limits/payments.yaml", limits.as_str()),
    ])?;
    let mut settings = setup.settings(PublishMode::Pr, &setup.sqlite());
    settings.config_repo = remote.url();
    settings.guards.hysteresis = 10.0;
    let report = run_once(&settings, setup.source()).await?;
    let d = &report.description;
    assert!(d.contains("### Shadow → deny"), "{d}");
    assert!(
        d.contains("| payments/gateway-pay | shadow | ready | 0.000% | 10.0 |"),
        "{d}"
    );
    assert!(
        d.contains("| payments/refunds | shadow | not-ready |"),
        "{d}"
    );
    assert!(d.contains("in shadow 2.0 of 7 days"), "{d}");
    Ok(())
}

#[test]
fn rlc_promote_flips_the_mode_keeping_comments() -> Result<()> {
    let services = format!("# owned by the payments team\n{SERVICES}").replace(
        "    mode: deny\n    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }\n",
        "    mode: shadow  # observe first\n    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }\n",
    );
    let remote = BareRemote::with_files(&[("services/payments.yaml", services.as_str())])?;
    let work = tempfile::tempdir()?;
    let rlc = std::path::PathBuf::from(env!("CARGO_BIN_EXE_rlc"));
    let promote = || {
        std::process::Command::new(&rlc)
            .args([
                "promote",
                "payments",
                "gateway-pay",
                "--config-repo",
                &remote.url(),
            ])
            .args(["--mode", "direct", "--workdir"])
            .arg(work.path())
            .output()
    };
    let out = promote()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = remote
        .read_file_at("main", "services/payments.yaml")
        .unwrap();
    assert_eq!(
        after,
        services.replacen(
            "mode: shadow  # observe first",
            "mode: deny  # observe first",
            1
        )
    );
    assert!(
        remote.log("main")[0]
            .1
            .contains("enforce bucket gateway-pay")
    );
    let again = promote()?;
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already in mode deny"));
    Ok(())
}
