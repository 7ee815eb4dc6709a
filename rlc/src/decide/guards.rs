//! Safety guards between a policy's proposal and the limit that is written.
//!
//! Each guard that acts leaves a [`GuardNote`] in the evidence (what it did in words, and
//! the number it was given and the one it passed on), so a reviewer sees why the written
//! limit differs from the proposal, and by how much. Order: data coverage, policy refusal, sanity
//! (finite, > 0), maximum change per run, floor and cap, cap relative to the observed peak,
//! hysteresis.

use serde::Serialize;

pub use policies::guard_settings::{GuardSettings, GuardSpecError};

/// What happened to a bucket's limit in this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// A first limit for a bucket that had none.
    New,
    /// The limit changes.
    Changed,
    /// The proposal is within hysteresis of the previous limit; nothing changes.
    Unchanged,
    /// The proposal was not usable; the previous limit stays.
    KeptPrevious,
    /// Nothing usable and no previous limit: the bucket stays unenforced.
    NoLimit,
}

impl Outcome {
    /// The kebab-case name used in evidence, history and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::New => "new",
            Outcome::Changed => "changed",
            Outcome::Unchanged => "unchanged",
            Outcome::KeptPrevious => "kept-previous",
            Outcome::NoLimit => "no-limit",
        }
    }
}

/// One guard that acted, for the evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuardNote {
    /// The guard's name, e.g. `max-decrease`.
    pub guard: &'static str,
    /// What it did, in words.
    pub detail: String,
    /// The number the guard was given (the proposal, or what the guards before it made of
    /// it); `None` when there was none (the policy refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<f64>,
    /// The number it passed on (`None`: no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<f64>,
}

/// The guarded result for one bucket.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Guarded {
    /// The limit to write (`None`: no limit).
    pub limit: Option<f64>,
    /// What happened.
    pub outcome: Outcome,
    /// The guards that acted, in order.
    pub notes: Vec<GuardNote>,
}

/// Applies the guards to `proposal` (a policy's limit, or the reason it refused);
/// `observed_peak` is the largest rate in the policy's window (for `cap_peak_ratio`).
pub fn apply(
    settings: &GuardSettings,
    proposal: Result<f64, String>,
    previous: Option<f64>,
    coverage: Option<f64>,
    observed_peak: Option<f64>,
) -> Guarded {
    let mut notes = Vec::new();
    let keep = |notes: Vec<GuardNote>| Guarded {
        limit: previous,
        outcome: if previous.is_some() {
            Outcome::KeptPrevious
        } else {
            Outcome::NoLimit
        },
        notes,
    };
    if let Some(c) = coverage
        && c < settings.min_coverage
    {
        notes.push(GuardNote {
            guard: "min-coverage",
            detail: format!(
                "data coverage {:.1}% is below {:.1}%: previous limit kept",
                c * 100.0,
                settings.min_coverage * 100.0
            ),
            before: proposal.as_ref().ok().copied(),
            after: previous,
        });
        return keep(notes);
    }
    let proposed = match proposal {
        Ok(p) => p,
        Err(reason) => {
            notes.push(GuardNote {
                guard: "policy-refused",
                detail: format!("{reason}: previous limit kept"),
                before: None,
                after: previous,
            });
            return keep(notes);
        }
    };
    if !(proposed.is_finite() && proposed > 0.0) {
        notes.push(GuardNote {
            guard: "sanity",
            detail: format!("proposed limit {proposed} is not a finite number > 0: refused"),
            before: Some(proposed),
            after: previous,
        });
        return keep(notes);
    }
    let mut limit = proposed;
    if let Some(prev) = previous {
        let lowest = prev * (1.0 - settings.max_decrease);
        let highest = prev * (1.0 + settings.max_increase);
        if limit < lowest {
            notes.push(GuardNote {
                guard: "max-decrease",
                detail: format!(
                    "proposed {} is more than {:.0}% below {}: lowered to {}",
                    fmt_rps(limit),
                    settings.max_decrease * 100.0,
                    fmt_rps(prev),
                    fmt_rps(lowest)
                ),
                before: Some(limit),
                after: Some(lowest),
            });
            limit = lowest;
        } else if limit > highest {
            notes.push(GuardNote {
                guard: "max-increase",
                detail: format!(
                    "proposed {} is more than {:.0}% above {}: raised to {}",
                    fmt_rps(limit),
                    settings.max_increase * 100.0,
                    fmt_rps(prev),
                    fmt_rps(highest)
                ),
                before: Some(limit),
                after: Some(highest),
            });
            limit = highest;
        }
    }
    if let Some(floor) = settings.floor
        && limit < floor
    {
        notes.push(GuardNote {
            guard: "floor",
            detail: format!("{} raised to the floor {}", fmt_rps(limit), fmt_rps(floor)),
            before: Some(limit),
            after: Some(floor),
        });
        limit = floor;
    }
    if let Some(cap) = settings.cap
        && limit > cap
    {
        notes.push(GuardNote {
            guard: "cap",
            detail: format!("{} lowered to the cap {}", fmt_rps(limit), fmt_rps(cap)),
            before: Some(limit),
            after: Some(cap),
        });
        limit = cap;
    }
    if let (Some(ratio), Some(peak)) = (settings.cap_peak_ratio, observed_peak)
        && peak > 0.0
        && limit > ratio * peak
    {
        notes.push(GuardNote {
            guard: "cap-peak-ratio",
            detail: format!(
                "{} lowered to {ratio}x the observed peak {}: {}",
                fmt_rps(limit),
                fmt_rps(peak),
                fmt_rps(ratio * peak)
            ),
            before: Some(limit),
            after: Some(ratio * peak),
        });
        limit = ratio * peak;
    }
    let limit = round_rps(limit);
    match previous {
        None => Guarded {
            limit: Some(limit),
            outcome: Outcome::New,
            notes,
        },
        Some(prev) if (limit - prev).abs() < settings.hysteresis * prev => {
            notes.push(GuardNote {
                guard: "hysteresis",
                detail: format!(
                    "change {:+.1}% is under {:.0}%: kept {}",
                    (limit / prev - 1.0) * 100.0,
                    settings.hysteresis * 100.0,
                    fmt_rps(prev)
                ),
                before: Some(limit),
                after: Some(prev),
            });
            Guarded {
                limit: Some(prev),
                outcome: Outcome::Unchanged,
                notes,
            }
        }
        Some(_) => Guarded {
            limit: Some(limit),
            outcome: Outcome::Changed,
            notes,
        },
    }
}

/// Limits are written with at most one decimal: stable diffs, no float noise.
pub fn round_rps(rps: f64) -> f64 {
    (rps * 10.0).round() / 10.0
}

/// `1250` or `12.5`: the form used in notes and tables.
pub fn fmt_rps(rps: f64) -> String {
    let r = round_rps(rps);
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(proposal: Result<f64, String>, previous: Option<f64>, coverage: f64) -> Guarded {
        apply(
            &GuardSettings::default(),
            proposal,
            previous,
            Some(coverage),
            None,
        )
    }

    #[test]
    fn first_limit_is_new() {
        let g = run(Ok(1250.0), None, 1.0);
        assert_eq!((g.limit, g.outcome), (Some(1250.0), Outcome::New));
        assert!(g.notes.is_empty());
    }

    #[test]
    fn low_coverage_keeps_previous_and_says_why() {
        let g = run(Ok(5000.0), Some(1000.0), 0.5);
        assert_eq!((g.limit, g.outcome), (Some(1000.0), Outcome::KeptPrevious));
        assert_eq!(g.notes[0].guard, "min-coverage");
        assert!(g.notes[0].detail.contains("50.0%"), "{:?}", g.notes);
        let g = run(Ok(5000.0), None, 0.5);
        assert_eq!((g.limit, g.outcome), (None, Outcome::NoLimit));
    }

    #[test]
    fn refusal_and_nonsense_keep_previous() {
        let g = run(Err("history too short".into()), Some(10.0), 1.0);
        assert_eq!((g.limit, g.outcome), (Some(10.0), Outcome::KeptPrevious));
        assert_eq!((g.notes[0].before, g.notes[0].after), (None, Some(10.0)));
        let json = serde_json::to_value(&g.notes[0]).unwrap();
        assert!(json.get("before").is_none(), "{json}");
        assert!(g.notes[0].detail.contains("history too short"));
        for bad in [f64::NAN, f64::INFINITY, 0.0, -5.0] {
            let g = run(Ok(bad), Some(10.0), 1.0);
            assert_eq!(
                (g.limit, g.outcome),
                (Some(10.0), Outcome::KeptPrevious),
                "{bad}"
            );
            assert_eq!(g.notes[0].guard, "sanity");
        }
    }

    #[test]
    fn change_per_run_is_bounded() {
        let g = run(Ok(100.0), Some(1000.0), 1.0);
        assert_eq!((g.limit, g.outcome), (Some(800.0), Outcome::Changed));
        assert_eq!(g.notes[0].guard, "max-decrease");
        assert_eq!(
            (g.notes[0].before, g.notes[0].after),
            (Some(100.0), Some(800.0))
        );
        let json = serde_json::to_value(&g.notes[0]).unwrap();
        assert_eq!(
            (json["before"].as_f64(), json["after"].as_f64()),
            (Some(100.0), Some(800.0))
        );
        let g = run(Ok(5000.0), Some(1000.0), 1.0);
        assert_eq!(g.limit, Some(2000.0));
        assert_eq!(g.notes[0].guard, "max-increase");
    }

    #[test]
    fn small_changes_are_skipped() {
        let g = run(Ok(1040.0), Some(1000.0), 1.0);
        assert_eq!((g.limit, g.outcome), (Some(1000.0), Outcome::Unchanged));
        assert_eq!(
            (g.notes[0].before, g.notes[0].after),
            (Some(1040.0), Some(1000.0))
        );
        let g = run(Ok(1060.0), Some(1000.0), 1.0);
        assert_eq!((g.limit, g.outcome), (Some(1060.0), Outcome::Changed));
    }

    #[test]
    fn floor_and_cap_bound_the_limit() {
        let s = GuardSettings {
            floor: Some(50.0),
            cap: Some(900.0),
            ..GuardSettings::default()
        };
        let g = apply(&s, Ok(10.0), None, Some(1.0), None);
        assert_eq!(g.limit, Some(50.0));
        let g = apply(&s, Ok(5000.0), None, Some(1.0), None);
        assert_eq!(g.limit, Some(900.0));
        assert_eq!(g.notes[0].guard, "cap");
    }

    #[test]
    fn cap_relative_to_the_observed_peak() {
        let s = GuardSettings {
            cap_peak_ratio: Some(3.0),
            ..GuardSettings::default()
        };
        let g = apply(&s, Ok(1558.2), None, Some(1.0), Some(104.0));
        assert_eq!((g.limit, g.outcome), (Some(312.0), Outcome::New));
        assert_eq!(g.notes[0].guard, "cap-peak-ratio");
        assert_eq!(
            g.notes[0].detail,
            "1558.2 lowered to 3x the observed peak 104: 312"
        );
        let g = apply(&s, Ok(300.0), None, Some(1.0), Some(104.0));
        assert_eq!(g.limit, Some(300.0));
        assert!(g.notes.is_empty());
        let g = apply(&s, Ok(1558.2), None, Some(1.0), None);
        assert_eq!(
            g.limit,
            Some(1558.2),
            "no peak known: nothing to cap against"
        );
        let m = |v: serde_json::Value| v.as_object().unwrap().clone();
        let o = GuardSettings::default()
            .with_overrides(&m(serde_json::json!({"cap_peak_ratio": 2.5})))
            .unwrap();
        assert_eq!(o.cap_peak_ratio, Some(2.5));
        let e = GuardSettings::default()
            .with_overrides(&m(serde_json::json!({"cap_peak_ratio": 0.5})))
            .unwrap_err();
        assert_eq!(e.field, "cap_peak_ratio");
    }

    #[test]
    fn overrides_are_validated() {
        let base = GuardSettings::default();
        let m = |v: serde_json::Value| v.as_object().unwrap().clone();
        let s = base
            .with_overrides(&m(serde_json::json!({"floor": 5, "max_decrease": 0.5})))
            .unwrap();
        assert_eq!((s.floor, s.max_decrease), (Some(5.0), 0.5));
        let e = base
            .with_overrides(&m(serde_json::json!({"colour": 1})))
            .unwrap_err();
        assert_eq!(e.field, "colour");
        let e = base
            .with_overrides(&m(serde_json::json!({"floor": 10, "cap": 5})))
            .unwrap_err();
        assert!(e.to_string().contains("above cap"), "{e}");
    }
}
