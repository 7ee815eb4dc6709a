//! The flags `rlc run` and `rlc serve` share (their `RLC_*` variables too), the commands
//! that run the configurator's stages without committing (`rlc explain`, `rlc rollout`),
//! and their parsers: one place for every flag's name, default and check.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use rlc::decide::guards::GuardSettings;
use rlc::drive::run::{ProgressMode, RunSettings};
use rlc::input::source::{
    BatchedPrometheusSource, FileSource, MetricsSource, PromSettings, PrometheusSource,
};
use rlc::output::git_store::PublishMode;

/// Where commits go.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ModeArg {
    /// Straight to `main`, then pushed to the controller.
    Direct,
    /// To the review branch `rlc/limits`.
    Pr,
}

/// How a run shows its progress.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ProgressArg {
    /// A bar on a terminal, else log lines.
    Auto,
    /// A bar on stderr.
    Bar,
    /// A log line every `--progress-interval`.
    Log,
    /// No progress display.
    Off,
}

/// `--history-retention`: a duration, or `forever`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retention(pub Option<std::time::Duration>);

fn retention(text: &str) -> Result<Retention, String> {
    if text.trim() == "forever" {
        return Ok(Retention(None));
    }
    positive_duration(text).map(|d| Retention(Some(d)))
}

/// Flags shared by `run` and `serve`.
#[derive(Debug, Clone, Args)]
pub(crate) struct RunArgs {
    /// The config repo: a git URL or a path to a repository.
    #[arg(long, env = "RLC_CONFIG_REPO", hide_env_values = true)]
    pub config_repo: String,
    /// Prometheus base URL, e.g. http://127.0.0.1:9090.
    #[arg(
        long,
        env = "RLC_PROMETHEUS",
        conflicts_with = "history_dir",
        hide_env_values = true
    )]
    pub prometheus: Option<String>,
    /// Timeout of one Prometheus request (retried 3 times, with backoff).
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    pub prometheus_timeout: std::time::Duration,
    /// Offline history: a directory of `<service>/<bucket>.csv` files instead of Prometheus.
    #[arg(long)]
    pub history_dir: Option<PathBuf>,
    /// Commit to main (`direct`) or to the review branch (`pr`).
    #[arg(long, value_enum, default_value = "pr")]
    pub mode: ModeArg,
    /// Run history database: sqlite://FILE (default) or postgres://…
    #[arg(
        long,
        env = "RLC_DB",
        default_value = "sqlite://rlc-history.db",
        hide_env_values = true
    )]
    pub db: String,
    /// GRL controller to push to after a direct-mode commit (host:port); repeat the flag
    /// (or separate with commas in `RLC_CONTROLLER`) for a region's active/standby
    /// controllers: each gets the config.
    #[arg(
        long = "controller",
        env = "RLC_CONTROLLER",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub controllers: Vec<String>,
    /// CA (PEM) of the controller's certificate: push over TLS (a bare `host:port` is
    /// dialled as `https://`).
    #[arg(long, value_name = "FILE", requires = "controllers")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS to the controller.
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// A file holding the controller's admin bearer token (sent as `authorization: Bearer`).
    #[arg(
        long,
        value_name = "FILE",
        env = "RLC_TOKEN_FILE",
        hide_env_values = true,
        requires = "controllers"
    )]
    pub token_file: Option<PathBuf>,
    /// Where the local clone of the config repo is kept; the default is relative to the
    /// directory `rlc` runs in (a lock file `<workdir>.lock` sits beside it).
    #[arg(long, default_value = ".rlc/checkout")]
    pub workdir: PathBuf,
    /// The history cache: each bucket's fetched history, kept between runs so that a run
    /// fetches only what is new (default: `<workdir>.history-cache`).
    #[arg(long, value_name = "DIR", conflicts_with = "no_history_cache")]
    pub history_cache: Option<PathBuf>,
    /// Fetch every bucket's whole window at every run (a temporary cache, for this run only).
    #[arg(long)]
    pub no_history_cache: bool,
    /// Runs older than this are deleted from the run history (with their recommendations)
    /// at the end of each run; `forever` keeps them all.
    #[arg(long, default_value = "90d", value_parser = retention)]
    pub history_retention: Retention,
    /// Progress display: `auto` (a bar on a terminal, else a log line every
    /// `--progress-interval`), `bar`, `log` or `off`.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: ProgressArg,
    /// How often a run logs its progress when not on a terminal.
    #[arg(long, default_value = "5s", value_parser = positive_duration)]
    pub progress_interval: std::time::Duration,
    /// PromQL template of the offered rate (see the README for `istio_requests_total`).
    #[arg(long, env = "RLC_QUERY_TEMPLATE", hide_env_values = true)]
    pub query_template: Option<String>,
    /// Concurrent history queries.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Minimum data coverage before a limit may change.
    #[arg(long, default_value_t = 0.8)]
    pub min_coverage: f64,
    /// Largest decrease per run (fraction).
    #[arg(long, default_value_t = 0.2)]
    pub max_decrease: f64,
    /// Largest increase per run (fraction).
    #[arg(long, default_value_t = 1.0)]
    pub max_increase: f64,
    /// Changes below this fraction are skipped.
    #[arg(long, default_value_t = 0.05)]
    pub hysteresis: f64,
    /// Global floor for every computed limit (rps).
    #[arg(long)]
    pub floor: Option<f64>,
    /// Global cap for every computed limit (rps).
    #[arg(long)]
    pub cap: Option<f64>,
    /// Global cap for every computed limit, as a multiple of its window's observed peak.
    #[arg(long)]
    pub cap_peak_ratio: Option<f64>,
    /// Pretend "now" is this unix time (offline runs over old data).
    #[arg(long)]
    pub now: Option<i64>,
    /// In PR mode, open or update a pull request in this GitHub repo (`owner/name`).
    #[arg(
        long,
        env = "RLC_GITHUB_REPO",
        requires = "github_token",
        hide_env_values = true
    )]
    pub github_repo: Option<String>,
    /// Token for `--github-repo`.
    #[arg(long, env = "RLC_GITHUB_TOKEN", hide_env_values = true)]
    pub github_token: Option<String>,
    /// GitHub API base URL (GitHub Enterprise: https://HOST/api/v3).
    #[arg(
        long,
        env = "RLC_GITHUB_API",
        default_value = "https://api.github.com",
        hide_env_values = true
    )]
    pub github_api: String,
    /// Extra CA certificates (PEM) to trust for `--github-api`, e.g. a GitHub Enterprise
    /// behind a private CA.
    #[arg(long, env = "RLC_GITHUB_CA", hide_env_values = true)]
    pub github_ca: Option<PathBuf>,
    /// With `rollout.yaml`: how often the regions' controllers are asked during a bake
    /// (milliseconds).
    #[arg(long, default_value_t = 1000)]
    pub rollout_poll_ms: u64,
    /// With `rollout.yaml`: an urgent change; the rollout this starts skips every bake
    /// (and so the gates), recorded with `--reason`.
    #[arg(long, requires = "reason")]
    pub expedite: bool,
    /// Why the rollout is expedited (recorded in the run history).
    #[arg(long, requires = "expedite")]
    pub reason: Option<String>,
}

impl RunArgs {
    /// The run settings these flags describe.
    pub(crate) fn settings(&self, trigger: &str) -> RunSettings {
        RunSettings {
            config_repo: self.config_repo.clone(),
            workdir: self.workdir.clone(),
            mode: match self.mode {
                ModeArg::Direct => PublishMode::Direct,
                ModeArg::Pr => PublishMode::Pr,
            },
            db: self.db.clone(),
            controllers: self.controllers.clone(),
            controller_auth: rlc::output::to_controllers::ControllerAuth {
                tls: grl_core::tls::ClientTls::from_flags(
                    self.tls_ca.as_ref(),
                    self.tls_cert.as_ref(),
                    self.tls_key.as_ref(),
                ),
                token_file: self.token_file.clone(),
            },
            guards: GuardSettings {
                min_coverage: self.min_coverage,
                max_decrease: self.max_decrease,
                max_increase: self.max_increase,
                hysteresis: self.hysteresis,
                floor: self.floor,
                cap: self.cap,
                cap_peak_ratio: self.cap_peak_ratio,
            },
            concurrency: self.concurrency,
            now: self.now,
            trigger: trigger.to_string(),
            max_attempts: 3,
            github: match (&self.github_repo, &self.github_token) {
                (Some(repo), Some(token)) => Some(rlc::output::github::GitHubTarget {
                    api_base: self.github_api.clone(),
                    token: token.clone(),
                    repo: repo.clone(),
                    ca_file: self.github_ca.clone(),
                }),
                _ => None,
            },
            history_cache: if self.no_history_cache {
                None
            } else {
                Some(self.history_cache.clone().unwrap_or_else(|| {
                    let mut dir = self.workdir.clone().into_os_string();
                    dir.push(".history-cache");
                    PathBuf::from(dir)
                }))
            },
            history_retention: self.history_retention.0,
            progress: match self.progress {
                ProgressArg::Auto => ProgressMode::auto(self.progress_interval),
                ProgressArg::Bar => ProgressMode::Bar,
                ProgressArg::Log => ProgressMode::Log(self.progress_interval),
                ProgressArg::Off => ProgressMode::Off,
            },
            metrics: None,
        }
    }

    /// The metrics source these flags name.
    pub(crate) fn source(&self) -> anyhow::Result<Arc<dyn MetricsSource>> {
        match (&self.prometheus, &self.history_dir) {
            (Some(url), _) => {
                let defaults = PromSettings {
                    timeout: self.prometheus_timeout,
                    ..PromSettings::default()
                };
                match &self.query_template {
                    Some(t) => {
                        let s = PromSettings {
                            query_template: t.clone(),
                            ..defaults
                        };
                        Ok(Arc::new(PrometheusSource::new(url, s)?))
                    }
                    None => Ok(Arc::new(BatchedPrometheusSource::new(url, defaults)?)),
                }
            }
            (None, Some(dir)) => Ok(Arc::new(FileSource::open(dir)?)),
            (None, None) => anyhow::bail!("give --prometheus URL or --history-dir DIR"),
        }
    }
}

/// A duration of at least one second, e.g. `30s`, `2m`.
pub(crate) fn positive_duration(text: &str) -> Result<std::time::Duration, String> {
    let d = policies::duration::parse(text).map_err(|e| e.to_string())?;
    if d.as_secs() == 0 {
        return Err(format!("`{text}` is not above zero (at least 1s)"));
    }
    Ok(d)
}
