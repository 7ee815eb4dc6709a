//! A bucket's room: the most its pairs may still admit in the control task's current
//! window, whatever their drop ratio lets through.
//!
//! A window's ratio is set from what the window is expected to offer, before it offers
//! it. Traffic that comes all at once inside one window (a client whose requests come
//! once a second, a cron, a fan-out) is over before any ratio can follow it: under a ratio
//! of 0 a step to 30 times the limit passed whole. So each window also has a ceiling, the
//! room its budget holds (see `control::window`), and the hot path keeps to it without a
//! shared write per request:
//!
//! - each of a pair's counter shards carries a trip count next to its counts, on the cache
//!   line its owner thread already writes; a decision compares its new count with it (one
//!   load, one compare, a branch never taken while there is room);
//! - past its trip count a shard takes a chunk of the bucket's room ([`Room::take`]) and
//!   moves its trip count on by as much; with no room left the request is refused, in the
//!   bucket's mode.
//!
//! The control task refills the room every window, and lifts it where no budget applies
//! (no allowance, failing open). Bounds: a window admits at most its room, plus what
//! shards took in earlier windows and have not spent: a shard takes a chunk only once it
//! has spent the last, and a chunk is at most `room / (2 × shards)` of the window it was
//! taken in, so that is at most half of a recent window's room. Requests past a shard's
//! trip count take the slow path (a compare-and-swap on the bucket's room): once per
//! chunk, and for each refused request once the room is spent. Requests decided on a cell
//! without a pair of their own (a priority class other than the pair's, pairs past
//! `max_pairs`, batches) are held by the ratio and the budget alone.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::local;

/// `left` of a room that does not limit.
const UNLIMITED: i64 = i64::MAX;

/// What a bucket may still admit in the current window.
#[derive(Debug)]
pub(crate) struct Room {
    /// Requests left to take; [`UNLIMITED`] when no ceiling applies.
    left: AtomicI64,
    /// How many a shard takes at once.
    chunk: AtomicU64,
}

/// What a shard got from [`Room::take`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    /// No ceiling applies: the shard need not ask again.
    Unlimited,
    /// This many requests (≥ 1).
    Requests(u64),
    /// The window's room is spent.
    Spent,
}

impl Default for Room {
    fn default() -> Self {
        Self {
            left: AtomicI64::new(UNLIMITED),
            chunk: AtomicU64::new(1),
        }
    }
}

impl Room {
    /// Whether a ceiling applies.
    pub(crate) fn is_limited(&self) -> bool {
        self.left.load(Ordering::Relaxed) != UNLIMITED
    }

    /// Sets the room for the next window: `Some(n)` requests, or no ceiling. Returns
    /// whether that changed whether a ceiling applies (the pairs must then be re-armed).
    pub(crate) fn set(&self, room: Option<u64>) -> bool {
        let was = self.is_limited();
        match room {
            Some(n) => {
                let n = n.min(UNLIMITED as u64 - 1);
                let shards = 2 * (local::owned_shards() as u64 + 1);
                self.chunk.store((n / shards).max(1), Ordering::Relaxed);
                self.left.store(n as i64, Ordering::Relaxed);
            }
            None => self.left.store(UNLIMITED, Ordering::Relaxed),
        }
        was != room.is_some()
    }

    /// Takes a chunk of the room, or what is left of it when less.
    pub(crate) fn take(&self) -> Taken {
        let mut left = self.left.load(Ordering::Relaxed);
        loop {
            if left == UNLIMITED {
                return Taken::Unlimited;
            }
            if left <= 0 {
                return Taken::Spent;
            }
            let k = (self.chunk.load(Ordering::Relaxed) as i64).min(left);
            match self.left.compare_exchange_weak(
                left,
                left - k,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Taken::Requests(k as u64),
                Err(now) => left = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_room_gives_out_what_it_holds_in_chunks_and_no_more() {
        let r = Room::default();
        assert!(!r.is_limited());
        assert_eq!(r.take(), Taken::Unlimited);
        assert!(r.set(Some(1000)), "a ceiling now applies");
        assert!(!r.set(Some(1000)));
        let mut got = 0;
        let mut takes = 0;
        while let Taken::Requests(k) = r.take() {
            assert!(k <= 1000 / (2 * (local::owned_shards() as u64 + 1)).max(1));
            got += k;
            takes += 1;
        }
        assert_eq!(got, 1000);
        assert!(takes >= 2 * local::owned_shards(), "{takes} takes");
        assert_eq!(r.take(), Taken::Spent);
        assert!(r.set(None));
        assert_eq!(r.take(), Taken::Unlimited);
        r.set(Some(0));
        assert_eq!(r.take(), Taken::Spent);
    }

    #[test]
    fn threads_taking_at_once_share_the_room_exactly() {
        let r = Room::default();
        r.set(Some(100_000));
        let total = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    while let Taken::Requests(k) = r.take() {
                        total.fetch_add(k, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 100_000);
    }
}
