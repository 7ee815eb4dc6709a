//! The subcommands of the `grl` binary, one module each.

pub(crate) mod aggregator;
pub(crate) mod controller;
pub(crate) mod explain;
pub(crate) mod known;
pub(crate) mod loadgen;
pub(crate) mod overrides;
pub(crate) mod sidecar;
pub(crate) mod status;
pub(crate) mod tls_args;
pub(crate) mod top;
pub(crate) mod validate;

use std::time::Duration;

use anyhow::Context;

/// Binds a TCP listener.
pub(crate) async fn bind(addr: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// Parses a flag's duration with the project's one parser (`30s`, `5m`, `2h`, `1d`, `1h30m`;
/// a bare number is refused, so that `300` is never silently read as seconds).
pub(crate) fn parse_duration(s: &str) -> Result<Duration, grl_config::duration::DurationError> {
    grl_config::duration::parse(s)
}

/// Waits for Ctrl-C or SIGTERM.
pub(crate) async fn terminated() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert!(parse_duration("45").is_err(), "a bare number needs a unit");
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("x").is_err());
    }
}
