//! The controller: holds the config snapshot (from a directory, a git clone, or
//! `ApplyConfig`) plus incident overrides, sums its children's totals, and computes the
//! ratios of `region` buckets (per region) and of `global` buckets when it has no parent.
//! With a parent it forwards its region totals up and takes global ratios and config from it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

use super::config_follow::{self, Apply, FollowError, GitFollower, Refused};
pub use super::controller_state::{Controller, now_unix};
use super::engine::node::Node;
use super::engine::node_config::NodeConfig;
use super::observe::{metrics, status};
use super::overrides::Overrides;
use super::tier_service::TierService;
use super::{Running, StartError, launch, uplink};
use grl_config::{self as config, Scope, Snapshot};
use grl_core::proto;

/// Where the config comes from.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    /// A directory, polled for changes.
    Dir(PathBuf),
    /// A git URL, cloned and fetched, and the branch to read (`main`, or the region's
    /// `regions/<region>` moved by a staged rollout).
    Git(String, String),
    /// Only `ApplyConfig` (or the parent).
    None,
}

/// How to run a controller.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Its region ("" for a global controller of several regions).
    pub region: String,
    /// The parent controllers (several when they run active/standby; the leader is
    /// followed), if this one is regional.
    pub parents: Vec<String>,
    /// Active/standby: campaign for leadership and serve children only while leading.
    /// `None`: this controller always leads.
    pub election: Option<super::election::ElectionOptions>,
    /// Reporting interval.
    pub interval: Duration,
    /// Where the config comes from.
    pub config: ConfigSource,
    /// How often to look for config changes.
    pub poll: Duration,
    /// TLS on the port and to the parent, who may report and who may make admin calls.
    pub security: super::Security,
}

/// Loads the initial config (refusing to start when it is invalid) and starts serving
/// `Tier` and `Control` on `listener`.
pub async fn start(
    opts: ControllerOptions,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
) -> Result<(Running, Arc<Controller>), StartError> {
    let addr = listener.local_addr()?;
    let (initial, git) = match &opts.config {
        ConfigSource::Dir(d) => {
            let d = d.clone();
            let loaded = tokio::task::spawn_blocking(move || config::load_dir(&d, None))
                .await
                .map_err(std::io::Error::other)?;
            (loaded.map_err(FollowError::Invalid)?, None)
        }
        ConfigSource::Git(url, config_ref) => {
            let (url, config_ref) = (url.clone(), config_ref.clone());
            let (g, s) = tokio::task::spawn_blocking(move || {
                let g = GitFollower::clone(&url, &config_ref)?;
                let s = g.load()?;
                Ok::<_, FollowError>((g, s))
            })
            .await
            .map_err(std::io::Error::other)??;
            (s, Some(g))
        }
        ConfigSource::None => (Snapshot::default(), None),
    };
    let has_parent = !opts.parents.is_empty();
    let node = Arc::new(Node::new(NodeConfig {
        level: if has_parent {
            proto::Level::Region
        } else {
            proto::Level::Global
        },
        id: format!("controller-{}-{addr}", opts.region),
        zone: String::new(),
        region: opts.region.clone(),
        interval: opts.interval,
        scopes: if has_parent {
            vec![Scope::Region]
        } else {
            vec![Scope::Global, Scope::Region]
        },
        has_parent,
        validity_intervals: 5,
    }));
    node.start_learning(tokio::time::Instant::now());
    let ctl = Arc::new(Controller {
        node: node.clone(),
        snapshot: Mutex::new(Arc::new(Snapshot::default())),
        overrides: Mutex::new(Overrides::default()),
        apply_ok: AtomicU64::new(0),
        apply_invalid: AtomicU64::new(0),
        config_refused: AtomicU64::new(0),
        security: opts.security.clone(),
        election: opts.election.as_ref().map(|_| Arc::default()),
        published_epoch: AtomicU64::new(u64::MAX),
    });
    if ctl.admin().is_open() {
        tracing::warn!(
            "ADMIN CALLS ARE OPEN: anyone who reaches this port can apply a config or set \
             overrides (no --admin-allow, no --admin-token-file)"
        );
    }
    let initial_version = initial.version.clone();
    ctl.set_snapshot(initial);
    let (tx, rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let apply: Apply = {
        let c = ctl.clone();
        Arc::new(move |s| c.set_snapshot(s))
    };
    let refused: Refused = {
        let c = ctl.clone();
        Arc::new(move || {
            c.config_refused.fetch_add(1, Ordering::Relaxed);
        })
    };
    match (&opts.config, git) {
        (ConfigSource::Dir(d), _) => tasks.push(tokio::spawn(config_follow::follow_dir(
            d.clone(),
            opts.poll,
            initial_version.clone(),
            apply,
            refused,
            rx.clone(),
        ))),
        (_, Some(g)) => {
            let (poll, rx) = (opts.poll, rx.clone());
            tasks.push(tokio::task::spawn_blocking(move || {
                g.follow(poll, apply, refused, rx);
            }));
        }
        _ => {}
    }
    if has_parent {
        tasks.push(tokio::spawn(uplink::run(
            node.clone(),
            opts.parents.clone(),
            opts.security.uplink_tls.clone(),
            rx.clone(),
        )));
    }
    if let Some(e) = opts.election.clone() {
        let stats = ctl.election.clone().unwrap_or_default();
        tasks.extend(super::election::spawn(e, node.clone(), rx.clone(), stats)?);
    }
    let scheduler = ctl.clone();
    tasks.push(tokio::spawn(async move {
        loop {
            let next = scheduler.follow_schedule();
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            // Wakes at the next start or end (a config change is seen within a second).
            let until_next = next.map_or(Duration::from_secs(1), |t| {
                Duration::from_secs(t.max(0) as u64).saturating_sub(now)
            });
            tokio::time::sleep(until_next.clamp(Duration::from_millis(1), Duration::from_secs(1)))
                .await;
        }
    }));
    let expirer = ctl.clone();
    tasks.push(tokio::spawn(async move {
        let mut t = tokio::time::interval(Duration::from_secs(1));
        loop {
            t.tick().await;
            expirer.expire_overrides();
        }
    }));
    let hook = ctl.status_hook();
    let routes = tonic::service::Routes::new(super::tier_service::tier_server(
        TierService::new(node.clone(), rx.clone(), Some(hook.clone()))
            .with_children(opts.security.children.clone()),
    ))
    .add_service(
        proto::control_server::ControlServer::new(super::control_service::ControlService::new(
            ctl.clone(),
        ))
        .max_decoding_message_size(grl_core::wire::MAX_CONTROL_MESSAGE_BYTES)
        .max_encoding_message_size(grl_core::wire::MAX_CONTROL_MESSAGE_BYTES),
    );
    let m = metrics_listener.map(|l| {
        let c = ctl.clone();
        let metrics_hook = hook.clone();
        let render: crate::net::admin::Render = Arc::new(move || {
            let mut st = status::status(&c.node, Instant::now());
            metrics_hook(&mut st);
            metrics::render(&st, &c.counters())
        });
        let c = ctl.clone();
        let site = crate::net::admin::Site {
            metrics: render,
            status: Arc::new(move |req| {
                let mut st = status::status_of(&c.node, Instant::now(), req);
                hook(&mut st);
                st
            }),
            auth: opts.security.admin.clone(),
            interval: opts.interval,
            http: opts.security.admin_http.clone(),
        };
        (l, site)
    });
    let tls = opts.security.server_tls.clone();
    let running = launch(node, routes, listener, m, (tx, rx), tasks, tls)?;
    Ok((running, ctl))
}
