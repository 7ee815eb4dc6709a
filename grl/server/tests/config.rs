//! Config through the tiers: `ApplyConfig` reaching every client, refusal of an invalid
//! snapshot, following a config dir and a git remote, and the `/metrics` of both tiers.

use std::time::Duration;

use crate::support::*;
use grl::tier::controller::{self, ConfigSource, ControllerOptions};
use grl_core::proto;
use grl_core::proto::control_client::ControlClient;
use test_support::git_remote::BareRemote;

const IV: Duration = Duration::from_millis(200);
/// Intervals from `SetOverride` to a throttling client, as the README states it.
const OVERRIDE_INTERVALS: u32 = 3;

fn file(path: &str, content: String) -> proto::ConfigFile {
    proto::ConfigFile {
        path: path.into(),
        content,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_config_reaches_every_client_and_invalid_is_refused() {
    let iv = Duration::from_millis(500);
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 100.0);
    let (ctl, c) = controller_on(listener().await, dir.path(), iv).await;
    let ctl_addr = ctl.addr.to_string();
    let mut clients = Vec::new();
    let mut aggs = Vec::new();
    for zone in ["a", "b"] {
        let agg = aggregator_on(listener().await, zone, "eu", &ctl_addr, iv).await;
        for i in 0..3 {
            clients.push(client(&agg, zone, "eu", &format!("{zone}{i}"), iv));
        }
        aggs.push(agg);
    }
    let v0 = c.snapshot().version.clone();
    let ready = until(Duration::from_secs(5), || {
        clients.iter().all(|c| c.status().config_version == v0)
    })
    .await;
    assert!(ready.is_some(), "clients never got the first config");

    let mut rpc = ControlClient::connect(format!("http://{ctl_addr}"))
        .await
        .unwrap();
    let resp = rpc
        .apply_config(proto::ApplyConfigRequest {
            version: "v2".into(),
            files: vec![file("services/payments.yaml", service_yaml(250.0))],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (resp.version.as_str(), resp.buckets, resp.enforced_buckets),
        ("v2", 4, 4)
    );
    let took = until(iv * 2, || {
        clients.iter().all(|c| c.status().config_version == "v2")
    })
    .await;
    assert!(
        took.is_some(),
        "v2 did not reach every client within 2 intervals"
    );
    let st = grl::tier::observe::status::status(&ctl.node, tokio::time::Instant::now());
    let b = st
        .buckets
        .iter()
        .find(|b| b.bucket == "gateway-pay")
        .unwrap();
    assert_eq!(b.limit_rps, Some(250.0));

    let bad = service_yaml(250.0).replace("scope: zone", "scope: planet");
    let err = rpc
        .apply_config(proto::ApplyConfigRequest {
            version: "v3".into(),
            files: vec![file("services/payments.yaml", bad)],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("services/payments.yaml") && err.message().contains("scope"),
        "unclear error: {}",
        err.message()
    );
    assert_eq!(c.snapshot().version, "v2");
    tokio::time::sleep(iv).await;
    assert!(clients.iter().all(|c| c.status().config_version == "v2"));
}

#[tokio::test]
async fn controller_refuses_to_start_on_an_invalid_dir() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("services")).unwrap();
    std::fs::write(dir.path().join("services/payments.yaml"), "service: [").unwrap();
    let opts = ControllerOptions {
        region: String::new(),
        parents: Vec::new(),
        election: None,
        interval: IV,
        config: ConfigSource::Dir(dir.path().into()),
        poll: IV,
        security: Default::default(),
    };
    let err = controller::start(opts, listener().await, None)
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("services/payments.yaml"), "{err}");
}

#[tokio::test]
async fn controller_follows_a_changed_dir_and_keeps_the_old_snapshot_on_error() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 100.0);
    let (ctl, c) = controller_on(listener().await, dir.path(), IV).await;
    let v0 = c.snapshot().version.clone();
    write_config(dir.path(), 400.0);
    let changed = until(Duration::from_secs(5), || c.snapshot().version != v0).await;
    assert!(changed.is_some(), "dir change not picked up");
    let limit = |c: &controller::Controller| {
        c.snapshot()
            .service(SERVICE)
            .unwrap()
            .bucket("gateway-pay")
            .unwrap()
            .limit
    };
    assert_eq!(limit(&c), Some(400.0));
    let v1 = c.snapshot().version.clone();
    std::fs::write(dir.path().join("services/payments.yaml"), "service: [").unwrap();
    let refused = refused_count(ctl.metrics_addr.unwrap(), 1.0).await;
    assert_eq!(refused, 1.0, "the invalid change was never read");
    assert_eq!(
        c.snapshot().version,
        v1,
        "an invalid change replaced the snapshot"
    );
}

/// Polls the controller's `grl_controller_config_refused_total` until it reaches `want`
/// (at most 10 s); returns the last value seen.
async fn refused_count(metrics: std::net::SocketAddr, want: f64) -> f64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let seen = scrape(metrics)
            .await
            .get("grl_controller_config_refused_total")
            .copied()
            .unwrap_or(0.0);
        if seen >= want || tokio::time::Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Commits `files` on `refs/heads/main` of a bare repo.
#[tokio::test]
async fn controller_picks_up_a_commit_to_the_config_git_repo() {
    let remote =
        BareRemote::with_files(&[("services/payments.yaml", service_yaml(100.0))]).unwrap();
    let first = remote.log("main")[0].0.clone();
    let opts = ControllerOptions {
        region: String::new(),
        parents: Vec::new(),
        election: None,
        interval: IV,
        config: ConfigSource::Git(remote.path().display().to_string(), "main".into()),
        poll: Duration::from_millis(200),
        security: Default::default(),
    };
    let (ctl, c) = controller::start(opts, listener().await, Some(listener().await))
        .await
        .unwrap();
    assert_eq!(c.snapshot().version, first);
    let second = remote
        .commit_files(
            "main",
            &[("services/payments.yaml", service_yaml(700.0))],
            "raise",
        )
        .unwrap();
    let seen = until(Duration::from_secs(5), || c.snapshot().version == second).await;
    assert!(seen.is_some(), "commit not picked up");
    let b = c.snapshot();
    assert_eq!(
        b.service(SERVICE)
            .unwrap()
            .bucket("gateway-pay")
            .unwrap()
            .limit,
        Some(700.0)
    );
    remote
        .commit_files(
            "main",
            &[("services/payments.yaml", "service: [")],
            "broken",
        )
        .unwrap();
    let refused = refused_count(ctl.metrics_addr.unwrap(), 1.0).await;
    assert_eq!(refused, 1.0, "the invalid commit was never read");
    assert_eq!(
        c.snapshot().version,
        second,
        "an invalid commit replaced the snapshot"
    );
}

/// A region's controller follows its own branch (`regions/eu`), not `main`: a commit to
/// `main` leaves it alone, moving the branch changes it; its version shows by region in
/// the metrics; a branch that does not exist is refused at start, named.
#[tokio::test]
async fn a_regions_controller_runs_its_own_branch() {
    let remote =
        BareRemote::with_files(&[("services/payments.yaml", service_yaml(100.0))]).unwrap();
    let first = remote.log("main")[0].0.clone();
    let opts = |config_ref: &str| ControllerOptions {
        region: "eu".into(),
        parents: Vec::new(),
        election: None,
        interval: IV,
        config: ConfigSource::Git(remote.path().display().to_string(), config_ref.into()),
        poll: Duration::from_millis(100),
        security: Default::default(),
    };
    let missing = controller::start(opts("regions/eu"), listener().await, None)
        .await
        .expect_err("no such branch yet");
    assert!(
        missing
            .to_string()
            .contains("branch `regions/eu` does not exist"),
        "{missing}"
    );

    let region = remote
        .commit_files(
            "regions/eu",
            &[("services/payments.yaml", service_yaml(100.0))],
            "wave 1",
        )
        .unwrap();
    let (ctl, c) = controller::start(
        opts("refs/heads/regions/eu"),
        listener().await,
        Some(listener().await),
    )
    .await
    .unwrap();
    assert_eq!(c.snapshot().version, region);
    assert_ne!(region, first);
    let on_main = remote
        .commit_files(
            "main",
            &[("services/payments.yaml", service_yaml(700.0))],
            "raise",
        )
        .unwrap();
    let moved = remote
        .commit_files(
            "regions/eu",
            &[("services/payments.yaml", service_yaml(300.0))],
            "wave 2",
        )
        .unwrap();
    let seen = until(Duration::from_secs(5), || c.snapshot().version == moved).await;
    assert!(seen.is_some(), "the region's branch was not followed");
    assert_ne!(c.snapshot().version, on_main);
    let limit = c
        .snapshot()
        .service(SERVICE)
        .unwrap()
        .bucket("gateway-pay")
        .unwrap()
        .limit;
    assert_eq!(limit, Some(300.0), "the region's limit, not main's 700");
    let m = scrape(ctl.metrics_addr.unwrap()).await;
    let key = format!(r#"grl_config_version_info{{region="eu",version="{moved}"}}"#);
    assert_eq!(m.get(&key).copied(), Some(1.0), "{m:#?}");
}

fn get(m: &std::collections::BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("{key} missing in {m:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_of_aggregator_and_controller_follow_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 1000.0);
    let (ctl, c) = controller_on(listener().await, dir.path(), IV).await;
    let agg = aggregator_on(listener().await, "a", "eu", &ctl.addr.to_string(), IV).await;
    let cl = client(&agg, "a", "eu", "a1", IV);
    let _t = Traffic::start(vec![(cl.clone(), "gateway".into(), 2000.0)]);
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let a = scrape(agg.metrics_addr.unwrap()).await;
    let k = ctl.metrics_addr.unwrap();
    let m = scrape(k).await;
    let version = c.snapshot().version.clone();
    for (who, m, level) in [("aggregator", &a, "client"), ("controller", &m, "zone")] {
        let offered = get(
            m,
            r#"grl_tier_offered_rps{service="payments",bucket="gateway-pay",scope="global"}"#,
        );
        assert!((offered - 2000.0).abs() < 200.0, "{who} offered {offered}");
        let ratio = get(
            m,
            r#"grl_tier_drop_ratio{service="payments",bucket="gateway-pay"}"#,
        );
        assert!((ratio - 0.5).abs() < 0.05, "{who} ratio {ratio}");
        assert_eq!(
            get(
                m,
                r#"grl_tier_limit_rps{service="payments",bucket="gateway-pay"}"#
            ),
            1000.0
        );
        assert_eq!(
            get(m, &format!("grl_tier_children{{level=\"{level}\"}}")),
            1.0,
            "{who}"
        );
        assert_eq!(get(m, "grl_tier_stale_children"), 0.0);
        assert_eq!(
            get(m, &format!("grl_tier_config_info{{version=\"{version}\"}}")),
            1.0,
            "{who}"
        );
        assert_eq!(get(m, "grl_tier_fail_open"), 0.0, "{who}");
        assert!(get(m, r#"grl_tier_control_bytes_total{direction="reports_in"}"#) > 0.0);
        assert!(
            get(m, "grl_tier_ticks_total") > 0.0,
            "{who}: no tick counted"
        );
        assert!(
            get(m, "grl_tier_tick_seconds_total") > 0.0,
            "{who}: no tick time counted"
        );
        assert_eq!(
            get(m, "grl_tier_tick_duration_seconds_count"),
            get(m, "grl_tier_ticks_total"),
            "{who}: every tick in the duration histogram"
        );
        assert_eq!(
            get(m, r#"grl_tier_tick_duration_seconds_bucket{le="+Inf"}"#),
            get(m, "grl_tier_ticks_total"),
            "{who}"
        );
    }
    assert_eq!(get(&a, "grl_tier_parent_connected"), 1.0);
    assert_eq!(get(&m, r#"grl_controller_apply_total{result="ok"}"#), 0.0);
    assert_eq!(get(&m, "grl_controller_config_refused_total"), 0.0);
    assert_eq!(
        get(&m, r#"grl_controller_apply_total{result="invalid"}"#),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_throttles_a_caller_then_is_cleared() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 100_000.0);
    let (ctl, _c) = controller_on(listener().await, dir.path(), IV).await;
    let agg = aggregator_on(listener().await, "a", "eu", &ctl.addr.to_string(), IV).await;
    let cl = client(&agg, "a", "eu", "a1", IV);
    let _t = Traffic::start(vec![(cl.clone(), "batch".into(), 2000.0)]);
    let mut rpc = ControlClient::connect(format!("http://{}", ctl.addr))
        .await
        .unwrap();
    let o = rpc
        .set_override(proto::SetOverrideRequest {
            service: SERVICE.into(),
            caller: "batch".into(),
            rps: 500.0,
            ttl_seconds: 60,
            reason: "incident 42".into(),
            who: "oncall".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let bucket = format!("override-{}", o.id);
    // The README's figure: the override throttles within OVERRIDE_INTERVALS intervals of
    // being set (rules down to the client, one report up, the ratio down).
    let took = until(IV * 50, || {
        cl.status().ratios.get(&bucket).is_some_and(|r| *r > 0.5)
    })
    .await
    .expect("the override never throttled");
    eprintln!(
        "override throttling after {took:?} = {:.2} intervals",
        took.as_secs_f64() / IV.as_secs_f64()
    );
    assert!(
        took <= IV * OVERRIDE_INTERVALS,
        "override throttled after {took:?}, more than {OVERRIDE_INTERVALS} intervals of {IV:?}"
    );
    // The first ratio may come from a partial report; wait for the full one, then measure.
    let steady = until(IV * 50, || {
        cl.status()
            .ratios
            .get(&bucket)
            .is_some_and(|r| (r - 0.75).abs() < 0.03)
    })
    .await;
    assert!(steady.is_some(), "the override ratio never reached 0.75");
    let w = window(std::slice::from_ref(&cl), &bucket, Duration::from_secs(1)).await;
    assert!(
        (w[0][1] as f64 - 500.0).abs() < 60.0,
        "override not enforced: {w:?}"
    );
    let st = grl::tier::observe::status::status(&ctl.node, tokio::time::Instant::now());
    assert!(st.buckets.iter().any(|b| b.bucket == bucket));
    let m = scrape(ctl.metrics_addr.unwrap()).await;
    assert_eq!(get(&m, "grl_tier_overrides"), 1.0);
    let listed = rpc
        .list_overrides(proto::ListOverridesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.overrides.len(), 1);
    assert_eq!(listed.overrides[0].reason, "incident 42");
    let cleared = rpc
        .clear_override(proto::ClearOverrideRequest {
            service: SERVICE.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cleared.cleared, 1);
    let gone = until(IV * 50, || !cl.status().ratios.contains_key(&bucket)).await;
    assert!(gone.is_some(), "the cleared override never left the client");
    let w = window(std::slice::from_ref(&cl), "", Duration::from_millis(500)).await;
    assert!(
        w[0][0] > 0 && w[0][2] == 0,
        "still throttled after clear: {w:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regional_controller_takes_config_and_global_ratios_from_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 1000.0);
    let (global, g) = controller_on(listener().await, dir.path(), IV).await;
    let opts = ControllerOptions {
        region: "eu".into(),
        parents: vec![global.addr.to_string()],
        election: None,
        interval: IV,
        config: ConfigSource::None,
        poll: IV,
        security: Default::default(),
    };
    let (regional, _r) = controller::start(opts, listener().await, None)
        .await
        .unwrap();
    let agg = aggregator_on(listener().await, "a", "eu", &regional.addr.to_string(), IV).await;
    let cl = client(&agg, "a", "eu", "a1", IV);
    let _t = Traffic::start(vec![(cl.clone(), "gateway".into(), 1500.0)]);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let v = g.snapshot().version.clone();
    assert_eq!(
        grl::tier::observe::status::status(&regional.node, tokio::time::Instant::now())
            .config_version,
        v
    );
    assert_eq!(cl.status().config_version, v);
    let w = window(
        std::slice::from_ref(&cl),
        "gateway-pay",
        Duration::from_secs(1),
    )
    .await;
    assert!(
        (w[0][1] as f64 - 1000.0).abs() < 60.0,
        "global limit not held: {w:?}"
    );
    let st = grl::tier::observe::status::status(&global.node, tokio::time::Instant::now());
    assert_eq!(st.children.len(), 1);
    assert_eq!(st.children[0].level, proto::Level::Region as i32);
}
