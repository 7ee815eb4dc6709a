//! A bucket marked `in_addition` protects the requests it matches whoever calls them: a
//! caller with a caller-wide bucket of its own is decided and counted in the procedure's
//! bucket too, and refused if either says drop; a refusal names the bucket that refused.

use grl_client::{Client, ClientConfig, Decision};
use grl_core::proto;

fn rule(name: &str, caller: &str, procedure: &str, mode: proto::Mode) -> proto::BucketRule {
    proto::BucketRule {
        name: name.into(),
        caller: caller.into(),
        procedure: procedure.into(),
        scope: proto::Scope::Global as i32,
        mode: mode as i32,
        limit_rps: Some(10.0),
        ..Default::default()
    }
}

/// A client whose config has a caller bucket `partner` and a procedure bucket `orders-get`
/// (in addition when `in_addition`), with the drop ratios `ratios`.
fn client(
    in_addition: bool,
    get_mode: proto::Mode,
    ratios: &[(&str, f64)],
    pairs: usize,
) -> Client {
    let mut cfg = ClientConfig::new("orders", "http://127.0.0.1:1");
    cfg.max_pairs = pairs;
    let client = Client::new(cfg);
    let mut get = rule("orders-get", "", "orders.Orders/Get", get_mode);
    get.in_addition = in_addition;
    client.apply_instruction(&proto::Instruction {
        config_version: "v1".into(),
        has_config: true,
        config: vec![proto::ServiceRules {
            service: "orders".into(),
            first_index: None,
            buckets: vec![rule("partner", "partner", "", proto::Mode::Deny), get],
        }],
        ratios: ratios
            .iter()
            .map(|(b, r)| proto::DropRatio {
                service: "orders".into(),
                bucket: (*b).into(),
                ratio: *r,
                valid_for_ms: 600_000,
                allowed: None,
            })
            .collect(),
        ..Default::default()
    });
    client
}

/// (offered, allowed, dropped, shadow dropped) of `bucket`.
fn totals(c: &Client, bucket: &str) -> (u64, u64, u64, u64) {
    c.bucket_totals()
        .into_iter()
        .find(|t| t.bucket == bucket)
        .map_or((0, 0, 0, 0), |t| {
            (t.offered, t.allowed, t.dropped, t.shadow_dropped)
        })
}

fn offer(c: &Client, caller: &str, procedure: &str, n: usize) -> Vec<Decision> {
    (0..n).map(|_| c.decide(caller, procedure)).collect()
}

#[test]
fn a_procedure_bucket_in_addition_refuses_a_caller_that_has_its_own_bucket() {
    let c = client(
        true,
        proto::Mode::Deny,
        &[("partner", 0.0), ("orders-get", 1.0)],
        100,
    );
    assert_eq!(
        c.bucket("partner", "orders.Orders/Get").as_deref(),
        Some("partner")
    );
    assert_eq!(
        c.bucket_in_addition("partner", "orders.Orders/Get")
            .as_deref(),
        Some("orders-get")
    );
    assert_eq!(c.bucket_in_addition("web", "orders.Orders/Get"), None);
    assert!(
        offer(&c, "partner", "orders.Orders/Get", 100)
            .iter()
            .all(|d| *d == Decision::Drop)
    );
    assert!(
        offer(&c, "web", "orders.Orders/Get", 50)
            .iter()
            .all(|d| *d == Decision::Drop)
    );
    assert!(
        offer(&c, "partner", "orders.Orders/List", 30)
            .iter()
            .all(|d| *d == Decision::Allow)
    );
    assert_eq!(
        c.decide_n("partner", "orders.Orders/Get", 10),
        Decision::Drop
    );
    // Each bucket counts what it decided: the procedure's every request to it, whoever
    // called; the caller's every request of its caller, which it let through.
    assert_eq!(totals(&c, "orders-get"), (160, 0, 160, 0));
    assert_eq!(totals(&c, "partner"), (140, 140, 0, 0));
    let mut text = String::new();
    c.encode_metrics(&mut text);
    assert!(
        text.contains(
            "grl_requests_total{service=\"orders\",caller=\"partner\",procedure=\"orders.Orders/Get\",bucket=\"orders-get\",decision=\"dropped\"} 110"
        ),
        "{text}"
    );
}

#[test]
fn without_in_addition_the_most_specific_bucket_alone_decides() {
    let c = client(
        false,
        proto::Mode::Deny,
        &[("partner", 0.0), ("orders-get", 1.0)],
        100,
    );
    assert_eq!(c.bucket_in_addition("partner", "orders.Orders/Get"), None);
    assert!(
        offer(&c, "partner", "orders.Orders/Get", 100)
            .iter()
            .all(|d| *d == Decision::Allow)
    );
    assert_eq!(totals(&c, "orders-get"), (0, 0, 0, 0));
    assert_eq!(totals(&c, "partner"), (100, 100, 0, 0));
}

#[test]
fn either_bucket_refusing_refuses_and_a_shadow_bucket_only_counts() {
    // The caller's own bucket refuses; the procedure's lets through.
    let c = client(
        true,
        proto::Mode::Deny,
        &[("partner", 1.0), ("orders-get", 0.0)],
        100,
    );
    assert!(
        offer(&c, "partner", "orders.Orders/Get", 40)
            .iter()
            .all(|d| *d == Decision::Drop)
    );
    assert_eq!(totals(&c, "orders-get"), (40, 40, 0, 0));
    assert_eq!(totals(&c, "partner"), (40, 0, 40, 0));
    // A shadow bucket in addition counts virtual drops and refuses nothing.
    let c = client(
        true,
        proto::Mode::Shadow,
        &[("partner", 0.0), ("orders-get", 1.0)],
        100,
    );
    assert!(
        offer(&c, "partner", "orders.Orders/Get", 40)
            .iter()
            .all(|d| *d == Decision::ShadowDrop)
    );
    assert_eq!(totals(&c, "orders-get"), (40, 0, 0, 40));
    assert_eq!(totals(&c, "partner"), (40, 40, 0, 0));
}

#[test]
fn pairs_past_the_table_bound_are_still_decided_in_both_buckets() {
    let c = client(
        true,
        proto::Mode::Deny,
        &[("partner", 0.0), ("orders-get", 1.0)],
        1,
    );
    offer(&c, "partner", "orders.Orders/List", 1);
    // The table is full: this pair is overflow in both buckets, and still refused.
    assert!(
        offer(&c, "partner", "orders.Orders/Get", 20)
            .iter()
            .all(|d| *d == Decision::Drop)
    );
    assert_eq!(totals(&c, "orders-get"), (20, 0, 20, 0));
    assert_eq!(totals(&c, "partner"), (21, 21, 0, 0));
}

/// The bucket `decide_explained` names for `n` requests (all must agree), and their decision.
fn refused_by(c: &Client, caller: &str, procedure: &str, n: usize) -> (Decision, Option<String>) {
    let first = c.decide_explained(caller, procedure);
    let named = |e: &grl_client::Explained| e.refused_by.as_ref().map(|r| r.bucket().to_string());
    for _ in 1..n {
        let e = c.decide_explained(caller, procedure);
        assert_eq!((e.decision, named(&e)), (first.decision, named(&first)));
    }
    (first.decision, named(&first))
}

#[test]
fn a_refusal_names_the_bucket_that_refused_it() {
    let c = client(
        true,
        proto::Mode::Deny,
        &[("partner", 0.0), ("orders-get", 1.0)],
        100,
    );
    let get = (Decision::Drop, Some("orders-get".to_string()));
    assert_eq!(refused_by(&c, "partner", "orders.Orders/Get", 20), get);
    assert_eq!(refused_by(&c, "web", "orders.Orders/Get", 20), get);
    assert_eq!(
        refused_by(&c, "partner", "orders.Orders/List", 20),
        (Decision::Allow, None)
    );
    let e = c.decide_n_explained("partner", "orders.Orders/Get", 10);
    let r = e.refused_by.unwrap();
    assert_eq!(r.grl_bucket(), "orders/orders-get");
    assert_eq!(
        r.ratelimit_policy().unwrap(),
        "\"orders/orders-get\";q=10;w=1"
    );
    // Refused by its own bucket, or by both: the request's own bucket is named.
    for get_ratio in [0.0, 1.0] {
        let c = client(
            true,
            proto::Mode::Deny,
            &[("partner", 1.0), ("orders-get", get_ratio)],
            100,
        );
        let partner = (Decision::Drop, Some("partner".to_string()));
        assert_eq!(refused_by(&c, "partner", "orders.Orders/Get", 20), partner);
        assert_eq!(refused_by(&c, "partner", "orders.Orders/List", 20), partner);
    }
    let c = client(
        true,
        proto::Mode::Shadow,
        &[("partner", 0.0), ("orders-get", 1.0)],
        100,
    );
    assert_eq!(
        refused_by(&c, "partner", "orders.Orders/Get", 20),
        (Decision::ShadowDrop, None)
    );
    // Past the table's bound the pair has no entry: the matcher names the bucket.
    let c = client(
        true,
        proto::Mode::Deny,
        &[("partner", 0.0), ("orders-get", 1.0)],
        1,
    );
    offer(&c, "partner", "orders.Orders/List", 1);
    assert_eq!(refused_by(&c, "partner", "orders.Orders/Get", 20), get);
    assert_eq!(totals(&c, "orders-get"), (20, 0, 20, 0));
}
