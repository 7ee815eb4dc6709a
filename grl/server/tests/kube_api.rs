//! A stand-in of the Kubernetes API server's Lease endpoints (no cluster can run here), as
//! the real one behaves for them: get, create, and replace with `resourceVersion` checks
//! (`409 Conflict`); bearer tokens checked (`401 Unauthorized` for one it does not accept,
//! when it checks them); and an API server that hangs for some clients: a request bearing a
//! hung token is accepted and never answered. Every stored write is recorded with the
//! instant it was stored and the token it bore.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode as Code};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::time::Instant;

/// A write the stand-in stored.
#[derive(Debug, Clone)]
pub(crate) struct Write {
    /// When it was stored.
    pub at: Instant,
    /// The bearer token it bore ("" without one).
    pub token: String,
    /// The lease's `holderIdentity` after it.
    pub holder: String,
}

#[derive(Default)]
struct Leases {
    lease: Option<Value>,
    version: u64,
    writes: Vec<Write>,
    /// `None`: every caller is accepted.
    accepted: Option<HashSet<String>>,
    hung: HashSet<String>,
}

type Shared = Arc<Mutex<Leases>>;

/// The stand-in, serving on a free port of 127.0.0.1 until the test's runtime ends.
#[derive(Clone)]
pub(crate) struct KubeApi {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: Shared,
}

type Answer = (Code, Json<Value>);

impl KubeApi {
    /// A stand-in that accepts the bearer `tokens` only (`None`: any caller).
    pub(crate) async fn start(tokens: Option<&[&str]>) -> Self {
        let state = Shared::default();
        state.lock().unwrap().accepted =
            tokens.map(|t| t.iter().map(|s| (*s).to_string()).collect());
        let base = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases";
        let app = axum::Router::new()
            .route(base, post(create))
            .route(&format!("{base}/{{name}}"), get(read).put(replace))
            .with_state(state.clone());
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await });
        Self { url, state }
    }

    /// From now on, accepts only the bearer `tokens`.
    pub(crate) fn accept_only(&self, tokens: &[&str]) {
        self.state.lock().unwrap().accepted =
            Some(tokens.iter().map(|s| (*s).to_string()).collect());
    }

    /// From now on, requests bearing `token` are accepted and never answered.
    pub(crate) fn hang(&self, token: &str) {
        self.state.lock().unwrap().hung.insert(token.to_string());
    }

    /// Every write stored so far.
    pub(crate) fn writes(&self) -> Vec<Write> {
        self.state.lock().unwrap().writes.clone()
    }

    /// The lease's current holder.
    pub(crate) fn holder(&self) -> Option<String> {
        self.state.lock().unwrap().lease.as_ref().and_then(|l| {
            l.pointer("/spec/holderIdentity")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
    }

    /// The lease as stored.
    pub(crate) fn lease(&self) -> Option<Value> {
        self.state.lock().unwrap().lease.clone()
    }
}

fn status(code: Code) -> Answer {
    (code, Json(json!({"kind": "Status", "code": code.as_u16()})))
}

/// The caller's bearer token if it is accepted; hangs forever for a hung one.
async fn admit(s: &Shared, headers: &HeaderMap) -> Result<String, Answer> {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string();
    let (hung, accepted) = {
        let s = s.lock().unwrap();
        let accepted = s.accepted.as_ref().is_none_or(|a| a.contains(&token));
        (s.hung.contains(&token), accepted)
    };
    if hung {
        std::future::pending::<()>().await;
    }
    if accepted {
        Ok(token)
    } else {
        Err(status(Code::UNAUTHORIZED))
    }
}

fn stored(s: &mut Leases, token: String, mut body: Value) -> Answer {
    s.version += 1;
    body["metadata"]["resourceVersion"] = json!(s.version.to_string());
    s.writes.push(Write {
        at: Instant::now(),
        token,
        holder: body
            .pointer("/spec/holderIdentity")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
    });
    s.lease = Some(body.clone());
    (Code::OK, Json(body))
}

async fn read(
    State(s): State<Shared>,
    Path((_ns, _name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Answer {
    if let Err(refused) = admit(&s, &headers).await {
        return refused;
    }
    match &s.lock().unwrap().lease {
        Some(l) => (Code::OK, Json(l.clone())),
        None => status(Code::NOT_FOUND),
    }
}

async fn create(
    State(s): State<Shared>,
    Path(_ns): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Answer {
    let token = match admit(&s, &headers).await {
        Ok(t) => t,
        Err(refused) => return refused,
    };
    let mut s = s.lock().unwrap();
    assert_eq!(body["kind"], "Lease");
    if s.lease.is_some() {
        return status(Code::CONFLICT);
    }
    let (_, body) = stored(&mut s, token, body);
    (Code::CREATED, body)
}

async fn replace(
    State(s): State<Shared>,
    Path((_ns, _name)): Path<(String, String)>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Answer {
    let token = match admit(&s, &headers).await {
        Ok(t) => t,
        Err(refused) => return refused,
    };
    let mut s = s.lock().unwrap();
    let current = s
        .lease
        .as_ref()
        .map(|l| l["metadata"]["resourceVersion"].clone());
    if current.as_ref() != Some(&body["metadata"]["resourceVersion"]) {
        return status(Code::CONFLICT);
    }
    stored(&mut s, token, body)
}
