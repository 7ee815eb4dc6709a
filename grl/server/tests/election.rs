//! An etcd outage under two `grl controller` processes electing through it: the leader
//! steps down while etcd is away, and when etcd comes back (restarted on the same data and
//! ports, so it restores every lease with a fresh TTL) the leases of the terms that ended
//! meanwhile are revoked at once, and a leader serves children again within a lease of
//! etcd's return, rather than the election naming a controller that no longer leads until
//! those leases lapse. Prints what it measured (`--nocapture`); RELIABILITY.md quotes it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use grl::tier::aggregator::{self, AggregatorOptions};
use serde_json::{Value, json};
use test_support::etcd::Etcd;
use test_support::ports::free_port;
use test_support::process::{ChildGuard, spawn};
use tokio::time::Instant;

use crate::binary::{BIN, wait_port};
use crate::support::*;

const IV: Duration = Duration::from_millis(200);
/// `--election-ttl`, the default.
const TTL: Duration = Duration::from_secs(3);
/// How long etcd stays away: longer than the lease, so that every lease it held would
/// have lapsed had it kept running.
const OUTAGE: Duration = Duration::from_secs(6);

/// A `grl controller` process in the election `key`, with its log kept.
struct Candidate {
    addr: String,
    metrics: SocketAddr,
    proc_: ChildGuard,
}

impl Candidate {
    fn start(etcd: &str, key: &str, config: &std::path::Path) -> Self {
        let (port, mport) = (free_port(), free_port());
        let addr = format!("127.0.0.1:{port}");
        let metrics: SocketAddr = format!("127.0.0.1:{mport}").parse().unwrap();
        let proc_ = spawn(
            Command::new(BIN)
                .args(["controller", "--listen", &addr])
                .args(["--metrics-listen", &metrics.to_string()])
                .args(["--config", &config.display().to_string()])
                .args(["--interval-ms", &IV.as_millis().to_string()])
                .args(["--election", &format!("etcd={etcd}")])
                .args(["--election-key", key])
                .args(["--election-ttl", &TTL.as_secs().to_string()])
                .env("RUST_LOG", "info"),
        )
        .unwrap();
        wait_port(port);
        wait_port(mport);
        Self {
            addr,
            metrics,
            proc_,
        }
    }

    async fn metrics(&self) -> BTreeMap<String, f64> {
        scrape(self.metrics).await
    }

    async fn leads(&self) -> bool {
        self.metrics().await.get("grl_tier_leader") == Some(&1.0)
    }

    /// Whether it leads with the aggregator connected.
    async fn serves(&self) -> bool {
        let m = self.metrics().await;
        m.get("grl_tier_leader") == Some(&1.0)
            && m.get(r#"grl_tier_children{level="zone"}"#) == Some(&1.0)
    }

    async fn event(&self, event: &str) -> f64 {
        let k = format!(r#"grl_controller_election_events_total{{event="{event}"}}"#);
        self.metrics().await.get(&k).copied().unwrap_or(0.0)
    }

    fn log(&self) -> String {
        format!("--- {} ---\n{}", self.addr, self.proc_.output_tail(30))
    }
}

/// POSTs `body` to etcd's JSON gateway at `path`.
async fn etcd_call(etcd: &str, path: &str, body: Value) -> Value {
    reqwest::Client::new()
        .post(format!("{etcd}{path}"))
        .json(&body)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The election's keys (one per campaigning candidate): (lease id, value).
async fn election_keys(etcd: &str, key: &str) -> Vec<(String, String)> {
    let v = etcd_call(
        etcd,
        "/v3/kv/range",
        json!({ "key": B64.encode(format!("{key}/")), "range_end": B64.encode(format!("{key}0")) }),
    )
    .await;
    let kvs = v.get("kvs").and_then(Value::as_array).cloned();
    kvs.unwrap_or_default()
        .iter()
        .map(|kv| {
            let value = B64.decode(kv["value"].as_str().unwrap()).unwrap();
            (
                kv["lease"].as_str().unwrap().to_string(),
                String::from_utf8(value).unwrap(),
            )
        })
        .collect()
}

/// Whether etcd no longer holds the lease `id` (`TTL` -1).
async fn lease_gone(etcd: &str, id: &str) -> bool {
    let v = etcd_call(etcd, "/v3/lease/timetolive", json!({ "ID": id })).await;
    v["TTL"] == "-1"
}

async fn until_async<F: Future<Output = bool>>(limit: Duration, mut f: impl FnMut() -> F) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_etcd_outage_old_leases_are_revoked_and_a_leader_serves_within_a_lease() {
    let mut etcd = Etcd::start().await.unwrap();
    let url = etcd.url().to_string();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 300.0);
    let key = format!("/grl/outage-{}", std::process::id());

    let first = Candidate::start(&url, &key, dir.path());
    let s = Duration::from_secs(15);
    assert!(
        until_async(s, || first.leads()).await,
        "the first controller was never elected\n{}",
        first.log()
    );
    let second = Candidate::start(&url, &key, dir.path());
    assert!(
        until_async(s, || async { election_keys(&url, &key).await.len() == 2 }).await,
        "the second controller does not campaign"
    );
    let _agg = aggregator::start(
        AggregatorOptions {
            zone: "a".into(),
            region: "eu".into(),
            controllers: vec![second.addr.clone(), first.addr.clone()],
            interval: IV,
            security: Default::default(),
        },
        listener().await,
        None,
    )
    .unwrap();
    assert!(
        until_async(s, || first.serves()).await,
        "the leader never got the aggregator"
    );
    let old = election_keys(&url, &key).await;
    assert_eq!(old.len(), 2, "{old:?}");
    assert!(
        old.iter().any(|(_, v)| *v == first.addr),
        "the leader has no key: {old:?}"
    );

    etcd.stop();
    let stopped = Instant::now();
    assert!(
        until_async(s, || async { !first.leads().await }).await,
        "the leader kept leading without etcd\n{}",
        first.log()
    );
    let down = stopped.elapsed();
    assert!(
        down < TTL,
        "the leader led {down:?} without etcd, longer than its lease"
    );
    assert!(!second.leads().await, "the standby leads without etcd");

    tokio::time::sleep_until(stopped + OUTAGE).await;
    etcd.restart().await.unwrap();
    let back = Instant::now();
    let (mut revoked, mut served) = (None, None);
    while (revoked.is_none() || served.is_none()) && back.elapsed() < Duration::from_secs(20) {
        if revoked.is_none() {
            let mut all = true;
            for (id, _) in &old {
                all &= lease_gone(&url, id).await;
            }
            if all {
                revoked = Some(back.elapsed());
            }
        }
        if served.is_none() && (first.serves().await || second.serves().await) {
            served = Some(back.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let logs = format!("{}\n{}", first.log(), second.log());
    let revoked = revoked.unwrap_or_else(|| panic!("the old leases were never revoked\n{logs}"));
    let served = served.unwrap_or_else(|| panic!("no leader served children again\n{logs}"));
    println!(
        "etcd outage of {OUTAGE:?} (lease {TTL:?}): the leader stepped down {:.1} s after etcd \
         stopped; after etcd's return the old leases were revoked within {:.2} s and a leader \
         served the aggregator again after {:.2} s",
        down.as_secs_f64(),
        revoked.as_secs_f64(),
        served.as_secs_f64()
    );
    // Each candidate retries etcd every third of the lease at most while it is away, then
    // revokes its old lease first: within a third of the lease, plus a loaded machine's
    // slack. etcd restored those leases with a fresh TTL (it held them for TTL + 1.7 s
    // after its return when nobody revoked them), so they cannot have lapsed by then.
    assert!(
        revoked <= TTL / 3 + Duration::from_secs(1),
        "the old leases lived {revoked:?} after etcd's return\n{logs}"
    );
    // Then campaigns have no dead key to wait behind: a leader is elected at once, and the
    // aggregator (backing off at most an interval) is redirected to it. Asserted at the
    // bound of a leader's death (a lease), which the restored leases alone would exceed.
    assert!(
        served <= TTL,
        "a leader served children {served:?} after etcd's return\n{logs}"
    );

    let (a, b) = (first.leads().await, second.leads().await);
    assert!(a ^ b, "leaders: first {a}, second {b}");
    let (leader, follower) = if a {
        (&first, &second)
    } else {
        (&second, &first)
    };
    let named = etcd_call(
        &url,
        "/v3/election/leader",
        json!({ "name": B64.encode(&key) }),
    )
    .await;
    let named = B64.decode(named["kv"]["value"].as_str().unwrap()).unwrap();
    assert_eq!(
        String::from_utf8(named).unwrap(),
        leader.addr,
        "etcd names another leader than the one that leads"
    );
    assert_eq!(
        follower.metrics().await[r#"grl_tier_children{level="zone"}"#],
        0.0,
        "the follower holds a child"
    );
    // A candidate whose revoke went unanswered while etcd came back counts it at its next
    // try, a third of the lease later at most (see `revoke_stale`): polled, within the
    // lease that bounds the whole recovery.
    for c in [&first, &second] {
        let mut n = c.event("stale_lease_revoked").await;
        while n < 1.0 && back.elapsed() < TTL {
            tokio::time::sleep(Duration::from_millis(50)).await;
            n = c.event("stale_lease_revoked").await;
        }
        assert_eq!(
            n, 1.0,
            "{} did not count the revoke of its old lease\n{logs}",
            c.addr
        );
    }
}
