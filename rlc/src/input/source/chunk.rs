//! Splitting a long range query into chunks under Prometheus' points-per-series limit.
//!
//! Prometheus refuses range queries returning more than 11,000 points per series. A range
//! query over `[s, e]` at `step` returns `floor((e - s) / step) + 1` points at `s + k·step`,
//! so chunks start on the same grid and hold at most `max_points` points each.

/// Prometheus' hard limit on points per series in one range query.
pub(super) const PROMETHEUS_MAX_POINTS: usize = 11_000;

/// One range query's `[start, end]` (unix seconds, both on the step grid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Chunk {
    /// First evaluation timestamp.
    pub start: i64,
    /// Last evaluation timestamp.
    pub end: i64,
}

impl Chunk {
    /// Points this chunk returns at `step`.
    pub(super) fn points(&self, step: i64) -> i64 {
        (self.end - self.start) / step + 1
    }

    /// Splits into two halves on the step grid, or `None` for a single point.
    pub(super) fn halves(&self, step: i64) -> Option<(Chunk, Chunk)> {
        let n = self.points(step);
        if n < 2 {
            return None;
        }
        let mid = self.start + (n / 2 - 1) * step;
        Some((
            Chunk {
                start: self.start,
                end: mid,
            },
            Chunk {
                start: mid + step,
                end: self.end,
            },
        ))
    }
}

/// Plans chunks covering `[start, end]` at `step`: the first point is `start` rounded up to
/// a multiple of `step` (so steps are aligned the same way for every bucket), each chunk
/// holds at most `max_points` points. Empty when no grid point falls in the range.
pub(super) fn plan(start: i64, end: i64, step: i64, max_points: usize) -> Vec<Chunk> {
    assert!(step > 0, "step must be positive");
    let first = start.div_euclid(step) * step + if start.rem_euclid(step) == 0 { 0 } else { step };
    let per_chunk = max_points.max(1) as i64;
    let mut chunks = Vec::new();
    let mut s = first;
    while s <= end {
        let e = (s + (per_chunk - 1) * step).min(end);
        let e = s + (e - s) / step * step;
        chunks.push(Chunk { start: s, end: e });
        s = e + step;
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_weeks_at_one_minute_needs_four_chunks() {
        let end = 1_700_000_040;
        let chunks = plan(end - 28 * 86_400, end, 60, PROMETHEUS_MAX_POINTS);
        assert_eq!(chunks.len(), 4);
        let total: i64 = chunks.iter().map(|c| c.points(60)).sum();
        assert_eq!(total, 40_321);
        assert!(
            chunks
                .iter()
                .all(|c| c.points(60) <= PROMETHEUS_MAX_POINTS as i64)
        );
        for w in chunks.windows(2) {
            assert_eq!(w[1].start, w[0].end + 60, "chunks are contiguous");
        }
    }

    #[test]
    fn four_weeks_at_five_minutes_is_one_chunk_aligned_on_the_grid() {
        let chunks = plan(
            1_000_001,
            1_000_001 + 28 * 86_400,
            300,
            PROMETHEUS_MAX_POINTS,
        );
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].start % 300, 0);
        assert!(chunks[0].start >= 1_000_001);
    }

    #[test]
    fn halves_cover_the_chunk() {
        let c = Chunk { start: 0, end: 600 };
        let (a, b) = c.halves(60).unwrap();
        assert_eq!(a.points(60) + b.points(60), c.points(60));
        assert_eq!((a.start, b.end), (0, 600));
        assert_eq!(b.start, a.end + 60);
        assert!(Chunk { start: 60, end: 60 }.halves(60).is_none());
    }

    #[test]
    fn empty_range_plans_nothing() {
        assert!(plan(61, 119, 60, 10).is_empty());
    }
}
