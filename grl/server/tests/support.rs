//! Helpers shared by the tier tests: a config dir, tiers on free ports, real clients, and a
//! traffic driver that offers a fixed rate per client in 10 ms ticks.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use grl::tier::Running;
use grl::tier::aggregator::{self, AggregatorOptions};
use grl::tier::controller::{self, ConfigSource, Controller, ControllerOptions};
use grl_client::{Client, ClientConfig};
use tokio::net::TcpListener;

/// The test service.
pub(crate) const SERVICE: &str = "payments";

/// A service file with a global deny bucket `gateway-pay` (caller `gateway`, limit
/// `global`), a zone bucket (`zc`, 1000), a region bucket (`rc`, 2000) and a global shadow
/// bucket (`sc`, 1000).
pub(crate) fn service_yaml(global: f64) -> String {
    let bucket = |name: &str, caller: &str, scope: &str, mode: &str, rps: f64| {
        format!(
            "  - name: {name}\n    match: {{ caller: {caller} }}\n    scope: {scope}\n    mode: {mode}\n    policy: {{ kind: fixed, rps: {rps} }}\n"
        )
    };
    [
        "service: payments\nbuckets:\n".to_string(),
        bucket("gateway-pay", "gateway", "global", "deny", global),
        bucket("zone-b", "zc", "zone", "deny", 1000.0),
        bucket("region-b", "rc", "region", "deny", 2000.0),
        bucket("shadow-b", "sc", "global", "shadow", 1000.0),
    ]
    .concat()
}

/// Writes a config dir whose global limit is `global`.
pub(crate) fn write_config(dir: &Path, global: f64) {
    std::fs::create_dir_all(dir.join("services")).unwrap();
    std::fs::write(dir.join("services/payments.yaml"), service_yaml(global)).unwrap();
}

/// A listener on a free port.
pub(crate) async fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.unwrap()
}

/// A controller on `listener` following `dir`.
pub(crate) async fn controller_on(
    l: TcpListener,
    dir: &Path,
    interval: Duration,
) -> (Running, Arc<Controller>) {
    let opts = ControllerOptions {
        region: String::new(),
        parents: Vec::new(),
        election: None,
        interval,
        config: ConfigSource::Dir(dir.to_path_buf()),
        poll: Duration::from_millis(200),
        security: Default::default(),
    };
    controller::start(opts, l, Some(listener().await))
        .await
        .unwrap()
}

/// An aggregator for `zone` in `region` on `l`.
pub(crate) async fn aggregator_on(
    l: TcpListener,
    zone: &str,
    region: &str,
    ctl: &str,
    interval: Duration,
) -> Running {
    let opts = AggregatorOptions {
        zone: zone.into(),
        region: region.into(),
        controllers: vec![ctl.into()],
        interval,
        security: Default::default(),
    };
    aggregator::start(opts, l, Some(listener().await)).unwrap()
}

/// A spawned client of `agg`.
pub(crate) fn client(
    agg: &Running,
    zone: &str,
    region: &str,
    id: &str,
    interval: Duration,
) -> Client {
    let mut cfg = ClientConfig::new(SERVICE, format!("http://{}", agg.addr));
    cfg.zone = zone.into();
    cfg.region = region.into();
    cfg.interval = interval;
    cfg.id = id.into();
    let c = Client::new(cfg);
    c.spawn();
    c
}

/// Offers `rps` of (caller, procedure) through each client, in 10 ms ticks, on a thread,
/// until dropped.
pub(crate) struct Traffic {
    stop: Arc<AtomicBool>,
}

impl Traffic {
    /// Starts offering; `load[i]` is (client, caller, rps).
    pub(crate) fn start(load: Vec<(Client, String, f64)>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let mut carry = vec![0.0; load.len()];
            let mut tick = 0u64;
            while !s.load(Ordering::Relaxed) {
                tick += 1;
                let due = start + Duration::from_millis(tick * 10);
                if let Some(w) = due.checked_duration_since(std::time::Instant::now()) {
                    std::thread::sleep(w);
                }
                for (i, (c, caller, rps)) in load.iter().enumerate() {
                    carry[i] += rps / 100.0;
                    while carry[i] >= 1.0 {
                        carry[i] -= 1.0;
                        c.decide(caller, "Pay/Charge");
                    }
                }
            }
        });
        Self { stop }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Cumulative [offered, allowed, dropped, shadow] of `bucket` in a client.
pub(crate) fn counts(c: &Client, bucket: &str) -> [u64; 4] {
    c.bucket_totals()
        .into_iter()
        .find(|b| b.bucket == bucket)
        .map_or([0; 4], |b| {
            [b.offered, b.allowed, b.dropped, b.shadow_dropped]
        })
}

/// Per-client [offered, allowed, dropped, shadow] of `bucket` over the next `window`.
pub(crate) async fn window(clients: &[Client], bucket: &str, window: Duration) -> Vec<[u64; 4]> {
    let before: Vec<_> = clients.iter().map(|c| counts(c, bucket)).collect();
    tokio::time::sleep(window).await;
    clients
        .iter()
        .zip(before)
        .map(|(c, b)| {
            let a = counts(c, bucket);
            [a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3]]
        })
        .collect()
}

/// The sum of per-client windows.
pub(crate) fn sum(w: &[[u64; 4]]) -> [u64; 4] {
    w.iter().fold([0; 4], |mut s, x| {
        for k in 0..4 {
            s[k] += x[k];
        }
        s
    })
}

/// Waits until `f` holds, polling every 20 ms, at most `limit`; returns the time it took.
pub(crate) async fn until(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = tokio::time::Instant::now();
    while start.elapsed() < limit {
        if f() {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Fetches `/metrics` from `addr` and parses `name{labels} value` lines.
pub(crate) async fn scrape(addr: std::net::SocketAddr) -> BTreeMap<String, f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    assert!(
        body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
        "{body}"
    );
    body.lines()
        .filter(|l| {
            !l.starts_with('#') && !l.is_empty() && !l.starts_with("HTTP") && l.contains(' ')
        })
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}
