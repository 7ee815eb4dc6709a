//! Markdown body of the pull request (or commit description) that carries a run's limits.
//!
//! [`render`] is pure and deterministic: rows are sorted by `service/bucket`, numbers are
//! formatted without locale (no thousands separators, at most one decimal), and a cell with no
//! value shows `—`. The output is what a reviewer reads, so tests pin it exactly.

use std::fmt::Write as _;

/// Placeholder for a cell that has no value.
const NONE: &str = "—";

/// One bucket's line in the pull-request table.
#[derive(Debug, Clone, PartialEq)]
pub struct PrRow {
    /// Service the bucket belongs to (the `limits/<service>.yaml` file).
    pub service: String,
    /// Bucket name inside the service.
    pub bucket: String,
    /// Limit in force before this run (requests per second), if any.
    pub old: Option<f64>,
    /// Limit proposed by this run (requests per second); `None` when the bucket is removed.
    pub new: Option<f64>,
    /// Name of the policy that computed the limit.
    pub policy: String,
    /// Highest offered rate seen in the history window (requests per second).
    pub observed_peak: Option<f64>,
    /// Fraction (0..=1) of the history window that had samples.
    pub coverage: Option<f64>,
    /// Free text for the reviewer (guard decisions, warnings). Pipes are escaped.
    pub notes: String,
}

/// Renders the Markdown description of run `run_id`.
///
/// The document is a heading, a summary line, the table
/// `| bucket | old | new | change | policy | observed peak | coverage | notes |` and then each
/// of `extra_sections` as a `###` heading followed by its Markdown body, in the order given.
pub fn render(run_id: &str, rows: &[PrRow], extra_sections: &[(String, String)]) -> String {
    let mut sorted: Vec<&PrRow> = rows.iter().collect();
    sorted.sort_by(|a, b| (&a.service, &a.bucket).cmp(&(&b.service, &b.bucket)));

    let mut out = String::new();
    out.push_str("## Rate limit changes\n\n");
    out.push_str(&summary(run_id, &sorted));
    out.push_str("\n\n");
    if !sorted.is_empty() {
        out.push_str(
            "| bucket | old | new | change | policy | observed peak | coverage | notes |\n",
        );
        out.push_str("|---|---:|---:|---:|---|---:|---:|---|\n");
        for row in &sorted {
            let _ = writeln!(
                out,
                "| {}/{} | {} | {} | {} | {} | {} | {} | {} |",
                escape(&row.service),
                escape(&row.bucket),
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
            );
        }
    }
    for (heading, body) in extra_sections {
        let _ = write!(out, "\n### {}\n\n{}\n", heading.trim(), body.trim_end());
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(service: &str, bucket: &str, old: Option<f64>, new: Option<f64>) -> PrRow {
        PrRow {
            service: service.into(),
            bucket: bucket.into(),
            old,
            new,
            policy: "peak-buffer".into(),
            observed_peak: Some(812.345),
            coverage: Some(0.9876),
            notes: String::new(),
        }
    }

    #[test]
    fn renders_sorted_table_with_exact_formatting() {
        let mut notes = row("checkout", "pay|ment", Some(1000.0), Some(1250.0));
        notes.notes = "guard: step | capped\nsee run".into();
        let rows = vec![
            row("search", "query", Some(2000.0), Some(1500.56)),
            notes,
            row("checkout", "cart", None, Some(40.0)),
            PrRow {
                observed_peak: None,
                coverage: None,
                ..row("auth", "login", Some(7.25), None)
            },
            row("auth", "token", Some(12000.0), Some(12000.0)),
        ];
        let extra = vec![(
            "Guards".to_string(),
            "- step guard capped 1 bucket\n".to_string(),
        )];
        let got = render("20261129T201500Z-ab12", &rows, &extra);
        let want = "\
## Rate limit changes

RLC run `20261129T201500Z-ab12`: 5 buckets: 2 changed, 1 new, 1 removed, 1 unchanged.

| bucket | old | new | change | policy | observed peak | coverage | notes |
|---|---:|---:|---:|---|---:|---:|---|
| auth/login | 7.3 | — | removed | peak-buffer | — | — | — |
| auth/token | 12000 | 12000 | +0.0% | peak-buffer | 812.3 | 98.8% | — |
| checkout/cart | — | 40 | new | peak-buffer | 812.3 | 98.8% | — |
| checkout/pay\\|ment | 1000 | 1250 | +25.0% | peak-buffer | 812.3 | 98.8% | guard: step \\| capped see run |
| search/query | 2000 | 1500.6 | -25.0% | peak-buffer | 812.3 | 98.8% | — |

### Guards

- step guard capped 1 bucket
";
        assert_eq!(got, want);
    }

    #[test]
    fn empty_run_has_summary_and_no_table() {
        let got = render("r1", &[], &[]);
        assert_eq!(
            got,
            "## Rate limit changes\n\nRLC run `r1`: 0 buckets: 0 changed, 0 new, 0 removed, 0 unchanged.\n\n"
        );
    }

    #[test]
    fn number_formatting_is_deterministic() {
        assert_eq!(fmt_rate(1234567.0), "1234567");
        assert_eq!(fmt_rate(0.04), "0");
        assert_eq!(fmt_rate(-0.01), "0");
        assert_eq!(fmt_rate(2.45), "2.5");
        assert_eq!(fmt_rate(f64::NAN), "—");
        assert_eq!(change(Some(100.0), Some(90.0)), "-10.0%");
        assert_eq!(change(Some(0.0), Some(5.0)), "—");
        assert_eq!(change(None, None), "—");
        assert_eq!(coverage(Some(1.0)), "100%");
    }
}
