//! One connection of the proxy, served under a watch that closes it when a request head is
//! too slow or when it sits idle.
//!
//! The watch sees the connection through what it already does: [`Watched`] notes bytes
//! arriving, each request holds an [`InFlight`] until its response body is done
//! ([`Tracked`]). From that, [`Activity::verdict`] applies:
//!
//! * the first request head must arrive whole within the header timeout of the connection
//!   opening (TLS handshake and HTTP/2 preface included), whatever the protocol;
//! * HTTP/1.1: once the first byte of a later request head arrives, the head must be whole
//!   within the header timeout;
//! * with no request in flight, the connection may stay idle for the idle timeout, then it
//!   is closed (HTTP/2: GOAWAY first). HTTP/2 pings and window updates do not keep it open.
//!
//! A head that is still incomplete is cut at once; an idle connection is shut down
//! gracefully, so that a request crossing the close is not lost without notice.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Version};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tracing::debug;

use super::Proxy;
use super::caller::CallerError;
use super::upstream::Dedicated;
use crate::sidecar::port_metrics::Closed;

/// How long an idle connection being shut down may take to close before it is dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// The timeouts a connection is watched with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Longest wait for a whole request head (the first one counted from the connection).
    pub header: Duration,
    /// Longest stay without a request in flight.
    pub idle: Duration,
}

/// What a connection has done, as its watch needs it. Times are milliseconds since
/// `start`; `head_since` is one more than that, 0 meaning no head under way.
#[derive(Debug)]
pub(crate) struct Activity {
    start: Instant,
    requests: AtomicU64,
    in_flight: AtomicU32,
    h2: AtomicBool,
    idle_since: AtomicU64,
    head_since: AtomicU64,
}

/// What the watch does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Look again after this long.
    Wait(Duration),
    /// A request head was not whole in time: cut the connection.
    HeaderTimeout,
    /// Idle for too long: shut the connection down.
    Idle,
}

impl Activity {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            requests: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            h2: AtomicBool::new(false),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Bytes arrived: with no request in flight on HTTP/1.1, a new head has begun.
    fn bytes_arrived(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && self.requests.load(Ordering::Relaxed) > 0
            && !self.h2.load(Ordering::Relaxed)
            && self.head_since.load(Ordering::Relaxed) == 0
        {
            self.head_since.store(self.now_ms() + 1, Ordering::Relaxed);
        }
    }

    /// A request head arrived whole: in flight until the returned guard drops.
    fn request(self: &Arc<Self>, version: Version) -> InFlight {
        if version == Version::HTTP_2 {
            self.h2.store(true, Ordering::Relaxed);
        }
        self.head_since.store(0, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.requests.fetch_add(1, Ordering::Release);
        InFlight(self.clone())
    }

    /// What to do now.
    pub(crate) fn verdict(&self, t: Timeouts) -> Verdict {
        self.verdict_at(self.now_ms(), t)
    }

    fn verdict_at(&self, now: u64, t: Timeouts) -> Verdict {
        let (header, idle) = (t.header.as_millis() as u64, t.idle.as_millis() as u64);
        let due = |deadline: u64, v: Verdict| {
            if now >= deadline {
                v
            } else {
                Verdict::Wait(Duration::from_millis(deadline - now))
            }
        };
        if self.requests.load(Ordering::Acquire) == 0 {
            return due(header, Verdict::HeaderTimeout);
        }
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Verdict::Wait(Duration::from_millis(header.min(idle)));
        }
        let head = self.head_since.load(Ordering::Relaxed);
        if head > 0 {
            return due(head - 1 + header, Verdict::HeaderTimeout);
        }
        // A head may begin at any moment; its own deadline is a header timeout away.
        match due(
            self.idle_since.load(Ordering::Relaxed) + idle,
            Verdict::Idle,
        ) {
            Verdict::Wait(w) => Verdict::Wait(w.min(t.header)),
            v => v,
        }
    }
}

/// A request in flight on its connection; dropping it (with the response body, or the
/// request's future when the caller goes away) makes the connection idle if it was the last.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.0;
        a.idle_since.store(a.now_ms(), Ordering::Relaxed);
        a.head_since.store(0, Ordering::Relaxed);
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request in flight until it is done or dropped.
#[derive(Debug)]
pub struct Tracked<B> {
    inner: B,
    _in_flight: InFlight,
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's byte stream, telling its [`Activity`] when bytes arrive.
#[derive(Debug)]
struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.bytes_arrived();
        }
        r
    }
}

crate::net::delegate::delegate_async_write!(Watched<T>, inner, T: AsyncWrite + Unpin);

/// What a connection is served with.
#[derive(Debug, Clone)]
pub(crate) struct Serving {
    pub(crate) proxy: Arc<Proxy>,
    pub(crate) builder: auto::Builder<TokioExecutor>,
    pub(crate) timeouts: Timeouts,
}

/// Serves one connection (plain or after its TLS handshake) until either side closes it or
/// its watch does. `identity` is the caller its client certificate names, if TLS.
pub(crate) async fn serve<T>(
    io: T,
    peer: std::net::SocketAddr,
    identity: Option<Result<Arc<str>, CallerError>>,
    s: Serving,
    activity: Arc<Activity>,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let proxy = s.proxy.clone();
    let watched = activity.clone();
    let identity = Arc::new(identity);
    let dedicated = Arc::new(Dedicated::default());
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let in_flight = watched.request(req.version());
        let (proxy, identity, dedicated) = (proxy.clone(), identity.clone(), dedicated.clone());
        async move {
            let res = proxy
                .handle(req, identity.as_ref().as_ref(), &dedicated)
                .await;
            Ok::<_, Infallible>(res.map(|inner| Tracked {
                inner,
                _in_flight: in_flight,
            }))
        }
    });
    let io = TokioIo::new(Watched {
        inner: io,
        activity: activity.clone(),
    });
    let conn = s.builder.serve_connection(io, svc);
    tokio::pin!(conn);
    loop {
        let wait = match activity.verdict(s.timeouts) {
            Verdict::Wait(w) => w,
            Verdict::HeaderTimeout => {
                s.proxy.metrics.port.closed(Closed::HeaderTimeout);
                debug!(%peer, "request head not received in time; connection closed");
                return;
            }
            Verdict::Idle => {
                s.proxy.metrics.port.closed(Closed::IdleTimeout);
                debug!(%peer, "idle connection closed");
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(SHUTDOWN_GRACE, conn.as_mut()).await;
                return;
            }
        };
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// A new connection's activity, its clock starting now.
pub(crate) fn activity() -> Arc<Activity> {
    Arc::new(Activity::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts {
        header: Duration::from_secs(10),
        idle: Duration::from_secs(60),
    };

    fn wait(ms: u64) -> Verdict {
        Verdict::Wait(Duration::from_millis(ms))
    }

    #[tokio::test]
    async fn the_first_head_is_due_a_header_timeout_after_the_connection_opened() {
        let a = activity();
        assert_eq!(a.verdict_at(0, T), wait(10_000));
        a.bytes_arrived();
        assert_eq!(a.verdict_at(9_999, T), wait(1));
        assert_eq!(a.verdict_at(10_000, T), Verdict::HeaderTimeout);
    }

    #[tokio::test]
    async fn http1_heads_after_the_first_are_timed_from_their_first_byte_and_idle_from_the_last_response()
     {
        let a = activity();
        let r = a.request(Version::HTTP_11);
        assert_eq!(a.verdict_at(50_000, T), wait(10_000));
        a.bytes_arrived(); // the request body: not a head
        assert_eq!(a.head_since.load(Ordering::Relaxed), 0);
        drop(r);
        let idle_from = a.idle_since.load(Ordering::Relaxed);
        assert_eq!(a.verdict_at(idle_from + 55_000, T), wait(5_000));
        assert_eq!(a.verdict_at(idle_from + 60_000, T), Verdict::Idle);
        a.bytes_arrived();
        let head = a.head_since.load(Ordering::Relaxed) - 1;
        assert_eq!(a.verdict_at(head + 9_000, T), wait(1_000));
        assert_eq!(a.verdict_at(head + 10_000, T), Verdict::HeaderTimeout);
        let _r = a.request(Version::HTTP_11);
        assert_eq!(a.verdict_at(head + 10_000, T), wait(10_000));
    }

    #[tokio::test]
    async fn http2_frames_between_requests_do_not_start_a_head() {
        let a = activity();
        drop(a.request(Version::HTTP_2));
        a.bytes_arrived(); // a ping
        assert_eq!(a.head_since.load(Ordering::Relaxed), 0);
        let idle_from = a.idle_since.load(Ordering::Relaxed);
        assert_eq!(a.verdict_at(idle_from + 60_000, T), Verdict::Idle);
    }
}
