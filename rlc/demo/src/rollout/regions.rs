//! The rollout demo's two regions, in-process: per region a controller following
//! `regions/<region>` of the demo's config repo, a zone aggregator and two clients; the
//! partner's traffic offered to both; and a watcher that prints each region's version and
//! the partner's bucket there every second, as `grl status` would show it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use grl::tier::Running;
use grl::tier::aggregator::{self, AggregatorOptions};
use grl::tier::controller::{self, ConfigSource, ControllerOptions};
use grl_client::{Client, ClientConfig};
use rlc::drive::rollout::outcome::short;
use tokio::net::TcpListener;
use tokio::time::Instant;

use super::{BUCKET, CALLER, SERVICE};

/// One region's tiers.
pub(super) struct Region {
    /// Its name (`r1`, `r2`).
    pub name: &'static str,
    /// Its controller's gRPC address.
    pub addr: String,
    _controller: Running,
    _aggregator: Running,
    clients: Vec<Client>,
}

/// The regions, and the traffic offered to them until dropped.
pub(super) struct Regions {
    /// In wave order.
    pub regions: Vec<Region>,
    traffic: tokio::task::JoinHandle<()>,
}

impl Drop for Regions {
    fn drop(&mut self) {
        self.traffic.abort();
    }
}

impl Regions {
    /// Starts each region's tiers on `repo` (a path or URL), offers `rps` of the partner's
    /// calls to each, and returns once every client has a config.
    pub(super) async fn start(
        repo: &str,
        names: &[&'static str],
        interval: Duration,
        rps: f64,
    ) -> anyhow::Result<Regions> {
        let mut regions = Vec::new();
        for name in names {
            regions.push(start_region(repo, name, interval).await?);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while regions
            .iter()
            .flat_map(|r| &r.clients)
            .any(|c| c.status().config_version.is_empty())
        {
            anyhow::ensure!(Instant::now() < deadline, "the clients got no config");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let feeds = regions.iter().map(|r| r.clients.clone()).collect();
        let traffic = tokio::spawn(offer(feeds, rps));
        Ok(Regions { regions, traffic })
    }

    /// Every controller's address.
    pub(super) fn controllers(&self) -> Vec<String> {
        self.regions.iter().map(|r| r.addr.clone()).collect()
    }

    /// What each region's controller shows now.
    pub(super) async fn sample(&self) -> Vec<(&'static str, Option<RegionView>)> {
        let mut out = Vec::new();
        for r in &self.regions {
            let view = rlc::output::to_controllers::status(&r.addr, &Default::default(), true)
                .await
                .ok()
                .map(|st| RegionView::from_status(&st));
            out.push((r.name, view));
        }
        out
    }

    /// The version region `name`'s controller runs (empty if it does not answer).
    pub(super) async fn version(&self, name: &str) -> String {
        let Some(r) = self.regions.iter().find(|r| r.name == name) else {
            return String::new();
        };
        rlc::output::to_controllers::config_version(&r.addr, &Default::default())
            .await
            .unwrap_or_default()
    }
}

/// The partner's bucket in one region, as its controller shows it.
#[derive(Debug, Clone)]
pub(super) struct RegionView {
    /// The config version it runs.
    pub version: String,
    /// The bucket's limit.
    pub limit: Option<f64>,
    /// Offered and dropped rates.
    pub offered: f64,
    /// Dropped rate.
    pub dropped: f64,
}

impl RegionView {
    fn from_status(st: &grl_core::proto::StatusResponse) -> RegionView {
        let b = st
            .buckets
            .iter()
            .find(|b| b.service == SERVICE && b.bucket == BUCKET && !b.is_override);
        RegionView {
            version: st.config_version.clone(),
            limit: b.and_then(|b| b.limit_rps),
            offered: b.map_or(0.0, |b| b.offered),
            dropped: b.map_or(0.0, |b| b.dropped),
        }
    }

    fn cell(&self) -> String {
        let share = if self.offered > 0.0 {
            100.0 * self.dropped / self.offered
        } else {
            0.0
        };
        format!(
            "{} limit {:>4} offered {:>4.0} dropped {share:>5.1}%",
            short(&self.version),
            self.limit.map_or("none".into(), |l| format!("{l:.0}")),
            self.offered
        )
    }
}

/// Prints the regions each second while a rollout runs, and keeps the versions each ran.
#[derive(Debug)]
pub(super) struct Watch {
    started: Instant,
    /// Every version seen per region.
    pub seen: BTreeMap<&'static str, BTreeSet<String>>,
}

impl Watch {
    /// A watch starting now.
    pub(super) fn new() -> Watch {
        Watch {
            started: Instant::now(),
            seen: BTreeMap::new(),
        }
    }

    /// Samples the regions and prints one line.
    pub(super) async fn line(&mut self, regions: &Regions) {
        let cells: Vec<String> = regions
            .sample()
            .await
            .into_iter()
            .map(|(name, view)| match view {
                Some(v) => {
                    self.seen.entry(name).or_default().insert(v.version.clone());
                    format!("{name} {}", v.cell())
                }
                None => format!("{name} (no answer)"),
            })
            .collect();
        println!(
            "  {:>5.1}s  {}",
            self.started.elapsed().as_secs_f64(),
            cells.join("  |  ")
        );
    }

    /// Whether region `name` was seen running `commit`.
    pub(super) fn ran(&self, name: &str, commit: &str) -> bool {
        self.seen
            .get(name)
            .is_some_and(|s| s.iter().any(|v| v.split('+').next() == Some(commit)))
    }
}

async fn start_region(
    repo: &str,
    name: &'static str,
    interval: Duration,
) -> anyhow::Result<Region> {
    let (controller, _) = controller::start(
        ControllerOptions {
            region: name.into(),
            parents: Vec::new(),
            election: None,
            interval,
            config: ConfigSource::Git(repo.to_string(), format!("regions/{name}")),
            poll: Duration::from_millis(500),
            security: Default::default(),
        },
        TcpListener::bind("127.0.0.1:0").await?,
        None,
    )
    .await?;
    let zone = format!("{name}-a");
    let aggregator = aggregator::start(
        AggregatorOptions {
            zone: zone.clone(),
            region: name.into(),
            controllers: vec![controller.addr.to_string()],
            interval,
            security: Default::default(),
        },
        TcpListener::bind("127.0.0.1:0").await?,
        None,
    )?;
    let clients = (0..2)
        .map(|i| {
            let mut cfg = ClientConfig::new(SERVICE, format!("http://{}", aggregator.addr));
            cfg.zone = zone.clone();
            cfg.region = name.into();
            cfg.interval = interval;
            cfg.id = format!("demo-{name}-{i}");
            let c = Client::new(cfg);
            c.spawn();
            c
        })
        .collect();
    Ok(Region {
        name,
        addr: controller.addr.to_string(),
        _controller: controller,
        _aggregator: aggregator,
        clients,
    })
}

/// Offers `rps` of the partner's calls a second to each region's clients, until aborted.
async fn offer(feeds: Vec<Vec<Client>>, rps: f64) {
    let tick = Duration::from_millis(10);
    let mut ticker = tokio::time::interval(tick);
    let mut carry = vec![0.0f64; feeds.len()];
    let mut next = 0usize;
    loop {
        ticker.tick().await;
        for (clients, carry) in feeds.iter().zip(carry.iter_mut()) {
            *carry += rps * tick.as_secs_f64();
            while *carry >= 1.0 {
                *carry -= 1.0;
                next += 1;
                let _ = clients[next % clients.len()].decide(CALLER, "Pay/Charge");
            }
        }
    }
}
