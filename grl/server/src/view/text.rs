//! The views as text for a terminal: `grl status`'s tables, `grl top`'s screen and
//! `grl explain`'s answer. Columns are sized to their content; rates are shortened
//! (`1.2k`, `3.40M`) where the JSON keeps the numbers whole.

use std::fmt::Write as _;

use super::{BucketView, ExplainView, StatusView};

/// A rate for a table: one decimal under 100, then `k` and `M`.
pub fn rate(x: f64) -> String {
    match x.abs() {
        a if a < 100.0 => format!("{x:.1}"),
        a if a < 10_000.0 => format!("{x:.0}"),
        a if a < 1e6 => format!("{:.1}k", x / 1e3),
        _ => format!("{:.2}M", x / 1e6),
    }
}

/// Rows of cells as aligned columns (the first row is the header), numbers right-aligned.
pub fn columns(rows: &[Vec<String>], right: &[bool]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            let w = widths[i];
            if right.get(i).copied().unwrap_or(false) {
                let _ = write!(line, "{c:>w$}  ");
            } else {
                let _ = write!(line, "{c:<w$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The first line: version, level and role, zones.
pub fn headline(v: &StatusView) -> String {
    let role = match (v.leading, &v.leader) {
        _ if v.level == "zone" => String::new(),
        (true, _) => "leading".to_string(),
        (false, Some(l)) => format!("standby (leader {l})"),
        (false, None) => "standby (leader unknown)".to_string(),
    };
    let place = match v.level {
        "zone" => format!("aggregator of zone {} ({})", v.zone, v.region),
        "region" => format!("controller of region {}", v.region),
        // A region's controller without a global parent is the top tier, but it still
        // speaks for its region only.
        "global" if !v.region.is_empty() => {
            format!("controller of region {} (no global parent)", v.region)
        }
        other => format!("{other} controller"),
    };
    let fresh = v.zones.iter().filter(|z| z.stale < z.children).count();
    let oldest = v
        .zones
        .iter()
        .map(|z| z.seconds_since_report)
        .fold(0.0, f64::max);
    let mut line = format!(
        "config {}  {place}{}{role}  zones {fresh}/{} reporting (oldest {oldest:.1} s)",
        if v.config_version.is_empty() {
            "(none)"
        } else {
            &v.config_version
        },
        if role.is_empty() { "" } else { "  " },
        v.zones.len()
    );
    if v.learning {
        line.push_str("  LEARNING");
    }
    if v.fail_open {
        line.push_str("  FAIL-OPEN (parent gone)");
    }
    line
}

fn bucket_row(b: &BucketView) -> Vec<String> {
    let top = b
        .top_zones
        .iter()
        .take(3)
        .map(|z| format!("{} {}", z.zone, rate(z.offered_rps)))
        .collect::<Vec<_>>()
        .join(", ");
    let state = if b.dropping() {
        "DROPPING"
    } else if b.shadow_dropping() {
        "shadow-dropping"
    } else {
        ""
    };
    vec![
        b.service.clone(),
        format!(
            "{}{}",
            b.bucket,
            if b.is_override { " (override)" } else { "" }
        ),
        b.mode.into(),
        b.scope.into(),
        b.limit_rps.map_or_else(|| "-".into(), rate),
        rate(b.offered_rps),
        rate(b.admitted_rps),
        rate(b.dropped_rps),
        rate(b.shadow_dropped_rps),
        format!("{:.3}", b.drop_ratio),
        state.into(),
        top,
    ]
}

const HEADER: [&str; 12] = [
    "SERVICE",
    "BUCKET",
    "MODE",
    "SCOPE",
    "LIMIT",
    "OFFERED",
    "ADMITTED",
    "DROPPED",
    "SHADOW",
    "RATIO",
    "STATE",
    "TOP ZONES",
];
const RIGHT: [bool; 12] = [
    false, false, false, false, true, true, true, true, true, true, false, false,
];

fn header() -> Vec<String> {
    HEADER.iter().map(ToString::to_string).collect()
}

/// A bucket's next scheduled limit: `3750 from 2026-12-31T22:00:00Z`.
pub fn next_limit(b: &BucketView) -> String {
    let Some(at) = b.next_change_unix else {
        return String::new();
    };
    let when = chrono::DateTime::from_timestamp(at, 0).map_or_else(
        || at.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    );
    let limit = b.next_limit_rps.map_or_else(|| "none".into(), rate);
    format!("{limit} from {when}")
}

/// `grl status`: the headline, zones, every bucket and the overrides.
pub fn status(v: &StatusView) -> String {
    let mut out = headline(v);
    out.push_str("\n\n");
    let mut zones = vec![vec![
        "ZONE".to_string(),
        "AGE".into(),
        "CHILDREN".into(),
        "STALE".into(),
    ]];
    for z in &v.zones {
        zones.push(vec![
            z.zone.clone(),
            format!("{:.1} s", z.seconds_since_report),
            z.children.to_string(),
            z.stale.to_string(),
        ]);
    }
    out.push_str(&columns(&zones, &[false, true, true, true]));
    out.push('\n');
    let mut rows = vec![header()];
    rows.extend(v.buckets.iter().map(bucket_row));
    if v.buckets.iter().any(|b| b.next_change_unix.is_some()) {
        rows[0].push("NEXT LIMIT".into());
        for (row, b) in rows[1..].iter_mut().zip(&v.buckets) {
            row.push(next_limit(b));
        }
    }
    out.push_str(&columns(&rows, &RIGHT));
    if !v.overrides.is_empty() {
        out.push_str("\nOVERRIDES\n");
        let mut rows = vec![
            [
                "ID",
                "SERVICE",
                "CALLER",
                "PROCEDURE",
                "RPS",
                "EXPIRES",
                "WHO",
                "REASON",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for o in &v.overrides {
            let expires = chrono::DateTime::from_timestamp(o.expires_at_unix as i64, 0)
                .map_or_else(|| o.expires_at_unix.to_string(), |t| t.to_rfc3339());
            rows.push(vec![
                o.id.clone(),
                o.service.clone(),
                o.caller.clone(),
                o.procedure.clone(),
                rate(o.rps),
                expires,
                o.who.clone(),
                o.reason.clone(),
            ]);
        }
        out.push_str(&columns(&rows, &[false, false, false, false, true]));
    }
    out
}

/// `grl top`'s screen for a terminal of `rows` lines: the headline, then the buckets that
/// are dropping or shadow-dropping, by dropped rate (then shadow-dropped, then offered),
/// as many as fit, and how many others are under their limits.
pub fn top(v: &StatusView, rows: usize) -> String {
    let mut hot: Vec<&BucketView> = v
        .buckets
        .iter()
        .filter(|b| b.dropping() || b.shadow_dropping())
        .collect();
    hot.sort_by(|a, b| {
        b.dropped_rps
            .total_cmp(&a.dropped_rps)
            .then(b.shadow_dropped_rps.total_cmp(&a.shadow_dropped_rps))
            .then(b.offered_rps.total_cmp(&a.offered_rps))
    });
    let fit = rows.saturating_sub(5).max(1);
    let mut table = vec![header()];
    table.extend(hot.iter().take(fit).map(|b| bucket_row(b)));
    let mut out = headline(v);
    out.push_str("\n\n");
    out.push_str(&columns(&table, &RIGHT));
    let hidden = hot.len().saturating_sub(fit);
    let calm = v.buckets.len() - hot.len();
    let _ = write!(
        out,
        "\n{} dropping or shadow-dropping{}, {calm} under their limits. q: quit",
        hot.len(),
        if hidden > 0 {
            format!(" ({hidden} not shown)")
        } else {
            String::new()
        }
    );
    out
}

/// `grl explain`: the winner, its state, and every rule considered.
pub fn explain(v: &ExplainView) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} calling {} {} (config {})",
        if v.caller.is_empty() {
            "(no caller)"
        } else {
            &v.caller
        },
        v.service,
        v.procedure,
        v.config_version
    );
    match &v.state {
        None => out.push_str("falls in no bucket: never limited\n"),
        Some(b) => {
            let _ = writeln!(
                out,
                "bucket {}/{}: {} mode, {} scope, limit {}, offered {}, drop ratio {:.3}{}",
                b.service,
                b.bucket,
                b.mode,
                b.scope,
                b.limit_rps.map_or_else(|| "none".into(), rate),
                rate(b.offered_rps),
                b.drop_ratio,
                if v.shadow {
                    " (shadow: counted, never refused)"
                } else {
                    ""
                }
            );
        }
    }
    if let Some(b) = &v.in_addition {
        let _ = writeln!(
            out,
            "also decided by {}/{}: {} mode, limit {}, drop ratio {:.3}",
            b.service,
            b.bucket,
            b.mode,
            b.limit_rps.map_or_else(|| "none".into(), rate),
            b.drop_ratio
        );
    }
    out.push('\n');
    let mut rows = vec![
        ["BUCKET", "RULE", "MATCHED", "ROLE", "WHY"]
            .map(String::from)
            .to_vec(),
    ];
    for c in &v.considered {
        rows.push(vec![
            c.bucket.clone(),
            c.rule.clone(),
            if c.matched { "yes" } else { "no" }.into(),
            c.role.clone(),
            c.reason.clone(),
        ]);
    }
    out.push_str(&columns(&rows, &[]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_short_and_keep_their_magnitude() {
        assert_eq!(rate(0.25), "0.2");
        assert_eq!(rate(99.94), "99.9");
        assert_eq!(rate(2500.0), "2500");
        assert_eq!(rate(22_000.0), "22.0k");
        assert_eq!(rate(80e6), "80.00M");
    }

    #[test]
    fn a_region_controller_without_a_parent_is_named_by_its_region() {
        let st = grl_core::proto::StatusResponse {
            level: grl_core::proto::Level::Global as i32,
            region: "r1".into(),
            leading: true,
            ..Default::default()
        };
        let line = headline(&StatusView::from(&st));
        assert!(line.contains("controller of region r1"), "{line}");
        assert!(!line.contains("global controller"), "{line}");
        let st = grl_core::proto::StatusResponse {
            level: grl_core::proto::Level::Global as i32,
            leading: true,
            ..Default::default()
        };
        assert!(headline(&StatusView::from(&st)).contains("global controller"));
    }

    #[test]
    fn columns_line_up() {
        let t = columns(
            &[
                vec!["A".into(), "N".into()],
                vec!["long".into(), "1.5".into()],
            ],
            &[false, true],
        );
        assert_eq!(t, "A       N\nlong  1.5\n");
    }
}
