//! `grl sidecar`: enforcement for a service in any language. One process next to the
//! service holds a [`grl_client::Client`] (the same local decisions, control stream and
//! metrics as a Rust service linking the client) and offers it two ways:
//!
//! * [`proxy`]: a reverse proxy (HTTP/1.1 and h2c, so gRPC, or either over TLS) in front
//!   of the service;
//! * [`rls`]: Envoy's rate limit service v3, for an Envoy or Istio proxy in the same pod;
//! * [`rlqs`]: Envoy's rate limit quota service v3 on the same port, for Envoy's
//!   `rate_limit_quota` filter, which then enforces by itself with this client's share.
//!
//! What a refusal says (made by [`grl_client::RefusingBucket`], where the choice is argued):
//!
//! | header | proxy, HTTP 429 | proxy, gRPC RESOURCE_EXHAUSTED (trailers-only) | rls, `OVER_LIMIT` (`response_headers_to_add`) | rlqs |
//! |---|---|---|---|---|
//! | `grl-bucket: <service>/<bucket>` | yes | yes | yes | no |
//! | `RateLimit-Policy: "<service>/<bucket>";q=<limit>;w=1` | when the bucket has a limit | same | same | no |
//! | `RateLimit` (`r`, `t`) | never | never | never | no |
//! | `Retry-After: <interval, s>` | yes | yes | no | no |
//! | `x-grl-reason` | yes | no (`grpc-message`) | no | no |
//!
//! The bucket named is the one whose draw refused the request (the request's own when a
//! bucket in addition refused too). A quota assignment of the rate limit quota service has
//! no place for response headers (Envoy's `deny_response_settings` are its own config),
//! so Envoy's refusals under [`rlqs`] carry none of these.
//!
//! [`start`] binds nothing itself: it serves on listeners the caller made (port 0 in tests)
//! and returns a [`RunningSidecar`]. [`metrics`] renders `/metrics`; [`envoy`] is the
//! generated API; [`names`] bounds the callers and procedures Envoy hands over;
//! [`port_metrics`] counts what the proxy's port refuses; [`readiness`] says whether
//! anything is enforced (`/ready` beside `/metrics`).

pub mod envoy;
mod exposition;
pub mod metrics;
pub mod names;
pub mod port_metrics;
pub mod proxy;
pub mod readiness;
pub mod rlqs;
pub mod rls;

use std::net::SocketAddr;
use std::sync::Arc;

use grl_client::Client;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tracing::error;

use metrics::SidecarMetrics;
use proxy::{Proxy, ProxyError, ProxyOptions};
use rls::Rls;

/// How the sidecar is set up (the client's own settings are in its `ClientConfig`).
#[derive(Debug, Clone)]
pub struct SidecarOptions {
    /// The proxy's settings.
    pub proxy: ProxyOptions,
    /// The descriptor entry key naming the caller in rate limit service requests.
    pub rls_caller_key: String,
    /// The descriptor entry key naming the procedure in rate limit service requests.
    pub rls_procedure_key: String,
    /// TLS on the rate limit service's port (mutual with a client CA); `None`: plaintext,
    /// for an Envoy in the same pod or host.
    pub rls_tls: Option<Arc<crate::net::tls::ServerTls>>,
    /// The most rate limit quota streams open at once; past it a new one is refused with
    /// `RESOURCE_EXHAUSTED`.
    pub rlqs_max_streams: usize,
}

/// The listeners the sidecar serves on.
#[derive(Debug)]
pub struct Listeners {
    /// The proxy.
    pub proxy: TcpListener,
    /// `/metrics`, if served.
    pub metrics: Option<TcpListener>,
    /// The rate limit service (gRPC), if served.
    pub rls: Option<TcpListener>,
}

/// A started sidecar: its addresses and its tasks; dropping it stops them.
#[derive(Debug)]
pub struct RunningSidecar {
    /// The proxy's address.
    pub addr: SocketAddr,
    /// The `/metrics` address, if served.
    pub metrics_addr: Option<SocketAddr>,
    /// The rate limit service's address, if served.
    pub rls_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningSidecar {
    /// Waits until the proxy stops accepting.
    pub async fn wait(mut self) {
        if let Some(first) = self.tasks.first_mut() {
            let _ = first.await;
        }
    }
}

impl Drop for RunningSidecar {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Serves the proxy, and the rate limit service and `/metrics` when given listeners, all
/// deciding with `client` (whose control-plane task the caller spawns).
pub fn start(
    client: Client,
    opts: &SidecarOptions,
    listeners: Listeners,
) -> Result<RunningSidecar, StartError> {
    let metrics = Arc::new(SidecarMetrics::default());
    let proxy = Arc::new(Proxy::new(client.clone(), &opts.proxy, metrics.clone())?);
    let (tx, rx) = watch::channel(false);
    let addr = listeners.proxy.local_addr()?;
    let mut tasks = vec![tokio::spawn(proxy::serve(
        listeners.proxy,
        proxy,
        rx.clone(),
    ))];
    let rls_addr = match listeners.rls {
        Some(l) => {
            let a = l.local_addr()?;
            let svc = Rls::new(
                client.clone(),
                opts.rls_caller_key.clone(),
                opts.rls_procedure_key.clone(),
                metrics.clone(),
            )
            .into_server();
            let quota = rlqs::Rlqs::new(
                client.clone(),
                &opts.rls_caller_key,
                &opts.rls_procedure_key,
                metrics.clone(),
            )
            .max_streams(opts.rlqs_max_streams)
            .into_server();
            let mut rx = rx.clone();
            let tls = opts.rls_tls.clone();
            tasks.push(tokio::spawn(async move {
                let router = tonic::transport::Server::builder()
                    .add_service(svc)
                    .add_service(quota);
                let stop = async move {
                    let _ = rx.wait_for(|s| *s).await;
                };
                let served = match tls {
                    Some(t) => {
                        let incoming = crate::net::tls_accept::incoming(l, t);
                        router.serve_with_incoming_shutdown(incoming, stop).await
                    }
                    None => {
                        let incoming = tokio_stream::wrappers::TcpListenerStream::new(l).map(|s| {
                            s.inspect(|s| {
                                let _ = s.set_nodelay(true);
                            })
                        });
                        router.serve_with_incoming_shutdown(incoming, stop).await
                    }
                };
                if let Err(e) = served {
                    error!(error = %e, "rate limit service failed");
                }
            }));
            Some(a)
        }
        None => None,
    };
    let metrics_addr = match listeners.metrics {
        Some(l) => {
            let a = l.local_addr()?;
            let rx = rx.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(e) = admin(l, client, metrics, rx).await {
                    error!(error = %e, "metrics server failed");
                }
            }));
            Some(a)
        }
        None => None,
    };
    Ok(RunningSidecar {
        addr,
        metrics_addr,
        rls_addr,
        shutdown: tx,
        tasks,
    })
}

/// Serves `/metrics`, `/ready` (200, or 503 with the reason while nothing is enforced)
/// and `/healthz` (200 while the process serves) until `shutdown` turns true.
async fn admin(
    listener: TcpListener,
    client: Client,
    metrics: Arc<SidecarMetrics>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    use axum::http::{StatusCode, header};
    use axum::routing::get;
    let ready_client = client.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let (client, metrics) = (client.clone(), metrics.clone());
                async move {
                    let mut body = metrics.render(&client);
                    let service = client.config().service.replace(['\\', '"', '\n'], "_");
                    readiness::Readiness::of(&client.status()).render(&mut body, &service);
                    (
                        [(
                            header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        body,
                    )
                }
            }),
        )
        .route(
            "/ready",
            get(move || {
                let client = ready_client.clone();
                async move {
                    let r = readiness::Readiness::of(&client.status());
                    let code = if r == readiness::Readiness::Ready {
                        StatusCode::OK
                    } else {
                        StatusCode::SERVICE_UNAVAILABLE
                    };
                    (code, format!("{}: {}\n", r.reason(), r.sentence(&client)))
                }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }));
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await
}

/// Why the sidecar could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A flag of the proxy is invalid.
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    /// A listener could not be used.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
}
