//! How long fetching 250 and 1,000 buckets × 28 days takes against a real Prometheus.
//!
//! `CARGO_TARGET_DIR=target cargo bench -p rlc --bench source`
//!
//! History: 10 services × 25 (caller, procedure) pairs = 250 `grl_requests_total` series at
//! 1-minute spacing for 28 days (10M samples), built once with promtool and cached under
//! `$CARGO_TARGET_DIR/bench-source-prom` (delete it to rebuild). Buckets: per pair, four
//! rules (exact caller+procedure, caller + procedure prefix, procedure only = 5 series,
//! caller only = 5 series) → 1,000 buckets; the 250-bucket run takes every fourth.
//! Env: `BENCH_CONCURRENCY` (default `4,8,16`).

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

fn cache_dir() -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
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
    let (start, end) = ensure_history().await;
    let prom = Prometheus::start_on_data(&cache_dir().join("data"))
        .await
        .unwrap();
    let url = prom.url();
    let all = buckets();
    let quarter: Vec<BucketQuery> = all.iter().step_by(4).cloned().collect();
    let concurrency: Vec<usize> = std::env::var("BENCH_CONCURRENCY")
        .unwrap_or_else(|_| "4,8,16".into())
        .split(',')
        .map(|c| c.trim().parse().unwrap())
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
