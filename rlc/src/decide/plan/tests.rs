//! Planning one bucket: its policy over the history (gaps, auto's choice), the flags and
//! caps relative to the peak, and stale entries dropped from the limits file.

use super::*;
use policies::Point;

fn bucket(policy: &str) -> Bucket {
    let text = format!(
        "service: s\nbuckets:\n  - name: b\n    match: {{ caller: c }}\n    scope: global\n    mode: deny\n    policy: {policy}\n"
    );
    let snap = grl_config::from_files("v", [("services/s.yaml".to_string(), text)]).unwrap();
    snap.service("s").unwrap().buckets[0].clone()
}

fn flat(now: i64, days: i64, rps: f64, peak: f64) -> Series {
    let mut pts: Vec<Point> = (0..days * 288)
        .map(|i| Point {
            ts: now - days * 86_400 + i * 300,
            value: rps,
        })
        .collect();
    let n = pts.len();
    pts[n / 2].value = peak;
    Series::new(300, pts)
}

#[test]
fn historical_peak_gives_peak_times_buffer() {
    let now = 1_800_000_000;
    let b = bucket("{ kind: historical-peak, window: 28d, buffer: 0.25 }");
    let p = plan_bucket(
        "s",
        &b,
        None,
        &flat(now, 28, 100.0, 1000.0),
        now,
        &GuardSettings::default(),
        "r1",
    );
    assert_eq!(p.guarded.limit, Some(1250.0));
    assert_eq!(p.guarded.outcome, Outcome::New);
    assert_eq!(p.evidence["run"], json!("r1"));
    assert_eq!(p.observed_peak(), Some(1000.0));
    assert_eq!(
        p.observed_peak_at,
        Some(now - 28 * 86_400 + 28 * 288 / 2 * 300),
        "the time of the one peak point"
    );
    assert!(p.backtest.is_some());
    let text = limits_file_for("s", &[&p], &BTreeMap::new(), false).unwrap();
    assert!(text.contains("rps: 1250"), "{text}");
}

#[test]
fn gappy_history_keeps_previous_limit_with_reason() {
    let now = 1_800_000_000;
    let b = bucket("{ kind: historical-peak }");
    let mut s = flat(now, 28, 100.0, 1000.0);
    s.points.retain(|p| (p.ts / 86_400) % 2 == 0);
    let p = plan_bucket(
        "s",
        &b,
        Some(700.0),
        &s,
        now,
        &GuardSettings::default(),
        "r",
    );
    assert_eq!(
        (p.guarded.limit, p.guarded.outcome),
        (Some(700.0), Outcome::KeptPrevious)
    );
    assert!(p.pr_row().notes.contains("coverage"), "{:?}", p.pr_row());
    assert!(
        limits_file_for("s", &[&p], &BTreeMap::new(), false).is_none(),
        "no change, no file"
    );
}

/// 28 days of a daily swing between 60 and 140 rps (peak 140).
fn daily(now: i64) -> Series {
    let pts = (0..28 * 288)
        .map(|i| {
            let ts = now - 28 * 86_400 + i * 300;
            let phase = std::f64::consts::TAU * (ts % 86_400) as f64 / 86_400.0;
            Point {
                ts,
                value: 100.0 + 40.0 * phase.sin(),
            }
        })
        .collect();
    Series::new(300, pts)
}

#[test]
fn auto_bucket_reports_its_choice_in_evidence_and_pr_row() {
    let now = 1_800_000_000 - 1_800_000_000 % 86_400;
    let mut b = bucket("{ kind: historical-peak }");
    b.policy.kind = "auto".into();
    let p = plan_bucket(
        "s",
        &b,
        None,
        &daily(now),
        now,
        &GuardSettings::default(),
        "r",
    );
    assert_eq!(p.evidence["policy"], json!("auto"));
    let chosen = p.evidence["chosen"].as_str().unwrap().to_string();
    assert!(p.evidence.contains_key("runner_up"), "{:?}", p.evidence);
    let figures = &p.evidence["chosen_backtest"];
    let b = p.backtest.expect("auto's own backtest is the plan's");
    assert_eq!(b.origins as u64, figures["origins"].as_u64().unwrap());
    assert_eq!(b.peak_headroom, figures["peak_headroom"].as_f64().unwrap());
    let notes = p.pr_row().notes;
    assert!(
        notes.starts_with(&format!("auto → {chosen}: 0.00% over, ")),
        "{notes}"
    );
    assert!(notes.contains("; runner-up "), "{notes}");
    assert!(
        !notes.contains("backtest:"),
        "one backtest, not two: {notes}"
    );
    let text = limits_file_for("s", &[&p], &BTreeMap::new(), false).unwrap();
    assert!(
        text.contains("chosen: ") && text.contains("runner_up: "),
        "{text}"
    );
}

#[test]
fn a_proposal_over_three_times_the_peak_is_flagged_with_its_reason() {
    let now = 1_800_000_000;
    let b = bucket("{ kind: historical-peak, window: 28d, buffer: 3.0 }");
    let p = plan_bucket(
        "s",
        &b,
        None,
        &flat(now, 28, 100.0, 1000.0),
        now,
        &GuardSettings::default(),
        "r",
    );
    assert_eq!(p.guarded.limit, Some(4000.0));
    let flag = p.high_proposal.clone().expect("flagged");
    assert_eq!(
        flag,
        "proposal 4000 is 4.0x the observed peak 1000 (above 3x): buffer +300%"
    );
    assert!(p.pr_row().notes.contains(&flag), "{:?}", p.pr_row());
    assert_eq!(p.evidence["flag"], json!(flag));
    let b = bucket("{ kind: historical-peak, window: 28d, buffer: 1.0 }");
    let p = plan_bucket(
        "s",
        &b,
        None,
        &flat(now, 28, 100.0, 1000.0),
        now,
        &GuardSettings::default(),
        "r",
    );
    assert_eq!(p.high_proposal, None, "2x the peak is not flagged");
}

#[test]
fn cap_relative_to_the_peak_applies_per_bucket_and_is_explained() {
    let now = 1_800_000_000;
    let mut b = bucket("{ kind: historical-peak, window: 28d, buffer: 3.0 }");
    b.guards.insert("cap_peak_ratio".into(), json!(2));
    let p = plan_bucket(
        "s",
        &b,
        None,
        &flat(now, 28, 100.0, 1000.0),
        now,
        &GuardSettings::default(),
        "r",
    );
    assert_eq!(p.guarded.limit, Some(2000.0));
    let row = p.pr_row();
    assert!(
        row.notes
            .contains("4000 lowered to 2x the observed peak 1000: 2000"),
        "{row:?}"
    );
    assert!(
        row.notes.contains("guards lowered it to 2000"),
        "the flag says what the guards did: {row:?}"
    );
}

#[test]
fn stale_limit_entries_are_dropped() {
    let b = bucket("{ kind: historical-peak }");
    let svc = ServiceConfig::new("s".into(), "services/s.yaml".into(), vec![b]);
    let (prev, stale) = previous_limits(
        &svc,
        Some("service: s\nlimits:\n  b: { rps: 5 }\n  gone: { rps: 6 }\n"),
    );
    assert_eq!(
        prev.into_iter().collect::<Vec<_>>(),
        [("b".to_string(), 5.0)]
    );
    assert!(stale);
}
