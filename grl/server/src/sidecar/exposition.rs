//! Writing the sidecar's counter families in the Prometheus text format, each sample
//! labelled with the sidecar's `service`; shared by [`super::metrics`] and
//! [`super::port_metrics`].

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Appends the counter family `name` labelled by `label`, one sample per value of it
/// (`counts` in the same order), each also labelled with `service`.
pub(super) fn write_counters(
    out: &mut String,
    service: &str,
    name: &str,
    help: &str,
    label: &str,
    values: &[&str],
    counts: &[AtomicU64],
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (value, n) in values.iter().zip(counts) {
        let n = n.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "{name}{{service=\"{service}\",{label}=\"{value}\"}} {n}"
        );
    }
}

/// Appends a family of one unlabelled sample (besides `service`) of type `kind`.
pub(super) fn write_one(
    out: &mut String,
    service: &str,
    name: &str,
    help: &str,
    kind: &str,
    value: u64,
) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{service=\"{service}\"}} {value}"
    );
}
