//! The client's Prometheus text exposition.
//!
//! `grl_requests_total{service, caller, procedure, bucket, decision}` for every pair held
//! (all three decisions, so each series exists from the first request), plus per-bucket
//! overflow rows with `caller = procedure = "__overflow__"`, the counts of each priority
//! class of the buckets that have classes, then the client's health gauges.
//! Written by hand: the counters already live in the pair table, so a registry would only
//! copy them.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use grl_core::metric_names::{
    DECISION_ALLOWED, DECISION_DROPPED, DECISION_SHADOW_DROPPED, OVERFLOW_LABEL, REQUESTS_TOTAL,
};

use crate::Inner;
use crate::control::shape::Change;
use crate::decide::buckets::UNMATCHED;
use crate::decide::table::PairTable;

/// Gauge: 1 while the client holds no valid instruction and lets everything through.
pub const CLIENT_FAIL_OPEN: &str = "grl_client_fail_open";
/// Gauge: 1 while the stream to the aggregator is up.
pub const CLIENT_CONNECTED: &str = "grl_client_connected";
/// Gauge `{service, bucket}`: the drop ratio in force.
pub const CLIENT_DROP_RATIO: &str = "grl_client_drop_ratio";
/// Gauge `{service, version}` = 1: the config version held.
pub const CLIENT_CONFIG_INFO: &str = "grl_client_config_info";
/// Counter: requests whose pair did not fit under `max_pairs`.
pub const CLIENT_OVERFLOW_TOTAL: &str = "grl_client_overflow_total";
/// Gauge: distinct (caller, procedure) pairs held.
pub const CLIENT_PAIRS: &str = "grl_client_pairs";
/// Counter `{service, bucket, class, decision}`: requests of each priority class of the
/// buckets that have classes (the pair rows count every class of their bucket).
pub const CLIENT_CLASS_REQUESTS_TOTAL: &str = grl_core::metric_names::CLASS_REQUESTS_TOTAL;
/// Counter: requests that named a priority class their bucket does not list (counted in
/// its default class).
pub const CLIENT_UNKNOWN_CLASSES_TOTAL: &str = "grl_client_unknown_classes_total";

/// Counter `{service, change}`: changes of a bucket's offered rate the client told its
/// aggregator at once, in an urgent report (`rise`, `fall`, `start`, `learned`: the cycles
/// of bursts became known, `refined`: a rate told at a rise or fall, counted again over
/// more windows).
pub const CLIENT_RATE_CHANGES_TOTAL: &str = "grl_client_rate_changes_total";

const DECISION_LABELS: [&str; 3] = [DECISION_ALLOWED, DECISION_DROPPED, DECISION_SHADOW_DROPPED];

/// Appends `value` escaped as a label value.
fn label(out: &mut String, value: &str) {
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn requests_row(
    out: &mut String,
    service: &str,
    caller: &str,
    procedure: &str,
    bucket: &str,
    counts: [u64; 3],
) {
    for (decision, n) in DECISION_LABELS.iter().zip(counts) {
        out.push_str(REQUESTS_TOTAL);
        for (name, value) in [
            ("{service=\"", service),
            ("\",caller=\"", caller),
            ("\",procedure=\"", procedure),
            ("\",bucket=\"", bucket),
            ("\",decision=\"", decision),
        ] {
            out.push_str(name);
            label(out, value);
        }
        let _ = writeln!(out, "\"}} {n}");
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn service_gauge(out: &mut String, name: &str, service: &str, value: u64) {
    out.push_str(name);
    out.push_str("{service=\"");
    label(out, service);
    let _ = writeln!(out, "\"}} {value}");
}

/// Writes the exposition of `inner` to `out`.
pub(crate) fn encode(inner: &Inner, out: &mut String) {
    let service = inner.cfg.service.as_str();
    let resolver = inner.resolver.load();
    let name = |id: u32| {
        resolver
            .cells
            .get(id as usize)
            .map_or("", |c| c.name.as_str())
    };
    header(
        out,
        REQUESTS_TOTAL,
        "counter",
        "Requests offered to the rate limiter, by decision.",
    );
    let in_addition = inner.also.get().into_iter().flat_map(PairTable::iter);
    let applied = in_addition.filter(|e| e.cell.load(Ordering::Relaxed) != UNMATCHED);
    for e in inner.table.iter().chain(applied) {
        let bucket = name(e.cell.load(Ordering::Relaxed));
        requests_row(out, service, e.caller(), e.procedure(), bucket, e.totals());
    }
    for cell in &resolver.cells {
        let counts = cell.overflow.each_ref().map(|c| c.load(Ordering::Relaxed));
        if counts.iter().any(|n| *n > 0) {
            requests_row(
                out,
                service,
                OVERFLOW_LABEL,
                OVERFLOW_LABEL,
                &cell.name,
                counts,
            );
        }
    }
    let status = inner.status();
    let classed: Vec<_> = inner
        .bucket_totals()
        .into_iter()
        .filter_map(|t| {
            let (bucket, class) = grl_core::config::split_class(&t.bucket);
            Some((bucket.to_string(), class?.to_string(), t))
        })
        .collect();
    if !classed.is_empty() {
        header(
            out,
            CLIENT_CLASS_REQUESTS_TOTAL,
            "counter",
            "Requests of each priority class of a bucket with classes, by decision.",
        );
    }
    for (bucket, class, t) in &classed {
        for (decision, n) in DECISION_LABELS
            .iter()
            .zip([t.allowed, t.dropped, t.shadow_dropped])
        {
            out.push_str(CLIENT_CLASS_REQUESTS_TOTAL);
            for (name, value) in [
                ("{service=\"", service),
                ("\",bucket=\"", bucket.as_str()),
                ("\",class=\"", class.as_str()),
                ("\",decision=\"", decision),
            ] {
                out.push_str(name);
                label(out, value);
            }
            let _ = writeln!(out, "\"}} {n}");
        }
    }
    header(
        out,
        CLIENT_UNKNOWN_CLASSES_TOTAL,
        "counter",
        "Requests naming a priority class their bucket does not list (counted in its default class).",
    );
    service_gauge(
        out,
        CLIENT_UNKNOWN_CLASSES_TOTAL,
        service,
        status.unknown_classes,
    );
    header(
        out,
        CLIENT_RATE_CHANGES_TOTAL,
        "counter",
        "Changes of a bucket's offered rate told to the aggregator at once, by kind.",
    );
    for (change, n) in Change::TOLD.iter().zip(&inner.rate_changes) {
        out.push_str(CLIENT_RATE_CHANGES_TOTAL);
        out.push_str("{service=\"");
        label(out, service);
        out.push_str("\",change=\"");
        label(out, change.label());
        let _ = writeln!(out, "\"}} {}", n.load(Ordering::Relaxed));
    }
    header(
        out,
        CLIENT_FAIL_OPEN,
        "gauge",
        "1 while no valid instruction is held and everything is allowed.",
    );
    service_gauge(out, CLIENT_FAIL_OPEN, service, status.fail_open.into());
    header(
        out,
        CLIENT_CONNECTED,
        "gauge",
        "1 while the stream to the aggregator is up.",
    );
    service_gauge(out, CLIENT_CONNECTED, service, status.connected.into());
    header(
        out,
        CLIENT_DROP_RATIO,
        "gauge",
        "The drop ratio in force per bucket.",
    );
    for (bucket, ratio) in &status.ratios {
        out.push_str(CLIENT_DROP_RATIO);
        out.push_str("{service=\"");
        label(out, service);
        out.push_str("\",bucket=\"");
        label(out, bucket);
        let _ = writeln!(out, "\"}} {ratio}");
    }
    header(
        out,
        CLIENT_CONFIG_INFO,
        "gauge",
        "The config version held by the client.",
    );
    out.push_str(CLIENT_CONFIG_INFO);
    out.push_str("{service=\"");
    label(out, service);
    out.push_str("\",version=\"");
    label(out, &status.config_version);
    out.push_str("\"} 1\n");
    header(
        out,
        CLIENT_OVERFLOW_TOTAL,
        "counter",
        "Requests whose (caller, procedure) pair did not fit under max_pairs.",
    );
    service_gauge(out, CLIENT_OVERFLOW_TOTAL, service, status.overflow);
    header(
        out,
        CLIENT_PAIRS,
        "gauge",
        "Distinct (caller, procedure) pairs held.",
    );
    service_gauge(out, CLIENT_PAIRS, service, status.pairs as u64);
}
