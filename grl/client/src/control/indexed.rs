//! Wire version 2 on the client's link (see `grl_core::packed`): rows up and ratios down
//! keyed by the bucket's index in the config version instead of its service and name.
//!
//! The client announces version 2 in every report. It reports by index once it holds a
//! config version whose service came with its first bucket index
//! (`ServiceRules.first_index`) and the aggregator's latest instruction on this stream
//! said it speaks version 2 at that same version; otherwise (an older aggregator, a config
//! without indices, a new stream not yet instructed) it reports by name, as a client of
//! version 1 does — the same fallback a zone tier makes toward its controller. Ratios sent
//! by index are read with the version the client holds; those of another version, or of
//! an index past the service's buckets, are ignored and logged.

use grl_core::packed::{self, IndexedRatio, IndexedRow, WIRE_VERSION};
use grl_core::proto;
use tracing::{debug, warn};

use crate::control::Control;
use crate::decide::buckets::UNMATCHED;

/// What the client knows of indices on its link.
#[derive(Debug, Default, Clone)]
pub(crate) struct Indexing {
    /// The index of the first bucket of the client's service in the config version it
    /// holds (`None`: the config came without it, from an older tier).
    pub(crate) first_index: Option<u32>,
    /// The wire version of the aggregator's latest instruction on this stream (0: none yet).
    pub(crate) peer_wire: u32,
    /// The config version of that instruction.
    pub(crate) peer_version: String,
}

impl Indexing {
    /// The first index to report by, when the client reports by index at `version`.
    pub(crate) fn reporting_at(&self, version: &str) -> Option<u32> {
        let both = self.peer_wire >= WIRE_VERSION && !version.is_empty();
        self.first_index
            .filter(|_| both && self.peer_version == version)
    }

    /// A new stream: nothing is known of the peer until its first instruction.
    pub(crate) fn new_stream(&mut self) {
        self.peer_wire = 0;
        self.peer_version.clear();
    }

    /// Takes the wire version and config version of an instruction.
    pub(crate) fn heard(&mut self, ins: &proto::Instruction) {
        self.peer_wire = ins.wire_version;
        self.peer_version.clone_from(&ins.config_version);
    }
}

/// The first index of `service` in an instruction's config, when it is sent once with one.
pub(crate) fn first_index_of(config: &[proto::ServiceRules], service: &str) -> Option<u32> {
    let mut of = config.iter().filter(|s| s.service == service);
    match (of.next(), of.next()) {
        (Some(s), None) => s.first_index,
        _ => None,
    }
}

/// The cell id and index of each bucket of the config, in index order: a bucket's index
/// is its service's first plus its position in the rules; a name repeated (an override
/// named as a bucket) is reported once, at its first position.
pub(crate) fn indexed_cells(c: &Control, first: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
    c.active
        .iter()
        .enumerate()
        .filter(move |(at, id)| **id != UNMATCHED && !c.active[..*at].contains(id))
        .filter_map(move |(at, &id)| Some((id, first.checked_add(u32::try_from(at).ok()?)?)))
}

/// The rows of a report by index, packed, when the client reports so (see
/// [`Indexing::reporting_at`]); `row_rates` gives a cell's offered, dropped and
/// shadow-dropped rates. `None`: the rows go by name.
pub(crate) fn packed_rows(
    c: &Control,
    row_rates: impl Fn(u32) -> (f64, f64, f64),
) -> Option<proto::PackedRows> {
    let first = c.indexing.reporting_at(&c.version)?;
    let rows: Vec<IndexedRow> = indexed_cells(c, first)
        .map(|(id, index)| {
            let (offered, dropped, shadow_dropped) = row_rates(id);
            IndexedRow {
                index,
                offered,
                dropped,
                shadow_dropped,
                clients: 1,
            }
        })
        .collect();
    packed::pack_rows(&c.version, &rows)
}

/// The ratios of instruction `ins` sent by index, as (cell id, ratio), read with the
/// config version the client holds (`ins`'s config already applied). Ratios of another
/// version, unreadable, or of an index outside the service's buckets are left out.
pub(crate) fn indexed_ratios(c: &Control, ins: &proto::Instruction) -> Vec<(u32, IndexedRatio)> {
    let Some(p) = ins.packed.as_ref().filter(|p| !p.index_delta.is_empty()) else {
        return Vec::new();
    };
    let Some(first) = c
        .indexing
        .first_index
        .filter(|_| p.config_version == c.version)
    else {
        warn!(
            packed = %p.config_version, held = %c.version,
            "ratios by index for a config version this client does not index, ignored"
        );
        return Vec::new();
    };
    let list = match packed::unpack_ratios(p, ins.valid_for_ms) {
        Ok(list) => list,
        Err(e) => {
            warn!(error = %e, "the aggregator's ratios by index could not be read, ignored");
            return Vec::new();
        }
    };
    list.into_iter()
        .filter_map(|r| {
            let at = r.index.checked_sub(first).map(|at| at as usize);
            match at.and_then(|at| c.active.get(at)) {
                Some(&id) if id != UNMATCHED => Some((id, r)),
                _ => {
                    debug!(
                        index = r.index,
                        "ratio for an index outside the config, ignored"
                    );
                    None
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::control::report;

    fn rule(name: &str, caller: &str) -> proto::BucketRule {
        proto::BucketRule {
            name: name.into(),
            caller: caller.into(),
            scope: proto::Scope::Global as i32,
            mode: proto::Mode::Deny as i32,
            limit_rps: Some(10.0),
            ..Default::default()
        }
    }

    /// Config `v1` of `payments` (buckets a, b, c from index 40), from a tier of
    /// `wire_version`.
    fn config(wire_version: u32, first_index: Option<u32>) -> proto::Instruction {
        proto::Instruction {
            config_version: "v1".into(),
            has_config: true,
            config: vec![proto::ServiceRules {
                service: "payments".into(),
                first_index,
                buckets: vec![rule("a", "x"), rule("b", "y"), rule("c", "z")],
            }],
            wire_version,
            ..Default::default()
        }
    }

    fn client() -> crate::Client {
        crate::Client::new(crate::ClientConfig::new("payments", "http://x:1"))
    }

    #[test]
    fn rows_go_by_index_only_to_a_version_2_aggregator_at_the_version_held() {
        let c = client();
        let hello = report::hello(&c.inner);
        assert_eq!(hello.wire_version, WIRE_VERSION);
        assert!(hello.packed.is_none());
        // An older aggregator: rows by name.
        c.apply_instruction(&config(0, None));
        let r = report::report(&c.inner);
        assert!(r.packed.is_none() && r.rates.len() == 3, "{r:?}");
        // A version-2 aggregator: rows by index, no names.
        c.apply_instruction(&config(WIRE_VERSION, Some(40)));
        for _ in 0..7 {
            c.decide("y", "P");
        }
        let r = report::report(&c.inner);
        assert!(r.rates.is_empty(), "{r:?}");
        let p = r.packed.as_ref().unwrap();
        assert_eq!(p.config_version, "v1");
        let rows = packed::unpack_rows(p).unwrap();
        assert_eq!(
            rows.iter().map(|r| r.index).collect::<Vec<_>>(),
            [40, 41, 42]
        );
        assert!(rows.iter().all(|r| r.clients == 1));
        // An instruction of another version (the aggregator moved on): by name until the
        // client holds that version too.
        let mut next = config(WIRE_VERSION, Some(40));
        (next.config_version, next.has_config) = ("v2".into(), false);
        c.apply_instruction(&next);
        assert!(report::report(&c.inner).packed.is_none());
        // A new stream: by name until the aggregator is heard again.
        c.apply_instruction(&config(WIRE_VERSION, Some(40)));
        assert!(report::report(&c.inner).packed.is_some());
        assert!(report::hello(&c.inner).packed.is_none());
        assert!(report::report(&c.inner).packed.is_none());
    }

    #[test]
    fn ratios_by_index_are_applied_and_those_out_of_range_or_of_another_version_ignored() {
        let c = client();
        let mut ins = config(WIRE_VERSION, Some(40));
        let ratio = |index, ratio| IndexedRatio {
            index,
            ratio,
            allowed: None,
            valid_for_ms: 60_000,
        };
        ins.valid_for_ms = 60_000;
        ins.packed = packed::pack_ratios(
            "v1",
            &[ratio(39, 0.9), ratio(41, 0.5), ratio(43, 0.9)],
            60_000,
        );
        c.apply_instruction(&ins);
        let ratios = c.status().ratios;
        assert_eq!(ratios["b"], 0.5, "{ratios:?}");
        assert_eq!((ratios["a"], ratios["c"]), (0.0, 0.0), "{ratios:?}");
        // Of another version: ignored, the last ratios stand.
        let mut other = config(WIRE_VERSION, Some(40));
        other.has_config = false;
        other.valid_for_ms = 60_000;
        other.packed = packed::pack_ratios("v0", &[ratio(40, 0.7)], 60_000);
        c.apply_instruction(&other);
        let ratios = c.status().ratios;
        assert_eq!((ratios["a"], ratios["b"]), (0.0, 0.5), "{ratios:?}");
        // Malformed: ignored.
        let mut bad = other.clone();
        let mut p = packed::pack_ratios("v1", &[ratio(40, 0.7)], 60_000).unwrap();
        p.ratio.clear();
        bad.packed = Some(p);
        c.apply_instruction(&bad);
        assert_eq!(c.status().ratios["a"], 0.0);
        // They expire like ratios by name.
        c.inner.expire(Instant::now() + Duration::from_secs(61));
        assert_eq!(c.status().ratios["b"], 0.0);
    }

    #[test]
    fn a_repeated_name_is_reported_once_at_its_first_index() {
        let c = client();
        let mut ins = config(WIRE_VERSION, Some(0));
        let mut o = rule("b", "w");
        o.is_override = true;
        ins.config[0].buckets.insert(0, o);
        c.apply_instruction(&ins);
        let r = report::report(&c.inner);
        let rows = packed::unpack_rows(r.packed.as_ref().unwrap()).unwrap();
        assert_eq!(rows.iter().map(|r| r.index).collect::<Vec<_>>(), [0, 1, 3]);
    }
}
