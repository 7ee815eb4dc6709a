//! What a client tells its aggregator: the hello on connect, the report every interval
//! and, for an urgent report, the same rows built in the middle of an interval.
//!
//! A row's rates are what the bucket was offered (and admitted) on average over the time
//! the tiers use the report for, whatever the shape of the traffic ([`Shape::report_rates`]:
//! the last interval for dense traffic, whole bursts and enough requests for sparse or
//! bursty traffic); usage decided elsewhere enters as its sliding rate. The row also
//! carries the cumulative totals, exact whatever horizon the rates cover (by name only:
//! the tiers share by rates and ignore them, and a row by index carries rates alone).
//! Whether rows go by name or by bucket index is decided in `indexed`.
//!
//! [`Shape::report_rates`]: crate::control::shape::Shape::report_rates

use std::sync::atomic::Ordering;

use grl_core::proto;

use crate::control::{Book, Control, indexed};
use crate::decide::buckets::UNMATCHED;
use crate::decide::table::DECISIONS;
use crate::{Decision, Inner};

/// The report of the interval that ends now.
pub(crate) fn report(inner: &Inner) -> proto::Report {
    let mut c = inner.lock();
    inner.collect(&mut c);
    // Also bounds how long a pair created during a ratio change can hold a stale one.
    inner.sync_pairs(&c.registry);
    c.seq += 1;
    report_with(inner, &c)
}

/// One row per bucket of the config, by name.
pub(crate) fn rows(inner: &Inner, c: &Control) -> Vec<proto::BucketRate> {
    c.active
        .iter()
        .filter(|id| **id != UNMATCHED)
        .map(|&id| {
            let cell = &c.registry.cells[id as usize];
            let shadow = cell.shadow.load(Ordering::Relaxed);
            bucket_rate(inner, &cell.name, &c.books[id as usize], shadow)
        })
        .collect()
}

/// The offered, dropped and shadow-dropped rates of cell `id` for a report.
pub(crate) fn row_rates(inner: &Inner, c: &Control, id: u32) -> (f64, f64, f64) {
    let shadow = c.registry.cells[id as usize].shadow.load(Ordering::Relaxed);
    rates_of(&c.books[id as usize], shadow, inner.interval_windows())
}

/// One bucket's row of a report; `shadow`: what was not admitted counts as virtual drops.
fn bucket_rate(inner: &Inner, bucket: &str, book: &Book, shadow: bool) -> proto::BucketRate {
    let (offered, dropped, shadow_dropped) = rates_of(book, shadow, inner.interval_windows());
    let totals: &[u64; DECISIONS] = &book.totals;
    proto::BucketRate {
        service: inner.cfg.service.clone(),
        bucket: bucket.to_string(),
        zone: inner.cfg.zone.clone(),
        region: inner.cfg.region.clone(),
        offered,
        dropped,
        shadow_dropped,
        clients: 1,
        offered_total: totals.iter().sum(),
        dropped_total: totals[Decision::Drop as usize],
        shadow_dropped_total: totals[Decision::ShadowDrop as usize],
    }
}

/// The report sent when a stream opens: it names the service whose config the client
/// needs and, once it has one, carries the rates as a regular report would, so that a
/// tier that just restarted hears this client at once. Nothing is known of the new
/// peer's wire version yet: its rows go by name.
pub(crate) fn hello(inner: &Inner) -> proto::Report {
    let mut c = inner.lock();
    c.indexing.new_stream();
    report_with(inner, &c)
}

/// A report carrying the rows of every bucket of the config, by name or by index.
pub(crate) fn report_with(inner: &Inner, c: &Control) -> proto::Report {
    let packed = indexed::packed_rows(c, |id| row_rates(inner, c, id));
    let rates = if packed.is_some() {
        Vec::new()
    } else {
        rows(inner, c)
    };
    proto::Report {
        reporter_id: inner.cfg.id.clone(),
        level: proto::Level::Client as i32,
        zone: inner.cfg.zone.clone(),
        region: inner.cfg.region.clone(),
        services: vec![inner.cfg.service.clone()],
        config_version: c.version.clone(),
        interval_ms: inner.cfg.interval.as_millis() as u32,
        rates,
        seq: c.seq,
        urgent: false,
        learning: false,
        wire_version: grl_core::packed::WIRE_VERSION,
        packed,
    }
}

/// A bucket's offered, dropped and shadow-dropped rates for a report (usage recorded
/// elsewhere included in what was offered); `shadow`: what was not admitted counts as
/// virtual drops.
fn rates_of(book: &Book, shadow: bool, interval_windows: usize) -> (f64, f64, f64) {
    let (offered, admitted) = book.shape.report_rates(interval_windows);
    let refused = (offered - admitted).max(0.0);
    let offered = offered + book.recorded.rate;
    if shadow {
        (offered, 0.0, refused)
    } else {
        (offered, refused, 0.0)
    }
}
