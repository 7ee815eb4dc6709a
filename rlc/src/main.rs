//! `rlc`, the Rate Limit Configurator: keeps GRL limits current from real traffic.

use clap::{Parser, Subcommand};

mod cmd;

#[derive(Debug, Parser)]
#[command(
    name = "rlc",
    version,
    about = "Rate Limit Configurator for the GRL global rate limiter"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the configurator once (`--once`), for cron or a Kubernetes CronJob.
    Run(cmd::run::RunCmd),
    /// Run on a cron schedule and after each person's commit to services/, capacity/ or
    /// events.yaml.
    Serve(cmd::serve::ServeCmd),
    /// Backtest a policy on a `timestamp,value` CSV.
    Backtest(cmd::backtest::BacktestCmd),
    /// Flip a bucket from shadow to deny, as a commit or PR like any other.
    Promote(cmd::promote::PromoteCmd),
    /// Why a bucket's limit is what it is: computed now as a run would (nothing committed),
    /// with its value after the last runs.
    ///
    /// Takes the flags of `rlc run` (and its `RLC_*` variables); those about delivery
    /// (`--mode`, `--controller`, `--github-*`) and `--workdir` are not used: it works in a
    /// temporary clone. Exit codes: 0 explained, 2 unknown service or bucket (the error
    /// names those there are), 3 metrics source, 4 config repo, 5 run history database (the
    /// explanation is still printed), 6 invalid config, 1 anything else.
    Explain(cmd::explain::ExplainCmd),
    /// Roll main's head out region by region (`rollout.yaml`): run, status, pause, resume,
    /// expedite, abort, rollback.
    Rollout(cmd::rollout::RolloutCmd),
    /// The whole loop on this machine with embedded defaults, in under two minutes: runs
    /// the `rlc-demo` binary installed beside `rlc` (`cargo build --release -p rlc-demo`),
    /// with these arguments (`rlc demo --help` lists them).
    #[command(disable_help_flag = true)]
    Demo(cmd::demo::DemoCmd),
}

#[tokio::main]
async fn main() {
    let cli: Cli = grl_core::cli::parse();
    register_secrets(&cli.command);
    init_logging(&cli.command);
    let code = match cli.command {
        Command::Run(c) => cmd::run::execute(c).await,
        Command::Serve(c) => report(cmd::serve::execute(c).await),
        Command::Backtest(c) => report(cmd::backtest::execute(c)),
        Command::Promote(c) => report(cmd::promote::execute(c).await),
        Command::Explain(c) => cmd::explain::execute(c).await,
        Command::Rollout(c) => cmd::rollout::execute(c).await,
        Command::Demo(c) => cmd::demo::execute(c),
    };
    std::process::exit(code);
}

/// Registers the passwords in every URL and every token given, so that no output of the
/// process shows them (see [`rlc::secrets`]).
fn register_secrets(command: &Command) {
    use rlc::secrets::{register, register_url};
    let run_args = match command {
        Command::Run(c) => Some(&c.args),
        Command::Serve(c) => Some(&c.args),
        Command::Explain(c) => Some(&c.args),
        Command::Promote(c) => {
            register_url(&c.config_repo);
            None
        }
        Command::Rollout(c) => match &c.action {
            cmd::rollout::Action::Run(d)
            | cmd::rollout::Action::Resume(d)
            | cmd::rollout::Action::Rollback(d) => Some(&d.args),
            cmd::rollout::Action::Status(s) => {
                register_url(&s.record.db);
                None
            }
            cmd::rollout::Action::Pause(r) | cmd::rollout::Action::Abort(r) => {
                register_url(&r.db);
                None
            }
            cmd::rollout::Action::Expedite(e) => {
                register_url(&e.record.db);
                None
            }
        },
        _ => None,
    };
    if let Some(a) = run_args {
        for url in [Some(&a.config_repo), Some(&a.db), Some(&a.github_api)]
            .into_iter()
            .chain([a.prometheus.as_ref()])
            .flatten()
            .chain(&a.controllers)
        {
            register_url(url);
        }
        if let Some(token) = &a.github_token {
            register(token);
        }
        // The controller's admin token: a file whose content is read again at every push;
        // registered now so that no output shows it even if a push error quoted it.
        if let Some(token) = a
            .token_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
        {
            register(token.trim());
        }
    }
}

/// Logs go to stderr (`rlc-demo` keeps its own). `rlc explain` logs only warnings unless `RUST_LOG` says
/// otherwise: its output is the explanation.
fn init_logging(command: &Command) {
    let level = if matches!(command, Command::Explain(_)) {
        "warn"
    } else {
        "info"
    };
    rlc::logs::to_stderr(
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()),
    );
}

fn report(result: anyhow::Result<()>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("rlc: {}", rlc::secrets::scrub(&format!("{e:#}")));
            1
        }
    }
}
