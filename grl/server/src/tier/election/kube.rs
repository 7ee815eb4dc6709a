//! Leadership from a Kubernetes `Lease` (`coordination.k8s.io/v1`), the object client-go's
//! leader election uses: the holder is the lease's `holderIdentity` (this controller's
//! advertised address, which followers send children to), renewed by writing `renewTime`
//! every third of the lease; every write carries the `resourceVersion` it read, so two
//! candidates never both win (the API server answers `409 Conflict` to the second). A
//! candidate takes an expired lease only after it saw the same record unchanged for a whole
//! lease duration on its own clock, counted from when the read that first showed it
//! returned (no trust in other nodes' clocks).
//!
//! A leader leads until two thirds of the lease after it *sent* its last successful write:
//! the API server stored that write later, and a standby read it later still, so nobody can
//! take the lease within a whole lease of the send. Every round run while leading, and the
//! wait between rounds, is cut short at that instant, so an API server that hangs cannot
//! keep a leader leading (a round is a GET and a PUT, each of which could otherwise take
//! the HTTP timeout). The bearer token is read from its file before every round: the
//! kubelet rotates a projected service-account token in place.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{ElectionError, ElectionStats, Event};
use crate::tier::engine::leadership::Leadership;

const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A lease in one namespace of an API server.
#[derive(Debug, Clone)]
pub struct KubeLease {
    /// `…/apis/coordination.k8s.io/v1/namespaces/NS/leases`.
    leases_url: String,
    token: Option<SaToken>,
    http: reqwest::Client,
}

/// A bearer token and the file it is read from.
#[derive(Clone)]
struct SaToken {
    path: PathBuf,
    value: String,
}

impl std::fmt::Debug for SaToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaToken")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SaToken {
    fn load(path: &Path) -> Result<Self, ElectionError> {
        let bytes = std::fs::read(path)
            .map_err(|e| ElectionError::Config(format!("{}: {e}", path.display())))?;
        let value = String::from_utf8_lossy(&bytes).trim().to_string();
        if value.is_empty() {
            return Err(ElectionError::Config(format!(
                "{}: the token file is empty",
                path.display()
            )));
        }
        Ok(Self {
            path: path.to_path_buf(),
            value,
        })
    }

    /// Reads the file again; true when the token changed. An unreadable or empty file
    /// leaves the last token in use.
    async fn refresh(&mut self) -> bool {
        match tokio::fs::read(&self.path).await {
            Ok(bytes) => {
                let value = String::from_utf8_lossy(&bytes).trim().to_string();
                if value.is_empty() || value == self.value {
                    return false;
                }
                self.value = value;
                true
            }
            Err(e) => {
                warn!(file = %self.path.display(), error = %e, "token file unreadable: the last token stays");
                false
            }
        }
    }
}

/// What this candidate last saw of the lease: the record, and when it last changed.
#[derive(Debug, Default)]
struct Observed {
    record: Option<Value>,
    changed_at: Option<Instant>,
}

/// What one round found: the role, and when the write that won it was sent.
struct Outcome {
    role: Leadership,
    sent: Option<Instant>,
}

impl KubeLease {
    /// A client of the API server at `api` (e.g. `https://10.0.0.1:443`, or `http://…` for
    /// a test stand-in) for leases in `namespace`, with a bearer token read from
    /// `token_file` (again before every round) and the API server's CA (PEM) if given.
    pub fn new(
        api: &str,
        namespace: &str,
        token_file: Option<&Path>,
        ca_pem: Option<&[u8]>,
    ) -> Result<Self, ElectionError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut b = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .connect_timeout(Duration::from_secs(1));
        if let Some(pem) = ca_pem {
            let ca = reqwest::Certificate::from_pem(pem)
                .map_err(|e| ElectionError::Config(format!("API server CA: {e}")))?;
            b = b.add_root_certificate(ca);
        }
        let http = b
            .build()
            .map_err(|e| ElectionError::Config(format!("HTTP client: {e}")))?;
        Ok(Self {
            leases_url: format!(
                "{}/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
                api.trim_end_matches('/')
            ),
            token: token_file.map(SaToken::load).transpose()?,
            http,
        })
    }

    /// The in-cluster client for `namespace`: the API server from
    /// `KUBERNETES_SERVICE_HOST`/`_PORT`, the pod's service account token and CA.
    pub fn in_cluster(namespace: &str) -> Result<Self, ElectionError> {
        let env = |k: &str| {
            std::env::var(k)
                .map_err(|_| ElectionError::Config(format!("{k} is not set: not running in a pod")))
        };
        let (host, port) = (
            env("KUBERNETES_SERVICE_HOST")?,
            env("KUBERNETES_SERVICE_PORT")?,
        );
        let ca = format!("{SERVICE_ACCOUNT}/ca.crt");
        let ca = std::fs::read(&ca).map_err(|e| ElectionError::Config(format!("{ca}: {e}")))?;
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        Self::new(
            &format!("https://{host}:{port}"),
            namespace,
            Some(Path::new(&format!("{SERVICE_ACCOUNT}/token"))),
            Some(&ca),
        )
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, url);
        match &self.token {
            Some(t) => r.bearer_auth(&t.value),
            None => r,
        }
    }

    /// The lease `name`, `None` if it does not exist.
    async fn get(&self, name: &str) -> Result<Option<Value>, ElectionError> {
        let resp = self
            .request(reqwest::Method::GET, &format!("{}/{name}", self.leases_url))
            .send()
            .await
            .map_err(|e| backend("get", &e))?;
        match resp.status() {
            StatusCode::NOT_FOUND => Ok(None),
            s if s.is_success() => resp.json().await.map(Some).map_err(|e| backend("get", &e)),
            s => Err(ElectionError::Backend(format!("lease get: HTTP {s}"))),
        }
    }

    /// Creates (`existing: None`) or replaces the lease; `Ok(false)` when another writer
    /// got there first (`409 Conflict`).
    async fn write(
        &self,
        name: &str,
        existing: Option<&Value>,
        spec: Value,
    ) -> Result<bool, ElectionError> {
        let mut body = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": { "name": name },
            "spec": spec,
        });
        let req = match existing {
            Some(old) => {
                body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                self.request(reqwest::Method::PUT, &format!("{}/{name}", self.leases_url))
            }
            None => self.request(reqwest::Method::POST, &self.leases_url),
        };
        let resp = req
            .json(&body)
            .send()
            .await
            .map_err(|e| backend("write", &e))?;
        match resp.status() {
            StatusCode::CONFLICT => Ok(false),
            s if s.is_success() => Ok(true),
            s => Err(ElectionError::Backend(format!("lease write: HTTP {s}"))),
        }
    }

    /// One round of the election: read the lease; renew it if this candidate holds it, take
    /// it if it is free or expired, else follow its holder.
    async fn round(
        &self,
        name: &str,
        me: &str,
        ttl: Duration,
        seen: &mut Observed,
    ) -> Result<Outcome, ElectionError> {
        let current = self.get(name).await?;
        let read_at = Instant::now();
        let spec_of = |v: &Value| v.get("spec").cloned().unwrap_or_default();
        let holder = current
            .as_ref()
            .and_then(|v| v.pointer("/spec/holderIdentity"))
            .and_then(Value::as_str)
            .map(str::to_string);
        if current.as_ref().map(spec_of) != seen.record.as_ref().map(spec_of) {
            seen.record.clone_from(&current);
            seen.changed_at = Some(read_at);
        }
        let stamp = Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true);
        let duration = ttl.as_secs().max(1);
        let new_spec = |transitions: u64, acquired: &str| {
            json!({
                "holderIdentity": me,
                "leaseDurationSeconds": duration,
                "acquireTime": acquired,
                "renewTime": stamp,
                "leaseTransitions": transitions,
            })
        };
        let transitions = |v: &Value| {
            v.pointer("/spec/leaseTransitions")
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        let sent = Instant::now();
        let won = match (&current, holder.as_deref()) {
            (None, _) => self.write(name, None, new_spec(0, &stamp)).await?,
            (Some(v), Some(h)) if h == me => {
                let acquired = v
                    .pointer("/spec/acquireTime")
                    .and_then(Value::as_str)
                    .unwrap_or(&stamp)
                    .to_string();
                self.write(name, Some(v), new_spec(transitions(v), &acquired))
                    .await?
            }
            (Some(v), h) => {
                let expired = h.is_none_or(str::is_empty)
                    || seen.changed_at.is_some_and(|t| read_at - t >= ttl);
                if !expired {
                    return Ok(Outcome {
                        role: Leadership {
                            leading: false,
                            leader: holder,
                        },
                        sent: None,
                    });
                }
                self.write(name, Some(v), new_spec(transitions(v) + 1, &stamp))
                    .await?
            }
        };
        Ok(if won {
            Outcome {
                role: Leadership {
                    leading: true,
                    leader: Some(me.to_string()),
                },
                sent: Some(sent),
            }
        } else {
            Outcome {
                role: Leadership {
                    leading: false,
                    leader: holder.filter(|h| h != me),
                },
                sent: None,
            }
        })
    }

    /// Campaigns for the lease `name` with `advertise` as holder identity every third of
    /// `ttl`, publishing every change of role on `role` and counting events in `stats`,
    /// until `shutdown` turns true (then a held lease is released by writing an empty
    /// holder, so a standby takes over at once).
    pub async fn run(
        mut self,
        name: String,
        ttl: Duration,
        advertise: String,
        role: watch::Sender<Leadership>,
        mut shutdown: watch::Receiver<bool>,
        stats: Arc<ElectionStats>,
    ) {
        let mut seen = Observed::default();
        let give_up = ttl.mul_f64(2.0 / 3.0);
        // While leading: the instant leadership ends unless a renewal is sent before it.
        let mut until: Option<Instant> = None;
        let lapse = |until: &mut Option<Instant>| {
            if until.is_some_and(|u| Instant::now() >= u) {
                *until = None;
                role.send_if_modified(|cur| cur.set_following(None));
                warn!(lease = %name, "no renewal for two thirds of the lease: stepped down");
            }
        };
        loop {
            let started = Instant::now();
            if let Some(t) = &mut self.token
                && t.refresh().await
            {
                stats.count(Event::TokenChanged);
                info!(file = %t.path.display(), "service-account token changed: using the new one");
            }
            let round = self.round(&name, &advertise, ttl, &mut seen);
            let result = match until {
                Some(u) => tokio::time::timeout_at(u, round).await.unwrap_or_else(|_| {
                    Err(ElectionError::Backend(
                        "lease round cut short: two thirds of the lease passed".into(),
                    ))
                }),
                None => round.await,
            };
            match result {
                Ok(o) => {
                    until = o.sent.map(|s| s + give_up);
                    let leading = o.role.leading && until.is_some_and(|u| Instant::now() < u);
                    if role.send_if_modified(|cur| {
                        if leading {
                            cur.set_leading(&advertise)
                        } else {
                            cur.set_following(o.role.leader.clone().filter(|_| !o.role.leading))
                        }
                    }) {
                        info!(lease = %name, leading, leader = ?o.role.leader, "lease role");
                    }
                }
                Err(e) => {
                    stats.count(Event::BackendError);
                    warn!(lease = %name, error = %e, "lease round failed");
                    if until.is_none() {
                        role.send_if_modified(|cur| cur.set_following(None));
                    }
                }
            }
            lapse(&mut until);
            tokio::select! {
                () = tokio::time::sleep_until(started + ttl / 3) => {}
                () = at(until) => {}
                _ = shutdown.wait_for(|s| *s) => break,
            }
            lapse(&mut until);
        }
        if role.borrow().leading {
            role.send_if_modified(|cur| cur.set_following(None));
            if let Ok(Some(v)) = self.get(&name).await {
                let mut spec = v.get("spec").cloned().unwrap_or_default();
                spec["holderIdentity"] = json!("");
                if let Err(e) = self.write(&name, Some(&v), spec).await {
                    debug!(error = %e, "lease not released (it expires by itself)");
                }
            }
        }
    }
}

/// Sleeps until `t`; forever when `None`.
async fn at(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

fn backend(call: &str, e: &reqwest::Error) -> ElectionError {
    ElectionError::Backend(format!("lease {call}: {e}"))
}
