//! Wire version 2: report rows and instruction ratios keyed by bucket index instead of
//! names ([`proto::PackedRows`], [`proto::PackedRatios`]), and the checks that a packed
//! message is well formed. What an index means (a bucket of one config version) is the
//! tiers' business; this module only packs and unpacks.

use thiserror::Error;

use crate::proto;

/// The wire version this build speaks: it sends and takes packed rows and ratios.
pub const WIRE_VERSION: u32 = 2;

/// One row of a report, by bucket index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IndexedRow {
    /// The bucket's index in the config version.
    pub index: u32,
    /// Offered requests per second.
    pub offered: f64,
    /// Dropped requests per second.
    pub dropped: f64,
    /// Shadow-dropped requests per second.
    pub shadow_dropped: f64,
    /// Clients the row sums.
    pub clients: u32,
}

/// One bucket's ratio of an instruction, by bucket index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IndexedRatio {
    /// The bucket's index in the config version.
    pub index: u32,
    /// The drop ratio.
    pub ratio: f64,
    /// The child's allowance, if any.
    pub allowed: Option<f64>,
    /// Its remaining validity.
    pub valid_for_ms: u32,
}

/// A packed message that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PackError {
    /// Two lists that must be as long as each other are not.
    #[error("packed {what}: {got} values for {want} entries")]
    Length {
        /// Which list.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length it must have.
        want: usize,
    },
    /// Indices or positions that do not ascend, or run past their range.
    #[error("packed {what}: not ascending or out of range")]
    Order {
        /// Which list.
        what: &'static str,
    },
}

/// Delta-codes `values` (ascending); `None` when they do not ascend strictly.
fn deltas(values: impl IntoIterator<Item = u32>) -> Option<Vec<u32>> {
    let mut prev: Option<u32> = None;
    values
        .into_iter()
        .map(|v| {
            let d = match prev {
                None => v,
                Some(p) if v > p => v - p,
                Some(_) => return None,
            };
            prev = Some(v);
            Some(d)
        })
        .collect()
}

/// The values of delta-coded `d`, each below `bound`, strictly ascending.
fn undelta(d: &[u32], bound: u64, what: &'static str) -> Result<Vec<u32>, PackError> {
    let mut out = Vec::with_capacity(d.len());
    let mut at: u64 = 0;
    for (i, &x) in d.iter().enumerate() {
        if i > 0 && x == 0 {
            return Err(PackError::Order { what });
        }
        at += u64::from(x);
        if at >= bound {
            return Err(PackError::Order { what });
        }
        out.push(at as u32);
    }
    Ok(out)
}

fn same_len(what: &'static str, got: usize, want: usize) -> Result<(), PackError> {
    if got == want {
        Ok(())
    } else {
        Err(PackError::Length { what, got, want })
    }
}

/// Packs `rows` (indices strictly ascending) for `config_version`; `None` when the indices
/// do not ascend.
pub fn pack_rows(config_version: &str, rows: &[IndexedRow]) -> Option<proto::PackedRows> {
    let mut p = proto::PackedRows {
        config_version: config_version.to_string(),
        index_delta: deltas(rows.iter().map(|r| r.index))?,
        offered: rows.iter().map(|r| r.offered as f32).collect(),
        clients: rows.iter().map(|r| r.clients).collect(),
        ..Default::default()
    };
    let sparse = |rate: fn(&IndexedRow) -> f64| {
        let at: Vec<(u32, f32)> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| rate(r) != 0.0)
            .map(|(i, r)| (i as u32, rate(r) as f32))
            .collect();
        (
            deltas(at.iter().map(|(i, _)| *i)).unwrap_or_default(),
            at.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
        )
    };
    (p.dropped_at, p.dropped) = sparse(|r| r.dropped);
    (p.shadow_dropped_at, p.shadow_dropped) = sparse(|r| r.shadow_dropped);
    Some(p)
}

/// The rows of a packed report, checked: lists of matching lengths, indices and positions
/// strictly ascending within range.
pub fn unpack_rows(p: &proto::PackedRows) -> Result<Vec<IndexedRow>, PackError> {
    let n = p.index_delta.len();
    same_len("offered", p.offered.len(), n)?;
    same_len("clients", p.clients.len(), n)?;
    same_len("dropped", p.dropped.len(), p.dropped_at.len())?;
    same_len(
        "shadow_dropped",
        p.shadow_dropped.len(),
        p.shadow_dropped_at.len(),
    )?;
    let index = undelta(&p.index_delta, 1 << 32, "index_delta")?;
    let mut rows: Vec<IndexedRow> = index
        .into_iter()
        .zip(&p.offered)
        .zip(&p.clients)
        .map(|((index, &offered), &clients)| IndexedRow {
            index,
            offered: f64::from(offered),
            dropped: 0.0,
            shadow_dropped: 0.0,
            clients,
        })
        .collect();
    for (i, v) in undelta(&p.dropped_at, n as u64, "dropped_at")?
        .into_iter()
        .zip(&p.dropped)
    {
        rows[i as usize].dropped = f64::from(*v);
    }
    for (i, v) in undelta(&p.shadow_dropped_at, n as u64, "shadow_dropped_at")?
        .into_iter()
        .zip(&p.shadow_dropped)
    {
        rows[i as usize].shadow_dropped = f64::from(*v);
    }
    Ok(rows)
}

/// Packs `ratios` (indices strictly ascending) for `config_version`, validities other
/// than `valid_for_ms` listed apart; `None` when the indices do not ascend.
pub fn pack_ratios(
    config_version: &str,
    ratios: &[IndexedRatio],
    valid_for_ms: u32,
) -> Option<proto::PackedRatios> {
    let other: Vec<(u32, u32)> = ratios
        .iter()
        .enumerate()
        .filter(|(_, r)| r.valid_for_ms != valid_for_ms)
        .map(|(i, r)| (i as u32, r.valid_for_ms))
        .collect();
    Some(proto::PackedRatios {
        config_version: config_version.to_string(),
        index_delta: deltas(ratios.iter().map(|r| r.index))?,
        ratio: ratios.iter().map(|r| r.ratio as f32).collect(),
        allowed: ratios
            .iter()
            .map(|r| r.allowed.map_or(f32::NAN, |a| a as f32))
            .collect(),
        valid_at: deltas(other.iter().map(|(i, _)| *i)).unwrap_or_default(),
        valid_for_ms: other.into_iter().map(|(_, v)| v).collect(),
    })
}

/// The ratios of a packed instruction whose own validity is `valid_for_ms`, checked as
/// [`unpack_rows`] checks rows.
pub fn unpack_ratios(
    p: &proto::PackedRatios,
    valid_for_ms: u32,
) -> Result<Vec<IndexedRatio>, PackError> {
    let n = p.index_delta.len();
    same_len("ratio", p.ratio.len(), n)?;
    same_len("allowed", p.allowed.len(), n)?;
    same_len("valid_for_ms", p.valid_for_ms.len(), p.valid_at.len())?;
    let index = undelta(&p.index_delta, 1 << 32, "index_delta")?;
    let mut out: Vec<IndexedRatio> = index
        .into_iter()
        .zip(&p.ratio)
        .zip(&p.allowed)
        .map(|((index, &ratio), &allowed)| IndexedRatio {
            index,
            ratio: f64::from(ratio),
            allowed: (!allowed.is_nan()).then_some(f64::from(allowed)),
            valid_for_ms,
        })
        .collect();
    for (i, v) in undelta(&p.valid_at, n as u64, "valid_at")?
        .into_iter()
        .zip(&p.valid_for_ms)
    {
        out[i as usize].valid_for_ms = *v;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn row(index: u32, offered: f64, dropped: f64) -> IndexedRow {
        IndexedRow {
            index,
            offered,
            dropped,
            shadow_dropped: if index == 7 { 2.5 } else { 0.0 },
            clients: 40,
        }
    }

    #[test]
    fn rows_round_trip_in_about_seven_bytes_each() {
        let rows: Vec<_> = (0..22_000u32)
            .map(|i| {
                row(
                    i,
                    70.0 + f64::from(i % 13),
                    if i % 500 == 0 { 3.0 } else { 0.0 },
                )
            })
            .collect();
        let p = pack_rows("v1", &rows).unwrap();
        assert_eq!(unpack_rows(&p).unwrap(), rows);
        let per_row = p.encoded_len() as f64 / rows.len() as f64;
        assert!(per_row < 8.0, "{per_row} bytes a row");
    }

    #[test]
    fn ratios_round_trip_with_their_validity_and_missing_allowances() {
        let ratios: Vec<_> = (0..1_000u32)
            .map(|i| IndexedRatio {
                index: i * 3,
                ratio: if i == 5 { 0.25 } else { 0.0 },
                allowed: (i % 2 == 0).then_some(f64::from(i) + 0.5),
                valid_for_ms: if i == 9 { 1_200 } else { 5_000 },
            })
            .collect();
        let p = pack_ratios("v1", &ratios, 5_000).unwrap();
        assert_eq!(unpack_ratios(&p, 5_000).unwrap(), ratios);
        let per_row = p.encoded_len() as f64 / ratios.len() as f64;
        assert!(per_row < 11.0, "{per_row} bytes a ratio");
    }

    #[test]
    fn indices_that_do_not_ascend_are_not_packed() {
        assert!(pack_rows("v", &[row(3, 1.0, 0.0), row(3, 1.0, 0.0)]).is_none());
        assert!(pack_rows("v", &[row(3, 1.0, 0.0), row(2, 1.0, 0.0)]).is_none());
    }

    #[test]
    fn malformed_packed_rows_are_refused() {
        let good = pack_rows("v", &[row(1, 1.0, 1.0), row(4, 2.0, 0.0)]).unwrap();
        let mut short = good.clone();
        short.offered.pop();
        assert!(matches!(
            unpack_rows(&short),
            Err(PackError::Length {
                what: "offered",
                ..
            })
        ));
        let mut repeat = good.clone();
        repeat.index_delta[1] = 0;
        assert!(matches!(unpack_rows(&repeat), Err(PackError::Order { .. })));
        let mut past = good.clone();
        past.dropped_at = vec![2];
        assert!(unpack_rows(&past).is_err(), "a position past the rows");
        let mut overflow = good;
        overflow.index_delta = vec![u32::MAX, u32::MAX];
        assert!(unpack_rows(&overflow).is_err(), "an index past u32");
    }
}
