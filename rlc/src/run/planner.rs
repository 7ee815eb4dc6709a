//! Planning a checkout: each bucket's history is fetched once per run and kept, every
//! service's buckets are planned, and when the run has to read a newer checkout only the
//! services whose files changed are planned again (from the history already fetched; only a
//! bucket whose query or window is new is fetched).

use std::collections::{BTreeMap, HashMap};

use grl_config::{self as config, Bucket, Mode, ServiceConfig, Snapshot};
use policies::{Point, Series};
use tracing::{info, warn};

use super::RunError;
use crate::guards::GuardSettings;
use crate::lifecycle::{self, LifecycleSettings};
use crate::limits_file;
use crate::plan::{self, BucketPlan};
use crate::source::{BucketQuery, Measure, MetricsSource, RangeSeries, fetch_all};

/// The default window of a computed bucket whose policy does not name one.
const DEFAULT_WINDOW_SECS: i64 = 28 * 86_400;

/// What one service's plans were computed from; equal inputs give equal plans.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Inputs {
    /// The service file and its text.
    service_file: (String, Option<String>),
    /// The text of `limits/<service>.yaml`.
    limits_text: Option<String>,
}

/// One service's plans and what they were computed from.
#[derive(Debug, Clone)]
struct ServicePlans {
    inputs: Inputs,
    plans: Vec<BucketPlan>,
}

/// A checkout, validated and planned.
#[derive(Debug, Clone)]
pub(super) struct Planned {
    /// The `main` commit the plans were made from.
    pub commit: String,
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

    /// The text of `limits/<service>.yaml`, if there is one.
    pub(super) fn limits_text(&self, service: &str) -> Option<&str> {
        self.files
            .get(&limits_file::path(service))
            .map(String::as_str)
    }
}

/// A series fetched for one bucket and measure, from `start` to the run's "now".
#[derive(Debug)]
struct Fetched {
    start: i64,
    series: RangeSeries,
}

/// Plans checkouts of one run, keeping the history it fetched.
pub(super) struct Planner<'a> {
    source: &'a dyn MetricsSource,
    guards: GuardSettings,
    concurrency: usize,
    now: i64,
    run_id: String,
    history: HashMap<(BucketQuery, Measure), Fetched>,
}

impl<'a> Planner<'a> {
    /// A planner for the run `run_id` at `now` (unix seconds).
    pub(super) fn new(
        source: &'a dyn MetricsSource,
        guards: GuardSettings,
        concurrency: usize,
        now: i64,
        run_id: &str,
    ) -> Self {
        Planner {
            source,
            guards,
            concurrency: concurrency.max(1),
            now,
            run_id: run_id.to_string(),
            history: HashMap::new(),
        }
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
        let files: BTreeMap<String, String> = files.into_iter().collect();
        let snapshot = config::from_files(
            commit,
            files
                .iter()
                .filter(|(p, _)| p.starts_with("services/"))
                .map(|(p, c)| (p.clone(), c.clone())),
        )?;
        let mut services = BTreeMap::new();
        let mut todo = Vec::new();
        for svc in snapshot.services.values() {
            let inputs = Inputs {
                service_file: (svc.file.clone(), files.get(&svc.file).cloned()),
                limits_text: files.get(&limits_file::path(&svc.name)).cloned(),
            };
            match previous.and_then(|p| p.services.get(&svc.name)) {
                Some(old) if old.inputs == inputs => {
                    services.insert(svc.name.clone(), old.clone());
                }
                _ => todo.push((svc, inputs)),
            }
        }
        let planned: Vec<String> = todo.iter().map(|(s, _)| s.name.clone()).collect();
        if previous.is_some() {
            info!(commit, replanned = ?planned, kept = services.len(), "re-planning changed services");
        }
        let fresh = self.plan_services(&todo).await?;
        for ((svc, inputs), plans) in todo.into_iter().zip(fresh) {
            services.insert(svc.name.clone(), ServicePlans { inputs, plans });
        }
        let mut computed_buckets = 0;
        let mut buckets_with_data = 0;
        for svc in snapshot.services.values() {
            for b in svc.buckets.iter().filter(|b| plan::is_computed(b)) {
                computed_buckets += 1;
                let has_data = self
                    .history
                    .get(&(query(&svc.name, b), Measure::Offered))
                    .is_some_and(|f| !f.series.is_empty());
                buckets_with_data += usize::from(has_data);
            }
        }
        Ok(Planned {
            commit: commit.to_string(),
            files,
            snapshot,
            services,
            planned,
            computed_buckets,
            buckets_with_data,
        })
    }

    /// Plans the computed buckets of `services` (one list per service, in order).
    async fn plan_services(
        &mut self,
        services: &[(&ServiceConfig, Inputs)],
    ) -> Result<Vec<Vec<BucketPlan>>, RunError> {
        let mut targets: Vec<(usize, &Bucket, Option<f64>)> = Vec::new();
        let mut wanted = Vec::new();
        for (i, (svc, inputs)) in services.iter().enumerate() {
            let (previous, _) = plan::previous_limits(svc, inputs.limits_text.as_deref());
            let computed: Vec<&Bucket> = svc
                .buckets
                .iter()
                .filter(|b| plan::is_computed(b))
                .collect();
            let longest = computed
                .iter()
                .map(|b| plan::window_secs(b).unwrap_or(DEFAULT_WINDOW_SECS))
                .max()
                .unwrap_or(0);
            for b in computed {
                targets.push((i, b, previous.get(&b.name).copied()));
                wanted.push((query(&svc.name, b), self.now - longest));
            }
        }
        let offered = self.fetch(&wanted, Measure::Offered).await?;
        let mut out: Vec<Vec<BucketPlan>> = vec![Vec::new(); services.len()];
        let mut offered_points: Vec<Vec<Vec<(i64, f64)>>> = vec![Vec::new(); services.len()];
        for ((i, bucket, previous), series) in targets.into_iter().zip(offered) {
            if series.invalid > 0 {
                let name = format!("{}/{}", services[i].0.name, bucket.name);
                warn!(bucket = %name, invalid = series.invalid, "metrics source returned values that are no rate (NaN, infinite or negative); bucket refused");
                out[i].push(plan::refused(
                    &services[i].0.name,
                    bucket,
                    previous,
                    &self.guards,
                    format!(
                        "the metrics source returned {} value(s) that are no rate (NaN, \
                         infinite or negative)",
                        series.invalid
                    ),
                ));
                offered_points[i].push(Vec::new());
                continue;
            }
            let history = Series::new(
                series.step_secs.max(1),
                series
                    .points
                    .iter()
                    .map(|&(ts, value)| Point { ts, value })
                    .collect(),
            );
            out[i].push(plan::plan_bucket(
                &services[i].0.name,
                bucket,
                previous,
                &history,
                self.now,
                &self.guards,
                &self.run_id,
            ));
            offered_points[i].push(series.points);
        }
        for (i, (_, inputs)) in services.iter().enumerate() {
            self.lifecycle(
                &mut out[i],
                &offered_points[i],
                inputs.limits_text.as_deref(),
            )
            .await?;
        }
        Ok(out)
    }

    /// Shadow buckets: days in shadow (kept as `shadow_since` evidence) and virtual drops;
    /// enforced buckets: drops against what their backtest predicted.
    async fn lifecycle(
        &mut self,
        plans: &mut [BucketPlan],
        offered: &[Vec<(i64, f64)>],
        limits_text: Option<&str>,
    ) -> Result<(), RunError> {
        let settings = LifecycleSettings::default();
        let since = self.now - (settings.min_days * 86_400.0) as i64;
        let Some(service) = plans.first().map(|p| p.service.clone()) else {
            return Ok(());
        };
        let previous = plan::previous_evidence(&service, limits_text);
        for (measure, mode) in [
            (Measure::ShadowDropped, Mode::Shadow),
            (Measure::Dropped, Mode::Deny),
        ] {
            let idx: Vec<usize> = (0..plans.len())
                .filter(|&i| plans[i].mode == mode && plans[i].guarded.limit.is_some())
                .collect();
            let wanted: Vec<_> = idx.iter().map(|&i| (query_of(&plans[i]), since)).collect();
            let drops = self.fetch(&wanted, measure).await?;
            for (&i, d) in idx.iter().zip(drops) {
                let fraction = lifecycle::drop_fraction(&offered[i], &d.points, since);
                let p = &mut plans[i];
                let verdict = if mode == Mode::Shadow {
                    let shadow_since = previous
                        .get(&p.bucket)
                        .and_then(|ev| ev.get("shadow_since"))
                        .and_then(serde_json::Value::as_i64)
                        .unwrap_or(self.now);
                    p.evidence
                        .insert("shadow_since".into(), shadow_since.into());
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

    /// `measure` for each `(query, start)` up to "now", in order. A series already fetched
    /// from `start` or earlier is reused (cut at `start`); the others are fetched, queries
    /// with the same start together.
    async fn fetch(
        &mut self,
        wanted: &[(BucketQuery, i64)],
        measure: Measure,
    ) -> Result<Vec<RangeSeries>, RunError> {
        let mut missing: BTreeMap<i64, Vec<BucketQuery>> = BTreeMap::new();
        for (q, start) in wanted {
            let have = self
                .history
                .get(&(q.clone(), measure))
                .is_some_and(|f| f.start <= *start);
            if !have {
                let group = missing.entry(*start).or_default();
                if !group.contains(q) {
                    group.push(q.clone());
                }
            }
        }
        for (start, queries) in missing {
            let total = queries.len();
            info!(buckets = total, measure = measure.as_str(), source = %self.source.describe(), "fetching history");
            let fetched = fetch_all(
                self.source,
                &queries,
                measure,
                start,
                self.now,
                self.concurrency,
                move |done, _| {
                    if done == total || done % 100 == 0 {
                        info!(done, total, "history fetched");
                    }
                },
            )
            .await;
            for (q, series) in queries.into_iter().zip(fetched) {
                self.history.insert(
                    (q, measure),
                    Fetched {
                        start,
                        series: series?,
                    },
                );
            }
        }
        Ok(wanted
            .iter()
            .map(|(q, start)| {
                let f = &self.history[&(q.clone(), measure)];
                RangeSeries {
                    invalid: f.series.invalid,
                    step_secs: f.series.step_secs,
                    points: f
                        .series
                        .points
                        .iter()
                        .copied()
                        .filter(|&(ts, _)| ts >= *start)
                        .collect(),
                }
            })
            .collect())
    }
}

fn query(service: &str, b: &Bucket) -> BucketQuery {
    BucketQuery {
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

fn query_of(p: &BucketPlan) -> BucketQuery {
    BucketQuery {
        service: p.service.clone(),
        bucket: p.bucket.clone(),
        caller: p.caller.clone(),
        procedure: p.procedure.clone(),
    }
}
