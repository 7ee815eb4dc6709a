//! The stream from a tier to its parent: reports up after every tick (and at once,
//! marked urgent, after a child's urgent report), instructions down, reconnecting with
//! jittered exponential backoff; with several parents (a region's active/standby
//! controllers), to the one that leads.

use std::sync::Arc;
use std::time::Duration;

use grl_core::tls::{ClientTls, TlsError};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tracing::{info, warn};

use super::election;
use super::engine::leadership;
use super::engine::node::{Node, Sums};
use grl_core::backoff::Backoff;
use grl_core::link::LinkTimeouts;
use grl_core::proto;
use grl_core::proto::tier_client::TierClient;

/// A lazily connecting channel with HTTP/2 keepalive and a connect timeout derived from
/// the reporting `interval` (see [`LinkTimeouts`]: a dead parent is found two intervals
/// after its last frame, a slow lossy link does not flap); over TLS when `tls` is given
/// (files read now).
pub fn channel(
    addr: &str,
    tls: Option<&ClientTls>,
    interval: Duration,
) -> Result<Channel, TlsError> {
    let t = LinkTimeouts::for_interval(interval);
    Ok(grl_core::tls::endpoint(addr, tls)?
        .connect_timeout(t.connect_timeout)
        .http2_keep_alive_interval(t.keepalive_interval)
        .keep_alive_timeout(t.keepalive_timeout)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true)
        .connect_lazy())
}

/// The wait before reconnect attempt `attempt` (0-based): 100 ms doubling up to the
/// reporting interval (at least 100 ms, at most 2 s), with jitter in its upper half. Capped
/// at one interval so that a tier is back within about an interval of its parent's return;
/// a parent has tens of children at most, so the retries cost it little.
pub fn backoff(attempt: u32, interval: Duration) -> Duration {
    let base = Duration::from_millis(100);
    Backoff::new(base, interval.clamp(base, Duration::from_secs(2)))
        .expect("cap clamped to at least the base")
        .delay(attempt)
}

/// Keeps a stream to one of `parents` open (over TLS with `tls`) until `shutdown` turns
/// true. With several parents (active/standby controllers), a refusal that names the
/// leader sends this tier there next if it is one of `parents`; any other failure moves on
/// to the next parent at once, and only after every parent failed in a row does it back
/// off.
pub async fn run(
    node: Arc<Node>,
    parents: Vec<String>,
    tls: Option<ClientTls>,
    mut shutdown: watch::Receiver<bool>,
) {
    assert!(!parents.is_empty(), "a tier with an uplink has a parent");
    let mut attempt = 0u32;
    let mut failed_in_a_row = 0usize;
    let mut current = 0usize;
    loop {
        let parent = &parents[current];
        let started = Instant::now();
        let redirect = tokio::select! {
            r = session(&node, parent, tls.as_ref()) => {
                node.set_parent_connected(false);
                match r {
                    Ok(()) => {
                        warn!(parent = %parent, "parent closed the stream");
                        None
                    }
                    Err(e) => {
                        let leader = leadership::redirect_of(&e);
                        match &leader {
                            Some(l) => info!(parent = %parent, leader = %l, "parent follows: redirected"),
                            None => warn!(parent = %parent, error = %e, "parent unreachable"),
                        }
                        leader
                    }
                }
            }
            _ = shutdown.wait_for(|s| *s) => return,
        };
        if started.elapsed() > Duration::from_secs(5) {
            attempt = 0;
            failed_in_a_row = 0;
        }
        failed_in_a_row += 1;
        current = redirect
            .and_then(|l| parents.iter().position(|p| election::same_endpoint(p, &l)))
            .unwrap_or((current + 1) % parents.len());
        if failed_in_a_row < parents.len() {
            continue;
        }
        failed_in_a_row = 0;
        tokio::select! {
            () = tokio::time::sleep(backoff(attempt, node.cfg.interval)) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        attempt += 1;
    }
}

async fn session(
    node: &Arc<Node>,
    parent: &str,
    tls: Option<&ClientTls>,
) -> Result<(), tonic::Status> {
    let ch = channel(parent, tls, node.cfg.interval)
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut client = TierClient::new(ch)
        .max_decoding_message_size(grl_core::wire::MAX_TIER_MESSAGE_BYTES)
        .max_encoding_message_size(grl_core::wire::MAX_TIER_MESSAGE_BYTES);
    let (tx, rx) = mpsc::channel::<proto::Report>(4);
    tx.try_send(node.upward_report(Instant::now(), Sums::Live))
        .map_err(|e| tonic::Status::internal(e.to_string()))?;
    // Aborted when the session ends or is dropped (its task aborted): a reporter left
    // running would keep the old stream alive and speak for this tier under its id.
    let _reporter = AbortOnDrop({
        let node = node.clone();
        tokio::spawn(async move {
            loop {
                let (sums, urgent) = tokio::select! {
                    () = node.ticked.notified() => (Sums::LastTick, false),
                    () = node.wake_parent.notified() => {
                        tokio::time::sleep(super::URGENT_COALESCE).await;
                        (Sums::Live, true)
                    }
                };
                let mut report = node.upward_report(Instant::now(), sums);
                report.urgent = urgent;
                if tx.send(report).await.is_err() {
                    return;
                }
            }
        })
    });
    async {
        let mut inbound = client.exchange(ReceiverStream::new(rx)).await?.into_inner();
        info!(parent = %parent, "parent connected");
        node.set_parent_connected(true);
        while let Some(i) = inbound.message().await? {
            node.on_parent_instruction(&i, Instant::now());
        }
        Ok(())
    }
    .await
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_jittered_and_capped() {
        for (interval, cap) in [(1000, 1000), (200, 200), (10, 100), (60_000, 2000)] {
            for a in 0..10 {
                let b = backoff(a, Duration::from_millis(interval));
                let base = (100u64 << a.min(5)).min(cap);
                assert!(
                    b.as_millis() as u64 >= base / 2 && b.as_millis() as u64 <= base,
                    "{interval} ms, attempt {a}: {b:?}"
                );
            }
        }
    }
}
