//! Planned capacity through whole runs: a real Prometheus backfilled with four weeks of real
//! traffic (and a replica count that a capacity query reads), bare git remotes, the `rlc`
//! binary for the offline contract (`--history-dir`, `--now`) and for refusals.

use std::process::Output;
use std::sync::Arc;

use anyhow::{Context, Result};
use rlc::decide::guards::GuardSettings;
use rlc::drive::run::{RunReport, RunSettings, run_once};
use rlc::input::source::{BatchedPrometheusSource, MetricsSource, PromSettings};
use rlc::output::git_store::PublishMode;
use rlc::run_log::RunStatus;
use test_support::git_remote::BareRemote;
use test_support::prometheus::Prometheus;
use test_support::traffic::{self, OpenMetricsWriter, Point};

/// Two callers that share `orders`, a contract and a batch job in shadow.
const ORDERS: &str = "\
service: orders
buckets:
  - name: web
    match: { caller: web }
    scope: global
    mode: deny
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
  - name: mobile
    match: { caller: mobile }
    scope: global
    mode: deny
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
  - name: partner
    match: { caller: partner }
    scope: global
    mode: deny
    policy: { kind: fixed, rps: 100 }
  - name: batch
    match: { caller: batch }
    scope: global
    mode: shadow
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
";

/// `maps`: one forecast bucket on growing traffic.
const MAPS: &str = "\
service: maps
buckets:
  - name: tiles
    match: { caller: app }
    scope: global
    mode: deny
    policy: { kind: forecast, window: 28d, horizon: 7d }
";

/// Four ready replicas of `orders`, each good for 250 rps in a load test: 1000 rps.
const REPLICA_QUERY: &str = "sum(rate(orders_ready_replica_seconds_total[5m])) * 250";

/// 28 days of real traffic: web (elb, median 40), mobile (nyc_taxi, median 200), batch
/// (AAPL tweets, median 30), maps (nyc_taxi, median 1000, growing 10 % a week), and a
/// counter whose rate is `orders`' ready replicas (4).
fn openmetrics(end: i64) -> String {
    let days = 28 * 86_400;
    let elb = traffic::repeat_to_span(&traffic::load_series("elb_request_count_8c0756"), days);
    let taxi = traffic::take_last(&traffic::load_series("nyc_taxi"), days);
    let aapl = traffic::take_last(&traffic::load_series("Twitter_volume_AAPL"), days);
    let start = end - days;
    let ramp: Vec<Point> = traffic::scale_and_shift(&taxi, 1000.0, end)
        .into_iter()
        .map(|(t, v)| (t, v * (1.0 + 0.1 * (t - start) as f64 / (7.0 * 86_400.0))))
        .collect();
    let mut w = OpenMetricsWriter::new();
    for (service, caller, points) in [
        ("orders", "web", traffic::scale_and_shift(&elb, 40.0, end)),
        (
            "orders",
            "mobile",
            traffic::scale_and_shift(&taxi, 200.0, end),
        ),
        (
            "orders",
            "batch",
            traffic::scale_and_shift(&aapl, 30.0, end),
        ),
        ("maps", "app", ramp),
    ] {
        w.add_counter_series(
            "grl_requests_total",
            &[
                ("service", service),
                ("caller", caller),
                ("procedure", "Any/Call"),
                ("bucket", ""),
                ("decision", "allowed"),
            ],
            &points,
            60,
        );
    }
    let replicas: Vec<Point> = (0..=days / 300).map(|i| (start + i * 300, 4.0)).collect();
    w.add_counter_series(
        "orders_ready_replica_seconds_total",
        &[("deployment", "orders")],
        &replicas,
        60,
    );
    w.finish()
}

struct Setup {
    prometheus: Prometheus,
    remote: BareRemote,
    work: tempfile::TempDir,
    now: i64,
}

async fn setup(files: &[(&str, &str)]) -> Result<Setup> {
    let now = traffic::backfill_end();
    let prometheus = Prometheus::start_with_backfill(&openmetrics(now)).await?;
    Ok(Setup {
        prometheus,
        remote: BareRemote::with_files(files)?,
        work: tempfile::tempdir()?,
        now,
    })
}

impl Setup {
    fn settings(&self, mode: PublishMode) -> RunSettings {
        RunSettings {
            config_repo: self.remote.url(),
            workdir: self.work.path().join("checkout"),
            mode,
            db: format!("sqlite://{}", self.work.path().join("runs.db").display()),
            controllers: Vec::new(),
            controller_auth: Default::default(),
            guards: GuardSettings::default(),
            concurrency: 4,
            now: Some(self.now),
            trigger: "test".into(),
            max_attempts: 3,
            github: None,
            history_cache: None,
            history_retention: None,
            progress: rlc::drive::run::ProgressMode::Off,
            metrics: None,
        }
    }

    async fn run(&self, mode: PublishMode) -> Result<RunReport> {
        let source: Arc<dyn MetricsSource> = Arc::new(BatchedPrometheusSource::new(
            &self.prometheus.url(),
            PromSettings::default(),
        )?);
        Ok(run_once(&self.settings(mode), source).await?)
    }
}

/// The committed limits of `service` on `branch`, validated as the controller would.
fn committed(
    remote: &BareRemote,
    branch: &str,
    service: &str,
) -> Result<grl_config::ServiceConfig> {
    let files: Vec<(String, String)> = [
        format!("services/{service}.yaml"),
        format!("limits/{service}.yaml"),
    ]
    .into_iter()
    .filter_map(|p| Some((p.clone(), remote.read_file_at(branch, &p)?)))
    .collect();
    let snap = grl_config::from_files(branch, files).context("the committed config is valid")?;
    Ok(snap.service(service).context("the service")?.clone())
}

fn limit(svc: &grl_config::ServiceConfig, bucket: &str) -> f64 {
    svc.bucket(bucket).and_then(|b| b.limit).unwrap_or(f64::NAN)
}

/// The row of `service/bucket` in the review table.
fn row<'a>(description: &'a str, bucket: &str) -> &'a str {
    description
        .lines()
        .find(|l| {
            l.starts_with(&format!("| {bucket} |")) || l.starts_with(&format!("| [{bucket}]"))
        })
        .unwrap_or_else(|| panic!("no row for {bucket} in\n{description}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_guard_scales_the_callers_limits_and_the_pr_table_names_each() -> Result<()> {
    let capacity = format!(
        "service: orders\nutilization: 0.8\ncapacity:\n  - scope: global\n    query: {REPLICA_QUERY}\n"
    );
    let s = setup(&[
        ("services/orders.yaml", ORDERS),
        ("capacity/orders.yaml", &capacity),
    ])
    .await?;
    let report = s.run(PublishMode::Pr).await?;
    assert_eq!(
        report.status,
        RunStatus::Committed,
        "{}",
        report.description
    );
    let svc = committed(&s.remote, "rlc/limits", "orders")?;
    let (web, mobile) = (limit(&svc, "web"), limit(&svc, "mobile"));
    let budget = 1000.0 * 0.8;
    assert!(
        web + mobile + 100.0 <= budget + 1e-6,
        "deny limits {web} + {mobile} + 100 (fixed) within 1000 × 0.8"
    );
    assert!(
        web + mobile + 100.0 > budget - 1.0,
        "the budget is used, not more taken away: {web} + {mobile} + 100"
    );
    let plan = |b: &str| report.plans.iter().find(|p| p.bucket == b).unwrap();
    let before = |b: &str| {
        plan(b)
            .guarded
            .notes
            .iter()
            .find(|n| n.guard == "capacity")
            .and_then(|n| n.before)
            .unwrap_or_else(|| panic!("{b} lowered by the capacity guard"))
    };
    let (web0, mobile0) = (before("web"), before("mobile"));
    assert!(
        web0 + mobile0 + 100.0 > budget,
        "the policies asked for more"
    );
    assert!(
        ((web / mobile) / (web0 / mobile0) - 1.0).abs() < 0.002,
        "one factor for both: {web}/{mobile} vs {web0}/{mobile0}"
    );
    assert_eq!(limit(&svc, "partner"), 100.0, "a contract is never scaled");
    assert_eq!(
        limit(&svc, "batch"),
        rlc::decide::guards::round_rps(plan("batch").proposal.clone().unwrap()),
        "a shadow bucket drops nothing and does not count"
    );
    let d = &report.description;
    for b in ["orders/web", "orders/mobile"] {
        let r = row(d, b);
        assert!(
            r.contains("deny limits sum to") && r.contains("global capacity 1000 × 0.8 allows 800"),
            "{r}"
        );
    }
    assert!(
        !row(d, "orders/batch").contains("capacity"),
        "{}",
        row(d, "orders/batch")
    );
    assert!(
        !d.contains("orders/partner"),
        "a fixed limit is not planned, so it has no row: {d}"
    );
    assert!(d.contains("### Capacity\n"), "{d}");
    assert!(
        d.contains(&format!(
            "| orders/web | {} | {} |",
            rlc::decide::guards::fmt_rps(web0),
            rlc::decide::guards::fmt_rps(web)
        )),
        "{d}"
    );
    assert!(
        d.contains("- **Guards**:") && d.contains("capacity: "),
        "the explanation shows the capacity guard: {d}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_shortfall_of_a_forecast_is_in_the_pr_and_the_metric() -> Result<()> {
    let s = setup(&[
        ("services/maps.yaml", MAPS),
        (
            "capacity/maps.yaml",
            "service: maps\ncapacity:\n  - scope: global\n    rps: 2000\n",
        ),
        ("services/orders.yaml", ORDERS),
        (
            "capacity/orders.yaml",
            "service: orders\ncapacity:\n  - scope: global\n    rps: 100000\n",
        ),
    ])
    .await?;
    let report = s.run(PublishMode::Pr).await?;
    assert_eq!(
        report.shortfalls.len(),
        1,
        "maps only: {:?}",
        report.shortfalls
    );
    let short = &report.shortfalls[0];
    assert_eq!(
        (short.service.as_str(), short.area.as_str()),
        ("maps", "global")
    );
    assert!(short.demand > 1600.0, "{short:?}");
    assert!(
        short.at >= s.now && short.at < s.now + 7 * 86_400,
        "within the horizon: {short:?}"
    );
    let day = rlc::input::capacity::day(short.at);
    let line = format!(
        "maps, global: forecast peak {} rps on {day} against 2000 planned capacity × 0.8 (1600 rps)",
        rlc::decide::guards::fmt_rps(short.demand)
    );
    let d = &report.description;
    assert!(d.contains("### Capacity shortfall\n"), "{d}");
    assert!(d.contains(&line), "{line} in\n{d}");
    assert!(!d.contains("orders, global:"), "{d}");

    let metrics = rlc::drive::serve_metrics::RlcMetrics::default();
    metrics.observe(Ok(&report), 1.0);
    let text = metrics.encode();
    assert!(
        text.contains("rlc_capacity_shortfall_services 1\n"),
        "{text}"
    );
    Ok(())
}

/// The offline contract: `rlc run --once --history-dir DIR --now T` in direct mode.
fn run_offline(
    remote: &BareRemote,
    work: &std::path::Path,
    now: i64,
    extra: &[&str],
) -> Result<Output> {
    Ok(std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args([
            "run",
            "--once",
            "--mode",
            "direct",
            "--config-repo",
            &remote.url(),
        ])
        .arg("--db")
        .arg(format!("sqlite://{}", work.join("runs.db").display()))
        .arg("--workdir")
        .arg(work.join("checkout"))
        .arg("--history-dir")
        .arg(work.join("history"))
        .args(["--now", &now.to_string(), "--progress", "off"])
        .args(extra)
        .output()?)
}

/// `orders/web` and `orders/mobile` as CSV: real traffic over `[end - 30d, end]`.
fn write_history(work: &std::path::Path, end: i64) -> Result<()> {
    let dir = work.join("history/orders");
    std::fs::create_dir_all(&dir)?;
    let span = 30 * 86_400;
    let elb = traffic::repeat_to_span(&traffic::load_series("elb_request_count_8c0756"), span);
    let taxi = traffic::take_last(&traffic::load_series("nyc_taxi"), span);
    for (bucket, points) in [
        ("web", traffic::scale_and_shift(&elb, 40.0, end)),
        ("mobile", traffic::scale_and_shift(&taxi, 200.0, end)),
    ] {
        // Each rate holds until the next point (nyc_taxi has one every 30 minutes), written
        // at the 5-minute step the configurator reads.
        let mut csv = String::new();
        for w in points.windows(2) {
            let mut t = w[0].0;
            while t < w[1].0 {
                csv.push_str(&format!("{t},{}\n", w[0].1));
                t += 300;
            }
        }
        std::fs::write(dir.join(format!("{bucket}.csv")), csv)?;
    }
    Ok(())
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn capacity_step_old_capacity_before_its_date_the_new_one_after() -> Result<()> {
    const NOW: i64 = 1_796_000_000;
    let step = NOW + 86_400;
    let capacity = format!(
        "service: orders\ncapacity:\n  - scope: global\n    rps: 1000\n  - scope: global\n    from: \"{}\"\n    rps: 4000\n",
        rlc::input::capacity::utc(step)
    );
    let remote = BareRemote::with_files(&[
        ("services/orders.yaml", ORDERS),
        ("capacity/orders.yaml", capacity.as_str()),
    ])?;
    let work = tempfile::tempdir()?;
    write_history(work.path(), NOW + 2 * 86_400)?;

    let out = run_offline(&remote, work.path(), NOW, &[])?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let before = committed(&remote, "main", "orders")?;
    let sum = limit(&before, "web") + limit(&before, "mobile") + 100.0;
    assert!(
        sum <= 800.0 + 1e-6,
        "before the step: within 1000 × 0.8: {sum}"
    );
    assert!(
        before.bucket("web").unwrap().evidence["guards"]
            .to_string()
            .contains("global capacity 1000"),
        "{:?}",
        before.bucket("web").unwrap().evidence
    );

    let out = run_offline(
        &remote,
        work.path(),
        step + 86_400,
        &["--max-increase", "10"],
    )?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let after = committed(&remote, "main", "orders")?;
    let sum = limit(&after, "web") + limit(&after, "mobile") + 100.0;
    assert!(
        sum > 800.0,
        "after the step the old capacity no longer binds: {sum}"
    );
    assert!(sum <= 3200.0, "and the new one holds: {sum}");
    assert!(
        !after
            .bucket("web")
            .unwrap()
            .evidence
            .get("guards")
            .is_some_and(|g| g.to_string().contains("capacity")),
        "4000 × 0.8 leaves the policies' limits alone: {:?}",
        after.bucket("web").unwrap().evidence
    );
    Ok(())
}

/// A remote with `files` beside `services/orders.yaml`, the run refused with exit 6 and
/// every error in `wanted`, and nothing committed.
fn refused(files: &[(&str, &str)], wanted: &[&str], extra: &[&str]) -> Result<()> {
    let mut all = vec![("services/orders.yaml", ORDERS)];
    all.extend_from_slice(files);
    let remote = BareRemote::with_files(&all)?;
    let work = tempfile::tempdir()?;
    const NOW: i64 = 1_796_000_000;
    write_history(work.path(), NOW)?;
    let out = run_offline(&remote, work.path(), NOW, extra)?;
    assert_eq!(out.status.code(), Some(6), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for w in wanted {
        assert!(stderr.contains(w), "{w} in\n{}", text(&out));
    }
    assert_eq!(remote.log("main").len(), 1, "nothing committed");
    Ok(())
}

#[test]
fn capacity_bad_input_is_refused_with_file_line_and_field_and_nothing_committed() -> Result<()> {
    refused(
        &[(
            "capacity/orders.yaml",
            "service: orders\ncapacity:\n  - scope: global\n    rps: 0\n",
        )],
        &[
            "capacity/orders.yaml:4: capacity[0].rps: a capacity must be a finite number of requests per second above 0 (got 0)",
        ],
        &[],
    )?;
    refused(
        &[(
            "capacity/orders.yaml",
            "service: orders\ncapacity:\n  - scope: region\n    region: eu-1\n    rps: -40\n",
        )],
        &["capacity/orders.yaml:5: capacity[0].rps:"],
        &[],
    )?;
    refused(
        &[(
            "capacity/billing.yaml",
            "service: billing\ncapacity:\n  - { scope: global, rps: 10 }\n",
        )],
        &[
            "capacity/billing.yaml:1: service: unknown service: no services/billing.yaml declares service `billing`",
        ],
        &[],
    )?;
    refused(
        &[(
            "events.yaml",
            "events:\n  - name: sale\n    from: \"2026-11-27T00:00:00Z\"\n    until: \"2026-11-28T00:00:00Z\"\n    services: [billing]\n    multiplier: 2\n",
        )],
        &["events.yaml:5: events[0].services[0]: unknown service `billing`"],
        &[],
    )?;
    refused(
        &[(
            "events.yaml",
            "events:\n  - name: sale\n    from: \"2026-11-27T00:00:00Z\"\n    until: \"2026-11-28T00:00:00Z\"\n    services: [orders]\n    multiplier: 2\n  - name: launch\n    from: \"2026-11-27T12:00:00Z\"\n    until: \"2026-11-27T14:00:00Z\"\n    buckets: [orders/web]\n    rps: 5000\n",
        )],
        &[
            "events.yaml:8: events[1].from: `launch` overlaps `sale` (2026-11-27T00:00:00Z until 2026-11-28T00:00:00Z) on orders/web",
        ],
        &[],
    )?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_query_that_returns_nothing_is_refused_and_nothing_committed() -> Result<()> {
    let s = setup(&[
        ("services/orders.yaml", ORDERS),
        (
            "capacity/orders.yaml",
            "service: orders\ncapacity:\n  - scope: global\n    query: sum(rate(orders_ready_replica_seconds_total{deployment=\"gone\"}[5m])) * 250\n",
        ),
    ])
    .await?;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args([
            "run",
            "--once",
            "--mode",
            "direct",
            "--config-repo",
            &s.remote.url(),
        ])
        .arg("--db")
        .arg(format!(
            "sqlite://{}",
            s.work.path().join("runs.db").display()
        ))
        .arg("--workdir")
        .arg(s.work.path().join("checkout"))
        .args([
            "--prometheus",
            &s.prometheus.url(),
            "--now",
            &s.now.to_string(),
        ])
        .output()?;
    assert_eq!(out.status.code(), Some(6), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "capacity/orders.yaml:4: capacity[0].query: returned nothing at {} (no series from prometheus at ",
            rlc::input::capacity::utc(s.now)
        )),
        "{}",
        text(&out)
    );
    assert_eq!(s.remote.log("main").len(), 1, "nothing committed");

    // The same file with an offline history: files cannot evaluate PromQL (exit 3).
    let work = tempfile::tempdir()?;
    write_history(work.path(), s.now)?;
    let out = run_offline(&s.remote, work.path(), s.now, &[])?;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("cannot evaluate PromQL, which capacity/orders.yaml:4: capacity[0].query is"),
        "{}",
        text(&out)
    );
    assert_eq!(s.remote.log("main").len(), 1, "nothing committed");
    Ok(())
}

#[test]
fn capacity_backtest_with_events_shows_what_an_events_limit_did_on_past_traffic() -> Result<()> {
    // nyc_taxi with its traffic tripled for four hours on an evening of December 2014.
    let (from, until) = (1_418_230_800, 1_418_245_200); // 2014-12-10T17:00Z .. 21:00Z
    let work = tempfile::tempdir()?;
    let csv: String = traffic::load_series("nyc_taxi")
        .iter()
        .map(|&(t, v)| {
            let v = if (from..until).contains(&t) {
                v * 3.0
            } else {
                v
            };
            format!("{t},{v}\n")
        })
        .collect();
    let series = work.path().join("taxi.csv");
    std::fs::write(&series, csv)?;
    let events = work.path().join("events.yaml");
    std::fs::write(
        &events,
        format!(
            "events:\n  - name: sale\n    from: \"{}\"\n    until: \"{}\"\n    buckets: [taxi/rides]\n    multiplier: 3\n  - name: other\n    from: \"{}\"\n    until: \"{}\"\n    buckets: [taxi/other]\n    multiplier: 2\n",
            rlc::input::capacity::utc(from),
            rlc::input::capacity::utc(until),
            rlc::input::capacity::utc(from),
            rlc::input::capacity::utc(until)
        ),
    )?;
    let run = |extra: &[&str]| -> Result<Output> {
        Ok(std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
            .args(["backtest", "--series"])
            .arg(&series)
            .args([
                "--policy",
                "{ kind: historical-peak, window: 28d, buffer: 0.25 }",
            ])
            .arg("--events")
            .arg(&events)
            .args(extra)
            .output()?)
    };
    let out = run(&["--bucket", "taxi/rides", "--json"])?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let scored = v["events"].as_array().context("events")?;
    assert_eq!(scored.len(), 1, "only the event of taxi/rides: {v}");
    let e = &scored[0];
    assert_eq!(e["name"], "sale");
    assert_eq!(e["points"], 8, "four hours of 30-minute points");
    assert!(
        e["over_limit"].as_u64() > Some(0),
        "the usual limit let the surge through: {e}"
    );
    assert_eq!(e["over_event_limit"], 0, "the event's limit held it: {e}");
    let limit = e["limit"].as_f64().context("limit")?;
    assert!((e["event_limit"].as_f64().context("event limit")? / limit - 3.0).abs() < 1e-9);
    assert!(
        v["origins"].as_u64() > Some(0),
        "the usual backtest figures too: {v}"
    );

    let out = run(&[])?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("over event limit") && table.contains("sale ") && table.contains("other "),
        "{table}"
    );

    std::fs::write(
        &events,
        "events:\n  - name: sale\n    from: noon\n    until: \"2014-12-10T21:00:00Z\"\n    services: [taxi]\n    multiplier: 3\n",
    )?;
    let out = run(&[])?;
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("events.yaml:3: events[0].from: `noon` is not an RFC 3339 instant"),
        "{}",
        text(&out)
    );
    Ok(())
}
