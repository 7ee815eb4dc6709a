//! The `/metrics` contract of aggregators and controllers: names defined once here, and the
//! Prometheus text rendering of a status snapshot (built fresh on every scrape).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use super::tick_times::TickDurations;
use crate::tier::engine::admission::Reason;
use grl_config::Scope;
use grl_core::proto;
use grl_core::wire;

/// Offered requests per second summed over this tier's children:
/// `{service, bucket, scope}`.
pub const OFFERED_RPS: &str = "grl_tier_offered_rps";
/// The drop ratio this tier applies or forwards: `{service, bucket}` (the largest over
/// regions or zones when it computes several).
pub const DROP_RATIO: &str = "grl_tier_drop_ratio";
/// The limit of a bucket: `{service, bucket}`.
pub const LIMIT_RPS: &str = "grl_tier_limit_rps";
/// When a bucket's limit in force changes next, a scheduled limit starting or ending
/// (Unix seconds; controllers holding the config): `{service, bucket}`.
pub const LIMIT_NEXT_CHANGE: &str = "grl_tier_limit_next_change_timestamp_seconds";
/// The limit from that change on (absent when the bucket is not enforced then).
pub const LIMIT_NEXT_RPS: &str = "grl_tier_limit_next_rps";
/// Connected children: `{level}` (client, zone, region).
pub const CHILDREN: &str = "grl_tier_children";
/// Children silent for more than 3 intervals (left out of the sums).
pub const STALE_CHILDREN: &str = "grl_tier_stale_children";
/// Always 1, labelled with the config version in force: `{version}`.
pub const CONFIG_INFO: &str = "grl_tier_config_info";
/// The config version a region runs, by region (a staged rollout moves regions one wave
/// at a time): `{region, version}`, 1.
pub const CONFIG_VERSION_INFO: &str = "grl_config_version_info";
/// 1 when the parent's ratios expired (children fail open for parent-owned scopes).
pub const FAIL_OPEN: &str = "grl_tier_fail_open";
/// 1 when the stream to the parent is up.
pub const PARENT_CONNECTED: &str = "grl_tier_parent_connected";
/// 1 on a tier that leads: a controller elected leader, and every tier without an
/// election; 0 on a standby controller (it refuses children).
pub const LEADER: &str = "grl_tier_leader";
/// Incident overrides in force (controllers).
pub const OVERRIDES: &str = "grl_tier_overrides";
/// Control-plane bytes (encoded protobuf) exchanged with children: `{direction}`
/// (`reports_in`, `instructions_out`). Exposed as `<name>_total`.
pub const CONTROL_BYTES: &str = "grl_tier_control_bytes";
/// `ApplyConfig` calls by `{result}` (`ok`, `invalid`). Exposed as `<name>_total`, i.e.
/// `grl_controller_apply_total`.
pub const APPLY: &str = "grl_controller_apply";
/// Children's reports (or rows of them) refused: `{reason}` (`negative`, `not_finite`,
/// `implausible`, `unknown_bucket`, `too_many_rows`, `too_many_children`,
/// `duplicate_client`, `bad_name`, `level`, `packed`). Exposed as
/// `grl_tier_reports_refused_total`.
pub const REPORTS_REFUSED: &str = "grl_tier_reports_refused";
/// Followed config changes (config dir or git commit) refused as invalid; the snapshot in
/// force stays. Exposed as `grl_controller_config_refused_total`.
pub const CONFIG_REFUSED: &str = "grl_controller_config_refused";

/// Admin calls (`ApplyConfig`, override set/clear) refused by `{reason}` (`no_credentials`,
/// `wrong_token`, `identity_not_allowed`, `malformed_authorization`); nothing changed.
/// Exposed as `grl_controller_admin_refused_total`.
pub const ADMIN_REFUSED: &str = "grl_controller_admin_refused";
/// Children's report streams refused by `{reason}` (`no_credentials`,
/// `identity_not_allowed`). Exposed as `grl_tier_child_refused_total`.
pub const CHILD_REFUSED: &str = "grl_tier_child_refused";
/// Ticks run (recomputation and a round of instructions). Exposed as
/// `grl_tier_ticks_total`.
pub const TICKS: &str = "grl_tier_ticks";

/// Seconds ticks held the tier (reports and instructions wait meanwhile); divided by
/// [`TICKS`], a tick's mean duration. Exposed as `grl_tier_tick_seconds_total`.
pub const TICK_SECONDS: &str = "grl_tier_tick_seconds";
/// Ticks by duration, a histogram: `histogram_quantile(0.99, ...)` is a tick's p99.
/// Exposed as `grl_tier_tick_duration_seconds_{bucket,sum,count}`.
pub const TICK_DURATION: &str = "grl_tier_tick_duration_seconds";

/// What a controller's leader election did, by `{event}`: `elected`, `stepped_down`,
/// `backend_error` (a call to etcd or the API server failed or was cut short),
/// `stale_lease_revoked` (etcd: the lease of a term that ended while etcd was away,
/// revoked once it answered again), `token_changed` (Kubernetes: a new service-account
/// token read from its file). Exposed as `grl_controller_election_events_total`; absent
/// without `--election`.
pub const ELECTION_EVENTS: &str = "grl_controller_election_events";

/// TLS events on the gRPC port by `{event}`: `handshake_failed` (plaintext clients, unknown
/// CA, missing client certificate, timeout), `reloaded` (changed certificate files put in
/// use), `reload_failed` (changed files that do not load; the previous ones stay),
/// `over_connection_cap` / `over_handshake_cap` (connections closed at once because the
/// port held its most connections or handshakes in progress), `key_readable` (a private
/// key that others may read was loaded, and warned about).
/// Exposed as `grl_tier_tls_events_total`; absent without TLS.
pub const TLS_EVENTS: &str = "grl_tier_tls_events";

/// Connections of the TLS port by `{state}`: `open` (handshaking or established, against
/// `--tls-max-connections`) and `handshaking` (against `--tls-max-handshakes`). Absent
/// without TLS.
pub const TLS_CONNECTIONS: &str = "grl_tier_tls_connections";

/// TLS events on the admin HTTP port (`--metrics-tls`), by the `{event}`s of
/// [`TLS_EVENTS`]. Exposed as `grl_tier_admin_http_tls_events_total`; absent without it.
pub const ADMIN_HTTP_TLS_EVENTS: &str = "grl_tier_admin_http_tls_events";

/// Connections of the admin HTTP port's TLS by `{state}`, as [`TLS_CONNECTIONS`]. Absent
/// without `--metrics-tls`.
pub const ADMIN_HTTP_TLS_CONNECTIONS: &str = "grl_tier_admin_http_tls_connections";

/// Admin calls that carried a bearer token over a connection without TLS (the token
/// crossed the network in the clear). Exposed as
/// `grl_controller_admin_plaintext_tokens_total`.
pub const ADMIN_PLAINTEXT_TOKENS: &str = "grl_controller_admin_plaintext_tokens";

type Labels = Vec<(String, String)>;
type G = Gauge<f64, AtomicU64>;

/// Counters that live outside the status snapshot.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    /// `ApplyConfig` accepted (controllers only: `None` elsewhere).
    pub apply_ok: Option<u64>,
    /// `ApplyConfig` refused.
    pub apply_invalid: u64,
    /// Followed config changes refused (controllers).
    pub config_refused: u64,
    /// Report bytes received.
    pub reports_in: u64,
    /// Instruction bytes sent.
    pub instructions_out: u64,
    /// Ticks run, the seconds they held the tier and their durations.
    pub ticks: TickDurations,
    /// Refused reports and rows, in the order of [`Reason::ALL`].
    pub reports_refused: [u64; Reason::ALL.len()],
    /// TLS counters and connection gauges (`None` without TLS).
    pub tls: Option<crate::net::tls::TlsSnapshot>,
    /// The same of the admin HTTP port (`None` without `--metrics-tls`).
    pub admin_http_tls: Option<crate::net::tls::TlsSnapshot>,
    /// Refused child streams by reason.
    pub child_refused: Vec<(&'static str, u64)>,
    /// Refused admin calls by reason (rendered on controllers only).
    pub admin_refused: Vec<(&'static str, u64)>,
    /// Election events by kind (controllers with an election; empty otherwise).
    pub election: Vec<(&'static str, u64)>,
    /// Admin calls with a bearer token over plaintext (rendered on controllers only).
    pub admin_plaintext_tokens: u64,
}

/// The TLS events and connection gauges of one port, under `(events, connections)`.
fn tls_port(
    reg: &mut Registry,
    (events, connections): (&str, &str),
    port: &str,
    t: crate::net::tls::TlsSnapshot,
) {
    by_label(
        reg,
        events,
        &format!("TLS events on {port}"),
        "event",
        &[
            ("handshake_failed", t.handshake_failed),
            ("reloaded", t.reloaded),
            ("reload_failed", t.reload_failed),
            ("over_connection_cap", t.over_connection_cap),
            ("over_handshake_cap", t.over_handshake_cap),
            ("key_readable", t.key_readable),
        ],
    );
    let conns = Family::<Labels, G>::default();
    conns
        .get_or_create(&labels(&[("state", "open")]))
        .set(t.open as f64);
    conns
        .get_or_create(&labels(&[("state", "handshaking")]))
        .set(t.handshaking as f64);
    reg.register(
        connections,
        format!("Connections of the TLS of {port}"),
        conns,
    );
}

fn by_label(reg: &mut Registry, name: &str, help: &str, label: &str, v: &[(&str, u64)]) {
    let f = Family::<Labels, Counter>::default();
    for (l, n) in v {
        f.get_or_create(&labels(&[(label, l)])).inc_by(*n);
    }
    reg.register(name, help, f);
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

fn gauge(reg: &mut Registry, name: &str, help: &str, v: f64) {
    let g = G::default();
    g.set(v);
    reg.register(name, help, g);
}

/// Renders a status snapshot and counters as Prometheus text.
pub fn render(st: &proto::StatusResponse, c: &Counters) -> String {
    let mut reg = Registry::default();
    let offered = Family::<Labels, G>::default();
    let ratio = Family::<Labels, G>::default();
    let limit = Family::<Labels, G>::default();
    let (next_change, next_limit) = (
        Family::<Labels, G>::default(),
        Family::<Labels, G>::default(),
    );
    for b in &st.buckets {
        let scope = wire::scope_from_wire(b.scope).map_or("unknown", Scope::as_str);
        offered
            .get_or_create(&labels(&[
                ("service", &b.service),
                ("bucket", &b.bucket),
                ("scope", scope),
            ]))
            .set(b.offered);
        let sb = labels(&[("service", &b.service), ("bucket", &b.bucket)]);
        ratio.get_or_create(&sb).set(b.drop_ratio);
        if let Some(l) = b.limit_rps {
            limit.get_or_create(&sb).set(l);
        }
        if let Some(at) = b.next_change_unix {
            next_change.get_or_create(&sb).set(at as f64);
            if let Some(l) = b.next_limit_rps {
                next_limit.get_or_create(&sb).set(l);
            }
        }
    }
    reg.register(
        OFFERED_RPS,
        "Offered requests per second summed over this tier's children",
        offered,
    );
    reg.register(
        DROP_RATIO,
        "Drop ratio applied or forwarded by this tier",
        ratio,
    );
    reg.register(
        LIMIT_RPS,
        "Limit of the bucket in requests per second",
        limit,
    );
    reg.register(
        LIMIT_NEXT_CHANGE,
        "When the bucket's limit in force changes next (a scheduled limit starts or ends)",
        next_change,
    );
    reg.register(
        LIMIT_NEXT_RPS,
        "The bucket's limit from its next scheduled change on",
        next_limit,
    );

    let children = Family::<Labels, G>::default();
    for lvl in ["client", "zone", "region"] {
        children.get_or_create(&labels(&[("level", lvl)])).set(0.0);
    }
    for ch in &st.children {
        let lvl = match proto::Level::try_from(ch.level) {
            Ok(proto::Level::Zone) => "zone",
            Ok(proto::Level::Region) => "region",
            _ => "client",
        };
        children.get_or_create(&labels(&[("level", lvl)])).inc();
    }
    reg.register(CHILDREN, "Children of this tier", children);
    let stale = st.children.iter().filter(|c| c.stale).count();
    gauge(
        &mut reg,
        STALE_CHILDREN,
        "Children silent for more than 3 intervals",
        stale as f64,
    );
    let info = Family::<Labels, G>::default();
    info.get_or_create(&labels(&[("version", &st.config_version)]))
        .set(1.0);
    reg.register(CONFIG_INFO, "Config version in force", info);
    let by_region = Family::<Labels, G>::default();
    by_region
        .get_or_create(&labels(&[
            ("region", &st.region),
            ("version", &st.config_version),
        ]))
        .set(1.0);
    reg.register(
        CONFIG_VERSION_INFO,
        "Config version this tier's region runs",
        by_region,
    );
    gauge(
        &mut reg,
        FAIL_OPEN,
        "1 when the parent's ratios expired",
        f64::from(u8::from(st.fail_open)),
    );
    gauge(
        &mut reg,
        PARENT_CONNECTED,
        "1 when the stream to the parent is up",
        f64::from(u8::from(st.parent_connected)),
    );
    gauge(
        &mut reg,
        LEADER,
        "1 when this tier leads (0 on a standby controller)",
        f64::from(u8::from(st.leading)),
    );
    gauge(
        &mut reg,
        OVERRIDES,
        "Incident overrides in force",
        st.overrides.len() as f64,
    );

    let bytes = Family::<Labels, Counter>::default();
    bytes
        .get_or_create(&labels(&[("direction", "reports_in")]))
        .inc_by(c.reports_in);
    bytes
        .get_or_create(&labels(&[("direction", "instructions_out")]))
        .inc_by(c.instructions_out);
    reg.register(
        CONTROL_BYTES,
        "Control-plane bytes exchanged with children",
        bytes,
    );
    let ticks = Counter::<u64>::default();
    ticks.inc_by(c.ticks.count);
    reg.register(
        TICKS,
        "Ticks run (recomputation and a round of instructions)",
        ticks,
    );
    let tick_seconds = Counter::<f64, AtomicU64>::default();
    tick_seconds.inc_by(c.ticks.seconds);
    reg.register(
        TICK_SECONDS,
        "Seconds ticks held the tier (reports and instructions waited)",
        tick_seconds,
    );
    reg.register(
        TICK_DURATION,
        "How long each tick held the tier",
        c.ticks.clone(),
    );
    let refused = Family::<Labels, Counter>::default();
    for (reason, n) in Reason::ALL.iter().zip(c.reports_refused) {
        refused
            .get_or_create(&labels(&[("reason", reason.as_str())]))
            .inc_by(n);
    }
    reg.register(
        REPORTS_REFUSED,
        "Children's reports or rows refused, by reason (they changed nothing)",
        refused,
    );
    by_label(
        &mut reg,
        CHILD_REFUSED,
        "Children's report streams refused",
        "reason",
        &c.child_refused,
    );
    if let Some(t) = c.tls {
        tls_port(&mut reg, (TLS_EVENTS, TLS_CONNECTIONS), "the gRPC port", t);
    }
    if let Some(t) = c.admin_http_tls {
        let names = (ADMIN_HTTP_TLS_EVENTS, ADMIN_HTTP_TLS_CONNECTIONS);
        tls_port(&mut reg, names, "the admin HTTP port", t);
    }
    if !c.election.is_empty() {
        by_label(
            &mut reg,
            ELECTION_EVENTS,
            "What the leader election did",
            "event",
            &c.election,
        );
    }
    if let Some(ok) = c.apply_ok {
        by_label(
            &mut reg,
            ADMIN_REFUSED,
            "Admin calls refused (nothing changed)",
            "reason",
            &c.admin_refused,
        );
        let plain = Counter::<u64>::default();
        plain.inc_by(c.admin_plaintext_tokens);
        reg.register(
            ADMIN_PLAINTEXT_TOKENS,
            "Admin calls whose bearer token crossed the network without TLS",
            plain,
        );
        let apply = Family::<Labels, Counter>::default();
        apply.get_or_create(&labels(&[("result", "ok")])).inc_by(ok);
        apply
            .get_or_create(&labels(&[("result", "invalid")]))
            .inc_by(c.apply_invalid);
        reg.register(APPLY, "ApplyConfig calls by result", apply);
        let refused = Counter::<u64>::default();
        refused.inc_by(c.config_refused);
        reg.register(
            CONFIG_REFUSED,
            "Followed config changes refused as invalid (the snapshot in force stays)",
            refused,
        );
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &reg);
    out
}
