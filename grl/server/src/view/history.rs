//! The last minutes of every bucket's offered rate, for the `/status` page's sparklines:
//! one sample per bucket every few seconds, the oldest dropped beyond a fixed count. A
//! bucket that leaves the config leaves the history with its next sample.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use grl_core::proto;

/// Samples of offered load by bucket.
#[derive(Debug)]
pub struct History {
    every: Duration,
    keep: usize,
    series: HashMap<(String, String), VecDeque<f32>>,
}

impl History {
    /// A history of `keep` samples taken `every` apart (what [`History::record`]'s caller
    /// promises).
    pub fn new(every: Duration, keep: usize) -> Self {
        Self {
            every,
            keep: keep.max(2),
            series: HashMap::new(),
        }
    }

    /// How far apart samples are.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// How long the full history spans.
    pub fn span(&self) -> Duration {
        self.every * self.keep as u32
    }

    /// Adds one sample of every bucket of `status`; buckets it does not list are forgotten.
    pub fn record(&mut self, status: &proto::StatusResponse) {
        let mut next = HashMap::with_capacity(status.buckets.len());
        for b in &status.buckets {
            let key = (b.service.clone(), b.bucket.clone());
            let mut s = self.series.remove(&key).unwrap_or_default();
            if s.len() == self.keep {
                s.pop_front();
            }
            s.push_back(b.offered as f32);
            next.insert(key, s);
        }
        self.series = next;
    }

    /// The samples of one bucket, oldest first.
    pub fn of(&self, service: &str, bucket: &str) -> Option<&VecDeque<f32>> {
        self.series.get(&(service.to_string(), bucket.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(buckets: &[(&str, f64)]) -> proto::StatusResponse {
        proto::StatusResponse {
            buckets: buckets
                .iter()
                .map(|(b, o)| proto::BucketStatus {
                    service: "s".into(),
                    bucket: (*b).into(),
                    offered: *o,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn keeps_the_last_samples_and_forgets_buckets_that_left() {
        let mut h = History::new(Duration::from_secs(5), 3);
        for o in [1.0, 2.0, 3.0, 4.0] {
            h.record(&status(&[("a", o), ("b", 10.0 * o)]));
        }
        assert_eq!(h.of("s", "a").unwrap(), &[2.0, 3.0, 4.0]);
        h.record(&status(&[("a", 5.0)]));
        assert_eq!(h.of("s", "a").unwrap(), &[3.0, 4.0, 5.0]);
        assert!(h.of("s", "b").is_none(), "b left the config");
        assert_eq!(h.span(), Duration::from_secs(15));
    }
}
