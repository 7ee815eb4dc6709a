//! The reverse proxy: decides every request with the client, answers drops itself and
//! forwards the rest to the one upstream, streaming bodies (and gRPC trailers) both ways.
//!
//! Downstream, each connection speaks HTTP/1.1 or HTTP/2 with prior knowledge (h2c, so gRPC
//! works), or either over TLS ([`listen`]), under a header and an idle timeout ([`conn`]);
//! upstream, a request goes out in the version it came in (or the one forced by
//! [`UpstreamProtocol`]) over keep-alive connections: an HTTP/1.1 caller's connection keeps
//! its own ([`upstream`]), HTTP/2 ones share a pool. The caller comes from a header
//! or the client certificate ([`caller`]); the procedure is the path, normalised
//! ([`path`]: the path forwarded is the one matched), as the tower layer reads it
//! ([`grl_client::layer::procedure_of`]) for canonical paths, so one config serves both.
//! A caller past the config's name limit counts as the overflow caller
//! ([`crate::sidecar::names::caller`], as for Envoy's services), so that any number of such
//! callers is one label; a procedure past it is cut ([`caller::capped`]) and still falls in
//! its prefix bucket.
//!
//! A dropped request never reaches the upstream: HTTP 429 with `Retry-After`, or for gRPC
//! (`content-type: application/grpc*`) a trailers-only HTTP 200 with `grpc-status: 8`
//! (RESOURCE_EXHAUSTED), both naming the bucket that refused it in `grl-bucket` and, where
//! its limit can be stated, `RateLimit-Policy` ([`grl_client::RefusingBucket`]). An
//! upstream that refuses the connection gives 502 (gRPC: status 14, UNAVAILABLE); one that
//! does not answer within the timeout gives 504 (gRPC: 14 too) ([`respond`]).

pub mod caller;
pub mod conn;
mod hop;
pub mod listen;
pub mod path;
mod respond;
pub(crate) mod upstream;

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tracing::debug;

use grl_client::{Client, Decision};

use super::metrics::{SidecarMetrics, UpstreamError};
use super::port_metrics::{Name, Refused};
use caller::{CallerError, CallerFrom};
pub use listen::{PortOptions, serve};
use respond::{failure, plain, refused};
use upstream::{Dedicated, SendError};

/// A request on its way upstream: on the caller's own connection, or through a pool.
enum Sent<F> {
    Own(F),
    Pool(hyper_util::client::legacy::ResponseFuture),
}

/// The body of every response of the proxy: the upstream's, streamed, or one it made.
pub type ProxyBody = Either<Incoming, Full<Bytes>>;

/// Which HTTP version requests go upstream in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UpstreamProtocol {
    /// The version the request came in (HTTP/2 requests go out as h2c).
    Auto,
    /// Always HTTP/1.1.
    Http1,
    /// Always HTTP/2 with prior knowledge (h2c).
    Http2,
}

/// Why the proxy cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The upstream URL is not `http://host:port`.
    #[error("--upstream {url:?}: {reason}")]
    Upstream {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The caller header is not a valid header name.
    #[error("--caller-header {0:?} is not a valid header name")]
    CallerHeader(String),
    /// The priority header is not a valid header name.
    #[error("--priority-header {0:?} is not a valid header name")]
    PriorityHeader(String),
    /// Callers from client certificates without TLS requiring them.
    #[error("--caller-from peer-cert needs TLS with a client CA on the proxy's port")]
    PeerCertWithoutMutualTls,
}

/// How the proxy is set up.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// The upstream URL, `http://host:port` (TLS is the mesh's business, not the sidecar's).
    pub upstream: String,
    /// The header naming the caller.
    pub caller_header: String,
    /// Where the caller comes from.
    pub caller_from: CallerFrom,
    /// The header naming a request's priority class.
    pub priority_header: String,
    /// Longest wait for the upstream's response head (connect included).
    pub timeout: Duration,
    /// Which HTTP version requests go upstream in.
    pub protocol: UpstreamProtocol,
    /// How the port accepts and keeps connections.
    pub port: PortOptions,
}

/// The proxy's state, shared by every connection.
#[derive(Debug)]
pub struct Proxy {
    client: Client,
    caller_header: HeaderName,
    caller_from: CallerFrom,
    priority_header: HeaderName,
    scheme: Scheme,
    authority: Authority,
    upstream: String,
    timeout: Duration,
    protocol: UpstreamProtocol,
    port: PortOptions,
    http1: HttpClient<HttpConnector, Incoming>,
    http2: HttpClient<HttpConnector, Incoming>,
    retry_after: HeaderValue,
    metrics: Arc<SidecarMetrics>,
}

impl Proxy {
    /// A proxy deciding with `client` and counting into `metrics`.
    pub fn new(
        client: Client,
        opts: &ProxyOptions,
        metrics: Arc<SidecarMetrics>,
    ) -> Result<Self, ProxyError> {
        let bad = |reason| ProxyError::Upstream {
            url: opts.upstream.clone(),
            reason,
        };
        let uri: Uri = opts.upstream.parse().map_err(|_| bad("not a URL"))?;
        if uri.scheme() != Some(&Scheme::HTTP) {
            return Err(bad(
                "only http:// is supported (plain text to a local service)",
            ));
        }
        let authority = uri.authority().cloned().ok_or(bad("no host:port"))?;
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(bad("a path prefix is not supported: give http://host:port"));
        }
        let caller_header = HeaderName::try_from(opts.caller_header.as_str())
            .map_err(|_| ProxyError::CallerHeader(opts.caller_header.clone()))?;
        let priority_header = HeaderName::try_from(opts.priority_header.as_str())
            .map_err(|_| ProxyError::PriorityHeader(opts.priority_header.clone()))?;
        if opts.caller_from == CallerFrom::PeerCert
            && !opts.port.tls.as_ref().is_some_and(|t| t.mutual())
        {
            return Err(ProxyError::PeerCertWithoutMutualTls);
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(opts.timeout));
        let http1 = HttpClient::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector.clone());
        let http2 = HttpClient::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http2_only(true)
            .http2_keep_alive_interval(Duration::from_secs(20))
            .build(connector);
        // A ratio changes at the next interval at the earliest: suggest waiting that long.
        let secs = client.config().interval.as_secs_f64().ceil().max(1.0) as u64;
        Ok(Self {
            client,
            caller_header,
            caller_from: opts.caller_from,
            priority_header,
            scheme: Scheme::HTTP,
            authority,
            upstream: opts.upstream.clone(),
            timeout: opts.timeout,
            protocol: opts.protocol,
            port: opts.port.clone(),
            http1,
            http2,
            retry_after: HeaderValue::from(secs),
            metrics,
        })
    }

    /// Decides `req`, then refuses it or forwards it and streams the upstream's answer back.
    /// `identity` is the caller named by the connection's client certificate, if TLS;
    /// `dedicated` the connection's own upstream connection, used when both sides speak
    /// HTTP/1.1.
    pub(crate) async fn handle(
        &self,
        req: Request<Incoming>,
        identity: Option<&Result<Arc<str>, CallerError>>,
        dedicated: &Dedicated,
    ) -> Response<ProxyBody> {
        let grpc = respond::is_grpc(req.headers());
        let version = req.version();
        let path = match path::normalise(req.uri().path()) {
            Ok(p) => p,
            Err(e) => {
                self.metrics.port.refused(Refused::BadPath);
                return refused(
                    grpc,
                    StatusCode::BAD_REQUEST,
                    respond::GRPC_INVALID_ARGUMENT,
                    &e.to_string(),
                );
            }
        };
        let caller = match self.caller_of(&req, identity) {
            Ok(c) => c,
            Err(e) => return self.refuse_caller(grpc, e),
        };
        let bounded = crate::sidecar::names::caller(caller);
        if bounded.len() != caller.len() {
            self.metrics.port.cut(Name::Caller);
        }
        let caller = bounded;
        let procedure = caller::capped(path::procedure(&path));
        if let Cow::Owned(_) = procedure {
            self.metrics.port.cut(Name::Procedure);
        }
        let class = req
            .headers()
            .get(&self.priority_header)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let decided = self
            .client
            .decide_explained_in_class(caller, &procedure, class);
        if decided.decision == Decision::Drop {
            return respond::dropped(grpc, &self.retry_after, decided.refused_by.as_deref());
        }
        let target = if let Cow::Borrowed(_) = path {
            let pq = req.uri().path_and_query().cloned();
            Some(pq.unwrap_or_else(|| PathAndQuery::from_static("/")))
        } else {
            self.metrics.port.normalised();
            let s = match req.uri().query() {
                Some(q) => format!("{path}?{q}"),
                None => path.clone().into_owned(),
            };
            PathAndQuery::try_from(s).ok()
        };
        let h2 = match self.protocol {
            UpstreamProtocol::Auto => version == Version::HTTP_2,
            UpstreamProtocol::Http1 => false,
            UpstreamProtocol::Http2 => true,
        };
        let own = !h2 && version != Version::HTTP_2;
        let (mut parts, body) = req.into_parts();
        let uri = target.and_then(|t| {
            if own {
                // Origin-form on a connection of our own; the pool takes absolute-form.
                return Some(Uri::from(t));
            }
            Uri::builder()
                .scheme(self.scheme.clone())
                .authority(self.authority.clone())
                .path_and_query(t)
                .build()
                .ok()
        });
        let Some(uri) = uri else {
            return plain(StatusCode::BAD_REQUEST, "bad request path\n");
        };
        parts.uri = uri;
        if own
            && !parts.headers.contains_key(header::HOST)
            && let Ok(host) = HeaderValue::from_str(self.authority.as_str())
        {
            parts.headers.insert(header::HOST, host);
        }
        hop::strip_hop_by_hop(&mut parts.headers);
        if self.caller_from == CallerFrom::PeerCert {
            parts.headers.remove(&self.caller_header);
        }
        if h2 {
            parts.version = Version::HTTP_2;
            parts.headers.remove(header::HOST);
        } else {
            parts.version = Version::HTTP_11;
        }
        let req = Request::from_parts(parts, body);
        let sent = if own {
            Sent::Own(dedicated.send(self.authority.as_str(), req))
        } else if h2 {
            Sent::Pool(self.http2.request(req))
        } else {
            Sent::Pool(self.http1.request(req))
        };
        self.forward(sent, grpc, version).await
    }

    /// The caller of `req`: from its header or its connection's certificate.
    fn caller_of<'a>(
        &self,
        req: &'a Request<Incoming>,
        identity: Option<&'a Result<Arc<str>, CallerError>>,
    ) -> Result<&'a str, CallerError> {
        match self.caller_from {
            CallerFrom::Header => caller::from_header(req.headers(), &self.caller_header),
            CallerFrom::PeerCert => match identity {
                Some(Ok(id)) => Ok(id),
                Some(Err(e)) => Err(*e),
                None => Err(CallerError::NoIdentity),
            },
        }
    }

    /// The answer to a request whose caller cannot be told.
    fn refuse_caller(&self, grpc: bool, e: CallerError) -> Response<ProxyBody> {
        let (why, status, code) = match e {
            CallerError::Repeated => (
                Refused::RepeatedCaller,
                StatusCode::BAD_REQUEST,
                respond::GRPC_INVALID_ARGUMENT,
            ),
            CallerError::NotUtf8 => (
                Refused::CallerNotUtf8,
                StatusCode::BAD_REQUEST,
                respond::GRPC_INVALID_ARGUMENT,
            ),
            CallerError::NoIdentity => (
                Refused::NoIdentity,
                StatusCode::FORBIDDEN,
                respond::GRPC_PERMISSION_DENIED,
            ),
        };
        self.metrics.port.refused(why);
        refused(grpc, status, code, &e.to_string())
    }

    /// Waits for the answer to a request sent upstream and streams it back in the caller's
    /// `version`.
    async fn forward<F>(&self, sent: Sent<F>, grpc: bool, version: Version) -> Response<ProxyBody>
    where
        F: Future<Output = Result<Response<Incoming>, SendError>>,
    {
        let sent = async {
            match sent {
                Sent::Own(f) => f.await,
                Sent::Pool(f) => f.await.map_err(|e| {
                    if e.is_connect() {
                        SendError::Connect(std::io::Error::other(respond::error_chain(&e)))
                    } else {
                        SendError::Pool(e)
                    }
                }),
            }
        };
        match tokio::time::timeout(self.timeout, sent).await {
            Ok(Ok(res)) => {
                let (mut parts, body) = res.into_parts();
                hop::strip_hop_by_hop(&mut parts.headers);
                parts.version = version;
                Response::from_parts(parts, Either::Left(body))
            }
            Ok(Err(e)) => {
                let kind = if matches!(e, SendError::Connect(_)) {
                    UpstreamError::Connect
                } else {
                    UpstreamError::Other
                };
                self.metrics.upstream_error(kind);
                debug!(error = %e, upstream = %self.upstream, "upstream request failed");
                let msg = format!(
                    "upstream {} unavailable: {}",
                    self.upstream,
                    respond::error_chain(&e)
                );
                failure(grpc, StatusCode::BAD_GATEWAY, &msg)
            }
            Err(_) => {
                self.metrics.upstream_error(UpstreamError::Timeout);
                let msg = format!(
                    "upstream {} did not answer within {} ms",
                    self.upstream,
                    self.timeout.as_millis()
                );
                failure(grpc, StatusCode::GATEWAY_TIMEOUT, &msg)
            }
        }
    }
}
