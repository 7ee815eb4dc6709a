//! The client against a real tonic `Tier` server scripted by the test: reports, ratios,
//! shadow mode, fail-open when the server goes away, reconnection when it comes back.

use std::net::SocketAddr;
use std::time::Duration;

use grl_client::{Client, ClientConfig, Decision};
use grl_core::proto::tier_server::{Tier, TierServer};
use grl_core::proto::{self, Instruction, Report};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

const INTERVAL: Duration = Duration::from_millis(100);

type InstructionTx = mpsc::Sender<Result<Instruction, Status>>;

/// A `Tier` server that forwards every report to the test and hands it, per stream, a
/// sender of instructions.
struct ScriptedTier {
    reports: mpsc::UnboundedSender<Report>,
    streams: mpsc::UnboundedSender<InstructionTx>,
}

#[tonic::async_trait]
impl Tier for ScriptedTier {
    type ExchangeStream = ReceiverStream<Result<Instruction, Status>>;

    async fn exchange(
        &self,
        request: Request<Streaming<Report>>,
    ) -> Result<Response<Self::ExchangeStream>, Status> {
        let mut incoming = request.into_inner();
        let reports = self.reports.clone();
        tokio::spawn(async move {
            while let Ok(Some(r)) = incoming.message().await {
                let _ = reports.send(r);
            }
        });
        let (tx, rx) = mpsc::channel(16);
        let _ = self.streams.send(tx);
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn status(
        &self,
        _: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusResponse>, Status> {
        Ok(Response::new(proto::StatusResponse::default()))
    }

    async fn explain(
        &self,
        _: Request<proto::ExplainRequest>,
    ) -> Result<Response<proto::ExplainResponse>, Status> {
        Err(Status::unimplemented("a stand-in tier"))
    }
}

struct Server {
    addr: SocketAddr,
    reports: mpsc::UnboundedReceiver<Report>,
    streams: mpsc::UnboundedReceiver<InstructionTx>,
    shutdown: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(addr: SocketAddr) -> Server {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (reports_tx, reports) = mpsc::unbounded_channel();
        let (streams_tx, streams) = mpsc::unbounded_channel();
        let (shutdown, stop) = oneshot::channel::<()>();
        let svc = ScriptedTier {
            reports: reports_tx,
            streams: streams_tx,
        };
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(TierServer::new(svc))
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                    let _ = stop.await;
                })
                .await
                .unwrap();
        });
        Server {
            addr,
            reports,
            streams,
            shutdown: Some(shutdown),
            task,
        }
    }

    /// The instruction sender of the next stream a client opens.
    async fn next_stream(&mut self) -> InstructionTx {
        tokio::time::timeout(Duration::from_secs(10), self.streams.recv())
            .await
            .expect("a client connects")
            .unwrap()
    }

    /// Stops accepting, ends every open stream (dropping `open`) and waits until done.
    async fn stop(mut self, open: Vec<InstructionTx>) {
        drop(open);
        let _ = self.shutdown.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops")
            .unwrap();
    }
}

fn client(addr: SocketAddr) -> Client {
    let mut cfg = ClientConfig::new("payments", format!("http://{addr}"));
    cfg.zone = "z1".into();
    cfg.region = "r1".into();
    cfg.interval = INTERVAL;
    cfg.id = "test-client".into();
    Client::new(cfg)
}

fn rule(name: &str, caller: &str, mode: proto::Mode) -> proto::BucketRule {
    proto::BucketRule {
        name: name.into(),
        caller: caller.into(),
        scope: proto::Scope::Global as i32,
        mode: mode as i32,
        limit_rps: Some(10.0),
        ..Default::default()
    }
}

fn config(version: &str) -> Instruction {
    Instruction {
        config_version: version.into(),
        has_config: true,
        config: vec![proto::ServiceRules {
            service: "payments".into(),
            first_index: None,
            buckets: vec![
                rule("a", "alice", proto::Mode::Deny),
                rule("b", "bob", proto::Mode::Deny),
                rule("s", "sam", proto::Mode::Shadow),
            ],
        }],
        interval_ms: INTERVAL.as_millis() as u32,
        ..Default::default()
    }
}

fn ratios(pairs: &[(&str, f64)]) -> Instruction {
    Instruction {
        ratios: pairs
            .iter()
            .map(|(b, r)| proto::DropRatio {
                service: "payments".into(),
                bucket: (*b).into(),
                ratio: *r,
                valid_for_ms: 0,
                allowed: None,
            })
            .collect(),
        ..Default::default()
    }
}

/// Polls `f` every 5 ms until it holds; panics after `limit`.
async fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn connected_with_config(server: &mut Server, client: &Client) -> InstructionTx {
    let tx = server.next_stream().await;
    tx.send(Ok(config("v1"))).await.unwrap();
    eventually(Duration::from_secs(5), "config applied", || {
        client.status().config_version == "v1"
    })
    .await;
    tx
}

#[tokio::test]
async fn reports_carry_per_bucket_rates_every_interval() {
    let mut server = Server::start("127.0.0.1:0".parse().unwrap()).await;
    let client = client(server.addr);
    let task = client.spawn();
    let _tx = connected_with_config(&mut server, &client).await;
    for _ in 0..300 {
        assert_eq!(client.decide("alice", "Pay/Card"), Decision::Allow);
    }
    for _ in 0..100 {
        client.decide("bob", "Pay/Cash");
    }
    client.decide("nobody", "Pay/Cash");

    // The cumulative totals reach what was offered, exactly, in reports urgent or not;
    // they never go back; and the rates say traffic was offered in both buckets (a rate is
    // an average over the time the tiers use the report for, so the rates of a batch
    // offered at once do not add up to its count: the totals do).
    let (mut last_seq, mut with_a, mut with_b) = (0, 0, 0);
    let (mut a_total, mut b_total) = (0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while (a_total, b_total) != (300, 100) || with_a == 0 || with_b == 0 {
        let r = tokio::time::timeout_at(deadline, server.reports.recv())
            .await
            .expect("reports' totals reach what was offered and their rates say so")
            .unwrap();
        assert_eq!(r.reporter_id, "test-client");
        assert_eq!(r.level, proto::Level::Client as i32);
        assert_eq!((r.zone.as_str(), r.region.as_str()), ("z1", "r1"));
        assert_eq!(r.services, vec!["payments".to_string()]);
        assert!(r.seq >= last_seq, "seq goes up");
        last_seq = r.seq;
        assert_eq!(r.interval_ms, 100);
        for rate in &r.rates {
            assert_eq!(r.config_version, "v1");
            assert_eq!(rate.clients, 1);
            assert_eq!(rate.dropped, 0.0);
            assert!(rate.offered >= 0.0 && rate.offered.is_finite(), "{rate:?}");
            match rate.bucket.as_str() {
                "a" => {
                    assert!(rate.offered_total >= a_total, "totals never go back");
                    a_total = rate.offered_total;
                    with_a += usize::from(rate.offered > 0.0);
                }
                "b" => {
                    assert!(rate.offered_total >= b_total, "totals never go back");
                    b_total = rate.offered_total;
                    with_b += usize::from(rate.offered > 0.0);
                }
                "s" => assert_eq!(rate.offered_total, 0),
                other => panic!("unexpected bucket {other:?}"),
            }
        }
    }
    // Reports keep coming every interval even when nothing is offered, with the same
    // totals.
    let before = tokio::time::Instant::now();
    for _ in 0..3 {
        let r = server.reports.recv().await.unwrap();
        for rate in &r.rates {
            let total = match rate.bucket.as_str() {
                "a" => 300,
                "b" => 100,
                _ => 0,
            };
            assert_eq!(rate.offered_total, total, "{rate:?}");
        }
    }
    assert!(before.elapsed() < INTERVAL * 10);
    task.abort();
}

#[tokio::test]
async fn ratios_drop_their_share_and_shadow_only_counts() {
    let mut server = Server::start("127.0.0.1:0".parse().unwrap()).await;
    let client = client(server.addr);
    let task = client.spawn();
    let tx = connected_with_config(&mut server, &client).await;
    tx.send(Ok(ratios(&[("a", 0.5), ("s", 1.0)])))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "ratios applied", || {
        client.status().ratios.get("s") == Some(&1.0)
    })
    .await;

    let drops = (0..20_000)
        .filter(|_| client.decide("alice", "Pay/Card") == Decision::Drop)
        .count();
    assert!(
        (9_400..=10_600).contains(&drops),
        "{drops} of 20000 dropped"
    );
    for _ in 0..1000 {
        assert_eq!(client.decide("sam", "Pay/Card"), Decision::ShadowDrop);
        assert_eq!(client.decide("bob", "Pay/Card"), Decision::Allow);
    }
    let totals = client.bucket_totals();
    let s = totals.iter().find(|t| t.bucket == "s").unwrap();
    assert_eq!((s.offered, s.shadow_dropped, s.dropped), (1000, 1000, 0));
    let a = totals.iter().find(|t| t.bucket == "a").unwrap();
    assert_eq!((a.offered, a.dropped), (20_000, drops as u64));

    // The next reports carry the shadow drops as a cumulative total, exact in every report,
    // urgent or not, and as a rate.
    let (mut with_rate, mut shadow_total) = (0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while shadow_total < 1000 || with_rate == 0 {
        let r = tokio::time::timeout_at(deadline, server.reports.recv())
            .await
            .expect("reports carry the shadow drops as a total and as a rate")
            .unwrap();
        for rate in r.rates.iter().filter(|r| r.bucket == "s") {
            assert_eq!(rate.dropped, 0.0);
            assert!(rate.shadow_dropped_total >= shadow_total);
            with_rate += usize::from(rate.shadow_dropped > 0.0);
            shadow_total = rate.shadow_dropped_total;
        }
    }
    assert_eq!(shadow_total, 1000);
    task.abort();
}

#[tokio::test]
async fn fails_open_when_the_aggregator_goes_and_recovers_when_it_returns() {
    let mut server = Server::start("127.0.0.1:0".parse().unwrap()).await;
    let addr = server.addr;
    let client = client(addr);
    let task = client.spawn();
    let tx = connected_with_config(&mut server, &client).await;
    tx.send(Ok(ratios(&[("a", 1.0)]))).await.unwrap();
    eventually(Duration::from_secs(5), "ratio applied", || {
        client.decide("alice", "Pay/Card") == Decision::Drop
    })
    .await;
    assert!(client.status().connected);
    assert!(!client.status().fail_open);

    let gone = tokio::time::Instant::now();
    server.stop(vec![tx]).await;
    eventually(Duration::from_secs(5), "fail open", || {
        client.status().fail_open && client.decide("alice", "Pay/Card") == Decision::Allow
    })
    .await;
    // 5 intervals of validity from the last instruction, received before the server went.
    assert!(
        gone.elapsed() <= INTERVAL * 5 + Duration::from_millis(300),
        "{:?}",
        gone.elapsed()
    );
    assert!(!client.status().connected);
    let mut text = String::new();
    client.encode_metrics(&mut text);
    assert!(text.contains("grl_client_fail_open{service=\"payments\"} 1"));

    let mut server = Server::start(addr).await;
    let tx = server.next_stream().await;
    tx.send(Ok(ratios(&[("a", 1.0)]))).await.unwrap();
    eventually(Duration::from_secs(5), "new ratio applied", || {
        client.decide("alice", "Pay/Card") == Decision::Drop
    })
    .await;
    let status = client.status();
    assert!(status.connected && !status.fail_open);
    assert_eq!(status.config_version, "v1");
    task.abort();
}

/// The next report the server got, before `deadline`.
async fn next_report(server: &mut Server, deadline: tokio::time::Instant) -> Report {
    tokio::time::timeout_at(deadline, server.reports.recv())
        .await
        .expect("a report before the deadline")
        .unwrap()
}

#[tokio::test]
async fn reports_go_by_name_to_an_older_aggregator_and_by_index_to_a_version_2_one() {
    use grl_core::packed::{self, IndexedRatio, WIRE_VERSION};
    let mut server = Server::start("127.0.0.1:0".parse().unwrap()).await;
    let client = client(server.addr);
    let task = client.spawn();
    // An older aggregator (wire version 0, no first index): rows by name, though the client
    // says it speaks version 2.
    let tx = connected_with_config(&mut server, &client).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = next_report(&mut server, deadline).await;
        assert_eq!(r.wire_version, WIRE_VERSION);
        assert!(r.packed.is_none(), "rows by index to an older aggregator");
        if r.config_version == "v1" && r.rates.len() == 3 {
            break;
        }
    }
    // A version-2 aggregator sends config v2 with the service's first index: rows by index.
    let mut v2 = config("v2");
    v2.config[0].first_index = Some(10);
    v2.wire_version = WIRE_VERSION;
    tx.send(Ok(v2.clone())).await.unwrap();
    let p = loop {
        let r = next_report(&mut server, deadline).await;
        if let Some(p) = r.packed {
            assert!(r.rates.is_empty(), "rows by name beside rows by index");
            break p;
        }
    };
    assert_eq!(p.config_version, "v2");
    let rows = packed::unpack_rows(&p).unwrap();
    assert_eq!(
        rows.iter().map(|r| r.index).collect::<Vec<_>>(),
        [10, 11, 12]
    );
    // Its ratios by index apply: bucket b (index 11) drops everything.
    let ratios = Instruction {
        config_version: "v2".into(),
        wire_version: WIRE_VERSION,
        packed: packed::pack_ratios(
            "v2",
            &[IndexedRatio {
                index: 11,
                ratio: 1.0,
                allowed: None,
                valid_for_ms: 60_000,
            }],
            60_000,
        ),
        valid_for_ms: 60_000,
        ..Default::default()
    };
    tx.send(Ok(ratios)).await.unwrap();
    eventually(Duration::from_secs(5), "ratio by index applied", || {
        client.decide("bob", "Pay/Cash") == Decision::Drop
    })
    .await;
    assert_eq!(client.decide("alice", "Pay/Card"), Decision::Allow);
    task.abort();
}
