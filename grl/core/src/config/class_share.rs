//! How a bucket's limit is parted among its priority classes (highest first) from what
//! each class offers: first every class is given its floor (`min_share` of the limit, or
//! what it offers if less); then, in priority order, each class may use all of what is
//! left. A class's limit is its floor plus what the classes above it did not take. So over
//! the limit the classes above the boundary are admitted whole, the boundary class in part
//! and the ones below it down to their floors; the admitted sum is the limit.
//!
//! The tiers part every classed bucket's limit this way each tick; the configurator parts a
//! proposed limit this way over a bucket's history to show how each class would fare.

/// The limit of class `rank` of a bucket whose limit is `limit`, whose classes offer
/// `offered(k)` for rank `k` and keep floors `floor(k)` (shares of the limit).
pub fn class_limit(
    limit: f64,
    rank: usize,
    count: usize,
    offered: impl Fn(usize) -> f64,
    floor: impl Fn(usize) -> f64,
) -> f64 {
    if !limit.is_finite() {
        return limit;
    }
    let kept = |k: usize| {
        let o = offered(k);
        let o = if o.is_finite() { o.max(0.0) } else { 0.0 };
        (o, o.min(floor(k).clamp(0.0, 1.0) * limit))
    };
    let mut left = limit - (0..count).map(|k| kept(k).1).sum::<f64>();
    for k in 0..count {
        let (o, floor) = kept(k);
        if k == rank {
            return floor + left.max(0.0);
        }
        left = (left - (o - floor)).max(0.0);
    }
    0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(limit: f64, offered: &[f64], floors: &[f64]) -> Vec<f64> {
        (0..offered.len())
            .map(|r| class_limit(limit, r, offered.len(), |k| offered[k], |k| floors[k]))
            .collect()
    }

    fn admitted(limit: f64, offered: &[f64], floors: &[f64]) -> Vec<f64> {
        let l = limits(limit, offered, floors);
        offered.iter().zip(&l).map(|(o, l)| o.min(*l)).collect()
    }

    #[test]
    fn over_the_limit_the_lowest_classes_go_first() {
        // 2x the limit, 30/40/30 offered.
        let a = admitted(100.0, &[60.0, 80.0, 60.0], &[0.0; 3]);
        assert_eq!(a, vec![60.0, 40.0, 0.0]);
        // A 5 % floor on the lowest class: it keeps 5 of the limit; the sum is the limit.
        let a = admitted(100.0, &[60.0, 80.0, 60.0], &[0.0, 0.0, 0.05]);
        assert!((a[2] - 5.0).abs() < 1e-9 && (a.iter().sum::<f64>() - 100.0).abs() < 1e-9);
        assert!((a[0] - 60.0).abs() < 1e-9, "{a:?}");
        // The top class alone over the limit: it is the one held to it.
        let a = admitted(100.0, &[300.0, 10.0, 10.0], &[0.0; 3]);
        assert_eq!(a, vec![100.0, 0.0, 0.0]);
    }

    #[test]
    fn under_the_limit_every_class_has_room_to_rise() {
        let offered = [20.0, 20.0, 20.0];
        let l = limits(100.0, &offered, &[0.0, 0.0, 0.1]);
        for (o, l) in offered.iter().zip(&l) {
            assert!(l > o, "{l:?}");
        }
        // The highest may take everything the lower ones use above their floors.
        assert!((l[0] - 90.0).abs() < 1e-9, "{l:?}");
        assert!((l[2] - 60.0).abs() < 1e-9, "{l:?}");
    }

    #[test]
    fn a_floor_not_used_is_left_to_the_others() {
        // The lowest class keeps up to 20 % but offers 5: the other 15 go to the others.
        let a = admitted(100.0, &[50.0, 80.0, 5.0], &[0.0, 0.0, 0.2]);
        assert_eq!(a, vec![50.0, 45.0, 5.0]);
    }

    #[test]
    fn the_admitted_sum_is_the_limit_whenever_the_classes_offer_more() {
        let mut rng = 7u64;
        let mut next = || {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..1000 {
            let n = 1 + (next() * 8.0) as usize;
            let offered: Vec<f64> = (0..n).map(|_| next() * 100.0).collect();
            let mut floors: Vec<f64> = (0..n).map(|_| next() * 0.2).collect();
            let sum: f64 = floors.iter().sum();
            if sum > 1.0 {
                floors.iter_mut().for_each(|f| *f /= sum);
            }
            let limit = 10.0 + next() * 200.0;
            let a = admitted(limit, &offered, &floors);
            let total: f64 = offered.iter().sum();
            let want = total.min(limit);
            assert!(
                (a.iter().sum::<f64>() - want).abs() < 1e-6,
                "{offered:?} {floors:?} {limit}: {a:?}"
            );
            for k in 0..n {
                let floor = offered[k].min(floors[k] * limit);
                assert!(a[k] >= floor - 1e-9, "class {k} under its floor: {a:?}");
                // A class is cut only when every class above it is admitted whole.
                if a[k] < offered[k] - 1e-9 {
                    for j in k + 1..n {
                        assert!(
                            a[j] <= offered[j].min(floors[j] * limit) + 1e-9,
                            "class {j} above its floor while {k} is cut: {a:?}"
                        );
                    }
                }
            }
        }
    }
}
