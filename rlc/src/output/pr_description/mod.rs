//! Markdown body of the pull request (or commit description) that carries a run's limits.
//!
//! [`render`] is pure and deterministic: rows are sorted by `service/bucket`, numbers are
//! formatted without locale (no thousands separators, at most one decimal), and a cell with no
//! value shows `—`. The output is what a reviewer reads, so tests pin it exactly.
//!
//! Each bucket given an [`Explanation`] gets a collapsible section below the table, and its
//! row links to it. The sections share what [`MAX_BODY`] leaves after the table and the
//! other sections; those that do not fit are left out, and the description says how many.
//!
//! At fleet size (thousands of buckets) the table alone would pass GitHub's limit, so it
//! keeps what a reviewer needs first: removed and new limits, then changed ones by the size
//! of the change, then unchanged ones; the rows left out are counted below the table (the
//! summary line still counts every bucket, and the diff of `limits/` shows every change).
//! The other sections take at most half of the limit, each clipped at a line.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use crate::decide::explain::{Explanation, anchor};
pub use crate::decide::plan::PrRow;

/// Placeholder for a cell that has no value.
const NONE: &str = "—";

/// GitHub's limit on a pull request's body (characters); the explanations stay within it
/// (bytes are counted, which is never fewer).
pub const MAX_BODY: usize = 65_536;

/// Room kept for the note that says how many explanations were left out.
const NOTE_ROOM: usize = 300;

/// Room kept for the note that says how many rows were left out of the table.
const ROWS_NOTE_ROOM: usize = 300;

/// The heading of the explanations.
const WHY: &str = "\n### Why these limits\n\n";

/// Renders the Markdown description of run `run_id`.
///
/// The document is a heading, a summary line, the table
/// `| bucket | old | new | change | policy | observed peak | coverage | notes |`, then the
/// `explanations` (one `<details>` section each, in bucket order, linked from its row, as
/// many as fit in [`MAX_BODY`]) and then each of `extra_sections` as a `###` heading followed
/// by its Markdown body, in the order given.
pub fn render(
    run_id: &str,
    rows: &[PrRow],
    extra_sections: &[(String, String)],
    explanations: &[Explanation],
) -> String {
    let mut sorted: Vec<&PrRow> = rows.iter().collect();
    sorted.sort_by(|a, b| (&a.service, &a.bucket).cmp(&(&b.service, &b.bucket)));
    let extras = extras(extra_sections);
    let room = MAX_BODY.saturating_sub(extras.len() + WHY.len() + NOTE_ROOM + ROWS_NOTE_ROOM);
    let shown = fit_rows(&sorted, room);
    let unlinked = table(run_id, &sorted, &shown, &BTreeMap::new()).len() + extras.len();
    let (anchors, sections, left_out) = fit_explanations(&shown, explanations, unlinked);

    let mut out = table(run_id, &sorted, &shown, &anchors);
    if !sections.is_empty() || left_out > 0 {
        out.push_str(WHY);
        out.push_str(&sections);
        if left_out > 0 {
            let _ = writeln!(
                out,
                "\n{left_out} more explanation{} left out to keep this description within \
                 GitHub's {MAX_BODY} characters; `rlc explain SERVICE BUCKET` prints any of them.",
                if left_out == 1 { "" } else { "s" }
            );
        }
    }
    out.push_str(&extras);
    out
}

/// The other sections, each `### heading` and body; together they take at most half of
/// [`MAX_BODY`], each clipped at a line to its share.
fn extras(extra_sections: &[(String, String)]) -> String {
    let share = (MAX_BODY / 2) / extra_sections.len().max(1);
    let mut out = String::new();
    for (heading, body) in extra_sections {
        let heading = heading.trim();
        let body = clip_lines(body.trim_end(), share.saturating_sub(heading.len() + 200));
        let _ = write!(out, "\n### {heading}\n\n{body}\n");
    }
    out
}

/// `text` whole if it has at most `room` bytes; else its first lines that fit, and a line
/// saying how many were left out.
fn clip_lines(text: &str, room: usize) -> String {
    if text.len() <= room {
        return text.to_string();
    }
    let mut out = String::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut kept = 0;
    for line in &lines {
        if out.len() + line.len() + 1 > room {
            break;
        }
        out.push_str(line);
        out.push('\n');
        kept += 1;
    }
    let _ = write!(
        out,
        "\n… {} more lines left out to keep this description within GitHub's {MAX_BODY} \
         characters.",
        lines.len() - kept
    );
    out
}

/// The rows the table shows within `room` bytes, in name order: all when they fit; else
/// removed and new limits, then changed ones by the size of the change, then unchanged.
fn fit_rows<'a>(sorted: &[&'a PrRow], room: usize) -> Vec<&'a PrRow> {
    let lines: Vec<usize> = sorted.iter().map(|r| row_line(r, None).len()).collect();
    let head = table_head().len();
    if head + lines.iter().sum::<usize>() <= room {
        return sorted.to_vec();
    }
    let mut order: Vec<usize> = (0..sorted.len()).collect();
    order.sort_by(|&a, &b| {
        let (ka, kb) = (weight(sorted[a]), weight(sorted[b]));
        ka.0.cmp(&kb.0).then(kb.1.total_cmp(&ka.1)).then(a.cmp(&b))
    });
    let mut keep = vec![false; sorted.len()];
    let mut used = head;
    // Stops at the first row that does not fit, so no row is shown in place of a larger change.
    for i in order {
        if used + lines[i] > room {
            break;
        }
        used += lines[i];
        keep[i] = true;
    }
    sorted
        .iter()
        .zip(keep)
        .filter_map(|(r, k)| k.then_some(*r))
        .collect()
}

/// How much a reviewer needs a row: its class (0 removed or new, 1 changed, 2 unchanged)
/// and, within a class, the relative size of the change (larger first).
fn weight(r: &PrRow) -> (u8, f64) {
    match (r.old, r.new) {
        (None, Some(_)) | (Some(_), None) => (0, 0.0),
        (Some(o), Some(n)) if fmt_rate(o) != fmt_rate(n) => {
            let size = if o != 0.0 {
                ((n - o) / o).abs()
            } else {
                f64::MAX
            };
            (1, if size.is_finite() { size } else { f64::MAX })
        }
        _ => (2, 0.0),
    }
}

fn table_head() -> &'static str {
    "| bucket | old | new | change | policy | observed peak | coverage | notes |\n\
     |---|---:|---:|---:|---|---:|---:|---|\n"
}

/// The heading, the summary of every row in `sorted`, and the table of the `shown` ones; a
/// row whose `service/bucket` is in `anchors` links to it. The rows left out are counted
/// below the table.
fn table(
    run_id: &str,
    sorted: &[&PrRow],
    shown: &[&PrRow],
    anchors: &BTreeMap<(&str, &str), String>,
) -> String {
    let mut out = String::new();
    out.push_str("## Rate limit changes\n\n");
    out.push_str(&summary(run_id, sorted));
    out.push_str("\n\n");
    if !shown.is_empty() {
        out.push_str(table_head());
        for row in shown {
            let anchor = anchors.get(&(row.service.as_str(), row.bucket.as_str()));
            out.push_str(&row_line(row, anchor.map(String::as_str)));
        }
    }
    let left_out = sorted.len() - shown.len();
    if left_out > 0 {
        let changed = sorted.iter().filter(|r| weight(r).0 < 2).count()
            - shown.iter().filter(|r| weight(r).0 < 2).count();
        let _ = writeln!(
            out,
            "\n{left_out} more row{} ({changed} of them new, removed or changed) left out to keep \
             this description within GitHub's {MAX_BODY} characters; the diff of `limits/` \
             shows every change.",
            if left_out == 1 { "" } else { "s" }
        );
    }
    out
}

/// One row of the table, its bucket linked to `anchor` if given.
fn row_line(row: &PrRow, anchor: Option<&str>) -> String {
    let name = format!("{}/{}", escape(&row.service), escape(&row.bucket));
    let bucket = match anchor {
        Some(a) => format!("[{}](#{a})", name.replace('[', "\\[").replace(']', "\\]")),
        None => name,
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
        bucket,
        opt_rate(row.old),
        opt_rate(row.new),
        change(row.old, row.new),
        escape(&row.policy),
        opt_rate(row.observed_peak),
        coverage(row.coverage),
        if row.notes.is_empty() {
            NONE.to_string()
        } else {
            escape(&row.notes)
        },
    )
}

/// Which explanations fit beside `used` bytes of the rest: their anchors by bucket (only
/// buckets with a row), their sections, and how many were left out. Sections are taken in
/// bucket order, each while it fits with the link it adds to its row.
fn fit_explanations<'a>(
    sorted: &[&'a PrRow],
    explanations: &[Explanation],
    used: usize,
) -> (BTreeMap<(&'a str, &'a str), String>, String, usize) {
    let by_name: BTreeMap<(&str, &str), &Explanation> = explanations
        .iter()
        .map(|e| ((e.service.as_str(), e.bucket.as_str()), e))
        .collect();
    let mut anchors = BTreeMap::new();
    let mut taken = HashSet::new();
    let mut sections = String::new();
    let mut left_out = 0;
    let mut budget = MAX_BODY.saturating_sub(used + WHY.len() + NOTE_ROOM);
    for row in sorted {
        let key = (row.service.as_str(), row.bucket.as_str());
        let Some(explanation) = by_name.get(&key) else {
            continue;
        };
        let base = anchor(&row.service, &row.bucket);
        let mut name = base.clone();
        let mut n = 1;
        while taken.contains(&name) {
            n += 1;
            name = format!("{base}-{n}");
        }
        let section = explanation.to_markdown(&name);
        // The row's link: `[` … `](#name)`, and the brackets escaped in the name.
        let link = name.len() + 5 + row.service.len() + row.bucket.len();
        let cost = section.len() + 1 + link;
        if cost > budget {
            left_out += 1;
            continue;
        }
        budget -= cost;
        if !sections.is_empty() {
            sections.push('\n');
        }
        sections.push_str(&section);
        taken.insert(name.clone());
        anchors.insert(key, name);
    }
    (anchors, sections, left_out)
}

/// The one-line summary: how many buckets, and how they changed.
fn summary(run_id: &str, rows: &[&PrRow]) -> String {
    let (mut changed, mut added, mut removed, mut unchanged) = (0, 0, 0, 0);
    for row in rows {
        match (row.old, row.new) {
            (None, Some(_)) => added += 1,
            (Some(_), None) => removed += 1,
            (Some(o), Some(n)) if fmt_rate(o) != fmt_rate(n) => changed += 1,
            _ => unchanged += 1,
        }
    }
    let noun = if rows.len() == 1 { "bucket" } else { "buckets" };
    format!(
        "RLC run `{run_id}`: {} {noun}: {changed} changed, {added} new, {removed} removed, \
         {unchanged} unchanged.",
        rows.len()
    )
}

/// Formats a rate with at most one decimal and no thousands separator: `1200`, `12.5`.
fn fmt_rate(v: f64) -> String {
    if !v.is_finite() {
        return NONE.to_string();
    }
    let tenths = (v * 10.0).round();
    let s = if tenths % 10.0 == 0.0 {
        format!("{:.0}", tenths / 10.0)
    } else {
        format!("{:.1}", tenths / 10.0)
    };
    if s == "-0" { "0".to_string() } else { s }
}

fn opt_rate(v: Option<f64>) -> String {
    v.map_or_else(|| NONE.to_string(), fmt_rate)
}

/// Signed percent change `+25.0%`; `new` for a new limit, `removed` for a dropped one.
fn change(old: Option<f64>, new: Option<f64>) -> String {
    match (old, new) {
        (None, Some(_)) => "new".to_string(),
        (Some(_), None) => "removed".to_string(),
        (Some(o), Some(n)) if o != 0.0 && o.is_finite() && n.is_finite() => {
            let pct = (n - o) / o * 100.0;
            let pct = if pct.abs() < 0.05 { 0.0 } else { pct };
            format!("{}{pct:.1}%", if pct >= 0.0 { "+" } else { "" })
        }
        _ => NONE.to_string(),
    }
}

/// Coverage as a percentage of the window with at most one decimal: `97.5%`.
fn coverage(v: Option<f64>) -> String {
    v.map_or_else(|| NONE.to_string(), |c| format!("{}%", fmt_rate(c * 100.0)))
}

/// Makes text safe inside a table cell: pipes escaped, line breaks flattened.
fn escape(text: &str) -> String {
    text.replace('|', "\\|")
        .replace("\r\n", " ")
        .replace(['\n', '\r'], " ")
}

pub mod terminal;

#[cfg(test)]
mod tests;
