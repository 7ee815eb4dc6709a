//! A sidecar that enforces nothing says so (issue 40): with an unreachable aggregator, or a
//! `--service` the config does not know, `/ready` answers 503 with the reason,
//! `grl_sidecar_ready` is 0 and a warning is logged; with a known service it is ready.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use test_support::ports::free_port;

use super::binary::{BIN, Proc, aggregator, controller, wait_port};

/// `GET http://127.0.0.1:PORT/PATH`: (status code, body).
fn get(port: u16, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (code, body.to_string())
}

/// A sidecar for `service` under `aggregator`, its stderr in `log`; returns once its
/// metrics port listens.
fn sidecar(service: &str, aggregator: &str, log: &std::path::Path) -> (Proc, u16) {
    let (lp, mp) = (free_port(), free_port());
    let child = Command::new(BIN)
        .args([
            "sidecar",
            "--listen",
            &format!("127.0.0.1:{lp}"),
            "--metrics-listen",
            &format!("127.0.0.1:{mp}"),
            "--upstream",
            "http://127.0.0.1:9",
            "--service",
            service,
            "--aggregator",
            aggregator,
            "--zone",
            "a",
            "--region",
            "eu",
            "--interval-ms",
            "200",
        ])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let p = Proc(child);
    wait_port(mp);
    (p, mp)
}

/// Waits (up to 15 s) until `/ready` answers `code` and the log holds `needle`.
fn wait_for(port: u16, code: u16, log: &std::path::Path, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let (c, body) = get(port, "/ready");
        let logged = std::fs::read_to_string(log).unwrap_or_default();
        if c == code && logged.contains(needle) {
            return body;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "/ready {c} {body}; log: {logged}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sidecar_without_instructions_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sidecar.log");
    let dead = format!("127.0.0.1:{}", free_port());
    let (_s, mp) = sidecar("orders", &dead, &log);
    let body = wait_for(mp, 503, &log, "sidecar not ready");
    assert!(body.starts_with("no_instructions"), "{body}");
    assert!(body.contains(&dead), "{body}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("reason=\"no_instructions\"") || logged.contains("reason=no_instructions"),
        "{logged}"
    );
    let (_, metrics) = get(mp, "/metrics");
    assert!(
        metrics.contains("grl_sidecar_ready{service=\"orders\",reason=\"no_instructions\"} 0"),
        "{metrics}"
    );
    assert_eq!(get(mp, "/healthz").0, 200);
}

#[test]
fn sidecar_with_an_unknown_service_is_not_ready_and_a_known_one_is() {
    let dir = tempfile::tempdir().unwrap();
    crate::support::write_config(dir.path(), 100.0);
    let cp = free_port();
    let _c = controller(cp, dir.path());
    let ap = free_port();
    let _a = aggregator(ap, &format!("127.0.0.1:{cp}"), &[]);
    let agg = format!("127.0.0.1:{ap}");
    wait_port(ap);

    let log = dir.path().join("nosuch.log");
    let (_s, mp) = sidecar("paymnets", &agg, &log);
    let body = wait_for(mp, 503, &log, "sidecar not ready");
    assert!(body.starts_with("unknown_service"), "{body}");
    assert!(body.contains("`paymnets`"), "{body}");
    let (_, metrics) = get(mp, "/metrics");
    assert!(
        metrics.contains("grl_sidecar_ready{service=\"paymnets\",reason=\"unknown_service\"} 0"),
        "{metrics}"
    );

    let log = dir.path().join("payments.log");
    let (_s, mp) = sidecar(crate::support::SERVICE, &agg, &log);
    let body = wait_for(mp, 200, &log, "sidecar ready");
    assert!(body.starts_with("ready"), "{body}");
    let (_, metrics) = get(mp, "/metrics");
    assert!(
        metrics.contains("grl_sidecar_ready{service=\"payments\",reason=\"ready\"} 1"),
        "{metrics}"
    );
}
