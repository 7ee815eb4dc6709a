//! The sidecar's cost, measured against a direct call to the same upstream on this machine:
//! a real hyper upstream (HTTP/1.1), a real controller and aggregator in this process, and the
//! `grl sidecar` binary as its own process.
//!
//! 1. Added latency at a fixed rate: an open-loop generator sends `RATE` requests/s (default
//!    2,000) over a pool of keep-alive connections, timing each from its *scheduled* send
//!    time (no coordinated omission) and from its actual send (service time: tokio's timer
//!    wakes the generator up to a millisecond late, which the first figure includes for both
//!    paths alike), in `ROUNDS` rounds alternating direct and sidecar (`SECONDS` each);
//!    prints p50/p99/p99.9 per round and the median over rounds. Then the same with the
//!    paced generator of section 3 (one connection, one request in flight, evenly spaced),
//!    which takes the millisecond timer's bunching out of both paths.
//! 2. Saturation: `CONCURRENCY` (32) closed-loop workers for `SECONDS`, direct then sidecar,
//!    alternating `ROUNDS` times; prints requests/s and the ratio sidecar/direct.
//! 3. The Envoy rate limit service: `ShouldRateLimit` at `RATE`/s, one descriptor per call,
//!    over one HTTP/2 connection; prints p50/p99/p99.9, from scheduled and actual send.
//!    The lean client (one hyper HTTP/2 connection, as Envoy holds one) is paced on a
//!    thread of its own: evenly spaced calls, one in flight, so that the generator does not
//!    bunch calls the way a millisecond timer does (two due per tick at 2,000/s). The same
//!    client measures two floors in alternating rounds, do-nothing servers on their own
//!    thread (a tonic `RateLimitService` answering `OK`, and hyper's HTTP/2 server alone):
//!    what the gRPC stack itself costs on this machine. tonic's `Channel` is measured too,
//!    from section 1's open loop.
//!
//! 4. Beside nginx ([`beside_nginx`]): nginx's `proxy_pass` and the sidecar in front of the
//!    same nginx upstream, loaded by the same `wrk`, with one worker each and then two; the
//!    sidecar also refusing half and all of its requests. Needs `nginx` and `wrk`.
//!
//! `cargo bench -p grl --bench sidecar` (release build). Env: RATE, SECONDS, ROUNDS,
//! CONCURRENCY; `ONLY_RLS=1` runs section 3 alone, `ONLY_NGINX=1` section 4 alone;
//! `SIDECAR_BIN=<path>` runs section 4 with another build's `grl` (before and after). A value that does not parse, or a zero,
//! is refused (exit 2). With `GRL_FIGURES_OUT=<file>` (and all three sections run) the
//! figures also go to that file as the headline row `sidecar` (see `common/figures_out.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use grl::sidecar::envoy::rate_limit_descriptor::Entry;
use grl::sidecar::envoy::rate_limit_service_client::RateLimitServiceClient;
use grl::sidecar::envoy::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use grl::sidecar::envoy::{RateLimitDescriptor, RateLimitRequest};
use grl::tier::aggregator::{self, AggregatorOptions};
use grl::tier::controller::{self, ConfigSource, ControllerOptions};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio_stream::StreamExt;

const CONFIG: &str = "service: payments
buckets:
  - name: gateway-pay
    match: { caller: gateway }
    scope: global
    mode: deny
    policy: { kind: fixed, rps: 1000000 }
";

#[path = "common/figures_out.rs"]
mod figures_out;

mod beside_nginx;

fn env(name: &str, dflt: u64) -> u64 {
    let v = figures_out::env_size(name, dflt);
    if v == 0 && name != "ONLY_RLS" {
        figures_out::refuse(&format!("{name}=0: at least 1"));
    }
    v
}

/// p50, p99, p99.9 in microseconds.
fn percentiles(mut ns: Vec<u64>) -> [f64; 3] {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() as f64 * q) as usize).min(ns.len() - 1)] as f64 / 1000.0;
    [at(0.50), at(0.99), at(0.999)]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Serves on a loopback port from its own thread and current-thread runtime: `serve` gets
/// the listener. Returns the address.
fn on_own_thread<F, Fut>(serve: F) -> std::net::SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move { serve(tokio::net::TcpListener::from_std(l).unwrap()).await });
    });
    addr
}

/// The upstream: HTTP/1.1, answers every request with a 2-byte body, on its own thread.
fn upstream() -> std::net::SocketAddr {
    on_own_thread(|l| async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                        Bytes::from_static(b"ok"),
                    )))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    })
}

type Http = HttpClient<HttpConnector, Empty<Bytes>>;

fn http_client() -> Http {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    HttpClient::builder(TokioExecutor::new())
        .pool_max_idle_per_host(256)
        .build(c)
}

async fn get(client: &Http, uri: &http::Uri) -> bool {
    let req = http::Request::get(uri.clone())
        .header("rpc-caller", "gateway")
        .body(Empty::new())
        .unwrap();
    match client.request(req).await {
        Ok(res) => {
            let ok = res.status().is_success();
            ok && res.into_body().collect().await.is_ok()
        }
        Err(_) => false,
    }
}

/// One open-loop run's latencies in nanoseconds: from each request's scheduled send time
/// (what a caller waits, generator lateness included: tokio's timer wakes at millisecond
/// granularity) and from its actual send (the path's own service time), and the failures.
struct Latencies {
    scheduled: Vec<u64>,
    service: Vec<u64>,
    failed: u64,
}

/// Open loop: `rate` requests/s for `secs`.
async fn fixed_rate<F, Fut>(rate: u64, secs: u64, call: F) -> Latencies
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let n = rate * secs;
    let gap = Duration::from_nanos(1_000_000_000 / rate);
    let start = tokio::time::Instant::now() + Duration::from_millis(10);
    let mut handles = Vec::with_capacity(n as usize);
    for i in 0..n {
        let due = start + gap * i as u32;
        tokio::time::sleep_until(due).await;
        let fut = call();
        handles.push(tokio::spawn(async move {
            let sent = Instant::now();
            let ok = fut.await;
            (
                due.elapsed().as_nanos() as u64,
                sent.elapsed().as_nanos() as u64,
                ok,
            )
        }));
    }
    let mut l = Latencies {
        scheduled: Vec::with_capacity(n as usize),
        service: Vec::with_capacity(n as usize),
        failed: 0,
    };
    for h in handles {
        let (scheduled, service, ok) = h.await.unwrap();
        l.scheduled.push(scheduled);
        l.service.push(service);
        l.failed += u64::from(!ok);
    }
    l
}

/// Closed loop: `conc` workers as fast as they can for `secs`; requests/s.
async fn saturate(client: &Http, uri: &http::Uri, conc: u64, secs: u64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..conc)
        .map(|_| {
            let (client, uri, stop, done) =
                (client.clone(), uri.clone(), stop.clone(), done.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if get(&client, &uri).await {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (t0, n0) = (Instant::now(), done.load(Ordering::Relaxed));
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let rps = (done.load(Ordering::Relaxed) - n0) as f64 / t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    rps
}

/// The one-descriptor request every `ShouldRateLimit` call of the bench sends.
fn rls_request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "payments".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![
                Entry {
                    key: "source_cluster".into(),
                    value: "gateway".into(),
                },
                Entry {
                    key: "path".into(),
                    value: "/pay.Pay/Card".into(),
                },
            ],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// A gRPC length-prefixed message frame.
fn grpc_frame(m: &impl prost::Message) -> Bytes {
    let body = m.encode_to_vec();
    let mut frame = Vec::with_capacity(5 + body.len());
    frame.push(0);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame.into()
}

/// A lean gRPC client, closer to what Envoy does than tonic's `Channel`: one HTTP/2
/// connection, requests sent on it straight from the caller's task (no pool, no buffer task).
struct LeanGrpc {
    send: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    uri: http::Uri,
}

impl LeanGrpc {
    async fn connect(addr: std::net::SocketAddr) -> Self {
        let s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.set_nodelay(true).unwrap();
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s))
                .await
                .unwrap();
        tokio::spawn(conn);
        let uri =
            format!("http://{addr}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
                .parse()
                .unwrap();
        Self { send, uri }
    }

    /// One call; whether it answered with grpc-status 0 and a well-formed response.
    async fn should_rate_limit(&self, frame: Bytes) -> bool {
        let req = http::Request::post(self.uri.clone())
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(frame))
            .unwrap();
        let Ok(res) = self.send.clone().send_request(req).await else {
            return false;
        };
        let Ok(body) = res.into_body().collect().await else {
            return false;
        };
        let ok = body
            .trailers()
            .and_then(|t| t.get("grpc-status"))
            .is_some_and(|s| s == "0");
        let bytes = body.to_bytes();
        ok && bytes.len() >= 5
            && <grl::sidecar::envoy::RateLimitResponse as prost::Message>::decode(&bytes[5..])
                .is_ok()
    }
}

/// A do-nothing `RateLimitService` (answers `OK` at once) on its own thread: the floor of a
/// gRPC call on this machine, which the sidecar's figure is compared with.
fn floor_rls() -> std::net::SocketAddr {
    #[derive(Default)]
    struct Ok;
    #[tonic::async_trait]
    impl RateLimitService for Ok {
        async fn should_rate_limit(
            &self,
            _: tonic::Request<RateLimitRequest>,
        ) -> Result<tonic::Response<grl::sidecar::envoy::RateLimitResponse>, tonic::Status>
        {
            Result::Ok(tonic::Response::new(Default::default()))
        }
    }
    on_own_thread(|l| async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(l).map(|s| {
            s.inspect(|s| {
                let _ = s.set_nodelay(true);
            })
        });
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(Ok))
            .serve_with_incoming(incoming)
            .await
            .unwrap();
    })
}

/// A do-nothing gRPC answer served by hyper's HTTP/2 server alone (no tonic), on its own
/// thread: what the HTTP/2 stack costs without any gRPC framework.
fn floor_h2() -> std::net::SocketAddr {
    on_own_thread(|l| async move {
        let answer = grpc_frame(&grl::sidecar::envoy::RateLimitResponse::default());
        loop {
            let (s, _) = l.accept().await.unwrap();
            let _ = s.set_nodelay(true);
            let answer = answer.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let answer = answer.clone();
                        async move {
                            let _ = req.into_body().collect().await;
                            let mut trailers = http::HeaderMap::new();
                            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                            let body =
                                Full::new(answer).with_trailers(async move { Some(Ok(trailers)) });
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .header("content-type", "application/grpc")
                                    .body(body)
                                    .unwrap(),
                            )
                        }
                    });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    })
}

/// What a paced generator calls: `ShouldRateLimit` on a lean gRPC connection, or a GET of
/// a URI over one HTTP/1.1 keep-alive connection.
enum Target {
    Rls(std::net::SocketAddr),
    Get(http::Uri),
}

/// A connection of a paced generator to its [`Target`].
enum Caller {
    Rls(LeanGrpc, Bytes),
    Get(
        hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
        http::Uri,
    ),
}

impl Caller {
    async fn connect(target: Target) -> Self {
        match target {
            Target::Rls(addr) => {
                Self::Rls(LeanGrpc::connect(addr).await, grpc_frame(&rls_request()))
            }
            Target::Get(uri) => {
                let s = tokio::net::TcpStream::connect(uri.authority().unwrap().as_str())
                    .await
                    .unwrap();
                s.set_nodelay(true).unwrap();
                let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
                    .await
                    .unwrap();
                tokio::spawn(conn);
                Self::Get(send, uri)
            }
        }
    }

    /// One call; whether it succeeded.
    async fn call(&mut self) -> bool {
        match self {
            Self::Rls(lean, frame) => lean.should_rate_limit(frame.clone()).await,
            Self::Get(send, uri) => {
                let req = http::Request::get(uri.path())
                    .header("host", uri.authority().unwrap().as_str())
                    .header("rpc-caller", "gateway")
                    .body(Empty::new())
                    .unwrap();
                if send.ready().await.is_err() {
                    return false;
                }
                match send.send_request(req).await {
                    Ok(res) => res.status().is_success() && res.into_body().collect().await.is_ok(),
                    Err(_) => false,
                }
            }
        }
    }
}

/// A paced open loop on a thread of its own: call `i` is due at `i / rate` s; the thread
/// sleeps until then, makes the call over one connection of its own current-thread runtime
/// and waits for the answer. Evenly spaced, one call in flight (at 2,000 rps a call that
/// takes over 500 µs delays the next, and the figure from the scheduled send counts that):
/// the generator adds no bunching of its own.
async fn paced(target: Target, rate: u64, secs: u64) -> Latencies {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut caller = rt.block_on(Caller::connect(target));
        let n = rate * secs;
        let gap = Duration::from_nanos(1_000_000_000 / rate);
        let mut l = Latencies {
            scheduled: Vec::with_capacity(n as usize),
            service: Vec::with_capacity(n as usize),
            failed: 0,
        };
        let start = Instant::now() + Duration::from_millis(10);
        for i in 0..n {
            let due = start + gap * i as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let sent = Instant::now();
            let ok = rt.block_on(caller.call());
            l.service.push(sent.elapsed().as_nanos() as u64);
            l.scheduled.push(due.elapsed().as_nanos() as u64);
            l.failed += u64::from(!ok);
        }
        let _ = tx.send(l);
    });
    rx.await.expect("the paced generator's thread")
}

/// Prints one round of one path as a row of section 1's table; returns its percentiles from
/// the scheduled and from the actual send.
fn print_row(round: u64, name: &str, l: Latencies, suffix: &str) -> ([f64; 3], [f64; 3]) {
    let failed = l.failed;
    let (p, q) = (percentiles(l.scheduled), percentiles(l.service));
    println!(
        "{round:>5}  {name:<7} {:>6.0} {:>7.0} {:>7.0} {:>7.0} {:>7.0} {:>7.0}  {failed}{suffix}",
        p[0], p[1], p[2], q[0], q[1], q[2]
    );
    (p, q)
}

/// Prints the medians over rounds of `results[path][kind]` (path 0 direct, 1 sidecar; kind
/// 0 from the scheduled send, 1 from the actual send) and the sidecar's added latency;
/// returns, per kind, the medians `[direct p50, direct p99, sidecar p50, sidecar p99]`.
fn print_added(results: &[[Vec<[f64; 3]>; 2]; 2], label: &str) -> [[f64; 4]; 2] {
    let mut out = [[0.0; 4]; 2];
    for (kind, what) in ["from scheduled send", "from actual send"]
        .iter()
        .enumerate()
    {
        let med = |i: usize, k: usize| median(results[i][kind].iter().map(|p| p[k]).collect());
        println!(
            "median over rounds, {label}{what}: direct p50 {:.0} p99 {:.0}; sidecar p50 {:.0} p99 {:.0}; added p50 {:.0} µs, p99 {:.0} µs",
            med(0, 0),
            med(0, 1),
            med(1, 0),
            med(1, 1),
            med(1, 0) - med(0, 0),
            med(1, 1) - med(0, 1)
        );
        out[kind] = [med(0, 0), med(0, 1), med(1, 0), med(1, 1)];
    }
    out
}

/// Prints one round's figures under `name`; returns its p99 from the actual send (µs).
fn print_round(name: &str, round: u64, l: Latencies) -> f64 {
    let failed = l.failed;
    let (p, q) = (percentiles(l.scheduled), percentiles(l.service));
    println!(
        "{name:<14} round {round}: from scheduled send p50 {:.0} p99 {:.0}; from actual send p50 {:.0} p99 {:.0} p99.9 {:.0}; failed {failed}",
        p[0], p[1], q[0], q[1], q[2]
    );
    q[1]
}

/// `rounds` open-loop runs of `call` at `rate`/s; prints each and returns the p99s (µs)
/// from the actual send.
async fn rls_rounds<F, Fut>(name: &str, rate: u64, secs: u64, rounds: u64, call: F) -> Vec<f64>
where
    F: Fn() -> Fut + Clone,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    fixed_rate(rate, 1, call.clone()).await;
    let mut p99 = Vec::new();
    for round in 1..=rounds {
        p99.push(print_round(
            name,
            round,
            fixed_rate(rate, secs, call.clone()).await,
        ));
    }
    p99
}

struct Proc(std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let rate = env("RATE", 2000);
    let secs = env("SECONDS", 5);
    let rounds = env("ROUNDS", 3);
    let only_rls = env("ONLY_RLS", 0) == 1;
    let only_nginx = env("ONLY_NGINX", 0) == 1;
    let conc = env("CONCURRENCY", 32);

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("services")).unwrap();
    std::fs::write(dir.path().join("services/payments.yaml"), CONFIG).unwrap();
    std::fs::write(
        dir.path().join("services/orders.yaml"),
        beside_nginx::CONFIG,
    )
    .unwrap();
    let interval = Duration::from_millis(1000);
    let (ctl, _) = controller::start(
        ControllerOptions {
            region: "eu".into(),
            parents: Vec::new(),
            election: None,
            interval,
            config: ConfigSource::Dir(dir.path().to_path_buf()),
            poll: Duration::from_secs(5),
            security: Default::default(),
        },
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        None,
    )
    .await
    .unwrap();
    let agg = aggregator::start(
        AggregatorOptions {
            zone: "a".into(),
            region: "eu".into(),
            controllers: vec![ctl.addr.to_string()],
            interval,
            security: Default::default(),
        },
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        None,
    )
    .unwrap();

    if only_nginx {
        beside_nginx_section(&agg.addr.to_string(), secs, rounds).await;
        return;
    }
    let up = upstream();
    let (sp, rp) = (
        test_support::ports::free_port(),
        test_support::ports::free_port(),
    );
    let _sidecar = Proc(
        std::process::Command::new(env!("CARGO_BIN_EXE_grl"))
            .args(["sidecar", "--listen", &format!("127.0.0.1:{sp}")])
            .args(["--upstream", &format!("http://{up}")])
            .args(["--service", "payments", "--zone", "a", "--region", "eu"])
            .args(["--aggregator", &agg.addr.to_string()])
            .args(["--rls-listen", &format!("127.0.0.1:{rp}")])
            .env("RUST_LOG", "warn")
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the grl binary"),
    );
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", sp)).is_err()
        || std::net::TcpStream::connect(("127.0.0.1", rp)).is_err()
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "sidecar did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let direct: http::Uri = format!("http://{up}/pay.Pay/Card").parse().unwrap();
    let via: http::Uri = format!("http://127.0.0.1:{sp}/pay.Pay/Card")
        .parse()
        .unwrap();
    let client = http_client();
    // Warm up both paths (connections, the sidecar's pool, the client's pair table).
    for uri in [&direct, &via] {
        let c = client.clone();
        let u = uri.clone();
        fixed_rate(rate, 1, move || {
            let (c, u) = (c.clone(), u.clone());
            async move { get(&c, &u).await }
        })
        .await;
    }

    // (open loop, paced, saturation ratio) when sections 1 and 2 ran.
    let mut http_figures = None;
    if !only_rls {
        println!("== added latency at {rate} rps, {rounds} rounds x {secs} s per path (µs) ==");
        println!("                 from scheduled send      from actual send");
        println!("round  path     p50     p99   p99.9     p50     p99   p99.9  failed");
        // results[path][kind]: kind 0 = from scheduled send, 1 = from actual send.
        let mut results: [[Vec<[f64; 3]>; 2]; 2] = Default::default();
        for round in 1..=rounds {
            for (i, (name, uri)) in [("direct", &direct), ("sidecar", &via)]
                .into_iter()
                .enumerate()
            {
                let c = client.clone();
                let u = uri.clone();
                let l = fixed_rate(rate, secs, move || {
                    let (c, u) = (c.clone(), u.clone());
                    async move { get(&c, &u).await }
                })
                .await;
                let (p, q) = print_row(round, name, l, "");
                results[i][0].push(p);
                results[i][1].push(q);
            }
        }
        let open = print_added(&results, "");
        println!("paced: one call in flight, evenly spaced, on a thread of its own (as section 3)");
        let mut paced_results: [[Vec<[f64; 3]>; 2]; 2] = Default::default();
        for uri in [&direct, &via] {
            paced(Target::Get(uri.clone()), rate, 1).await;
        }
        for round in 1..=rounds {
            for (i, (name, uri)) in [("direct", &direct), ("sidecar", &via)]
                .into_iter()
                .enumerate()
            {
                let l = paced(Target::Get(uri.clone()), rate, secs).await;
                let (p, q) = print_row(round, name, l, "  paced");
                paced_results[i][0].push(p);
                paced_results[i][1].push(q);
            }
        }
        let paced_added = print_added(&paced_results, "paced, ");

        println!(
            "\n== saturation, {conc} closed-loop workers, {rounds} rounds x {secs} s per path =="
        );
        let mut ratios = Vec::new();
        for round in 1..=rounds {
            let d = saturate(&client, &direct, conc, secs).await;
            let s = saturate(&client, &via, conc, secs).await;
            println!(
                "round {round}: direct {d:.0} rps, sidecar {s:.0} rps, ratio {:.2}",
                s / d
            );
            ratios.push(s / d);
        }
        let ratio = median(ratios);
        println!("median ratio sidecar/direct: {ratio:.2}");
        http_figures = Some((open, paced_added, ratio));
    }
    println!("\n== ShouldRateLimit at {rate} rps, {rounds} rounds x {secs} s (µs) ==");
    println!(
        "lean: one hyper HTTP/2 connection (as Envoy holds one), paced on a thread of its own, one call in flight"
    );
    println!(
        "floors: the lean client against do-nothing servers on their own thread (tonic, bare hyper HTTP/2)"
    );
    println!("tonic: tonic's Channel, sent from the tokio-timer open loop of section 1");
    let targets = [
        ("floor tonic", floor_rls()),
        ("floor h2", floor_h2()),
        ("sidecar lean", format!("127.0.0.1:{rp}").parse().unwrap()),
    ];
    for (_, addr) in targets {
        paced(Target::Rls(addr), rate, 1).await;
    }
    let mut p99s: Vec<(&str, Vec<f64>)> = targets.iter().map(|(n, _)| (*n, Vec::new())).collect();
    for round in 1..=rounds {
        for (i, (name, addr)) in targets.into_iter().enumerate() {
            let p99 = print_round(name, round, paced(Target::Rls(addr), rate, secs).await);
            p99s[i].1.push(p99);
        }
    }
    let request = rls_request();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{rp}"))
        .unwrap()
        .tcp_nodelay(true)
        .connect()
        .await
        .unwrap();
    let rls = RateLimitServiceClient::new(channel);
    let call = {
        let (rls, request) = (rls.clone(), request.clone());
        move || {
            let (mut rls, request) = (rls.clone(), request.clone());
            async move { rls.should_rate_limit(request).await.is_ok() }
        }
    };
    p99s.push((
        "sidecar tonic",
        rls_rounds("sidecar tonic", rate, secs, rounds, call).await,
    ));
    let mut rls_p99 = serde_json::Map::new();
    for (name, service) in p99s {
        let p99 = median(service);
        println!("median p99 from actual send, {name}: {p99:.0} µs");
        rls_p99.insert(name.replace(' ', "_"), p99.round().into());
    }
    if !only_rls {
        beside_nginx_section(&agg.addr.to_string(), secs, rounds).await;
    }
    match http_figures {
        Some(http) => figures_row(http, &rls_p99, (rate, secs, rounds, conc)),
        None if figures_out::wanted().is_some() => {
            eprintln!("ONLY_RLS=1: no headline row written (it needs all three sections)");
        }
        None => {}
    }
    drop(agg);
    drop(ctl);
}

/// Section 4, on a blocking thread (it waits on processes; the tiers run on): prints its figures and
/// their JSON line.
async fn beside_nginx_section(aggregator: &str, secs: u64, rounds: u64) {
    let aggregator = aggregator.to_string();
    // SIDECAR_BIN: another build's `grl` (a before-and-after comparison in one run).
    let grl = std::env::var("SIDECAR_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_grl").into());
    let figures =
        tokio::task::spawn_blocking(move || beside_nginx::run(&grl, &aggregator, secs, rounds))
            .await
            .unwrap();
    if let Some(f) = figures {
        println!("{}", serde_json::json!({ "beside_nginx": f }));
    }
}

/// The headline row `sidecar`: `http` is (open loop, paced) medians `[kind][direct p50,
/// direct p99, sidecar p50, sidecar p99]` (kind 0 from the scheduled send, 1 from the
/// actual send) and the saturation ratio; `rls` the median p99s of section 3 (µs).
fn figures_row(
    http: ([[f64; 4]; 2], [[f64; 4]; 2], f64),
    rls: &serde_json::Map<String, serde_json::Value>,
    (rate, secs, rounds, conc): (u64, u64, u64, u64),
) {
    let (open, paced, ratio) = http;
    let added = |m: [f64; 4]| (m[2] - m[0], m[3] - m[1]);
    let (open_p50, open_p99) = added(open[1]);
    let (paced_p50, paced_p99) = added(paced[1]);
    let p99 = |k: &str| {
        rls.get(k)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(f64::NAN)
    };
    let figure = format!(
        "adds **{open_p50:.0} µs** at p50 and **{open_p99:.0} µs** at p99 (target ≤ 300 µs; open loop, from the actual send: sidecar p99 {:.0} µs against {:.0} µs direct; paced, one call in flight: {paced_p50:.0} / {paced_p99:.0} µs); {ratio:.2}x the direct saturation throughput ({conc} workers, generator, upstream and sidecar sharing the machine); `ShouldRateLimit` p99 **{:.0} µs** (target 200 µs), a do-nothing tonic server {:.0} µs and bare hyper HTTP/2 {:.0} µs on the same machine",
        open[1][3],
        open[1][1],
        p99("sidecar_lean"),
        p99("floor_tonic"),
        p99("floor_h2"),
    );
    let kind = |m: [[f64; 4]; 2]| {
        let one = |k: [f64; 4]| {
            serde_json::json!({
                "direct_p50_us": k[0].round(), "direct_p99_us": k[1].round(),
                "sidecar_p50_us": k[2].round(), "sidecar_p99_us": k[3].round(),
            })
        };
        serde_json::json!({"from_scheduled_send": one(m[0]), "from_actual_send": one(m[1])})
    };
    figures_out::write(&figures_out::Row {
        row: "sidecar",
        what: format!(
            "`grl sidecar` at {rate} rps (one thread, the default), {rounds} rounds × {secs} s per path against the same upstream called directly"
        ),
        figure,
        command: figures_out::command(
            &[
                ("RATE", rate.to_string()),
                ("SECONDS", secs.to_string()),
                ("ROUNDS", rounds.to_string()),
                ("CONCURRENCY", conc.to_string()),
            ],
            "cargo bench -p grl --bench sidecar",
        ),
        figures_json: serde_json::json!({
            "rate": rate,
            "open_loop": kind(open),
            "paced": kind(paced),
            "saturation_ratio": (ratio * 100.0).round() / 100.0,
            "should_rate_limit_p99_us": rls,
        })
        .to_string(),
    });
}
