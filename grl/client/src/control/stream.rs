//! The control-plane task: one `Tier/Exchange` stream to the zone aggregator.
//!
//! One loop waits on five things: the report tick (every interval, connected or not, so
//! totals keep moving), the window tick (offered rates measured, thresholds recomputed from
//! the allowances, an urgent report sent when a rate jumped), the next instruction, the
//! next ratio expiry (a timer set to the earliest deadline, so the hot path never reads a
//! clock), and, while disconnected, the
//! next reconnection attempt (exponential backoff from a tenth of the interval up to an
//! interval, 2 s at most, with ±50 % jitter so that a zone's clients do not reconnect in
//! lockstep), the dials under way and the stream being opened. The stream has HTTP/2
//! keepalive (see `grl_core::link`).
//!
//! Connecting never stops the loop: a dial that hangs (its SYN dropped by a cut link) would
//! otherwise hold ratios past their expiry and the windows unmeasured for its whole
//! timeout. Dials overlap: a new one starts at every attempt while earlier ones still wait
//! (TCP resends a lost SYN only after 1 s, then 2 s), so after a cut heals a SYN goes out
//! within one attempt's wait, not after the timeout of a dial begun before the heal. The
//! first dial through wins; the stream is then opened on it alone (one hello, one stream
//! per client, as the aggregator requires).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::Channel;
#[cfg(not(feature = "tls"))]
use tonic::transport::Endpoint;
use tracing::{debug, info, warn};

use grl_core::backoff::Backoff;
use grl_core::link::LinkTimeouts;
use grl_core::proto;
use grl_core::proto::tier_client::TierClient;

use crate::control::{apply, report, window};
use crate::{ClientError, Inner};

const BACKOFF_CAP: Duration = Duration::from_secs(2);

struct Session {
    reports: mpsc::Sender<proto::Report>,
    instructions: Streaming<proto::Instruction>,
}

/// How long to wait before reconnect attempt `attempt`: the backoff, but at most half an
/// interval while the last instruction is still valid, so that a client whose aggregator
/// restarted is back before its ratios expire (and the restarted aggregator, learning, hears
/// it in time) instead of failing open.
fn retry_in(inner: &Inner, backoff: &Backoff, attempt: u32) -> Duration {
    let wait = backoff.delay(attempt);
    if inner.fail_open.load(Ordering::Relaxed) {
        wait
    } else {
        wait.min(inner.cfg.interval / 2)
    }
}

/// The reconnect backoff: from a tenth of the interval (10 ms at least) up to an interval
/// (2 s at most). Capped at an interval so that after a partition heals a client is back
/// (its next SYN within about an interval) and enforcing within two intervals; a zone's
/// clients retrying once an interval cost a dead aggregator's host only SYNs.
fn reconnect_backoff(interval: Duration) -> Backoff {
    let base = (interval / 10).clamp(Duration::from_millis(10), BACKOFF_CAP);
    let cap = interval.clamp(base, BACKOFF_CAP);
    Backoff::new(base, cap).expect("base is clamped to (0, cap]")
}

/// At most this many dials wait at once: with a dial's timeout of two intervals and an
/// attempt about once an interval, two or three are under way while a link is cut.
const MAX_DIALS: usize = 3;

/// A TCP (and TLS) connection to the aggregator, not yet a stream.
async fn dial(inner: &Inner) -> Result<Channel, ClientError> {
    let t = LinkTimeouts::for_interval(inner.cfg.interval);
    #[cfg(feature = "tls")]
    let endpoint = grl_core::tls::endpoint(&inner.cfg.aggregator, inner.cfg.tls.as_ref())?;
    #[cfg(not(feature = "tls"))]
    let endpoint = Endpoint::from_shared(inner.cfg.aggregator.clone()).map_err(|source| {
        ClientError::Address {
            address: inner.cfg.aggregator.clone(),
            source,
        }
    })?;
    // The keepalive finds a dead aggregator (or a cut link) while this client still holds
    // valid ratios, and a healed link is used again at the next attempt instead of
    // waiting out TCP's retransmission backoff on a stream that died silently.
    let endpoint = endpoint
        .connect_timeout(t.connect_timeout)
        .http2_keep_alive_interval(t.keepalive_interval)
        .keep_alive_timeout(t.keepalive_timeout)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true);
    Ok(endpoint.connect().await?)
}

/// The stream over `channel`: the hello sent, the aggregator's answer received.
async fn open(inner: &Inner, channel: Channel) -> Result<Session, ClientError> {
    let timeout = LinkTimeouts::for_interval(inner.cfg.interval).connect_timeout;
    let (reports, rx) = mpsc::channel(16);
    // The hello tells the aggregator which service's config to send (by name: nothing is
    // known of this peer's wire version yet).
    let _ = reports.try_send(report::hello(inner));
    let mut client = TierClient::new(channel)
        .max_decoding_message_size(grl_core::wire::MAX_TIER_MESSAGE_BYTES)
        .max_encoding_message_size(grl_core::wire::MAX_TIER_MESSAGE_BYTES);
    let response = tokio::time::timeout(timeout, client.exchange(ReceiverStream::new(rx)))
        .await
        .map_err(|_| ClientError::Timeout(timeout))??;
    Ok(Session {
        reports,
        instructions: response.into_inner(),
    })
}

async fn next_instruction(
    session: &mut Option<Session>,
) -> Result<Option<proto::Instruction>, tonic::Status> {
    match session {
        Some(s) => s.instructions.message().await,
        None => std::future::pending().await,
    }
}

async fn opened(opening: &mut Option<Opening<'_>>) -> Result<Session, ClientError> {
    match opening {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

type Opening<'a> = BoxFuture<'a, Result<Session, ClientError>>;

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// The window a client with `cfg` measures over: its `window`, between 1 ms and the
/// interval.
pub(crate) fn window_of(cfg: &crate::ClientConfig) -> Duration {
    cfg.window.clamp(
        Duration::from_millis(1),
        cfg.interval.max(Duration::from_millis(1)),
    )
}

/// Runs the control plane of `inner` forever.
pub(crate) async fn run(inner: Arc<Inner>) {
    let interval = inner.cfg.interval;
    // The first window starts now: what was decided before it ends is in it.
    inner.lock().window_at = Some(Instant::now());
    let mut tick = tokio::time::interval_at(Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let backoff = reconnect_backoff(interval);
    let mut attempt = 0u32;
    let window = window_of(&inner.cfg);
    let mut windows = tokio::time::interval_at(Instant::now() + window, window);
    windows.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut session: Option<Session> = None;
    let mut reconnect_at = Some(Instant::now());
    let mut dials = FuturesUnordered::new();
    let mut opening: Option<Opening<'_>> = None;
    loop {
        let expiry = inner.next_deadline();
        let lost: Option<String> = tokio::select! {
            _ = tick.tick() => {
                let report = report::report(&inner);
                match &session {
                    Some(s) if s.reports.try_send(report).is_err() => Some("report queue closed or full".into()),
                    _ => None,
                }
            }
            _ = windows.tick() => {
                match (window::window(&inner, Instant::now()), &session) {
                    (Some(report), Some(s)) => s
                        .reports
                        .try_send(report)
                        .err()
                        .map(|_| "report queue closed or full".to_string()),
                    _ => None,
                }
            }
            msg = next_instruction(&mut session) => match msg {
                Ok(Some(ins)) => {
                    apply::apply_instruction(&inner, &ins, Instant::now());
                    None
                }
                Ok(None) => Some("stream ended".into()),
                Err(status) => Some(status.to_string()),
            },
            _ = sleep_until(expiry) => {
                inner.expire(Instant::now());
                None
            }
            _ = sleep_until(reconnect_at) => {
                if opening.is_none() && dials.len() < MAX_DIALS {
                    dials.push(Box::pin(dial(&inner)));
                }
                let wait = retry_in(&inner, &backoff, attempt);
                attempt = attempt.saturating_add(1);
                reconnect_at = Some(Instant::now() + wait);
                None
            }
            Some(dialed) = dials.next(), if !dials.is_empty() => {
                match dialed {
                    Ok(channel) => {
                        dials.clear();
                        opening = Some(Box::pin(open(&inner, channel)));
                    }
                    Err(e) => debug!(aggregator = %inner.cfg.aggregator, error = %e, "connect failed"),
                }
                None
            }
            done = opened(&mut opening) => {
                opening = None;
                match done {
                    Ok(s) => {
                        info!(aggregator = %inner.cfg.aggregator, "connected");
                        session = Some(s);
                        reconnect_at = None;
                        attempt = 0;
                        inner.connected.store(true, Ordering::Relaxed);
                    }
                    Err(e) => debug!(aggregator = %inner.cfg.aggregator, error = %e, "stream not opened"),
                }
                None
            }
        };
        if let Some(why) = lost {
            let wait = retry_in(&inner, &backoff, attempt);
            attempt = attempt.saturating_add(1);
            warn!(aggregator = %inner.cfg.aggregator, reason = %why, retry_in = ?wait, "stream lost");
            session = None;
            inner.connected.store(false, Ordering::Relaxed);
            reconnect_at = Some(Instant::now() + wait);
        }
    }
}
