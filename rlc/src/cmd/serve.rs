//! `rlc serve`: runs on a cron schedule (in a time zone) and right after a person's commit
//! to `services/`, `capacity/` or `events.yaml`, one run at a time, and exports `/metrics`.
//! `--print-next N` prints the next N run times and exits, like `systemd-analyze calendar`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;
use clap::Args;
use futures::Stream;
use rlc::drive::run::run_once;
use rlc::drive::schedule::clock::SystemClock;
use rlc::drive::schedule::ticker::{Ticker, drive};
use rlc::drive::schedule::{Schedule, triggering_commit};
use rlc::drive::serve_metrics::RlcMetrics;
use rlc::output::git_store::GitStore;
use tracing::{info, warn};

use super::args::RunArgs;
use super::run::print_summary;

/// `rlc serve`.
#[derive(Debug, Clone, Args)]
#[command(mut_arg("config_repo", |a| a
    .required(false)
    .required_unless_present("print_next")
    .default_value("")
    .hide_default_value(true)))]
pub(crate) struct ServeCmd {
    /// Cron schedule as crontab reads it: `minute hour day-of-month month day-of-week`
    /// (`0 6 * * 1-5`, `0 6 * * MON-FRI`, `*/30 * * * *`; 0 and 7 are Sunday) or `@hourly`,
    /// `@daily`, `@weekly`, `@monthly`, `@yearly`.
    #[arg(long, default_value = "0 * * * *", value_parser = parse_schedule)]
    pub schedule: Schedule,
    /// Time zone of the schedule's wall-clock times, an IANA name such as `Europe/Berlin`.
    #[arg(long, default_value = "UTC", value_parser = parse_zone)]
    pub schedule_tz: Tz,
    /// Print the next N run times (RFC 3339 in the schedule's zone, one a line; counted from
    /// `--now` when given) and exit.
    #[arg(long, value_name = "N")]
    pub print_next: Option<usize>,
    /// How often to look for new commits on the config repo's main (seconds).
    #[arg(long, default_value_t = 10)]
    pub watch_interval_secs: u64,
    /// Where `/metrics` is served.
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub metrics_listen: SocketAddr,
    #[command(flatten)]
    pub args: RunArgs,
}

fn parse_schedule(expr: &str) -> Result<Schedule, String> {
    Schedule::parse(expr).map_err(|e| match e.field {
        Some(field) => format!("{field}: {}", e.message),
        None => e.message,
    })
}

fn parse_zone(name: &str) -> Result<Tz, String> {
    name.parse::<Tz>().map_err(|_| {
        format!("`{name}` is not an IANA time zone name (such as UTC or Europe/Berlin)")
    })
}

/// Runs until interrupted, or prints the next run times with `--print-next`.
pub(crate) async fn execute(cmd: ServeCmd) -> anyhow::Result<()> {
    let schedule = cmd.schedule.clone().in_zone(cmd.schedule_tz);
    if let Some(n) = cmd.print_next {
        let from = match cmd.args.now {
            Some(secs) => DateTime::from_timestamp(secs, 0)
                .with_context(|| format!("--now {secs} is not a representable time"))?,
            None => Utc::now(),
        };
        return print_next(&schedule, from, n);
    }
    rlc::output::git_store::check_pushable(&cmd.args.config_repo)?;
    let source = cmd.args.source()?;
    let metrics = Arc::new(RlcMetrics::default());
    rlc::drive::serve_metrics::serve(cmd.metrics_listen, metrics.clone()).await?;
    let watch_dir = cmd.args.workdir.join("watch");
    let repo = cmd.args.config_repo.clone();
    let seen = {
        let (repo, dir) = (repo.clone(), watch_dir.clone());
        tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
            let mut store = GitStore::open(&repo, &dir)?;
            Ok(store.fetch()?.commit)
        })
        .await??
    };
    let mut ticker = Ticker::new(schedule, SystemClock);
    let next_run = ticker.next_run().map(|t| t.to_rfc3339());
    info!(
        schedule = cmd.schedule.expr(),
        schedule_tz = %cmd.schedule_tz,
        next_run = next_run.as_deref().unwrap_or("none"),
        repo = %rlc::secrets::redact_url(&repo),
        head = %seen,
        "rlc serve started"
    );
    let commits = Box::pin(watch_commits(
        repo,
        watch_dir,
        seen,
        Duration::from_secs(cmd.watch_interval_secs.max(1)),
    ));
    let stop = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            warn!(error = %e, "cannot listen for ctrl-c; running until killed");
            std::future::pending::<()>().await;
        }
        info!("interrupted; stopping");
    };
    drive(&mut ticker, commits, stop, &metrics, |trigger| {
        let mut settings = cmd.args.settings(&trigger.label());
        settings.metrics = Some(metrics.clone());
        let (source, metrics, args) = (source.clone(), metrics.clone(), cmd.args.clone());
        async move {
            let started = Instant::now();
            let result = run_once(&settings, source.clone()).await;
            let secs = started.elapsed().as_secs_f64();
            match &result {
                Ok(report) => {
                    print_summary(report);
                    metrics.observe(Ok(report), secs);
                    if report.exit_code() == 0 {
                        super::rollout::after_run(&args, report, source, metrics.rollout.clone())
                            .await;
                    }
                }
                Err(e) => {
                    warn!(error = %e, "run failed");
                    metrics.observe(Err(e), secs);
                }
            }
        }
    })
    .await;
    Ok(())
}

/// Prints the `n` run times after `from`, in the schedule's zone.
fn print_next(schedule: &Schedule, from: DateTime<Utc>, n: usize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    for t in schedule.upcoming(from).take(n) {
        let local = t.with_timezone(&schedule.zone());
        writeln!(out, "{}", local.to_rfc3339_opts(SecondsFormat::Secs, true))?;
    }
    out.flush()?;
    Ok(())
}

/// Looks at the config repo's `main` every `every` and yields the id of each new commit that
/// should trigger a run (see [`triggering_commit`]). Only polled between runs.
fn watch_commits(
    repo: String,
    dir: PathBuf,
    seen: String,
    every: Duration,
) -> impl Stream<Item = String> {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    futures::stream::unfold((tick, seen), move |(mut tick, mut seen)| {
        let (repo, dir) = (repo.clone(), dir.clone());
        async move {
            loop {
                tick.tick().await;
                let (repo, dir, old) = (repo.clone(), dir.clone(), seen.clone());
                let found = tokio::task::spawn_blocking(
                    move || -> anyhow::Result<(String, Option<String>)> {
                        let mut store = GitStore::open(&repo, &dir)?;
                        let head = store.fetch()?.commit;
                        if head == old {
                            return Ok((head, None));
                        }
                        let commits = store.commits_between(&old, &head)?;
                        Ok((head, triggering_commit(&commits).map(|c| c.id.clone())))
                    },
                )
                .await
                .map_err(anyhow::Error::from)
                .and_then(|r| r);
                match found {
                    Ok((head, trigger)) => {
                        seen = head;
                        if let Some(id) = trigger {
                            return Some((id, (tick, seen)));
                        }
                    }
                    Err(e) => warn!(error = %e, "watching the config repo failed"),
                }
            }
        }
    })
}
