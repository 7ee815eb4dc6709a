//! Real traffic series from `tests/data/traffic/` (NAB, see its README), turned into request
//! rates and written as an OpenMetrics file that `promtool tsdb create-blocks-from
//! openmetrics` backfills into a Prometheus.
//!
//! Facts about promtool 2.42 that the writer follows (measured): sample timestamps are in
//! seconds, the file ends with `# EOF`, out-of-order samples are silently dropped, every
//! metric family has one `# TYPE` line with all its samples grouped under it, and nothing may
//! fall within the last 3 hours (use [`backfill_end`]).

use std::fmt::Write as _;
use std::path::PathBuf;

/// One sample: (unix time in seconds, value).
pub type Point = (i64, f64);

/// The directory holding the traffic CSV files (inside this repository).
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/traffic")
}

/// Reads `tests/data/traffic/<name>.csv` (header `timestamp,value`, UTC timestamps
/// `YYYY-MM-DD HH:MM:SS`) as points in file order. Gaps in the data are kept as gaps.
///
/// Panics with the file name and line on a missing file or a malformed line: the files are
/// part of the repository, so either is a bug.
pub fn load_series(name: &str) -> Vec<Point> {
    let path = data_dir().join(format!("{name}.csv"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    policies::series::read_points(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|p| p.value.is_finite())
        .map(|p| (p.ts, p.value))
        .collect()
}

/// The median of the values (mean of the two middle values for an even count).
///
/// Panics on an empty slice.
pub fn median(points: &[Point]) -> f64 {
    assert!(!points.is_empty(), "median of an empty series");
    let mut values: Vec<f64> = points.iter().map(|p| p.1).collect();
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// Scales the values so that their median becomes `median_target`, and shifts the
/// timestamps so that the last point falls at `end` (the spacing between points is kept).
///
/// Panics if the series is empty or its median is not positive.
pub fn scale_and_shift(points: &[Point], median_target: f64, end: i64) -> Vec<Point> {
    let m = median(points);
    assert!(m > 0.0, "cannot scale a series whose median is {m}");
    let factor = median_target / m;
    let shift = end - points.last().expect("non-empty").0;
    points
        .iter()
        .map(|&(t, v)| (t + shift, v * factor))
        .collect()
}

/// The points of the last `secs` seconds: those with `t > last_t - secs`.
pub fn take_last(points: &[Point], secs: i64) -> Vec<Point> {
    let Some(&(last, _)) = points.last() else {
        return Vec::new();
    };
    points
        .iter()
        .copied()
        .filter(|&(t, _)| t > last - secs)
        .collect()
}

/// Repeats the series back in time (copies end-to-end, the last copy unchanged) until it
/// covers `secs` seconds, then keeps the last `secs` seconds (see [`take_last`]).
///
/// Useful to stretch the 14-day `elb_request_count_8c0756` series to a 28-day window.
/// The period of one copy is its span plus its first spacing.
pub fn repeat_to_span(points: &[Point], secs: i64) -> Vec<Point> {
    if points.len() < 2 {
        return points.to_vec();
    }
    let (first, last) = (points[0].0, points[points.len() - 1].0);
    let period = last - first + (points[1].0 - first);
    let copies = (secs + period - 1) / period;
    let mut out = Vec::with_capacity(points.len() * copies as usize);
    for k in (0..copies).rev() {
        out.extend(points.iter().map(|&(t, v)| (t - k * period, v)));
    }
    take_last(&out, secs)
}

/// The latest end time a backfill may use: now minus 4 hours (promtool refuses samples in
/// the last 3 hours; one more hour of margin), rounded down to a multiple of 5 minutes so
/// that 5-minute windows and subquery steps line up with the data.
pub fn backfill_end() -> i64 {
    let end = chrono::Utc::now().timestamp() - 4 * 3600;
    end - end.rem_euclid(300)
}

/// Builds an OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`.
///
/// One synthetic counter series for [`write_counters_file`]: its labels (inside the braces)
/// and its rate in requests per second over the step that ends at a timestamp.
pub struct CounterSpec {
    /// E.g. `service="payments",caller="gw",procedure="Pay/Card",decision="allowed"`.
    pub labels: String,
    /// Rate (rps) over `(t - spacing, t]`.
    pub rate: Box<dyn Fn(i64) -> f64 + Send + Sync>,
}

impl std::fmt::Debug for CounterSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CounterSpec")
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

/// Writes `grl_requests_total` counters for `specs` to the OpenMetrics file `path`, one
/// sample every `spacing` seconds from `start` to `end`, streaming (weeks of hundreds of
/// series do not fit comfortably in one string). Feed it to
/// [`crate::prometheus::backfill_file`].
pub fn write_counters_file(
    path: &std::path::Path,
    specs: &[CounterSpec],
    start: i64,
    end: i64,
    spacing: i64,
) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    writeln!(w, "# HELP grl_requests Offered requests by decision.")?;
    writeln!(w, "# TYPE grl_requests counter")?;
    for spec in specs {
        let mut counter = 0.0f64;
        let mut t = start;
        while t <= end {
            if t > start {
                counter += (spec.rate)(t) * spacing as f64;
            }
            writeln!(w, "grl_requests_total{{{}}} {counter:.3} {t}", spec.labels)?;
            t += spacing;
        }
    }
    writeln!(w, "# EOF")?;
    w.flush()
}

/// Series are grouped by metric family in the order families were first added; each family
/// gets one `# TYPE` line. [`OpenMetricsWriter::finish`] appends `# EOF`.
#[derive(Debug, Default)]
pub struct OpenMetricsWriter {
    families: Vec<(String, String)>,
}

impl OpenMetricsWriter {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one counter series built from per-second `rates`.
    ///
    /// `name` is the series name as Prometheus will show it and must end in `_total` (for
    /// example `grl_requests_total`); the family in the `# TYPE` line is the name without
    /// that suffix, which is what OpenMetrics prescribes and promtool 2.42 accepts.
    ///
    /// The rate of point `i` holds from its timestamp until the next point (also across a
    /// gap), so the counter is the cumulative sum of `rate * spacing`, starting at 0 at the
    /// first point; the last point only marks the end. With `step_secs > 0` the counter is
    /// sampled every `step_secs` from the first point to the last (for example 60 for a
    /// 1-minute scrape); with `step_secs <= 0` it is sampled at the given points.
    ///
    /// Panics if the timestamps are not strictly increasing or a rate is negative or not
    /// finite: promtool would silently drop such samples.
    pub fn add_counter_series(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        rates: &[Point],
        step_secs: i64,
    ) {
        let family = name
            .strip_suffix("_total")
            .unwrap_or_else(|| panic!("counter series {name:?} must end in _total"));
        assert!(
            rates.windows(2).all(|w| w[0].0 < w[1].0),
            "timestamps of {name} must be strictly increasing"
        );
        assert!(
            rates.iter().all(|p| p.1.is_finite() && p.1 >= 0.0),
            "rates of {name} must be finite and non-negative"
        );
        let series = series_id(name, labels);
        let body = self.family_body(family);
        for (t, value) in counter_samples(rates, step_secs) {
            writeln!(body, "{series} {value} {t}").expect("writing to a String");
        }
    }

    /// The finished text, ending with `# EOF` and a newline.
    pub fn finish(self) -> String {
        let mut out = String::new();
        for (family, body) in self.families {
            writeln!(out, "# TYPE {family} counter").expect("writing to a String");
            out.push_str(&body);
        }
        out.push_str("# EOF\n");
        out
    }

    fn family_body(&mut self, family: &str) -> &mut String {
        let idx = match self.families.iter().position(|(f, _)| f == family) {
            Some(idx) => idx,
            None => {
                self.families.push((family.to_owned(), String::new()));
                self.families.len() - 1
            }
        };
        &mut self.families[idx].1
    }
}

/// `name{k="v",...}` with label values escaped as OpenMetrics requires.
fn series_id(name: &str, labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return name.to_owned();
    }
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("{name}{{{}}}", labels.join(","))
}

/// Counter values (time, cumulative count) for piecewise-constant `rates`.
fn counter_samples(rates: &[Point], step_secs: i64) -> Vec<(i64, f64)> {
    let Some(&(first, _)) = rates.first() else {
        return Vec::new();
    };
    if step_secs <= 0 {
        let mut total = 0.0;
        let mut out = Vec::with_capacity(rates.len());
        for (i, &(t, _)) in rates.iter().enumerate() {
            if i > 0 {
                let (prev_t, prev_rate) = rates[i - 1];
                total += prev_rate * (t - prev_t) as f64;
            }
            out.push((t, total));
        }
        return out;
    }
    let last = rates[rates.len() - 1].0;
    let mut out = Vec::with_capacity(((last - first) / step_secs + 1) as usize);
    // `seg` is the point whose rate holds at time `t`; `at_seg` the counter at its start.
    let (mut seg, mut at_seg) = (0usize, 0.0);
    let mut t = first;
    while t <= last {
        while seg + 1 < rates.len() && rates[seg + 1].0 <= t {
            at_seg += rates[seg].1 * (rates[seg + 1].0 - rates[seg].0) as f64;
            seg += 1;
        }
        out.push((t, at_seg + rates[seg].1 * (t - rates[seg].0) as f64));
        t += step_secs;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_every_series_with_increasing_timestamps() {
        for name in [
            "elb_request_count_8c0756",
            "Twitter_volume_AAPL",
            "Twitter_volume_FB",
            "nyc_taxi",
        ] {
            let points = load_series(name);
            assert!(points.len() > 4000, "{name}: {} points", points.len());
            assert!(points.windows(2).all(|w| w[0].0 < w[1].0), "{name}");
        }
        let elb = load_series("elb_request_count_8c0756");
        assert_eq!(elb[0], (1_397_088_240, 94.0)); // 2014-04-10 00:04:00
    }

    #[test]
    fn scale_and_shift_sets_median_and_end() {
        let points = vec![(10, 1.0), (20, 2.0), (40, 3.0)];
        let out = scale_and_shift(&points, 100.0, 1000);
        assert_eq!(out, vec![(970, 50.0), (980, 100.0), (1000, 150.0)]);
        assert_eq!(median(&out), 100.0);
    }

    #[test]
    fn take_last_and_repeat_to_span() {
        let points: Vec<Point> = (0..10).map(|i| (i * 10, i as f64)).collect();
        assert_eq!(
            take_last(&points, 30),
            vec![(70, 7.0), (80, 8.0), (90, 9.0)]
        );
        let long = repeat_to_span(&points, 250);
        assert_eq!(long.len(), 25);
        assert_eq!(long.last(), Some(&(90, 9.0)));
        assert_eq!(long[0], (-150, 5.0));
        assert!(long.windows(2).all(|w| w[1].0 - w[0].0 == 10));
    }

    #[test]
    fn counter_from_rates_at_points_and_resampled() {
        let rates = vec![(0, 2.0), (120, 1.0), (300, 5.0)];
        assert_eq!(
            counter_samples(&rates, 0),
            vec![(0, 0.0), (120, 240.0), (300, 420.0)]
        );
        assert_eq!(
            counter_samples(&rates, 60),
            vec![
                (0, 0.0),
                (60, 120.0),
                (120, 240.0),
                (180, 300.0),
                (240, 360.0),
                (300, 420.0)
            ]
        );
    }

    #[test]
    fn writer_groups_families_and_ends_with_eof() {
        let mut w = OpenMetricsWriter::new();
        let rates = [(100, 1.0), (160, 1.0)];
        w.add_counter_series("a_total", &[("k", "x\"y")], &rates, 0);
        w.add_counter_series("b_total", &[], &rates, 0);
        w.add_counter_series("a_total", &[("k", "z")], &rates, 0);
        let text = w.finish();
        assert_eq!(
            text,
            "# TYPE a counter\n\
             a_total{k=\"x\\\"y\"} 0 100\na_total{k=\"x\\\"y\"} 60 160\n\
             a_total{k=\"z\"} 0 100\na_total{k=\"z\"} 60 160\n\
             # TYPE b counter\nb_total 0 100\nb_total 60 160\n# EOF\n"
        );
    }

    #[test]
    #[should_panic(expected = "must end in _total")]
    fn writer_refuses_a_counter_without_total() {
        OpenMetricsWriter::new().add_counter_series("grl_requests", &[], &[(0, 1.0)], 0);
    }
}
