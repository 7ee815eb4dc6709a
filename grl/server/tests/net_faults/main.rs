//! Faults on the network between the tiers (issue 39), tried as a user would: every `grl`
//! process on its own host (a network namespace), the faults made by `iptables` drops at
//! the receiver, a user-space delay-and-loss router between the zones and the controller,
//! and SIGSTOP (see [`region`]); and a retry storm through three sidecars ([`storm`]).
//! Each test asserts the target for its fault and prints what it measured
//! (`--nocapture`; RELIABILITY.md quotes those lines).
//!
//! The tests share the machine's time-sensitive load, so they run one at a time (a lock),
//! 5.6 minutes in all on the 2-core machine; they skip, saying why, where namespaces cannot be made (not
//! root, no `ip` or `iptables-legacy`).

mod region;
mod storm;

use std::sync::Mutex;
use std::time::Duration;

pub(crate) use region::skip;
use region::{LIMIT, Region, admitted, at_second, mean, outside, show, unix_ms_in};
use test_support::delay_router::{DelayRouter, Impairment};

/// One test at a time: they measure rates on a shared 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the suite's turn (a test that failed holding it does not stop the others).
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Seconds of warm-up before a fault: the loop has converged well before.
const WARM: u64 = 10;

#[test]
fn a_zone_cut_from_its_controller_for_60_s_keeps_the_global_limit_and_resumes() {
    let _serial = serial();
    if skip() {
        return;
    }
    let (cut, heal, end) = (WARM, WARM + 60, WARM + 70);
    let r = Region::start(LIMIT, &[], &[]);
    let start = unix_ms_in(3);
    let lg = r.loadgens(end, start);
    at_second(start, cut);
    r.aggs[0].drop_from(r.ctl.addr).unwrap();
    r.ctl.drop_from(r.aggs[0].addr).unwrap();
    at_second(start, heal);
    r.aggs[0].accept_from(r.ctl.addr).unwrap();
    r.ctl.accept_from(r.aggs[0].addr).unwrap();
    let zones = lg.join();
    let g = admitted(&zones);
    let during = mean(&g, cut + 6, heal);
    let zone_a: std::collections::BTreeMap<u64, f64> =
        zones[0].iter().map(|(t, [_, a])| (*t, *a)).collect();
    let after = outside(&g, heal + 3, end, 0.10);
    println!(
        "measured: zone cut 60 s: global admitted {:.3}x the limit from 5 s into the cut to its end \
         (zone a {:.0}/s, its share before the cut {:.0}/s); after the heal: {}",
        during / LIMIT,
        mean(&zone_a, cut + 6, heal),
        mean(&zone_a, cut - 3, cut),
        show(&g, heal, end)
    );
    assert!(
        during <= LIMIT * 1.10,
        "{:.3}x during the cut",
        during / LIMIT
    );
    assert!(
        during >= LIMIT * 0.90,
        "over-dropped: {:.3}x during the cut",
        during / LIMIT
    );
    assert!(
        after.is_empty(),
        "outside ±10 % from the 3rd second after the heal: {after:?}"
    );
}

#[test]
fn zones_300_ms_and_5_percent_loss_each_way_from_their_controller_neither_flap_nor_drift() {
    let _serial = serial();
    if skip() {
        return;
    }
    let secs: u64 = std::env::var("GRL_LOSSY_SECS").map_or(60, |s| s.parse().unwrap());
    let (from, to, end) = (WARM, WARM + secs, WARM + secs + 3);
    let r = Region::start(LIMIT, &[], &[]);
    let start = unix_ms_in(3);
    let lg = r.loadgens(end, start);
    at_second(start, from);
    let before: Vec<usize> = (0..3).map(|i| r.uplink_losses(i)).collect();
    let router = DelayRouter::start(
        &r.lan.router,
        &["r1", "r2"],
        Impairment {
            delay: Duration::from_millis(300),
            jitter: Duration::from_millis(50),
            loss: 0.05,
        },
    )
    .unwrap();
    at_second(start, to);
    let counts = (
        router
            .counts
            .forwarded
            .load(std::sync::atomic::Ordering::Relaxed),
        router
            .counts
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    router.stop().unwrap();
    let losses: Vec<usize> = (0..3).map(|i| r.uplink_losses(i) - before[i]).collect();
    let g = admitted(&lg.join());
    let off = outside(&g, from + 1, to, 0.10);
    let within = secs as usize - off.len();
    println!(
        "measured: 300±50 ms and 5 % loss each way, 60 s: uplink losses per zone {losses:?}; \
         {within} of 60 seconds within ±10 % (mean {:.3}x); router forwarded {} and dropped {} \
         packets; outside: {off:?}",
        mean(&g, from + 1, to) / LIMIT,
        counts.0,
        counts.1
    );
    if let Ok(to) = std::env::var("GRL_NET_FAULTS_LOGS") {
        for i in 0..3 {
            std::fs::write(format!("{to}/agg-{i}.log"), r.agg_log(i)).unwrap();
        }
    }
    for i in 0..3 {
        for l in r
            .agg_log(i)
            .lines()
            .filter(|l| l.contains("parent unreachable") || l.contains("parent closed"))
        {
            println!("zone {}: {l}", region::ZONES[i]);
        }
    }
    assert!(counts.1 > 0, "the router dropped nothing");
    assert!(
        losses.iter().all(|n| *n <= 2),
        "reconnects per link in a minute: {losses:?}"
    );
    assert!(within >= 54, "{within} of 60 seconds within ±10 %");
}

#[test]
fn a_lost_direction_from_the_controller_keeps_the_global_limit() {
    let _serial = serial();
    if skip() {
        return;
    }
    let (cut, heal, end) = (WARM, WARM + 30, WARM + 38);
    let r = Region::start(LIMIT, &[], &[]);
    let start = unix_ms_in(3);
    let lg = r.loadgens(end, start);
    at_second(start, cut);
    r.aggs[0].drop_from(r.ctl.addr).unwrap();
    at_second(start, heal);
    r.aggs[0].accept_from(r.ctl.addr).unwrap();
    let g = admitted(&lg.join());
    let during = mean(&g, cut + 1, heal);
    println!(
        "measured: controller → zone a lost 30 s: global admitted {:.3}x the limit (worst second \
         {:.2}x), zone a's uplink lost {} times; after: {}",
        during / LIMIT,
        g.range(cut + 1..=heal).map(|(_, x)| *x).fold(0.0, f64::max) / LIMIT,
        r.uplink_losses(0),
        show(&g, heal, end)
    );
    assert!(
        during <= LIMIT * 1.10,
        "{:.3}x during the lost direction",
        during / LIMIT
    );
    assert!(
        during >= LIMIT * 0.90,
        "over-dropped: {:.3}x",
        during / LIMIT
    );
}

#[test]
fn clients_cut_from_their_aggregator_for_30_s_enforce_again_soon_after_the_heal() {
    let _serial = serial();
    if skip() {
        return;
    }
    let (cut, heal, end) = (WARM, WARM + 30, WARM + 40);
    let r = Region::start(LIMIT, &[], &[]);
    let start = unix_ms_in(3);
    let lg = r.loadgens(end, start);
    at_second(start, cut);
    r.aggs[0].drop_from(r.lgs[0].addr).unwrap();
    r.lgs[0].drop_from(r.aggs[0].addr).unwrap();
    at_second(start, heal);
    r.aggs[0].accept_from(r.lgs[0].addr).unwrap();
    r.lgs[0].accept_from(r.aggs[0].addr).unwrap();
    let zones = lg.join();
    let g = admitted(&zones);
    let after = outside(&g, heal + 3, end, 0.10);
    let back = r.lg_connected_after(0, start + heal * 1000);
    println!(
        "measured: zone a's clients cut 30 s: during {:.3}x; its clients connected again \
         {back:.2?} s after the heal; from the heal: {}; by zone: {}",
        mean(&g, cut + 6, heal) / LIMIT,
        show(&g, heal, end),
        region::show_zones(&zones, heal, heal + 5)
    );
    assert_eq!(back.len(), 4, "not every client came back: {back:?}");
    assert!(
        back.iter().all(|s| *s <= 2.0),
        "a client came back later than two intervals after the heal: {back:?}"
    );
    assert!(
        after.is_empty(),
        "outside ±10 % from the 3rd second after the heal: {after:?}"
    );
}

#[test]
fn a_controller_frozen_for_20_s_keeps_the_global_limit_and_takes_its_zones_back() {
    let _serial = serial();
    if skip() {
        return;
    }
    let (stop, cont, end) = (WARM, WARM + 20, WARM + 30);
    let r = Region::start(LIMIT, &[], &[]);
    let start = unix_ms_in(3);
    let lg = r.loadgens(end, start);
    at_second(start, stop - 1);
    let refused_before = r.ctl_refusals();
    at_second(start, stop);
    r.ctl_proc.signal("-STOP");
    at_second(start, cont);
    r.ctl_proc.signal("-CONT");
    let g = admitted(&lg.join());
    let refused = r.ctl_refusals() - refused_before;
    let during = mean(&g, stop + 1, cont);
    println!(
        "measured: controller frozen 20 s: global admitted {:.3}x the limit while frozen \
         (worst second {:.2}x); reports refused after it returned: {refused}; after: {}",
        during / LIMIT,
        g.range(stop + 1..=cont)
            .map(|(_, x)| *x)
            .fold(0.0, f64::max)
            / LIMIT,
        show(&g, cont, end)
    );
    assert!(
        during <= LIMIT * 1.10,
        "{:.3}x while frozen",
        during / LIMIT
    );
    assert!(
        during >= LIMIT * 0.90,
        "over-dropped: {:.3}x",
        during / LIMIT
    );
    assert_eq!(
        refused, 0.0,
        "the returning aggregators' reports were refused"
    );
}
