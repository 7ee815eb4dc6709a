//! Talking to a Prometheus: its settings ([`PromSettings`]), and [`RangeQuerier`] — one
//! PromQL range query, chunked under Prometheus' limits, with per-request timeouts and
//! jittered retries, and instant queries. Shared by the per-bucket and the per-service
//! Prometheus sources.
//!
//! Chunks hold at most `max_points_per_query` points per series (11,000 is Prometheus'
//! limit). A chunk refused for loading too many samples (`--query.max-samples`, 50M by
//! default, counts series × steps) is split in halves and retried. Connection errors, HTTP
//! timeouts, 5xx and Prometheus' timeout/internal/unavailable errors are retried; bad PromQL
//! is not. A chunk whose answer is longer than `max_answer_bytes` is split in halves too, at
//! most [`MAX_ANSWER_SPLITS`] times deep (a server sending an endless answer costs a few
//! reads of the limit, not the whole answer).
//!
//! # Answers read
//! [`read_answer`] reads an answer incrementally: at most [`MAX_ANSWER_BYTES`] of a success
//! (a chunk whose answer is longer is split in halves, a few times at most), at most
//! [`MAX_ERROR_BYTES`] of an error, whose message is all that is shown.

use super::chunk::{self, Chunk};
use super::error::chain;
use grl_core::backoff::Backoff;

use super::SourceError;
use super::chunk::PROMETHEUS_MAX_POINTS;
use super::query_template::DEFAULT_TEMPLATE;
use super::retry::{Retry, retry};
use prometheus_http_query::error::PrometheusError;
use prometheus_http_query::response::PromqlResult;
use prometheus_http_query::{Client, Error as PromError, response::Data};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tracing::{debug, warn};

/// How many times a chunk is halved because its answer was too long (8 times the limit).
const MAX_ANSWER_SPLITS: u32 = 3;

/// The most of one success answer read, in bytes (64 MiB; `PromSettings::max_answer_bytes`).
/// A chunk of 11,000 points takes about 30 bytes a point and series: 64 MiB holds 200
/// series, and a chunk whose answer is longer is split in halves and asked again.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// The most of an error answer read, in bytes: its message is all that is shown.
pub const MAX_ERROR_BYTES: usize = 16 << 10;

/// Why one answer of Prometheus could not be used.
#[derive(Debug, thiserror::Error)]
pub(super) enum AnswerError {
    /// The request failed, or Prometheus answered with an error.
    #[error(transparent)]
    Prom(#[from] PromError),
    /// A success answer longer than the limit; the rest was not read.
    #[error("answer longer than {0} bytes (the rest was not read)")]
    TooLarge(usize),
    /// An answer that is not Prometheus' JSON (a proxy's error page, a body cut short).
    #[error("{0}")]
    Unreadable(String),
}

/// Prometheus' JSON envelope.
#[derive(serde::Deserialize)]
#[serde(tag = "status")]
enum Envelope {
    #[serde(rename = "success")]
    Success { data: PromqlResult },
    #[serde(rename = "error")]
    Error(PrometheusError),
}

/// Reads one answer of Prometheus' query API: at most `max` bytes of a success, at most
/// [`MAX_ERROR_BYTES`] of anything else, chunk by chunk (an endless body costs no more).
pub(super) async fn read_answer(
    resp: reqwest::Response,
    max: usize,
) -> Result<PromqlResult, AnswerError> {
    let status = resp.status();
    let json = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let success = status.is_success() && json;
    if success && resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(AnswerError::TooLarge(max));
    }
    let limit = if success { max } else { MAX_ERROR_BYTES };
    let (body, cut) = crate::https::read_capped(resp, limit)
        .await
        .map_err(|e| AnswerError::Unreadable(format!("reading the answer: {}", chain(&e))))?;
    if success && cut {
        return Err(AnswerError::TooLarge(max));
    }
    let shown = || {
        let text = crate::secrets::excerpt(&String::from_utf8_lossy(&body), 300);
        format!("HTTP {status}: {text}")
    };
    if !json {
        return Err(AnswerError::Unreadable(format!("{} (not JSON)", shown())));
    }
    match serde_json::from_slice::<Envelope>(&body) {
        Ok(Envelope::Success { data }) if success => Ok(data),
        Ok(Envelope::Error(e)) => Err(PromError::Prometheus(e).into()),
        Ok(Envelope::Success { .. }) | Err(_) => Err(AnswerError::Unreadable(shown())),
    }
}

/// Settings of a [`PrometheusSource`]; `Default` gives the documented defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct PromSettings {
    /// Inner instant expression with placeholders (default: [`DEFAULT_TEMPLATE`], the GRL
    /// contract metric).
    pub query_template: String,
    /// Window of `rate()` (default `2m`: two samples at a 1-minute scrape interval).
    pub rate_window: String,
    /// Resolution at which the inner expression is evaluated before taking the peak per step
    /// (default 60 s).
    pub resolution_secs: i64,
    /// Step of the returned series (default 300 s).
    pub step_secs: i64,
    /// Timeout of one HTTP request, also sent as Prometheus' evaluation timeout (30 s).
    pub timeout: Duration,
    /// Retries after a failed first attempt (3).
    pub retries: u32,
    /// Delay before the first retry, doubled after each (200 ms, jittered).
    pub backoff_base: Duration,
    /// Upper bound of one retry delay (5 s).
    pub backoff_max: Duration,
    /// Points per series per request (11,000, Prometheus' limit).
    pub max_points_per_query: usize,
    /// The most of one answer read, in bytes ([`MAX_ANSWER_BYTES`]).
    pub max_answer_bytes: usize,
}

impl Default for PromSettings {
    fn default() -> Self {
        PromSettings {
            query_template: DEFAULT_TEMPLATE.to_owned(),
            rate_window: "2m".to_owned(),
            resolution_secs: 60,
            step_secs: 300,
            timeout: Duration::from_secs(30),
            retries: 3,
            backoff_base: Duration::from_millis(200),
            backoff_max: Duration::from_secs(5),
            max_points_per_query: PROMETHEUS_MAX_POINTS,
            max_answer_bytes: MAX_ANSWER_BYTES,
        }
    }
}

impl PromSettings {
    /// Checks steps and the rate window.
    pub(crate) fn validate(&self, url: &str) -> Result<(), SourceError> {
        if self.step_secs <= 0 || self.resolution_secs <= 0 || self.resolution_secs > self.step_secs
        {
            return Err(SourceError::InvalidUrl {
                url: crate::secrets::redact_url(url),
                message: format!(
                    "need 0 < resolution_secs ({}) <= step_secs ({})",
                    self.resolution_secs, self.step_secs
                ),
            });
        }
        if self.rate_window.trim().is_empty() {
            return Err(SourceError::Template {
                message: "empty rate_window".into(),
            });
        }
        Ok(())
    }
}

/// Labels and `(unix seconds, value)` points of one returned series.
pub(super) type LabelledPoints = (HashMap<String, String>, Vec<(i64, f64)>);

/// Runs range queries against one Prometheus.
#[derive(Clone)]
pub(super) struct RangeQuerier {
    client: Client,
    /// The URL without password, for messages.
    url: String,
    timeout: Duration,
    retry: Retry,
    max_points: usize,
    max_answer: usize,
}

impl std::fmt::Debug for RangeQuerier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeQuerier")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// Why one chunk failed.
enum ChunkError {
    TooManySamples(String),
    TooLarge(String),
    Permanent(String),
    Exhausted(String, u32),
}

impl RangeQuerier {
    /// A querier for `url` with the timeouts, retries and chunk size of `settings`.
    pub(super) fn new(url: &str, settings: &PromSettings) -> Result<Self, SourceError> {
        let bad = |message: String| SourceError::InvalidUrl {
            url: crate::secrets::redact_url(url),
            message,
        };
        let http = crate::https::client_builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(5)))
            .build()
            .map_err(|e| bad(chain(&e)))?;
        let client = Client::from(http, url).map_err(|e| bad(chain(&e)))?;
        Ok(RangeQuerier {
            client,
            url: crate::secrets::redact_url(url.trim_end_matches('/')),
            timeout: settings.timeout,
            retry: Retry {
                retries: settings.retries,
                backoff: Backoff::new(settings.backoff_base, settings.backoff_max)
                    .map_err(SourceError::InvalidBackoff)?,
            },
            max_points: settings.max_points_per_query,
            max_answer: settings.max_answer_bytes,
        })
    }

    /// `prometheus at <url>`.
    pub(super) fn describe(&self) -> String {
        format!("prometheus at {}", self.url)
    }

    /// Evaluates `expr` over `[start, end]` at `step` (chunked); returns every series' points.
    /// `what` names the bucket or service in errors and logs.
    pub(super) async fn run(
        &self,
        what: &str,
        expr: &str,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<Vec<LabelledPoints>, SourceError> {
        if end < start || step <= 0 {
            return Err(SourceError::InvalidRange {
                source_desc: self.describe(),
                bucket: what.to_owned(),
                start,
                end,
                step_secs: step,
            });
        }
        let rejected = |message: String| SourceError::Rejected {
            source_desc: self.describe(),
            bucket: what.to_owned(),
            message,
            query: expr.to_owned(),
        };
        // Each chunk with the times it was halved for too long an answer.
        let mut todo: VecDeque<(Chunk, u32)> = chunk::plan(start, end, step, self.max_points)
            .into_iter()
            .map(|c| (c, 0))
            .collect();
        let mut out: HashMap<Vec<(String, String)>, LabelledPoints> = HashMap::new();
        while let Some((c, halved)) = todo.pop_front() {
            match self.query_chunk(what, expr, c, step).await {
                Ok(series) => {
                    for (labels, points) in series {
                        let mut key: Vec<(String, String)> = labels.clone().into_iter().collect();
                        key.sort();
                        out.entry(key)
                            .or_insert_with(|| (labels, Vec::new()))
                            .1
                            .extend(points);
                    }
                }
                Err(ChunkError::TooManySamples(msg)) => match c.halves(step) {
                    Some((a, b)) => {
                        debug!(
                            what,
                            start = c.start,
                            end = c.end,
                            "too many samples, splitting chunk"
                        );
                        todo.push_front((b, halved));
                        todo.push_front((a, halved));
                    }
                    None => return Err(rejected(msg)),
                },
                Err(ChunkError::TooLarge(msg)) => {
                    match c.halves(step).filter(|_| halved < MAX_ANSWER_SPLITS) {
                        Some((a, b)) => {
                            warn!(
                                what,
                                start = c.start,
                                end = c.end,
                                limit = self.max_answer,
                                "answer too long, splitting chunk"
                            );
                            todo.push_front((b, halved + 1));
                            todo.push_front((a, halved + 1));
                        }
                        None => {
                            return Err(rejected(format!(
                                "{msg}, for {} steps from {} after halving the range {halved} times",
                                c.points(step),
                                c.start
                            )));
                        }
                    }
                }
                Err(ChunkError::Permanent(msg)) => return Err(rejected(msg)),
                Err(ChunkError::Exhausted(message, attempts)) => {
                    return Err(SourceError::Exhausted {
                        source_desc: self.describe(),
                        bucket: what.to_owned(),
                        attempts,
                        message,
                    });
                }
            }
        }
        Ok(out.into_values().collect())
    }

    /// The value of `expr` at `at`: the sum over its series of their value then (`None`:
    /// no series). One point of a range query, so retries and limits are the same.
    pub(super) async fn instant(
        &self,
        what: &str,
        expr: &str,
        at: i64,
    ) -> Result<Option<f64>, SourceError> {
        let series = self.run(what, expr, at, at, 60).await?;
        let values: Vec<f64> = series
            .iter()
            .filter_map(|(_, points)| points.iter().rev().find(|(t, _)| *t <= at).map(|p| p.1))
            .filter(|v| v.is_finite())
            .collect();
        Ok((!values.is_empty()).then(|| values.iter().sum()))
    }

    /// One range query for one chunk, retried.
    async fn query_chunk(
        &self,
        what: &str,
        expr: &str,
        c: Chunk,
        step: i64,
    ) -> Result<Vec<LabelledPoints>, ChunkError> {
        let timeout_ms = self.timeout.as_millis() as i64;
        let result = retry(
            &self.retry,
            is_transient,
            |attempt, e, delay| {
                warn!(
                    source = %self.url, what, attempt, delay_ms = delay.as_millis() as u64,
                    error = %chain(e), "prometheus query failed, retrying"
                );
            },
            || async move {
                let resp = self
                    .client
                    .query_range(expr, c.start, c.end, step as f64)
                    .timeout(timeout_ms)
                    .post_raw()
                    .await?;
                read_answer(resp, self.max_answer).await
            },
        )
        .await;
        match result {
            Ok(r) => match r.into_inner().0 {
                Data::Matrix(series) => Ok(series
                    .into_iter()
                    .map(|s| {
                        let (labels, samples) = s.into_inner();
                        let points = samples
                            .into_iter()
                            .map(|s| (s.timestamp().round() as i64, s.value()))
                            .collect();
                        (labels, points)
                    })
                    .collect()),
                Data::Vector(_) => Err(ChunkError::Permanent(
                    "expected a matrix, got a vector".into(),
                )),
                Data::Scalar(_) => Err(ChunkError::Permanent(
                    "expected a matrix, got a scalar".into(),
                )),
            },
            Err((e, attempts)) => {
                let msg = chain(&e);
                if let AnswerError::TooLarge(_) = e {
                    Err(ChunkError::TooLarge(msg))
                } else if msg.contains("too many samples") {
                    Err(ChunkError::TooManySamples(msg))
                } else if is_transient(&e) {
                    Err(ChunkError::Exhausted(msg, attempts))
                } else {
                    Err(ChunkError::Permanent(msg))
                }
            }
        }
    }
}

/// Whether retrying `e` may help.
fn is_transient(e: &AnswerError) -> bool {
    match e {
        AnswerError::Prom(e) => is_transient_prom(e),
        AnswerError::TooLarge(_) => false,
        AnswerError::Unreadable(_) => true,
    }
}

fn is_transient_prom(e: &PromError) -> bool {
    match e {
        PromError::Client(_) => true,
        PromError::Prometheus(p) => {
            !p.message().contains("too many samples")
                && (p.is_timeout() || p.is_internal() || p.is_unavailable() || p.is_canceled())
        }
        _ => false,
    }
}
