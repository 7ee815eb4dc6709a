//! How a matrix run is shown: a row per cell as it completes, a summary of the cells that
//! failed, a Markdown table of them all (for BENCHMARKS.md), and one JSON value.
// Shared by the precision bench and the test suite; each uses a part of it.
#![allow(dead_code)]

use super::cell::Cell;
use super::judge::{Fig, Observed, Outcome};

fn fig(f: Option<Fig>) -> String {
    f.map_or_else(|| "-".into(), |f| f.to_string())
}

fn converge(c: Option<Option<u64>>) -> String {
    match c {
        None => "-".into(),
        Some(None) => "never".into(),
        Some(Some(s)) => format!("{s} s"),
    }
}

fn estimate(e: Option<f64>) -> String {
    e.map_or_else(|| "-".into(), |e| format!("{e:.2}"))
}

/// The columns of [`row`].
pub(crate) fn header() -> String {
    format!(
        "{:<34} {:>9} {:>8} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}  {}",
        "cell",
        "offered/L",
        "dropped",
        "admitted/L",
        "worst",
        "1st s",
        "2nd s",
        "converge",
        "est/true",
        "verdict"
    )
}

/// A note when the clients' books disagree with what was sent by more than 1 %.
fn books(o: &Outcome) -> String {
    match o.books {
        Some(b) if (b - 1.0).abs() > 0.01 => {
            format!(" (the clients' books count {b:.2}x the requests sent)")
        }
        _ => String::new(),
    }
}

/// One cell's figures, and its misses or why it was not judged.
pub(crate) fn row(o: &Outcome) -> String {
    let why = match &o.invalid {
        Some(why) => format!(": {why}"),
        None if o.misses.is_empty() => String::new(),
        None => format!(
            ": {}",
            o.misses
                .iter()
                .map(|m| m.text.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    format!(
        "{:<34} {:>9.2} {:>7.2}% {:>10.3} {:>8} {:>8} {:>8} {:>8} {:>8}  {}{why}{}",
        o.cell.id(),
        o.offered_rps / o.cell.limit,
        o.dropped * 100.0,
        o.admitted,
        fig(o.worst),
        fig(o.first),
        fig(o.second),
        converge(o.converge),
        estimate(o.estimate),
        o.verdict(),
        books(o),
    )
}

/// A cell's seconds as the loadgen counted them (sent, admitted, dropped), with the
/// controller's offered estimate and how late the loadgen ran: what a missed target is
/// read against.
pub(crate) fn seconds(o: &Outcome, seen: &Observed) -> String {
    let mut out = format!(
        "{}, second: sent/admitted/dropped, tiers' estimate, late\n",
        o.cell.id()
    );
    for (t, [sent, admitted, dropped]) in &seen.seconds {
        let est = seen
            .estimates
            .get(t)
            .map_or_else(|| "-".into(), |e| format!("{e:.1}"));
        let late = seen.late_ms.get(t).copied().unwrap_or(0);
        out +=
            &format!("  {t:>3}: {sent:.0}/{admitted:.0}/{dropped:.0}  est {est}  late {late} ms\n");
    }
    out
}

/// The cells refused before running, with why.
pub(crate) fn refused_rows(refused: &[(Cell, String)]) -> String {
    refused
        .iter()
        .map(|(c, why)| format!("{:<34} refused: {why}\n", c.id()))
        .collect()
}

/// The failed and invalid cells, one line each, under a count.
pub(crate) fn summary(outcomes: &[Outcome], refused: &[(Cell, String)]) -> String {
    let count = |v: &str| outcomes.iter().filter(|o| o.verdict() == v).count();
    let mut out = format!(
        "{} cells: {} pass, {} FAIL, {} invalid, {} refused\n",
        outcomes.len() + refused.len(),
        count("pass"),
        count("FAIL"),
        count("invalid"),
        refused.len()
    );
    for o in outcomes.iter().filter(|o| o.verdict() != "pass") {
        out.push_str(&format!("  {}\n", row(o)));
    }
    out
}

/// A Markdown table of every cell (the refused ones last), under the command that made it.
pub(crate) fn markdown(outcomes: &[Outcome], refused: &[(Cell, String)], command: &str) -> String {
    let mut out = format!(
        "Measured with `{command}`.\n\n| cell | offered / L | dropped | admitted / L | worst second | 1st s | 2nd s | converge | estimate / true | verdict |\n|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for o in outcomes {
        let verdict = match (&o.invalid, o.misses.is_empty()) {
            (Some(why), _) => format!("invalid: {why}"),
            (None, true) => "pass".into(),
            (None, false) => format!(
                "**FAIL**: {}",
                o.misses
                    .iter()
                    .map(|m| m.text.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        };
        out.push_str(&format!(
            "| {} | {:.2} | {:.2} % | {:.3} | {} | {} | {} | {} | {} | {verdict}{} |\n",
            o.cell.id(),
            o.offered_rps / o.cell.limit,
            o.dropped * 100.0,
            o.admitted,
            fig(o.worst),
            fig(o.first),
            fig(o.second),
            converge(o.converge),
            estimate(o.estimate),
            books(o),
        ));
    }
    for (c, why) in refused {
        out.push_str(&format!(
            "| {} | | | | | | | | | refused: {why} |\n",
            c.id()
        ));
    }
    out
}

/// Every cell's figures and verdict as one JSON value.
pub(crate) fn json(
    outcomes: &[Outcome],
    refused: &[(Cell, String)],
    seconds: f64,
) -> serde_json::Value {
    let fig = |f: Option<Fig>| f.map(Fig::value);
    let cells: Vec<serde_json::Value> = outcomes
        .iter()
        .map(|o| {
            serde_json::json!({
                "cell": o.cell.id(),
                "clients": o.cell.clients,
                "shape": o.cell.shape.name(),
                "limit": o.cell.limit,
                "traffic": o.cell.traffic_name(),
                "offered_rps": o.offered_rps,
                "dropped_share": o.dropped,
                "admitted_over_limit": o.admitted,
                "worst_second": fig(o.worst),
                "first_second": fig(o.first),
                "second_second": fig(o.second),
                "converge_s": o.converge.map(|c| c.map_or(-1, |s| s as i64)),
                "estimate_over_true": o.estimate,
                "books_over_sent": o.books,
                "verdict": o.verdict(),
                "misses": o.misses.iter().map(|m| m.text.clone()).collect::<Vec<_>>(),
                "invalid": o.invalid,
            })
        })
        .collect();
    let count = |v: &str| outcomes.iter().filter(|o| o.verdict() == v).count();
    serde_json::json!({
        "precision": {
            "cells": cells,
            "refused": refused.iter().map(|(c, why)| serde_json::json!({"cell": c.id(), "why": why})).collect::<Vec<_>>(),
            "pass": count("pass"),
            "fail": count("FAIL"),
            "invalid": count("invalid"),
            "seconds": seconds,
        }
    })
}
