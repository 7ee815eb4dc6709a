//! The partition hold: how long a tier keeps acting on what it last heard over a link that
//! went quiet (a partition, a lost direction, a frozen peer), before it lets go as it did
//! without one.
//!
//! Both ends of a tier link hold for the same time, so that the limit holds through a
//! partition shorter than the hold:
//! - the parent keeps a silent tier child's last rates in its sums (see
//!   [`Children::counted`](super::children::Children::counted)): the child's share stays
//!   reserved, not handed to the children still talking, and a child whose demand was small
//!   reserves little;
//! - the child keeps applying its parent's last ratios and allowances (see
//!   `Node::on_parent_instruction`) and passes them down with its own validity, re-sent
//!   every round, so its clients keep enforcing instead of failing open at their expiry.
//!
//! After the hold both let go: the parent hands the share to the others, the child's
//! clients fail open. A hold of zero is the behaviour without one.

use std::time::Duration;

/// The default hold: 90 s. The hold runs from the last frame heard, and after a partition
/// heals a tier needs a few intervals to reconnect and be heard: a partition of a minute
/// (a controller failover, a network flap, a reroute) is ridden out with room to spare (at
/// 60 s, a minute's cut let go of the zone in the second of the heal: 1.21x the limit
/// there). Longer holds keep a zone that is really gone reserved longer.
pub const DEFAULT_PARTITION_HOLD: Duration = Duration::from_secs(90);

/// How long an instruction valid for `valid` is applied when nothing follows it: its
/// validity, or the hold if that is longer.
pub(crate) fn held_for(valid: Duration, hold: Duration) -> Duration {
    valid.max(hold)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::mpsc;
    use tokio::time::Instant;

    use crate::tier::engine::node::tests::{controller, pay_gw_rules as rules};
    use crate::tier::engine::node::{Link, Node, Sums};
    use crate::tier::engine::node_config::NodeConfig;
    use crate::tier::engine::packing;
    use crate::tier::engine::rules::Rules;
    use grl_config::Scope;
    use grl_core::proto;

    const SECOND: Duration = Duration::from_secs(1);

    /// Zone `zone`'s aggregator report (sequence `seq`) offering `offered` in `gw`.
    fn zone_report(zone: &str, offered: f64, seq: u64) -> proto::Report {
        proto::Report {
            reporter_id: format!("agg-{zone}"),
            level: proto::Level::Zone as i32,
            zone: zone.into(),
            region: "eu".into(),
            services: vec!["pay".into()],
            config_version: "v1".into(),
            interval_ms: 1000,
            seq,
            rates: vec![proto::BucketRate {
                service: "pay".into(),
                bucket: "gw".into(),
                offered,
                clients: 10,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// The allowance in `gw` of the latest instruction queued on `rx`.
    fn last_allowance(
        rx: &mut mpsc::Receiver<Result<proto::Instruction, tonic::Status>>,
        rules: &Rules,
    ) -> Option<f64> {
        let i = std::iter::from_fn(|| rx.try_recv().ok()).last()?.ok()?;
        let (ratios, _) = packing::unpack_ratios(&i, rules);
        ratios.iter().find(|r| r.bucket == "gw")?.allowed
    }

    /// A controller under `rules()` with zones a, b and c offering `offered[i]`, each
    /// connected; the links' receivers.
    type Rx = mpsc::Receiver<Result<proto::Instruction, tonic::Status>>;
    fn three_zones(ctl: &Node, offered: [f64; 3], t0: Instant) -> (Vec<Link>, Vec<Rx>) {
        ctl.set_rules(rules(), t0);
        let (mut links, mut rxs) = (Vec::new(), Vec::new());
        for (i, (z, o)) in ["a", "b", "c"].into_iter().zip(offered).enumerate() {
            let (link, rx) = mpsc::channel(64);
            ctl.on_report(i as u64, link.clone(), &zone_report(z, o, 1), None, t0)
                .unwrap();
            links.push(link);
            rxs.push(rx);
        }
        ctl.tick(t0 + SECOND);
        (links, rxs)
    }

    #[tokio::test]
    async fn a_silent_zone_keeps_its_share_reserved_for_the_hold_then_releases_it() {
        let ctl = controller();
        ctl.set_partition_hold(Duration::from_secs(60));
        let t0 = Instant::now();
        let rules = rules();
        let (links, mut rxs) = three_zones(&ctl, [400.0, 400.0, 400.0], t0);
        assert_eq!(
            last_allowance(&mut rxs[1], &rules).map(f64::round),
            Some(200.0)
        );
        // Zone a goes silent; b and c keep reporting every second.
        let mut at = t0 + SECOND;
        let mut seq = 1;
        let mut tick_to = |until: Instant, at: &mut Instant| {
            while *at < until {
                *at += SECOND;
                seq += 1;
                for (i, z) in [(1, "b"), (2, "c")] {
                    ctl.on_report(
                        i,
                        links[i as usize].clone(),
                        &zone_report(z, 400.0, seq),
                        None,
                        *at,
                    )
                    .unwrap();
                }
                ctl.tick(*at);
            }
        };
        tick_to(t0 + SECOND * 30, &mut at);
        assert_eq!(
            last_allowance(&mut rxs[1], &rules).map(f64::round),
            Some(200.0),
            "zone a's share was handed out within the hold"
        );
        tick_to(t0 + SECOND * 63, &mut at);
        assert_eq!(
            last_allowance(&mut rxs[1], &rules).map(f64::round),
            Some(300.0),
            "zone a's share still reserved after the hold"
        );
    }

    #[tokio::test]
    async fn a_silent_zone_with_little_demand_reserves_little() {
        let ctl = controller();
        let t0 = Instant::now();
        let rules = rules();
        let (links, mut rxs) = three_zones(&ctl, [30.0, 400.0, 400.0], t0);
        let before = last_allowance(&mut rxs[1], &rules).unwrap();
        let at = t0 + SECOND * 20;
        for (i, z) in [(1, "b"), (2, "c")] {
            ctl.on_report(
                i,
                links[i as usize].clone(),
                &zone_report(z, 400.0, 2),
                None,
                at,
            )
            .unwrap();
        }
        ctl.tick(at);
        let held = last_allowance(&mut rxs[1], &rules).unwrap();
        assert!((held - before).abs() < 1.0, "{before} → {held}");
        assert!(held > 600.0 * 400.0 / 830.0 - 1.0, "b starved: {held}");
    }

    #[tokio::test]
    async fn with_no_hold_a_silent_zone_is_released_when_stale() {
        let ctl = controller();
        ctl.set_partition_hold(Duration::ZERO);
        let t0 = Instant::now();
        let rules = rules();
        let (links, mut rxs) = three_zones(&ctl, [400.0, 400.0, 400.0], t0);
        let at = t0 + SECOND * 5;
        for (i, z) in [(1, "b"), (2, "c")] {
            ctl.on_report(
                i,
                links[i as usize].clone(),
                &zone_report(z, 400.0, 2),
                None,
                at,
            )
            .unwrap();
        }
        ctl.tick(at);
        assert_eq!(
            last_allowance(&mut rxs[1], &rules).map(f64::round),
            Some(300.0)
        );
    }

    #[tokio::test]
    async fn a_tiers_newer_stream_takes_over_and_its_old_streams_late_reports_are_dropped() {
        let ctl = controller();
        let t0 = Instant::now();
        ctl.set_rules(rules(), t0);
        let (old, _old_rx) = mpsc::channel(64);
        ctl.on_report(1, old.clone(), &zone_report("a", 400.0, 10), None, t0)
            .unwrap();
        // Back after a partition on a new stream, the old one not yet seen closed.
        let (new, _new_rx) = mpsc::channel(64);
        let t1 = t0 + SECOND / 2;
        assert_eq!(
            ctl.on_report(2, new, &zone_report("a", 300.0, 25), None, t1),
            Ok(())
        );
        assert_eq!(
            ctl.on_report(1, old, &zone_report("a", 900.0, 11), None, t1),
            Ok(()),
            "a late report of the old stream was refused"
        );
        let refused: u64 = ctl.refused.snapshot().iter().map(|(_, n)| n).sum();
        assert_eq!(refused, 0);
        let offered: f64 = ctl
            .lock()
            .children
            .totals(t1)
            .values()
            .map(|r| r.offered)
            .sum();
        assert_eq!(
            offered, 300.0,
            "the newer stream's rates are not the ones kept"
        );
    }

    /// A zone aggregator with one client under a controller; the client offers 400 in `gw`
    /// and the controller's instruction gives the zone 200 (the limit is 600, other zones
    /// are held at 800).
    struct Zone {
        agg: Node,
        client: Link,
        client_rx: Rx,
        rules: Rules,
    }

    impl Zone {
        fn start(hold: Duration, t0: Instant) -> Self {
            let ctl = controller();
            let agg = Node::new(NodeConfig {
                level: proto::Level::Zone,
                id: "agg-a".into(),
                zone: "a".into(),
                region: "eu".into(),
                interval: SECOND,
                scopes: vec![Scope::Zone],
                has_parent: true,
                validity_intervals: 5,
            });
            agg.set_partition_hold(hold);
            let rules = rules();
            ctl.set_rules(rules.clone(), t0);
            let (other, _) = mpsc::channel(64);
            ctl.on_report(9, other, &zone_report("b", 800.0, 1), None, t0)
                .unwrap();
            let (client, client_rx) = mpsc::channel(64);
            let z = Self {
                agg,
                client,
                client_rx,
                rules,
            };
            z.client_reports(400.0, t0);
            let (up, mut down) = mpsc::channel(64);
            ctl.on_report(
                1,
                up.clone(),
                &z.agg.upward_report(t0, Sums::Live),
                None,
                t0,
            )
            .unwrap();
            while let Ok(Ok(i)) = down.try_recv() {
                z.agg.on_parent_instruction(&i, t0);
            }
            // The config came with that instruction: the client's rows are taken now.
            z.client_reports(400.0, t0);
            ctl.on_report(1, up, &z.agg.upward_report(t0, Sums::Live), None, t0)
                .unwrap();
            ctl.tick(t0);
            while let Ok(Ok(i)) = down.try_recv() {
                z.agg.on_parent_instruction(&i, t0);
            }
            z
        }

        fn client_reports(&self, offered: f64, now: Instant) {
            let r = proto::Report {
                reporter_id: "c1".into(),
                level: proto::Level::Client as i32,
                zone: "a".into(),
                region: "eu".into(),
                services: vec!["pay".into()],
                config_version: "v1".into(),
                interval_ms: 1000,
                rates: vec![proto::BucketRate {
                    service: "pay".into(),
                    bucket: "gw".into(),
                    offered,
                    clients: 1,
                    ..Default::default()
                }],
                ..Default::default()
            };
            self.agg
                .on_report(7, self.client.clone(), &r, None, now)
                .unwrap();
        }

        /// The client's latest instruction for `gw` after a tick at `now`: (ratio,
        /// allowance, valid for).
        fn told(&mut self, now: Instant) -> Option<(f64, Option<f64>, u32)> {
            self.client_reports(400.0, now);
            self.agg.tick(now);
            let i = std::iter::from_fn(|| self.client_rx.try_recv().ok())
                .last()?
                .ok()?;
            let (ratios, _) = packing::unpack_ratios(&i, &self.rules);
            let r = ratios.iter().find(|r| r.bucket == "gw")?;
            let valid = if r.valid_for_ms > 0 {
                r.valid_for_ms
            } else {
                i.valid_for_ms
            };
            Some((r.ratio, r.allowed, valid))
        }
    }

    #[tokio::test]
    async fn a_zone_whose_controller_went_silent_enforces_its_last_allowance_for_the_hold() {
        let t0 = Instant::now();
        let mut z = Zone::start(Duration::from_secs(60), t0);
        let (ratio, allowed, _) = z.told(t0 + SECOND / 10).expect("not instructed");
        assert!((ratio - 0.5).abs() < 0.01, "{ratio}");
        assert_eq!(allowed.map(f64::round), Some(200.0));
        for s in [6, 30, 59] {
            let now = t0 + SECOND * s;
            let (ratio, allowed, valid) = z.told(now).expect("the last ratio was let go");
            assert!((ratio - 0.5).abs() < 0.01, "{s} s: {ratio}");
            assert_eq!(allowed.map(f64::round), Some(200.0), "{s} s");
            assert!(valid <= 5_000, "{s} s: valid {valid} ms at the client");
            assert!(!z.agg.fail_open(now), "{s} s: failed open");
        }
        let after = t0 + SECOND * 61;
        assert_eq!(z.told(after).map(|t| t.0), None, "held past the hold");
        assert!(z.agg.fail_open(after));
    }

    #[tokio::test]
    async fn with_no_hold_a_zone_fails_open_at_the_instructions_expiry() {
        let t0 = Instant::now();
        let mut z = Zone::start(Duration::ZERO, t0);
        assert!(z.told(t0 + SECOND / 10).is_some());
        let now = t0 + SECOND * 6;
        assert_eq!(z.told(now).map(|t| t.0), None);
        assert!(z.agg.fail_open(now));
    }
}
