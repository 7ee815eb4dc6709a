//! Cost of one `Client::decide` for a pair already seen, at 1 and 2 threads (and of
//! `Client::decide_explained`, in the paired rounds), beside governor's keyed limiter and a
//! Redis fixed-window limiter (INCR + EXPIRE, pipelined) in the same run. Figures go to BENCHMARKS.md ("Client decision").
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
//!
//! Criterion measures each case for a few seconds, one case after the other; on a shared
//! virtual machine the host's load drifts between cases, so a ratio of two criterion
//! figures can be off by 30% either way. The bench therefore ends with **paired rounds**:
//! 41 rounds, each timing every case back to back for a few milliseconds, and prints the
//! median of the per-round ratios and the ratio of the best times. Those are the ratios to quote.
//!
//! `DECIDE_ROUNDS` (default 41) sets the number of paired rounds (a value that does not
//! parse, or 0, is refused: exit 2). With `GRL_FIGURES_OUT=<file>` the paired rounds' figures
//! also go to that file as the headline row `decide` (see
//! `grl/server/benches/common/figures_out.rs`).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use grl_client::{Client, ClientConfig, Decision};
use grl_core::proto;

#[path = "../../server/benches/common/figures_out.rs"]
mod figures_out;

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
            first_index: None,
            buckets: vec![bucket("gw0"), bucket("gw1")],
        }],
        ratios: ["gw0", "gw1"]
            .map(|b| proto::DropRatio {
                service: "payments".into(),
                bucket: b.into(),
                ratio: 0.1,
                valid_for_ms: 3_600_000,
                allowed: None,
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

/// A client whose bucket `gw0` has the classes `critical, default, sheddable`, each at
/// drop ratio 0.1 (issue 42: a decision in a class other than the default costs at most
/// 1.3x one in a bucket without classes).
fn classed_client() -> Client {
    let client = Client::new(ClientConfig::new("payments", "http://127.0.0.1:1"));
    let classes = ["critical", "default", "sheddable"];
    client.apply_instruction(&proto::Instruction {
        config_version: "v1".into(),
        has_config: true,
        config: vec![proto::ServiceRules {
            service: "payments".into(),
            first_index: None,
            buckets: classes
                .iter()
                .enumerate()
                .map(|(rank, c)| proto::BucketRule {
                    name: format!("gw0#{c}"),
                    caller: "gw0".into(),
                    scope: proto::Scope::Global as i32,
                    mode: proto::Mode::Deny as i32,
                    limit_rps: Some(100.0),
                    class_of: "gw0".into(),
                    class_rank: rank as u32,
                    class_count: 3,
                    class_default: *c == "default",
                    ..Default::default()
                })
                .collect(),
        }],
        ratios: classes
            .map(|c| proto::DropRatio {
                service: "payments".into(),
                bucket: format!("gw0#{c}"),
                ratio: 0.1,
                valid_for_ms: 3_600_000,
                allowed: None,
            })
            .into(),
        valid_for_ms: 3_600_000,
        ..Default::default()
    });
    client.decide_in_class("gw0", PROCEDURE, "critical");
    client
}

/// `n` decisions of caller `gw0` in class `critical` (not its bucket's default class).
fn class_loop(client: &Client, n: u64) {
    for _ in 0..n {
        black_box(client.decide_in_class(
            black_box("gw0"),
            black_box(PROCEDURE),
            black_box("critical"),
        ));
    }
}

/// Runs `f(thread, iters)` on `threads` threads, thread `t` pinned to core `t`, after a
/// barrier; returns the slowest thread's time divided by `threads`. Pinning keeps the
/// scheduler from moving a thread between cores mid-measurement, which on this kind of
/// virtual machine made a one-thread figure jump between two speeds 1.7x apart.
fn on_threads(threads: u32, iters: u64, f: impl Fn(usize, u64) + Sync) -> Duration {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let barrier = Barrier::new(threads as usize);
    let times: Vec<Duration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as usize)
            .map(|t| {
                let (barrier, f, core) = (&barrier, &f, cores.get(t).copied());
                s.spawn(move || {
                    if let Some(core) = core {
                        core_affinity::set_for_current(core);
                    }
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

/// `n` decisions of caller `gw{caller}`.
fn grl_loop(client: &Client, caller: usize, n: u64) {
    let callers = ["gw0", "gw1"];
    for _ in 0..n {
        black_box(client.decide(black_box(callers[caller]), black_box(PROCEDURE)));
    }
}

/// `n` decisions of caller `gw{caller}` through `decide_explained` (what `grl sidecar`
/// calls): about one in ten is a refusal that names its bucket.
fn explained_loop(client: &Client, caller: usize, n: u64) {
    let callers = ["gw0", "gw1"];
    for _ in 0..n {
        black_box(client.decide_explained(black_box(callers[caller]), black_box(PROCEDURE)));
    }
}

/// governor's keyed limiter with the same two keys as the GRL client's pairs.
fn governor() -> (DefaultKeyedRateLimiter<String>, [String; 2]) {
    let limiter = RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX));
    let keys = [format!("gw0\0{PROCEDURE}"), format!("gw1\0{PROCEDURE}")];
    for k in &keys {
        assert!(limiter.check_key(k).is_ok());
    }
    (limiter, keys)
}

/// `n` checks of `keys[key]`.
fn governor_loop(limiter: &DefaultKeyedRateLimiter<String>, keys: &[String], key: usize, n: u64) {
    for _ in 0..n {
        black_box(limiter.check_key(black_box(&keys[key])).is_ok());
    }
}

/// Criterion cases `{name}/1 thread`, `{name}/2 threads same {unit}` and
/// `{name}/2 threads distinct {unit}s` of `op(which, n)`: `n` operations on pair or key
/// number `which`.
fn bench_threads(c: &mut Criterion, name: &str, unit: &str, op: impl Fn(usize, u64) + Sync) {
    let mut g = c.benchmark_group("decide");
    g.bench_function(format!("{name}/1 thread"), |b| {
        b.iter_custom(|iters| on_threads(1, iters, |_, n| op(0, n)));
    });
    g.bench_function(format!("{name}/2 threads same {unit}"), |b| {
        b.iter_custom(|iters| on_threads(2, iters, |_, n| op(0, n)));
    });
    g.bench_function(format!("{name}/2 threads distinct {unit}s"), |b| {
        b.iter_custom(|iters| on_threads(2, iters, &op));
    });
    g.finish();
}

fn bench_grl(c: &mut Criterion) {
    let client = client();
    bench_threads(c, "grl", "pair", |caller, n| grl_loop(&client, caller, n));
    assert_drop_share(&client);
}

/// The client dropped about its 10% while being measured (when a filter or `--list` left
/// its cases unmeasured, there is nothing to check).
fn assert_drop_share(client: &Client) {
    let totals = client.bucket_totals();
    let offered: u64 = totals.iter().map(|t| t.offered).sum();
    if offered < 100_000 {
        return;
    }
    let dropped = totals.iter().map(|t| t.dropped).sum::<u64>() as f64 / offered as f64;
    assert!((0.05..0.15).contains(&dropped), "drop share {dropped}");
    assert_ne!(client.decide("gw0", PROCEDURE), Decision::ShadowDrop);
}

fn bench_governor(c: &mut Criterion) {
    let (limiter, keys) = governor();
    bench_threads(c, "governor keyed", "key", |key, n| {
        governor_loop(&limiter, &keys, key, n);
    });
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

/// A connection doing the fixed-window check: `INCR key` + `EXPIRE key 1`, pipelined.
struct RedisWindow {
    con: redis::Connection,
    key: String,
}

impl RedisWindow {
    fn connect(server: &RedisServer) -> Self {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
        let mut window = RedisWindow {
            con: client.get_connection().unwrap(),
            key: format!("rl:gw0:{PROCEDURE}"),
        };
        assert!(window.check() >= 1);
        window
    }

    /// One check: the count in the current window.
    fn check(&mut self) -> i64 {
        let (count, _): (i64, bool) = redis::pipe()
            .incr(&self.key, 1)
            .expire(&self.key, 1)
            .query(&mut self.con)
            .unwrap();
        count
    }

    /// Time per check over `n` checks.
    fn time(&mut self, n: u32) -> Duration {
        let start = Instant::now();
        for _ in 0..n {
            black_box(self.check());
        }
        start.elapsed() / n
    }
}

fn bench_redis(c: &mut Criterion) {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut window = RedisWindow::connect(&server);
    let mut g = c.benchmark_group("decide");
    g.bench_function("redis INCR+EXPIRE/1 thread, cpus may idle", |b| {
        b.iter(|| black_box(window.check()));
    });
    match hold_zero_wake_latency() {
        Some(_held) => {
            g.bench_function("redis INCR+EXPIRE/1 thread, cpus kept awake", |b| {
                b.iter(|| black_box(window.check()));
            });
        }
        None => eprintln!("cannot write /dev/cpu_dma_latency (not root?): no cpus-awake figure"),
    }
    g.finish();
}

/// The median of a set of figures.
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The smallest of a set of figures.
fn best(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// The paired rounds (see the module doc). Each round times every case back to back, so
/// every ratio is also taken within one round; the per-round ratios' median is printed
/// beside the ratio of the best times (the machine's capability with the least
/// interference from the host, as Python's `timeit` recommends).
fn paired_rounds(rounds: usize) {
    const DECISIONS: u64 = 3_000_000;
    const CHECKS: u64 = DECISIONS / 4;
    const ROUND_TRIPS: u32 = 300;
    let client = client();
    let classed = classed_client();
    let (limiter, keys) = governor();
    let server = RedisServer::start();
    let mut window = server.as_ref().map(RedisWindow::connect);
    let per = |d: Duration, n: u64| d.as_secs_f64() * 1e9 / n as f64;
    let check = |t: usize, n: u64| governor_loop(&limiter, &keys, t, n);
    // Seconds per operation of each case, one entry per round.
    let mut ns: [Vec<f64>; 9] = Default::default();
    for _ in 0..rounds {
        let g1 = on_threads(1, DECISIONS, |_, n| grl_loop(&client, 0, n));
        ns[0].push(per(g1, DECISIONS));
        let g2 = on_threads(2, DECISIONS, |_, n| grl_loop(&client, 0, n));
        ns[1].push(per(g2, DECISIONS));
        let g2d = on_threads(2, DECISIONS, |t, n| grl_loop(&client, t, n));
        ns[2].push(per(g2d, DECISIONS));
        let e1 = on_threads(1, DECISIONS, |_, n| explained_loop(&client, 0, n));
        ns[7].push(per(e1, DECISIONS));
        let c1 = on_threads(1, DECISIONS, |_, n| class_loop(&classed, n));
        ns[8].push(per(c1, DECISIONS));
        ns[3].push(per(on_threads(1, CHECKS, |_, n| check(0, n)), CHECKS));
        ns[4].push(per(on_threads(2, CHECKS, check), CHECKS));
        if let Some(window) = window.as_mut() {
            ns[5].push(window.time(ROUND_TRIPS).as_secs_f64() * 1e9);
            if let Some(_held) = hold_zero_wake_latency() {
                ns[6].push(window.time(ROUND_TRIPS).as_secs_f64() * 1e9);
            }
        }
    }
    assert_drop_share(&client);
    let names = [
        "grl decide, 1 thread",
        "grl decide, 2 threads same pair",
        "grl decide, 2 threads distinct pairs",
        "governor keyed, 1 thread",
        "governor keyed, 2 threads distinct keys",
        "redis INCR+EXPIRE, cpus may idle",
        "redis INCR+EXPIRE, cpus kept awake",
        "grl decide_explained, 1 thread",
        "grl decide_in_class, 1 thread",
    ];
    println!("\npaired rounds: {rounds} rounds, ns per operation (all threads together)");
    println!("  {:<42} {:>12} {:>12}", "case", "median", "best");
    for (name, v) in names.iter().zip(&ns).filter(|(_, v)| !v.is_empty()) {
        println!("  {name:<42} {:>12.2} {:>12.2}", median(v), best(v));
    }
    // (name, numerator, denominator): a throughput ratio is the inverse time ratio.
    let ratios = [
        ("grl 2 threads / 1 thread throughput, same pair", 0, 1),
        ("grl 2 threads / 1 thread throughput, distinct pairs", 0, 2),
        (
            "governor 2 threads / 1 thread throughput, distinct keys",
            3,
            4,
        ),
        (
            "grl decide time / governor keyed check time, 1 thread",
            0,
            3,
        ),
        ("grl decide_explained time / decide time, 1 thread", 7, 0),
        ("redis round trip (cpus may idle) / grl decide", 5, 0),
        ("redis round trip (cpus kept awake) / grl decide", 6, 0),
        ("grl decide_in_class time / decide time, 1 thread", 8, 0),
    ];
    println!(
        "  {:<58} {:>14} {:>14}",
        "ratio", "median/round", "of best times"
    );
    // (median of the per-round ratios, ratio of the best times) by ratio.
    let mut got: Vec<Option<(f64, f64)>> = Vec::new();
    for (name, num, den) in ratios {
        if ns[num].is_empty() {
            got.push(None);
            continue;
        }
        let per_round: Vec<f64> = ns[num].iter().zip(&ns[den]).map(|(n, d)| n / d).collect();
        let (m, b) = (median(&per_round), best(&ns[num]) / best(&ns[den]));
        println!("  {name:<58} {m:>13.2}x {b:>13.2}x");
        got.push(Some((m, b)));
    }
    figures_row(rounds, &names, &ns, &ratios.map(|r| r.0), &got);
}

/// The headline row `decide` from the paired rounds: `ns[case]` per round, `got[ratio]`
/// (median per round, of best times).
fn figures_row(
    rounds: usize,
    names: &[&str],
    ns: &[Vec<f64>],
    ratio_names: &[&str],
    got: &[Option<(f64, f64)>],
) {
    if figures_out::wanted().is_none() {
        return;
    }
    let med = |i: usize| median(&ns[i]);
    let bst = |i: usize| best(&ns[i]);
    let ratio = |i: usize| got[i].unwrap_or((f64::NAN, f64::NAN));
    let mut figure = format!(
        "**{:.1} ns** median / {:.1} ns best of {rounds} paired rounds, vs **{:.1} / {:.1} ns** for governor's keyed limiter in the same rounds (**{:.2}x**); 2 threads on distinct pairs {:.2}x the throughput of 1 thread (same pair {:.2}x)",
        med(0),
        bst(0),
        med(3),
        bst(3),
        ratio(3).0,
        ratio(1).0,
        ratio(0).0,
    );
    if !ns[6].is_empty() || !ns[5].is_empty() {
        let (awake_us, vs) = if ns[6].is_empty() {
            ("-".to_string(), ratio(5))
        } else {
            (format!("{:.1}", med(6) / 1000.0), ratio(6))
        };
        figure.push_str(&format!(
            "; a Redis `INCR`+`EXPIRE` round trip on loopback (the design GRL replaces) {awake_us} µs with the CPUs kept awake, {:.1} µs when they may idle: **{}x** a decision (per-round median; {}x by best times)",
            med(5) / 1000.0,
            figures_out::thousands(vs.0),
            figures_out::thousands(vs.1),
        ));
    } else {
        figure.push_str("; Redis not measured (no redis-server)");
    }
    let mut raw = String::from("{\"rounds\": ");
    raw.push_str(&rounds.to_string());
    raw.push_str(", \"ns_per_operation\": {");
    let cases: Vec<String> = names
        .iter()
        .zip(ns)
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| {
            format!(
                "{}: {{\"median\": {:.3}, \"best\": {:.3}}}",
                figures_out::quote(n),
                median(v),
                best(v)
            )
        })
        .collect();
    raw.push_str(&cases.join(", "));
    raw.push_str("}, \"ratios\": {");
    let rs: Vec<String> = ratio_names
        .iter()
        .zip(got)
        .filter_map(|(n, g)| {
            g.map(|(m, b)| {
                format!(
                    "{}: {{\"median_per_round\": {m:.4}, \"of_best_times\": {b:.4}}}",
                    figures_out::quote(n)
                )
            })
        })
        .collect();
    raw.push_str(&rs.join(", "));
    raw.push_str("}}");
    let mut sizes = vec![("DECIDE_ROUNDS", rounds.to_string())];
    if let Ok(redis) = std::env::var("GRL_TEST_REDIS_SERVER") {
        sizes.push(("GRL_TEST_REDIS_SERVER", redis));
    }
    figures_out::write(&figures_out::Row {
        row: "decide",
        what: "client `decide` for a pair already seen (1 thread, drop ratio 0.1, so every decision draws a random number), paired rounds against governor's keyed limiter and a Redis round trip in the same run".into(),
        figure,
        command: figures_out::command(&sizes, "cargo bench -p grl-client --bench decision"),
        figures_json: raw,
    });
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

fn main() {
    let rounds: usize = figures_out::env_size("DECIDE_ROUNDS", 41);
    if rounds == 0 {
        figures_out::refuse("DECIDE_ROUNDS=0: at least 1 round");
    }
    benches();
    if !std::env::args().any(|a| a == "--list") {
        paired_rounds(rounds);
    }
    Criterion::default().configure_from_args().final_summary();
}
