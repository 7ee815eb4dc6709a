//! Who the sidecar counts a request against, with `grl sidecar` as a process and a real
//! upstream: callers proven by client certificates (`--caller-from peer-cert`, curl over
//! mutual TLS, HTTP/1.1 and HTTP/2) that a `rpc-caller` header cannot spoof; a repeated
//! caller header refused; callers and paths of tens of kilobytes cut to the name limit so
//! that `/metrics` stays small; and non-canonical spellings of a path counted and
//! forwarded as the canonical one.

use std::process::Command;

use rcgen::SanType;
use test_support::ports::free_port;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::raw_http::{self, H2, exchange, read_response, statuses};
use super::security::Ca;
use super::sidecar::{Sidecar, Upstream, curl, requests, sum};

const BIN: &str = env!("CARGO_BIN_EXE_grl");

fn no_aggregator() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// `grl_sidecar_requests_refused_total{reason}`.
fn refused(m: &std::collections::BTreeMap<String, f64>, reason: &str) -> u64 {
    sum(
        m,
        "grl_sidecar_requests_refused_total",
        &[("reason", reason)],
    ) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_certificates_name_the_caller_and_the_header_cannot_spoof_it() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let (cert, key) = ca.leaf("sidecar", "server");
    let spiffe = "spiffe://cluster.local/ns/x/sa/y";
    let uri_and_dns = ca.client_leaf(
        "workload",
        vec![
            SanType::DnsName("y.x.svc".try_into().unwrap()),
            SanType::URI(spiffe.try_into().unwrap()),
        ],
        "spiffe",
    );
    let dns_only = ca.client_leaf(
        "dns",
        vec![SanType::DnsName("b.x.svc".try_into().unwrap())],
        "dns",
    );
    let no_san = ca.client_leaf("nobody", vec![], "nobody");
    let ca_pem = ca.cert_path().display().to_string();
    let up = Upstream::start().await;
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let sc = Sidecar::start(
        &up.url(),
        &no_aggregator(),
        &[
            "--caller-from",
            "peer-cert",
            "--proxy-tls-cert",
            &cert,
            "--proxy-tls-key",
            &key,
            "--proxy-tls-client-ca",
            &ca_pem,
        ],
    );
    let port = sc.addr.rsplit_once(':').unwrap().1.to_string();
    let resolve = format!("localhost:{port}:127.0.0.1");
    let url = format!("https://localhost:{port}/pay.Pay/Card");
    let call = |client: &(std::path::PathBuf, std::path::PathBuf), h2: bool| {
        let (c, k) = (
            client.0.display().to_string(),
            client.1.display().to_string(),
        );
        let mut args = vec![
            "--resolve",
            &resolve,
            "--cacert",
            &ca_pem,
            "--cert",
            &c,
            "--key",
            &k,
            "-H",
            "rpc-caller: victim",
            "-H",
            "rpc-caller: second",
            "-D",
            "-",
            "-o",
            "/dev/null",
        ];
        args.push(if h2 { "--http2" } else { "--http1.1" });
        args.push(&url);
        curl(&args).to_lowercase()
    };
    for h2 in [false, true] {
        let head = call(&uri_and_dns, h2);
        assert!(
            head.starts_with(if h2 { "http/2 200" } else { "http/1.1 200" }),
            "{head}"
        );
        // The header was neither counted nor forwarded (both copies removed).
        assert!(head.contains("x-upstream-caller: \r\n"), "{head}");
        let head = call(&dns_only, h2);
        assert!(head.contains(" 200"), "{head}");
        let head = call(&no_san, h2);
        assert!(head.contains(" 403"), "{head}");
    }
    let m = sc.scrape().await;
    assert_eq!(requests(&m, spiffe, "pay.Pay/Card", "allowed"), 2);
    assert_eq!(requests(&m, "b.x.svc", "pay.Pay/Card", "allowed"), 2);
    assert_eq!(sum(&m, "grl_requests_total", &[("caller", "victim")]), 0.0);
    assert_eq!(refused(&m, "no_identity"), 2);
    assert_eq!(up.http_requests(), 4);
    let body = Command::new("curl")
        .args(["-sS", "--resolve", &resolve, "--cacert", &ca_pem, "--cert"])
        .arg(&no_san.0)
        .arg("--key")
        .arg(&no_san.1)
        .arg(&url)
        .output()
        .unwrap();
    let body = String::from_utf8_lossy(&body.stdout).into_owned();
    assert!(
        body.contains("no URI or DNS subject alternative name"),
        "{body}"
    );

    // Without a client certificate, or in plain text, there is no exchange at all.
    let before = sum(
        &sc.scrape().await,
        "grl_sidecar_connections_closed_total",
        &[("reason", "tls_handshake")],
    );
    let no_cert = Command::new("curl")
        .args(["-sS", "--resolve", &resolve, "--cacert", &ca_pem, &url])
        .output()
        .unwrap();
    assert!(!no_cert.status.success() || !String::from_utf8_lossy(&no_cert.stdout).contains("200"));
    let plain = exchange(
        &sc.addr,
        b"GET /pay.Pay/Card HTTP/1.1\r\nHost: x\r\nrpc-caller: victim\r\n\r\n",
    )
    .await;
    assert!(statuses(&plain).is_empty(), "{plain}");
    let after = sum(
        &sc.scrape().await,
        "grl_sidecar_connections_closed_total",
        &[("reason", "tls_handshake")],
    );
    assert!(after - before >= 2.0, "{before} → {after}");
    assert_eq!(up.http_requests(), 4);

    // Asking for certificate callers without TLS on the port is a usage error.
    let out = Command::new(BIN)
        .args([
            "sidecar",
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--upstream",
            &up.url(),
            "--service",
            "payments",
            "--aggregator",
            &no_aggregator(),
            "--zone",
            "a",
            "--region",
            "eu",
            "--caller-from",
            "peer-cert",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--proxy-tls-client-ca"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_caller_header_is_refused_and_one_is_forwarded_as_counted() {
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &no_aggregator(), &[]);
    let url = format!("http://{}/pay.Pay/Card", sc.addr);
    for h2 in [false, true] {
        let mut args = vec![
            "-H",
            "rpc-caller: mine",
            "-H",
            "rpc-caller: victim",
            "-w",
            "%{http_code}",
        ];
        if h2 {
            args.push("--http2-prior-knowledge");
        }
        args.push(&url);
        let out = curl(&args);
        assert!(out.ends_with("400"), "{out}");
        assert!(
            out.contains("the caller header appears more than once"),
            "{out}"
        );
    }
    let one = curl(&["-H", "rpc-caller: mine", "-D", "-", "-o", "/dev/null", &url]);
    assert!(
        one.to_lowercase().contains("x-upstream-caller: mine"),
        "{one}"
    );
    let m = sc.scrape().await;
    assert_eq!(refused(&m, "repeated_caller"), 2);
    assert_eq!(sum(&m, "grl_requests_total", &[("caller", "victim")]), 0.0);
    assert_eq!(requests(&m, "mine", "pay.Pay/Card", "allowed"), 1);
    assert_eq!(up.http_requests(), 1);
}

/// The raw text of `/metrics`.
async fn metrics_text(sc: &Sidecar) -> String {
    let mut s = TcpStream::connect(sc.metrics).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    body
}

/// The resident set of process `pid`, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb / 1024.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_of_30_kb_count_as_one_overflow_caller_paths_are_cut_and_metrics_stay_small() {
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &no_aggregator(), &[]);
    let rss_before = rss_mib(sc.pid());
    let mut s = TcpStream::connect(&sc.addr).await.unwrap();
    let n = 1_000;
    for i in 0..n {
        let caller = format!("c{i:04}{}", "x".repeat(30_000));
        let path = format!("/p{i:04}{}", "y".repeat(30_000));
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nrpc-caller: {caller}\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let r = read_response(&mut s).await;
        assert!(r.starts_with("HTTP/1.1 200"), "{}", &r[..r.len().min(200)]);
    }
    let text = metrics_text(&sc).await;
    let rss_after = rss_mib(sc.pid());
    println!(
        "{n} pairs of 30 KB names: /metrics {} KB, sidecar RSS {rss_before:.1} → {rss_after:.1} MiB",
        text.len() / 1024
    );
    assert!(text.len() < 3 << 20, "/metrics is {} bytes", text.len());
    let m = sc.scrape().await;
    let cut = |name| sum(&m, "grl_sidecar_names_cut_total", &[("name", name)]) as u64;
    assert_eq!((cut("caller"), cut("procedure")), (n, n));
    // Every caller past 256 bytes is one caller: the overflow label.
    let procedure = format!("p0007{}...", "y".repeat(251));
    assert_eq!(requests(&m, "__overflow__", &procedure, "allowed"), 1);
    let callers: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("grl_requests_total{"))
        .filter_map(|l| l.split("caller=\"").nth(1)?.split('"').next())
        .collect();
    assert!(
        callers.iter().all(|c| c.len() <= 256),
        "a caller label over 256 bytes: {callers:?}"
    );
    // The upstream got the paths whole: only the labels are cut.
    assert_eq!(up.paths()[7].len(), 30_006);
    assert_eq!(up.http_requests(), n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_canonical_paths_are_counted_and_forwarded_as_the_canonical_one() {
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &no_aggregator(), &[]);
    let canonical = "/orders.Orders/Get";
    // (path sent, path the upstream gets)
    let same = [
        ("/orders.Orders/Get", canonical),
        ("//orders.Orders/Get", canonical),
        ("/orders.Orders//Get", canonical),
        ("/./orders.Orders/Get", canonical),
        ("/x/../orders.Orders/Get", canonical),
        ("/%2e/orders.Orders/Get", canonical),
        ("/%6frders.Orders/Get", canonical),
        ("/orders.Orders/%47et", canonical),
        ("/orders.Orders/Get/", "/orders.Orders/Get/"),
        ("//orders.Orders/Get?q=%2F", "/orders.Orders/Get?q=%2F"),
    ];
    for (sent, forwarded) in same {
        let before = up.paths().len();
        let req = format!("GET {sent} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let r = exchange(&sc.addr, req.as_bytes()).await;
        assert_eq!(statuses(&r), [200], "{sent}: {r}");
        assert_eq!(up.paths()[before..], [forwarded.to_string()], "{sent}");
    }
    // HTTP/2 too.
    let mut h2 = H2::connect(&sc.addr).await;
    let frames = h2.get(1, "//orders.Orders/./Get").await;
    assert!(frames.iter().any(|f| f.kind == raw_http::HEADERS));
    assert_eq!(up.paths().last().unwrap(), canonical);
    // Escaped separators and broken escapes: 400, nothing forwarded.
    let before = up.http_requests();
    for sent in [
        "/orders.Orders%2FGet",
        "/orders.Orders%2fGet",
        "/orders.Orders/G%zzet",
    ] {
        let req = format!("GET {sent} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let r = exchange(&sc.addr, req.as_bytes()).await;
        assert_eq!(statuses(&r), [400], "{sent}: {r}");
    }
    assert_eq!(up.http_requests(), before);
    // Matching is case-sensitive: a case variant is another procedure, forwarded as written.
    let r = exchange(
        &sc.addr,
        b"GET /ORDERS.orders/GET HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(statuses(&r), [200]);
    assert_eq!(up.paths().last().unwrap(), "/ORDERS.orders/GET");
    let m = sc.scrape().await;
    assert_eq!(requests(&m, "", "orders.Orders/Get", "allowed"), 11);
    assert_eq!(requests(&m, "", "ORDERS.orders/GET", "allowed"), 1);
    assert_eq!(refused(&m, "bad_path"), 3);
    assert_eq!(
        sum(&m, "grl_sidecar_paths_normalised_total", &[]) as u64,
        9,
        "every spelling but the canonical one and the case variant"
    );
}
