//! The configurator at fleet size: a cold run (empty history cache), a warm run five
//! minutes later, a check that warm and cold history give the same limits, and 30
//! simulated days of run history at a five-minute cadence.
//!
//! The check compares what the policies proposed, before any guard: two more runs at the
//! warm run's time, each on a fresh remote (the config alone, no limits yet) with its own
//! fresh run history, so every bucket is new and each run records every bucket's proposal:
//! one on a cold (empty) cache, one on the warm run's cache. Any difference between the
//! two proposals shows, however small (comparing committed limits would hide changes under
//! the 5 % hysteresis guard, since a remote that holds limits keeps them).
//! `FLEET_SKIP_COLD_CHECK` skips it.
//!
//! `cargo bench -p rlc --bench fleet`
//!
//! Env: `FLEET_SERVICES` (1100), `FLEET_BUCKETS_PER_SERVICE` (20; any number ≥ 1: beyond
//! 20 a service gets one more caller series for each 5 more buckets),
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
//! its commit to a real controller. The last line printed is one JSON object. A size that
//! does not parse, or is 0, is refused (exit 2). With `GRL_FIGURES_OUT=<file>` the figures
//! also go to that file as the headline row `fleet` (see
//! `grl/server/benches/common/figures_out.rs`).

#[path = "../../../grl/server/benches/common/figures_out.rs"]
mod figures_out;
mod history_sim;
mod serve;
mod synthetic;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const STEP: i64 = 300;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    figures_out::env_size(name, default)
}

/// The match of bucket `i` of service `s`, each distinct. The first 20 buckets use every
/// rule kind over callers c0-c3 and procedures m0-m3 (caller, procedure, both, caller +
/// procedure prefix, procedure prefix); from the 21st, each 5 buckets get a caller of their
/// own (c5, c6, …): that caller alone, with m0, with m1, with the `m*` prefix and with the
/// `m2*` prefix.
fn rule(s: usize, i: usize) -> String {
    let k = i / 5;
    if k < synthetic::PROCEDURES {
        let caller = format!("c{k}");
        return match i % 5 {
            0 => format!("caller: {caller}"),
            1 => format!("procedure: \"Api{s}/m{k}\""),
            2 => format!("caller: {caller}, procedure: \"Api{s}/m{k}\""),
            3 => format!("caller: {caller}, procedure: \"Api{s}/m*\""),
            _ => format!("procedure: \"Api{s}/m{k}*\""),
        };
    }
    let caller = format!("c{}", k + 1);
    match i % 5 {
        0 => format!("caller: {caller}"),
        1 => format!("caller: {caller}, procedure: \"Api{s}/m0\""),
        2 => format!("caller: {caller}, procedure: \"Api{s}/m1\""),
        3 => format!("caller: {caller}, procedure: \"Api{s}/m*\""),
        _ => format!("caller: {caller}, procedure: \"Api{s}/m2*\""),
    }
}

/// The service files of the fleet: `buckets` buckets per service (see [`rule`]); every
/// tenth bucket on `auto`, the others on `historical-peak`.
fn write_config(dir: &Path, services: usize, buckets: usize, days: i64) {
    std::fs::create_dir_all(dir.join("services")).unwrap();
    for s in 0..services {
        let mut text = format!("service: {}\nbuckets:\n", synthetic::service(s));
        for i in 0..buckets {
            let rule = rule(s, i);
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

/// A bare remote holding the fleet's config (`remote-a.git`); [`fresh_remote`] makes more.
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
    fresh_remote(root, "remote-a.git")
}

/// Another bare remote `name` holding the config alone (no limits), from the config's work
/// tree [`config_remote`] made.
fn fresh_remote(root: &Path, name: &str) -> PathBuf {
    let remote = root.join(name);
    let out = Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(root.join("config"))
        .arg(&remote)
        .output()
        .unwrap();
    assert!(out.status.success());
    remote
}

/// Where a run is and what it reads.
struct Place<'a> {
    remote: &'a Path,
    work: &'a Path,
    db: &'a str,
    /// The history cache (default: `<work>.history-cache`).
    cache: Option<&'a Path>,
}

/// One `rlc run --once`; returns (wall seconds, peak RSS MiB, the "run finished" log line).
fn rlc_run(
    place: &Place<'_>,
    source: &str,
    controller: &str,
    now: i64,
    concurrency: usize,
) -> (f64, f64, String) {
    let (remote, work, db) = (place.remote, place.work, place.db);
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
        .args(
            place
                .cache
                .map(|c| vec!["--history-cache".into(), c.as_os_str().to_owned()])
                .unwrap_or_default(),
        )
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

/// Every bucket's proposal (the policy's limit before the guards; `None` where it
/// refused) in the latest run recorded in `db`, by `service/bucket`.
async fn proposals(db: &str) -> BTreeMap<String, Option<f64>> {
    let h = rlc::run_log::RunLog::connect(db)
        .await
        .expect("the run history");
    let run = h.recent_runs(1).await.expect("runs").pop().expect("a run");
    let recs = h.recommendations(&run.id).await.expect("recommendations");
    h.close().await;
    recs.into_iter()
        .map(|r| (format!("{}/{}", r.service, r.bucket), r.proposed_limit))
        .collect()
}

/// Warm against cold proposals: how many buckets were compared, how many differ (any
/// difference, or a bucket one has and the other lacks), the largest relative difference.
#[derive(Debug, Clone, Copy)]
struct Compared {
    compared: usize,
    differ: usize,
    max_relative: f64,
}

fn compare(warm: &BTreeMap<String, Option<f64>>, cold: &BTreeMap<String, Option<f64>>) -> Compared {
    let keys: std::collections::BTreeSet<&String> = warm.keys().chain(cold.keys()).collect();
    let mut out = Compared {
        compared: keys.len(),
        differ: 0,
        max_relative: 0.0,
    };
    for k in keys {
        match (warm.get(k), cold.get(k)) {
            (Some(Some(w)), Some(Some(c))) if w == c => {}
            (Some(Some(w)), Some(Some(c))) => {
                out.differ += 1;
                let rel = (w - c).abs() / c.abs().max(f64::MIN_POSITIVE);
                out.max_relative = out.max_relative.max(rel);
            }
            (Some(None), Some(None)) => {}
            _ => out.differ += 1,
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
    let buckets: usize = env_or("FLEET_BUCKETS_PER_SERVICE", 20);
    let days: i64 = env_or("FLEET_DAYS", 28);
    let concurrency: usize = env_or("FLEET_CONCURRENCY", 8);
    for (name, v) in [
        ("FLEET_SERVICES", services as i64),
        ("FLEET_BUCKETS_PER_SERVICE", buckets as i64),
        ("FLEET_DAYS", days),
        ("FLEET_CONCURRENCY", concurrency as i64),
    ] {
        if v < 1 {
            figures_out::refuse(&format!("{name}={v}: at least 1"));
        }
    }
    let callers = synthetic::callers(buckets);
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
        history_sim::write_openmetrics(
            Path::new(&path),
            (services, callers),
            origin - 86_400,
            now2,
            origin,
        );
        return;
    }
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let (source, served) = if source_env == "synthetic" {
        let (url, served) = synthetic::start(origin, callers).await;
        (url, Some(served))
    } else {
        (source_env.clone(), None)
    };
    let t = Instant::now();
    let remote_a = config_remote(&root, services, buckets, days);
    eprintln!(
        "fleet: {} services x {buckets} buckets ({} series a service), config repo in {:.1?}",
        services,
        callers * synthetic::PROCEDURES,
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
    let (work_a, db_a) = (root.join("work-a"), db("history-a.db"));
    let place_a = Place {
        remote: &remote_a,
        work: &work_a,
        db: &db_a,
        cache: None,
    };
    let run = |place: &Place<'_>, now: i64| {
        tokio::task::block_in_place(|| rlc_run(place, &source, &ctl, now, concurrency))
    };

    eprintln!("cold run (empty cache), now = {now1}");
    let (cold_s, cold_mib, cold_line) = run(&place_a, now1);
    eprintln!("warm run, now = {now2}");
    let (warm_s, warm_mib, warm_line) = run(&place_a, now2);
    let cache_a = root.join("work-a.history-cache");
    let cache_mib = dir_mib(&cache_a);
    let compared = if std::env::var("FLEET_SKIP_COLD_CHECK").is_ok() {
        None
    } else {
        // Fresh remotes and fresh run histories: every bucket is new, so each run records
        // every bucket's proposal.
        let (remote_w, work_w, db_w) = (
            fresh_remote(&root, "remote-warm-check.git"),
            root.join("work-warm-check"),
            db("history-warm-check.db"),
        );
        eprintln!("warm check: the warm cache, a fresh remote, now = {now2}");
        let (s, mib, _) = run(
            &Place {
                remote: &remote_w,
                work: &work_w,
                db: &db_w,
                cache: Some(&cache_a),
            },
            now2,
        );
        eprintln!("  {s:.1} s, {mib:.0} MiB");
        let (remote_c, work_c, db_c) = (
            fresh_remote(&root, "remote-cold-check.git"),
            root.join("work-cold-check"),
            db("history-cold-check.db"),
        );
        eprintln!("cold check: an empty cache, a fresh remote, now = {now2}");
        let (s, mib, _) = run(
            &Place {
                remote: &remote_c,
                work: &work_c,
                db: &db_c,
                cache: None,
            },
            now2,
        );
        eprintln!("  {s:.1} s, {mib:.0} MiB");
        let got = compare(&proposals(&db_w).await, &proposals(&db_c).await);
        eprintln!(
            "  {} proposals compared (before guards), {} differ, largest relative difference {:.2e}",
            got.compared, got.differ, got.max_relative
        );
        Some(got)
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
            work: &work_a,
            db: &db_a,
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
    let pg_mib = if let Ok(pg) = std::env::var("FLEET_PG") {
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
        Some((pg_sim.mib() * 10.0).round() / 10.0)
    } else {
        None
    };
    let raw = serde_json::json!({
        "buckets": services * buckets,
        "services": services,
        "buckets_per_service": buckets,
        "series_per_service": callers * synthetic::PROCEDURES,
        "days": days,
        "resolution_s": 60,
        "step_s": STEP,
        "concurrency": concurrency,
        "source": if served.is_some() { "synthetic" } else { "prometheus" },
        "cold_run_s": (cold_s * 10.0).round() / 10.0,
        "cold_rss_mib": cold_mib.round(),
        "warm_run_s": (warm_s * 10.0).round() / 10.0,
        "warm_rss_mib": warm_mib.round(),
        "cold_warm_proposals": compared.map(|c| serde_json::json!({
            "compared": c.compared,
            "differ": c.differ,
            "max_relative_difference": c.max_relative,
            "identical": c.differ == 0 && c.compared > 0,
        })),
        "cache_mib": (cache_mib * 10.0).round() / 10.0,
        "history_days": history_days,
        "history_db_mib": (sim.mib() * 10.0).round() / 10.0,
        "history_db_mib_postgres": pg_mib,
        "serve": serve,
    });
    println!("{raw}");
    figures_row(&raw, &source_env);
}

/// The headline row `fleet` from the run's JSON.
fn figures_row(raw: &serde_json::Value, source_env: &str) {
    let num = |k: &str| raw[k].as_f64().unwrap_or(f64::NAN);
    let check = &raw["cold_warm_proposals"];
    let same = if check.is_null() {
        "warm and cold proposals not compared (FLEET_SKIP_COLD_CHECK)".to_string()
    } else if check["identical"].as_bool() == Some(true) {
        format!(
            "the warm cache's proposals (before guards) identical to a cold run's for all {} buckets",
            figures_out::thousands(check["compared"].as_f64().unwrap_or(f64::NAN))
        )
    } else {
        format!(
            "warm and cold proposals DIFFER for {} of {} buckets (largest relative difference {:.2e})",
            check["differ"],
            check["compared"],
            check["max_relative_difference"]
                .as_f64()
                .unwrap_or(f64::NAN)
        )
    };
    let serve = &raw["serve"];
    let serve = if serve.is_null() {
        String::new()
    } else {
        format!(
            "; `rlc serve` every 5 min: {} runs, started {} s after their slot, {} overlaps",
            serve["runs"], serve["start_delay_s"], serve["overlaps"]
        )
    };
    let postgres = raw["history_db_mib_postgres"]
        .as_f64()
        .map_or_else(String::new, |m| format!(", {m:.1} MiB PostgreSQL"));
    let figure = format!(
        "cold (empty history cache) **{:.1} s**, {:.0} MiB (target ≤ 10 min, ≤ 2 GiB); warm five minutes later **{:.1} s**, {:.0} MiB (≤ 60 s, ≤ 1 GiB); {same}; history cache {:.0} MiB; run history after {} days {:.1} MiB SQLite{postgres}{serve}",
        num("cold_run_s"),
        num("cold_rss_mib"),
        num("warm_run_s"),
        num("warm_rss_mib"),
        num("cache_mib"),
        raw["history_days"],
        num("history_db_mib"),
    );
    let mut sizes = vec![
        ("FLEET_SERVICES", raw["services"].to_string()),
        (
            "FLEET_BUCKETS_PER_SERVICE",
            raw["buckets_per_service"].to_string(),
        ),
        ("FLEET_DAYS", raw["days"].to_string()),
        ("FLEET_CONCURRENCY", raw["concurrency"].to_string()),
        ("FLEET_SOURCE", source_env.to_string()),
    ];
    if let Ok(slots) = std::env::var("FLEET_SERVE_SLOTS") {
        sizes.push(("FLEET_SERVE_SLOTS", slots));
    }
    figures_out::write(&figures_out::Row {
        row: "fleet",
        what: format!(
            "`rlc run --once` at fleet size: {} buckets ({} services × {}, every tenth on `auto`), {} days of 1-minute history from {}",
            figures_out::thousands(num("buckets")),
            figures_out::thousands(num("services")),
            raw["buckets_per_service"],
            raw["days"],
            if raw["source"] == "synthetic" {
                "a synthetic range-query endpoint"
            } else {
                "Prometheus"
            }
        ),
        figure,
        command: figures_out::command(&sizes, "cargo bench -p rlc --bench fleet"),
        figures_json: raw.to_string(),
    });
}
