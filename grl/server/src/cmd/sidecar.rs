//! `grl sidecar`: a reverse proxy and Envoy's rate limit service in front of one local
//! service, deciding with a client of the zone aggregator.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use grl::net::tls::{ServerTls, ServerTlsFiles};
use grl::sidecar::proxy::caller::CallerFrom;
use grl::sidecar::proxy::conn::Timeouts;
use grl::sidecar::proxy::listen::{
    DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
};
use grl::sidecar::proxy::{PortOptions, ProxyOptions, UpstreamProtocol};
use grl::sidecar::{self, Listeners, SidecarOptions};
use grl_client::{Client, ClientConfig};
use tracing::info;

/// Flags of `grl sidecar`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Address the proxy listens on (HTTP/1.1 and h2c).
    #[arg(long, default_value = "127.0.0.1:7400")]
    listen: String,
    /// The local service, `http://host:port`.
    #[arg(long)]
    upstream: String,
    /// The service the sidecar protects (its config in the config repo).
    #[arg(long)]
    service: String,
    /// The zone aggregator's address.
    #[arg(long)]
    aggregator: String,
    /// This instance's zone.
    #[arg(long)]
    zone: String,
    /// This instance's region.
    #[arg(long)]
    region: String,
    /// The request header naming the caller (absent: caller ""). Given twice, or not
    /// UTF-8: the request is refused with 400.
    #[arg(long, default_value = grl_client::layer::DEFAULT_CALLER_HEADER)]
    caller_header: String,
    /// Where the caller comes from: the caller header (anyone reaching the port can name any
    /// caller), or the client certificate (`peer-cert`: its first URI SAN, e.g. a SPIFFE ID,
    /// else its first DNS SAN; needs `--proxy-tls-client-ca`; the header is then ignored and
    /// removed before forwarding).
    #[arg(long, value_enum, default_value_t = CallerFrom::Header)]
    caller_from: CallerFrom,
    /// The request header naming its priority class within its bucket (absent: the
    /// bucket's default class). With `--caller-from peer-cert` it is still read from the
    /// request: the caller's own claim about how much its request matters.
    #[arg(long, default_value = grl_client::layer::DEFAULT_PRIORITY_HEADER)]
    priority_header: String,
    /// Certificate chain (PEM) served on `--listen`: the proxy then speaks TLS only
    /// (HTTP/1.1 and HTTP/2 by ALPN). Re-read when it changes.
    #[arg(long, value_name = "FILE", requires = "proxy_tls_key")]
    proxy_tls_cert: Option<PathBuf>,
    /// The private key of `--proxy-tls-cert` (PEM).
    #[arg(long, value_name = "FILE", requires = "proxy_tls_cert")]
    proxy_tls_key: Option<PathBuf>,
    /// CA (PEM) that callers' client certificates must chain to: mutual TLS on `--listen`.
    #[arg(long, value_name = "FILE", requires = "proxy_tls_cert")]
    proxy_tls_client_ca: Option<PathBuf>,
    /// Longest wait for a whole request head, in milliseconds: the first one counted from
    /// the connection's opening (TLS handshake included), a later one from its first byte.
    #[arg(long, default_value_t = DEFAULT_HEADER_TIMEOUT.as_millis() as u64, value_parser = super::validate::timeout_ms)]
    header_timeout_ms: u64,
    /// How long a connection may stay without a request in flight, in milliseconds.
    #[arg(long, default_value_t = DEFAULT_IDLE_TIMEOUT.as_millis() as u64, value_parser = super::validate::timeout_ms)]
    idle_timeout_ms: u64,
    /// Most connections open on `--listen` at once; one more is closed at once (each holds
    /// a file descriptor, two while forwarding: keep `ulimit -n` above twice this).
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS as u32, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_connections: u32,
    /// Address for `/metrics`, `/ready` (503 while the sidecar enforces nothing: no
    /// instructions from the aggregator, or `--service` unknown to the config) and `/healthz`.
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Address for Envoy's rate limit service (gRPC), for an Envoy or Istio proxy.
    #[arg(long)]
    rls_listen: Option<String>,
    /// Certificate chain (PEM) served on `--rls-listen`: the rate limit service then
    /// speaks TLS only (for an Envoy that is not in the same pod). Re-read when it changes.
    #[arg(long, value_name = "FILE", requires_all = ["rls_listen", "rls_tls_key"])]
    rls_tls_cert: Option<PathBuf>,
    /// The private key of `--rls-tls-cert` (PEM).
    #[arg(long, value_name = "FILE", requires = "rls_tls_cert")]
    rls_tls_key: Option<PathBuf>,
    /// CA (PEM) that rate limit service callers' client certificates must chain to (mutual
    /// TLS).
    #[arg(long, value_name = "FILE", requires = "rls_tls_cert")]
    rls_tls_client_ca: Option<PathBuf>,
    /// Descriptor entry key whose value is the caller, in rate limit service requests.
    #[arg(long, default_value = "source_cluster")]
    rls_caller_key: String,
    /// Descriptor entry key whose value is the procedure (a path), in rate limit service
    /// requests.
    #[arg(long, default_value = "path")]
    rls_procedure_key: String,
    /// The most rate limit quota (RLQS) streams open at once, on `--rls-listen`: Envoy opens
    /// one per `rate_limit_quota` filter config. A stream past it is refused with
    /// `RESOURCE_EXHAUSTED` (`grl_sidecar_rlqs_streams_total{code="resource_exhausted"}`).
    #[arg(long, default_value_t = grl::sidecar::rlqs::DEFAULT_MAX_STREAMS,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    rlqs_max_streams: u32,
    /// Longest wait for the upstream's response head, connecting included, in milliseconds.
    #[arg(long, default_value_t = 15_000, value_parser = super::validate::timeout_ms)]
    upstream_timeout_ms: u64,
    /// HTTP version of forwarded requests: the caller's (`auto`), or always one.
    #[arg(long, value_enum, default_value_t = UpstreamProtocol::Auto)]
    upstream_protocol: UpstreamProtocol,
    /// Reporting interval in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = super::validate::interval_ms)]
    interval_ms: u64,
    /// This instance's id at the aggregator (default: `$HOSTNAME` and the process id).
    #[arg(long, env = "GRL_INSTANCE_ID")]
    id: Option<String>,
    /// Threads that serve requests. 1 (the default, as linkerd2-proxy's) runs everything on
    /// one thread: no work stealing and no cross-thread wake-ups on the request path, which
    /// costs a sidecar sharing its pod's cores least; raise it for a busy service.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) threads: u16,
    #[command(flatten)]
    tls: super::tls_args::ClientTlsArgs,
}

/// Runs until SIGTERM or Ctrl-C.
pub(crate) async fn run(a: Args) -> anyhow::Result<()> {
    if a.caller_from == CallerFrom::PeerCert && a.proxy_tls_client_ca.is_none() {
        return Err(super::validate::Usage(
            "--caller-from peer-cert needs --proxy-tls-cert, --proxy-tls-key and \
             --proxy-tls-client-ca (callers then prove who they are with a client certificate)"
                .into(),
        )
        .into());
    }
    let mut cfg = ClientConfig::new(a.service, a.aggregator.clone());
    cfg.tls = a.tls.tls();
    cfg.zone = a.zone;
    cfg.region = a.region;
    cfg.interval = Duration::from_millis(a.interval_ms);
    cfg.id = a.id.unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "sidecar".into());
        format!("{host}-{}", std::process::id())
    });
    let client = Client::new(cfg);
    let listeners = Listeners {
        proxy: super::bind(&a.listen).await?,
        metrics: match &a.metrics_listen {
            Some(m) => Some(super::bind(m).await?),
            None => None,
        },
        rls: match &a.rls_listen {
            Some(m) => Some(super::bind(m).await?),
            None => None,
        },
    };
    let opts = SidecarOptions {
        proxy: ProxyOptions {
            upstream: a.upstream,
            caller_header: a.caller_header,
            caller_from: a.caller_from,
            priority_header: a.priority_header,
            timeout: Duration::from_millis(a.upstream_timeout_ms),
            protocol: a.upstream_protocol,
            port: PortOptions {
                timeouts: Timeouts {
                    header: Duration::from_millis(a.header_timeout_ms),
                    idle: Duration::from_millis(a.idle_timeout_ms),
                },
                max_connections: a.max_connections as usize,
                tls: match (a.proxy_tls_cert, a.proxy_tls_key) {
                    (Some(cert), Some(key)) => Some(Arc::new(
                        ServerTls::load(ServerTlsFiles {
                            cert,
                            key,
                            client_ca: a.proxy_tls_client_ca,
                        })
                        .context("--proxy-tls-cert/--proxy-tls-key/--proxy-tls-client-ca")?,
                    )),
                    _ => None,
                },
            },
        },
        rls_caller_key: a.rls_caller_key,
        rls_procedure_key: a.rls_procedure_key,
        rlqs_max_streams: a.rlqs_max_streams as usize,
        rls_tls: match (a.rls_tls_cert, a.rls_tls_key) {
            (Some(cert), Some(key)) => Some(Arc::new(
                ServerTls::load(ServerTlsFiles {
                    cert,
                    key,
                    client_ca: a.rls_tls_client_ca,
                })
                .context("--rls-tls-cert/--rls-tls-key/--rls-tls-client-ca")?,
            )),
            _ => None,
        },
    };
    let running = sidecar::start(client.clone(), &opts, listeners)?;
    let control = client.spawn();
    let interval = Duration::from_millis(a.interval_ms);
    let readiness = tokio::spawn(sidecar::readiness::watch(
        client.clone(),
        interval,
        (interval * 5).max(Duration::from_secs(2)),
        Duration::from_secs(60),
    ));
    info!(
        addr = %running.addr,
        rls = ?running.rls_addr,
        metrics = ?running.metrics_addr,
        upstream = %opts.proxy.upstream,
        "sidecar serving"
    );
    tokio::select! {
        () = running.wait() => {}
        () = super::terminated() => info!("terminated"),
    }
    control.abort();
    readiness.abort();
    Ok(())
}
