//! The `/status` page under the same TLS and admin authorisation as the gRPC port's admin
//! calls, against a real controller: with `--metrics-tls` the admin HTTP port serves TLS
//! (HTTP/1.1 and HTTP/2) with the tier's certificate, a scraper reads `/metrics` without a
//! client certificate, and `/status` takes an `--admin-allow` identity and refuses any
//! other; a plain-HTTP port on a non-loopback address refuses to take the token at all
//! unless the operator accepted that with `--insecure-admin`. Clients are `curl`.

use std::path::Path;

use rcgen::SanType;
use test_support::ports::free_port;

use super::binary::{Proc, spawn, wait_port};
use super::operator::{curl, write_config};
use super::security::Ca;

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// A controller with `extra` flags, its gRPC port on loopback and its admin HTTP port on
/// `metrics_host`; (process, admin HTTP port).
fn controller(dir: &Path, metrics_host: &str, extra: &[&str]) -> (Proc, u16) {
    let (cp, mp) = (free_port(), free_port());
    let (listen, metrics) = (format!("127.0.0.1:{cp}"), format!("{metrics_host}:{mp}"));
    let config = path(dir);
    let mut args = vec![
        "controller",
        "--listen",
        &listen,
        "--config",
        &config,
        "--metrics-listen",
        &metrics,
        "--region",
        "eu",
    ];
    args.extend(extra);
    let p = spawn(&args);
    wait_port(cp);
    wait_port(mp);
    (p, mp)
}

#[test]
fn over_metrics_tls_the_page_takes_an_admin_certificate_and_a_scraper_needs_none() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, 200);
    let pki = d.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    let ca = Ca::new(&pki, "ca");
    let (cert, key) = ca.leaf("controller", "controller");
    let ops = ca.client_leaf(
        "ops",
        vec![SanType::DnsName("ops".try_into().unwrap())],
        "ops",
    );
    let intruder = ca.client_leaf(
        "intruder",
        vec![SanType::DnsName("intruder".try_into().unwrap())],
        "intruder",
    );
    let (cert, key, ca_pem) = (path(&cert), path(&key), path(&ca.cert_path()));
    let (_ctl, port) = controller(
        d,
        "127.0.0.1",
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-client-ca",
            &ca_pem,
            "--admin-allow",
            "ops",
            "--metrics-tls",
        ],
    );
    let url = |p: &str| format!("https://localhost:{port}{p}");
    let (ops_cert, ops_key) = (path(&ops.0), path(&ops.1));

    for http in ["--http1.1", "--http2"] {
        let (code, head, body) = curl(&[
            http,
            "--cacert",
            &ca_pem,
            "--cert",
            &ops_cert,
            "--key",
            &ops_key,
            &url("/status"),
        ]);
        assert_eq!(
            code, 200,
            "{http}, an allowed admin certificate: {head}{body}"
        );
        assert!(head.contains("content-type: text/html"), "{head}");
        assert!(body.contains("data-bucket=\"orders/checkout\""), "{body}");
    }

    let (code, _, body) = curl(&[
        "--cacert",
        &ca_pem,
        "--cert",
        &path(&intruder.0),
        "--key",
        &path(&intruder.1),
        &url("/status"),
    ]);
    assert_eq!(code, 403, "a certificate that is not an admin: {body}");
    assert!(body.contains("not an allowed admin"), "{body}");

    let (code, head, _) = curl(&["--cacert", &ca_pem, &url("/status")]);
    assert_eq!(code, 401, "no credentials: {head}");

    let (code, _, _) = curl(&[&format!("http://localhost:{port}/status")]);
    assert_ne!(code, 200, "plain HTTP gets no page from a TLS port");

    let (code, _, metrics) = curl(&["--cacert", &ca_pem, &url("/metrics")]);
    assert_eq!(code, 200, "a scraper needs no client certificate");
    for line in [
        "grl_controller_admin_refused_total{reason=\"identity_not_allowed\"} 1",
        "grl_controller_admin_refused_total{reason=\"no_credentials\"} 1",
        "grl_controller_admin_plaintext_tokens_total 0",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    let failed = metrics
        .lines()
        .find(|l| l.starts_with("grl_tier_admin_http_tls_events_total{event=\"handshake_failed\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no admin HTTP TLS events in {metrics}"));
    assert!(
        failed >= 1.0,
        "the plain-HTTP attempt is a failed handshake"
    );
}

#[test]
fn a_plain_http_page_on_a_public_address_takes_no_token_unless_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_config(d, 200);
    let token = "public-page-token-0123456789";
    let token_file = d.join("admin-token");
    std::fs::write(&token_file, token).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token_file = path(&token_file);
    let bearer = format!("authorization: Bearer {token}");

    let (_public, port) = controller(d, "0.0.0.0", &["--admin-token-file", &token_file]);
    let (code, _, body) = curl(&["-H", &bearer, &format!("http://127.0.0.1:{port}/status")]);
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("--metrics-tls"),
        "the answer says what to do: {body}"
    );
    let (code, _, metrics) = curl(&[&format!("http://127.0.0.1:{port}/metrics")]);
    assert_eq!(code, 200, "/metrics stays open to scrapers");
    assert!(
        metrics.contains("grl_controller_admin_refused_total{reason=\"wrong_token\"} 0"),
        "the token was not even read: {metrics}"
    );

    let (_accepted, port) = controller(
        d,
        "0.0.0.0",
        &["--admin-token-file", &token_file, "--insecure-admin"],
    );
    let (code, _, body) = curl(&["-H", &bearer, &format!("http://127.0.0.1:{port}/status")]);
    assert_eq!(code, 200, "--insecure-admin accepts it: {body}");
    assert!(body.contains("data-bucket=\"orders/checkout\""), "{body}");
}
