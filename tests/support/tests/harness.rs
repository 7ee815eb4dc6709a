//! Smoke tests of the harness itself: a backfilled Prometheus keeps four weeks of history
//! and its peak, fresh PostgreSQL databases work and are dropped, a bare remote takes
//! commits, and a server started through `ChildGuard` is reachable.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use sqlx::Connection;
use test_support::git_remote::BareRemote;
use test_support::ports::free_addr;
use test_support::postgres::fresh_database;
use test_support::process::{spawn, wait_for_tcp};
use test_support::prometheus::Prometheus;
use test_support::traffic::{
    OpenMetricsWriter, Point, backfill_end, load_series, repeat_to_span, scale_and_shift, take_last,
};

const DAY: i64 = 86_400;

/// The labels of one `grl_requests_total` series in bucket `bucket`.
fn labels(bucket: &str) -> [(&str, &str); 5] {
    [
        ("service", "maps-api"),
        ("caller", "gateway"),
        ("procedure", "Checkout/Pay"),
        ("bucket", bucket),
        ("decision", "allowed"),
    ]
}

/// The highest rate the counter carries: every point but the last holds until the next.
fn peak(rates: &[Point]) -> f64 {
    rates[..rates.len() - 1]
        .iter()
        .map(|p| p.1)
        .fold(0.0, f64::max)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_backfill_keeps_28_days_and_the_peak() -> Result<()> {
    let end = backfill_end();
    let aapl = take_last(
        &scale_and_shift(&load_series("Twitter_volume_AAPL"), 1000.0, end),
        28 * DAY,
    );
    // The ELB series spans 14 days: repeat it to fill the window.
    let elb = repeat_to_span(
        &scale_and_shift(&load_series("elb_request_count_8c0756"), 200.0, end),
        28 * DAY,
    );
    let mut om = OpenMetricsWriter::new();
    om.add_counter_series("grl_requests_total", &labels("aapl"), &aapl, 60);
    om.add_counter_series("grl_requests_total", &labels("elb"), &elb, 60);
    let prom = Prometheus::start_with_backfill(&om.finish()).await?;

    for (bucket, rates) in [("aapl", &aapl), ("elb", &elb)] {
        let selector = format!("grl_requests_total{{bucket=\"{bucket}\"}}");
        let expected = peak(rates);
        let got = prom
            .query_scalar(&format!("max_over_time(rate({selector}[5m])[29d:5m])"))
            .await?;
        ensure!(
            (got - expected).abs() <= 0.02 * expected,
            "{bucket}: peak rate {got}, expected {expected} within 2%"
        );

        let samples = prom
            .query_scalar(&format!("count_over_time({selector}[29d])"))
            .await?;
        let span = rates.last().context("non-empty")?.0 - rates[0].0;
        ensure!(
            samples == (span / 60 + 1) as f64,
            "{bucket}: {samples} samples kept, {} written",
            span / 60 + 1
        );
        ensure!(
            samples >= 27.9 * 1440.0,
            "{bucket}: only {samples} one-minute samples, expected ~28 days"
        );
    }
    // The series name is exactly the one the RLC reads.
    let series = prom
        .query_scalar("count(count_over_time(grl_requests_total[29d]))")
        .await?;
    ensure!(series == 2.0, "{series} series named grl_requests_total");
    prom.stop();
    Ok(())
}

#[tokio::test]
async fn fresh_database_accepts_connections_and_is_dropped() -> Result<()> {
    let db = fresh_database()?;
    let other = fresh_database()?;
    ensure!(
        db.name() != other.name(),
        "two fresh databases share a name"
    );

    let mut conn = sqlx::PgConnection::connect(db.url()).await?;
    let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&mut conn).await?;
    ensure!(one == 1);
    let current: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&mut conn)
        .await?;
    ensure!(current == db.name(), "connected to {current}");

    // Dropping the guard drops the database, even with a connection still open.
    let name = db.name().to_owned();
    drop(db);
    let mut admin = sqlx::PgConnection::connect(other.url()).await?;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(&name)
        .fetch_one(&mut admin)
        .await?;
    ensure!(left == 0, "database {name} still exists after drop");
    Ok(())
}

#[test]
fn bare_remote_takes_commits_and_clones() -> Result<()> {
    let remote = BareRemote::with_files(&[("services/maps-api.yaml", "service: maps-api\n")])?;
    let first = remote.commit_files(
        "main",
        &[("limits/maps-api.yaml", "limits: []\n")],
        "Add limits",
    )?;
    ensure!(
        remote
            .read_file_at("main", "services/maps-api.yaml")
            .as_deref()
            == Some("service: maps-api\n")
    );
    ensure!(
        remote
            .read_file_at("main", "limits/maps-api.yaml")
            .as_deref()
            == Some("limits: []\n")
    );
    ensure!(remote.read_file_at("main", "missing.yaml").is_none());
    let log = remote.log("main");
    ensure!(log.len() == 2, "{log:?}");
    ensure!(log[0] == (first, "Add limits".to_owned()), "{log:?}");
    ensure!(log[1].1 == "Initial config", "{log:?}");

    ensure!(!remote.branch_exists("review"));
    remote.commit_files(
        "review",
        &[("limits/maps-api.yaml", "limits: [1]\n")],
        "Review",
    )?;
    ensure!(remote.branch_exists("review"));
    ensure!(remote.branches() == ["main", "review"]);
    ensure!(remote.log("review").len() == 3);
    ensure!(
        remote
            .read_file_at("main", "limits/maps-api.yaml")
            .as_deref()
            == Some("limits: []\n")
    );

    let checkout = tempfile::tempdir()?;
    git2::Repository::clone(&remote.url(), checkout.path())?;
    let cloned = std::fs::read_to_string(checkout.path().join("limits/maps-api.yaml"))?;
    ensure!(cloned == "limits: []\n", "clone of main has {cloned:?}");
    Ok(())
}

#[tokio::test]
async fn redis_server_starts_under_a_child_guard() -> Result<()> {
    let redis = std::env::var("GRL_TEST_REDIS_SERVER")
        .unwrap_or_else(|_| "/usr/bin/redis-server".to_owned());
    let addr = free_addr();
    let mut server = spawn(
        Command::new(&redis)
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(addr.port().to_string())
            .args(["--save", "", "--appendonly", "no"]),
    )
    .context("run tests via `bash tests/run.sh`, which installs redis-server")?;
    wait_for_tcp(addr, Duration::from_secs(20))
        .await
        .with_context(|| server.output_tail(20))?;
    ensure!(
        server.try_exited().is_none(),
        "redis exited: {}",
        server.output()
    );
    Ok(())
}
