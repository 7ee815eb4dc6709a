//! [`fetch_all`]: many buckets from one source with bounded concurrency.

use super::{BucketQuery, Measure, MetricsSource, RangeSeries, SourceError};
use futures::stream::{self, StreamExt};

/// Fetches `measure` for every query, at most `concurrency` requests in flight (at least
/// one). Results are in the order of `queries`; `progress(done, total)` is called as each
/// finishes, in completion order. One bucket failing does not stop the others.
pub async fn fetch_all(
    source: &dyn MetricsSource,
    queries: &[BucketQuery],
    measure: Measure,
    start: i64,
    end: i64,
    concurrency: usize,
    progress: impl Fn(usize, usize) + Send + Sync,
) -> Vec<Result<RangeSeries, SourceError>> {
    let total = queries.len();
    let mut results: Vec<Option<Result<RangeSeries, SourceError>>> =
        (0..total).map(|_| None).collect();
    let mut done = 0;
    let mut running = stream::iter(queries.iter().enumerate())
        .map(|(i, q)| async move { (i, source.fetch(q, measure, start, end).await) })
        .buffer_unordered(concurrency.max(1));
    while let Some((i, r)) = running.next().await {
        if let Err(e) = &r {
            tracing::warn!(bucket = %queries[i].name(), error = %e, "fetch failed");
        }
        results[i] = Some(r);
        done += 1;
        progress(done, total);
    }
    results
        .into_iter()
        .map(|r| r.expect("every query yields one result"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::source::FetchFuture;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Answers with the bucket's index as the value, after a delay that makes later
    /// buckets finish first; records the highest concurrency seen.
    struct Slow {
        in_flight: AtomicUsize,
        peak: AtomicUsize,
    }

    impl MetricsSource for Slow {
        fn fetch<'a>(&'a self, q: &'a BucketQuery, _: Measure, _: i64, _: i64) -> FetchFuture<'a> {
            Box::pin(async move {
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.peak.fetch_max(now, Ordering::SeqCst);
                let i: i64 = q.bucket.parse().unwrap();
                tokio::time::sleep(Duration::from_millis(5 * (10 - i as u64))).await;
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                if i == 3 {
                    return Err(SourceError::Template {
                        message: "boom".into(),
                    });
                }
                Ok(RangeSeries {
                    step_secs: 60,
                    points: vec![(0, i as f64)],
                    invalid: 0,
                })
            })
        }
        fn describe(&self) -> String {
            "slow".into()
        }
    }

    #[tokio::test]
    async fn keeps_input_order_bounds_concurrency_and_reports_progress() {
        let src = Slow {
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        };
        let queries: Vec<BucketQuery> = (0..10)
            .map(|i| BucketQuery {
                service: "s".into(),
                bucket: i.to_string(),
                caller: None,
                procedure: None,
            })
            .collect();
        let seen = Mutex::new(Vec::new());
        let out = fetch_all(&src, &queries, Measure::Offered, 0, 60, 3, |d, t| {
            seen.lock().unwrap().push((d, t));
        })
        .await;
        assert_eq!(out.len(), 10);
        for (i, r) in out.iter().enumerate() {
            match r {
                Ok(s) => assert_eq!(s.points, vec![(0, i as f64)]),
                Err(e) => assert_eq!((i, e.to_string()), (3, "query template: boom".to_string())),
            }
        }
        assert_eq!(src.peak.load(Ordering::SeqCst), 3);
        assert_eq!(
            *seen.lock().unwrap(),
            (1..=10).map(|d| (d, 10)).collect::<Vec<_>>()
        );
    }
}
