//! `rlc serve`: runs on a cron schedule and right after a person's commit to `services/`,
//! and exports `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use rlc::git_store::GitStore;
use rlc::run::run_once;
use rlc::schedule::{Schedule, triggering_commit};
use rlc::serve_metrics::RlcMetrics;
use tracing::{info, warn};

use super::run::{RunArgs, print_summary};

/// `rlc serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeCmd {
    /// Cron schedule, 5 fields (`*/30 * * * *`) or 6 with seconds.
    #[arg(long, default_value = "0 * * * *")]
    pub schedule: String,
    /// How often to look for new commits on the config repo's main (seconds).
    #[arg(long, default_value_t = 10)]
    pub watch_interval_secs: u64,
    /// Where `/metrics` is served.
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub metrics_listen: SocketAddr,
    #[command(flatten)]
    pub args: RunArgs,
}

/// Runs until interrupted.
pub async fn execute(cmd: ServeCmd) -> anyhow::Result<()> {
    let schedule = Schedule::parse(&cmd.schedule)?;
    let source = cmd.args.source()?;
    let metrics = Arc::new(RlcMetrics::default());
    spawn_metrics_server(cmd.metrics_listen, metrics.clone()).await?;
    let watch_dir = cmd.args.workdir.join("watch");
    let repo = cmd.args.config_repo.clone();
    let mut seen = {
        let (repo, dir) = (repo.clone(), watch_dir.clone());
        tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
            let mut store = GitStore::open(&repo, &dir)?;
            Ok(store.fetch()?.commit)
        })
        .await??
    };
    info!(schedule = schedule.expr(), repo = %repo, head = %seen, "rlc serve started");
    let mut next = schedule.next_after(chrono::Utc::now());
    let mut watch = tokio::time::interval(Duration::from_secs(cmd.watch_interval_secs.max(1)));
    loop {
        let until_next = next
            .map(|t| (t - chrono::Utc::now()).to_std().unwrap_or_default())
            .unwrap_or(Duration::from_secs(3600));
        let trigger = tokio::select! {
            _ = tokio::time::sleep(until_next) => {
                next = schedule.next_after(chrono::Utc::now());
                Some("schedule".to_string())
            }
            _ = watch.tick() => {
                let (repo, dir, old) = (repo.clone(), watch_dir.clone(), seen.clone());
                let found = tokio::task::spawn_blocking(move || -> anyhow::Result<(String, Option<String>)> {
                    let mut store = GitStore::open(&repo, &dir)?;
                    let head = store.fetch()?.commit;
                    if head == old {
                        return Ok((head, None));
                    }
                    let commits = store.commits_between(&old, &head)?;
                    Ok((head, triggering_commit(&commits).map(|c| c.id.clone())))
                })
                .await?;
                match found {
                    Ok((head, trigger)) => {
                        seen = head;
                        trigger.map(|id| format!("commit {id}"))
                    }
                    Err(e) => {
                        warn!(error = %e, "watching the config repo failed");
                        None
                    }
                }
            }
            _ = tokio::signal::ctrl_c() => {
                info!("interrupted; stopping");
                return Ok(());
            }
        };
        let Some(trigger) = trigger else { continue };
        info!(trigger = %trigger, "run triggered");
        let started = Instant::now();
        let result = run_once(&cmd.args.settings(&trigger), source.clone()).await;
        let secs = started.elapsed().as_secs_f64();
        match &result {
            Ok(report) => {
                print_summary(report);
                metrics.observe(Ok(report), secs);
            }
            Err(e) => {
                warn!(error = %e, "run failed");
                metrics.observe(Err(()), secs);
            }
        }
    }
}

async fn spawn_metrics_server(addr: SocketAddr, metrics: Arc<RlcMetrics>) -> anyhow::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let m = metrics.clone();
            async move { m.encode() }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    info!(addr = %listener.local_addr()?, "metrics listening");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            warn!(error = %e, "metrics server stopped");
        }
    });
    Ok(())
}
