//! A bucket's priority classes as the hot path reads them: a copy in each of the bucket's
//! pairs, read with plain atomic loads, no lock and no reference count to take and give
//! back.
//!
//! The [`Resolver`](super::buckets::Resolver) holds the same classes as strings; finding them there
//! cost a guarded load of the resolver (two atomic read-modify-writes) and a string
//! compare per class, which made a decision in a class 2.6x one without (1.8x this way,
//! see BENCHMARKS.md). Here each name is packed into three words (its length and up to
//! [`INLINE`] bytes), so a lookup is a few word compares. The control plane writes a
//! pair's table when it applies a config or adds the pair (`PairEntry::set_classes`),
//! under a sequence number (a seqlock, whose writers take turns): a reader that saw the number change, or odd, asks
//! the resolver instead, as it does for a class name longer than [`INLINE`] bytes or a
//! table of more than [`MAX_CLASSES`] classes. A name in the table longer than that keeps
//! only its length, which no packed request name has, so it never matches here.

use std::sync::atomic::{AtomicU64, Ordering, fence};

/// The most classes a table holds (the config allows 8 per bucket).
pub(crate) const MAX_CLASSES: usize = 8;

/// The longest class name held inline, in bytes.
pub(crate) const INLINE: usize = 16;

/// What a class table says of a class name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The bucket has no classes.
    NoClasses,
    /// The class is decided in this cell id.
    Cell(u32),
    /// The bucket does not list the class.
    Unknown,
    /// Ask the resolver (a long name, or a table being written).
    Unsure,
}

/// One class: its packed name (see [`pack`]) and its cell.
#[derive(Debug, Default)]
struct Slot {
    lo: AtomicU64,
    hi: AtomicU64,
    /// The name's length in the low 32 bits, the cell id in the high ones.
    len_cell: AtomicU64,
}

/// One bucket's classes, highest first, by packed name.
#[derive(Debug, Default)]
pub(crate) struct ClassTable {
    /// The sequence number in the high 32 bits (even while stable, odd while the control
    /// plane writes) and the classes held in the low ones (0: the bucket has none; more
    /// than [`MAX_CLASSES`]: ask the resolver), read in one load.
    state: AtomicU64,
    slots: [Slot; MAX_CLASSES],
}

/// A name as three words: its length, then its bytes zero-padded to [`INLINE`]; `None`
/// when it is longer. Whole-word reads that may overlap (the length tells them apart),
/// not a copy of a variable length: this runs on every decision in a class.
#[inline]
fn pack(name: &str) -> Option<[u64; 3]> {
    let b = name.as_bytes();
    let n = b.len();
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let half = |at: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&b[at..at + 4]);
        u64::from(u32::from_le_bytes(w))
    };
    let (lo, hi) = match n {
        0 => (0, 0),
        1..4 => (
            u64::from(b[0]) | u64::from(b[n / 2]) << 8 | u64::from(b[n - 1]) << 16,
            0,
        ),
        4..8 => (half(0) | half(n - 4) << 32, 0),
        8..=INLINE => (word(0), word(n - 8)),
        _ => return None,
    };
    Some([n as u64, lo, hi])
}

impl ClassTable {
    /// Where class `class` is decided. Lock-free: plain loads, then the state checked
    /// again (a seqlock).
    #[inline]
    pub(crate) fn lookup(&self, class: &str) -> Lookup {
        let state = self.state.load(Ordering::Acquire);
        let (seq, n) = ((state >> 32) as u32, state as u32 as usize);
        if seq & 1 == 1 || n > MAX_CLASSES {
            return Lookup::Unsure;
        }
        if n == 0 {
            return Lookup::NoClasses;
        }
        let Some([len, lo, hi]) = pack(class) else {
            return Lookup::Unsure;
        };
        let mut found = Lookup::Unknown;
        for s in &self.slots[..n] {
            if s.lo.load(Ordering::Relaxed) == lo && s.hi.load(Ordering::Relaxed) == hi {
                let len_cell = s.len_cell.load(Ordering::Relaxed);
                if u64::from(len_cell as u32) == len {
                    found = Lookup::Cell((len_cell >> 32) as u32);
                    break;
                }
            }
        }
        fence(Ordering::Acquire);
        if self.state.load(Ordering::Relaxed) == state {
            found
        } else {
            Lookup::Unsure
        }
    }

    /// Holds `classes` (name and cell id, highest first); none: the bucket has no classes.
    /// Writers take turns: the control plane applying a config and a thread that added the
    /// pair while the config changed may both write.
    pub(crate) fn set<'a>(&self, classes: impl ExactSizeIterator<Item = (&'a str, u32)>) {
        let n = classes.len().min(u32::MAX as usize) as u64;
        let seq = loop {
            let state = self.state.load(Ordering::Relaxed);
            let seq = (state >> 32) as u32;
            if seq & 1 == 0
                && self
                    .state
                    .compare_exchange_weak(
                        state,
                        u64::from(seq.wrapping_add(1)) << 32,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                break seq;
            }
            std::hint::spin_loop();
        };
        fence(Ordering::Release);
        for (s, (name, cell)) in self.slots.iter().zip(classes) {
            // A long name keeps its length alone: no packed name matches it.
            let [len, lo, hi] = pack(name).unwrap_or([name.len() as u64, 0, 0]);
            s.lo.store(lo, Ordering::Relaxed);
            s.hi.store(hi, Ordering::Relaxed);
            s.len_cell.store(
                u64::from(len.min(u64::from(u32::MAX)) as u32) | u64::from(cell) << 32,
                Ordering::Relaxed,
            );
        }
        self.state
            .store(u64::from(seq.wrapping_add(2)) << 32 | n, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_class_by_name_and_says_when_it_cannot() {
        let t = ClassTable::default();
        assert_eq!(t.lookup("critical"), Lookup::NoClasses);
        let long = "a-class-name-longer-than-sixteen";
        t.set([("critical", 4), ("default", 5), (long, 6), ("", 7)].into_iter());
        assert_eq!(t.lookup("critical"), Lookup::Cell(4));
        assert_eq!(t.lookup("default"), Lookup::Cell(5));
        assert_eq!(t.lookup(""), Lookup::Cell(7));
        assert_eq!(t.lookup("critica"), Lookup::Unknown);
        assert_eq!(t.lookup("critical\0"), Lookup::Unknown);
        assert_eq!(t.lookup("sixteen-bytes-ab"), Lookup::Unknown);
        assert_eq!(t.lookup("crit"), Lookup::Unknown);
        assert_eq!(
            t.lookup(long),
            Lookup::Unsure,
            "long names go to the resolver"
        );
        t.set(std::iter::empty());
        assert_eq!(t.lookup("critical"), Lookup::NoClasses);
        let many: Vec<String> = (0..9).map(|i| format!("c{i}")).collect();
        t.set(many.iter().map(|n| (n.as_str(), 1)));
        assert_eq!(t.lookup("c0"), Lookup::Unsure);
    }

    #[test]
    fn names_of_every_length_pack_apart() {
        // Every length up to the inline one, and each name changed at each of its bytes:
        // a byte the packing left out would pack two of them alike.
        let mut names = Vec::new();
        for n in 0..=INLINE {
            let base = "a".repeat(n);
            names.push(base.clone());
            for i in 0..n {
                names.push(format!("{}b{}", &base[..i], &base[i + 1..]));
            }
        }
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                assert_ne!(pack(a), pack(b), "{a:?} and {b:?}");
            }
        }
        assert_eq!(pack(&"z".repeat(INLINE + 1)), None);
    }

    #[test]
    fn a_reader_never_sees_a_table_half_written() {
        let t = std::sync::Arc::new(ClassTable::default());
        // The classes in another order, so that a name read from one table and a cell
        // from the other would give a cell that neither says.
        let a = [("critical", 1), ("default", 2), ("sheddable", 3)];
        let b = [("sheddable", 13), ("default", 12), ("critical", 11)];
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Two writers, as when a pair added during a config change is written by its
        // thread while the control plane writes it too.
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let (t, stop) = (t.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = w;
                    while !stop.load(Ordering::Relaxed) {
                        t.set(if i.is_multiple_of(2) { a } else { b }.into_iter());
                        i += 1;
                        // Stable spells as well as writes, for the reader to see both.
                        for _ in 0..(i % 64) {
                            std::hint::spin_loop();
                        }
                    }
                    i - w
                })
            })
            .collect();
        let (mut seen, mut unsure) = (0, 0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while seen < 100_000 && std::time::Instant::now() < deadline {
            match t.lookup("critical") {
                Lookup::Cell(c) => {
                    assert!(c == 1 || c == 11, "{c}");
                    seen += 1;
                }
                Lookup::Unsure | Lookup::NoClasses => unsure += 1,
                Lookup::Unknown => panic!("critical is listed"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        let writes: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
        assert_eq!(seen, 100_000, "{unsure} lookups unsure, {writes} writes");
        assert!(writes > 1_000, "{writes} writes");
    }
}
