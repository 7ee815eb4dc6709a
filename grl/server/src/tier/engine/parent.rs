//! An instruction from the parent taken in: its ratios and allowances kept with their
//! expiry (at least the partition hold, see `hold`) in the node's
//! [`Parent`](super::parent_state::Parent) state, its config taken, and the news passed
//! down; whether the stream to the parent is up; and whether the children fail open because
//! the parent's latest instruction expired.

use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use super::hold::held_for;
use super::packing;
use super::parent_state::FromParent;
use super::rules::Rules;
use super::state::State;
use grl_core::proto;

/// Keeps instruction `i` from the parent, received at `now`, in the node's state: its
/// ratios and allowances with their expiry (at least the partition hold), read with
/// `rules` (the instruction's own config when it carries one).
pub(super) fn take_instruction(
    s: &mut State,
    i: &proto::Instruction,
    rules: Option<&Rules>,
    now: Instant,
) {
    let dflt = Duration::from_millis(u64::from(i.valid_for_ms));
    // Applied for the hold if nothing follows (see `hold`): a parent cut off or
    // frozen leaves this tier enforcing its last ratios and allowances.
    let hold = s.hold;
    s.parent.valid_until = Some(now + held_for(dflt, hold));
    s.parent.wire_version = i.wire_version;
    s.parent.config_version.clone_from(&i.config_version);
    s.parent.zone_shared = i.zone_shared;
    let (named, bad) = packing::unpack_ratios(i, rules.unwrap_or(&s.rules));
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
                    expires: now + held_for(valid, hold),
                    allowed: r.allowed,
                },
            )
        })
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::engine::node::Sums;
    use crate::tier::engine::node::tests::{aggregator, controller};
    use tokio::sync::mpsc;

    #[tokio::test]
    async fn zone_sums_go_up_packed_and_ratios_come_down_packed_between_version_2_tiers() {
        let yaml = "service: payments\nbuckets:\n  - { name: gw, match: { caller: gw }, scope: global, mode: deny, policy: { kind: fixed, rps: 100 } }\n  - { name: z, match: { caller: zc }, scope: zone, mode: deny, policy: { kind: fixed, rps: 50 } }\n";
        let snap =
            grl_config::from_files("v1", [("services/payments.yaml".into(), yaml.into())]).unwrap();
        let ctl = controller();
        let agg = aggregator();
        let t0 = Instant::now();
        ctl.set_rules(Rules::from_snapshot(&snap, &[], 0, 0), t0);
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
}
