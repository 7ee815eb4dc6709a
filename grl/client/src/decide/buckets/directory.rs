//! Every cell by id, for the hot path: cells are only ever added (ids are stable for the
//! life of the client, see the parent module), so an append-only array of write-once
//! slots lets a decision reach a cell that is not its pair's own (another priority class
//! of its bucket) with two plain loads, instead of a guarded load of the resolver. Up to
//! [`CAPACITY`] cells; a cell beyond that is found through the resolver.

use std::sync::{Arc, OnceLock};

use super::BucketCell;

/// Cells per chunk.
const CHUNK: usize = 256;

/// The most cells the directory holds.
const CAPACITY: usize = CHUNK * CHUNK;

/// [`CHUNK`] cells' write-once slots.
type Chunk = Box<[OnceLock<Arc<BucketCell>>]>;

/// Cells by id, each set once. The chunks' slots are inline (4 KiB), one load fewer on
/// the way to a cell.
pub(crate) struct CellDirectory {
    chunks: [OnceLock<Chunk>; CHUNK],
}

impl CellDirectory {
    /// An empty directory (chunks are allocated as cells arrive).
    pub(crate) fn new() -> Self {
        Self {
            chunks: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// The cell with id `id`, if published.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&BucketCell> {
        let id = id as usize;
        let chunk = self.chunks.get(id / CHUNK)?.get()?;
        chunk[id % CHUNK].get().map(|c| &**c)
    }

    /// Publishes cell `id` (the control plane, before a config that names it applies); a
    /// cell past [`CAPACITY`] is left out.
    pub(crate) fn publish(&self, id: u32, cell: Arc<BucketCell>) {
        let id = id as usize;
        if id >= CAPACITY {
            return;
        }
        let chunk =
            self.chunks[id / CHUNK].get_or_init(|| (0..CHUNK).map(|_| OnceLock::new()).collect());
        // A cell's id is given once: a second publish would be the same cell.
        let _ = chunk[id % CHUNK].set(cell);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_each_published_cell_by_id_up_to_its_capacity() {
        let d = CellDirectory::new();
        assert!(d.get(0).is_none());
        for id in [
            0u32,
            1,
            255,
            256,
            70_000,
            (CAPACITY - 1) as u32,
            CAPACITY as u32,
        ] {
            d.publish(id, Arc::new(BucketCell::new(&format!("b{id}"))));
        }
        assert_eq!(d.get(1).map(|c| c.name.as_str()), Some("b1"));
        assert_eq!(d.get(256).map(|c| c.name.as_str()), Some("b256"));
        let last = (CAPACITY - 1) as u32;
        assert_eq!(
            d.get(last).map(|c| c.name.clone()),
            Some(format!("b{last}"))
        );
        assert!(d.get(2).is_none());
        assert!(d.get(CAPACITY as u32).is_none(), "past the capacity");
    }
}
