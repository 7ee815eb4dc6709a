//! What `grl sidecar`'s refusals say, seen by `curl` against a real sidecar process under
//! ratios pushed by a real controller and aggregator: every 429 names the bucket that
//! refused it in `grl-bucket: <service>/<bucket>` (the procedure's bucket when it applies in
//! addition and refuses) with its `RateLimit-Policy`, gRPC refusals carry the same headers
//! in their trailers-only answer, and admitted requests carry neither. The draft's
//! `RateLimit` field is never sent.

use std::path::Path;
use std::time::{Duration, Instant};

use super::sidecar::{ControlPlane, Sidecar, Upstream, curl, sum};

/// One HTTP answer: status and the refusal headers (`""` when absent).
#[derive(Debug)]
struct Answer {
    code: u16,
    grl_bucket: String,
    policy: String,
    ratelimit: String,
}

/// `count` GETs of `procedure` by `caller` over one HTTP/1.1 keep-alive connection.
fn answers(addr: &str, caller: &str, procedure: &str, count: u32, dir: &Path) -> Vec<Answer> {
    let w = "%{http_code}|%header{grl-bucket}|%header{ratelimit-policy}|%header{ratelimit}\\n";
    let out = curl(&[
        "-w",
        w,
        "-H",
        &format!("rpc-caller: {caller}"),
        "-o",
        &dir.join("body_#1").display().to_string(),
        "--max-time",
        "60",
        &format!("http://{addr}/{procedure}?n=[1-{count}]"),
    ]);
    out.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            Answer {
                code: f[0].parse().unwrap(),
                grl_bucket: f[1].to_string(),
                policy: f[2].to_string(),
                ratelimit: f[3].to_string(),
            }
        })
        .collect()
}

/// Offers `caller` → `procedure` until the sidecar's client holds a drop ratio of at least
/// 0.5 for `bucket`.
async fn drive_over(sc: &Sidecar, bucket: &str, caller: &str, procedure: &str, dir: &Path) {
    let start = Instant::now();
    loop {
        let m = sc.scrape().await;
        if sum(&m, "grl_client_drop_ratio", &[("bucket", bucket)]) >= 0.5 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no drop ratio pushed for bucket `{bucket}`"
        );
        answers(&sc.addr, caller, procedure, 50, dir);
    }
}

/// Asserts that every refusal among `answers` names `bucket` with its policy of `q` requests
/// a second, that admitted answers carry no refusal header, and that at least `min` were
/// refused.
fn assert_named(answers: &[Answer], bucket: &str, q: u32, min: usize) {
    let refused: Vec<_> = answers.iter().filter(|a| a.code == 429).collect();
    assert!(refused.len() >= min, "{answers:?}");
    let policy = format!("\"payments/{bucket}\";q={q};w=1");
    for a in answers {
        match a.code {
            429 => {
                assert_eq!(a.grl_bucket, format!("payments/{bucket}"), "{a:?}");
                assert_eq!(a.policy, policy, "{a:?}");
            }
            200 => assert!(a.grl_bucket.is_empty() && a.policy.is_empty(), "{a:?}"),
            _ => panic!("unexpected answer {a:?}"),
        }
        assert!(a.ratelimit.is_empty(), "{a:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_bucket_that_refused_them_and_its_policy() {
    let cp = ControlPlane::start().await;
    let up = Upstream::start().await;
    let sc = Sidecar::start(&up.url(), &cp.aggregator(), &[]);
    let dir = tempfile::tempdir().unwrap();

    drive_over(&sc, "limited", "limited", "pay.Pay/Card", dir.path()).await;
    let limited = answers(&sc.addr, "limited", "pay.Pay/Card", 200, dir.path());
    assert_named(&limited, "limited", 20, 30);
    // Another bucket of the same service is not over its limit: nothing refused or named.
    let partner = answers(&sc.addr, "partner", "pay.Pay/Card", 100, dir.path());
    assert_named(&partner, "partner", 1_000_000, 0);
    assert!(partner.iter().all(|a| a.code == 200), "{partner:?}");

    // `partner` falls in its own bucket; `voids` (2 rps, in addition) refuses and is named.
    drive_over(&sc, "voids", "partner", "pay.Pay/Void", dir.path()).await;
    let voids = answers(&sc.addr, "partner", "pay.Pay/Void", 100, dir.path());
    assert_named(&voids, "voids", 2, 30);

    // gRPC: a trailers-only answer (HTTP/2 200, `grpc-status: 8` in the only header
    // section) with the same headers.
    let start = Instant::now();
    let head = loop {
        let head = curl(&[
            "--http2-prior-knowledge",
            "-D",
            "-",
            "-o",
            "/dev/null",
            "-X",
            "POST",
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "-H",
            "rpc-caller: limited",
            "--data-binary",
            "",
            &format!("http://{}/pay.Pay/Card", sc.addr),
        ])
        .to_lowercase();
        if head.contains("grpc-status: 8") {
            break head;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no gRPC refusal: {head}"
        );
    };
    assert!(head.starts_with("http/2 200"), "{head}");
    for line in [
        "grl-bucket: payments/limited",
        "ratelimit-policy: \"payments/limited\";q=20;w=1",
        "retry-after: 1",
    ] {
        assert!(head.contains(&format!("{line}\r\n")), "{line}: {head}");
    }
    assert!(!head.contains("\r\nratelimit:"), "{head}");
}
