//! Server-side TLS settings of the tiers' gRPC ports (and of the admin HTTP port, see
//! [`Served::Web`]): a rustls acceptor built from PEM files and rebuilt when the content of any of them changes (checked at every handshake,
//! so a rotated certificate is served to the next connection without a restart), mutual
//! TLS when a client CA is given, the limits of the port's connections (enforced by
//! [`super::tls_accept`]), and the peer's identity (SAN DNS names and subject CN of its
//! certificate) for authorisation and logs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

use super::cred_file::{self, Stamp, stamp};

/// How many connections, and handshakes in progress, a TLS port holds at most, and how
/// long a handshake may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Open connections (handshaking or established); more are closed at once.
    pub max_connections: usize,
    /// Handshakes in progress; more connections are closed at once.
    pub max_handshakes: usize,
    /// How long a client may take to finish its handshake.
    pub handshake_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            max_handshakes: 256,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// The files a TLS server is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// Certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificate(s) (PEM) that client certificates must chain to: with it, mutual TLS
    /// is required.
    pub client_ca: Option<PathBuf>,
}

/// What a TLS port serves, which decides its ALPN and whether a client certificate is
/// required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Served {
    /// gRPC: HTTP/2 only; with a client CA, every client must present a certificate.
    #[default]
    Grpc,
    /// The admin HTTP port (`/metrics`, `/status`): HTTP/2 and HTTP/1.1 for browsers and
    /// scrapers; with a client CA, a certificate is asked for but optional (a scraper may
    /// come without one), and one that is presented must chain to the CA.
    Web,
}

/// Why TLS settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{what} {path}: {why}")]
    File {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// rustls refused the combination (e.g. the key does not match the certificate).
    #[error("TLS settings: {0}")]
    Rustls(String),
}

fn file_err(what: &'static str, path: &Path, why: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        what,
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// Reads every certificate of a PEM file (at least one).
fn certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(what, path, e))?;
    if certs.is_empty() {
        return Err(file_err(what, path, "no PEM certificate in it"));
    }
    Ok(certs)
}

/// Builds a rustls server config from `files` for what the port serves.
pub fn server_config(files: &ServerTlsFiles, served: Served) -> Result<ServerConfig, TlsError> {
    let chain = certs("certificate", &files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| file_err("private key", &files.key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certs("client CA", ca)? {
                roots.add(c).map_err(|e| file_err("client CA", ca, e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match served {
                Served::Grpc => verifier,
                Served::Web => verifier.allow_unauthenticated(),
            }
            .build()
            .map_err(|e| file_err("client CA", ca, e))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    cfg.alpn_protocols = match served {
        Served::Grpc => vec![b"h2".to_vec()],
        Served::Web => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    Ok(cfg)
}

/// TLS counters of one server.
#[derive(Debug, Default)]
pub struct TlsCounters {
    /// Handshakes that failed or timed out (plaintext clients, unknown CAs, no client cert).
    pub handshake_failures: AtomicU64,
    /// Certificate/key changes that could not be loaded (the previous ones stay in use).
    pub reload_failures: AtomicU64,
    /// Certificate/key changes put in use.
    pub reloads: AtomicU64,
    /// Connections closed at once because [`ConnLimits::max_connections`] were open.
    pub over_connection_cap: AtomicU64,
    /// Connections closed at once because [`ConnLimits::max_handshakes`] were in progress.
    pub over_handshake_cap: AtomicU64,
    /// Loads of a private key that others may read (each warned about).
    pub key_readable: AtomicU64,
}

/// A TLS server's counters and connection gauges at one moment, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlsSnapshot {
    /// See [`TlsCounters::handshake_failures`].
    pub handshake_failed: u64,
    /// See [`TlsCounters::reloads`].
    pub reloaded: u64,
    /// See [`TlsCounters::reload_failures`].
    pub reload_failed: u64,
    /// See [`TlsCounters::over_connection_cap`].
    pub over_connection_cap: u64,
    /// See [`TlsCounters::over_handshake_cap`].
    pub over_handshake_cap: u64,
    /// See [`TlsCounters::key_readable`].
    pub key_readable: u64,
    /// Connections open now (handshaking or established).
    pub open: u64,
    /// Handshakes in progress now.
    pub handshaking: u64,
}

/// The permits of a port's connections and handshakes in progress.
#[derive(Debug)]
pub(crate) struct ConnPermits {
    pub(crate) connections: Arc<Semaphore>,
    pub(crate) handshakes: Arc<Semaphore>,
}

/// A TLS server's settings, reloaded from their files when they change.
#[derive(Debug)]
pub struct ServerTls {
    files: ServerTlsFiles,
    served: Served,
    current: Mutex<(Stamp, Arc<ServerConfig>)>,
    pub(crate) limits: ConnLimits,
    pub(crate) slots: ConnPermits,
    /// Handshake and reload counts.
    pub counters: TlsCounters,
}

impl ServerTls {
    /// Loads `files` with the default [`ConnLimits`]; an error here stops the server from
    /// starting. A private key that others may read is warned about, as ssh does.
    pub fn load(files: ServerTlsFiles) -> Result<Self, TlsError> {
        Self::load_for(files, Served::Grpc)
    }

    /// Loads `files` for a port serving `served`, with the default [`ConnLimits`].
    pub fn load_for(files: ServerTlsFiles, served: Served) -> Result<Self, TlsError> {
        let s = stamp(Self::paths(&files));
        let cfg = Arc::new(server_config(&files, served)?);
        let tls = Self {
            files,
            served,
            current: Mutex::new((s, cfg)),
            limits: ConnLimits::default(),
            slots: ConnPermits::new(ConnLimits::default()),
            counters: TlsCounters::default(),
        };
        tls.check_key_mode();
        Ok(tls)
    }

    /// The same settings with other connection limits.
    pub fn with_limits(mut self, limits: ConnLimits) -> Self {
        self.limits = limits;
        self.slots = ConnPermits::new(limits);
        self
    }

    /// The limits of the port's connections.
    pub fn limits(&self) -> ConnLimits {
        self.limits
    }

    /// Counters and connection gauges now.
    pub fn snapshot(&self) -> TlsSnapshot {
        let c = &self.counters;
        let used = |s: &Semaphore, max: usize| max.saturating_sub(s.available_permits()) as u64;
        TlsSnapshot {
            handshake_failed: c.handshake_failures.load(Ordering::Relaxed),
            reloaded: c.reloads.load(Ordering::Relaxed),
            reload_failed: c.reload_failures.load(Ordering::Relaxed),
            over_connection_cap: c.over_connection_cap.load(Ordering::Relaxed),
            over_handshake_cap: c.over_handshake_cap.load(Ordering::Relaxed),
            key_readable: c.key_readable.load(Ordering::Relaxed),
            open: used(&self.slots.connections, self.limits.max_connections),
            handshaking: used(&self.slots.handshakes, self.limits.max_handshakes),
        }
    }

    fn check_key_mode(&self) {
        if cred_file::warn_if_readable("TLS private key", &self.files.key) {
            self.counters.key_readable.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn paths(files: &ServerTlsFiles) -> impl Iterator<Item = &Path> {
        [
            Some(&files.cert),
            Some(&files.key),
            files.client_ca.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(PathBuf::as_path)
    }

    /// Whether clients must present a certificate from the client CA.
    pub fn mutual(&self) -> bool {
        self.files.client_ca.is_some() && self.served == Served::Grpc
    }

    /// The acceptor for the next handshake: rebuilt first if a file changed. A change that
    /// does not load (e.g. the key written but not yet the certificate) is logged and
    /// counted, and the previous settings stay until the files load again.
    pub fn acceptor(&self) -> TlsAcceptor {
        let now = stamp(Self::paths(&self.files));
        let mut cur = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cur.0 != now {
            match server_config(&self.files, self.served) {
                Ok(cfg) => {
                    *cur = (now, Arc::new(cfg));
                    self.counters.reloads.fetch_add(1, Ordering::Relaxed);
                    info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                    self.check_key_mode();
                }
                Err(e) => {
                    // Try again at the next handshake, but count and log each change once.
                    cur.0 = now;
                    self.counters
                        .reload_failures
                        .fetch_add(1, Ordering::Relaxed);
                    warn!(error = %e, "TLS files changed but do not load; keeping the previous ones");
                }
            }
        }
        TlsAcceptor::from(cur.1.clone())
    }
}

impl ConnPermits {
    fn new(l: ConnLimits) -> Self {
        Self {
            connections: Arc::new(Semaphore::new(l.max_connections)),
            handshakes: Arc::new(Semaphore::new(l.max_handshakes)),
        }
    }
}

/// Who is calling: the TCP peer and, over mutual TLS, the names in its certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peer {
    /// The remote address, when known.
    pub addr: Option<SocketAddr>,
    /// SAN DNS names and the subject CN of the client certificate (empty without one).
    pub names: Vec<String>,
}

impl Peer {
    /// The peer of a gRPC request.
    pub fn of<T>(req: &tonic::Request<T>) -> Self {
        let names = req
            .peer_certs()
            .and_then(|c| c.first().map(|leaf| cert_names(leaf)))
            .unwrap_or_default();
        Self {
            addr: req.remote_addr(),
            names,
        }
    }

    /// Whether any of its names is in `allow`.
    pub fn is_one_of(&self, allow: &[String]) -> bool {
        self.names.iter().any(|n| allow.contains(n))
    }

    /// `addr` for logs.
    pub fn addr_str(&self) -> String {
        self.addr
            .map_or_else(|| "unknown".into(), |a| a.to_string())
    }

    /// The identity for logs: names joined by `,`, or `-` without a certificate.
    pub fn identity(&self) -> String {
        if self.names.is_empty() {
            "-".into()
        } else {
            self.names.join(",")
        }
    }
}

/// SAN DNS names, then subject CNs, of a DER certificate (empty if it does not parse).
pub fn cert_names(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                names.push((*d).to_string());
            }
        }
    }
    for cn in cert.subject().iter_common_name() {
        if let Ok(s) = cn.as_str()
            && !names.iter().any(|n| n == s)
        {
            names.push(s.to_string());
        }
    }
    names
}
