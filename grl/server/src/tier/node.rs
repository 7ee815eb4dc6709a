//! The state machine shared by aggregators and controllers: children's reports in, ratios
//! computed for the scopes this tier owns, the parent's ratios and allowances kept with
//! their expiry, and instructions out to each child when something changed (at least once
//! per interval). Each instruction gives the child, per bucket, its allowance: its share of
//! the bucket's limit (scopes owned here) or of this tier's allowance from the parent, by
//! its share of the offered load (see `ratios` for the fairness and the headroom).
//!
//! An urgent report (a child's rate jumped) wakes the tick at once (coalesced with the
//! other urgent reports of the same few milliseconds) and, below the top, an upward report.

pub use super::tick_times::TickTimes;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prost::Message;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::FastMap;
use super::admission::{self, Reason, RefusalCounts, ReportLimits};
use super::by_index::{IndexedSums, PackedForChild};
use super::children::{Child, Children, SentRatio};
use super::election::{self, Role};
use super::packing::{self, OutRatio};
use super::ratios::{self, Computed, RatioKey, Totals};
use super::rules::Rules;
use grl_config::Scope;
use grl_core::packed::IndexedRow;
use grl_core::proto;
use grl_core::wire;

/// How a tier reaches one child: the sending half of its instruction stream.
pub type Link = mpsc::Sender<Result<proto::Instruction, tonic::Status>>;

/// What kind of tier a node is.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Zone (aggregators), Region (controllers with a parent) or Global.
    pub level: proto::Level,
    /// This tier's id when reporting to its parent.
    pub id: String,
    /// Zone ("" above zones).
    pub zone: String,
    /// Region ("" for a global controller that serves several regions).
    pub region: String,
    /// Reporting interval.
    pub interval: Duration,
    /// Scopes whose ratios this tier computes; the others come from the parent.
    pub scopes: Vec<Scope>,
    /// Whether this tier reports to a parent.
    pub has_parent: bool,
    /// Ratios computed here are valid this many intervals.
    pub validity_intervals: u32,
}

impl NodeConfig {
    /// How long a ratio computed here stays valid.
    pub fn validity(&self) -> Duration {
        self.interval * self.validity_intervals
    }
}

/// One bucket's instruction from the parent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FromParent {
    /// The drop ratio.
    pub ratio: f64,
    /// When it stops being valid.
    pub expires: Instant,
    /// This tier's allowance, when the parent gave one (valid as long as the ratio).
    pub allowed: Option<f64>,
}

/// What came from the parent.
#[derive(Debug, Default)]
pub(crate) struct Parent {
    /// Ratios and allowances by (service, bucket).
    pub ratios: BTreeMap<(String, String), FromParent>,
    /// Whether the stream to the parent is up.
    pub connected: bool,
    /// When the parent's latest instruction stops being valid.
    pub valid_until: Option<Instant>,
    /// The wire version the parent speaks (from its instructions).
    pub wire_version: u32,
    /// The config version of the parent's latest instruction: rows go up packed only
    /// when this tier holds the same version (a tier following its own config may not).
    pub config_version: String,
}

/// The mutable state of a node.
#[derive(Debug)]
pub(crate) struct State {
    pub rules: Arc<Rules>,
    /// The rules before the last change: a child's packed rows sent just before it heard
    /// of the change are read with them.
    pub previous_rules: Option<Arc<Rules>>,
    pub config_gen: u64,
    pub children: Children<Link>,
    pub parent: Parent,
    pub computed: BTreeMap<RatioKey, Computed>,
    /// The last tick's sums by index, when it was worked so (see [`IndexedSums`]).
    pub indexed: Option<IndexedSums>,
    /// Offered rate by (service, bucket) over all fresh children, as of the last tick.
    pub bucket_offered: BTreeMap<(String, String), f64>,
    /// What the last tick summed for the parent (see [`Node::upward_report`]): the
    /// children's rows are summed once per tick, for the ratios, the offered sums and this.
    pub upward: Totals,
    pub seq: u64,
    pub limits: ReportLimits,
    pub refusal_log: admission::RefusalLog,
    /// Whether this tier leads (always, without an election) and who does.
    pub role: Role,
    /// A tier that just started, or a newly elected leader, sends nothing to its children
    /// before this (it learns), and tells its parent its sums are partial.
    pub learn_until: Option<Instant>,
    /// How long a child joining during the learning can still extend it.
    pub learn_cap: Option<Instant>,
}

/// Control-plane byte counters (encoded protobuf sizes).
#[derive(Debug, Default)]
pub struct Bytes {
    /// Bytes of reports received from children.
    pub reports_in: AtomicU64,
    /// Bytes of instructions sent to children.
    pub instructions_out: AtomicU64,
}

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
    pub refused: RefusalCounts,
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
            computed: BTreeMap::new(),
            indexed: None,
            bucket_offered: BTreeMap::new(),
            upward: Totals::new(),
            seq: 0,
            limits: ReportLimits::default(),
            refusal_log: admission::RefusalLog::new(std::time::Duration::from_secs(1)),
            role: Role::sole(),
            learn_until: None,
            learn_cap: None,
        };
        Self {
            cfg,
            state: Mutex::new(state),
            conns: AtomicU64::new(0),
            bytes: Bytes::default(),
            ticks: TickTimes::default(),
            refused: RefusalCounts::default(),
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
                let _ = link.try_send(Err(election::not_leader(s.role.leader.as_deref())));
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
        let indexed = indexed_rows(r, &rules).map(|rows| {
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
            self.instruct_children(&mut s, Round::Child(&r.reporter_id), now);
        }
        if r.urgent {
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
    pub fn role(&self) -> Role {
        self.lock().role.clone()
    }

    /// Takes a new role from the election. Elected: learn from reports for one interval
    /// before instructing anyone (ratios computed from a partial picture would over- or
    /// under-drop). Deposed: every child's stream ends with a redirect to the new leader,
    /// and the children's state is dropped.
    pub fn set_role(&self, role: Role, now: Instant) {
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
                let refusal = election::not_leader(role.leader.as_deref());
                for c in s.children.iter_mut() {
                    let _ = c.link.try_send(Err(refusal.clone()));
                }
                s.children = Children::new(self.cfg.interval, &s.limits);
                s.computed.clear();
                s.learn_until = None;
            }
            _ => info!(leader = ?role.leader, "leader changed"),
        }
        s.role = role;
    }

    /// Drops all children (their streams end): used at shutdown.
    pub fn drop_children(&self) {
        let mut s = self.lock();
        s.children = Children::new(self.cfg.interval, &s.limits);
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
            .filter(|c| !st.children.is_stale(c, now))
            .collect();
        st.indexed = IndexedSums::of(&self.cfg, &st.rules, &fresh);
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
                ratios_and_offered(&limited, rows.clone(), &self.cfg);
            st.upward = ratios::regroup(rows, self.cfg.level == proto::Level::Zone);
        } else {
            let limited = st.rules.limited();
            let rows = st.children.rows(now);
            (st.computed, st.bucket_offered) = ratios_and_offered(&limited, rows, &self.cfg);
        }
        st.parent.ratios.retain(|_, p| p.expires > now);
        self.instruct_children(st, Round::All, now);
        self.ticks.record(held.elapsed());
        drop(s);
        self.ticked.notify_one();
    }

    /// Re-instructs, from this tier's last computed ratios, only the children that heard
    /// nothing for [`REINSTRUCT_AFTER`] of an interval. Run between ticks, so that a quiet
    /// child's gap stays under an interval without a full tick's recomputation.
    pub fn instruct_due(&self, now: Instant) {
        let mut s = self.lock();
        self.instruct_children(&mut s, Round::Due, now);
    }

    /// Instructs the children of `round` as far as each needs it now; nobody while this
    /// tier follows or learns.
    fn instruct_children(&self, st: &mut State, round: Round<'_>, now: Instant) {
        if !st.role.leading {
            return;
        }
        if let Some(t) = st.learn_until {
            if now < t {
                return;
            }
            info!("learned: sending ratios");
            st.learn_until = None;
            st.learn_cap = None;
        }
        let State {
            rules,
            config_gen,
            children,
            parent,
            computed,
            bucket_offered,
            indexed,
            ..
        } = st;
        let indexed = indexed.as_ref().filter(|x| Arc::ptr_eq(&x.rules, rules));
        // Both built for the first child worked by name, if any.
        let named = std::cell::OnceCell::new();
        let mut from: Option<Sources<'_>> = None;
        let mut send = |c: &mut Child<Link>| {
            let by_index = indexed.and_then(|x| {
                let ordinals = c.service_ordinals(rules).to_vec();
                x.packed_for(&self.cfg, c, &ordinals)
            });
            let made = match by_index {
                Some(p) => Made::Packed(p),
                None => {
                    c.refresh_digest(rules, *config_gen);
                    let (computed, offered) = match indexed {
                        Some(x) => {
                            let (c, o) = named.get_or_init(|| x.by_name());
                            (c, o)
                        }
                        None => (&*computed, &*bucket_offered),
                    };
                    let from =
                        from.get_or_insert_with(|| Sources::new(rules, computed, offered, parent));
                    Made::Named(ratios_for(&self.cfg, rules, from, c, now))
                }
            };
            instruct(&self.cfg, (rules, *config_gen), made, c, now, &self.bytes);
        };
        match round {
            Round::Child(id) => children.get_mut(id).into_iter().for_each(send),
            Round::All => children.iter_mut().for_each(&mut send),
            Round::Due => children
                .iter_mut()
                .filter(|c| reinstruct_due(&self.cfg, c, now))
                .for_each(&mut send),
        }
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

    /// An instruction from the parent arrived: keep its ratios with their expiry, take its
    /// config, and pass the news down.
    pub fn on_parent_instruction(&self, i: &proto::Instruction, now: Instant) {
        let dflt = Duration::from_millis(u64::from(i.valid_for_ms));
        let new_rules = i
            .has_config
            .then(|| Rules::from_wire(&i.config_version, &i.config));
        {
            let mut s = self.lock();
            s.parent.valid_until = Some(now + dflt);
            s.parent.wire_version = i.wire_version;
            s.parent.config_version.clone_from(&i.config_version);
            let (named, bad) = packing::unpack_ratios(i, new_rules.as_ref().unwrap_or(&s.rules));
            if let Some(e) = bad {
                warn!(error = %e, "the parent's packed ratios could not be read");
            }
            s.parent.ratios = named
                .iter()
                .map(|r| {
                    let valid = if r.valid_for_ms > 0 {
                        Duration::from_millis(u64::from(r.valid_for_ms))
                    } else {
                        dflt
                    };
                    (
                        (r.service.clone(), r.bucket.clone()),
                        FromParent {
                            ratio: r.ratio,
                            expires: now + valid,
                            allowed: r.allowed,
                        },
                    )
                })
                .collect();
        }
        match new_rules {
            Some(r) => self.set_rules(r, now),
            // The children's sums did not move: pass the parent's news on without a tick.
            None => {
                let mut s = self.lock();
                self.instruct_children(&mut s, Round::All, now);
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
}

/// The rows of report `r` by index when it can be taken so: all its rows packed, of the
/// version `rules` in force, and that version worked by index ([`Rules::dense`]). `None`:
/// take it by name. A row that cannot be read refuses the whole report, as by name.
fn indexed_rows(r: &proto::Report, rules: &Rules) -> Option<Result<Vec<IndexedRow>, Reason>> {
    let p = r.packed.as_ref()?;
    let dense = rules.dense()?;
    if !r.rates.is_empty() || p.config_version.is_empty() || p.config_version != rules.version {
        return None;
    }
    Some(match grl_core::packed::unpack_rows(p) {
        Err(_) => Err(Reason::Packed),
        Ok(rows) if rows.last().is_some_and(|x| x.index as usize >= dense.len()) => {
            Err(Reason::UnknownBucket)
        }
        Ok(rows) => Ok(rows),
    })
}

/// A tick's ratios of the scopes `cfg` owns, and its offered rate by (service, bucket),
/// from `rows` (the children's rows or their sums).
fn ratios_and_offered<'a>(
    limited: &[ratios::Limited],
    rows: impl Iterator<Item = (ratios::KeyRef<'a>, &'a ratios::Rate)> + Clone,
    cfg: &NodeConfig,
) -> (
    BTreeMap<RatioKey, Computed>,
    BTreeMap<(String, String), f64>,
) {
    let computed = ratios::compute(limited, rows.clone(), &cfg.scopes);
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
struct Sources<'a> {
    computed: FastMap<(&'a str, &'a str, &'a str), &'a Computed>,
    /// Per service, what each of its buckets takes from outside the child, by the bucket's
    /// position in the rules: looked up once per round, not once per child.
    services: FastMap<&'a str, Vec<BucketSource<'a>>>,
}

/// What a round knows of one bucket before looking at any child.
struct BucketSource<'a> {
    /// [`SentRatio::key_of`] the bucket.
    key: u64,
    /// Its index in the rules (packed ratios), if known.
    index: Option<u32>,
    /// The parent's ratio and allowance for it.
    parent: Option<FromParent>,
    /// What all this tier's fresh children offer in it.
    offered: f64,
    /// Its computed ratio when it is global and owned here (the one scope key, "": no
    /// lookup per child).
    global: Option<&'a Computed>,
}

impl<'a> Sources<'a> {
    fn new(
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

/// Which children a round of instructions looks at.
enum Round<'a> {
    /// The one with this id (it just reported for the first time).
    Child(&'a str),
    /// Every child (a tick).
    All,
    /// Those that heard nothing for [`REINSTRUCT_AFTER`] of an interval.
    Due,
}

/// The part of an interval after which a child is instructed again even if nothing
/// changed, so that its ratios never expire while the tier is up and every child hears
/// within an interval. The tiers look every eighth of an interval, so a quiet child hears
/// again after 0.75 of an interval: a quarter of an interval is left for a busy tier's
/// late rounds and for delivery (with 0.875, 5,000 children on 2 shared cores heard after
/// up to 1.1 intervals).
pub const REINSTRUCT_AFTER: f64 = 0.7;

/// Whether `c` heard nothing for [`REINSTRUCT_AFTER`] of an interval.
fn reinstruct_due(cfg: &NodeConfig, c: &Child<Link>, now: Instant) -> bool {
    c.sent
        .at
        .is_none_or(|t| now - t >= cfg.interval.mul_f64(REINSTRUCT_AFTER))
}

/// Sends `c` an instruction of `ratios` (made for it by name or by index) if its config is
/// out of date, its ratios or allowances changed, or it heard nothing for
/// [`REINSTRUCT_AFTER`] of an interval.
fn instruct(
    cfg: &NodeConfig,
    (rules, config_gen): (&Rules, u64),
    made: Made<'_>,
    c: &mut Child<Link>,
    now: Instant,
    bytes: &Bytes,
) {
    let resend_config =
        c.config_version != rules.version && c.sent.at.is_none_or(|t| now - t >= cfg.interval * 2);
    let send_config =
        c.sent.config_gen != Some(config_gen) || c.sent.services != c.services || resend_config;
    let changed = match &made {
        Made::Named(ratios) => {
            ratios.len() != c.sent.ratios.len()
                || ratios.iter().zip(&c.sent.ratios).any(|(r, old)| {
                    old.key != r.key
                        || ratios::changed(old.ratio, r.out.ratio)
                        || ratios::allowance_changed(old.allowed, r.out.allowed)
                })
        }
        Made::Packed(p) => p.changed,
    };
    if !(send_config || changed || reinstruct_due(cfg, c, now)) {
        return;
    }
    let (sent_ratios, valid_for_ms, named, packed) = match made {
        Made::Named(ratios) => {
            let sent_ratios = ratios
                .iter()
                .map(|r| SentRatio {
                    key: r.key,
                    ratio: r.out.ratio,
                    allowed: r.out.allowed,
                })
                .collect();
            let valid_for_ms = ratios.iter().map(|r| r.out.valid_for_ms).max().unwrap_or(0);
            let out: Vec<OutRatio<'_>> = ratios.iter().map(|r| r.out).collect();
            let (named, packed) = packing::pack_ratios(
                &out,
                &rules.version,
                valid_for_ms,
                packing::speaks_packed(c.wire_version),
            );
            (sent_ratios, valid_for_ms, named, packed)
        }
        Made::Packed(p) => (p.sent, p.valid_for_ms, Vec::new(), Some(p.packed)),
    };
    let instr = proto::Instruction {
        config_version: rules.version.clone(),
        config: if send_config {
            rules.for_services(&c.services)
        } else {
            Vec::new()
        },
        has_config: send_config,
        valid_for_ms,
        interval_ms: cfg.interval.as_millis() as u32,
        ratios: named,
        wire_version: grl_core::packed::WIRE_VERSION,
        packed,
    };
    let len = instr.encoded_len() as u64;
    match c.link.try_send(Ok(instr)) {
        Ok(()) => {
            bytes.instructions_out.fetch_add(len, Ordering::Relaxed);
            c.sent.ratios = sent_ratios;
            c.sent.at = Some(now);
            if send_config {
                c.sent.config_gen = Some(config_gen);
                c.sent.services.clone_from(&c.services);
            }
        }
        Err(e) => debug!(child = %c.id, error = %e, "instruction not sent"),
    }
}

/// What a round made for one child: its ratios by name (turned into the wire form only
/// when an instruction goes out), or by index, already packed (see
/// [`IndexedSums::packed_for`]).
pub(crate) enum Made<'a> {
    /// By name.
    Named(Vec<ChildRatio<'a>>),
    /// By index.
    Packed(PackedForChild),
}

/// One bucket's ratio for a child, with borrowed names: built every round for every child,
/// turned into the wire form only when an instruction goes out.
pub(crate) struct ChildRatio<'a> {
    /// [`SentRatio::key_of`] the bucket.
    pub key: u64,
    /// The ratio, as it goes out.
    pub out: OutRatio<'a>,
}

/// The ratios of `c`'s services with their remaining validity: computed here for the scopes
/// this tier owns, else the parent's as long as they are valid; and `c`'s allowance in
/// each: its share of the limit over the scope (owned here) or of this tier's allowance
/// (from the parent), by its share of the offered load. No allowance for a child that
/// offered nothing in the bucket (it applies the ratio until it has a share), nor where the
/// parent gave none.
fn ratios_for<'a>(
    cfg: &NodeConfig,
    rules: &'a Rules,
    from: &Sources<'_>,
    c: &Child<Link>,
    now: Instant,
) -> Vec<ChildRatio<'a>> {
    let own_ms = cfg.validity().as_millis() as u32;
    let mut out = Vec::new();
    for (svc, d) in c.services.iter().zip(&c.digest.per_service) {
        let (Some((svc, buckets)), Some(slots), Some(sources)) = (
            rules.services().get_key_value(svc),
            rules.slots(svc),
            from.services.get(svc.as_str()),
        ) else {
            continue;
        };
        for (j, b) in buckets.iter().enumerate() {
            let (Some(_), Ok(scope)) = (b.limit_rps, wire::scope_from_wire(b.scope)) else {
                continue;
            };
            let (ratio, valid_for_ms, allowed) = if cfg.scopes.contains(&scope) {
                let group = ratios::scope_key(scope, &c.region, &c.zone);
                let own = if slots.first[j] {
                    d.in_group[j]
                } else {
                    c.offered(svc, &b.name, Some((scope, group)))
                };
                let computed = match scope {
                    Scope::Global => sources[j].global,
                    _ => from
                        .computed
                        .get(&(svc.as_str(), b.name.as_str(), group))
                        .copied(),
                };
                let allowed = computed
                    .filter(|_| own > 0.0)
                    .map(|x| ratios::share(x.limit, own, x.offered));
                (computed.map_or(0.0, |x| x.ratio), own_ms, allowed)
            } else {
                match sources[j].parent {
                    Some(p) if p.expires > now => {
                        let own = if slots.first[j] {
                            d.all[j]
                        } else {
                            c.offered(svc, &b.name, None)
                        };
                        let group = sources[j].offered;
                        // While dropping, the parent's ratio comes from the whole picture:
                        // a child never gets more than its rate at that admitted fraction,
                        // even where this tier has not heard every child yet (it restarted).
                        let allowed = p.allowed.filter(|_| own > 0.0).map(|a| {
                            let s = ratios::share(a, own, group);
                            if p.ratio > 0.0 {
                                s.min(own * (1.0 - p.ratio))
                            } else {
                                s
                            }
                        });
                        (p.ratio, (p.expires - now).as_millis() as u32, allowed)
                    }
                    _ => continue,
                }
            };
            out.push(ChildRatio {
                key: sources[j].key,
                out: OutRatio {
                    index: sources[j].index,
                    service: svc,
                    bucket: &b.name,
                    ratio,
                    valid_for_ms,
                    allowed,
                },
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A role: leading or not, with the leader's address.
    fn role(leading: bool, leader: &str) -> Role {
        Role {
            leading,
            leader: Some(leader.into()),
        }
    }

    fn controller() -> Node {
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

    fn report() -> proto::Report {
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

    /// A zone aggregator under `controller()`'s kind of parent.
    fn aggregator() -> Node {
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

    #[tokio::test]
    async fn zone_sums_go_up_packed_and_ratios_come_down_packed_between_version_2_tiers() {
        let yaml = "service: payments\nbuckets:\n  - { name: gw, match: { caller: gw }, scope: global, mode: deny, policy: { kind: fixed, rps: 100 } }\n  - { name: z, match: { caller: zc }, scope: zone, mode: deny, policy: { kind: fixed, rps: 50 } }\n";
        let snap =
            grl_config::from_files("v1", [("services/payments.yaml".into(), yaml.into())]).unwrap();
        let ctl = controller();
        let agg = aggregator();
        let t0 = Instant::now();
        ctl.set_rules(Rules::from_snapshot(&snap, &[], 0), t0);
        // A client says hello to the aggregator, which says hello to its parent and is
        // sent the config, by a version-2 parent.
        let client = |rates| proto::Report {
            reporter_id: "c1".into(),
            level: proto::Level::Client as i32,
            zone: "a".into(),
            region: "eu".into(),
            services: vec!["payments".into()],
            config_version: "v1".into(),
            interval_ms: 1000,
            rates,
            ..Default::default()
        };
        let (client_link, _client_down) = mpsc::channel(16);
        agg.on_report(7, client_link.clone(), &client(Vec::new()), None, t0)
            .unwrap();
        let (link, mut down) = mpsc::channel(16);
        let hello = agg.upward_report(t0, Sums::Live);
        ctl.on_report(1, link.clone(), &hello, None, t0).unwrap();
        let i = down.try_recv().unwrap().unwrap();
        assert!(i.has_config && i.config[0].first_index == Some(0));
        agg.on_parent_instruction(&i, t0);
        // The client offers 300 rps in `gw`.
        let rows = vec![proto::BucketRate {
            service: "payments".into(),
            bucket: "gw".into(),
            offered: 300.0,
            clients: 1,
            ..Default::default()
        }];
        agg.on_report(7, client_link, &client(rows), None, t0)
            .unwrap();
        let up = agg.upward_report(t0, Sums::Live);
        assert!(up.rates.is_empty(), "rows sent by name: {:?}", up.rates);
        let p = up.packed.as_ref().expect("no packed rows");
        assert_eq!(
            (p.config_version.as_str(), p.index_delta.as_slice()),
            ("v1", &[0][..])
        );
        // The controller reads them as the named rows and instructs by index.
        let t1 = t0 + Duration::from_millis(10);
        ctl.on_report(1, link, &up, None, t1).unwrap();
        ctl.tick(t1);
        let i = std::iter::from_fn(|| down.try_recv().ok())
            .last()
            .unwrap()
            .unwrap();
        assert!(i.ratios.is_empty() && i.packed.is_some(), "{i:?}");
        agg.on_parent_instruction(&i, t1);
        let p = agg.lock().parent.ratios[&("payments".to_string(), "gw".to_string())];
        assert!((p.ratio - 200.0 / 300.0).abs() < 1e-6, "{p:?}");
        assert_eq!(p.allowed.map(f64::round), Some(100.0));
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

    #[tokio::test]
    async fn a_quiet_child_is_re_instructed_between_ticks_before_an_interval() {
        let node = controller();
        let t0 = Instant::now();
        let (link, mut rx) = mpsc::channel(16);
        node.on_report(1, link, &report(), None, t0).unwrap();
        while rx.try_recv().is_ok() {}
        node.tick(t0 + Duration::from_millis(10));
        while rx.try_recv().is_ok() {}
        node.instruct_due(t0 + Duration::from_millis(635));
        assert!(
            rx.try_recv().is_err(),
            "re-instructed after 0.625 of an interval"
        );
        node.tick(t0 + Duration::from_millis(760));
        assert!(
            matches!(rx.try_recv(), Ok(Ok(_))),
            "not re-instructed at 0.75 of an interval"
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
            election::redirect_of(&refusal).as_deref(),
            Some("10.0.0.2:7300")
        );
        assert!(
            node.status(now).children.is_empty(),
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
            election::redirect_of(&refusal).as_deref(),
            Some("10.0.0.2:7300")
        );
        assert!(node.status(now).children.is_empty(), "children kept");
        node.tick(now + Duration::from_secs(2));
        assert!(rx.try_recv().is_err(), "a follower instructed a child");
    }
}
