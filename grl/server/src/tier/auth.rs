//! Who may do what on a tier's gRPC port: admin calls of a controller (`ApplyConfig`,
//! override set/clear) need an mTLS identity on the admin allow-list or the admin bearer
//! token; a child's report stream needs an identity on the child allow-list when there is
//! one. Every refusal changes nothing, is counted by reason and logged with the peer's
//! address and identity — never with the token.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use subtle::ConstantTimeEq;
use tonic::Status;
use tracing::warn;

use super::tls::{Peer, Stamp, stamp};

/// Why a call was refused: the `reason` label of the refusal metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Neither a token nor an allowed certificate (`UNAUTHENTICATED`).
    NoCredentials,
    /// A bearer token that is not the admin token (`PERMISSION_DENIED`).
    WrongToken,
    /// A client certificate whose names are not on the allow-list (`PERMISSION_DENIED`).
    IdentityNotAllowed,
    /// An `authorization` header that is not `Bearer <token>` (`UNAUTHENTICATED`).
    MalformedAuthorization,
}

impl Refusal {
    /// Every reason, in label order.
    pub const ALL: [Refusal; 4] = [
        Refusal::NoCredentials,
        Refusal::WrongToken,
        Refusal::IdentityNotAllowed,
        Refusal::MalformedAuthorization,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoCredentials => "no_credentials",
            Refusal::WrongToken => "wrong_token",
            Refusal::IdentityNotAllowed => "identity_not_allowed",
            Refusal::MalformedAuthorization => "malformed_authorization",
        }
    }

    /// The gRPC status (its message names the reason, never a secret).
    pub fn status(self, what: &str) -> Status {
        match self {
            Refusal::NoCredentials => Status::unauthenticated(format!(
                "{what} needs an admin client certificate or an `authorization: Bearer` token"
            )),
            Refusal::MalformedAuthorization => Status::unauthenticated(format!(
                "{what}: the authorization header must be `Bearer <token>`"
            )),
            Refusal::WrongToken => {
                Status::permission_denied(format!("{what}: the bearer token is not accepted"))
            }
            Refusal::IdentityNotAllowed => {
                Status::permission_denied(format!("{what}: this client certificate is not allowed"))
            }
        }
    }
}

/// Refusals counted by reason.
#[derive(Debug, Default)]
pub struct RefusalCounts([AtomicU64; 4]);

impl RefusalCounts {
    fn add(&self, r: Refusal) {
        let i = Refusal::ALL.iter().position(|x| *x == r).unwrap_or(0);
        self.0[i].fetch_add(1, Ordering::Relaxed);
    }

    /// (reason label, count) of every reason.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        Refusal::ALL
            .iter()
            .zip(&self.0)
            .map(|(r, c)| (r.as_str(), c.load(Ordering::Relaxed)))
            .collect()
    }
}

/// Why an admin token file is unusable.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// It cannot be read.
    #[error("admin token file {path}: {source}")]
    Read {
        /// Its path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// It holds no token (or one too short to be a secret).
    #[error("admin token file {path}: the token must be at least 16 characters")]
    TooShort {
        /// Its path.
        path: PathBuf,
    },
}

/// Reads a token file: its content without surrounding whitespace, at least 16 bytes.
pub fn read_token(path: &Path) -> Result<String, TokenError> {
    let t = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let t = t.trim();
    if t.len() < 16 {
        return Err(TokenError::TooShort {
            path: path.to_path_buf(),
        });
    }
    Ok(t.to_string())
}

/// The admin bearer token, re-read when its file changes (a change that does not load keeps
/// the previous token).
#[derive(Debug)]
struct Token {
    path: PathBuf,
    current: Mutex<(Stamp, String)>,
}

impl Token {
    fn load(path: PathBuf) -> Result<Self, TokenError> {
        let t = read_token(&path)?;
        let s = stamp([path.as_path()]);
        Ok(Self {
            path,
            current: Mutex::new((s, t)),
        })
    }

    /// Constant-time comparison with the current token (the length is not hidden).
    fn matches(&self, given: &str) -> bool {
        let now = stamp([self.path.as_path()]);
        let mut cur = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cur.0 != now {
            cur.0 = now;
            match read_token(&self.path) {
                Ok(t) => cur.1 = t,
                Err(e) => {
                    warn!(error = %e, "admin token file changed but does not load; kept the old token");
                }
            }
        }
        bool::from(given.as_bytes().ct_eq(cur.1.as_bytes()))
    }
}

/// Who may make admin calls on a controller.
#[derive(Debug, Default)]
pub struct AdminAuth {
    allow: Vec<String>,
    token: Option<Token>,
    /// Refused admin calls by reason.
    pub refused: RefusalCounts,
}

impl AdminAuth {
    /// Admin calls from identities in `allow` (client certificate SAN DNS name or CN) or with
    /// the token in `token_file`. With neither, every admin call is accepted (open mode).
    pub fn new(allow: Vec<String>, token_file: Option<PathBuf>) -> Result<Self, TokenError> {
        Ok(Self {
            allow,
            token: token_file.map(Token::load).transpose()?,
            refused: RefusalCounts::default(),
        })
    }

    /// Whether admin calls are accepted from anyone who reaches the port.
    pub fn is_open(&self) -> bool {
        self.allow.is_empty() && self.token.is_none()
    }

    /// Allows or refuses the admin call `what`: a present bearer token decides alone (right:
    /// allowed, wrong: denied); without one, the client certificate's names decide.
    pub fn check<T>(&self, what: &str, req: &tonic::Request<T>) -> Result<Peer, Status> {
        let peer = Peer::of(req);
        if self.is_open() {
            return Ok(peer);
        }
        let verdict = match req.metadata().get("authorization") {
            Some(v) => match v.to_str().ok().and_then(|s| s.strip_prefix("Bearer ")) {
                None => Err(Refusal::MalformedAuthorization),
                Some(t) if self.token.as_ref().is_some_and(|k| k.matches(t.trim())) => Ok(()),
                Some(_) => Err(Refusal::WrongToken),
            },
            None if peer.is_one_of(&self.allow) => Ok(()),
            None if !peer.names.is_empty() && !self.allow.is_empty() => {
                Err(Refusal::IdentityNotAllowed)
            }
            None => Err(Refusal::NoCredentials),
        };
        match verdict {
            Ok(()) => Ok(peer),
            Err(r) => {
                self.refused.add(r);
                warn!(
                    call = what, reason = r.as_str(), peer = %peer.addr_str(),
                    identity = %peer.identity(), "admin call refused"
                );
                Err(r.status(what))
            }
        }
    }
}

/// Which children may open a report stream.
#[derive(Debug, Default)]
pub struct ChildAuth {
    allow: Vec<String>,
    /// Refused child streams by reason.
    pub refused: RefusalCounts,
}

impl ChildAuth {
    /// Children whose certificate names one of `allow`; empty: anyone who passed the
    /// handshake (with mutual TLS, any certificate from the client CA).
    pub fn new(allow: Vec<String>) -> Self {
        Self {
            allow,
            refused: RefusalCounts::default(),
        }
    }

    /// Allows or refuses a child's stream.
    pub fn check<T>(&self, req: &tonic::Request<T>) -> Result<Peer, Status> {
        let peer = Peer::of(req);
        if self.allow.is_empty() || peer.is_one_of(&self.allow) {
            return Ok(peer);
        }
        let r = if peer.names.is_empty() {
            Refusal::NoCredentials
        } else {
            Refusal::IdentityNotAllowed
        };
        self.refused.add(r);
        warn!(
            reason = r.as_str(), peer = %peer.addr_str(), identity = %peer.identity(),
            "child refused"
        );
        Err(match r {
            Refusal::NoCredentials => {
                Status::unauthenticated("reports need a client certificate allowed as a child")
            }
            _ => Status::permission_denied("this client certificate is not allowed as a child"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(auth: Option<&str>) -> tonic::Request<()> {
        let mut r = tonic::Request::new(());
        if let Some(a) = auth {
            r.metadata_mut().insert("authorization", a.parse().unwrap());
        }
        r
    }

    fn with_token(t: &str) -> (tempfile::TempDir, AdminAuth) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("token");
        std::fs::write(&p, format!("{t}\n")).unwrap();
        (d, AdminAuth::new(vec![], Some(p)).unwrap())
    }

    #[test]
    fn token_decides_and_refusals_are_counted() {
        let (_d, a) = with_token("s3cret-s3cret-s3cret");
        assert!(
            a.check("x", &req(Some("Bearer s3cret-s3cret-s3cret")))
                .is_ok()
        );
        let no = a.check("x", &req(None)).unwrap_err();
        assert_eq!(no.code(), tonic::Code::Unauthenticated);
        let wrong = a.check("x", &req(Some("Bearer nope"))).unwrap_err();
        assert_eq!(wrong.code(), tonic::Code::PermissionDenied);
        assert!(!wrong.message().contains("nope"), "{}", wrong.message());
        let bad = a.check("x", &req(Some("Basic abc"))).unwrap_err();
        assert_eq!(bad.code(), tonic::Code::Unauthenticated);
        let counts: std::collections::BTreeMap<_, _> = a.refused.snapshot().into_iter().collect();
        assert_eq!(counts["no_credentials"], 1);
        assert_eq!(counts["wrong_token"], 1);
        assert_eq!(counts["malformed_authorization"], 1);
    }

    #[test]
    fn a_rewritten_token_file_is_used() {
        let (d, a) = with_token("first-token-0123456789");
        std::fs::write(d.path().join("token"), "second-token-0123456789-longer").unwrap();
        assert!(
            a.check("x", &req(Some("Bearer second-token-0123456789-longer")))
                .is_ok()
        );
        assert!(
            a.check("x", &req(Some("Bearer first-token-0123456789")))
                .is_err()
        );
    }

    #[test]
    fn short_tokens_are_refused_at_start() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t");
        std::fs::write(&p, "short\n").unwrap();
        let e = AdminAuth::new(vec![], Some(p)).unwrap_err().to_string();
        assert!(e.contains("at least 16"), "{e}");
        assert!(!e.contains("short\n"));
    }

    #[test]
    fn open_mode_without_credentials_configured() {
        let a = AdminAuth::default();
        assert!(a.is_open());
        assert!(a.check("x", &req(None)).is_ok());
    }
}
