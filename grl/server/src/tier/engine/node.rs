//! The state machine shared by aggregators and controllers: a [`Node`], the one home of a
//! tier's operations (its config is in `node_config`, what its lock guards in `state`);
//! children's reports in; the tier's role (leading, following,
//! learning, see `leadership`); the partition hold in force (see `hold`); the tick that
//! recomputes the ratios for the scopes this tier computes (by name, or by index, see
//! `dense_tick`); and the report up to the parent. What comes from the parent is kept in
//! `parent_state` (taken in by `parent`, from [`Node::on_parent_instruction`]), what instructions are made from in
//! `instruct_inputs`, and the instructions out to each child (when something changed, at
//! least once per interval) in `instruct`. Each instruction gives the child, per bucket, its
//! allowance: its share of the bucket's limit (scopes owned here) or of this tier's
//! allowance from the parent, by its share of the offered load (see `ratios` for the
//! fairness and the headroom).
//!
//! An urgent report (a child's rate jumped) wakes the tick at once (coalesced with the
//! other urgent reports of the same few milliseconds) and, below the top, an upward report.

pub use crate::tier::observe::tick_times::TickTimes;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prost::Message;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::admission::{self, Reason, ReportLimits, ReportRefusals};
use super::child::Child;
use super::children::Children;
use super::dense_tick::IndexedSums;
use super::instruct_inputs::ratios_and_offered;
use super::leadership::{self, Leadership};
use super::node_config::NodeConfig;
use super::packing;
use super::parent_state::Parent;
use super::ratios::{self, Totals};
use super::rules::Rules;
use super::scopes::Owned;
pub use super::state::{Bytes, Link};
use super::state::{Round, State};
use super::{instruct, parent};
use crate::net::log_limit::RefusalLog;
use grl_core::packed::IndexedRow;
use grl_core::proto;

/// One aggregator or controller.
#[derive(Debug)]
pub struct Node {
    /// What kind of tier this is.
    pub cfg: NodeConfig,
    state: Mutex<State>,
    conns: AtomicU64,
    /// Control-plane traffic with the children.
    pub bytes: Bytes,
    /// How long ticks take.
    pub ticks: TickTimes,
    /// Reports and rows refused, by reason.
    pub refused: ReportRefusals,
    /// Reports taken whole by bucket index (wire version 2: no name read).
    pub reports_by_index: AtomicU64,
    /// Woken by an urgent report: the ticker recomputes at once.
    pub wake: tokio::sync::Notify,
    /// Woken by an urgent report: the uplink reports to the parent at once.
    pub wake_parent: tokio::sync::Notify,
    /// Woken after every tick: the uplink sends the tick's sums to the parent.
    pub ticked: tokio::sync::Notify,
}

/// Which sums an upward report carries, see [`Node::upward_report`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sums {
    /// The children's rows summed now.
    Live,
    /// The sums of the last tick.
    LastTick,
}

impl Node {
    /// A node with no children and no config.
    pub fn new(cfg: NodeConfig) -> Self {
        let state = State {
            rules: Arc::new(Rules::default()),
            previous_rules: None,
            config_gen: 0,
            children: Children::new(cfg.interval, &ReportLimits::default()),
            parent: Parent::default(),
            owned: Owned::new(cfg.scopes.clone()),
            computed: BTreeMap::new(),
            indexed: None,
            bucket_offered: BTreeMap::new(),
            upward: Totals::new(),
            seq: 0,
            limits: ReportLimits::default(),
            refusal_log: RefusalLog::new(std::time::Duration::from_secs(1)),
            role: Leadership::sole(),
            learn_until: None,
            learn_cap: None,
            hold: super::hold::DEFAULT_PARTITION_HOLD,
        };
        Self {
            cfg,
            state: Mutex::new(state),
            conns: AtomicU64::new(0),
            bytes: Bytes::default(),
            ticks: TickTimes::default(),
            refused: ReportRefusals::default(),
            reports_by_index: AtomicU64::new(0),
            wake: tokio::sync::Notify::new(),
            wake_parent: tokio::sync::Notify::new(),
            ticked: tokio::sync::Notify::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A fresh id for a child's stream.
    pub fn next_conn(&self) -> u64 {
        self.conns.fetch_add(1, Ordering::Relaxed)
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<Rules> {
        self.lock().rules.clone()
    }

    /// Learns from reports before instructing anyone, from `now`: for one interval, and
    /// while children keep joining (a quarter interval after each newcomer) up to two
    /// intervals, so that a restarted tier instructs from what every child offers, not
    /// from the few that reconnected first. Its children keep their last ratios
    /// meanwhile; its parent keeps its last full sums (its reports say `learning`).
    pub fn start_learning(&self, now: Instant) {
        let mut s = self.lock();
        info!(learn_for = ?self.cfg.interval, "learning before sending ratios");
        s.learn_until = Some(now + self.cfg.interval);
        s.learn_cap = Some(now + self.cfg.interval * 2);
    }

    /// Whether this tier is still learning at `now` (see [`Node::start_learning`]).
    fn learning(s: &State, now: Instant) -> bool {
        s.learn_until.is_some_and(|t| now < t)
    }

    /// Replaces the rules and tells every child.
    pub fn set_rules(&self, rules: Rules, now: Instant) {
        {
            let mut s = self.lock();
            if *s.rules == rules {
                return;
            }
            info!(version = %rules.version, buckets = rules.bucket_count(), "config in force");
            s.previous_rules = Some(std::mem::replace(&mut s.rules, Arc::new(rules)));
            s.config_gen += 1;
        }
        self.tick(now);
    }

    /// Sets the bounds children's reports are held to.
    pub fn set_report_limits(&self, limits: ReportLimits) {
        let mut s = self.lock();
        s.children.set_limits(&limits);
        s.limits = limits;
    }

    /// A child's report arrived from `peer` on stream `conn`. A report or row outside the
    /// bounds is refused (see [`admission`]): counted by reason, logged with the peer, and
    /// it changes nothing. Returns the reason when the whole report was refused. On a
    /// follower (a stream opened just before this tier lost the lead) the report is not
    /// taken and the stream ends with the redirect to the leader.
    pub fn on_report(
        &self,
        conn: u64,
        link: Link,
        r: &proto::Report,
        peer: Option<std::net::SocketAddr>,
        now: Instant,
    ) -> Result<(), Reason> {
        self.bytes
            .reports_in
            .fetch_add(r.encoded_len() as u64, Ordering::Relaxed);
        let (rules, limits) = {
            let s = self.lock();
            if !s.role.leading {
                let _ = link.try_send(Err(leadership::not_leader(s.role.leader.as_deref())));
                return Ok(());
            }
            (s.rules.clone(), s.limits)
        };
        let takes_tiers = self.cfg.level != proto::Level::Zone;
        if let Err(reason) = admission::check_report(r, &limits, takes_tiers) {
            self.refused.add(reason, 1);
            if let Some(unlogged) = self.lock().refusal_log.admit(now) {
                warn!(
                    ?peer,
                    reason = reason.as_str(),
                    rows = r.rates.len(),
                    unlogged,
                    "report refused"
                );
            }
            return Err(reason);
        }
        let mut first: Option<Reason> = None;
        let mut refused_rows = 0u64;
        let tier = admission::speaks_for_tier(r);
        let mut refuse_row = |reason: Reason| {
            self.refused.add(reason, 1);
            refused_rows += 1;
            first.get_or_insert(reason);
        };
        // Rows by index are read and checked before the lock: a zone's report of 22,000
        // rows does not hold the tick and the other streams meanwhile.
        let mut refused_at: Vec<u32> = Vec::new();
        let indexed = packing::indexed_rows(r, &rules).map(|rows| {
            rows.inspect(|rows| {
                for row in rows {
                    let rates = [row.offered, row.dropped, row.shadow_dropped];
                    let clients = admission::counted(row.clients, tier);
                    if let Err(reason) = admission::check_rates(rates, clients, tier, &limits) {
                        refuse_row(reason);
                        refused_at.push(row.index);
                    }
                }
            })
        });
        let mut s = self.lock();
        let taken = match indexed {
            Some(rows) if Arc::ptr_eq(&s.rules, &rules) => rows.and_then(|rows| {
                let admit = |row: &IndexedRow| refused_at.binary_search(&row.index).is_err();
                s.children
                    .report_indexed(conn, link, r, (&rules, &rows), now, admit)
                    .inspect(|_| {
                        self.reports_by_index.fetch_add(1, Ordering::Relaxed);
                    })
            }),
            // Read by name, also when the rules changed since the rows were read.
            _ => match packing::unpack_report(r, &s.rules, s.previous_rules.as_deref()) {
                Ok(unpacked) => {
                    let named = unpacked.as_ref().unwrap_or(r);
                    let rules = s.rules.clone();
                    let admit = |row: &proto::BucketRate| {
                        admission::check_row(row, tier, &rules, &limits)
                            .map_err(&mut refuse_row)
                            .is_ok()
                    };
                    s.children.report(conn, link, named, now, admit)
                }
                Err(reason) => Err(reason),
            },
        };
        let new = match taken {
            Ok(new) => new,
            Err(reason) => {
                self.refused.add(reason, 1);
                if let Some(unlogged) = s.refusal_log.admit(now) {
                    warn!(?peer, child = %r.reporter_id, reason = reason.as_str(), unlogged, "report refused");
                }
                return Err(reason);
            }
        };
        if let Some(reason) = first
            && let Some(unlogged) = s.refusal_log.admit(now)
        {
            warn!(
                ?peer, child = %r.reporter_id, reason = reason.as_str(), refused_rows, unlogged,
                "report rows refused, the child's previous rates kept"
            );
        }
        if new {
            info!(child = %r.reporter_id, ?peer, zone = %r.zone, region = %r.region, "child connected");
            if Self::learning(&s, now)
                && let (Some(until), Some(cap)) = (s.learn_until, s.learn_cap)
            {
                s.learn_until = Some(until.max(now + self.cfg.interval / 4).min(cap));
            }
            instruct::instruct_children(
                &self.cfg,
                &self.bytes,
                &mut s,
                Round::Child(&r.reporter_id),
                now,
            );
        }
        // A child connecting with traffic (one whose link to this tier healed, or that moved
        // here) brings a rate the sums lack, news as much as a rate jump is: the tiers hear it now,
        // not up to a tick later at each tier. A learning tier hears every child first.
        let arrives_loaded =
            new && !Self::learning(&s, now) && r.rates.iter().any(|row| row.offered > 0.0);
        if r.urgent || arrives_loaded {
            debug!(child = %r.reporter_id, "urgent report");
            self.wake.notify_one();
            if self.cfg.has_parent {
                self.wake_parent.notify_one();
            }
        }
        Ok(())
    }

    /// A child's stream `conn` ended.
    pub fn on_disconnect(&self, id: &str, conn: u64) {
        info!(child = %id, "child disconnected");
        self.lock().children.disconnected(id, conn);
    }

    /// Whether this tier leads (always true without an election), and who leads.
    pub fn role(&self) -> Leadership {
        self.lock().role.clone()
    }

    /// Takes a new role from the election. Elected: learn from reports for one interval
    /// before instructing anyone (ratios computed from a partial picture would over- or
    /// under-drop). Deposed: every child's stream ends with a redirect to the new leader,
    /// and the children's state is dropped.
    pub fn set_role(&self, role: Leadership, now: Instant) {
        let mut s = self.lock();
        if s.role == role {
            return;
        }
        match (s.role.leading, role.leading) {
            (false, true) => {
                info!(learn_for = ?self.cfg.interval, "leading: learning before sending ratios");
                s.learn_until = Some(now + self.cfg.interval);
                s.learn_cap = Some(now + self.cfg.interval * 2);
            }
            (true, false) => {
                warn!(leader = ?role.leader, "following: children redirected");
                let refusal = leadership::not_leader(role.leader.as_deref());
                for c in s.children.iter_mut() {
                    let _ = c.link.try_send(Err(refusal.clone()));
                }
                s.children = Children::new(self.cfg.interval, &s.limits);
                let hold = s.hold;
                s.children.set_hold(hold);
                s.computed.clear();
                s.learn_until = None;
            }
            _ => info!(leader = ?role.leader, "leader changed"),
        }
        s.role = role;
    }

    /// Sets how long this tier keeps a silent child's last rates in its sums and applies a
    /// silent parent's last ratios (see the module doc).
    pub fn set_partition_hold(&self, hold: Duration) {
        let mut s = self.lock();
        s.hold = hold;
        s.children.set_hold(hold);
    }

    /// The partition hold in force.
    pub fn partition_hold(&self) -> Duration {
        self.lock().hold
    }

    /// Drops all children (their streams end): used at shutdown.
    pub fn drop_children(&self) {
        let mut s = self.lock();
        s.children = Children::new(self.cfg.interval, &s.limits);
        let hold = s.hold;
        s.children.set_hold(hold);
    }

    /// Recomputes this tier's ratios and instructs every child that needs it.
    pub fn tick(&self, now: Instant) {
        let mut s = self.lock();
        let held = std::time::Instant::now();
        let st = &mut *s;
        for id in st.children.prune(now) {
            info!(child = %id, "stale, dropped");
        }
        let fresh: Vec<&Child<Link>> = st
            .children
            .iter()
            .filter(|c| st.children.counted(c, now))
            .collect();
        let parent_says_shared = st.parent.zone_shared && st.parent.connected;
        st.owned.update(
            fresh.iter().map(|c| (c.level, c.zone.as_str())),
            parent_says_shared,
        );
        st.indexed = IndexedSums::of(&self.cfg, &st.owned, &st.rules, &fresh);
        let horizon = self.cfg.rate_horizon_secs();
        if st.indexed.is_some() {
            // Made by name only when asked (a scrape, a child reporting by name).
            st.computed.clear();
            st.bucket_offered.clear();
        } else if self.cfg.has_parent {
            let limited = st.rules.limited();
            // The parent needs the children's sums anyway: the ratios and offered sums are
            // made from that table, smaller than the rows when children share buckets.
            let sums = st.children.sums(&st.rules, st.config_gen, now);
            let rows = sums.iter().map(|(k, r)| (*k, r));
            (st.computed, st.bucket_offered) =
                ratios_and_offered(&limited, rows.clone(), &st.owned, horizon);
            st.upward = ratios::regroup(rows, self.cfg.level == proto::Level::Zone);
        } else {
            let limited = st.rules.limited();
            let rows = st.children.rows(now);
            (st.computed, st.bucket_offered) =
                ratios_and_offered(&limited, rows, &st.owned, horizon);
        }
        st.parent.ratios.retain(|_, p| p.expires > now);
        instruct::instruct_children(&self.cfg, &self.bytes, st, Round::All, now);
        self.ticks.record(held.elapsed());
        drop(s);
        self.ticked.notify_one();
    }

    /// Re-instructs, from this tier's last computed ratios, only the children that heard
    /// nothing for `REINSTRUCT_AFTER` of an interval. Run between ticks, so that a quiet
    /// child's gap stays under an interval without a full tick's recomputation.
    pub fn instruct_due(&self, now: Instant) {
        let mut s = self.lock();
        instruct::instruct_children(&self.cfg, &self.bytes, &mut s, Round::Due, now);
    }

    /// An instruction from the parent arrived: keep its ratios with their expiry, take its
    /// config, and pass the news down.
    pub fn on_parent_instruction(&self, i: &proto::Instruction, now: Instant) {
        let new_rules = i
            .has_config
            .then(|| Rules::from_wire(&i.config_version, &i.config));
        parent::take_instruction(&mut self.lock(), i, new_rules.as_ref(), now);
        match new_rules {
            Some(r) => self.set_rules(r, now),
            // The children's sums did not move: pass the parent's news on without a tick.
            None => {
                let mut s = self.lock();
                instruct::instruct_children(&self.cfg, &self.bytes, &mut s, Round::All, now);
            }
        }
    }

    /// Marks the stream to the parent up or down.
    pub fn set_parent_connected(&self, up: bool) {
        self.lock().parent.connected = up;
    }

    /// Whether this tier has a parent whose instructions have expired (children fail open).
    pub fn fail_open(&self, now: Instant) -> bool {
        self.cfg.has_parent && self.lock().parent.valid_until.is_none_or(|t| t <= now)
    }

    /// The report this tier sends its parent: its children's totals, regrouped. `Live`
    /// sums the children's rows now (an urgent report, or the first on a new stream);
    /// `LastTick` takes the table of the last tick (the periodic report, sent right after
    /// a tick: the same figures without a second pass over every row).
    pub fn upward_report(&self, now: Instant, sums: Sums) -> proto::Report {
        let mut s = self.lock();
        s.seq += 1;
        let keep_zone = self.cfg.level == proto::Level::Zone;
        let live;
        let totals = match sums {
            Sums::Live => {
                live = ratios::regroup(s.children.rows(now), keep_zone);
                &live
            }
            Sums::LastTick => &s.upward,
        };
        let (rates, packed) = packing::pack_totals(
            totals,
            &s.rules,
            (&self.cfg.region, &self.cfg.zone),
            packing::speaks_packed(s.parent.wire_version)
                && s.parent.config_version == s.rules.version,
        );
        proto::Report {
            reporter_id: self.cfg.id.clone(),
            level: self.cfg.level as i32,
            zone: self.cfg.zone.clone(),
            region: self.cfg.region.clone(),
            services: s.children.services(now),
            config_version: s.rules.version.clone(),
            interval_ms: self.cfg.interval.as_millis() as u32,
            rates,
            seq: s.seq,
            urgent: false,
            learning: Self::learning(&s, now),
            wire_version: grl_core::packed::WIRE_VERSION,
            packed,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use grl_config::Scope;
    use tokio::sync::mpsc;

    /// A role: leading or not, with the leader's address.
    fn role(leading: bool, leader: &str) -> Leadership {
        Leadership {
            leading,
            leader: Some(leader.into()),
        }
    }

    /// A global controller with no parent, owning the global scope.
    pub(crate) fn controller() -> Node {
        Node::new(NodeConfig {
            level: proto::Level::Global,
            id: "c".into(),
            zone: String::new(),
            region: String::new(),
            interval: Duration::from_secs(1),
            scopes: vec![Scope::Global],
            has_parent: false,
            validity_intervals: 5,
        })
    }

    /// A zone aggregator (zone `a` of region `eu`) under a parent.
    pub(crate) fn aggregator() -> Node {
        Node::new(NodeConfig {
            level: proto::Level::Zone,
            id: "agg".into(),
            zone: "a".into(),
            region: "eu".into(),
            interval: Duration::from_secs(1),
            scopes: vec![Scope::Zone],
            has_parent: true,
            validity_intervals: 5,
        })
    }

    /// Service `pay` with one global deny bucket `gw` of 600 rps (caller `gw`).
    pub(crate) fn pay_gw_rules() -> Rules {
        let yaml = "service: pay\nbuckets:\n  - { name: gw, match: { caller: gw }, scope: global, mode: deny, policy: { kind: fixed, rps: 600 } }\n";
        let snap =
            grl_config::from_files("v1", [("services/pay.yaml".into(), yaml.into())]).unwrap();
        Rules::from_snapshot(&snap, &[], 0, 0)
    }

    /// A zone aggregator's report to `controller()`, with no rows.
    pub(crate) fn report() -> proto::Report {
        proto::Report {
            reporter_id: "agg".into(),
            level: proto::Level::Zone as i32,
            zone: "a".into(),
            region: "eu".into(),
            services: vec!["payments".into()],
            interval_ms: 1000,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_new_leader_learns_one_interval_before_it_instructs() {
        let node = controller();
        let t0 = Instant::now();
        node.set_role(role(false, "other:1"), t0);
        node.set_role(role(true, "me:1"), t0);
        let (link, mut rx) = mpsc::channel(16);
        node.on_report(1, link, &report(), None, t0).unwrap();
        node.tick(t0 + Duration::from_millis(500));
        assert!(rx.try_recv().is_err(), "instructed while learning");
        node.tick(t0 + Duration::from_millis(1000));
        assert!(
            matches!(rx.try_recv(), Ok(Ok(_))),
            "no instruction after one interval"
        );
    }

    /// Whether `n` was woken (a permit is stored when nobody waits).
    async fn woken(n: &tokio::sync::Notify) -> bool {
        tokio::time::timeout(Duration::from_millis(10), n.notified())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_child_connecting_with_traffic_wakes_the_tick_and_the_parent_at_once() {
        let agg = aggregator();
        let t0 = Instant::now();
        agg.set_rules(pay_gw_rules(), t0);
        let client = |id: &str, offered: f64| proto::Report {
            reporter_id: id.into(),
            level: proto::Level::Client as i32,
            zone: "a".into(),
            region: "eu".into(),
            services: vec!["pay".into()],
            config_version: "v1".into(),
            interval_ms: 1000,
            seq: 1,
            rates: vec![proto::BucketRate {
                service: "pay".into(),
                bucket: "gw".into(),
                offered,
                clients: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        let (link, _down) = mpsc::channel(16);
        agg.on_report(1, link.clone(), &client("idle", 0.0), None, t0)
            .unwrap();
        assert!(!woken(&agg.wake).await, "an idle child woke the tick");
        agg.on_report(2, link.clone(), &client("loaded", 100.0), None, t0)
            .unwrap();
        assert!(woken(&agg.wake).await, "the tick slept on a loaded child");
        assert!(woken(&agg.wake_parent).await, "the parent was not told");
        let mut again = client("loaded", 100.0);
        again.seq = 2;
        agg.on_report(2, link, &again, None, t0 + Duration::from_secs(1))
            .unwrap();
        assert!(
            !woken(&agg.wake).await,
            "a known child's report woke the tick"
        );
    }

    #[tokio::test]
    async fn a_follower_takes_no_report_and_redirects_the_stream() {
        let node = controller();
        let now = Instant::now();
        node.set_role(role(false, "10.0.0.2:7300"), now);
        let (link, mut rx) = mpsc::channel(16);
        node.on_report(1, link, &report(), None, now).unwrap();
        let refusal = rx.try_recv().unwrap().unwrap_err();
        assert_eq!(
            leadership::redirect_of(&refusal).as_deref(),
            Some("10.0.0.2:7300")
        );
        assert!(
            crate::tier::observe::status::status(&node, now)
                .children
                .is_empty(),
            "a follower took a child"
        );
    }

    #[tokio::test]
    async fn a_deposed_leader_redirects_its_children_to_the_new_one() {
        let node = controller();
        let now = Instant::now();
        let (link, mut rx) = mpsc::channel(16);
        node.on_report(1, link, &report(), None, now).unwrap();
        while rx.try_recv().is_ok() {}
        node.set_role(role(false, "10.0.0.2:7300"), now);
        let refusal = rx.try_recv().unwrap().unwrap_err();
        assert_eq!(refusal.code(), tonic::Code::Unavailable);
        assert_eq!(
            leadership::redirect_of(&refusal).as_deref(),
            Some("10.0.0.2:7300")
        );
        assert!(
            crate::tier::observe::status::status(&node, now)
                .children
                .is_empty(),
            "children kept"
        );
        node.tick(now + Duration::from_secs(2));
        assert!(rx.try_recv().is_err(), "a follower instructed a child");
    }
}
