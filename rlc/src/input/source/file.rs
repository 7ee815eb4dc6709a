//! [`FileSource`]: offline runs from files, either CSV per bucket or one OpenMetrics file.
//!
//! **CSV layout**: `<dir>/<service>/<bucket>.csv` holds the offered rate; the measures
//! `shadow_dropped` and `dropped` read `<bucket>.shadow_dropped.csv` and
//! `<bucket>.dropped.csv`. A missing file is no data (an empty series). Each line is
//! `timestamp,value`: the timestamp in unix seconds or `YYYY-MM-DD HH:MM:SS` (UTC, `T`
//! and a trailing `Z` accepted), the value in requests per second. A header line, blank
//! lines and `#` comments are skipped.
//!
//! **OpenMetrics**: a directory holding exactly one `*.om`, `*.prom`, `*.txt` or
//! `*.openmetrics` file (or that file itself) of `grl_requests_total` samples with
//! timestamps in seconds; see the `openmetrics` module. Buckets are matched by rule, as in
//! Prometheus.
//!
//! Either way, the points are reduced to the peak per step (default 300 s).

use super::openmetrics::{self, CounterSeries};
use super::{BucketQuery, FetchFuture, Measure, MetricsSource, RangeSeries, SourceError};
use policies::SeriesError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const OPENMETRICS_EXTENSIONS: [&str; 4] = ["om", "prom", "txt", "openmetrics"];

/// Bucket rates read from files (see the module doc for the layouts).
#[derive(Debug, Clone)]
pub struct FileSource {
    path: PathBuf,
    data: Data,
    step_secs: i64,
    resolution_secs: i64,
}

#[derive(Debug, Clone)]
enum Data {
    Csv,
    OpenMetrics(Arc<Vec<CounterSeries>>),
}

impl FileSource {
    /// Opens `path`: an OpenMetrics file, a directory holding one, or a CSV directory.
    /// OpenMetrics files are read now; CSV files at each fetch.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SourceError> {
        let path = path.as_ref().to_path_buf();
        let file_err = |p: &Path, message: String| SourceError::File {
            path: p.to_path_buf(),
            line: None,
            message,
        };
        let om_file = if path.is_file() {
            Some(path.clone())
        } else {
            let entries = std::fs::read_dir(&path).map_err(|e| file_err(&path, e.to_string()))?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && p.extension()
                            .and_then(|x| x.to_str())
                            .is_some_and(|x| OPENMETRICS_EXTENSIONS.contains(&x))
                })
                .collect();
            if found.len() > 1 {
                found.sort();
                return Err(file_err(
                    &path,
                    format!("several OpenMetrics files, expected one: {found:?}"),
                ));
            }
            found.pop()
        };
        let data = match om_file {
            None => Data::Csv,
            Some(f) => {
                let text = std::fs::read_to_string(&f).map_err(|e| file_err(&f, e.to_string()))?;
                let series =
                    openmetrics::parse(&text).map_err(|(line, message)| SourceError::File {
                        path: f.clone(),
                        line: Some(line),
                        message,
                    })?;
                tracing::info!(path = %f.display(), series = series.len(), "openmetrics file loaded");
                Data::OpenMetrics(Arc::new(series))
            }
        };
        Ok(FileSource {
            path,
            data,
            step_secs: 300,
            resolution_secs: 60,
        })
    }

    /// Sets the step of returned series (peak per step); default 300 s.
    pub fn with_step(mut self, step_secs: i64) -> Self {
        self.step_secs = step_secs.max(1);
        self
    }

    /// The CSV file read for a bucket and measure.
    pub fn csv_path(&self, q: &BucketQuery, measure: Measure) -> PathBuf {
        let name = match measure {
            Measure::Offered => format!("{}.csv", q.bucket),
            m => format!("{}.{}.csv", q.bucket, m.as_str()),
        };
        self.path.join(&q.service).join(name)
    }

    async fn fetch_csv(
        &self,
        q: &BucketQuery,
        measure: Measure,
        start: i64,
        end: i64,
    ) -> Result<RangeSeries, SourceError> {
        let path = self.csv_path(q, measure);
        let text = match tokio::fs::read_to_string(&path).await {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(bucket = %q.name(), path = %path.display(), "no csv file, no data");
                return Ok(RangeSeries::empty(self.step_secs));
            }
            Err(e) => {
                return Err(SourceError::File {
                    path,
                    line: None,
                    message: e.to_string(),
                });
            }
        };
        let points = parse_csv(&text).map_err(|e| match e {
            SeriesError::Parse { line, message } => SourceError::File {
                path,
                line: Some(line),
                message,
            },
            other @ SeriesError::TooShort(_) => SourceError::File {
                path,
                line: None,
                message: other.to_string(),
            },
        })?;
        Ok(RangeSeries::max_per_step(
            self.step_secs,
            points.into_iter().filter(|p| p.0 >= start && p.0 <= end),
        ))
    }
}

impl MetricsSource for FileSource {
    fn fetch<'a>(
        &'a self,
        q: &'a BucketQuery,
        measure: Measure,
        start: i64,
        end: i64,
    ) -> FetchFuture<'a> {
        Box::pin(async move {
            match &self.data {
                Data::Csv => self.fetch_csv(q, measure, start, end).await,
                Data::OpenMetrics(series) => Ok(openmetrics::bucket_rate(
                    series,
                    q,
                    measure,
                    start,
                    end,
                    self.resolution_secs,
                    self.step_secs,
                )),
            }
        })
    }

    fn describe(&self) -> String {
        format!("files at {}", self.path.display())
    }

    fn cache_identity(&self) -> String {
        format!(
            "files at {} step={}s resolution={}s",
            self.path.display(),
            self.step_secs,
            self.resolution_secs
        )
    }

    fn cacheable(&self) -> bool {
        false
    }
}

/// Reads a bucket's CSV with the project's one CSV reader; missing samples are dropped.
fn parse_csv(text: &str) -> Result<Vec<(i64, f64)>, SeriesError> {
    Ok(policies::series::read_points(text)?
        .into_iter()
        .filter(|p| p.value.is_finite())
        .map(|p| (p.ts, p.value))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q() -> BucketQuery {
        BucketQuery {
            service: "payments".into(),
            bucket: "gw-pay".into(),
            caller: None,
            procedure: None,
        }
    }

    #[tokio::test]
    async fn csv_dir_gives_peak_per_step_and_missing_files_are_empty() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("payments")).unwrap();
        std::fs::write(
            dir.path().join("payments/gw-pay.csv"),
            "0,1\n60,4\n120,2\n300,3\n360,9\n900,5\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("payments/gw-pay.shadow_dropped.csv"),
            "300,0.5\n",
        )
        .unwrap();
        let src = FileSource::open(dir.path()).unwrap();
        let s = src.fetch(&q(), Measure::Offered, 0, 600).await.unwrap();
        assert_eq!(s.step_secs, 300);
        assert_eq!(s.points, vec![(0, 1.0), (300, 4.0), (600, 9.0)]);
        let s = src
            .fetch(&q(), Measure::ShadowDropped, 0, 600)
            .await
            .unwrap();
        assert_eq!(s.points, vec![(300, 0.5)]);
        assert!(
            src.fetch(&q(), Measure::Dropped, 0, 600)
                .await
                .unwrap()
                .is_empty()
        );
        let other = BucketQuery {
            bucket: "nope".into(),
            ..q()
        };
        assert!(
            src.fetch(&other, Measure::Offered, 0, 600)
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn csv_parse_error_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("payments")).unwrap();
        std::fs::write(dir.path().join("payments/gw-pay.csv"), "0,1\n60,x\n").unwrap();
        let err = FileSource::open(dir.path())
            .unwrap()
            .fetch(&q(), Measure::Offered, 0, 600)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("payments/gw-pay.csv:2: bad value"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn openmetrics_file_in_dir_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let line = |v: f64, t: i64| {
            format!(
                "grl_requests_total{{service=\"payments\",caller=\"gw\",procedure=\"Pay\",decision=\"allowed\"}} {v} {t}\n"
            )
        };
        std::fs::write(
            dir.path().join("m.om"),
            format!("{}{}# EOF\n", line(0.0, 0), line(600.0, 60)),
        )
        .unwrap();
        let src = FileSource::open(dir.path()).unwrap().with_step(60);
        let s = src.fetch(&q(), Measure::Offered, 0, 600).await.unwrap();
        assert_eq!(s.points, vec![(60, 10.0)]);
        assert!(src.describe().starts_with("files at "));
    }

    #[test]
    fn missing_dir_is_an_error_naming_it() {
        let err = FileSource::open("/nonexistent/rlc-data").unwrap_err();
        assert!(err.to_string().contains("/nonexistent/rlc-data"), "{err}");
    }
}
