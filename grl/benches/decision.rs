//! Cost of one `Client::decide` for a pair already seen, at 1 and 2 threads, beside
//! governor's keyed limiter and a Redis fixed-window limiter (INCR + EXPIRE, pipelined) in
//! the same run. Figures go to BENCHMARKS.md ("Client decision").
//!
//! Two-thread figures are aggregate throughput: each thread does `iters` decisions after a
//! barrier, and the reported time per iteration is the slower thread's time / 2, i.e. ns
//! per decision of the pair of threads. Perfect scaling halves the one-thread figure.
//!
//! Redis: started by the bench on a free loopback port from `GRL_TEST_REDIS_SERVER`
//! (default `/usr/bin/redis-server`); skipped with a message when absent.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use grl::client::{Client, ClientConfig, Decision};
use grl::proto;

const PROCEDURE: &str = "payments.Pay/Card";

/// A client with one bucket per caller `gw0`, `gw1` at drop ratio 0.1 (so every decision
/// draws a random number).
fn client() -> Client {
    let client = Client::new(ClientConfig::new("payments", "http://127.0.0.1:1"));
    let bucket = |name: &str| proto::BucketRule {
        name: name.into(),
        caller: name.into(),
        scope: proto::Scope::Global as i32,
        mode: proto::Mode::Deny as i32,
        limit_rps: Some(100.0),
        ..Default::default()
    };
    client.apply_instruction(&proto::Instruction {
        config_version: "v1".into(),
        has_config: true,
        config: vec![proto::ServiceRules {
            service: "payments".into(),
            buckets: vec![bucket("gw0"), bucket("gw1")],
        }],
        ratios: ["gw0", "gw1"]
            .map(|b| proto::DropRatio {
                service: "payments".into(),
                bucket: b.into(),
                ratio: 0.1,
                valid_for_ms: 3_600_000,
            })
            .into(),
        valid_for_ms: 3_600_000,
        ..Default::default()
    });
    for caller in ["gw0", "gw1"] {
        client.decide(caller, PROCEDURE);
    }
    assert_eq!(client.status().pairs, 2);
    client
}

/// Runs `f(thread, iters)` on 2 threads after a barrier; returns the slower thread's time / 2.
fn two_threads(iters: u64, f: impl Fn(usize, u64) + Sync) -> Duration {
    let barrier = Barrier::new(2);
    let times: Vec<Duration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|t| {
                let (barrier, f) = (&barrier, &f);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    f(t, iters);
                    start.elapsed()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    times.into_iter().max().unwrap() / 2
}

fn bench_grl(c: &mut Criterion) {
    let client = client();
    let callers = ["gw0", "gw1"];
    let mut g = c.benchmark_group("decide");
    g.bench_function("grl/1 thread", |b| {
        b.iter(|| client.decide(black_box("gw0"), black_box(PROCEDURE)))
    });
    g.bench_function("grl/2 threads same pair", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |_, n| {
                for _ in 0..n {
                    black_box(client.decide(black_box("gw0"), black_box(PROCEDURE)));
                }
            })
        })
    });
    g.bench_function("grl/2 threads distinct pairs", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |t, n| {
                for _ in 0..n {
                    black_box(client.decide(black_box(callers[t]), black_box(PROCEDURE)));
                }
            })
        })
    });
    g.finish();
    let dropped = client
        .bucket_totals()
        .iter()
        .map(|t| t.dropped as f64 / t.offered.max(1) as f64)
        .fold(0.0, f64::max);
    assert!((0.05..0.15).contains(&dropped), "drop share {dropped}");
    assert_ne!(client.decide("gw0", PROCEDURE), Decision::ShadowDrop);
}

fn bench_governor(c: &mut Criterion) {
    let limiter: DefaultKeyedRateLimiter<String> =
        RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX));
    let keys = [format!("gw0\0{PROCEDURE}"), format!("gw1\0{PROCEDURE}")];
    for k in &keys {
        assert!(limiter.check_key(k).is_ok());
    }
    let mut g = c.benchmark_group("decide");
    g.bench_function("governor keyed/1 thread", |b| {
        b.iter(|| limiter.check_key(black_box(&keys[0])).is_ok())
    });
    g.bench_function("governor keyed/2 threads same key", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |_, n| {
                for _ in 0..n {
                    black_box(limiter.check_key(black_box(&keys[0])).is_ok());
                }
            })
        })
    });
    g.bench_function("governor keyed/2 threads distinct keys", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, |t, n| {
                for _ in 0..n {
                    black_box(limiter.check_key(black_box(&keys[t])).is_ok());
                }
            })
        })
    });
    g.finish();
}

/// A `redis-server` on a free loopback port, killed on drop.
struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    fn start() -> Option<Self> {
        let bin = std::env::var("GRL_TEST_REDIS_SERVER")
            .unwrap_or_else(|_| "/usr/bin/redis-server".into());
        if !std::path::Path::new(&bin).exists() {
            eprintln!("redis bench skipped: {bin} not found (set GRL_TEST_REDIS_SERVER)");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .ok()?;
        let child = Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .ok()?;
        let server = RedisServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(server)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bench_redis(c: &mut Criterion) {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let mut con = client.get_connection().unwrap();
    let key = format!("rl:gw0:{PROCEDURE}");
    let window = |con: &mut redis::Connection| -> i64 {
        let (count, _): (i64, bool) = redis::pipe()
            .incr(&key, 1)
            .expire(&key, 1)
            .query(con)
            .unwrap();
        count
    };
    assert!(window(&mut con) >= 1);
    let mut g = c.benchmark_group("decide");
    g.bench_function("redis INCR+EXPIRE/1 thread", |b| {
        b.iter(|| black_box(window(&mut con)))
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_grl, bench_governor, bench_redis
}
criterion_main!(benches);
