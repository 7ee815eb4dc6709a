//! Explanations of plans made by the planner's own [`crate::decide::plan::plan_bucket`].

use super::*;
use crate::decide::guards::GuardSettings;
use crate::decide::lifecycle::{LifecycleSettings, shadow_verdict};
use crate::decide::plan::plan_bucket;
use policies::{Point, Series};
use serde_json::json;

const NOW: i64 = 1_800_000_000 - 1_800_000_000 % 86_400;

fn bucket(mode: &str, policy: &str) -> Bucket {
    let text = format!(
        "service: pay\nbuckets:\n  - name: gw\n    match: {{ caller: c }}\n    scope: global\n    mode: {mode}\n    policy: {policy}\n"
    );
    let snap = grl_config::from_files("v", [("services/pay.yaml".to_string(), text)]).unwrap();
    snap.service("pay").unwrap().buckets[0].clone()
}

/// 28 days of 5-minute points at 100 rps with one point of `peak` at `peak_at`.
fn flat_with_peak(peak: f64, peak_at: i64) -> Series {
    let pts = (0..28 * 288)
        .map(|i| {
            let ts = NOW - 28 * 86_400 + i * 300;
            Point {
                ts,
                value: if ts == peak_at { peak } else { 100.0 },
            }
        })
        .collect();
    Series::new(300, pts)
}

#[test]
fn the_peak_its_time_and_the_guard_that_changed_the_number_are_stated() {
    let b = bucket(
        "deny",
        "{ kind: historical-peak, window: 28d, buffer: 0.25 }",
    );
    let peak_at = NOW - 10 * 86_400 + 3_600;
    let plan = plan_bucket(
        "pay",
        &b,
        Some(500.0),
        &flat_with_peak(1_000.0, peak_at),
        NOW,
        &GuardSettings::default(),
        "r",
    );
    let e = Explanation::of(&plan, &b, "abc123", NOW);
    let peak = e.observed_peak.clone().expect("a peak");
    assert_eq!((peak.rps, peak.at), (1_000.0, peak_at));
    assert_eq!(peak.at_utc, utc(peak_at));
    assert_eq!(e.proposed, Some(1_250.0));
    assert_eq!(e.guards.len(), 1, "{:?}", e.guards);
    let g = &e.guards[0];
    assert_eq!(
        (g.guard.as_str(), g.before, g.after, g.change),
        ("max-increase", Some(1_250.0), Some(1_000.0), Some(-250.0))
    );
    assert_eq!((e.limit, e.outcome.as_str()), (Some(1_000.0), "changed"));
    assert_eq!(e.policy.params["buffer"], json!(0.25));
    assert_eq!(e.policy.figures["observed_peak"], json!(1_000.0));
    assert!(!e.policy.figures.contains_key("outcome"), "{:?}", e.policy);

    let text = e.to_text();
    assert!(
        text.starts_with("pay/gw: 500 → 1000 rps (changed)\n"),
        "{text}"
    );
    let at = &peak.at_utc;
    for want in [
        format!("  Observed peak  1000 rps at {at}\n"),
        "  Policy         historical-peak { buffer: 0.25, window: 28d }\n".to_string(),
        "its figures: buffer 0.25, observed_peak 1000, points 8064, window 28d\n".to_string(),
        "proposed 1250 rps\n".to_string(),
        "  Guards         max-increase: 1250 → 1000 (-250): proposed 1250 is more than 100% \
         above 500: raised to 1000\n"
            .to_string(),
        "  Limit          1000 rps (changed; previous 500, +100.0%)\n".to_string(),
    ] {
        assert!(text.contains(&want), "{want:?} in\n{text}");
    }
    let md = e.to_markdown(&anchor("pay", "gw"));
    assert!(
        md.starts_with(
            "<a name=\"explain-pay-gw\"></a>\n<details><summary><b>pay/gw: 500 → 1000 rps \
             (changed)</b></summary>\n\n"
        ),
        "{md}"
    );
    assert!(
        md.contains(&format!("- **Observed peak**: 1000 rps at {at}\n")),
        "{md}"
    );
    assert!(
        md.contains("- **Guards**: max-increase: 1250 → 1000 (-250): "),
        "{md}"
    );
    assert!(md.ends_with("\n</details>\n"), "{md}");
    let j = serde_json::to_value(&e).unwrap();
    assert_eq!(j["observed_peak"]["at"], json!(peak_at));
    assert_eq!(j["guards"][0]["change"], json!(-250.0));
    assert_eq!(j["limit"], json!(1_000.0));
}

#[test]
fn auto_shows_every_candidate_and_why_it_chose() {
    let b = bucket("deny", "{ kind: auto }");
    let daily = (0..28 * 288)
        .map(|i| {
            let ts = NOW - 28 * 86_400 + i * 300;
            let phase = std::f64::consts::TAU * (ts % 86_400) as f64 / 86_400.0;
            Point {
                ts,
                value: 100.0 + 40.0 * phase.sin(),
            }
        })
        .collect();
    let plan = plan_bucket(
        "pay",
        &b,
        None,
        &Series::new(300, daily),
        NOW,
        &GuardSettings::default(),
        "r",
    );
    let e = Explanation::of(&plan, &b, "abc", NOW);
    let auto = e.auto.clone().expect("auto's part");
    assert_eq!(auto.chosen, plan.evidence["chosen"].as_str().unwrap());
    let labels: Vec<&str> = auto.candidates.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(
        labels,
        policies::auto::Auto::default().candidate_labels(),
        "simplest first"
    );
    let candidates = plan.evidence["candidates"].as_object().unwrap();
    for c in &auto.candidates {
        let f = &candidates[&c.label];
        assert_eq!(c.origins, f["origins"].as_u64());
        assert_eq!(c.exceeded_points, f["exceeded_points"].as_u64());
        assert_eq!(c.peak_headroom, f["peak_headroom"].as_f64());
    }
    let because = auto.because.clone().expect("the pick's reasons");
    assert_eq!(because, plan.evidence["chosen_because"].as_str().unwrap());
    assert!(
        !e.policy.figures.contains_key("candidates"),
        "{:?}",
        e.policy
    );
    let text = e.to_text();
    assert!(text.contains(&format!("because: {because}")), "{text}");
    let chosen_row = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{} ", auto.chosen)))
        .unwrap_or_else(|| panic!("a row for {} in\n{text}", auto.chosen));
    assert!(chosen_row.ends_with("chosen"), "{chosen_row}");
    let md = e.to_markdown("x");
    assert!(
        md.contains("| candidate | origins | exceeded points | over | peak headroom |  |"),
        "{md}"
    );
}

#[test]
fn shadow_evidence_says_what_enforcing_would_have_dropped() {
    let b = bucket("shadow", "{ kind: historical-peak }");
    let mut plan = plan_bucket(
        "pay",
        &b,
        None,
        &flat_with_peak(400.0, NOW - 86_400),
        NOW,
        &GuardSettings::default(),
        "r",
    );
    let since = NOW - 3 * 86_400;
    plan.evidence.insert("shadow_since".into(), json!(since));
    plan.lifecycle = Some(shadow_verdict(
        &LifecycleSettings::default(),
        since,
        NOW,
        0.0123,
    ));
    let e = Explanation::of(&plan, &b, "abc", NOW);
    let d = e.drops.clone().expect("shadow evidence");
    assert_eq!(
        (
            d.mode.as_str(),
            d.fraction,
            d.shadow_since,
            d.verdict.as_str()
        ),
        ("shadow", 0.0123, Some(since), "not-ready")
    );
    assert!(
        e.to_text().contains(&format!(
            "  Drops          shadow: would have dropped 1.230% of offered over the last 7 \
             days; in shadow 3.0 days, since {}; not-ready (in shadow 3.0 of 7 days)\n",
            utc(since)
        )),
        "{}",
        e.to_text()
    );
}

#[test]
fn a_fixed_limit_says_where_it_comes_from() {
    let b = bucket("deny", "{ kind: fixed, rps: 500 }");
    let e = Explanation::fixed("pay", &b, "abc", NOW);
    assert_eq!((e.limit, e.outcome.as_str()), (Some(500.0), "fixed"));
    let text = e.to_text();
    assert!(text.starts_with("pay/gw: 500 rps (fixed)\n"), "{text}");
    assert!(
        text.contains("  Limit          500 rps, fixed in the service file\n"),
        "{text}"
    );
    assert!(!text.contains("Guards"), "{text}");
}

#[test]
fn anchors_are_plain_lowercase_names() {
    assert_eq!(anchor("Pay.ments", "gw/1_a"), "explain-pay-ments-gw-1_a");
    let e = Explanation::fixed(
        "p<s>",
        &bucket("deny", "{ kind: fixed, rps: 5 }"),
        "abc",
        NOW,
    );
    let md = e.to_markdown("explain-p-s-");
    assert!(md.contains("<b>p&lt;s&gt;/gw: 5 rps (fixed)</b>"), "{md}");
}
