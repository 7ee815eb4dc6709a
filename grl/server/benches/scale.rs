//! Scale of the tiers with per-client allowances (issue #13).
//!
//! 1. Aggregator: a real `grl controller` and `grl aggregator` (processes, 1 s interval),
//!    and N simulated clients in this process: lightweight `Tier/Exchange` streams (one
//!    HTTP/2 connection per 100 streams) that report 20 buckets every interval and count
//!    the instructions they get. They speak the wire a real client does: wire version 2,
//!    rows by bucket index once the aggregator sent the config with its first index. Per N: whether every interval's reports were folded (the
//!    aggregator's `Status` lists N fresh children, none older than the interval + 10 %)
//!    and every client was instructed within each interval; the aggregator's CPU (cores,
//!    from /proc utime + stime) and peak RSS (VmHWM).
//! 2. Controller: a tick (sums, ratios, per-zone allowances, instructions) with 50 zones ×
//!    1,000 buckets, in process.
//!
//! The clients are simulated, and say so in what the bench prints: each is one report
//! stream, not a process, and 100 of them share one HTTP/2 connection (a real client holds
//! a connection of its own), so the aggregator serves N streams over N / 100 connections.
//!
//! `SCALE_CLIENTS` (default `500,1000,2000,5000`), `SCALE_SECONDS` (measured seconds per
//! N, default 8), `SCALE_WIRE` (the simulated clients' wire version: 2 by default, as a
//! real client; 0 reports by name, as clients before version 2 did, for comparison). A
//! value that does not parse is refused (exit 2). With `GRL_FIGURES_OUT=<file>` the
//! figures also go to that file as the headline row `scale` (see `common/figures_out.rs`).

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use grl::tier::engine::node::Node;

use grl::tier::engine::node_config::NodeConfig;
use grl::tier::engine::rules::Rules;
use grl_config::Scope;
use grl_core::packed::{self, IndexedRow, WIRE_VERSION};
use grl_core::proto;
use grl_core::proto::tier_client::TierClient;
use test_support::ports::free_port;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

#[path = "common/figures_out.rs"]
mod figures_out;

const BUCKETS: usize = 20;
/// Simulated clients (report streams) sharing one HTTP/2 connection.
const STREAMS_PER_CONNECTION: usize = 100;

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(args: &[&str]) -> Proc {
    let bin = env!("CARGO_BIN_EXE_grl");
    Proc(
        Command::new(bin)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

async fn wait_port(port: u16) {
    let start = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(start.elapsed() < Duration::from_secs(20), "port {port}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// CPU seconds (user + system) of a process.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// Peak resident memory of a process, in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM")).unwrap();
    let kb: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb / 1024.0
}

/// The config version a simulated client holds and its service's first bucket index, once
/// a version-2 aggregator sent them: it then reports by index, as a real client does.
type Indexing = Arc<std::sync::Mutex<Option<(String, u32)>>>;

fn report(id: &str, seq: u64, offered: f64, indexing: &Indexing) -> proto::Report {
    let rate = |b: usize| offered * (1.0 + b as f64 / 10.0);
    let held = indexing.lock().unwrap().clone();
    let (config_version, rates, packed) = match held {
        // The hello, before any config: by name, without rows.
        None if seq == 0 => (String::new(), Vec::new(), None),
        // A client of an older wire version: by name.
        None => {
            let rates = (0..BUCKETS)
                .map(|b| proto::BucketRate {
                    service: "svc".into(),
                    bucket: format!("b{b}"),
                    offered: rate(b),
                    clients: 1,
                    ..Default::default()
                })
                .collect();
            (String::new(), rates, None)
        }
        Some((version, first)) => {
            let rows: Vec<IndexedRow> = (0..BUCKETS)
                .map(|b| IndexedRow {
                    index: first + b as u32,
                    offered: rate(b),
                    dropped: 0.0,
                    shadow_dropped: 0.0,
                    clients: 1,
                })
                .collect();
            let packed = packed::pack_rows(&version, &rows);
            (version, Vec::new(), packed)
        }
    };
    proto::Report {
        reporter_id: id.to_string(),
        level: proto::Level::Client as i32,
        zone: "a".into(),
        region: "eu".into(),
        services: vec!["svc".into()],
        config_version,
        interval_ms: 1000,
        rates,
        seq,
        urgent: false,
        learning: false,
        wire_version: wire_version(),
        packed,
    }
}

/// The simulated clients' wire version (`SCALE_WIRE`, default 2).
fn wire_version() -> u32 {
    figures_out::env_size("SCALE_WIRE", WIRE_VERSION)
}

/// When each simulated client was last instructed and its longest gap between two
/// instructions (ms since the epoch / ms).
struct Heard {
    last: Vec<AtomicU64>,
    longest_gap: Vec<AtomicU64>,
}

/// One simulated client: reports every second, records when it was last instructed.
async fn sim(ch: Channel, i: usize, heard: Arc<Heard>, epoch: Instant) {
    let id = format!("sim-{i}");
    let indexing: Indexing = Default::default();
    let (tx, rx) = mpsc::channel(4);
    tx.send(report(&id, 0, 0.0, &indexing)).await.unwrap();
    let Ok(resp) = TierClient::new(ch).exchange(ReceiverStream::new(rx)).await else {
        return;
    };
    let mut inbound = resp.into_inner();
    let held = indexing.clone();
    let reporter = tokio::spawn(async move {
        let phase = Duration::from_millis((i as u64 * 7919) % 1000);
        let mut t =
            tokio::time::interval_at(tokio::time::Instant::now() + phase, Duration::from_secs(1));
        let mut seq = 0;
        loop {
            t.tick().await;
            seq += 1;
            // Every client over its share at times: the bucket sums move around the limit.
            let offered = 1.0 + ((seq + i as u64) % 5) as f64 * 0.5;
            if tx.send(report(&id, seq, offered, &held)).await.is_err() {
                return;
            }
        }
    });
    while let Ok(Some(ins)) = inbound.message().await {
        let first = ins.config.iter().find(|s| s.service == "svc");
        if let Some(first) = first.and_then(|s| s.first_index)
            && ins.has_config
            && ins.wire_version >= WIRE_VERSION
            && wire_version() >= WIRE_VERSION
        {
            *indexing.lock().unwrap() = Some((ins.config_version.clone(), first));
        }
        let now = epoch.elapsed().as_millis() as u64;
        let before = heard.last[i].swap(now, Relaxed);
        if before > 0 {
            heard.longest_gap[i].fetch_max(now - before, Relaxed);
        }
    }
    reporter.abort();
}

/// What one aggregator run measured.
struct AggregatorRun {
    clients: usize,
    seconds: u64,
    folded_ok: usize,
    instructed_ok: usize,
    cores: f64,
    rss_mib: f64,
    worst_gap_ms: u64,
    sim_cores: f64,
}

async fn aggregator_run(n: usize, seconds: u64) -> AggregatorRun {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("services")).unwrap();
    let buckets: String = (0..BUCKETS)
        .map(|b| format!("  - name: b{b}\n    match: {{ caller: c{b} }}\n    scope: global\n    mode: deny\n    policy: {{ kind: fixed, rps: {} }}\n", n as f64 * 1.5))
        .collect();
    std::fs::write(
        dir.path().join("services/svc.yaml"),
        format!("service: svc\nbuckets:\n{buckets}"),
    )
    .unwrap();
    let (cp, ap) = (free_port(), free_port());
    let (ctl_addr, agg_addr) = (format!("127.0.0.1:{cp}"), format!("127.0.0.1:{ap}"));
    let config = dir.path().display().to_string();
    let _ctl = spawn(&["controller", "--listen", &ctl_addr, "--config", &config]);
    wait_port(cp).await;
    let agg = spawn(&[
        "aggregator",
        "--listen",
        &agg_addr,
        "--zone",
        "a",
        "--region",
        "eu",
        "--controller",
        &ctl_addr,
    ]);
    wait_port(ap).await;
    let pid = agg.0.id();
    let epoch = Instant::now();
    let heard = Arc::new(Heard {
        last: (0..n).map(|_| AtomicU64::new(0)).collect(),
        longest_gap: (0..n).map(|_| AtomicU64::new(0)).collect(),
    });
    let channels: Vec<Channel> = (0..n.div_ceil(STREAMS_PER_CONNECTION))
        .map(|_| {
            Endpoint::from_shared(format!("http://{agg_addr}"))
                .unwrap()
                .connect_lazy()
        })
        .collect();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let ch = channels[i / STREAMS_PER_CONNECTION].clone();
            tokio::spawn(sim(ch, i, heard.clone(), epoch))
        })
        .collect();
    let mut status = TierClient::new(channels[0].clone());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (cpu0, own0) = (cpu_seconds(pid), cpu_seconds(std::process::id()));
    heard.longest_gap.iter().for_each(|g| g.store(0, Relaxed));
    let t0 = Instant::now();
    let (mut folded_ok, mut instructed_ok, mut worst_age, mut fewest) = (0, 0, 0.0f64, n);
    for _ in 0..seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = epoch.elapsed().as_millis() as u64;
        let instructed = heard
            .last
            .iter()
            .filter(|t| now - t.load(Relaxed) <= 1000)
            .count();
        fewest = fewest.min(instructed);
        instructed_ok += usize::from(instructed == n);
        let st = status
            .status(proto::StatusRequest::default())
            .await
            .unwrap()
            .into_inner();
        let age = st
            .children
            .iter()
            .map(|c| c.seconds_since_report)
            .fold(0.0, f64::max);
        worst_age = worst_age.max(age);
        folded_ok += usize::from(st.children.len() == n && age <= 1.1);
    }
    let span = t0.elapsed().as_secs_f64();
    let cores = (cpu_seconds(pid) - cpu0) / span;
    let own = (cpu_seconds(std::process::id()) - own0) / span;
    let rss = peak_rss_mib(pid);
    let mut gaps: Vec<u64> = heard.longest_gap.iter().map(|g| g.load(Relaxed)).collect();
    gaps.sort_unstable();
    let over = gaps.iter().filter(|&&g| g > 1000).count();
    println!(
        "aggregator, {n:>5} simulated clients ({STREAMS_PER_CONNECTION} report streams per HTTP/2 connection, {} connections) x {BUCKETS} buckets, wire version {}: {folded_ok}/{seconds} s all reports folded (oldest report {worst_age:.2} s), {instructed_ok}/{seconds} s every client instructed (fewest {fewest}), CPU {cores:.2} cores, peak RSS {rss:.0} MiB",
        channels.len(),
        wire_version()
    );
    println!(
        "  longest gap between two instructions to one client: median client {} ms, p99 client {} ms, worst {} ms; {over} of {n} clients had a gap over 1,000 ms; the simulated clients used {own:.2} cores",
        gaps[n / 2],
        gaps[n * 99 / 100],
        gaps[n - 1]
    );
    for t in tasks {
        t.abort();
    }
    AggregatorRun {
        clients: n,
        seconds,
        folded_ok,
        instructed_ok,
        cores,
        rss_mib: rss,
        worst_gap_ms: gaps[n - 1],
        sim_cores: own,
    }
}

fn controller_tick() {
    let zones = 50usize;
    let buckets = 1000usize;
    let node = Node::new(NodeConfig {
        level: proto::Level::Global,
        id: "ctl".into(),
        zone: String::new(),
        region: "eu".into(),
        interval: Duration::from_secs(1),
        scopes: vec![Scope::Global, Scope::Region],
        has_parent: false,
        validity_intervals: 5,
    });
    let rules = Rules::from_wire(
        "v1",
        &[proto::ServiceRules {
            service: "svc".into(),
            first_index: None,
            buckets: (0..buckets)
                .map(|b| proto::BucketRule {
                    name: format!("b{b}"),
                    caller: format!("c{b}"),
                    scope: proto::Scope::Global as i32,
                    mode: proto::Mode::Deny as i32,
                    limit_rps: Some(1000.0),
                    ..Default::default()
                })
                .collect(),
        }],
    );
    let now = tokio::time::Instant::now();
    node.set_rules(rules, now);
    let mut inboxes = Vec::new();
    let zone_report = |z: usize, round: usize| proto::Report {
        reporter_id: format!("agg-{z}"),
        level: proto::Level::Zone as i32,
        zone: format!("z{z}"),
        region: "eu".into(),
        services: vec!["svc".into()],
        rates: (0..buckets)
            .map(|b| proto::BucketRate {
                service: "svc".into(),
                bucket: format!("b{b}"),
                zone: format!("z{z}"),
                region: "eu".into(),
                offered: 10.0 + ((z + b + round) % 7) as f64 * 5.0,
                clients: 20,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut links = Vec::new();
    for z in 0..zones {
        let (tx, rx) = mpsc::channel(64);
        let _ = node.on_report(z as u64, tx.clone(), &zone_report(z, 0), None, now);
        links.push(tx);
        inboxes.push(rx);
    }
    let mut times = Vec::new();
    for round in 1..=20 {
        for (z, tx) in links.iter().enumerate() {
            let _ = node.on_report(z as u64, tx.clone(), &zone_report(z, round), None, now);
        }
        let at = now + Duration::from_millis(250 * round as u64);
        let t = Instant::now();
        node.tick(at);
        times.push(t.elapsed());
        for rx in &mut inboxes {
            while rx.try_recv().is_ok() {}
        }
    }
    times.sort();
    let per: BTreeMap<&str, Duration> = [
        ("median", times[times.len() / 2]),
        ("max", *times.last().unwrap()),
    ]
    .into();
    println!(
        "controller tick, {zones} zones x {buckets} buckets (ratios + per-zone allowances + instructions): median {:.1} ms, max {:.1} ms",
        per["median"].as_secs_f64() * 1e3,
        per["max"].as_secs_f64() * 1e3
    );
}

/// The CPU target of issue #13 at `n` clients, if it sets one.
fn cpu_target(n: usize) -> Option<f64> {
    match n {
        2000 => Some(0.15),
        5000 => Some(0.35),
        _ => None,
    }
}

/// The headline row from the runs.
fn figures_row(runs: &[AggregatorRun], counts: &str, seconds: u64) {
    let sizes: Vec<String> = runs
        .iter()
        .map(|r| figures_out::thousands(r.clients as f64))
        .collect();
    let what = format!(
        "one aggregator, {} simulated clients × {BUCKETS} buckets at a 1 s interval, wire version {} (simulated: {STREAMS_PER_CONNECTION} clients' report streams multiplexed on each HTTP/2 connection, not one connection per client)",
        sizes.join(" and "),
        wire_version()
    );
    let cpu: Vec<String> = runs
        .iter()
        .map(|r| match cpu_target(r.clients) {
            Some(t) => format!(
                "**{:.2} cores** at {} (target ≤ {t})",
                r.cores,
                figures_out::thousands(r.clients as f64)
            ),
            None => format!(
                "**{:.2} cores** at {}",
                r.cores,
                figures_out::thousands(r.clients as f64)
            ),
        })
        .collect();
    let rss: Vec<String> = runs.iter().map(|r| format!("{:.0}", r.rss_mib)).collect();
    let folded: Vec<String> = runs
        .iter()
        .map(|r| format!("{}/{} s", r.folded_ok, r.seconds))
        .collect();
    let instructed: Vec<String> = runs
        .iter()
        .map(|r| format!("{}/{} s", r.instructed_ok, r.seconds))
        .collect();
    let gap = runs.iter().map(|r| r.worst_gap_ms).max().unwrap_or(0);
    let figure = format!(
        "{}; peak RSS {} MiB; every report folded in {}, every client instructed within the interval in {}; longest gap between two instructions to one client {gap} ms",
        cpu.join(", "),
        rss.join(" and "),
        folded.join(" and "),
        instructed.join(" and ")
    );
    let raw: Vec<serde_json::Value> = runs
        .iter()
        .map(|r| {
            serde_json::json!({
                "clients": r.clients,
                "seconds": r.seconds,
                "folded_ok_s": r.folded_ok,
                "instructed_ok_s": r.instructed_ok,
                "aggregator_cores": (r.cores * 1000.0).round() / 1000.0,
                "aggregator_rss_mib": r.rss_mib.round(),
                "worst_gap_ms": r.worst_gap_ms,
                "simulation_cores": (r.sim_cores * 1000.0).round() / 1000.0,
            })
        })
        .collect();
    figures_out::write(&figures_out::Row {
        row: "scale",
        what,
        figure,
        command: figures_out::command(
            &[
                ("SCALE_CLIENTS", counts.to_string()),
                ("SCALE_SECONDS", seconds.to_string()),
                ("SCALE_WIRE", wire_version().to_string()),
            ],
            "cargo bench -p grl --bench scale",
        ),
        figures_json: serde_json::json!({
            "streams_per_connection": STREAMS_PER_CONNECTION,
            "buckets": BUCKETS,
            "wire_version": wire_version(),
            "runs": raw,
        })
        .to_string(),
    });
}

fn main() {
    let counts_env = std::env::var("SCALE_CLIENTS").unwrap_or_else(|_| "500,1000,2000,5000".into());
    let counts: Vec<usize> = counts_env
        .split(',')
        .map(|s| match s.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => figures_out::refuse(&format!(
                "SCALE_CLIENTS={counts_env}: {s:?} is not a number of clients > 0"
            )),
        })
        .collect();
    let seconds: u64 = figures_out::env_size("SCALE_SECONDS", 8);
    if seconds == 0 {
        figures_out::refuse("SCALE_SECONDS=0: nothing would be measured");
    }
    let _ = wire_version();
    controller_tick();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let runs: Vec<AggregatorRun> = counts
        .iter()
        .map(|&n| rt.block_on(aggregator_run(n, seconds)))
        .collect();
    figures_row(
        &runs,
        &counts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        seconds,
    );
}
