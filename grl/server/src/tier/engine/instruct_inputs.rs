//! What instructions are made from: a tick's ratios for the scopes this tier owns and its
//! offered sums by bucket, and, for one round of instructions by name, those and the
//! parent's ratios indexed by borrowed names.

use std::collections::BTreeMap;

use super::parent_state::{FromParent, Parent};
use super::ratios::SentRatio;
use super::ratios::{self, Computed, RatioKey};
use super::rules::Rules;
use super::scopes::Owned;
use crate::tier::FastMap;

/// A tick's ratios of the scopes this tier computes (`scopes`), and its offered rate by
/// (service, bucket), from `rows` (the children's rows or their sums, rates over
/// `horizon_secs`).
pub(super) fn ratios_and_offered<'a>(
    limited: &[ratios::Limited],
    rows: impl Iterator<Item = (ratios::KeyRef<'a>, &'a ratios::Rate)> + Clone,
    owned: &Owned,
    horizon_secs: f64,
) -> (
    BTreeMap<RatioKey, Computed>,
    BTreeMap<(String, String), f64>,
) {
    let computed = ratios::compute(limited, rows.clone(), &owned.computed(), horizon_secs);
    let mut offered: FastMap<(&str, &str), f64> = FastMap::default();
    for ((service, bucket, ..), r) in rows {
        *offered.entry((service, bucket)).or_default() += r.offered;
    }
    let offered = offered
        .into_iter()
        .map(|((s, b), o)| ((s.to_string(), b.to_string()), o))
        .collect();
    (computed, offered)
}

/// What ratios and allowances are made from, indexed by borrowed names once per round of
/// instructions (a round looks up every bucket for every child: owned keys would cost
/// allocations per bucket per child).
pub(super) struct Sources<'a> {
    /// The ratios computed here, by (service, bucket, scope key).
    pub(super) computed: FastMap<(&'a str, &'a str, &'a str), &'a Computed>,
    /// Per service, what each of its buckets takes from outside the child, by the bucket's
    /// position in the rules: looked up once per round, not once per child.
    pub(super) services: FastMap<&'a str, Vec<BucketSource<'a>>>,
}

/// What a round knows of one bucket before looking at any child.
pub(super) struct BucketSource<'a> {
    /// [`SentRatio::key_of`] the bucket.
    pub(super) key: u64,
    /// Its index in the rules (packed ratios), if known.
    pub(super) index: Option<u32>,
    /// The parent's ratio and allowance for it.
    pub(super) parent: Option<FromParent>,
    /// What all this tier's fresh children offer in it.
    pub(super) offered: f64,
    /// Its computed ratio when it is global and owned here (the one scope key, "": no
    /// lookup per child).
    pub(super) global: Option<&'a Computed>,
}

impl<'a> Sources<'a> {
    /// Indexes a round's sources: the ratios `computed` here, the offered sums by
    /// bucket, and the `parent`'s ratios, for the buckets of `rules`.
    pub(super) fn new(
        rules: &'a Rules,
        computed: &'a BTreeMap<RatioKey, Computed>,
        bucket_offered: &'a BTreeMap<(String, String), f64>,
        parent: &'a Parent,
    ) -> Self {
        let offered: FastMap<(&str, &str), f64> = bucket_offered
            .iter()
            .map(|((s, b), o)| ((s.as_str(), b.as_str()), *o))
            .collect();
        let from_parent: FastMap<(&str, &str), FromParent> = parent
            .ratios
            .iter()
            .map(|((s, b), p)| ((s.as_str(), b.as_str()), *p))
            .collect();
        let computed: FastMap<(&str, &str, &str), &Computed> = computed
            .iter()
            .map(|((s, b, g), c)| ((s.as_str(), b.as_str(), g.as_str()), c))
            .collect();
        Self {
            services: rules
                .services()
                .iter()
                .map(|(svc, buckets)| {
                    let per_bucket = buckets
                        .iter()
                        .enumerate()
                        .map(|(j, b)| {
                            let key = (svc.as_str(), b.name.as_str());
                            BucketSource {
                                key: SentRatio::key_of(svc, &b.name),
                                index: rules.index_of(svc, j),
                                parent: from_parent.get(&key).copied(),
                                offered: offered.get(&key).copied().unwrap_or(0.0),
                                global: computed.get(&(key.0, key.1, "")).copied(),
                            }
                        })
                        .collect();
                    (svc.as_str(), per_bucket)
                })
                .collect(),
            computed,
        }
    }
}
