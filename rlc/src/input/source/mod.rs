//! Metrics sources: where the RLC reads per-bucket request-rate history.
//!
//! A [`MetricsSource`] answers one question: for a bucket ([`BucketQuery`]) and a
//! [`Measure`], what was the request rate (requests per second) between two instants, at a
//! fixed step, *keeping peaks* (each point is the maximum rate seen during the step that
//! ends at its timestamp)? Two sources exist:
//!
//! - [`PrometheusSource`]: PromQL range queries against Prometheus (or any PromQL-compatible
//!   store), chunked under Prometheus' limits, with timeouts and jittered retries. The
//!   expression is a user-editable [`QueryTemplate`], so an existing mesh metric (for example
//!   Istio's `istio_requests_total`) can be used instead of the GRL contract below.
//! - [`BatchedPrometheusSource`]: the fast path for the GRL contract metric: one query per
//!   service, buckets assembled client-side (1,000 buckets × 28 days in seconds).
//! - [`FileSource`]: offline runs from CSV files or one OpenMetrics text file.
//!
//! [`fetch_all`] fetches many buckets with bounded concurrency. The Prometheus sources also
//! read the history of a bucket's priority classes ([`MetricsSource::fetch_classes`]).
//!
//! # Metrics contract
//! GRL clients export [`REQUESTS_TOTAL`] (`grl_requests_total`), a counter of every *offered*
//! request, labelled [`LABEL_SERVICE`], [`LABEL_CALLER`], [`LABEL_PROCEDURE`], [`LABEL_BUCKET`]
//! and [`LABEL_DECISION`] (`allowed`, `dropped`, `shadow_dropped`). A bucket's offered rate is
//! the sum over all decisions of the series matching its rule: `caller` exact and/or
//! `procedure` exact, or a prefix when the rule ends with `*`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rlc::input::source::SourceError> {
//! use rlc::input::source::{BucketQuery, Measure, MetricsSource, PromSettings, PrometheusSource};
//! let prom = PrometheusSource::new("http://127.0.0.1:9090", PromSettings::default())?;
//! let q = BucketQuery {
//!     service: "payments".into(),
//!     bucket: "gateway-pay".into(),
//!     caller: Some("gateway".into()),
//!     procedure: Some("Pay/*".into()),
//! };
//! let end = 1_700_000_000;
//! let series = prom.fetch(&q, Measure::Offered, end - 28 * 86_400, end).await?;
//! println!("peak {:?} rps", series.max());
//! # Ok(()) }
//! ```

mod batched;
mod chunk;
mod classes;
mod error;
mod fetch_all;
mod file;
mod openmetrics;
mod prom_client;
mod prometheus;
mod query_template;
mod retry;
mod series;
#[cfg(test)]
mod tests;

pub use batched::BatchedPrometheusSource;
pub use error::SourceError;
pub use fetch_all::fetch_all;
pub use file::FileSource;
pub use prom_client::{MAX_ANSWER_BYTES, MAX_ERROR_BYTES, PromSettings};
pub use prometheus::PrometheusSource;
pub use query_template::{QueryTemplate, escape_label_value, escape_regex, selector};
pub use series::RangeSeries;

use std::future::Future;
use std::pin::Pin;

/// Name of the GRL counter of offered requests (the metrics contract, defined once in
/// [`grl_core::metric_names`]).
pub const REQUESTS_TOTAL: &str = grl_core::metric_names::REQUESTS_TOTAL;
/// Label: the service that owns the bucket.
pub const LABEL_SERVICE: &str = grl_core::metric_names::LABELS[0];
/// Label: the calling workload.
pub const LABEL_CALLER: &str = grl_core::metric_names::LABELS[1];
/// Label: the called procedure (for example a gRPC `Service/Method`).
pub const LABEL_PROCEDURE: &str = grl_core::metric_names::LABELS[2];
/// Label: the bucket that counted the request.
pub const LABEL_BUCKET: &str = grl_core::metric_names::LABELS[3];
/// Label: the decision taken (`allowed`, `dropped`, `shadow_dropped`).
pub const LABEL_DECISION: &str = grl_core::metric_names::LABELS[4];

/// One bucket to fetch: its identity and its match rule as written in the config.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BucketQuery {
    /// Service that owns the bucket.
    pub service: String,
    /// Bucket name (unique within the service).
    pub bucket: String,
    /// Exact caller to match, if the rule names one.
    pub caller: Option<String>,
    /// Procedure to match, as written: exact, or a prefix when it ends with `*`.
    pub procedure: Option<String>,
}

impl BucketQuery {
    /// The query of bucket `b` of `service`, its rule as written in the config.
    pub fn of(service: &str, b: &grl_config::Bucket) -> Self {
        Self {
            service: service.to_string(),
            bucket: b.name.clone(),
            caller: b.rule.caller.clone(),
            procedure: b
                .rule
                .procedure
                .as_ref()
                .map(grl_config::ProcedurePattern::as_written),
        }
    }

    /// `service/bucket`, the name used in logs and errors.
    pub fn name(&self) -> String {
        format!("{}/{}", self.service, self.bucket)
    }

    /// Whether a (caller, procedure) pair of label values falls under this bucket's rule.
    pub fn matches(&self, caller: &str, procedure: &str) -> bool {
        if self.caller.as_deref().is_some_and(|c| c != caller) {
            return false;
        }
        match self.procedure.as_deref() {
            None => true,
            Some(p) => match p.strip_suffix('*') {
                Some(prefix) => procedure.starts_with(prefix),
                None => p == procedure,
            },
        }
    }
}

/// What to measure for a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Measure {
    /// All offered requests, whatever the decision (the input of limit policies).
    Offered,
    /// Requests a shadow (dry-run) limit would have dropped.
    ShadowDropped,
    /// Requests actually dropped.
    Dropped,
}

impl Measure {
    /// The `decision` label value this measure selects, `None` for all decisions.
    pub fn decision(self) -> Option<&'static str> {
        match self {
            Measure::Offered => None,
            Measure::ShadowDropped => Some(grl_core::metric_names::DECISION_SHADOW_DROPPED),
            Measure::Dropped => Some(grl_core::metric_names::DECISION_DROPPED),
        }
    }

    /// Short lowercase name (`offered`, `shadow_dropped`, `dropped`).
    pub fn as_str(self) -> &'static str {
        self.decision().unwrap_or("offered")
    }
}

/// The future returned by [`MetricsSource::fetch`].
pub type FetchFuture<'a> =
    Pin<Box<dyn Future<Output = Result<RangeSeries, SourceError>> + Send + 'a>>;

/// The future returned by [`MetricsSource::fetch_service`].
pub type FetchManyFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<RangeSeries>, SourceError>> + Send + 'a>>;

/// The future returned by [`MetricsSource::fetch_classes`].
pub type FetchClassesFuture<'a> = Pin<
    Box<dyn Future<Output = Result<Option<Vec<(String, RangeSeries)>>, SourceError>> + Send + 'a>,
>;

/// The future returned by [`MetricsSource::instant`].
pub type InstantFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<f64>, SourceError>> + Send + 'a>>;

/// A store of per-bucket request-rate history.
pub trait MetricsSource: Send + Sync {
    /// The rate of `measure` for bucket `q` between `start` and `end` (unix seconds), one
    /// point per step holding the peak rate within that step. No data is an empty series,
    /// not an error.
    fn fetch<'a>(
        &'a self,
        q: &'a BucketQuery,
        measure: Measure,
        start: i64,
        end: i64,
    ) -> FetchFuture<'a>;

    /// Human description for logs and errors, e.g. `prometheus at http://127.0.0.1:9090`.
    fn describe(&self) -> String;

    /// `measure` for several buckets of one service over the same range, in order; the
    /// first error fails the whole. The default fetches each bucket in turn; a source that
    /// reads a service in one query ([`BatchedPrometheusSource`]) overrides it and keeps
    /// nothing afterwards.
    fn fetch_service<'a>(
        &'a self,
        queries: &'a [BucketQuery],
        measure: Measure,
        start: i64,
        end: i64,
    ) -> FetchManyFuture<'a> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(queries.len());
            for q in queries {
                out.push(self.fetch(q, measure, start, end).await?);
            }
            Ok(out)
        })
    }

    /// Everything besides the bucket's rule that decides what a fetch returns (the URL,
    /// query template, steps): the history cache refetches a bucket whose cached series was
    /// read under another identity. Defaults to [`MetricsSource::describe`].
    fn cache_identity(&self) -> String {
        self.describe()
    }

    /// The value at `at` (unix seconds) of the PromQL expression `expr`, summed over its
    /// series (`None`: it returned no series); `what` names it in errors. A planned
    /// capacity given as a query is read this way. A source that cannot evaluate PromQL
    /// (files) refuses.
    fn instant<'a>(&'a self, what: &'a str, expr: &'a str, at: i64) -> InstantFuture<'a> {
        let _ = (expr, at);
        Box::pin(async move {
            Err(SourceError::NoPromql {
                source_desc: self.describe(),
                what: what.to_owned(),
            })
        })
    }

    /// The offered rate of each priority class of `service`'s bucket `bucket` between
    /// `start` and `end`, by class name, peaks kept per step as [`MetricsSource::fetch`]
    /// keeps them (read from the client metric `grl_client_class_requests_total`). `None`:
    /// this source keeps no class history (files).
    fn fetch_classes<'a>(
        &'a self,
        service: &'a str,
        bucket: &'a str,
        start: i64,
        end: i64,
    ) -> FetchClassesFuture<'a> {
        let _ = (service, bucket, start, end);
        Box::pin(async { Ok(None) })
    }

    /// Whether the history it returns for a past step stays the same, so that the history
    /// cache may keep it (true for Prometheus; false for files, which may be edited).
    fn cacheable(&self) -> bool {
        true
    }
}
