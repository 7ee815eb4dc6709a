//! Leadership from a Kubernetes `Lease` (`coordination.k8s.io/v1`), the object client-go's
//! leader election uses: the holder is the lease's `holderIdentity` (this controller's
//! advertised address, which followers send children to), renewed by writing `renewTime`
//! every third of the lease; every write carries the `resourceVersion` it read, so two
//! candidates never both win (the API server answers `409 Conflict` to the second). A
//! candidate takes an expired lease only after it saw the same record unchanged for a whole
//! lease duration on its own clock (no trust in other nodes' clocks). A leader that cannot
//! renew for two thirds of the lease steps down.

use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::{ElectionError, Role};

const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A lease in one namespace of an API server.
#[derive(Debug, Clone)]
pub struct KubeLease {
    /// `…/apis/coordination.k8s.io/v1/namespaces/NS/leases`.
    leases_url: String,
    token: Option<String>,
    http: reqwest::Client,
}

/// What this candidate last saw of the lease: the record, and when it last changed.
#[derive(Debug, Default)]
struct Observed {
    record: Option<Value>,
    changed_at: Option<Instant>,
}

impl KubeLease {
    /// A client of the API server at `api` (e.g. `https://10.0.0.1:443`, or `http://…` for
    /// a test stand-in) for leases in `namespace`, with a bearer `token` and the API
    /// server's CA (PEM) if given.
    pub fn new(
        api: &str,
        namespace: &str,
        token: Option<String>,
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
            token,
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
        let read = |f: &str| {
            std::fs::read(format!("{SERVICE_ACCOUNT}/{f}"))
                .map_err(|e| ElectionError::Config(format!("{SERVICE_ACCOUNT}/{f}: {e}")))
        };
        let token = String::from_utf8_lossy(&read("token")?).trim().to_string();
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        Self::new(
            &format!("https://{host}:{port}"),
            namespace,
            Some(token),
            Some(&read("ca.crt")?),
        )
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, url);
        match &self.token {
            Some(t) => r.bearer_auth(t),
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
    /// it if it is free or expired, else follow its holder. Returns the resulting role.
    async fn round(
        &self,
        name: &str,
        me: &str,
        ttl: Duration,
        seen: &mut Observed,
        now: Instant,
    ) -> Result<Role, ElectionError> {
        let current = self.get(name).await?;
        let spec_of = |v: &Value| v.get("spec").cloned().unwrap_or_default();
        let holder = current
            .as_ref()
            .and_then(|v| v.pointer("/spec/holderIdentity"))
            .and_then(Value::as_str)
            .map(str::to_string);
        if current.as_ref().map(spec_of) != seen.record.as_ref().map(spec_of) {
            seen.record.clone_from(&current);
            seen.changed_at = Some(now);
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
        let won = match (&current, holder.as_deref()) {
            (None, _) => self.write(name, None, new_spec(0, &stamp)).await?,
            (Some(v), Some(h)) if h == me => {
                let acquired = v
                    .pointer("/spec/acquireTime")
                    .and_then(Value::as_str)
                    .unwrap_or(&stamp)
                    .to_string();
                let transitions = v
                    .pointer("/spec/leaseTransitions")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                self.write(name, Some(v), new_spec(transitions, &acquired))
                    .await?
            }
            (Some(v), h) => {
                let expired =
                    h.is_none_or(str::is_empty) || seen.changed_at.is_some_and(|t| now - t >= ttl);
                if !expired {
                    return Ok(Role {
                        leading: false,
                        leader: holder,
                    });
                }
                let transitions = v
                    .pointer("/spec/leaseTransitions")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                self.write(name, Some(v), new_spec(transitions + 1, &stamp))
                    .await?
            }
        };
        Ok(if won {
            Role {
                leading: true,
                leader: Some(me.to_string()),
            }
        } else {
            Role {
                leading: false,
                leader: holder.filter(|h| h != me),
            }
        })
    }

    /// Campaigns for the lease `name` with `advertise` as holder identity every third of
    /// `ttl`, publishing every change of role on `role`, until `shutdown` turns true (then a
    /// held lease is released by writing an empty holder, so a standby takes over at once).
    pub async fn run(
        self,
        name: String,
        ttl: Duration,
        advertise: String,
        role: watch::Sender<Role>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut seen = Observed::default();
        let mut renewed: Option<Instant> = None;
        let give_up = ttl.mul_f64(2.0 / 3.0);
        loop {
            let now = Instant::now();
            match self.round(&name, &advertise, ttl, &mut seen, now).await {
                Ok(r) => {
                    renewed = r.leading.then_some(now);
                    if role.send_if_modified(|cur| {
                        if r.leading {
                            cur.set_leading(&advertise)
                        } else {
                            cur.set_following(r.leader.clone())
                        }
                    }) {
                        info!(lease = %name, leading = r.leading, leader = ?r.leader, "lease role");
                    }
                }
                Err(e) => {
                    warn!(lease = %name, error = %e, "lease round failed");
                    if renewed.is_none_or(|t| now - t >= give_up) {
                        role.send_if_modified(|cur| cur.set_following(None));
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(ttl / 3) => {}
                _ = shutdown.wait_for(|s| *s) => break,
            }
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

fn backend(call: &str, e: &reqwest::Error) -> ElectionError {
    ElectionError::Backend(format!("lease {call}: {e}"))
}

#[cfg(test)]
mod tests {
    //! Against a stand-in of the API server's Lease endpoints (no cluster can run here):
    //! get, create, and replace with `resourceVersion` checks (`409 Conflict`), as the API
    //! server does.

    use std::sync::{Arc, Mutex};

    use axum::Json;
    use axum::extract::{Path, State};
    use axum::http::StatusCode as Code;
    use axum::routing::{get, post};

    use super::*;

    #[derive(Default)]
    struct Leases {
        lease: Option<Value>,
        version: u64,
        writes: u64,
    }

    type Shared = Arc<Mutex<Leases>>;

    async fn standin() -> (String, Shared) {
        let shared = Shared::default();
        let base = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases";
        let app = axum::Router::new()
            .route(base, post(create))
            .route(&format!("{base}/{{name}}"), get(read).put(replace))
            .with_state(shared.clone());
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await });
        (url, shared)
    }

    fn stored(s: &mut Leases, mut body: Value) -> Value {
        s.version += 1;
        s.writes += 1;
        body["metadata"]["resourceVersion"] = json!(s.version.to_string());
        s.lease = Some(body.clone());
        body
    }

    async fn read(
        State(s): State<Shared>,
        Path((_ns, _name)): Path<(String, String)>,
    ) -> (Code, Json<Value>) {
        match &s.lock().unwrap().lease {
            Some(l) => (Code::OK, Json(l.clone())),
            None => (
                Code::NOT_FOUND,
                Json(json!({"kind": "Status", "code": 404})),
            ),
        }
    }

    async fn create(
        State(s): State<Shared>,
        Path(_ns): Path<String>,
        Json(body): Json<Value>,
    ) -> (Code, Json<Value>) {
        let mut s = s.lock().unwrap();
        assert_eq!(body["kind"], "Lease");
        if s.lease.is_some() {
            return (Code::CONFLICT, Json(json!({"kind": "Status", "code": 409})));
        }
        (Code::CREATED, Json(stored(&mut s, body)))
    }

    async fn replace(
        State(s): State<Shared>,
        Path((_ns, _name)): Path<(String, String)>,
        Json(body): Json<Value>,
    ) -> (Code, Json<Value>) {
        let mut s = s.lock().unwrap();
        let current = s
            .lease
            .as_ref()
            .map(|l| l["metadata"]["resourceVersion"].clone());
        if current.as_ref() != Some(&body["metadata"]["resourceVersion"]) {
            return (Code::CONFLICT, Json(json!({"kind": "Status", "code": 409})));
        }
        (Code::OK, Json(stored(&mut s, body)))
    }

    fn holder(s: &Shared) -> Option<String> {
        s.lock().unwrap().lease.as_ref().and_then(|l| {
            l.pointer("/spec/holderIdentity")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
    }

    struct Candidate {
        role: watch::Receiver<Role>,
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    }

    fn candidate(api: &str, me: &str) -> Candidate {
        let (tx, role) = watch::channel(Role {
            leading: false,
            leader: None,
        });
        let (stop, rx) = watch::channel(false);
        let lease = KubeLease::new(api, "grl", None, None).unwrap();
        let task =
            tokio::spawn(lease.run("region-1".into(), Duration::from_secs(2), me.into(), tx, rx));
        Candidate { role, stop, task }
    }

    /// Polls until `f` holds for the candidates' roles, asserting meanwhile that no two
    /// lead at once.
    async fn until(cs: &[&Candidate], secs: u64, f: impl Fn(&[Role]) -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(secs) {
            let roles: Vec<Role> = cs.iter().map(|c| c.role.borrow().clone()).collect();
            assert!(
                roles.iter().filter(|r| r.leading).count() <= 1,
                "two leaders: {roles:?}"
            );
            if f(&roles) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    #[tokio::test]
    async fn one_candidate_leads_the_other_follows_and_takes_over_when_it_dies() {
        let (api, shared) = standin().await;
        let a = candidate(&api, "10.0.0.1:7300");
        assert!(
            until(&[&a], 5, |r| r[0].leading).await,
            "the first candidate never took the free lease"
        );
        let b = candidate(&api, "10.0.0.2:7300");
        assert!(
            until(&[&a, &b], 5, |r| r[1].leader.as_deref()
                == Some("10.0.0.1:7300"))
            .await,
            "the second candidate does not follow the holder"
        );
        let writes = shared.lock().unwrap().writes;
        assert!(
            until(&[&a, &b], 5, |_| shared.lock().unwrap().writes
                >= writes + 2)
            .await,
            "the leader does not renew"
        );
        assert!(!b.role.borrow().leading);

        // Killed: no more renewals, no release.
        a.task.abort();
        let killed = Instant::now();
        assert!(
            until(&[&b], 10, |r| r[0].leading).await,
            "the follower never took over the expired lease"
        );
        let took = killed.elapsed();
        assert!(
            took >= Duration::from_millis(1500),
            "took over a live lease after {took:?}"
        );
        assert_eq!(holder(&shared).as_deref(), Some("10.0.0.2:7300"));
        assert_eq!(
            shared.lock().unwrap().lease.as_ref().unwrap()["spec"]["leaseTransitions"],
            1
        );

        // A graceful stop releases the lease: the next candidate takes it at once.
        b.stop.send_replace(true);
        let released = until(&[&b], 5, |_| holder(&shared).as_deref() == Some("")).await;
        assert!(released, "the lease was not released on shutdown");
        let c = candidate(&api, "10.0.0.3:7300");
        assert!(
            until(&[&b, &c], 2, |r| r[1].leading).await,
            "a released lease was not taken at once"
        );
    }
}
