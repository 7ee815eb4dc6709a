//! `rlc rollout run | status | pause | resume | expedite | abort | rollback`: the staged
//! rollout of `main`'s head, region by region as `rollout.yaml` says, and an operator's
//! hands on it.
//!
//! Exit codes of `run` (and of `resume` / `rollback` when they drive): 0 every wave passed
//! (or nothing to roll out, or another configurator drives the rollout in progress and the
//! change waits for it); 9 a gate failed and the regions already moved were rolled back;
//! 10 paused, aborted or rolled back by an operator; others as `rlc run --once`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use rlc::drive::exit;
use rlc::drive::rollout::controllers::discover;
use rlc::drive::rollout::state::RolloutState;
use rlc::drive::rollout::status::StatusView;
use rlc::drive::rollout::{RolloutMetrics, RolloutOutcome, RolloutSettings};
use rlc::drive::run::RunReport;
use rlc::drive::serve_metrics::RlcMetrics;
use rlc::input::source::MetricsSource;
use rlc::run_log::RunLog;
use rlc::secrets::scrub;

use super::args::{ModeArg, RunArgs};

/// `rlc rollout`.
#[derive(Debug, Args)]
pub(crate) struct RolloutCmd {
    #[command(subcommand)]
    pub action: Action,
}

/// What to do with the rollout.
#[derive(Debug, Subcommand)]
pub(crate) enum Action {
    /// Roll `main`'s head out wave by wave (or continue the rollout in progress); returns
    /// when it is done.
    Run(DriveCmd),
    /// Show the rollout in progress (or the last one): each region's place and version.
    Status(StatusCmd),
    /// Hold the rollout: the wave in progress finishes, no new wave starts.
    Pause(RecordCmd),
    /// Let a paused rollout go on; with `--config-repo` etc., drive it here until done
    /// (with `--expedite --reason`, skipping its remaining bakes).
    Resume(DriveCmd),
    /// Skip the remaining bakes of the rollout in progress (an urgent change): its driver
    /// cuts the bake in progress short at its next poll; the reason is recorded.
    Expedite(ExpediteCmd),
    /// Stop the rollout where it is; the regions moved stay on the new version.
    Abort(RecordCmd),
    /// Put every region the rollout moved back on its previous version.
    #[command(mut_args(hide_limit_flags))]
    Rollback(DriveCmd),
}

/// The flags of `rlc run` about computing limits (policies' guards, fetching, progress),
/// which a rollback never does: still accepted, so a command line copied from `rollout
/// run` works, but not listed in `rollout rollback --help`.
fn hide_limit_flags(a: clap::Arg) -> clap::Arg {
    const UNUSED: &[&str] = &[
        "min_coverage",
        "max_decrease",
        "max_increase",
        "hysteresis",
        "floor",
        "cap",
        "cap_peak_ratio",
        "concurrency",
        "history_cache",
        "no_history_cache",
        "history_retention",
        "progress",
        "progress_interval",
    ];
    let hide = UNUSED.contains(&a.get_id().as_str());
    a.hide(hide)
}

/// Flags of the subcommands that drive a rollout.
#[derive(Debug, Args)]
#[command(mut_arg("config_repo", |a| a.required(false).default_value("").hide_default_value(true)))]
pub(crate) struct DriveCmd {
    #[command(flatten)]
    pub args: RunArgs,
    /// Serve `/metrics` here while the rollout runs.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// The rollout to act on (default: the one in progress, else the last).
    #[arg(long)]
    pub id: Option<String>,
}

/// `rlc rollout status`.
#[derive(Debug, Args)]
pub(crate) struct StatusCmd {
    #[command(flatten)]
    pub record: RecordCmd,
    /// Also ask these controllers which version they run (repeat, or commas).
    #[arg(long = "controller", value_delimiter = ',')]
    pub controllers: Vec<String>,
    /// CA (PEM) of the controllers' certificate.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `rlc rollout expedite`.
#[derive(Debug, Args)]
pub(crate) struct ExpediteCmd {
    #[command(flatten)]
    pub record: RecordCmd,
    /// Why the bakes are skipped (recorded in the run history).
    #[arg(long)]
    pub reason: String,
}

/// Flags of the subcommands that only change the run history.
#[derive(Debug, Args)]
pub(crate) struct RecordCmd {
    /// Run history database: sqlite://FILE (default) or postgres://…
    #[arg(
        long,
        env = "RLC_DB",
        default_value = "sqlite://rlc-history.db",
        hide_env_values = true
    )]
    pub db: String,
    /// The rollout (default: the one in progress, else the last).
    #[arg(long)]
    pub id: Option<String>,
}

/// The rollout settings `args` describe.
pub(crate) fn settings(
    args: &RunArgs,
    run_id: Option<String>,
    metrics: RolloutMetrics,
) -> RolloutSettings {
    let run = args.settings("rollout");
    let mut workdir = args.workdir.clone().into_os_string();
    workdir.push(".rollout");
    RolloutSettings {
        config_repo: args.config_repo.clone(),
        workdir: PathBuf::from(workdir),
        controllers: args.controllers.clone(),
        auth: run.controller_auth,
        prometheus: args.prometheus.clone(),
        poll: Duration::from_millis(args.rollout_poll_ms.max(10)),
        now: args.now,
        expedite: args
            .expedite
            .then(|| args.reason.clone().unwrap_or_default()),
        run_id,
        github: match args.mode {
            ModeArg::Pr => run.github,
            ModeArg::Direct => None,
        },
        metrics,
    }
}

/// Runs the subcommand; returns the exit code.
pub(crate) async fn execute(cmd: RolloutCmd) -> i32 {
    let result = match cmd.action {
        Action::Run(c) => drive(c, None).await,
        Action::Status(c) => status(c).await,
        Action::Pause(c) => change(c, "pause").await,
        Action::Resume(c) => drive(c, Some("resume")).await,
        Action::Expedite(c) => expedite(c).await,
        Action::Abort(c) => change(c, "abort").await,
        Action::Rollback(c) => drive(c, Some("rollback")).await,
    };
    result.unwrap_or_else(|(code, e)| {
        eprintln!("rlc rollout: {}", scrub(&format!("{e:#}")));
        code
    })
}

type Failure = (i32, anyhow::Error);

fn fail<E: Into<anyhow::Error>>(code: i32) -> impl FnOnce(E) -> Failure {
    move |e| (code, e.into())
}

async fn connect(db: &str) -> Result<RunLog, Failure> {
    RunLog::connect(db).await.map_err(fail(exit::DATABASE))
}

/// Connects to a run history that must exist already: `status`, `pause`, `expedite` and
/// `abort` act on a rollout a run recorded, so they never create an empty database (one in
/// the current directory, by default) where there is none.
async fn existing(db: &str) -> Result<RunLog, Failure> {
    if let Ok(rlc::run_log::DatabaseUrl::Sqlite {
        path: Some(path), ..
    }) = rlc::run_log::DatabaseUrl::parse(db)
        && !path.exists()
    {
        return Err((
            exit::DATABASE,
            anyhow::anyhow!(
                "no run history at {}: give --db (or RLC_DB) naming the database `rlc rollout \
                 run` records into",
                path.display()
            ),
        ));
    }
    connect(db).await
}

/// The rollout `id`, or the one in progress, or the last.
async fn pick(
    history: &RunLog,
    id: Option<&str>,
) -> Result<rlc::drive::rollout::state::RolloutRecord, Failure> {
    let found = match id {
        Some(id) => history.rollout(id).await,
        None => history.latest_rollout().await,
    }
    .map_err(fail(exit::DATABASE))?;
    found.ok_or_else(|| {
        (
            exit::OTHER,
            anyhow::anyhow!(
                "no rollout {}in the run history",
                id.map(|i| format!("{i} ")).unwrap_or_default()
            ),
        )
    })
}

/// `run`, `resume` and `rollback`.
async fn drive(c: DriveCmd, action: Option<&str>) -> Result<i32, Failure> {
    rlc::output::git_store::check_pushable(&c.args.config_repo).map_err(fail(exit::GIT))?;
    let history = connect(&c.args.db).await?;
    if let Some(action) = action {
        let r = pick(&history, c.id.as_deref()).await?;
        let (done, verb) = match action {
            "resume" => (
                history
                    .set_rollout_state(&r.id, &[RolloutState::Paused], RolloutState::Running, None)
                    .await,
                "resumed",
            ),
            _ => (
                history
                    .set_rollout_request(
                        &r.id,
                        Some("rollback"),
                        &[
                            RolloutState::Running,
                            RolloutState::Paused,
                            RolloutState::Aborted,
                            RolloutState::Passed,
                        ],
                    )
                    .await,
                "rollback requested",
            ),
        };
        if !done.map_err(fail(exit::DATABASE))? {
            return Err((
                exit::OTHER,
                anyhow::anyhow!(
                    "rollout {} is {}: cannot {action} it",
                    r.id,
                    r.state.as_str()
                ),
            ));
        }
        println!("rollout {}: {verb}", r.id);
        if c.args.config_repo.is_empty() {
            println!(
                "(the process that drives rollouts carries it out; give --config-repo and --controller to do it here)"
            );
            return Ok(0);
        }
        if action == "rollback" {
            return rollback(&c, &history, &r.id).await;
        }
    }
    if c.args.config_repo.is_empty() || c.args.controllers.is_empty() {
        return Err((
            exit::USAGE,
            anyhow::anyhow!("give --config-repo and every region's --controller"),
        ));
    }
    let metrics = Arc::new(RlcMetrics::default());
    if let Some(addr) = c.metrics_listen {
        rlc::drive::serve_metrics::serve(addr, metrics.clone())
            .await
            .map_err(fail(exit::OTHER))?;
    }
    let source = c.args.source().map_err(fail(exit::SOURCE))?;
    let settings = settings(&c.args, None, metrics.rollout.clone());
    let outcomes = rlc::drive::rollout::run(&settings, &history, &*source)
        .await
        .map_err(|e| (e.exit_code(), e.into()))?;
    Ok(report(&settings, outcomes).await)
}

/// Prints each outcome; the exit code of the last. Without `rollout.yaml`, sends `main`'s
/// head to every controller at once.
pub(crate) async fn report(settings: &RolloutSettings, outcomes: Vec<RolloutOutcome>) -> i32 {
    let mut code = 0;
    for o in outcomes {
        for line in o.lines() {
            println!("{}", scrub(&line));
        }
        if let RolloutOutcome::NoPlan { commit } = &o
            && let Err(e) = rlc::drive::rollout::driver::all_at_once(settings, commit).await
        {
            eprintln!("rlc rollout: {}", scrub(&e.to_string()));
            return e.exit_code();
        }
        code = o.exit_code();
    }
    code
}

/// `rollback` here: waits for a live driver to carry it out, or does it.
async fn rollback(c: &DriveCmd, history: &RunLog, id: &str) -> Result<i32, Failure> {
    let settings = settings(&c.args, None, RolloutMetrics::default());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let r = pick(history, Some(id)).await?;
        if r.state == RolloutState::RolledBack {
            println!(
                "rollout {id}: rolled back by {}",
                r.owner.as_deref().unwrap_or("its driver")
            );
            return Ok(0);
        }
        let stale = chrono::Utc::now().timestamp_millis()
            - rlc::drive::rollout::driver::STALE_AFTER.as_millis() as i64;
        if r.live_owner(stale).is_none() {
            let outcome = rlc::drive::rollout::rollback_now(&settings, history, id)
                .await
                .map_err(|e| (e.exit_code(), e.into()))?;
            for line in outcome.lines() {
                println!("{}", scrub(&line));
            }
            return Ok(match outcome {
                RolloutOutcome::RolledBack { .. } => 0,
                o => o.exit_code(),
            });
        }
        if tokio::time::Instant::now() >= deadline {
            return Err((
                exit::OTHER,
                anyhow::anyhow!("rollout {id}: its driver did not roll it back within 120 s"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `pause` and `abort`.
async fn change(c: RecordCmd, action: &str) -> Result<i32, Failure> {
    let history = existing(&c.db).await?;
    let r = pick(&history, c.id.as_deref()).await?;
    let (from, to, reason): (&[RolloutState], _, _) = match action {
        "pause" => (&[RolloutState::Running], RolloutState::Paused, None),
        _ => (
            &[RolloutState::Running, RolloutState::Paused],
            RolloutState::Aborted,
            Some("aborted by an operator"),
        ),
    };
    let done = history
        .set_rollout_state(&r.id, from, to, reason)
        .await
        .map_err(fail(exit::DATABASE))?;
    if !done {
        return Err(not_in_state(&r, action));
    }
    println!("rollout {}: {}", r.id, to.as_str());
    Ok(0)
}

/// The refusal of `action` on rollout `r`, which is not in a state that allows it.
fn not_in_state(r: &rlc::drive::rollout::state::RolloutRecord, action: &str) -> Failure {
    (
        exit::OTHER,
        anyhow::anyhow!(
            "rollout {} is {}: cannot {action} it",
            r.id,
            r.state.as_str()
        ),
    )
}

/// `expedite`: records the reason on the rollout in progress; its driver reads it.
async fn expedite(c: ExpediteCmd) -> Result<i32, Failure> {
    if c.reason.trim().is_empty() {
        return Err((
            exit::USAGE,
            anyhow::anyhow!("--reason must say why the bakes are skipped"),
        ));
    }
    let history = existing(&c.record.db).await?;
    let r = pick(&history, c.record.id.as_deref()).await?;
    let done = history
        .set_rollout_expedite(&r.id, c.reason.trim())
        .await
        .map_err(fail(exit::DATABASE))?;
    if !done {
        return Err(not_in_state(&r, "expedite"));
    }
    println!(
        "rollout {}: expedited (wave {}/{}): the bake in progress ends at its driver's next poll, the remaining waves are not baked",
        r.id,
        (r.wave + 1).min(r.plan.waves.len()),
        r.plan.waves.len()
    );
    if r.state == RolloutState::Paused {
        println!("(it is paused: rlc rollout resume lets it go on)");
    }
    Ok(0)
}

async fn status(c: StatusCmd) -> Result<i32, Failure> {
    let history = existing(&c.record.db).await?;
    let r = pick(&history, c.record.id.as_deref()).await?;
    let auth = rlc::output::to_controllers::ControllerAuth {
        tls: grl_core::tls::ClientTls::from_flags(c.tls_ca.as_ref(), None, None),
        token_file: None,
    };
    let views = discover(&c.controllers, &auth).await;
    let view = StatusView::new(&r, &views);
    if c.json {
        let mut v = serde_json::to_value(&view).map_err(fail(exit::OTHER))?;
        v["controllers"] = serde_json::to_value(&views).map_err(fail(exit::OTHER))?;
        println!("{v}");
    } else {
        print!("{}", view.render(!c.controllers.is_empty()));
    }
    Ok(0)
}

/// After `rlc run` or a run of `rlc serve`: with `rollout.yaml`, the staged rollout of `main`'s head (see
/// [`rlc::drive::rollout`]); without, says that every controller got it at once. Returns the exit
/// code.
pub(crate) async fn after_run(
    args: &RunArgs,
    report: &RunReport,
    source: Arc<dyn MetricsSource>,
    metrics: rlc::drive::rollout::RolloutMetrics,
) -> i32 {
    if !report.staged_rollout {
        if matches!(args.mode, ModeArg::Direct) && !args.controllers.is_empty() {
            println!(
                "no {} in the config repo: every controller got main at once (no staged rollout)",
                rlc::drive::rollout::PLAN_FILE
            );
        }
        return exit::OK;
    }
    if args.controllers.is_empty() {
        println!(
            "{} present but no --controller given: nothing rolled out",
            rlc::drive::rollout::PLAN_FILE
        );
        return exit::OK;
    }
    let settings = settings(args, Some(report.run_id.clone()), metrics);
    let history = match rlc::run_log::RunLog::connect(&args.db).await {
        Ok(h) => h,
        Err(e) => {
            eprintln!("rlc run: rollout: {}", scrub(&e.to_string()));
            return exit::DATABASE;
        }
    };
    match rlc::drive::rollout::run(&settings, &history, &*source).await {
        Ok(outcomes) => self::report(&settings, outcomes).await,
        Err(e) => {
            eprintln!("rlc run: rollout: {}", scrub(&e.to_string()));
            e.exit_code()
        }
    }
}
