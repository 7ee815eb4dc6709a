//! The client's `/metrics` text: parsed back, labels checked, counts add up to what was
//! offered. Also the overflow path (pairs past `max_pairs`): its decisions are counted and
//! drawn at random per thread.

use std::collections::BTreeMap;

use grl_client::{Client, ClientConfig, Decision};
use grl_core::metric_names::{LABELS, REQUESTS_TOTAL};
use grl_core::proto;

type Labels = BTreeMap<String, String>;

/// Parses Prometheus text into (name, labels, value) samples.
fn parse(text: &str) -> Vec<(String, Labels, f64)> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("value");
        let value: f64 = value.parse().expect("number");
        let (name, mut rest) = match series.split_once('{') {
            Some((n, r)) => (n, r.strip_suffix('}').expect("closing brace")),
            None => (series, ""),
        };
        let mut labels = Labels::new();
        while !rest.is_empty() {
            let (key, after) = rest.split_once("=\"").expect("label");
            let mut val = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next().expect("closing quote") {
                    (_, '\\') => match chars.next().unwrap().1 {
                        'n' => val.push('\n'),
                        c => val.push(c),
                    },
                    (i, '"') => break i,
                    (_, c) => val.push(c),
                }
            };
            labels.insert(key.to_string(), val);
            rest = after[end + 1..].trim_start_matches(',');
        }
        out.push((name.to_string(), labels, value));
    }
    out
}

fn client(max_pairs: usize) -> Client {
    let mut cfg = ClientConfig::new("pay\"ments", "http://127.0.0.1:1");
    cfg.max_pairs = max_pairs;
    let client = Client::new(cfg);
    let rule = |name: &str, caller: &str, mode: proto::Mode| proto::BucketRule {
        name: name.into(),
        caller: caller.into(),
        mode: mode as i32,
        scope: proto::Scope::Zone as i32,
        ..Default::default()
    };
    client.apply_instruction(&proto::Instruction {
        config_version: "v7".into(),
        has_config: true,
        config: vec![proto::ServiceRules {
            service: "pay\"ments".into(),
            first_index: None,
            buckets: vec![
                rule("deny", "gw", proto::Mode::Deny),
                rule("shadow", "web", proto::Mode::Shadow),
            ],
        }],
        ratios: vec![
            proto::DropRatio {
                service: "pay\"ments".into(),
                bucket: "deny".into(),
                ratio: 1.0,
                valid_for_ms: 60_000,
                allowed: None,
            },
            proto::DropRatio {
                service: "pay\"ments".into(),
                bucket: "shadow".into(),
                ratio: 1.0,
                valid_for_ms: 60_000,
                allowed: None,
            },
        ],
        ..Default::default()
    });
    client
}

#[test]
fn every_offered_request_is_counted_once_with_its_labels() {
    let client = client(3);
    let offered = [
        ("gw", "Pay/Card", 7, Decision::Drop),
        ("web", "Pay/Card", 5, Decision::ShadowDrop),
        ("we\\ird\n", "Pay/Card", 3, Decision::Allow),
        // Past max_pairs = 3: overflow, still decided by its bucket.
        ("gw", "Pay/Cash", 4, Decision::Drop),
        ("other", "Pay/Cash", 2, Decision::Allow),
    ];
    for (caller, procedure, n, expected) in offered {
        for _ in 0..n {
            assert_eq!(client.decide(caller, procedure), expected, "{caller}");
        }
    }
    let mut text = String::new();
    client.encode_metrics(&mut text);
    let samples = parse(&text);
    let requests: Vec<_> = samples.iter().filter(|s| s.0 == REQUESTS_TOTAL).collect();
    let total: f64 = requests.iter().map(|s| s.2).sum();
    assert_eq!(total, 21.0, "{text}");
    let count = |caller: &str, bucket: &str, decision: &str| -> f64 {
        requests
            .iter()
            .filter(|(_, l, _)| {
                l["caller"] == caller && l["bucket"] == bucket && l["decision"] == decision
            })
            .map(|s| s.2)
            .sum()
    };
    for (_, labels, _) in &requests {
        let names: Vec<&str> = labels.keys().map(String::as_str).collect();
        let mut expected = LABELS.to_vec();
        expected.sort_unstable();
        assert_eq!(names, expected);
        assert_eq!(labels["service"], "pay\"ments");
    }
    assert_eq!(count("gw", "deny", "dropped"), 7.0);
    assert_eq!(count("web", "shadow", "shadow_dropped"), 5.0);
    assert_eq!(count("we\\ird\n", "", "allowed"), 3.0);
    assert_eq!(count("__overflow__", "deny", "dropped"), 4.0);
    assert_eq!(count("__overflow__", "", "allowed"), 2.0);

    let one = |name: &str| -> f64 {
        let found: Vec<_> = samples.iter().filter(|s| s.0 == name).collect();
        assert_eq!(found.len(), 1, "{name}");
        found[0].2
    };
    assert_eq!(one("grl_client_overflow_total"), 6.0);
    assert_eq!(one("grl_client_pairs"), 3.0);
    assert_eq!(one("grl_client_fail_open"), 0.0);
    let info = samples
        .iter()
        .find(|s| s.0 == "grl_client_config_info")
        .unwrap();
    assert_eq!(info.1["version"], "v7");
    let ratios: Vec<_> = samples
        .iter()
        .filter(|s| s.0 == "grl_client_drop_ratio")
        .map(|s| (s.1["bucket"].as_str(), s.2))
        .collect();
    assert_eq!(ratios, [("deny", 1.0), ("shadow", 1.0)]);

    // The same totals per bucket through the API.
    let totals = client.bucket_totals();
    let deny = totals.iter().find(|t| t.bucket == "deny").unwrap();
    assert_eq!((deny.offered, deny.dropped), (11, 11));
    assert_eq!(totals.iter().map(|t| t.offered).sum::<u64>(), 21);
}

#[test]
fn a_new_config_moves_pairs_to_their_new_bucket() {
    let client = client(10);
    client.decide("gw", "Pay/Card");
    client.apply_instruction(&proto::Instruction {
        config_version: "v8".into(),
        has_config: true,
        config: vec![proto::ServiceRules {
            service: "pay\"ments".into(),
            first_index: None,
            buckets: vec![proto::BucketRule {
                name: "cards".into(),
                procedure: "Pay/Card".into(),
                mode: proto::Mode::Deny as i32,
                scope: proto::Scope::Zone as i32,
                ..Default::default()
            }],
        }],
        ..Default::default()
    });
    // "deny" left the config: its ratio no longer applies.
    assert_eq!(client.decide("gw", "Pay/Card"), Decision::Allow);
    let totals = client.bucket_totals();
    let get = |b: &str| totals.iter().find(|t| t.bucket == b).unwrap().offered;
    assert_eq!((get("deny"), get("cards")), (1, 1));
    assert_eq!(client.status().config_version, "v8");
}

#[test]
fn a_threads_first_overflow_decision_draws_from_a_seeded_generator() {
    let client = client(0);
    client.apply_instruction(&proto::Instruction {
        config_version: "v7".into(),
        ratios: vec![proto::DropRatio {
            service: "pay\"ments".into(),
            bucket: "deny".into(),
            ratio: 0.5,
            valid_for_ms: 60_000,
            allowed: None,
        }],
        ..Default::default()
    });
    // No pair fits, so every decision takes the overflow path; a new thread's first one
    // must not come from the same unseeded state as every other thread's.
    let firsts: Vec<Decision> = (0..64)
        .map(|_| std::thread::scope(|s| s.spawn(|| client.decide("gw", "Pay/Card")).join()))
        .map(Result::unwrap)
        .collect();
    assert!(firsts.contains(&Decision::Allow) && firsts.contains(&Decision::Drop));
    assert_eq!(client.status().overflow, 64);
}
