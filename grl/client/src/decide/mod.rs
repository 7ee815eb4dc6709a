//! Deciding a request locally, the hot path: the pair table (`table`, keyed by `pair_key`)
//! holds each (caller, procedure) pair's drop threshold; `buckets` holds the config's
//! buckets as cells (and their priority classes), the matcher that maps a new pair to its
//! cell, and the refusals that name a bucket (`buckets::refusal`); `room` the ceiling on
//! what a bucket admits within one window. [`Client::decide`] and
//! its variants (in a class, a batch, explained) find the pair and draw against its
//! threshold; `elsewhere` serves a data plane that decides by itself.

pub(crate) mod buckets;
pub(crate) mod class_table;
mod elsewhere;
pub(crate) mod pair_key;
pub(crate) mod room;
pub(crate) mod table;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::Client;
use buckets::{BucketCell, ClassCell, Classes, Resolver};
use class_table::Lookup;
use room::Taken;
use table::{PairEntry, PairTable};

/// A pair's entry in one table: none when no bucket applies, or the resolver and cell id
/// when the table is full.
type PairLookup<'a> = Result<Option<&'a PairEntry>, (Arc<Resolver>, u32)>;
/// A pair's entry, or past `max_pairs` the resolver and the pair's cell id.
type PairFound<'a> = Result<&'a PairEntry, (Arc<Resolver>, u32)>;

/// What to do with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Decision {
    /// Let it through.
    Allow = 0,
    /// Refuse it (deny mode).
    Drop = 1,
    /// Shadow mode would have refused it: let it through, counted as a virtual drop.
    ShadowDrop = 2,
}

impl Client {
    /// Decides one request of `caller` calling `procedure`: the hot path. Where a bucket
    /// applies in addition to the one the request falls in, each decides and counts it, and
    /// the request is refused if either says drop.
    #[inline]
    pub fn decide(&self, caller: &str, procedure: &str) -> Decision {
        let d = self.decide_own(caller, procedure);
        if self.inner.also_on.load(Ordering::Relaxed) {
            self.decide_in_addition(caller, procedure, d)
        } else {
            d
        }
    }

    /// Decides one request of priority class `class` (e.g. `critical`) of `caller` calling
    /// `procedure`: as [`decide`](Self::decide), in that class of the request's bucket when
    /// the bucket has priority classes (when it must shed, its lowest classes go first). A
    /// class the bucket does not list counts in its default class (`default` if listed,
    /// else its lowest) and in [`crate::ClientStatus::unknown_classes`]; `""` (no class) counts
    /// in the default class without counting as unknown; a bucket without classes ignores the class.
    #[inline]
    pub fn decide_in_class(&self, caller: &str, procedure: &str, class: &str) -> Decision {
        if !self.inner.classes_on.load(Ordering::Relaxed) {
            return self.decide(caller, procedure);
        }
        self.decide_classed(caller, procedure, class)
    }

    /// [`decide_in_class`](Self::decide_in_class) where the config has classes: the same
    /// lookup as [`decide`](Self::decide), then the class in the pair's copy of its
    /// bucket's classes.
    #[inline]
    fn decide_classed(&self, caller: &str, procedure: &str, class: &str) -> Decision {
        let table = &self.inner.table;
        let key = table.key(caller, procedure);
        let own = match table.get(&key, caller, procedure) {
            Some(e) => self.decide_pair_in_class(e, class),
            None => self.decide_new_in_class(caller, procedure, class),
        };
        if self.inner.also_on.load(Ordering::Relaxed) {
            self.decide_in_addition(caller, procedure, own)
        } else {
            own
        }
    }

    /// The decision of a held pair `e` in class `class`: its own threshold, or its class's
    /// cell's.
    #[inline(always)]
    fn decide_pair_in_class(&self, e: &PairEntry, class: &str) -> Decision {
        match self.class_of_pair(e, class) {
            ClassCell::Other(cell) => self.with_cell(cell, |c| {
                let threshold = c.threshold.load(Ordering::Relaxed);
                let (d, shard) = e.decide_as(threshold, c.shadow.load(Ordering::Relaxed));
                c.add_paired(shard, e.cell.load(Ordering::Relaxed), d, 1);
                d
            }),
            _ => e.decide(|id| self.take_room(id)),
        }
    }

    /// The slow path of a decision in a class: a pair not in the table yet.
    #[cold]
    #[inline(never)]
    fn decide_new_in_class(&self, caller: &str, procedure: &str, class: &str) -> Decision {
        self.decide_own_in_class(caller, procedure, class).0
    }

    /// The decision of the request's own bucket in class `class`, and the cell of the
    /// class that decided it when that is not the pair's own.
    pub(crate) fn decide_own_in_class(
        &self,
        caller: &str,
        procedure: &str,
        class: &str,
    ) -> (Decision, Option<u32>) {
        let (pair, found) = self.pair_and_class(caller, procedure, class);
        match found {
            ClassCell::Other(cell) => {
                let d = self.with_cell(cell, |c| {
                    let d = c.draw();
                    count_direct(c, pair.as_ref().ok().copied(), d, 1);
                    d
                });
                (d, Some(cell))
            }
            _ => {
                let d = match pair {
                    Ok(e) => e.decide(|id| self.take_room(id)),
                    Err((resolver, id)) => self.decide_overflow(&resolver, id),
                };
                (d, None)
            }
        }
    }

    /// A request's pair (the resolver and cell id past `max_pairs`) and where class `class`
    /// of its bucket is decided ([`class_of_pair`](Self::class_of_pair), or the resolver
    /// past `max_pairs`); counts an unknown class.
    #[inline]
    fn pair_and_class(
        &self,
        caller: &str,
        procedure: &str,
        class: &str,
    ) -> (PairFound<'_>, ClassCell) {
        let table = &self.inner.table;
        let key = table.key(caller, procedure);
        let pair = match table.get(&key, caller, procedure) {
            Some(e) => Ok(e),
            None => self.pair(caller, procedure),
        };
        let found = match &pair {
            Ok(e) => self.class_of_pair(e, class),
            Err((resolver, id)) => self.counted(resolver.class_cell(*id, class), class),
        };
        (pair, found)
    }

    /// Where class `class` of pair `e`'s bucket is decided: read from the pair's copy of
    /// the bucket's classes, or, where that cannot say (a long class name, a copy being
    /// written), from the resolver; counts an unknown class.
    #[inline]
    fn class_of_pair(&self, e: &PairEntry, class: &str) -> ClassCell {
        let id = e.cell.load(Ordering::Relaxed);
        let found = match e.class(class) {
            Lookup::NoClasses => ClassCell::Own,
            Lookup::Cell(cell) if cell == id => ClassCell::Own,
            Lookup::Cell(cell) => ClassCell::Other(cell),
            Lookup::Unknown => ClassCell::Unknown,
            Lookup::Unsure => self.inner.resolver.load().class_cell(id, class),
        };
        self.counted(found, class)
    }

    /// `found`, having counted it if it is an unknown class.
    #[inline]
    fn counted(&self, found: ClassCell, class: &str) -> ClassCell {
        if found == ClassCell::Unknown && !class.is_empty() {
            self.inner.unknown_classes.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    /// `f` of cell `id`: from the directory of cells, or past its capacity the resolver.
    #[inline]
    fn with_cell<R>(&self, id: u32, f: impl FnOnce(&BucketCell) -> R) -> R {
        match self.inner.cells.get(id) {
            Some(c) => f(c),
            None => f(self.inner.resolver.load().cell(id)),
        }
    }

    /// The decision of the request's own bucket: its pair's threshold, or (a pair not yet
    /// in the table) the bucket the config's matcher gives. The lookup `decide` and
    /// `decide_explained` share.
    #[inline(always)]
    pub(crate) fn decide_own(&self, caller: &str, procedure: &str) -> Decision {
        let table = &self.inner.table;
        let key = table.key(caller, procedure);
        match table.get(&key, caller, procedure) {
            Some(e) => e.decide(|id| self.take_room(id)),
            None => self.decide_new(caller, procedure),
        }
    }

    /// The decision of the bucket that applies in addition, combined with `own`'s.
    #[inline(never)]
    fn decide_in_addition(&self, caller: &str, procedure: &str, own: Decision) -> Decision {
        own.and(self.decide_also(caller, procedure))
    }

    /// The decision of the bucket that applies in addition (allowed when none does).
    #[inline]
    fn decide_also(&self, caller: &str, procedure: &str) -> Decision {
        match self.also_pair(caller, procedure) {
            Ok(None) => Decision::Allow,
            Ok(Some(e)) => e.decide(|id| self.take_room(id)),
            Err((resolver, id)) => self.decide_overflow(&resolver, id),
        }
    }

    /// Decides one call that stands for `n` requests (e.g. Envoy's `hits_addend`): admitted
    /// or refused whole, and all `n` counted as offered under that decision. Batches are not
    /// drawn at random (ten calls a second could not hold a share): a batch is admitted once
    /// the bucket's budget (the book its single requests spend too) holds half of it, and is
    /// then charged whole, so over a few calls the admitted share is the allowance's; a
    /// batch admitted beyond it is paid back by the calls after it. Without an allowance (a
    /// bare ratio) a running sum of the batches' admitted fractions plays the budget's part.
    /// Not the hot path.
    pub fn decide_n(&self, caller: &str, procedure: &str, n: u64) -> Decision {
        self.decide_n_explained(caller, procedure, n).decision
    }

    /// [`decide_n`](Self::decide_n) in one bucket: the pair's (`Ok(None)`: no bucket
    /// applies, allowed), or the bucket's overflow when the table is full.
    fn decide_batch(&self, pair: PairLookup<'_>, n: u64) -> Decision {
        let (pair, id, ratio, shadow) = match pair {
            Ok(None) => return Decision::Allow,
            Ok(Some(e)) => (
                Some(e),
                e.cell.load(Ordering::Relaxed),
                e.ratio(),
                e.is_shadow(),
            ),
            Err((resolver, id)) => {
                let cell = resolver.cell(id);
                (None, id, cell.ratio(), cell.shadow.load(Ordering::Relaxed))
            }
        };
        let d = match (
            self.inner
                .batch_refused(id, ratio, n, tokio::time::Instant::now()),
            shadow,
        ) {
            (false, _) => Decision::Allow,
            (true, false) => Decision::Drop,
            (true, true) => Decision::ShadowDrop,
        };
        match pair {
            Some(e) => {
                e.add(d, n);
            }
            None => {
                let resolver = self.inner.resolver.load();
                resolver.cell(id).overflow[d as usize].fetch_add(n, Ordering::Relaxed);
                self.inner.overflow.fetch_add(n, Ordering::Relaxed);
            }
        }
        d
    }

    /// The cell of class `class` of the bucket a pair falls in, when that is not the
    /// pair's own cell (a bucket with classes, a class other than its default), with the
    /// pair's entry (`None` past `max_pairs`); counts an unknown class.
    pub(crate) fn class_cell_of(
        &self,
        caller: &str,
        procedure: &str,
        class: &str,
    ) -> Option<(u32, Option<&PairEntry>)> {
        match self.pair_and_class(caller, procedure, class) {
            (pair, ClassCell::Other(cell)) => Some((cell, pair.ok())),
            _ => None,
        }
    }

    /// Decides a batch of `n` requests in cell `cell` directly, as
    /// [`decide_n`](Self::decide_n) decides a pair's, counted in the cell's direct counters
    /// and, as a class's single requests are, in the pair's rows (`pair`).
    pub(crate) fn decide_batch_direct(
        &self,
        (cell, pair): (u32, Option<&PairEntry>),
        n: u64,
    ) -> Decision {
        let resolver = self.inner.resolver.load();
        let c = resolver.cell(cell);
        let refused = self
            .inner
            .batch_refused(cell, c.ratio(), n, tokio::time::Instant::now());
        let d = c.decision(refused);
        count_direct(c, pair, d, n);
        d
    }

    /// The slow path: a pair not in the table yet (or that will never fit).
    #[cold]
    #[inline(never)]
    fn decide_new(&self, caller: &str, procedure: &str) -> Decision {
        match self.pair(caller, procedure) {
            Ok(e) => e.decide(|id| self.take_room(id)),
            Err((resolver, id)) => self.decide_overflow(&resolver, id),
        }
    }

    /// Decides a request of a pair past `max_pairs` in cell `id`, counted as overflow.
    #[cold]
    #[inline(never)]
    fn decide_overflow(&self, resolver: &Resolver, id: u32) -> Decision {
        let cell = resolver.cell(id);
        let d = cell.draw();
        cell.overflow[d as usize].fetch_add(1, Ordering::Relaxed);
        self.inner.overflow.fetch_add(1, Ordering::Relaxed);
        d
    }

    /// Room for an admission from cell `id` (see `room`): the slow path of a pair past
    /// its shard's trip count.
    #[cold]
    fn take_room(&self, id: u32) -> Taken {
        let resolver = self.inner.resolver.load();
        resolver
            .cells
            .get(id as usize)
            .map_or(Taken::Unlimited, |c| c.room.take())
    }

    /// The pair's entry, added to the table if new; the resolver and the pair's cell id
    /// when the table is full.
    fn pair(&self, caller: &str, procedure: &str) -> Result<&PairEntry, (Arc<Resolver>, u32)> {
        self.pair_in(&self.inner.table, Resolver::resolve, caller, procedure)
    }

    /// The pair's entry for the bucket that applies in addition (`Ok(None)`: none does).
    fn also_pair(&self, caller: &str, procedure: &str) -> PairLookup<'_> {
        let table = self
            .inner
            .also
            .get_or_init(|| PairTable::new(self.inner.cfg.max_pairs));
        match self.pair_in(table, Resolver::resolve_in_addition, caller, procedure) {
            Ok(e) if e.cell.load(Ordering::Relaxed) == buckets::UNMATCHED => Ok(None),
            Ok(e) => Ok(Some(e)),
            Err((_, buckets::UNMATCHED)) => Ok(None),
            Err(full) => Err(full),
        }
    }

    /// [`pair`](Self::pair) in `table`, whose pairs `resolve` maps to cells.
    fn pair_in<'a>(
        &self,
        table: &'a PairTable,
        resolve: fn(&Resolver, &str, &str) -> u32,
        caller: &str,
        procedure: &str,
    ) -> Result<&'a PairEntry, (Arc<Resolver>, u32)> {
        let inner = &*self.inner;
        let key = table.key(caller, procedure);
        if let Some(e) = table.get(&key, caller, procedure) {
            return Ok(e);
        }
        let resolver = inner.resolver.load_full();
        let id = resolve(&resolver, caller, procedure);
        let cell = resolver.cell(id);
        let entry = table.insert(&key, caller, procedure, || {
            let e = PairEntry::new(
                key,
                caller,
                procedure,
                id,
                cell.threshold.load(Ordering::Relaxed),
                cell.shadow.load(Ordering::Relaxed),
            );
            // Before it is in the table: a config applied meanwhile writes its own after.
            e.set_classes(resolver.classes_of(id).map(Classes::iter));
            e
        });
        match entry {
            Some(e) => {
                e.arm(cell.room.is_limited());
                let now = inner.resolver.load();
                if !Arc::ptr_eq(&resolver, &now) {
                    // The config changed while this pair was being added: resolve again.
                    let id = resolve(&now, caller, procedure);
                    e.cell.store(id, Ordering::Relaxed);
                    e.set_classes(now.classes_of(id).map(Classes::iter));
                    sync_pair(e, &now.cells);
                }
                Ok(e)
            }
            None => Err((resolver, id)),
        }
    }

    /// The name of the bucket `caller` calling `procedure` falls in under the current
    /// config; `None` when it matches none. Not the hot path.
    pub fn bucket(&self, caller: &str, procedure: &str) -> Option<String> {
        self.bucket_in_class(caller, procedure, "")
    }

    /// The name of the bucket, or of its class (`bucket#class`) when the bucket has
    /// priority classes, that decides `caller` calling `procedure` in class `class` (see
    /// [`decide_in_class`](Self::decide_in_class)); `None` when no bucket matches. Not the
    /// hot path.
    pub fn bucket_in_class(&self, caller: &str, procedure: &str, class: &str) -> Option<String> {
        let resolver = self.inner.resolver.load();
        let id = class_id(&resolver, resolver.resolve(caller, procedure), class);
        (id != buckets::UNMATCHED).then(|| resolver.cells[id as usize].name.clone())
    }

    /// The name of the bucket that applies to `caller` calling `procedure` in addition to
    /// [`bucket`](Self::bucket)'s; `None` when none does. Not the hot path.
    pub fn bucket_in_addition(&self, caller: &str, procedure: &str) -> Option<String> {
        let resolver = self.inner.resolver.load();
        let id = resolver.resolve_in_addition(caller, procedure);
        (id != buckets::UNMATCHED).then(|| resolver.cells[id as usize].name.clone())
    }
}

/// Counts `n` requests decided `d` in cell `c` directly (a class's cell, decided without
/// a pair of its own): in the pair's rows when the pair is held (the class's book takes
/// them from `BucketCell::paired`), else in the cell's `direct` counts.
#[inline]
fn count_direct(c: &BucketCell, pair: Option<&PairEntry>, d: Decision, n: u64) {
    match pair {
        Some(e) => count_in_pair(c, e, d, n),
        None => {
            c.direct[d as usize].fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Counts `n` decisions `d` of class cell `c` in their pair `e` too (its
/// `grl_requests_total` rows hold every class), marked to be taken back out of the book of
/// the pair's cell (see `BucketCell::paired`).
#[inline]
fn count_in_pair(c: &BucketCell, e: &PairEntry, d: Decision, n: u64) {
    let shard = e.add(d, n);
    c.add_paired(shard, e.cell.load(Ordering::Relaxed), d, n);
}

/// The cell that decides class `class` of the bucket in cell `id`: its class's, or `id`
/// itself (no classes, the pair's own class, an unknown class or none).
fn class_id(resolver: &Resolver, id: u32, class: &str) -> u32 {
    if id == buckets::UNMATCHED {
        return id;
    }
    match resolver.class_cell(id, class) {
        ClassCell::Other(cell) => cell,
        _ => id,
    }
}

/// Copies a pair's cell threshold and mode into the pair, and re-arms it for the cell's
/// room.
pub(crate) fn sync_pair(e: &PairEntry, cells: &[Arc<BucketCell>]) {
    let cell = &cells[e.cell.load(Ordering::Relaxed) as usize];
    e.threshold
        .store(cell.threshold.load(Ordering::Relaxed), Ordering::Relaxed);
    e.shadow
        .store(cell.shadow.load(Ordering::Relaxed), Ordering::Relaxed);
    e.arm(cell.room.is_limited());
}
