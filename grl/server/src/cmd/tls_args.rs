//! The TLS and credential flags shared by the `grl` subcommands, one clap struct per role:
//! a serving tier ([`ServerTlsArgs`]: its certificate, the client CA, allowed children), its
//! link to a parent ([`UplinkTlsArgs`]: the parent's CA; the tier's own certificate is its
//! client identity), and an admin client ([`AdminClientArgs`]: CA, optional client
//! certificate, bearer token file).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use grl::net::auth::{self, AdminAuth, ChildAuth, TokenError};
use grl::net::cred_file;
use grl::net::tls::{ConnLimits, Served, ServerTls, ServerTlsFiles};
use grl_core::tls::ClientTls;

use super::validate::Usage;

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
    /// Most connections the TLS port holds open (handshaking or established); more are
    /// closed at once and counted (`grl_tier_tls_events_total{event="over_connection_cap"}`).
    #[arg(long, value_name = "N", default_value_t = ConnLimits::default().max_connections,
          value_parser = super::validate::max_connections)]
    pub(crate) tls_max_connections: usize,
    /// Most TLS handshakes in progress at once; more connections are closed at once and
    /// counted (`event="over_handshake_cap"`).
    #[arg(long, value_name = "N", default_value_t = ConnLimits::default().max_handshakes,
          value_parser = super::validate::max_handshakes)]
    pub(crate) tls_max_handshakes: usize,
    /// How long a client may take to finish its TLS handshake, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000,
          value_parser = super::validate::timeout_ms)]
    pub(crate) tls_handshake_timeout_ms: u64,
    /// Serve `--metrics-listen` over TLS too, with `--tls-cert/--tls-key` (HTTP/1.1 and
    /// HTTP/2). With `--tls-client-ca`, a client certificate is asked for but optional: a
    /// scraper of `/metrics` needs none, and `/status` accepts an `--admin-allow` identity
    /// as the gRPC port's admin calls do.
    #[arg(long, requires = "tls_cert")]
    pub(crate) metrics_tls: bool,
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
        let limits = ConnLimits {
            max_connections: self.tls_max_connections,
            max_handshakes: self.tls_max_handshakes,
            handshake_timeout: std::time::Duration::from_millis(self.tls_handshake_timeout_ms),
        };
        Ok(Some(Arc::new(
            ServerTls::load(files)
                .context("--tls-cert/--tls-key/--tls-client-ca")?
                .with_limits(limits),
        )))
    }

    /// TLS for the admin HTTP port (`--metrics-tls`), with its own connection caps.
    pub(crate) fn metrics_tls(&self) -> anyhow::Result<Option<Arc<ServerTls>>> {
        let (true, Some(cert), Some(key)) = (self.metrics_tls, &self.tls_cert, &self.tls_key)
        else {
            return Ok(None);
        };
        let files = ServerTlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.tls_client_ca.clone(),
        };
        Ok(Some(Arc::new(
            ServerTls::load_for(files, Served::Web).context("--metrics-tls")?,
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
    /// A file holding the admin bearer token (at least 16 characters; re-read when its
    /// content changes): admin calls carrying `authorization: Bearer <token>` are allowed.
    /// Refused if the group or others may write it.
    #[arg(long, value_name = "FILE")]
    pub(crate) admin_token_file: Option<PathBuf>,
    /// Accept admin calls from anyone who reaches the port when neither `--admin-allow` nor
    /// `--admin-token-file` is given and `--listen` is not a loopback address, or the admin
    /// token in the clear when such a port has no TLS.
    #[arg(long)]
    pub(crate) insecure_admin: bool,
}

impl AdminAuthArgs {
    /// The admin policy. On a non-loopback address, open admin calls, and an admin token on
    /// a port without TLS (it would cross the network in the clear), need `--insecure-admin`;
    /// without it, and for a token file others may write: a usage error, exit 2.
    pub(crate) fn admin(
        &self,
        listen: &std::net::SocketAddr,
        tls: bool,
    ) -> anyhow::Result<Arc<AdminAuth>> {
        let a = AdminAuth::new(self.admin_allow.clone(), self.admin_token_file.clone())
            .map_err(token_usage)?;
        let public = !listen.ip().is_loopback() && !self.insecure_admin;
        if a.is_open() && public {
            return Err(Usage(format!(
                "admin calls would be open to anyone reaching {listen}: give --admin-allow NAME \
                 (with --tls-client-ca) or --admin-token-file FILE, or --insecure-admin to accept that"
            ))
            .into());
        }
        if a.has_token() && !tls && public {
            return Err(Usage(format!(
                "the admin token would cross the network in the clear on {listen}: give \
                 --tls-cert FILE --tls-key FILE (TLS on the port), listen on a loopback address, \
                 or --insecure-admin to accept that"
            ))
            .into());
        }
        Ok(Arc::new(a))
    }
}

/// A token file others may write is a usage error (exit 2); other token errors are not.
fn token_usage(e: TokenError) -> anyhow::Error {
    match e {
        TokenError::LoosePermissions { .. } => Usage(e.to_string()).into(),
        e => e.into(),
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
    /// The client TLS settings, if any (a key others may read is warned about).
    pub(crate) fn tls(&self) -> Option<ClientTls> {
        warn_key(self.tls_key.as_deref());
        ClientTls::from_flags(
            self.tls_ca.as_ref(),
            self.tls_cert.as_ref(),
            self.tls_key.as_ref(),
        )
    }

    /// The token to send, if any: refused (exit 2) from a file others may write, warned
    /// about from one others may read.
    pub(crate) fn token(&self) -> anyhow::Result<Option<String>> {
        let Some(path) = self.token_file.as_deref() else {
            return Ok(None);
        };
        let token = auth::read_token(path).map_err(token_usage)?;
        cred_file::warn_if_readable("admin token file", path);
        Ok(Some(token))
    }
}

/// Warns when others may read the private key at `key`.
fn warn_key(key: Option<&std::path::Path>) {
    if let Some(k) = key {
        cred_file::warn_if_readable("TLS private key", k);
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
    /// The client TLS settings, if any (a key others may read is warned about).
    pub(crate) fn tls(&self) -> Option<ClientTls> {
        warn_key(self.tls_key.as_deref());
        ClientTls::from_flags(
            self.tls_ca.as_ref(),
            self.tls_cert.as_ref(),
            self.tls_key.as_ref(),
        )
    }
}
