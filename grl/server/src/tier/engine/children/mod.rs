//! The child registry of a tier: every child's latest report (taken in place when its keys
//! did not change), report admission against the registry's bounds, staleness and
//! forgetting, and the sums over children. One child's state is in `child`.
//!
//! Pure: time is passed in, and the link to the child is a type parameter.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::admission::{self, Reason, ReportLimits};
use super::child::{Child, Liveness, Sent, reported, update_in_place};
use super::child_rates::{IndexedRates, Summer};
use super::ratios::{self, Rate, Totals};
use super::rules::Rules;
use crate::tier::FastMap;
use grl_core::packed::IndexedRow;
use grl_core::proto;

/// What [`Children::take_stream`] did with a report.
enum Taken<L> {
    /// A restarted tier's partial sums: taken without their rows (true: a new stream).
    Learning(bool),
    /// Its rows are to be taken; the link back.
    Rows(L),
    /// A late report of a tier's stream that a newer one of the same tier replaced.
    Superseded,
}

/// All children of a tier.
#[derive(Debug)]
pub struct Children<L> {
    map: BTreeMap<String, Child<L>>,
    stale_after: Duration,
    forget_after: Duration,
    /// How long a silent tier child's last rates stay in the sums (see [`super::hold`]).
    hold: Duration,
    max: usize,
    max_rows: usize,
    /// Rows held over all children (bounded by `max_rows`: memory stays bounded however
    /// many names children invent).
    rows: usize,
}

impl<L: Liveness> Children<L> {
    /// A registry whose children are stale after 3 intervals (left out of sums, but a tier
    /// child only after the partition hold) and forgotten after 10 (a tier child after the
    /// hold), tracking at most `limits.max_children` children and
    /// `limits.max_total_rows` rows over all of them.
    pub fn new(interval: Duration, limits: &ReportLimits) -> Self {
        Self {
            map: BTreeMap::new(),
            stale_after: interval * 3,
            forget_after: interval * 10,
            hold: super::hold::DEFAULT_PARTITION_HOLD,
            max: limits.max_children,
            max_rows: limits.max_total_rows,
            rows: 0,
        }
    }

    /// Sets the partition hold (see [`super::hold`]).
    pub fn set_hold(&mut self, hold: Duration) {
        self.hold = hold;
    }

    /// Sets the bounds (children and rows already tracked stay).
    pub fn set_limits(&mut self, limits: &ReportLimits) {
        self.max = limits.max_children;
        self.max_rows = limits.max_total_rows;
    }

    /// Records a report from the child on stream `conn`, taking only the rows `admit`
    /// accepts (a refused row leaves the child's previous rate for its bucket in place).
    /// Returns true for a new child.
    ///
    /// Refused whole: a report under an id that another stream holds while that stream is
    /// open and fresh (`DuplicateClient`; a reconnect after the old stream ended or went
    /// stale replaces it), and a new child beyond the maximum (`TooManyChildren`).
    pub fn report(
        &mut self,
        conn: u64,
        link: L,
        r: &proto::Report,
        now: Instant,
        mut admit: impl FnMut(&proto::BucketRate) -> bool,
    ) -> Result<bool, Reason> {
        let link = match self.take_stream(conn, link, r, now)? {
            Taken::Learning(new) => return Ok(new),
            Taken::Superseded => return Ok(false),
            Taken::Rows(link) => link,
        };
        if let Some(c) = self
            .map
            .get_mut(&r.reporter_id)
            .filter(|c| c.conn == conn && c.indexed.is_none())
            && update_in_place(&mut c.rates, r, &mut admit)
        {
            c.took_report(r, now);
            return Ok(false);
        }
        let previous = self
            .map
            .get(&r.reporter_id)
            .filter(|c| c.conn == conn)
            .map(|c| &c.rates);
        let mut rates = Totals::new();
        let tier = admission::speaks_for_tier(r);
        for row in &r.rates {
            let (k, mut v) = ratios::from_wire(row, &r.zone, &r.region);
            v.clients = admission::clients_counted(row, tier);
            if admit(row) {
                rates.entry(k).or_default().add(&v);
            } else if let Some(old) = previous.and_then(|p| p.get(&k)) {
                rates.insert(k, *old);
            }
        }
        self.store(conn, link, r, now, (rates, None))
    }

    /// [`Children::report`] for a report whose rows are all packed, of the version
    /// `rules` (the one in force): `rows` unpacked, each taken if `admit` accepts it (a
    /// refused row keeps the child's previous rate for that bucket). The rows stay keyed
    /// by index: nothing is allocated per row.
    pub fn report_indexed(
        &mut self,
        conn: u64,
        link: L,
        r: &proto::Report,
        (rules, rows): (&Arc<Rules>, &[IndexedRow]),
        now: Instant,
        mut admit: impl FnMut(&IndexedRow) -> bool,
    ) -> Result<bool, Reason> {
        let link = match self.take_stream(conn, link, r, now)? {
            Taken::Learning(new) => return Ok(new),
            Taken::Superseded => return Ok(false),
            Taken::Rows(link) => link,
        };
        let tier = admission::speaks_for_tier(r);
        let previous = self
            .map
            .get(&r.reporter_id)
            .filter(|c| c.conn == conn)
            .and_then(|c| c.indexed.as_ref())
            .filter(|p| Arc::ptr_eq(&p.rules, rules));
        let mut taken = Vec::with_capacity(rows.len());
        for row in rows {
            if admit(row) {
                let rate = Rate {
                    offered: row.offered,
                    dropped: row.dropped,
                    shadow_dropped: row.shadow_dropped,
                    clients: admission::counted(row.clients, tier),
                };
                taken.push((row.index, rate));
            } else if let Some(old) = previous.and_then(|p| p.get(row.index)) {
                taken.push((row.index, *old));
            }
        }
        let indexed = IndexedRates {
            rules: rules.clone(),
            rows: taken,
        };
        self.store(conn, link, r, now, (Totals::new(), Some(indexed)))
    }

    /// The checks of a report's stream before its rows, and a restarted tier's partial
    /// sums (taken without their rows).
    ///
    /// Refused whole: a report under an id that another stream holds while that stream is
    /// open and fresh (`DuplicateClient`; a reconnect after the old stream ended or went
    /// stale replaces it), and a new child beyond the maximum (`TooManyChildren`).
    fn take_stream(
        &mut self,
        conn: u64,
        link: L,
        r: &proto::Report,
        now: Instant,
    ) -> Result<Taken<L>, Reason> {
        match self.map.get(&r.reporter_id) {
            Some(c) if c.conn != conn && c.link.is_open() && !self.is_stale(c, now) => {
                // A tier has one uplink stream at a time and numbers its reports across
                // them: a higher number is its newer stream (back after a partition or a
                // frozen parent, the old stream not yet seen closed), which takes over; a
                // lower one is a late report of the stream it left, dropped uncounted.
                if !admission::speaks_for_tier(r) {
                    return Err(Reason::DuplicateClient);
                }
                if r.seq <= c.seq {
                    return Ok(Taken::Superseded);
                }
            }
            None if self.map.len() >= self.max => return Err(Reason::TooManyChildren),
            _ => {}
        }
        if r.learning
            && let Some(c) = self
                .map
                .get_mut(&r.reporter_id)
                .filter(|c| c.row_count() > 0)
        {
            // A restarted tier's partial sums: its last full ones stand meanwhile. A new
            // stream is a new process: it has been sent nothing yet.
            let new = c.conn != conn;
            if new {
                c.sent = Sent::default();
            }
            c.conn = conn;
            c.link = link;
            c.took_report(r, now);
            return Ok(Taken::Learning(new));
        }
        Ok(Taken::Rows(link))
    }

    /// Keeps `rows` (by name, by index) as the child's latest, within the bound on rows
    /// over all children. Returns true for a new child.
    fn store(
        &mut self,
        conn: u64,
        link: L,
        r: &proto::Report,
        now: Instant,
        (rates, indexed): (Totals, Option<IndexedRates>),
    ) -> Result<bool, Reason> {
        let new_rows = rates.len() + indexed.as_ref().map_or(0, |x| x.rows.len());
        // One lookup of the child on the usual path (a report on its own stream).
        let held = match self.map.get_mut(&r.reporter_id) {
            Some(c) if c.conn == conn => {
                let rows = self.rows - c.row_count() + new_rows;
                if rows > self.max_rows {
                    return Err(Reason::TooManyRows);
                }
                self.rows = rows;
                c.rates = rates;
                c.indexed = indexed;
                c.took_report(r, now);
                return Ok(false);
            }
            Some(c) => c.row_count(),
            None => 0,
        };
        let rows = self.rows - held + new_rows;
        if rows > self.max_rows {
            return Err(Reason::TooManyRows);
        }
        self.rows = rows;
        let child = Child::new(r, conn, link, now, (rates, indexed));
        self.map.insert(r.reporter_id.clone(), child);
        Ok(true)
    }

    /// The child's stream `conn` ended (a newer stream keeps it): a client is removed; a
    /// tier (an aggregator) keeps its last rates until they go stale or it reports again,
    /// because its clients keep enforcing their last ratios while it restarts.
    pub fn disconnected(&mut self, id: &str, conn: u64) {
        if self.map.get(id).is_some_and(|c| {
            c.conn == conn && matches!(c.level, proto::Level::Client | proto::Level::Unspecified)
        }) {
            self.remove(id);
        }
    }

    fn remove(&mut self, id: &str) {
        if let Some(c) = self.map.remove(id) {
            self.rows -= c.row_count();
        }
    }

    /// Whether a child is stale: no report for more than 3 intervals.
    pub fn is_stale(&self, c: &Child<L>, now: Instant) -> bool {
        now.saturating_duration_since(c.last_report) > self.stale_after
    }

    /// Whether a child's last rates are in the sums: it is fresh, or it is a tier (an
    /// aggregator, a region's controller) silent for no longer than the partition hold,
    /// so its share stays reserved while it enforces its last allowance (see
    /// [`super::hold`]). A client is never held: it fails open when cut off.
    pub fn counted(&self, c: &Child<L>, now: Instant) -> bool {
        counted(c, now, self.stale_after, self.hold)
    }

    /// Forgets children silent for 10 intervals (a tier child: at least the hold); returns
    /// their ids.
    pub fn prune(&mut self, now: Instant) -> Vec<String> {
        let (forget, hold) = (self.forget_after, self.hold);
        let gone: Vec<String> = self
            .map
            .values()
            .filter(|c| {
                let forget = if is_tier(c) { forget.max(hold) } else { forget };
                now.saturating_duration_since(c.last_report) > forget
            })
            .map(|c| c.id.clone())
            .collect();
        for id in &gone {
            self.remove(id);
        }
        gone
    }

    /// Every fresh child's rows summed by (service, bucket, region, zone), as
    /// [`ratios::sum_rows`] would, from the children's digests where they cover all rows
    /// (refreshed here for rules `rules` of generation `rules_gen`).
    pub fn sums<'a>(
        &'a mut self,
        rules: &'a Rules,
        rules_gen: u64,
        now: Instant,
    ) -> FastMap<ratios::KeyRef<'a>, ratios::Rate> {
        let (stale_after, hold) = (self.stale_after, self.hold);
        let fresh = move |c: &Child<L>| counted(c, now, stale_after, hold);
        for c in self.map.values_mut().filter(|c| fresh(c)) {
            c.refresh_digest(rules, rules_gen);
        }
        let mut summer = Summer::default();
        for c in self.map.values().filter(|c| fresh(c)) {
            summer.add(&c.digest, reported(c));
        }
        summer.finish(rules)
    }

    /// Every row of every fresh child.
    pub fn rows(
        &self,
        now: Instant,
    ) -> impl Iterator<Item = (ratios::KeyRef<'_>, &ratios::Rate)> + Clone {
        self.map
            .values()
            .filter(move |c| self.counted(c, now))
            .flat_map(Child::rows)
    }

    /// The sum of the rates of all fresh children.
    pub fn totals(&self, now: Instant) -> Totals {
        let mut t = Totals::new();
        for c in self.map.values().filter(|c| self.counted(c, now)) {
            for ((service, bucket, region, zone), r) in c.rows() {
                let k = ratios::RateKey {
                    service: service.into(),
                    bucket: bucket.into(),
                    region: region.into(),
                    zone: zone.into(),
                };
                t.entry(k).or_default().add(r);
            }
        }
        t
    }

    /// The services asked for by counted children, sorted, without duplicates.
    pub fn services(&self, now: Instant) -> Vec<String> {
        let mut s: Vec<String> = self
            .map
            .values()
            .filter(|c| self.counted(c, now))
            .flat_map(|c| c.services.iter().cloned())
            .collect();
        s.sort();
        s.dedup();
        s
    }

    /// Number of stale children.
    pub fn stale_count(&self, now: Instant) -> usize {
        self.map.values().filter(|c| self.is_stale(c, now)).count()
    }

    /// All children.
    pub fn iter(&self) -> impl Iterator<Item = &Child<L>> {
        self.map.values()
    }

    /// All children, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Child<L>> {
        self.map.values_mut()
    }

    /// A child by id, mutably.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Child<L>> {
        self.map.get_mut(id)
    }

    /// Number of children, stale or not.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are no children.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Whether child `c` is a tier (its reports speak for a zone or a region).
fn is_tier<L>(c: &Child<L>) -> bool {
    !matches!(c.level, proto::Level::Client | proto::Level::Unspecified)
}

/// See [`Children::counted`].
fn counted<L>(c: &Child<L>, now: Instant, stale_after: Duration, hold: Duration) -> bool {
    let silent = now.saturating_duration_since(c.last_report);
    silent <= stale_after || (is_tier(c) && silent <= hold)
}

#[cfg(test)]
mod tests;
