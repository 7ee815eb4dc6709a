//! The controller's read-only `/status` page: the bucket table of `grl status` with a
//! sparkline of each bucket's offered load over the last minutes against its limit, as one
//! self-contained HTML document (inline style, script and SVG: no external asset, works
//! offline). The page refreshes itself every interval by fetching itself again and
//! swapping its `<main>` (scroll position kept); without script, a meta refresh does it.
//! It has no form and no write action.

use std::fmt::Write as _;

use super::history::History;
use super::text::{headline, rate};
use super::{BucketView, StatusView};

/// Escapes text for HTML content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const WIDTH: f32 = 160.0;
const HEIGHT: f32 = 28.0;
/// The scale reaches at most this multiple of the limit: a spike far over it is clipped at
/// the top (and its peak written) rather than flattening the limit line onto the baseline.
const MAX_OVER_LIMIT: f32 = 3.0;

/// The top of a sparkline's scale, and whether samples above it were clipped.
fn scale(samples: &[f32], limit: Option<f64>) -> (f32, bool) {
    let peak = samples.iter().copied().fold(0.0, f32::max);
    match limit.map(|l| l as f32).filter(|l| *l > 0.0) {
        Some(l) => {
            let top = peak.clamp(l * 1.25, l * MAX_OVER_LIMIT);
            (top, peak > top)
        }
        None => (peak.max(1.0) * 1.1, false),
    }
}

/// An inline SVG of `samples` (oldest first) with a dashed line at `limit`, on one scale
/// from 0 to the value written at its top right (`peak` written too when clipped).
fn sparkline(samples: &[f32], limit: Option<f64>) -> String {
    let (top, clipped) = scale(samples, limit);
    let y = |v: f32| HEIGHT - 1.0 - (v.min(top) / top) * (HEIGHT - 2.0);
    let step = WIDTH / (samples.len().max(2) - 1) as f32;
    let points = samples
        .iter()
        .enumerate()
        .map(|(i, v)| format!("{:.1},{:.1}", i as f32 * step, y(*v)))
        .collect::<Vec<_>>()
        .join(" ");
    let peak = samples.iter().copied().fold(0.0, f32::max);
    let mut svg = format!(
        "<svg class=\"spark\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\">\
         <title>0 to {} rps{}</title>",
        rate(f64::from(top)),
        if clipped {
            format!(", peak {} rps clipped", rate(f64::from(peak)))
        } else {
            String::new()
        }
    );
    if let Some(l) = limit {
        let ly = y(l as f32);
        let _ = write!(
            svg,
            "<line class=\"limit\" x1=\"0\" x2=\"{WIDTH}\" y1=\"{ly:.1}\" y2=\"{ly:.1}\"/>"
        );
    }
    let _ = write!(
        svg,
        "<polyline class=\"offered\" points=\"{points}\"/>\
         <text class=\"scale\" x=\"{}\" y=\"7\" text-anchor=\"end\">{}{}</text></svg>",
        WIDTH - 1.0,
        if clipped { "peak " } else { "" },
        rate(f64::from(if clipped { peak } else { top })),
    );
    svg
}

fn row(b: &BucketView, history: &History) -> String {
    let class = if b.dropping() {
        "dropping"
    } else if b.shadow_dropping() {
        "shadow-dropping"
    } else {
        "ok"
    };
    let samples: Vec<f32> = history
        .of(&b.service, &b.bucket)
        .map(|s| s.iter().copied().collect())
        .unwrap_or_default();
    let zones = b
        .top_zones
        .iter()
        .map(|z| format!("{} {}", esc(&z.zone), rate(z.offered_rps)))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "<tr class=\"{class}\" data-bucket=\"{}/{}\"><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{:.3}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        esc(&b.service),
        esc(&b.bucket),
        esc(&b.service),
        esc(&b.bucket),
        if b.is_override {
            " <em>(override)</em>"
        } else {
            ""
        },
        b.mode,
        b.scope,
        b.limit_rps.map_or_else(|| "-".into(), rate),
        rate(b.offered_rps),
        rate(b.admitted_rps),
        rate(b.dropped_rps),
        rate(b.shadow_dropped_rps),
        b.drop_ratio,
        sparkline(&samples, b.limit_rps),
        zones,
        esc(&super::text::next_limit(b)),
    )
}

const STYLE: &str = "body{font:13px/1.4 system-ui,sans-serif;margin:1em;color:#222}\
table{border-collapse:collapse}th,td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left}\
td.n{text-align:right;font-variant-numeric:tabular-nums}\
tr.dropping{background:#fdd}tr.dropping td:first-child{border-left:4px solid #c00}\
tr.shadow-dropping{background:#ffe9c7}\
.spark polyline{fill:none;stroke:#2563eb;stroke-width:1.5}.spark line{stroke:#c00;stroke-dasharray:3 2}\
.spark text{font-size:8px;fill:#666}\
header{font-weight:600;margin-bottom:.5em}.meta{color:#666}";

/// The whole page: `v` with `history`'s sparklines, refreshing every `refresh_ms`.
pub fn render(v: &StatusView, history: &History, refresh_ms: u64, generated: &str) -> String {
    let mut html = String::with_capacity(1024 + v.buckets.len() * 700);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>GRL status</title><noscript><meta http-equiv=\"refresh\" content=\"{}\"></noscript>\
         <style>{STYLE}</style></head>\n<body data-refreshes=\"0\">\n<main>\n<header>{}</header>\n\
         <p class=\"meta\">{} buckets, {} dropping, {} shadow-dropping. Load over the last {} s \
         (blue) against the limit (red), from 0 to the rate at each line's top right (a spike \
         over 3× the limit is clipped and its peak written). Generated {}.</p>\n",
        refresh_ms.div_ceil(1000).max(1),
        esc(&headline(v)),
        v.buckets.len(),
        v.buckets.iter().filter(|b| b.dropping()).count(),
        v.buckets.iter().filter(|b| b.shadow_dropping()).count(),
        history.span().as_secs(),
        esc(generated),
    );
    html.push_str(
        "<table id=\"buckets\"><thead><tr><th>Service</th><th>Bucket</th><th>Mode</th>\
         <th>Scope</th><th>Limit</th><th>Offered</th><th>Admitted</th><th>Dropped</th>\
         <th>Shadow</th><th>Ratio</th><th>Offered vs limit</th><th>Top zones</th><th>Next limit</th></tr></thead>\n<tbody>\n",
    );
    for b in &v.buckets {
        html.push_str(&row(b, history));
    }
    html.push_str("</tbody></table>\n");
    if !v.zones.is_empty() {
        html.push_str("<h3>Zones</h3><table id=\"zones\"><tr><th>Zone</th><th>Age</th><th>Children</th><th>Stale</th></tr>\n");
        for z in &v.zones {
            let _ = writeln!(
                html,
                "<tr><td>{}</td><td class=\"n\">{:.1} s</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                esc(&z.zone),
                z.seconds_since_report,
                z.children,
                z.stale
            );
        }
        html.push_str("</table>\n");
    }
    let _ = write!(
        html,
        "</main>\n<script>\n(function(){{const every={refresh_ms};\
         async function refresh(){{try{{const r=await fetch(location.href,{{cache:'no-store',credentials:'same-origin'}});\
         if(r.ok){{const d=new DOMParser().parseFromString(await r.text(),'text/html');\
         const m=d.querySelector('main');if(m){{document.querySelector('main').replaceWith(m);\
         document.body.dataset.refreshes=String(Number(document.body.dataset.refreshes)+1);}}}}}}catch(e){{}}\
         setTimeout(refresh,every);}}setTimeout(refresh,every);}})();\n</script>\n</body></html>\n"
    );
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use grl_core::proto;

    #[test]
    fn names_every_bucket_and_marks_the_dropping_one() {
        let st = proto::StatusResponse {
            config_version: "v1".into(),
            buckets: vec![
                proto::BucketStatus {
                    service: "orders".into(),
                    bucket: "<hot>".into(),
                    mode: proto::Mode::Deny as i32,
                    limit_rps: Some(100.0),
                    offered: 300.0,
                    dropped: 200.0,
                    drop_ratio: 0.66,
                    ..Default::default()
                },
                proto::BucketStatus {
                    service: "orders".into(),
                    bucket: "calm".into(),
                    mode: proto::Mode::Deny as i32,
                    limit_rps: Some(100.0),
                    offered: 10.0,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let mut h = History::new(std::time::Duration::from_secs(5), 10);
        h.record(&st);
        h.record(&st);
        let page = render(&StatusView::from(&st), &h, 1000, "now");
        assert!(page.contains("<tr class=\"dropping\" data-bucket=\"orders/&lt;hot&gt;\">"));
        assert!(page.contains("<tr class=\"ok\" data-bucket=\"orders/calm\">"));
        assert!(!page.contains("<hot>"), "names are escaped");
        assert!(
            !page.contains("src=\"http") && !page.contains("href=\"http"),
            "no external asset"
        );
        assert!(!page.contains("<form"), "read-only");
        assert_eq!(page.matches("<polyline").count(), 2);
    }

    /// The y of the limit line in a sparkline.
    fn limit_y(svg: &str) -> f32 {
        let at = svg.find("y1=\"").unwrap() + 4;
        svg[at..].split('"').next().unwrap().parse().unwrap()
    }

    #[test]
    fn a_spike_does_not_flatten_the_limit_line_and_the_scale_is_written() {
        let mut samples = vec![80.0; 59];
        samples.push(1500.0);
        let svg = sparkline(&samples, Some(100.0));
        // The limit sits a third of the way up at least, not on the baseline.
        assert!(limit_y(&svg) < HEIGHT * 0.7, "{svg}");
        assert!(svg.contains(">peak 1500</text>"), "{svg}");
        assert!(
            svg.contains("<title>0 to 300 rps, peak 1500 rps clipped</title>"),
            "{svg}"
        );
        let calm = sparkline(&[50.0, 60.0], Some(100.0));
        assert!(calm.contains(">125</text>"), "{calm}");
        assert!(limit_y(&calm) > 1.0, "{calm}");
        let unlimited = sparkline(&[50.0, 60.0], None);
        assert!(unlimited.contains(">66.0</text>"), "{unlimited}");
    }
}
