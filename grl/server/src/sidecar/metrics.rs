//! The sidecar's own counters (upstream failures, rate limit service answers, rate limit
//! quota reports, assignments and streams, long names bounded, and the proxy port's:
//! [`super::port_metrics`]) and the
//! `/metrics` exposition that puts them after the client's (`grl_requests_total` and the
//! client gauges).

use std::sync::atomic::{AtomicU64, Ordering};

use grl_client::Client;

use super::exposition::{write_counters, write_one};

/// Requests the proxy could not forward, by `kind` (`connect`, `timeout`, `other`).
pub const UPSTREAM_ERRORS_TOTAL: &str = "grl_sidecar_upstream_errors_total";
/// `ShouldRateLimit` answers of the rate limit service, by `code` (`ok`, `over_limit`,
/// `invalid_argument`).
pub const RLS_REQUESTS_TOTAL: &str = "grl_sidecar_rls_requests_total";

/// Rate limit quota assignments the sidecar sent, by `strategy` (`allow_all`, `deny_all`,
/// `token_bucket`).
pub const RLQS_ASSIGNMENTS_TOTAL: &str = "grl_sidecar_rlqs_assignments_total";
/// Rate limit quota usage reports received, by `code` (`ok`, `invalid_argument`).
pub const RLQS_REPORTS_TOTAL: &str = "grl_sidecar_rlqs_reports_total";
/// Rate limit quota streams opened, by `code` (`ok`, `resource_exhausted`: refused past
/// `--rlqs-max-streams`).
pub const RLQS_STREAMS_TOTAL: &str = "grl_sidecar_rlqs_streams_total";
/// Rate limit quota streams open now (gauge).
pub const RLQS_STREAMS_OPEN: &str = "grl_sidecar_rlqs_streams_open";
/// Descriptors (`api="rls"`) and bucket ids (`api="rlqs"`) whose caller or procedure was
/// longer than a config may name, and was bounded.
pub const LONG_NAMES_TOTAL: &str = "grl_sidecar_long_names_total";

/// A strategy of a rate limit quota assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RlqsStrategy {
    /// Every request allowed.
    AllowAll = 0,
    /// Every request denied.
    DenyAll = 1,
    /// A token bucket.
    TokenBucket = 2,
}

/// Why a request could not be forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamError {
    /// The upstream refused or did not accept the connection.
    Connect = 0,
    /// No response head within the timeout.
    Timeout = 1,
    /// The connection failed after it was made.
    Other = 2,
}

/// A `ShouldRateLimit` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RlsAnswer {
    /// Every descriptor is under its limit.
    Ok = 0,
    /// At least one descriptor is over its limit.
    OverLimit = 1,
    /// The request was refused as malformed.
    InvalidArgument = 2,
}

/// Counters shared by the proxy and the rate limit service.
#[derive(Debug, Default)]
pub struct SidecarMetrics {
    upstream: [AtomicU64; 3],
    rls: [AtomicU64; 3],
    rlqs_assignments: [AtomicU64; 3],
    rlqs_reports: [AtomicU64; 2],
    rlqs_streams: [AtomicU64; 2],
    rlqs_open: AtomicU64,
    long_names: [AtomicU64; 2],
    /// The proxy port's counters.
    pub port: super::port_metrics::PortMetrics,
}

/// Which Envoy service met a long name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// The rate limit service.
    Rls = 0,
    /// The rate limit quota service.
    Rlqs = 1,
}

impl SidecarMetrics {
    /// Counts one request that could not be forwarded.
    pub fn upstream_error(&self, kind: UpstreamError) {
        self.upstream[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one `ShouldRateLimit` answer.
    pub fn rls_answer(&self, answer: RlsAnswer) {
        self.rls[answer as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one rate limit quota assignment sent.
    pub fn rlqs_assignment(&self, strategy: RlqsStrategy) {
        self.rlqs_assignments[strategy as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one rate limit quota usage report, accepted or refused as malformed.
    pub fn rlqs_report(&self, accepted: bool) {
        self.rlqs_reports[usize::from(!accepted)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one rate limit quota stream, opened or refused.
    pub fn rlqs_stream(&self, opened: bool) {
        self.rlqs_streams[usize::from(!opened)].fetch_add(1, Ordering::Relaxed);
    }

    /// Sets the number of rate limit quota streams open.
    pub fn rlqs_open(&self, open: usize) {
        self.rlqs_open.store(open as u64, Ordering::Relaxed);
    }

    /// Counts one descriptor or bucket id whose names were bounded.
    pub fn long_name(&self, api: Api) {
        self.long_names[api as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The client's exposition followed by the sidecar's counters.
    pub fn render(&self, client: &Client) -> String {
        let mut out = String::with_capacity(4096);
        client.encode_metrics(&mut out);
        let service = client.config().service.replace(['\\', '"', '\n'], "_");
        write_counters(
            &mut out,
            &service,
            UPSTREAM_ERRORS_TOTAL,
            "Requests the sidecar could not forward to its upstream.",
            "kind",
            &["connect", "timeout", "other"],
            &self.upstream,
        );
        write_counters(
            &mut out,
            &service,
            RLS_REQUESTS_TOTAL,
            "ShouldRateLimit calls answered by the sidecar's rate limit service.",
            "code",
            &["ok", "over_limit", "invalid_argument"],
            &self.rls,
        );
        write_counters(
            &mut out,
            &service,
            RLQS_ASSIGNMENTS_TOTAL,
            "Quota assignments the sidecar's rate limit quota service sent.",
            "strategy",
            &["allow_all", "deny_all", "token_bucket"],
            &self.rlqs_assignments,
        );
        write_counters(
            &mut out,
            &service,
            RLQS_REPORTS_TOTAL,
            "Usage reports the sidecar's rate limit quota service received.",
            "code",
            &["ok", "invalid_argument"],
            &self.rlqs_reports,
        );
        write_counters(
            &mut out,
            &service,
            RLQS_STREAMS_TOTAL,
            "Rate limit quota streams opened, or refused past --rlqs-max-streams.",
            "code",
            &["ok", "resource_exhausted"],
            &self.rlqs_streams,
        );
        write_counters(
            &mut out,
            &service,
            LONG_NAMES_TOTAL,
            "Descriptors and bucket ids whose caller or procedure was longer than a config may name.",
            "api",
            &["rls", "rlqs"],
            &self.long_names,
        );
        let open = self.rlqs_open.load(Ordering::Relaxed);
        write_one(
            &mut out,
            &service,
            RLQS_STREAMS_OPEN,
            "Rate limit quota streams open.",
            "gauge",
            open,
        );
        self.port.render(&mut out, &service);
        out
    }
}
