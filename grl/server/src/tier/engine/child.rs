//! One child of a tier: its latest report (by name or by index), where it is, what it was
//! last sent, and its rates summed by rule position (its digest). The registry of all
//! children is in `children`.

use std::sync::Arc;

use tokio::time::Instant;

use super::admission;
use super::child_rates::{Digest, IndexedRates, Reported};
use super::ratios::{self, Rate, SentRatio, Totals};
use super::rules::Rules;
use grl_config::Scope;
use grl_core::proto;

/// Whether the stream to a child is still open (its receiving half not dropped).
pub trait Liveness {
    /// True while the child can still be reached on this link.
    fn is_open(&self) -> bool;
}

impl<T> Liveness for tokio::sync::mpsc::Sender<T> {
    fn is_open(&self) -> bool {
        !self.is_closed()
    }
}

/// A link that cannot tell (unit tests): taken as closed, so a new stream replaces it.
impl Liveness for () {
    fn is_open(&self) -> bool {
        false
    }
}

/// A link whose openness is given (unit tests).
impl Liveness for bool {
    fn is_open(&self) -> bool {
        *self
    }
}

/// What a tier last told one child.
#[derive(Debug, Clone, Default)]
pub struct Sent {
    /// The config generation sent, if any.
    pub config_gen: Option<u64>,
    /// The generation of the child's list of services that config covered (see
    /// [`Child::services_gen`]).
    pub services_gen: Option<u64>,
    /// The ratios and allowances sent, in the order they were sent.
    pub ratios: Vec<SentRatio>,
    /// When the last instruction went out.
    pub at: Option<Instant>,
}

/// One child and its latest report.
#[derive(Debug)]
pub struct Child<L> {
    /// The child's reporter id.
    pub id: String,
    /// Its level.
    pub level: proto::Level,
    /// Its zone.
    pub zone: String,
    /// Its region.
    pub region: String,
    /// Services it needs config for.
    pub services: Vec<String>,
    /// The config version it holds.
    pub config_version: String,
    /// Its latest rates sent by name, with zone and region filled in.
    pub rates: Totals,
    /// Its latest rates sent by index (a whole packed report of the version in force), in
    /// its own zone and region. A report holds one form or the other.
    pub indexed: Option<IndexedRates>,
    /// When its latest report arrived.
    pub last_report: Instant,
    /// Which stream it reports on (a reconnect replaces the entry).
    pub conn: u64,
    /// How to reach it.
    pub link: L,
    /// What it was last told.
    pub sent: Sent,
    /// Reports taken from it on this stream.
    pub reports: u64,
    /// The sequence number of its latest report (a tier numbers its reports across its
    /// streams: see `Children::report`).
    pub seq: u64,
    /// Its rates by rule position, see [`Child::refresh_digest`].
    pub digest: Digest,
    /// The wire version it speaks (2: it takes packed ratios).
    pub wire_version: u32,
    /// Bumped when its list of services changes.
    services_gen: u64,
    /// Its services as positions in a version's service list, see
    /// [`Child::service_ordinals`].
    ordinals: Option<Ordinals>,
}

/// A child's services as positions in the service list of one version (services in name
/// order, the order of their indices), made once per change of either.
#[derive(Debug, Clone)]
struct Ordinals {
    rules: Arc<Rules>,
    services_gen: u64,
    of: Vec<u32>,
}

impl<L> Child<L> {
    /// The generation of the child's list of services: bumped when a report lists others.
    pub fn services_gen(&self) -> u64 {
        self.services_gen
    }

    /// Sums [`Child::digest`] again if a report or the rules (of generation `rules_gen`)
    /// came since it was last summed.
    pub fn refresh_digest(&mut self, rules: &Rules, rules_gen: u64) {
        let mut digest = std::mem::take(&mut self.digest);
        digest.refresh((self.reports, rules_gen), reported(self), rules);
        self.digest = digest;
    }

    /// The positions of the child's services (those `rules` works by index) in the
    /// version's service list, ascending, each once: resolved by name once per change of
    /// the child's services or of the rules, not per round of instructions.
    pub fn service_ordinals(&mut self, rules: &Arc<Rules>) -> &[u32] {
        let fresh = self
            .ordinals
            .as_ref()
            .is_some_and(|o| Arc::ptr_eq(&o.rules, rules) && o.services_gen == self.services_gen);
        if !fresh {
            let firsts = rules.dense().map_or(&[][..], |d| &d.service_first[..]);
            let mut of: Vec<u32> = self
                .services
                .iter()
                .filter_map(|svc| {
                    let first = rules.slots(svc)?.first_index?;
                    Some(firsts.binary_search(&first).ok()? as u32)
                })
                .collect();
            of.sort_unstable();
            of.dedup();
            self.ordinals = Some(Ordinals {
                rules: rules.clone(),
                services_gen: self.services_gen,
                of,
            });
        }
        self.ordinals.as_ref().map_or(&[], |o| &o.of)
    }

    /// A child first heard from in report `r` on stream `conn`, at `now`, with the report's
    /// rates.
    pub(super) fn new(
        r: &proto::Report,
        conn: u64,
        link: L,
        now: Instant,
        (rates, indexed): (Totals, Option<IndexedRates>),
    ) -> Self {
        Child {
            id: r.reporter_id.clone(),
            level: level_of(r),
            zone: r.zone.clone(),
            region: r.region.clone(),
            services: r.services.clone(),
            config_version: r.config_version.clone(),
            rates,
            indexed,
            last_report: now,
            conn,
            link,
            sent: Sent::default(),
            reports: 1,
            seq: r.seq,
            digest: Digest::default(),
            wire_version: r.wire_version,
            services_gen: 0,
            ordinals: None,
        }
    }

    /// Takes what report `r`, received at `now`, says besides its rates.
    pub(super) fn took_report(&mut self, r: &proto::Report, now: Instant) {
        if self.services != r.services {
            self.services.clone_from(&r.services);
            self.services_gen += 1;
        }
        self.config_version.clone_from(&r.config_version);
        self.reports += 1;
        self.seq = r.seq;
        self.last_report = now;
        self.level = level_of(r);
        self.wire_version = r.wire_version;
    }

    /// The child's offered rate in one bucket, summed over its rows whose scope key (see
    /// [`ratios::scope_key`]) is the given one, or over all its rows.
    pub fn offered(&self, service: &str, bucket: &str, scope: Option<(Scope, &str)>) -> f64 {
        self.rows()
            .filter(|((s, b, ..), _)| *s == service && *b == bucket)
            .filter(|((_, _, region, zone), _)| {
                scope.is_none_or(|(s, key)| ratios::scope_key(s, region, zone) == key)
            })
            .map(|(_, r)| r.offered)
            .sum()
    }

    /// Every row of the child, by name (an indexed row's names are its rules').
    pub fn rows(&self) -> impl Iterator<Item = (ratios::KeyRef<'_>, &Rate)> + Clone {
        reported(self).rows()
    }

    /// How many rows the child holds.
    pub fn row_count(&self) -> usize {
        self.rates.len() + self.indexed.as_ref().map_or(0, |x| x.rows.len())
    }
}

/// The level report `r` claims (a client's when it names none known).
fn level_of(r: &proto::Report) -> proto::Level {
    proto::Level::try_from(r.level).unwrap_or(proto::Level::Client)
}

/// What a digest is summed from: the child's rows, services and place.
pub(super) fn reported<L>(c: &Child<L>) -> Reported<'_> {
    Reported {
        rates: &c.rates,
        indexed: c.indexed.as_ref(),
        services: &c.services,
        place: (&c.region, &c.zone),
    }
}

/// Takes the rates of `r` into `rates` in place when its rows have exactly the keys
/// `rates` holds (a child's usual report: the same buckets as last time), allocating
/// nothing; a row `admit` refuses keeps its old rate. False, and nothing changed, when the
/// keys differ.
pub(super) fn update_in_place(
    rates: &mut Totals,
    r: &proto::Report,
    admit: &mut impl FnMut(&proto::BucketRate) -> bool,
) -> bool {
    if rates.len() != r.rates.len() {
        return false;
    }
    let same = |order: &[usize]| {
        rates
            .keys()
            .zip(order)
            .all(|(k, &i)| k.borrowed() == row_key(&r.rates[i], r))
    };
    let mut order: Vec<usize> = (0..r.rates.len()).collect();
    // A report in key order (a tier's, summed in a sorted map) needs no sort.
    if !same(&order) {
        order.sort_unstable_by(|&a, &b| row_key(&r.rates[a], r).cmp(&row_key(&r.rates[b], r)));
        if !same(&order) {
            return false;
        }
    }
    let tier = admission::speaks_for_tier(r);
    for (rate, &i) in rates.values_mut().zip(&order) {
        if admit(&r.rates[i]) {
            *rate = ratios::rate_of(&r.rates[i]);
            rate.clients = admission::clients_counted(&r.rates[i], tier);
        }
    }
    true
}

/// The key a row of report `r` is kept under, borrowed (see [`ratios::key_of`]).
fn row_key<'a>(row: &'a proto::BucketRate, r: &'a proto::Report) -> ratios::KeyRef<'a> {
    ratios::key_of(row, &r.zone, &r.region)
}
