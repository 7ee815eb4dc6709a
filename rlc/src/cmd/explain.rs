//! `rlc explain SERVICE BUCKET`: why a bucket's limit is what it is — computed now exactly as
//! a run would compute it (the checkout of `main`, the window from the metrics source, the
//! policy, the guards, the shadow review), with nothing committed, pushed or recorded — and
//! the bucket's value after each of the last runs in the run history.
//!
//! It takes the flags of `rlc run` (and their `RLC_*` variables), so a run's command line
//! explains any of its buckets; those about delivery (`--mode`, `--controller`, `--github-*`)
//! and the work directory are not used: it clones into a temporary directory. An SQLite run
//! history that does not exist is not created (the output says there is none).
//!
//! `--json` prints one JSON object, the [`rlc::decide::explain::Explanation`]. Exit codes: 0
//! explained; 2 unknown service or bucket (the error lists those there are) or bad usage;
//! 3 metrics source failed; 4 config repo failed; 5 run history database failed (the
//! explanation is still printed); 6 invalid config; 1 anything else.

use clap::Args;
use rlc::decide::explain::{Explanation, HistoryPart};
use rlc::drive::exit;
use rlc::drive::run::{OneBucketError, plan_bucket_now};
use rlc::run_log::{DatabaseUrl, RunLog};
use rlc::secrets::scrub;

use super::args::RunArgs;

/// The flags of `rlc run` that `rlc explain` does not use (delivery, the work directory,
/// progress, rollouts): still accepted, so a command line copied from `rlc run` works, but
/// not listed in its help.
fn hide_unused(a: clap::Arg) -> clap::Arg {
    const UNUSED: &[&str] = &[
        "mode",
        "controllers",
        "tls_ca",
        "tls_cert",
        "tls_key",
        "token_file",
        "workdir",
        "progress",
        "progress_interval",
        "github_repo",
        "github_token",
        "github_api",
        "github_ca",
        "rollout_poll_ms",
        "expedite",
        "reason",
    ];
    let hide = UNUSED.contains(&a.get_id().as_str());
    a.hide(hide)
}

/// `rlc explain`.
#[derive(Debug, Clone, Args)]
#[command(mut_args(hide_unused))]
pub(crate) struct ExplainCmd {
    /// The service.
    pub service: String,
    /// The bucket.
    pub bucket: String,
    /// How many of the last runs to show from the run history.
    #[arg(long, default_value_t = 10)]
    pub last_runs: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub args: RunArgs,
}

/// Explains the bucket; returns the process exit code.
pub(crate) async fn execute(cmd: ExplainCmd) -> i32 {
    let source = match cmd.args.source() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rlc explain: {}", scrub(&format!("{e:#}")));
            return exit::SOURCE;
        }
    };
    let settings = cmd.args.settings("explain");
    let planned = match plan_bucket_now(&settings, source, &cmd.service, &cmd.bucket).await {
        Ok(p) => p,
        Err(OneBucketError::Run(e)) => {
            eprintln!("rlc explain: {}", scrub(&e.to_string()));
            return e.exit_code();
        }
        Err(e) => {
            eprintln!("rlc explain: {}", scrub(&e.to_string()));
            return exit::USAGE;
        }
    };
    let mut explanation = match &planned.plan {
        Some(plan) => Explanation::of(plan, &planned.bucket, &planned.commit, planned.now),
        None => Explanation::fixed(&cmd.service, &planned.bucket, &planned.commit, planned.now),
    };
    let (history, failed) = last_runs(&cmd).await;
    explanation.history = Some(history);
    if cmd.json {
        match serde_json::to_string(&explanation) {
            Ok(text) => println!("{}", scrub(&text)),
            Err(e) => {
                eprintln!("rlc explain: {e}");
                return exit::OTHER;
            }
        }
    } else {
        print!("{}", scrub(&explanation.to_text()));
    }
    if failed { exit::DATABASE } else { exit::OK }
}

/// The bucket after each of the last runs, or why there are none; `true` when the database
/// failed.
async fn last_runs(cmd: &ExplainCmd) -> (HistoryPart, bool) {
    let none = |database: Option<String>, note: String| HistoryPart {
        database,
        note: Some(note),
        runs: Vec::new(),
    };
    let target = match DatabaseUrl::parse(&cmd.args.db) {
        Ok(t) => t,
        Err(e) => return (none(None, format!("run history: {e}")), true),
    };
    let name = target.display_name();
    match &target {
        DatabaseUrl::Sqlite { path: None, .. } => {
            return (
                none(
                    None,
                    "no run history: an in-memory database holds no runs".into(),
                ),
                false,
            );
        }
        DatabaseUrl::Sqlite { path: Some(p), .. } if !p.exists() => {
            return (
                none(
                    None,
                    format!("no run history: {name} does not exist (give --db or RLC_DB)"),
                ),
                false,
            );
        }
        _ => {}
    }
    let read = async {
        let history = RunLog::connect(&cmd.args.db).await?;
        let runs = history
            .bucket_runs(&cmd.service, &cmd.bucket, cmd.last_runs)
            .await;
        history.close().await;
        runs
    };
    match read.await {
        Ok(runs) => (
            HistoryPart {
                database: Some(name),
                note: None,
                runs,
            },
            false,
        ),
        Err(e) => (
            none(Some(name), format!("run history unreadable: {e}")),
            true,
        ),
    }
}
