//! The zone aggregator: sums its clients' reports, forwards the zone totals to the
//! controller every quarter interval, computes `scope: zone` ratios itself and passes the
//! controller's ratios down with their remaining validity.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use super::engine::node::Node;
use super::engine::node_config::NodeConfig;
use super::observe::metrics::{self, Counters};
use super::observe::status;
use super::tier_service::TierService;
use super::{Running, StartError, launch, uplink};
use grl_config::Scope;
use grl_core::proto;

/// How to run an aggregator.
#[derive(Debug, Clone)]
pub struct AggregatorOptions {
    /// Its zone.
    pub zone: String,
    /// Its region.
    pub region: String,
    /// The controllers' addresses (`host:port` or URL): one, or a region's active/standby
    /// controllers, of which the leader is followed.
    pub controllers: Vec<String>,
    /// Reporting interval.
    pub interval: Duration,
    /// TLS on the port and to the controller, and which clients may report.
    pub security: super::Security,
}

/// Starts an aggregator serving `Tier` on `listener` (and `/metrics` on `metrics`).
pub fn start(
    opts: AggregatorOptions,
    listener: TcpListener,
    metrics: Option<TcpListener>,
) -> Result<Running, StartError> {
    if opts.controllers.is_empty() {
        return Err(StartError::Io(std::io::Error::other(
            "an aggregator needs at least one controller",
        )));
    }
    let addr = listener.local_addr()?;
    let node = Arc::new(Node::new(NodeConfig {
        level: proto::Level::Zone,
        id: format!("aggregator-{}-{addr}", opts.zone),
        zone: opts.zone.clone(),
        region: opts.region.clone(),
        interval: opts.interval,
        scopes: vec![Scope::Zone],
        has_parent: true,
        validity_intervals: 5,
    }));
    node.start_learning(tokio::time::Instant::now());
    let (tx, rx) = watch::channel(false);
    let routes = tonic::service::Routes::new(super::tier_service::tier_server(
        TierService::new(node.clone(), rx.clone(), None)
            .with_children(opts.security.children.clone()),
    ));
    let up = tokio::spawn(uplink::run(
        node.clone(),
        opts.controllers.clone(),
        opts.security.uplink_tls.clone(),
        rx.clone(),
    ));
    let m = metrics.map(|l| {
        let n = node.clone();
        let sec = opts.security.clone();
        let render: crate::net::admin::Render = Arc::new(move || {
            let st = status::status(&n, tokio::time::Instant::now());
            metrics::render(&st, &counters(&n, &sec))
        });
        let n = node.clone();
        let site = crate::net::admin::Site {
            metrics: render,
            status: Arc::new(move |req| status::status_of(&n, tokio::time::Instant::now(), req)),
            auth: opts.security.admin.clone(),
            interval: node.cfg.interval,
            http: opts.security.admin_http.clone(),
        };
        (l, site)
    });
    let tls = opts.security.server_tls.clone();
    launch(node, routes, listener, m, (tx, rx), vec![up], tls)
}

/// The byte, TLS and refusal counters of a node.
pub(crate) fn counters(n: &Node, sec: &super::Security) -> Counters {
    use std::sync::atomic::Ordering::Relaxed;
    Counters {
        apply_ok: None,
        apply_invalid: 0,
        config_refused: 0,
        reports_in: n.bytes.reports_in.load(Relaxed),
        instructions_out: n.bytes.instructions_out.load(Relaxed),
        ticks: n.ticks.snapshot(),
        reports_refused: {
            let refused = n.refused.snapshot();
            std::array::from_fn(|i| refused[i].1)
        },
        tls: sec.server_tls.as_ref().map(|t| t.snapshot()),
        admin_http_tls: sec.admin_http.tls.as_ref().map(|t| t.snapshot()),
        child_refused: sec.children.refused.snapshot(),
        admin_refused: sec.admin.refused.snapshot(),
        election: Vec::new(),
        admin_plaintext_tokens: sec.admin.plaintext_tokens.load(Relaxed),
    }
}
