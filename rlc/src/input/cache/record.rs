//! The history cache's on-disk records: one length- and CRC-framed record per bucket and
//! measure, appended to the service's log.
//!
//! A record is `len: u32 LE`, `crc32(payload): u32 LE`, then the payload:
//!
//! ```text
//! kind u8 (0 = full: the entry starts here; 1 = tail: replaces the entry from `from` on)
//! measure u8, fingerprint u64, step u32, from i64, slots u32,
//! bucket name (u16 length + UTF-8),
//! presence bitmap (one bit per slot, LSB first), width bitmap (set: the value needs an
//! f64), then each present value as f32 LE or f64 LE
//! ```
//!
//! A value is stored as an f32 only when that is exact (the batched source's per-pair
//! rates are f32 already), so what is read back is bit for bit what the source returned.
//!
//! Slots are the step grid `from, from + step, …`; an absent slot is a step with no point.
//! Decoding stops at the first record that is short or whose CRC does not match: a write
//! torn by a crash loses that record and nothing before it.

use crate::input::source::Measure;

/// The log file's first bytes (a file not starting with them is read as empty).
pub(super) const MAGIC: &[u8; 8] = b"RLCHC01\n";

/// A record's frame: length and CRC.
const FRAME: usize = 8;

/// What a record does to its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The entry is replaced by this record.
    Full,
    /// The entry keeps its slots before `from`; the rest is this record's.
    Tail,
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Record {
    pub kind: Kind,
    pub bucket: String,
    pub measure: Measure,
    pub fingerprint: u64,
    pub step: i64,
    /// Grid time of the first slot.
    pub from: i64,
    /// One value per slot, NaN for no point.
    pub values: Vec<f64>,
}

fn measure_code(m: Measure) -> u8 {
    match m {
        Measure::Offered => 0,
        Measure::ShadowDropped => 1,
        Measure::Dropped => 2,
    }
}

fn measure_of(code: u8) -> Option<Measure> {
    match code {
        0 => Some(Measure::Offered),
        1 => Some(Measure::ShadowDropped),
        2 => Some(Measure::Dropped),
        _ => None,
    }
}

impl Record {
    /// Appends the framed record to `out`.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; FRAME]);
        out.push(match self.kind {
            Kind::Full => 0,
            Kind::Tail => 1,
        });
        out.push(measure_code(self.measure));
        out.extend_from_slice(&self.fingerprint.to_le_bytes());
        out.extend_from_slice(&(self.step as u32).to_le_bytes());
        out.extend_from_slice(&self.from.to_le_bytes());
        out.extend_from_slice(&(self.values.len() as u32).to_le_bytes());
        let name = self.bucket.as_bytes();
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name);
        let mut present = vec![0u8; self.values.len().div_ceil(8)];
        let mut wide = present.clone();
        for (i, v) in self.values.iter().enumerate() {
            if !v.is_nan() {
                present[i / 8] |= 1 << (i % 8);
                if f64::from(*v as f32) != *v {
                    wide[i / 8] |= 1 << (i % 8);
                }
            }
        }
        out.extend_from_slice(&present);
        out.extend_from_slice(&wide);
        for v in self.values.iter().filter(|v| !v.is_nan()) {
            if f64::from(*v as f32) == *v {
                out.extend_from_slice(&(*v as f32).to_le_bytes());
            } else {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        let payload = &out[start + FRAME..];
        let len = (payload.len() as u32).to_le_bytes();
        let crc = crc32(payload).to_le_bytes();
        out[start..start + 4].copy_from_slice(&len);
        out[start + 4..start + FRAME].copy_from_slice(&crc);
    }

    /// Decodes the records of `bytes` (after the magic) in order; returns them and the
    /// length of the whole-record prefix (where a torn or corrupt tail starts).
    pub(super) fn decode_all(bytes: &[u8]) -> (Vec<Record>, usize) {
        let mut out = Vec::new();
        let mut at = 0;
        while bytes.len() - at >= FRAME {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
            let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
            let Some(payload) = bytes.get(at + FRAME..at + FRAME + len) else {
                break;
            };
            if crc32(payload) != crc {
                break;
            }
            let Some(record) = Record::decode(payload) else {
                break;
            };
            out.push(record);
            at += FRAME + len;
        }
        (out, at)
    }

    fn decode(p: &[u8]) -> Option<Record> {
        let mut r = Reader { p, at: 0 };
        let kind = match r.take(1)?[0] {
            0 => Kind::Full,
            1 => Kind::Tail,
            _ => return None,
        };
        let measure = measure_of(r.take(1)?[0])?;
        let fingerprint = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
        let step = i64::from(u32::from_le_bytes(r.take(4)?.try_into().ok()?));
        let from = i64::from_le_bytes(r.take(8)?.try_into().ok()?);
        let slots = u32::from_le_bytes(r.take(4)?.try_into().ok()?) as usize;
        let name_len = usize::from(u16::from_le_bytes(r.take(2)?.try_into().ok()?));
        let bucket = String::from_utf8(r.take(name_len)?.to_vec()).ok()?;
        let present = r.take(slots.div_ceil(8))?;
        let wide = r.take(slots.div_ceil(8))?;
        let mut values = Vec::with_capacity(slots);
        for i in 0..slots {
            let bit = 1 << (i % 8);
            values.push(if present[i / 8] & bit == 0 {
                f64::NAN
            } else if wide[i / 8] & bit != 0 {
                f64::from_le_bytes(r.take(8)?.try_into().ok()?)
            } else {
                f64::from(f32::from_le_bytes(r.take(4)?.try_into().ok()?))
            });
        }
        (step > 0 && r.at == p.len()).then_some(Record {
            kind,
            bucket,
            measure,
            fingerprint,
            step,
            from,
            values,
        })
    }
}

struct Reader<'a> {
    p: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.p.get(self.at..self.at + n)?;
        self.at += n;
        Some(s)
    }
}

/// CRC-32 (IEEE 802.3, reflected), table-driven.
pub(super) fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut c = !0u32;
    for &b in bytes {
        c = TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// FNV-1a, 64 bits: a hash that is the same in every build (for fingerprints and file
/// names).
pub(super) fn fnv64(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.as_bytes().iter().chain(&[0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(kind: Kind, from: i64, values: Vec<f64>) -> Record {
        Record {
            kind,
            bucket: "gateway-pay".into(),
            measure: Measure::Offered,
            fingerprint: 42,
            step: 300,
            from,
            values,
        }
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn records_round_trip_with_gaps() {
        let a = sample(Kind::Full, 600, vec![1.5, f64::NAN, 0.1, f64::NAN]);
        let b = sample(Kind::Tail, 1200, vec![7.0]);
        let mut bytes = Vec::new();
        a.encode(&mut bytes);
        b.encode(&mut bytes);
        let (got, len) = Record::decode_all(&bytes);
        assert_eq!(len, bytes.len());
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].values[0], 1.5);
        assert_eq!(
            got[0].values[2], 0.1,
            "a value that is no f32 is kept exactly"
        );
        assert!(got[0].values[1].is_nan() && got[0].values[3].is_nan());
        assert_eq!(got[1], b);
    }

    #[test]
    fn a_torn_last_record_is_cut_at_every_byte_and_the_first_is_kept() {
        let a = sample(Kind::Full, 600, vec![1.0, 2.0, 3.0]);
        let b = sample(Kind::Tail, 900, vec![4.0, 5.0]);
        let mut bytes = Vec::new();
        a.encode(&mut bytes);
        let first = bytes.len();
        b.encode(&mut bytes);
        for cut in first..bytes.len() {
            let (got, len) = Record::decode_all(&bytes[..cut]);
            assert_eq!((got.len(), len), (1, first), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(
            Record::decode_all(&flipped).1,
            first,
            "a flipped bit ends the log"
        );
    }
}
