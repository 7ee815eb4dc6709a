//! The configurator at fleet size: a cold run (empty history cache), a warm run five
//! minutes later, a cold run over the same data to check that the warm run committed the
//! same limits, and 30 simulated days of run history at a five-minute cadence.
//!
//! `cargo bench -p rlc --bench fleet`
//!
//! Env: `FLEET_SERVICES` (1100), `FLEET_BUCKETS_PER_SERVICE` (20, at most 20),
//! `FLEET_DAYS` (28: the policies' window), `FLEET_SOURCE` (`synthetic`: the endpoint of
//! the `synthetic` module; or a Prometheus URL holding the same series, see
//! `FLEET_WRITE_OPENMETRICS`), `FLEET_CONCURRENCY` (8), `FLEET_DIR` (where repos, caches
//! and databases go; default `$CARGO_TARGET_DIR/bench-fleet`, else `target/bench-fleet` of
//! the workspace), `FLEET_HISTORY_DAYS` (30:
//! simulated days of run history), `FLEET_CHANGE_DAYS` (5: a bucket's limit changes once
//! every this many days in the simulation), `FLEET_PG` (a PostgreSQL URL: simulate there
//! too), `FLEET_WRITE_OPENMETRICS` (write the series as OpenMetrics counters to this file,
//! for `promtool tsdb create-blocks-from openmetrics`, and exit), `FLEET_SERVE_SLOTS` (0:
//! then run `rlc serve --schedule "*/5 * * * *"` on the warm cache for this many slots
//! and report when each run started, whether any overlapped or was skipped, and whether
//! the controller runs `main`).
//!
//! Each run is the release `rlc` binary, timed by `/usr/bin/time` (wall, peak RSS), pushing
//! its commit to a real controller. The last line printed is one JSON object.

mod history_sim;
mod serve;
mod synthetic;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const STEP: i64 = 300;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The service files of the fleet: `buckets` buckets per service over its 20 series, every
/// rule kind (caller, procedure, both, caller + procedure prefix, procedure prefix); every
/// tenth bucket on `auto`, the others on `historical-peak`.
fn write_config(dir: &Path, services: usize, buckets: usize, days: i64) {
    std::fs::create_dir_all(dir.join("services")).unwrap();
    for s in 0..services {
        let mut text = format!("service: {}\nbuckets:\n", synthetic::service(s));
        for i in 0..buckets {
            let k = i / 5;
            let caller = format!("c{}", k % synthetic::CALLERS);
            let m = k % synthetic::PROCEDURES;
            let rule = match i % 5 {
                0 => format!("caller: {caller}"),
                1 => format!("procedure: \"Api{s}/m{m}\""),
                2 => format!("caller: {caller}, procedure: \"Api{s}/m{m}\""),
                3 => format!("caller: {caller}, procedure: \"Api{s}/m*\""),
                _ => format!("procedure: \"Api{s}/m{m}*\""),
            };
            let policy = if i % 10 == 9 {
                format!("{{ kind: auto, window: {days}d }}")
            } else {
                format!("{{ kind: historical-peak, window: {days}d, buffer: 0.25 }}")
            };
            text.push_str(&format!(
                "  - name: b{i:02}\n    match: {{ {rule} }}\n    scope: global\n    mode: deny\n    policy: {policy}\n"
            ));
        }
        std::fs::write(
            dir.join("services")
                .join(format!("{}.yaml", synthetic::service(s))),
            text,
        )
        .unwrap();
    }
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A bare remote holding the fleet's config.
fn config_remote(root: &Path, services: usize, buckets: usize, days: i64) -> PathBuf {
    let work = root.join("config");
    write_config(&work, services, buckets, days);
    git(&work, &["init", "-q", "-b", "main"]);
    git(&work, &["add", "-A"]);
    git(
        &work,
        &[
            "-c",
            "user.name=Bench",
            "-c",
            "user.email=bench@example.com",
            "commit",
            "-q",
            "-m",
            "fleet",
        ],
    );
    let remote = root.join("remote-a.git");
    let out = Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(&work)
        .arg(&remote)
        .output()
        .unwrap();
    assert!(out.status.success());
    remote
}

/// One `rlc run --once`; returns (wall seconds, peak RSS MiB, the "run finished" log line).
fn rlc_run(
    remote: &Path,
    work: &Path,
    db: &str,
    source: &str,
    controller: &str,
    now: i64,
    concurrency: usize,
) -> (f64, f64, String) {
    let rss_file = work.with_extension("rss");
    let started = Instant::now();
    let out = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&rss_file)
        .arg(env!("CARGO_BIN_EXE_rlc"))
        .args([
            "run",
            "--once",
            "--mode",
            "direct",
            "--progress",
            "log",
            "--progress-interval",
            "15s",
        ])
        .arg("--config-repo")
        .arg(remote)
        .arg("--workdir")
        .arg(work)
        .args([
            "--db",
            db,
            "--prometheus",
            source,
            "--controller",
            controller,
        ])
        .args(["--prometheus-timeout", "120s"])
        .args([
            "--now",
            &now.to_string(),
            "--concurrency",
            &concurrency.to_string(),
        ])
        .env("RUST_LOG", "info")
        .output()
        .expect("run rlc");
    let wall = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in stderr.lines().filter(|l| {
        l.contains("phase started") || l.contains("history fetched") || l.contains("run finished")
    }) {
        eprintln!("  {line}");
    }
    assert!(
        out.status.success(),
        "rlc run failed ({}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        stderr.lines().rev().take(30).collect::<Vec<_>>().join("\n")
    );
    let kib: f64 = std::fs::read_to_string(&rss_file)
        .unwrap()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("peak RSS from /usr/bin/time");
    let finished = stderr
        .lines()
        .find(|l| l.contains("run finished"))
        .unwrap_or_default()
        .to_string();
    eprintln!("  {}", String::from_utf8_lossy(&out.stdout).trim());
    (wall, kib / 1024.0, finished)
}

/// Every bucket's committed limit on `main` of `remote`, by `service/bucket`.
fn limits(remote: &Path) -> std::collections::BTreeMap<String, String> {
    let list = Command::new("git")
        .arg("-C")
        .arg(remote)
        .args(["ls-tree", "--name-only", "main", "limits/"])
        .output()
        .unwrap();
    let mut out = std::collections::BTreeMap::new();
    for path in String::from_utf8_lossy(&list.stdout).lines() {
        let text = Command::new("git")
            .arg("-C")
            .arg(remote)
            .args(["show", &format!("main:{path}")])
            .output()
            .unwrap();
        let file: grl_config::raw::LimitsFile =
            serde_yaml::from_slice(&text.stdout).expect("limits file");
        for (bucket, entry) in file.limits {
            out.insert(
                format!("{}/{bucket}", file.service),
                format!("{}", entry.rps),
            );
        }
    }
    out
}

fn dir_mib(dir: &Path) -> f64 {
    fn walk(p: &Path) -> u64 {
        std::fs::read_dir(p).map_or(0, |d| {
            d.filter_map(Result::ok)
                .map(|e| {
                    let m = e.metadata().unwrap();
                    if m.is_dir() { walk(&e.path()) } else { m.len() }
                })
                .sum()
        })
    }
    walk(dir) as f64 / (1 << 20) as f64
}

#[tokio::main]
async fn main() {
    rlc::https::install_crypto_provider();
    let services: usize = env_or("FLEET_SERVICES", 1100);
    let buckets: usize = env_or::<usize>("FLEET_BUCKETS_PER_SERVICE", 20).min(20);
    let days: i64 = env_or("FLEET_DAYS", 28);
    let concurrency: usize = env_or("FLEET_CONCURRENCY", 8);
    let source_env = std::env::var("FLEET_SOURCE").unwrap_or_else(|_| "synthetic".into());
    let target = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target").into());
    let root = std::env::var("FLEET_DIR")
        .map_or_else(|_| PathBuf::from(target).join("bench-fleet"), PathBuf::from);
    let now1 = {
        let t = chrono::Utc::now().timestamp() - 3600;
        t - t.rem_euclid(STEP) + 17
    };
    let now2 = now1 + 300;
    let origin = now1 - days * 86_400;
    if let Ok(path) = std::env::var("FLEET_WRITE_OPENMETRICS") {
        history_sim::write_openmetrics(Path::new(&path), services, origin - 86_400, now2, origin);
        return;
    }
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let (source, served) = if source_env == "synthetic" {
        let (url, served) = synthetic::start(origin).await;
        (url, Some(served))
    } else {
        (source_env.clone(), None)
    };
    let t = Instant::now();
    let remote_a = config_remote(&root, services, buckets, days);
    eprintln!(
        "fleet: {} services x {buckets} buckets, config repo in {:.1?}",
        services,
        t.elapsed()
    );
    let (controller, _ctl) = grl::tier::controller::start(
        grl::tier::controller::ControllerOptions {
            region: "bench".into(),
            parents: Vec::new(),
            election: None,
            interval: std::time::Duration::from_secs(1),
            config: grl::tier::controller::ConfigSource::None,
            poll: std::time::Duration::from_secs(60),
            security: Default::default(),
        },
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        None,
    )
    .await
    .unwrap();
    let ctl = controller.addr.to_string();
    let db = |name: &str| format!("sqlite://{}", root.join(name).display());

    eprintln!("cold run (empty cache), now = {now1}");
    let (cold_s, cold_mib, cold_line) = tokio::task::block_in_place(|| {
        rlc_run(
            &remote_a,
            &root.join("work-a"),
            &db("history-a.db"),
            &source,
            &ctl,
            now1,
            concurrency,
        )
    });
    let remote_b = root.join("remote-b.git");
    let out = Command::new("cp")
        .arg("-r")
        .arg(&remote_a)
        .arg(&remote_b)
        .output()
        .unwrap();
    assert!(out.status.success());
    eprintln!("warm run, now = {now2}");
    let (warm_s, warm_mib, warm_line) = tokio::task::block_in_place(|| {
        rlc_run(
            &remote_a,
            &root.join("work-a"),
            &db("history-a.db"),
            &source,
            &ctl,
            now2,
            concurrency,
        )
    });
    let cache_mib = dir_mib(&root.join("work-a.history-cache"));
    let identical = if std::env::var("FLEET_SKIP_COLD_CHECK").is_ok() {
        None
    } else {
        eprintln!("cold run over the same data, now = {now2}");
        let (s, mib, _) = tokio::task::block_in_place(|| {
            rlc_run(
                &remote_b,
                &root.join("work-b"),
                &db("history-b.db"),
                &source,
                &ctl,
                now2,
                concurrency,
            )
        });
        eprintln!("  second cold run: {s:.1} s, {mib:.0} MiB");
        let (a, b) = (limits(&remote_a), limits(&remote_b));
        let differ = a.iter().filter(|(k, v)| b.get(*k) != Some(*v)).count();
        eprintln!("  {} limits compared, {differ} differ", a.len());
        Some(differ == 0 && a.len() == b.len() && !a.is_empty())
    };
    if let Some(s) = &served {
        use std::sync::atomic::Ordering::Relaxed;
        eprintln!(
            "synthetic endpoint: {} queries, {} points, max {} points per series in a query, {} refused",
            s.queries.load(Relaxed),
            s.points.load(Relaxed),
            s.max_points_per_series.load(Relaxed),
            s.refused.load(Relaxed)
        );
    }
    eprintln!("cold: {cold_line}\nwarm: {warm_line}");
    let serve_slots: usize = env_or("FLEET_SERVE_SLOTS", 0);
    let serve = if serve_slots > 0 {
        let check = serve::Check {
            remote: &remote_a,
            work: &root.join("work-a"),
            db: &db("history-a.db"),
            source: &source,
            controller: &ctl,
            slots: serve_slots,
        };
        let got = check.run(|| _ctl.snapshot().version.clone()).await;
        eprintln!("serve: {got}");
        Some(got)
    } else {
        None
    };
    let history_days: i64 = env_or("FLEET_HISTORY_DAYS", 30);
    let change_days: f64 = env_or("FLEET_CHANGE_DAYS", 5.0);
    let sim = history_sim::simulate(
        &db("history-sim.db"),
        &root.join("history-sim.db"),
        services * buckets,
        history_days,
        change_days,
    )
    .await;
    if let Ok(pg) = std::env::var("FLEET_PG") {
        let pg_sim = history_sim::simulate(
            &pg,
            Path::new(""),
            services * buckets,
            history_days,
            change_days,
        )
        .await;
        eprintln!(
            "postgres after {history_days} days: {:.1} MiB",
            pg_sim.mib()
        );
    }
    println!(
        "{}",
        serde_json::json!({
            "buckets": services * buckets,
            "services": services,
            "days": days,
            "resolution_s": 60,
            "step_s": STEP,
            "source": if served.is_some() { "synthetic" } else { "prometheus" },
            "cold_run_s": (cold_s * 10.0).round() / 10.0,
            "cold_rss_mib": cold_mib.round(),
            "warm_run_s": (warm_s * 10.0).round() / 10.0,
            "warm_rss_mib": warm_mib.round(),
            "cold_warm_limits_identical": identical,
            "cache_mib": (cache_mib * 10.0).round() / 10.0,
            "history_db_mib_after_30_days": (sim.mib() * 10.0).round() / 10.0,
            "serve": serve,
        })
    );
}
