//! Precision across the traffic matrix (issue 38): real tiers (`grl controller` and `grl
//! aggregator` at a 1 s interval) and `grl loadgen`, a bucket per cell, and for every
//! cell its dropped share, admitted / limit, worst second, first and second second after
//! a step, seconds to converge and the tiers' offered estimate over the true rate, judged
//! against the targets. Prints a row per cell, a summary of the fails and a JSON
//! last line; writes `target/precision/heatmap.svg` and `target/precision/matrix.md`.
//!
//! Matrix: instances {1, 10, 100, 1000} x shapes {even, spread, poisson, burst} x limits
//! {5, 100, 2000} x (loads {0.5, 0.8, 0.95, 1.5, 3, 30} L and transitions {idle-10x,
//! 0.5x-30x, 30x-0.5x, join, rise-alone}). The cells of one (instances, shape) run at once
//! in one loadgen (split when they ask more of it than one loadgen offers here).
//!
//! Env (comma-separated; `none` for no steady loads or no transitions):
//! `PRECISION_CLIENTS`, `PRECISION_SHAPES`, `PRECISION_LOADS`, `PRECISION_LIMITS`,
//! `PRECISION_TRANSITIONS`, `PRECISION_SECONDS` (seconds measured after the step, default
//! 12), `PRECISION_LOADGEN_RPS` (what one loadgen may be asked for, default 100,000: alone on this
//! 2-core machine one loadgen of a thousand clients offered 200,000 Poisson rps over 34
//! cells at most 105 ms behind, but 2.5 s behind while others compiled),
//! `PRECISION_LOADGEN_VISITS` (clients x lanes x 100 a second, default 1,500,000),
//! `PRECISION_DRY_RUN=1` (print the plan only). With `GRL_FIGURES_OUT=<file>` the
//! summary also goes to that file as the headline row `precision` (see
//! `common/figures_out.rs`).

#[path = "../tests/precision/cell.rs"]
mod cell;
#[path = "common/figures_out.rs"]
mod figures_out;
#[path = "precision/heatmap.rs"]
mod heatmap;
#[path = "../tests/precision/judge.rs"]
mod judge;
#[path = "../tests/precision/report.rs"]
mod report;
#[path = "../tests/precision/run.rs"]
mod run;

use std::path::PathBuf;
use std::time::Instant;

use cell::{Selection, Traffic, Transition};
use run::{Capacity, Tiers};

/// Where the heat map and the table go: `target/precision`.
fn out_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("precision")
}

fn command() -> String {
    let vars: Vec<String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("PRECISION_"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let mut c = vars.join(" ");
    if !c.is_empty() {
        c.push(' ');
    }
    c + "cargo bench -p grl --bench precision"
}

fn main() {
    let sel = Selection::from_env().unwrap_or_else(|e| {
        eprintln!("precision: {e}");
        std::process::exit(2);
    });
    let tl = sel.timeline;
    let cap = Capacity {
        rps: std::env::var("PRECISION_LOADGEN_RPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000.0),
        visits: std::env::var("PRECISION_LOADGEN_VISITS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_500_000.0),
    };
    let cells = sel.cells();
    let plan = run::plan(&cells, &tl, &cap);
    let per_batch = |b: &run::Batch| tl.duration() as f64 + 3.0 + b.clients as f64 * 0.003;
    let eta: f64 = plan.batches.iter().map(per_batch).sum();
    println!(
        "precision: {} cells, {} refused, {} batches of one loadgen each, about {:.0} min",
        cells.len(),
        plan.refused.len(),
        plan.batches.len(),
        eta / 60.0
    );
    print!("{}", report::refused_rows(&plan.refused));
    if std::env::var("PRECISION_DRY_RUN").is_ok_and(|v| v == "1") {
        for b in &plan.batches {
            println!(
                "batch {} instances, {}: {} cells, up to {:.0} rps",
                b.clients,
                b.shape.name(),
                b.cells.len(),
                b.peak_rps(&tl)
            );
        }
        return;
    }
    let started = Instant::now();
    let runnable: Vec<cell::Cell> = plan.batches.iter().flat_map(|b| b.cells.clone()).collect();
    let tiers = Tiers::start(&runnable).unwrap_or_else(|e| {
        eprintln!("precision: {e}");
        std::process::exit(2);
    });
    println!("{}", report::header());
    let mut outcomes = Vec::new();
    for b in &plan.batches {
        let seen = tiers.run(b, &tl);
        for (c, o) in b.cells.iter().zip(&seen) {
            let out = judge::judge(*c, &tl, o);
            println!("{}", report::row(&out));
            outcomes.push(out);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    // In the matrix's order, not the order the (split) batches ran in.
    let rank = |c: &cell::Cell| cells.iter().position(|x| x == c).unwrap_or(usize::MAX);
    outcomes.sort_by_key(|o| rank(&o.cell));
    print!("{}", report::summary(&outcomes, &plan.refused));
    let dir = out_dir();
    std::fs::create_dir_all(&dir).expect("target/precision");
    let dir = dir.canonicalize().unwrap_or(dir);
    let svg = dir.join("heatmap.svg");
    let md = dir.join("matrix.md");
    if let Err(e) = heatmap::write(&svg, &outcomes, &plan.refused) {
        eprintln!("precision: the heat map: {e}");
    }
    std::fs::write(&md, report::markdown(&outcomes, &plan.refused, &command()))
        .expect("target/precision/matrix.md");
    println!(
        "heat map: {}\ntable: {}\nran {:.0} s",
        svg.display(),
        md.display(),
        seconds
    );
    let raw = report::json(&outcomes, &plan.refused, seconds);
    println!("{raw}");
    figures_row(&outcomes, plan.refused.len(), raw);
}

/// `lo–hi` of `v` at `digits` decimals after scaling by `k` (`-` when empty).
fn span(v: &[f64], k: f64, digits: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min) * k;
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max) * k;
    match v.len() {
        0 => "-".into(),
        _ if format!("{lo:.digits$}") == format!("{hi:.digits$}") => format!("{lo:.digits$}"),
        _ => format!("{lo:.digits$}-{hi:.digits$}"),
    }
}

/// The headline row `precision`: the matrix's figures by kind of cell, from the cells that
/// were judged (not invalid).
fn figures_row(outcomes: &[judge::Outcome], refused: usize, raw: serde_json::Value) {
    let valid: Vec<&judge::Outcome> = outcomes.iter().filter(|o| o.invalid.is_none()).collect();
    let steady = |f: &dyn Fn(f64) -> bool| -> Vec<&judge::Outcome> {
        valid
            .iter()
            .copied()
            .filter(|o| matches!(o.cell.traffic, Traffic::Steady(x) if f(x)))
            .collect()
    };
    let dropped = |v: &[&judge::Outcome]| v.iter().map(|o| o.dropped).collect::<Vec<_>>();
    let low = steady(&|x| x <= 0.8);
    let near = steady(&|x| x > 0.8 && x < 1.0);
    let over = steady(&|x| x >= 1.0);
    let admitted: Vec<f64> = over.iter().map(|o| o.admitted).collect();
    let estimates: Vec<f64> = steady(&|_| true)
        .iter()
        .filter_map(|o| o.estimate)
        .collect();
    let step = |t: Transition| -> Vec<f64> {
        valid
            .iter()
            .filter(|o| o.cell.traffic == Traffic::Step(t))
            .filter_map(|o| o.first.map(judge::Fig::value))
            .collect()
    };
    let rise: Vec<f64> = valid
        .iter()
        .filter(|o| o.cell.traffic == Traffic::Step(Transition::RiseAlone))
        .map(|o| o.dropped)
        .collect();
    let count = |v: &str| outcomes.iter().filter(|o| o.verdict() == v).count();
    let mut parts = vec![format!(
        "{} cells: {} met every target, {} missed one, {} not judged (loadgen behind), {refused} refused",
        outcomes.len() + refused,
        count("pass"),
        count("FAIL"),
        count("invalid")
    )];
    // The steady loads of `v`, as `0.5 / 0.8 L`.
    let loads = |v: &[&judge::Outcome]| {
        let mut l: Vec<f64> = v
            .iter()
            .filter_map(|o| match o.cell.traffic {
                Traffic::Steady(x) => Some(x),
                Traffic::Step(_) => None,
            })
            .collect();
        l.sort_by(f64::total_cmp);
        l.dedup();
        let l: Vec<String> = l.iter().map(ToString::to_string).collect();
        format!("{} L", l.join(" / "))
    };
    if !low.is_empty() {
        parts.push(format!(
            "under the limit at {} dropped {} % (target ≤ 0.5 %)",
            loads(&low),
            span(&dropped(&low), 100.0, 1)
        ));
    }
    if !near.is_empty() {
        parts.push(format!(
            "at {} {} % (≤ 2 %)",
            loads(&near),
            span(&dropped(&near), 100.0, 1)
        ));
    }
    if !admitted.is_empty() {
        parts.push(format!(
            "over it ({}) admitted {} L (±5 %)",
            loads(&over),
            span(&admitted, 1.0, 2)
        ));
    }
    if !estimates.is_empty() {
        parts.push(format!(
            "the tiers' offered estimate {} of the true rate",
            span(&estimates, 1.0, 2)
        ));
    }
    for (t, what) in [
        (
            Transition::StepUp,
            "first second after a step from 0.5 L to 30 L",
        ),
        (Transition::IdleUp, "after idle to 10 L"),
    ] {
        let v = step(t);
        if !v.is_empty() {
            parts.push(format!("{what} {} L (≤ 1.5 L)", span(&v, 1.0, 2)));
        }
    }
    let down = step(Transition::StepDown);
    if !down.is_empty() {
        parts.push(format!(
            "first second after 30 L → 0.5 L {} % admitted (≥ 90 %)",
            span(&down, 100.0, 1)
        ));
    }
    if !rise.is_empty() {
        parts.push(format!(
            "one instance rising alone {} % dropped (≤ 1 %)",
            span(&rise, 100.0, 1)
        ));
    }
    figures_out::write(&figures_out::Row {
        row: "precision",
        what: "precision across the traffic matrix (issue 38: instances × shapes × loads × limits × steps; real `grl controller`, `grl aggregator` and `grl loadgen` processes at a 1 s interval)".into(),
        figure: parts.join("; "),
        command: command(),
        figures_json: raw.to_string(),
    });
}
