//! Planning a checkout in two phases — fetch (the history cache brought up to "now", see
//! [`super::sync`]) then plan (each service planned from its cached series on a blocking
//! thread) — so that memory holds one service's history at a time, not the fleet's. When
//! the run has to read a newer checkout, only the services whose files changed are planned
//! again (their series are already in the cache; only a bucket whose query or window is new
//! is fetched).

use std::collections::{BTreeMap, HashMap};

use futures::stream::{self, StreamExt};
use grl_config::{self as config, Bucket, Mode, ServiceConfig, Snapshot};
use policies::{Point, Series};
use tracing::{info, warn};

use super::progress::Progress;
use super::sync::{FetchStats, ServiceWants, Syncer, Want};
use super::{RunError, RunSettings};
use crate::decide::class_fate;
use crate::decide::guards::GuardSettings;
use crate::decide::lifecycle::{self, LifecycleSettings};
use crate::decide::plan::{self, BucketPlan};
use crate::decide::shortfall::Shortfall;
use crate::input::cache::{HistoryCache, ServiceLog, grid_ceil};
use crate::input::capacity::{self, PlannedCapacity};
use crate::input::events::{self, Event};
use crate::input::source::{BucketQuery, Measure, MetricsSource, RangeSeries};
use crate::output::limits_file::{self, LimitLine};

/// The default window of a computed bucket whose policy does not name one.
const DEFAULT_WINDOW_SECS: i64 = 28 * 86_400;

/// What one service's plans were computed from; equal inputs give equal plans.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Inputs {
    /// The service file and its text.
    service_file: (String, Option<String>),
    /// The text of `limits/<service>.yaml`.
    limits_text: Option<String>,
    /// The text of `capacity/<service>.yaml`.
    capacity_text: Option<String>,
    /// The text of `events.yaml`.
    events_text: Option<String>,
}

/// One service's plans and what they were computed from.
#[derive(Debug, Clone)]
struct ServicePlans {
    inputs: Inputs,
    plans: Vec<BucketPlan>,
    /// Buckets whose limit is computed from history.
    computed: usize,
    /// Of those, buckets whose history held at least one usable value.
    with_data: usize,
    /// The lines of buckets without a plan (fixed limits) that keep scheduled limits.
    unplanned: BTreeMap<String, LimitLine>,
    /// Forecast demand above the service's planned capacity.
    shortfalls: Vec<Shortfall>,
}

/// A checkout, validated and planned.
#[derive(Debug, Clone)]
pub(super) struct Planned {
    /// The `main` commit the plans were made from.
    pub commit: String,
    /// The moment the plans' windows end (unix seconds).
    pub now: i64,
    /// The config files of that commit, by path.
    pub files: BTreeMap<String, String>,
    /// The services of that commit.
    pub snapshot: Snapshot,
    services: BTreeMap<String, ServicePlans>,
    /// Services planned by this call (every service on the first read).
    pub planned: Vec<String>,
    /// Buckets whose limit is computed from history.
    pub computed_buckets: usize,
    /// Of those, buckets whose history held at least one usable value.
    pub buckets_with_data: usize,
}

impl Planned {
    /// Every bucket's plan, by service.
    pub(super) fn plans(&self) -> impl Iterator<Item = &BucketPlan> {
        self.services.values().flat_map(|s| s.plans.iter())
    }

    /// One service's plans.
    pub(super) fn service_plans(&self, service: &str) -> &[BucketPlan] {
        self.services.get(service).map_or(&[], |s| &s.plans)
    }

    /// The lines of `service`'s buckets without a plan that keep scheduled limits.
    pub(super) fn unplanned_lines(&self, service: &str) -> BTreeMap<String, LimitLine> {
        self.services
            .get(service)
            .map(|s| s.unplanned.clone())
            .unwrap_or_default()
    }

    /// Every service's forecast demand above its planned capacity.
    pub(super) fn shortfalls(&self) -> impl Iterator<Item = &Shortfall> {
        self.services.values().flat_map(|s| s.shortfalls.iter())
    }

    /// The text of `limits/<service>.yaml`, if there is one.
    pub(super) fn limits_text(&self, service: &str) -> Option<&str> {
        self.files
            .get(&limits_file::path(service))
            .map(String::as_str)
    }
}

/// Plans checkouts of one run: the fetch phase brings the history cache up to "now", the
/// plan phase reads each service's series back from it and plans the service.
pub(super) struct Planner<'a> {
    syncer: Syncer<'a>,
    guards: GuardSettings,
    concurrency: usize,
    now: i64,
    run_id: String,
    progress: &'a Progress,
}

impl<'a> Planner<'a> {
    /// A planner for the run `run_id` at `now` (unix seconds).
    pub(super) fn new(
        source: &'a dyn MetricsSource,
        cache: HistoryCache,
        settings: &RunSettings,
        now: i64,
        run_id: &str,
        progress: &'a Progress,
    ) -> Self {
        Planner {
            syncer: Syncer::new(source, cache, now),
            guards: settings.guards.clone(),
            concurrency: settings.concurrency.max(1),
            now,
            run_id: run_id.to_string(),
            progress,
        }
    }

    /// Counts of this run's fetches.
    pub(super) fn fetch_stats(&self) -> FetchStats {
        self.syncer.stats()
    }

    /// Validates the config `files` of `commit` and plans it. With `previous` (an older
    /// checkout of the same run), services whose service file and limits file are unchanged
    /// keep their plans; the others are planned again.
    pub(super) async fn plan(
        &mut self,
        commit: &str,
        files: Vec<(String, String)>,
        previous: Option<&Planned>,
    ) -> Result<Planned, RunError> {
        self.plan_where(commit, files, previous, |_| true).await
    }

    /// [`Planner::plan`] of the one service `service`: the checkout is validated whole, and
    /// only that service's history is fetched and planned.
    pub(super) async fn plan_service(
        &mut self,
        commit: &str,
        files: Vec<(String, String)>,
        service: &str,
    ) -> Result<Planned, RunError> {
        self.plan_where(commit, files, None, |name| name == service)
            .await
    }

    /// Plans the services of the checkout whose names `wanted` accepts.
    async fn plan_where(
        &mut self,
        commit: &str,
        files: Vec<(String, String)>,
        previous: Option<&Planned>,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Planned, RunError> {
        let files: BTreeMap<String, String> = files.into_iter().collect();
        let snapshot = config::from_files(
            commit,
            files
                .iter()
                .filter(|(p, _)| p.starts_with("services/"))
                .map(|(p, c)| (p.clone(), c.clone())),
        )?;
        let events_text = files.get(events::file::PATH).cloned();
        let events = events::read(events_text.as_deref(), &snapshot)?;
        let mut capacities = capacity::read(&files, &snapshot, self.syncer.source, self.now)
            .await
            .map_err(|e| match e {
                capacity::CapacityError::Config(c) => RunError::Config(c),
                capacity::CapacityError::Source(s) => RunError::Source(s),
            })?;
        let mut services = BTreeMap::new();
        let mut todo = Vec::new();
        for svc in snapshot.services.values().filter(|s| wanted(&s.name)) {
            let inputs = Inputs {
                service_file: (svc.file.clone(), files.get(&svc.file).cloned()),
                limits_text: files.get(&limits_file::path(&svc.name)).cloned(),
                capacity_text: files.get(&capacity::file::path(&svc.name)).cloned(),
                events_text: events_text.clone(),
            };
            match previous.and_then(|p| p.services.get(&svc.name)) {
                Some(old) if old.inputs == inputs => {
                    services.insert(svc.name.clone(), old.clone());
                }
                _ => todo.push((svc.clone(), inputs)),
            }
        }
        let planned: Vec<String> = todo.iter().map(|(s, _)| s.name.clone()).collect();
        if previous.is_some() {
            info!(commit, replanned = ?planned, kept = services.len(), "re-planning changed services");
        } else {
            let cache = self.syncer.cache.clone();
            let names: Vec<String> = snapshot.services.keys().cloned().collect();
            let removed = tokio::task::spawn_blocking(move || {
                cache.retain_services(names.iter().map(String::as_str))
            })
            .await??;
            if removed > 0 {
                info!(
                    removed,
                    "history cache: logs of services gone from the config deleted"
                );
            }
        }
        self.fetch(&todo).await?;
        let todo = todo
            .into_iter()
            .map(|(svc, inputs)| {
                let calendar = Calendar {
                    capacity: capacities.remove(&svc.name),
                    events: events
                        .iter()
                        .filter(|e| e.touches(&svc.name))
                        .cloned()
                        .collect(),
                };
                (svc, inputs, calendar)
            })
            .collect();
        let mut fresh = self.plan_services(todo).await?;
        self.class_fates(&snapshot, &mut fresh).await;
        for (name, plans) in fresh {
            services.insert(name, plans);
        }
        let computed_buckets = services.values().map(|s| s.computed).sum();
        let buckets_with_data = services.values().map(|s| s.with_data).sum();
        Ok(Planned {
            commit: commit.to_string(),
            now: self.now,
            files,
            snapshot,
            services,
            planned,
            computed_buckets,
            buckets_with_data,
        })
    }

    /// The fetch phase for `services`.
    async fn fetch(&self, services: &[(ServiceConfig, Inputs)]) -> Result<(), RunError> {
        let wants: Vec<ServiceWants> = services.iter().map(|(s, _)| self.wants(s)).collect();
        let total: usize = wants.iter().map(|w| w.buckets.len()).sum();
        self.progress.phase("fetch", total);
        info!(buckets = total, services = wants.len(), source = %self.syncer.source.describe(), "fetching history");
        let mut running = stream::iter(wants)
            .map(|w| async move {
                let n = w.buckets.len();
                self.syncer.sync(w).await.map(|()| n)
            })
            .buffer_unordered(self.concurrency);
        while let Some(n) = running.next().await {
            self.progress.add(n?);
        }
        drop(running);
        let cache = self.syncer.cache.clone();
        let bytes = tokio::task::spawn_blocking(move || cache.disk_bytes()).await?;
        self.syncer.set_cache_bytes(bytes);
        let stats = self.syncer.stats();
        info!(
            full = stats.full,
            incremental = stats.incremental,
            reused = stats.reused,
            cache_bytes = bytes,
            "history fetched"
        );
        Ok(())
    }

    /// The series `svc` needs: offered over its longest window, drops over the lifecycle
    /// review's days (shadow buckets: virtual drops; deny buckets: drops).
    fn wants(&self, svc: &ServiceConfig) -> ServiceWants {
        let computed: Vec<&Bucket> = svc
            .buckets
            .iter()
            .filter(|b| plan::is_computed(b))
            .collect();
        let longest = longest_window(&computed);
        let review = review_secs();
        let mut wants = Vec::new();
        for b in &computed {
            let q = BucketQuery::of(&svc.name, b);
            wants.push(Want {
                query: q.clone(),
                measure: Measure::Offered,
                start: self.now - longest,
            });
            let measure = match b.mode {
                Mode::Shadow => Measure::ShadowDropped,
                Mode::Deny => Measure::Dropped,
            };
            wants.push(Want {
                query: q,
                measure,
                start: self.now - review,
            });
        }
        ServiceWants {
            service: svc.name.clone(),
            wants,
            keep_secs: longest.max(review),
            buckets: computed.iter().map(|b| b.name.clone()).collect(),
        }
    }

    /// The plan phase: each service planned on a blocking thread from its cached series.
    async fn plan_services(
        &self,
        services: Vec<(ServiceConfig, Inputs, Calendar)>,
    ) -> Result<Vec<(String, ServicePlans)>, RunError> {
        let total = services
            .iter()
            .map(|(s, _, _)| s.buckets.iter().filter(|b| plan::is_computed(b)).count())
            .sum();
        self.progress.phase("plan", total);
        let workers = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        let mut running = stream::iter(services)
            .map(|(svc, inputs, calendar)| {
                let job = PlanJob {
                    log: None,
                    calendar,
                    cache: self.syncer.cache.clone(),
                    guards: self.guards.clone(),
                    now: self.now,
                    run_id: self.run_id.clone(),
                    fingerprints: svc
                        .buckets
                        .iter()
                        .map(|b| {
                            (
                                b.name.clone(),
                                self.syncer.fingerprint(&BucketQuery::of(&svc.name, b)),
                            )
                        })
                        .collect(),
                    invalid: svc
                        .buckets
                        .iter()
                        .filter_map(|b| {
                            let bad = self.syncer.invalid(&svc.name, &b.name)?;
                            Some((b.name.clone(), bad))
                        })
                        .collect(),
                };
                tokio::task::spawn_blocking(move || job.plan(svc, inputs))
            })
            .buffer_unordered(workers);
        let mut out = Vec::new();
        while let Some(done) = running.next().await {
            let (name, plans) = done??;
            self.progress.add(plans.computed);
            out.push((name, plans));
        }
        Ok(out)
    }
}

impl Planner<'_> {
    /// How each priority class of the planned buckets that have classes and a limit would
    /// fare at that limit, over the bucket's window (at least [`DEFAULT_WINDOW_SECS`]). The
    /// classes' history is read from the source now, not cached: it is shown, not planned
    /// from, so a source that fails here is said in the plan and fails nothing.
    async fn class_fates(&self, snapshot: &Snapshot, services: &mut [(String, ServicePlans)]) {
        let source = self.syncer.source;
        let now = self.now;
        let mut asks = Vec::new();
        for (si, (name, planned)) in services.iter().enumerate() {
            let Some(svc) = snapshot.service(name) else {
                continue;
            };
            for (pi, p) in planned.plans.iter().enumerate() {
                let (Some(bucket), Some(limit)) = (svc.bucket(&p.bucket), p.guarded.limit) else {
                    continue;
                };
                if bucket.priorities.is_empty() || !limit.is_finite() {
                    continue;
                }
                let start = now
                    - plan::window_secs(bucket)
                        .unwrap_or(DEFAULT_WINDOW_SECS)
                        .max(DEFAULT_WINDOW_SECS);
                asks.push((si, pi, name.clone(), bucket.clone(), limit, start));
            }
        }
        let mut running = stream::iter(asks)
            .map(|(si, pi, svc, bucket, limit, start)| async move {
                let found = source.fetch_classes(&svc, &bucket.name, start, now).await;
                let fates = match found {
                    Ok(Some(series)) => Ok(class_fate::class_fates(&bucket, limit, &series, start, now)),
                    Ok(None) => Err(format!("{} keeps no history of priority classes", source.describe())),
                    Err(e) => {
                        warn!(service = %svc, bucket = %bucket.name, error = %e, "priority classes' history not read");
                        Err(e.to_string())
                    }
                };
                (si, pi, fates)
            })
            .buffer_unordered(self.concurrency);
        while let Some((si, pi, fates)) = running.next().await {
            services[si].1.plans[pi].classes = Some(fates);
        }
    }
}

/// The longest window of `buckets`' policies (28 days for a policy that names none).
fn longest_window(buckets: &[&Bucket]) -> i64 {
    buckets
        .iter()
        .map(|b| plan::window_secs(b).unwrap_or(DEFAULT_WINDOW_SECS))
        .max()
        .unwrap_or(0)
}

/// The days the lifecycle review looks back, in seconds.
fn review_secs() -> i64 {
    (LifecycleSettings::default().min_days * 86_400.0) as i64
}

/// A service's planned capacity and the events that touch it.
#[derive(Debug, Clone, Default)]
struct Calendar {
    capacity: Option<PlannedCapacity>,
    events: Vec<Event>,
}

impl Calendar {
    /// Whether `ts` fell in the window of an event of `service/bucket` that has begun by
    /// `now`: its traffic there was the event's, not the bucket's usual, so the policies do
    /// not see it (a planned surge does not raise the limits after it).
    fn during_event(&self, service: &str, bucket: &str, ts: i64, now: i64) -> bool {
        self.events
            .iter()
            .any(|e| e.from <= ts && ts < e.until.min(now) && e.affects(service, bucket))
    }
}

/// What planning one service on a blocking thread needs.
struct PlanJob {
    log: Option<ServiceLog>,
    calendar: Calendar,
    cache: HistoryCache,
    guards: GuardSettings,
    now: i64,
    run_id: String,
    fingerprints: HashMap<String, u64>,
    /// Buckets whose offered series held values that are no rate: how many, and whether
    /// it held usable points besides.
    invalid: HashMap<String, (usize, bool)>,
}

impl PlanJob {
    /// Plans the computed buckets of `svc` from the cache.
    fn plan(
        mut self,
        svc: ServiceConfig,
        inputs: Inputs,
    ) -> Result<(String, ServicePlans), RunError> {
        self.log = Some(self.cache.load(&svc.name)?);
        let (previous, _) = plan::previous_limits(&svc, inputs.limits_text.as_deref());
        let computed: Vec<&Bucket> = svc
            .buckets
            .iter()
            .filter(|b| plan::is_computed(b))
            .collect();
        let start = self.now - longest_window(&computed);
        let mut plans = Vec::new();
        let mut offered_points = Vec::new();
        let mut with_data = 0;
        for bucket in &computed {
            let previous = previous.get(&bucket.name).copied();
            if let Some(&(invalid, had_points)) = self.invalid.get(&bucket.name) {
                with_data += usize::from(had_points);
                let name = format!("{}/{}", svc.name, bucket.name);
                warn!(bucket = %name, invalid, "metrics source returned values that are no rate (NaN, infinite or negative); bucket refused");
                plans.push(plan::refused(
                    &svc.name,
                    bucket,
                    previous,
                    &self.guards,
                    format!(
                        "the metrics source returned {invalid} value(s) that are no rate (NaN, \
                         infinite or negative)"
                    ),
                ));
                offered_points.push(Vec::new());
                continue;
            }
            let mut series = self.cached(&svc.name, &bucket.name, Measure::Offered, start)?;
            with_data += usize::from(!series.is_empty());
            series.points.retain(|&(ts, _)| {
                !self
                    .calendar
                    .during_event(&svc.name, &bucket.name, ts, self.now)
            });
            let history = Series::new(
                series.step_secs.max(1),
                series
                    .points
                    .iter()
                    .map(|&(ts, value)| Point { ts, value })
                    .collect(),
            );
            plans.push(plan::plan_bucket(
                &svc.name,
                bucket,
                previous,
                &history,
                self.now,
                &self.guards,
                &self.run_id,
            ));
            offered_points.push(series.points);
        }
        self.lifecycle(&mut plans, &offered_points, inputs.limits_text.as_deref())?;
        let (unplanned, shortfalls) = crate::decide::calendar::apply(
            &svc,
            &mut plans,
            &computed,
            &offered_points,
            inputs.limits_text.as_deref(),
            self.calendar.capacity.as_ref(),
            &self.calendar.events,
            &self.guards,
            self.now,
        );
        let computed = plans.len();
        Ok((
            svc.name.clone(),
            ServicePlans {
                inputs,
                plans,
                computed,
                with_data,
                unplanned,
                shortfalls,
            },
        ))
    }

    /// The cached series of a bucket from `start` to now (the fetch phase stored it).
    fn cached(
        &self,
        service: &str,
        bucket: &str,
        measure: Measure,
        start: i64,
    ) -> Result<RangeSeries, RunError> {
        let log = self.log.as_ref().expect("log loaded");
        let fp = self.fingerprints.get(bucket).copied().unwrap_or_default();
        match log.series(bucket, measure, fp, start, self.now) {
            Some(s) => Ok(s),
            None if log
                .entry(bucket, measure)
                .is_none_or(|e| grid_ceil(start, e.step) > self.now) =>
            {
                // Nothing was stored: the range holds no step, or the source returned none.
                Ok(RangeSeries::empty(
                    log.entry(bucket, measure).map_or(300, |e| e.step),
                ))
            }
            None => Err(RunError::CacheMiss {
                series: format!("{service}/{bucket} {}", measure.as_str()),
            }),
        }
    }

    /// Shadow buckets: days in shadow (kept as `shadow_since` evidence) and virtual drops;
    /// enforced buckets: drops against what their backtest predicted.
    fn lifecycle(
        &self,
        plans: &mut [BucketPlan],
        offered: &[Vec<(i64, f64)>],
        limits_text: Option<&str>,
    ) -> Result<(), RunError> {
        let settings = LifecycleSettings::default();
        let since = self.now - review_secs();
        let Some(service) = plans.first().map(|p| p.service.clone()) else {
            return Ok(());
        };
        let previous = plan::previous_evidence(&service, limits_text);
        for (measure, mode) in [
            (Measure::ShadowDropped, Mode::Shadow),
            (Measure::Dropped, Mode::Deny),
        ] {
            for i in 0..plans.len() {
                if plans[i].mode != mode || plans[i].guarded.limit.is_none() {
                    continue;
                }
                let drops = self.cached(&service, &plans[i].bucket.clone(), measure, since)?;
                let fraction = lifecycle::drop_fraction(&offered[i], &drops.points, since);
                let p = &mut plans[i];
                let verdict = if mode == Mode::Shadow {
                    let shadow_since = previous
                        .get(&p.bucket)
                        .and_then(|ev| ev.get("shadow_since"))
                        .and_then(lifecycle::shadow_since_of)
                        .unwrap_or(self.now);
                    p.evidence.insert(
                        "shadow_since".into(),
                        lifecycle::shadow_since_value(shadow_since),
                    );
                    lifecycle::shadow_verdict(&settings, shadow_since, self.now, fraction)
                } else {
                    let expected = p.backtest.as_ref().map(|b| b.exceedance_rate);
                    lifecycle::deny_verdict(&settings, fraction, expected)
                };
                p.lifecycle = Some(verdict);
            }
        }
        Ok(())
    }
}
