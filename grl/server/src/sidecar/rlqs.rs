//! Envoy's rate limit quota service, v3 (`envoy.service.rate_limit_quota.v3`), answered
//! from the sidecar's client, so that Envoy's `rate_limit_quota` HTTP filter becomes a GRL
//! client: it enforces by itself, reports its usage per bucket, and receives per bucket the
//! rate it may admit, which is this client's share of the GRL bucket.
//!
//! One stream per Envoy. The first report names the domain, which must be the sidecar's
//! `--service`. A report's `BucketId` maps to a (caller, procedure) pair as the rate limit
//! service's descriptors do: the value keyed `caller_key` is the caller, the value keyed
//! `procedure_key` the procedure (normalised like the proxy's). Each usage (allowed +
//! denied) is recorded into the client ([`Client::record`]) as offered load: the tiers see
//! Envoy's traffic like any other client's. The first report of a bucket subscribes to it:
//! the answer to every report carries an assignment for each of its buckets, and between
//! reports the session pushes an assignment whenever the bucket's admission changes
//! (checked every [`PUSH_EVERY`]) and before the last one expires.
//!
//! Assignments ([`strategy`]): no limit in force (no bucket, shadow mode, fail-open) is
//! `ALLOW_ALL`; an allowance of `a` requests per second is `requests_per_time_unit` (`a`
//! per second, or per minute below 1 per second); an allowance under one request a minute
//! is `DENY_ALL`. Each assignment lives for the client's ratio validity, so an Envoy cut off
//! from the sidecar falls back to its filter's `expired_assignment_behavior` (fail open if
//! so configured) as a GRL client does. A report with no domain first, a foreign domain, an
//! empty `BucketId` or more than [`MAX_BUCKETS`] buckets ends the stream with
//! `INVALID_ARGUMENT`; nothing of that report is recorded.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use grl_client::{Admission, Client};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::envoy::quota::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
    rate_limit_quota_response::{BucketAction, bucket_action},
    rate_limit_quota_service_server::{RateLimitQuotaService, RateLimitQuotaServiceServer},
};
use super::envoy::types::{RateLimitStrategy, RateLimitUnit, rate_limit_strategy};
use super::metrics::{RlqsStrategy, SidecarMetrics};

/// How often a session checks its buckets' admission for a change to push.
pub const PUSH_EVERY: Duration = Duration::from_millis(100);

/// The most buckets one stream may subscribe to.
pub const MAX_BUCKETS: usize = 10_000;

/// A relative change of an allowance smaller than this is not pushed (it is sent with the
/// next answer or refresh).
const PUSH_CHANGE: f64 = 0.05;

/// The rate limit quota service of one sidecar.
#[derive(Debug, Clone)]
pub struct Rlqs {
    client: Client,
    caller_key: Arc<str>,
    procedure_key: Arc<str>,
    metrics: Arc<SidecarMetrics>,
}

/// One subscribed bucket of a stream.
struct Subscription {
    id: BucketId,
    caller: String,
    procedure: String,
    /// Envoy's last reported rate (allowed + denied per second), for a ratio-only admission.
    offered: f64,
    sent: Option<(Admission, Instant)>,
}

impl Rlqs {
    /// A service deciding with `client`; bucket id keys `caller_key` and `procedure_key`
    /// name the caller and the procedure.
    pub fn new(
        client: Client,
        caller_key: &str,
        procedure_key: &str,
        metrics: Arc<SidecarMetrics>,
    ) -> Self {
        Self {
            client,
            caller_key: caller_key.into(),
            procedure_key: procedure_key.into(),
            metrics,
        }
    }

    /// The tonic service to add to a server.
    pub fn into_server(self) -> RateLimitQuotaServiceServer<Self> {
        RateLimitQuotaServiceServer::new(self)
            .max_decoding_message_size(4 * 1024 * 1024)
            .max_encoding_message_size(4 * 1024 * 1024)
    }

    /// The (caller, procedure) a bucket id names.
    fn pair(&self, id: &BucketId) -> (String, String) {
        let caller = id
            .bucket
            .get(&*self.caller_key)
            .cloned()
            .unwrap_or_default();
        let procedure = id
            .bucket
            .get(&*self.procedure_key)
            .map(|p| grl_client::layer::procedure_of(p).to_string())
            .unwrap_or_default();
        (caller, procedure)
    }

    /// How long an assignment lives: the client's ratio validity.
    fn ttl(&self) -> Duration {
        let cfg = self.client.config();
        cfg.interval * cfg.expiry_intervals
    }

    /// Checks one report whole against the stream's `domain` (set by the first report).
    fn validate(
        &self,
        r: &RateLimitQuotaUsageReports,
        domain: &mut Option<String>,
        subscribed: usize,
    ) -> Result<(), Status> {
        let service = &self.client.config().service;
        match (domain.as_deref(), r.domain.as_str()) {
            (None, "") => {
                return Err(Status::invalid_argument(format!(
                    "the first usage report has no domain: set the rate_limit_quota filter's domain to the service name ({service:?})"
                )));
            }
            (_, d) if !d.is_empty() && d != service => {
                return Err(Status::invalid_argument(format!(
                    "domain {d:?} is not served here: this sidecar decides for service {service:?}"
                )));
            }
            _ => *domain = Some(service.clone()),
        }
        if let Some(i) = r
            .bucket_quota_usages
            .iter()
            .position(|u| u.bucket_id.as_ref().is_none_or(|b| b.bucket.is_empty()))
        {
            return Err(Status::invalid_argument(format!(
                "usage {i}: the bucket id is empty"
            )));
        }
        if subscribed + r.bucket_quota_usages.len() > MAX_BUCKETS {
            return Err(Status::invalid_argument(format!(
                "more than {MAX_BUCKETS} buckets on one stream"
            )));
        }
        Ok(())
    }

    /// The assignment for one subscribed bucket now, counted in the metrics.
    fn action(&self, sub: &mut Subscription, admission: Admission, now: Instant) -> BucketAction {
        sub.sent = Some((admission, now));
        let (strategy, kind) = strategy(admission, sub.offered);
        self.metrics.rlqs_assignment(kind);
        BucketAction {
            bucket_id: Some(sub.id.clone()),
            bucket_action: Some(bucket_action::BucketAction::QuotaAssignmentAction(
                bucket_action::QuotaAssignmentAction {
                    assignment_time_to_live: prost_types::Duration::try_from(self.ttl()).ok(),
                    rate_limit_strategy: Some(strategy),
                },
            )),
        }
    }

    /// Serves one stream until Envoy closes it, it breaks a rule, or `out` is dropped.
    async fn session(
        self,
        mut reports: Streaming<RateLimitQuotaUsageReports>,
        out: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
    ) {
        let mut domain = None;
        let mut subs: BTreeMap<Vec<(String, String)>, Subscription> = BTreeMap::new();
        let mut tick = tokio::time::interval(PUSH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let now = Instant::now();
            let actions = tokio::select! {
                r = reports.message() => match r {
                    Ok(Some(r)) => match self.validate(&r, &mut domain, subs.len()) {
                        Ok(()) => {
                            self.metrics.rlqs_report(true);
                            self.apply(&r, &mut subs, now)
                        }
                        Err(status) => {
                            self.metrics.rlqs_report(false);
                            let _ = out.send(Err(status)).await;
                            return;
                        }
                    },
                    Ok(None) | Err(_) => return,
                },
                _ = tick.tick() => self.changed(&mut subs, now),
            };
            if !actions.is_empty()
                && out
                    .send(Ok(RateLimitQuotaResponse {
                        bucket_action: actions,
                    }))
                    .await
                    .is_err()
            {
                return;
            }
        }
    }

    /// Records one valid report and returns an assignment for each of its buckets.
    fn apply(
        &self,
        r: &RateLimitQuotaUsageReports,
        subs: &mut BTreeMap<Vec<(String, String)>, Subscription>,
        now: Instant,
    ) -> Vec<BucketAction> {
        let mut actions = Vec::with_capacity(r.bucket_quota_usages.len());
        for u in &r.bucket_quota_usages {
            let Some(id) = &u.bucket_id else { continue };
            let sub = subs.entry(bucket_key(&id.bucket)).or_insert_with(|| {
                let (caller, procedure) = self.pair(id);
                Subscription {
                    id: id.clone(),
                    caller,
                    procedure,
                    offered: 0.0,
                    sent: None,
                }
            });
            let total = u.num_requests_allowed.saturating_add(u.num_requests_denied);
            let elapsed = u
                .time_elapsed
                .and_then(|d| Duration::try_from(d).ok())
                .unwrap_or_default();
            if !elapsed.is_zero() {
                sub.offered = total as f64 / elapsed.as_secs_f64();
            }
            self.client.record(
                &sub.caller,
                &sub.procedure,
                u.num_requests_allowed,
                u.num_requests_denied,
                elapsed,
            );
            let admission = self.client.admission(&sub.caller, &sub.procedure);
            actions.push(self.action(sub, admission, now));
        }
        actions
    }

    /// Assignments for the buckets whose admission changed since it was last sent, or
    /// whose last assignment is past half its life.
    fn changed(
        &self,
        subs: &mut BTreeMap<Vec<(String, String)>, Subscription>,
        now: Instant,
    ) -> Vec<BucketAction> {
        let refresh = self.ttl() / 2;
        let mut actions = Vec::new();
        for sub in subs.values_mut() {
            let admission = self.client.admission(&sub.caller, &sub.procedure);
            let due = match sub.sent {
                None => true,
                Some((before, at)) => now - at >= refresh || moved(before, admission),
            };
            if due {
                actions.push(self.action(sub, admission, now));
            }
        }
        actions
    }
}

/// A bucket id's pairs in a canonical order (Envoy: the order of keys does not matter).
fn bucket_key(bucket: &HashMap<String, String>) -> Vec<(String, String)> {
    let mut key: Vec<_> = bucket.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    key.sort_unstable();
    key
}

/// Whether the admission changed enough to push a new assignment.
fn moved(before: Admission, now: Admission) -> bool {
    match (before, now) {
        (Admission::Unlimited, Admission::Unlimited) => false,
        (Admission::PerSecond(a), Admission::PerSecond(b))
        | (Admission::Ratio(a), Admission::Ratio(b)) => {
            (a - b).abs() > PUSH_CHANGE * a.abs().max(b.abs())
        }
        _ => true,
    }
}

/// The strategy that admits `admission`; `offered` (Envoy's last reported rate) turns a
/// ratio into a rate.
pub fn strategy(admission: Admission, offered: f64) -> (RateLimitStrategy, RlqsStrategy) {
    use rate_limit_strategy::{BlanketRule, RequestsPerTimeUnit, Strategy};
    let per_second = match admission {
        Admission::Unlimited => None,
        Admission::PerSecond(a) => Some(a),
        Admission::Ratio(r) if r >= 1.0 => Some(0.0),
        Admission::Ratio(r) if offered > 0.0 => Some(offered * (1.0 - r)),
        Admission::Ratio(_) => None,
    };
    let (strategy, kind) = match per_second {
        None => (
            Strategy::BlanketRule(BlanketRule::AllowAll as i32),
            RlqsStrategy::AllowAll,
        ),
        Some(a) if a >= 1.0 => (
            Strategy::RequestsPerTimeUnit(RequestsPerTimeUnit {
                requests_per_time_unit: a.round() as u64,
                time_unit: RateLimitUnit::Second as i32,
            }),
            RlqsStrategy::RequestsPerTimeUnit,
        ),
        Some(a) if (a * 60.0).round() >= 1.0 => (
            Strategy::RequestsPerTimeUnit(RequestsPerTimeUnit {
                requests_per_time_unit: (a * 60.0).round() as u64,
                time_unit: RateLimitUnit::Minute as i32,
            }),
            RlqsStrategy::RequestsPerTimeUnit,
        ),
        Some(_) => (
            Strategy::BlanketRule(BlanketRule::DenyAll as i32),
            RlqsStrategy::DenyAll,
        ),
    };
    (
        RateLimitStrategy {
            strategy: Some(strategy),
        },
        kind,
    )
}

type ResponseStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for Rlqs {
    type StreamRateLimitQuotasStream = ResponseStream;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(self.clone().session(request.into_inner(), tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rate_limit_strategy::{BlanketRule, RequestsPerTimeUnit, Strategy};

    fn rule(s: &RateLimitStrategy) -> Strategy {
        s.strategy.unwrap()
    }

    #[test]
    fn admissions_map_to_envoy_strategies() {
        let allow = Strategy::BlanketRule(BlanketRule::AllowAll as i32);
        let deny = Strategy::BlanketRule(BlanketRule::DenyAll as i32);
        let per = |n, unit: RateLimitUnit| {
            Strategy::RequestsPerTimeUnit(RequestsPerTimeUnit {
                requests_per_time_unit: n,
                time_unit: unit as i32,
            })
        };
        let s = |a, offered| rule(&strategy(a, offered).0);
        assert_eq!(s(Admission::Unlimited, 100.0), allow);
        assert_eq!(
            s(Admission::PerSecond(20.4), 0.0),
            per(20, RateLimitUnit::Second)
        );
        assert_eq!(
            s(Admission::PerSecond(0.5), 0.0),
            per(30, RateLimitUnit::Minute)
        );
        assert_eq!(s(Admission::PerSecond(0.001), 0.0), deny);
        assert_eq!(
            s(Admission::Ratio(0.75), 200.0),
            per(50, RateLimitUnit::Second)
        );
        assert_eq!(s(Admission::Ratio(1.0), 200.0), deny);
        assert_eq!(s(Admission::Ratio(0.5), 0.0), allow);
    }

    #[test]
    fn small_moves_are_not_pushed() {
        assert!(!moved(
            Admission::PerSecond(100.0),
            Admission::PerSecond(103.0)
        ));
        assert!(moved(
            Admission::PerSecond(100.0),
            Admission::PerSecond(110.0)
        ));
        assert!(moved(Admission::Unlimited, Admission::PerSecond(110.0)));
        assert!(!moved(Admission::Unlimited, Admission::Unlimited));
    }

    #[test]
    fn bucket_ids_are_the_same_in_any_key_order() {
        let a: HashMap<_, _> = [("a", "1"), ("b", "2")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let b: HashMap<_, _> = [("b", "2"), ("a", "1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(bucket_key(&a), bucket_key(&b));
    }
}
