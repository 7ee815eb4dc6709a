//! Memory stays bounded by `max_pairs` whatever the callers: a million distinct caller
//! names through one client, overflow counted exactly. The measurement runs in a child process of its own (this test
//! binary again, filtered to this one test), so other tests' allocations do not disturb RSS.

use grl_client::{Client, ClientConfig, Decision};
use grl_core::proto;

/// Resident set size in bytes, from /proc/self/statm.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Set in the child process that does the measurement.
const CHILD: &str = "GRL_TEST_MEMORY_CHILD";

#[test]
fn a_million_callers_keep_memory_bounded_and_overflow_is_counted_exactly() {
    if std::env::var_os(CHILD).is_none() {
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "memory::a_million_callers_keep_memory_bounded_and_overflow_is_counted_exactly",
                "--test-threads=1",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&child.stdout);
        assert!(
            child.status.success() && stdout.contains("1 passed"),
            "the measuring child must run this test and pass:\n{stdout}\n{}",
            String::from_utf8_lossy(&child.stderr)
        );
        return;
    }
    const MAX_PAIRS: usize = 1000;
    const CALLERS: usize = 1_000_000;
    let mut cfg = ClientConfig::new("payments", "http://127.0.0.1:1");
    cfg.max_pairs = MAX_PAIRS;
    let client = Client::new(cfg);
    client.apply_instruction(&proto::Instruction {
        config_version: "v1".into(),
        has_config: true,
        config: vec![proto::ServiceRules {
            service: "payments".into(),
            first_index: None,
            buckets: vec![proto::BucketRule {
                name: "pay".into(),
                procedure: "Pay/*".into(),
                mode: proto::Mode::Deny as i32,
                scope: proto::Scope::Global as i32,
                ..Default::default()
            }],
        }],
        ratios: vec![proto::DropRatio {
            service: "payments".into(),
            bucket: "pay".into(),
            ratio: 1.0,
            valid_for_ms: 600_000,
            allowed: None,
        }],
        ..Default::default()
    });
    let mut name = String::new();
    let mut offer = |i: usize| {
        use std::fmt::Write;
        name.clear();
        write!(name, "caller-{i}").unwrap();
        assert_eq!(client.decide(&name, "Pay/Card"), Decision::Drop);
    };
    for i in 0..MAX_PAIRS {
        offer(i);
    }
    let full = client.status();
    assert_eq!((full.pairs, full.overflow), (MAX_PAIRS, 0));
    let rss_full = rss();
    for i in MAX_PAIRS..CALLERS {
        offer(i);
    }
    let rss_after = rss();
    let status = client.status();
    assert_eq!(status.pairs, MAX_PAIRS);
    assert_eq!(status.overflow, (CALLERS - MAX_PAIRS) as u64);
    // The table does not grow past the bound: 2048 slots and 1000 entries, each with its
    // names and the shared counter shard inside (< 512 B) and ≤ 64 owned shards of 128 B.
    assert_eq!(status.table_bytes, full.table_bytes);
    assert!(
        status.table_bytes < 2048 * 16 + MAX_PAIRS * (512 + 64 * 128),
        "{}",
        status.table_bytes
    );
    // A million names of ~13 bytes would take ≥ 13 MB if they were kept.
    assert!(
        rss_after < rss_full + 2 * 1024 * 1024,
        "RSS grew from {rss_full} to {rss_after}"
    );
    let pay = client
        .bucket_totals()
        .into_iter()
        .find(|t| t.bucket == "pay")
        .unwrap();
    assert_eq!((pay.offered, pay.dropped), (CALLERS as u64, CALLERS as u64));
    let mut text = String::new();
    client.encode_metrics(&mut text);
    assert!(text.contains(&format!(
        "grl_requests_total{{service=\"payments\",caller=\"__overflow__\",procedure=\"__overflow__\",bucket=\"pay\",decision=\"dropped\"}} {}",
        CALLERS - MAX_PAIRS
    )));
    assert!(text.contains(&format!(
        "grl_client_overflow_total{{service=\"payments\"}} {}",
        CALLERS - MAX_PAIRS
    )));
}
