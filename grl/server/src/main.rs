//! `grl`: run a zone aggregator, a controller or a sidecar, generate load through real
//! clients, manage incident overrides, or look at a running tier (`status`, `top`,
//! `explain`).
#![forbid(unsafe_code)]

mod cmd;

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// mimalloc instead of the system allocator: the tiers allocate per report and per
/// instruction, and glibc's malloc was a seventh of an aggregator's CPU (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The GRL binary.
#[derive(Debug, Parser)]
#[command(name = "grl", version, about = "Global rate limiter tiers and tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Run a zone aggregator.
    Aggregator(cmd::aggregator::Args),
    /// Run a regional or global controller.
    Controller(cmd::controller::Args),
    /// Offer traffic through N real clients and print one JSON line per second per bucket.
    Loadgen(cmd::loadgen::Args),
    /// Manage incident overrides on a controller.
    Override(cmd::overrides::Args),
    /// A tier's state: config version, leader, zones and every bucket's rates.
    Status(cmd::status::Args),
    /// `status` refreshing in place, the dropping buckets first (`q` quits).
    Top(cmd::top::Args),
    /// Which bucket a request falls in on a tier, and why.
    Explain(cmd::explain::Args),
    /// Enforce in front of one local service in any language: a reverse proxy (HTTP/1.1,
    /// h2c, gRPC) and Envoy's rate limit service.
    Sidecar(cmd::sidecar::Args),
}

fn main() -> std::process::ExitCode {
    // Flags are parsed (and bad ones refused with exit code 2) before anything starts.
    let cli: Cli = grl_core::cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(colours())
        .init();
    let result = cli
        .runtime()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(run(cli)));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {}", report(&e));
            std::process::ExitCode::from(cmd::validate::exit_code(&e) as u8)
        }
    }
}

/// Colours in the logs only on a terminal (a file or a pipe gets plain text), and never
/// with `NO_COLOR` set.
fn colours() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// An error and its causes, each said once: a layer whose message repeats the one below it
/// (a `{0}` wrapper and its source) is shown as one line.
fn report(e: &anyhow::Error) -> String {
    let mut lines: Vec<String> = Vec::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if lines.last().is_some_and(|l| l.contains(&msg)) {
            continue;
        }
        if let Some(last) = lines.last_mut().filter(|l| msg.contains(l.as_str())) {
            *last = msg;
            continue;
        }
        lines.push(msg);
    }
    lines.join("\n  caused by: ")
}

impl Cli {
    /// The sidecar runs on as many threads as its `--threads` (one: a current-thread
    /// runtime); every other command on tokio's default, one worker per core.
    fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        match &self.command {
            Command::Sidecar(a) if a.threads == 1 => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
            Command::Sidecar(a) => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(a.threads.into())
                .enable_all()
                .build(),
            _ => tokio::runtime::Runtime::new(),
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Aggregator(a) => cmd::aggregator::run(a).await,
        Command::Controller(a) => cmd::controller::run(a).await,
        Command::Loadgen(a) => cmd::loadgen::run(a).await,
        Command::Override(a) => cmd::overrides::run(a).await,
        Command::Sidecar(a) => cmd::sidecar::run(a).await,
        Command::Status(a) => cmd::status::run(a).await,
        Command::Top(a) => cmd::top::run(a).await,
        Command::Explain(a) => cmd::explain::run(a).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_said_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("invalid config (1 error):\n  a.yaml:5: unknown field")]
        struct Invalid;
        #[derive(Debug, thiserror::Error)]
        #[error("{0}")]
        struct Wrap(#[source] Invalid);
        let e = anyhow::Error::new(Wrap(Invalid)).context("controller refused to start");
        assert_eq!(
            report(&e),
            "controller refused to start\n  caused by: invalid config (1 error):\n  a.yaml:5: unknown field"
        );
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
