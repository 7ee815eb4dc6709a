//! The sidecar's Envoy rate limit service (v3) called by Python `grpcio` through
//! `xds-protos`, the stubs generated from Envoy's published API: `OK`/`OVER_LIMIT` under a
//! ratio pushed by a real controller, request-level and per-descriptor `hits_addend`, shadow
//! buckets, malformed requests, and `/metrics` adding up to the hits sent.

use std::time::{Duration, Instant};

use super::sidecar::{
    ControlPlane, Sidecar, Upstream, n, requests, rls_client, sum, target_args as args,
};

const PROCEDURE: &str = "pay.Pay/Card";

async fn rls_call(args: Vec<String>) -> (serde_json::Value, bool) {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        rls_client(&args)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_limit_per_descriptor_with_hits_addend_and_metrics_adding_up() {
    let cp = ControlPlane::start().await;
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &cp.aggregator(), &[]);
    // Descriptor 0: the limited caller, 10 hits of its own; descriptor 1: a caller with no
    // bucket, the request's 3 hits, its procedure as Envoy's `:path` with a query.
    let (s, seen) = rls_call(args(
        &sc.rls,
        &[
            "--descriptor",
            r#"{"entries": [["source_cluster", "limited"], ["path", "/pay.Pay/Card"]], "hits": 10}"#,
            "--descriptor",
            r#"{"entries": [["source_cluster", "free"], ["path", "/pay.Pay/Card?q=1"], ["other", "x"]]}"#,
            "--hits",
            "3",
            "--until",
            "OVER_LIMIT",
            "--then",
            "100",
            "--deadline",
            "60",
        ],
    ))
    .await;
    assert!(seen, "never OVER_LIMIT: {s}");
    let calls = n(&s, "calls");
    assert_eq!(n(&s["grpc"], "OK"), calls, "{s}");
    let over = n(&s["overall"], "OVER_LIMIT");
    assert!(over > 0 && n(&s["overall"], "OK") > 0, "{s}");
    // The limited descriptor alone makes the answer OVER_LIMIT; the other stays OK.
    assert_eq!(n(&s["statuses"][0], "OVER_LIMIT"), over, "{s}");
    assert_eq!(n(&s["statuses"][1], "OK"), calls, "{s}");
    assert_eq!(s["hits_sent"][0], 10 * calls);
    // Every OVER_LIMIT answer names the limited descriptor's bucket for Envoy to add to its
    // 429; an OK answer names none.
    let over_headers = &s["headers"]["OVER_LIMIT"];
    assert_eq!(
        n(&over_headers["grl-bucket"], "payments/limited"),
        over,
        "{s}"
    );
    assert_eq!(
        n(
            &over_headers["ratelimit-policy"],
            "\"payments/limited\";q=20;w=1"
        ),
        over,
        "{s}"
    );
    assert_eq!(s["headers"]["OK"], serde_json::json!({}), "{s}");
    assert_eq!(s["hits_sent"][1], 3 * calls);

    let m = sc.scrape().await;
    let offered = |caller| {
        ["allowed", "dropped", "shadow_dropped"]
            .iter()
            .map(|d| requests(&m, caller, PROCEDURE, d))
            .sum::<u64>()
    };
    assert_eq!(offered("limited"), 10 * calls);
    assert_eq!(offered("free"), 3 * calls);
    assert!(requests(&m, "limited", PROCEDURE, "dropped") > 0);
    assert_eq!(requests(&m, "free", PROCEDURE, "dropped"), 0);
    let rls = |code| sum(&m, "grl_sidecar_rls_requests_total", &[("code", code)]) as u64;
    assert_eq!(rls("over_limit"), over);
    assert_eq!(rls("ok"), calls - over);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_descriptors_answer_ok_and_count_virtual_drops() {
    let cp = ControlPlane::start().await;
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &cp.aggregator(), &[]);
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        let (s, _) = rls_call(args(
            &sc.rls,
            &[
                "--descriptor",
                r#"{"entries": [["source_cluster", "shadowed"], ["path", "/pay.Pay/Card"]], "hits": 10}"#,
                "--min-seconds",
                "1",
            ],
        ))
        .await;
        let calls = n(&s, "calls");
        assert_eq!(
            n(&s["overall"], "OK"),
            calls,
            "a shadow bucket refused: {s}"
        );
        sent += 10 * calls;
        let m = sc.scrape().await;
        let shadow = requests(&m, "shadowed", PROCEDURE, "shadow_dropped");
        if shadow > 0 {
            assert_eq!(requests(&m, "shadowed", PROCEDURE, "dropped"), 0);
            assert_eq!(
                requests(&m, "shadowed", PROCEDURE, "allowed") + shadow,
                sent
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "no virtual drop counted"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_domain_foreign_domain_and_no_descriptors_are_invalid_argument() {
    let up = Upstream::start().await;
    let agg = test_support::ports::free_addr().to_string();
    let sc = Sidecar::start(&up.url(), &agg, &[]);
    let d = r#"{"entries": [["source_cluster", "a"]]}"#;
    for (rest, want) in [
        (vec!["--domain", "", "--descriptor", d], "domain is empty"),
        (
            vec!["--domain", "orders", "--descriptor", d],
            "\"payments\"",
        ),
        (vec![], "no descriptors"),
    ] {
        let mut a = rest.clone();
        a.extend(["--until", "INVALID_ARGUMENT"]);
        let (s, seen) = rls_call(args(&sc.rls, &a)).await;
        assert!(seen, "{rest:?}: {s}");
        let detail = s["details"]["INVALID_ARGUMENT"]
            .as_str()
            .unwrap_or_default();
        assert!(detail.contains(want), "{rest:?}: {detail}");
    }
    let m = sc.scrape().await;
    assert_eq!(
        sum(
            &m,
            "grl_sidecar_rls_requests_total",
            &[("code", "invalid_argument")]
        ),
        3.0
    );
    assert_eq!(sum(&m, "grl_requests_total", &[]), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_rate_limit_service_answers_tls_callers_only() {
    let dir = tempfile::tempdir().unwrap();
    let ca = crate::security::Ca::new(dir.path(), "ca");
    let (cert, key) = ca.leaf("sidecar", "sidecar");
    let up = Upstream::start().await;
    let agg = format!("127.0.0.1:{}", test_support::ports::free_port());
    let (cert, key, ca_file) = (
        cert.display().to_string(),
        key.display().to_string(),
        ca.cert_path().display().to_string(),
    );
    let sc = Sidecar::start(
        &up.url(),
        &agg,
        &["--rls-tls-cert", &cert, "--rls-tls-key", &key],
    );
    let d = r#"{"entries": [["source_cluster", "a"], ["path", "/pay.Pay/Card"]]}"#;
    let (s, seen) = rls_call(args(
        &sc.rls,
        &["--ca", &ca_file, "--descriptor", d, "--until", "OK"],
    ))
    .await;
    assert!(seen, "a TLS caller got no answer: {s}");
    let (s, seen) = rls_call(args(
        &sc.rls,
        &[
            "--descriptor",
            d,
            "--until",
            "OK",
            "--deadline",
            "3",
            "--timeout",
            "1",
        ],
    ))
    .await;
    assert!(!seen, "a plaintext caller was answered: {s}");
    assert_eq!(n(&s["overall"], "OK"), 0, "{s}");
    let m = sc.scrape().await;
    assert_eq!(
        sum(&m, "grl_sidecar_rls_requests_total", &[]),
        1.0,
        "only the TLS call reached the service"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_summed_over_a_calls_descriptors_are_bounded_and_long_domains_are_not_echoed() {
    let up = Upstream::start().await;
    let agg = test_support::ports::free_addr().to_string();
    let sc = Sidecar::start(&up.url(), &agg, &[]);
    // 10,000 descriptors of 1,000 hits each: 1e7 hits in one call, each under the bound.
    let d = r#"{"entries": [["source_cluster", "a"], ["path", "/pay.Pay/Card"]], "hits": 1000}"#;
    let (s, seen) = rls_call(args(
        &sc.rls,
        &[
            "--descriptor",
            d,
            "--copies",
            "10000",
            "--until",
            "INVALID_ARGUMENT",
        ],
    ))
    .await;
    assert!(seen, "{s}");
    let detail = s["details"]["INVALID_ARGUMENT"].as_str().unwrap_or("");
    assert!(
        detail.contains("more than the 1000000 hits one call may carry")
            && detail.contains("of 10000"),
        "{detail}"
    );
    // 1,000 descriptors of 1,000 hits: exactly the bound, answered.
    let (s, seen) = rls_call(args(
        &sc.rls,
        &["--descriptor", d, "--copies", "1000", "--until", "OK"],
    ))
    .await;
    assert!(seen, "{s}");
    // A 10 KB foreign domain: INVALID_ARGUMENT with a short message (echoed whole it made the
    // answer's metadata too large: RESOURCE_EXHAUSTED).
    let domain = "x".repeat(10_000);
    let (s, seen) = rls_call(args(
        &sc.rls,
        &[
            "--domain",
            &domain,
            "--descriptor",
            d,
            "--until",
            "INVALID_ARGUMENT",
        ],
    ))
    .await;
    assert!(seen, "{s}");
    let detail = s["details"]["INVALID_ARGUMENT"].as_str().unwrap_or("");
    assert!(
        detail.len() < 300 && detail.contains("xxx…") && detail.contains("\"payments\""),
        "{detail}"
    );
    let m = sc.scrape().await;
    assert_eq!(
        sum(
            &m,
            "grl_sidecar_rls_requests_total",
            &[("code", "invalid_argument")]
        ),
        2.0
    );
    assert_eq!(
        sum(&m, "grl_requests_total", &[]),
        1_000_000.0,
        "only the call at the bound was counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_900_kb_caller_and_a_300_kb_path_count_under_bounded_labels_in_their_bucket() {
    let cp = ControlPlane::start().await;
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &cp.aggregator(), &[]);
    // The bucket a request falls in is known once the config has come down.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sc
        .scrape()
        .await
        .keys()
        .any(|k| k.starts_with("grl_client_config_info{") && !k.contains("version=\"\""))
    {
        assert!(
            Instant::now() < deadline,
            "the config never reached the sidecar"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let long_caller = r#"{"entries": [["source_cluster", {"repeat": "c", "times": 900000}], ["path", "/pay.Pay/Card"]], "hits": 3}"#;
    // The caller-wide bucket `limited` still holds a 300 KB path of its caller.
    let long_path = r#"{"entries": [["source_cluster", "limited"], ["path", {"repeat": "/pay.Pay/Card", "times": 25000}]], "hits": 2}"#;
    // One call each: together they pass the service's 1 MiB message limit.
    for d in [long_caller, long_path] {
        let (s, seen) = rls_call(args(&sc.rls, &["--descriptor", d, "--until", "OK"])).await;
        assert!(seen, "{s}");
    }
    let m = sc.scrape().await;
    let bytes: usize = m.keys().map(String::len).sum();
    assert!(
        bytes < 64 * 1024,
        "/metrics is {bytes} bytes: a long name became a label"
    );
    let body = format!("{m:?}");
    assert_eq!(
        requests(&m, "__overflow__", PROCEDURE, "allowed"),
        3,
        "{body}"
    );
    let cut = format!("{}…", &"pay.Pay/Card/".repeat(25_000)[..256]);
    assert_eq!(
        sum(
            &m,
            "grl_requests_total",
            &[
                ("caller", "limited"),
                ("procedure", &cut),
                ("bucket", "limited")
            ]
        ),
        2.0,
        "{body}"
    );
    assert_eq!(
        sum(&m, "grl_sidecar_long_names_total", &[("api", "rls")]),
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_procedure_bucket_in_addition_answers_over_limit_to_a_caller_with_its_own_bucket() {
    let cp = ControlPlane::start().await;
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &cp.aggregator(), &[]);
    // `partner` has a 1 M rps bucket of its own; `voids` (2 rps) applies in addition,
    // from the moment the sidecar holds the config.
    let start = Instant::now();
    while !sc
        .scrape()
        .await
        .keys()
        .any(|k| k.starts_with("grl_client_drop_ratio{") && k.contains("bucket=\"voids\""))
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the sidecar never got its config"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (s, seen) = rls_call(args(
        &sc.rls,
        &[
            "--descriptor",
            r#"{"entries": [["source_cluster", "partner"], ["path", "/pay.Pay/Void"]]}"#,
            "--descriptor",
            r#"{"entries": [["source_cluster", "partner"], ["path", "/pay.Pay/Card"]]}"#,
            "--until",
            "OVER_LIMIT",
            "--then",
            "100",
            "--deadline",
            "60",
        ],
    ))
    .await;
    assert!(seen, "never OVER_LIMIT: {s}");
    let calls = n(&s, "calls");
    let over = n(&s["overall"], "OVER_LIMIT");
    assert_eq!(n(&s["statuses"][0], "OVER_LIMIT"), over, "{s}");
    assert_eq!(n(&s["statuses"][1], "OK"), calls, "{s}");
    // After the ratio arrived, nearly every refund is refused (2 rps of hundreds a second).
    assert!(over >= 50, "{s}");
    let m = sc.scrape().await;
    let voids = |decision| {
        sum(
            &m,
            "grl_requests_total",
            &[
                ("caller", "partner"),
                ("bucket", "voids"),
                ("decision", decision),
            ],
        ) as u64
    };
    assert_eq!(voids("dropped"), over);
    assert_eq!(voids("allowed"), calls - over);
    let partner_dropped = sum(
        &m,
        "grl_requests_total",
        &[("bucket", "partner"), ("decision", "dropped")],
    );
    assert_eq!(partner_dropped, 0.0, "the caller's own bucket refused");
}
