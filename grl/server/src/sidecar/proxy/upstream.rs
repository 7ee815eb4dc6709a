//! The upstream connection of one downstream HTTP/1.1 connection.
//!
//! An HTTP/1.1 connection carries one request at a time: the next is read only once the
//! answer to the last is written, so the upstream connection that served the last request
//! is free when the next one comes. Each downstream HTTP/1.1 connection keeps its own
//! ([`Dedicated`]) instead of checking one out of the shared pool for every request: no
//! pool lookup, lock or hashing per request, and the upstream sees as many connections as
//! there are callers' connections (as nginx's `keepalive` pool does when it is large
//! enough). HTTP/2 connections multiplex requests, and use the shared pool.
//!
//! A connection the upstream closed (its keep-alive limit or timeout, or a timeout of ours
//! that dropped a request halfway) is found at the next request, which then opens a new
//! one; a request that had not been written when its connection was found closed is sent
//! again on the new one, as the pool does.

use crossbeam_utils::atomic::AtomicCell;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Why a request could not be sent upstream.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// No connection to the upstream could be made.
    #[error("connect: {0}")]
    Connect(#[source] std::io::Error),
    /// The connection was made but the request or its answer failed.
    #[error(transparent)]
    Http(#[from] hyper::Error),
    /// The shared pool's request failed (HTTP/2, or an HTTP/2 caller sent upstream in
    /// HTTP/1.1).
    #[error(transparent)]
    Pool(hyper_util::client::legacy::Error),
}

/// The upstream connection a downstream HTTP/1.1 connection keeps between its requests:
/// empty, or one sender. Taken for a request and put back once it is sent; lock-free (a
/// pointer swapped in and out), and allocation-free after the connection is made.
#[derive(Default)]
pub(crate) struct Dedicated(AtomicCell<Option<Box<SendRequest<Incoming>>>>);

impl std::fmt::Debug for Dedicated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dedicated")
    }
}

impl Dedicated {
    fn take(&self) -> Option<Box<SendRequest<Incoming>>> {
        self.0.take()
    }

    fn put(&self, s: Box<SendRequest<Incoming>>) {
        drop(self.0.swap(Some(s)));
    }

    /// Sends `req` (origin-form URI, `Host` set) to `addr` on this connection's upstream
    /// connection, opening one if there is none or it was closed.
    pub(crate) async fn send(
        &self,
        addr: &str,
        req: Request<Incoming>,
    ) -> Result<Response<Incoming>, SendError> {
        let mut sender = match self.take() {
            Some(mut s) => match s.ready().await {
                Ok(()) => s,
                Err(_) => Box::new(connect(addr).await?),
            },
            None => Box::new(connect(addr).await?),
        };
        let sent = sender.try_send_request(req);
        self.put(sender);
        match sent.await {
            Ok(res) => Ok(res),
            Err(mut e) => match e.take_message() {
                // Closed before the request was written: once more, on a new connection.
                Some(req) => {
                    let mut fresh = Box::new(connect(addr).await?);
                    let sent = fresh.send_request(req);
                    self.put(fresh);
                    Ok(sent.await?)
                }
                None => Err(SendError::Http(e.into_error())),
            },
        }
    }
}

/// A new HTTP/1.1 connection to `addr`, driven by a task of its own.
async fn connect(addr: &str) -> Result<SendRequest<Incoming>, SendError> {
    let tcp = TcpStream::connect(addr).await.map_err(SendError::Connect)?;
    let _ = tcp.set_nodelay(true);
    let (sender, conn) = http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "upstream connection ended with an error");
        }
    });
    Ok(sender)
}
