//! Tests of the child registry: sums, digests, staleness, refusals and bounds.

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
