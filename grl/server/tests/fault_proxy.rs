//! A TCP proxy the fault tests put on one link between tiers: it passes bytes through, cuts
//! the link (closes every connection and refuses new ones), or delays every byte by a fixed
//! time in both directions, switched while traffic flows.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// What the proxied link does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// Bytes pass at once.
    Up,
    /// Every connection is closed; new ones are accepted and closed at once.
    Cut,
    /// Bytes pass after this long, in both directions.
    Delay(Duration),
}

/// A proxy from `addr` to an upstream, until dropped.
pub(crate) struct FaultProxy {
    /// Where the proxied side connects.
    pub(crate) addr: SocketAddr,
    link: watch::Sender<Link>,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream`.
    pub(crate) async fn start(upstream: SocketAddr) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (link, rx) = watch::channel(Link::Up);
        let accept = tokio::spawn(async move {
            while let Ok((down, _)) = l.accept().await {
                if *rx.borrow() == Link::Cut {
                    continue;
                }
                let Ok(up) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let _ = down.set_nodelay(true);
                let _ = up.set_nodelay(true);
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pump(dr, uw, rx.clone()));
                tokio::spawn(pump(ur, dw, rx.clone()));
            }
        });
        Self { addr, link, accept }
    }

    /// Switches the link.
    pub(crate) fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.set(Link::Cut);
        self.accept.abort();
    }
}

/// Copies one direction, each chunk held until its due time; returns (closing both halves)
/// when the link is cut.
async fn pump(mut r: OwnedReadHalf, mut w: OwnedWriteHalf, mut link: watch::Receiver<Link>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let mut cut = link.clone();
    let writer = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if w.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    };
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let delay = match *link.borrow_and_update() {
                Link::Delay(d) => d,
                _ => Duration::ZERO,
            };
            if tx
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                return;
            }
        }
    };
    let writer = tokio::spawn(writer);
    tokio::select! {
        () = reader => {
            let _ = writer.await;
        }
        () = async { drop(cut.wait_for(|l| *l == Link::Cut).await) } => writer.abort(),
    }
}
