//! Bytes on the wire between tiers at a region's size (issue #25, target 2): one zone's
//! report up and one instruction down, encoded as the tiers encode them, by name (wire
//! version 1) and by index (wire version 2), per bucket row.
//!
//! The rules come from a generated snapshot (`WIRE_SERVICES` services, default 1,100,
//! `WIRE_BUCKETS` buckets in all, default 22,000, realistic names), so indices, versions
//! and names are what a controller would hold. The report is one zone's sums (every
//! bucket, a few with drops); the instruction carries every bucket's ratio and allowance
//! at steady state (no config). Prints one line per form and, last, a JSON object.

use grl::tier::engine::packing::{self, OutRatio};
use grl::tier::engine::ratios::{Rate, RateKey, Totals};
use grl::tier::engine::rules::Rules;
use prost::Message;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let services = env("WIRE_SERVICES", 1_100);
    let buckets = env("WIRE_BUCKETS", 22_000);
    let per = buckets.div_ceil(services);
    let files: Vec<(String, String)> = (0..services)
        .map(|s| {
            let name = format!("team{:03}-service-{s:04}", s % 97);
            let mut text = format!("service: {name}\nbuckets:\n");
            for b in 0..per.min(buckets - (s * per).min(buckets)) {
                let scope = ["global", "region", "zone", "global"][b % 4];
                text.push_str(&format!(
                    "  - {{ name: caller-{b:02}-to-{name}, match: {{ caller: caller-service-{b:04} }}, scope: {scope}, mode: deny, policy: {{ kind: fixed, rps: {} }} }}\n",
                    1000 + b * 37
                ));
            }
            (format!("services/{name}.yaml"), text)
        })
        .collect();
    let snap = grl_config::from_files("3f9c2a7e51b04d6f8a1e2c3b4d5e6f708192a3b4", files).unwrap();
    let rules = Rules::from_snapshot(&snap, &[], 0, 0);
    let (region, zone) = ("eu-west-1", "eu-west-1a");
    let mut totals = Totals::new();
    let mut out = Vec::new();
    for (svc, list) in rules.services() {
        for (j, b) in list.iter().enumerate() {
            let n = totals.len();
            totals.insert(
                RateKey {
                    service: svc.clone(),
                    bucket: b.name.clone(),
                    region: region.into(),
                    zone: zone.into(),
                },
                Rate {
                    offered: 70.0 + (n % 113) as f64 * 0.731,
                    dropped: if n.is_multiple_of(500) { 4.25 } else { 0.0 },
                    shadow_dropped: 0.0,
                    clients: 1 + (n % 3) as u32,
                },
            );
            out.push((svc.as_str(), b.name.as_str(), rules.index_of(svc, j), n));
        }
    }
    let rows = totals.len() as f64;
    let report_bytes = |packed: bool| {
        let (rates, packed) = packing::pack_totals(&totals, &rules, (region, zone), packed);
        grl_core::proto::Report {
            reporter_id: "aggregator-eu-west-1a-7f9c".into(),
            level: grl_core::proto::Level::Zone as i32,
            zone: zone.into(),
            region: region.into(),
            config_version: rules.version.clone(),
            interval_ms: 1000,
            rates,
            packed,
            wire_version: 2,
            ..Default::default()
        }
        .encoded_len() as f64
    };
    let ratios: Vec<OutRatio<'_>> = out
        .iter()
        .map(|(service, bucket, index, n)| OutRatio {
            index: *index,
            service,
            bucket,
            ratio: if n.is_multiple_of(500) { 0.125 } else { 0.0 },
            valid_for_ms: 5_000,
            allowed: Some(150.0 + (*n % 113) as f64 * 1.37),
        })
        .collect();
    let instruction_bytes = |packed: bool| {
        let (named, packed) =
            packing::pack_ratios(ratios.iter().copied(), &rules.version, 5_000, packed);
        grl_core::proto::Instruction {
            config_version: rules.version.clone(),
            valid_for_ms: 5_000,
            interval_ms: 1000,
            ratios: named,
            packed,
            wire_version: 2,
            ..Default::default()
        }
        .encoded_len() as f64
    };
    let (up1, up2) = (report_bytes(false) / rows, report_bytes(true) / rows);
    let (down1, down2) = (
        instruction_bytes(false) / rows,
        instruction_bytes(true) / rows,
    );
    println!("{rows} buckets of {services} services, one zone");
    println!("report up:        by name {up1:.1} B/row, by index {up2:.2} B/row");
    println!("instruction down: by name {down1:.1} B/row, by index {down2:.2} B/row");
    println!(
        "{{\"buckets\":{rows},\"services\":{services},\"bytes_per_row_up_named\":{up1:.2},\"bytes_per_row_up\":{up2:.2},\"bytes_per_row_down_named\":{down1:.2},\"bytes_per_row_down\":{down2:.2}}}"
    );
}
