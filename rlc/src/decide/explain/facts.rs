//! The wording of an explanation, shared by its text and Markdown forms: a headline, then
//! labelled facts of one or more lines, and `auto`'s candidates as table rows.

use serde_json::Value;

use super::{AutoPart, ClassesPart, Explanation, utc};
use crate::decide::guards::fmt_rps;
use crate::run_log::BucketRun;

/// One labelled fact, e.g. `Observed peak` and its lines.
pub(super) struct Fact {
    pub label: &'static str,
    pub lines: Vec<String>,
}

/// The columns of the candidates table.
pub(super) const CANDIDATE_COLUMNS: [&str; 6] = [
    "candidate",
    "origins",
    "exceeded points",
    "over",
    "peak headroom",
    "",
];

impl Explanation {
    /// `payments/gateway-pay: 1100 → 1352.5 rps (changed)`.
    pub(super) fn headline(&self) -> String {
        let limit = match (self.previous_limit, self.limit) {
            (Some(p), Some(l)) if self.outcome != "fixed" && p != l => {
                format!("{} → {} rps", fmt_rps(p), fmt_rps(l))
            }
            (_, Some(l)) => format!("{} rps", fmt_rps(l)),
            (_, None) => "no limit".to_string(),
        };
        format!("{}: {limit} ({})", self.name(), self.outcome)
    }

    /// The facts, in the order a reader asks for them.
    pub(super) fn facts(&self) -> Vec<Fact> {
        let mut facts = vec![Fact {
            label: "Config",
            lines: vec![format!(
                "commit {} of main, mode {}, planned at {}",
                short(&self.commit),
                self.mode,
                utc(self.now)
            )],
        }];
        facts.push(self.policy_fact());
        if let Some(w) = &self.window {
            let coverage = w
                .coverage
                .map(|c| format!(", coverage {:.1}%", c * 100.0))
                .unwrap_or_default();
            facts.push(Fact {
                label: "Window",
                lines: vec![format!("{} → {}{coverage}", utc(w.start), utc(w.end))],
            });
            facts.push(Fact {
                label: "Observed peak",
                lines: vec![match &self.observed_peak {
                    Some(p) => format!("{} rps at {}", fmt_rps(p.rps), p.at_utc),
                    None => "no data in the window".to_string(),
                }],
            });
        }
        if let Some(auto) = &self.auto {
            facts.push(auto_fact(auto));
        }
        if let Some(b) = &self.backtest {
            facts.push(Fact {
                label: "Backtest",
                lines: vec![format!(
                    "{} origins: {:.2}% of points over the limit, {:.2}x peak headroom",
                    b.origins,
                    b.exceedance_rate * 100.0,
                    b.peak_headroom
                )],
            });
        }
        if self.outcome != "fixed" {
            facts.push(Fact {
                label: "Guards",
                lines: if self.guards.is_empty() {
                    vec!["none changed the number".to_string()]
                } else {
                    self.guards
                        .iter()
                        .map(|g| {
                            let step = match (g.before, g.after, g.change) {
                                (Some(b), Some(_), Some(c)) if fmt_rps(c.abs()) == "0" => {
                                    format!("{} (no change)", fmt_rps(b))
                                }
                                (Some(b), Some(a), Some(c)) => format!(
                                    "{} → {} ({}{})",
                                    fmt_rps(b),
                                    fmt_rps(a),
                                    if c >= 0.0 { "+" } else { "-" },
                                    fmt_rps(c.abs())
                                ),
                                (None, Some(a), _) => format!("→ {}", fmt_rps(a)),
                                (Some(b), None, _) => format!("{} → no limit", fmt_rps(b)),
                                _ => "no limit".to_string(),
                            };
                            format!("{}: {step}: {}", g.guard, g.detail)
                        })
                        .collect()
                },
            });
        }
        facts.push(Fact {
            label: "Limit",
            lines: vec![self.limit_line()],
        });
        let scheduled = self.scheduled.summary();
        let kept = self
            .scheduled
            .entries
            .iter()
            .filter(|e| e.event.is_none())
            .map(|e| {
                format!(
                    "{} from {} until {} ({}), kept from the limits file",
                    fmt_rps(e.rps),
                    utc(e.from),
                    utc(e.until),
                    e.reason
                )
            });
        let lines: Vec<String> = scheduled.into_iter().chain(kept).collect();
        if !lines.is_empty() {
            facts.push(Fact {
                label: "Scheduled",
                lines,
            });
        }
        if let Some(d) = &self.drops {
            let mut line = if d.mode == "shadow" {
                format!(
                    "shadow: would have dropped {:.3}% of offered over the last {} days",
                    d.fraction * 100.0,
                    d.days
                )
            } else {
                format!(
                    "dropped {:.3}% of offered over the last {} days",
                    d.fraction * 100.0,
                    d.days
                )
            };
            if let (Some(since), Some(days)) = (d.shadow_since, d.days_in_shadow) {
                line.push_str(&format!("; in shadow {days:.1} days, since {}", utc(since)));
            }
            if d.mode == "shadow" || d.verdict != "ok" {
                line.push_str(&format!("; {} ({})", d.verdict, d.reason));
            }
            facts.push(Fact {
                label: "Drops",
                lines: vec![line],
            });
        }
        if let Some(c) = &self.classes {
            facts.push(classes_fact(c));
        }
        if let Some(h) = &self.history {
            let mut lines: Vec<String> = h.runs.iter().map(run_line).collect();
            let from = h
                .database
                .as_deref()
                .map(|db| format!("from {db}, newest first"));
            match (&h.note, lines.is_empty()) {
                (Some(note), _) => lines.insert(0, note.clone()),
                (None, true) => lines.push("no runs recorded".to_string()),
                _ => {}
            }
            if let Some(from) = from.filter(|_| !h.runs.is_empty()) {
                lines.insert(0, from);
            }
            facts.push(Fact {
                label: "Last runs",
                lines,
            });
        }
        facts
    }

    fn policy_fact(&self) -> Fact {
        let p = &self.policy;
        let params = if p.params.is_empty() {
            "(its defaults)".to_string()
        } else {
            let params: Vec<String> = p
                .params
                .iter()
                .map(|(k, v)| format!("{k}: {}", plain(v)))
                .collect();
            format!("{{ {} }}", params.join(", "))
        };
        let mut lines = vec![format!("{} {params}", p.kind)];
        if !p.figures.is_empty() {
            lines.push(format!(
                "its figures: {}",
                p.figures
                    .iter()
                    .map(|(k, v)| format!("{k} {}", plain(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        match (&self.proposed, &self.refusal) {
            (Some(rps), _) => lines.push(format!("proposed {} rps", fmt_rps(*rps))),
            (None, Some(why)) => lines.push(format!("no proposal: {why}")),
            (None, None) => {}
        }
        Fact {
            label: "Policy",
            lines,
        }
    }

    fn limit_line(&self) -> String {
        let limit = self
            .limit
            .map_or("no limit".to_string(), |l| format!("{} rps", fmt_rps(l)));
        match (self.outcome.as_str(), self.previous_limit, self.limit) {
            ("fixed", _, _) => format!("{limit}, fixed in the service file"),
            (_, Some(p), Some(l)) if p > 0.0 => format!(
                "{limit} ({}; previous {}, {:+.1}%)",
                self.outcome,
                fmt_rps(p),
                (l / p - 1.0) * 100.0
            ),
            (_, Some(p), _) => format!("{limit} ({}; previous {})", self.outcome, fmt_rps(p)),
            _ => format!("{limit} ({})", self.outcome),
        }
    }
}

/// Each class at the limit: what it offered at the bucket's peak and the share dropped
/// there, then the share of its requests dropped over the window.
fn classes_fact(c: &ClassesPart) -> Fact {
    let lines = match (&c.fates, &c.note) {
        (Some(f), _) => {
            let at = f.peak_at.map_or_else(|| "no data".to_string(), utc);
            let mut lines = vec![format!(
                "at {} rps over {} → {}; the bucket peaked at {} rps at {at}",
                fmt_rps(f.limit),
                utc(f.start),
                utc(f.end),
                fmt_rps(f.peak_rps)
            )];
            lines.extend(f.classes.iter().map(|k| {
                let floor = if k.min_share > 0.0 {
                    format!(" (keeps {:.0}%)", k.min_share * 100.0)
                } else {
                    String::new()
                };
                format!(
                    "{}{floor}: {} rps at the peak, {:.1}% dropped there; {:.2}% of its requests over the window ({} steps)",
                    k.class,
                    fmt_rps(k.rps_at_peak),
                    k.dropped_at_peak * 100.0,
                    k.dropped * 100.0,
                    k.steps_dropping
                )
            }));
            lines
        }
        (None, note) => vec![note.clone().unwrap_or_else(|| "not known".into())],
    };
    Fact {
        label: "Classes",
        lines,
    }
}

fn auto_fact(auto: &AutoPart) -> Fact {
    let mut lines = vec![format!(
        "chose {}{}",
        auto.chosen,
        auto.runner_up
            .as_ref()
            .map(|r| format!(", runner-up {r}"))
            .unwrap_or_default()
    )];
    if let Some(because) = &auto.because {
        lines.push(format!("because: {because}"));
    }
    if let Some(note) = &auto.note {
        lines.push(note.clone());
    }
    Fact {
        label: "Auto",
        lines,
    }
}

/// `auto`'s candidates as rows of [`CANDIDATE_COLUMNS`].
pub(super) fn candidate_rows(auto: &AutoPart) -> Vec<[String; 6]> {
    let num = |v: Option<u64>| v.map_or("—".to_string(), |v| v.to_string());
    auto.candidates
        .iter()
        .map(|c| {
            let mark = if c.label == auto.chosen {
                "chosen"
            } else if auto.runner_up.as_deref() == Some(c.label.as_str()) {
                "runner-up"
            } else {
                ""
            };
            [
                c.label.clone(),
                num(c.origins),
                num(c.exceeded_points),
                c.exceedance_rate
                    .map_or("—".to_string(), |r| format!("{:.3}%", r * 100.0)),
                c.peak_headroom
                    .filter(|h| h.is_finite())
                    .map_or("—".to_string(), |h| format!("{h:.2}x")),
                mark.to_string(),
            ]
        })
        .collect()
}

/// One run's line: `<run> <started> <status> <limit> (<what the run did>)`.
fn run_line(run: &BucketRun) -> String {
    let when = run.started_at.format("%Y-%m-%dT%H:%M:%SZ");
    let value = match &run.decision {
        None => "no decision".to_string(),
        Some(d) => {
            let limit = d
                .applied_limit
                .map_or("no limit".to_string(), |l| format!("{} rps", fmt_rps(l)));
            if run.recorded {
                let mut what = vec![d.outcome.clone()];
                if let (Some(p), Some(a)) = (d.previous_limit, d.applied_limit)
                    && p != a
                {
                    what[0] = format!("{} from {}", d.outcome, fmt_rps(p));
                }
                match d.proposed_limit {
                    Some(p) => what.push(format!("{} proposed {}", d.policy, fmt_rps(p))),
                    None => what.push(d.policy.clone()),
                }
                if !d.guards.is_empty() {
                    let names: Vec<&str> = d
                        .guards
                        .iter()
                        .filter_map(|g| g.split(':').next())
                        .collect();
                    what.push(format!("guards: {}", names.join(", ")));
                }
                format!("{limit} ({})", what.join("; "))
            } else {
                format!("{limit} (unchanged since run {})", d.run_id)
            }
        }
    };
    format!(
        "{} {when} {} {}: {value}",
        run.run_id,
        run.mode,
        run.status.as_str()
    )
}

/// The first 12 characters of a commit id.
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// A JSON value as a person writes it: strings without quotes.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
            Some(f) if f.abs() >= 10.0 => format!("{f:.2}"),
            Some(f) => {
                let four = format!("{f:.4}");
                four.trim_end_matches('0').to_string()
            }
            None => n.to_string(),
        },
        other => other.to_string(),
    }
}
