//! Pushes a config snapshot to a GRL controller's `ApplyConfig`.

use std::time::Duration;

use grl_core::proto::control_client::ControlClient;
use grl_core::proto::tier_client::TierClient;
use grl_core::proto::{ApplyConfigRequest, ApplyConfigResponse, ConfigFile, StatusRequest};

/// The controller refused the snapshot or could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// No connection to the controller.
    #[error("controller at {addr}: unreachable: {source}")]
    Unreachable {
        /// The controller's address.
        addr: String,
        /// What the transport said.
        source: tonic::transport::Error,
    },
    /// The controller answered with an error (e.g. it refused an invalid snapshot).
    #[error("controller at {addr} refused config {version}: {status}")]
    Refused {
        /// The controller's address.
        addr: String,
        /// The snapshot's version.
        version: String,
        /// The gRPC status.
        status: tonic::Status,
    },
    /// The controller did not answer the question which config version it runs.
    #[error("controller at {addr}: status query failed: {status}")]
    Status {
        /// The controller's address.
        addr: String,
        /// The gRPC status.
        status: tonic::Status,
    },
}

/// Sends `files` (paths relative to the config root) as snapshot `version` to `addr`.
pub async fn apply_config(
    addr: &str,
    version: &str,
    files: Vec<(String, String)>,
) -> Result<ApplyConfigResponse, PushError> {
    let url = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    let endpoint = tonic::transport::Endpoint::from_shared(url.clone())
        .map_err(|source| PushError::Unreachable {
            addr: addr.to_string(),
            source,
        })?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30));
    let channel = endpoint
        .connect()
        .await
        .map_err(|source| PushError::Unreachable {
            addr: addr.to_string(),
            source,
        })?;
    let request = ApplyConfigRequest {
        version: version.to_string(),
        files: files
            .into_iter()
            .map(|(path, content)| ConfigFile { path, content })
            .collect(),
    };
    let response = ControlClient::new(channel)
        .apply_config(request)
        .await
        .map_err(|status| PushError::Refused {
            addr: addr.to_string(),
            version: version.to_string(),
            status,
        })?;
    Ok(response.into_inner())
}

/// The config version the controller at `addr` runs (its `Status`), `""` when it has none.
pub async fn config_version(addr: &str) -> Result<String, PushError> {
    let url = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    let unreachable = |source| PushError::Unreachable {
        addr: addr.to_string(),
        source,
    };
    let channel = tonic::transport::Endpoint::from_shared(url)
        .map_err(unreachable)?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .connect()
        .await
        .map_err(unreachable)?;
    let status = TierClient::new(channel)
        .status(StatusRequest {})
        .await
        .map_err(|status| PushError::Status {
            addr: addr.to_string(),
            status,
        })?;
    Ok(status.into_inner().config_version)
}
