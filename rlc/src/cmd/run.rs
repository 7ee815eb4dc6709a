//! `rlc run --once`: one configurator run, for an external cron or a Kubernetes CronJob.
//!
//! Exit codes: 0 committed or nothing to change; 3 metrics source failed; 4 config repo
//! failed; 5 run history database failed; 6 invalid config; 7 the controller could not be
//! updated (after a commit, or when it runs another version than `main`); 8 no usable
//! metrics for any bucket (every series empty, NaN or infinite); 1 anything else; 2 bad
//! usage. With `rollout.yaml` in the config repo, the staged rollout that follows the
//! commit adds 9 (a gate failed, the regions moved were rolled back) and 10 (paused or
//! stopped by an operator).

use super::args::RunArgs;
use clap::Args;
use rlc::drive::exit;
use rlc::drive::run::{RunReport, run_once};
use rlc::secrets::scrub;

/// `rlc run`.
#[derive(Debug, Clone, Args)]
pub(crate) struct RunCmd {
    /// Run once and exit (the only form; kept explicit for cron jobs).
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub args: RunArgs,
    /// Print the review table to stdout: Markdown (a pull request body) to a file or a
    /// pipe, plain text on a terminal.
    #[arg(long)]
    pub print_table: bool,
}

/// Runs `rlc run --once`; returns the process exit code.
pub(crate) async fn execute(cmd: RunCmd) -> i32 {
    if !cmd.once {
        eprintln!("rlc run: pass --once (for a long-running scheduler use `rlc serve`)");
        return exit::USAGE;
    }
    if let Err(e) = rlc::output::git_store::check_pushable(&cmd.args.config_repo) {
        eprintln!("rlc run: {}", scrub(&e.to_string()));
        return exit::GIT;
    }
    let source = match cmd.args.source() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rlc run: {}", scrub(&format!("{e:#}")));
            return exit::SOURCE;
        }
    };
    match run_once(&cmd.args.settings("manual"), source.clone()).await {
        Ok(report) => {
            print_summary(&report);
            if cmd.print_table {
                // Markdown for a file or a pipe (a PR body), plain text on a terminal.
                use std::io::IsTerminal as _;
                if std::io::stdout().is_terminal() {
                    print!(
                        "{}",
                        rlc::output::pr_description::terminal::for_terminal(&report.description)
                    );
                } else {
                    println!("{}", report.description);
                }
            }
            match report.exit_code() {
                exit::OK => {
                    super::rollout::after_run(&cmd.args, &report, source, Default::default()).await
                }
                code => code,
            }
        }
        Err(e) => {
            eprintln!("rlc run failed: {}", scrub(&e.to_string()));
            e.exit_code()
        }
    }
}

/// One line per outcome, for people and logs.
pub(crate) fn print_summary(report: &RunReport) {
    let changed = report
        .plans
        .iter()
        .filter(|p| p.guarded.outcome.as_str() == "changed" || p.guarded.outcome.as_str() == "new")
        .count();
    let line = format!(
        "run {}: {} ({} buckets, {} limit(s) changed){}{}{}",
        report.run_id,
        report.status.as_str(),
        report.plans.len(),
        changed,
        report
            .commit
            .as_ref()
            .map(|c| format!(", commit {c}"))
            .unwrap_or_default(),
        if report.resynced_controller {
            ", controller brought to main's config"
        } else {
            ""
        },
        report
            .push_error
            .as_ref()
            .map(|e| format!(", controller push failed: {e}"))
            .unwrap_or_default(),
    );
    println!("{}", scrub(&line));
    for s in &report.shortfalls {
        println!("capacity shortfall: {}", scrub(&s.line()));
    }
}
