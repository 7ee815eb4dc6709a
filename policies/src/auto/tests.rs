//! Unit tests of `auto`: the pick rule on hand-made scores, and the whole policy on synthetic
//! series whose right answer is known.

use super::*;
use crate::series::Point;

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;
/// A Monday 00:00 UTC.
const T0: i64 = 1_700_438_400;

fn score(exceeded: usize, headroom: f64) -> Score {
    Score {
        scored: 8,
        refused: 0,
        exceeded,
        points: 16_128,
        exceedance_rate: exceeded as f64 / 16_128.0,
        peak_headroom: headroom,
    }
}

#[test]
fn fewest_exceedances_win_within_the_headroom_bound() {
    // 16,128 points scored (hand-made figures): the tie margin is 8 points.
    let scores = [
        score(40, 1.3),
        score(20, 1.6),
        score(0, 2.6),
        score(1, 1.5),
        score(0, 3.0),
    ];
    // Admissible: headroom <= 1.5 x 1.3 = 1.95, so not 2.6 nor 3.0.
    let p = pick(&scores, &PickRule::default());
    assert_eq!(
        p,
        Pick {
            chosen: 3,
            runner_up: Some(1)
        }
    );
}

const LABELS: [&str; 5] = [
    "historical-peak+25%",
    "historical-peak+50%",
    "historical-peak+100%",
    "peak-trend",
    "forecast",
];

#[test]
fn the_reasons_name_each_step_of_the_rule() {
    let scores = [
        score(40, 1.3),
        score(20, 1.6),
        score(0, 2.6),
        score(1, 1.5),
        score(0, 3.0),
    ];
    let rule = PickRule::default();
    let (p, why) = pick_explained(&scores, &rule);
    assert_eq!(p, pick(&scores, &rule));
    assert_eq!(why.admissible, [0, 1, 3]);
    assert_eq!((why.fewest, why.margin), (1, 8));
    assert_eq!(
        (why.tied.as_slice(), why.tie_break),
        (&[3][..], TieBreak::Alone)
    );
    assert_eq!(
        why.describe(p.chosen, &LABELS, &scores, &rule),
        "admissible (scored at the 8 origins historical-peak+25% scored, headroom at most \
         1.5x its 1.30x): historical-peak+25%, historical-peak+50%, peak-trend; not \
         historical-peak+100% (headroom 2.60x), forecast (headroom 3.00x); fewest exceeded \
         points 1, ties within 8: peak-trend; peak-trend alone has the fewest"
    );
    let scores = [score(3, 1.3), score(0, 1.5), score(8, 1.2), score(11, 1.1)];
    let (p, why) = pick_explained(&scores, &rule);
    assert_eq!(why.tie_break, TieBreak::LeastHeadroom);
    assert!(
        why.describe(p.chosen, &LABELS, &scores, &rule).ends_with(
            "ties within 8: historical-peak+25%, historical-peak+50%, \
                        historical-peak+100%; least headroom among them: \
                        historical-peak+100% (1.20x)"
        ),
        "{why:?}"
    );
    let scores = [score(0, 1.3), score(0, 1.4), score(0, 1.5), score(0, 1.4)];
    let (p, why) = pick_explained(&scores, &rule);
    assert_eq!((p.chosen, why.tie_break), (3, TieBreak::Preferred));
    let scores = [score(0, 1.3), score(0, 1.3)];
    let (p, why) = pick_explained(&scores, &rule);
    assert_eq!((p.chosen, why.tie_break), (0, TieBreak::Simpler));
}

#[test]
fn ties_go_to_the_least_headroom_then_the_simpler() {
    let scores = [score(3, 1.3), score(0, 1.5), score(8, 1.2), score(11, 1.1)];
    // Fewest 0, margin 8: candidates 0, 1 and 2 tie; 2 has the least headroom.
    assert_eq!(
        pick(&scores, &PickRule::default()),
        Pick {
            chosen: 2,
            runner_up: Some(0)
        }
    );
    let same = [score(0, 1.3), score(0, 1.3)];
    assert_eq!(
        pick(&same, &PickRule::default()),
        Pick {
            chosen: 0,
            runner_up: Some(1)
        }
    );
}

#[test]
fn a_candidate_that_refused_is_not_admissible() {
    let mut refusing = score(0, 1.0);
    refusing.scored = 5;
    refusing.refused = 3;
    let p = pick(&[score(30, 1.3), refusing], &PickRule::default());
    assert_eq!(
        p,
        Pick {
            chosen: 0,
            runner_up: Some(1)
        }
    );
}

/// 5-minute samples over `days` ending at `now`: `level(ts)` times a daily swing times
/// deterministic noise of +-5 %.
fn series(days: i64, now: i64, level: impl Fn(i64) -> f64) -> Series {
    let points = (0..days * 288)
        .map(|i| {
            let ts = now - days * DAY + i * 300;
            let daily = 1.0 + 0.3 * (std::f64::consts::TAU * ts as f64 / DAY as f64).sin();
            let noise = 1.0 + 0.05 * ((i * 7919 % 101) as f64 / 50.0 - 1.0);
            Point {
                ts,
                value: level(ts) * daily * noise,
            }
        })
        .collect();
    Series::new(300, points)
}

fn ctx(now: i64) -> Context {
    Context {
        now,
        previous_limit: None,
    }
}

#[test]
fn flat_traffic_keeps_the_default_and_reports_the_runner_up() {
    let now = T0 + 28 * DAY;
    let s = series(28, now, |_| 1_000.0);
    let rec = Auto::default().recommend(&s, &ctx(now)).unwrap();
    assert_eq!(rec.evidence["policy"], "auto");
    let candidates = rec.evidence["candidates"].as_object().unwrap();
    assert_eq!(candidates.len(), 5);
    assert!(
        candidates.values().all(|c| c["exceedance_rate"] == 0.0),
        "{candidates:?}"
    );
    // All tie on zero exceedances: peak-trend, the default, is historical-peak+25% here.
    assert_eq!(rec.evidence["chosen"], "peak-trend", "{candidates:?}");
    assert_eq!(rec.evidence["growth_per_week"], 0.0);
    assert_eq!(rec.rps, s.max().unwrap() * 1.25);
    assert_eq!(rec.evidence["chosen_backtest"], candidates["peak-trend"]);
    assert_eq!(candidates["peak-trend"]["exceeded_points"], 0);
    let because = rec.evidence["chosen_because"].as_str().unwrap();
    assert!(
        because.contains("fewest exceeded points 0")
            && because.ends_with("; peak-trend is preferred on a tie"),
        "{because}"
    );
    // Among the others, the least headroom: forecast's tight bound on so regular a series.
    assert_eq!(rec.evidence["runner_up"], "forecast");
    assert_eq!(rec.evidence["runner_up_backtest"], candidates["forecast"]);
    assert_eq!(
        rec.evidence["chosen_spec"],
        json!({"kind": "peak-trend", "window": "28d", "horizon": "7d"})
    );
}

#[test]
fn a_burst_counts_once_however_many_horizons_hold_it() {
    let now = T0 + 28 * DAY;
    // One 15-minute burst (3 points) at 3x the level, 20 days in: inside the horizons of the
    // 7 origins at days 14 to 20, each of which sees no such peak in its history.
    let burst = T0 + 20 * DAY + 12 * 3_600;
    let s = series(28, now, |ts| {
        if (burst..burst + 900).contains(&ts) {
            3_000.0
        } else {
            1_000.0
        }
    });
    let auto = Auto::default();
    let (scores, tried) = auto.scores(&s, &ctx(now));
    assert_eq!(tried, 8);
    let hp = &scores[0];
    assert_eq!(auto.candidate_labels()[0], "historical-peak+25%");
    assert_eq!(hp.scored, 8);
    assert_eq!(hp.exceeded, 3, "{hp:?}");
    // The second half of the window, each point once: 14 days of 5-minute points.
    assert_eq!(hp.points, 14 * 288, "{hp:?}");
    // The rate keeps the backtest's meaning: 3 points in 7 of the 8 horizons of 7 days.
    assert_eq!(hp.exceedance_rate, 21.0 / (8.0 * 7.0 * 288.0));
}

#[test]
fn bursts_that_beat_the_last_peak_by_more_than_the_buffer_buy_a_larger_one() {
    let now = T0 + 28 * DAY;
    // An hour-long burst every 4 days, each 1.2x the one before: historical-peak+25% is
    // exceeded by new bursts, a 50 % buffer holds, 100 % holds with too much headroom.
    let s = series(28, now, |ts| {
        let day = (ts - T0) / DAY;
        if day % 4 == 1 && (ts - T0) % DAY / 3_600 == 12 {
            2_000.0 * 1.2f64.powi((day / 4) as i32)
        } else {
            1_000.0
        }
    });
    let rec = Auto::default().recommend(&s, &ctx(now)).unwrap();
    let c = &rec.evidence["candidates"];
    let rate = |k: &str| c[k]["exceedance_rate"].as_f64().unwrap();
    assert!(rate("historical-peak+25%") > 0.0, "{c}");
    assert_eq!(rate("historical-peak+50%"), 0.0, "{c}");
    assert_eq!(rec.evidence["chosen"], "historical-peak+50%", "{c}");
    assert_eq!(rec.rps, s.max().unwrap() * 1.5);
}

#[test]
fn growing_traffic_moves_to_a_trend_aware_candidate() {
    let now = T0 + 28 * DAY;
    // +40 % a week: historical-peak's 25 % buffer is used up within the horizon.
    let s = series(28, now, |ts| {
        1_000.0 * 1.4f64.powf((ts - now) as f64 / WEEK as f64)
    });
    let rec = Auto::default().recommend(&s, &ctx(now)).unwrap();
    let chosen = rec.evidence["chosen"].as_str().unwrap();
    let c = &rec.evidence["candidates"];
    assert_ne!(chosen, "historical-peak+25%", "{c}");
    assert_eq!(rec.evidence["chosen_backtest"]["exceedance_rate"], 0.0);
    assert!(
        c["historical-peak+25%"]["exceedance_rate"]
            .as_f64()
            .unwrap()
            > 0.0,
        "{c}"
    );
    assert!(rec.rps > s.max().unwrap() * 1.25);
}

#[test]
fn too_little_history_uses_the_simplest_candidate_and_says_why() {
    let now = T0 + 10 * DAY;
    let s = series(10, now, |_| 200.0);
    let rec = Auto::default().recommend(&s, &ctx(now)).unwrap();
    assert_eq!(rec.evidence["chosen"], "historical-peak+25%");
    let reason = rec.evidence["auto_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("too little history for a backtest: 0 of 3"),
        "{reason}"
    );
    assert!(!rec.evidence.contains_key("runner_up"));
    assert!(
        !rec.evidence.contains_key("chosen_because"),
        "no backtest, no pick"
    );
    let err = Auto::default()
        .recommend(&Series::default(), &ctx(now))
        .unwrap_err();
    assert_eq!(
        err.reason,
        "historical-peak+25% refused: no history in the last 28d"
    );
}

#[test]
fn short_windows_leave_forecast_out() {
    let a = Auto {
        window: Duration::from_secs(4 * DAY as u64),
        horizon: Duration::from_secs(DAY as u64),
        ..Auto::default()
    };
    assert_eq!(
        a.candidate_labels(),
        [
            "historical-peak+25%",
            "historical-peak+50%",
            "historical-peak+100%",
            "peak-trend"
        ]
    );
    assert_eq!(Auto::default().candidate_labels().len(), 5);
}
