//! A synthetic history endpoint: answers Prometheus' range-query API
//! (`/api/v1/query_range`, GET or POST form) for the per-service query of
//! `BatchedPrometheusSource` with real response shapes and deterministic series (daily and
//! weekly cycles, noise, growth), so that the fleet bench measures the configurator's own
//! cost at 22,000 buckets. Like Prometheus it refuses a query of more than 11,000 points
//! per series, and it counts what it served.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use axum::extract::{Form, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// Procedures per service; a service has [`callers`] × 4 (caller, procedure) series.
pub(crate) const PROCEDURES: usize = 4;

/// Callers per service for `buckets` buckets a service: 5 (20 series) up to 20 buckets,
/// then one more for each 5 buckets beyond (see the fleet's `write_config`).
pub(crate) fn callers(buckets: usize) -> usize {
    5.max(buckets.div_ceil(5) + 1)
}
/// Prometheus' limit of points per series in one range query.
const MAX_POINTS: i64 = 11_000;

/// What the endpoint served.
#[derive(Debug, Default)]
pub(crate) struct Served {
    /// Range queries answered.
    pub(crate) queries: AtomicU64,
    /// Points returned (all series).
    pub(crate) points: AtomicU64,
    /// Queries refused for asking more than 11,000 points per series.
    pub(crate) refused: AtomicU64,
    /// The most points per series any query asked for.
    pub(crate) max_points_per_series: AtomicUsize,
}

/// The offered rate (rps) of service `s`, pair `p` at unix time `t`: a base that differs by
/// series, a daily and a weekly cycle, 1 % growth a day from `origin`, and ±10 % noise
/// that is a hash of (s, p, minute), so any query covering `t` gets the same value.
pub(crate) fn rate(s: usize, p: usize, t: i64, origin: i64) -> f64 {
    let base = 5.0 + ((s * 31 + p * 17) % 97) as f64;
    let day = (t as f64 / 86_400.0) * std::f64::consts::TAU;
    let week = (t as f64 / (7.0 * 86_400.0)) * std::f64::consts::TAU;
    let daily = 1.0 + 0.5 * day.sin();
    let weekly = 1.0 + 0.2 * week.cos();
    let growth = 1.0 + 0.01 * (t - origin) as f64 / 86_400.0;
    let mut h = (s as u64) << 40 ^ (p as u64) << 32 ^ (t.div_euclid(60) as u64);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    let noise = 0.9 + 0.2 * (h % 10_000) as f64 / 10_000.0;
    (base * daily * weekly * growth * noise * 1000.0).round() / 1000.0
}

/// The labels of pair `p` of service `s`.
pub(crate) fn pair(s: usize, p: usize) -> (String, String) {
    (
        format!("c{}", p / PROCEDURES),
        format!("Api{s}/m{}", p % PROCEDURES),
    )
}

/// The name of service `s`.
pub(crate) fn service(s: usize) -> String {
    format!("svc{s:04}")
}

struct App {
    origin: i64,
    callers: usize,
    served: Arc<Served>,
}

/// Starts the endpoint on a free loopback port, `callers` × [`PROCEDURES`] series a
/// service; returns its URL and its counters.
pub(crate) async fn start(origin: i64, callers: usize) -> (String, Arc<Served>) {
    let served = Arc::new(Served::default());
    let app = Arc::new(App {
        origin,
        callers,
        served: served.clone(),
    });
    let router = axum::Router::new()
        .route(
            "/api/v1/query_range",
            get(
                |State(app): State<Arc<App>>, Query(q): Query<HashMap<String, String>>| async move {
                    answer(&app, &q)
                },
            )
            .post(
                |State(app): State<Arc<App>>, Form(q): Form<HashMap<String, String>>| async move {
                    answer(&app, &q)
                },
            ),
        )
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind the synthetic endpoint");
    let url = format!("http://{}", listener.local_addr().expect("local addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (url, served)
}

fn bad(status: StatusCode, kind: &str, msg: &str) -> Response {
    (
        status,
        [("content-type", "application/json")],
        format!(r#"{{"status":"error","errorType":"{kind}","error":"{msg}"}}"#),
    )
        .into_response()
}

fn answer(app: &App, q: &HashMap<String, String>) -> Response {
    let num = |k: &str| q.get(k).and_then(|v| v.parse::<f64>().ok());
    let (Some(query), Some(start), Some(end), Some(step)) =
        (q.get("query"), num("start"), num("end"), num("step"))
    else {
        return bad(StatusCode::BAD_REQUEST, "bad_data", "missing parameter");
    };
    let (start, end, step) = (start as i64, end as i64, step as i64);
    if step <= 0 || end < start {
        return bad(StatusCode::BAD_REQUEST, "bad_data", "bad range");
    }
    let points = (end - start) / step + 1;
    let served = &app.served;
    served
        .max_points_per_series
        .fetch_max(points as usize, Ordering::Relaxed);
    if points > MAX_POINTS {
        served.refused.fetch_add(1, Ordering::Relaxed);
        return bad(
            StatusCode::BAD_REQUEST,
            "bad_data",
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
        );
    }
    served.queries.fetch_add(1, Ordering::Relaxed);
    // Only offered load: no bucket of the fleet drops anything.
    let s = if query.contains("decision=") {
        None
    } else {
        query
            .split("service=\"svc")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|n| n.parse::<usize>().ok())
    };
    let series = app.callers * PROCEDURES;
    let mut body = String::with_capacity(64 + (points as usize) * 26 * series);
    body.push_str(r#"{"status":"success","data":{"resultType":"matrix","result":["#);
    if let Some(s) = s {
        for p in 0..series {
            let (caller, procedure) = pair(s, p);
            if p > 0 {
                body.push(',');
            }
            let _ = write!(
                body,
                r#"{{"metric":{{"caller":"{caller}","procedure":"{procedure}"}},"values":["#
            );
            let mut t = start;
            let mut first = true;
            while t <= end {
                if !first {
                    body.push(',');
                }
                first = false;
                let _ = write!(body, r#"[{t},"{}"]"#, rate(s, p, t, app.origin));
                t += step;
            }
            body.push_str("]}");
            served.points.fetch_add(points as u64, Ordering::Relaxed);
        }
    }
    body.push_str("]}}");
    ([("content-type", "application/json")], body).into_response()
}
