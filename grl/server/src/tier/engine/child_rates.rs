//! A child's rates by the position of their bucket in the rules: summed once per report
//! (and per change of rules), then read by every round of instructions and every tick
//! until either changes. A tier looks at each child eight times an interval and the child
//! reports once, so the per-row work (a hash of the bucket's name, a comparison of its
//! place) is done once, not eight times.
//!
//! Pure: the child's rows and the rules are passed in.

use std::sync::Arc;

use super::ratios::{self, KeyRef, Rate, Totals};
use super::rules::{Rules, Slots};
use crate::tier::FastMap;
use grl_core::wire;

/// One service of a child (in the order of the child's services), by bucket position.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ServiceDigest {
    /// The offered rate over all the child's rows of the bucket.
    pub all: Vec<f64>,
    /// The offered rate over its rows in its own scope group (see [`ratios::scope_key`]).
    pub in_group: Vec<f64>,
    /// Its rates in rows of its own region and zone (empty for a repeated service).
    pub own: Vec<Rate>,
}

/// A child's rates by bucket position, see the module doc.
#[derive(Debug, Default)]
pub struct Digest {
    /// The (report count, rules generation) it was summed for.
    made_for: Option<(u64, u64)>,
    /// In the order of the child's services (a service without rules has empty vectors).
    /// Set at first positions only (see [`super::rules::Slots`]).
    pub per_service: Vec<ServiceDigest>,
    /// Whether `own` holds every row of the child: each row is in its own region and
    /// zone, of one of its services and of a bucket in the rules. Else its rows are summed
    /// one by one.
    pub covers_all_rows: bool,
}

/// A child's rows keyed by bucket index: a whole packed report of the version `rules`,
/// every row in the child's own zone and region.
#[derive(Debug, Clone)]
pub struct IndexedRates {
    /// The version the indices belong to.
    pub rules: Arc<Rules>,
    /// (index, rate), indices strictly ascending.
    pub rows: Vec<(u32, Rate)>,
}

impl IndexedRates {
    /// The rate of the bucket at `index`, if the child reported it.
    pub fn get(&self, index: u32) -> Option<&Rate> {
        let at = self.rows.binary_search_by_key(&index, |(i, _)| *i).ok()?;
        Some(&self.rows[at].1)
    }
}

/// Where a child is and what it reported, as a digest is summed from.
#[derive(Debug, Clone, Copy)]
pub struct Reported<'a> {
    /// Its rows sent by name.
    pub rates: &'a Totals,
    /// Its rows sent by index.
    pub indexed: Option<&'a IndexedRates>,
    /// Its services.
    pub services: &'a [String],
    /// Its region and zone.
    pub place: (&'a str, &'a str),
}

impl<'a> Reported<'a> {
    /// Every row, by name (an indexed row's names are its version's), in the child's
    /// place where the row names none.
    pub fn rows(self) -> impl Iterator<Item = (KeyRef<'a>, &'a Rate)> + Clone {
        let (region, zone) = self.place;
        let indexed = self.indexed.into_iter().flat_map(move |x| {
            x.rows.iter().filter_map(move |(i, r)| {
                let (service, position) = x.rules.locate(*i)?;
                let bucket = x.rules.services().get(service)?.get(position)?;
                Some(((service, bucket.name.as_str(), region, zone), r))
            })
        });
        ratios::rows_of(self.rates).chain(indexed)
    }
}

impl Digest {
    /// Sums the digest again unless it was made for `made_for` (report count, rules
    /// generation) already.
    pub fn refresh(&mut self, made_for: (u64, u64), child: Reported<'_>, rules: &Rules) {
        if self.made_for == Some(made_for) {
            return;
        }
        self.made_for = Some(made_for);
        self.per_service
            .resize_with(child.services.len(), Default::default);
        for (i, (svc, d)) in child.services.iter().zip(&mut self.per_service).enumerate() {
            let n = rules.services().get(svc).map_or(0, Vec::len);
            for v in [&mut d.all, &mut d.in_group] {
                v.clear();
                v.resize(n, 0.0);
            }
            let repeated = child.services[..i].contains(svc);
            d.own.clear();
            d.own.resize(if repeated { 0 } else { n }, Rate::default());
        }
        let (region, zone) = child.place;
        let mut covers_all_rows = true;
        // Rows come sorted by service: its rules are looked up once per service, not per row.
        let mut service: Option<(&str, Option<(&Vec<_>, &Slots)>)> = None;
        for ((k_service, k_bucket, k_region, k_zone), r) in child.rows() {
            let found = match service {
                Some((name, found)) if name == k_service => found,
                _ => {
                    let found = rules.services().get(k_service).zip(rules.slots(k_service));
                    service = Some((k_service, found));
                    found
                }
            };
            let Some((buckets, slots)) = found else {
                covers_all_rows = false;
                continue;
            };
            let Some(&p) = slots.position.get(k_bucket) else {
                covers_all_rows = false;
                continue;
            };
            let in_place = k_region == region && k_zone == zone;
            let in_group = in_place
                || wire::scope_from_wire(buckets[p].scope).is_ok_and(|s| {
                    ratios::scope_key(s, k_region, k_zone) == ratios::scope_key(s, region, zone)
                });
            let mut first = true;
            for (svc, d) in child.services.iter().zip(&mut self.per_service) {
                if *svc != k_service {
                    continue;
                }
                d.all[p] += r.offered;
                if in_group {
                    d.in_group[p] += r.offered;
                }
                if first && in_place {
                    d.own[p].add(r);
                }
                first = false;
            }
            covers_all_rows &= in_place && !first;
        }
        self.covers_all_rows = covers_all_rows;
    }
}

/// Sums the rows of many children, keyed as [`ratios::sum_rows`] keeps them (with region
/// and zone): from each child's digest where that covers all its rows (one hash per
/// service of the child, not one per row), else row by row.
#[derive(Debug, Default)]
pub struct Summer<'a> {
    rows: FastMap<KeyRef<'a>, Rate>,
    /// By (service, region, zone): the rates by bucket position.
    by_place: FastMap<(&'a str, &'a str, &'a str), Vec<Rate>>,
}

impl<'a> Summer<'a> {
    /// Adds one child's rows.
    pub fn add(&mut self, digest: &Digest, child: Reported<'a>) {
        if !digest.covers_all_rows {
            for (k, r) in child.rows() {
                self.rows.entry(k).or_default().add(r);
            }
            return;
        }
        let (region, zone) = child.place;
        for (svc, d) in child.services.iter().zip(&digest.per_service) {
            if d.own.is_empty() {
                continue;
            }
            let acc = self
                .by_place
                .entry((svc, region, zone))
                .or_insert_with(|| vec![Rate::default(); d.own.len()]);
            acc.iter_mut().zip(&d.own).for_each(|(a, r)| a.add(r));
        }
    }

    /// The sums, keyed by (service, bucket, region, zone).
    pub fn finish(mut self, rules: &'a Rules) -> FastMap<KeyRef<'a>, Rate> {
        for ((svc, region, zone), acc) in self.by_place {
            let Some(buckets) = rules.services().get(svc) else {
                continue;
            };
            for (b, r) in buckets.iter().zip(&acc) {
                if r.clients > 0 {
                    self.rows
                        .entry((svc, &b.name, region, zone))
                        .or_default()
                        .add(r);
                }
            }
        }
        self.rows
    }
}
