//! Per-thread state of the hot path: a counter shard index and a random number generator.
//!
//! Both live in one `thread_local!` so that a decision touches thread-local memory once.
//! Shard indices are handed out round-robin when a thread first decides, so two threads
//! that start one after the other count into different cache lines. The generator is
//! wyrand (one multiply per draw), seeded per thread from the shard index and the time the
//! thread first decided; it needs no cryptographic strength, only independence between
//! threads and a uniform 64-bit output.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

struct Local {
    /// `usize::MAX` until the thread's first decision.
    shard: Cell<usize>,
    rng: Cell<u64>,
}

thread_local! {
    static LOCAL: Local = const {
        Local { shard: Cell::new(usize::MAX), rng: Cell::new(0) }
    };
}

#[cold]
fn init(local: &Local) -> usize {
    let shard = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    local.rng.set(splitmix64(nanos ^ splitmix64(shard as u64)));
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
#[inline]
pub(crate) fn shard_and_hit(threshold: u64) -> (usize, bool) {
    LOCAL.with(|l| {
        let mut shard = l.shard.get();
        if shard == usize::MAX {
            shard = init(l);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_about_uniform() {
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
    fn threads_get_distinct_shards() {
        let a = std::thread::spawn(|| shard_and_hit(0).0).join().unwrap();
        let b = std::thread::spawn(|| shard_and_hit(0).0).join().unwrap();
        assert_ne!(a, b);
    }
}
