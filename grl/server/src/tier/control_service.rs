//! The `Control` gRPC service of a controller: `ApplyConfig` and incident overrides. The
//! admin calls (apply, set, clear) pass [`crate::net::auth::AdminAuth`] first and are logged with
//! the caller's address and who they are (certificate name or token); an override records
//! that principal as its `who`. Errors become gRPC codes here, in one place.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use tracing::{info, warn};

use super::controller_state::{Controller, now_unix};
use grl_config as config;
use grl_core::proto;

/// `Control` over a [`Controller`].
#[derive(Clone)]
pub struct ControlService {
    ctl: Arc<Controller>,
}

impl std::fmt::Debug for ControlService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlService").finish_non_exhaustive()
    }
}

impl ControlService {
    /// Serves `ctl`.
    pub fn new(ctl: Arc<Controller>) -> Self {
        Self { ctl }
    }
}

#[tonic::async_trait]
impl proto::control_server::Control for ControlService {
    async fn apply_config(
        &self,
        req: Request<proto::ApplyConfigRequest>,
    ) -> Result<Response<proto::ApplyConfigResponse>, Status> {
        let admin = self.ctl.admin().check("ApplyConfig", &req)?;
        let req = req.into_inner();
        let version = req.version.clone();
        let files: Vec<_> = req.files.into_iter().map(|f| (f.path, f.content)).collect();
        // Validation runs off the serving threads: a hostile config costs a blocking thread.
        let loaded = tokio::task::spawn_blocking(move || config::from_files(&version, files))
            .await
            .map_err(|e| Status::internal(format!("config validation failed: {e}")))?;
        match loaded {
            Ok(s) => {
                self.ctl.count_apply(true);
                let resp = proto::ApplyConfigResponse {
                    version: s.version.clone(),
                    services: s.services.len() as u32,
                    buckets: s.buckets().count() as u32,
                    enforced_buckets: s.buckets().filter(|(_, b)| b.limit.is_some()).count() as u32,
                };
                info!(
                    version = %s.version, buckets = resp.buckets, peer = %admin.peer.addr_str(),
                    who = %admin.principal, "config applied"
                );
                self.ctl.set_snapshot(s);
                Ok(Response::new(resp))
            }
            Err(e) => {
                self.ctl.count_apply(false);
                warn!(version = %req.version, error = %e, "config refused");
                Err(Status::invalid_argument(e.to_string()))
            }
        }
    }

    async fn set_override(
        &self,
        req: Request<proto::SetOverrideRequest>,
    ) -> Result<Response<proto::Override>, Status> {
        let admin = self.ctl.admin().check("SetOverride", &req)?;
        let mut req = req.into_inner();
        // The audit trail records who authenticated, not only what the client claimed.
        req.who = admin.who(&req.who);
        let o = self
            .ctl
            .with_overrides(|o| o.set(&req, now_unix()))
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        info!(
            id = %o.id, service = %o.service, caller = %o.caller, procedure = %o.procedure,
            rps = o.rps, expires_at = o.expires_at_unix, who = %o.who, reason = %o.reason,
            peer = %admin.peer.addr_str(), "override set"
        );
        Ok(Response::new(o))
    }

    async fn list_overrides(
        &self,
        _req: Request<proto::ListOverridesRequest>,
    ) -> Result<Response<proto::ListOverridesResponse>, Status> {
        let overrides = self.ctl.with_overrides(|o| o.list());
        Ok(Response::new(proto::ListOverridesResponse { overrides }))
    }

    async fn clear_override(
        &self,
        req: Request<proto::ClearOverrideRequest>,
    ) -> Result<Response<proto::ClearOverrideResponse>, Status> {
        let admin = self.ctl.admin().check("ClearOverride", &req)?;
        let req = req.into_inner();
        if req.id.is_empty() && req.service.is_empty() {
            return Err(Status::invalid_argument("id or service is required"));
        }
        let gone = self.ctl.with_overrides(|o| o.clear(&req.id, &req.service));
        for o in &gone {
            info!(
                id = %o.id, service = %o.service, peer = %admin.peer.addr_str(),
                who = %admin.principal, "override cleared"
            );
        }
        Ok(Response::new(proto::ClearOverrideResponse {
            cleared: gone.len() as u32,
        }))
    }
}
