//! The admin HTTP server of a tier: `GET /metrics` in Prometheus text format, and the
//! read-only `GET /status` page (`/` redirects to it) (every bucket with the last minutes of its load, see
//! [`crate::view::page`]) behind the tier's admin authorisation: the admin token, or over
//! TLS (`--metrics-tls`) an admin client certificate, as on the gRPC port. On a plain-HTTP
//! port that is not on a loopback address, the page takes no credentials at all (they would
//! cross the network in the clear) unless the operator said `--insecure-admin`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Query, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use grl_core::proto;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::admin_conn::{HttpPeer, PlainListener, TlsListener};
use super::auth::{AdminAuth, Refusal};
use super::tls::ServerTls;
use crate::view::{StatusView, history::History, page};

/// Produces the `/metrics` body.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Answers a `Status` request as the tier's gRPC port would.
pub type StatusFn = Arc<dyn Fn(&proto::StatusRequest) -> proto::StatusResponse + Send + Sync>;

/// The page's history samples every bucket once every this many intervals, and keeps
/// this many samples (five minutes at the default 1 s interval).
const INTERVALS_PER_SAMPLE: u32 = 5;
const SAMPLES: usize = 60;

/// What the admin port serves.
#[derive(Clone)]
pub struct Site {
    /// The `/metrics` body.
    pub metrics: Render,
    /// The tier's status, for `/status`.
    pub status: StatusFn,
    /// Who may read `/status`.
    pub auth: Arc<AdminAuth>,
    /// The tier's interval: how often the page refreshes itself.
    pub interval: Duration,
    /// TLS on the port, and whether credentials may come in the clear.
    pub http: AdminHttp,
}

/// How the admin HTTP port is secured.
#[derive(Debug, Clone, Default)]
pub struct AdminHttp {
    /// TLS on the port (`--metrics-tls`): the tier's certificate; with its client CA, a
    /// client certificate is asked for but optional, so a scraper needs none.
    pub tls: Option<Arc<ServerTls>>,
    /// Accept the admin token over plain HTTP on a non-loopback address
    /// (`--insecure-admin`).
    pub insecure: bool,
}

impl std::fmt::Debug for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Site")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

#[derive(Clone)]
struct AdminState {
    site: Site,
    history: Arc<Mutex<History>>,
    /// Whether credentials may come over plain HTTP: a loopback port, or `--insecure-admin`.
    cleartext_ok: bool,
}

#[derive(serde::Deserialize)]
struct StatusQuery {
    service: Option<String>,
}

/// Serves only `/metrics` on `listener` until `shutdown` turns true (a sidecar).
pub async fn serve(
    listener: TcpListener,
    render: Render,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let render = render.clone();
            async move { metrics_body(render()) }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await
}

/// Serves `/metrics` and `/status` on `listener` (`/` redirects to `/status`) until
/// `shutdown` turns true, sampling the page's history meanwhile.
pub async fn serve_site(
    listener: TcpListener,
    site: Site,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let every = site.interval * INTERVALS_PER_SAMPLE;
    let history = Arc::new(Mutex::new(History::new(every, SAMPLES)));
    let sampler = {
        let (history, status) = (history.clone(), site.status.clone());
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = t.tick() => {}
                    _ = shutdown.wait_for(|s| *s) => break,
                }
                let st = status(&proto::StatusRequest::default());
                history
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .record(&st);
            }
        })
    };
    let cleartext_ok = site.http.insecure || listener.local_addr()?.ip().is_loopback();
    let tls = site.http.tls.clone();
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/status", get(status_page))
        .route("/", get(to_status))
        .with_state(AdminState {
            site,
            history,
            cleartext_ok,
        });
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    let make = app.into_make_service_with_connect_info::<HttpPeer>();
    let served = match tls {
        Some(tls) => {
            axum::serve(TlsListener::new(listener, tls)?, make)
                .with_graceful_shutdown(stop)
                .await
        }
        None => {
            axum::serve(PlainListener(listener), make)
                .with_graceful_shutdown(stop)
                .await
        }
    };
    sampler.abort();
    served
}

/// `/` is the status page's address as typed: 303 to `/status`, with the query kept.
async fn to_status(RawQuery(q): RawQuery) -> Redirect {
    match q {
        Some(q) => Redirect::to(&format!("/status?{q}")),
        None => Redirect::to("/status"),
    }
}

async fn metrics(State(s): State<AdminState>) -> Response {
    metrics_body((s.site.metrics)())
}

fn metrics_body(body: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// Why the page was refused, as the answer says it.
fn refusal_text(r: Refusal, peer: &HttpPeer, auth: &AdminAuth) -> (StatusCode, &'static str) {
    match r {
        Refusal::WrongToken | Refusal::IdentityNotAllowed if !auth.has_token() && !peer.tls => (
            StatusCode::FORBIDDEN,
            "the status page takes the admin token (--admin-token-file), or an admin client \
             certificate when this port serves TLS (--metrics-tls); or use `grl status`\n",
        ),
        Refusal::WrongToken => (StatusCode::FORBIDDEN, "the token is not accepted\n"),
        Refusal::IdentityNotAllowed => (
            StatusCode::FORBIDDEN,
            "this client certificate is not an allowed admin\n",
        ),
        _ => (
            StatusCode::UNAUTHORIZED,
            "the status page needs the admin token (`Authorization: Bearer <token>`, or the \
             token as the password of the browser's prompt) or an admin client certificate\n",
        ),
    }
}

fn refused(code: StatusCode, text: &'static str) -> Response {
    (
        code,
        [
            (header::WWW_AUTHENTICATE, "Basic realm=\"grl status\""),
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
        ],
        text,
    )
        .into_response()
}

async fn status_page(
    State(s): State<AdminState>,
    ConnectInfo(peer): ConnectInfo<HttpPeer>,
    Query(q): Query<StatusQuery>,
    headers: HeaderMap,
) -> Response {
    let auth = &s.site.auth;
    if !peer.tls && !s.cleartext_ok && !auth.is_open() {
        tracing::warn!(peer = %peer.addr, "status page refused: plain HTTP on a non-loopback port");
        return (
            StatusCode::FORBIDDEN,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "this port serves plain HTTP on a non-loopback address, where the admin token \
             would cross the network in the clear: serve it with TLS (--metrics-tls), or \
             accept that with --insecure-admin\n",
        )
            .into_response();
    }
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if let Err(r) = auth.check_http(authorization, &peer) {
        let (code, text) = refusal_text(r, &peer, auth);
        return refused(code, text);
    }
    let req = proto::StatusRequest {
        service: q.service.unwrap_or_default(),
        detail: true,
    };
    let started = std::time::Instant::now();
    let view = StatusView::from(&(s.site.status)(&req));
    let answered = started.elapsed();
    let generated = chrono::Utc::now()
        .format("%Y-%m-%d %H:%M:%S UTC")
        .to_string();
    let html = {
        let history = s
            .history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        page::render(
            &view,
            &history,
            s.site.interval.as_millis() as u64,
            &generated,
        )
    };
    tracing::debug!(
        buckets = view.buckets.len(),
        bytes = html.len(),
        status_ms = answered.as_secs_f64() * 1e3,
        render_ms = (started.elapsed() - answered).as_secs_f64() * 1e3,
        "status page served"
    );
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}
