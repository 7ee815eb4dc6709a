//! The child registry of a tier: every child's latest report (taken in place when its keys
//! did not change), report admission against the registry's bounds, staleness and
//! forgetting, and the sums over children. One child's state is in `child`.
//!
//! Pure: time is passed in, and the link to the child is a type parameter.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::FastMap;
use super::admission::{self, Reason, ReportLimits};
use super::child::{Child, Liveness, Sent, reported, update_in_place};
use super::digest::{IndexedRates, Summer};
use super::ratios::{self, Rate, Totals};
use super::rules::Rules;
use grl_core::packed::IndexedRow;
use grl_core::proto;

/// What [`Children::take_stream`] did with a report.
enum Taken<L> {
    /// A restarted tier's partial sums: taken without their rows (true: a new stream).
    Learning(bool),
    /// Its rows are to be taken; the link back.
    Rows(L),
}

/// All children of a tier.
#[derive(Debug)]
pub struct Children<L> {
    map: BTreeMap<String, Child<L>>,
    stale_after: Duration,
    forget_after: Duration,
    max: usize,
    max_rows: usize,
    /// Rows held over all children (bounded by `max_rows`: memory stays bounded however
    /// many names children invent).
    rows: usize,
}

impl<L: Liveness> Children<L> {
    /// A registry whose children are stale after 3 intervals (left out of sums) and
    /// forgotten after 10, tracking at most `limits.max_children` children and
    /// `limits.max_total_rows` rows over all of them.
    pub fn new(interval: Duration, limits: &ReportLimits) -> Self {
        Self {
            map: BTreeMap::new(),
            stale_after: interval * 3,
            forget_after: interval * 10,
            max: limits.max_children,
            max_rows: limits.max_total_rows,
            rows: 0,
        }
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
                return Err(Reason::DuplicateClient);
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

    /// Forgets children silent for 10 intervals; returns their ids.
    pub fn prune(&mut self, now: Instant) -> Vec<String> {
        let forget = self.forget_after;
        let gone: Vec<String> = self
            .map
            .values()
            .filter(|c| now.saturating_duration_since(c.last_report) > forget)
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
        let stale_after = self.stale_after;
        let fresh = move |c: &Child<L>| now.saturating_duration_since(c.last_report) <= stale_after;
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
            .filter(move |c| !self.is_stale(c, now))
            .flat_map(Child::rows)
    }

    /// The sum of the rates of all fresh children.
    pub fn totals(&self, now: Instant) -> Totals {
        let mut t = Totals::new();
        for c in self.map.values().filter(|c| !self.is_stale(c, now)) {
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

    /// The services asked for by fresh children, sorted, without duplicates.
    pub fn services(&self, now: Instant) -> Vec<String> {
        let mut s: Vec<String> = self
            .map
            .values()
            .filter(|c| !self.is_stale(c, now))
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

#[cfg(test)]
mod tests {
    use super::*;
    use grl_config::Scope;

    fn report(id: &str, zone: &str, offered: f64) -> proto::Report {
        proto::Report {
            reporter_id: id.into(),
            level: proto::Level::Client as i32,
            zone: zone.into(),
            region: "eu".into(),
            services: vec!["pay".into()],
            rates: vec![proto::BucketRate {
                service: "pay".into(),
                bucket: "g".into(),
                offered,
                clients: 1,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn sum<L: Liveness>(c: &Children<L>, now: Instant) -> f64 {
        c.totals(now).values().map(|r| r.offered).sum()
    }

    #[test]
    fn latest_report_per_child_is_summed() {
        let t0 = Instant::now();
        let mut c = Children::new(Duration::from_secs(1), &ReportLimits::default());
        assert!(
            c.report(1, (), &report("a", "z1", 10.0), t0, |_| true)
                .unwrap()
        );
        assert!(
            !c.report(1, (), &report("a", "z1", 20.0), t0, |_| true)
                .unwrap()
        );
        c.report(2, (), &report("b", "z1", 5.0), t0, |_| true)
            .unwrap();
        assert_eq!(sum(&c, t0), 25.0);
        let key = c.totals(t0).into_keys().next().unwrap();
        assert_eq!((key.zone.as_str(), key.region.as_str()), ("z1", "eu"));
        let a = c.iter().find(|c| c.id == "a").unwrap();
        assert_eq!(a.offered("pay", "g", None), 20.0);
        assert_eq!(a.offered("pay", "g", Some((Scope::Zone, "z1"))), 20.0);
        assert_eq!(a.offered("pay", "g", Some((Scope::Zone, "z2"))), 0.0);
        assert_eq!(a.offered("pay", "other", None), 0.0);
    }

    #[test]
    fn the_digest_agrees_with_the_lookup_by_name_and_follows_reports() {
        let t0 = Instant::now();
        let mut c = Children::new(Duration::from_secs(1), &ReportLimits::default());
        let mut r = report("a", "z1", 10.0);
        for (bucket, zone, offered) in [("g", "z2", 4.0), ("h", "z1", 3.0), ("h", "z3", 2.0)] {
            let mut row = r.rates[0].clone();
            (row.bucket, row.zone, row.offered) = (bucket.into(), zone.into(), offered);
            r.rates.push(row);
        }
        c.report(1, (), &r, t0, |_| true).unwrap();
        let rule = |name: &str, scope: proto::Scope| proto::BucketRule {
            name: name.into(),
            scope: scope as i32,
            limit_rps: Some(1.0),
            ..Default::default()
        };
        let buckets = vec![
            rule("x", proto::Scope::Global),
            rule("h", proto::Scope::Zone),
            rule("g", proto::Scope::Zone),
        ];
        let rules = Rules::from_wire(
            "v",
            &[proto::ServiceRules {
                service: "pay".into(),
                first_index: None,
                buckets: buckets.clone(),
            }],
        );
        let a = c.get_mut("a").unwrap();
        a.refresh_digest(&rules, 1);
        let d = a.digest.per_service[0].clone();
        assert_eq!(d.all, [0.0, 5.0, 14.0]);
        assert_eq!(d.in_group, [0.0, 3.0, 10.0]);
        for (j, b) in buckets.iter().enumerate() {
            assert_eq!(d.all[j], a.offered("pay", &b.name, None));
            assert_eq!(
                d.in_group[j],
                a.offered("pay", &b.name, Some((Scope::Zone, "z1")))
            );
        }
        assert!(!a.digest.covers_all_rows, "rows in other zones");
        r.rates[0].offered = 30.0;
        c.report(1, (), &r, t0, |_| true).unwrap();
        let a = c.get_mut("a").unwrap();
        a.refresh_digest(&rules, 1);
        assert_eq!(a.digest.per_service[0].all, [0.0, 5.0, 34.0]);
    }

    #[test]
    fn sums_from_digests_agree_with_the_sums_of_the_rows() {
        let t0 = Instant::now();
        let mut c = Children::new(Duration::from_secs(1), &ReportLimits::default());
        let mut odd = report("c", "z1", 1.0);
        odd.rates[0].zone = "z9".into();
        for r in [report("a", "z1", 10.0), report("b", "z2", 4.0), odd] {
            c.report(1, (), &r, t0, |_| true).unwrap();
        }
        c.report(1, (), &report("d", "z1", 7.0), t0, |_| true)
            .unwrap();
        let rules = Rules::from_wire(
            "v",
            &[proto::ServiceRules {
                service: "pay".into(),
                first_index: None,
                buckets: vec![proto::BucketRule {
                    name: "g".into(),
                    limit_rps: Some(1.0),
                    ..Default::default()
                }],
            }],
        );
        let by_rows: Totals = ratios::regroup(c.rows(t0), true);
        let by_digests: Totals = c
            .sums(&rules, 1, t0)
            .into_iter()
            .map(|(k, r)| {
                let (service, bucket, region, zone) = k;
                let key = ratios::RateKey {
                    service: service.into(),
                    bucket: bucket.into(),
                    region: region.into(),
                    zone: zone.into(),
                };
                (key, r)
            })
            .collect();
        assert_eq!(by_digests, by_rows);
        let z1 = &by_rows[&ratios::RateKey {
            service: "pay".into(),
            bucket: "g".into(),
            region: "eu".into(),
            zone: "z1".into(),
        }];
        assert_eq!((z1.offered, z1.clients), (17.0, 2));
        assert!(!c.get_mut("c").unwrap().digest.covers_all_rows);
        assert!(c.get_mut("a").unwrap().digest.covers_all_rows);
    }

    #[test]
    fn stale_children_leave_the_sum_then_the_registry() {
        let t0 = Instant::now();
        let mut c = Children::new(Duration::from_secs(1), &ReportLimits::default());
        c.report(1, (), &report("a", "z1", 10.0), t0, |_| true)
            .unwrap();
        c.report(
            2,
            (),
            &report("b", "z1", 5.0),
            t0 + Duration::from_secs(2),
            |_| true,
        )
        .unwrap();
        let t = t0 + Duration::from_millis(3100);
        assert_eq!(sum(&c, t), 5.0);
        assert_eq!(c.stale_count(t), 1);
        assert_eq!(c.services(t), vec!["pay".to_string()]);
        assert!(c.prune(t).is_empty());
        assert_eq!(c.prune(t0 + Duration::from_millis(10_100)), vec!["a"]);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn an_old_stream_ending_keeps_the_reconnected_child() {
        let t0 = Instant::now();
        let mut c = Children::new(Duration::from_secs(1), &ReportLimits::default());
        c.report(1, (), &report("a", "z1", 10.0), t0, |_| true)
            .unwrap();
        assert!(
            c.report(2, (), &report("a", "z1", 10.0), t0, |_| true)
                .unwrap()
        );
        c.disconnected("a", 1);
        assert_eq!(c.len(), 1);
        c.disconnected("a", 2);
        assert!(c.is_empty());
    }

    #[test]
    fn a_second_live_stream_with_the_same_id_is_refused() {
        let t0 = Instant::now();
        let mut c = Children::new(Duration::from_secs(1), &ReportLimits::default());
        c.report(1, true, &report("a", "z1", 10.0), t0, |_| true)
            .unwrap();
        assert_eq!(
            c.report(2, true, &report("a", "z1", 1e6), t0, |_| true),
            Err(Reason::DuplicateClient)
        );
        assert_eq!(sum(&c, t0), 10.0, "the refused report changed nothing");
        let later = t0 + Duration::from_millis(3100);
        assert_eq!(
            c.report(2, true, &report("a", "z1", 7.0), later, |_| true),
            Ok(true)
        );
        assert_eq!(
            sum(&c, later),
            7.0,
            "a stale holder gives way to the new stream"
        );
    }

    #[test]
    fn refused_rows_keep_the_previous_rate_and_children_are_capped() {
        let t0 = Instant::now();
        let limits = ReportLimits {
            max_children: 2,
            ..ReportLimits::default()
        };
        let mut c = Children::new(Duration::from_secs(1), &limits);
        c.report(1, (), &report("a", "z1", 10.0), t0, |_| true)
            .unwrap();
        c.report(1, (), &report("a", "z1", -1e9), t0, |r| r.offered >= 0.0)
            .unwrap();
        assert_eq!(sum(&c, t0), 10.0);
        c.report(2, (), &report("b", "z1", 1.0), t0, |_| true)
            .unwrap();
        assert_eq!(
            c.report(3, (), &report("c", "z1", 1.0), t0, |_| true),
            Err(Reason::TooManyChildren)
        );
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_report_of_the_same_rows_in_another_order_replaces_each_rate() {
        let t0 = Instant::now();
        let mut c = Children::new(Duration::from_secs(1), &ReportLimits::default());
        let two = |g: f64, h: f64| {
            let mut r = report("a", "z1", g);
            let mut row = r.rates[0].clone();
            (row.bucket, row.offered) = ("h".into(), h);
            r.rates.push(row);
            r
        };
        c.report(1, (), &two(10.0, 20.0), t0, |_| true).unwrap();
        let mut swapped = two(1.0, 2.0);
        swapped.rates.reverse();
        let refuse_h = |r: &proto::BucketRate| r.bucket != "h";
        assert_eq!(c.report(1, (), &swapped, t0, refuse_h), Ok(false));
        let a = c.get_mut("a").unwrap();
        assert_eq!(a.reports, 2);
        assert_eq!(
            (a.offered("pay", "g", None), a.offered("pay", "h", None)),
            (1.0, 20.0),
            "g taken, the refused h kept"
        );
        let mut moved = two(3.0, 4.0);
        moved.rates[1].bucket = "k".into();
        c.report(1, (), &moved, t0, |_| true).unwrap();
        let a = c.get_mut("a").unwrap();
        let rates: Vec<(&str, f64)> = a
            .rates
            .iter()
            .map(|(k, r)| (k.bucket.as_str(), r.offered))
            .collect();
        assert_eq!(rates, [("g", 3.0), ("k", 4.0)], "new keys replace the rows");
    }

    #[test]
    fn rows_over_all_children_are_bounded() {
        let t0 = Instant::now();
        let limits = ReportLimits {
            max_total_rows: 3,
            ..ReportLimits::default()
        };
        let mut c = Children::new(Duration::from_secs(1), &limits);
        let mut wide = report("a", "z1", 1.0);
        for zone in ["z2", "z3"] {
            let mut r = wide.rates[0].clone();
            r.zone = zone.into();
            wide.rates.push(r);
        }
        c.report(1, (), &wide, t0, |_| true).unwrap();
        assert_eq!(
            c.report(2, (), &report("b", "z1", 1.0), t0, |_| true),
            Err(Reason::TooManyRows)
        );
        c.report(1, (), &report("a", "z1", 1.0), t0, |_| true)
            .unwrap();
        c.report(2, (), &report("b", "z1", 1.0), t0, |_| true)
            .unwrap();
        c.disconnected("a", 1);
        c.report(3, (), &wide, t0, |_| true).unwrap_err();
        c.report(3, (), &report("c", "z1", 1.0), t0, |_| true)
            .unwrap();
    }
}
