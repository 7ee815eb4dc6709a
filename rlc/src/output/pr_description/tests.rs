//! The pull-request description pinned: exact formatting, links to explanations, and the
//! bounds that keep it within GitHub's limit at fleet size.

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

#[test]
fn a_fleet_sized_table_keeps_the_changes_that_matter_most_within_githubs_limit() {
    // 1,100 services x 20 buckets: 200 changed (the larger the index, the larger the
    // change), 10 new, 10 removed, the rest unchanged.
    let mut rows = Vec::new();
    for s in 0..1100 {
        for b in 0..20 {
            let (svc, bucket) = (format!("service-{s:04}"), format!("bucket-{b:02}"));
            let i = s * 20 + b;
            let (old, new) = match i {
                i if i % 110 == 0 => (Some(100.0), Some(200.0 + i as f64)),
                i if i % 2201 == 1 => (None, Some(50.0)),
                i if i % 2201 == 2 => (Some(50.0), None),
                _ => (Some(100.0), Some(100.0)),
            };
            rows.push(row(&svc, &bucket, old, new));
        }
    }
    let got = render("r1", &rows, &[("Shadow".into(), "y\n".into())], &[]);
    assert!(got.len() <= MAX_BODY, "{} bytes", got.len());
    assert!(got.contains("RLC run `r1`: 22000 buckets: 200 changed, 10 new, 10 removed"));
    let shown: Vec<&str> = got
        .lines()
        .filter(|l| l.starts_with("| service-"))
        .collect();
    let left_out = rows.len() - shown.len();
    assert!(left_out > 0);
    assert!(
        got.contains(&format!(
            "\n{left_out} more rows (0 of them new, removed or changed) left out to keep \
             this description within GitHub's 65536 characters; the diff of `limits/` \
             shows every change.\n"
        )),
        "every change is shown; only unchanged rows are left out"
    );
    let names: Vec<&str> = shown
        .iter()
        .map(|l| l.split(" | ").next().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "the rows shown stay in name order");
    assert!(
        got.ends_with("### Shadow\n\ny\n"),
        "the other sections stay"
    );

    // With more changes than fit, the largest changes are the ones shown.
    let many: Vec<PrRow> = (0..5000)
        .map(|i| {
            row(
                "svc",
                &format!("b{i:05}"),
                Some(100.0),
                Some(101.0 + i as f64),
            )
        })
        .collect();
    let got = render("r2", &many, &[], &[]);
    assert!(got.len() <= MAX_BODY, "{} bytes", got.len());
    let shown: Vec<usize> = got
        .lines()
        .filter_map(|l| l.strip_prefix("| svc/b"))
        .map(|l| l[..5].parse().unwrap())
        .collect();
    assert!(!shown.is_empty() && shown.len() < many.len());
    let smallest = *shown.iter().min().unwrap();
    assert_eq!(
        shown.len(),
        many.len() - smallest,
        "every change at least as large as the smallest shown is shown"
    );
    assert!(got.contains(&format!(
        "{smallest} more rows ({smallest} of them new, removed or changed) left out"
    )));
}

#[test]
fn long_extra_sections_are_clipped_at_a_line() {
    let long: String = (0..20_000).map(|i| format!("- line {i}\n")).collect();
    let rows = vec![row("search", "query", Some(2000.0), Some(1500.0))];
    let got = render(
        "r1",
        &rows,
        &[
            ("Shortfall".into(), long.clone()),
            ("Shadow".into(), "y\n".into()),
        ],
        &[],
    );
    assert!(got.len() <= MAX_BODY, "{} bytes", got.len());
    assert!(got.contains("| search/query | 2000 | 1500 |"));
    let kept = got.lines().filter(|l| l.starts_with("- line ")).count();
    assert!(kept > 100 && kept < 20_000, "{kept}");
    assert!(got.contains(&format!(
        "… {} more lines left out to keep this description within GitHub's 65536 characters.",
        20_000 - kept
    )));
    assert!(got.ends_with("### Shadow\n\ny\n"));
}
