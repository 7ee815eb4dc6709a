//! Reading `grl_requests_total` counters from an OpenMetrics / Prometheus text file, and
//! turning them into a bucket's rate series.
//!
//! Every sample must carry a timestamp in seconds (`name{labels} value timestamp`). Comment
//! lines (`# TYPE`, `# EOF`) and other metric names are skipped. Counters become rates by
//! differencing consecutive samples (a decrease is a reset: the new value counts from zero).

use super::{
    BucketQuery, LABEL_CALLER, LABEL_DECISION, LABEL_PROCEDURE, LABEL_SERVICE, Measure,
    REQUESTS_TOTAL, RangeSeries,
};
use std::collections::{BTreeMap, HashMap};

/// One counter series: its labels and `(unix seconds, value)` samples in time order.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct CounterSeries {
    /// Label name → value.
    pub labels: BTreeMap<String, String>,
    /// Samples sorted by time.
    pub samples: Vec<(i64, f64)>,
}

/// Parses the `grl_requests_total` samples of a text file. Errors carry the 1-based line.
pub(super) fn parse(text: &str) -> Result<Vec<CounterSeries>, (usize, String)> {
    let mut by_labels: HashMap<BTreeMap<String, String>, Vec<(i64, f64)>> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |m: String| (i + 1, m);
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| err("expected 'name{labels} value timestamp'".into()))?;
        if &line[..name_end] != REQUESTS_TOTAL {
            continue;
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end + 1..]).map_err(err)?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let mut fields = rest.split_whitespace();
        let value: f64 = fields
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| err("missing or bad sample value".into()))?;
        let ts: f64 = fields
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| err("missing or bad timestamp (seconds) after the value".into()))?;
        if ts > 1e11 {
            return Err(err(format!(
                "timestamp {ts} looks like milliseconds; use seconds"
            )));
        }
        by_labels
            .entry(labels)
            .or_default()
            .push((ts.round() as i64, value));
    }
    let mut out: Vec<CounterSeries> = by_labels
        .into_iter()
        .map(|(labels, mut samples)| {
            samples.sort_by_key(|s| s.0);
            CounterSeries { labels, samples }
        })
        .collect();
    out.sort_by(|a, b| a.labels.cmp(&b.labels));
    Ok(out)
}

/// Parses `k="v",k2="v2"}` (after the `{`); returns the labels and the text after `}`.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = s.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest.find('=').ok_or("expected label=\"value\"")?;
        let name = rest[..eq].trim().to_owned();
        let body = rest[eq + 1..]
            .trim_start()
            .strip_prefix('"')
            .ok_or("label value must be quoted")?;
        let mut value = String::new();
        let mut chars = body.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("unterminated label value".into()),
                },
                Some((j, '"')) => break j,
                Some((_, c)) => value.push(c),
                None => return Err("unterminated label value".into()),
            }
        };
        labels.insert(name, value);
        rest = body[end + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
}

/// The rate series of a bucket: per-series rates by differencing, summed on a grid of
/// `resolution` seconds, then the peak per `step`, restricted to `[start, end]`.
pub(super) fn bucket_rate(
    series: &[CounterSeries],
    q: &BucketQuery,
    measure: Measure,
    start: i64,
    end: i64,
    resolution: i64,
    step: i64,
) -> RangeSeries {
    fn label<'s>(s: &'s CounterSeries, k: &str) -> &'s str {
        s.labels.get(k).map_or("", String::as_str)
    }
    let mut grid: BTreeMap<i64, f64> = BTreeMap::new();
    for s in series.iter().filter(|s| {
        label(s, LABEL_SERVICE) == q.service
            && q.matches(label(s, LABEL_CALLER), label(s, LABEL_PROCEDURE))
            && measure
                .decision()
                .is_none_or(|d| label(s, LABEL_DECISION) == d)
    }) {
        let mut cells: BTreeMap<i64, f64> = BTreeMap::new();
        for w in s.samples.windows(2) {
            let ((t0, v0), (t1, v1)) = (w[0], w[1]);
            if t1 <= t0 || t1 < start || t1 > end {
                continue;
            }
            let increase = if v1 >= v0 { v1 - v0 } else { v1 };
            let cell = (t1 + resolution - 1).div_euclid(resolution) * resolution;
            cells.insert(cell, increase / (t1 - t0) as f64);
        }
        for (cell, r) in cells {
            *grid.entry(cell).or_insert(0.0) += r;
        }
    }
    RangeSeries::max_per_step(step, grid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# TYPE grl_requests counter
grl_requests_total{service="s",caller="gw",procedure="Pay/Card",decision="allowed"} 0 1000
grl_requests_total{service="s",caller="gw",procedure="Pay/Card",decision="allowed"} 600 1060
grl_requests_total{service="s",caller="gw",procedure="Pay/Card",decision="allowed"} 60 1120
grl_requests_total{service="s",caller="gw",procedure="Pay/Bank",decision="shadow_dropped"} 0 1000
grl_requests_total{service="s",caller="gw",procedure="Pay/Bank",decision="shadow_dropped"} 120 1060
grl_requests_total{service="s",caller="gw",procedure="Refund",decision="allowed"} 0 1000
grl_requests_total{service="s",caller="gw",procedure="Refund",decision="allowed"} 6000 1060
other_metric{a="b"} 1 1000
# EOF
"#;

    fn q(procedure: &str) -> BucketQuery {
        BucketQuery {
            service: "s".into(),
            bucket: "b".into(),
            caller: Some("gw".into()),
            procedure: Some(procedure.into()),
        }
    }

    #[test]
    fn parses_counters_and_skips_other_metrics() {
        let s = parse(TEXT).unwrap();
        assert_eq!(s.len(), 3);
        let procs: Vec<&str> = s.iter().map(|c| c.labels["procedure"].as_str()).collect();
        assert_eq!(
            procs,
            ["Pay/Card", "Refund", "Pay/Bank"],
            "sorted by labels (decision before procedure)"
        );
        assert_eq!(s[0].samples, vec![(1000, 0.0), (1060, 600.0), (1120, 60.0)]);
    }

    #[test]
    fn prefix_rule_sums_matching_series_and_handles_resets() {
        let s = parse(TEXT).unwrap();
        let r = bucket_rate(&s, &q("Pay/*"), Measure::Offered, 0, 2000, 60, 60);
        // 1060: 600/60 + 120/60 = 12; 1120: reset, 60/60 = 1.
        assert_eq!(r.points, vec![(1080, 12.0), (1140, 1.0)]);
        let r = bucket_rate(&s, &q("Pay/*"), Measure::ShadowDropped, 0, 2000, 60, 60);
        assert_eq!(r.points, vec![(1080, 2.0)]);
    }

    #[test]
    fn escaped_label_values_and_bad_lines() {
        let s = parse("grl_requests_total{caller=\"a\\\"b\",procedure=\"x\"} 1 10\n").unwrap();
        assert_eq!(s[0].labels["caller"], "a\"b");
        assert_eq!(
            parse("grl_requests_total{caller=\"a\"} 1\n").unwrap_err().0,
            1
        );
        assert!(
            parse("grl_requests_total 1 1700000000000\n")
                .unwrap_err()
                .1
                .contains("milliseconds")
        );
    }
}
