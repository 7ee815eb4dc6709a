//! Which children's reports a tier takes: every row is checked against bounds before it can
//! move a sum, and each refusal has a reason that is counted (`grl_tier_reports_refused_total
//! {reason}`) and logged with the peer's address (at most one warning a second:
//! [`RefusalLog`](crate::net::log_limit::RefusalLog)).
//!
//! A fake report once made an aggregator drop all legitimate traffic (`offered=1e9`) or
//! switch the limit off (`offered=-1e9`, `NaN`). Here a row is refused when a rate is
//! negative, not finite, or implausible, or when it names a bucket the tier does not know;
//! a whole report is refused when it has
//! too many rows, names that are too long or hold control characters, or comes from a
//! second live stream claiming an id that is already connected; a new child is refused
//! when the tier already tracks its maximum. Refused rows change nothing: the child's
//! previous rate for that bucket stays.
//!
//! What a row may claim is bounded by what this tier can check, never by the peer's word
//! alone: a client-level report speaks for one client whatever its rows' `clients` say
//! (bound: `max_client_rps`); a tier-level report (an aggregator's zone sums, a region's)
//! is taken only by a tier that has tier children (a controller: an aggregator takes
//! clients only), and each of its rows is bounded by `max_child_rps` however many clients
//! it claims (with mutual TLS, `--child-allow` also says which certificates may report at
//! all).

use std::sync::atomic::{AtomicU64, Ordering};

use grl_core::proto;

use super::rules::Rules;

/// Why a report or a row of it was refused: the `reason` label of the counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A rate below zero.
    Negative,
    /// A rate that is NaN or infinite.
    NotFinite,
    /// A rate above `max_client_rps` (a client's row) or `max_child_rps` (a tier's row),
    /// or more clients than a tier can have.
    Implausible,
    /// A bucket (or service) this tier has no rule for.
    UnknownBucket,
    /// More rows or services than [`ReportLimits::max_rows`], or more rows over all
    /// children than [`ReportLimits::max_total_rows`].
    TooManyRows,
    /// A new child while [`ReportLimits::max_children`] are tracked.
    TooManyChildren,
    /// A second live stream reporting under an id that is connected and fresh.
    DuplicateClient,
    /// An id, zone, region, service or bucket name too long or with control characters.
    BadName,
    /// A report claiming a tier's level (zone, region) at a tier that takes clients only.
    Level,
    /// Packed rows (wire version 2) that cannot be read: malformed, or keyed by a config
    /// version this tier no longer holds (the child's previous rates stay).
    Packed,
}

impl Reason {
    /// Every reason, in the order of [`Reason::index`].
    pub const ALL: [Reason; 10] = [
        Reason::Negative,
        Reason::NotFinite,
        Reason::Implausible,
        Reason::UnknownBucket,
        Reason::TooManyRows,
        Reason::TooManyChildren,
        Reason::DuplicateClient,
        Reason::BadName,
        Reason::Level,
        Reason::Packed,
    ];

    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Negative => "negative",
            Reason::NotFinite => "not_finite",
            Reason::Implausible => "implausible",
            Reason::UnknownBucket => "unknown_bucket",
            Reason::TooManyRows => "too_many_rows",
            Reason::TooManyChildren => "too_many_children",
            Reason::DuplicateClient => "duplicate_client",
            Reason::BadName => "bad_name",
            Reason::Level => "level",
            Reason::Packed => "packed",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The bounds a tier holds its children's reports to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReportLimits {
    /// The highest offered (or dropped) rate one client can plausibly report, per second.
    pub max_client_rps: f64,
    /// The highest rate one row of a tier child (an aggregator's zone sum) can carry, per
    /// second, whatever number of clients it claims to sum.
    pub max_child_rps: f64,
    /// Most rows (and most services) in one report.
    pub max_rows: usize,
    /// Most children tracked at once (also the most clients one row may stand for).
    pub max_children: usize,
    /// Most rows held over all children: memory stays bounded however many names
    /// (zones, regions) children invent.
    pub max_total_rows: usize,
}

impl Default for ReportLimits {
    fn default() -> Self {
        Self {
            max_client_rps: 1e6,
            max_child_rps: 1e7,
            max_rows: 60_000,
            max_children: 100_000,
            max_total_rows: 4_000_000,
        }
    }
}

/// Refusal counters by reason.
#[derive(Debug, Default)]
pub struct ReportRefusals([AtomicU64; Reason::ALL.len()]);

impl ReportRefusals {
    /// Counts `n` refusals for `reason`.
    pub fn add(&self, reason: Reason, n: u64) {
        self.0[reason.index()].fetch_add(n, Ordering::Relaxed);
    }

    /// The refusals counted for `reason`.
    pub fn get(&self, reason: Reason) -> u64 {
        self.0[reason.index()].load(Ordering::Relaxed)
    }

    /// Every reason with its count.
    pub fn snapshot(&self) -> Vec<(Reason, u64)> {
        Reason::ALL
            .iter()
            .map(|r| (*r, self.0[r.index()].load(Ordering::Relaxed)))
            .collect()
    }
}

/// Checks the parts of a report that refuse it whole: size, names, and a tier's level at a
/// tier that takes clients only (`takes_tiers` false: an aggregator).
pub fn check_report(
    r: &proto::Report,
    limits: &ReportLimits,
    takes_tiers: bool,
) -> Result<(), Reason> {
    if !takes_tiers && speaks_for_tier(r) {
        return Err(Reason::Level);
    }
    let packed = r.packed.as_ref().map_or(0, |p| p.index_delta.len());
    if r.rates.len() + packed > limits.max_rows || r.services.len() > limits.max_rows {
        return Err(Reason::TooManyRows);
    }
    let names = [&r.reporter_id, &r.zone, &r.region, &r.config_version]
        .into_iter()
        .chain(&r.services);
    for n in names {
        if grl_config::bounds::name_problem(n).is_some() {
            return Err(Reason::BadName);
        }
    }
    if r.reporter_id.is_empty() {
        return Err(Reason::BadName);
    }
    Ok(())
}

/// Whether report `r` claims a tier's level (its rows may sum several clients); a report
/// naming no known level is a client's.
pub fn speaks_for_tier(r: &proto::Report) -> bool {
    !matches!(
        proto::Level::try_from(r.level),
        Ok(proto::Level::Client | proto::Level::Unspecified) | Err(_)
    )
}

/// How many clients a row of a report counts for: one for a client's report, whatever the
/// row claims; a tier's claim as it is (its rates are bounded by [`check_row`]).
pub fn clients_counted(row: &proto::BucketRate, tier: bool) -> u32 {
    counted(row.clients, tier)
}

/// [`clients_counted`] for a row claiming `clients` (named or packed).
pub fn counted(clients: u32, tier: bool) -> u32 {
    if tier { clients.max(1) } else { 1 }
}

/// Checks the numbers of one row, whether named or packed: its offered, dropped and
/// shadow-dropped `rates` and the clients it counts for (see [`clients_counted`]); `tier`:
/// the report is a tier's ([`speaks_for_tier`]).
pub fn check_rates(
    rates: [f64; 3],
    clients: u32,
    tier: bool,
    limits: &ReportLimits,
) -> Result<(), Reason> {
    if rates.iter().any(|v| !v.is_finite()) {
        return Err(Reason::NotFinite);
    }
    if rates.iter().any(|v| *v < 0.0) {
        return Err(Reason::Negative);
    }
    let bound = if tier {
        limits.max_child_rps
    } else {
        limits.max_client_rps
    };
    if clients as usize > limits.max_children || rates.iter().any(|v| *v > bound) {
        return Err(Reason::Implausible);
    }
    Ok(())
}

/// Checks one row of a report against the bounds and the rules this tier holds; `tier`:
/// the report is a tier's ([`speaks_for_tier`]).
pub fn check_row(
    row: &proto::BucketRate,
    tier: bool,
    rules: &Rules,
    limits: &ReportLimits,
) -> Result<(), Reason> {
    check_rates(
        [row.offered, row.dropped, row.shadow_dropped],
        clients_counted(row, tier),
        tier,
        limits,
    )?;
    if rules.bucket(&row.service, &row.bucket).is_none() {
        return Err(Reason::UnknownBucket);
    }
    if [&row.zone, &row.region]
        .iter()
        .any(|n| grl_config::bounds::name_problem(n).is_some())
    {
        return Err(Reason::BadName);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        Rules::from_wire(
            "v1",
            &[proto::ServiceRules {
                service: "pay".into(),
                first_index: None,
                buckets: vec![proto::BucketRule {
                    name: "g".into(),
                    limit_rps: Some(100.0),
                    ..Default::default()
                }],
            }],
        )
    }

    fn row(offered: f64) -> proto::BucketRate {
        proto::BucketRate {
            service: "pay".into(),
            bucket: "g".into(),
            offered,
            clients: 1,
            ..Default::default()
        }
    }

    #[test]
    fn rows_outside_the_bounds_are_refused_with_their_reason() {
        let (r, l) = (rules(), ReportLimits::default());
        let check = |row: &proto::BucketRate| check_row(row, false, &r, &l);
        assert_eq!(check(&row(10.0)), Ok(()));
        assert_eq!(check(&row(-1e9)), Err(Reason::Negative));
        assert_eq!(check(&row(f64::NAN)), Err(Reason::NotFinite));
        assert_eq!(check(&row(f64::INFINITY)), Err(Reason::NotFinite));
        assert_eq!(check(&row(1e9)), Err(Reason::Implausible));
        let mut ghost = row(1.0);
        ghost.bucket = "ghost".into();
        assert_eq!(check(&ghost), Err(Reason::UnknownBucket));
        let mut dropped = row(1.0);
        dropped.dropped = -1.0;
        assert_eq!(check(&dropped), Err(Reason::Negative));
    }

    #[test]
    fn a_client_counts_as_one_whatever_it_claims_and_a_tier_row_has_its_own_bound() {
        let (r, l) = (rules(), ReportLimits::default());
        let mut many = row(1e9);
        many.clients = 2_000;
        assert_eq!(
            check_row(&many, false, &r, &l),
            Err(Reason::Implausible),
            "a client's row claiming 2,000 clients still speaks for one"
        );
        assert_eq!(clients_counted(&many, false), 1);
        assert_eq!(
            check_row(&many, true, &r, &l),
            Err(Reason::Implausible),
            "a tier's row is bounded by max_child_rps whatever it claims"
        );
        many.offered = 5e6;
        assert_eq!(check_row(&many, true, &r, &l), Ok(()));
        assert_eq!(clients_counted(&many, true), 2_000);
        many.clients = u32::MAX;
        assert_eq!(check_row(&many, true, &r, &l), Err(Reason::Implausible));
    }

    #[test]
    fn a_tier_level_report_is_refused_where_only_clients_report() {
        let l = ReportLimits::default();
        let mut rep = proto::Report {
            reporter_id: "agg".into(),
            level: proto::Level::Zone as i32,
            rates: vec![row(1.0)],
            ..Default::default()
        };
        assert_eq!(check_report(&rep, &l, false), Err(Reason::Level));
        assert_eq!(check_report(&rep, &l, true), Ok(()));
        rep.level = proto::Level::Client as i32;
        assert_eq!(check_report(&rep, &l, false), Ok(()));
        rep.level = 77;
        assert!(!speaks_for_tier(&rep), "an unknown level is a client's");
    }

    #[test]
    fn reports_too_large_or_with_bad_names_are_refused() {
        let l = ReportLimits {
            max_rows: 2,
            ..ReportLimits::default()
        };
        let mut rep = proto::Report {
            reporter_id: "c1".into(),
            rates: vec![row(1.0); 3],
            ..Default::default()
        };
        assert_eq!(check_report(&rep, &l, true), Err(Reason::TooManyRows));
        rep.rates.truncate(2);
        assert_eq!(check_report(&rep, &l, true), Ok(()));
        rep.zone = "z\u{202E}".into();
        assert_eq!(check_report(&rep, &l, true), Err(Reason::BadName));
        rep.zone = "z".repeat(10_000);
        assert_eq!(check_report(&rep, &l, true), Err(Reason::BadName));
    }

    #[test]
    fn counts_are_kept_per_reason() {
        let c = ReportRefusals::default();
        c.add(Reason::Implausible, 2);
        c.add(Reason::DuplicateClient, 1);
        let s = c.snapshot();
        assert_eq!(s.len(), Reason::ALL.len());
        assert!(s.contains(&(Reason::Implausible, 2)));
        assert!(s.contains(&(Reason::DuplicateClient, 1)));
        assert!(Reason::ALL.iter().enumerate().all(|(i, r)| r.index() == i));
    }
}
