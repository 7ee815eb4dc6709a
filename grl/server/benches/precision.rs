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
//! `PRECISION_DRY_RUN=1` (print the plan only).

#[path = "../tests/precision/cell.rs"]
mod cell;
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

use cell::Selection;
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
    println!("{}", report::json(&outcomes, &plan.refused, seconds));
}
