//! Client-side TLS for every gRPC link (feature `tls`): the files a connecting side is
//! given (`--tls-ca FILE [--tls-cert FILE --tls-key FILE]`) and the one function that turns
//! an address plus those files into a tonic [`Endpoint`]. The files are read on every call,
//! so a reconnect picks up rotated certificates.
//!
//! Address rules, the same for every link: with TLS a bare `host:port` becomes
//! `https://host:port`, an `http://` address is refused (it would silently send plaintext);
//! without TLS an `https://` address is refused (there is no CA to check the server with),
//! a bare one becomes `http://`.

use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// What a connecting side needs for TLS: the CA that signed the server's certificate, and
/// for mutual TLS its own certificate and key (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// CA certificate(s) to verify the server with (PEM).
    pub ca: PathBuf,
    /// Client certificate chain and private key (PEM), for mutual TLS.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// Why an endpoint could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read.
    #[error("cannot read {what} {path}: {source}")]
    Read {
        /// Which file (`CA certificate`, `client certificate`, `client key`).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The address's scheme does not fit whether TLS is configured.
    #[error("address {addr}: {why}")]
    Scheme {
        /// The address as given.
        addr: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The address is not a valid URI.
    #[error("address {addr}: {source}")]
    Address {
        /// The address as given.
        addr: String,
        /// The transport's complaint.
        source: tonic::transport::Error,
    },
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

/// The URL to dial for `addr`, following the module's address rules.
pub fn url(addr: &str, tls: bool) -> Result<String, TlsError> {
    let err = |why| TlsError::Scheme {
        addr: addr.to_string(),
        why,
    };
    match (addr.split_once("://"), tls) {
        (Some(("https", _)), true) | (Some(("http", _)), false) => Ok(addr.to_string()),
        (Some(("http", _)), true) => Err(err(
            "http:// is plaintext but TLS is configured (--tls-ca): use https:// or a bare host:port",
        )),
        (Some(("https", _)), false) => Err(err("https:// needs --tls-ca FILE")),
        (Some(_), _) => Err(err("the scheme must be http:// or https://")),
        (None, true) => Ok(format!("https://{addr}")),
        (None, false) => Ok(format!("http://{addr}")),
    }
}

impl ClientTls {
    /// TLS from the usual flags: on when a CA is given (`--tls-ca`), mutual when a
    /// certificate and its key are given too (`--tls-cert`, `--tls-key`).
    pub fn from_flags(
        ca: Option<&PathBuf>,
        cert: Option<&PathBuf>,
        key: Option<&PathBuf>,
    ) -> Option<Self> {
        ca.map(|ca| Self {
            ca: ca.clone(),
            identity: cert.cloned().zip(key.cloned()),
        })
    }

    /// The tonic TLS settings, read from the files now.
    pub fn config(&self) -> Result<ClientTlsConfig, TlsError> {
        let mut c = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read("CA certificate", &self.ca)?));
        if let Some((cert, key)) = &self.identity {
            c = c.identity(Identity::from_pem(
                read("client certificate", cert)?,
                read("client key", key)?,
            ));
        }
        Ok(c)
    }
}

/// An endpoint for `addr`: TLS (files read now) when `tls` is given, else plaintext.
pub fn endpoint(addr: &str, tls: Option<&ClientTls>) -> Result<Endpoint, TlsError> {
    let url = url(addr, tls.is_some())?;
    let ep = Endpoint::from_shared(url).map_err(|source| TlsError::Address {
        addr: addr.to_string(),
        source,
    })?;
    match tls {
        Some(t) => ep
            .tls_config(t.config()?)
            .map_err(|source| TlsError::Address {
                addr: addr.to_string(),
                source,
            }),
        None => Ok(ep),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_follow_tls() {
        assert_eq!(url("h:1", true).unwrap(), "https://h:1");
        assert_eq!(url("h:1", false).unwrap(), "http://h:1");
        assert_eq!(url("https://h:1", true).unwrap(), "https://h:1");
        assert!(
            url("http://h:1", true).is_err(),
            "plaintext with TLS configured"
        );
        assert!(url("https://h:1", false).is_err(), "https without a CA");
        assert!(url("ftp://h:1", false).is_err());
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let t = ClientTls {
            ca: "/nonexistent/ca.pem".into(),
            identity: None,
        };
        let e = endpoint("h:1", Some(&t)).unwrap_err().to_string();
        assert!(e.contains("CA certificate /nonexistent/ca.pem"), "{e}");
    }
}
