//! The sidecar's proxy port under hostile connections, with `grl sidecar` as a process, a
//! real upstream and clients written as raw bytes ([`super::raw_http`]): half-sent request
//! heads cut after the header timeout while others are served, idle connections closed
//! after the idle timeout (HTTP/2 pings do not keep them), connections past
//! `--max-connections` refused at once, HTTP/2 rapid reset ended by GOAWAY, request
//! smuggling refused or normalised so that the upstream sees exactly what was counted, and
//! oversized heads answered 431.

use std::time::{Duration, Instant};

use test_support::ports::free_port;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::raw_http::{self, H2, exchange, frame, read_response, statuses};
use super::sidecar::{Sidecar, Upstream, requests, sum};

/// An aggregator address nobody listens on: the client fails open and forwards everything.
fn no_aggregator() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// `grl_sidecar_connections_closed_total{reason}`.
async fn closed(sc: &Sidecar, reason: &str) -> u64 {
    sum(
        &sc.scrape().await,
        "grl_sidecar_connections_closed_total",
        &[("reason", reason)],
    ) as u64
}

/// `grl_sidecar_connections_open`.
async fn open(sc: &Sidecar) -> u64 {
    sum(&sc.scrape().await, "grl_sidecar_connections_open", &[]) as u64
}

/// Waits (up to 30 s) until `read` on `s` says the peer closed it (EOF or reset); how long
/// that took, or `None` if it sent bytes or stayed open.
async fn closed_by_peer(s: &mut TcpStream) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 256];
    match tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await {
        Ok(Ok(0) | Err(_)) => Some(start.elapsed()),
        _ => None,
    }
}

const GET: &[u8] = b"GET /pay.Pay/Card HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_heads_are_cut_after_the_header_timeout_while_a_normal_request_is_answered() {
    let up = Upstream::start().await;
    let sc = Sidecar::start(
        &up.url(),
        &no_aggregator(),
        &["--header-timeout-ms", "2000"],
    );
    let mut slow = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let mut s = TcpStream::connect(&sc.addr).await.unwrap();
        s.write_all(b"GET /pay.Pay/Card HTTP/1.1\r\nHost: x\r\nrpc-caller: slow\r\nx-pad: ")
            .await
            .unwrap();
        slow.push((s, Instant::now()));
    }
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let t = Instant::now();
        let r = exchange(&sc.addr, GET).await;
        worst = worst.max(t.elapsed());
        assert_eq!(statuses(&r), [200], "{r}");
    }
    assert!(
        worst < Duration::from_secs(1),
        "a normal request took {worst:?}"
    );
    let cut = futures::future::join_all(slow.into_iter().map(|(mut s, sent)| async move {
        let closed = closed_by_peer(&mut s).await;
        closed.map(|_| sent.elapsed())
    }))
    .await;
    let after: Vec<Duration> = cut
        .iter()
        .map(|c| c.expect("a half-sent head was not cut by the sidecar within 30 s"))
        .collect();
    let (first, last) = (after.iter().min().unwrap(), after.iter().max().unwrap());
    println!(
        "1,000 half-sent heads cut {first:?} to {last:?} after they were sent; a normal request answered in at most {worst:?}"
    );
    assert!(*first >= Duration::from_millis(1900), "cut after {first:?}");
    // Cut by the header timeout (2 s), not by anything later: within 1.5 s of it even with
    // 1,000 to close on a busy machine.
    assert!(
        *last <= Duration::from_millis(3500),
        "the last half-sent head was cut {last:?} after it was sent, the header timeout is 2 s"
    );
    assert_eq!(closed(&sc, "header_timeout").await, 1000);
    assert_eq!(
        requests(&sc.scrape().await, "slow", "pay.Pay/Card", "allowed"),
        0
    );
    assert!(open_soon(&sc, 0).await, "connections still counted open");
}

/// Whether `grl_sidecar_connections_open` reaches `n` within 10 s.
async fn open_soon(sc: &Sidecar, n: u64) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if open(sc).await == n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_after_the_idle_timeout_even_while_pinging() {
    let up = Upstream::start().await;
    let sc = Sidecar::start(
        &up.url(),
        &no_aggregator(),
        &["--header-timeout-ms", "1000", "--idle-timeout-ms", "3000"],
    );
    // HTTP/1.1 keep-alive: answered, then idle past the header timeout, then closed.
    let mut s = TcpStream::connect(&sc.addr).await.unwrap();
    s.write_all(b"GET /pay.Pay/Card HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(read_response(&mut s).await.starts_with("HTTP/1.1 200"));
    let idle = closed_by_peer(&mut s)
        .await
        .expect("idle HTTP/1.1 connection never closed");
    assert!(
        idle >= Duration::from_millis(2900),
        "closed after {idle:?} idle: the idle timeout is 3 s (the header timeout 1 s)"
    );
    assert!(
        idle <= Duration::from_millis(4500),
        "closed only {idle:?} after its answer: the idle timeout is 3 s"
    );
    assert_eq!(closed(&sc, "idle_timeout").await, 1);

    // HTTP/2: answered, then only pings; GOAWAY after the idle timeout.
    let mut h2 = H2::connect(&sc.addr).await;
    let frames = h2.get(1, "/pay.Pay/Card").await;
    assert!(
        frames
            .iter()
            .any(|f| f.kind == raw_http::HEADERS && f.stream == 1)
    );
    let start = Instant::now();
    let goaway = loop {
        assert!(start.elapsed() < Duration::from_secs(30), "no GOAWAY");
        let mut ping = Vec::new();
        frame(&mut ping, raw_http::PING, 0, 0, &[7; 8]);
        if h2.send(&ping).await.is_err() {
            panic!("connection closed without GOAWAY");
        }
        match h2.next(Duration::from_millis(300)).await {
            Some(f) if f.kind == raw_http::GOAWAY => break start.elapsed(),
            _ => {}
        }
    };
    println!("idle connections closed after {idle:?} (HTTP/1.1) and {goaway:?} (HTTP/2, GOAWAY)");
    assert!(
        goaway >= Duration::from_millis(2900),
        "GOAWAY after {goaway:?}: pings must not count as requests, nor close sooner"
    );
    // Frames may follow the GOAWAY (ping acknowledgements), then the connection ends.
    let end = tokio::time::timeout(Duration::from_secs(30), async {
        while h2.next(Duration::from_secs(60)).await.is_some() {}
    })
    .await;
    assert!(end.is_ok(), "the connection stayed open after GOAWAY");
    assert_eq!(closed(&sc, "idle_timeout").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_max_connections_are_refused_at_once_and_counted() {
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &no_aggregator(), &["--max-connections", "20"]);
    assert!(open_soon(&sc, 0).await);
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut s = TcpStream::connect(&sc.addr).await.unwrap();
        s.write_all(b"GET /pay.Pay/Card HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert!(read_response(&mut s).await.starts_with("HTTP/1.1 200"));
        held.push(s);
    }
    let r = exchange(&sc.addr, GET).await;
    assert!(
        statuses(&r).is_empty(),
        "the 21st connection was served: {r}"
    );
    assert_eq!(closed(&sc, "max_connections").await, 1);
    assert_eq!(open(&sc).await, 20);
    // One closes: a new connection is served again.
    drop(held.pop());
    let start = Instant::now();
    loop {
        let r = exchange(&sc.addr, GET).await;
        if statuses(&r) == [200] {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no slot freed after a connection closed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_rapid_reset_is_cut_off_with_goaway_and_others_are_served() {
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &no_aggregator(), &[]);
    let mut h2 = H2::connect(&sc.addr).await;
    let mut sent = 0u32;
    let goaway = 'outer: loop {
        let mut batch = Vec::new();
        for _ in 0..50 {
            let id = 2 * sent + 1;
            frame(
                &mut batch,
                raw_http::HEADERS,
                raw_http::END_STREAM | raw_http::END_HEADERS,
                id,
                &raw_http::get_headers("/pay.Pay/Card"),
            );
            frame(&mut batch, raw_http::RST_STREAM, 0, id, &8u32.to_be_bytes());
            sent += 1;
        }
        let wrote = h2.send(&batch).await.is_ok();
        while let Some(f) = h2
            .next(Duration::from_millis(if wrote { 1 } else { 2000 }))
            .await
        {
            if f.kind == raw_http::GOAWAY {
                break 'outer f;
            }
        }
        assert!(
            wrote,
            "connection closed without GOAWAY after {sent} resets"
        );
        assert!(sent < 20_000, "no GOAWAY after {sent} resets");
    };
    let last = raw_http::goaway_last_stream(&goaway);
    println!(
        "GOAWAY (code {:#x}) after {sent} resets sent, last stream {last} ({} streams)",
        raw_http::goaway_code(&goaway),
        last.div_ceil(2)
    );
    assert!(
        last.div_ceil(2) <= 200,
        "GOAWAY only after {} streams",
        last.div_ceil(2)
    );
    let mut other = H2::connect(&sc.addr).await;
    let frames = other.get(1, "/pay.Pay/Card").await;
    assert!(
        frames
            .iter()
            .any(|f| f.kind == raw_http::HEADERS && f.stream == 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_is_refused_or_normalised_and_the_upstream_sees_what_was_counted() {
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &no_aggregator(), &[]);
    // (request bytes, statuses the client gets, paths the upstream then sees)
    let cases: [(&str, &[u16], &[&str]); 6] = [
        (
            "POST /cl-te HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            // Read as chunked, then the connection is closed: the rest is never a request.
            &[200],
            &["/cl-te"],
        ),
        (
            "POST /two-cl HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 40\r\n\r\nhello",
            &[400],
            &[],
        ),
        (
            "POST /te-not-chunked HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: xchunked\r\n\r\nhello",
            &[400],
            &[],
        ),
        (
            "GET /obs-fold HTTP/1.1\r\nHost: x\r\nrpc-caller: a\r\n victim\r\n\r\n",
            &[400],
            &[],
        ),
        (
            "GET /bare-lf HTTP/1.1\nHost: x\nConnection: close\n\n",
            &[200],
            &["/bare-lf"],
        ),
        (
            "GET /te-http10 HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            &[400],
            &[],
        ),
    ];
    for (bytes, want_statuses, want_paths) in cases {
        let before_paths = up.paths().len();
        let before = sc.scrape().await;
        let r = exchange(&sc.addr, bytes.as_bytes()).await;
        assert_eq!(statuses(&r), want_statuses, "{bytes:?} → {r}");
        let seen = up.paths()[before_paths..].to_vec();
        assert_eq!(seen, want_paths, "{bytes:?}");
        let after = sc.scrape().await;
        let counted =
            sum(&after, "grl_requests_total", &[]) - sum(&before, "grl_requests_total", &[]);
        assert_eq!(
            counted as usize,
            seen.len(),
            "{bytes:?}: the upstream saw {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_heads_get_431_and_one_under_the_cap_is_served() {
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &no_aggregator(), &[]);
    let head = |extra: String| {
        format!("GET /pay.Pay/Card HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n")
    };
    let big = |n: usize| format!("x-big: {}\r\n", "a".repeat(n));
    let cases = [
        ("1 MB header", head(big(1 << 20)), 431),
        (
            "10,000 headers",
            head((0..10_000).map(|i| format!("x-h{i}: v\r\n")).collect()),
            431,
        ),
        ("70 KB head (cap 64 KiB)", head(big(70_000)), 431),
        ("60 KB head", head(big(60_000)), 200),
    ];
    for (what, bytes, want) in cases {
        let r = exchange(&sc.addr, bytes.as_bytes()).await;
        assert_eq!(statuses(&r), [want], "{what}: {}", &r[..r.len().min(200)]);
    }
    assert_eq!(up.http_requests(), 1);
}
