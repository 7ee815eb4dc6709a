//! Envoy's rate limit service, v3 (`envoy.service.ratelimit.v3.RateLimitService`), answered
//! from the sidecar's client, so an Envoy or Istio proxy in the same pod delegates to
//! localhost and every decision stays local.
//!
//! `domain` names the service (it must be the sidecar's `--service`). Each descriptor is one
//! request of a (caller, procedure) pair: the caller is the value of the entry keyed
//! `caller_key` (Envoy's `source_cluster` by default), the procedure the value keyed
//! `procedure_key` (`path` by default), normalised like the proxy's and the tower layer's
//! ([`grl_client::layer::procedure_of`]: `/pkg.Svc/Method?q` → `pkg.Svc/Method`); a missing
//! entry is `""`. An entry keyed [`PRIORITY_KEY`] names the request's priority class within
//! its bucket (see `Client::decide_in_class`).
//!
//! A descriptor with N hits (its own `hits_addend`, else the request's, else 1) is N
//! decisions of its pair: N requests' worth of offered load reach the control plane and the
//! metrics, and the first of them answers for the descriptor. The response is `OVER_LIMIT`
//! when any descriptor drew Drop, else `OK`, with one status per descriptor in order;
//! shadow buckets answer `OK` and count their virtual drops. An `OVER_LIMIT` answer carries
//! in `response_headers_to_add` (which Envoy adds to the 429 it sends) the headers the
//! proxy's refusals carry, for the first descriptor that drew Drop: `grl-bucket` and, where
//! its limit can be stated, `RateLimit-Policy` ([`grl_client::RefusingBucket`]). No
//! descriptor's `current_limit` or `limit_remaining` is set: Envoy would turn them into
//! `X-RateLimit-Remaining`, which no single process knows for a global limit. Negative hits (a refund) are
//! answered `OK` and decide nothing: offered load is never taken back. An empty domain, a
//! foreign domain, no descriptors or more than [`MAX_HITS`] hits over the call's descriptors
//! is `INVALID_ARGUMENT`, and then nothing is counted; a foreign domain is echoed cut short
//! ([`names::shown`]), so the error stays small. A caller or procedure longer than a config
//! may name is bounded before it becomes a pair and a label ([`names`]).

use std::sync::Arc;

use grl_client::{Client, Decision, RefusingBucket};
use tonic::{Request, Response, Status};

use super::envoy::envoy::config::core::v3::HeaderValue;
use super::envoy::{
    RateLimitDescriptor, RateLimitRequest, RateLimitResponse,
    rate_limit_response::{Code, DescriptorStatus},
    rate_limit_service_server::{RateLimitService, RateLimitServiceServer},
};
use super::metrics::{Api, RlsAnswer, SidecarMetrics};
use super::names;

/// The descriptor entry naming a request's priority class (as the proxy's header does).
pub const PRIORITY_KEY: &str = grl_client::layer::DEFAULT_PRIORITY_HEADER;

/// The most hits one call may carry over all its descriptors (bounds the work of one call
/// to about 10 ms).
pub const MAX_HITS: u64 = 1_000_000;

/// The rate limit service of one sidecar.
#[derive(Debug, Clone)]
pub struct Rls {
    client: Client,
    caller_key: String,
    procedure_key: String,
    metrics: Arc<SidecarMetrics>,
}

impl Rls {
    /// A service deciding with `client`; descriptor entries keyed `caller_key` and
    /// `procedure_key` name the caller and the procedure.
    pub fn new(
        client: Client,
        caller_key: impl Into<String>,
        procedure_key: impl Into<String>,
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
    pub fn into_server(self) -> RateLimitServiceServer<Self> {
        // A rate limit request is a few descriptors: 1 MiB is generous.
        RateLimitServiceServer::new(self)
            .max_decoding_message_size(1024 * 1024)
            .max_encoding_message_size(1024 * 1024)
    }

    /// The (caller, procedure, priority class) a descriptor names; the class is the entry
    /// [`PRIORITY_KEY`] (`""`: none).
    fn pair<'a>(&self, d: &'a RateLimitDescriptor) -> (&'a str, &'a str, &'a str) {
        let (mut caller, mut procedure, mut class) = ("", "", "");
        for e in &d.entries {
            if e.key == self.caller_key {
                caller = &e.value;
            } else if e.key == self.procedure_key {
                procedure = grl_client::layer::procedure_of(&e.value);
            } else if e.key == PRIORITY_KEY {
                class = &e.value;
            }
        }
        (caller, procedure, class)
    }

    /// Answers one request: validates it whole, then decides every descriptor.
    pub fn decide(&self, r: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let service = &self.client.config().service;
        if r.domain.is_empty() {
            return Err(Status::invalid_argument(format!(
                "domain is empty: set the rate limit filter's domain to the service name ({service:?})"
            )));
        }
        if r.domain != *service {
            return Err(Status::invalid_argument(format!(
                "domain {} is not served here: this sidecar decides for service {service:?}",
                names::shown(&r.domain)
            )));
        }
        if r.descriptors.is_empty() {
            return Err(Status::invalid_argument("no descriptors in the request"));
        }
        let default_hits = u64::from(r.hits_addend.max(1));
        let hits = |d: &RateLimitDescriptor| {
            if d.is_negative_hits {
                0
            } else {
                d.hits_addend.unwrap_or(default_hits)
            }
        };
        let mut total = 0u64;
        for (i, d) in r.descriptors.iter().enumerate() {
            total = total.saturating_add(hits(d));
            if total > MAX_HITS {
                return Err(Status::invalid_argument(format!(
                    "more than the {MAX_HITS} hits one call may carry: {total} by descriptor {i} of {}",
                    r.descriptors.len()
                )));
            }
        }
        let mut over = false;
        let mut refused_by = None;
        let statuses = r
            .descriptors
            .iter()
            .map(|d| {
                let (caller, procedure, class) = self.pair(d);
                if names::is_long(caller, procedure) {
                    self.metrics.long_name(Api::Rls);
                }
                let (caller, procedure) = (names::caller(caller), names::procedure(procedure));
                let decided =
                    self.client
                        .decide_n_explained_in_class(caller, &procedure, class, hits(d));
                let code = if decided.decision == Decision::Drop {
                    over = true;
                    refused_by = refused_by.take().or(decided.refused_by);
                    Code::OverLimit
                } else {
                    Code::Ok
                };
                DescriptorStatus {
                    code: code as i32,
                    ..Default::default()
                }
            })
            .collect();
        Ok(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add: refused_by.as_deref().map_or_else(Vec::new, headers),
            ..Default::default()
        })
    }
}

/// The headers naming the bucket that refused, as Envoy adds them.
fn headers(by: &RefusingBucket) -> Vec<HeaderValue> {
    by.headers()
        .filter_map(|(name, value)| {
            Some(HeaderValue {
                key: name.as_str().to_owned(),
                value: value.to_str().ok()?.to_owned(),
                ..Default::default()
            })
        })
        .collect()
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        match self.decide(request.get_ref()) {
            Ok(res) => {
                self.metrics
                    .rls_answer(if res.overall_code == Code::OverLimit as i32 {
                        RlsAnswer::OverLimit
                    } else {
                        RlsAnswer::Ok
                    });
                Ok(Response::new(res))
            }
            Err(status) => {
                self.metrics.rls_answer(RlsAnswer::InvalidArgument);
                Err(status)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::envoy::rate_limit_descriptor::Entry;
    use super::*;

    fn rls() -> Rls {
        let client = Client::new(grl_client::ClientConfig::new(
            "payments",
            "http://127.0.0.1:1",
        ));
        Rls::new(client, "source_cluster", "path", Arc::default())
    }

    fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn entries_name_caller_and_normalised_procedure() {
        let r = rls();
        let d = descriptor(&[
            ("source_cluster", "gateway"),
            ("other", "x"),
            ("path", "/pay.Pay/Card?x=1"),
        ]);
        assert_eq!(r.pair(&d), ("gateway", "pay.Pay/Card", ""));
        assert_eq!(r.pair(&descriptor(&[("other", "x")])), ("", "", ""));
    }

    #[test]
    fn malformed_requests_are_invalid_and_count_nothing() {
        let r = rls();
        let mut req = RateLimitRequest {
            domain: String::new(),
            descriptors: vec![descriptor(&[("source_cluster", "a")])],
            hits_addend: 0,
        };
        let code = |req: &RateLimitRequest| r.decide(req).unwrap_err().code();
        assert_eq!(code(&req), tonic::Code::InvalidArgument);
        req.domain = "orders".into();
        assert!(
            r.decide(&req)
                .unwrap_err()
                .message()
                .contains("\"payments\"")
        );
        req.domain = "x".repeat(10_000);
        let message = r.decide(&req).unwrap_err().message().to_string();
        assert!(message.len() < 200, "{message}");
        req.domain = "payments".into();
        req.descriptors[0].hits_addend = Some(MAX_HITS + 1);
        assert_eq!(code(&req), tonic::Code::InvalidArgument);
        // The bound is on the call: many descriptors under it each, over it together.
        req.descriptors[0].hits_addend = Some(MAX_HITS / 4);
        req.descriptors = vec![req.descriptors[0].clone(); 5];
        assert!(
            r.decide(&req)
                .unwrap_err()
                .message()
                .contains("by descriptor 4 of 5")
        );
        req.descriptors[4].is_negative_hits = true;
        assert!(r.decide(&req).is_ok());
        assert_eq!(
            r.client
                .bucket_totals()
                .iter()
                .map(|b| b.offered)
                .sum::<u64>(),
            MAX_HITS
        );
        let r = rls();
        req.descriptors.clear();
        assert_eq!(code(&req), tonic::Code::InvalidArgument);
        assert!(r.client.bucket_totals().iter().all(|b| b.offered == 0));
    }

    #[test]
    fn long_callers_and_procedures_count_bounded() {
        let r = rls();
        let caller = "c".repeat(900_000);
        let path = format!("/x.Y/{}", "z".repeat(300_000));
        let req = RateLimitRequest {
            domain: "payments".into(),
            descriptors: vec![descriptor(&[("source_cluster", &caller), ("path", &path)])],
            hits_addend: 0,
        };
        r.decide(&req).unwrap();
        let mut m = String::new();
        r.client.encode_metrics(&mut m);
        assert!(m.len() < 20_000, "{} bytes of metrics", m.len());
        assert!(
            m.contains("caller=\"__overflow__\",procedure=\"x.Y/zzz"),
            "{m}"
        );
        assert_eq!(
            r.metrics
                .render(&r.client)
                .matches("api=\"rls\"} 1")
                .count(),
            1
        );
    }

    #[test]
    fn over_limit_answers_name_the_bucket_that_refused() {
        let r = rls();
        let bucket = |name: &str, caller: &str| grl_core::proto::BucketRule {
            name: name.into(),
            caller: caller.into(),
            scope: grl_core::proto::Scope::Global as i32,
            mode: grl_core::proto::Mode::Deny as i32,
            limit_rps: Some(20.0),
            ..Default::default()
        };
        r.client.apply_instruction(&grl_core::proto::Instruction {
            config_version: "v1".into(),
            has_config: true,
            config: vec![grl_core::proto::ServiceRules {
                service: "payments".into(),
                buckets: vec![bucket("free", "free"), bucket("limited", "limited")],
                first_index: None,
            }],
            ratios: vec![grl_core::proto::DropRatio {
                service: "payments".into(),
                bucket: "limited".into(),
                ratio: 1.0,
                valid_for_ms: 600_000,
                allowed: None,
            }],
            ..Default::default()
        });
        let req = |callers: &[&str]| RateLimitRequest {
            domain: "payments".into(),
            descriptors: callers
                .iter()
                .map(|c| descriptor(&[("source_cluster", c)]))
                .collect(),
            hits_addend: 0,
        };
        let res = r.decide(&req(&["free", "limited", "limited"])).unwrap();
        assert_eq!(res.overall_code, Code::OverLimit as i32);
        let headers: Vec<(&str, &str)> = res
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_str()))
            .collect();
        assert_eq!(
            headers,
            [
                ("grl-bucket", "payments/limited"),
                ("ratelimit-policy", "\"payments/limited\";q=20;w=1"),
            ]
        );
        let res = r.decide(&req(&["free"])).unwrap();
        assert_eq!(res.overall_code, Code::Ok as i32);
        assert!(res.response_headers_to_add.is_empty());
        assert!(res.statuses.iter().all(|s| s.current_limit.is_none()));
    }

    #[test]
    fn a_descriptor_entry_names_the_priority_class() {
        let r = rls();
        let classes = ["critical", "default", "sheddable"];
        r.client.apply_instruction(&grl_core::proto::Instruction {
            config_version: "v1".into(),
            has_config: true,
            config: vec![grl_core::proto::ServiceRules {
                service: "payments".into(),
                buckets: classes
                    .iter()
                    .enumerate()
                    .map(|(rank, c)| grl_core::proto::BucketRule {
                        name: format!("b#{c}"),
                        caller: "gw".into(),
                        scope: grl_core::proto::Scope::Global as i32,
                        mode: grl_core::proto::Mode::Deny as i32,
                        limit_rps: Some(20.0),
                        class_of: "b".into(),
                        class_rank: rank as u32,
                        class_count: 3,
                        class_default: *c == "default",
                        ..Default::default()
                    })
                    .collect(),
                first_index: None,
            }],
            ratios: vec![grl_core::proto::DropRatio {
                service: "payments".into(),
                bucket: "b#sheddable".into(),
                ratio: 1.0,
                valid_for_ms: 600_000,
                allowed: None,
            }],
            ..Default::default()
        });
        let req = |class: &str, hits: u32| RateLimitRequest {
            domain: "payments".into(),
            descriptors: vec![descriptor(&[
                ("source_cluster", "gw"),
                (PRIORITY_KEY, class),
            ])],
            hits_addend: hits,
        };
        for hits in [1, 5] {
            let res = r.decide(&req("sheddable", hits)).unwrap();
            assert_eq!(res.overall_code, Code::OverLimit as i32, "{hits} hits");
            assert_eq!(
                res.response_headers_to_add[0].value, "payments/b#sheddable",
                "{hits} hits"
            );
            for class in ["critical", "default", "", "bulk"] {
                let res = r.decide(&req(class, hits)).unwrap();
                assert_eq!(res.overall_code, Code::Ok as i32, "{class:?}, {hits} hits");
            }
        }
        let offered: std::collections::BTreeMap<String, u64> = r
            .client
            .bucket_totals()
            .into_iter()
            .map(|b| (b.bucket, b.offered))
            .collect();
        assert_eq!(offered["b#sheddable"], 6, "{offered:?}");
        assert_eq!(offered["b#critical"], 6, "{offered:?}");
        assert_eq!(
            offered["b#default"], 18,
            "no class or an unknown one: {offered:?}"
        );
        // The pair's `grl_requests_total` rows count every class, batches too.
        let mut text = String::new();
        r.client.encode_metrics(&mut text);
        let rows: u64 = text
            .lines()
            .filter(|l| l.starts_with("grl_requests_total{") && l.contains("caller=\"gw\""))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum();
        assert_eq!(rows, 30, "{text}");
    }

    #[test]
    fn hits_are_offered_load() {
        let r = rls();
        let mut d = descriptor(&[("source_cluster", "a"), ("path", "/x.Y/Z")]);
        let req = |ds: Vec<RateLimitDescriptor>, hits| RateLimitRequest {
            domain: "payments".into(),
            descriptors: ds,
            hits_addend: hits,
        };
        let res = r.decide(&req(vec![d.clone()], 0)).unwrap();
        assert_eq!(res.overall_code, Code::Ok as i32);
        assert_eq!(res.statuses.len(), 1);
        r.decide(&req(vec![d.clone()], 5)).unwrap();
        d.hits_addend = Some(10);
        let res = r.decide(&req(vec![d.clone(), d.clone()], 5)).unwrap();
        assert_eq!(res.statuses.len(), 2);
        d.is_negative_hits = true;
        r.decide(&req(vec![d], 5)).unwrap();
        let offered: u64 = r.client.bucket_totals().iter().map(|b| b.offered).sum();
        assert_eq!(offered, 1 + 5 + 10 + 10);
    }
}
