//! Several aggregators in one zone (the design's answer when one aggregator cannot hold a
//! zone's clients), with real processes: each aggregator sums the clients that reach it and
//! the controller sums the aggregators of a zone as parts of it, so nothing is counted twice
//! and a zone-scoped limit holds over the zone's clients whichever aggregator they reach.

use super::shapes::{Region, service, table, total};

/// Zone a has two aggregators (3 clients on one, 1 on the other), zone b one. A global
/// bucket `g` (limit 600) gets 1,200 rps over the three; a zone bucket `z` (300 a zone)
/// gets 600 rps in zone a, split 450/150 over its aggregators, and 240 in zone b.
#[test]
fn two_aggregators_in_one_zone_are_summed_as_parts_of_it() {
    let yaml = service(&[
        "  - name: g\n    match: { caller: gateway }\n    scope: global\n    mode: deny\n    \
         policy: { kind: fixed, rps: 600 }\n"
            .to_string(),
        "  - name: z\n    match: { caller: batch }\n    scope: zone\n    mode: deny\n    \
         policy: { kind: fixed, rps: 300 }\n"
            .to_string(),
    ]);
    let region = Region::start(&yaml, &["a", "a", "b"]);
    let start = Region::start_in(3);
    let seconds = 20;
    let load = [
        (
            0,
            3,
            "0,gateway,Pay/Card,600,spread\n0,batch,Pay/Batch,450,spread\n",
        ),
        (
            1,
            1,
            "0,gateway,Pay/Card,300,spread\n0,batch,Pay/Batch,150,spread\n",
        ),
        (
            2,
            2,
            "0,gateway,Pay/Card,300,spread\n0,batch,Pay/Batch,240,spread\n",
        ),
    ];
    let runs: Vec<_> = load
        .iter()
        .map(|(agg, clients, rows)| region.loadgen(*agg, *clients, rows, seconds, start))
        .collect();
    std::thread::sleep(std::time::Duration::from_secs(3 + 10));
    let heard = region.controller_offered("g");
    let runs: Vec<_> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    let (from, to) = (6, seconds);
    let n = (to - from + 1) as f64;
    let report = format!(
        "g:\n{}z in zone a:\n{}z in zone b:\n{}",
        table(&runs, "g", seconds),
        table(&runs[..2], "z", seconds),
        table(&runs[2..], "z", seconds)
    );

    assert!(
        (heard - 1200.0).abs() <= 120.0,
        "the controller heard {heard:.0} rps of g where 1,200 were offered (counted twice \
         would be more, one part lost less)\n{report}"
    );
    let g = total(&runs, "g", from, to)[1] / n;
    assert!(
        (g - 600.0).abs() <= 60.0,
        "g admitted {g:.0}/s against 600\n{report}"
    );
    let za = total(&runs[..2], "z", from, to)[1] / n;
    assert!(
        (za - 300.0).abs() <= 30.0,
        "z admitted {za:.0}/s in zone a (two aggregators) against 300\n{report}"
    );
    let zb = total(&runs[2..], "z", from, to);
    assert!(
        zb[2] <= 0.01 * zb[0],
        "zone b offers z under its own limit and must not pay for zone a: dropped {:.0} of \
         {:.0}\n{report}",
        zb[2],
        zb[0]
    );
    // Fair shares inside zone a follow the offered loads (4 clients at 150 rps each).
    let (one, other) = (
        total(&runs[..1], "z", from, to)[1] / n,
        total(&runs[1..2], "z", from, to)[1] / n,
    );
    assert!(
        (one - 225.0).abs() <= 0.15 * 225.0 && (other - 75.0).abs() <= 0.15 * 75.0,
        "zone a's share of z: {one:.0}/s over 3 clients and {other:.0}/s over 1, where 225 \
         and 75 are fair\n{report}"
    );
}
