//! Wire versions between tiers, against a real controller on 127.0.0.1 over gRPC: a zone
//! tier of version 2 reports packed rows (bucket indices of the config version it was
//! sent) and is instructed with packed ratios; one of version 1 (names only) beside it
//! keeps working and is never sent a packed field; both count in the same sums. Packed
//! rows that cannot be read (malformed, or of a version the controller does not hold) are
//! refused and counted, and leave the sums alone.

use std::time::{Duration, Instant};

use grl::tier::engine::admission::Reason;
use grl_core::packed::{self, IndexedRow, WIRE_VERSION};
use grl_core::proto;

use super::raw_stream::{IV, RawStream};
use super::support::{controller_on, listener, write_config};

/// A zone tier's raw stream to the controller, as `agg-<zone>`.
async fn zone(addr: std::net::SocketAddr, zone: &'static str, wire_version: u32) -> RawStream {
    let id = format!("agg-{zone}");
    RawStream::open(addr, (&id, proto::Level::Zone, zone), wire_version).await
}

fn named(bucket: &str, offered: f64) -> proto::BucketRate {
    proto::BucketRate {
        service: "payments".into(),
        bucket: bucket.into(),
        offered,
        clients: 3,
        ..Default::default()
    }
}

/// The gateway-pay ratio of an instruction, read the way its receiver reads it.
fn gateway_ratio(i: &proto::Instruction, first_index: u32) -> Option<f64> {
    match &i.packed {
        Some(p) => packed::unpack_ratios(p, i.valid_for_ms)
            .unwrap()
            .into_iter()
            .find(|r| r.index == first_index)
            .map(|r| r.ratio),
        None => i
            .ratios
            .iter()
            .find(|r| r.bucket == "gateway-pay")
            .map(|r| r.ratio),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_and_named_zone_tiers_share_one_controller_and_one_sum() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 200.0);
    let (ctl, controller) = controller_on(listener().await, dir.path(), IV).await;
    let mut new = zone(ctl.addr, "a", WIRE_VERSION).await;
    let mut old = zone(ctl.addr, "b", 0).await;

    // Both are sent the config; its services carry their first index.
    let config = loop {
        let i = new.next().await;
        if i.has_config {
            break i;
        }
    };
    assert_eq!(config.wire_version, WIRE_VERSION);
    let rules = &config.config[0];
    let first = rules.first_index.expect("no first index sent");
    let position = |name: &str| rules.buckets.iter().position(|b| b.name == name).unwrap() as u32;
    let (gw, region) = (
        first + position("gateway-pay"),
        first + position("region-b"),
    );
    let version = config.config_version.clone();

    // Zone a: 600 rps by index; zone b: 300 rps by name. Limit 200: ratio 7/9.
    let rows = |offered: f64| {
        let mut rows = vec![
            IndexedRow {
                index: gw,
                offered,
                dropped: 0.0,
                shadow_dropped: 0.0,
                clients: 3,
            },
            IndexedRow {
                index: region,
                offered: 10.0,
                dropped: 0.0,
                shadow_dropped: 0.0,
                clients: 3,
            },
        ];
        rows.sort_by_key(|r| r.index);
        packed::pack_rows(&version, &rows).unwrap()
    };
    let want = (900.0 - 200.0) / 900.0;
    let (mut seen_new, mut seen_old) = (false, false);
    let start = Instant::now();
    while !(seen_new && seen_old) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no ratio of 7/9: packed {seen_new}, named {seen_old}"
        );
        new.send(Vec::new(), Some(rows(600.0)), &version).await;
        old.send(vec![named("gateway-pay", 300.0)], None, &version)
            .await;
        let (a, b) = (new.next().await, old.next().await);
        assert!(
            b.packed.is_none(),
            "a version-1 tier was sent packed ratios"
        );
        assert_eq!(b.wire_version, WIRE_VERSION);
        if a.packed.is_some() {
            assert!(a.ratios.is_empty(), "packed ratios sent by name too");
        }
        seen_new |= gateway_ratio(&a, gw).is_some_and(|r| (r - want).abs() < 1e-3);
        seen_old |= gateway_ratio(&b, gw).is_some_and(|r| (r - want).abs() < 1e-3);
    }
    let status = grl::tier::observe::status::status(&controller.node, tokio::time::Instant::now());
    let offered = |name: &str| {
        status
            .buckets
            .iter()
            .find(|b| b.bucket == name)
            .map(|b| b.offered)
            .unwrap()
    };
    assert!((offered("gateway-pay") - 900.0).abs() < 1e-6);
    assert!((offered("region-b") - 10.0).abs() < 1e-6);

    // Unreadable packed rows: refused, counted, and the sums stay.
    let refused = || controller.node.refused.get(Reason::Packed);
    let before = refused();
    let mut short = rows(5_000.0);
    short.offered.pop();
    new.send(Vec::new(), Some(short), &version).await;
    let mut stale = rows(5_000.0);
    stale.config_version = "another-version".into();
    new.send(Vec::new(), Some(stale), &version).await;
    let start = Instant::now();
    while refused() < before + 2 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "refusals counted: {}",
            refused() - before
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    controller.node.tick(tokio::time::Instant::now());
    let status = grl::tier::observe::status::status(&controller.node, tokio::time::Instant::now());
    let gw_now = status
        .buckets
        .iter()
        .find(|b| b.bucket == "gateway-pay")
        .unwrap()
        .offered;
    assert!(
        (gw_now - 900.0).abs() < 1e-6,
        "a refused report moved the sum: {gw_now}"
    );
}
