//! The key of a (caller, procedure) pair: each name read as four words, and the pair's hash.
//!
//! Why words: `decide` both hashes the pair and compares it with a table entry. Reading
//! each name once into words, with one dispatch on its length, serves both: the hash
//! multiplies the words, and the compare XORs them with the words the entry stored. The
//! compare then has no length dispatch and no byte loop: nine XORs (eight words and the
//! lengths), one test. Against a separate hash and a word-load compare per name this took
//! `decide` from 11.3 to 10.1 ns at best in `cargo bench -p grl-client --bench decision`.
//!
//! For a name of up to 32 bytes the words *are* the name: with its length they determine
//! every byte (overlapping loads cover it, see [`name`]), so equal words and lengths mean
//! equal names. A longer name's words are a seeded hash of it, and the table compares such
//! names in full ([`PairKey::is_long`]).
//!
//! The hash is the folded multiply (the full 128-bit product of two 64-bit words, its
//! halves XORed) of word pairs XORed with random seeds, as in foldhash and wyhash: one
//! multiply per name up to 16 bytes, two up to 32, all independent, XORed together, and one
//! more to mix the result (the table indexes by its low bits). Seeds
//! are drawn per table: caller names come from request headers, so an attacker must not be
//! able to pick names that all land in the same run of slots. The table compares the full
//! key, so a collision costs a probe, never a wrong answer.

/// Names longer than this are compared in full, not by their words.
const WORD_BYTES: usize = 32;

/// A (caller, procedure) pair as words, with its hash.
///
/// Deliberately not `PartialEq`: equal words prove equal names only for short names, so
/// equality is [`PairKey::same_words`] plus the table's full compare of long names.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PairKey {
    /// Caller words, then procedure words.
    words: [u64; 8],
    /// Both lengths, the caller's from bit 0 (31 bits) and the procedure's from bit 32, and
    /// [`LONG`] in the top bit. Lengths of 2^31 or more do not fit; such names are long.
    shape: u64,
    hash: u64,
}

impl PairKey {
    /// The pair's hash; the table indexes by its low bits.
    #[inline(always)]
    pub(crate) fn hash(&self) -> u64 {
        self.hash
    }

    /// Whether `other` has the same words and lengths. For keys that are not
    /// [`is_long`](Self::is_long) that is equality of the names.
    #[inline(always)]
    pub(crate) fn same_words(&self, other: &PairKey) -> bool {
        let diff = (self.words.iter().zip(&other.words))
            .fold(self.shape ^ other.shape, |d, (a, b)| d | (a ^ b));
        diff == 0
    }

    /// Whether either name is longer than 32 bytes, so equal words do not prove equal names.
    #[inline(always)]
    pub(crate) fn is_long(&self) -> bool {
        self.shape & LONG != 0
    }
}

/// The odd constant of the final mix (2^64 / golden ratio): the inputs are seeded already,
/// the mix only spreads their bits.
const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// Set in `shape` when a name is past [`WORD_BYTES`].
const LONG: u64 = 1 << 63;

/// Makes the keys of one table, with its own random seeds.
pub(crate) struct PairKeyer {
    seeds: [u64; 8],
}

impl PairKeyer {
    /// A keyer with fresh random seeds.
    pub(crate) fn new() -> Self {
        use std::hash::BuildHasher;
        let random = foldhash::fast::RandomState::default();
        // Odd seeds, so that a zero input word never zeroes a product.
        Self {
            seeds: std::array::from_fn(|i| random.hash_one(i) | 1),
        }
    }

    /// The key of one pair.
    #[inline(always)]
    pub(crate) fn key(&self, caller: &str, procedure: &str) -> PairKey {
        let s = &self.seeds;
        let (c, p) = (caller.as_bytes(), procedure.as_bytes());
        // Seeds 0-3 for the caller, 4-7 for the procedure: swapping the names changes the
        // hash. Each name's hash takes its length in, which separates ("ab", "c") from
        // ("a", "bc").
        let ([c0, c1, c2, c3], caller_hash, caller_long) = name(c, [s[0], s[1], s[2], s[3]]);
        let ([p0, p1, p2, p3], procedure_hash, procedure_long) = name(p, [s[4], s[5], s[6], s[7]]);
        // Lengths past 2^31 wrap here; such names are long, and compared in full.
        let shape =
            (c.len() as u64 & 0x7fff_ffff) | (p.len() as u64) << 32 | caller_long | procedure_long;
        // The table indexes by the low bits. A folded multiply's low bits carry the low
        // half's low bits, which only the inputs' low bits move, and sequential names
        // (digits at the end, in the high bytes) leave them alike: one more folded multiply
        // mixes every bit into every other (slots overloaded 4x for 1 seed in 36 with none,
        // 1 in 400 with a shift and XOR, 0 in 400 with this, in `low_bits_spread_over_slots`).
        let hash = folded_multiply(caller_hash ^ procedure_hash, MIX);
        PairKey {
            words: [c0, c1, c2, c3, p0, p1, p2, p3],
            shape,
            hash,
        }
    }
}

#[inline(always)]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// The 8 bytes of `s` from `at`, as a word.
#[inline(always)]
fn u64_at(s: &[u8], at: usize) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(&s[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The 4 bytes of `s` from `at`, as a word.
#[inline(always)]
fn u32_at(s: &[u8], at: usize) -> u64 {
    let mut w = [0; 4];
    w.copy_from_slice(&s[at..at + 4]);
    u64::from(u32::from_le_bytes(w))
}

/// A name as four words, its seeded hash, and [`LONG`] if it is past [`WORD_BYTES`].
///
/// Up to 32 bytes, loads from the start and from the end (overlapping when the name is
/// shorter than they are) cover every byte, so with the length the words determine the
/// name. The hash multiplies the words that can be non-zero: one multiply up to 16 bytes,
/// two up to 32. Tested longest first: procedures are usually 8 to 32 bytes.
#[inline(always)]
fn name(b: &[u8], [s0, s1, s2, s3]: [u64; 4]) -> ([u64; 4], u64, u64) {
    let n = b.len();
    let len = (n as u64).rotate_left(32);
    let (lo, hi) = if n >= 8 {
        if n > 16 {
            if n > WORD_BYTES {
                let hash = hash_long(b, s0, s1);
                return ([hash, 0, 0, 0], hash, LONG);
            }
            let w = [
                u64_at(b, 0),
                u64_at(b, 8),
                u64_at(b, n - 16),
                u64_at(b, n - 8),
            ];
            let hash =
                folded_multiply(w[0] ^ s0, w[1] ^ s1 ^ len) ^ folded_multiply(w[2] ^ s2, w[3] ^ s3);
            return (w, hash, 0);
        }
        (u64_at(b, 0), u64_at(b, n - 8))
    } else if n >= 4 {
        (u32_at(b, 0), u32_at(b, n - 4))
    } else if n > 0 {
        // Bytes 0, n/2 and n-1 are every byte of a name of 1 to 3 bytes.
        (
            u64::from(b[0]),
            u64::from(b[n - 1]) << 8 | u64::from(b[n / 2]),
        )
    } else {
        (0, 0)
    };
    ([lo, hi, 0, 0], folded_multiply(lo ^ s0, hi ^ s1 ^ len), 0)
}

/// A seeded hash of a name past 32 bytes: 16 bytes per multiply, then the last 16 bytes.
#[inline(never)]
fn hash_long(b: &[u8], s0: u64, s1: u64) -> u64 {
    let n = b.len();
    let mut acc = (n as u64).rotate_left(32);
    let mut at = 0;
    while at + 16 < n {
        acc = folded_multiply(u64_at(b, at) ^ s0 ^ acc, u64_at(b, at + 8) ^ s1);
        at += 16;
    }
    folded_multiply(u64_at(b, n - 16) ^ s0 ^ acc, u64_at(b, n - 8) ^ s1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    impl PairKeyer {
        fn hash(&self, caller: &str, procedure: &str) -> u64 {
            self.key(caller, procedure).hash()
        }
    }

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
        let h = PairKeyer::new();
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
        let h = PairKeyer::new();
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
        let h = PairKeyer::new();
        assert_ne!(h.hash("ab", "c"), h.hash("a", "bc"));
        assert_ne!(h.hash("", "abc"), h.hash("abc", ""));
        assert_ne!(h.hash("abcdefgh", ""), h.hash("abcdefghabcdefgh", ""));
    }

    #[test]
    fn low_bits_spread_over_slots() {
        // The table indexes by the low bits: sequential caller names must not pile up.
        let h = PairKeyer::new();
        let slots = 1024;
        let mut counts = vec![0u32; 4 * slots];
        // Sequential callers of each length class, then sequential procedures.
        let pairs = (0..slots * 8).flat_map(|i| {
            [
                (format!("c{i}"), "pay.Pay/Card".to_string()),
                (format!("caller-{i}"), "pay.Pay/Card".to_string()),
                (format!("caller-from-zone-{i}"), "pay.Pay/Card".to_string()),
                ("gw".to_string(), format!("pay.v1.Payments/Method{i}")),
            ]
        });
        for (series, (c, p)) in pairs.enumerate() {
            counts[(series % 4) * slots + (h.hash(&c, &p) as usize % slots)] += 1;
        }
        let max = *counts.iter().max().unwrap();
        assert!(max <= 28, "a slot got {max} of an average 8");
    }

    #[test]
    fn seeds_differ_between_tables() {
        assert_ne!(
            PairKeyer::new().hash("gw", "Pay"),
            PairKeyer::new().hash("gw", "Pay")
        );
    }

    #[test]
    fn equal_words_mean_equal_names_up_to_32_bytes() {
        let h = PairKeyer::new();
        let words = [
            "",
            "a",
            "ab",
            "abc",
            "abcdefg",
            "abcdefgh",
            "abcdefghi",
            "pay.Pay/Card",
        ];
        for (a, b) in words.iter().flat_map(|a| words.iter().map(move |b| (a, b))) {
            assert_eq!(h.key(a, "x").same_words(&h.key(b, "x")), a == b, "{a} {b}");
            assert_eq!(h.key("x", a).same_words(&h.key("x", b)), a == b, "{a} {b}");
        }
        for len in 1..=WORD_BYTES + 8 {
            let base = "x".repeat(len);
            let key = h.key(&base, &base);
            assert!(key.same_words(&h.key(&base.clone(), &base.clone())));
            assert_eq!(key.is_long(), len > WORD_BYTES);
            for i in 0..len {
                let mut other = base.clone().into_bytes();
                other[i] = b'y';
                let other = String::from_utf8(other).unwrap();
                for k in [h.key(&other, &base), h.key(&base, &other)] {
                    assert!(!k.same_words(&key), "len {len}, at {i}");
                }
            }
        }
        // Same bytes, a different split.
        assert!(!h.key("gw", "Pay").same_words(&h.key("gwP", "ay")));
        // Names whose words are the same and only the length tells apart.
        let x = |n: usize| "x".repeat(n);
        let same_words_other_length = [
            (String::new(), "\0".to_string()),
            (x(1), x(2)),
            (x(1), x(3)),
            (x(4), x(7)),
            (x(8), x(16)),
            (x(17), x(32)),
        ];
        for (a, b) in &same_words_other_length {
            assert!(!h.key(a, "p").same_words(&h.key(b, "p")), "{a:?} {b:?}");
            assert!(!h.key("c", a).same_words(&h.key("c", b)), "{a:?} {b:?}");
        }
    }
}
