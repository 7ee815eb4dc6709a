//! End-to-end enforcement through real tiers and real clients on 127.0.0.1: a global
//! bucket across three zones, zone/region scopes, shadow mode, and fail-open when a tier
//! dies and recovery when it comes back.

use std::time::Duration;

use crate::support::*;
use grl_client::Client;

const IV: Duration = Duration::from_millis(200);

/// Heavy tests run one at a time so that two cores keep up with the offered load.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn frac(x: &[u64; 4]) -> f64 {
    if x[0] == 0 {
        0.0
    } else {
        x[2] as f64 / x[0] as f64
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_bucket_across_three_zones_is_shared_fairly() {
    let _g = SERIAL.lock().await;
    // 500 ms: a 200 ms report is too sensitive to the traffic thread's hiccups on a busy
    // machine for a ±3 point bound per client.
    const GIV: Duration = Duration::from_millis(500);
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 10_000.0);
    let (ctl, _c) = controller_on(listener().await, dir.path(), GIV).await;
    let ctl_addr = ctl.addr.to_string();
    let mut aggs = Vec::new();
    let mut clients: Vec<(Client, f64)> = Vec::new();
    for (zone, region, rates) in [
        ("a", "eu", vec![3000.0, 3000.0]),
        ("b", "eu", vec![1000.0, 1000.0, 1000.0]),
        ("c", "us", vec![6000.0]),
    ] {
        let agg = aggregator_on(listener().await, zone, region, &ctl_addr, GIV).await;
        for (i, r) in rates.into_iter().enumerate() {
            clients.push((client(&agg, zone, region, &format!("{zone}{i}"), GIV), r));
        }
        aggs.push(agg);
    }
    let cs: Vec<Client> = clients.iter().map(|(c, _)| c.clone()).collect();
    let load = |scale: f64| {
        clients
            .iter()
            .map(|(c, r)| (c.clone(), "gateway".to_string(), r * scale))
            .collect::<Vec<_>>()
    };

    // Under the limit (6,000 of 10,000 rps, from idle): at most issue 38's 0.5 % dropped
    // (the unused part is shared, not copied; a client's first window holds part of its
    // step, so it admits freely under the limit until its rate is known: 0 dropped in 12
    // runs; 0-0.7 % when it took the allowance shared from that first window's rate).
    let t = Traffic::start(load(0.4));
    let w = window(&cs, "gateway-pay", Duration::from_secs(2)).await;
    let s = sum(&w);
    assert!(
        s[2] as f64 <= 0.005 * s[0] as f64,
        "drops under the limit: {w:?}"
    );
    drop(t);

    // 1.5x the limit: admitted within ±5 % of the limit within 3 s.
    let _t = Traffic::start(load(1.0));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let w = sum(&window(&cs, "gateway-pay", Duration::from_secs(1)).await);
    let admitted = w[1] as f64;
    assert!(
        (admitted - 10_000.0).abs() <= 500.0,
        "admitted {admitted}/s, offered {}",
        w[0]
    );

    // Every client drops its fair share, about a third, within the ±5 points fairness
    // bound of the design (±3 failed once in CI at 3.03 points: a 1,000 rps client's 50 ms
    // windows hold 50 requests, and the traffic thread's catch-up bursts on a busy machine
    // move its local threshold more than a heavier client's).
    let w = window(&cs, "gateway-pay", Duration::from_secs(3)).await;
    for (i, x) in w.iter().enumerate() {
        let f = frac(x);
        assert!(
            (f - 1.0 / 3.0).abs() <= 0.05,
            "client {i} dropped {f:.3} (all: {w:?})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_and_region_scopes_hold_their_own_sums_and_shadow_drops_nothing() {
    let _g = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 10_000.0);
    let (ctl, _c) = controller_on(listener().await, dir.path(), IV).await;
    let ctl_addr = ctl.addr.to_string();
    let agg_a = aggregator_on(listener().await, "a", "eu", &ctl_addr, IV).await;
    let agg_b = aggregator_on(listener().await, "b", "eu", &ctl_addr, IV).await;
    let agg_c = aggregator_on(listener().await, "c", "us", &ctl_addr, IV).await;
    let a = client(&agg_a, "a", "eu", "a1", IV);
    let b = client(&agg_b, "b", "eu", "b1", IV);
    let c = client(&agg_c, "c", "us", "c1", IV);
    let s = |c: &Client, caller: &str, r: f64| (c.clone(), caller.to_string(), r);
    let _t = Traffic::start(vec![
        s(&a, "zc", 1500.0),
        s(&b, "zc", 500.0),
        s(&a, "rc", 2000.0),
        s(&b, "rc", 1000.0),
        s(&c, "rc", 1000.0),
        s(&a, "sc", 1000.0),
        s(&c, "sc", 1000.0),
    ]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (zs, rs, ss) = (
        [a.clone(), b.clone()],
        [a.clone(), b.clone(), c.clone()],
        [a.clone(), c.clone()],
    );
    let (zw, rw, sw) = tokio::join!(
        window(&zs, "zone-b", Duration::from_secs(2)),
        window(&rs, "region-b", Duration::from_secs(2)),
        window(&ss, "shadow-b", Duration::from_secs(2)),
    );
    // Zone a offers 1.5x its zone limit; zone b is under it.
    let za = zw[0][1] as f64 / 2.0;
    assert!(
        (za - 1000.0).abs() <= 50.0,
        "zone a admitted {za}/s: {zw:?}"
    );
    assert_eq!(zw[1][2], 0, "zone b dropped: {zw:?}");
    // Region eu offers 3,000 against 2,000; us 1,000.
    let eu = (rw[0][1] + rw[1][1]) as f64 / 2.0;
    assert!(
        (eu - 2000.0).abs() <= 100.0,
        "region eu admitted {eu}/s: {rw:?}"
    );
    assert_eq!(rw[2][2], 0, "region us dropped: {rw:?}");
    // Shadow: 2,000 offered against 1,000; nothing dropped, about 1,000/s virtual drops.
    let sh = sum(&sw);
    assert_eq!(sh[2], 0, "shadow dropped: {sw:?}");
    let virt = sh[3] as f64 / 2.0;
    assert!(
        (virt - 1000.0).abs() <= 100.0,
        "virtual drops {virt}/s: {sw:?}"
    );
}

/// Waits until the drop fraction of `cs` over 400 ms windows is about a third.
async fn enforced(cs: &[Client]) -> bool {
    for _ in 0..15 {
        let w = sum(&window(cs, "gateway-pay", Duration::from_millis(400)).await);
        if (frac(&w) - 1.0 / 3.0).abs() < 0.05 {
            return true;
        }
    }
    false
}

/// Checks that, after a restart, no 400 ms window over-drops, and enforcement resumes.
async fn resumes_without_over_dropping(cs: &[Client]) {
    let mut resumed = false;
    for _ in 0..12 {
        let w = sum(&window(cs, "gateway-pay", Duration::from_millis(400)).await);
        assert!(
            frac(&w) < 1.0 / 3.0 + 0.08,
            "over-dropping after restart: {w:?}"
        );
        resumed |= (frac(&w) - 1.0 / 3.0).abs() < 0.05;
    }
    assert!(resumed, "enforcement did not resume");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_controller_fails_open_then_recovers() {
    let _g = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 3000.0);
    let l = listener().await;
    let ctl_sock = l.local_addr().unwrap();
    let (ctl, c) = controller_on(l, dir.path(), IV).await;
    let agg_a = aggregator_on(listener().await, "a", "eu", &ctl_sock.to_string(), IV).await;
    let agg_b = aggregator_on(listener().await, "b", "eu", &ctl_sock.to_string(), IV).await;
    // What follows the partition hold: no hold here (see `tests/net_faults` for the hold).
    for a in [&agg_a, &agg_b] {
        a.node.set_partition_hold(Duration::ZERO);
    }
    let cs = vec![
        client(&agg_a, "a", "eu", "a1", IV),
        client(&agg_b, "b", "eu", "b1", IV),
    ];
    let _t = Traffic::start(
        cs.iter()
            .map(|c| (c.clone(), "gateway".into(), 2250.0))
            .collect(),
    );
    assert!(enforced(&cs).await, "never enforced");

    drop(ctl);
    drop(c);
    // Ratios are valid 5 intervals (1 s): after that every client lets everything through.
    // Polled rather than slept once, with slack for a loaded 2-core CI machine.
    let killed = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let w = loop {
        let w = window(&cs, "gateway-pay", Duration::from_millis(500)).await;
        if w.iter().all(|x| x[2] == 0 && x[0] > 0) || killed.elapsed() > Duration::from_secs(4) {
            break w;
        }
    };
    assert!(
        w.iter().all(|x| x[2] == 0 && x[0] > 0),
        "not failing open 4 s after the kill: {w:?}"
    );
    assert!(agg_a.node.fail_open(tokio::time::Instant::now()));

    let l = tokio::net::TcpListener::bind(ctl_sock).await.unwrap();
    let (_ctl, _c) = controller_on(l, dir.path(), IV).await;
    resumes_without_over_dropping(&cs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_aggregator_fails_its_clients_open_then_recovers() {
    let _g = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), 3000.0);
    let (ctl, _c) = controller_on(listener().await, dir.path(), IV).await;
    let ctl_addr = ctl.addr.to_string();
    let la = listener().await;
    let agg_sock = la.local_addr().unwrap();
    let agg_a = aggregator_on(la, "a", "eu", &ctl_addr, IV).await;
    let agg_b = aggregator_on(listener().await, "b", "eu", &ctl_addr, IV).await;
    let a = client(&agg_a, "a", "eu", "a1", IV);
    let b = client(&agg_b, "b", "eu", "b1", IV);
    let cs = vec![a.clone(), b.clone()];
    let _t = Traffic::start(
        cs.iter()
            .map(|c| (c.clone(), "gateway".into(), 2250.0))
            .collect(),
    );
    assert!(enforced(&cs).await, "never enforced");

    drop(agg_a);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let w = window(
        std::slice::from_ref(&a),
        "gateway-pay",
        Duration::from_millis(500),
    )
    .await;
    assert!(
        w[0][2] == 0 && w[0][0] > 0,
        "zone a not failing open: {w:?}"
    );

    let _agg_a = aggregator_on(
        tokio::net::TcpListener::bind(agg_sock).await.unwrap(),
        "a",
        "eu",
        &ctl_addr,
        IV,
    )
    .await;
    resumes_without_over_dropping(&cs).await;
}

/// Intervals from a 15x step to the clients applying the ratio that holds the limit (±5 %
/// of the admitted share), as the README states it: the first report after the step may
/// carry only part of the surge, the next one carries all of it, and the aggregator and the
/// controller each add up to a quarter interval.
const SETTLE_INTERVALS: f64 = 3.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_15x_surge_is_held_within_three_intervals() {
    let _g = SERIAL.lock().await;
    // The default 1 s interval: the README's figure is in seconds at that interval.
    const SIV: Duration = Duration::from_secs(1);
    let limit = 2000.0;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), limit);
    let (ctl, _c) = controller_on(listener().await, dir.path(), SIV).await;
    let agg = aggregator_on(listener().await, "a", "eu", &ctl.addr.to_string(), SIV).await;
    let cs: Vec<Client> = (0..4)
        .map(|i| client(&agg, "a", "eu", &format!("a{i}"), SIV))
        .collect();
    let load = |total: f64| {
        cs.iter()
            .map(|c| (c.clone(), "gateway".to_string(), total / cs.len() as f64))
            .collect::<Vec<_>>()
    };
    let ratio = |c: &Client| c.status().ratios.get("gateway-pay").copied();

    // At the limit: the clients hold the config and drop (almost) nothing.
    let before = Traffic::start(load(limit));
    let ready = until(Duration::from_secs(20), || {
        cs.iter().all(|c| ratio(c).is_some())
    })
    .await;
    assert!(ready.is_some(), "clients never got the bucket at the limit");
    tokio::time::sleep(SIV * 2).await;
    let w = sum(&window(&cs, "gateway-pay", SIV).await);
    assert!(
        w[2] as f64 <= 0.05 * w[0] as f64,
        "at the limit {} of {} were dropped",
        w[2],
        w[0]
    );

    // The step: 15x. Held = the clients together admit 1/15 of what they are offered, ±5 %
    // of that share, over half an interval. (Not each client's ratio at one instant: a
    // client's threshold moves every window to pay back what it admitted beyond its share.)
    drop(before);
    let step = tokio::time::Instant::now();
    let _surge = Traffic::start(load(limit * 15.0));
    let mut took = None;
    while step.elapsed() < SIV * 10 {
        let w = sum(&window(&cs, "gateway-pay", SIV / 2).await);
        if w[0] > 0 && ((w[1] as f64 / w[0] as f64) * 15.0 - 1.0).abs() <= 0.05 {
            took = Some(step.elapsed());
            break;
        }
    }
    let took = took.expect("the surge was never held");
    eprintln!(
        "15x surge held after {took:?} ({:.2} intervals)",
        took.as_secs_f64() / SIV.as_secs_f64()
    );
    assert!(
        took.as_secs_f64() <= SETTLE_INTERVALS * SIV.as_secs_f64(),
        "held only after {took:?}, more than {SETTLE_INTERVALS} intervals"
    );
    // And it stays held: three intervals of real decisions admit the limit ±5 %. (One
    // interval is too short a sample: at 1/15 admitted of ~30,000 offered, the binomial
    // noise alone is ±2 % at one sigma.)
    let span = SIV * 3;
    let w = sum(&window(&cs, "gateway-pay", span).await);
    let admitted = w[1] as f64 / span.as_secs_f64();
    let nominal = w[0] as f64 / span.as_secs_f64() / 15.0;
    assert!(
        (admitted - nominal).abs() <= 0.05 * nominal,
        "admitted {admitted}/s of {} offered (nominal {nominal}/s)",
        w[0]
    );
}
