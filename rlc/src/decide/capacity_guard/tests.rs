use std::collections::BTreeMap;

use grl_config::{ConfigErrors, Snapshot};
use policies::{Point, Series};

use super::*;
use crate::decide::guards::GuardSettings;
use crate::decide::plan::Scheduled;
use crate::decide::plan::plan_bucket;
use crate::input::capacity::check_topology;
use crate::input::capacity::timeline::Steps;

const NOW: i64 = 1_800_000_000;

fn snapshot(buckets: &[(&str, &str, &str, &str)]) -> Snapshot {
    let mut text = String::from("service: orders\nbuckets:\n");
    for (name, scope, mode, policy) in buckets {
        text.push_str(&format!(
            "  - name: {name}\n    match: {{ caller: {name} }}\n    scope: {scope}\n    mode: {mode}\n    policy: {policy}\n"
        ));
    }
    grl_config::from_files("v", [("services/orders.yaml".to_string(), text)]).unwrap()
}

/// 28 days at `peak / 2` with one point at `peak`: historical-peak +25 % gives 1.25 × peak.
fn flat(peak: f64) -> Series {
    let mut pts: Vec<Point> = (0..28 * 288)
        .map(|i| Point {
            ts: NOW - 28 * 86_400 + i * 300,
            value: peak / 2.0,
        })
        .collect();
    pts[100].value = peak;
    Series::new(300, pts)
}

fn plans(snap: &Snapshot, peaks: &[f64]) -> Vec<BucketPlan> {
    let svc = snap.service("orders").unwrap();
    svc.buckets
        .iter()
        .filter(|b| crate::decide::plan::is_computed(b))
        .zip(peaks)
        .map(|(b, peak)| {
            plan_bucket(
                "orders",
                b,
                None,
                &flat(*peak),
                NOW,
                &GuardSettings::default(),
                "r",
            )
        })
        .collect()
}

type Step = (Option<i64>, f64);

fn capacity(areas: Vec<(Area, Vec<Step>)>) -> PlannedCapacity {
    PlannedCapacity {
        service: "orders".into(),
        path: "capacity/orders.yaml".into(),
        utilization: 0.8,
        lines: areas
            .iter()
            .enumerate()
            .map(|(i, (a, _))| (a.clone(), (format!("capacity[{i}]"), Some(3 + 2 * i))))
            .collect(),
        areas: areas.into_iter().map(|(a, s)| (a, Steps(s))).collect(),
    }
}

const HP: &str = "{ kind: historical-peak, buffer: 0.25 }";

#[test]
fn limits_above_the_capacity_scale_by_one_factor_with_a_note_each() {
    let snap = snapshot(&[
        ("web", "global", "deny", HP),
        ("mobile", "global", "deny", HP),
        ("batch", "global", "shadow", HP),
        ("partner", "global", "deny", "{ kind: fixed, rps: 100 }"),
    ]);
    let svc = snap.service("orders").unwrap();
    // 1250 + 625 + 100 (fixed) = 1975 against 2000 × 0.8 = 1600; the shadow bucket is free.
    let mut plans = plans(&snap, &[1000.0, 500.0, 4000.0]);
    let cap = capacity(vec![(Area::Global, vec![(None, 2000.0)])]);
    guard_limits(&cap, svc, &mut plans, &GuardSettings::default(), NOW);
    let factor = 1500.0 / 1875.0;
    assert_eq!(plans[0].guarded.limit, Some(1250.0 * factor));
    assert_eq!(plans[1].guarded.limit, Some(625.0 * factor));
    assert_eq!(
        plans[2].guarded.limit,
        Some(5000.0),
        "shadow does not count"
    );
    let note = plans[0].guarded.notes.last().unwrap();
    assert_eq!(note.guard, "capacity");
    assert_eq!((note.before, note.after), (Some(1250.0), Some(1000.0)));
    assert_eq!(
        note.detail,
        "orders's deny limits sum to 1975 rps where global capacity 2000 × 0.8 allows 1600: \
         each computed limit × 0.800, none below its floor: 1250 → 1000"
    );
    assert!(plans[1].pr_row().notes.contains("capacity"));
    assert_eq!(plans[0].evidence["outcome"], "new");
    assert!(
        plans[0].evidence["guards"][0]
            .as_str()
            .unwrap()
            .starts_with("capacity: ")
    );
}

#[test]
fn the_step_in_force_at_now_is_the_one_used() {
    let snap = snapshot(&[("web", "global", "deny", HP)]);
    let svc = snap.service("orders").unwrap();
    let cap = capacity(vec![(
        Area::Global,
        vec![(None, 1000.0), (Some(NOW + 86_400), 4000.0)],
    )]);
    let mut before = plans(&snap, &[1000.0]);
    guard_limits(&cap, svc, &mut before, &GuardSettings::default(), NOW);
    assert_eq!(before[0].guarded.limit, Some(800.0), "old capacity");
    let mut after = plans(&snap, &[1000.0]);
    guard_limits(
        &cap,
        svc,
        &mut after,
        &GuardSettings::default(),
        NOW + 86_400,
    );
    assert_eq!(
        after[0].guarded.limit,
        Some(1250.0),
        "new capacity: nothing to do"
    );
    assert!(after[0].guarded.notes.is_empty());
}

#[test]
fn a_floor_holds_and_region_limits_count_once_per_region() {
    let snap = snapshot(&[
        (
            "web",
            "region",
            "deny",
            "{ kind: historical-peak, buffer: 0.25 }",
        ),
        ("mobile", "global", "deny", HP),
    ]);
    let mut svc = snap.service("orders").unwrap().clone();
    svc.buckets[1]
        .guards
        .insert("floor".into(), serde_json::json!(900));
    let cap = capacity(vec![
        (Area::Global, vec![(None, 3000.0)]),
        (Area::Region("eu-1".into()), vec![(None, 1000.0)]),
        (Area::Region("us-1".into()), vec![(None, 1000.0)]),
    ]);
    // Total: web 1250 × 2 regions + mobile 1250 = 3750 against 2400: × 0.64 would put
    // mobile at 800, below its floor 900, so it stays at 900 and web takes (2400 - 900) / 2.
    let mut plans = plans(&snap, &[1000.0, 1000.0]);
    guard_limits(&cap, &svc, &mut plans, &GuardSettings::default(), NOW);
    assert_eq!(plans[1].guarded.limit, Some(900.0));
    assert_eq!(
        plans[0].guarded.limit,
        Some(750.0),
        "each region's 800 holds it"
    );
    let web = &plans[0].guarded.notes;
    assert!(
        web.iter()
            .any(|n| n.detail.contains("global capacity 3000")),
        "{web:?}"
    );
    assert!(checks(&cap, &svc).is_empty());
}

fn checks(cap: &PlannedCapacity, svc: &grl_config::ServiceConfig) -> Vec<String> {
    check_topology(cap, svc)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn per_region_limits_need_the_regions_named() {
    let snap = snapshot(&[("web", "region", "deny", HP), ("z", "zone", "deny", HP)]);
    let svc = snap.service("orders").unwrap();
    let cap = capacity(vec![
        (Area::Global, vec![(None, 3000.0)]),
        (Area::Region("eu-1".into()), vec![(None, 1000.0)]),
    ]);
    let e = checks(&cap, svc);
    assert_eq!(e.len(), 2, "{e:?}");
    assert_eq!(
        e[0],
        "capacity/orders.yaml:3: capacity[0]: bucket `z` has a limit per zone: name the service's zones (a `scope: zone` entry each) so that its limit counts once for each in the global capacity"
    );
    assert!(
        e[1].contains("capacity[1]: bucket `z` has a limit per zone: name the zones of eu-1"),
        "{e:?}"
    );
    let only_global = capacity(vec![(Area::Global, vec![(None, 3000.0)])]);
    let e = checks(&only_global, svc);
    assert!(
        e[0].contains("bucket `web` has a limit per region"),
        "{e:?}"
    );
    let _ = ConfigErrors(Vec::new());
}

#[test]
fn an_event_window_scales_only_the_raised_limits_never_below_the_limit_outside() {
    let snap = snapshot(&[
        ("web", "global", "deny", HP),
        ("mobile", "global", "deny", HP),
    ]);
    let svc = snap.service("orders").unwrap();
    let mut plans = plans(&snap, &[1000.0, 1000.0]);
    let (from, until) = (NOW + 3_600, NOW + 7_200);
    for (p, rps) in plans.iter_mut().zip([3750.0, 1300.0]) {
        p.schedule.entries.push(Scheduled {
            from,
            until,
            rps,
            reason: "events.yaml: sale".into(),
            event: Some("sale".into()),
            raise: Some("x3".into()),
            wanted: None,
        });
    }
    // Outside: 2500 within 4000 × 0.8 = 3200. Inside: 3750 + 1300 = 5050 > 3200: the
    // raised limits share 3200 by one factor, mobile stays at 1250 at least.
    let cap = capacity(vec![(Area::Global, vec![(None, 4000.0)])]);
    cap_windows(&cap, svc, &mut plans, NOW);
    let web = &plans[0].schedule.entries[0];
    let mobile = &plans[1].schedule.entries;
    assert_eq!(web.wanted, Some(3750.0));
    assert!(
        mobile.is_empty(),
        "left at its limit outside: removed: {mobile:?}"
    );
    assert_eq!(web.rps, 3200.0 - 1250.0);
    assert!(
        plans[1].schedule.notes[1].starts_with("capacity leaves no room"),
        "{:?}",
        plans[1].schedule.notes
    );
    let _: BTreeMap<(), ()> = BTreeMap::new();
}
