//! Leadership from etcd's election API (`v3election`, the same one `etcdctl elect` uses),
//! spoken as JSON over etcd's HTTP gateway (`/v3/...`) so that no protobuf compiler is
//! needed to build. One term: grant a lease, campaign under the key with the lease (the
//! call returns once every earlier candidate's key is gone, i.e. this one leads), keep the
//! lease alive; leadership ends two thirds of the lease after the last renewal that
//! succeeded was *sent* (etcd refreshed it later, so it outlives that instant by a third),
//! on this process's clock: a renewal that hangs is cut short then. While campaigning the
//! current leader's address is polled so that followers can redirect children to it.
//!
//! A term that ends while etcd is away leaves its lease, and so its key in the election,
//! in etcd, which restores leases with a fresh TTL when it restarts: its key would name a
//! leader that no longer leads (every candidate's campaign waiting behind it) for a whole
//! lease after etcd's return. Such leases are revoked before anything else as soon as etcd
//! answers again; while it is away a candidate retries every third of the lease at most.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use std::sync::Arc;

use super::{ElectionError, ElectionStats, Event};
use crate::tier::engine::leadership::Leadership;

/// An etcd endpoint's HTTP gateway.
#[derive(Debug, Clone)]
pub struct Etcd {
    endpoint: String,
    http: Client<HttpConnector, Full<Bytes>>,
}

/// A granted lease.
#[derive(Debug, Clone, Copy)]
struct Lease {
    id: i64,
    ttl: Duration,
    /// When the grant was sent: etcd's expiry is at least a TTL after this.
    asked: Instant,
}

impl Etcd {
    /// A client of the etcd at `endpoint` (`http://host:port`; TLS to etcd is not built).
    pub fn new(endpoint: &str) -> Result<Self, ElectionError> {
        let endpoint = endpoint.trim_end_matches('/').to_string();
        if !endpoint.starts_with("http://") {
            return Err(ElectionError::Config(format!(
                "etcd endpoint {endpoint:?}: only http:// is supported"
            )));
        }
        let mut conn = HttpConnector::new();
        conn.set_connect_timeout(Some(Duration::from_secs(1)));
        conn.set_nodelay(true);
        Ok(Self {
            endpoint,
            http: Client::builder(TokioExecutor::new()).build(conn),
        })
    }

    /// POSTs `body` to `path` and returns the JSON answer; an etcd error (`{"error": …}`)
    /// or a non-2xx status is an error. `timeout: None` waits as long as etcd does.
    async fn call(
        &self,
        path: &str,
        body: &Value,
        timeout: Option<Duration>,
    ) -> Result<Value, ElectionError> {
        let req = http::Request::post(format!("{}{path}", self.endpoint))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| ElectionError::Backend(e.to_string()))?;
        let exchange = async {
            let resp = self
                .http
                .request(req)
                .await
                .map_err(|e| ElectionError::Backend(format!("etcd {path}: {e}")))?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| ElectionError::Backend(format!("etcd {path}: {e}")))?
                .to_bytes();
            let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
                ElectionError::Backend(format!("etcd {path}: answer is not JSON: {e}"))
            })?;
            if let Some(err) = v.get("error").and_then(Value::as_str) {
                return Err(ElectionError::Backend(format!("etcd {path}: {err}")));
            }
            if !status.is_success() {
                return Err(ElectionError::Backend(format!(
                    "etcd {path}: HTTP {status}"
                )));
            }
            Ok(v)
        };
        match timeout {
            Some(t) => tokio::time::timeout(t, exchange)
                .await
                .map_err(|_| ElectionError::Unanswered(format!("etcd {path}: timed out")))?,
            None => exchange.await,
        }
    }

    async fn grant(&self, ttl: Duration) -> Result<Lease, ElectionError> {
        let asked = Instant::now();
        let v = self
            .call(
                "/v3/lease/grant",
                &json!({ "TTL": ttl.as_secs() }),
                Some(Duration::from_secs(2)),
            )
            .await?;
        let id = int_field(&v, "ID").ok_or_else(|| bad_answer("lease/grant", &v))?;
        let ttl = int_field(&v, "TTL").ok_or_else(|| bad_answer("lease/grant", &v))?;
        Ok(Lease {
            id,
            ttl: Duration::from_secs(ttl.max(1) as u64),
            asked,
        })
    }

    /// Renews `lease` once; `Ok(false)` when etcd no longer has it.
    async fn keep_alive(&self, lease: Lease) -> Result<bool, ElectionError> {
        let v = self
            .call(
                "/v3/lease/keepalive",
                &json!({ "ID": lease.id.to_string() }),
                Some(lease.ttl / 3),
            )
            .await?;
        Ok(v.get("result")
            .and_then(|r| int_field(r, "TTL"))
            .is_some_and(|t| t > 0))
    }

    /// Revokes `lease`: `Ok(true)` when etcd held it, `Ok(false)` when it was gone.
    async fn revoke(&self, lease: Lease) -> Result<bool, ElectionError> {
        match self
            .call(
                "/v3/lease/revoke",
                &json!({ "ID": lease.id.to_string() }),
                Some(Duration::from_secs(1)),
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(ElectionError::Backend(e)) if e.contains("lease not found") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Revokes the leases of ended terms that etcd may still hold, oldest first; stops at
    /// the first that cannot be (etcd still away), keeping it and the rest for later.
    /// A lease that etcd no longer knows right after a revoke of it went unanswered (a
    /// restarting etcd that took the request but answered late) was revoked by that
    /// request, and is counted so: etcd restores leases with a fresh TTL, so it had not
    /// lapsed.
    async fn revoke_stale(
        &self,
        stale: &mut Vec<Lease>,
        unanswered: &mut Option<i64>,
        stats: &ElectionStats,
    ) -> Result<(), ElectionError> {
        while let Some(&lease) = stale.first() {
            let revoked = match self.revoke(lease).await {
                Ok(r) => r || *unanswered == Some(lease.id),
                Err(e) => {
                    if matches!(e, ElectionError::Unanswered(_)) {
                        *unanswered = Some(lease.id);
                    }
                    return Err(e);
                }
            };
            if revoked {
                stats.count(Event::StaleLeaseRevoked);
                info!(
                    lease = lease.id,
                    "revoked the lease of a term that ended while etcd was away"
                );
            }
            *unanswered = None;
            stale.remove(0);
        }
        Ok(())
    }

    /// Returns once this candidate leads `key`.
    async fn campaign(&self, key: &str, lease: Lease, value: &str) -> Result<(), ElectionError> {
        let v = self
            .call(
                "/v3/election/campaign",
                &json!({
                    "name": B64.encode(key),
                    "lease": lease.id.to_string(),
                    "value": B64.encode(value),
                }),
                None,
            )
            .await?;
        v.get("leader")
            .map(|_| ())
            .ok_or_else(|| bad_answer("election/campaign", &v))
    }

    /// The address the leader of `key` advertises, if there is one.
    async fn leader(&self, key: &str) -> Result<Option<String>, ElectionError> {
        match self
            .call(
                "/v3/election/leader",
                &json!({ "name": B64.encode(key) }),
                Some(Duration::from_secs(1)),
            )
            .await
        {
            Ok(v) => Ok(v
                .pointer("/kv/value")
                .and_then(Value::as_str)
                .and_then(|s| B64.decode(s).ok())
                .map(|b| String::from_utf8_lossy(&b).into_owned())),
            Err(ElectionError::Backend(e)) if e.contains("no leader") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Campaigns for `key` with `advertise` as this candidate's address, term after term,
    /// publishing every change of role on `role` and counting events in `stats`, until
    /// `shutdown` turns true (then the lease is revoked, so that a standby takes over at
    /// once).
    pub async fn run(
        self,
        key: String,
        ttl: Duration,
        advertise: String,
        role: watch::Sender<Leadership>,
        mut shutdown: watch::Receiver<bool>,
        stats: Arc<ElectionStats>,
    ) {
        let mut failures = 0u32;
        let mut stale: Vec<Lease> = Vec::new();
        let mut unanswered = None;
        loop {
            let lease = tokio::select! {
                l = async {
                    self.revoke_stale(&mut stale, &mut unanswered, &stats).await?;
                    self.grant(ttl).await
                } => l,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            let lease = match lease {
                Ok(l) => {
                    failures = 0;
                    l
                }
                Err(e) => {
                    failures += 1;
                    stats.count(Event::BackendError);
                    warn!(error = %e, "etcd unreachable: following, no leadership");
                    role.send_if_modified(|r| r.set_following(None));
                    let wait = (ttl / 3).min(Duration::from_millis(250) * failures);
                    tokio::select! {
                        () = tokio::time::sleep(wait) => continue,
                        _ = shutdown.wait_for(|s| *s) => return,
                    }
                }
            };
            let stopped = tokio::select! {
                () = self.term(&key, lease, &advertise, &role, &stats) => false,
                _ = shutdown.wait_for(|s| *s) => true,
            };
            role.send_if_modified(|r| r.set_following(None));
            stale.push(lease);
            if stopped {
                if let Err(e) = self.revoke_stale(&mut stale, &mut unanswered, &stats).await {
                    debug!(error = %e, "lease not revoked (it expires by itself)");
                }
                return;
            }
        }
    }

    /// One lease's life: campaign (following the current leader meanwhile), then lead
    /// until the lease can no longer be kept. Returns when the lease is lost.
    async fn term(
        &self,
        key: &str,
        lease: Lease,
        advertise: &str,
        role: &watch::Sender<Leadership>,
        stats: &ElectionStats,
    ) {
        let kept = self.keep(lease, stats);
        tokio::pin!(kept);
        let campaign = async {
            let follow = async {
                loop {
                    match self.leader(key).await {
                        Ok(l) => {
                            role.send_if_modified(|r| r.set_following(l));
                        }
                        Err(e) => debug!(error = %e, "leader unknown"),
                    }
                    tokio::time::sleep(lease.ttl / 4).await;
                }
            };
            tokio::select! {
                r = self.campaign(key, lease, advertise) => r,
                () = follow => unreachable!("the follow loop never ends"),
            }
        };
        tokio::select! {
            r = campaign => match r {
                Ok(()) => {
                    info!(key, "elected leader");
                    role.send_if_modified(|r| r.set_leading(advertise));
                }
                Err(e) => {
                    stats.count(Event::BackendError);
                    warn!(error = %e, "campaign failed");
                    return;
                }
            },
            () = &mut kept => {
                warn!("lease lost while campaigning");
                return;
            }
        }
        kept.await;
        warn!(key, "lease lost: no longer leader");
    }

    /// Renews `lease` every third of its TTL; returns when it is gone, or two thirds of
    /// the TTL after the last successful renewal (or the grant) was sent, on the clock,
    /// even while a renewal hangs (etcd may drop the lease before this process would notice
    /// otherwise, and a second leader must never overlap this one).
    async fn keep(&self, lease: Lease, stats: &ElectionStats) {
        let give_up = lease.ttl.mul_f64(2.0 / 3.0);
        let mut renewed = lease.asked;
        loop {
            let until = renewed + give_up;
            tokio::time::sleep_until((Instant::now() + lease.ttl / 3).min(until)).await;
            let sent = Instant::now();
            if sent >= until {
                warn!("no lease renewal for two thirds of the lease");
                return;
            }
            match tokio::time::timeout_at(until, self.keep_alive(lease)).await {
                Ok(Ok(true)) => renewed = sent,
                Ok(Ok(false)) => return,
                Ok(Err(e)) => {
                    stats.count(Event::BackendError);
                    warn!(error = %e, "lease renewal failed");
                }
                Err(_) => {
                    stats.count(Event::BackendError);
                    warn!("lease renewal cut short: two thirds of the lease passed");
                    return;
                }
            }
        }
    }
}

/// An int64 field, which etcd's gateway writes as a JSON string.
fn int_field(v: &Value, name: &str) -> Option<i64> {
    match v.get(name)? {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

fn bad_answer(call: &str, v: &Value) -> ElectionError {
    ElectionError::Backend(format!("etcd {call}: unexpected answer {v}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_int64_fields_written_as_strings_or_numbers() {
        let v = json!({"ID": "7587899295229194501", "TTL": 2});
        assert_eq!(int_field(&v, "ID"), Some(7_587_899_295_229_194_501));
        assert_eq!(int_field(&v, "TTL"), Some(2));
        assert_eq!(int_field(&v, "missing"), None);
    }

    #[test]
    fn refuses_endpoints_other_than_http() {
        assert!(Etcd::new("https://etcd:2379").is_err());
        assert!(Etcd::new("etcd:2379").is_err());
        assert!(Etcd::new("http://127.0.0.1:2379/").is_ok());
    }
}
