//! The connections of a tier's admin HTTP port (`--metrics-listen`): plain TCP, or TLS
//! through the same accept loop, caps and certificate reloading as the gRPC port
//! ([`super::tls_accept`]); and who is at the other end of each ([`HttpPeer`]), which the
//! `/status` page's authorisation reads.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

use super::tls::ServerTls;
use super::tls_accept::{TlsConn, incoming};

/// The peer of one admin HTTP connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpPeer {
    /// The remote address.
    pub addr: SocketAddr,
    /// SAN DNS names and subject CN of the client certificate (empty without one).
    pub names: Vec<String>,
    /// Whether the connection is TLS.
    pub tls: bool,
}

impl Connected<IncomingStream<'_, PlainListener>> for HttpPeer {
    fn connect_info(stream: IncomingStream<'_, PlainListener>) -> Self {
        stream.remote_addr().clone()
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for HttpPeer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// The admin port without TLS.
#[derive(Debug)]
pub struct PlainListener(pub TcpListener);

impl Listener for PlainListener {
    type Io = TcpStream;
    type Addr = HttpPeer;

    async fn accept(&mut self) -> (TcpStream, HttpPeer) {
        let (io, addr) = Listener::accept(&mut self.0).await;
        let peer = HttpPeer {
            addr,
            names: Vec::new(),
            tls: false,
        };
        (io, peer)
    }

    fn local_addr(&self) -> io::Result<HttpPeer> {
        Ok(HttpPeer {
            addr: self.0.local_addr()?,
            names: Vec::new(),
            tls: false,
        })
    }
}

/// The admin port with TLS: connections come out of the TLS accept loop once their
/// handshake is done.
#[derive(Debug)]
pub struct TlsListener {
    conns: ReceiverStream<io::Result<TlsConn>>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts the TLS accept loop on `listener`.
    pub fn new(listener: TcpListener, tls: Arc<ServerTls>) -> io::Result<Self> {
        let local = listener.local_addr()?;
        Ok(Self {
            conns: incoming(listener, tls),
            local,
        })
    }
}

impl Listener for TlsListener {
    type Io = TlsConn;
    type Addr = HttpPeer;

    async fn accept(&mut self) -> (TlsConn, HttpPeer) {
        loop {
            match self.conns.next().await {
                Some(Ok(conn)) => {
                    let peer = HttpPeer {
                        addr: conn.peer_addr().unwrap_or(self.local),
                        names: conn.peer_names(),
                        tls: true,
                    };
                    return (conn, peer);
                }
                Some(Err(e)) => tracing::debug!(error = %e, "admin TLS accept failed"),
                // The accept loop only ends with its listener: nothing more will come.
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<HttpPeer> {
        Ok(HttpPeer {
            addr: self.local,
            names: Vec::new(),
            tls: true,
        })
    }
}
