//! The caps of a TLS port (issue 24, item 4), with a `grl controller` process and real TCP
//! and TLS connections: silent clients fill the handshake slots and are cut at the
//! handshake deadline; a connection beyond either cap is closed at once and counted; a
//! slot given back is used again.

use std::net::SocketAddr;
use std::time::Duration;

use grl_core::proto;
use grl_core::tls::ClientTls;
use test_support::ports::free_addr;
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpStream;

use super::security::{Ca, LONG, Proc, SERVICE, metric, metrics_addr, p, wait_metric, wait_port};
use super::support::scrape;

/// Whether the server closes `s` within 2 s (EOF or reset) rather than keeping it open.
async fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(2), s.read(&mut b)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// The handshake deadline the test gives the controller, and how late past it a silent
/// client may still be cut (timers and scheduling on a busy machine).
const DEADLINE: Duration = Duration::from_millis(1500);
const MARGIN: Duration = Duration::from_millis(1000);

/// Reads from a silent client's connection `s`, opened from `start` on, until the server
/// closes it or the deadline and its margin pass: the read's outcome (`None`: still open)
/// and when it came, from `start`.
async fn silent_until_cut(
    mut s: TcpStream,
    start: tokio::time::Instant,
) -> (Option<std::io::Result<usize>>, Duration) {
    let mut b = [0u8; 1];
    let r = tokio::time::timeout_at(start + DEADLINE + MARGIN, s.read(&mut b)).await;
    (r.ok(), start.elapsed())
}

/// A gauge of `/metrics` at `m` polled until it equals `want` (at most [`LONG`]).
async fn wait_gauge(m: SocketAddr, key: &str, want: f64) -> f64 {
    let start = tokio::time::Instant::now();
    loop {
        let v = metric(&scrape(m).await, key);
        if v == want || start.elapsed() > LONG {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A TLS channel with one call made on it (so its connection is established).
async fn connected(addr: SocketAddr, ca: &ClientTls) -> Option<tonic::transport::Channel> {
    let ch = grl_core::tls::endpoint(&addr.to_string(), Some(ca))
        .ok()?
        .connect_timeout(Duration::from_secs(3))
        .connect()
        .await
        .ok()?;
    proto::control_client::ControlClient::new(ch.clone())
        .list_overrides(proto::ListOverridesRequest {})
        .await
        .ok()?;
    Some(ch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_and_handshakes_beyond_the_caps_are_closed_and_counted() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("config/services")).unwrap();
    std::fs::write(d.path().join("config/services/payments.yaml"), SERVICE).unwrap();
    let ca = Ca::new(d.path(), "ca");
    let (cert, key) = ca.leaf("controller", "controller");
    let addr = free_addr();
    let config = d.path().join("config");
    let ctl = Proc::spawn(
        &[
            "controller",
            "--listen",
            &addr.to_string(),
            "--config",
            p(&config),
            "--tls-cert",
            p(&cert),
            "--tls-key",
            p(&key),
            "--metrics-listen",
            "127.0.0.1:0",
            "--tls-max-connections",
            "4",
            "--tls-max-handshakes",
            "2",
            "--tls-handshake-timeout-ms",
            &DEADLINE.as_millis().to_string(),
        ],
        d.path().join("controller.log"),
    );
    wait_port(addr).await;
    let m = metrics_addr(&ctl).await;
    let event = |e: &str| format!("grl_tier_tls_events_total{{event=\"{e}\"}}");
    let state = |s: &str| format!("grl_tier_tls_connections{{state=\"{s}\"}}");

    // Two silent clients hold both handshake slots; a third connection is closed at once.
    // (wait_port's probe failed its handshake before: handshaking must come back to 0.)
    assert_eq!(wait_gauge(m, &state("handshaking"), 0.0).await, 0.0);
    let failed_before = metric(&scrape(m).await, &event("handshake_failed"));
    // Each timed from before its connect (so before the server's deadline starts).
    let first = tokio::time::Instant::now();
    let mut cuts = Vec::new();
    for _ in 0..2 {
        let start = tokio::time::Instant::now();
        let s = TcpStream::connect(addr).await.unwrap();
        cuts.push(tokio::spawn(silent_until_cut(s, start)));
    }
    let mut third = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_by_server(&mut third).await,
        "a third handshake was let in"
    );
    assert_eq!(metric(&scrape(m).await, &event("over_handshake_cap")), 1.0);
    // The gauge, when read before the deadline (a scrape that a busy machine delays past
    // it would see the slots given back: the closed third connection says they were held).
    let shaking = metric(&scrape(m).await, &state("handshaking"));
    if first.elapsed() < DEADLINE - Duration::from_millis(200) {
        assert_eq!(shaking, 2.0, "{}", ctl.log());
    } else {
        eprintln!("the handshaking gauge was read after the deadline: {shaking}");
    }

    // The deadline cuts the silent ones, not before it and within a margin of it, and
    // gives their slots back.
    for c in cuts {
        let (r, after) = c.await.unwrap();
        eprintln!("a silent client cut {after:?} after it connected (deadline {DEADLINE:?})");
        assert!(
            matches!(r, Some(Ok(0) | Err(_))),
            "a silent client was not cut within {:?}: {r:?}",
            DEADLINE + MARGIN
        );
        assert!(
            after >= DEADLINE,
            "a silent client was cut {after:?} after it connected, before the deadline"
        );
    }
    assert_eq!(wait_gauge(m, &state("handshaking"), 0.0).await, 0.0);
    let failed = wait_metric(m, &event("handshake_failed"), failed_before + 2.0).await;
    assert!(failed >= failed_before + 2.0, "timeouts not counted");
    // Both slots are used again: two new silent clients are held (still open a while
    // later, well before the deadline), and none is closed over the cap.
    let mut again = Vec::new();
    for _ in 0..2 {
        again.push(TcpStream::connect(addr).await.unwrap());
    }
    let held = futures::future::join_all(again.iter_mut().map(|s| async move {
        let mut b = [0u8; 1];
        tokio::time::timeout(Duration::from_millis(300), s.read(&mut b))
            .await
            .is_err()
    }))
    .await;
    assert_eq!(
        held,
        [true, true],
        "the slots the deadline gave back were not used again\n{}",
        ctl.log()
    );
    assert_eq!(
        metric(&scrape(m).await, &event("over_handshake_cap")),
        1.0,
        "a client in a slot the deadline gave back was closed over the cap"
    );
    drop(again);
    assert_eq!(wait_gauge(m, &state("handshaking"), 0.0).await, 0.0);

    // Four established connections fill the connection slots; a fifth is closed at once.
    let t = ClientTls {
        ca: ca.cert_path(),
        identity: None,
    };
    let mut open = Vec::new();
    for i in 0..4 {
        let ch = connected(addr, &t).await;
        assert!(
            ch.is_some(),
            "connection {i} refused under the cap:\n{}",
            ctl.log()
        );
        open.push(ch);
    }
    assert_eq!(wait_gauge(m, &state("open"), 4.0).await, 4.0);
    let mut fifth = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_by_server(&mut fifth).await,
        "a fifth connection was let in"
    );
    assert!(
        connected(addr, &t).await.is_none(),
        "a fifth TLS client was served"
    );
    let over = metric(&scrape(m).await, &event("over_connection_cap"));
    assert!(over >= 2.0, "connections over the cap not counted: {over}");
    assert!(ctl.log().contains("TLS port at its cap"), "{}", ctl.log());

    // One closed: its slot is used again.
    open.pop();
    assert_eq!(wait_gauge(m, &state("open"), 3.0).await, 3.0);
    assert!(
        connected(addr, &t).await.is_some(),
        "a freed slot was not used again"
    );
}
