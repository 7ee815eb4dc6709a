//! [`RangeQuerier`]: one PromQL range query, chunked under Prometheus' limits, with
//! per-request timeouts and jittered retries. Shared by the per-bucket and the per-service
//! Prometheus sources.
//!
//! Chunks hold at most `max_points_per_query` points per series (11,000 is Prometheus'
//! limit). A chunk refused for loading too many samples (`--query.max-samples`, 50M by
//! default, counts series × steps) is split in halves and retried. Connection errors, HTTP
//! timeouts, 5xx and Prometheus' timeout/internal/unavailable errors are retried; bad PromQL
//! is not. A chunk whose answer is longer than `max_answer_bytes` is split in halves too, at
//! most [`MAX_ANSWER_SPLITS`] times deep (a server sending an endless answer costs a few
//! reads of the limit, not the whole answer).

use super::chunk::{self, Chunk};
use super::error::chain;
use grl_core::backoff::Backoff;

use super::prometheus::{AnswerError, read_answer};
use super::retry::{Retry, retry};
use super::{PromSettings, SourceError};
use prometheus_http_query::{Client, Error as PromError, response::Data};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tracing::{debug, warn};

/// How many times a chunk is halved because its answer was too long (8 times the limit).
const MAX_ANSWER_SPLITS: u32 = 3;

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
