//! A stand-in for a broken or hostile HTTP server — a Prometheus answering 500, hanging,
//! returning NaN or an endless body, a code host echoing the request into its error or
//! answering without end — for the faults a real server cannot be made to show on demand.
//! It is a real HTTP server on 127.0.0.1 (axum); each request is answered by a closure.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// One request as the stand-in saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// Parameters from the query string and a form body.
    pub(crate) params: HashMap<String, String>,
    /// Every header, `name: value` a line.
    pub(crate) headers: String,
}

/// How to answer.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// This status and body.
    Status(u16, String),
    /// 200 with this JSON.
    Json(serde_json::Value),
    /// Never answer (the connection stays open).
    Hang,
    /// This status and content type, then `head` and a body that never ends.
    Endless {
        /// The status.
        status: u16,
        /// The `Content-Type`.
        content_type: &'static str,
        /// The start of the body.
        head: String,
    },
    /// The inner answer, after this long (a slow server).
    After(std::time::Duration, Box<Answer>),
}

type Handler = dyn Fn(&Seen) -> Answer + Send + Sync;

/// A running stand-in; stops when dropped.
#[derive(Debug)]
pub(crate) struct StandIn {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    sent: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    /// Serves `answer` for every request, on a free port of 127.0.0.1.
    pub(crate) async fn start(answer: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> StandIn {
        let answer: Arc<Handler> = Arc::new(answer);
        let requests = Arc::new(AtomicUsize::new(0));
        let count = requests.clone();
        let sent = Arc::new(AtomicUsize::new(0));
        let sent_by = sent.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let (answer, count, sent) = (answer.clone(), count.clone(), sent_by.clone());
            async move {
                count.fetch_add(1, Ordering::SeqCst);
                let seen = Seen {
                    params: params(uri.query().unwrap_or(""), &body),
                    headers: headers
                        .iter()
                        .map(|(k, v)| format!("{k}: {}\n", v.to_str().unwrap_or("")))
                        .collect(),
                };
                let mut answer = answer(&seen);
                while let Answer::After(delay, inner) = answer {
                    tokio::time::sleep(delay).await;
                    answer = *inner;
                }
                match answer {
                    Answer::After(..) => unreachable!("unwrapped above"),
                    Answer::Status(code, body) => (
                        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                        body,
                    )
                        .into_response(),
                    Answer::Json(v) => axum::Json(v).into_response(),
                    Answer::Hang => std::future::pending::<Response>().await,
                    Answer::Endless {
                        status,
                        content_type,
                        head,
                    } => {
                        let chunk = Bytes::from(head.repeat(64 * 1024 / head.len().max(1) + 1));
                        let body = futures::stream::repeat_with(move || {
                            sent.fetch_add(chunk.len(), Ordering::SeqCst);
                            Ok::<_, std::convert::Infallible>(chunk.clone())
                        });
                        Response::builder()
                            .status(status)
                            .header("content-type", content_type)
                            .body(axum::body::Body::from_stream(body))
                            .unwrap()
                    }
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        StandIn {
            addr,
            requests,
            sent,
            task,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests received so far.
    pub(crate) fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Bytes of endless bodies handed to the connection so far.
    pub(crate) fn sent(&self) -> usize {
        self.sent.load(Ordering::SeqCst)
    }
}

/// `a=b&c=d` pairs of the query string and of a form body, percent-decoded.
fn params(query: &str, body: &[u8]) -> HashMap<String, String> {
    let body = String::from_utf8_lossy(body);
    [query, body.as_ref()]
        .iter()
        .flat_map(|s| s.split('&'))
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A Prometheus `query_range` answer: one series over the request's `start..=end` at its
/// `step`, each value given by `value(ts)` as Prometheus writes it (`"800"`, `"NaN"`,
/// `"+Inf"`).
pub(crate) fn matrix(seen: &Seen, value: impl Fn(i64) -> String) -> Answer {
    let num = |k: &str| {
        seen.params
            .get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0) as i64
    };
    let (start, end, step) = (num("start"), num("end"), num("step").max(1));
    let first = start.div_euclid(step) * step + if start % step == 0 { 0 } else { step };
    let values: Vec<serde_json::Value> = (0..)
        .map(|i| first + i * step)
        .take_while(|t| *t <= end)
        .map(|t| serde_json::json!([t, value(t)]))
        .collect();
    Answer::Json(serde_json::json!({
        "status": "success",
        "data": { "resultType": "matrix", "result": [ { "metric": {}, "values": values } ] }
    }))
}
