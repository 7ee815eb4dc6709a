//! The reverse proxy: decides every request with the client, answers drops itself and
//! forwards the rest to the one upstream, streaming bodies (and gRPC trailers) both ways.
//!
//! Downstream, each connection speaks HTTP/1.1 or HTTP/2 with prior knowledge (h2c, so gRPC
//! works); upstream, a request goes out in the version it came in (or the one forced by
//! [`UpstreamProtocol`]) over pooled keep-alive connections. The caller is read from a header
//! and the procedure from the path exactly as the tower layer does
//! ([`grl_client::layer::procedure_of`]), so one config serves both.
//!
//! A dropped request never reaches the upstream: HTTP 429 with `Retry-After`, or for gRPC
//! (`content-type: application/grpc*`) a trailers-only HTTP 200 with `grpc-status: 8`
//! (RESOURCE_EXHAUSTED). An upstream that refuses the connection gives 502 (gRPC: status 14,
//! UNAVAILABLE); one that does not answer within the timeout gives 504 (gRPC: 14 too).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, Scheme};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, warn};

use grl_client::{Client, Decision};

use super::metrics::{SidecarMetrics, UpstreamError};

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
}

/// How the proxy is set up.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// The upstream URL, `http://host:port` (TLS is the mesh's business, not the sidecar's).
    pub upstream: String,
    /// The header naming the caller.
    pub caller_header: String,
    /// Longest wait for the upstream's response head (connect included).
    pub timeout: Duration,
    /// Which HTTP version requests go upstream in.
    pub protocol: UpstreamProtocol,
}

/// The proxy's state, shared by every connection.
#[derive(Debug)]
pub struct Proxy {
    client: Client,
    caller_header: HeaderName,
    scheme: Scheme,
    authority: Authority,
    upstream: String,
    timeout: Duration,
    protocol: UpstreamProtocol,
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
            scheme: Scheme::HTTP,
            authority,
            upstream: opts.upstream.clone(),
            timeout: opts.timeout,
            protocol: opts.protocol,
            http1,
            http2,
            retry_after: HeaderValue::from(secs),
            metrics,
        })
    }

    /// Decides `req`, then refuses it or forwards it and streams the upstream's answer back.
    pub async fn handle(&self, req: Request<Incoming>) -> Result<Response<ProxyBody>, Infallible> {
        let grpc = is_grpc(req.headers());
        let version = req.version();
        let caller = req
            .headers()
            .get(&self.caller_header)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let procedure = grl_client::layer::procedure_of(req.uri().path());
        if self.client.decide(caller, procedure) == Decision::Drop {
            return Ok(self.refusal(grpc));
        }
        let h2 = match self.protocol {
            UpstreamProtocol::Auto => version == Version::HTTP_2,
            UpstreamProtocol::Http1 => false,
            UpstreamProtocol::Http2 => true,
        };
        let (mut parts, body) = req.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = match Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path)
            .build()
        {
            Ok(u) => u,
            Err(_) => return Ok(plain(StatusCode::BAD_REQUEST, "bad request path\n")),
        };
        strip_hop_by_hop(&mut parts.headers);
        if h2 {
            parts.version = Version::HTTP_2;
            parts.headers.remove(header::HOST);
        } else {
            parts.version = Version::HTTP_11;
        }
        let req = Request::from_parts(parts, body);
        let sent = if h2 {
            self.http2.request(req)
        } else {
            self.http1.request(req)
        };
        match tokio::time::timeout(self.timeout, sent).await {
            Ok(Ok(res)) => {
                let (mut parts, body) = res.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                parts.version = version;
                Ok(Response::from_parts(parts, Either::Left(body)))
            }
            Ok(Err(e)) => {
                let kind = if e.is_connect() {
                    UpstreamError::Connect
                } else {
                    UpstreamError::Other
                };
                self.metrics.upstream_error(kind);
                debug!(error = %e, upstream = %self.upstream, "upstream request failed");
                let msg = format!(
                    "upstream {} unavailable: {}",
                    self.upstream,
                    error_chain(&e)
                );
                Ok(failure(grpc, StatusCode::BAD_GATEWAY, &msg))
            }
            Err(_) => {
                self.metrics.upstream_error(UpstreamError::Timeout);
                let msg = format!(
                    "upstream {} did not answer within {} ms",
                    self.upstream,
                    self.timeout.as_millis()
                );
                Ok(failure(grpc, StatusCode::GATEWAY_TIMEOUT, &msg))
            }
        }
    }

    /// The answer to a dropped request.
    fn refusal(&self, grpc: bool) -> Response<ProxyBody> {
        let mut res = if grpc {
            grpc_status(GRPC_RESOURCE_EXHAUSTED, "rate limited by GRL")
        } else {
            let mut r = plain(StatusCode::TOO_MANY_REQUESTS, "rate limited by GRL\n");
            r.headers_mut().insert(
                "x-grl-reason",
                HeaderValue::from_static("rate limited by GRL"),
            );
            r
        };
        res.headers_mut()
            .insert(header::RETRY_AFTER, self.retry_after.clone());
        res
    }
}

const GRPC_RESOURCE_EXHAUSTED: u8 = 8;
const GRPC_UNAVAILABLE: u8 = 14;

/// Whether the request is gRPC (`application/grpc`, `application/grpc+proto`, ...).
fn is_grpc(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// A response with a text body.
fn plain(status: StatusCode, text: &str) -> Response<ProxyBody> {
    let mut res = Response::new(Either::Right(Full::new(Bytes::from(text.to_owned()))));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

/// A trailers-only gRPC response: HTTP 200, status and message in the headers, no body.
fn grpc_status(code: u8, message: &str) -> Response<ProxyBody> {
    let mut res = Response::new(Either::Right(Full::new(Bytes::new())));
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from(u16::from(code)));
    if let Ok(v) = HeaderValue::from_str(&percent_encode(message)) {
        h.insert("grpc-message", v);
    }
    res
}

/// The answer when the upstream failed: `status` for HTTP, UNAVAILABLE for gRPC.
fn failure(grpc: bool, status: StatusCode, message: &str) -> Response<ProxyBody> {
    if grpc {
        grpc_status(GRPC_UNAVAILABLE, message)
    } else {
        plain(status, &format!("{message}\n"))
    }
}

/// gRPC's percent-encoding of `grpc-message`: bytes outside printable ASCII and `%`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An error and its sources, `a: b: c`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// Removes the headers that describe one connection rather than the message (RFC 9110
/// §7.6.1), keeping `te: trailers`, which gRPC needs end to end.
fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::try_from(n.trim()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in [
        header::CONNECTION,
        header::PROXY_AUTHORIZATION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        h.remove(n);
    }
    h.remove("keep-alive");
    h.remove("proxy-connection");
    if h.get(header::TE)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"trailers"))
    {
        h.remove(header::TE);
    }
}

/// Accepts connections on `listener` until `shutdown` turns true, serving each with
/// HTTP/1.1 or h2c as the peer speaks.
pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>, mut shutdown: watch::Receiver<bool>) {
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
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
        let _ = stream.set_nodelay(true);
        let proxy = proxy.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let proxy = proxy.clone();
                async move { proxy.handle(req).await }
            });
            if let Err(e) = builder.serve_connection(TokioIo::new(stream), svc).await {
                debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(percent_encode("a b%c"), "a b%25c");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }

    #[test]
    fn hop_by_hop_headers_go_and_te_trailers_stays() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("close, x-one"));
        h.insert("x-one", HeaderValue::from_static("1"));
        h.insert("x-two", HeaderValue::from_static("2"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        strip_hop_by_hop(&mut h);
        assert!(h.get("x-one").is_none() && h.get("keep-alive").is_none());
        assert!(h.get(header::CONNECTION).is_none());
        assert_eq!(h["x-two"], "2");
        assert_eq!(h[header::TE], "trailers");
        h.insert(header::TE, HeaderValue::from_static("gzip"));
        strip_hop_by_hop(&mut h);
        assert!(h.get(header::TE).is_none());
    }
}
