//! How long fetching 250 and 1,000 buckets × 28 days takes against a real Prometheus.
//!
//! `cargo bench -p rlc --bench source`
//!
//! History: 10 services × 25 (caller, procedure) pairs = 250 `grl_requests_total` series at
//! 1-minute spacing for 28 days (10M samples), built once with promtool and cached under
//! `$CARGO_TARGET_DIR/bench-source-prom`, else `target/bench-source-prom` of the workspace
//! (delete it to rebuild). Buckets: per pair, four rules (exact caller+procedure, caller +
//! procedure prefix, procedure only = 5 series, caller only = 5 series) → 1,000 buckets;
//! the 250-bucket run takes every fourth.
//! Env: `BENCH_CONCURRENCY` (default `4,8,16`).
//!
//! `SOURCE_MODE=run` measures the whole `rlc run --once` instead (the bench's release `rlc`
//! binary, timed by `/usr/bin/time`: wall and peak RSS) over the same history: a config
//! repo of 10 services × `SOURCE_RUN_BUCKETS` / 10 buckets (default 1,000 in all, at most
//! 100 a service: every kind of rule over the series, as `rlc/benches/scale_config.py`
//! writes), every bucket on `SOURCE_RUN_POLICY` (`historical-peak`, 28 days with a 25 %
//! buffer, the default; or `auto`), `--mode direct`, SQLite run history. A cold run (empty
//! history cache) at the history's end, then a warm run five minutes later in the same work
//! directory. A size it cannot build is refused (exit 2). With `GRL_FIGURES_OUT=<file>` the
//! figures also go to that file as the headline row `rlc_run` (see
//! `grl/server/benches/common/figures_out.rs`).

#[path = "../../grl/server/benches/common/figures_out.rs"]
mod figures_out;

use rlc::input::source::{
    BatchedPrometheusSource, BucketQuery, Measure, MetricsSource, PromSettings, PrometheusSource,
    fetch_all,
};
use std::path::PathBuf;
use std::time::Instant;
use test_support::prometheus::{Prometheus, backfill_file};
use test_support::traffic::{CounterSpec, write_counters_file};

const SERVICES: usize = 10;
const CALLERS: usize = 5;
const PROCEDURES: usize = 5;
const DAY: i64 = 86_400;

/// The TSDB's directory: `bench-source-prom` under `$CARGO_TARGET_DIR`, else under the
/// workspace's `target` (`cargo bench` runs a bench in its package's directory).
fn cache_dir() -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target").into());
    PathBuf::from(target).join("bench-source-prom")
}

/// Builds (or reuses) the TSDB; returns the history's `(start, end)`.
async fn ensure_history() -> (i64, i64) {
    let dir = cache_dir();
    let marker = dir.join("range");
    if let Ok(s) = std::fs::read_to_string(&marker) {
        let (a, b) = s.trim().split_once(' ').expect("range marker");
        return (a.parse().unwrap(), b.parse().unwrap());
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let end = (now - 4 * 3600) / 60 * 60;
    let start = end - 28 * DAY;
    let mut specs = Vec::new();
    for s in 0..SERVICES {
        for c in 0..CALLERS {
            for p in 0..PROCEDURES {
                let base = 1.0 + (s * 25 + c * 5 + p) as f64;
                specs.push(CounterSpec {
                    labels: format!(r#"service="svc{s}",caller="c{c}",procedure="Api{s}/m{p}",decision="allowed""#),
                    rate: Box::new(move |t| base * (1.5 + (t as f64 * std::f64::consts::TAU / DAY as f64).sin() / 2.0)),
                });
            }
        }
    }
    let om = dir.join("history.om");
    let t = Instant::now();
    write_counters_file(&om, &specs, start, end, 60).unwrap();
    eprintln!("wrote {} series in {:?}", specs.len(), t.elapsed());
    let t = Instant::now();
    backfill_file(&om, &dir.join("data")).await.unwrap();
    eprintln!("promtool backfill in {:?}", t.elapsed());
    std::fs::remove_file(&om).unwrap();
    std::fs::write(&marker, format!("{start} {end}")).unwrap();
    (start, end)
}

fn buckets() -> Vec<BucketQuery> {
    let mut out = Vec::new();
    for s in 0..SERVICES {
        for c in 0..CALLERS {
            for p in 0..PROCEDURES {
                let rules = [
                    (Some(format!("c{c}")), Some(format!("Api{s}/m{p}"))),
                    (Some(format!("c{c}")), Some(format!("Api{s}/m{p}*"))),
                    (None, Some(format!("Api{s}/m{p}"))),
                    (Some(format!("c{c}")), None),
                ];
                for (k, (caller, procedure)) in rules.into_iter().enumerate() {
                    out.push(BucketQuery {
                        service: format!("svc{s}"),
                        bucket: format!("c{c}-m{p}-r{k}"),
                        caller,
                        procedure,
                    });
                }
            }
        }
    }
    out
}

#[tokio::main]
async fn main() {
    let mode = std::env::var("SOURCE_MODE").unwrap_or_else(|_| "fetch".into());
    let run_size = match mode.as_str() {
        "fetch" => None,
        "run" => Some(run_size()),
        other => figures_out::refuse(&format!("SOURCE_MODE={other}: fetch or run")),
    };
    let (start, end) = ensure_history().await;
    if let Some((per_service, policy)) = run_size {
        let prom = Prometheus::start_on_data(&cache_dir().join("data"))
            .await
            .unwrap();
        whole_run(&prom.url(), per_service, &policy, end);
        return;
    }
    let prom = Prometheus::start_on_data(&cache_dir().join("data"))
        .await
        .unwrap();
    let url = prom.url();
    let all = buckets();
    let quarter: Vec<BucketQuery> = all.iter().step_by(4).cloned().collect();
    let concurrency_env = std::env::var("BENCH_CONCURRENCY").unwrap_or_else(|_| "4,8,16".into());
    let concurrency: Vec<usize> = concurrency_env
        .split(',')
        .map(|c| match c.trim().parse() {
            Ok(n) if n > 0 => n,
            _ => figures_out::refuse(&format!(
                "BENCH_CONCURRENCY={concurrency_env}: {c:?} is not a concurrency > 0"
            )),
        })
        .collect();
    for &c in &concurrency {
        for qs in [&quarter, &all] {
            for batched in [true, false] {
                // A fresh source per run: the batched cache must not carry over.
                let src: Box<dyn MetricsSource> = if batched {
                    Box::new(BatchedPrometheusSource::new(&url, PromSettings::default()).unwrap())
                } else {
                    Box::new(PrometheusSource::new(&url, PromSettings::default()).unwrap())
                };
                run(
                    &*src,
                    if batched { "batched" } else { "per-bucket" },
                    qs,
                    start,
                    end,
                    c,
                )
                .await;
            }
        }
    }
}

/// Fetches the offered rate of `qs` and prints the wall-clock time.
async fn run(
    src: &dyn MetricsSource,
    name: &str,
    qs: &[BucketQuery],
    start: i64,
    end: i64,
    c: usize,
) {
    let t = Instant::now();
    let out = fetch_all(src, qs, Measure::Offered, start, end, c, |_, _| {}).await;
    let took = t.elapsed();
    let failed = out.iter().filter(|r| r.is_err()).count();
    let points: usize = out
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|s| s.points.len())
        .sum();
    if let Some(Err(e)) = out.iter().find(|r| r.is_err()) {
        eprintln!("first error: {e}");
    }
    println!(
        "{name:>10}: {:>5} buckets x 28 d, concurrency {c:>2}: {:>7.2} s ({failed} failed, {points} points)",
        qs.len(),
        took.as_secs_f64()
    );
}

/// Buckets a service and the policy of `SOURCE_MODE=run`, or a refusal.
fn run_size() -> (usize, String) {
    let buckets: usize = figures_out::env_size("SOURCE_RUN_BUCKETS", 1000);
    let policy = std::env::var("SOURCE_RUN_POLICY").unwrap_or_else(|_| "historical-peak".into());
    if buckets == 0 || !buckets.is_multiple_of(SERVICES) || buckets / SERVICES > MAX_RUN_RULES {
        figures_out::refuse(&format!(
            "SOURCE_RUN_BUCKETS={buckets}: a multiple of {SERVICES} (services) up to {} ({MAX_RUN_RULES} distinct rules a service over its 25 series)",
            SERVICES * MAX_RUN_RULES
        ));
    }
    if !["historical-peak", "auto"].contains(&policy.as_str()) {
        figures_out::refuse(&format!(
            "SOURCE_RUN_POLICY={policy}: historical-peak or auto"
        ));
    }
    (buckets / SERVICES, policy)
}

/// Distinct rules a service can have over its series (see [`run_rules`]).
const MAX_RUN_RULES: usize = 100;

/// The (caller, procedure) matches of a service, every kind, in the order
/// `rlc/benches/scale_config.py` writes them; the first `n` are used.
fn run_rules(s: usize) -> Vec<(Option<String>, Option<String>)> {
    let mut rules = Vec::new();
    let both = |c: &str, p: String| (Some(c.to_string()), Some(p));
    for c in 0..CALLERS {
        for p in 0..PROCEDURES {
            rules.push(both(&format!("c{c}"), format!("Api{s}/m{p}")));
        }
    }
    for c in 0..CALLERS {
        for p in 0..PROCEDURES {
            rules.push(both(&format!("c{c}"), format!("Api{s}/m{p}*")));
        }
    }
    for c in 0..CALLERS {
        let c = format!("c{c}");
        rules.push((Some(c.clone()), None));
        for p in [
            format!("Api{s}/*"),
            format!("Api{s}/m*"),
            "Api*".into(),
            "A*".into(),
            "Ap*".into(),
            format!("Api{s}*"),
        ] {
            rules.push(both(&c, p));
        }
    }
    for p in 0..PROCEDURES {
        rules.push((None, Some(format!("Api{s}/m{p}"))));
        rules.push((None, Some(format!("Api{s}/m{p}*"))));
    }
    for p in [
        format!("Api{s}/*"),
        "Api*".into(),
        "A*".into(),
        "Ap*".into(),
        format!("Api{s}*"),
    ] {
        rules.push((None, Some(p)));
    }
    debug_assert_eq!(rules.len(), MAX_RUN_RULES);
    rules
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
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

/// A bare config repo of 10 services × `per_service` buckets on `policy`.
fn run_config(root: &std::path::Path, per_service: usize, policy: &str) -> PathBuf {
    let policy = if policy == "auto" {
        "{ kind: auto, window: 28d }"
    } else {
        "{ kind: historical-peak, window: 28d, buffer: 0.25 }"
    };
    let work = root.join("config");
    std::fs::create_dir_all(work.join("services")).unwrap();
    for s in 0..SERVICES {
        let mut text = format!("service: svc{s}\nbuckets:\n");
        for (i, (c, p)) in run_rules(s).into_iter().take(per_service).enumerate() {
            let mut m = Vec::new();
            if let Some(c) = c {
                m.push(format!("caller: {c}"));
            }
            if let Some(p) = p {
                m.push(format!("procedure: \"{p}\""));
            }
            text.push_str(&format!(
                "  - name: b{i}\n    match: {{ {} }}\n    scope: global\n    mode: deny\n    policy: {policy}\n",
                m.join(", ")
            ));
        }
        std::fs::write(work.join(format!("services/svc{s}.yaml")), text).unwrap();
    }
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
            "seed",
        ],
    );
    let remote = root.join("remote.git");
    let out = std::process::Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(&work)
        .arg(&remote)
        .output()
        .unwrap();
    assert!(out.status.success());
    remote
}

/// One `rlc run --once` at `now`; returns (wall seconds, peak RSS MiB).
fn one_run(
    remote: &std::path::Path,
    root: &std::path::Path,
    prometheus: &str,
    now: i64,
) -> (f64, f64) {
    let rss_file = root.join("rss");
    let t = Instant::now();
    let out = std::process::Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(&rss_file)
        .arg(env!("CARGO_BIN_EXE_rlc"))
        .args(["run", "--once", "--mode", "direct", "--config-repo"])
        .arg(remote)
        .arg("--workdir")
        .arg(root.join("work"))
        .arg("--db")
        .arg(format!("sqlite://{}", root.join("history.db").display()))
        .args(["--prometheus", prometheus, "--now", &now.to_string()])
        .output()
        .expect("/usr/bin/time and rlc");
    let wall = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "rlc run failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let kib: f64 = std::fs::read_to_string(&rss_file)
        .unwrap()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("peak RSS from /usr/bin/time");
    (wall, kib / 1024.0)
}

/// `SOURCE_MODE=run`: a cold and a warm `rlc run --once`; prints them and writes the
/// headline row `rlc_run`.
fn whole_run(prometheus: &str, per_service: usize, policy: &str, end: i64) {
    let root = tempfile::tempdir().unwrap();
    let remote = run_config(root.path(), per_service, policy);
    let buckets = per_service * SERVICES;
    let (cold_s, cold_mib) = one_run(&remote, root.path(), prometheus, end);
    println!(
        "rlc run --once, {buckets} buckets ({policy}) x 28 d, cold (empty history cache): {cold_s:.2} s, peak RSS {cold_mib:.0} MiB"
    );
    let (warm_s, warm_mib) = one_run(&remote, root.path(), prometheus, end + 300);
    println!("rlc run --once, warm, five minutes later: {warm_s:.2} s, peak RSS {warm_mib:.0} MiB");
    figures_out::write(&figures_out::Row {
        row: "rlc_run",
        what: format!(
            "`rlc run --once`, {} buckets × 28 days from a real Prometheus (10 services, 1-minute series; every bucket on `{policy}`; `--mode direct`, SQLite run history)",
            figures_out::thousands(buckets as f64)
        ),
        figure: format!(
            "cold (empty history cache) **{cold_s:.1} s**, {cold_mib:.0} MiB peak RSS; warm five minutes later **{warm_s:.2} s**, {warm_mib:.0} MiB"
        ),
        command: figures_out::command(
            &[
                ("SOURCE_MODE", "run".into()),
                ("SOURCE_RUN_BUCKETS", buckets.to_string()),
                ("SOURCE_RUN_POLICY", policy.into()),
            ],
            "cargo bench -p rlc --bench source",
        ),
        figures_json: serde_json::json!({
            "buckets": buckets,
            "services": SERVICES,
            "policy": policy,
            "days": 28,
            "cold_run_s": (cold_s * 100.0).round() / 100.0,
            "cold_rss_mib": cold_mib.round(),
            "warm_run_s": (warm_s * 100.0).round() / 100.0,
            "warm_rss_mib": warm_mib.round(),
        })
        .to_string(),
    });
}
