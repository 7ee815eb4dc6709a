//! The proxy's port: accepts connections up to `--max-connections` (one more is closed at
//! once, counted, and logged at most once a second), speaks TLS on them when given a
//! certificate (offering HTTP/2 and HTTP/1.1 by ALPN, and reading the caller's identity from
//! its client certificate), and serves each under [`conn`](super::conn)'s watch.
//!
//! HTTP settings bound what one connection may make the sidecar hold: a request head of at
//! most [`MAX_HEAD_BYTES`] (HTTP/1.1: its read buffer; HTTP/2: its header list), 100 header
//! fields (HTTP/1.1), 200 concurrent streams (HTTP/2); beyond, hyper answers 431 or resets
//! the stream. Rapid resets of HTTP/2 streams end in GOAWAY (hyper's defaults).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use super::Proxy;
use super::caller::{self, CallerError};
use super::conn::{self, Serving, Timeouts};
use crate::net::log_limit::RefusalLog;
use crate::net::tls::ServerTls;
use crate::sidecar::port_metrics::Closed;

/// Largest request head accepted, in bytes (Envoy's default is 60 KiB).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Default of `--header-timeout-ms`.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of `--idle-timeout-ms`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// How the port accepts and keeps connections.
#[derive(Debug, Clone)]
pub struct PortOptions {
    /// The header and idle timeouts.
    pub timeouts: Timeouts,
    /// Most connections open at once.
    pub max_connections: usize,
    /// TLS on the port; with a client CA, the client certificate names the caller.
    pub tls: Option<Arc<ServerTls>>,
}

impl Default for PortOptions {
    fn default() -> Self {
        Self {
            timeouts: Timeouts {
                header: DEFAULT_HEADER_TIMEOUT,
                idle: DEFAULT_IDLE_TIMEOUT,
            },
            max_connections: DEFAULT_MAX_CONNECTIONS,
            tls: None,
        }
    }
}

/// The HTTP settings of every connection.
fn http_builder() -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    // No HTTP/1.1 timer: hyper's own header timeout would also close idle connections.
    b.http1().max_buf_size(MAX_HEAD_BYTES);
    b.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEAD_BYTES as u32)
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));
    b
}

/// The TLS acceptor of the port: the tier's (reloaded when its files change) with ALPN
/// offering HTTP/2 and HTTP/1.1, remade only when the tier's changes.
#[derive(Debug)]
struct Acceptor {
    tls: Arc<ServerTls>,
    made: Mutex<Option<(Arc<ServerConfig>, Arc<ServerConfig>)>>,
}

impl Acceptor {
    fn get(&self) -> TlsAcceptor {
        let base = self.tls.acceptor();
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((from, ours)) = made.as_ref()
            && Arc::ptr_eq(from, base.config())
        {
            return TlsAcceptor::from(ours.clone());
        }
        let mut cfg = (**base.config()).clone();
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let ours = Arc::new(cfg);
        *made = Some((base.config().clone(), ours.clone()));
        TlsAcceptor::from(ours)
    }
}

/// Accepts connections on `listener` until `shutdown` turns true, serving each with
/// HTTP/1.1 or HTTP/2 as the peer speaks.
pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>, mut shutdown: watch::Receiver<bool>) {
    let port = proxy.port.clone();
    let serving = Serving {
        proxy: proxy.clone(),
        builder: http_builder(),
        timeouts: port.timeouts,
    };
    let acceptor = port.tls.clone().map(|tls| {
        Arc::new(Acceptor {
            tls,
            made: Mutex::new(None),
        })
    });
    let slots = Arc::new(Semaphore::new(port.max_connections));
    let mut over_cap_log = RefusalLog::new(Duration::from_secs(1));
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => return,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            proxy.metrics.port.closed(Closed::MaxConnections);
            if let Some(unlogged) = over_cap_log.admit(tokio::time::Instant::now()) {
                warn!(
                    %peer,
                    max = port.max_connections,
                    not_logged = unlogged,
                    "connection refused: --max-connections are open"
                );
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (serving, acceptor) = (serving.clone(), acceptor.clone());
        tokio::spawn(async move {
            let metrics = serving.proxy.metrics.clone();
            metrics.port.connection_opened();
            let activity = conn::activity();
            match acceptor {
                None => conn::serve(stream, peer, None, serving, activity).await,
                Some(a) => handshake_then_serve(stream, peer, &a, serving, activity).await,
            }
            metrics.port.connection_ended();
            drop(slot);
        });
    }
}

/// Completes the TLS handshake within the header timeout, then serves the connection with
/// the caller its client certificate names.
async fn handshake_then_serve(
    tcp: TcpStream,
    peer: SocketAddr,
    acceptor: &Acceptor,
    serving: Serving,
    activity: Arc<conn::Activity>,
) {
    let accepted = tokio::time::timeout(serving.timeouts.header, acceptor.get().accept(tcp)).await;
    let tls = match accepted {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return handshake_failed(&acceptor.tls, &serving, peer, &e.to_string()),
        Err(_) => return handshake_failed(&acceptor.tls, &serving, peer, "timed out"),
    };
    let identity = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map_or(Err(CallerError::NoIdentity), |leaf| {
            caller::of_certificate(leaf).map(Arc::<str>::from)
        });
    conn::serve(tls, peer, Some(identity), serving, activity).await;
}

fn handshake_failed(tls: &ServerTls, serving: &Serving, peer: SocketAddr, error: &str) {
    tls.counters
        .handshake_failures
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    serving.proxy.metrics.port.closed(Closed::TlsHandshake);
    debug!(%peer, error, "TLS handshake failed");
}
