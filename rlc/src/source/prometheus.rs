//! [`PrometheusSource`]: per-bucket PromQL range queries, peaks kept server-side.
//!
//! For each bucket the [`QueryTemplate`] renders an *inner* instant expression (a rate in
//! requests per second), which is wrapped to keep peaks:
//!
//! ```text
//! max_over_time((<inner>)[<step>s:<resolution>s])
//! ```
//!
//! and evaluated as a range query at `step_secs`: each point is the highest rate seen at the
//! resolution during the step that ends at it. Four weeks at the default 300 s step is 8,064
//! points, one request; longer windows or finer steps are chunked, with timeouts and retries
//! (see the `range_query` module). An empty result is an empty series.
//!
//! # Custom metrics
//! Point the RLC at an existing mesh metric with a template, for example Istio's:
//!
//! ```text
//! sum(rate(istio_requests_total{destination_service_name="{{service}}",source_workload="{{caller}}",reporter="destination"}[{{rate_window}}]))
//! ```
//!
//! The template must return one series (wrap it in `sum(...)`); several series are summed
//! per timestamp after the peak is taken, which overestimates.
//!
//! # Answers read
//! [`read_answer`] reads an answer incrementally: at most [`MAX_ANSWER_BYTES`] of a success
//! (a chunk whose answer is longer is split in halves, a few times at most), at most
//! [`MAX_ERROR_BYTES`] of an error, whose message is all that is shown.

use super::chunk::PROMETHEUS_MAX_POINTS;
use super::error::chain;
use super::query_template::DEFAULT_TEMPLATE;
use super::range_query::RangeQuerier;
use super::{
    BucketQuery, FetchFuture, InstantFuture, Measure, MetricsSource, QueryTemplate, RangeSeries,
    SourceError,
};
use prometheus_http_query::Error as PromError;
use prometheus_http_query::error::PrometheusError;
use prometheus_http_query::response::PromqlResult;
use std::collections::BTreeMap;
use std::time::Duration;
use tracing::debug;

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

/// Reads bucket rates from Prometheus (or any PromQL-compatible API), one range query per
/// bucket (and chunk).
#[derive(Debug, Clone)]
pub struct PrometheusSource {
    querier: RangeQuerier,
    settings: PromSettings,
    template: QueryTemplate,
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

impl PrometheusSource {
    /// A source for the Prometheus at `url` (e.g. `http://127.0.0.1:9090`). Fails on a bad
    /// URL, template or settings; does not contact the server.
    pub fn new(url: &str, settings: PromSettings) -> Result<Self, SourceError> {
        settings.validate(url)?;
        let template = QueryTemplate::parse(&settings.query_template)?;
        let querier = RangeQuerier::new(url, &settings)?;
        Ok(PrometheusSource {
            querier,
            settings,
            template,
        })
    }

    /// The settings in use.
    pub fn settings(&self) -> &PromSettings {
        &self.settings
    }

    /// The PromQL range-query expression sent for a bucket and measure.
    pub fn expression(&self, q: &BucketQuery, measure: Measure) -> Result<String, SourceError> {
        let inner = self
            .template
            .render(q, measure, &self.settings.rate_window)?;
        Ok(format!(
            "max_over_time(({inner})[{}s:{}s])",
            self.settings.step_secs, self.settings.resolution_secs
        ))
    }

    async fn fetch_series(
        &self,
        q: &BucketQuery,
        measure: Measure,
        start: i64,
        end: i64,
    ) -> Result<RangeSeries, SourceError> {
        let expr = self.expression(q, measure)?;
        let series = self
            .querier
            .run(&q.name(), &expr, start, end, self.settings.step_secs)
            .await?;
        if series.len() > 1 {
            debug!(bucket = %q.name(), series = series.len(), "template returned several series, summing");
        }
        let mut sums: BTreeMap<i64, f64> = BTreeMap::new();
        for (t, v) in series.into_iter().flat_map(|s| s.1) {
            *sums.entry(t).or_insert(0.0) += v;
        }
        let mut out = RangeSeries {
            step_secs: self.settings.step_secs,
            points: sums.into_iter().collect(),
            invalid: 0,
        };
        out.normalise();
        Ok(out)
    }
}

impl MetricsSource for PrometheusSource {
    fn fetch<'a>(
        &'a self,
        q: &'a BucketQuery,
        measure: Measure,
        start: i64,
        end: i64,
    ) -> FetchFuture<'a> {
        Box::pin(self.fetch_series(q, measure, start, end))
    }

    fn instant<'a>(&'a self, what: &'a str, expr: &'a str, at: i64) -> InstantFuture<'a> {
        Box::pin(self.querier.instant(what, expr, at))
    }

    fn describe(&self) -> String {
        self.querier.describe()
    }

    fn cache_identity(&self) -> String {
        let s = &self.settings;
        format!(
            "{} template={} rate_window={} resolution={}s step={}s",
            self.querier.describe(),
            s.query_template,
            s.rate_window,
            s.resolution_secs,
            s.step_secs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expression_wraps_the_template_to_keep_peaks() {
        let p = PrometheusSource::new("http://127.0.0.1:9090/", PromSettings::default()).unwrap();
        let q = BucketQuery {
            service: "payments".into(),
            bucket: "b".into(),
            caller: Some("gw".into()),
            procedure: Some("Pay/*".into()),
        };
        assert_eq!(
            p.expression(&q, Measure::ShadowDropped).unwrap(),
            r#"max_over_time((sum(rate(grl_requests_total{service="payments",caller="gw",procedure=~"Pay/.*",decision="shadow_dropped"}[2m])))[300s:60s])"#
        );
        assert_eq!(p.describe(), "prometheus at http://127.0.0.1:9090");
    }

    #[test]
    fn bad_settings_and_urls_are_refused() {
        let s = PromSettings {
            resolution_secs: 600,
            ..PromSettings::default()
        };
        assert!(PrometheusSource::new("http://127.0.0.1:9090", s).is_err());
        let err = PrometheusSource::new("not a url", PromSettings::default()).unwrap_err();
        assert!(err.to_string().contains("not a url"), "{err}");
        let s = PromSettings {
            query_template: "x{{nope}}".into(),
            ..PromSettings::default()
        };
        assert!(PrometheusSource::new("http://127.0.0.1:9090", s).is_err());
    }
}
