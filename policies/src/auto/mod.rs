//! `auto`: for each bucket, backtests a small set of candidate policies on the bucket's own
//! window and recommends with the one the backtest favours.
//!
//! Parameters: `window` (history read, default `28d`), `horizon` (span the limit must hold
//! for, default `7d`).
//!
//! # Candidates
//! Simplest first: `historical-peak` with buffer 0.25, 0.5 and 1.0, `peak-trend` (buffer
//! 0.25) and `forecast` (its defaults; only when half the window is at least 3 days). The
//! chosen candidate recommends with the full `window` and `horizon`.
//!
//! # Backtest
//! Rolling origins over the window itself: the first origin is half a window after the
//! history's start, origins are `horizon / 7` apart (1 day for the defaults), and each
//! candidate's limit is scored on the next `min(horizon, window / 4)` (8 origins of 7 days
//! for the defaults). At an origin a candidate sees the history before it, up to its
//! `window` (so 14 to 21 days for the defaults): the candidates are the very policies that
//! recommend afterwards. All candidates are scored at the same origins.
//!
//! # Pick rule
//! 1. *Admissible*: candidates that scored at every origin the simplest candidate
//!    (historical-peak+25%) scored, with a mean peak headroom at most
//!    [`PickRule::max_headroom_ratio`] (1.5) times the simplest candidate's. Buying fewer
//!    exceedances with ever larger limits stops there: a limit far above anything seen
//!    protects nothing.
//! 2. Among them, the fewest exceeded points (each point of the window counted once, however
//!    many origins' horizons hold it; see [`Score`]); counts within the tie margin of the
//!    fewest ([`PickRule::tie_points`], 1 point, or [`PickRule::tie_rate`], 0.05 % of the
//!    points scored, whichever is more) are ties.
//! 3. If peak-trend is among the ties, peak-trend ([`PickRule::preferred`]): it is
//!    historical-peak+25% on flat traffic and follows growth, so it is the default that the
//!    backtest has to beat. Otherwise the least peak headroom among the ties; then the
//!    simpler candidate.
//!
//! The runner-up is the pick of the same rule among the other admissible candidates (or,
//! if none is left, the one with the fewest exceedances among the rest).
//!
//! The evidence holds every candidate's figures (`candidates`: exceedance rate, peak
//! headroom, origins scored, exceeded points), the choice and the runner-up, and in
//! `chosen_because` the rule's steps in words ([`PickReasons::describe`]).
//!
//! Why not "least headroom" first: exceedances are rare events (a few points in a week),
//! and 8 origins of a bucket's own window see few of them. A candidate that looks tighter
//! for no exceedance more in the window (forecast on very regular traffic) then misses the
//! next holiday or burst that the window did not contain; on nyc_taxi that tripled the
//! exceedances. The rule moves away from the default only on the evidence of exceedances.
//!
//! # Too little history
//! When the simplest candidate scores fewer than [`MIN_ORIGINS`] origins (a new bucket, a
//! history shorter than `window / 2 + horizon`, or gaps), no backtest is trusted: the
//! simplest candidate recommends and the evidence says why (`auto_reason`).

mod candidates;
mod score;

pub use score::Score;

use crate::duration;
use crate::params::{Params, SpecError};
use crate::policy::FromSpec;
use crate::policy::{Context, Policy, Recommendation, Refusal};
use crate::series::Series;
use candidates::{Candidate, candidates};
use score::{Origins, score_all};
use serde_json::{Value, json};
use std::time::Duration;

/// Fewest origins the simplest candidate must score for the backtest to decide.
pub const MIN_ORIGINS: usize = 3;

/// The constants of the pick rule (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PickRule {
    /// Largest mean peak headroom of an admissible candidate, relative to the simplest
    /// one's (default 1.5).
    pub max_headroom_ratio: f64,
    /// Exceedance counts this many points above the fewest are ties (default 1).
    pub tie_points: usize,
    /// Or this fraction of the points scored, if that is more points (default 0.0005).
    pub tie_rate: f64,
    /// The index of the candidate that wins any tie it is part of (default 3, peak-trend;
    /// `None`: ties go to the least headroom).
    pub preferred: Option<usize>,
}

impl Default for PickRule {
    fn default() -> Self {
        PickRule {
            max_headroom_ratio: 1.5,
            tie_points: 1,
            tie_rate: 0.0005,
            preferred: Some(3),
        }
    }
}

/// Picks, per bucket, the candidate policy its own backtest favours; see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct Auto {
    /// History read (the candidates' window).
    pub window: Duration,
    /// How far ahead the limit must hold.
    pub horizon: Duration,
    /// The pick rule's constants.
    pub rule: PickRule,
}

impl Default for Auto {
    fn default() -> Self {
        Auto {
            window: Duration::from_secs(28 * 86_400),
            horizon: Duration::from_secs(7 * 86_400),
            rule: PickRule::default(),
        }
    }
}

impl FromSpec for Auto {
    const KIND: &'static str = "auto";

    fn from_params(params: &Params<'_>) -> Result<Self, SpecError> {
        Ok(Auto {
            window: params.duration("window", "28d")?,
            horizon: params.duration("horizon", "7d")?,
            rule: PickRule::default(),
        })
    }
}

/// The outcome of the pick: indexes into the candidates and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    /// The chosen candidate.
    pub chosen: usize,
    /// The runner-up, if there was another candidate.
    pub runner_up: Option<usize>,
}

/// How the last step of the pick rule settled among the candidates tied on exceedances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TieBreak {
    /// No tie: one candidate had the fewest exceeded points.
    Alone,
    /// The preferred candidate ([`PickRule::preferred`]) was among the ties.
    Preferred,
    /// The least mean peak headroom among the ties.
    LeastHeadroom,
    /// Equal headroom: the simpler candidate.
    Simpler,
}

/// What the pick rule saw when it chose, step by step (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct PickReasons {
    /// Step 1: the admissible candidates, simplest first.
    pub admissible: Vec<usize>,
    /// Step 2: the fewest exceeded points among them.
    pub fewest: usize,
    /// Step 2: counts up to `fewest + margin` are ties.
    pub margin: usize,
    /// Step 2: the candidates tied on the fewest, simplest first.
    pub tied: Vec<usize>,
    /// Step 3: how the tie was settled.
    pub tie_break: TieBreak,
}

impl PickReasons {
    /// The reasons `chosen` won, in words, naming candidates by `labels` (in the order of
    /// `scores`): which were admissible and why the others were not, the fewest exceeded
    /// points and the ties, and how the tie was settled.
    pub fn describe(
        &self,
        chosen: usize,
        labels: &[&str],
        scores: &[Score],
        rule: &PickRule,
    ) -> String {
        let name = |i: usize| labels.get(i).copied().unwrap_or("?");
        let list = |ix: &[usize]| ix.iter().map(|&i| name(i)).collect::<Vec<_>>().join(", ");
        let Some(base) = scores.first() else {
            return String::new();
        };
        let mut out = format!(
            "admissible (scored at the {} origins {} scored, headroom at most {}x its {:.2}x): {}",
            base.scored,
            name(0),
            rule.max_headroom_ratio,
            base.peak_headroom,
            list(&self.admissible)
        );
        let left_out: Vec<String> = (0..scores.len())
            .filter(|i| !self.admissible.contains(i))
            .map(|i| {
                let s = &scores[i];
                if s.refused > 0 {
                    format!("{} (refused at {} origins)", name(i), s.refused)
                } else if s.scored != base.scored {
                    format!("{} (scored {} origins)", name(i), s.scored)
                } else {
                    format!("{} (headroom {:.2}x)", name(i), s.peak_headroom)
                }
            })
            .collect();
        if !left_out.is_empty() {
            out.push_str(&format!("; not {}", left_out.join(", ")));
        }
        out.push_str(&format!(
            "; fewest exceeded points {}, ties within {}: {}",
            self.fewest,
            self.margin,
            list(&self.tied)
        ));
        out.push_str(&match self.tie_break {
            TieBreak::Alone => format!("; {} alone has the fewest", name(chosen)),
            TieBreak::Preferred => format!("; {} is preferred on a tie", name(chosen)),
            TieBreak::LeastHeadroom => format!(
                "; least headroom among them: {} ({:.2}x)",
                name(chosen),
                scores[chosen].peak_headroom
            ),
            TieBreak::Simpler => format!("; equal headroom: the simpler, {}", name(chosen)),
        });
        out
    }
}

/// Applies the pick rule of the module docs to the candidates' scores (simplest first).
pub fn pick(scores: &[Score], rule: &PickRule) -> Pick {
    pick_explained(scores, rule).0
}

/// [`pick`], with what the rule saw at each step for the chosen candidate.
pub fn pick_explained(scores: &[Score], rule: &PickRule) -> (Pick, PickReasons) {
    let none = PickReasons {
        admissible: Vec::new(),
        fewest: 0,
        margin: 0,
        tied: Vec::new(),
        tie_break: TieBreak::Alone,
    };
    let Some(base) = scores.first() else {
        let pick = Pick {
            chosen: 0,
            runner_up: None,
        };
        return (pick, none);
    };
    let admissible: Vec<usize> = (0..scores.len())
        .filter(|&i| {
            let s = &scores[i];
            i == 0
                || (s.scored == base.scored
                    && s.refused == 0
                    && s.peak_headroom <= rule.max_headroom_ratio * base.peak_headroom)
        })
        .collect();
    let best = |among: &[usize]| -> Option<(usize, PickReasons)> {
        let fewest = among.iter().map(|&i| scores[i].exceeded).min()?;
        let points = among.iter().map(|&i| scores[i].points).max().unwrap_or(0);
        let margin = rule
            .tie_points
            .max((rule.tie_rate * points as f64).floor() as usize);
        let tied: Vec<usize> = among
            .iter()
            .copied()
            .filter(|&i| scores[i].exceeded <= fewest + margin)
            .collect();
        let reasons = |tie_break| PickReasons {
            admissible: admissible.clone(),
            fewest,
            margin,
            tied: tied.clone(),
            tie_break,
        };
        if let Some(pref) = rule.preferred
            && tied.contains(&pref)
        {
            let why = if tied.len() == 1 {
                TieBreak::Alone
            } else {
                TieBreak::Preferred
            };
            return Some((pref, reasons(why)));
        }
        let chosen = tied.iter().copied().min_by(|&a, &b| {
            scores[a]
                .peak_headroom
                .total_cmp(&scores[b].peak_headroom)
                .then(a.cmp(&b))
        })?;
        let why = if tied.len() == 1 {
            TieBreak::Alone
        } else if tied.iter().filter(|&&i| i != chosen).all(|&i| {
            scores[i]
                .peak_headroom
                .total_cmp(&scores[chosen].peak_headroom)
                .is_gt()
        }) {
            TieBreak::LeastHeadroom
        } else {
            TieBreak::Simpler
        };
        Some((chosen, reasons(why)))
    };
    let (chosen, reasons) = best(&admissible).unwrap_or((0, none));
    let rest: Vec<usize> = admissible
        .iter()
        .copied()
        .filter(|&i| i != chosen)
        .collect();
    let runner_up = best(&rest).map(|(i, _)| i).or_else(|| {
        (0..scores.len())
            .filter(|&i| i != chosen && scores[i].scored > 0)
            .min_by(|&a, &b| {
                scores[a]
                    .exceeded
                    .cmp(&scores[b].exceeded)
                    .then(scores[a].peak_headroom.total_cmp(&scores[b].peak_headroom))
            })
    });
    (Pick { chosen, runner_up }, reasons)
}

impl Auto {
    fn with_forecast(&self) -> bool {
        self.window / 2 >= crate::forecast::min_window()
    }

    fn origins(&self, step: i64) -> Origins {
        let window = duration::secs(self.window);
        let horizon = duration::secs(self.horizon).min(window / 4).max(step);
        Origins {
            warmup_secs: window / 2,
            window_secs: window,
            horizon_secs: horizon,
            stride_secs: (horizon / 7).max(step),
        }
    }

    /// Scores every candidate on the window of `history` before `ctx.now`, in the order of
    /// [`Auto::candidate_labels`]; the second value is the number of origins tried.
    pub fn scores(&self, history: &Series, ctx: &Context) -> (Vec<Score>, usize) {
        let recent = history.window(ctx.now.saturating_sub(duration::secs(self.window)), ctx.now);
        let origins = self.origins(history.step_secs);
        let inner = candidates(
            self.window,
            Duration::from_secs(origins.horizon_secs as u64),
            self.with_forecast(),
        );
        score_all(&inner, &recent, ctx.now, origins)
    }

    /// The candidates' labels, simplest first.
    pub fn candidate_labels(&self) -> Vec<&'static str> {
        self.full().iter().map(|c| c.label).collect()
    }

    fn full(&self) -> Vec<Candidate> {
        candidates(self.window, self.horizon, self.with_forecast())
    }
}

fn figures(s: &Score) -> Value {
    json!({
        "exceedance_rate": round(s.exceedance_rate, 5),
        "peak_headroom": round(s.peak_headroom, 3),
        "origins": s.scored,
        "exceeded_points": s.exceeded,
    })
}

fn round(x: f64, digits: i32) -> f64 {
    let k = 10f64.powi(digits);
    (x * k).round() / k
}

impl Policy for Auto {
    fn kind(&self) -> &'static str {
        Self::KIND
    }

    fn window(&self) -> Duration {
        self.window
    }

    fn horizon(&self) -> Option<Duration> {
        Some(self.horizon)
    }

    fn recommend(&self, history: &Series, ctx: &Context) -> Result<Recommendation, Refusal> {
        let full = self.full();
        let (scores, tried) = self.scores(history, ctx);
        let base_scored = scores.first().map_or(0, |s| s.scored);
        let (order, reason, why) = if base_scored < MIN_ORIGINS {
            let origins = self.origins(history.step_secs);
            let reason = format!(
                "too little history for a backtest: {base_scored} of {MIN_ORIGINS} origins \
                 needed (each needs {} of history before it and {} after); simplest candidate used",
                duration::format(Duration::from_secs(origins.warmup_secs as u64)),
                duration::format(Duration::from_secs(origins.horizon_secs as u64)),
            );
            (vec![0], Some(reason), None)
        } else {
            let (p, why) = pick_explained(&scores, &self.rule);
            let labels: Vec<&str> = full.iter().map(|c| c.label).collect();
            let why = why.describe(p.chosen, &labels, &scores, &self.rule);
            let mut order = vec![p.chosen];
            order.extend(p.runner_up);
            if !order.contains(&0) {
                order.push(0);
            }
            (order, None, Some(why))
        };
        let mut refusals = Vec::new();
        for (rank, &i) in order.iter().enumerate() {
            let candidate = &full[i];
            let rec = match candidate.policy.recommend(history, ctx) {
                Ok(rec) => rec,
                Err(r) => {
                    refusals.push(format!("{} refused: {}", candidate.label, r.reason));
                    continue;
                }
            };
            let mut out = Recommendation::new(Self::KIND, rec.rps);
            for (k, v) in rec.evidence {
                if k != "policy" {
                    out.evidence.insert(k, v);
                }
            }
            out = out
                .with("chosen", candidate.label)
                .with("chosen_spec", candidate.spec(self.window, self.horizon));
            if reason.is_none() {
                out = out.with("chosen_backtest", figures(&scores[i]));
                if let Some(why) = why.as_ref().filter(|_| rank == 0) {
                    out = out.with("chosen_because", why.as_str());
                }
                let runner_up = order
                    .get(1)
                    .filter(|_| rank == 0)
                    .copied()
                    .or_else(|| (rank > 0).then_some(order[0]));
                if let Some(r) = runner_up {
                    out = out
                        .with("runner_up", full[r].label)
                        .with("runner_up_backtest", figures(&scores[r]));
                }
                let all: serde_json::Map<String, Value> = full
                    .iter()
                    .zip(&scores)
                    .map(|(c, s)| (c.label.to_string(), figures(s)))
                    .collect();
                out = out.with("candidates", Value::Object(all));
                out = out.with("backtest_origins", tried);
            }
            let mut notes: Vec<String> = reason.iter().cloned().collect();
            notes.extend(refusals);
            if !notes.is_empty() {
                out = out.with("auto_reason", notes.join("; "));
            }
            return Ok(out);
        }
        Err(Refusal::new(refusals.join("; ")))
    }
}

#[cfg(test)]
mod tests;
