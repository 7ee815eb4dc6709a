//! Drop-ratio and allowance math, pure: summing reported rates by scope, turning sums and
//! limits into `drop_ratio = max(0, (offered - limit) / offered)` once the sum is over the
//! limit by more than counting noise ([`drop_ratio`]), and sharing a group's allowed rate
//! over its children ([`share`]).
//!
//! Over the limit, or not: a reported rate is a count over the rate horizon `H`, so a sum
//! of random arrivals at the limit `L` reads `L ± sqrt(L / H)`. A bucket at 0.8 L of a
//! few requests a second (4 rps: 16 requests over a 4 s horizon, a deviation of 25 %) would read over its
//! limit one tick in six. Its clients would then switch to what a bucket over its limit
//! gets (no credit saved under the limit, no borrowing ahead of a share; an instance
//! without a share applies the ratio), and drop requests of a bucket under its limit. So
//! the ratio is 0 until the sum exceeds the limit by its noise margin at the limit
//! ([`noise_margin`]`(L, H)`: two deviations and a request over the horizon, the margin
//! the shares use). For random arrivals at the limit that reads over in about one tick in
//! 40, and at 0.8 L almost never. Between the limit and the margin the allowances still
//! sum to the limit (a child's share of it by load), so the bucket is held to its limit
//! by its budgets, not by a ratio. The margin is about 2 % of the limit at 2,000 rps and 50 % at
//! 5 rps (a bucket of 5 rps cannot be told at 1.3 L from one at L over 4 s).
//!
//! Allowances: each tier tells each child, per bucket, the rate it may admit. A tier that
//! owns a bucket's scope shares the bucket's limit over the children in the scope; a tier
//! below shares the allowance it got from its parent over its own children; a client turns
//! its allowance into a drop threshold from its own offered rate every window. Over the
//! limit, the shares are proportional to the offered rates, so every instance of a caller,
//! in every zone, drops the same fraction and the allowances sum to the limit.
//!
//! Headroom under the limit is shared, not copied: while the group is under its allowance,
//! a child may admit its own rate, its part of the unused allowance (half of it shared by
//! load, half evenly over the `n` children: which of them will rise is not known) and its
//! noise margin ([`noise_margin`]: how far above its reported rate its true rate may
//! plausibly be, since a reported rate is a count over a horizon; at least the margin of
//! the group's mean child, since a child that reported nothing over the horizon may still
//! be one of them), and at least its own rate again (a report made just after a child's
//! traffic began counts part of an interval), never more than its rate plus the whole
//! unused part. The parts of the
//! unused allowance sum to it, so when every instance rises at once the allowances sum to
//! at most the limit, the group's rate `R` and the margins, about
//! `L + R + 2 sqrt(N R / H) + N / H` for `N` equal children over a horizon `H` (1.5 L and
//! the margins from 0.5 L), which the clients' budgets hold from the first request. (Copying the whole unused part to every child, as this tier once did, let `N`
//! rising instances admit `N` times the unused part until the tiers heard: 50x the limit.)
//! One instance rising alone gets the room once its urgent report comes back as a share:
//! its rise is found within a few windows (the client's CUSUM), one round trip later. A
//! child that offered nothing gets no allowance: it applies the group's drop ratio from its
//! first request (0 under the limit) until its first report gives it a share. Holding an
//! idle child to a part of the unused allowance instead would drop traffic of a bucket
//! under its limit for that first report's round trip (a zone, or a client, whose traffic
//! begins while the others use most of the limit).

use std::collections::BTreeMap;

use crate::tier::FastMap;

use super::priorities;

use grl_config::Scope;
use grl_core::proto;

/// Where a rate was offered: one row of a tier's totals.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RateKey {
    /// Destination service.
    pub service: String,
    /// Bucket name within the service.
    pub bucket: String,
    /// Region the traffic was offered in ("" when summed over regions).
    pub region: String,
    /// Zone the traffic was offered in ("" when summed over zones).
    pub zone: String,
}

/// Per-second rates of one bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rate {
    /// Offered requests per second (before any drop).
    pub offered: f64,
    /// Dropped requests per second.
    pub dropped: f64,
    /// Virtually dropped requests per second (shadow mode).
    pub shadow_dropped: f64,
    /// Clients that contributed.
    pub clients: u32,
}

impl Rate {
    /// Adds another rate to this one.
    pub fn add(&mut self, o: &Rate) {
        self.offered += o.offered;
        self.dropped += o.dropped;
        self.shadow_dropped += o.shadow_dropped;
        self.clients += o.clients;
    }
}

/// Summed rates by key.
pub type Totals = BTreeMap<RateKey, Rate>;

/// The key and rate of a reported row; an empty zone or region is taken from the report.
pub fn from_wire(r: &proto::BucketRate, zone: &str, region: &str) -> (RateKey, Rate) {
    let (service, bucket, region, zone) = key_of(r, zone, region);
    (
        RateKey {
            service: service.to_string(),
            bucket: bucket.to_string(),
            region: region.to_string(),
            zone: zone.to_string(),
        },
        rate_of(r),
    )
}

/// The key of a reported row, borrowed, as [`from_wire`] keeps it.
pub fn key_of<'a>(r: &'a proto::BucketRate, zone: &'a str, region: &'a str) -> KeyRef<'a> {
    let pick = |own: &'a str, dflt: &'a str| if own.is_empty() { dflt } else { own };
    (
        &r.service,
        &r.bucket,
        pick(&r.region, region),
        pick(&r.zone, zone),
    )
}

/// The rate of a reported row (a row counts at least one client).
pub fn rate_of(r: &proto::BucketRate) -> Rate {
    Rate {
        offered: r.offered,
        dropped: r.dropped,
        shadow_dropped: r.shadow_dropped,
        clients: r.clients.max(1),
    }
}

/// The wire form of one row.
pub fn to_wire(k: &RateKey, r: &Rate) -> proto::BucketRate {
    proto::BucketRate {
        service: k.service.clone(),
        bucket: k.bucket.clone(),
        zone: k.zone.clone(),
        region: k.region.clone(),
        offered: r.offered,
        dropped: r.dropped,
        shadow_dropped: r.shadow_dropped,
        clients: r.clients,
        ..Default::default()
    }
}

/// A row's key, borrowed: (service, bucket, region, zone).
pub type KeyRef<'a> = (&'a str, &'a str, &'a str, &'a str);

impl RateKey {
    /// The key, borrowed.
    pub fn borrowed(&self) -> KeyRef<'_> {
        (&self.service, &self.bucket, &self.region, &self.zone)
    }
}

/// The rows of `totals` with borrowed keys, as [`sum_rows`] and [`compute`] take them.
pub fn rows_of(totals: &Totals) -> impl Iterator<Item = (KeyRef<'_>, &Rate)> + Clone {
    totals.iter().map(|(k, r)| (k.borrowed(), r))
}

/// Sums `rows` (every fresh child's rates, or [`Totals`]) by key, keeping the region (and
/// the zone when `keep_zone`), over borrowed keys: nothing is allocated per row.
pub fn sum_rows<'a>(
    rows: impl IntoIterator<Item = (KeyRef<'a>, &'a Rate)>,
    keep_zone: bool,
) -> FastMap<KeyRef<'a>, Rate> {
    let mut sums: FastMap<KeyRef<'a>, Rate> = FastMap::default();
    for ((service, bucket, region, zone), r) in rows {
        let zone = if keep_zone { zone } else { "" };
        sums.entry((service, bucket, region, zone))
            .or_default()
            .add(r);
    }
    sums
}

/// [`sum_rows`] with owned keys, e.g. to forward a zone's or a region's totals to the
/// parent: only the result's keys are allocated.
pub fn regroup<'a>(
    rows: impl IntoIterator<Item = (KeyRef<'a>, &'a Rate)>,
    keep_zone: bool,
) -> Totals {
    sum_rows(rows, keep_zone)
        .into_iter()
        .map(|((service, bucket, region, zone), r)| {
            (
                RateKey {
                    service: service.to_string(),
                    bucket: bucket.to_string(),
                    region: region.to_string(),
                    zone: zone.to_string(),
                },
                r,
            )
        })
        .collect()
}

/// `max(0, (offered - limit) / offered)` when `offered`, a sum of counts over
/// `horizon_secs`, is over `limit` by more than the noise margin of a rate at the limit
/// (see the module doc); 0 otherwise, and when nothing is offered.
pub fn drop_ratio(offered: f64, limit: f64, horizon_secs: f64) -> f64 {
    if offered.is_nan()
        || offered <= 0.0
        || !limit.is_finite()
        || offered <= limit + noise_margin(limit, horizon_secs)
    {
        0.0
    } else {
        ((offered - limit) / offered).clamp(0.0, 1.0)
    }
}

/// The part of a [`RateKey`] a bucket of `scope` is summed over: "" for global, the region,
/// or the zone.
pub fn scope_key<'a>(scope: Scope, region: &'a str, zone: &'a str) -> &'a str {
    match scope {
        Scope::Global => "",
        Scope::Region => region,
        Scope::Zone => zone,
    }
}

/// One bucket that a tier holds to its limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Limited {
    /// Destination service.
    pub service: String,
    /// Bucket name.
    pub bucket: String,
    /// Scope the limit holds over.
    pub scope: Scope,
    /// The limit in requests per second (a class's: its bucket's, parted by
    /// [`priorities::class_limit`]).
    pub limit: f64,
    /// The bucket is one priority class of a bucket with classes.
    pub class: Option<LimitedClass>,
}

/// One priority class's place among its bucket's classes.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitedClass {
    /// The wire names of the bucket's classes, highest first.
    pub siblings: std::sync::Arc<[String]>,
    /// Their floors, shares of the limit.
    pub floors: std::sync::Arc<[f64]>,
    /// This class's rank.
    pub rank: usize,
}

/// Key of a computed ratio: service, bucket, scope key (see [`scope_key`]).
pub type RatioKey = (String, String, String);

/// A computed ratio with the sum it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Computed {
    /// The offered sum over the scope.
    pub offered: f64,
    /// The limit.
    pub limit: f64,
    /// The drop ratio.
    pub ratio: f64,
}

/// Computes the ratio of every limited bucket whose scope is in `scopes`, for every scope
/// key seen in `rows` (every fresh child's rates over `horizon_secs`, or [`Totals`]; a
/// limited bucket with no traffic gets ratio 0 under key "" for global scope only). Sums
/// over borrowed keys: only the result's keys are allocated.
pub fn compute<'a>(
    limited: &[Limited],
    rows: impl IntoIterator<Item = (KeyRef<'a>, &'a Rate)>,
    scopes: &[Scope],
    horizon_secs: f64,
) -> BTreeMap<RatioKey, Computed> {
    let wanted: FastMap<(&str, &str), &Limited> = limited
        .iter()
        .filter(|l| scopes.contains(&l.scope))
        .map(|l| ((l.service.as_str(), l.bucket.as_str()), l))
        .collect();
    let mut sums: FastMap<(&str, &str, &str), f64> =
        FastMap::with_capacity_and_hasher(wanted.len(), Default::default());
    for l in wanted.values() {
        if l.scope == Scope::Global {
            sums.insert((l.service.as_str(), l.bucket.as_str(), ""), 0.0);
        }
    }
    for ((service, bucket, region, zone), r) in rows {
        if let Some(l) = wanted.get(&(service, bucket)) {
            let key = (
                l.service.as_str(),
                l.bucket.as_str(),
                scope_key(l.scope, region, zone),
            );
            *sums.entry(key).or_default() += r.offered;
        }
    }
    sums.iter()
        .map(|(&(service, bucket, scope), &offered)| {
            let l = wanted[&(service, bucket)];
            let limit = match &l.class {
                None => l.limit,
                Some(c) => priorities::class_limit(
                    l.limit,
                    c.rank,
                    c.siblings.len(),
                    |k| {
                        sums.get(&(service, c.siblings[k].as_str(), scope))
                            .copied()
                            .unwrap_or(0.0)
                    },
                    |k| c.floors[k],
                ),
            };
            let ratio = drop_ratio(offered, limit, horizon_secs);
            (
                (service.to_string(), bucket.to_string(), scope.to_string()),
                Computed {
                    offered,
                    limit,
                    ratio,
                },
            )
        })
        .collect()
}

/// The rate a child offering `child` may admit, out of a group of `children` offering
/// `group` in total that may admit `allowed`, where a reported rate is a count over
/// `horizon_secs` (see the module doc for the headroom under the limit). `None` for a
/// child that offered nothing: it applies the group's drop ratio.
pub fn share(
    allowed: f64,
    child: f64,
    group: f64,
    children: u32,
    horizon_secs: f64,
) -> Option<f64> {
    if child.is_nan() || child < 0.0 || allowed.is_nan() || allowed < 0.0 {
        return None;
    }
    if allowed.is_infinite() {
        return Some(allowed);
    }
    if child <= 0.0 {
        return None;
    }
    let group = group.max(child);
    if group >= allowed {
        return Some(allowed * child / group);
    }
    let unused = allowed - group;
    let n = f64::from(children.max(1));
    let even = unused / n;
    let by_load = if group > 0.0 {
        unused * child / group
    } else {
        even
    };
    let margin = noise_margin(child.max(group / n), horizon_secs);
    // A child may always double: a report made just after its traffic began counts part
    // of an interval, and a child held to its part of the unused allowance would drop
    // its own traffic under the limit until the next report.
    Some(child + unused.min((0.5 * (by_load + even)).max(child) + margin))
}

/// How far above a reported rate `rate` the true rate may plausibly be when the rate is a
/// count over `horizon_secs`: two Poisson deviations of the count, and one request, over
/// the horizon (a caller that sent nothing over it may still be sending one request per
/// horizon).
pub fn noise_margin(rate: f64, horizon_secs: f64) -> f64 {
    let h = horizon_secs.max(1e-3);
    (2.0 * (rate.max(0.0) * h).sqrt() + 1.0) / h
}

/// Whether a child should hear about an allowance change now: present/absent changed, or
/// the value moved by more than 4 % of the larger one.
pub fn allowance_changed(old: Option<f64>, new: Option<f64>) -> bool {
    match (old, new) {
        (Some(a), Some(b)) => (a - b).abs() > 0.04 * a.max(b),
        (None, None) => false,
        _ => true,
    }
}

/// Whether a child should hear about a ratio change now: the admitted fraction `1 - ratio`
/// moved by more than 2 % of itself, or dropping started or stopped.
pub fn changed(old: f64, new: f64) -> bool {
    if (old > 0.0) != (new > 0.0) {
        return true;
    }
    let (a, b) = (1.0 - old, 1.0 - new);
    (a - b).abs() > 0.02 * a.max(1e-3)
}

/// One ratio a child was sent: which bucket (a hash of service and bucket name, so that
/// comparing with the next round allocates nothing), the ratio and the allowance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SentRatio {
    /// Hash of (service, bucket), see [`SentRatio::key_of`].
    pub key: u64,
    /// The drop ratio sent.
    pub ratio: f64,
    /// The allowance sent.
    pub allowed: Option<f64>,
}

impl SentRatio {
    /// The key of a (service, bucket) pair (foldhash with a fixed seed: stable within the
    /// process, cheap).
    pub fn key_of(service: &str, bucket: &str) -> u64 {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::with_seed(0x6772_6c5f_7365_6e74).hash_one((service, bucket))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: &str, region: &str, zone: &str) -> RateKey {
        RateKey {
            service: "pay".into(),
            bucket: b.into(),
            region: region.into(),
            zone: zone.into(),
        }
    }

    fn rate(offered: f64) -> Rate {
        Rate {
            offered,
            clients: 1,
            ..Rate::default()
        }
    }

    fn lim(b: &str, scope: Scope, limit: f64) -> Limited {
        Limited {
            class: None,
            service: "pay".into(),
            bucket: b.into(),
            scope,
            limit,
        }
    }

    #[test]
    fn drop_ratio_is_the_excess_share_once_over_the_noise_margin() {
        assert_eq!(drop_ratio(150.0, 100.0, H), 50.0 / 150.0);
        assert_eq!(drop_ratio(100.0, 100.0, H), 0.0);
        assert_eq!(drop_ratio(50.0, 100.0, H), 0.0);
        assert_eq!(drop_ratio(0.0, 100.0, H), 0.0);
        assert_eq!(drop_ratio(f64::NAN, 100.0, H), 0.0);
        assert!((drop_ratio(1500.0, 100.0, H) - 14.0 / 15.0).abs() < 1e-12);
        // The margin at 100 rps over 4 s is 10.25 rps.
        assert_eq!(drop_ratio(110.0, 100.0, H), 0.0);
        assert!((drop_ratio(111.0, 100.0, H) - 11.0 / 111.0).abs() < 1e-12);
        assert_eq!(drop_ratio(0.2, 0.0, H), 0.0, "one request in 5 s");
        assert_eq!(drop_ratio(1.0, 0.0, H), 1.0);
    }

    /// P(a Poisson count of mean `mean` is over `k`), summed exactly in logs.
    fn poisson_over(mean: f64, k: f64) -> f64 {
        let (mut ln_pmf, mut below) = (-mean, 0.0);
        for n in 0..=(k.floor() as u64) {
            if n > 0 {
                ln_pmf += mean.ln() - (n as f64).ln();
            }
            below += ln_pmf.exp();
        }
        (1.0 - below).max(0.0)
    }

    #[test]
    fn random_arrivals_under_the_limit_are_not_read_over_it() {
        // A sum of Poisson arrivals at rate `r` is a count of mean `r H` over the horizon;
        // it reads over the limit when the count is over `(L + margin) H`.
        let reads_over = |r: f64, l: f64| poisson_over(r * H, (l + noise_margin(l, H)) * H);
        for l in [1.0, 5.0, 20.0, 100.0, 2_000.0, 100_000.0] {
            assert!(
                reads_over(0.8 * l, l) <= 0.005,
                "0.8 L, L {l}: {}",
                reads_over(0.8 * l, l)
            );
            assert!(reads_over(0.95 * l, l) <= 0.02, "0.95 L, L {l}");
            assert!(reads_over(l, l) <= 0.03, "at L {l}: {}", reads_over(l, l));
            assert!(reads_over(3.0 * l, l) >= 0.99 || l < 5.0, "3 L, L {l}");
        }
        for l in [100.0, 2_000.0, 100_000.0] {
            assert!(reads_over(1.5 * l, l) >= 0.999, "1.5 L, L {l}");
        }
        // Read against the limit alone, a bucket of 5 rps at 0.8 L reads over in one tick
        // in eight.
        assert!(poisson_over(4.0 * H, 5.0 * H) > 0.1);
    }

    #[test]
    fn global_sums_over_zones_and_regions() {
        let mut t = Totals::new();
        t.insert(key("g", "eu", "a"), rate(100.0));
        t.insert(key("g", "eu", "b"), rate(50.0));
        t.insert(key("g", "us", "c"), rate(150.0));
        let out = compute(
            &[lim("g", Scope::Global, 200.0)],
            rows_of(&t),
            &[Scope::Global],
            H,
        );
        let c = out[&("pay".into(), "g".into(), String::new())];
        assert_eq!(c.offered, 300.0);
        assert!((c.ratio - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn a_bucket_with_classes_sheds_its_lowest_classes_first_in_each_scope() {
        let names: std::sync::Arc<[String]> = ["p#critical", "p#default", "p#sheddable"]
            .map(String::from)
            .into();
        let limited: Vec<Limited> = (0..3)
            .map(|rank| Limited {
                class: Some(LimitedClass {
                    siblings: names.clone(),
                    floors: [0.0, 0.0, 0.05].into(),
                    rank,
                }),
                ..lim(&names[rank], Scope::Region, 100.0)
            })
            .collect();
        let mut t = Totals::new();
        // eu at 2x the limit, 30/40/30; us under it.
        for (b, eu, us) in [
            ("p#critical", 60.0, 10.0),
            ("p#default", 80.0, 20.0),
            ("p#sheddable", 60.0, 30.0),
        ] {
            t.insert(key(b, "eu", "a"), rate(eu));
            t.insert(key(b, "us", "c"), rate(us));
        }
        let out = compute(&limited, rows_of(&t), &[Scope::Region], H);
        let get = |b: &str, k: &str| out[&("pay".to_string(), b.to_string(), k.to_string())];
        assert_eq!(get("p#critical", "eu").ratio, 0.0);
        assert!((get("p#default", "eu").limit - 35.0).abs() < 1e-9);
        assert!(
            (get("p#sheddable", "eu").limit - 5.0).abs() < 1e-9,
            "its floor"
        );
        let admitted: f64 = names
            .iter()
            .map(|b| get(b, "eu").offered * (1.0 - get(b, "eu").ratio))
            .sum();
        assert!((admitted - 100.0).abs() < 1e-9, "{admitted}");
        for b in names.iter() {
            assert_eq!(get(b, "us").ratio, 0.0, "{b} under the limit in us");
        }
    }

    #[test]
    fn region_and_zone_scopes_hold_their_own_sum() {
        let mut t = Totals::new();
        t.insert(key("r", "eu", "a"), rate(100.0));
        t.insert(key("r", "eu", "b"), rate(100.0));
        t.insert(key("r", "us", "c"), rate(50.0));
        t.insert(key("z", "eu", "a"), rate(300.0));
        t.insert(key("z", "eu", "b"), rate(50.0));
        let limited = [lim("r", Scope::Region, 100.0), lim("z", Scope::Zone, 100.0)];
        let out = compute(&limited, rows_of(&t), &[Scope::Region, Scope::Zone], H);
        let get = |b: &str, k: &str| out[&("pay".to_string(), b.to_string(), k.to_string())];
        assert_eq!(get("r", "eu").ratio, 0.5);
        assert_eq!(get("r", "us").ratio, 0.0);
        assert!((get("z", "a").ratio - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(get("z", "b").ratio, 0.0);
    }

    #[test]
    fn scopes_not_computed_here_are_skipped() {
        let mut t = Totals::new();
        t.insert(key("g", "eu", "a"), rate(500.0));
        let out = compute(
            &[lim("g", Scope::Global, 100.0)],
            rows_of(&t),
            &[Scope::Zone],
            H,
        );
        assert!(out.is_empty());
    }

    #[test]
    fn idle_global_bucket_gets_ratio_zero() {
        let out = compute(
            &[lim("g", Scope::Global, 100.0)],
            rows_of(&Totals::new()),
            &[Scope::Global],
            H,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out.values().next().unwrap().ratio, 0.0);
    }

    #[test]
    fn regroup_drops_the_zone() {
        let mut t = Totals::new();
        t.insert(key("g", "eu", "a"), rate(100.0));
        t.insert(key("g", "eu", "b"), rate(50.0));
        let r = regroup(rows_of(&t), false);
        assert_eq!(r.len(), 1);
        let (k, v) = r.iter().next().unwrap();
        assert_eq!((k.zone.as_str(), v.offered, v.clients), ("", 150.0, 2));
    }

    #[test]
    fn empty_zone_and_region_come_from_the_report() {
        let w = proto::BucketRate {
            service: "pay".into(),
            bucket: "g".into(),
            offered: 10.0,
            ..Default::default()
        };
        let (k, r) = from_wire(&w, "a", "eu");
        assert_eq!((k.zone.as_str(), k.region.as_str()), ("a", "eu"));
        assert_eq!(r.clients, 1);
    }

    #[test]
    fn over_the_limit_shares_are_proportional_and_sum_to_it() {
        let offered = [1000.0, 300.0, 200.0];
        let total: f64 = offered.iter().sum();
        let shares: Vec<f64> = offered
            .iter()
            .map(|o| share(100.0, *o, total, 3, H).unwrap())
            .collect();
        assert!((shares.iter().sum::<f64>() - 100.0).abs() < 1e-9);
        for (s, o) in shares.iter().zip(offered) {
            assert!((1.0 - s / o - (1.0 - 100.0 / total)).abs() < 1e-12);
        }
    }

    const H: f64 = 4.0;

    #[test]
    fn under_the_limit_the_unused_part_is_shared_half_by_load_half_evenly_plus_a_margin() {
        // 900 of 1000 offered by 4 children: 100 unused.
        let m = |r: f64| noise_margin(r, H);
        let c = share(1000.0, 5.0, 900.0, 4, H).unwrap();
        let want = 5.0 + 0.5 * (100.0 * 5.0 / 900.0 + 25.0) + m(225.0);
        assert!((c - want).abs() < 1e-9, "{c} {want}");
        let a = share(1000.0, 50.0, 900.0, 4, H).unwrap();
        // Its part (half by load, half evenly) is under its own rate: it may double.
        let want = 50.0 + 100f64.min(50.0 + m(225.0));
        assert!((a - want).abs() < 1e-9, "{a} {want}");
        let b = share(1000.0, 600.0, 900.0, 4, H).unwrap();
        // Never more than the whole unused part.
        let want = 700.0;
        assert!((b - want).abs() < 1e-9, "{b} {want}");
        // Never more than the child's rate plus the whole unused part.
        assert_eq!(share(10.0, 5.0, 9.9, 2, H), Some(5.1));
        // An idle child applies the ratio until it reports.
        assert_eq!(share(1000.0, 0.0, 900.0, 4, H), None);
        assert_eq!(share(100.0, 0.0, 0.0, 4, H), None);
        // At the limit there is no slack: the shares are the offered rates, and an idle
        // child applies the ratio.
        assert_eq!(share(1000.0, 50.0, 1000.0, 4, H), Some(50.0));
        assert_eq!(share(1000.0, 0.0, 1000.0, 4, H), None);
        assert_eq!(share(f64::INFINITY, 5.0, 10.0, 4, H), Some(f64::INFINITY));
    }

    #[test]
    fn shared_headroom_sums_to_the_limit_plus_the_margins() {
        // 100 children at 0.5 rps under a limit of 100: together they may admit the limit
        // and their margins, not 100 times the unused 50.
        let total: f64 = (0..100)
            .map(|_| share(100.0, 0.5, 50.0, 100, H).unwrap())
            .sum();
        let margins = 100.0 * noise_margin(0.5, H);
        assert!((total - (100.0 + margins)).abs() < 1e-6, "{total}");
        assert!(total < 200.0, "{total}");
    }

    #[test]
    fn the_noise_margin_is_two_deviations_and_a_request_over_the_horizon() {
        assert_eq!(noise_margin(0.0, 4.0), 0.25);
        assert!((noise_margin(1.0, 4.0) - 1.25).abs() < 1e-12);
        assert!((noise_margin(100.0, 4.0) - (2.0 * 20.0 + 1.0) / 4.0).abs() < 1e-12);
    }

    #[test]
    fn allowance_changes_are_relative() {
        assert!(!allowance_changed(None, None));
        assert!(allowance_changed(None, Some(1.0)));
        assert!(!allowance_changed(Some(100.0), Some(103.0)));
        assert!(allowance_changed(Some(100.0), Some(105.0)));
    }

    #[test]
    fn change_is_relative_to_the_admitted_share() {
        assert!(!changed(0.0, 0.0));
        assert!(changed(0.0, 0.01));
        assert!(changed(0.3, 0.0));
        assert!(!changed(0.5, 0.505));
        assert!(changed(0.93, 0.935));
        assert!(!changed(0.93, 0.9305));
    }
}
