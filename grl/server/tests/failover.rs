//! Active/standby controllers with leadership from a real etcd: two `grl controller`
//! processes campaign for one key; an aggregator (in this process) lists the standby first
//! and is redirected to the leader; the leader is killed with SIGKILL during a 15x surge.
//! Clients keep the last ratios until their expiry, then fail open, and the new leader
//! enforces again after its lease wait and one interval of learning; no second of the
//! surge drops more than the limit requires. Prints what it measured (`--nocapture`);
//! RELIABILITY.md quotes the line.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::binary::{Proc, spawn, wait_port};
use crate::support::*;
use grl::tier::aggregator::{self, AggregatorOptions};
use grl_client::Client;
use test_support::etcd::Etcd;
use test_support::ports::free_port;
use tokio::time::Instant;

const IV: Duration = Duration::from_millis(200);
/// 15x the limit: two clients offer 2,250 rps each against a global limit of 300.
const LIMIT: f64 = 300.0;
const OFFERED: f64 = 4500.0;
const REQUIRED: f64 = 1.0 - LIMIT / OFFERED;
/// The least share of its due admissions a second may admit: 270 of the 300 due at 4,500
/// offered (at most 94 % dropped where 93.3 % are required). The clients settle their
/// allowance every 50 ms window: enforced seconds admitted 0.997-1.007x their due share in
/// the runs measured, on a loaded machine.
const LEAST_SHARE: f64 = 0.9;
/// The lease a dead leader keeps (`--election-ttl`).
const TTL_SECS: u64 = 3;

/// A `grl controller` process in the election `key`, following `config`.
struct Candidate {
    addr: String,
    metrics: SocketAddr,
    _proc: Proc,
}

impl Candidate {
    fn start(etcd: &Etcd, key: &str, config: &std::path::Path) -> Self {
        let (port, mport) = (free_port(), free_port());
        let addr = format!("127.0.0.1:{port}");
        let metrics: SocketAddr = format!("127.0.0.1:{mport}").parse().unwrap();
        let proc_ = spawn(&[
            "controller",
            "--listen",
            &addr,
            "--metrics-listen",
            &metrics.to_string(),
            "--config",
            &config.display().to_string(),
            "--interval-ms",
            &IV.as_millis().to_string(),
            "--election",
            &format!("etcd={}", etcd.url()),
            "--election-key",
            key,
            "--election-ttl",
            &TTL_SECS.to_string(),
        ]);
        wait_port(port);
        wait_port(mport);
        Self {
            addr,
            metrics,
            _proc: proc_,
        }
    }

    async fn metrics(&self) -> BTreeMap<String, f64> {
        scrape(self.metrics).await
    }

    async fn leads(&self) -> bool {
        self.metrics().await.get("grl_tier_leader") == Some(&1.0)
    }

    async fn zone_children(&self) -> f64 {
        self.metrics().await[r#"grl_tier_children{level="zone"}"#]
    }

    async fn config_versions(&self) -> Vec<String> {
        self.metrics()
            .await
            .into_keys()
            .filter(|k| k.starts_with("grl_tier_config_info{"))
            .collect()
    }
}

fn frac(w: &[u64; 4]) -> f64 {
    w[2] as f64 / w[0].max(1) as f64
}

async fn wait_until_leads(c: &Candidate, deadline: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < deadline {
        if c.leads().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The surge's counts over the next `w` (both clients).
async fn surge_window(clients: &[Client], w: Duration) -> [u64; 4] {
    sum(&window(clients, "gateway-pay", w).await)
}

/// Both clients' cumulative counts of `gateway-pay`, with the time they were read.
type Sample = (std::time::Instant, [u64; 4]);

/// Every second of the surge, judged against what the limit requires: a thread samples
/// both clients' cumulative counts every 50 ms from the surge's start, and [`Seconds::judge`]
/// cuts the samples into consecutive spans of at least one second.
struct Seconds {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
}

impl Seconds {
    fn start(clients: &[Client]) -> Self {
        let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (s, halt, clients) = (Arc::clone(&samples), Arc::clone(&stop), clients.to_vec());
        std::thread::spawn(move || {
            while !halt.load(Ordering::Relaxed) {
                let c = clients
                    .iter()
                    .map(|c| counts(c, "gateway-pay"))
                    .collect::<Vec<_>>();
                let at = std::time::Instant::now();
                s.lock().unwrap().push((at, sum(&c)));
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Self { samples, stop }
    }

    /// Asserts that no second drops more than the limit requires: each admits at least
    /// [`LEAST_SHARE`] of its due share of what it offered ([`REQUIRED`] dropped). Returns
    /// (seconds judged, the lowest admitted / due).
    fn judge(&self) -> (usize, f64) {
        let samples = self.samples.lock().unwrap().clone();
        let (mut judged, mut lowest, mut from) = (0, f64::INFINITY, 0);
        for to in 1..samples.len() {
            let (t0, a) = samples[from];
            let (t1, b) = samples[to];
            if t1 - t0 < Duration::from_secs(1) {
                continue;
            }
            let (offered, admitted) = ((b[0] - a[0]) as f64, (b[1] - a[1]) as f64);
            let due = offered * (1.0 - REQUIRED);
            let least = due * LEAST_SHARE;
            assert!(
                admitted >= least,
                "over-dropping in the second {:.1}-{:.1} s of the surge: admitted {admitted} \
                 of {offered} offered, at least {least:.0} were due ({LEAST_SHARE} of {due:.0})",
                (t0 - samples[0].0).as_secs_f64(),
                (t1 - samples[0].0).as_secs_f64(),
            );
            if due > 0.0 {
                lowest = lowest.min(admitted / due);
            }
            judged += 1;
            from = to;
        }
        (judged, lowest)
    }
}

impl Drop for Seconds {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Offers surge windows of 400 ms until one drops what the limit requires (±3 points);
/// whether that happened within `limit`.
async fn enforced_within(clients: &[Client], limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        let w = surge_window(clients, Duration::from_millis(400)).await;
        if (frac(&w) - REQUIRED).abs() < 0.03 {
            return true;
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_leader_is_replaced_by_the_standby_which_enforces_again() {
    let etcd = Etcd::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), LIMIT);
    let key = format!("/grl/test-{}", std::process::id());

    let mut leader = Candidate::start(&etcd, &key, dir.path());
    assert!(
        wait_until_leads(&leader, Duration::from_secs(15)).await,
        "the first controller was never elected"
    );
    let standby = Candidate::start(&etcd, &key, dir.path());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!standby.leads().await, "two leaders at once");
    assert_eq!(
        standby.config_versions().await,
        leader.config_versions().await,
        "the standby holds another config"
    );

    // The standby is listed first: the aggregator is refused there and redirected.
    let agg = aggregator::start(
        AggregatorOptions {
            zone: "a".into(),
            region: "eu".into(),
            controllers: vec![standby.addr.clone(), leader.addr.clone()],
            interval: IV,
            security: Default::default(),
        },
        listener().await,
        None,
    )
    .unwrap();
    // The clients' expiry, not the partition hold, is what this test shows between the
    // kill and the takeover: no hold (the hold is tested in `tests/net_faults`).
    agg.node.set_partition_hold(Duration::ZERO);
    let clients = [
        client(&agg, "a", "eu", "a1", IV),
        client(&agg, "a", "eu", "a2", IV),
    ];
    let _traffic = Traffic::start(
        clients
            .iter()
            .map(|c| (c.clone(), "gateway".to_string(), OFFERED / 2.0))
            .collect(),
    );
    let seconds = Seconds::start(&clients);
    assert!(
        enforced_within(&clients, Duration::from_secs(15)).await,
        "the leader never enforced the limit"
    );
    assert_eq!(leader.zone_children().await, 1.0, "the leader has no child");
    assert_eq!(
        standby.zone_children().await,
        0.0,
        "the standby took a child"
    );

    // An incident override goes to both controllers, so that it outlives the leader.
    let out = std::process::Command::new(crate::binary::BIN)
        .args([
            "override",
            "set",
            "--json",
            "--controller",
            &leader.addr,
            "--controller",
        ])
        .args([&standby.addr, "--service", SERVICE, "--caller", "batch"])
        .args(["--rps", "5", "--ttl", "30m", "--reason", "incident"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        2,
        "{out:?}"
    );

    // The clients offered nothing while the command ran: a pause long enough to be
    // reported as a fall, after which the tiers gave the idle bucket's room back. Offer the
    // surge again until the leader enforces it, so that the kill finds its ratios in force.
    assert!(
        enforced_within(&clients, Duration::from_secs(15)).await,
        "the leader did not enforce again after the pause"
    );

    leader._proc.0.kill().unwrap();
    let killed = Instant::now();

    let kept = surge_window(&clients, Duration::from_millis(100)).await;
    assert!(
        (frac(&kept) - REQUIRED).abs() < 0.05,
        "the last ratios were not kept right after the kill: {kept:?}"
    );
    let mut failed_open = None;
    while failed_open.is_none() && killed.elapsed() < Duration::from_secs(4) {
        let w = surge_window(&clients, Duration::from_millis(100)).await;
        if w[2] == 0 && w[1] > 0 {
            failed_open = Some(killed.elapsed());
        }
    }
    let failed_open = failed_open.expect("clients never failed open after their ratios expired");

    let mut back = None;
    while back.is_none() && killed.elapsed() < Duration::from_secs(20) {
        let w = surge_window(&clients, Duration::from_millis(200)).await;
        if (frac(&w) - REQUIRED).abs() < 0.05 {
            back = Some(killed.elapsed());
        }
    }
    let back = back.expect("the standby never enforced the limit");
    assert!(standby.leads().await, "the standby does not lead");
    assert_eq!(standby.zone_children().await, 1.0, "the child did not move");
    assert_eq!(
        standby.metrics().await.get("grl_tier_overrides"),
        Some(&1.0),
        "the override set on both controllers is not in force on the new leader"
    );
    let hold = Instant::now();
    while hold.elapsed() < Duration::from_secs(2) {
        let w = surge_window(&clients, Duration::from_millis(500)).await;
        assert!(
            (frac(&w) - REQUIRED).abs() < 0.05,
            "not held after takeover: {w:?}"
        );
    }
    let (judged, lowest) = seconds.judge();
    println!(
        "failover: leader killed (SIGKILL) during a 15x surge, interval {} ms, lease {TTL_SECS} s: \
         clients kept the last ratios {:.1} s (expiry 5 intervals), then failed open; the \
         standby enforced again {:.1} s after the kill; no second of {judged} dropped more than \
         the limit requires (the lowest admitted {:.2}x its due share)",
        IV.as_millis(),
        failed_open.as_secs_f64(),
        back.as_secs_f64(),
        lowest
    );
    // The lease outlives the leader by at most TTL_SECS; then one interval of learning,
    // one of reconnecting, and a loaded machine's slack.
    assert!(
        back <= Duration::from_secs(TTL_SECS + 3),
        "takeover took {back:?}"
    );
    drop(etcd);
}
