//! Whether the sidecar enforces anything: it is ready once its client holds instructions
//! from the aggregator for a service the config knows. Until then every request passes,
//! so a misspelled `--service` or an unreachable `--aggregator` must not go unnoticed: the
//! state is logged when it changes ([`watch`]), exported as `grl_sidecar_ready` and
//! answered on `GET /ready` (503 while not ready) beside `/metrics`.

use std::fmt::Write;
use std::time::Duration;

use grl_client::{Client, ClientStatus};
use tracing::{info, warn};

/// 1 when the sidecar enforces its service's buckets, else 0 with the reason as a label.
pub const READY: &str = "grl_sidecar_ready";

/// What the sidecar can enforce now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Instructions held for a service with buckets.
    Ready,
    /// No valid instruction from the aggregator (never connected, or expired): every
    /// request passes.
    NoInstructions,
    /// The config received has no bucket of `--service`: every request passes.
    UnknownService,
}

impl Readiness {
    /// The state shown by `status`.
    pub fn of(status: &ClientStatus) -> Self {
        if !status.config_version.is_empty() && status.ratios.is_empty() {
            Self::UnknownService
        } else if status.config_version.is_empty() || status.fail_open {
            Self::NoInstructions
        } else {
            Self::Ready
        }
    }

    /// The metric label and `/ready` word.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::NoInstructions => "no_instructions",
            Self::UnknownService => "unknown_service",
        }
    }

    /// The sentence an operator reads in the log and on `/ready`.
    pub fn sentence(self, client: &Client) -> String {
        let cfg = client.config();
        match self {
            Self::Ready => format!("enforcing the buckets of service `{}`", cfg.service),
            Self::NoInstructions => format!(
                "no instructions from aggregator {}: every request passes unlimited",
                cfg.aggregator
            ),
            Self::UnknownService => format!(
                "config version {} has no bucket of service `{}` (check --service): every \
                 request passes unlimited",
                client.status().config_version,
                cfg.service
            ),
        }
    }

    /// Appends the `grl_sidecar_ready` gauge to a `/metrics` body.
    pub fn render(self, out: &mut String, service: &str) {
        let _ = writeln!(
            out,
            "# HELP {READY} 1 when the sidecar enforces its service's buckets; 0 with the \
             reason (no_instructions, unknown_service) while every request passes.\n\
             # TYPE {READY} gauge\n{READY}{{service=\"{service}\",reason=\"{}\"}} {}",
            self.reason(),
            u8::from(self == Self::Ready)
        );
    }
}

/// Logs the sidecar's readiness every time it changes, checking every `every`; the first
/// check comes after `grace` (time for the first instruction to arrive), and a warning is
/// repeated every `repeat` while not ready.
pub async fn watch(client: Client, every: Duration, grace: Duration, repeat: Duration) {
    tokio::time::sleep(grace).await;
    let mut last: Option<(Readiness, tokio::time::Instant)> = None;
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let now = tokio::time::Instant::now();
        let r = Readiness::of(&client.status());
        let due = match last {
            None => true,
            Some((prev, at)) => prev != r || (r != Readiness::Ready && now - at >= repeat),
        };
        if !due {
            continue;
        }
        let service = &client.config().service;
        match r {
            Readiness::Ready => info!(service = %service, "sidecar ready"),
            _ => warn!(
                service = %service,
                reason = r.reason(),
                "sidecar not ready: {}",
                r.sentence(&client)
            ),
        }
        last = Some((r, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(version: &str, fail_open: bool, buckets: &[&str]) -> ClientStatus {
        ClientStatus {
            config_version: version.into(),
            fail_open,
            connected: !version.is_empty(),
            ratios: buckets.iter().map(|b| (b.to_string(), 0.0)).collect(),
            pairs: 0,
            overflow: 0,
            unknown_classes: 0,
            table_bytes: 0,
        }
    }

    #[test]
    fn states() {
        assert_eq!(
            Readiness::of(&status("", true, &[])),
            Readiness::NoInstructions
        );
        assert_eq!(
            Readiness::of(&status("v1", true, &["a"])),
            Readiness::NoInstructions
        );
        assert_eq!(
            Readiness::of(&status("v1", false, &[])),
            Readiness::UnknownService
        );
        assert_eq!(
            Readiness::of(&status("v1", false, &["a"])),
            Readiness::Ready
        );
    }

    #[test]
    fn gauge() {
        let mut out = String::new();
        Readiness::UnknownService.render(&mut out, "orders");
        assert!(out.contains("grl_sidecar_ready{service=\"orders\",reason=\"unknown_service\"} 0"));
    }
}
