//! The accept loop of a TLS port: every TCP connection takes a connection slot and, while
//! it shakes hands, a handshake slot (see [`super::tls::ConnLimits`]); one that finds
//! either full is closed at once, counted and logged (at most one warning a second). A
//! handshake runs on its own task under a deadline, so a slow or silent client holds up
//! no other; the connection slot is given back when the connection ends.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;
use tracing::{debug, warn};

use super::tls::ServerTls;

/// A connection whose TLS handshake is done; holds its connection slot until dropped.
#[derive(Debug)]
pub struct TlsConn {
    inner: TlsStream<TcpStream>,
    _slot: OwnedSemaphorePermit,
}

impl TlsConn {
    /// The client's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().0.peer_addr()
    }

    /// The names of the client's certificate (empty without one).
    pub fn peer_names(&self) -> Vec<String> {
        self.inner
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first().map(|leaf| super::tls::cert_names(leaf)))
            .unwrap_or_default()
    }
}

impl Connected for TlsConn {
    type ConnectInfo = <TlsStream<TcpStream> as Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

crate::net::delegate::delegate_async_write!(TlsConn, inner);

/// Accepts TCP connections on `listener` and yields them once their TLS handshake is done,
/// within the limits of `tls`. Stops when the returned stream is dropped.
pub fn incoming(
    listener: TcpListener,
    tls: Arc<ServerTls>,
) -> ReceiverStream<Result<TlsConn, io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut last_warning: Option<Instant> = None;
        loop {
            let (tcp, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                },
                () = tx.closed() => return,
            };
            let slots = &tls.slots;
            let Ok(slot) = slots.connections.clone().try_acquire_owned() else {
                over_cap(
                    &tls.counters.over_connection_cap,
                    peer,
                    "connections",
                    &mut last_warning,
                );
                continue;
            };
            let Ok(shaking) = slots.handshakes.clone().try_acquire_owned() else {
                over_cap(
                    &tls.counters.over_handshake_cap,
                    peer,
                    "handshakes",
                    &mut last_warning,
                );
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let (tx, tls) = (tx.clone(), tls.clone());
            tokio::spawn(async move {
                let acceptor = tls.acceptor();
                let shaken =
                    tokio::time::timeout(tls.limits().handshake_timeout, acceptor.accept(tcp))
                        .await;
                drop(shaking);
                match shaken {
                    Ok(Ok(inner)) => {
                        let conn = TlsConn { inner, _slot: slot };
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Ok(Err(e)) => handshake_failed(&tls, peer, &e.to_string()),
                    Err(_) => handshake_failed(&tls, peer, "timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Counts a connection closed over a cap; warns at most once a second.
fn over_cap(count: &AtomicU64, peer: SocketAddr, what: &str, last: &mut Option<Instant>) {
    let n = count.fetch_add(1, Ordering::Relaxed) + 1;
    let now = Instant::now();
    if last.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
        *last = Some(now);
        warn!(peer = %peer, refused = n, cap = what, "TLS port at its cap; connection closed");
    }
}

fn handshake_failed(tls: &ServerTls, peer: SocketAddr, error: &str) {
    tls.counters
        .handshake_failures
        .fetch_add(1, Ordering::Relaxed);
    debug!(peer = %peer, error, "TLS handshake failed");
}
