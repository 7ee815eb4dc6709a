//! The counters of the proxy's port, where anyone who reaches it is a caller: connections
//! open and the ones the sidecar closed by reason, requests refused before any decision,
//! names cut to the length limit and paths rewritten to their canonical spelling.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::exposition::{write_counters, write_one};

/// Connections of the proxy open now.
pub const CONNECTIONS_OPEN: &str = "grl_sidecar_connections_open";
/// Connections the proxy closed itself, by `reason` ([`Closed`]).
pub const CONNECTIONS_CLOSED_TOTAL: &str = "grl_sidecar_connections_closed_total";
/// Requests answered with an error before any decision, by `reason` ([`Refused`]).
pub const REQUESTS_REFUSED_TOTAL: &str = "grl_sidecar_requests_refused_total";
/// Callers and procedures cut to the name limit, by `name` (`caller`, `procedure`).
pub const NAMES_CUT_TOTAL: &str = "grl_sidecar_names_cut_total";
/// Requests whose path was rewritten to its canonical spelling before matching.
pub const PATHS_NORMALISED_TOTAL: &str = "grl_sidecar_paths_normalised_total";

/// Why the proxy closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// A request head did not arrive whole within the header timeout.
    HeaderTimeout = 0,
    /// No request for the idle timeout.
    IdleTimeout = 1,
    /// Refused at accept: `--max-connections` were open.
    MaxConnections = 2,
    /// The TLS handshake failed or timed out.
    TlsHandshake = 3,
}

/// Why a request was refused before any decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// An escaped separator or a broken escape in the path (400).
    BadPath = 0,
    /// The caller header given more than once (400).
    RepeatedCaller = 1,
    /// The caller header not UTF-8 (400).
    CallerNotUtf8 = 2,
    /// A client certificate naming no URI or DNS SAN (403).
    NoIdentity = 3,
}

/// Which name was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    /// The caller.
    Caller = 0,
    /// The procedure.
    Procedure = 1,
}

/// The port's counters.
#[derive(Debug, Default)]
pub struct PortMetrics {
    open: AtomicI64,
    closed: [AtomicU64; 4],
    refused: [AtomicU64; 4],
    cut: [AtomicU64; 2],
    normalised: AtomicU64,
}

impl PortMetrics {
    /// Counts a connection opened; [`PortMetrics::connection_ended`] when it ends.
    pub fn connection_opened(&self) {
        self.open.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection ended (by either side).
    pub fn connection_ended(&self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }

    /// Counts a connection the proxy closed.
    pub fn closed(&self, why: Closed) {
        self.closed[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request refused before any decision.
    pub fn refused(&self, why: Refused) {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a name cut to the limit.
    pub fn cut(&self, name: Name) {
        self.cut[name as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a path rewritten to its canonical spelling.
    pub fn normalised(&self) {
        self.normalised.fetch_add(1, Ordering::Relaxed);
    }

    /// Appends the port's families to `out`, each sample labelled with `service`.
    pub fn render(&self, out: &mut String, service: &str) {
        let open = self.open.load(Ordering::Relaxed).max(0) as u64;
        let help = "Connections of the sidecar's proxy port open now.";
        write_one(out, service, CONNECTIONS_OPEN, help, "gauge", open);
        write_counters(
            out,
            service,
            CONNECTIONS_CLOSED_TOTAL,
            "Connections the sidecar's proxy closed itself.",
            "reason",
            &[
                "header_timeout",
                "idle_timeout",
                "max_connections",
                "tls_handshake",
            ],
            &self.closed,
        );
        write_counters(
            out,
            service,
            REQUESTS_REFUSED_TOTAL,
            "Requests the sidecar's proxy refused before deciding them.",
            "reason",
            &[
                "bad_path",
                "repeated_caller",
                "caller_not_utf8",
                "no_identity",
            ],
            &self.refused,
        );
        write_counters(
            out,
            service,
            NAMES_CUT_TOTAL,
            "Callers and procedures the sidecar cut to the name length limit.",
            "name",
            &["caller", "procedure"],
            &self.cut,
        );
        let help = "Requests whose path the sidecar rewrote to its canonical spelling.";
        let normalised = self.normalised.load(Ordering::Relaxed);
        write_one(
            out,
            service,
            PATHS_NORMALISED_TOTAL,
            help,
            "counter",
            normalised,
        );
    }
}
