//! Wire version 2 in a tier: report rows and instruction ratios keyed by the bucket's index
//! in the config version ([`Rules::index_of`], [`Rules::locate`]) instead of names. A tier
//! packs what it can (rows of its own zone and region, buckets of the version it holds) for
//! a peer that speaks version 2, and sends the rest by name; it unpacks into the named
//! form the rest of the tier works with, so a child or parent of version 1 keeps working
//! unchanged (it never sees a packed field, and sends none).

use grl_core::packed::{self, IndexedRatio, IndexedRow, WIRE_VERSION};
use grl_core::proto;

use super::admission::Reason;
use super::ratios::{self, RateKey, Totals};
use super::rules::Rules;

/// Whether a peer announcing `wire_version` takes packed rows and ratios.
pub fn speaks_packed(wire_version: u32) -> bool {
    wire_version >= WIRE_VERSION
}

/// The rules of `version`: the ones in force or the previous ones (a report sent just
/// before the child heard of a new version).
fn rules_of<'a>(version: &str, now: &'a Rules, previous: Option<&'a Rules>) -> Option<&'a Rules> {
    std::iter::once(now)
        .chain(previous)
        .find(|r| r.version == version && !version.is_empty())
}

/// Report `r` with its packed rows (if any) turned into named rows after its named ones.
/// Refused ([`Reason::Packed`]) when the packed rows are malformed or of a version neither
/// `now` nor `previous` is; an index of a service this tier does not hold is
/// [`Reason::UnknownBucket`].
pub fn unpack_report(
    r: &proto::Report,
    now: &Rules,
    previous: Option<&Rules>,
) -> Result<Option<proto::Report>, Reason> {
    let Some(p) = &r.packed else {
        return Ok(None);
    };
    let rules = rules_of(&p.config_version, now, previous).ok_or(Reason::Packed)?;
    let rows = packed::unpack_rows(p).map_err(|_| Reason::Packed)?;
    let mut rates = Vec::with_capacity(r.rates.len() + rows.len());
    rates.extend(r.rates.iter().cloned());
    for row in rows {
        let (service, position) = rules.locate(row.index).ok_or(Reason::UnknownBucket)?;
        rates.push(proto::BucketRate {
            service: service.to_string(),
            bucket: rules.services()[service][position].name.clone(),
            offered: row.offered,
            dropped: row.dropped,
            shadow_dropped: row.shadow_dropped,
            clients: row.clients,
            ..Default::default()
        });
    }
    Ok(Some(proto::Report {
        reporter_id: r.reporter_id.clone(),
        level: r.level,
        zone: r.zone.clone(),
        region: r.region.clone(),
        services: r.services.clone(),
        config_version: r.config_version.clone(),
        interval_ms: r.interval_ms,
        rates,
        seq: r.seq,
        urgent: r.urgent,
        learning: r.learning,
        wire_version: r.wire_version,
        packed: None,
    }))
}

/// The rows of `totals` for a report from `(region, zone)`: packed where `packed` (the
/// parent speaks version 2) and the row is of that place and of a bucket `rules` indexes;
/// by name otherwise.
pub fn pack_totals(
    totals: &Totals,
    rules: &Rules,
    (region, zone): (&str, &str),
    packed: bool,
) -> (Vec<proto::BucketRate>, Option<proto::PackedRows>) {
    if !packed {
        return (
            totals.iter().map(|(k, r)| ratios::to_wire(k, r)).collect(),
            None,
        );
    }
    let mut named = Vec::new();
    let mut indexed = Vec::with_capacity(totals.len());
    for (k, r) in totals {
        match index_of(rules, k).filter(|_| k.region == region && k.zone == zone) {
            Some(index) => indexed.push(IndexedRow {
                index,
                offered: r.offered,
                dropped: r.dropped,
                shadow_dropped: r.shadow_dropped,
                clients: r.clients,
            }),
            None => named.push(ratios::to_wire(k, r)),
        }
    }
    indexed.sort_unstable_by_key(|r| r.index);
    (named, packed::pack_rows(&rules.version, &indexed))
}

/// The index of a row's bucket in `rules`.
fn index_of(rules: &Rules, k: &RateKey) -> Option<u32> {
    let position = *rules.slots(&k.service)?.position.get(&k.bucket)?;
    rules.index_of(&k.service, position)
}

/// One bucket's ratio for a child, as a round of instructions made it.
#[derive(Debug, Clone, Copy)]
pub struct OutRatio<'a> {
    /// The bucket's index in the rules, if known.
    pub index: Option<u32>,
    /// Its service.
    pub service: &'a str,
    /// Its name.
    pub bucket: &'a str,
    /// The drop ratio.
    pub ratio: f64,
    /// Remaining validity.
    pub valid_for_ms: u32,
    /// The child's allowance.
    pub allowed: Option<f64>,
}

/// The ratios of an instruction of validity `valid_for_ms`: all by name, or, for a child
/// that speaks version 2 (`packed`), by index where every one has an index (else by name).
pub fn pack_ratios<'a>(
    ratios: impl Iterator<Item = OutRatio<'a>> + Clone,
    version: &str,
    valid_for_ms: u32,
    packed: bool,
) -> (Vec<proto::DropRatio>, Option<proto::PackedRatios>) {
    if packed {
        let mut indexed: Option<Vec<IndexedRatio>> = ratios
            .clone()
            .map(|r| {
                Some(IndexedRatio {
                    index: r.index?,
                    ratio: r.ratio,
                    allowed: r.allowed,
                    valid_for_ms: r.valid_for_ms,
                })
            })
            .collect();
        if let Some(list) = indexed.as_mut() {
            if !list.is_sorted_by_key(|r| r.index) {
                list.sort_unstable_by_key(|r| r.index);
            }
            if let Some(p) = packed::pack_ratios(version, list, valid_for_ms) {
                return (Vec::new(), Some(p));
            }
        }
    }
    let named = ratios
        .map(|r| proto::DropRatio {
            service: r.service.to_string(),
            bucket: r.bucket.to_string(),
            ratio: r.ratio,
            valid_for_ms: r.valid_for_ms,
            allowed: r.allowed,
        })
        .collect();
    (named, None)
}

/// The rows of report `r` by index when it can be taken so: all its rows packed, of the
/// version `rules` in force. `None`: take it by name (rows by name beside them, or packed
/// at another version, read with the previous rules or refused). A row that cannot be
/// read refuses the whole report, as by name: malformed ([`Reason::Packed`]), or an index
/// of no bucket this tier holds ([`Reason::UnknownBucket`]: past the version's buckets, or
/// of a service this tier was not sent).
pub fn indexed_rows(r: &proto::Report, rules: &Rules) -> Option<Result<Vec<IndexedRow>, Reason>> {
    let p = r.packed.as_ref()?;
    if !r.rates.is_empty() || p.config_version.is_empty() || p.config_version != rules.version {
        return None;
    }
    let known = |rows: &[IndexedRow]| match rules.dense() {
        Some(dense) => rows.last().is_none_or(|x| (x.index as usize) < dense.len()),
        None => rows.iter().all(|x| rules.locate(x.index).is_some()),
    };
    Some(match grl_core::packed::unpack_rows(p) {
        Err(_) => Err(Reason::Packed),
        Ok(rows) if !known(&rows) => Err(Reason::UnknownBucket),
        Ok(rows) => Ok(rows),
    })
}

/// The ratios of instruction `i` by name: its named ones, then its packed ones read with
/// `rules` (the version the instruction belongs to). Packed ratios of another version, or
/// malformed, or of a service `rules` lacks, are left out, and the error says so.
pub fn unpack_ratios(
    i: &proto::Instruction,
    rules: &Rules,
) -> (Vec<proto::DropRatio>, Option<packed::PackError>) {
    let mut out = i.ratios.clone();
    let Some(p) = &i.packed else {
        return (out, None);
    };
    if p.config_version != rules.version {
        return (out, None);
    }
    match packed::unpack_ratios(p, i.valid_for_ms) {
        Ok(list) => {
            out.reserve(list.len());
            for r in list {
                let Some((service, position)) = rules.locate(r.index) else {
                    continue;
                };
                out.push(proto::DropRatio {
                    service: service.to_string(),
                    bucket: rules.services()[service][position].name.clone(),
                    ratio: r.ratio,
                    valid_for_ms: r.valid_for_ms,
                    allowed: r.allowed,
                });
            }
            (out, None)
        }
        Err(e) => (out, Some(e)),
    }
}
