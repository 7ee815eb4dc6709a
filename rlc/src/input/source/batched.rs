//! [`BatchedPrometheusSource`]: the fast path for the GRL contract metric — one range query
//! per service and measure instead of one per bucket.
//!
//! For each (service, measure) it evaluates, at the resolution (default 60 s) and chunked,
//!
//! ```text
//! sum by (caller, procedure) (rate(grl_requests_total{service="S"[,decision="D"]}[2m]))
//! ```
//!
//! keeps the per-pair series in memory (f32, one slot per resolution step), and assembles
//! each bucket client-side: the sum of the pairs its rule matches at each resolution step,
//! then the maximum within each output step that ends at a step boundary (`(t - step, t]`).
//! The result equals [`super::PrometheusSource`] with the default template (Prometheus 2.x
//! subqueries also include the sample at `t - step`, which can only matter for a peak lying
//! exactly on a step boundary).
//!
//! Use it for the GRL metric with many buckets per service; custom metrics (templates)
//! need the per-bucket [`super::PrometheusSource`]. A run reads each service once through
//! [`MetricsSource::fetch_service`], which keeps nothing afterwards; services loaded by
//! single-bucket [`MetricsSource::fetch`] calls stay cached for the life of the source
//! (until [`BatchedPrometheusSource::clear_cache`]). Memory is about 4 bytes × pairs ×
//! resolution steps per service loaded (250 pairs × 28 days at 60 s ≈ 40 MB).

use super::prom_client::RangeQuerier;
use super::{
    BucketQuery, FetchClassesFuture, FetchFuture, FetchManyFuture, InstantFuture, LABEL_CALLER,
    LABEL_DECISION, LABEL_PROCEDURE, LABEL_SERVICE, Measure, MetricsSource, PromSettings,
    REQUESTS_TOTAL, RangeSeries, SourceError, escape_label_value,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;

type Key = (String, Measure, i64, i64);
type Loaded = Result<Arc<ServiceData>, SourceError>;

/// Per-service batched reader of `grl_requests_total` (see the module doc).
#[derive(Debug)]
pub struct BatchedPrometheusSource {
    querier: RangeQuerier,
    settings: PromSettings,
    cache: Mutex<HashMap<Key, Arc<OnceCell<Loaded>>>>,
}

/// One service's per-(caller, procedure) rates on the resolution grid.
#[derive(Debug)]
struct ServiceData {
    /// Timestamp of slot 0.
    first: i64,
    /// `(caller, procedure, rate per slot, NaN = no data)`.
    pairs: Vec<(String, String, Vec<f32>, usize)>,
}

impl BatchedPrometheusSource {
    /// A batched source for the Prometheus at `url`. `settings.query_template` is not used;
    /// `step_secs` must be a multiple of `resolution_secs`.
    pub fn new(url: &str, settings: PromSettings) -> Result<Self, SourceError> {
        settings.validate(url)?;
        if settings.step_secs % settings.resolution_secs != 0 {
            return Err(SourceError::InvalidUrl {
                url: crate::secrets::redact_url(url),
                message: format!(
                    "step_secs ({}) must be a multiple of resolution_secs ({})",
                    settings.step_secs, settings.resolution_secs
                ),
            });
        }
        let querier = RangeQuerier::new(url, &settings)?;
        Ok(BatchedPrometheusSource {
            querier,
            settings,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The per-service expression for a measure.
    pub fn expression(&self, service: &str, measure: Measure) -> String {
        let decision = measure
            .decision()
            .map(|d| format!(",{LABEL_DECISION}=\"{d}\""))
            .unwrap_or_default();
        format!(
            "sum by ({LABEL_CALLER}, {LABEL_PROCEDURE}) (rate({REQUESTS_TOTAL}{{{LABEL_SERVICE}=\"{}\"{decision}}}[{}]))",
            escape_label_value(service),
            self.settings.rate_window
        )
    }

    /// Drops every cached service (the next fetch queries Prometheus again).
    pub fn clear_cache(&self) {
        self.cache.lock().expect("cache lock").clear();
    }

    /// The output steps `(first, last)` for `[start, end]`, or `None` when none fits.
    fn steps(&self, start: i64, end: i64) -> Option<(i64, i64)> {
        let step = self.settings.step_secs;
        let first =
            start.div_euclid(step) * step + if start.rem_euclid(step) == 0 { 0 } else { step };
        let last = end.div_euclid(step) * step;
        (first <= last).then_some((first, last))
    }

    async fn load(&self, service: &str, measure: Measure, first: i64, last: i64) -> Loaded {
        let res = self.settings.resolution_secs;
        let grid_start = first - self.settings.step_secs + res;
        let slots = ((last - grid_start) / res + 1) as usize;
        let what = format!("service {service}");
        let expr = self.expression(service, measure);
        let series = self
            .querier
            .run(&what, &expr, grid_start, last, res)
            .await?;
        let pairs = series
            .into_iter()
            .map(|(labels, points)| {
                let mut v = vec![f32::NAN; slots];
                let mut invalid = 0;
                for (t, x) in points {
                    let i = (t - grid_start) / res;
                    if !super::series::is_rate(x) {
                        invalid += 1;
                    } else if (0..slots as i64).contains(&i) {
                        v[i as usize] = x as f32;
                    }
                }
                let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
                (get(LABEL_CALLER), get(LABEL_PROCEDURE), v, invalid)
            })
            .collect::<Vec<_>>();
        tracing::debug!(
            service,
            measure = measure.as_str(),
            pairs = pairs.len(),
            slots,
            "service loaded"
        );
        Ok(Arc::new(ServiceData {
            first: grid_start,
            pairs,
        }))
    }

    async fn fetch_series(
        &self,
        q: &BucketQuery,
        measure: Measure,
        start: i64,
        end: i64,
    ) -> Result<RangeSeries, SourceError> {
        let step = self.settings.step_secs;
        let Some((first, last)) = self.steps(start, end) else {
            return Ok(RangeSeries::empty(step));
        };
        let cell = {
            let mut cache = self.cache.lock().expect("cache lock");
            cache
                .entry((q.service.clone(), measure, first, last))
                .or_default()
                .clone()
        };
        let data = cell
            .get_or_init(|| self.load(&q.service, measure, first, last))
            .await
            .clone()?;
        Ok(assemble(
            &data,
            q,
            self.settings.resolution_secs,
            step,
            first,
            last,
        ))
    }
}

/// Sums the pairs matching `q` per slot, then takes the max per output step.
fn assemble(
    data: &ServiceData,
    q: &BucketQuery,
    res: i64,
    step: i64,
    first: i64,
    last: i64,
) -> RangeSeries {
    let matching: Vec<&Vec<f32>> = data
        .pairs
        .iter()
        .filter(|(c, p, _, _)| q.matches(c, p))
        .map(|p| &p.2)
        .collect();
    let invalid = data
        .pairs
        .iter()
        .filter(|(c, p, _, _)| q.matches(c, p))
        .map(|p| p.3)
        .sum();
    if matching.is_empty() {
        return RangeSeries::empty(step);
    }
    let per_step = (step / res) as usize;
    let mut points = Vec::new();
    let mut t = first;
    while t <= last {
        let hi = ((t - data.first) / res) as usize;
        let mut peak: Option<f64> = None;
        for i in hi + 1 - per_step..=hi {
            let mut sum: Option<f64> = None;
            for v in &matching {
                let x = v[i];
                if !x.is_nan() {
                    *sum.get_or_insert(0.0) += f64::from(x);
                }
            }
            if let Some(s) = sum {
                peak = Some(peak.map_or(s, |p| p.max(s)));
            }
        }
        if let Some(p) = peak {
            points.push((t, p));
        }
        t += step;
    }
    RangeSeries {
        step_secs: step,
        points,
        invalid,
    }
}

impl MetricsSource for BatchedPrometheusSource {
    fn fetch<'a>(
        &'a self,
        q: &'a BucketQuery,
        measure: Measure,
        start: i64,
        end: i64,
    ) -> FetchFuture<'a> {
        Box::pin(self.fetch_series(q, measure, start, end))
    }

    fn fetch_service<'a>(
        &'a self,
        queries: &'a [BucketQuery],
        measure: Measure,
        start: i64,
        end: i64,
    ) -> FetchManyFuture<'a> {
        Box::pin(async move {
            let step = self.settings.step_secs;
            let (Some((first, last)), Some(q)) = (self.steps(start, end), queries.first()) else {
                return Ok(queries.iter().map(|_| RangeSeries::empty(step)).collect());
            };
            let data = self.load(&q.service, measure, first, last).await?;
            let res = self.settings.resolution_secs;
            Ok(queries
                .iter()
                .map(|q| assemble(&data, q, res, step, first, last))
                .collect())
        })
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
            "batched {} rate_window={} resolution={}s step={}s",
            self.querier.describe(),
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
    fn assemble_sums_matching_pairs_then_keeps_the_step_peak() {
        let nan = f32::NAN;
        let data = ServiceData {
            first: 60,
            pairs: vec![
                (
                    "gw".into(),
                    "Pay/Card".into(),
                    vec![1.0, 2.0, 3.0, 4.0, nan, nan],
                    0,
                ),
                (
                    "gw".into(),
                    "Pay/Bank".into(),
                    vec![10.0, 0.0, 0.0, 0.0, nan, nan],
                    2,
                ),
                ("gw".into(), "Refund".into(), vec![100.0; 6], 5),
            ],
        };
        let q = BucketQuery {
            service: "s".into(),
            bucket: "b".into(),
            caller: Some("gw".into()),
            procedure: Some("Pay/*".into()),
        };
        // Steps of 180 s end at 180 (slots 0..=2) and 360 (slots 3..=5).
        let s = assemble(&data, &q, 60, 180, 180, 360);
        assert_eq!(s.points, vec![(180, 11.0), (360, 4.0)]);
        assert_eq!(s.invalid, 2, "invalid values of the matching pairs only");
        let none = BucketQuery {
            caller: Some("nobody".into()),
            ..q
        };
        assert!(assemble(&data, &none, 60, 180, 180, 360).is_empty());
    }

    #[test]
    fn expression_selects_service_and_decision() {
        let b =
            BatchedPrometheusSource::new("http://127.0.0.1:9090", PromSettings::default()).unwrap();
        assert_eq!(
            b.expression("pay\"x", Measure::ShadowDropped),
            r#"sum by (caller, procedure) (rate(grl_requests_total{service="pay\"x",decision="shadow_dropped"}[2m]))"#
        );
        let bad = PromSettings {
            step_secs: 90,
            ..PromSettings::default()
        };
        assert!(BatchedPrometheusSource::new("http://127.0.0.1:9090", bad).is_err());
    }
}
