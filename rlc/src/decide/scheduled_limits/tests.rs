use grl_config::Snapshot;
use policies::{Point, Series};

use super::*;
use crate::decide::plan::plan_bucket;
use crate::input::events::file;

const NOW: i64 = 1_800_000_000;

fn snapshot() -> Snapshot {
    let text = "service: orders\nbuckets:\n  - name: web\n    match: { caller: web }\n    scope: global\n    mode: deny\n    policy: { kind: historical-peak, buffer: 0.25 }\n  - name: mobile\n    match: { caller: mobile }\n    scope: global\n    mode: deny\n    policy: { kind: historical-peak, buffer: 0.25 }\n";
    grl_config::from_files(
        "v",
        [("services/orders.yaml".to_string(), text.to_string())],
    )
    .unwrap()
}

fn plans(snap: &Snapshot) -> Vec<BucketPlan> {
    let mut pts: Vec<Point> = (0..28 * 288)
        .map(|i| Point {
            ts: NOW - 28 * 86_400 + i * 300,
            value: 500.0,
        })
        .collect();
    pts[10].value = 1000.0;
    let s = Series::new(300, pts);
    snap.service("orders")
        .unwrap()
        .buckets
        .iter()
        .map(|b| plan_bucket("orders", b, None, &s, NOW, &GuardSettings::default(), "r"))
        .collect()
}

fn events(text: &str) -> Vec<Event> {
    file::parse(file::PATH, text).unwrap()
}

fn at(unix: i64) -> String {
    utc(unix)
}

fn limits_file(entries: &str) -> String {
    format!("service: orders\nlimits:\n  web:\n    rps: 1250\n    scheduled:\n{entries}")
}

#[test]
fn an_event_raises_its_buckets_for_its_window_and_the_file_learns_it() {
    let snap = snapshot();
    let svc = snap.service("orders").unwrap();
    let mut plans = plans(&snap);
    let (from, until) = (NOW + 86_400, NOW + 86_400 + 7_200);
    let ev = events(&format!(
        "events:\n  - name: sale\n    from: \"{}\"\n    until: \"{}\"\n    buckets: [orders/web]\n    multiplier: 3\n  - name: over\n    from: \"{}\"\n    until: \"{}\"\n    services: [orders]\n    multiplier: 9\n",
        at(from),
        at(until),
        at(NOW - 7_200),
        at(NOW - 3_600)
    ));
    let existing = BTreeMap::new();
    raise(
        svc,
        &mut plans,
        &ev,
        &existing,
        Some(1000.0),
        &GuardSettings::default(),
        NOW,
    );
    settle(svc, &mut plans, &existing, &GuardSettings::default());
    let web = &plans[0].schedule;
    assert_eq!(web.entries.len(), 1, "a past event gives nothing: {web:?}");
    assert_eq!(
        (
            web.entries[0].from,
            web.entries[0].until,
            web.entries[0].rps
        ),
        (from, until, 3750.0)
    );
    assert_eq!(web.entries[0].reason, "events.yaml: sale");
    assert!(web.changed);
    assert!(plans[1].schedule.entries.is_empty() && !plans[1].schedule.changed);
    let entry = web.entries[0].entry();
    assert_eq!(entry.effective.from, at(from));
    assert!(
        plans[0]
            .pr_row()
            .notes
            .contains("event sale (x3): 3750 from ")
    );
}

#[test]
fn an_absolute_rate_for_a_service_scales_by_its_observed_peak() {
    let snap = snapshot();
    let svc = snap.service("orders").unwrap();
    let mut plans = plans(&snap);
    let ev = events(&format!(
        "events:\n  - name: launch\n    from: \"{}\"\n    until: \"{}\"\n    services: [orders]\n    rps: 4000\n",
        at(NOW + 3_600),
        at(NOW + 7_200)
    ));
    raise(
        svc,
        &mut plans,
        &ev,
        &BTreeMap::new(),
        Some(2000.0),
        &GuardSettings::default(),
        NOW,
    );
    assert_eq!(
        plans[0].schedule.entries[0].rps, 2500.0,
        "1250 × 4000 / 2000"
    );
    assert_eq!(plans[1].schedule.entries[0].rps, 2500.0);
}

#[test]
fn past_entries_go_kept_ones_stay_and_events_gone_are_removed() {
    let snap = snapshot();
    let svc = snap.service("orders").unwrap();
    let mut plans = plans(&snap);
    let text = limits_file(&format!(
        "      - rps: 5000\n        effective: {{ from: \"{}\", until: \"{}\" }}\n        reason: old\n      - rps: 2000\n        effective: {{ from: \"{}\", until: \"{}\" }}\n        reason: maintenance\n      - rps: 3000\n        effective: {{ from: \"{}\", until: \"{}\" }}\n        reason: \"events.yaml: cancelled\"\n",
        at(NOW - 7_200),
        at(NOW - 3_600),
        at(NOW + 3_600),
        at(NOW + 7_200),
        at(NOW + 10_000),
        at(NOW + 12_000)
    ));
    let existing = existing("orders", Some(&text));
    assert_eq!(existing["web"].len(), 3);
    // An event over the kept entry's window: the kept one wins.
    let ev = events(&format!(
        "events:\n  - name: clash\n    from: \"{}\"\n    until: \"{}\"\n    services: [orders]\n    multiplier: 2\n",
        at(NOW + 5_000),
        at(NOW + 6_000)
    ));
    raise(
        svc,
        &mut plans,
        &ev,
        &existing,
        Some(1000.0),
        &GuardSettings::default(),
        NOW,
    );
    settle(svc, &mut plans, &existing, &GuardSettings::default());
    let web = &plans[0].schedule;
    assert_eq!(web.entries.len(), 1, "{web:?}");
    assert_eq!(
        (web.entries[0].rps, web.entries[0].reason.as_str()),
        (2000.0, "maintenance")
    );
    assert!(web.changed);
    let notes = web.notes.join("\n");
    assert!(notes.contains("scheduled limit 5000 ("), "{notes}");
    assert!(notes.contains("has ended: removed"), "{notes}");
    assert!(
        notes.contains("event cancelled no longer affects this bucket"),
        "{notes}"
    );
    assert!(
        notes.contains("event clash: the limits file's scheduled limit 2000"),
        "{notes}"
    );
    assert_eq!(
        plans[1].schedule.entries.len(),
        1,
        "mobile gets the clash event"
    );
}

#[test]
fn a_small_change_keeps_the_written_event_limit() {
    let snap = snapshot();
    let svc = snap.service("orders").unwrap();
    let mut plans = plans(&snap);
    let (from, until) = (NOW + 3_600, NOW + 7_200);
    let text = limits_file(&format!(
        "      - rps: 3700\n        effective: {{ from: \"{}\", until: \"{}\" }}\n        reason: \"events.yaml: sale\"\n",
        at(from),
        at(until)
    ));
    let existing = existing("orders", Some(&text));
    let ev = events(&format!(
        "events:\n  - name: sale\n    from: \"{}\"\n    until: \"{}\"\n    buckets: [orders/web]\n    multiplier: 3\n",
        at(from),
        at(until)
    ));
    raise(
        svc,
        &mut plans,
        &ev,
        &existing,
        None,
        &GuardSettings::default(),
        NOW,
    );
    settle(svc, &mut plans, &existing, &GuardSettings::default());
    assert_eq!(
        plans[0].schedule.entries[0].rps, 3700.0,
        "3750 is within 5 % of 3700"
    );
    assert!(!plans[0].schedule.changed);
}

#[test]
fn an_event_raises_the_limit_from_before_todays_capacity_guard() {
    let snap = snapshot();
    let svc = snap.service("orders").unwrap();
    let mut plans = plans(&snap);
    plans[0]
        .guarded
        .notes
        .push(crate::decide::guards::GuardNote {
            guard: "capacity",
            detail: "today's capacity".into(),
            before: Some(1250.0),
            after: Some(800.0),
        });
    plans[0].guarded.limit = Some(800.0);
    let ev = events(&format!(
        "events:\n  - name: sale\n    from: \"{}\"\n    until: \"{}\"\n    buckets: [orders/web]\n    multiplier: 3\n",
        at(NOW + 3_600),
        at(NOW + 7_200)
    ));
    raise(
        svc,
        &mut plans,
        &ev,
        &BTreeMap::new(),
        None,
        &GuardSettings::default(),
        NOW,
    );
    assert_eq!(
        plans[0].schedule.entries[0].rps, 3750.0,
        "1250 × 3: the window's capacity is checked after"
    );
}
