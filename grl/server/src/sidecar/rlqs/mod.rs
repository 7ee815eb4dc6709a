//! Envoy's rate limit quota service, v3 (`envoy.service.rate_limit_quota.v3`), answered
//! from the sidecar's client, so that Envoy's `rate_limit_quota` HTTP filter becomes a GRL
//! client: it enforces by itself, reports its usage per bucket, and receives per bucket a
//! token bucket filling at its share of this client's allowance.
//!
//! One stream per Envoy. The first report names the domain, which must be the sidecar's
//! `--service`. A report's `BucketId` maps to a (caller, procedure) pair as the rate limit
//! service's descriptors do: the value keyed `caller_key` is the caller, the value keyed
//! `procedure_key` the procedure (normalised like the proxy's), the value keyed `grl-priority`
//! (`PRIORITY_KEY`) its priority class, if any: the class of a bucket that has classes is
//! reported, measured and assigned as its own bucket. Each usage (allowed +
//! denied) is recorded into the client ([`Client::record`]) as offered load: the tiers see
//! Envoy's traffic like any other client's. The first report of a bucket subscribes to it:
//! the answer to every report carries an assignment for each of its buckets, and between
//! reports the session pushes an assignment whenever a bucket's share moves by more than
//! [`PUSH_CHANGE`] (checked every [`PUSH_EVERY`]) and before the last one expires.
//!
//! Shares ([`shares`]): the client's allowance for the data plane's usage
//! ([`Client::admission`]) is shared over every open stream's Envoy buckets that fall in
//! the same GRL bucket (Envoy opens one stream per filter config), as the tiers share:
//! headroom under the allowance, by offered rate above it, with offered rates measured
//! here between reports (Envoy reports whole seconds only).
//!
//! Assignments ([`strategy`]): no limit in force (no bucket, shadow mode, fail-open) is
//! `ALLOW_ALL`; a share of `a` requests per second is a token bucket refilled at `a` per
//! second (`a × 3600` tokens per hour-long fill interval) holding up to a second's worth (at
//! least one token), the only rate Envoy's filter enforces; a share that rounds to no token
//! an hour is `DENY_ALL`. A share is re-sent unchanged unless it moved by more than
//! [`PUSH_CHANGE`]: Envoy rebuilds a changed token bucket full. Each assignment lives for the
//! client's ratio validity in whole seconds, so an Envoy cut off from the sidecar falls back
//! to its filter's `expired_assignment_behavior` (fail open if so configured) as a GRL client
//! does. A report with no domain first, a foreign domain, an empty `BucketId`, more than
//! [`MAX_USAGE`] requests in one usage or more than [`MAX_BUCKETS`] buckets ends the stream
//! with `INVALID_ARGUMENT`; nothing of that report is recorded. A caller or procedure longer
//! than a config may name is bounded ([`super::names`]). At most `--rlqs-max-streams`
//! ([`DEFAULT_MAX_STREAMS`]) streams are open at once: a stream past it is refused with
//! `RESOURCE_EXHAUSTED` before anything of it is read.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use grl_client::Client;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::warn;

use super::envoy::quota::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
    rate_limit_quota_response::{BucketAction, bucket_action},
    rate_limit_quota_service_server::{RateLimitQuotaService, RateLimitQuotaServiceServer},
};
use super::metrics::{Api, SidecarMetrics};
use super::names;
use super::rls::PRIORITY_KEY;
use crate::net::log_limit::RefusalLog;

mod share;

use share::moved;
pub use share::{PUSH_CHANGE, Share, shares, strategy};

/// How often a session checks its buckets' shares for a change to push.
pub const PUSH_EVERY: Duration = Duration::from_millis(100);

/// The most buckets one stream may subscribe to.
pub const MAX_BUCKETS: usize = 10_000;

/// The most requests one usage may report (2^40: years of a million requests a second).
pub const MAX_USAGE: u64 = 1 << 40;

/// The default of `--rlqs-max-streams`: an Envoy opens one stream per `rate_limit_quota`
/// filter config, so a local Envoy needs a few.
pub const DEFAULT_MAX_STREAMS: u32 = 64;

/// The shortest span an offered rate is measured over.
const MEASURE_OVER: Duration = Duration::from_secs(1);

/// The rate limit quota service of one sidecar.
#[derive(Debug, Clone)]
pub struct Rlqs {
    client: Client,
    caller_key: Arc<str>,
    procedure_key: Arc<str>,
    metrics: Arc<SidecarMetrics>,
    /// Every open stream's buckets, so that a share is split over all of them: Envoy opens
    /// one stream per filter config.
    offers: Offers,
    next_stream: Arc<AtomicU64>,
    /// Streams open now, and the most allowed.
    open: Arc<AtomicUsize>,
    max_streams: usize,
    /// One warning a second about refused streams.
    refusals: Arc<Mutex<RefusalLog>>,
}

/// Per open stream, its buckets' GRL bucket and offered rate.
type Offers = Arc<Mutex<HashMap<u64, Vec<(Option<String>, f64)>>>>;

/// One open stream: counted from before its session starts; removes the stream's offers
/// and uncounts it when its session ends.
struct Registered {
    offers: Offers,
    open: Arc<AtomicUsize>,
    metrics: Arc<SidecarMetrics>,
    stream: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.offers).remove(&self.stream);
        let open = self.open.fetch_sub(1, Ordering::Relaxed) - 1;
        self.metrics.rlqs_open(open);
    }
}

/// Locks the offers; a panic elsewhere leaves them usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One subscribed bucket of a stream.
struct Subscription {
    id: BucketId,
    caller: String,
    procedure: String,
    /// The priority class the bucket id names (`""`: none).
    class: String,
    /// The GRL bucket the pair falls in, refreshed at each report.
    bucket: Option<String>,
    /// When Envoy last reported the bucket, on this sidecar's clock.
    reported_at: Option<Instant>,
    /// Since when usage is summed for the next offered rate, and the sum: a rate is taken
    /// over at least [`MEASURE_OVER`] (Envoy sends a bucket's first usage at once and the
    /// next at its reporting interval, which may come milliseconds later).
    measuring: (Instant, u64),
    /// Envoy's offered rate (allowed + denied per second) over the last measurement.
    offered: f64,
    sent: Option<(Share, Instant)>,
}

/// A bucket id's pairs in a canonical order ([`bucket_key`]).
type Key = Vec<(String, String)>;

type Subscriptions = BTreeMap<Key, Subscription>;

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
            offers: Arc::default(),
            next_stream: Arc::default(),
            open: Arc::default(),
            max_streams: DEFAULT_MAX_STREAMS as usize,
            refusals: Arc::new(Mutex::new(RefusalLog::new(Duration::from_secs(1)))),
        }
    }

    /// At most `n` streams open at once (default [`DEFAULT_MAX_STREAMS`]).
    pub fn max_streams(mut self, n: usize) -> Self {
        self.max_streams = n;
        self
    }

    /// Counts a new stream in, or refuses it when [`Self::max_streams`] are open.
    fn register(&self) -> Result<Registered, Status> {
        let before = self.open.fetch_add(1, Ordering::Relaxed);
        if before >= self.max_streams {
            self.open.fetch_sub(1, Ordering::Relaxed);
            self.metrics.rlqs_stream(false);
            if let Some(unlogged) = lock(&self.refusals).admit(Instant::now()) {
                warn!(
                    open = before,
                    max = self.max_streams,
                    unlogged,
                    "rate limit quota stream refused"
                );
            }
            return Err(Status::resource_exhausted(format!(
                "{before} rate limit quota streams are open, the most this sidecar serves \
                 (--rlqs-max-streams {})",
                self.max_streams
            )));
        }
        self.metrics.rlqs_stream(true);
        self.metrics.rlqs_open(before + 1);
        Ok(Registered {
            offers: self.offers.clone(),
            open: self.open.clone(),
            metrics: self.metrics.clone(),
            stream: self.next_stream.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The tonic service to add to a server.
    pub fn into_server(self) -> RateLimitQuotaServiceServer<Self> {
        RateLimitQuotaServiceServer::new(self)
            .max_decoding_message_size(4 * 1024 * 1024)
            .max_encoding_message_size(4 * 1024 * 1024)
    }

    /// The (caller, procedure) a bucket id names, bounded ([`names`]), and its priority
    /// class (the value keyed [`PRIORITY_KEY`], `""` when none).
    fn pair(&self, id: &BucketId) -> (String, String, String) {
        let caller = id.bucket.get(&*self.caller_key).map_or("", String::as_str);
        let procedure = id
            .bucket
            .get(&*self.procedure_key)
            .map_or("", |p| grl_client::layer::procedure_of(p));
        if names::is_long(caller, procedure) {
            self.metrics.long_name(Api::Rlqs);
        }
        let class = id.bucket.get(PRIORITY_KEY).map_or("", String::as_str);
        (
            names::caller(caller).to_string(),
            names::procedure(procedure).into_owned(),
            names::caller(class).to_string(),
        )
    }

    /// How long an assignment lives: the client's ratio validity, in whole seconds (Envoy
    /// reads only the seconds), at least one.
    fn ttl(&self) -> Duration {
        let cfg = self.client.config();
        let valid = cfg.interval * cfg.expiry_intervals;
        Duration::from_secs(valid.as_secs_f64().ceil().max(1.0) as u64)
    }

    /// Checks one report whole against the stream's `domain` (set by the first report);
    /// the key of each of its usages, in order.
    fn validate(
        &self,
        r: &RateLimitQuotaUsageReports,
        domain: &mut Option<String>,
        subs: &Subscriptions,
    ) -> Result<Vec<Key>, Status> {
        let service = &self.client.config().service;
        match (domain.as_deref(), r.domain.as_str()) {
            (None, "") => {
                return Err(Status::invalid_argument(format!(
                    "the first usage report has no domain: set the rate_limit_quota filter's domain to the service name ({service:?})"
                )));
            }
            (_, d) if !d.is_empty() && d != service => {
                return Err(Status::invalid_argument(format!(
                    "domain {} is not served here: this sidecar decides for service {service:?}",
                    names::shown(d)
                )));
            }
            _ => *domain = Some(service.clone()),
        }
        let mut keys = Vec::with_capacity(r.bucket_quota_usages.len());
        for (i, u) in r.bucket_quota_usages.iter().enumerate() {
            let Some(id) = u.bucket_id.as_ref().filter(|b| !b.bucket.is_empty()) else {
                return Err(Status::invalid_argument(format!(
                    "usage {i}: the bucket id is empty"
                )));
            };
            if u.num_requests_allowed.saturating_add(u.num_requests_denied) > MAX_USAGE {
                return Err(Status::invalid_argument(format!(
                    "usage {i}: more than {MAX_USAGE} requests in one report"
                )));
            }
            keys.push(bucket_key(&id.bucket));
        }
        let new = keys.iter().filter(|k| !subs.contains_key(*k)).count();
        if subs.len() + new > MAX_BUCKETS {
            return Err(Status::invalid_argument(format!(
                "more than {MAX_BUCKETS} buckets on one stream"
            )));
        }
        Ok(keys)
    }

    /// Serves one stream until Envoy closes it, it breaks a rule, or `out` is dropped.
    async fn session(
        self,
        registered: Registered,
        mut reports: Streaming<RateLimitQuotaUsageReports>,
        out: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
    ) {
        let stream = registered.stream;
        // A local: dropped (the stream uncounted) before `out`, whose drop ends the stream.
        let _registered = registered;
        let mut domain = None;
        let mut subs = Subscriptions::new();
        let mut tick = tokio::time::interval(PUSH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let actions = tokio::select! {
                r = reports.message() => match r {
                    Ok(Some(r)) => match self.validate(&r, &mut domain, &subs) {
                        Ok(keys) => {
                            self.metrics.rlqs_report(true);
                            self.apply(&r, keys, &mut subs, stream, Instant::now())
                        }
                        Err(status) => {
                            self.metrics.rlqs_report(false);
                            let _ = out.send(Err(status)).await;
                            return;
                        }
                    },
                    Ok(None) | Err(_) => return,
                },
                _ = tick.tick() => self.assign(&mut subs, stream, Instant::now(), |_, _| false),
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

    /// Records one valid report (its usages' `keys` from [`Self::validate`]) and returns an
    /// assignment for each of its buckets.
    fn apply(
        &self,
        r: &RateLimitQuotaUsageReports,
        keys: Vec<Key>,
        subs: &mut Subscriptions,
        stream: u64,
        now: Instant,
    ) -> Vec<BucketAction> {
        let mut reported = Vec::with_capacity(r.bucket_quota_usages.len());
        for (u, key) in r.bucket_quota_usages.iter().zip(keys) {
            let Some(id) = &u.bucket_id else { continue };
            let sub = subs.entry(key.clone()).or_insert_with(|| {
                let (caller, procedure, class) = self.pair(id);
                Subscription {
                    id: id.clone(),
                    caller,
                    procedure,
                    class,
                    bucket: None,
                    reported_at: None,
                    measuring: (now, 0),
                    offered: 0.0,
                    sent: None,
                }
            });
            let total = u.num_requests_allowed.saturating_add(u.num_requests_denied);
            let since = sub.reported_at.map(|t| now - t).filter(|d| !d.is_zero());
            if since.is_some() {
                let (from, sum) = &mut sub.measuring;
                *sum += total;
                if now - *from >= MEASURE_OVER {
                    sub.offered = *sum as f64 / (now - *from).as_secs_f64();
                    sub.measuring = (now, 0);
                }
            }
            sub.reported_at = Some(now);
            sub.bucket = self
                .client
                .bucket_in_class(&sub.caller, &sub.procedure, &sub.class);
            let elapsed = since.unwrap_or_else(|| self.client.config().interval);
            self.client.record_in_class(
                &sub.caller,
                &sub.procedure,
                &sub.class,
                u.num_requests_allowed,
                u.num_requests_denied,
                elapsed,
            );
            reported.push(key);
        }
        reported.sort_unstable();
        self.assign(subs, stream, now, |key, _| {
            reported.binary_search(key).is_ok()
        })
    }

    /// Assignments for the buckets that `always` selects, whose share moved by more than
    /// [`PUSH_CHANGE`] since it was last sent, or whose last assignment is past half its
    /// life. A share that did not move that much is sent as it was last sent, so that Envoy
    /// keeps its token bucket (it rebuilds a changed one full). Shares are split over every
    /// stream's buckets of a GRL bucket; admissions are read once per GRL bucket.
    fn assign(
        &self,
        subs: &mut Subscriptions,
        stream: u64,
        now: Instant,
        always: impl Fn(&Key, &Subscription) -> bool,
    ) -> Vec<BucketAction> {
        let refresh = self.ttl() / 2;
        let list: Vec<_> = subs.iter_mut().collect();
        let mut groups: HashMap<Option<String>, (Vec<usize>, Vec<f64>)> = HashMap::new();
        {
            let mut offers = lock(&self.offers);
            offers.insert(
                stream,
                list.iter()
                    .map(|(_, sub)| (sub.bucket.clone(), sub.offered))
                    .collect(),
            );
            for (i, (_, sub)) in list.iter().enumerate() {
                let g = groups.entry(sub.bucket.clone()).or_default();
                g.0.push(i);
                g.1.push(sub.offered);
            }
            let others = offers.iter().filter(|(s, _)| **s != stream);
            for (bucket, offered) in others.flat_map(|(_, rows)| rows) {
                if let Some(g) = groups.get_mut(bucket) {
                    g.1.push(*offered);
                }
            }
        }
        let mut share = vec![Share::All; list.len()];
        for (members, offered) in groups.values() {
            let first = &list[members[0]].1;
            let admission =
                self.client
                    .admission_in_class(&first.caller, &first.procedure, &first.class);
            for (&i, s) in members.iter().zip(shares(admission, offered)) {
                share[i] = s;
            }
        }
        let mut actions = Vec::new();
        for (i, (key, sub)) in list.into_iter().enumerate() {
            let send = match sub.sent {
                None => Some(share[i]),
                Some((before, _)) if moved(before, share[i]) => Some(share[i]),
                Some((before, at)) if always(key, sub) || now - at >= refresh => Some(before),
                Some(_) => None,
            };
            let Some(send) = send else { continue };
            sub.sent = Some((send, now));
            let (strategy, kind) = strategy(send);
            self.metrics.rlqs_assignment(kind);
            actions.push(BucketAction {
                bucket_id: Some(sub.id.clone()),
                bucket_action: Some(bucket_action::BucketAction::QuotaAssignmentAction(
                    bucket_action::QuotaAssignmentAction {
                        assignment_time_to_live: prost_types::Duration::try_from(self.ttl()).ok(),
                        rate_limit_strategy: Some(strategy),
                    },
                )),
            });
        }
        actions
    }
}

/// A bucket id's pairs in a canonical order (Envoy: the order of keys does not matter).
fn bucket_key(bucket: &HashMap<String, String>) -> Key {
    let mut key: Vec<_> = bucket.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    key.sort_unstable();
    key
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
        let registered = self.register()?;
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(self.clone().session(registered, request.into_inner(), tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
