//! [`SourceError`]: why a metrics source could not answer, naming the source and the bucket.

use std::path::PathBuf;

/// A metrics source failed. Every message names what failed: the source (URL or path) and,
/// when there is one, the bucket (`service/bucket`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    /// The Prometheus URL cannot be used.
    #[error("prometheus at {url}: invalid URL: {message}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        message: String,
    },
    /// The retry backoff settings are unusable (zero base, or a cap below the base).
    #[error("prometheus retry settings: {0}")]
    InvalidBackoff(#[source] grl_core::backoff::BackoffError),
    /// A query template is malformed, or cannot be rendered for a bucket.
    #[error("query template: {message}")]
    Template {
        /// What is wrong, naming the placeholder or the bucket.
        message: String,
    },
    /// A query kept failing with a transient error (connection, timeout, 5xx) until the
    /// attempts ran out.
    #[error("{source_desc}: query for {bucket} failed after {attempts} attempts: {message}")]
    Exhausted {
        /// The source, e.g. `prometheus at http://127.0.0.1:9090`.
        source_desc: String,
        /// `service/bucket`.
        bucket: String,
        /// How many requests were sent.
        attempts: u32,
        /// The last error, with its causes.
        message: String,
    },
    /// The store refused the query (bad PromQL, too many samples even for a small chunk):
    /// retrying would not help.
    #[error("{source_desc}: query for {bucket} rejected: {message}; query: {query}")]
    Rejected {
        /// The source, e.g. `prometheus at http://127.0.0.1:9090`.
        source_desc: String,
        /// `service/bucket`.
        bucket: String,
        /// The store's message.
        message: String,
        /// The PromQL sent.
        query: String,
    },
    /// The time range is empty or reversed.
    #[error("{source_desc}: query for {bucket}: invalid range {start}..{end} (step {step_secs} s)")]
    InvalidRange {
        /// The source.
        source_desc: String,
        /// `service/bucket`.
        bucket: String,
        /// Start, unix seconds.
        start: i64,
        /// End, unix seconds.
        end: i64,
        /// Step, seconds.
        step_secs: i64,
    },
    /// A PromQL expression was given to a source that cannot evaluate it (files).
    #[error(
        "{source_desc} cannot evaluate PromQL, which {what} is; give a number instead, or read from Prometheus"
    )]
    NoPromql {
        /// The source.
        source_desc: String,
        /// What the expression is, e.g. `capacity/orders.yaml:4: capacity[0].query`.
        what: String,
    },
    /// A file could not be read or parsed.
    #[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    File {
        /// The file (or directory).
        path: PathBuf,
        /// 1-based line, when the problem is on one line.
        line: Option<usize>,
        /// What is wrong.
        message: String,
    },
}

/// Formats an error and its chain of causes as `outer: cause: root cause`, so that the root
/// cause (e.g. `Connection refused`) reaches the message.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhausted_message_names_source_bucket_and_cause() {
        let e = SourceError::Exhausted {
            source_desc: "prometheus at http://127.0.0.1:9090".into(),
            bucket: "payments/gateway-pay".into(),
            attempts: 3,
            message: "connection refused".into(),
        };
        assert_eq!(
            e.to_string(),
            "prometheus at http://127.0.0.1:9090: query for payments/gateway-pay failed after 3 attempts: connection refused"
        );
    }

    #[test]
    fn file_message_names_path_and_line() {
        let e = SourceError::File {
            path: "d/s/b.csv".into(),
            line: Some(3),
            message: "bad value".into(),
        };
        assert_eq!(e.to_string(), "d/s/b.csv:3: bad value");
    }
}
