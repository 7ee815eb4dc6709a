//! The hash of a (caller, procedure) pair, for the pair table.
//!
//! Why not a general-purpose hasher: `decide` hashes two short strings per request, and a
//! streaming hasher folds them one after the other (caller, then a length, then procedure,
//! then a finish), a chain of four or five dependent multiplies plus an out-of-line call for
//! strings past 16 bytes. Here each string is folded on its own, so the two folds run side
//! by side, and one multiply joins them: two multiplies deep for names up to 32 bytes.
//!
//! The construction is the folded multiply (the full 128-bit product of two 64-bit words,
//! its halves XORed) over words of the input XORed with random seeds, as in foldhash and
//! wyhash. Seeds are drawn per table: caller names come from request headers, so an
//! attacker must not be able to pick names that all land in the same run of slots. The
//! table compares the full key, so a collision costs a probe, never a wrong answer.

/// A seeded hash of (caller, procedure) pairs.
pub(crate) struct PairHasher {
    seeds: [u64; 6],
}

impl PairHasher {
    /// A hasher with fresh random seeds.
    pub(crate) fn new() -> Self {
        use std::hash::BuildHasher;
        let random = foldhash::fast::RandomState::default();
        // Odd seeds, so that a zero input word never zeroes a product.
        Self {
            seeds: std::array::from_fn(|i| random.hash_one(i) | 1),
        }
    }

    /// The hash of one pair.
    #[inline(always)]
    pub(crate) fn hash(&self, caller: &str, procedure: &str) -> u64 {
        let [s0, s1, s2, s3, s4, s5] = self.seeds;
        let c = fold(caller.as_bytes(), s0, s1, s4);
        let p = fold(procedure.as_bytes(), s2, s3, s5);
        // Each fold takes its name's length in, which separates ("ab", "c") from ("a", "bc").
        folded_multiply(c ^ s4, p ^ s5)
    }
}

#[inline(always)]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// The 16 bytes of `s` from `at`, as a word (also the table's key compare).
#[inline(always)]
pub(super) fn u128_at(s: &[u8], at: usize) -> u128 {
    let mut w = [0; 16];
    w.copy_from_slice(&s[at..at + 16]);
    u128::from_le_bytes(w)
}

/// The 8 bytes of `s` from `at`, as a word.
#[inline(always)]
pub(super) fn u64_at(s: &[u8], at: usize) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(&s[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The 4 bytes of `s` from `at`, as a word.
#[inline(always)]
pub(super) fn u32_at(s: &[u8], at: usize) -> u64 {
    let mut w = [0; 4];
    w.copy_from_slice(&s[at..at + 4]);
    u64::from(u32::from_le_bytes(w))
}

/// Folds one string to 64 bits. Its length goes into the first multiply, so strings that
/// read the same words (`"abcdefgh"` and `"abcdefghabcdefgh"`) still differ.
#[inline(always)]
fn fold(b: &[u8], s0: u64, s1: u64, s2: u64) -> u64 {
    let n = b.len();
    let len = (n as u64).rotate_left(32);
    // Up to 16 bytes, the first and last word (overlapping when shorter) cover every byte.
    // Tested longest first: procedures are usually 8 to 32 bytes.
    let (lo, hi) = if n >= 8 {
        if n > 32 {
            return fold_long(b, s0, s1, s2);
        }
        if n > 16 {
            let head = folded_multiply(u64_at(b, 0) ^ s0, u64_at(b, 8) ^ s1 ^ len);
            let tail = folded_multiply(u64_at(b, n - 16) ^ s2, u64_at(b, n - 8) ^ s1);
            return head ^ tail;
        }
        (u64_at(b, 0), u64_at(b, n - 8))
    } else if n >= 4 {
        (u32_at(b, 0), u32_at(b, n - 4))
    } else if n > 0 {
        (
            u64::from(b[0]),
            u64::from(b[n - 1]) << 8 | u64::from(b[n / 2]),
        )
    } else {
        (0, 0)
    };
    folded_multiply(lo ^ s0, hi ^ s1 ^ len)
}

/// Strings past 32 bytes: 16 bytes per multiply, then the last 16 bytes.
#[inline(never)]
fn fold_long(b: &[u8], s0: u64, s1: u64, s2: u64) -> u64 {
    let n = b.len();
    let mut acc = s2 ^ (n as u64).rotate_left(32);
    let mut at = 0;
    while at + 16 < n {
        acc = folded_multiply(u64_at(b, at) ^ s0 ^ acc, u64_at(b, at + 8) ^ s1);
        at += 16;
    }
    folded_multiply(u64_at(b, n - 16) ^ s0 ^ acc, u64_at(b, n - 8) ^ s2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every string of every length up to 48 over a small alphabet, or a sample of them.
    fn names() -> Vec<String> {
        let mut out = vec![String::new()];
        for len in 1..=48 {
            for variant in 0..40 {
                let s: String = (0..len)
                    .map(|i| (b'a' + ((i * 7 + variant * 13 + len) % 26) as u8) as char)
                    .collect();
                out.push(s);
            }
        }
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn distinct_pairs_get_distinct_hashes() {
        let h = PairHasher::new();
        let names = names();
        let mut seen = HashSet::new();
        let mut pairs = 0;
        for c in names.iter().step_by(7) {
            for p in names.iter().step_by(5) {
                seen.insert(h.hash(c, p));
                pairs += 1;
            }
        }
        assert_eq!(seen.len(), pairs, "64-bit collisions among {pairs} pairs");
    }

    #[test]
    fn a_single_byte_change_anywhere_changes_the_hash() {
        let h = PairHasher::new();
        for len in 1..=48 {
            let base = "p".repeat(len);
            let at_base = h.hash("gw", &base);
            for i in 0..len {
                let mut other = base.clone().into_bytes();
                other[i] = b'q';
                let other = String::from_utf8(other).unwrap();
                assert_ne!(h.hash("gw", &other), at_base, "len {len}, byte {i}");
                assert_ne!(h.hash(&other, "x"), h.hash(&base, "x"), "caller len {len}");
            }
        }
    }

    #[test]
    fn the_split_between_caller_and_procedure_matters() {
        let h = PairHasher::new();
        assert_ne!(h.hash("ab", "c"), h.hash("a", "bc"));
        assert_ne!(h.hash("", "abc"), h.hash("abc", ""));
        assert_ne!(h.hash("abcdefgh", ""), h.hash("abcdefghabcdefgh", ""));
    }

    #[test]
    fn low_bits_spread_over_slots() {
        // The table indexes by the low bits: sequential caller names must not pile up.
        let h = PairHasher::new();
        let slots = 1024;
        let mut counts = vec![0u32; slots];
        for i in 0..(slots * 8) {
            counts[h.hash(&format!("caller-{i}"), "pay.Pay/Card") as usize % slots] += 1;
        }
        let max = *counts.iter().max().unwrap();
        assert!(max <= 28, "a slot got {max} of an average 8");
    }

    #[test]
    fn seeds_differ_between_tables() {
        assert_ne!(
            PairHasher::new().hash("gw", "Pay"),
            PairHasher::new().hash("gw", "Pay")
        );
    }
}
