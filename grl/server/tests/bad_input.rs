//! Hostile and broken input on real tiers (issue 12): fake reports refused, counted and
//! harmless; garbage bytes, HTTP/1 and oversized messages on a gRPC port; a FIFO in the
//! config dir while `/metrics` and overrides keep answering; raw override TTLs that once
//! wrapped to "now".

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::support::*;
use grl_core::proto;
use grl_core::proto::control_client::ControlClient;
use grl_core::proto::tier_client::TierClient;

const IV: Duration = Duration::from_millis(200);

fn row(bucket: &str, offered: f64) -> proto::BucketRate {
    proto::BucketRate {
        service: SERVICE.into(),
        bucket: bucket.into(),
        offered,
        clients: 1,
        ..Default::default()
    }
}

fn report(id: &str, rates: Vec<proto::BucketRate>) -> proto::Report {
    proto::Report {
        reporter_id: id.into(),
        level: proto::Level::Client as i32,
        zone: "a".into(),
        region: "eu".into(),
        services: vec![SERVICE.into()],
        rates,
        ..Default::default()
    }
}

/// A hand-written child: a `Tier/Exchange` stream to `addr` whose reports the test sends.
async fn fake_child(addr: std::net::SocketAddr) -> mpsc::Sender<proto::Report> {
    let (tx, rx) = mpsc::channel(16);
    let mut client = TierClient::connect(format!("http://{addr}")).await.unwrap();
    tokio::spawn(async move {
        if let Ok(resp) = client.exchange(ReceiverStream::new(rx)).await {
            let mut inbound = resp.into_inner();
            while let Ok(Some(_)) = inbound.message().await {}
        }
    });
    tx
}

fn refused(m: &std::collections::BTreeMap<String, f64>, reason: &str) -> f64 {
    m.get(&format!(
        "grl_tier_reports_refused_total{{reason=\"{reason}\"}}"
    ))
    .copied()
    .unwrap_or(0.0)
}

fn offered(m: &std::collections::BTreeMap<String, f64>) -> f64 {
    m.get(r#"grl_tier_offered_rps{service="payments",bucket="gateway-pay",scope="global"}"#)
        .copied()
        .unwrap_or(0.0)
}

/// Issue 12: a fake report with `offered=1e9` made the aggregator drop all legitimate
/// traffic; `-1e9` or `NaN` switched the limit off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_reports_are_refused_counted_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 1000.0);
    let (ctl, c) = controller_on(listener().await, dir.path(), IV).await;
    let agg = aggregator_on(listener().await, "a", "eu", &ctl.addr.to_string(), IV).await;
    let real = client(&agg, "a", "eu", "real-1", IV);
    let version = c.snapshot().version.clone();
    assert!(
        until(Duration::from_secs(10), || real.status().config_version
            == version)
        .await
        .is_some(),
        "the real client never got its config"
    );
    let _t = Traffic::start(vec![(real.clone(), "gateway".into(), 600.0)]);
    let m = agg.metrics_addr.unwrap();
    let mut ready = false;
    for _ in 0..100 {
        let o = offered(&scrape(m).await);
        if (o - 600.0).abs() < 120.0 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        ready,
        "the aggregator never summed the real client's 600 rps"
    );

    let fake = fake_child(agg.addr).await;
    let hostile = [
        ("implausible", vec![row("gateway-pay", 1e9)]),
        ("negative", vec![row("gateway-pay", -1e9)]),
        ("not_finite", vec![row("gateway-pay", f64::NAN)]),
        ("not_finite", vec![row("gateway-pay", f64::INFINITY)]),
        ("unknown_bucket", vec![row("ghost", 5.0)]),
    ];
    for (_, rates) in &hostile {
        fake.send(report("fake-1", rates.clone())).await.unwrap();
    }
    // The real client's id from a second live stream: a duplicate, refused whole.
    let dup = fake_child(agg.addr).await;
    dup.send(report("real-1", vec![row("gateway-pay", 5e5)]))
        .await
        .unwrap();
    // Too many rows in one report.
    let too_many = grl::tier::engine::admission::ReportLimits::default().max_rows + 1;
    let rows = (0..too_many).map(|_| row("gateway-pay", 1.0)).collect();
    fake.send(report("fake-2", rows)).await.unwrap();

    let want = [
        ("implausible", 1.0),
        ("negative", 1.0),
        ("not_finite", 2.0),
        ("unknown_bucket", 1.0),
        ("duplicate_client", 1.0),
        ("too_many_rows", 1.0),
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let scraped = scrape(m).await;
        if want.iter().all(|(r, n)| refused(&scraped, r) >= *n) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "refusals not counted: {scraped:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Nothing changed: the real 600 rps is all the aggregator sums, nobody is dropped.
    for _ in 0..5 {
        let o = offered(&scrape(m).await);
        assert!((o - 600.0).abs() < 150.0, "the sum moved to {o}");
        tokio::time::sleep(IV).await;
    }
    let w = window(
        std::slice::from_ref(&real),
        "gateway-pay",
        Duration::from_secs(1),
    )
    .await;
    assert!(w[0][0] > 300, "the real client offered {:?}", w[0]);
    assert_eq!(
        w[0][2], 0,
        "legitimate traffic under the limit was dropped: {:?}",
        w[0]
    );
    let st = real.status();
    assert!(
        st.ratios.get("gateway-pay").is_none_or(|r| *r == 0.0),
        "{st:?}"
    );
}

/// Issue 12 item 5: garbage bytes, an HTTP/1 request and an oversized message on a gRPC
/// port leave the server serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_http1_and_oversized_messages_leave_the_grpc_port_serving() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 1000.0);
    let (ctl, _c) = controller_on(listener().await, dir.path(), IV).await;
    let agg = aggregator_on(listener().await, "a", "eu", &ctl.addr.to_string(), IV).await;
    for addr in [ctl.addr, agg.addr] {
        let inputs: [&[u8]; 4] = [
            b"\x00\xff\x13\x37garbage\r\n\r\n\x00\x00\x00\x00",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff\xff\xff\xff\xff\xff\xff\xff",
            &[
                0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
            ],
        ];
        for bytes in inputs {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(bytes).await.unwrap();
            let mut buf = vec![0u8; 4096];
            // The server answers or closes; either way it must not hang or die.
            let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        }
        let mut tier = TierClient::connect(format!("http://{addr}")).await.unwrap();
        tier.status(proto::StatusRequest::default())
            .await
            .unwrap_or_else(|e| panic!("{addr} stopped serving: {e}"));

        // A report larger than the maximum message size is refused; the port serves on.
        let (tx, rx) = mpsc::channel(1);
        let mut huge = report("huge", Vec::new());
        huge.services = vec!["s".repeat(200); 90_000];
        tx.send(huge).await.unwrap();
        let mut big = TierClient::connect(format!("http://{addr}"))
            .await
            .unwrap()
            .max_encoding_message_size(usize::MAX);
        let out = tokio::time::timeout(Duration::from_secs(10), async {
            let mut inbound = big.exchange(ReceiverStream::new(rx)).await?.into_inner();
            inbound.message().await
        })
        .await
        .expect("an oversized report hung the stream");
        // Refused: the stream fails or ends without an instruction, and no child appears.
        match out {
            Ok(None) => {}
            Ok(Some(i)) => panic!("an oversized report got an instruction: {i:?}"),
            Err(e) => assert_ne!(e.code(), tonic::Code::Ok, "{e}"),
        }
        let st = tier
            .status(proto::StatusRequest::default())
            .await
            .unwrap_or_else(|e| panic!("{addr} stopped serving after a huge message: {e}"))
            .into_inner();
        assert!(st.children.iter().all(|c| c.id != "huge"), "{st:?}");
    }
}

/// Issue 12: a FIFO named `*.yaml` froze the config follower until written. It is refused
/// without being opened, counted, and `/metrics` and overrides answer meanwhile.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_the_config_dir_is_refused_while_metrics_and_overrides_answer() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 1000.0);
    let (ctl, c) = controller_on(listener().await, dir.path(), IV).await;
    let version = c.snapshot().version.clone();
    let fifo = dir.path().join("services/zz.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let m = ctl.metrics_addr.unwrap();
    let mut rpc = ControlClient::connect(format!("http://{}", ctl.addr))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let scraped = tokio::time::timeout(Duration::from_secs(2), scrape(m))
            .await
            .expect("/metrics stopped answering");
        let set = tokio::time::timeout(
            Duration::from_secs(2),
            rpc.list_overrides(proto::ListOverridesRequest {}),
        )
        .await
        .expect("overrides stopped answering");
        assert!(set.is_ok());
        if scraped.get("grl_controller_config_refused_total") == Some(&1.0) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the FIFO was never refused: {scraped:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(c.snapshot().version, version, "the config in force stays");
    // Counted once, not on every poll.
    tokio::time::sleep(IV * 3).await;
    assert_eq!(
        scrape(m).await.get("grl_controller_config_refused_total"),
        Some(&1.0)
    );
}

/// Issue 12: a raw TTL of 2^64-1 wrapped to "now"; `99999999999d` was accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_override_ttls_that_would_wrap_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 1000.0);
    let (ctl, _c) = controller_on(listener().await, dir.path(), IV).await;
    let mut rpc = ControlClient::connect(format!("http://{}", ctl.addr))
        .await
        .unwrap();
    for (ttl, rps) in [(u64::MAX, 5.0), (99_999_999_999 * 86_400, 5.0), (60, 1e300)] {
        let err = rpc
            .set_override(proto::SetOverrideRequest {
                service: SERVICE.into(),
                caller: "batch".into(),
                rps,
                ttl_seconds: ttl,
                ..Default::default()
            })
            .await
            .expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    }
    let list = rpc
        .list_overrides(proto::ListOverridesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(list.overrides.is_empty(), "{list:?}");
}

/// Runs `grl args…` and returns its exit code and stderr; it must exit within 30 s.
fn run_grl(args: &[&str]) -> (Option<i32>, String) {
    use std::io::Read as _;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_grl"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("grl {args:?} did not exit (it should refuse its flags at once)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), err)
}

/// Issue 12: start-up mistakes failed silently (`--config` at a missing path or a file
/// started with zero buckets; `--interval-ms 0` panicked a worker; loadgen
/// `--interval-ms 0` panicked and exited 0; an `inf` profile rate hung; a TTL of
/// `99999999999d` was accepted). Each is now refused before serving, with exit code 2.
#[test]
fn bad_start_up_flags_exit_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 1000.0);
    let file = dir.path().join("services/payments.yaml");
    let missing = dir.path().join("missing");
    let inf = dir.path().join("inf.csv");
    std::fs::write(&inf, "second,caller,procedure,rps\n0,gateway,Pay/A,inf\n").unwrap();
    let huge = dir.path().join("huge.csv");
    std::fs::write(&huge, "0,gateway,Pay/A,2e7\n").unwrap();
    let ok_profile = dir.path().join("ok.csv");
    std::fs::write(&ok_profile, "0,gateway,Pay/A,10\n").unwrap();
    let d = dir.path().to_str().unwrap();
    let listen = ["--listen", "127.0.0.1:0"];
    let ctl = |extra: &[&str]| -> Vec<String> {
        let mut v = strings(&["controller"]);
        v.extend(strings(&listen));
        v.extend(strings(extra));
        v
    };
    let loadgen = |profile: &std::path::Path, extra: &[&str]| {
        let p = profile.to_str().unwrap().to_string();
        let mut v: Vec<String> = [
            "loadgen",
            "--aggregator",
            "127.0.0.1:1",
            "--zone",
            "a",
            "--duration",
            "1",
            "--profile",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
        v.push(p);
        v.extend(extra.iter().map(|s| (*s).to_string()));
        v
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (ctl(&["--config", missing.to_str().unwrap()]), "--config"),
        (
            ctl(&["--config", file.to_str().unwrap()]),
            "not a directory",
        ),
        (ctl(&["--config", d, "--interval-ms", "0"]), "--interval-ms"),
        (ctl(&["--config", d, "--poll-ms", "0"]), "--poll-ms"),
        (
            ctl(&["--config", d, "--max-client-rps", "NaN"]),
            "--max-client-rps",
        ),
        (
            ctl(&["--config", d, "--election", "zk=http://127.0.0.1:1"]),
            "--election",
        ),
        (
            ctl(&["--config", d, "--election", "etcd=http://127.0.0.1:1"]),
            "--election-key",
        ),
        (
            ctl(&[
                "--config",
                d,
                "--election",
                "etcd=http://127.0.0.1:1",
                "--election-key",
                "/k",
                "--election-ttl",
                "1",
            ]),
            "--election-ttl",
        ),
        (
            strings(&[
                "controller",
                "--listen",
                "0.0.0.0:0",
                "--insecure-admin",
                "--config",
                d,
                "--election",
                "etcd=http://127.0.0.1:1",
                "--election-key",
                "/k",
            ]),
            "--advertise",
        ),
        (
            strings(&[
                "aggregator",
                "--listen",
                "127.0.0.1:0",
                "--zone",
                "a",
                "--region",
                "eu",
                "--controller",
                "127.0.0.1:1",
                "--interval-ms",
                "0",
            ]),
            "--interval-ms",
        ),
        (
            loadgen(&ok_profile, &["--interval-ms", "0"]),
            "--interval-ms",
        ),
        (loadgen(&ok_profile, &["--clients", "0"]), "--clients"),
        (loadgen(&inf, &[]), "rps must be a finite number"),
        (loadgen(&huge, &[]), "rps must be a finite number"),
        (
            strings(&[
                "override",
                "set",
                "--controller",
                "127.0.0.1:1",
                "--service",
                "payments",
                "--caller",
                "x",
                "--rps",
                "5",
                "--ttl",
                "99999999999d",
            ]),
            "--ttl",
        ),
        (
            strings(&[
                "override",
                "set",
                "--controller",
                "127.0.0.1:1",
                "--service",
                "payments",
                "--caller",
                "x",
                "--rps",
                "1e300",
                "--ttl",
                "1h",
            ]),
            "--rps",
        ),
        (
            strings(&[
                "sidecar",
                "--upstream",
                "http://127.0.0.1:1",
                "--service",
                "payments",
                "--aggregator",
                "127.0.0.1:1",
                "--zone",
                "a",
                "--region",
                "eu",
                "--threads",
                "0",
            ]),
            "--threads",
        ),
    ];
    for (args, words) in cases {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, err) = run_grl(&refs);
        assert_eq!(code, Some(2), "grl {args:?} exited {code:?}: {err}");
        assert!(
            err.contains(words),
            "grl {args:?}: `{err}` should mention `{words}`"
        );
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_string()).collect()
}

/// High-cardinality ids keep memory bounded: beyond the cap, new children are refused and
/// counted, and the tier keeps serving the ones it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_beyond_the_cap_are_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 1000.0);
    let (ctl, _c) = controller_on(listener().await, dir.path(), IV).await;
    let agg = aggregator_on(listener().await, "a", "eu", &ctl.addr.to_string(), IV).await;
    agg.node
        .set_report_limits(grl::tier::engine::admission::ReportLimits {
            max_children: 5,
            ..Default::default()
        });
    let mut streams = Vec::new();
    for i in 0..12 {
        let tx = fake_child(agg.addr).await;
        tx.send(report(&format!("churn-{i}"), Vec::new()))
            .await
            .unwrap();
        streams.push(tx);
    }
    let m = agg.metrics_addr.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let scraped = scrape(m).await;
        if refused(&scraped, "too_many_children") >= 7.0 {
            assert_eq!(
                scraped.get(r#"grl_tier_children{level="client"}"#),
                Some(&5.0),
                "{scraped:#?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "children beyond the cap not refused: {scraped:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 12: a FIFO named `*.yaml` hung start-up silently. The controller now exits at
/// once, naming the file.
#[cfg(unix)]
#[test]
fn a_fifo_in_the_config_dir_stops_start_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 1000.0);
    let fifo = dir.path().join("services/zz.yaml");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let d = dir.path().to_str().unwrap();
    let (code, err) = run_grl(&["controller", "--listen", "127.0.0.1:0", "--config", d]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("services/zz.yaml") && err.contains("not a regular file"),
        "{err}"
    );
}

/// Compiles `grl.proto` into Python modules (grpcio-tools) in a new directory.
fn python_grl_stubs() -> tempfile::TempDir {
    let out = tempfile::tempdir().unwrap();
    let proto = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/proto");
    let status = std::process::Command::new(crate::sidecar::python())
        .args(["-m", "grpc_tools.protoc", "-I"])
        .arg(&proto)
        .arg(format!("--python_out={}", out.path().display()))
        .arg(format!("--grpc_python_out={}", out.path().display()))
        .arg("grl/v1/grl.proto")
        .status()
        .unwrap();
    assert!(status.success(), "grpc_tools.protoc failed on grl.proto");
    out
}

/// Issue 24 item 1: a peer's claim of how many clients a row sums once re-opened the
/// fake-report attack (`clients: 2000` made `offered: 1e9` plausible). A hostile Python
/// child built from `grl.proto` sends such rows on a client-level stream to a real
/// aggregator (held to one client: refused as implausible), claims a zone's level there
/// (an aggregator takes clients only: refused), and sends a zone-level row of 1e9 to the
/// real controller (held to `--max-child-rps`: refused). Every refusal is counted, and the
/// real clients under the limit never see a drop ratio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_clients_do_not_make_a_fake_rate_plausible() {
    use super::binary::{spawn, wait_port};
    use test_support::ports::free_port;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 1000.0);
    let (cp, cm, ap, am) = (free_port(), free_port(), free_port(), free_port());
    let (ctl, agg) = (format!("127.0.0.1:{cp}"), format!("127.0.0.1:{ap}"));
    let config = dir.path().display().to_string();
    let _ctl = spawn(&[
        "controller",
        "--listen",
        &ctl,
        "--config",
        &config,
        "--interval-ms",
        "200",
        "--metrics-listen",
        &format!("127.0.0.1:{cm}"),
    ]);
    wait_port(cp);
    let _agg = spawn(&[
        "aggregator",
        "--listen",
        &agg,
        "--zone",
        "a",
        "--region",
        "eu",
        "--controller",
        &ctl,
        "--interval-ms",
        "200",
        "--metrics-listen",
        &format!("127.0.0.1:{am}"),
    ]);
    wait_port(ap);
    wait_port(am);
    let real: Vec<_> = (0..2)
        .map(|i| {
            let mut cfg = grl_client::ClientConfig::new(SERVICE, format!("http://{agg}"));
            cfg.zone = "a".into();
            cfg.region = "eu".into();
            cfg.interval = IV;
            cfg.id = format!("real-{i}");
            let c = grl_client::Client::new(cfg);
            c.spawn();
            c
        })
        .collect();
    let _t = Traffic::start(
        real.iter()
            .map(|c| (c.clone(), "gateway".to_string(), 300.0))
            .collect(),
    );
    let (ctl_m, agg_m): (std::net::SocketAddr, std::net::SocketAddr) = (
        format!("127.0.0.1:{cm}").parse().unwrap(),
        format!("127.0.0.1:{am}").parse().unwrap(),
    );
    let mut summed = false;
    for _ in 0..200 {
        if (offered(&scrape(ctl_m).await) - 600.0).abs() < 120.0 {
            summed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        summed,
        "the controller never summed the real clients' 600 rps"
    );

    let stubs = python_grl_stubs();
    let stubs_dir = stubs.path().display().to_string();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/fake_child.py");
    let hostile = |target: String, id: &'static str, level: &'static str| {
        let (script, stubs_dir) = (script.clone(), stubs_dir.clone());
        std::thread::spawn(move || {
            let out = std::process::Command::new(crate::sidecar::python())
                .arg(script)
                .args(["--stubs", &stubs_dir, "--target", &target, "--id", id])
                .args(["--bucket", "gateway-pay", "--level", level])
                .args(["--clients", "2000", "--offered", "1e9", "--seconds", "4"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "fake_child.py failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).to_string()
        })
    };
    let attacks = [
        hostile(agg.clone(), "hostile-client", "CLIENT"),
        hostile(agg.clone(), "hostile-zone", "ZONE"),
        hostile(ctl.clone(), "hostile-zone-at-controller", "ZONE"),
    ];
    let started = tokio::time::Instant::now();
    let mut max_ratio = 0.0f64;
    let mut max_offered = 0.0f64;
    while attacks.iter().any(|a| !a.is_finished()) || started.elapsed() < Duration::from_secs(5) {
        for c in &real {
            max_ratio = max_ratio.max(c.status().ratios.get("gateway-pay").copied().unwrap_or(0.0));
        }
        max_offered = max_offered.max(offered(&scrape(ctl_m).await));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for a in attacks {
        let line = a.join().unwrap();
        assert!(line.contains("\"sent\""), "fake_child.py printed {line:?}");
    }
    let (a, c) = (scrape(agg_m).await, scrape(ctl_m).await);
    assert!(
        refused(&a, "implausible") >= 1.0,
        "the aggregator took a client's row claiming 2,000 clients: {a:#?}"
    );
    assert!(
        refused(&a, "level") >= 1.0,
        "the aggregator took a zone-level report: {a:#?}"
    );
    assert!(
        refused(&c, "implausible") >= 1.0,
        "the controller took a zone row of 1e9 claiming 2,000 clients: {c:#?}"
    );
    assert!(
        max_offered < 1e6,
        "the controller's sum reached {max_offered} during the attack"
    );
    assert_eq!(max_ratio, 0.0, "the real clients were sent a drop ratio");
    let w = window(&real, "gateway-pay", Duration::from_secs(1)).await;
    assert_eq!(sum(&w)[2], 0, "the real clients dropped: {w:?}");
}
