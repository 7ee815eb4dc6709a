//! Markdown body of the pull request (or commit description) that carries a run's limits.
//!
//! [`render`] is pure and deterministic: rows are sorted by `service/bucket`, numbers are
//! formatted without locale (no thousands separators, at most one decimal), and a cell with no
//! value shows `—`. The output is what a reviewer reads, so tests pin it exactly.
//!
//! Each bucket given an [`Explanation`] gets a collapsible section below the table, and its
//! row links to it. The sections share what [`MAX_BODY`] leaves after the table and the
//! other sections; those that do not fit are left out, and the description says how many.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use crate::explain::{Explanation, anchor};

/// Placeholder for a cell that has no value.
const NONE: &str = "—";

/// GitHub's limit on a pull request's body (characters); the explanations stay within it
/// (bytes are counted, which is never fewer).
pub const MAX_BODY: usize = 65_536;

/// Room kept for the note that says how many explanations were left out.
const NOTE_ROOM: usize = 300;

/// The heading of the explanations.
const WHY: &str = "\n### Why these limits\n\n";

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
    let mut extras = String::new();
    for (heading, body) in extra_sections {
        let _ = write!(extras, "\n### {}\n\n{}\n", heading.trim(), body.trim_end());
    }
    let unlinked = table(run_id, &sorted, &BTreeMap::new()).len() + extras.len();
    let (anchors, sections, left_out) = fit_explanations(&sorted, explanations, unlinked);

    let mut out = table(run_id, &sorted, &anchors);
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

/// The heading, summary and table; a row whose `service/bucket` is in `anchors` links to it.
fn table(run_id: &str, sorted: &[&PrRow], anchors: &BTreeMap<(&str, &str), String>) -> String {
    let mut out = String::new();
    out.push_str("## Rate limit changes\n\n");
    out.push_str(&summary(run_id, sorted));
    out.push_str("\n\n");
    if !sorted.is_empty() {
        out.push_str(
            "| bucket | old | new | change | policy | observed peak | coverage | notes |\n",
        );
        out.push_str("|---|---:|---:|---:|---|---:|---:|---|\n");
        for row in sorted {
            let name = format!("{}/{}", escape(&row.service), escape(&row.bucket));
            let bucket = match anchors.get(&(row.service.as_str(), row.bucket.as_str())) {
                Some(a) => format!("[{}](#{a})", name.replace('[', "\\[").replace(']', "\\]")),
                None => name,
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
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
            );
        }
    }
    out
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
        let got = render("20261129T201500Z-ab12", &rows, &extra, &[]);
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
        let got = render("r1", &[], &[], &[]);
        assert_eq!(
            got,
            "## Rate limit changes\n\nRLC run `r1`: 0 buckets: 0 changed, 0 new, 0 removed, 0 unchanged.\n\n"
        );
    }

    /// A fixed bucket's explanation (its limit `rps`).
    fn explained(service: &str, bucket: &str, rps: f64) -> Explanation {
        let text = format!(
            "service: {service}\nbuckets:\n  - name: {bucket}\n    match: {{ caller: c }}\n    \
             scope: global\n    mode: deny\n    policy: {{ kind: fixed, rps: {rps} }}\n"
        );
        let file = format!("services/{service}.yaml");
        let snap = grl_config::from_files("v", [(file, text)]).unwrap();
        let b = &snap.service(service).unwrap().buckets[0];
        Explanation::fixed(service, b, "c0ffee", 1_800_000_000)
    }

    /// The anchors the table links to, and the anchors of the sections, in order.
    fn links_and_sections(body: &str) -> (Vec<String>, Vec<String>) {
        let links = body
            .split("](#")
            .skip(1)
            .map(|s| s[..s.find(')').unwrap()].to_string())
            .collect();
        let sections = body
            .split("<a name=\"")
            .skip(1)
            .map(|s| s[..s.find('"').unwrap()].to_string())
            .collect();
        (links, sections)
    }

    #[test]
    fn explained_rows_link_to_their_sections_below_the_table() {
        let rows = vec![
            row("search", "query", Some(2000.0), Some(1500.0)),
            row("checkout", "cart", None, Some(40.0)),
            row("auth", "token", Some(12000.0), Some(12000.0)),
        ];
        let explanations = vec![
            explained("search", "query", 1500.0),
            explained("checkout", "cart", 40.0),
        ];
        let got = render(
            "r1",
            &rows,
            &[("Shadow".into(), "x\n".into())],
            &explanations,
        );
        assert!(
            got.contains("| [checkout/cart](#explain-checkout-cart) | — | 40 | new |"),
            "{got}"
        );
        assert!(
            got.contains("| [search/query](#explain-search-query) | 2000 | 1500 |"),
            "{got}"
        );
        assert!(
            got.contains("| auth/token | 12000 |"),
            "not explained, not linked: {got}"
        );
        let (links, sections) = links_and_sections(&got);
        assert_eq!(links, ["explain-checkout-cart", "explain-search-query"]);
        assert_eq!(
            links, sections,
            "each link has its section, in the table's order"
        );
        let table_end = got
            .find("\n\n### Why these limits\n\n")
            .expect("the heading");
        assert!(got.find("<details>").unwrap() > table_end, "{got}");
        assert!(
            got.contains("<details><summary><b>checkout/cart: 40 rps (fixed)</b></summary>"),
            "{got}"
        );
        assert!(
            got.find("### Shadow").unwrap() > got.rfind("</details>").unwrap(),
            "the other sections follow: {got}"
        );
        assert!(!got.contains("left out"), "{got}");
    }

    #[test]
    fn buckets_whose_names_make_the_same_anchor_get_their_own() {
        let rows = vec![
            row("a.b", "x", None, Some(1.0)),
            row("a-b", "x", None, Some(2.0)),
        ];
        let explanations = vec![explained("a.b", "x", 1.0), explained("a-b", "x", 2.0)];
        let got = render("r1", &rows, &[], &explanations);
        let (links, sections) = links_and_sections(&got);
        assert_eq!(links, ["explain-a-b-x", "explain-a-b-x-2"]);
        assert_eq!(links, sections);
        assert!(got.contains("[a-b/x](#explain-a-b-x)"), "{got}");
    }

    #[test]
    fn explanations_that_do_not_fit_githubs_limit_are_left_out_and_counted() {
        let n = 400;
        let mut rows = Vec::new();
        let mut explanations = Vec::new();
        for i in 0..n {
            let bucket = format!("bucket-{i:03}");
            let mut r = row("payments", &bucket, Some(100.0), Some(200.0));
            r.notes = "max-increase: proposed 250 is more than 100% above 100".into();
            rows.push(r);
            let mut e = explained("payments", &bucket, 200.0);
            e.refusal = Some("a long reason ".repeat(20));
            explanations.push(e);
        }
        let got = render(
            "r1",
            &rows,
            &[("Shadow".into(), "y\n".into())],
            &explanations,
        );
        assert!(
            got.chars().count() <= MAX_BODY,
            "{} characters",
            got.chars().count()
        );
        let (links, sections) = links_and_sections(&got);
        assert_eq!(links, sections);
        assert!(
            !sections.is_empty() && sections.len() < n,
            "{}",
            sections.len()
        );
        let left_out = n - sections.len();
        assert!(
            got.contains(&format!(
                "\n{left_out} more explanations left out to keep this description within \
                 GitHub's 65536 characters; `rlc explain SERVICE BUCKET` prints any of them.\n"
            )),
            "{}",
            &got[got.len() - 400..]
        );
        assert!(
            got.ends_with("### Shadow\n\ny\n"),
            "the other sections stay"
        );
        assert_eq!(
            got.matches("| payments/bucket-").count(),
            left_out,
            "rows kept unlinked"
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
