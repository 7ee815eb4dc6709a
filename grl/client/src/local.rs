//! Per-thread state of the hot path: the counter shard a thread owns and a random number
//! generator.
//!
//! Both live in one `thread_local!` so that a decision touches thread-local memory once.
//!
//! **Owned shards.** Every pair's counters are split into [`owned_shards`] shards, each on
//! its own cache line, plus one shared shard. A thread claims one owned shard index, for
//! every client of the process, when it first decides, and gives it back when it exits.
//! While it holds the index it is the only writer of that shard in every pair, so it counts
//! with a plain load and store, not a locked read-modify-write: that instruction alone was
//! a third of a decision's cost. A thread that finds every index taken (more live deciding
//! threads than shards) uses the shared shard, counted with `fetch_add`. A claim is an
//! acquire and a release a release, so a thread that takes over an index sees the counts
//! its previous owner left. [`add`] and [`sum`] count and read such shards.
//!
//! The generator is wyrand (one multiply per draw), seeded per thread from the shard index
//! and the time the thread first decided; it needs no cryptographic strength, only
//! independence between threads and a uniform 64-bit output.

use std::cell::Cell;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Which owned shard indices are taken; its length is [`owned_shards`].
static CLAIMED: LazyLock<Box<[AtomicBool]>> = LazyLock::new(|| {
    let parallelism = std::thread::available_parallelism().map_or(4, std::num::NonZero::get);
    // Twice the cores, at least 4, so that the usual runtime threads (workers plus a few
    // blocking ones) each own one.
    let n = (parallelism * 2).next_power_of_two().clamp(4, 64);
    (0..n).map(|_| AtomicBool::new(false)).collect()
});

/// Adds `n` to `counter`, one of a shard's counts: with a plain load and store where the
/// shard is the one this thread owns (`owned`: it is the shard's only writer), with a
/// locked add in the shared shard. `order` orders the store (or the add).
#[inline]
pub(crate) fn add(counter: &AtomicU64, n: u64, owned: bool, order: Ordering) {
    if owned {
        counter.store(counter.load(Ordering::Relaxed) + n, order);
    } else {
        counter.fetch_add(n, order);
    }
}

/// The counts of `shards` (every owned shard and the shared one) summed, loaded with
/// `order`.
pub(crate) fn sum<'a, const N: usize>(
    shards: impl IntoIterator<Item = &'a [AtomicU64; N]>,
    order: Ordering,
) -> [u64; N] {
    let mut out = [0; N];
    for shard in shards {
        for (o, c) in out.iter_mut().zip(shard) {
            *o += c.load(order);
        }
    }
    out
}

/// Seeds differ between threads even when two start in the same nanosecond.
static SEED_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// `LOCAL.shard` before the thread's first decision.
pub(crate) const UNSET: usize = usize::MAX;

struct Local {
    /// The owned shard index, or [`owned_shards`] for the shared shard, or [`UNSET`].
    shard: Cell<usize>,
    rng: Cell<u64>,
}

thread_local! {
    // No destructor, so it stays usable while other thread-locals are being destroyed.
    static LOCAL: Local = const {
        Local { shard: Cell::new(UNSET), rng: Cell::new(0) }
    };
    static OWNERSHIP: Ownership = const { Ownership(Cell::new(UNSET)) };
}

/// Gives the thread's owned shard back when the thread exits.
struct Ownership(Cell<usize>);

impl Drop for Ownership {
    fn drop(&mut self) {
        let shard = self.0.get();
        if shard != UNSET {
            // Decisions made by later destructors of this thread go to the shared shard.
            let _ = LOCAL.try_with(|l| l.shard.set(owned_shards()));
            CLAIMED[shard].store(false, Ordering::Release);
        }
    }
}

/// How many shards a thread can own; a pair has this many plus the shared one.
pub(crate) fn owned_shards() -> usize {
    CLAIMED.len()
}

#[cold]
fn init(local: &Local) -> usize {
    let shared = owned_shards();
    let claimed = CLAIMED.iter().position(|c| {
        c.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    });
    let shard = match claimed {
        Some(i) if OWNERSHIP.try_with(|o| o.0.set(i)).is_ok() => i,
        Some(i) => {
            // The thread is exiting: nothing would give the index back.
            CLAIMED[i].store(false, Ordering::Release);
            shared
        }
        None => shared,
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let sequence = SEED_SEQUENCE.fetch_add(1, Ordering::Relaxed);
    local.rng.set(splitmix64(nanos ^ splitmix64(sequence)));
    local.shard.set(shard);
    shard
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The calling thread's shard index and, when `threshold != 0`, whether a uniform draw
/// falls below it (`draw < threshold`, so a threshold of `ratio × 2^64` hits with
/// probability `ratio`).
///
/// The index is ≤ [`owned_shards`], or [`UNSET`] before the thread's first [`claim`]; the
/// draw is then from an unseeded generator, and the caller claims and draws again. Leaving
/// that check to the caller's unowned branch keeps it off the hot path.
#[inline(always)]
pub(crate) fn shard_and_hit(threshold: u64) -> (usize, bool) {
    LOCAL.with(|l| {
        let shard = l.shard.get();
        if threshold == 0 {
            return (shard, false);
        }
        let s = l.rng.get().wrapping_add(0xa076_1d64_78bd_642f);
        l.rng.set(s);
        let t = u128::from(s).wrapping_mul(u128::from(s ^ 0xe703_7ed1_a0b4_28db));
        let draw = ((t >> 64) as u64) ^ (t as u64);
        (shard, draw < threshold)
    })
}

/// The calling thread's shard index, claiming one (and seeding its generator) on its first
/// call: an owned index, or [`owned_shards`] for the shared shard.
#[cold]
pub(crate) fn claim() -> usize {
    LOCAL.with(|l| match l.shard.get() {
        UNSET => init(l),
        shard => shard,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_about_uniform() {
        claim();
        let threshold = (0.25 * 2f64.powi(64)) as u64;
        let hits = (0..100_000).filter(|_| shard_and_hit(threshold).1).count();
        assert!((23_500..26_500).contains(&hits), "{hits}");
        assert_eq!((0..1000).filter(|_| shard_and_hit(0).1).count(), 0);
        assert_eq!(
            (0..1000).filter(|_| shard_and_hit(u64::MAX).1).count(),
            1000
        );
    }

    #[test]
    fn live_threads_own_distinct_shards_and_exited_threads_give_theirs_back() {
        let owned = owned_shards();
        let barrier = std::sync::Barrier::new(owned + 2);
        let shards: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..owned + 2)
                .map(|_| {
                    s.spawn(|| {
                        let shard = claim();
                        barrier.wait();
                        shard
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut mine: Vec<usize> = shards.iter().copied().filter(|&s| s < owned).collect();
        mine.sort_unstable();
        mine.dedup();
        let live_owned = shards.iter().filter(|&&s| s < owned).count();
        assert_eq!(
            mine.len(),
            live_owned,
            "an owned shard was handed out twice"
        );
        assert!(shards.iter().all(|&s| s <= owned));
        assert!(shards.iter().filter(|&&s| s == owned).count() >= 2);
        // Every thread above has exited and given its shard back, so a new one owns one
        // again (threads of tests running alongside hold some for a moment, never for long).
        let owns_one = (0..200).any(|_| {
            let shard = std::thread::spawn(claim).join().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(10));
            shard < owned
        });
        assert!(owns_one, "no shard came back");
    }
}
