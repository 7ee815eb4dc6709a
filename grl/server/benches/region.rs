//! One region at the size of the system GRL models (issue #25): a real `grl controller`
//! process (release build, 1 s interval, its config a generated repo of `REGION_SERVICES`
//! services and `REGION_BUCKETS` buckets, mixed global / region / zone scopes) fed by
//! `REGION_ZONES` simulated zone aggregators in this process. Each simulated zone is what a
//! real aggregator is to its controller: its own HTTP/2 connection and `Tier/Exchange`
//! stream, wire version 2, the zone's sums of every bucket sent up after each of its ticks
//! (four per interval, at its own phase), urgent when its demand jumps, and the
//! controller's instructions applied to its demand (a zone admits `min(demand, allowance)`).
//!
//! Demand: `REGION_RPS` (default 80 million requests per second) over the buckets, skewed
//! (a bucket's share varies 1 to 20 times, a zone's 1 to 3 times) and moving ±5 % from
//! report to report; every bucket's limit is twice its demand, so nothing should be
//! dropped, except that halfway through the measured `REGION_SECONDS` (default 10) the
//! first service's first bucket (22,000 rps, limit 44,000) surges 15 times, to 330,000 rps.
//!
//! Measured over the window: the controller's tick p99 (from its
//! `grl_tier_tick_duration_seconds` histogram, interpolated within a bucket as Prometheus'
//! `histogram_quantile` does), ticks per second, its CPU (cores, /proc utime + stime) and
//! peak RSS (VmHWM); the longest time a zone went without an instruction; encoded bytes per
//! bucket row of the steady reports up and the instructions down (those without a config);
//! per second from the step, the surging bucket's admitted rate over its limit; the
//! buckets other than the surging one that any zone was told to drop at any time.
//!
//! Prints figures as it goes and, as its last line, one JSON object (the contract of the
//! issue): `zones`, `buckets`, `services`, `tick_p99_ms`, `controller_cores`,
//! `controller_rss_mib`, `worst_zone_gap_ms`, `bytes_per_row_up`, `bytes_per_row_down`,
//! `surge_admitted_over_limit`, `other_buckets_dropping`, and a few more.
//!
//! `REGION_OPERATOR=1` also asks what an operator's tools ask, once a second during the
//! window: `Status` with every bucket's detail (what `grl status` and `grl top` send) and
//! the `/status` page; it prints the slowest answer of each, the page's size, and the tick
//! figures then include their cost.
//!
//! `REGION_CHILDREN=regions` simulates the level above instead: a global controller (no
//! region of its own) fed by `REGION_ZONES` region controllers, every bucket global.
//!
//! `REGION_CLASSED=0.1` gives a tenth of the buckets (never the surging one) the priority
//! classes `critical, default, sheddable`, each bucket's demand offered 30 / 40 / 30 % in
//! them: each such bucket is then three rows on the wire and three ratios in the tick.
//!
//! What is simulated, plainly: the zones are streams in this process, not aggregators,
//! and no request is sent. A zone's "admitted" is the controller's allowance arithmetic
//! applied to the zone's demand, `min(demand, allowance)`; the surge figures are that
//! arithmetic, not requests counted by clients.
//!
//! `cargo bench -p grl --bench region` (`REGION_ZONES=10 REGION_BUCKETS=5000 ...` for
//! another size; `REGION_CONTROLLER_LOG=<file>` keeps the controller's log, `RUST_LOG` its
//! level). A size that does not parse, more services than buckets or fewer than 2 seconds
//! is refused (exit 2), never changed. With `GRL_FIGURES_OUT=<file>` the figures also go to
//! that file as the headline row `region` (see `common/figures_out.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use grl::tier::engine::rules::Rules;
use grl::tier::observe::tick_times::BOUNDS_SECONDS;
use grl_core::packed;
use grl_core::proto;
use grl_core::proto::tier_client::TierClient;
use prost::Message;
use test_support::ports::free_port;
use tokio::sync::{Notify, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;

#[path = "common/figures_out.rs"]
mod figures_out;

const REGION: &str = "bench-region";
/// The surging bucket's demand before the step and its limit (the seed's own figures).
const SURGE_RPS: f64 = 22_000.0;
const SURGE_LIMIT: f64 = 44_000.0;
const SURGE_FACTOR: f64 = 15.0;
/// Client instances in a zone (they share its services).
const INSTANCES_PER_ZONE: usize = 2_000;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    figures_out::env_size(name, default)
}

/// A deterministic number in [0, 1) from `i` (a multiplicative hash).
fn unit(i: u64) -> f64 {
    let h = i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// What the region offers: per service and bucket its demand over the region, and each
/// zone's share of every bucket's demand.
struct Plan {
    services: Vec<String>,
    /// The services as an aggregator lists its children's: sorted.
    listed: Vec<String>,
    by_name: HashMap<String, usize>,
    /// Per service, per bucket position: the region's demand in requests per second.
    demand: Vec<Vec<f64>>,
    zone_share: Vec<f64>,
    clients_per_row: u32,
    /// The children are regions under a global controller (`REGION_CHILDREN=regions`), not
    /// zones under a region's.
    regions: bool,
    /// Every this many buckets, one has the priority classes `critical, default,
    /// sheddable` and offers 30 / 40 / 30 % of its demand in them (`REGION_CLASSED`, a
    /// share of the buckets; 0: none).
    classed_every: usize,
}

/// The share of a classed bucket's demand in each of its classes.
const CLASS_MIX: [f64; 3] = [0.3, 0.4, 0.3];

impl Plan {
    fn new(
        zones: usize,
        buckets: usize,
        services: usize,
        rps: f64,
        (regions, classed_every): (bool, usize),
    ) -> Self {
        let names: Vec<String> = (0..services)
            .map(|s| format!("team{:03}-service-{s:04}", s % 97))
            .collect();
        let mut demand: Vec<Vec<f64>> = (0..services)
            .map(|s| {
                let n = buckets / services + usize::from(s < buckets % services);
                (0..n)
                    .map(|b| (3.0 * unit((s * 1_000 + b) as u64)).exp())
                    .collect()
            })
            .collect();
        let weight: f64 = demand.iter().flatten().sum::<f64>() - demand[0][0];
        let scale = (rps - SURGE_RPS) / weight;
        demand.iter_mut().flatten().for_each(|d| *d *= scale);
        demand[0][0] = SURGE_RPS;
        let raw: Vec<f64> = (0..zones).map(|z| 1.0 + 2.0 * unit(z as u64 + 7)).collect();
        let total: f64 = raw.iter().sum();
        let mut listed = names.clone();
        listed.sort();
        Self {
            listed,
            by_name: names.iter().cloned().zip(0..).collect(),
            services: names,
            demand,
            zone_share: raw.iter().map(|r| r / total).collect(),
            clients_per_row: INSTANCES_PER_ZONE.div_ceil(services) as u32,
            regions,
            classed_every,
        }
    }

    /// Whether bucket `b` of service `s` has priority classes (never the surging one).
    fn classed(&self, s: usize, b: usize) -> bool {
        self.classed_every > 0
            && (s, b) != (0, 0)
            && (s * 1_000 + b) % self.classed_every == self.classed_every - 1
    }

    /// Mixed scopes under a region's controller (4 global, 4 region, 2 zone in 10); every
    /// bucket global under the global controller.
    fn scope(&self, position: usize) -> &'static str {
        if self.regions {
            return "global";
        }
        [
            "global", "global", "global", "global", "region", "region", "region", "region",
        ]
        .get(position % 10)
        .copied()
        .unwrap_or("zone")
    }

    /// Child `z`'s level, zone and region.
    fn place(&self, z: usize) -> (proto::Level, String, String) {
        if self.regions {
            (
                proto::Level::Region,
                String::new(),
                format!("region-{z:03}"),
            )
        } else {
            (
                proto::Level::Zone,
                format!("{REGION}-z{z:03}"),
                REGION.into(),
            )
        }
    }

    /// The config repo: one file per service, every bucket's limit twice its demand (a
    /// zone-scoped bucket: twice the largest zone's part of it).
    fn write_config(&self, dir: &std::path::Path) {
        std::fs::create_dir_all(dir.join("services")).unwrap();
        let top_zone = self.zone_share.iter().copied().fold(0.0, f64::max);
        for (s, name) in self.services.iter().enumerate() {
            let mut text = format!("service: {name}\nbuckets:\n");
            for (b, d) in self.demand[s].iter().enumerate() {
                let scope = self.scope(b);
                let limit = match (s, b, scope) {
                    (0, 0, _) => SURGE_LIMIT,
                    (_, _, "zone") => 2.0 * d * top_zone * 1.05,
                    _ => 2.0 * d,
                };
                let classes = if self.classed(s, b) {
                    ", priorities: [critical, default, sheddable]"
                } else {
                    ""
                };
                text.push_str(&format!(
                    "  - {{ name: caller-{b:02}-to-{name}, match: {{ caller: caller-service-{b:04} }}, scope: {scope}, mode: deny, policy: {{ kind: fixed, rps: {} }}{classes} }}\n",
                    limit.ceil()
                ));
            }
            std::fs::write(dir.join(format!("services/{name}.yaml")), text).unwrap();
        }
    }
}

/// A zone's view of the config version it holds: each bucket index's base demand in this
/// zone, and the surging bucket's index.
struct Indexed {
    version: String,
    base: Vec<f64>,
    surge: u32,
    /// Every index, delta-coded.
    deltas: Vec<u32>,
}

impl Indexed {
    fn new(rules: &Rules, plan: &Plan, zone: usize) -> Self {
        let mut base = vec![0.0; rules.bucket_count()];
        let mut surge = u32::MAX;
        for (service, list) in rules.services() {
            let s = plan.by_name[service];
            // A bucket with classes is a rule per class: its demand is shared over them.
            let mut b = 0;
            for (j, rule) in list.iter().enumerate() {
                let starts = rule.class_of.is_empty() || rule.class_rank == 0;
                if j > 0 && starts {
                    b += 1;
                }
                let share = if rule.class_of.is_empty() {
                    1.0
                } else {
                    CLASS_MIX[(rule.class_rank as usize).min(2)]
                };
                let i = rules.index_of(service, j).unwrap();
                base[i as usize] = plan.demand[s][b] * share * plan.zone_share[zone];
                if s == 0 && b == 0 {
                    surge = i;
                }
            }
        }
        let deltas = (0..base.len()).map(|i| u32::from(i > 0)).collect();
        Self {
            version: rules.version.clone(),
            base,
            surge,
            deltas,
        }
    }
}

/// What the controller last told a zone about the surging bucket.
#[derive(Clone, Copy, Default)]
struct SurgeHeld {
    ratio: f64,
    allowed: Option<f64>,
}

impl SurgeHeld {
    fn admitted(self, demand: f64) -> f64 {
        match self.allowed {
            Some(a) => demand.min(a),
            None => demand * (1.0 - self.ratio),
        }
    }
}

/// Counters the zones share with the measurement.
struct Shared {
    epoch: Instant,
    measuring: AtomicBool,
    surge_on: AtomicBool,
    surge_step: Vec<Notify>,
    last_heard_ms: Vec<AtomicU64>,
    worst_gap_ms: Vec<AtomicU64>,
    /// The longest gap of any zone before the window (after the config arrived).
    warmup_gap_ms: AtomicU64,
    /// When each zone's longest gap ended (ms since the epoch).
    worst_gap_at_ms: Vec<AtomicU64>,
    up_bytes: AtomicU64,
    up_rows: AtomicU64,
    down_bytes: AtomicU64,
    down_rows: AtomicU64,
    configs: AtomicU64,
    surge: Vec<Mutex<(f64, SurgeHeld)>>,
    dropping: Mutex<BTreeSet<u32>>,
}

impl Shared {
    fn ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

/// The demand moves ±5 % from report to report, bucket by bucket.
fn wobble(i: usize, tick: u64) -> f64 {
    1.0 + 0.05 * (std::f64::consts::TAU * ((i * 7) as u64 + tick) as f64 / 64.0).sin()
}

/// A zone's report: every bucket's demand in the zone (the surging one's times `surge`,
/// with what the zone dropped of it under `held`), by index once the zone holds a config.
fn zone_report(
    z: usize,
    plan: &Plan,
    ix: Option<&Indexed>,
    (seq, urgent): (u64, bool),
    (surge, held): (f64, SurgeHeld),
) -> proto::Report {
    // Built column by column, as `grl_core::packed::pack_rows` lays them out (every
    // bucket, so the index deltas are 0 then 1s): the simulation's own cost stays small
    // next to the controller's.
    let packed = ix.map(|ix| {
        let n = ix.base.len();
        let s = ix.surge as usize;
        let mut offered: Vec<f32> = (0..n)
            .map(|i| (ix.base[i] * wobble(i, seq)) as f32)
            .collect();
        let demand = ix.base[s] * surge;
        offered[s] = demand as f32;
        let dropped = demand - held.admitted(demand);
        let (dropped_at, dropped) = if dropped > 0.0 {
            (vec![s as u32], vec![dropped as f32])
        } else {
            (Vec::new(), Vec::new())
        };
        proto::PackedRows {
            config_version: ix.version.clone(),
            index_delta: ix.deltas.clone(),
            offered,
            clients: vec![plan.clients_per_row; n],
            dropped_at,
            dropped,
            ..Default::default()
        }
    });
    let (level, zone, region) = plan.place(z);
    proto::Report {
        reporter_id: format!("sim-{z:03}"),
        level: level as i32,
        zone,
        region,
        services: plan.listed.clone(),
        config_version: ix.map(|ix| ix.version.clone()).unwrap_or_default(),
        interval_ms: 1000,
        rates: Vec::new(),
        seq,
        urgent,
        learning: false,
        wire_version: packed::WIRE_VERSION,
        packed,
    }
}

/// One simulated zone aggregator: reports up after each of its ticks, applies what it is
/// told.
async fn zone(addr: String, z: usize, plan: Arc<Plan>, shared: Arc<Shared>) {
    let ch = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let mut client = TierClient::new(ch)
        .max_decoding_message_size(grl_core::wire::MAX_TIER_MESSAGE_BYTES)
        .max_encoding_message_size(grl_core::wire::MAX_TIER_MESSAGE_BYTES);
    let (tx, rx) = mpsc::channel(8);
    tx.send(zone_report(
        z,
        &plan,
        None,
        (0, false),
        (1.0, SurgeHeld::default()),
    ))
    .await
    .unwrap();
    let mut inbound = client
        .exchange(ReceiverStream::new(rx))
        .await
        .expect("the controller takes the zone's stream")
        .into_inner();
    let (ix_tx, mut ix_rx) = watch::channel::<Option<Arc<Indexed>>>(None);
    let writer = {
        let (plan, shared) = (plan.clone(), shared.clone());
        tokio::spawn(async move {
            let phase = Duration::from_millis((z as u64 * 250) / plan.zone_share.len() as u64);
            let mut t = tokio::time::interval_at(
                tokio::time::Instant::now() + phase,
                Duration::from_millis(250),
            );
            let mut seq = 0;
            loop {
                let urgent = tokio::select! {
                    _ = t.tick() => false,
                    () = shared.surge_step[z].notified() => {
                        // An aggregator hears its clients' urgent reports within a window
                        // or two of the jump, at its own moment.
                        tokio::time::sleep(Duration::from_millis(50 + (z as u64 * 13) % 100)).await;
                        true
                    }
                };
                seq += 1;
                let ix = ix_rx.borrow_and_update().clone();
                let surge = if shared.surge_on.load(Relaxed) {
                    SURGE_FACTOR
                } else {
                    1.0
                };
                let held = shared.surge[z].lock().unwrap().1;
                let r = zone_report(z, &plan, ix.as_deref(), (seq, urgent), (surge, held));
                if shared.measuring.load(Relaxed) && !urgent && r.packed.is_some() {
                    shared.up_bytes.fetch_add(r.encoded_len() as u64, Relaxed);
                    shared
                        .up_rows
                        .fetch_add(ix.map_or(0, |ix| ix.base.len()) as u64, Relaxed);
                }
                if tx.send(r).await.is_err() {
                    return;
                }
            }
        })
    };
    let mut held: Option<(Rules, Arc<Indexed>)> = None;
    while let Ok(Some(i)) = inbound.message().await {
        let now = shared.ms();
        let before = shared.last_heard_ms[z].swap(now, Relaxed);
        let measuring = shared.measuring.load(Relaxed);
        if !measuring && before > 0 {
            shared.warmup_gap_ms.fetch_max(now - before, Relaxed);
        }
        if measuring
            && before > 0
            && shared.worst_gap_ms[z].fetch_max(now - before, Relaxed) < now - before
        {
            shared.worst_gap_at_ms[z].store(now, Relaxed);
        }
        if i.has_config {
            let rules = Rules::from_wire(&i.config_version, &i.config);
            let ix = Arc::new(Indexed::new(&rules, &plan, z));
            ix_tx.send_replace(Some(ix.clone()));
            held = Some((rules, ix));
            shared.configs.fetch_add(1, Relaxed);
        } else if measuring {
            let rows = i.ratios.len() + i.packed.as_ref().map_or(0, |p| p.index_delta.len());
            shared.down_bytes.fetch_add(i.encoded_len() as u64, Relaxed);
            shared.down_rows.fetch_add(rows as u64, Relaxed);
        }
        let Some((_, ix)) = &held else { continue };
        let Some(p) = &i.packed else { continue };
        // Read in place (no unpacking of every ratio): the surging bucket's, and which
        // others drop.
        let mut index = 0u32;
        let mut dropping = Vec::new();
        for (k, (d, ratio)) in p.index_delta.iter().zip(&p.ratio).enumerate() {
            index += d;
            if index == ix.surge {
                let allowed = p.allowed.get(k).copied().filter(|a| !a.is_nan());
                shared.surge[z].lock().unwrap().1 = SurgeHeld {
                    ratio: f64::from(*ratio),
                    allowed: allowed.map(f64::from),
                };
            } else if *ratio > 0.0 && measuring {
                dropping.push(index);
            }
        }
        if !dropping.is_empty() {
            shared.dropping.lock().unwrap().extend(dropping);
        }
    }
    writer.abort();
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU seconds (user + system) of a process.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}

/// Peak resident memory of a process, in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<f64>()
        .unwrap()
        / 1024.0
}

/// The controller's tick histogram: per `le` bound, the cumulative count; empty when the
/// controller does not answer within 30 s (a saturated one).
async fn tick_histogram(metrics: &str) -> BTreeMap<String, f64> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let get = async {
        client
            .get(format!("http://{metrics}/metrics"))
            .send()
            .await?
            .text()
            .await
    };
    let body = match get.await {
        Ok(b) => b,
        Err(e) => {
            println!("the controller's /metrics did not answer: {e}");
            return BTreeMap::new();
        }
    };
    body.lines()
        .filter_map(|l| l.strip_prefix("grl_tier_tick_duration_seconds_bucket{le=\""))
        .filter_map(|l| {
            let (le, rest) = l.split_once("\"}")?;
            Some((le.to_string(), rest.trim().parse().ok()?))
        })
        .collect()
}

/// The `q` quantile of the ticks between two histogram scrapes, interpolated linearly
/// within its bucket, and how many ticks there were.
fn quantile(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, q: f64) -> (f64, f64) {
    let bounds: Vec<(f64, f64)> = BOUNDS_SECONDS
        .iter()
        .map(|b| {
            let key = after
                .keys()
                .find(|k| k.parse::<f64>().ok() == Some(*b))
                .cloned();
            let count = key.map_or(0.0, |k| after[&k] - before.get(&k).copied().unwrap_or(0.0));
            (*b, count)
        })
        .collect();
    let total =
        after.get("+Inf").copied().unwrap_or(0.0) - before.get("+Inf").copied().unwrap_or(0.0);
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for (bound, cumulative) in bounds {
        if cumulative >= rank {
            let within = cumulative - below;
            let frac = if within > 0.0 {
                (rank - below) / within
            } else {
                1.0
            };
            return (lower + (bound - lower) * frac, total);
        }
        (lower, below) = (bound, cumulative);
    }
    (f64::INFINITY, total)
}

fn main() {
    let zones: usize = env("REGION_ZONES", 50);
    let buckets: usize = env("REGION_BUCKETS", 22_000);
    let services: usize = env("REGION_SERVICES", 1_100);
    let seconds: u64 = env("REGION_SECONDS", 10);
    let rps: f64 = env("REGION_RPS", 80e6);
    let children = std::env::var("REGION_CHILDREN").unwrap_or_else(|_| "zones".into());
    let classed: f64 = env("REGION_CLASSED", 0.0);
    if !(0.0..=1.0).contains(&classed) {
        figures_out::refuse(&format!(
            "REGION_CLASSED={classed}: a share of the buckets, from 0 to 1"
        ));
    }
    let classed_every = if classed > 0.0 {
        (1.0 / classed).round().max(1.0) as usize
    } else {
        0
    };
    if zones == 0 || buckets == 0 {
        figures_out::refuse("REGION_ZONES and REGION_BUCKETS must be at least 1");
    }
    if !(1..=buckets).contains(&services) {
        figures_out::refuse(&format!(
            "REGION_SERVICES={services}: between 1 and REGION_BUCKETS ({buckets}) services"
        ));
    }
    if seconds < 2 {
        figures_out::refuse(&format!(
            "REGION_SECONDS={seconds}: at least 2 (a second before the surge, one after)"
        ));
    }
    if !(rps.is_finite() && rps > 2.0 * SURGE_RPS) {
        figures_out::refuse(&format!(
            "REGION_RPS={rps}: more than {} (the surging bucket alone has {SURGE_RPS})",
            2.0 * SURGE_RPS
        ));
    }
    let regions = match children.as_str() {
        "zones" => false,
        "regions" => true,
        other => figures_out::refuse(&format!("REGION_CHILDREN={other}: zones or regions")),
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(
        zones,
        buckets,
        services,
        seconds,
        (rps, regions, classed_every),
    ));
}

async fn run(
    zones: usize,
    buckets: usize,
    services: usize,
    seconds: u64,
    (rps, regions, classed_every): (f64, bool, usize),
) {
    let plan = Arc::new(Plan::new(
        zones,
        buckets,
        services,
        rps,
        (regions, classed_every),
    ));
    let dir = tempfile::tempdir().unwrap();
    plan.write_config(dir.path());
    let (port, mport) = (free_port(), free_port());
    let (addr, metrics) = (format!("127.0.0.1:{port}"), format!("127.0.0.1:{mport}"));
    let config = dir.path().display().to_string();
    let ctl = Proc(
        Command::new(env!("CARGO_BIN_EXE_grl"))
            .args([
                "controller",
                "--listen",
                &addr,
                "--config",
                &config,
                "--region",
                if regions { "" } else { REGION },
                "--metrics-listen",
                &metrics,
            ])
            .stdout(Stdio::null())
            .stderr(match std::env::var("REGION_CONTROLLER_LOG") {
                Ok(path) => Stdio::from(std::fs::File::create(path).unwrap()),
                Err(_) => Stdio::null(),
            })
            .spawn()
            .unwrap(),
    );
    let pid = ctl.0.id();
    let started = Instant::now();
    while tokio::net::TcpStream::connect(&addr).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the controller never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "region: {zones} zones, {} buckets of {services} services, {:.1} M rps; controller up in {:.1} s",
        plan.demand.iter().map(Vec::len).sum::<usize>(),
        rps / 1e6,
        started.elapsed().as_secs_f64()
    );
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        measuring: AtomicBool::new(false),
        surge_on: AtomicBool::new(false),
        surge_step: (0..zones).map(|_| Notify::new()).collect(),
        last_heard_ms: (0..zones).map(|_| AtomicU64::new(0)).collect(),
        worst_gap_ms: (0..zones).map(|_| AtomicU64::new(0)).collect(),
        worst_gap_at_ms: (0..zones).map(|_| AtomicU64::new(0)).collect(),
        warmup_gap_ms: AtomicU64::new(0),
        up_bytes: AtomicU64::new(0),
        up_rows: AtomicU64::new(0),
        down_bytes: AtomicU64::new(0),
        down_rows: AtomicU64::new(0),
        configs: AtomicU64::new(0),
        surge: (0..zones)
            .map(|z| Mutex::new((SURGE_RPS * plan.zone_share[z], SurgeHeld::default())))
            .collect(),
        dropping: Mutex::new(BTreeSet::new()),
    });
    let tasks: Vec<_> = (0..zones)
        .map(|z| tokio::spawn(zone(addr.clone(), z, plan.clone(), shared.clone())))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while shared.configs.load(Relaxed) < zones as u64 {
        assert!(Instant::now() < deadline, "zones never got the config");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "every zone holds the config after {:.1} s; warming up",
        started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(4)).await;

    let hist0 = tick_histogram(&metrics).await;
    // A gap is measured inside the window: from its start, not from the warm-up.
    let start_ms = shared.ms();
    for t in &shared.last_heard_ms {
        t.store(start_ms, Relaxed);
    }
    let (cpu0, own0) = (cpu_seconds(pid), cpu_seconds(std::process::id()));
    let operator = std::env::var("REGION_OPERATOR")
        .is_ok_and(|v| v == "1")
        .then(|| tokio::spawn(operator_probe(addr.clone(), metrics.clone())));
    shared.measuring.store(true, Relaxed);
    let t0 = Instant::now();
    let before_step = seconds / 2;
    tokio::time::sleep(Duration::from_secs(before_step)).await;
    shared.surge_on.store(true, Relaxed);
    for (z, n) in shared.surge_step.iter().enumerate() {
        shared.surge[z].lock().unwrap().0 *= SURGE_FACTOR;
        n.notify_one();
    }
    let step = Instant::now();
    let after = seconds - before_step;
    let mut per_second = vec![(0.0, 0u32); after as usize];
    while step.elapsed() < Duration::from_secs(after) {
        let k = step.elapsed().as_secs() as usize;
        let admitted: f64 = shared
            .surge
            .iter()
            .map(|m| {
                let (demand, held) = *m.lock().unwrap();
                held.admitted(demand)
            })
            .sum();
        if let Some(slot) = per_second.get_mut(k) {
            slot.0 += admitted;
            slot.1 += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shared.measuring.store(false, Relaxed);
    let span = t0.elapsed().as_secs_f64();
    let operator = match operator {
        Some(probe) => {
            probe.abort();
            let seen = OPERATOR_SEEN.lock().unwrap().clone();
            println!(
                "operator: {} Status answers with detail, slowest {:.1} ms; {} /status pages, slowest {:.1} ms, {:.1} MiB",
                seen.status_count,
                seen.status_ms_max,
                seen.page_count,
                seen.page_ms_max,
                seen.page_bytes as f64 / 1048576.0
            );
            serde_json::json!({
                "status_detail_ms_max": (seen.status_ms_max * 10.0).round() / 10.0,
                "status_page_ms_max": (seen.page_ms_max * 10.0).round() / 10.0,
                "status_page_bytes": seen.page_bytes,
            })
        }
        None => serde_json::Value::Null,
    };
    let cores = (cpu_seconds(pid) - cpu0) / span;
    let own = (cpu_seconds(std::process::id()) - own0) / span;
    let hist1 = tick_histogram(&metrics).await;
    let rss = peak_rss_mib(pid);
    let (p99, ticks) = quantile(&hist0, &hist1, 0.99);
    // A histogram that could not be read is no figure (JSON null), not a fast tick.
    let ms = |s: f64| (ticks > 0.0 && s.is_finite()).then(|| (s * 1e4).round() / 10.0);
    let (p50, _) = quantile(&hist0, &hist1, 0.50);
    let surge: Vec<f64> = per_second
        .iter()
        .map(|(sum, n)| (sum / f64::from((*n).max(1)) / SURGE_LIMIT * 1000.0).round() / 1000.0)
        .collect();
    let ratio = |bytes: &AtomicU64, rows: &AtomicU64| {
        bytes.load(Relaxed) as f64 / rows.load(Relaxed).max(1) as f64
    };
    let (up, down) = (
        ratio(&shared.up_bytes, &shared.up_rows),
        ratio(&shared.down_bytes, &shared.down_rows),
    );
    let mut gaps: Vec<u64> = shared
        .worst_gap_ms
        .iter()
        .map(|g| g.load(Relaxed))
        .collect();
    gaps.sort_unstable();
    let gap = gaps.last().copied().unwrap_or(0);
    let late = gaps.iter().filter(|&&g| g > 1000).count();
    let window_start = shared.ms() - (span * 1000.0) as u64;
    let late_at: Vec<String> = (0..zones)
        .filter(|&z| shared.worst_gap_ms[z].load(Relaxed) > 1000)
        .map(|z| {
            let end = shared.worst_gap_at_ms[z]
                .load(Relaxed)
                .saturating_sub(window_start);
            format!(
                "{:.1}s-{:.1}s",
                (end - shared.worst_gap_ms[z].load(Relaxed).min(end)) as f64 / 1e3,
                end as f64 / 1e3
            )
        })
        .collect();
    if !late_at.is_empty() {
        println!("late zones' longest gaps, from the window's start: {late_at:?}");
    }
    let dropping = shared.dropping.lock().unwrap().len();
    println!(
        "controller: tick p50 {:.1} ms, p99 {:.1} ms ({:.1} ticks/s), {cores:.2} cores, peak RSS {rss:.0} MiB",
        p50 * 1e3,
        p99 * 1e3,
        ticks / span
    );
    println!(
        "warm-up: longest gap between two instructions to a zone {} ms",
        shared.warmup_gap_ms.load(Relaxed)
    );
    println!(
        "zones: longest without an instruction {gap} ms (median zone's longest {} ms; {late} of {zones} zones waited more than an interval); the simulated zones used {own:.2} cores",
        gaps[gaps.len() / 2]
    );
    println!("wire: {up:.2} B/row up, {down:.2} B/row down");
    println!(
        "surge x{SURGE_FACTOR} of one bucket ({SURGE_RPS} rps, limit {SURGE_LIMIT}): admitted / limit per second from the step {surge:?}; other buckets told to drop: {dropping}"
    );
    let raw = serde_json::json!({
            "zones": zones,
            "children": if regions { "regions" } else { "zones" },
            "buckets": plan.demand.iter().map(Vec::len).sum::<usize>(),
            "classed_buckets": (0..plan.demand.len())
                .map(|s| (0..plan.demand[s].len()).filter(|&b| plan.classed(s, b)).count())
                .sum::<usize>(),
            "services": services,
            "region_rps": rps,
            "seconds": seconds,
            "tick_p50_ms": ms(p50),
            "tick_p99_ms": ms(p99),
            "ticks_per_second": (ticks / span * 10.0).round() / 10.0,
            "controller_cores": (cores * 1000.0).round() / 1000.0,
            "controller_rss_mib": rss.round(),
            "worst_zone_gap_ms": gap,
            "zones_late": late,
            "simulation_cores": (own * 1000.0).round() / 1000.0,
            "bytes_per_row_up": (up * 100.0).round() / 100.0,
            "bytes_per_row_down": (down * 100.0).round() / 100.0,
            "surge_admitted_over_limit": surge,
            "other_buckets_dropping": dropping,
            "operator": operator,
    });
    println!("{raw}");
    figures_row(&raw, regions);
    for t in tasks {
        t.abort();
    }
    drop(ctl);
}

/// The headline row `region` (`region_global` with `REGION_CHILDREN=regions`) from the
/// run's JSON.
fn figures_row(raw: &serde_json::Value, regions: bool) {
    let num = |k: &str| raw[k].as_f64().unwrap_or(f64::NAN);
    let ms = |k: &str| {
        raw[k]
            .as_f64()
            .map_or_else(|| "no figure".into(), |v| format!("{v:.1} ms"))
    };
    let (zones, buckets) = (num("zones"), num("buckets"));
    let surge: Vec<String> = raw["surge_admitted_over_limit"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| format!("{:.2}x", v.as_f64().unwrap_or(f64::NAN)))
                .collect()
        })
        .unwrap_or_default();
    let child = if regions { "region" } else { "zone" };
    let what = format!(
        "one {}: a controller fed by {} simulated {child} streams × {} buckets ({} bucket rows an interval, wire version 2; the {child}s are streams in the bench's process, no request is sent)",
        if regions {
            "global controller"
        } else {
            "region"
        },
        figures_out::thousands(zones),
        figures_out::thousands(buckets),
        figures_out::thousands(zones * buckets),
    );
    let figure = format!(
        "tick p50 {}, **p99 {}** (target ≤ 50 ms), **{:.2} cores** (≤ 0.5), {:.0} MiB (≤ 1 GiB), every {child} instructed within {:.0} ms, {:.1} bytes a row up and {:.1} down; a bucket surging {SURGE_FACTOR}x: admitted by the allowance arithmetic (each {child} admits min(demand, its allowance)) {} its limit in each second from the step, {} other buckets told to drop",
        ms("tick_p50_ms"),
        ms("tick_p99_ms"),
        num("controller_cores"),
        num("controller_rss_mib"),
        num("worst_zone_gap_ms"),
        num("bytes_per_row_up"),
        num("bytes_per_row_down"),
        surge.join(", "),
        num("other_buckets_dropping"),
    );
    let mut sizes = vec![
        ("REGION_ZONES", raw["zones"].to_string()),
        ("REGION_BUCKETS", raw["buckets"].to_string()),
        ("REGION_SERVICES", raw["services"].to_string()),
        ("REGION_SECONDS", raw["seconds"].to_string()),
        ("REGION_RPS", format!("{}", num("region_rps"))),
    ];
    if regions {
        sizes.push(("REGION_CHILDREN", "regions".into()));
    }
    figures_out::write(&figures_out::Row {
        row: if regions { "region_global" } else { "region" },
        what,
        figure,
        command: figures_out::command(&sizes, "cargo bench -p grl --bench region"),
        figures_json: raw.to_string(),
    });
}

/// What the operator probe saw.
#[derive(Debug, Clone, Default)]
struct OperatorSeen {
    status_count: u32,
    status_ms_max: f64,
    page_count: u32,
    page_ms_max: f64,
    page_bytes: usize,
}

static OPERATOR_SEEN: Mutex<OperatorSeen> = Mutex::new(OperatorSeen {
    status_count: 0,
    status_ms_max: 0.0,
    page_count: 0,
    page_ms_max: 0.0,
    page_bytes: 0,
});

/// Once a second: `Status` with detail over gRPC, then the `/status` page, each timed.
async fn operator_probe(addr: String, metrics: String) {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut tier = TierClient::new(channel).max_decoding_message_size(256 << 20);
    let http = reqwest::Client::new();
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let t = Instant::now();
        let ok = tier
            .status(proto::StatusRequest {
                service: String::new(),
                detail: true,
            })
            .await
            .is_ok();
        let status_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let page = match http.get(format!("http://{metrics}/status")).send().await {
            Ok(r) => r.bytes().await.map_or(0, |b| b.len()),
            Err(_) => 0,
        };
        let page_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut seen = OPERATOR_SEEN.lock().unwrap();
        if ok {
            seen.status_count += 1;
            seen.status_ms_max = seen.status_ms_max.max(status_ms);
        }
        if page > 0 {
            seen.page_count += 1;
            seen.page_ms_max = seen.page_ms_max.max(page_ms);
            seen.page_bytes = page;
        }
    }
}
