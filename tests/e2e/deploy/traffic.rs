//! The demo traffic profile `deploy/traffic.csv` that the load generators replay, and the
//! check of any `second,caller,procedure,rps` profile a compose service is given.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result, ensure};

use super::{deploy_file, repo_root};

/// Checks a `second,caller,procedure,rps` profile; returns its length in seconds.
pub(super) fn check_traffic_profile(path: &Path) -> Result<u64> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = text.lines();
    ensure!(
        lines.next() == Some("second,caller,procedure,rps"),
        "{}: header must be `second,caller,procedure,rps`",
        path.display()
    );
    let mut per_second: BTreeMap<u64, f64> = BTreeMap::new();
    let mut per_pair: BTreeMap<(String, String), BTreeSet<u64>> = BTreeMap::new();
    for (n, line) in lines.enumerate() {
        let at = || format!("{} line {}", path.display(), n + 2);
        let f: Vec<&str> = line.split(',').collect();
        ensure!(f.len() == 4, "{}: expected 4 fields", at());
        let second: u64 = f[0].parse().with_context(at)?;
        let rps: f64 = f[3].parse().with_context(at)?;
        ensure!(
            !f[1].is_empty() && !f[2].is_empty(),
            "{}: empty caller or procedure",
            at()
        );
        ensure!(rps.is_finite() && rps >= 0.0, "{}: rps must be >= 0", at());
        ensure!(
            per_pair
                .entry((f[1].into(), f[2].into()))
                .or_default()
                .insert(second),
            "{}: duplicate row",
            at()
        );
        *per_second.entry(second).or_default() += rps;
    }
    let len = per_second.len() as u64;
    ensure!(
        len >= 60,
        "{}: expected at least a minute of traffic",
        path.display()
    );
    ensure!(
        per_second.keys().copied().eq(0..len),
        "{}: seconds must run 0..{len} without gaps",
        path.display()
    );
    for (pair, secs) in &per_pair {
        ensure!(
            secs.len() as u64 == len,
            "{}: {pair:?} does not cover every second",
            path.display()
        );
    }
    let mut totals: Vec<f64> = per_second.values().copied().collect();
    totals.sort_by(f64::total_cmp);
    let (median, peak) = (totals[totals.len() / 2], totals[totals.len() - 1]);
    ensure!(
        median > 0.0 && peak >= 1.5 * median,
        "{}: no surge (peak {peak} rps vs median {median} rps)",
        path.display()
    );
    Ok(len)
}

#[test]
fn demo_traffic_profile_has_a_surge() -> Result<()> {
    let len = check_traffic_profile(&repo_root().join(deploy_file("traffic.csv")))?;
    ensure!(
        len >= 300,
        "the demo profile should last at least 5 minutes, lasts {len} s"
    );
    Ok(())
}
