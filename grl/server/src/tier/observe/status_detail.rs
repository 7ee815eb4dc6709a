//! The detail of a status answer for operators (`StatusRequest.detail`): each listed
//! bucket's refused rates and its offered rate by zone, summed over the fresh children.
//! At a region's size (50 zones × 22,000 buckets, over a million rows) this walks every
//! row under the tier's lock, so it works by position, not by name: rows by index add into
//! arrays (a zone's offered rates are one row of a zones × buckets matrix), and only rows
//! sent by name are looked up in a map of the listed buckets, built when one is met.

use std::sync::Arc;

use tokio::time::Instant;

use crate::tier::FastMap;
use crate::tier::engine::child::Liveness;
use crate::tier::engine::children::Children;
use crate::tier::engine::rules::Rules;
use grl_core::proto;

/// How many zones a bucket's status lists ([`proto::BucketStatus::top_zones`]).
const TOP_ZONES: usize = 5;

/// Sums by the position of a bucket in the status list.
pub(super) struct Detail<'a> {
    n: usize,
    dropped: Vec<f64>,
    shadow_dropped: Vec<f64>,
    /// Zones seen (a global controller's children name regions), in order of first sight.
    zones: Vec<&'a str>,
    /// Offered rate of zone `z` in the bucket at position `p`: `offered[z * n + p]`.
    offered: Vec<f32>,
}

impl<'a> Detail<'a> {
    /// The detail of the buckets `keys` (service, name: the status list) over the fresh
    /// `children` of a tier holding `rules`. `first` is the index in `rules` of `keys[0]`
    /// when `keys` is a run of consecutive indices (every bucket, or one service's, of a
    /// version worked by index).
    pub(super) fn of<L: Liveness>(
        children: &'a Children<L>,
        now: Instant,
        rules: &Arc<Rules>,
        keys: &[(&'a str, &'a str)],
        first: Option<u32>,
    ) -> Self {
        let n = keys.len();
        let mut d = Self {
            n,
            dropped: vec![0.0; n],
            shadow_dropped: vec![0.0; n],
            zones: Vec::new(),
            offered: Vec::new(),
        };
        let mut by_name: Option<FastMap<(&str, &str), usize>> = None;
        for c in children.iter().filter(|c| children.counted(c, now)) {
            let place = if c.zone.is_empty() {
                &c.region
            } else {
                &c.zone
            };
            let z = match d.zones.iter().position(|p| *p == place.as_str()) {
                Some(z) => z,
                None => {
                    d.zones.push(place);
                    d.offered.resize(d.zones.len() * n, 0.0);
                    d.zones.len() - 1
                }
            };
            let indexed = c
                .indexed
                .as_ref()
                .filter(|x| c.rates.is_empty() && Arc::ptr_eq(&x.rules, rules));
            match (indexed, first) {
                (Some(x), Some(first)) => {
                    for &(i, r) in &x.rows {
                        let p = i.wrapping_sub(first) as usize;
                        if p < n {
                            d.add(z, p, r.offered, r.dropped, r.shadow_dropped);
                        }
                    }
                }
                _ => {
                    let map = by_name.get_or_insert_with(|| {
                        keys.iter().enumerate().map(|(p, k)| (*k, p)).collect()
                    });
                    for ((service, bucket, ..), r) in c.rows() {
                        if let Some(&p) = map.get(&(service, bucket)) {
                            d.add(z, p, r.offered, r.dropped, r.shadow_dropped);
                        }
                    }
                }
            }
        }
        d
    }

    fn add(&mut self, z: usize, p: usize, offered: f64, dropped: f64, shadow_dropped: f64) {
        self.dropped[p] += dropped;
        self.shadow_dropped[p] += shadow_dropped;
        self.offered[z * self.n + p] += offered as f32;
    }

    /// Fills the bucket at position `p` of the list.
    pub(super) fn fill(&self, p: usize, b: &mut proto::BucketStatus) {
        b.dropped = self.dropped[p];
        b.shadow_dropped = self.shadow_dropped[p];
        let mut top: Vec<(usize, f32)> = (0..self.zones.len())
            .map(|z| (z, self.offered[z * self.n + p]))
            .filter(|(_, o)| *o > 0.0)
            .collect();
        top.sort_by(|x, y| {
            y.1.total_cmp(&x.1)
                .then_with(|| self.zones[x.0].cmp(self.zones[y.0]))
        });
        b.top_zones = top
            .into_iter()
            .take(TOP_ZONES)
            .map(|(z, offered)| proto::ZoneLoad {
                zone: self.zones[z].to_string(),
                offered: f64::from(offered),
            })
            .collect();
    }
}
