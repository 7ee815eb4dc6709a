//! Instructions out to the children: which children a round looks at (a `Round`), when a
//! quiet child hears again, and, per child, its buckets' ratios and allowances — made by index where
//! the tick was worked so ([`IndexedSums::packed_for`]), else by name ([`ratios_for`]) —
//! sent when its config is out of date, they changed, or it heard nothing for a while.
//!
//! [`IndexedSums::packed_for`]: super::dense_tick::IndexedSums::packed_for

use std::sync::Arc;
use std::sync::atomic::Ordering;

use prost::Message;
use tokio::time::Instant;
use tracing::{debug, info, trace};

use super::child::Child;
use super::dense_tick::PackedForChild;
use super::instruct_inputs::Sources;
use super::node_config::NodeConfig;
use super::packing::{self, OutRatio};
use super::ratios;
use super::ratios::SentRatio;
use super::rules::Rules;
use super::scopes::Owned;
use super::state::{Bytes, Link, Round, State};
use crate::tier::FastMap;
use grl_config::Scope;
use grl_core::proto;
use grl_core::wire;

/// Instructs the children of `round` as far as each needs it now; nobody while this
/// tier follows or learns.
pub(super) fn instruct_children(
    cfg: &NodeConfig,
    bytes: &Bytes,
    st: &mut State,
    round: Round<'_>,
    now: Instant,
) {
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
        owned,
        computed,
        bucket_offered,
        indexed,
        ..
    } = st;
    let indexed = indexed.as_ref().filter(|x| Arc::ptr_eq(&x.rules, rules));
    let per_service = children_per_service(children.iter());
    let per_ordinal: Vec<u32> = match indexed {
        Some(_) => rules
            .services()
            .keys()
            .map(|s| per_service.get(s).copied().unwrap_or(0))
            .collect(),
        None => Vec::new(),
    };
    // Both built for the first child worked by name, if any.
    let named = std::cell::OnceCell::new();
    let mut from: Option<Sources<'_>> = None;
    // One child's ratios by name, made in the same buffer for every child of the round.
    let mut scratch: Vec<ChildRatio<'_>> = Vec::new();
    let mut send = |c: &mut Child<Link>| {
        let by_index = indexed.and_then(|x| {
            let ordinals = c.service_ordinals(rules).to_vec();
            x.packed_for(cfg, owned, c, &ordinals, &per_ordinal)
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
                let n = (&per_service, now);
                ratios_for(cfg, owned, rules, from, c, n, &mut scratch);
                Made::Named(&scratch)
            }
        };
        let shared = owned.tells_shared(c.level, &c.zone);
        instruct(cfg, (rules, *config_gen), (made, shared), c, now, bytes);
    };
    match round {
        Round::Child(id) => children.get_mut(id).into_iter().for_each(send),
        Round::All => children.iter_mut().for_each(&mut send),
        Round::Due => children
            .iter_mut()
            .filter(|c| reinstruct_due(cfg, c, now))
            .for_each(&mut send),
    }
}

/// How many of `children` report each service: the `n` that the even part of a group's
/// unused allowance is split over ([`ratios::share`]).
fn children_per_service<'a, L: 'a>(
    children: impl Iterator<Item = &'a Child<L>>,
) -> FastMap<String, u32> {
    let mut n: FastMap<String, u32> = FastMap::default();
    for c in children {
        for s in &c.services {
            match n.get_mut(s.as_str()) {
                Some(k) => *k += 1,
                None => {
                    n.insert(s.clone(), 1);
                }
            }
        }
    }
    n
}

/// The part of an interval after which a child is instructed again even if nothing
/// changed, so that its ratios never expire while the tier is up and every child hears
/// within an interval. The tiers look every eighth of an interval, so a quiet child hears
/// again after 0.75 of an interval: a quarter of an interval is left for a busy tier's
/// late rounds and for delivery (with 0.875, 5,000 children on 2 shared cores heard after
/// up to 1.1 intervals).
pub(crate) const REINSTRUCT_AFTER: f64 = 0.7;

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
    (made, zone_shared): (Made<'_, '_>, bool),
    c: &mut Child<Link>,
    now: Instant,
    bytes: &Bytes,
) {
    let resend_config =
        c.sent.at.is_none_or(|t| now - t >= cfg.interval * 2) && c.config_version != rules.version;
    let send_config = c.sent.config_gen != Some(config_gen)
        || c.sent.services_gen != Some(c.services_gen())
        || resend_config;
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
    let made_named = match &made {
        Made::Named(ratios) => Some(*ratios),
        Made::Packed(_) => None,
    };
    let (valid_for_ms, named, packed, by_index) = match made {
        Made::Named(ratios) => {
            let valid_for_ms = ratios.iter().map(|r| r.out.valid_for_ms).max().unwrap_or(0);
            let (named, packed) = packing::pack_ratios(
                ratios.iter().map(|r| r.out),
                &rules.version,
                valid_for_ms,
                packing::speaks_packed(c.wire_version),
            );
            (valid_for_ms, named, packed, None)
        }
        Made::Packed(p) => (p.valid_for_ms, Vec::new(), Some(p.packed), Some(p.sent)),
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
        zone_shared,
    };
    let len = instr.encoded_len() as u64;
    match c.link.try_send(Ok(instr)) {
        Ok(()) => {
            bytes.instructions_out.fetch_add(len, Ordering::Relaxed);
            match (by_index, made_named) {
                (Some(sent), _) => c.sent.ratios = sent,
                (None, Some(ratios)) => {
                    // Into the allocation of the last ones: this runs for every child.
                    c.sent.ratios.clear();
                    c.sent.ratios.extend(ratios.iter().map(|r| SentRatio {
                        key: r.key,
                        ratio: r.out.ratio,
                        allowed: r.out.allowed,
                    }));
                }
                (None, None) => c.sent.ratios.clear(),
            }
            c.sent.at = Some(now);
            if send_config {
                c.sent.config_gen = Some(config_gen);
                c.sent.services_gen = Some(c.services_gen());
            }
        }
        Err(e) => debug!(child = %c.id, error = %e, "instruction not sent"),
    }
}

/// What a round made for one child: its ratios by name (turned into the wire form only
/// when an instruction goes out), or by index, already packed (see
/// [`IndexedSums::packed_for`](super::dense_tick::IndexedSums::packed_for)).
pub(crate) enum Made<'a, 'b> {
    /// By name.
    Named(&'b [ChildRatio<'a>]),
    /// By index.
    Packed(PackedForChild),
}

/// One bucket's ratio for a child, with borrowed names: built every round for every child,
/// turned into the wire form only when an instruction goes out.
#[derive(Clone, Copy)]
pub(crate) struct ChildRatio<'a> {
    /// [`SentRatio::key_of`] the bucket.
    pub key: u64,
    /// The ratio, as it goes out.
    pub out: OutRatio<'a>,
}

/// The ratios of `c`'s services with their remaining validity: computed here for the scopes
/// this tier owns, else the parent's as long as they are valid; and `c`'s allowance in
/// each: its share of the limit over the scope (owned here) or of this tier's allowance
/// (from the parent), by its share of the offered load ([`ratios::share`]). No allowance
/// for a child that offered nothing in a bucket at or over its limit (it applies the ratio
/// until it has a share), nor where the parent gave none.
fn ratios_for<'a>(
    cfg: &NodeConfig,
    owned: &Owned,
    rules: &'a Rules,
    from: &Sources<'_>,
    c: &Child<Link>,
    (per_service, now): (&FastMap<String, u32>, Instant),
    out: &mut Vec<ChildRatio<'a>>,
) {
    let own_ms = cfg.validity().as_millis() as u32;
    let horizon = cfg.rate_horizon_secs();
    out.clear();
    for (svc, d) in c.services.iter().zip(&c.digest.per_service) {
        let (Some((svc, buckets)), Some(slots), Some(sources)) = (
            rules.services().get_key_value(svc),
            rules.slots(svc),
            from.services.get(svc.as_str()),
        ) else {
            continue;
        };
        let n = per_service.get(svc.as_str()).copied().unwrap_or(1);
        for (j, b) in buckets.iter().enumerate() {
            let (Some(_), Ok(scope)) = (b.limit_rps, wire::scope_from_wire(b.scope)) else {
                continue;
            };
            let (ratio, valid_for_ms, allowed) = if owned.owns(scope, &c.zone) {
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
                let allowed =
                    computed.and_then(|x| ratios::share(x.limit, own, x.offered, n, horizon));
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
                        let allowed = p
                            .allowed
                            .filter(|_| own > 0.0 || p.ratio <= 0.0)
                            .and_then(|a| ratios::share(a, own, group, n, horizon))
                            .map(|s| {
                                if p.ratio > 0.0 {
                                    s.min(own * (1.0 - p.ratio))
                                } else {
                                    s
                                }
                            });
                        trace!(child = %c.id, bucket = %b.name, own, group, parent_allowed = ?p.allowed, parent_ratio = p.ratio, ?allowed, "share from the parent's allowance");
                        // Never valid at a child for longer than this tier's own
                        // ratios: a parent's held ratio (see `hold`) is passed down
                        // again every round, so the child fails open soon after this
                        // tier dies, not at the end of the hold.
                        let valid = (p.expires - now).min(cfg.validity());
                        (p.ratio, valid.as_millis() as u32, allowed)
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
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::*;
    use crate::tier::engine::node::tests::{controller, report};

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
}
