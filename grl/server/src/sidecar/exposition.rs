//! Writing the sidecar's counter families in the Prometheus text format, each sample
//! labelled with the sidecar's `service`; shared by [`super::metrics`] and
//! [`super::port_metrics`].

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// A counter family labelled by one label: its name, help, the label and its values.
pub(super) struct Family<'a> {
    pub name: &'a str,
    pub help: &'a str,
    pub label: &'a str,
    pub values: &'a [&'a str],
}

/// Appends a counter family, one sample per value of its label (`counts` in the same
/// order), each also labelled with `service`.
pub(super) fn write_counters(out: &mut String, service: &str, f: Family<'_>, counts: &[AtomicU64]) {
    let Family {
        name,
        help,
        label,
        values,
    } = f;
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
