//! The history of a bucket's priority classes: each class's offered rate from the client
//! metric [`CLASS_REQUESTS_TOTAL`] (`{service, bucket, class, decision}`), one range query
//! per bucket, peaks kept per step as a bucket's are:
//!
//! ```text
//! max_over_time((sum by (class) (rate(grl_client_class_requests_total{service="s",bucket="b"}[<rate_window>])))[<step>s:<resolution>s])
//! ```
//!
//! The RLC computes limits on a bucket's total as without classes; the classes' history
//! only shows how each class would fare at that limit ([`crate::decide::class_fate`]).

use std::collections::BTreeMap;

use grl_core::metric_names::{CLASS_REQUESTS_TOTAL, LABEL_CLASS};

use super::prom_client::{PromSettings, RangeQuerier};
use super::{RangeSeries, SourceError, escape_label_value};

/// The range-query expression of `service`'s bucket `bucket`'s classes.
pub(super) fn expression(service: &str, bucket: &str, settings: &PromSettings) -> String {
    format!(
        "max_over_time((sum by ({LABEL_CLASS}) (rate({CLASS_REQUESTS_TOTAL}{{service=\"{}\",bucket=\"{}\"}}[{}])))[{}s:{}s])",
        escape_label_value(service),
        escape_label_value(bucket),
        settings.rate_window,
        settings.step_secs,
        settings.resolution_secs
    )
}

/// Each class's series of `service`'s bucket `bucket` over `[start, end]`, by class name
/// (no class history is an empty list).
pub(super) async fn fetch(
    querier: &RangeQuerier,
    settings: &PromSettings,
    service: &str,
    bucket: &str,
    start: i64,
    end: i64,
) -> Result<Vec<(String, RangeSeries)>, SourceError> {
    let what = format!("{service}/{bucket} (classes)");
    let expr = expression(service, bucket, settings);
    let found = querier
        .run(&what, &expr, start, end, settings.step_secs)
        .await?;
    let mut by_class: BTreeMap<String, BTreeMap<i64, f64>> = BTreeMap::new();
    for (labels, points) in found {
        let class = labels.get(LABEL_CLASS).cloned().unwrap_or_default();
        let sums = by_class.entry(class).or_default();
        for (t, v) in points {
            *sums.entry(t).or_insert(0.0) += v;
        }
    }
    Ok(by_class
        .into_iter()
        .map(|(class, sums)| {
            let mut s = RangeSeries {
                step_secs: settings.step_secs,
                points: sums.into_iter().collect(),
                invalid: 0,
            };
            s.normalise();
            (class, s)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_query_per_bucket_sums_each_class_and_keeps_peaks() {
        assert_eq!(
            expression("pay\"s", "checkout", &PromSettings::default()),
            r#"max_over_time((sum by (class) (rate(grl_client_class_requests_total{service="pay\"s",bucket="checkout"}[2m])))[300s:60s])"#
        );
    }
}
