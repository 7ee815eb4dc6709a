//! How each priority class of a bucket would fare at a limit: the classes' history parted
//! step by step as the tiers part a limit among classes ([`class_limit`]: floors first,
//! then the highest classes), and what each class would have lost.
//!
//! The RLC computes a bucket's limit on its total, as without classes; this is what the
//! pull request and `rlc explain` show beside it so a reviewer sees who pays at that
//! limit: at the step where the bucket's total was highest, and over the whole window.
//!
//! Each class's series keeps the peak of each step, so a step's classes are each at their
//! own peak; when they peak at different moments within a step, the figures are what the
//! limit would drop if they had peaked together (an upper bound on the drops).

use std::collections::BTreeMap;

use grl_config::{Bucket, PriorityClass};
use grl_core::config::class_limit;
use serde::Serialize;

use crate::input::source::RangeSeries;

/// How one class would fare at a limit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassFate {
    /// The class, as listed in the bucket's `priorities`.
    pub class: String,
    /// Its floor, a share of the limit.
    pub min_share: f64,
    /// Its rate at the step where the bucket's total was highest.
    pub rps_at_peak: f64,
    /// The share of that rate the limit would drop there (0 to 1).
    pub dropped_at_peak: f64,
    /// The share of its requests over the window the limit would have dropped (0 to 1).
    pub dropped: f64,
    /// Steps of the window in which the limit would have dropped some of it.
    pub steps_dropping: usize,
}

/// How every class of a bucket would fare at a limit over a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassFates {
    /// The limit parted (requests per second).
    pub limit: f64,
    /// The window's first second (unix seconds).
    pub start: i64,
    /// The window's end (unix seconds, exclusive).
    pub end: i64,
    /// When the bucket's total (the sum of its classes) was highest (`None`: no data).
    pub peak_at: Option<i64>,
    /// That total (requests per second).
    pub peak_rps: f64,
    /// Each class, highest first.
    pub classes: Vec<ClassFate>,
}

/// The fate of `bucket`'s classes at `limit` over `[start, end)`, from each class's series
/// by class name. A series of a class the bucket does not list counts in its default class,
/// as the clients count such requests.
pub fn class_fates(
    bucket: &Bucket,
    limit: f64,
    series: &[(String, RangeSeries)],
    start: i64,
    end: i64,
) -> ClassFates {
    let classes = &bucket.priorities;
    let n = classes.len();
    let fallback = bucket.default_class().unwrap_or(0);
    let mut steps: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
    for (name, s) in series {
        let k = rank(classes, name).unwrap_or(fallback);
        for &(t, v) in &s.points {
            if (start..end).contains(&t) && v.is_finite() && v > 0.0 {
                steps.entry(t).or_insert_with(|| vec![0.0; n])[k] += v;
            }
        }
    }
    let (mut offered, mut dropped) = (vec![0.0; n], vec![0.0; n]);
    let mut steps_dropping = vec![0; n];
    let mut peak: Option<(i64, f64, Vec<f64>)> = None;
    for (&t, rates) in &steps {
        let lost = drops(limit, classes, rates);
        for k in 0..n {
            offered[k] += rates[k];
            dropped[k] += lost[k];
            if lost[k] > 0.0 {
                steps_dropping[k] += 1;
            }
        }
        let total: f64 = rates.iter().sum();
        if peak.as_ref().is_none_or(|p| total > p.1) {
            peak = Some((t, total, lost));
        }
    }
    let share = |part: f64, whole: f64| if whole > 0.0 { part / whole } else { 0.0 };
    let fates = classes
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let (at_peak, lost_at_peak) = peak
                .as_ref()
                .map_or((0.0, 0.0), |(t, _, lost)| (steps[t][k], lost[k]));
            ClassFate {
                class: c.name.clone(),
                min_share: c.min_share,
                rps_at_peak: at_peak,
                dropped_at_peak: share(lost_at_peak, at_peak),
                dropped: share(dropped[k], offered[k]),
                steps_dropping: steps_dropping[k],
            }
        })
        .collect();
    ClassFates {
        limit,
        start,
        end,
        peak_at: peak.as_ref().map(|p| p.0),
        peak_rps: peak.as_ref().map_or(0.0, |p| p.1),
        classes: fates,
    }
}

/// The rate of each class `limit` would drop when the classes offer `rates`.
fn drops(limit: f64, classes: &[PriorityClass], rates: &[f64]) -> Vec<f64> {
    let n = classes.len();
    (0..n)
        .map(|k| {
            let own = class_limit(limit, k, n, |j| rates[j], |j| classes[j].min_share);
            (rates[k] - own).max(0.0)
        })
        .collect()
}

fn rank(classes: &[PriorityClass], name: &str) -> Option<usize> {
    classes.iter().position(|c| c.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(priorities: &str) -> Bucket {
        let yaml = format!(
            "service: s\nbuckets:\n  - name: b\n    match: {{ caller: c }}\n    scope: global\n    mode: deny\n    policy: {{ kind: fixed, rps: 1 }}\n    {priorities}\n"
        );
        let snap = grl_config::from_files("c", [("services/s.yaml".to_string(), yaml)]).unwrap();
        snap.service("s").unwrap().buckets[0].clone()
    }

    fn series(points: &[(i64, f64)]) -> RangeSeries {
        RangeSeries {
            step_secs: 300,
            points: points.to_vec(),
            invalid: 0,
        }
    }

    fn near(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn at_twice_the_limit_the_lowest_classes_lose_first() {
        let b = bucket("priorities: [critical, default, sheddable]");
        // Under the limit at 0, twice it at 300 (30/40/30 %), under again at 600.
        let got = class_fates(
            &b,
            100.0,
            &[
                (
                    "critical".into(),
                    series(&[(0, 15.0), (300, 60.0), (600, 15.0)]),
                ),
                (
                    "default".into(),
                    series(&[(0, 20.0), (300, 80.0), (600, 20.0)]),
                ),
                (
                    "sheddable".into(),
                    series(&[(0, 15.0), (300, 60.0), (600, 15.0)]),
                ),
            ],
            0,
            900,
        );
        assert_eq!(got.peak_at, Some(300));
        assert!(near(got.peak_rps, 200.0));
        let [c, d, s] = &got.classes[..] else {
            panic!("{got:?}")
        };
        assert!(
            near(c.dropped_at_peak, 0.0) && c.steps_dropping == 0,
            "{c:?}"
        );
        assert!(
            near(d.dropped_at_peak, 0.5) && d.steps_dropping == 1,
            "{d:?}"
        );
        assert!(near(s.dropped_at_peak, 1.0), "{s:?}");
        // Over the window: default lost 40 of 120, sheddable 60 of 90.
        assert!(
            near(d.dropped, 40.0 / 120.0) && near(s.dropped, 60.0 / 90.0),
            "{got:?}"
        );
        assert!(near(s.rps_at_peak, 60.0));
    }

    #[test]
    fn a_floor_keeps_its_share_and_unlisted_classes_count_in_the_default() {
        let b = bucket(
            "priorities: [critical, default, sheddable]\n    min_share: { sheddable: 0.05 }",
        );
        let got = class_fates(
            &b,
            100.0,
            &[
                ("critical".into(), series(&[(0, 60.0)])),
                ("default".into(), series(&[(0, 50.0)])),
                // Requests of a class the bucket does not list count in `default`.
                ("batch".into(), series(&[(0, 30.0)])),
                ("sheddable".into(), series(&[(0, 60.0)])),
            ],
            0,
            300,
        );
        let [c, d, s] = &got.classes[..] else {
            panic!("{got:?}")
        };
        assert!(near(c.dropped_at_peak, 0.0), "{got:?}");
        assert!(near(d.rps_at_peak, 80.0), "{got:?}");
        // Sheddable keeps its 5; default gets the 35 critical leaves of the other 95.
        assert!(
            near(s.rps_at_peak * (1.0 - s.dropped_at_peak), 5.0),
            "{got:?}"
        );
        assert!(
            near(d.rps_at_peak * (1.0 - d.dropped_at_peak), 35.0),
            "{got:?}"
        );
    }

    #[test]
    fn under_the_limit_nothing_is_dropped_and_no_data_is_no_peak() {
        let b = bucket("priorities: [hi, lo]");
        let got = class_fates(
            &b,
            100.0,
            &[
                ("hi".into(), series(&[(0, 40.0), (300, 90.0)])),
                ("lo".into(), series(&[(0, 40.0), (300, 10.0)])),
            ],
            0,
            600,
        );
        assert!(
            got.classes
                .iter()
                .all(|c| c.dropped == 0.0 && c.steps_dropping == 0)
        );
        let none = class_fates(&b, 100.0, &[], 0, 600);
        assert_eq!(none.peak_at, None);
        assert!(
            none.classes
                .iter()
                .all(|c| c.rps_at_peak == 0.0 && c.dropped == 0.0)
        );
    }
}
