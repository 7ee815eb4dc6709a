//! `grl sidecar` as a real process between clients nobody here wrote (`curl` over HTTP/1.1
//! and `--http2-prior-knowledge`, Python `grpcio`) and a real upstream (hyper, HTTP/1.1 and
//! h2c, with a tonic gRPC service), with a real controller and aggregator pushing the drop
//! ratios: forwarding with streamed bodies, 429 and RESOURCE_EXHAUSTED under a pushed ratio,
//! shadow mode, upstream failures, and `/metrics` adding up to what was sent.
//!
//! The public helpers are shared with [`super::rls`] and [`super::sidecar_refusals`].

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use grl::sidecar::envoy::rate_limit_response::{Code, DescriptorStatus};
use grl::sidecar::envoy::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use grl::sidecar::envoy::{RateLimitRequest, RateLimitResponse};
use grl::tier::Running;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use test_support::ports::free_port;
use tower::Service;

use super::support;

const BIN: &str = env!("CARGO_BIN_EXE_grl");

/// Buckets of the sidecar tests: `limited` (caller `limited`, deny) and `shadowed` (caller
/// `shadowed`, shadow), both 20 rps global; `partner` (caller `partner`, 1 M rps) and
/// `voids` (procedure `pay.Pay/Void`, 2 rps, in addition to the caller's bucket).
const SERVICE_YAML: &str = "service: payments
buckets:
  - name: limited
    match: { caller: limited }
    scope: global
    mode: deny
    policy: { kind: fixed, rps: 20 }
  - name: shadowed
    match: { caller: shadowed }
    scope: global
    mode: shadow
    policy: { kind: fixed, rps: 20 }
  - name: partner
    match: { caller: partner }
    scope: global
    mode: deny
    policy: { kind: fixed, rps: 1000000 }
  - name: voids
    match: { procedure: pay.Pay/Void }
    in_addition: true
    scope: global
    mode: deny
    policy: { kind: fixed, rps: 2 }
";

/// A controller and a zone-`a` aggregator in region `eu`, in this process, at a 200 ms
/// interval, following a config dir with [`SERVICE_YAML`].
pub(crate) struct ControlPlane {
    _dir: tempfile::TempDir,
    _ctl: Running,
    agg: Running,
}

impl ControlPlane {
    /// Starts both tiers.
    pub(crate) async fn start() -> Self {
        Self::start_with(SERVICE_YAML).await
    }

    /// Starts both tiers following `services/payments.yaml` = `service_yaml`.
    pub(crate) async fn start_with(service_yaml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("services")).unwrap();
        std::fs::write(dir.path().join("services/payments.yaml"), service_yaml).unwrap();
        let interval = Duration::from_millis(200);
        let (ctl, _) =
            support::controller_on(support::listener().await, dir.path(), interval).await;
        let agg = support::aggregator_on(
            support::listener().await,
            "a",
            "eu",
            &ctl.addr.to_string(),
            interval,
        )
        .await;
        Self {
            _dir: dir,
            _ctl: ctl,
            agg,
        }
    }

    /// The aggregator's address.
    pub(crate) fn aggregator(&self) -> String {
        self.agg.addr.to_string()
    }
}

/// The test's gRPC service behind the sidecar: Envoy's rate limit service answering OK to
/// everything and counting its calls.
#[derive(Clone, Default)]
struct AlwaysOk {
    calls: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl RateLimitService for AlwaysOk {
    async fn should_rate_limit(
        &self,
        r: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let statuses = r
            .get_ref()
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            })
            .collect();
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses,
            ..Default::default()
        }))
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type TestBody = UnsyncBoxBody<Bytes, BoxError>;

/// A real upstream on 127.0.0.1 (HTTP/1.1 and h2c): gRPC requests go to [`AlwaysOk`];
/// `/hang` never answers; `/slow` sends `first\n`, waits 1 s, sends `last\n`; anything else
/// echoes its body back, streamed, with what it saw in `x-upstream-*` headers. It records
/// the paths of HTTP requests.
pub(crate) struct Upstream {
    /// Its address.
    pub addr: SocketAddr,
    http: Arc<AtomicU64>,
    paths: Arc<std::sync::Mutex<Vec<String>>>,
    grpc: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    /// Starts serving.
    pub(crate) async fn start() -> Self {
        let listener = support::listener().await;
        let addr = listener.local_addr().unwrap();
        let http = Arc::new(AtomicU64::new(0));
        let rls = AlwaysOk::default();
        let grpc = rls.calls.clone();
        let server = RateLimitServiceServer::new(rls);
        let count = http.clone();
        let paths = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = paths.clone();
        let task = tokio::spawn(async move {
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (server, count, builder) = (server.clone(), count.clone(), builder.clone());
                let seen = seen.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        upstream_handle(req, server.clone(), count.clone(), seen.clone())
                    });
                    let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Self {
            addr,
            http,
            paths,
            grpc,
            task,
        }
    }

    /// Its URL.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// HTTP (non-gRPC) requests answered so far.
    pub(crate) fn http_requests(&self) -> u64 {
        self.http.load(Ordering::Relaxed)
    }

    /// The paths (with query) of the HTTP requests received so far, in order.
    pub(crate) fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap().clone()
    }

    /// gRPC calls answered so far.
    pub(crate) fn grpc_calls(&self) -> u64 {
        self.grpc.load(Ordering::Relaxed)
    }
}

async fn upstream_handle(
    req: Request<Incoming>,
    mut grpc: RateLimitServiceServer<AlwaysOk>,
    count: Arc<AtomicU64>,
    paths: Arc<std::sync::Mutex<Vec<String>>>,
) -> Result<Response<TestBody>, Infallible> {
    let is_grpc = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    if is_grpc {
        let res = grpc.call(req).await?;
        return Ok(res.map(|b| b.map_err(|e| Box::new(e) as BoxError).boxed_unsync()));
    }
    count.fetch_add(1, Ordering::Relaxed);
    let pq = req.uri().path_and_query().map_or("", |p| p.as_str());
    paths.lock().unwrap().push(pq.to_string());
    match req.uri().path() {
        "/hang" => {
            tokio::time::sleep(Duration::from_secs(120)).await;
            Ok(Response::new(full("late\n")))
        }
        "/slow" => {
            let chunks = futures::stream::unfold(0, |i| async move {
                match i {
                    0 => Some((Ok(Frame::data(Bytes::from_static(b"first\n"))), 1)),
                    1 => {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        Some((Ok(Frame::data(Bytes::from_static(b"last\n"))), 2))
                    }
                    _ => None,
                }
            });
            Ok(Response::new(StreamBody::new(chunks).boxed_unsync()))
        }
        _ => {
            let caller = req
                .headers()
                .get("rpc-caller")
                .map(|v| v.to_str().unwrap_or("?").to_string())
                .unwrap_or_default();
            let res = Response::builder()
                .header("x-upstream-version", format!("{:?}", req.version()))
                .header("x-upstream-caller", caller)
                .header(
                    "x-upstream-path",
                    req.uri().path_and_query().map_or("", |p| p.as_str()),
                );
            let body = req.into_body().map_err(|e| Box::new(e) as BoxError);
            Ok(res.body(body.boxed_unsync()).unwrap())
        }
    }
}

fn full(s: &'static str) -> TestBody {
    Full::new(Bytes::from_static(s.as_bytes()))
        .map_err(|e| match e {})
        .boxed_unsync()
}

fn wait_port(port: u16) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "port {port} never opened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `grl sidecar` as a process (zone `a`, region `eu`, service `payments`, 200 ms interval),
/// with its proxy, rate limit service and `/metrics` on free ports.
pub(crate) struct Sidecar {
    child: Child,
    /// The proxy, `127.0.0.1:port`.
    pub addr: String,
    /// The rate limit service, `127.0.0.1:port`.
    pub rls: String,
    /// `/metrics`.
    pub metrics: SocketAddr,
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sidecar {
    /// Starts one in front of `upstream`, reporting to `aggregator`; returns once it listens.
    pub(crate) fn start(upstream: &str, aggregator: &str, extra: &[&str]) -> Self {
        let (p, r, m) = (free_port(), free_port(), free_port());
        let (addr, rls) = (format!("127.0.0.1:{p}"), format!("127.0.0.1:{r}"));
        let metrics: SocketAddr = format!("127.0.0.1:{m}").parse().unwrap();
        let child = Command::new(BIN)
            .args([
                "sidecar",
                "--listen",
                &addr,
                "--upstream",
                upstream,
                "--service",
                "payments",
                "--aggregator",
                aggregator,
                "--zone",
                "a",
                "--region",
                "eu",
                "--rls-listen",
                &rls,
                "--metrics-listen",
                &metrics.to_string(),
                "--interval-ms",
                "200",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let sc = Self {
            child,
            addr,
            rls,
            metrics,
        };
        for port in [p, r, m] {
            wait_port(port);
        }
        sc
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its `/metrics`.
    pub(crate) async fn scrape(&self) -> BTreeMap<String, f64> {
        support::scrape(self.metrics).await
    }
}

/// The sum of the samples of `name` whose labels include every pair of `labels`.
pub(crate) fn sum(m: &BTreeMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    m.iter()
        .filter(|(k, _)| {
            k.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{'))
                && labels
                    .iter()
                    .all(|(l, v)| k.contains(&format!("{l}=\"{v}\"")))
        })
        .map(|(_, v)| v)
        .sum()
}

/// `grl_requests_total` of a caller, procedure and decision.
pub(crate) fn requests(
    m: &BTreeMap<String, f64>,
    caller: &str,
    procedure: &str,
    decision: &str,
) -> u64 {
    sum(
        m,
        "grl_requests_total",
        &[
            ("caller", caller),
            ("procedure", procedure),
            ("decision", decision),
        ],
    ) as u64
}

/// The Python of the venv `tests/run.sh` makes (grpcio, xds-protos, kubernetes-validate).
pub(crate) fn python() -> String {
    let py = std::env::var("GRL_TEST_PYTHON").unwrap_or_default();
    assert!(
        !py.is_empty() && Path::new(&py).is_file(),
        "GRL_TEST_PYTHON ({py:?}) is not a Python with grpcio and xds-protos: run the tests \
         through `bash tests/run.sh`, or `eval \"$(GRL_TEST_ENV_ONLY=1 bash tests/run.sh)\"` \
         first (it creates target/pyvenv)"
    );
    py
}

/// Runs `tests/python/<script>` with `args`; its JSON summary and whether it exited 0.
pub(crate) fn python_script(script: &str, args: &[&str]) -> (serde_json::Value, bool) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = Command::new(python())
        .arg(path)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{script} {args:?}: {e}; stdout: {stdout}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (summary, out.status.success())
}

/// Runs `tests/python/rls_client.py` with `args`; its JSON summary and whether it saw what
/// it was told to wait for.
pub(crate) fn rls_client(args: &[&str]) -> (serde_json::Value, bool) {
    python_script("rls_client.py", args)
}

/// `--target target` followed by `rest`, as the Python clients take them.
pub(crate) fn target_args(target: &str, rest: &[&str]) -> Vec<String> {
    ["--target", target]
        .iter()
        .chain(rest)
        .map(|s| (*s).to_string())
        .collect()
}

/// A count from a summary map, 0 when absent.
pub(crate) fn n(v: &serde_json::Value, key: &str) -> u64 {
    v.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0)
}

/// Runs curl with `args` (plus `-sS`) and returns its stdout.
pub(crate) fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .arg("-sS")
        .args(args)
        .output()
        .expect("curl is installed");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// One response of a curl batch.
#[derive(Debug)]
struct Answer {
    code: u16,
    version: String,
    retry_after: String,
}

/// `count` GETs of `/pay.Pay/Card` by `caller`, bodies into `dir`. HTTP/1.1: one curl on one
/// keep-alive connection (curl's URL globbing). HTTP/2: one curl per request, 8 at a time,
/// because curl 7.88 cannot reuse a prior-knowledge connection (its second request fails with
/// "Error in the HTTP2 framing layer" against any h2c server, tonic's included).
fn batch(addr: &str, caller: &str, count: u32, h2: bool, dir: &Path) -> Vec<Answer> {
    batch_to(addr, caller, "pay.Pay/Card", count, h2, dir)
}

/// [`batch`] to `procedure`.
fn batch_to(
    addr: &str,
    caller: &str,
    procedure: &str,
    count: u32,
    h2: bool,
    dir: &Path,
) -> Vec<Answer> {
    let header = format!("rpc-caller: {caller}");
    let w = "%{http_code} %{http_version} %header{retry-after}\\n";
    let out = if h2 {
        let mut out = String::new();
        for chunk in (1..=count).collect::<Vec<_>>().chunks(8) {
            let children: Vec<_> = chunk
                .iter()
                .map(|i| {
                    let url = format!("http://{addr}/{procedure}?n={i}");
                    let body = dir.join(format!("body_h2_{i}"));
                    Command::new("curl")
                        .args(["-sS", "--http2-prior-knowledge", "-w", w, "-H", &header])
                        .arg("-o")
                        .arg(body)
                        .args(["--max-time", "60", &url])
                        .stdout(Stdio::piped())
                        .spawn()
                        .expect("curl is installed")
                })
                .collect();
            for c in children {
                let o = c.wait_with_output().unwrap();
                assert!(o.status.success(), "curl --http2-prior-knowledge failed");
                out.push_str(&String::from_utf8(o.stdout).unwrap());
            }
        }
        out
    } else {
        let url = format!("http://{addr}/{procedure}?n=[1-{count}]");
        let out_pattern = dir.join("body_#1").display().to_string();
        curl(&[
            "-w",
            w,
            "-H",
            &header,
            "-o",
            &out_pattern,
            "--max-time",
            "60",
            &url,
        ])
    };
    out.lines()
        .map(|l| {
            let mut f = l.split(' ');
            Answer {
                code: f.next().unwrap().parse().unwrap(),
                version: f.next().unwrap_or("").to_string(),
                retry_after: f.next().unwrap_or("").to_string(),
            }
        })
        .collect()
}

/// The drop ratio the sidecar's client holds for `bucket`.
async fn ratio(sc: &Sidecar, bucket: &str) -> f64 {
    sum(
        &sc.scrape().await,
        "grl_client_drop_ratio",
        &[("bucket", bucket)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_http1_and_h2c_are_forwarded_with_streamed_bodies_both_ways() {
    let up = Upstream::start().await;
    // No aggregator listens there: the client fails open and everything goes through.
    let sc = Sidecar::start(&up.url(), &format!("127.0.0.1:{}", free_port()), &[]);
    let dir = tempfile::tempdir().unwrap();
    let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let input = dir.path().join("in.bin");
    std::fs::write(&input, &payload).unwrap();
    for h2 in [false, true] {
        let (body, headers) = (dir.path().join("out.bin"), dir.path().join("headers"));
        let mut args = vec![
            "-X",
            "POST",
            "-H",
            "rpc-caller: gateway",
            "-H",
            "content-type: application/octet-stream",
            "--data-binary",
        ];
        let at = format!("@{}", input.display());
        args.push(&at);
        let (b, h) = (body.display().to_string(), headers.display().to_string());
        args.extend(["-o", &b, "-D", &h, "-w", "%{http_code} %{http_version}"]);
        if h2 {
            args.push("--http2-prior-knowledge");
        }
        let url = format!("http://{}/pay.Pay/Card?x=1", sc.addr);
        args.push(&url);
        let w = curl(&args);
        assert_eq!(w, if h2 { "200 2" } else { "200 1.1" });
        assert!(
            std::fs::read(&body).unwrap() == payload,
            "echoed body differs"
        );
        let headers = std::fs::read_to_string(&headers).unwrap().to_lowercase();
        let want_version = if h2 { "http/2.0" } else { "http/1.1" };
        assert!(
            headers.contains(&format!("x-upstream-version: {want_version}")),
            "{headers}"
        );
        assert!(headers.contains("x-upstream-caller: gateway"), "{headers}");
        assert!(
            headers.contains("x-upstream-path: /pay.pay/card?x=1"),
            "{headers}"
        );

        // A response body streams: the first chunk arrives a second before the last.
        let mut args = vec![
            "-w",
            "\\n%{time_starttransfer} %{time_total}",
            "--max-time",
            "30",
        ];
        if h2 {
            args.push("--http2-prior-knowledge");
        }
        let url = format!("http://{}/slow", sc.addr);
        args.push(&url);
        let out = curl(&args);
        let (text, times) = out.rsplit_once('\n').unwrap();
        assert_eq!(text, "first\nlast\n");
        let t: Vec<f64> = times.split(' ').map(|x| x.parse().unwrap()).collect();
        assert!(
            t[0] < t[1] - 0.5,
            "first byte at {} s, end at {} s: the body was buffered",
            t[0],
            t[1]
        );
    }
    let m = sc.scrape().await;
    assert_eq!(requests(&m, "gateway", "pay.Pay/Card", "allowed"), 2);
    assert_eq!(requests(&m, "", "slow", "allowed"), 2);
    assert_eq!(up.http_requests(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_gets_429_with_retry_after_under_a_pushed_drop_ratio_and_metrics_add_up() {
    let cp = ControlPlane::start().await;
    let up = Upstream::start().await;
    // Every other test runs the default single-threaded sidecar; this one its thread pool.
    let sc = Sidecar::start(&up.url(), &cp.aggregator(), &["--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    // curl offers far more than the 20 rps limit until the controller's ratio arrives.
    let start = Instant::now();
    while ratio(&sc, "limited").await < 0.5 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no drop ratio pushed for bucket `limited`"
        );
        batch(&sc.addr, "limited", 50, false, dir.path());
    }
    for h2 in [false, true] {
        let before = sc.scrape().await;
        let up_before = up.http_requests();
        let answers = batch(&sc.addr, "limited", 300, h2, dir.path());
        let after = sc.scrape().await;
        assert_eq!(answers.len(), 300);
        let ok = answers.iter().filter(|a| a.code == 200).count() as u64;
        let refused: Vec<_> = answers.iter().filter(|a| a.code == 429).collect();
        assert_eq!(ok + refused.len() as u64, 300, "{answers:?}");
        // The ratio follows curl's own rate (limit 20 rps): far above 0.1 either way.
        assert!(refused.len() >= 30, "only {} of 300 refused", refused.len());
        for a in &answers {
            assert_eq!(a.version, if h2 { "2" } else { "1.1" });
        }
        assert!(refused.iter().all(|a| a.retry_after == "1"), "{refused:?}");
        let delta = |d| {
            requests(&after, "limited", "pay.Pay/Card", d)
                - requests(&before, "limited", "pay.Pay/Card", d)
        };
        assert_eq!(delta("allowed"), ok);
        assert_eq!(delta("dropped"), refused.len() as u64);
        assert_eq!(
            up.http_requests() - up_before,
            ok,
            "a refused request reached the upstream"
        );
    }
    let bodies: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(bodies.iter().any(|b| b == "rate limited by GRL\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_bucket_forwards_everything_and_counts_virtual_drops() {
    let cp = ControlPlane::start().await;
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &cp.aggregator(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        for h2 in [false, true] {
            let answers = batch(&sc.addr, "shadowed", 100, h2, dir.path());
            assert!(answers.iter().all(|a| a.code == 200), "{answers:?}");
            sent += answers.len() as u64;
        }
        let m = sc.scrape().await;
        if requests(&m, "shadowed", "pay.Pay/Card", "shadow_dropped") > 0 {
            assert_eq!(requests(&m, "shadowed", "pay.Pay/Card", "dropped"), 0);
            let counted = requests(&m, "shadowed", "pay.Pay/Card", "allowed")
                + requests(&m, "shadowed", "pay.Pay/Card", "shadow_dropped");
            assert_eq!(counted, sent);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no virtual drop counted"
        );
    }
    assert_eq!(up.http_requests(), sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_procedure_bucket_in_addition_refuses_a_caller_with_its_own_bucket() {
    let cp = ControlPlane::start().await;
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &cp.aggregator(), &[]);
    let dir = tempfile::tempdir().unwrap();
    // `partner` falls in its own 1 M rps bucket; `voids` (2 rps) applies in addition.
    let start = Instant::now();
    while ratio(&sc, "voids").await < 0.5 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no drop ratio pushed for bucket `voids`"
        );
        batch_to(&sc.addr, "partner", "pay.Pay/Void", 50, false, dir.path());
    }
    let before = sc.scrape().await;
    let up_before = up.http_requests();
    let voids = batch_to(&sc.addr, "partner", "pay.Pay/Void", 100, false, dir.path());
    let cards = batch_to(&sc.addr, "partner", "pay.Pay/Card", 100, false, dir.path());
    let after = sc.scrape().await;
    let refused = voids.iter().filter(|a| a.code == 429).count() as u64;
    assert!(refused >= 50, "only {refused} of 100 voids refused");
    assert!(
        cards.iter().all(|a| a.code == 200),
        "the caller's own bucket refused: {cards:?}"
    );
    assert_eq!(ratio(&sc, "partner").await, 0.0);
    let delta = |bucket, decision| {
        let labels = [
            ("bucket", bucket),
            ("procedure", "pay.Pay/Void"),
            ("decision", decision),
        ];
        (sum(&after, "grl_requests_total", &labels) - sum(&before, "grl_requests_total", &labels))
            as u64
    };
    // Each bucket counts every request under its own decision.
    assert_eq!(delta("voids", "dropped"), refused);
    assert_eq!(delta("voids", "allowed"), 100 - refused);
    assert_eq!(delta("partner", "allowed"), 100);
    assert_eq!(up.http_requests() - up_before, 100 - refused + 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_down_gives_502_or_unavailable_and_a_hanging_one_504_within_the_timeout() {
    let agg = format!("127.0.0.1:{}", free_port());
    let down = format!("http://127.0.0.1:{}", free_port());
    let sc = Sidecar::start(&down, &agg, &[]);
    let url = format!("http://{}/pay.Pay/Card", sc.addr);
    let out = curl(&["-w", "\\n%{http_code}", &url]);
    assert!(out.ends_with("\n502"), "{out}");
    assert!(
        out.contains(&format!("upstream {down} unavailable")),
        "{out}"
    );
    let (s, _) = rls_client(&[
        "--target",
        &sc.addr,
        "--descriptor",
        r#"{"entries": [["k", "v"]]}"#,
        "--until",
        "UNAVAILABLE",
        "--deadline",
        "20",
    ]);
    let detail = s["details"]["UNAVAILABLE"].as_str().unwrap_or_default();
    assert!(detail.contains("unavailable"), "{s}");

    let up = Upstream::start().await;
    let sc2 = Sidecar::start(&up.url(), &agg, &["--upstream-timeout-ms", "500"]);
    let start = Instant::now();
    let out = curl(&[
        "-w",
        "\\n%{http_code}",
        "--max-time",
        "30",
        &format!("http://{}/hang", sc2.addr),
    ]);
    assert!(out.ends_with("\n504"), "{out}");
    assert!(out.contains("did not answer within 500 ms"), "{out}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let m = sc.scrape().await;
    assert!(
        sum(
            &m,
            "grl_sidecar_upstream_errors_total",
            &[("kind", "connect")]
        ) >= 2.0
    );
    let m2 = sc2.scrape().await;
    assert_eq!(
        sum(
            &m2,
            "grl_sidecar_upstream_errors_total",
            &[("kind", "timeout")]
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_grpc_client_through_the_sidecar_gets_resource_exhausted_under_a_pushed_ratio() {
    let cp = ControlPlane::start().await;
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &cp.aggregator(), &[]);
    let (s, seen) = tokio::task::spawn_blocking({
        let addr = sc.addr.clone();
        move || {
            rls_client(&[
                "--target",
                &addr,
                "--caller-metadata",
                "limited",
                "--descriptor",
                r#"{"entries": [["k", "v"]]}"#,
                "--until",
                "RESOURCE_EXHAUSTED",
                "--then",
                "200",
                "--deadline",
                "60",
            ])
        }
    })
    .await
    .unwrap();
    assert!(seen, "never refused: {s}");
    let ok = n(&s["grpc"], "OK");
    let exhausted = n(&s["grpc"], "RESOURCE_EXHAUSTED");
    assert_eq!(ok + exhausted, n(&s, "calls"), "{s}");
    assert!(ok > 0 && exhausted > 0, "{s}");
    assert_eq!(s["details"]["RESOURCE_EXHAUSTED"], "rate limited by GRL");
    assert_eq!(s["retry_after"], "1", "{s}");
    // Every refusal names its bucket in its trailers-only headers, seen as trailing metadata.
    let refusal = &s["headers"]["RESOURCE_EXHAUSTED"];
    assert_eq!(
        n(&refusal["grl-bucket"], "payments/limited"),
        exhausted,
        "{s}"
    );
    assert_eq!(
        n(
            &refusal["ratelimit-policy"],
            "\"payments/limited\";q=20;w=1"
        ),
        exhausted,
        "{s}"
    );
    // The upstream's answers came back whole through h2c: messages and trailers.
    assert_eq!(n(&s["overall"], "OK"), ok);
    assert_eq!(up.grpc_calls(), ok);
    let m = sc.scrape().await;
    let procedure = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    assert_eq!(requests(&m, "limited", procedure, "allowed"), ok);
    assert_eq!(requests(&m, "limited", procedure, "dropped"), exhausted);
}
