//! The TLS and credential flags shared by the `grl` subcommands, one clap struct per role:
//! a serving tier ([`ServerTlsArgs`]: its certificate, the client CA, allowed children), its
//! link to a parent ([`UplinkTlsArgs`]: the parent's CA; the tier's own certificate is its
//! client identity), and an admin client ([`AdminClientArgs`]: CA, optional client
//! certificate, bearer token file).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use grl::tier::auth::{self, AdminAuth, ChildAuth};
use grl::tier::tls::{ServerTls, ServerTlsFiles};
use grl_core::tls::ClientTls;

/// TLS on a tier's gRPC port.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServerTlsArgs {
    /// This tier's certificate chain (PEM): served on the gRPC port, and presented as client
    /// certificate to its parent. Re-read when the file changes.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// CA (PEM) that children's and admins' client certificates must chain to: mutual TLS
    /// is then required on the gRPC port.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_client_ca: Option<PathBuf>,
    /// Child identities (client certificate SAN DNS name or CN) allowed to report, comma
    /// separated or repeated. Default: any certificate from `--tls-client-ca`.
    #[arg(
        long,
        value_name = "NAME",
        value_delimiter = ',',
        requires = "tls_client_ca"
    )]
    pub(crate) child_allow: Vec<String>,
}

impl ServerTlsArgs {
    /// Loads the server TLS settings (an unusable file is a start-up error).
    pub(crate) fn server_tls(&self) -> anyhow::Result<Option<Arc<ServerTls>>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = ServerTlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.tls_client_ca.clone(),
        };
        Ok(Some(Arc::new(
            ServerTls::load(files).context("--tls-cert/--tls-key/--tls-client-ca")?,
        )))
    }

    /// Which children may report.
    pub(crate) fn children(&self) -> Arc<ChildAuth> {
        Arc::new(ChildAuth::new(self.child_allow.clone()))
    }
}

/// TLS on the link to a parent (controller or global controller).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct UplinkTlsArgs {
    /// CA (PEM) of the parent's certificate: the link uses TLS (a bare `host:port` parent is
    /// dialled as `https://`), with `--tls-cert/--tls-key` as client certificate if given.
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,
}

impl UplinkTlsArgs {
    /// The client TLS settings, with this tier's own certificate as identity.
    pub(crate) fn client(&self, own: &ServerTlsArgs) -> Option<ClientTls> {
        ClientTls::from_flags(
            self.tls_ca.as_ref(),
            own.tls_cert.as_ref(),
            own.tls_key.as_ref(),
        )
    }
}

/// Who may make admin calls on a controller.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct AdminAuthArgs {
    /// Admin identities (client certificate SAN DNS name or CN) allowed to apply configs
    /// and set or clear overrides, comma separated or repeated. Needs `--tls-client-ca`.
    #[arg(
        long,
        value_name = "NAME",
        value_delimiter = ',',
        requires = "tls_client_ca"
    )]
    pub(crate) admin_allow: Vec<String>,
    /// A file holding the admin bearer token (at least 16 characters; re-read when it
    /// changes): admin calls carrying `authorization: Bearer <token>` are allowed.
    #[arg(long, value_name = "FILE")]
    pub(crate) admin_token_file: Option<PathBuf>,
    /// Accept admin calls from anyone who reaches the port when neither `--admin-allow` nor
    /// `--admin-token-file` is given and `--listen` is not a loopback address.
    #[arg(long)]
    pub(crate) insecure_admin: bool,
}

impl AdminAuthArgs {
    /// The admin policy; open admin calls on a non-loopback address need `--insecure-admin`
    /// (without it: a usage error, exit 2).
    pub(crate) fn admin(&self, listen: &std::net::SocketAddr) -> anyhow::Result<Arc<AdminAuth>> {
        let a = AdminAuth::new(self.admin_allow.clone(), self.admin_token_file.clone())?;
        if a.is_open() && !listen.ip().is_loopback() && !self.insecure_admin {
            return Err(super::validate::Usage(format!(
                "admin calls would be open to anyone reaching {listen}: give --admin-allow NAME \
                 (with --tls-client-ca) or --admin-token-file FILE, or --insecure-admin to accept that"
            ))
            .into());
        }
        Ok(Arc::new(a))
    }
}

/// How an admin client (`grl override`) reaches a controller.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct AdminClientArgs {
    /// CA (PEM) of the controller's certificate: connect over TLS (a bare `host:port` is
    /// dialled as `https://`).
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS.
    #[arg(long, value_name = "FILE", requires = "tls_key", global = true)]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert", global = true)]
    pub(crate) tls_key: Option<PathBuf>,
    /// A file holding the admin bearer token, sent as `authorization: Bearer <token>`.
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) token_file: Option<PathBuf>,
}

impl AdminClientArgs {
    /// The client TLS settings, if any.
    pub(crate) fn tls(&self) -> Option<ClientTls> {
        ClientTls::from_flags(
            self.tls_ca.as_ref(),
            self.tls_cert.as_ref(),
            self.tls_key.as_ref(),
        )
    }

    /// The token to send, if any.
    pub(crate) fn token(&self) -> anyhow::Result<Option<String>> {
        self.token_file
            .as_deref()
            .map(auth::read_token)
            .transpose()
            .map_err(Into::into)
    }
}

/// TLS from a client of the aggregator (`grl loadgen`, `grl sidecar`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ClientTlsArgs {
    /// CA (PEM) of the aggregator's certificate: connect over TLS (a bare `host:port` is
    /// dialled as `https://`).
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS; re-read at every reconnect.
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
}

impl ClientTlsArgs {
    /// The client TLS settings, if any.
    pub(crate) fn tls(&self) -> Option<ClientTls> {
        ClientTls::from_flags(
            self.tls_ca.as_ref(),
            self.tls_cert.as_ref(),
            self.tls_key.as_ref(),
        )
    }
}
