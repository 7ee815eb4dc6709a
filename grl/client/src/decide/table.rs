//! The pair table: one slot per (caller, procedure) pair seen, allocated once, never resized.
//!
//! Open addressing with linear probing over `2 × max_pairs` slots (rounded up to a power of
//! two, so the load factor stays ≤ 0.5 and probe sequences short). A slot is a
//! `OnceLock<Box<PairEntry>>`: it is written once, by the first thread that claims it, and
//! only read after that, so a lookup is a few acquire loads and a compare of the pair's
//! words (see `pair_key`), with no lock and no allocation. Entries are never removed;
//! [`PairTable::insert`] refuses a pair past `max_pairs` and the caller counts it as
//! overflow instead.
//!
//! Each entry carries what the hot path reads (drop threshold, shadow flag) next to its key,
//! and its decision counters in shards, each on its own cache line: one per owned shard
//! index (see `local`), written by its owner with a plain store, plus one shared shard,
//! inside the entry, for threads past the pool. Two threads deciding the same pair never
//! write the same line. Beside its counts a shard holds the count past which it must take
//! room from its bucket (see `room`).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

use crate::Decision;
use crate::decide::class_table::{ClassTable, Lookup};
use crate::decide::pair_key::{PairKey, PairKeyer};
use crate::decide::room::Taken;
use crate::local;

/// Counter index of each decision; equal to `Decision as usize`.
pub(crate) const DECISIONS: usize = 3;

/// One shard of a pair's counts, on its own cache line.
type Shard = CachePadded<Counts>;

/// A shard's counts per decision, and per decision the count past which it takes room
/// from its bucket (`u64::MAX`: never; only admissions are ever limited). No `Default`:
/// a trip count of 0 would send every admission to the slow path.
struct Counts {
    counts: [AtomicU64; DECISIONS],
    trips: [AtomicU64; DECISIONS],
}

impl Counts {
    fn new() -> Self {
        Self {
            counts: Default::default(),
            trips: std::array::from_fn(|_| AtomicU64::new(u64::MAX)),
        }
    }

    /// Sets when admissions next take room: at the next one when `limited`, else never.
    fn arm(&self, limited: bool) {
        let allow = Decision::Allow as usize;
        let trip = if limited {
            self.counts[allow].load(Ordering::Relaxed)
        } else {
            u64::MAX
        };
        self.trips[allow].store(trip, Ordering::Relaxed);
    }
}

/// One (caller, procedure) pair. `repr(C)` so that what a decision reads (the key it
/// compares, the threshold, the shards' pointer, the mode) shares the entry's first cache
/// line, whatever fields the control plane adds after them.
#[repr(C)]
pub(crate) struct PairEntry {
    /// What lookups compare (see `pair_key`).
    key: PairKey,
    /// `ratio × 2^64`; 0 means never drop. Written by the control plane only.
    pub(crate) threshold: AtomicU64,
    /// Counts per decision, one shard per owned shard index.
    owned: Box<[Shard]>,
    /// The pair's bucket is in shadow mode. Written by the control plane only.
    pub(crate) shadow: AtomicBool,
    /// Its shards' trip counts are armed for a bucket with a room (see [`PairEntry::arm`]).
    limited: AtomicBool,
    /// The bucket cell id (see `buckets`). Written by the control plane only.
    pub(crate) cell: AtomicU32,
    /// `caller` followed by `procedure`, split at `split`, for names and long-name compares.
    names: Box<str>,
    split: usize,
    /// Counts already folded into bucket totals. Used under the control lock only.
    pub(crate) reported: [AtomicU64; DECISIONS],
    /// Counts per decision of threads that own no shard.
    shared: Shard,
    /// The priority classes of the pair's bucket, made the first time its bucket has any.
    /// Written by the control plane only.
    classes: OnceLock<Box<ClassTable>>,
}

impl PairEntry {
    /// A new entry, with a counter shard per owned shard index and the shared one.
    pub(crate) fn new(
        key: PairKey,
        caller: &str,
        procedure: &str,
        cell: u32,
        threshold: u64,
        shadow: bool,
    ) -> Self {
        let mut names = String::with_capacity(caller.len() + procedure.len());
        names.push_str(caller);
        names.push_str(procedure);
        Self {
            key,
            names: names.into_boxed_str(),
            split: caller.len(),
            threshold: AtomicU64::new(threshold),
            shadow: AtomicBool::new(shadow),
            cell: AtomicU32::new(cell),
            limited: AtomicBool::new(false),
            reported: Default::default(),
            owned: (0..local::owned_shards())
                .map(|_| Shard::new(Counts::new()))
                .collect(),
            shared: Shard::new(Counts::new()),
            classes: OnceLock::new(),
        }
    }

    /// Holds the classes of the pair's bucket, name and cell id, highest first (`None`: it
    /// has none).
    pub(crate) fn set_classes<'a>(
        &self,
        classes: Option<impl ExactSizeIterator<Item = (&'a str, u32)>>,
    ) {
        match classes {
            Some(c) => self.classes.get_or_init(Box::default).set(c),
            None => {
                if let Some(t) = self.classes.get() {
                    t.set(std::iter::empty());
                }
            }
        }
    }

    /// Where class `class` of the pair's bucket is decided (see `class_table`).
    #[inline]
    pub(crate) fn class(&self, class: &str) -> Lookup {
        match self.classes.get() {
            Some(t) => t.lookup(class),
            None => Lookup::NoClasses,
        }
    }

    /// The caller name.
    pub(crate) fn caller(&self) -> &str {
        &self.names[..self.split]
    }

    /// The procedure name.
    pub(crate) fn procedure(&self) -> &str {
        &self.names[self.split..]
    }

    #[inline(always)]
    fn is(&self, key: &PairKey, caller: &str, procedure: &str) -> bool {
        self.key.same_words(key)
            && (!key.is_long() || (self.caller() == caller && self.procedure() == procedure))
    }

    /// Decides one request and counts it: the hot path once the pair is known. `room`
    /// takes room from the pair's bucket (by cell id) when the shard's trip count says so.
    #[inline(always)]
    pub(crate) fn decide(&self, room: impl FnOnce(u32) -> Taken) -> Decision {
        let threshold = self.threshold.load(Ordering::Relaxed);
        let (shard, hit) = local::shard_and_hit(threshold);
        // 0 allow, 1 drop, 2 shadow drop, without a branch on the random draw.
        let decision = usize::from(hit) << usize::from(self.shadow.load(Ordering::Relaxed));
        if let Some(s) = self.owned.get(shard) {
            // This thread is the shard's only writer (see `local`).
            let counter = &s.counts[decision];
            let n = counter.load(Ordering::Relaxed) + 1;
            if n > s.trips[decision].load(Ordering::Relaxed) {
                return self.decide_past_trip(s, room);
            }
            counter.store(n, Ordering::Relaxed);
            Decision::from_index(decision)
        } else {
            self.decide_unowned(shard, decision, room)
        }
    }

    /// A decision drawn against another cell's `threshold`, in its mode (`shadow`): a
    /// priority class of the pair's bucket other than its own (see
    /// `Client::decide_in_class`), counted in this pair (its rows hold every class), with
    /// the one thread-local access [`decide`](Self::decide) makes. Returns the decision and
    /// this thread's shard index, where the class's cell counts it too.
    #[inline]
    pub(crate) fn decide_as(&self, threshold: u64, shadow: bool) -> (Decision, usize) {
        let (shard, hit) = local::shard_and_hit(threshold);
        if shard == local::UNSET {
            local::claim();
            return self.decide_as(threshold, shadow);
        }
        let d = Decision::from_index(usize::from(hit) << usize::from(shadow));
        let (s, owned) = match self.owned.get(shard) {
            Some(s) => (s, true),
            None => (&self.shared, false),
        };
        local::add(&s.counts[d as usize], 1, owned, Ordering::Relaxed);
        (d, shard)
    }

    /// An admission past the owned shard `s`'s trip count: room taken from the bucket
    /// moves the trip count on; with none left the request is refused.
    #[cold]
    #[inline(never)]
    fn decide_past_trip(&self, s: &Counts, room: impl FnOnce(u32) -> Taken) -> Decision {
        let allow = Decision::Allow as usize;
        let trip = &s.trips[allow];
        let decision = match room(self.cell.load(Ordering::Relaxed)) {
            Taken::Unlimited => {
                trip.store(u64::MAX, Ordering::Relaxed);
                allow
            }
            Taken::Requests(k) => {
                trip.store(trip.load(Ordering::Relaxed) + k, Ordering::Relaxed);
                allow
            }
            Taken::Spent => self.refused(),
        };
        let counter = &s.counts[decision];
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        Decision::from_index(decision)
    }

    /// The decision index of a request refused for want of room, in the pair's mode.
    fn refused(&self) -> usize {
        1 << usize::from(self.shadow.load(Ordering::Relaxed))
    }

    /// [`decide`](Self::decide) for a thread that owns no shard: it counts into the shared
    /// one, or, on its first decision, claims a shard and decides again.
    #[cold]
    #[inline(never)]
    fn decide_unowned(
        &self,
        shard: usize,
        decision: usize,
        room: impl FnOnce(u32) -> Taken,
    ) -> Decision {
        debug_assert!(shard == local::UNSET || shard == self.owned.len());
        if shard == local::UNSET {
            local::claim();
            return self.decide(room);
        }
        let s = &self.shared;
        let n = s.counts[decision].fetch_add(1, Ordering::Relaxed) + 1;
        if n <= s.trips[decision].load(Ordering::Relaxed) {
            return Decision::from_index(decision);
        }
        match room(self.cell.load(Ordering::Relaxed)) {
            Taken::Unlimited => s.trips[decision].store(u64::MAX, Ordering::Relaxed),
            Taken::Requests(k) => {
                s.trips[decision].fetch_add(k, Ordering::Relaxed);
            }
            Taken::Spent => {
                let refused = self.refused();
                s.counts[decision].fetch_sub(1, Ordering::Relaxed);
                s.counts[refused].fetch_add(1, Ordering::Relaxed);
                return Decision::from_index(refused);
            }
        }
        Decision::from_index(decision)
    }

    /// Arms the shards' trip counts for a bucket with a room (`limited`: admissions take
    /// room from the next one on) or without one (never). Only a change is written: the
    /// control plane syncs every pair whenever a threshold moves, and each shard is a
    /// cache line of another thread's. While armed, a shard keeps the room it took and
    /// has not spent (at most one chunk).
    pub(crate) fn arm(&self, limited: bool) {
        if self.limited.swap(limited, Ordering::Relaxed) == limited {
            return;
        }
        for s in self.owned.iter().chain([&self.shared]) {
            s.arm(limited);
        }
    }

    /// The pair's drop ratio now.
    pub(crate) fn ratio(&self) -> f64 {
        self.threshold.load(Ordering::Relaxed) as f64 / 2f64.powi(64)
    }

    /// Whether the pair is in a shadow bucket.
    pub(crate) fn is_shadow(&self) -> bool {
        self.shadow.load(Ordering::Relaxed)
    }

    /// Counts `n` requests decided as `decision` other than by [`decide`](Self::decide)
    /// (in another cell, or elsewhere): in the shard this thread owns, as `decide` counts.
    /// Returns that shard's index (`local::claim`'s).
    #[inline]
    pub(crate) fn add(&self, decision: Decision, n: u64) -> usize {
        let shard = local::claim();
        let (s, owned) = match self.owned.get(shard) {
            Some(s) => (s, true),
            None => (&self.shared, false),
        };
        local::add(&s.counts[decision as usize], n, owned, Ordering::Relaxed);
        shard
    }

    /// Cumulative counts per decision, summed over shards.
    pub(crate) fn totals(&self) -> [u64; DECISIONS] {
        local::sum(
            self.owned.iter().chain([&self.shared]).map(|s| &s.counts),
            Ordering::Relaxed,
        )
    }

    /// Heap bytes this entry owns (itself, its names, its owned counter shards, its copy
    /// of its bucket's classes).
    fn allocated_bytes(&self) -> usize {
        size_of::<Self>()
            + self.names.len()
            + self.owned.len() * size_of::<Shard>()
            + self.classes.get().map_or(0, |_| size_of::<ClassTable>())
    }
}

/// The fixed-capacity table of pairs.
pub(crate) struct PairTable {
    /// A power of two of them, at least 2, so `len - 1` is the probe mask.
    slots: Box<[OnceLock<Box<PairEntry>>]>,
    len: AtomicUsize,
    max: usize,
    keyer: PairKeyer,
    /// `slot index + 1` of every filled slot in fill order (0 = being written), so that
    /// the control plane walks the pairs held, not every slot, each window.
    filled: Box<[AtomicU32]>,
    filled_len: AtomicUsize,
}

impl PairTable {
    /// A table holding at most `max_pairs` pairs.
    pub(crate) fn new(max_pairs: usize) -> Self {
        let capacity = (max_pairs.max(1) * 2).next_power_of_two();
        Self {
            slots: (0..capacity).map(|_| OnceLock::new()).collect(),
            len: AtomicUsize::new(0),
            max: max_pairs,
            keyer: PairKeyer::new(),
            filled: (0..max_pairs).map(|_| AtomicU32::new(0)).collect(),
            filled_len: AtomicUsize::new(0),
        }
    }

    /// The key of a pair.
    #[inline(always)]
    pub(crate) fn key(&self, caller: &str, procedure: &str) -> PairKey {
        self.keyer.key(caller, procedure)
    }

    /// The entry of a pair already in the table. Always inlined: `decide` is one lookup.
    #[inline(always)]
    pub(crate) fn get(&self, key: &PairKey, caller: &str, procedure: &str) -> Option<&PairEntry> {
        let slots = &*self.slots;
        let mask = slots.len() - 1;
        let mut i = key.hash() as usize & mask;
        // No bound on the probes: at most `max` of the `≥ 2 × max` slots are ever filled,
        // so an empty slot ends every probe sequence.
        loop {
            match slots[i].get() {
                None => return None,
                Some(e) if e.is(key, caller, procedure) => return Some(e),
                Some(_) => i = (i + 1) & mask,
            }
        }
    }

    /// The entry of a pair, inserting `make()` if it is new; `None` when the table is full.
    pub(crate) fn insert(
        &self,
        key: &PairKey,
        caller: &str,
        procedure: &str,
        make: impl FnOnce() -> PairEntry,
    ) -> Option<&PairEntry> {
        let mut make = Some(make);
        let mut pending: Option<Box<PairEntry>> = None;
        let mask = self.slots.len() - 1;
        let mut i = key.hash() as usize & mask;
        let mut probes = 0;
        while probes <= mask {
            match self.slots[i].get() {
                Some(e) if e.is(key, caller, procedure) => {
                    let e: &PairEntry = e;
                    if pending.is_some() {
                        self.len.fetch_sub(1, Ordering::AcqRel);
                    }
                    return Some(e);
                }
                Some(_) => {
                    i = (i + 1) & mask;
                    probes += 1;
                }
                None => {
                    let entry = match (pending.take(), make.take()) {
                        (Some(entry), _) => entry,
                        (None, Some(make)) => {
                            if self.len.fetch_add(1, Ordering::AcqRel) >= self.max {
                                self.len.fetch_sub(1, Ordering::AcqRel);
                                return None;
                            }
                            Box::new(make())
                        }
                        (None, None) => unreachable!("an entry is made once and kept"),
                    };
                    match self.slots[i].set(entry) {
                        Ok(()) => {
                            let n = self.filled_len.fetch_add(1, Ordering::AcqRel);
                            self.filled[n].store(i as u32 + 1, Ordering::Release);
                            return self.slots[i].get().map(|b| &**b);
                        }
                        // Another thread filled this slot first: look at it again.
                        Err(back) => pending = Some(back),
                    }
                }
            }
        }
        if pending.is_some() {
            self.len.fetch_sub(1, Ordering::AcqRel);
        }
        None
    }

    /// Every entry.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &PairEntry> {
        let n = self
            .filled_len
            .load(Ordering::Acquire)
            .min(self.filled.len());
        self.filled[..n].iter().filter_map(|f| {
            let slot = f.load(Ordering::Acquire).checked_sub(1)?;
            self.slots[slot as usize].get().map(|b| &**b)
        })
    }

    /// How many pairs are held.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Heap bytes held: the slot array plus every entry. Bounded by
    /// `slots × 16 + max_pairs × (4 + entry, with its shared shard + names + owned shards ×
    /// 128)`.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.slots.len() * size_of::<OnceLock<Box<PairEntry>>>()
            + self.filled.len() * size_of::<AtomicU32>()
            + self.iter().map(PairEntry::allocated_bytes).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(t: &PairTable, c: &str, p: &str) -> PairEntry {
        PairEntry::new(t.key(c, p), c, p, 0, 0, false)
    }

    #[test]
    fn finds_what_it_inserted_and_refuses_past_the_bound() {
        let t = PairTable::new(3);
        for (c, p) in [("a", "x"), ("ax", ""), ("", "ax")] {
            let h = t.key(c, p);
            assert!(t.get(&h, c, p).is_none());
            let e = t.insert(&h, c, p, || entry(&t, c, p)).unwrap();
            assert_eq!((e.caller(), e.procedure()), (c, p));
            assert!(std::ptr::eq(e, t.get(&h, c, p).unwrap()));
        }
        // Inserting a known pair again finds it, even when full.
        let h = t.key("a", "x");
        assert!(t.insert(&h, "a", "x", || entry(&t, "a", "x")).is_some());
        let h = t.key("b", "x");
        assert!(t.insert(&h, "b", "x", || entry(&t, "b", "x")).is_none());
        assert_eq!(t.len(), 3);
        assert_eq!(t.iter().count(), 3);
    }

    #[test]
    fn short_and_long_pairs_are_found_and_give_back_their_names() {
        let t = PairTable::new(8);
        let long = "c".repeat(40);
        let pairs = [
            ("gw", "Pay/Card"),
            ("", ""),
            (long.as_str(), "x"),
            ("x", long.as_str()),
            ("gateway-eu", "/payments.v1.Payments/Authorize"),
        ];
        for (c, p) in pairs {
            t.insert(&t.key(c, p), c, p, || entry(&t, c, p)).unwrap();
        }
        for (c, p) in pairs {
            let e = t.get(&t.key(c, p), c, p).unwrap();
            assert_eq!((e.caller(), e.procedure()), (c, p));
        }
        // Same bytes, a different split: a different pair.
        for (c, p) in [("gw", "Pay/Car"), ("gwP", "ay/Card"), (&long[1..], "cx")] {
            assert!(t.get(&t.key(c, p), c, p).is_none(), "{c} {p}");
        }
    }

    #[test]
    fn counts_per_decision_across_threads() {
        let t = PairTable::new(4);
        let h = t.key("a", "x");
        let e = t.insert(&h, "a", "x", || entry(&t, "a", "x")).unwrap();
        e.threshold.store(u64::MAX, Ordering::Relaxed);
        // More threads than owned shards, all deciding at once: some count into owned
        // shards with plain stores, the rest share one with `fetch_add`; none is lost.
        let threads = local::owned_shards() + 4;
        let barrier = std::sync::Barrier::new(threads);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    assert_eq!(e.decide(|_| Taken::Unlimited), Decision::Drop);
                    barrier.wait();
                    (1..100_000)
                        .for_each(|_| assert_eq!(e.decide(|_| Taken::Unlimited), Decision::Drop));
                });
            }
        });
        assert_eq!(e.totals(), [0, threads as u64 * 100_000, 0]);
    }

    #[test]
    fn long_names_with_equal_words_are_still_compared_in_full() {
        let t = PairTable::new(2);
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        // A forged collision: an entry for `b` carrying the key of `a`, as if their hashes
        // (a long name's words) were equal.
        let (a, b) = (a.as_str(), b.as_str());
        for (c, p, other_c, other_p) in [(a, "x", b, "x"), ("x", a, "x", b)] {
            let key = t.key(c, p);
            let forged = PairEntry::new(key, other_c, other_p, 0, 0, false);
            assert!(!forged.is(&key, c, p));
            assert!(PairEntry::new(key, c, p, 0, 0, false).is(&key, c, p));
        }
    }

    #[test]
    fn a_threads_first_decision_draws_from_a_seeded_generator() {
        let t = PairTable::new(1);
        let h = t.key("a", "x");
        let e = t.insert(&h, "a", "x", || entry(&t, "a", "x")).unwrap();
        e.threshold.store(1 << 63, Ordering::Relaxed);
        // Each new thread's first decision finds no shard, claims one and draws again: the
        // draw made before the claim (same unseeded state in every thread) is not used.
        let firsts: Vec<Decision> = (0..64)
            .map(|_| {
                std::thread::scope(|s| s.spawn(|| e.decide(|_| Taken::Unlimited)).join().unwrap())
            })
            .collect();
        assert!(firsts.contains(&Decision::Allow) && firsts.contains(&Decision::Drop));
        assert_eq!(e.totals().iter().sum::<u64>(), 64);
    }
}
