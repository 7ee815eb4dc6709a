//! Who may do what on a tier's gRPC port: admin calls of a controller (`ApplyConfig`,
//! override set/clear) need an mTLS identity on the admin allow-list or the admin bearer
//! token; a child's report stream needs an identity on the child allow-list when there is
//! one. Every refusal changes nothing, is counted by reason and logged with the peer's
//! address and identity — never with the token. An accepted admin call carries who made it
//! ([`Admin::principal`]) into the audit trail. A token sent over a connection without TLS
//! is counted and logged: it crossed the network in the clear.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use tonic::Status;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tracing::warn;

use super::tls::Peer;
use super::token::Token;
pub use super::token::{TokenError, read_token};

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
pub struct AuthRefusals([AtomicU64; 4]);

impl AuthRefusals {
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

/// An admin call that was allowed: the peer, and who it is for the audit trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    /// The caller's address and certificate names.
    pub peer: Peer,
    /// Who made the call: `cert:<allowed name>`, `token:<token file name>`, or in open
    /// mode `cert:<names>` / `anonymous`.
    pub principal: String,
}

impl Admin {
    /// The `who` of an override: the principal, followed by what the client said
    /// (`grl override` sends `$USER`) when that adds anything.
    pub fn who(&self, claimed: &str) -> String {
        if claimed.is_empty() || claimed == "unknown" || claimed == self.principal {
            self.principal.clone()
        } else {
            format!("{} (user {claimed})", self.principal)
        }
    }
}

/// Whether `req` came over TLS.
fn over_tls<T>(req: &tonic::Request<T>) -> bool {
    req.extensions()
        .get::<TlsConnectInfo<TcpConnectInfo>>()
        .is_some()
}

/// Who may make admin calls on a controller.
#[derive(Debug, Default)]
pub struct AdminAuth {
    allow: Vec<String>,
    token: Option<Token>,
    /// Refused admin calls by reason.
    pub refused: AuthRefusals,
    /// Admin calls that carried a bearer token on a connection without TLS.
    pub plaintext_tokens: AtomicU64,
}

impl AdminAuth {
    /// Admin calls from identities in `allow` (client certificate SAN DNS name or CN) or with
    /// the token in `token_file`. With neither, every admin call is accepted (open mode).
    pub fn new(allow: Vec<String>, token_file: Option<PathBuf>) -> Result<Self, TokenError> {
        Ok(Self {
            allow,
            token: token_file.map(Token::load).transpose()?,
            refused: AuthRefusals::default(),
            plaintext_tokens: AtomicU64::new(0),
        })
    }

    /// Whether admin calls may carry a bearer token.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Whether admin calls are accepted from anyone who reaches the port.
    pub fn is_open(&self) -> bool {
        self.allow.is_empty() && self.token.is_none()
    }

    /// Allows or refuses the admin call `what`: a present bearer token decides alone (right:
    /// allowed, wrong: denied); without one, the client certificate's names decide.
    pub fn check<T>(&self, what: &str, req: &tonic::Request<T>) -> Result<Admin, Status> {
        let peer = Peer::of(req);
        let auth = req.metadata().get("authorization");
        if auth.is_some() && !over_tls(req) {
            self.plaintext_tokens.fetch_add(1, Ordering::Relaxed);
            warn!(
                call = what, peer = %peer.addr_str(),
                "admin credential sent without TLS: it crossed the network in the clear"
            );
        }
        if self.is_open() {
            let principal = if peer.names.is_empty() {
                "anonymous".into()
            } else {
                format!("cert:{}", peer.identity())
            };
            return Ok(Admin { peer, principal });
        }
        let verdict = match auth {
            Some(v) => match v.to_str().ok().and_then(|s| s.strip_prefix("Bearer ")) {
                None => Err(Refusal::MalformedAuthorization),
                Some(t) => self.by_token(t),
            },
            None => self.by_certificate(&peer.names),
        };
        match verdict {
            Ok(principal) => Ok(Admin { peer, principal }),
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

impl AdminAuth {
    /// Allows or refuses a request for a read-only admin page on the admin HTTP port
    /// (`/status`), as [`AdminAuth::check`] does a gRPC admin call: open mode lets anyone
    /// through; a present `authorization` header decides alone (`Bearer <token>`, or HTTP
    /// Basic with the token as the password, what a browser's login prompt sends); without
    /// one, the client certificate's names decide (over `--metrics-tls`). The principal, or
    /// why not.
    pub fn check_http(
        &self,
        authorization: Option<&str>,
        peer: &super::admin_conn::HttpPeer,
    ) -> Result<String, Refusal> {
        if authorization.is_some() && !peer.tls {
            self.plaintext_tokens.fetch_add(1, Ordering::Relaxed);
        }
        if self.is_open() {
            return Ok("anonymous".into());
        }
        let verdict = match authorization {
            Some(h) => match bearer_or_basic_password(h) {
                None => Err(Refusal::MalformedAuthorization),
                Some(t) => self.by_token(&t),
            },
            None => self.by_certificate(&peer.names),
        };
        if let Err(r) = verdict {
            self.refused.add(r);
            let identity = if peer.names.is_empty() {
                "-".to_string()
            } else {
                peer.names.join(",")
            };
            warn!(
                call = "status page", reason = r.as_str(), peer = %peer.addr, %identity,
                "admin page refused"
            );
        }
        verdict
    }

    /// The principal of a bearer token, or why it is refused.
    fn by_token(&self, t: &str) -> Result<String, Refusal> {
        match &self.token {
            Some(k) if k.matches(t.trim()) => Ok(format!("token:{}", k.name)),
            _ => Err(Refusal::WrongToken),
        }
    }

    /// The principal of a client certificate's `names`, or why they are refused.
    fn by_certificate(&self, names: &[String]) -> Result<String, Refusal> {
        match names.iter().find(|n| self.allow.contains(n)) {
            Some(n) => Ok(format!("cert:{n}")),
            None if !names.is_empty() && !self.allow.is_empty() => Err(Refusal::IdentityNotAllowed),
            None => Err(Refusal::NoCredentials),
        }
    }
}

/// The secret of an `authorization` header: a bearer token, or a Basic password.
fn bearer_or_basic_password(h: &str) -> Option<String> {
    use base64::Engine as _;
    if let Some(t) = h.strip_prefix("Bearer ") {
        return Some(t.to_string());
    }
    let b64 = h.strip_prefix("Basic ")?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let pair = String::from_utf8(raw).ok()?;
    pair.split_once(':').map(|(_, p)| p.to_string())
}

/// Which children may open a report stream.
#[derive(Debug, Default)]
pub struct ChildAuth {
    allow: Vec<String>,
    /// Refused child streams by reason.
    pub refused: AuthRefusals,
}

impl ChildAuth {
    /// Children whose certificate names one of `allow`; empty: anyone who passed the
    /// handshake (with mutual TLS, any certificate from the client CA).
    pub fn new(allow: Vec<String>) -> Self {
        Self {
            allow,
            refused: AuthRefusals::default(),
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

    fn http_peer(names: &[&str], tls: bool) -> crate::net::admin_conn::HttpPeer {
        crate::net::admin_conn::HttpPeer {
            addr: "127.0.0.1:1".parse().unwrap(),
            names: names.iter().map(ToString::to_string).collect(),
            tls,
        }
    }

    #[test]
    fn the_status_page_takes_the_token_as_bearer_or_basic_password() {
        use base64::Engine as _;
        let (_d, a) = with_token("s3cret-s3cret-s3cret");
        let p = http_peer(&[], false);
        let basic = |pair: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        };
        assert!(
            a.check_http(Some("Bearer s3cret-s3cret-s3cret"), &p)
                .is_ok()
        );
        assert!(
            a.check_http(Some(&basic("ops:s3cret-s3cret-s3cret")), &p)
                .is_ok()
        );
        assert_eq!(a.check_http(None, &p), Err(Refusal::NoCredentials));
        assert_eq!(
            a.check_http(Some(&basic("ops:nope")), &p),
            Err(Refusal::WrongToken)
        );
        assert_eq!(
            a.check_http(Some("Basic !!"), &p),
            Err(Refusal::MalformedAuthorization)
        );
        assert_eq!(
            a.plaintext_tokens.load(Ordering::Relaxed),
            4,
            "every header over plain HTTP is counted"
        );
        assert!(
            AdminAuth::default().check_http(None, &p).is_ok(),
            "open mode"
        );
    }

    #[test]
    fn the_status_page_over_tls_takes_an_admin_certificate() {
        let certs_only = AdminAuth::new(vec!["ops".into()], None).unwrap();
        assert_eq!(
            certs_only.check_http(None, &http_peer(&["ops", "ops.example"], true)),
            Ok("cert:ops".into())
        );
        assert_eq!(
            certs_only.check_http(None, &http_peer(&["intruder"], true)),
            Err(Refusal::IdentityNotAllowed)
        );
        assert_eq!(
            certs_only.check_http(None, &http_peer(&[], true)),
            Err(Refusal::NoCredentials)
        );
        assert_eq!(
            certs_only.check_http(Some("Bearer x"), &http_peer(&["ops"], true)),
            Err(Refusal::WrongToken),
            "a present header decides alone, as on the gRPC port"
        );
        assert_eq!(certs_only.plaintext_tokens.load(Ordering::Relaxed), 0);
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
    fn the_token_names_the_principal_never_the_token() {
        let (_d, a) = with_token("s3cret-s3cret-s3cret");
        let ok = a
            .check("x", &req(Some("Bearer s3cret-s3cret-s3cret")))
            .unwrap();
        assert_eq!(ok.principal, "token:token");
        assert_eq!(ok.who("alice"), "token:token (user alice)");
        assert_eq!(ok.who("unknown"), "token:token");
        // Sent without TLS (a bare request has no TLS connection info): counted.
        assert_eq!(a.plaintext_tokens.load(Ordering::Relaxed), 1);
    }

    /// Issue 24 (8): a token file others may write was accepted.
    #[cfg(unix)]
    #[test]
    fn a_token_file_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t");
        std::fs::write(&p, "s3cret-s3cret-s3cret\n").unwrap();
        for mode in [0o666, 0o620, 0o602] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = AdminAuth::new(vec![], Some(p.clone())).unwrap_err();
            assert!(matches!(e, TokenError::LoosePermissions { .. }), "{e}");
            assert!(e.to_string().contains("chmod go-w"), "{e}");
            assert!(!e.to_string().contains("s3cret"), "{e}");
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let a = AdminAuth::new(vec![], Some(p.clone())).unwrap();
        // Made writable by others later: the new content is not taken.
        std::fs::write(&p, "planted-by-someone-else\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(
            a.check("x", &req(Some("Bearer planted-by-someone-else")))
                .is_err()
        );
        assert!(
            a.check("x", &req(Some("Bearer s3cret-s3cret-s3cret")))
                .is_ok()
        );
    }

    /// Issue 24 (8): a token rewritten with the same length and modification time (`cp -p`)
    /// was not noticed.
    #[test]
    fn a_token_rewritten_with_the_same_mtime_and_length_is_used() {
        let (d, a) = with_token("first-token-0123456789");
        let p = d.path().join("token");
        let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
        assert!(
            a.check("x", &req(Some("Bearer first-token-0123456789")))
                .is_ok()
        );
        std::fs::write(&p, "other-token-9876543210\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert!(
            a.check("x", &req(Some("Bearer other-token-9876543210")))
                .is_ok()
        );
        assert!(
            a.check("x", &req(Some("Bearer first-token-0123456789")))
                .is_err()
        );
    }

    #[test]
    fn open_mode_without_credentials_configured() {
        let a = AdminAuth::default();
        assert!(a.is_open());
        assert!(a.check("x", &req(None)).is_ok());
    }
}
