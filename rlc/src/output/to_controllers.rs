//! Sending config to the GRL controllers (not to be confused with a git push): a snapshot
//! to a controller's `ApplyConfig`, its version and `Status` read back, over TLS when given a CA
//! (`--tls-ca`, with `--tls-cert/--tls-key` for mutual TLS) and with the admin bearer token
//! of `--token-file` (never logged or put in an error).

use std::path::PathBuf;
use std::time::Duration;

use grl_core::tls::ClientTls;

use grl_core::proto::control_client::ControlClient;
use grl_core::proto::tier_client::TierClient;
use grl_core::proto::{
    ApplyConfigRequest, ApplyConfigResponse, ConfigFile, StatusRequest, StatusResponse,
};

/// How rlc authenticates to the controller (default: plaintext, no token).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControllerAuth {
    /// TLS to the controller (its CA, and optionally rlc's client certificate).
    pub tls: Option<ClientTls>,
    /// A file holding the admin bearer token, sent as `authorization: Bearer <token>`.
    pub token_file: Option<PathBuf>,
}

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
    /// The TLS files or the token file are unusable.
    #[error("controller at {addr}: {why}")]
    Credentials {
        /// The controller's address.
        addr: String,
        /// What is wrong (names the file, never its content).
        why: String,
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

/// A connected channel to the controller at `addr`, over TLS when `auth` has it.
async fn channel(
    addr: &str,
    auth: &ControllerAuth,
) -> Result<tonic::transport::Channel, PushError> {
    grl_core::tls::endpoint(addr, auth.tls.as_ref())
        .map_err(|e| PushError::Credentials {
            addr: addr.to_string(),
            why: e.to_string(),
        })?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .connect()
        .await
        .map_err(|source| PushError::Unreachable {
            addr: addr.to_string(),
            source,
        })
}

/// The `authorization` header made from `auth`'s token file, if it has one.
fn bearer(
    addr: &str,
    auth: &ControllerAuth,
) -> Result<Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>, PushError> {
    let Some(path) = &auth.token_file else {
        return Ok(None);
    };
    let credentials = |why: String| PushError::Credentials {
        addr: addr.to_string(),
        why,
    };
    let t = std::fs::read_to_string(path)
        .map_err(|e| credentials(format!("token file {}: {e}", path.display())))?;
    tonic::metadata::MetadataValue::try_from(format!("Bearer {}", t.trim()))
        .map(Some)
        .map_err(|_| {
            credentials(format!(
                "token file {}: characters not allowed in a header",
                path.display()
            ))
        })
}

/// Sends `files` (paths relative to the config root) as snapshot `version` to `addr`,
/// authenticated as `auth` says.
pub async fn apply_config(
    addr: &str,
    version: &str,
    files: Vec<(String, String)>,
    auth: &ControllerAuth,
) -> Result<ApplyConfigResponse, PushError> {
    let token = bearer(addr, auth)?;
    let channel = channel(addr, auth).await?;
    let request = ApplyConfigRequest {
        version: version.to_string(),
        files: files
            .into_iter()
            .map(|(path, content)| ConfigFile { path, content })
            .collect(),
    };
    let mut request = tonic::Request::new(request);
    if let Some(v) = token {
        request.metadata_mut().insert("authorization", v);
    }
    let response = ControlClient::new(channel)
        .max_decoding_message_size(grl_core::wire::MAX_CONTROL_MESSAGE_BYTES)
        .max_encoding_message_size(grl_core::wire::MAX_CONTROL_MESSAGE_BYTES)
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
pub async fn config_version(addr: &str, auth: &ControllerAuth) -> Result<String, PushError> {
    Ok(status(addr, auth, false).await?.config_version)
}

/// The `Status` of the controller at `addr`; with `detail`, each bucket's dropped rates too.
pub async fn status(
    addr: &str,
    auth: &ControllerAuth,
    detail: bool,
) -> Result<StatusResponse, PushError> {
    let channel = channel(addr, auth).await?;
    let status = TierClient::new(channel)
        .max_decoding_message_size(grl_core::wire::MAX_TIER_MESSAGE_BYTES)
        .status(StatusRequest {
            service: String::new(),
            detail,
        })
        .await
        .map_err(|status| PushError::Status {
            addr: addr.to_string(),
            status,
        })?;
    Ok(status.into_inner())
}
