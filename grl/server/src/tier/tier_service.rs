//! The `Tier` gRPC service of aggregators and controllers: one `Exchange` stream per child
//! (reports in, instructions out; only from allowed children) and `Status`.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::debug;

use super::engine::node::Node;
use super::observe::status;
use crate::net::auth::ChildAuth;
use grl_core::proto;

/// Adds extra fields (e.g. overrides) to a status answer.
pub type StatusHook = Arc<dyn Fn(&mut proto::StatusResponse) + Send + Sync>;

/// `Tier` over a [`Node`].
#[derive(Clone)]
pub struct TierService {
    node: Arc<Node>,
    shutdown: watch::Receiver<bool>,
    hook: Option<StatusHook>,
    children: Arc<ChildAuth>,
}

impl std::fmt::Debug for TierService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TierService").finish_non_exhaustive()
    }
}

impl TierService {
    /// Serves `node` until `shutdown` turns true.
    pub fn new(node: Arc<Node>, shutdown: watch::Receiver<bool>, hook: Option<StatusHook>) -> Self {
        Self {
            node,
            shutdown,
            hook,
            children: Arc::default(),
        }
    }

    /// Accepts report streams only from the children `auth` allows.
    #[must_use]
    pub fn with_children(mut self, auth: Arc<ChildAuth>) -> Self {
        self.children = auth;
        self
    }
}

/// The `Tier` server over `svc`, with its maximum message size set explicitly.
pub fn tier_server(svc: TierService) -> proto::tier_server::TierServer<TierService> {
    proto::tier_server::TierServer::new(svc)
        .max_decoding_message_size(grl_core::wire::MAX_TIER_MESSAGE_BYTES)
        .max_encoding_message_size(grl_core::wire::MAX_TIER_MESSAGE_BYTES)
}

type InstructionStream = Pin<Box<dyn Stream<Item = Result<proto::Instruction, Status>> + Send>>;

#[tonic::async_trait]
impl proto::tier_server::Tier for TierService {
    type ExchangeStream = InstructionStream;

    async fn exchange(
        &self,
        req: Request<Streaming<proto::Report>>,
    ) -> Result<Response<Self::ExchangeStream>, Status> {
        self.children.check(&req)?;
        let role = self.node.role();
        if !role.leading {
            return Err(super::engine::leadership::not_leader(
                role.leader.as_deref(),
            ));
        }
        let peer = req.remote_addr();
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let node = self.node.clone();
        let mut shutdown = self.shutdown.clone();
        let conn = node.next_conn();
        tokio::spawn(async move {
            let mut id: Option<String> = None;
            loop {
                tokio::select! {
                    msg = inbound.message() => match msg {
                        Ok(Some(r)) => {
                            if id.as_deref() != Some(r.reporter_id.as_str()) {
                                id = Some(r.reporter_id.clone());
                            }
                            // A refusal is counted and logged by the node; the stream stays.
                            let _ = node.on_report(conn, tx.clone(), &r, peer, Instant::now());
                        }
                        Ok(None) => break,
                        Err(e) => {
                            debug!(?peer, error = %e, "child stream failed");
                            break;
                        }
                    },
                    _ = shutdown.changed() => break,
                }
            }
            if let Some(id) = id {
                node.on_disconnect(&id, conn);
            }
        });
        let mut shutdown = self.shutdown.clone();
        let out = ReceiverStream::new(rx).take_until(async move {
            let _ = shutdown.wait_for(|s| *s).await;
        });
        Ok(Response::new(Box::pin(out)))
    }

    async fn status(
        &self,
        req: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        let mut st = status::status_of(&self.node, Instant::now(), req.get_ref());
        if let Some(h) = &self.hook {
            h(&mut st);
        }
        Ok(Response::new(st))
    }

    async fn explain(
        &self,
        req: Request<proto::ExplainRequest>,
    ) -> Result<Response<proto::ExplainResponse>, Status> {
        Ok(Response::new(status::explain(
            &self.node,
            Instant::now(),
            req.get_ref(),
        )))
    }
}

use futures::StreamExt as _;
