//! What an operator sees of a tier, one model for every surface: `grl status --json`, the
//! tables of `grl status` and `grl top` ([`text`]) and the controller's `/status` page
//! ([`page`], with the last minutes of each bucket's load from [`history`]) all render a
//! [`StatusView`] built from the tier's `Status` answer, and `grl explain` an
//! [`ExplainView`] built from its `Explain` answer. The JSON field names are a contract
//! (README, "Operating it").

pub mod history;
pub mod page;
pub mod text;

use serde::Serialize;

use grl_core::proto;

/// A tier's state: its config version and role, its zones and every bucket (or one
/// service's). Rates are requests per second over the children's last interval.
#[derive(Debug, Clone, Serialize)]
pub struct StatusView {
    /// The config version in force ("" before the first).
    pub config_version: String,
    /// `zone` (an aggregator), `region` or `global` (a controller).
    pub level: &'static str,
    /// The tier's zone (an aggregator; empty on a controller).
    pub zone: String,
    /// The tier's region.
    pub region: String,
    /// False on a standby controller.
    pub leading: bool,
    /// The leader's address, when an election is used and the leader is known.
    pub leader: Option<String>,
    /// A new leader still collecting reports before it sends ratios.
    pub learning: bool,
    /// This tier's own parent is gone and its instructions expired.
    pub fail_open: bool,
    /// The zones reporting here (a global controller: the regions).
    pub zones: Vec<ZoneView>,
    /// Every bucket, in config order.
    pub buckets: Vec<BucketView>,
    /// Incident overrides in force (a controller).
    pub overrides: Vec<OverrideView>,
}

/// One zone's children.
#[derive(Debug, Clone, Serialize)]
pub struct ZoneView {
    /// The zone (a global controller's children are regions: the region).
    pub zone: String,
    /// Seconds since the zone's freshest child reported.
    pub seconds_since_report: f64,
    /// Children reporting for the zone (aggregators, or clients at an aggregator).
    pub children: usize,
    /// Of those, the ones gone stale (their rows no longer count).
    pub stale: usize,
}

/// One bucket.
#[derive(Debug, Clone, Serialize)]
pub struct BucketView {
    /// The service.
    pub service: String,
    /// The bucket.
    pub bucket: String,
    /// `deny` or `shadow`.
    pub mode: &'static str,
    /// `global`, `region` or `zone`.
    pub scope: &'static str,
    /// The limit in force; `None` when the bucket is not enforced.
    pub limit_rps: Option<f64>,
    /// Offered before any drop.
    pub offered_rps: f64,
    /// Let through: offered minus dropped.
    pub admitted_rps: f64,
    /// Refused (deny mode).
    pub dropped_rps: f64,
    /// Would have been refused (shadow mode).
    pub shadow_dropped_rps: f64,
    /// The ratio computed or forwarded here.
    pub drop_ratio: f64,
    /// The zones offering the most, largest first.
    pub top_zones: Vec<ZoneLoad>,
    /// An incident override's bucket.
    pub is_override: bool,
    /// When the limit in force changes next (a scheduled limit starts or ends), Unix
    /// seconds; `None` when nothing is scheduled (or the tier does not hold the config).
    pub next_change_unix: Option<i64>,
    /// The limit from that change on (`None`: not enforced then, or no change).
    pub next_limit_rps: Option<f64>,
}

/// A zone's offered rate in one bucket.
#[derive(Debug, Clone, Serialize)]
pub struct ZoneLoad {
    /// The zone.
    pub zone: String,
    /// Its offered rate.
    pub offered_rps: f64,
}

/// An incident override.
#[derive(Debug, Clone, Serialize)]
pub struct OverrideView {
    /// The override's id.
    pub id: String,
    /// The service.
    pub service: String,
    /// The caller (empty: any).
    pub caller: String,
    /// The procedure or `Prefix/*` (empty: any).
    pub procedure: String,
    /// Its limit in requests per second.
    pub rps: f64,
    /// When it expires (Unix seconds).
    pub expires_at_unix: u64,
    /// Why.
    pub reason: String,
    /// Who set it.
    pub who: String,
}

impl BucketView {
    /// Refusing requests now: a deny bucket with dropped traffic or a ratio in force.
    pub fn dropping(&self) -> bool {
        self.mode == "deny" && (self.dropped_rps > 0.0 || self.drop_ratio > 0.0)
    }

    /// Would refuse requests now: a shadow bucket over its limit.
    pub fn shadow_dropping(&self) -> bool {
        self.mode == "shadow" && (self.shadow_dropped_rps > 0.0 || self.drop_ratio > 0.0)
    }
}

/// The name of a level.
pub fn level_name(level: i32) -> &'static str {
    match proto::Level::try_from(level) {
        Ok(proto::Level::Client) => "client",
        Ok(proto::Level::Zone) => "zone",
        Ok(proto::Level::Region) => "region",
        Ok(proto::Level::Global) => "global",
        _ => "unknown",
    }
}

/// The name of a mode.
pub fn mode_name(mode: i32) -> &'static str {
    match proto::Mode::try_from(mode) {
        Ok(proto::Mode::Shadow) => "shadow",
        Ok(proto::Mode::Deny) => "deny",
        _ => "unknown",
    }
}

/// The name of a scope.
pub fn scope_name(scope: i32) -> &'static str {
    match proto::Scope::try_from(scope) {
        Ok(proto::Scope::Global) => "global",
        Ok(proto::Scope::Region) => "region",
        Ok(proto::Scope::Zone) => "zone",
        _ => "unknown",
    }
}

impl From<&proto::BucketStatus> for BucketView {
    fn from(b: &proto::BucketStatus) -> Self {
        Self {
            service: b.service.clone(),
            bucket: b.bucket.clone(),
            mode: mode_name(b.mode),
            scope: scope_name(b.scope),
            limit_rps: b.limit_rps,
            offered_rps: b.offered,
            admitted_rps: (b.offered - b.dropped).max(0.0),
            dropped_rps: b.dropped,
            shadow_dropped_rps: b.shadow_dropped,
            drop_ratio: b.drop_ratio,
            top_zones: b
                .top_zones
                .iter()
                .map(|z| ZoneLoad {
                    zone: z.zone.clone(),
                    offered_rps: z.offered,
                })
                .collect(),
            is_override: b.is_override,
            next_change_unix: b.next_change_unix,
            next_limit_rps: b.next_limit_rps,
        }
    }
}

impl From<&proto::StatusResponse> for StatusView {
    fn from(st: &proto::StatusResponse) -> Self {
        let mut zones: Vec<ZoneView> = Vec::new();
        for c in &st.children {
            let z = match zones.iter_mut().find(|z| z.zone == c.zone) {
                Some(z) => z,
                None => {
                    zones.push(ZoneView {
                        zone: c.zone.clone(),
                        seconds_since_report: f64::INFINITY,
                        children: 0,
                        stale: 0,
                    });
                    zones.last_mut().expect("just pushed")
                }
            };
            z.seconds_since_report = z.seconds_since_report.min(c.seconds_since_report);
            z.children += 1;
            z.stale += usize::from(c.stale);
        }
        zones.sort_by(|a, b| a.zone.cmp(&b.zone));
        Self {
            config_version: st.config_version.clone(),
            level: level_name(st.level),
            zone: st.zone.clone(),
            region: st.region.clone(),
            leading: st.leading,
            leader: (!st.leader.is_empty()).then(|| st.leader.clone()),
            learning: st.learning,
            fail_open: st.fail_open,
            zones,
            buckets: st.buckets.iter().map(BucketView::from).collect(),
            overrides: st
                .overrides
                .iter()
                .map(|o| OverrideView {
                    id: o.id.clone(),
                    service: o.service.clone(),
                    caller: o.caller.clone(),
                    procedure: o.procedure.clone(),
                    rps: o.rps,
                    expires_at_unix: o.expires_at_unix,
                    reason: o.reason.clone(),
                    who: o.who.clone(),
                })
                .collect(),
        }
    }
}

/// Which bucket a request falls in, and why.
#[derive(Debug, Clone, Serialize)]
pub struct ExplainView {
    /// The config version the answer is from.
    pub config_version: String,
    /// The service.
    pub service: String,
    /// The caller (empty: any).
    pub caller: String,
    /// The procedure or `Prefix/*` (empty: any).
    pub procedure: String,
    /// The winning bucket's name, or `None` (the request is never limited).
    pub bucket: Option<String>,
    /// The winning bucket's mode (`None` without a bucket).
    pub mode: Option<&'static str>,
    /// The ratio a client applies to the request now (0 without a bucket).
    pub drop_ratio: f64,
    /// The request is only counted, not refused: its bucket is in shadow mode.
    pub shadow: bool,
    /// The winning bucket's state.
    pub state: Option<BucketView>,
    /// The bucket that decides the request in addition, if any, and its state.
    pub in_addition: Option<BucketView>,
    /// Every rule of the service, most specific first.
    pub considered: Vec<ConsideredView>,
}

/// One rule as considered for a request.
#[derive(Debug, Clone, Serialize)]
pub struct ConsideredView {
    /// The bucket.
    pub bucket: String,
    /// The rule as written, `caller=C procedure=P` (`*`: any).
    pub rule: String,
    /// Whether the rule takes the request.
    pub matched: bool,
    /// `wins`, `in_addition`, `less_specific` or `no_match`.
    pub role: String,
    /// Why.
    pub reason: String,
    /// An incident override.
    pub is_override: bool,
}

impl ExplainView {
    /// The view of `e`, the answer for `service`, `caller` and `procedure`.
    pub fn of(e: &proto::ExplainResponse, service: &str, caller: &str, procedure: &str) -> Self {
        let state = e.bucket.as_ref().map(BucketView::from);
        Self {
            config_version: e.config_version.clone(),
            service: service.into(),
            caller: caller.into(),
            procedure: procedure.into(),
            bucket: state.as_ref().map(|b| b.bucket.clone()),
            mode: state.as_ref().map(|b| b.mode),
            drop_ratio: state.as_ref().map_or(0.0, |b| b.drop_ratio),
            shadow: state.as_ref().is_some_and(|b| b.mode == "shadow"),
            in_addition: e.in_addition.as_ref().map(BucketView::from),
            state,
            considered: e
                .considered
                .iter()
                .map(|c| ConsideredView {
                    bucket: c.bucket.clone(),
                    rule: c.rule.clone(),
                    matched: c.matched,
                    role: c.role.clone(),
                    reason: c.reason.clone(),
                    is_override: c.is_override,
                })
                .collect(),
        }
    }
}
