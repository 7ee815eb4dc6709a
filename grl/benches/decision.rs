//! Cost of one `Client::decide` for a pair already seen, at 1 and 2 threads, beside
//! governor's keyed limiter and a Redis fixed-window limiter (INCR + EXPIRE, pipelined) in
//! the same run. Figures go to BENCHMARKS.md ("Client decision").
//!
//! Every figure comes from the same harness, so 1 and 2 threads run the same loop: each
//! thread does `iters` decisions after a barrier, and the reported time per iteration is
//! the slowest thread's time divided by the number of threads, i.e. ns per decision of the
//! threads together. Perfect scaling halves the one-thread figure.
//!
//! Redis: started by the bench on a free loopback port from `GRL_TEST_REDIS_SERVER`
//! (default `/usr/bin/redis-server`); skipped with a message when absent. Its round trip is
//! measured twice: once with the CPUs allowed to idle between requests, and once with a
//! zero wake-up latency requested through `/dev/cpu_dma_latency` (needs root; the request
//! holds only while the file is open). On a virtual machine an idle vCPU takes tens of
//! microseconds to wake, so the first figure is what a quiet host sees and the second is
//! Redis at its best, the fair figure to compare with.

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

/// Runs `f(thread, iters)` on `threads` threads after a barrier; returns the slowest
/// thread's time divided by `threads`.
fn on_threads(threads: u32, iters: u64, f: impl Fn(usize, u64) + Sync) -> Duration {
    let barrier = Barrier::new(threads as usize);
    let times: Vec<Duration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as usize)
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
    times.into_iter().max().unwrap() / threads
}

fn bench_grl(c: &mut Criterion) {
    let client = client();
    let callers = ["gw0", "gw1"];
    let decide = |caller: usize, n: u64| {
        for _ in 0..n {
            black_box(client.decide(black_box(callers[caller]), black_box(PROCEDURE)));
        }
    };
    let mut g = c.benchmark_group("decide");
    g.bench_function("grl/1 thread", |b| {
        b.iter_custom(|iters| on_threads(1, iters, |_, n| decide(0, n)))
    });
    g.bench_function("grl/2 threads same pair", |b| {
        b.iter_custom(|iters| on_threads(2, iters, |_, n| decide(0, n)))
    });
    g.bench_function("grl/2 threads distinct pairs", |b| {
        b.iter_custom(|iters| on_threads(2, iters, decide))
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
    let check = |key: usize, n: u64| {
        for _ in 0..n {
            black_box(limiter.check_key(black_box(&keys[key])).is_ok());
        }
    };
    let mut g = c.benchmark_group("decide");
    g.bench_function("governor keyed/1 thread", |b| {
        b.iter_custom(|iters| on_threads(1, iters, |_, n| check(0, n)))
    });
    g.bench_function("governor keyed/2 threads same key", |b| {
        b.iter_custom(|iters| on_threads(2, iters, |_, n| check(0, n)))
    });
    g.bench_function("governor keyed/2 threads distinct keys", |b| {
        b.iter_custom(|iters| on_threads(2, iters, check))
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
    g.bench_function("redis INCR+EXPIRE/1 thread, cpus may idle", |b| {
        b.iter(|| black_box(window(&mut con)))
    });
    match hold_zero_wake_latency() {
        Some(_held) => {
            g.bench_function("redis INCR+EXPIRE/1 thread, cpus kept awake", |b| {
                b.iter(|| black_box(window(&mut con)))
            });
        }
        None => eprintln!("cannot write /dev/cpu_dma_latency (not root?): no cpus-awake figure"),
    }
    g.finish();
}

/// Asks the kernel for a zero CPU wake-up latency (idle CPUs poll instead of halting) for
/// as long as the returned file stays open.
fn hold_zero_wake_latency() -> Option<std::fs::File> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/cpu_dma_latency")
        .ok()?;
    f.write_all(&0i32.to_ne_bytes()).ok()?;
    Some(f)
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
