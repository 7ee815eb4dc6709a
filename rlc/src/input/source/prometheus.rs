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
//! (see the `prom_client` module). An empty result is an empty series.
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

use super::prom_client::{PromSettings, RangeQuerier};
use super::{
    BucketQuery, FetchClassesFuture, FetchFuture, InstantFuture, Measure, MetricsSource,
    QueryTemplate, RangeSeries, SourceError,
};
use std::collections::BTreeMap;
use tracing::debug;

/// Reads bucket rates from Prometheus (or any PromQL-compatible API), one range query per
/// bucket (and chunk).
#[derive(Debug, Clone)]
pub struct PrometheusSource {
    querier: RangeQuerier,
    settings: PromSettings,
    template: QueryTemplate,
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

    fn fetch_classes<'a>(
        &'a self,
        service: &'a str,
        bucket: &'a str,
        start: i64,
        end: i64,
    ) -> FetchClassesFuture<'a> {
        Box::pin(async move {
            super::classes::fetch(&self.querier, &self.settings, service, bucket, start, end)
                .await
                .map(Some)
        })
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
