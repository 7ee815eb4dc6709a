//! Wire versions on the client → aggregator link, against a real controller and aggregator
//! on 127.0.0.1 over gRPC: a real client (wire version 2) reports its rows by bucket index
//! once it holds the config, a client of the previous version (rows by name,
//! `wire_version` 0) beside it keeps working and is never sent a packed field, and both
//! count in the same sums. Rows by index are held to the bounds rows by name are: one
//! client per row whatever it claims, rates bounded; an index of no bucket, or of a config
//! version the aggregator does not hold, refuses the report and leaves the sums alone (rows
//! of the version just replaced are still read, with that version).

use std::time::{Duration, Instant};

use grl::tier::Running;
use grl::tier::engine::admission::Reason;
use grl::tier::engine::node::Sums;
use grl_core::packed::{self, IndexedRow, WIRE_VERSION};
use grl_core::proto;
use std::sync::atomic::Ordering;

use super::raw_stream::{IV, RawStream};
use super::support::{Traffic, aggregator_on, client, controller_on, listener, write_config};

/// A client's raw stream to the aggregator.
async fn raw_client(agg: &Running, id: &'static str, wire_version: u32) -> RawStream {
    RawStream::open(agg.addr, (id, proto::Level::Client, "a"), wire_version).await
}

/// The next instruction on `raw` carrying the config: (version, first index of
/// `payments`, index of `name`).
async fn config(raw: &mut RawStream, name: &str) -> (String, Option<u32>, u32) {
    loop {
        let i = raw.next().await;
        if i.has_config && !i.config.is_empty() {
            let rules = &i.config[0];
            let at = rules.buckets.iter().position(|b| b.name == name).unwrap() as u32;
            let first = rules.first_index;
            return (i.config_version, first, first.unwrap_or(0) + at);
        }
    }
}

fn named(bucket: &str, offered: f64) -> proto::BucketRate {
    proto::BucketRate {
        service: "payments".into(),
        bucket: bucket.into(),
        offered,
        clients: 1,
        ..Default::default()
    }
}

fn row(index: u32, offered: f64, clients: u32) -> IndexedRow {
    IndexedRow {
        index,
        offered,
        dropped: 0.0,
        shadow_dropped: 0.0,
        clients,
    }
}

/// Polls `f` every 20 ms until it holds, failing after `limit` with `what`.
async fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The aggregator's offered sum in `gateway-pay` and the clients it counts, from its
/// report to the controller (rows by index or by name).
fn zone_sum(agg: &Running) -> (f64, u32) {
    let up = agg
        .node
        .upward_report(tokio::time::Instant::now(), Sums::Live);
    let index = agg.node.rules().index_of("payments", 0);
    let by_name = up
        .rates
        .iter()
        .filter(|r| r.bucket == "gateway-pay")
        .map(|r| (r.offered, r.clients));
    let by_index = up.packed.iter().flat_map(|p| {
        packed::unpack_rows(p)
            .unwrap()
            .into_iter()
            .filter(|r| Some(r.index) == index)
            .map(|r| (r.offered, r.clients))
    });
    by_name
        .chain(by_index)
        .fold((0.0, 0), |(o, c), (ro, rc)| (o + ro, c + rc))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_by_index_and_an_older_client_by_name_share_one_aggregator_and_one_sum() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 200.0);
    let (ctl, controller) = controller_on(listener().await, dir.path(), IV).await;
    let agg = aggregator_on(listener().await, "a", "eu", &ctl.addr.to_string(), IV).await;
    let new = client(&agg, "a", "eu", "new", IV);
    let _traffic = Traffic::start(vec![(new.clone(), "gateway".into(), 300.0)]);
    let mut old = raw_client(&agg, "old", 0).await;
    let (version, _, _) = config(&mut old, "gateway-pay").await;

    // 300 rps from each: limit 200, the controller drops 2/3 of the zone's 600.
    let want = 1.0 - 200.0 / 600.0;
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no ratio of 2/3 for the older client"
        );
        old.send(vec![named("gateway-pay", 300.0)], None, &version)
            .await;
        let i = old.next().await;
        assert!(
            i.packed.is_none(),
            "a version-1 client was sent packed ratios"
        );
        let ratio = i.ratios.iter().find(|r| r.bucket == "gateway-pay");
        if ratio.is_some_and(|r| (r.ratio - want).abs() < 0.05) {
            break;
        }
    }
    // The real client reported by index all along, and its rows count in the sum.
    assert!(
        agg.node.reports_by_index.load(Ordering::Relaxed) > 0,
        "the real client never reported by index"
    );
    let offered = || {
        let st = grl::tier::observe::status::status(&controller.node, tokio::time::Instant::now());
        st.buckets
            .iter()
            .find(|b| b.bucket == "gateway-pay")
            .map_or(0.0, |b| b.offered)
    };
    eventually(Duration::from_secs(10), "the two clients' 600 rps", || {
        (offered() - 600.0).abs() < 60.0
    })
    .await;
    // The real client enforces what it is sent by index: about 200 of its 300 rps dropped
    // from its share.
    eventually(Duration::from_secs(10), "the real client drops", || {
        new.status()
            .ratios
            .get("gateway-pay")
            .is_some_and(|r| *r > 0.3)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_by_index_are_held_to_the_bounds_and_refused_out_of_range_or_version() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 200.0);
    let (ctl, _controller) = controller_on(listener().await, dir.path(), IV).await;
    let agg = aggregator_on(listener().await, "a", "eu", &ctl.addr.to_string(), IV).await;
    let mut c = raw_client(&agg, "c", WIRE_VERSION).await;
    let (version, first, gw) = config(&mut c, "gateway-pay").await;
    let first = first.expect("the aggregator sent no first index");
    let buckets = agg.node.rules().services()["payments"].len() as u32;

    // A row claiming 1,000 clients counts one: a client speaks for itself.
    let by_index = || agg.node.reports_by_index.load(Ordering::Relaxed);
    let before = by_index();
    c.send(
        Vec::new(),
        packed::pack_rows(&version, &[row(gw, 50.0, 1_000)]),
        &version,
    )
    .await;
    eventually(Duration::from_secs(10), "the report by index taken", || {
        by_index() > before
    })
    .await;
    assert_eq!(zone_sum(&agg), (50.0, 1));
    let i = c.next().await;
    assert!(
        i.ratios.is_empty(),
        "a version-2 client was sent ratios by name"
    );

    // Refused, and the sum stays: a rate past the bound on one client (that row), an index
    // past the service's buckets, a version the aggregator does not hold, a malformed list.
    let refused = |reason| agg.node.refused.get(reason);
    let counts = || [Reason::Implausible, Reason::UnknownBucket, Reason::Packed].map(refused);
    let start = counts();
    c.send(
        Vec::new(),
        packed::pack_rows(&version, &[row(gw, 5e7, 1)]),
        &version,
    )
    .await;
    let past = first + buckets;
    c.send(
        Vec::new(),
        packed::pack_rows(&version, &[row(gw, 70.0, 1), row(past, 70.0, 1)]),
        &version,
    )
    .await;
    c.send(
        Vec::new(),
        packed::pack_rows("another-version", &[row(gw, 70.0, 1)]),
        &version,
    )
    .await;
    let mut short = packed::pack_rows(&version, &[row(gw, 70.0, 1)]).unwrap();
    short.clients.clear();
    c.send(Vec::new(), Some(short), &version).await;
    eventually(Duration::from_secs(10), "every refusal counted", || {
        let now = counts();
        now[0] > start[0] && now[1] > start[1] && now[2] >= start[2] + 2
    })
    .await;
    assert_eq!(zone_sum(&agg), (50.0, 1), "a refused row moved the sum");

    // Rows by index sent just before the client heard of a new version: read with the
    // version before (by name), not refused.
    write_config(dir.path(), 300.0);
    eventually(
        Duration::from_secs(10),
        "the aggregator takes a new version",
        || agg.node.rules().version != version,
    )
    .await;
    let packed_before = refused(Reason::Packed);
    c.send(
        Vec::new(),
        packed::pack_rows(&version, &[row(gw, 60.0, 1)]),
        &version,
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "the previous version's rows taken",
        || zone_sum(&agg) == (60.0, 1),
    )
    .await;
    assert_eq!(refused(Reason::Packed), packed_before);
}
