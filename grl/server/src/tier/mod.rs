//! The aggregator and controller tiers. The roles here: [`aggregator`] and [`controller`]
//! (starting each), the `Tier` and `Control` gRPC services ([`tier_service`],
//! [`control_service`]), the [`uplink`] to the parent, [`config_follow`]ing, incident
//! [`overrides`], and which of several controllers leads ([`election`]). They drive the
//! feedback-loop [`engine`] (a [`Node`]: children, ratios, parent state, instructions) and
//! are seen through [`observe`] (metrics, status). Their [`Security`] (TLS on the port, who
//! may report or make admin calls) and admin HTTP serving come from [`crate::net`].
//!
//! [`aggregator::start`] and [`controller::start`] bind nothing themselves: they serve on
//! listeners the caller made (port 0 in tests) and return a [`Running`] handle.

pub mod aggregator;
pub mod config_follow;
pub mod control_service;
pub mod controller;
mod controller_state;
pub mod election;
pub mod engine;
pub mod observe;
pub mod overrides;
pub mod tier_service;
pub mod uplink;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::net::{admin, auth, tls, tls_accept};
use engine::node::Node;

/// A hash map with a fast non-cryptographic hasher, for the tiers' indexes of names that
/// are rebuilt every tick (the default SipHash was a sixth of an aggregator's CPU at 5,000
/// clients). Keys come from authenticated children and the config; the per-process random
/// seed still varies the layout.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Why a tier could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The initial config is invalid or unreadable.
    #[error("{0}")]
    Config(#[from] config_follow::FollowError),
    /// A listener could not be used.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// The election is misconfigured.
    #[error("{0}")]
    Election(#[from] election::ElectionError),
}

/// TLS and authorisation of a tier. The default is the plaintext demo: no TLS, every child
/// and (on a controller) every admin call accepted.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// TLS on this tier's gRPC port (mutual when it has a client CA).
    pub server_tls: Option<Arc<tls::ServerTls>>,
    /// TLS to the parent: its CA, and this tier's own certificate as client identity.
    pub uplink_tls: Option<grl_core::tls::ClientTls>,
    /// Which children may open a report stream.
    pub children: Arc<auth::ChildAuth>,
    /// Who may make admin calls (controllers).
    pub admin: Arc<auth::AdminAuth>,
    /// TLS on the admin HTTP port, and whether it takes credentials in the clear.
    pub admin_http: admin::AdminHttp,
}

/// A started tier: its addresses, its node, and its tasks.
pub struct Running {
    /// The gRPC address.
    pub addr: SocketAddr,
    /// The `/metrics` address, if served.
    pub metrics_addr: Option<SocketAddr>,
    /// The tier's state.
    pub node: Arc<Node>,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("addr", &self.addr)
            .field("metrics_addr", &self.metrics_addr)
            .finish_non_exhaustive()
    }
}

impl Running {
    /// Waits until the gRPC server stops.
    pub async fn wait(mut self) {
        let _ = (&mut self.server).await;
        self.stop();
    }

    /// Stops serving at once: children's streams end, listeners close.
    pub fn stop(&mut self) {
        let _ = self.shutdown.send(true);
        self.node.drop_children();
        self.server.abort();
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How long a tier waits after an urgent report before recomputing, so that the urgent
/// reports of one change (every instance of a caller sees it within a window) make one tick.
pub(crate) const URGENT_COALESCE: std::time::Duration = std::time::Duration::from_millis(5);

/// Serves `routes` on `listener`, ticks `node` every quarter interval (and at once after an
/// urgent report), re-instructs its quiet children halfway between ticks, and serves
/// `/metrics` and `/status` when asked.
pub(crate) fn launch(
    node: Arc<Node>,
    routes: tonic::service::Routes,
    listener: tokio::net::TcpListener,
    metrics: Option<(tokio::net::TcpListener, admin::Site)>,
    shutdown: (watch::Sender<bool>, watch::Receiver<bool>),
    mut tasks: Vec<JoinHandle<()>>,
    server_tls: Option<Arc<tls::ServerTls>>,
) -> Result<Running, StartError> {
    let addr = listener.local_addr()?;
    let (tx, rx) = shutdown;
    let server = tokio::spawn(async move {
        let builder = tonic::transport::Server::builder().add_routes(routes);
        let served = match server_tls {
            Some(t) => {
                builder
                    .serve_with_incoming(tls_accept::incoming(listener, t))
                    .await
            }
            None => {
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                builder.serve_with_incoming(incoming).await
            }
        };
        if let Err(e) = served {
            tracing::error!(error = %e, "grpc server failed");
        }
    });
    let metrics_addr = match metrics {
        Some((l, site)) => {
            let a = l.local_addr()?;
            let rx = rx.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(e) = admin::serve_site(l, site, rx).await {
                    tracing::error!(error = %e, "metrics server failed");
                }
            }));
            Some(a)
        }
        None => None,
    };
    let ticker = node.clone();
    tasks.push(tokio::spawn(async move {
        let mut t = tokio::time::interval(ticker.cfg.interval / 8);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut half = false;
        loop {
            tokio::select! {
                _ = t.tick() => {
                    half = !half;
                    if half {
                        ticker.instruct_due(tokio::time::Instant::now());
                        continue;
                    }
                }
                () = ticker.wake.notified() => {
                    // Lets the urgent reports of the same moment arrive, then one tick.
                    tokio::time::sleep(URGENT_COALESCE).await;
                }
            }
            ticker.tick(tokio::time::Instant::now());
        }
    }));
    Ok(Running {
        addr,
        metrics_addr,
        node,
        shutdown: tx,
        server,
        tasks,
    })
}
