//! `rlc-demo` (also run as `rlc demo`): the whole loop on one machine with embedded
//! defaults, in under two minutes. A binary of its own so that `rlc` does not link the tiers.
//!
//! Seeds a config repo from `config-repo/`, writes 28 days of real traffic history (the
//! embedded NAB series) as offline files, runs the configurator (direct mode, SQLite run
//! history), shows the review table, then starts a controller that follows the repo, three
//! zone aggregators and six clients in-process, replays traffic with a 15x surge on one
//! caller and prints a live per-second table and a closing summary.
//!
//! `rlc demo --rollout` shows a staged rollout instead ([`rollout`]): two regions, a good
//! change that passes both waves and a bad one rolled back after the first.

mod replay;
mod rollout;
mod seed;
mod table;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use rlc::decide::guards::GuardSettings;
use rlc::drive::run::{RunSettings, run_once};
use rlc::input::source::FileSource;
use rlc::output::git_store::PublishMode;

/// `rlc-demo`: the configurator and GRL's tiers on this machine, with embedded defaults.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "rlc-demo",
    version,
    about = "The whole loop on this machine with embedded defaults, in under two minutes"
)]
struct DemoCmd {
    /// Seconds of traffic to replay (the surge runs from a third to two thirds of it).
    #[arg(long, default_value_t = 36)]
    pub seconds: u64,
    /// Reporting interval of the GRL tiers, in milliseconds (default 1000; 200 with
    /// `--rollout`).
    #[arg(long)]
    pub interval_ms: Option<u64>,
    /// Show a staged rollout instead: two regions, each following its own branch of the
    /// config repo; a good change reaches r1 then r2, a bad one fails r1's gate and r1 goes
    /// back while r2 never moves. Exit 0 when it behaved so.
    #[arg(long)]
    pub rollout: bool,
    /// Keep the demo's files here instead of a temporary directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print the closing summary as one JSON line as well.
    #[arg(long)]
    pub json: bool,
    /// Log to stderr too; by default the demo's logs go to `demo.log` in its directory, so
    /// that they do not interleave with the live table.
    #[arg(short, long)]
    pub verbose: bool,
}

impl DemoCmd {
    /// Where the logs go when not `--verbose`: `demo.log` in `--dir`, else in the system's
    /// temporary directory (named with the process id).
    fn log_file(&self) -> PathBuf {
        match &self.dir {
            Some(dir) => dir.join("demo.log"),
            None => std::env::temp_dir().join(format!("rlc-demo-{}.log", std::process::id())),
        }
    }
}

#[tokio::main]
async fn main() {
    let cmd = DemoCmd::parse();
    init_logging(&cmd);
    let code = match execute(cmd).await {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("rlc demo: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

/// The demo's logs go to a file unless `--verbose`, so that the live table reads cleanly;
/// through the scrubbing writer either way (see [`rlc::secrets`]).
fn init_logging(cmd: &DemoCmd) {
    let filter =
        || tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    if !cmd.verbose {
        let path = cmd.log_file();
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        match std::fs::File::create(&path) {
            Ok(file) => {
                tracing_subscriber::fmt()
                    .with_env_filter(filter())
                    .with_ansi(false)
                    .with_writer(rlc::secrets::ScrubbingWriter::new(std::sync::Mutex::new(
                        file,
                    )))
                    .init();
                println!("(logs: {}; -v shows them here)", path.display());
                return;
            }
            Err(e) => eprintln!("rlc demo: cannot write logs to {}: {e}", path.display()),
        }
    }
    rlc::logs::to_stderr(filter());
}

/// Runs the demo; `true` (exit code 0) when the surge was held and no one else was dropped
/// (with `--rollout`: when the rollouts went as described).
async fn execute(cmd: DemoCmd) -> anyhow::Result<bool> {
    let tmp = tempfile::tempdir()?;
    let root = cmd.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&root)?;
    let now = chrono::Utc::now().timestamp();
    if cmd.rollout {
        let interval = Duration::from_millis(cmd.interval_ms.unwrap_or(200).max(100));
        return rollout::run(&root, interval).await;
    }

    println!(
        "== 1. config repo: seeding {} from config-repo/",
        root.join("config.git").display()
    );
    let remote = seed::config_repo(&root.join("config.git"))?;
    println!("== 2. history: 28 days of real traffic per bucket (NAB elb series, MIT licence)");
    let history = seed::history(&root.join("history"), now)?;

    println!("== 3. configurator: policies → guards → commit (direct mode, SQLite history)");
    let settings = RunSettings {
        config_repo: remote.clone(),
        workdir: root.join("rlc-checkout"),
        mode: PublishMode::Direct,
        db: format!("sqlite://{}", root.join("rlc-history.db").display()),
        controllers: Vec::new(),
        controller_auth: Default::default(),
        guards: GuardSettings::default(),
        concurrency: 4,
        now: Some(now),
        trigger: "demo".into(),
        max_attempts: 3,
        github: None,
        history_cache: None,
        history_retention: None,
        progress: rlc::drive::run::ProgressMode::Off,
        metrics: None,
    };
    let source = Arc::new(FileSource::open(&history)?);
    let report = run_once(&settings, source)
        .await
        .context("configurator run")?;
    println!(
        "{}",
        rlc::output::pr_description::terminal::for_terminal(&report.description)
    );
    println!(
        "run {}: {} (commit {})",
        report.run_id,
        report.status.as_str(),
        report.commit.as_deref().unwrap_or("none")
    );

    println!("\n== 4. GRL: a controller following the repo, 3 zone aggregators, 6 clients");
    let interval = Duration::from_millis(cmd.interval_ms.unwrap_or(1000).max(100));
    let summary = replay::run(&remote, interval, cmd.seconds.max(12)).await?;
    summary.print();
    if cmd.json {
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(summary.ok())
}
