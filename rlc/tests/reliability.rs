//! The configurator under faults and with secrets, through the `rlc` binary with real parts:
//! bare git remotes (and `git daemon` for hooks), SQLite files, PostgreSQL, a real `grl
//! controller` process, and HTTP stand-ins only where a server must misbehave on demand
//! (Prometheus answering 500, hanging or returning NaN; a code host echoing the request).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use rlc::run_log::{RunLog, RunStatus};
use test_support::git_remote::{BareRemote, GitDaemon};
use test_support::ports::{free_addr, free_port};
use test_support::process::{spawn, target_bin, wait_for_tcp};

use crate::ONE_BUCKET;
use crate::standin::{Answer, StandIn, matrix};

const NOW: i64 = 1_780_000_000;

/// The default contract query as a template: the per-bucket Prometheus source, whose
/// requests name the bucket's caller (the stand-ins answer per bucket).
const TEMPLATE: &str =
    r#"sum(rate(grl_requests_total{service="{{service}}",{{selector}}}[{{rate_window}}]))"#;

/// [`ONE_BUCKET`] and a second bucket, `batch-pay`, on the same policy.
const TWO_BUCKETS: &str = "\
service: payments
buckets:
  - name: gateway-pay
    match: { caller: gateway }
    scope: global
    mode: deny
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
  - name: batch-pay
    match: { caller: batch }
    scope: global
    mode: deny
    policy: { kind: historical-peak, window: 28d, buffer: 0.25 }
";

/// A config remote, offline history for `gateway-pay`, a work dir and an SQLite history.
struct Case {
    remote: BareRemote,
    work: tempfile::TempDir,
}

impl Case {
    fn new(services: &str) -> Result<Case> {
        let work = tempfile::tempdir()?;
        let dir = work.path().join("history/payments");
        std::fs::create_dir_all(&dir)?;
        let csv: String = (0..=28 * 288)
            .map(|i| format!("{},{}\n", NOW - 28 * 86_400 + i * 300, 800 + (i % 288)))
            .collect();
        std::fs::write(dir.join("gateway-pay.csv"), &csv)?;
        std::fs::write(dir.join("batch-pay.csv"), &csv)?;
        Ok(Case {
            remote: BareRemote::with_files(&[("services/payments.yaml", services)])?,
            work,
        })
    }

    fn db_path(&self) -> PathBuf {
        self.work.path().join("runs.db")
    }

    fn db(&self) -> String {
        format!("sqlite://{}", self.db_path().display())
    }

    fn history_dir(&self) -> String {
        self.work.path().join("history").display().to_string()
    }

    fn workdir(&self) -> PathBuf {
        self.work.path().join("checkout")
    }

    /// `rlc run --once` with the case's work dir and `--now`, then `args`.
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_rlc"));
        cmd.args(["run", "--once", "--now", &NOW.to_string()])
            .arg("--workdir")
            .arg(self.workdir())
            .args(args)
            .kill_on_drop(true);
        cmd
    }

    async fn run(&self, args: &[&str]) -> Result<Output> {
        Ok(self.command(args).output().await?)
    }

    /// A direct-mode run against the case's remote and database from offline history.
    async fn run_offline(&self, extra: &[&str]) -> Result<Output> {
        let (repo, db, hist) = (self.remote.url(), self.db(), self.history_dir());
        let mut args = vec![
            "--mode",
            "direct",
            "--config-repo",
            &repo,
            "--db",
            &db,
            "--history-dir",
            &hist,
        ];
        args.extend(extra);
        self.run(&args).await
    }

    /// A direct-mode run against the case's remote and database, reading history from the
    /// Prometheus at `prometheus` with the test's query template.
    async fn run_from_prometheus(&self, prometheus: &str, extra: &[&str]) -> Result<Output> {
        let (repo, db) = (self.remote.url(), self.db());
        let mut args = vec![
            "--mode",
            "direct",
            "--config-repo",
            &repo,
            "--db",
            &db,
            "--prometheus",
            prometheus,
            "--query-template",
            TEMPLATE,
        ];
        args.extend(extra);
        self.run(&args).await
    }

    async fn history(&self) -> Result<RunLog> {
        Ok(RunLog::connect(&self.db()).await?)
    }
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn expect_code(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "{}", text(out));
}

/// Polls `check` every 50 ms until it holds or `secs` pass.
async fn until<F, Fut>(secs: u64, what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check().await {
        ensure!(
            Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Every file below `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if std::fs::read(&p)
                .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                hits.push(p);
            }
        }
    }
    hits
}

fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{tag}{}x{nanos}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_stderr_stdout_metrics_or_the_run_history() -> Result<()> {
    let case = Case::new(ONE_BUCKET)?;
    let prom_pass = unique("PromPass");
    let git_pass = unique("GitPass");
    let db_pass = unique("DbPass");
    let token = unique("ghpToken");
    let secrets = [&prom_pass, &git_pass, &db_pass, &token];
    let mut outputs: Vec<(String, String)> = Vec::new();
    let (repo, db, hist) = (case.remote.url(), case.db(), case.history_dir());

    // A Prometheus answering 500, one answering well, a git server refusing every request,
    // and a code host that echoes the request (bearer token included) into a long error.
    let broken = StandIn::start(|_| Answer::Status(500, "internal error".into())).await;
    let good = StandIn::start(|seen| matrix(seen, |t| format!("{}", 800 + t % 97))).await;
    let git = StandIn::start(|_| Answer::Status(401, "who are you".into())).await;
    let host = StandIn::start(|seen| {
        Answer::Status(
            401,
            format!(
                "{{\"message\":\"bad credentials: {}{}\"}}",
                seen.headers,
                "x".repeat(5000)
            ),
        )
    })
    .await;
    let with_pass =
        |url: &str, user: &str, pass: &str| url.replacen("://", &format!("://{user}:{pass}@"), 1);
    let broken_url = with_pass(&broken.url(), "admin", &prom_pass);
    let good_url = with_pass(&good.url(), "admin", &prom_pass);
    let git_url = with_pass(&format!("{}/config.git", git.url()), "git", &git_pass);
    let pg_url = format!("postgres://rlc:{db_pass}@127.0.0.1:{}/rlc", free_port());

    let mut record = |name: &str, out: &Output| outputs.push((name.to_string(), text(out)));
    let debug_run = |args: Vec<String>| {
        let mut cmd = case.command(&args.iter().map(String::as_str).collect::<Vec<_>>());
        cmd.env("RUST_LOG", "debug");
        cmd
    };
    let s = |v: &[&str]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
    // A direct-mode run's flags: config repo, database, and where history comes from.
    let direct = |repo: &str, db: &str, history: [&str; 2]| {
        s(&[
            "--mode",
            "direct",
            "--config-repo",
            repo,
            "--db",
            db,
            history[0],
            history[1],
        ])
    };

    let out = debug_run(direct(&repo, &db, ["--prometheus", &broken_url]))
        .output()
        .await?;
    expect_code(&out, 3);
    record("prometheus 500", &out);
    let out = debug_run(direct(&git_url, &db, ["--history-dir", &hist]))
        .output()
        .await?;
    expect_code(&out, 4);
    record("git 401", &out);
    let out = debug_run(direct(&repo, &pg_url, ["--history-dir", &hist]))
        .output()
        .await?;
    expect_code(&out, 5);
    record("database refused", &out);
    let out = debug_run(s(&[
        "--mode",
        "pr",
        "--config-repo",
        &repo,
        "--db",
        &db,
        "--history-dir",
        &hist,
        "--github-repo",
        "acme/config",
        "--github-token",
        &token,
        "--github-api",
        &host.url(),
    ]))
    .output()
    .await?;
    expect_code(&out, 7);
    record("code host 401", &out);
    let long = String::from_utf8_lossy(&out.stderr)
        .lines()
        .chain(String::from_utf8_lossy(&out.stdout).lines())
        .filter(|l| l.contains("bad credentials"))
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(
        (1..1500).contains(&long),
        "the code host's 5 KB answer is told, cut short: longest line {long}\n{}",
        text(&out)
    );
    let out = debug_run(s(&[
        "--mode",
        "direct",
        "--config-repo",
        &repo,
        "--db",
        &db,
        "--prometheus",
        &good_url,
        "--query-template",
        TEMPLATE,
    ]))
    .output()
    .await?;
    expect_code(&out, 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("committed"),
        "{}",
        text(&out)
    );
    record("success", &out);

    // `rlc serve` with the broken Prometheus: a person's commit triggers a failing run.
    let metrics = free_addr();
    let serve_work = case.work.path().join("serve");
    let mut serve = spawn(
        std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
            .args([
                "serve",
                "--mode",
                "direct",
                "--config-repo",
                &repo,
                "--db",
                &db,
            ])
            .args(["--prometheus", &broken_url, "--watch-interval-secs", "1"])
            .args([
                "--schedule",
                "0 0 1 1 *",
                "--metrics-listen",
                &metrics.to_string(),
            ])
            .arg("--workdir")
            .arg(&serve_work)
            .env("RUST_LOG", "debug"),
    )?;
    wait_for_tcp(metrics, Duration::from_secs(60)).await?;
    until(60, "rlc serve to watch the repo", || {
        let started = serve.output().contains("rlc serve started");
        async move { started }
    })
    .await
    .with_context(|| serve.output_tail(20))?;
    case.remote.commit_files(
        "main",
        &[("services/payments.yaml", ONE_BUCKET.replace("0.25", "0.3"))],
        "person: more buffer",
    )?;
    let http = test_support::process::http_client_builder().build()?;
    let url = format!("http://{metrics}/metrics");
    let deadline = Instant::now() + Duration::from_secs(120);
    let body = loop {
        let got = match http.get(&url).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if got.contains("rlc_runs_total{status=\"failed\"} 1") {
            break got;
        }
        ensure!(
            Instant::now() < deadline,
            "no failed run in rlc serve's metrics:\n{got}\n{}",
            serve.output_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        body.contains("rlc_run_phase_seconds_count{phase=\"checkout\"} 1")
            && body.contains("rlc_run_phase_seconds_count{phase=\"fetch\"} 1"),
        "a failed run still times the phases it went through:\n{body}"
    );
    serve.kill();
    outputs.push(("serve metrics".into(), body));
    outputs.push(("serve output".into(), serve.output()));

    for (name, out) in &outputs {
        for secret in secrets {
            assert!(
                !out.contains(secret.as_str()),
                "{name} shows a secret:\n{out}"
            );
        }
    }
    // The run history: every byte of the SQLite files (rows, error column, evidence).
    for secret in secrets {
        let hits: Vec<_> = files_containing(case.work.path(), secret)
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("runs.db"))
            })
            .collect();
        assert!(hits.is_empty(), "the run history holds a secret: {hits:?}");
    }
    assert!(case.db_path().is_file());
    let runs = case.history().await?.recent_runs(20).await?;
    assert!(runs.len() >= 5, "{runs:?}");
    assert!(
        runs.iter()
            .any(|r| r.error.as_deref().is_some_and(|e| e.contains("500"))),
        "the error is still told, without the secret: {runs:?}"
    );
    Ok(())
}

#[test]
fn rlc_run_help_does_not_echo_env_values() -> Result<()> {
    let pass = unique("HelpPass");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args(["run", "--help"])
        .env("RLC_DB", format!("postgres://rlc:{pass}@db/rlc"))
        .env(
            "RLC_CONFIG_REPO",
            format!("https://x:{pass}@git.example/c.git"),
        )
        .env("RLC_PROMETHEUS", format!("http://admin:{pass}@prom:9090"))
        .env("RLC_CONTROLLER", format!("http://u:{pass}@ctl:7300"))
        .env("RLC_GITHUB_TOKEN", &pass)
        .output()?;
    expect_code(&out, 0);
    let all = text(&out);
    assert!(all.contains("RLC_DB") && !all.contains(&pass), "{all}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_mid_way_is_marked_aborted_and_the_next_run_succeeds() -> Result<()> {
    let case = Case::new(ONE_BUCKET)?;
    let hang = StandIn::start(|_| Answer::Hang).await;
    let mut killed = spawn(
        std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
            .args([
                "run",
                "--once",
                "--mode",
                "direct",
                "--now",
                &NOW.to_string(),
            ])
            .args(["--config-repo", &case.remote.url(), "--db", &case.db()])
            .args(["--prometheus", &hang.url(), "--prometheus-timeout", "5m"])
            .args(["--query-template", TEMPLATE])
            .arg("--workdir")
            .arg(case.workdir()),
    )?;
    until(60, "the run to query Prometheus", || async {
        hang.requests() > 0
    })
    .await
    .with_context(|| killed.output_tail(20))?;
    let h = case.history().await?;
    let runs = h.recent_runs(5).await?;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Running, "mid-run");
    let killed_id = runs[0].id.clone();
    killed.kill(); // SIGKILL: no chance to clean up
    assert!(killed.try_exited().is_some());

    let next = Instant::now();
    let out = case.run_offline(&[]).await?;
    eprintln!(
        "measured: the run after the SIGKILL finished in {:?}",
        next.elapsed()
    );
    expect_code(&out, 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("committed"),
        "{}",
        text(&out)
    );
    let runs = h.recent_runs(5).await?;
    let old = runs
        .iter()
        .find(|r| r.id == killed_id)
        .context("killed run")?;
    assert_eq!(old.status, RunStatus::Aborted, "{runs:?}");
    assert!(old.finished_at.is_some());
    assert!(
        runs.iter().all(|r| r.status != RunStatus::Running),
        "no row stays running: {runs:?}"
    );
    let log = case.remote.log("main");
    assert_eq!(
        log.len(),
        2,
        "the killed run committed nothing, the next one once: {log:?}"
    );
    assert!(
        !log[0].1.contains(&killed_id),
        "the commit is the second run's"
    );
    Ok(())
}

/// The config version a controller runs, from its `Status`.
pub(crate) async fn controller_version(addr: std::net::SocketAddr) -> Result<String> {
    let mut client =
        grl_core::proto::tier_client::TierClient::connect(format!("http://{addr}")).await?;
    Ok(client
        .status(grl_core::proto::StatusRequest::default())
        .await?
        .into_inner()
        .config_version)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_exit_7_the_next_run_brings_a_controller_started_later_to_mains_config() -> Result<()>
{
    let case = Case::new(ONE_BUCKET)?;
    let ctl = free_addr();
    let addr = ctl.to_string();
    let out = case.run_offline(&["--controller", &addr]).await?;
    expect_code(&out, 7);
    let head = case.remote.log("main")[0].0.clone();

    // The controller comes up on the config it had before the commit (a directory copy).
    let old = tempfile::tempdir()?;
    std::fs::create_dir_all(old.path().join("services"))?;
    std::fs::write(old.path().join("services/payments.yaml"), ONE_BUCKET)?;
    let grl = target_bin("grl")?;
    let controller = spawn(
        std::process::Command::new(&grl)
            .args(["controller", "--listen", &addr])
            .args(["--metrics-listen", &free_addr().to_string()])
            .arg("--config")
            .arg(old.path()),
    )?;
    wait_for_tcp(ctl, Duration::from_secs(60))
        .await
        .with_context(|| controller.output_tail(20))?;
    assert_ne!(
        controller_version(ctl).await?,
        head,
        "the controller starts without it"
    );

    let resync = Instant::now();
    let out = case.run_offline(&["--controller", &addr]).await?;
    eprintln!(
        "measured: the next run brought the controller to main in {:?}",
        resync.elapsed()
    );
    expect_code(&out, 0);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        stdout.contains("no-change") && stdout.contains("controller brought to main's config"),
        "{}",
        text(&out)
    );
    assert_eq!(
        controller_version(ctl).await?,
        head,
        "the controller runs main"
    );
    assert_eq!(case.remote.log("main").len(), 2, "no new commit was needed");

    let out = case.run_offline(&["--controller", &addr]).await?;
    expect_code(&out, 0);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("brought"),
        "in sync: nothing sent: {}",
        text(&out)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_of_only_nan_inf_or_empty_series_exits_8_and_records_no_data() -> Result<()> {
    let case = Case::new(TWO_BUCKETS)?;
    // gateway: NaN and +Inf only; batch: no series at all.
    let dead = StandIn::start(|seen| {
        if seen
            .params
            .get("query")
            .is_some_and(|q| q.contains("batch"))
        {
            return Answer::Json(serde_json::json!({
                "status": "success", "data": { "resultType": "matrix", "result": [] }
            }));
        }
        matrix(seen, |t| {
            if t % 2 == 0 {
                "NaN".into()
            } else {
                "+Inf".into()
            }
        })
    })
    .await;
    let out = case.run_from_prometheus(&dead.url(), &[]).await?;
    expect_code(&out, 8);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no usable data"),
        "{}",
        text(&out)
    );
    assert_eq!(case.remote.log("main").len(), 1, "nothing committed");
    let runs = case.history().await?.recent_runs(5).await?;
    assert_eq!(runs[0].status, RunStatus::NoData, "{runs:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nan_or_infinite_values_refuse_their_bucket_only() -> Result<()> {
    let case = Case::new(TWO_BUCKETS)?;
    // gateway: good data; batch: good data with one +Inf and one NaN in four weeks.
    let mixed = StandIn::start(|seen| {
        let bad = seen
            .params
            .get("query")
            .is_some_and(|q| q.contains("batch"));
        matrix(seen, move |t| match t % 86_400 {
            0 if bad => "+Inf".into(),
            300 if bad => "NaN".into(),
            _ => format!("{}", 500 + t % 89),
        })
    })
    .await;
    let out = case.run_from_prometheus(&mixed.url(), &[]).await?;
    expect_code(&out, 0);
    let limits = case
        .remote
        .read_file_at("main", "limits/payments.yaml")
        .context("limits written")?;
    assert!(limits.contains("gateway-pay"), "{limits}");
    let h = case.history().await?;
    let run = &h.recent_runs(1).await?[0];
    let recs = h.recommendations(&run.id).await?;
    let batch = recs
        .iter()
        .find(|r| r.bucket == "batch-pay")
        .context("batch-pay")?;
    assert_eq!(batch.outcome, "no-limit", "{batch:?}");
    assert!(
        batch.evidence.to_string().contains("no rate (NaN"),
        "{batch:?}"
    );
    let gateway = recs
        .iter()
        .find(|r| r.bucket == "gateway-pay")
        .context("gateway")?;
    assert_eq!(gateway.outcome, "new", "{gateway:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_500_or_hanging_fails_the_run_in_time_and_changes_nothing() -> Result<()> {
    let case = Case::new(ONE_BUCKET)?;
    let broken = StandIn::start(|_| Answer::Status(500, "storage unavailable".into())).await;
    let out = case.run_from_prometheus(&broken.url(), &[]).await?;
    expect_code(&out, 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("payments/gateway-pay") && stderr.contains("attempts"),
        "{stderr}"
    );
    assert_eq!(broken.requests(), 4, "one request and three retries");

    let hang = StandIn::start(|_| Answer::Hang).await;
    let started = Instant::now();
    let out = case
        .run_from_prometheus(&hang.url(), &["--prometheus-timeout", "2s"])
        .await?;
    expect_code(&out, 3);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(60), "gave up after {took:?}");
    eprintln!("measured: hanging Prometheus (2 s timeout, 3 retries) -> exit 3 after {took:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("timed out"),
        "{}",
        text(&out)
    );

    assert_eq!(case.remote.log("main").len(), 1, "nothing committed");
    let runs = case.history().await?.recent_runs(5).await?;
    assert!(
        runs.iter().all(|r| r.status == RunStatus::Failed),
        "{runs:?}"
    );
    let out = case.run_offline(&[]).await?;
    expect_code(&out, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_branch_or_unreachable_remote_commits_nothing_and_the_next_run_succeeds()
-> Result<()> {
    let case = Case::new(ONE_BUCKET)?;
    let (db, hist) = (case.db(), case.history_dir());
    let daemon = GitDaemon::serve(&case.remote, true)?; // pre-receive hook refuses every push
    let out = case
        .run(&[
            "--mode",
            "direct",
            "--config-repo",
            daemon.url(),
            "--db",
            &db,
            "--history-dir",
            &hist,
        ])
        .await?;
    expect_code(&out, 4);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refused push of refs/heads/main"),
        "{}",
        text(&out)
    );
    assert_eq!(case.remote.log("main").len(), 1, "nothing committed");
    let unreachable = format!("git://127.0.0.1:{}/config.git", free_port());
    let out = case
        .run(&[
            "--mode",
            "direct",
            "--config-repo",
            &unreachable,
            "--db",
            &db,
            "--history-dir",
            &hist,
        ])
        .await?;
    expect_code(&out, 4);

    // The branch protection is lifted: the next run through the same daemon commits.
    std::fs::remove_file(case.remote.path().join("hooks/pre-receive"))?;
    let out = case
        .run(&[
            "--mode",
            "direct",
            "--config-repo",
            daemon.url(),
            "--db",
            &db,
            "--history-dir",
            &hist,
        ])
        .await?;
    expect_code(&out, 0);
    assert_eq!(case.remote.log("main").len(), 2);
    let runs = case.history().await?.recent_runs(5).await?;
    let statuses: Vec<_> = runs.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        vec![RunStatus::Committed, RunStatus::Failed, RunStatus::Failed],
        "{runs:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_dropped_mid_run_commits_nothing_and_the_next_run_succeeds() -> Result<()> {
    let case = Case::new(ONE_BUCKET)?;
    let pg = test_support::postgres::fresh_database()?;
    // Prometheus answers only once the test lets it: the run waits mid-way meanwhile.
    let gate = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let open = gate.clone();
    let prom = StandIn::start(move |seen| {
        if open.load(std::sync::atomic::Ordering::SeqCst) {
            matrix(seen, |t| format!("{}", 800 + t % 97))
        } else {
            Answer::Hang // until the client's timeout; its retry finds the gate open
        }
    })
    .await;
    let repo = case.remote.url();
    let run = case
        .command(&[
            "--mode",
            "direct",
            "--config-repo",
            &repo,
            "--db",
            pg.url(),
            "--prometheus",
            &prom.url(),
            "--query-template",
            TEMPLATE,
            "--prometheus-timeout",
            "5s",
        ])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let h = RunLog::connect(pg.url()).await?;
    until(60, "the run to start", || async {
        h.recent_runs(1).await.is_ok_and(|r| !r.is_empty()) && prom.requests() > 0
    })
    .await?;
    h.close().await;
    let db_name = pg.name().to_string();
    drop(pg); // DROP DATABASE ... WITH (FORCE): the run's connections are cut
    gate.store(true, std::sync::atomic::Ordering::SeqCst);
    let out = tokio::time::timeout(Duration::from_secs(120), run.wait_with_output())
        .await
        .context("the run did not end")??;
    expect_code(&out, 5);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&db_name),
        "the error names the database: {}",
        text(&out)
    );
    assert_eq!(
        case.remote.log("main").len(),
        1,
        "nothing committed without its record"
    );

    let pg = test_support::postgres::fresh_database()?;
    let out = case
        .run(&[
            "--mode",
            "direct",
            "--config-repo",
            &repo,
            "--db",
            pg.url(),
            "--history-dir",
            &case.history_dir(),
        ])
        .await?;
    expect_code(&out, 0);
    assert_eq!(case.remote.log("main").len(), 2);
    let h = RunLog::connect(pg.url()).await?;
    let run = &h.recent_runs(1).await?[0];
    assert_eq!(run.status, RunStatus::Committed);
    assert_eq!(
        h.recommendations(&run.id).await?.len(),
        1,
        "the whole record"
    );
    h.close().await;
    Ok(())
}

#[test]
fn backtest_refuses_bad_series_with_file_and_line_and_zero_strides() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let good: String = (0..2000)
        .map(|i| format!("{},{}\n", 1_700_000_000 + i * 300, 100 + i % 50))
        .collect();
    let cases: [(&str, String, &str); 5] = [
        (
            "ns.csv",
            "1700000000000000000,5\n1700000300000000000,6\n".into(),
            "milliseconds or nanoseconds",
        ),
        (
            "ms.csv",
            "1700000000000,5\n1700000300000,6\n".into(),
            "milliseconds or nanoseconds",
        ),
        (
            "unsorted.csv",
            "1700000300,5\n1700000000,6\n".into(),
            "time order",
        ),
        (
            "dup.csv",
            "1700000000,5\n1700000300,6\n1700000300,7\n".into(),
            "time order",
        ),
        ("neg.csv", "1700000000,5\n1700000300,-6\n".into(), ">= 0"),
    ];
    let backtest = |file: &Path, extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlc"))
            .args([
                "backtest",
                "--policy",
                "{ kind: historical-peak, window: 1d }",
            ])
            .arg("--series")
            .arg(file)
            .args(extra)
            .output()
    };
    for (name, csv, says) in &cases {
        let file = dir.path().join(name);
        std::fs::write(&file, csv)?;
        let started = Instant::now();
        let out = backtest(&file, &[])?;
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{name}: no spinning"
        );
        assert!(!out.status.success(), "{name}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(name) && stderr.contains("line ") && stderr.contains(says),
            "{name}: {stderr}"
        );
    }
    let file = dir.path().join("good.csv");
    std::fs::write(&file, good)?;
    for flag in ["--stride", "--horizon"] {
        let out = backtest(&file, &[flag, "0s"])?;
        expect_code(&out, 2);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(flag),
            "{}",
            text(&out)
        );
    }
    expect_code(&backtest(&file, &["--stride", "1d", "--horizon", "1d"])?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_answers_from_prometheus_and_the_code_host_fail_the_run_reading_little()
-> Result<()> {
    const MIB: usize = 1 << 20;
    let case = Case::new(ONE_BUCKET)?;
    let endless = |status, content_type, head: &str| {
        let head = head.to_string();
        move |_: &crate::standin::Seen| Answer::Endless {
            status,
            content_type,
            head: head.clone(),
        }
    };
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();

    // A Prometheus whose matrix never ends: each read stops at the 64 MiB limit; the chunk
    // is halved 3 times, then the bucket fails.
    let prom = StandIn::start(endless(
        200,
        "application/json",
        r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"],"#,
    ))
    .await;
    let started = Instant::now();
    let out = case.run_from_prometheus(&prom.url(), &[]).await?;
    let took = started.elapsed();
    expect_code(&out, 3);
    let err = stderr(&out);
    assert!(
        err.contains("payments/gateway-pay")
            && err.contains("answer longer than 67108864 bytes")
            && err.contains("after halving the range 3 times"),
        "{err}"
    );
    assert_eq!(prom.requests(), 4, "the chunk and 3 halvings, not retried");
    eprintln!(
        "measured: endless Prometheus answer -> exit 3 after {took:?}, {} MiB sent",
        prom.sent() / MIB
    );
    assert!(
        prom.sent() < 4 * 64 * MIB + 64 * MIB,
        "{} bytes sent",
        prom.sent()
    );
    assert!(took < Duration::from_secs(60), "{took:?}");

    // An endless 500: what is shown is read, retried, cut short.
    let prom = StandIn::start(endless(500, "text/plain", "storage is on fire ")).await;
    let out = case.run_from_prometheus(&prom.url(), &[]).await?;
    expect_code(&out, 3);
    let err = stderr(&out);
    assert!(
        err.contains("HTTP 500") && err.contains("storage is on fire") && err.len() < 20_000,
        "{err}"
    );
    assert!(prom.sent() < 4 * 16 * MIB, "{} bytes sent", prom.sent());

    // A code host answering its pull request list, or its error, without end.
    let (repo, db, hist) = (case.remote.url(), case.db(), case.history_dir());
    for (status, content_type, head, want) in [
        (
            200,
            "application/json",
            r#"[{"number":1,"base":{"ref":"x"}},"#,
            "answered more than 16777216 bytes",
        ),
        (
            401,
            "application/json",
            r#"{"message":"bad credentials"#,
            "returned 401",
        ),
    ] {
        let host = StandIn::start(endless(status, content_type, head)).await;
        let started = Instant::now();
        let out = case
            .run(&[
                "--mode",
                "pr",
                "--config-repo",
                &repo,
                "--db",
                &db,
                "--history-dir",
                &hist,
                "--github-repo",
                "acme/config",
                "--github-token",
                "t0ken",
                "--github-api",
                &host.url(),
            ])
            .await?;
        expect_code(&out, 7);
        let err = text(&out);
        assert!(err.contains(want), "{status}: {err}");
        let longest = err.lines().map(str::len).max().unwrap_or(0);
        assert!(longest < 2_000, "{status}: a line of {longest} bytes");
        let limit = if status == 200 { 16 + 16 } else { 16 };
        assert!(
            host.sent() < limit * MIB,
            "{status}: {} bytes sent",
            host.sent()
        );
        assert!(started.elapsed() < Duration::from_secs(60));
    }
    assert_eq!(case.remote.log("main").len(), 1, "nothing committed");
    Ok(())
}
