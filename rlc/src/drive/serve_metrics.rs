//! The configurator's own Prometheus metrics (`rlc serve` exports them on `/metrics`): the
//! registry and its families. A finished run is counted by the run's own module
//! ([`crate::drive::run`], `RlcMetrics::observe`); the rollout's counters are
//! [`crate::drive::rollout::RolloutMetrics`].

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// `status` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    /// committed | no-change | failed | no-data
    pub status: String,
}

/// `outcome` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// new | changed | unchanged | kept-previous | no-limit
    pub outcome: String,
}

/// `phase` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// checkout | fetch | plan | commit | deliver | record | prune
    pub phase: String,
}

/// `kind` label of history fetches.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FetchKindLabel {
    /// full (nothing usable cached) | incremental (only the steps after the cached ones)
    pub kind: String,
}

fn phase_histogram() -> Histogram {
    Histogram::new([0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0])
}

/// Every metric of the configurator, registered once.
#[derive(Debug)]
pub struct RlcMetrics {
    registry: Registry,
    /// `rlc_runs_total{status}`.
    pub runs: Family<StatusLabel, Counter>,
    /// `rlc_last_success_timestamp_seconds`.
    pub last_success: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// `rlc_buckets{outcome}` of the last finished run.
    pub buckets: Family<OutcomeLabel, Gauge>,
    /// `rlc_run_duration_seconds`.
    pub duration: Histogram,
    /// `rlc_limit_changes_total`.
    pub limit_changes: Counter,
    /// `rlc_push_conflicts_total`: pushes refused because someone pushed to the branch after
    /// the run fetched it (the run re-read and built on their commit).
    pub push_conflicts: Counter,
    /// `rlc_schedule_skipped_total`: slots that passed while a run was still going.
    pub schedule_skipped: Counter,
    /// `rlc_next_run_timestamp_seconds`: the next schedule slot (0 when there is none).
    pub next_run: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// `rlc_runs_aborted_total`: runs found left `running` by a dead process and marked
    /// `aborted`.
    pub aborted: Counter,
    /// `rlc_controller_resyncs_total`: runs that committed nothing but found the controller
    /// on another version than `main` and sent it `main`'s config.
    pub resyncs: Counter,
    /// `rlc_run_phase_seconds{phase}`: the time each phase of a run took.
    pub phase_seconds: Family<PhaseLabel, Histogram, fn() -> Histogram>,
    /// `rlc_history_fetches_total{kind}`: bucket series fetched from the metrics source,
    /// in full or only past the history cache.
    pub history_fetches: Family<FetchKindLabel, Counter>,
    /// `rlc_history_cache_bytes`: the history cache's size on disk after the last run.
    pub history_cache_bytes: Gauge,
    /// `rlc_history_pruned_runs_total`: runs deleted from the run history by retention.
    pub pruned_runs: Counter,
    /// `rlc_capacity_shortfall_services`: services whose forecast demand is above their
    /// planned capacity × utilisation, as of the last run that did not fail.
    pub capacity_shortfall_services: Gauge,
    /// The staged rollouts' counters (`rlc_rollout_waves_total{result}`, …).
    pub rollout: crate::drive::rollout::RolloutMetrics,
}

impl Default for RlcMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let runs = Family::<StatusLabel, Counter>::default();
        let last_success = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        let buckets = Family::<OutcomeLabel, Gauge>::default();
        let duration = Histogram::new([1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0]);
        let limit_changes = Counter::default();
        let push_conflicts = Counter::default();
        let schedule_skipped = Counter::default();
        let next_run = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        let aborted = Counter::default();
        let resyncs = Counter::default();
        let phase_seconds =
            Family::<PhaseLabel, Histogram, fn() -> Histogram>::new_with_constructor(
                phase_histogram,
            );
        let history_fetches = Family::<FetchKindLabel, Counter>::default();
        let history_cache_bytes = Gauge::default();
        let pruned_runs = Counter::default();
        let capacity_shortfall_services = Gauge::default();
        registry.register(
            "rlc_capacity_shortfall_services",
            "Services whose forecast demand is above their planned capacity × utilisation (last run)",
            capacity_shortfall_services.clone(),
        );
        let rollout = crate::drive::rollout::RolloutMetrics::default();
        rollout.register(&mut registry);
        registry.register(
            "rlc_run_phase_seconds",
            "Time each phase of a run took (checkout, fetch, plan, commit, deliver, record, prune)",
            phase_seconds.clone(),
        );
        registry.register(
            "rlc_history_fetches",
            "Bucket series fetched from the metrics source: in full, or only the steps past the history cache",
            history_fetches.clone(),
        );
        registry.register(
            "rlc_history_cache_bytes",
            "Size on disk of the history cache after the last run",
            history_cache_bytes.clone(),
        );
        registry.register(
            "rlc_history_pruned_runs",
            "Runs (with their recommendations) deleted from the run history by --history-retention",
            pruned_runs.clone(),
        );
        registry.register(
            "rlc_runs_aborted",
            "Runs left `running` by a process that died, marked aborted by a later run",
            aborted.clone(),
        );
        registry.register(
            "rlc_controller_resyncs",
            "Runs that committed nothing but sent main's config to a controller running another version",
            resyncs.clone(),
        );
        registry.register(
            "rlc_runs",
            "Configurator runs by final status",
            runs.clone(),
        );
        registry.register(
            "rlc_last_success_timestamp_seconds",
            "Unix time of the last run that did not fail",
            last_success.clone(),
        );
        registry.register(
            "rlc_buckets",
            "Buckets of the last run by outcome",
            buckets.clone(),
        );
        registry.register(
            "rlc_run_duration_seconds",
            "Wall time of a run",
            duration.clone(),
        );
        registry.register(
            "rlc_limit_changes",
            "Limits changed (new or changed) by runs",
            limit_changes.clone(),
        );
        registry.register(
            "rlc_push_conflicts",
            "Pushes refused because the branch moved under the run (someone pushed); \
             the run re-read it and kept their commit",
            push_conflicts.clone(),
        );
        registry.register(
            "rlc_schedule_skipped",
            "Schedule slots skipped because a run was still going at their time",
            schedule_skipped.clone(),
        );
        registry.register(
            "rlc_next_run_timestamp_seconds",
            "Unix time of the next schedule slot (0 when the schedule has no more)",
            next_run.clone(),
        );
        Self {
            registry,
            runs,
            last_success,
            buckets,
            duration,
            limit_changes,
            push_conflicts,
            schedule_skipped,
            next_run,
            aborted,
            resyncs,
            phase_seconds,
            history_fetches,
            history_cache_bytes,
            pruned_runs,
            capacity_shortfall_services,
            rollout,
        }
    }
}

impl RlcMetrics {
    /// Records the time a run's phase took.
    pub fn observe_phase(&self, phase: &str, seconds: f64) {
        self.phase_seconds
            .get_or_create(&PhaseLabel {
                phase: phase.into(),
            })
            .observe(seconds);
    }

    /// Sets `rlc_next_run_timestamp_seconds` (0 for `None`).
    pub fn set_next_run(&self, at: Option<chrono::DateTime<chrono::Utc>>) {
        self.next_run
            .set(at.map_or(0.0, |t| t.timestamp_millis() as f64 / 1000.0));
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Serves `metrics` on `http://addr/metrics` from a spawned task; returns once listening.
pub async fn serve(
    addr: std::net::SocketAddr,
    metrics: std::sync::Arc<RlcMetrics>,
) -> anyhow::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let m = metrics.clone();
            async move { m.encode() }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "metrics listening");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "metrics server stopped");
        }
    });
    Ok(())
}
