//! The tower layer in front of a real tonic server and a real axum router.

use std::net::SocketAddr;
use std::time::Duration;

use grl_client::layer::GrlLayer;
use grl_client::{Client, ClientConfig};
use grl_core::proto::tier_client::TierClient;
use grl_core::proto::tier_server::{Tier, TierServer};
use grl_core::proto::{self, Instruction, Report};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Code, Request, Response, Status, Streaming};

fn bucket(name: &str, caller: &str, procedure: &str) -> proto::BucketRule {
    proto::BucketRule {
        name: name.into(),
        caller: caller.into(),
        procedure: procedure.into(),
        scope: proto::Scope::Global as i32,
        mode: proto::Mode::Deny as i32,
        limit_rps: Some(1.0),
        ..Default::default()
    }
}

/// A client for `service` with two buckets; `limited` gets ratio 1, the other 0.
fn client(service: &str, buckets: [proto::BucketRule; 2], limited: Option<&str>) -> Client {
    let client = Client::new(ClientConfig::new(service, "http://127.0.0.1:1"));
    let names: Vec<String> = buckets.iter().map(|b| b.name.clone()).collect();
    client.apply_instruction(&Instruction {
        config_version: "v1".into(),
        has_config: true,
        config: vec![proto::ServiceRules {
            service: service.into(),
            first_index: None,
            buckets: buckets.into(),
        }],
        ..Default::default()
    });
    set_ratios(&client, service, &names, limited);
    client
}

fn set_ratios(client: &Client, service: &str, names: &[String], limited: Option<&str>) {
    client.apply_instruction(&Instruction {
        ratios: names
            .iter()
            .map(|b| proto::DropRatio {
                service: service.into(),
                bucket: b.clone(),
                ratio: if Some(b.as_str()) == limited {
                    1.0
                } else {
                    0.0
                },
                valid_for_ms: 60_000,
                allowed: None,
            })
            .collect(),
        ..Default::default()
    });
}

struct StatusOnly;

#[tonic::async_trait]
impl Tier for StatusOnly {
    type ExchangeStream = ReceiverStream<Result<Instruction, Status>>;

    async fn exchange(
        &self,
        _: Request<Streaming<Report>>,
    ) -> Result<Response<Self::ExchangeStream>, Status> {
        Err(Status::unimplemented("not here"))
    }

    async fn status(
        &self,
        _: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        Ok(Response::new(proto::StatusResponse {
            zone: "served".into(),
            ..Default::default()
        }))
    }

    async fn explain(
        &self,
        _: Request<proto::ExplainRequest>,
    ) -> Result<Response<proto::ExplainResponse>, Status> {
        Err(Status::unimplemented("a stand-in tier"))
    }
}

async fn serve_tonic(client: Client) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(GrlLayer::new(client))
            .add_service(TierServer::new(StatusOnly))
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    addr
}

async fn call_status(addr: SocketAddr, caller: &str) -> Result<String, Status> {
    let mut c = TierClient::connect(format!("http://{addr}")).await.unwrap();
    let mut req = Request::new(proto::StatusRequest::default());
    req.metadata_mut()
        .insert("rpc-caller", caller.parse().unwrap());
    c.status(req).await.map(|r| r.into_inner().zone)
}

#[tokio::test]
async fn grpc_requests_pass_at_ratio_0_and_get_resource_exhausted_at_ratio_1() {
    let buckets = [
        bucket("gw-status", "gw", "grl.v1.Tier/Status"),
        bucket("web", "web", ""),
    ];
    let names = ["gw-status".to_string(), "web".to_string()];
    let client = client("tier", buckets, None);
    let addr = serve_tonic(client.clone()).await;
    assert_eq!(call_status(addr, "gw").await.unwrap(), "served");
    assert_eq!(call_status(addr, "web").await.unwrap(), "served");

    set_ratios(&client, "tier", &names, Some("gw-status"));
    let refused = call_status(addr, "gw").await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.metadata().get("retry-after").is_some());
    assert_eq!(call_status(addr, "web").await.unwrap(), "served");

    let totals = client.bucket_totals();
    let gw = totals.iter().find(|t| t.bucket == "gw-status").unwrap();
    assert_eq!((gw.offered, gw.dropped), (2, 1));
}

/// One HTTP/1.1 request over a fresh connection: (status, lowercase headers).
async fn http_get(addr: SocketAddr, path: &str, caller: Option<&str>) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let caller = caller.map_or(String::new(), |c| format!("x-caller: {c}\r\n"));
    let req = format!("GET {path} HTTP/1.1\r\nhost: t\r\n{caller}connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&buf).to_lowercase();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    let head = text.split("\r\n\r\n").next().unwrap().to_string();
    (status, head)
}

#[tokio::test]
async fn http_requests_get_429_with_retry_after_in_the_limited_bucket_only() {
    let buckets = [bucket("gw-a", "gw", "a"), bucket("b", "", "b")];
    let names = ["gw-a".to_string(), "b".to_string()];
    let client = client("web", buckets, None);
    let app = axum::Router::new()
        .route("/a", axum::routing::get(|| async { "a" }))
        .route("/b", axum::routing::get(|| async { "b" }))
        .layer(GrlLayer::new(client.clone()).caller_header("x-caller"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    assert_eq!(http_get(addr, "/a", Some("gw")).await.0, 200);
    set_ratios(&client, "web", &names, Some("gw-a"));
    let (status, head) = http_get(addr, "/a", Some("gw")).await;
    assert_eq!(status, 429);
    assert!(head.contains("\r\nretry-after: 1"), "{head}");
    assert!(
        head.contains("\r\ngrl-bucket: web/gw-a\r\n"),
        "names its bucket: {head}"
    );
    // Another caller on /a matches no bucket; /b is in the other bucket.
    assert_eq!(http_get(addr, "/a", Some("web")).await.0, 200);
    assert_eq!(http_get(addr, "/a", None).await.0, 200);
    assert_eq!(http_get(addr, "/b", Some("gw")).await.0, 200);

    set_ratios(&client, "web", &names, Some("b"));
    assert_eq!(http_get(addr, "/a", Some("gw")).await.0, 200);
    assert_eq!(http_get(addr, "/b", None).await.0, 429);
}

/// A client of `web` whose bucket `p` (caller `gw`) has the classes `critical, default,
/// sheddable`; `sheddable` is told ratio 1, the others 0.
fn classed_client() -> Client {
    let client = Client::new(ClientConfig::new("web", "http://127.0.0.1:1"));
    let classes = ["critical", "default", "sheddable"];
    client.apply_instruction(&Instruction {
        config_version: "v1".into(),
        has_config: true,
        config: vec![proto::ServiceRules {
            service: "web".into(),
            first_index: None,
            buckets: classes
                .iter()
                .enumerate()
                .map(|(rank, c)| proto::BucketRule {
                    class_of: "p".into(),
                    class_rank: rank as u32,
                    class_count: 3,
                    class_default: *c == "default",
                    ..bucket(&format!("p#{c}"), "gw", "")
                })
                .collect(),
        }],
        ..Default::default()
    });
    let names: Vec<String> = classes.iter().map(|c| format!("p#{c}")).collect();
    set_ratios(&client, "web", &names, Some("p#sheddable"));
    client
}

#[tokio::test]
async fn the_priority_class_comes_from_an_extension_or_the_grl_priority_header() {
    let client = classed_client();
    let app = axum::Router::new()
        .route("/a", axum::routing::get(|| async { "a" }))
        .route("/prefetch", axum::routing::get(|| async { "p" }))
        .layer(GrlLayer::new(client.clone()).caller_header("x-caller"))
        // An outer layer that knows what a request is sets its class; it runs first.
        .layer(axum::middleware::map_request(
            |mut req: axum::extract::Request| async move {
                if req.uri().path() == "/prefetch" {
                    req.extensions_mut()
                        .insert(grl_client::layer::Priority("sheddable".into()));
                }
                req
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let get = |path: &'static str, class: Option<&'static str>| async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let class = class.map_or(String::new(), |c| format!("grl-priority: {c}\r\n"));
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nx-caller: gw\r\n{class}Connection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        (out[9..12].parse::<u16>().unwrap(), out)
    };
    assert_eq!(get("/a", None).await.0, 200, "no class: the default class");
    assert_eq!(get("/a", Some("critical")).await.0, 200);
    let (status, head) = get("/a", Some("sheddable")).await;
    assert_eq!(status, 429, "{head}");
    assert!(
        head.contains("\r\ngrl-bucket: web/p#sheddable\r\n"),
        "{head}"
    );
    assert_eq!(
        get("/a", Some("bulk")).await.0,
        200,
        "unknown: the default class"
    );
    assert_eq!(
        get("/prefetch", Some("critical")).await.0,
        429,
        "the extension comes first"
    );
    let totals: std::collections::BTreeMap<String, (u64, u64)> = client
        .bucket_totals()
        .into_iter()
        .map(|t| (t.bucket, (t.offered, t.dropped)))
        .collect();
    assert_eq!(totals["p#sheddable"], (2, 2), "{totals:?}");
    assert_eq!(totals["p#default"], (2, 0), "{totals:?}");
    assert_eq!(totals["p#critical"], (1, 0), "{totals:?}");
    assert_eq!(client.status().unknown_classes, 1);
}
