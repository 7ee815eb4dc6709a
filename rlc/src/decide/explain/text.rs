//! An explanation as plain text for a terminal: the headline, then one labelled fact a
//! line (continuation lines indented), `auto`'s candidates as an aligned table.

use super::Explanation;
use super::facts::{CANDIDATE_COLUMNS, candidate_rows};

/// Width of the label column.
const LABEL: usize = 15;

impl Explanation {
    /// The explanation for a terminal.
    pub fn to_text(&self) -> String {
        let mut out = format!("{}\n", self.headline());
        for fact in self.facts() {
            for (i, line) in fact.lines.iter().enumerate() {
                let label = if i == 0 { fact.label } else { "" };
                out.push_str(&format!("  {label:<LABEL$}{line}\n"));
            }
            if fact.label == "Auto"
                && let Some(auto) = &self.auto
                && !auto.candidates.is_empty()
            {
                out.push_str(&table(&candidate_rows(auto)));
            }
        }
        out
    }
}

/// The candidates table, columns aligned, indented under the facts.
fn table(rows: &[[String; 6]]) -> String {
    let mut widths = CANDIDATE_COLUMNS.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = " ".repeat(2 + LABEL);
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            let pad = w.saturating_sub(cell.chars().count());
            if i == 0 || i == cells.len() - 1 {
                s.push_str(cell);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            }
            s.push_str("  ");
        }
        format!("{}\n", s.trim_end())
    };
    let mut out = line(&CANDIDATE_COLUMNS.map(String::from));
    for row in rows {
        out.push_str(&line(row));
    }
    out
}
