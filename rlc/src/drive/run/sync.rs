//! The fetch phase: brings each bucket's history in the cache up to the run's "now",
//! service by service, fetching from the metrics source only what the cache lacks.
//!
//! For each computed bucket a service needs its offered rate over its longest window, and
//! the drops of the lifecycle review (shadow buckets: virtual drops; deny buckets: drops)
//! over the review's days. A cached entry fetched under the same fingerprint that reaches
//! the range's start is completed from its last steps ([`REFETCH_STEPS`] of them again);
//! any other is fetched in full. Buckets of a service fetched alike go in one
//! [`MetricsSource::fetch_service`] call. Nothing is kept in memory past the service.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

use crate::input::cache::{self, HistoryCache, REFETCH_STEPS, ServiceLog, grid_ceil};
use crate::input::source::{BucketQuery, Measure, MetricsSource};

use super::RunError;

/// One series a service needs: a bucket, a measure, from when.
#[derive(Debug, Clone)]
pub(super) struct Want {
    pub query: BucketQuery,
    pub measure: Measure,
    pub start: i64,
}

/// What one service needs, and how long its cache log must keep.
#[derive(Debug, Clone)]
pub(super) struct ServiceWants {
    pub service: String,
    pub wants: Vec<Want>,
    /// The longest range any of its series needs (seconds).
    pub keep_secs: i64,
    /// Its computed buckets (the progress counts them).
    pub buckets: BTreeSet<String>,
}

/// Counts of one run's fetches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FetchStats {
    /// Series fetched in full (nothing usable cached).
    pub full: usize,
    /// Series fetched only past the cached steps.
    pub incremental: usize,
    /// Series already brought up to "now" by this run.
    pub reused: usize,
    /// The cache's size on disk after the fetch phase.
    pub cache_bytes: u64,
}

/// The run's side of the cache: what it already synced, which series held values that
/// are no rate, and counts.
pub(super) struct Syncer<'a> {
    pub source: &'a dyn MetricsSource,
    pub cache: HistoryCache,
    pub now: i64,
    /// (service, bucket, measure, fingerprint) brought up to `now` by this run.
    synced: Mutex<HashSet<(String, String, Measure, u64)>>,
    /// Values that are no rate per (service, bucket) of the offered series (not cached),
    /// and whether it held usable points besides.
    invalid: Mutex<HashMap<(String, String), (usize, bool)>>,
    stats: Mutex<FetchStats>,
    identity: String,
    cacheable: bool,
}

/// How one group of series is fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Group {
    measure: u8,
    start: i64,
    tail: bool,
}

fn measure_rank(m: Measure) -> u8 {
    match m {
        Measure::Offered => 0,
        Measure::ShadowDropped => 1,
        Measure::Dropped => 2,
    }
}

impl<'a> Syncer<'a> {
    pub(super) fn new(source: &'a dyn MetricsSource, cache: HistoryCache, now: i64) -> Self {
        Syncer {
            identity: source.cache_identity(),
            cacheable: source.cacheable(),
            source,
            cache,
            now,
            synced: Mutex::default(),
            invalid: Mutex::default(),
            stats: Mutex::default(),
        }
    }

    /// The fingerprint of a bucket's series.
    pub(super) fn fingerprint(&self, q: &BucketQuery) -> u64 {
        cache::fingerprint(&self.identity, q.caller.as_deref(), q.procedure.as_deref())
    }

    /// Values that are no rate in the offered series of `service`/`bucket` this run, and
    /// whether it held usable points besides.
    pub(super) fn invalid(&self, service: &str, bucket: &str) -> Option<(usize, bool)> {
        self.invalid
            .lock()
            .expect("invalid lock")
            .get(&(service.to_string(), bucket.to_string()))
            .copied()
    }

    pub(super) fn stats(&self) -> FetchStats {
        *self.stats.lock().expect("stats lock")
    }

    pub(super) fn set_cache_bytes(&self, bytes: u64) {
        self.stats.lock().expect("stats lock").cache_bytes = bytes;
    }

    /// Brings `w`'s series in the cache up to "now".
    pub(super) async fn sync(&self, w: ServiceWants) -> Result<(), RunError> {
        let cache = self.cache.clone();
        let service = w.service.clone();
        let mut log = tokio::task::spawn_blocking(move || cache.load(&service)).await??;
        let mut groups: BTreeMap<Group, Vec<&Want>> = BTreeMap::new();
        for want in &w.wants {
            let fp = self.fingerprint(&want.query);
            let key = (
                w.service.clone(),
                want.query.bucket.clone(),
                want.measure,
                fp,
            );
            let plan = self.plan_fetch(&log, want, fp);
            let done = self.synced.lock().expect("synced lock").contains(&key);
            match plan {
                Some(_) if done => self.stats.lock().expect("stats lock").reused += 1,
                Some(start) if self.cacheable => groups
                    .entry(Group {
                        measure: measure_rank(want.measure),
                        start,
                        tail: true,
                    })
                    .or_default()
                    .push(want),
                _ => groups
                    .entry(Group {
                        measure: measure_rank(want.measure),
                        start: want.start,
                        tail: false,
                    })
                    .or_default()
                    .push(want),
            }
        }
        let mut retry: Vec<&Want> = Vec::new();
        for (group, wants) in groups {
            let refused = self
                .fetch_group(&mut log, group.start, group.tail, &wants)
                .await?;
            retry.extend(refused);
        }
        if !retry.is_empty() {
            let mut by_start: BTreeMap<(u8, i64), Vec<&Want>> = BTreeMap::new();
            for want in retry {
                by_start
                    .entry((measure_rank(want.measure), want.start))
                    .or_default()
                    .push(want);
            }
            for ((_, start), wants) in by_start {
                self.fetch_group(&mut log, start, false, &wants).await?;
            }
        }
        {
            let mut synced = self.synced.lock().expect("synced lock");
            for want in &w.wants {
                let fp = self.fingerprint(&want.query);
                synced.insert((
                    w.service.clone(),
                    want.query.bucket.clone(),
                    want.measure,
                    fp,
                ));
            }
        }
        let (now, keep, live) = (self.now, w.keep_secs, w.buckets);
        tokio::task::spawn_blocking(move || log.save(now, keep, &live)).await??;
        Ok(())
    }

    /// Where to start fetching `want` when its cached entry can be completed, `None` when
    /// it must be fetched in full.
    fn plan_fetch(&self, log: &ServiceLog, want: &Want, fp: u64) -> Option<i64> {
        let e = log.entry(&want.query.bucket, want.measure)?;
        let first = grid_ceil(want.start, e.step);
        let usable = e.fingerprint == fp && e.from <= first && e.to() >= first - e.step;
        usable.then(|| (e.to() - (REFETCH_STEPS - 1) * e.step).max(first))
    }

    /// Fetches `wants` (one measure) from `start` to now and stores them; returns those a
    /// tail could not extend (to fetch in full).
    async fn fetch_group<'w>(
        &self,
        log: &mut ServiceLog,
        start: i64,
        tail: bool,
        wants: &[&'w Want],
    ) -> Result<Vec<&'w Want>, RunError> {
        let queries: Vec<BucketQuery> = wants.iter().map(|w| w.query.clone()).collect();
        let measure = wants[0].measure;
        let fetched = self
            .source
            .fetch_service(&queries, measure, start, self.now)
            .await?;
        let mut refused = Vec::new();
        let mut stats = self.stats.lock().expect("stats lock");
        for (want, series) in wants.iter().zip(fetched) {
            let (service, bucket) = (&want.query.service, &want.query.bucket);
            if measure == Measure::Offered {
                let mut invalid = self.invalid.lock().expect("invalid lock");
                if series.invalid > 0 {
                    invalid.insert(
                        (service.clone(), bucket.clone()),
                        (series.invalid, !series.is_empty()),
                    );
                    log.forget(bucket, measure);
                    continue;
                }
                invalid.remove(&(service.clone(), bucket.clone()));
            }
            let fp = self.fingerprint(&want.query);
            if log.store(bucket, measure, fp, &series, (start, self.now), tail) {
                if tail {
                    stats.incremental += 1;
                } else {
                    stats.full += 1;
                }
            } else {
                refused.push(*want);
            }
        }
        Ok(refused)
    }
}
