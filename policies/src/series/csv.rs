//! Reading a [`Series`] from `timestamp,value` CSV text.

use super::{Point, Series};
use chrono::{DateTime, NaiveDateTime};

/// Why CSV text could not be read as a series.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SeriesError {
    /// A data line is malformed; `line` is 1-based.
    #[error("line {line}: {message}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// Fewer than two distinct timestamps with values: the step cannot be inferred.
    #[error("need at least two samples to infer the step, found {0}")]
    TooShort(usize),
}

/// Integer timestamps above this are not unix seconds (it is the year 5138): they are
/// milliseconds or nanoseconds, refused rather than read as a date far in the future.
const MAX_UNIX_SECONDS: i64 = 100_000_000_000;

/// Reads `timestamp,value` CSV text into points: the project's one CSV series reader (the
/// backtest, the configurator's file source, the demo and the tests all use it).
///
/// Blank lines and `#` comments are skipped; the first line may be a header. Timestamps are
/// unix seconds, `YYYY-MM-DD HH:MM:SS` or `YYYY-MM-DDTHH:MM:SS` (UTC), or RFC 3339; a
/// timestamp in milliseconds or nanoseconds is refused. An empty value or `NaN` is a
/// missing sample (kept as a NaN point, dropped by [`Series::new`]); a negative or
/// infinite rate is refused, and so are rows out of time order or repeated.
pub fn read_points(text: &str) -> Result<Vec<Point>, SeriesError> {
    let mut points: Vec<Point> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let error = |message: String| SeriesError::Parse {
            line: index + 1,
            message,
        };
        let Some((ts_text, value_text)) = line.split_once(',') else {
            return Err(error(format!("expected `timestamp,value`, got {line:?}")));
        };
        let (ts_text, value_text) = (ts_text.trim(), value_text.trim());
        let ts = match parse_timestamp(ts_text) {
            Some(ts) => ts,
            None if points.is_empty() && is_header(ts_text) => continue,
            None => {
                return Err(error(format!(
                    "bad timestamp {ts_text:?}: use unix seconds or `YYYY-MM-DD HH:MM:SS` (UTC)"
                )));
            }
        };
        if ts.abs() > MAX_UNIX_SECONDS {
            return Err(error(format!(
                "timestamp {ts_text} looks like milliseconds or nanoseconds; use seconds"
            )));
        }
        if let Some(previous) = points.last()
            && ts <= previous.ts
        {
            return Err(error(format!(
                "timestamp {ts_text} is not after the previous row's: rows must be in time \
                 order, each timestamp once"
            )));
        }
        let value = if value_text.is_empty() || value_text.eq_ignore_ascii_case("nan") {
            f64::NAN
        } else {
            match value_text.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => v,
                Ok(_) => {
                    return Err(error(format!(
                        "bad value {value_text:?}: a rate must be finite and >= 0"
                    )));
                }
                Err(_) => return Err(error(format!("bad value {value_text:?}"))),
            }
        };
        points.push(Point { ts, value });
    }
    Ok(points)
}

/// Parses CSV text; see [`Series::from_csv_str`].
pub(super) fn parse(text: &str) -> Result<Series, SeriesError> {
    let mut series = Series::new(1, read_points(text)?);
    if series.points.len() < 2 {
        return Err(SeriesError::TooShort(series.points.len()));
    }
    series.step_secs = median_spacing(&series.points);
    Ok(series)
}

fn is_header(field: &str) -> bool {
    field.chars().any(|c| c.is_ascii_alphabetic()) && !field.contains('-')
}

fn parse_timestamp(text: &str) -> Option<i64> {
    if let Ok(secs) = text.parse::<i64>() {
        return Some(secs);
    }
    if let Ok(secs) = text.parse::<f64>() {
        return secs.is_finite().then(|| secs.round() as i64);
    }
    let naive = text.strip_suffix('Z').unwrap_or(text);
    if let Some(t) = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(naive, f).ok())
    {
        return Some(t.and_utc().timestamp());
    }
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp())
}

/// Median of the positive gaps between consecutive (sorted, unique) timestamps.
fn median_spacing(points: &[Point]) -> i64 {
    let mut gaps: Vec<i64> = points.windows(2).map(|w| w[1].ts - w[0].ts).collect();
    let mid = (gaps.len() - 1) / 2; // the lower median: a single odd gap cannot win
    *gaps.select_nth_unstable(mid).1
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_nab_format_with_header() {
        let s = Series::from_csv_str(
            "timestamp,value\n2014-07-01 00:00:00,10844\n2014-07-01 00:30:00,8127\n\n2014-07-01 02:00:00,1.5\n",
        )
        .unwrap();
        assert_eq!(s.step_secs, 1800);
        assert_eq!(s.points.len(), 3);
        assert_eq!(s.points[0].ts, 1_404_172_800);
        assert_eq!(s.points[2].value, 1.5);
    }

    #[test]
    fn reads_unix_seconds_rfc3339_and_missing_values() {
        let s = Series::from_csv_str("0,1\n60,\n120,NaN\n180,4\n2024-01-01T00:00:00Z,5\n").unwrap();
        assert_eq!(s.points.len(), 3);
        assert_eq!(s.points[2].ts, 1_704_067_200);
        assert_eq!(s.step_secs, 180);
    }

    #[test]
    fn reads_every_timestamp_form_header_and_comments() {
        let p = read_points(
            "timestamp,value\n# c\n1700000000,1.5\n\n2023-11-14 22:14:20, 2\n2023-11-14T22:14:30Z,3\n2023-11-14T22:14:40+00:00,4\n",
        )
        .unwrap();
        let got: Vec<(i64, f64)> = p.iter().map(|p| (p.ts, p.value)).collect();
        assert_eq!(
            got,
            [
                (1_700_000_000, 1.5),
                (1_700_000_060, 2.0),
                (1_700_000_070, 3.0),
                (1_700_000_080, 4.0)
            ]
        );
    }

    #[test]
    fn refuses_milliseconds_unsorted_duplicate_and_negative_rows() {
        let refused = |text: &str, words: &str| match read_points(text) {
            Err(SeriesError::Parse { line: 3, message }) => {
                assert!(message.contains(words), "{message}");
            }
            other => panic!("{text:?}: {other:?}"),
        };
        refused("ts,v\n0,1\n1700000060000,2\n", "milliseconds");
        refused("0,1\n120,1\n60,1\n", "time order");
        refused("0,1\n60,1\n60,2\n", "time order");
        refused("0,1\n60,1\n120,-3\n", "finite and >= 0");
        refused("0,1\n60,1\n120,inf\n", "finite and >= 0");
    }

    #[test]
    fn reports_the_bad_line() {
        let err = Series::from_csv_str("timestamp,value\n0,1\n60,abc\n").unwrap_err();
        assert_eq!(
            err,
            SeriesError::Parse {
                line: 3,
                message: "bad value \"abc\"".into()
            }
        );
        assert!(matches!(
            Series::from_csv_str("timestamp,value\n0,1\nyesterday,2\n"),
            Err(SeriesError::Parse { line: 3, .. })
        ));
        assert!(matches!(
            Series::from_csv_str("0;1\n"),
            Err(SeriesError::Parse { line: 1, .. })
        ));
        assert_eq!(
            Series::from_csv_str("timestamp,value\n0,1\n"),
            Err(SeriesError::TooShort(1))
        );
    }

    proptest! {
        #[test]
        fn round_trips_generated_series(
            start in 0i64..2_000_000_000,
            step in 1i64..4_000,
            values in proptest::collection::vec(proptest::option::of(0.0f64..1e9), 2..200),
        ) {
            let mut text = String::from("timestamp,value\n");
            for (i, v) in values.iter().enumerate() {
                let ts = chrono::DateTime::from_timestamp(start + i as i64 * step, 0).unwrap();
                let v = v.map(|v| v.to_string()).unwrap_or_default();
                text.push_str(&format!("{},{v}\n", ts.format("%Y-%m-%d %H:%M:%S")));
            }
            let present: Vec<(i64, f64)> = values.iter().enumerate()
                .filter_map(|(i, v)| v.map(|v| (start + i as i64 * step, v))).collect();
            match Series::from_csv_str(&text) {
                Ok(s) => {
                    let got: Vec<(i64, f64)> = s.points.iter().map(|p| (p.ts, p.value)).collect();
                    prop_assert_eq!(got, present);
                    prop_assert_eq!(s.step_secs % step, 0);
                }
                Err(SeriesError::TooShort(n)) => prop_assert_eq!(n, present.len()),
                Err(e) => prop_assert!(false, "unexpected error {e}"),
            }
        }

        #[test]
        fn never_panics(text in "[0-9a-z:, \\-\\n.]{0,200}") {
            let _ = Series::from_csv_str(&text);
        }
    }
}
