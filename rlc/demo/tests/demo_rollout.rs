//! `rlc demo --rollout` run as a process: a good change reaches r1, then r2 a bake later; a
//! bad one (a cut ten times below the traffic) moves r1, fails its gate and goes back,
//! while r2 never moves; all within the demo's two minutes, read from what it prints.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// The region cells of the per-second lines between `from` and `to` (section headers):
/// `(region, short commit)` per line.
fn region_versions<'a>(out: &'a str, from: &str, to: &str) -> Vec<Vec<(&'a str, &'a str)>> {
    let start = out.find(from).unwrap_or(out.len());
    let end = out[start..].find(to).map_or(out.len(), |e| start + e);
    out[start..end]
        .lines()
        .filter(|l| {
            l.trim_start().starts_with(|c: char| c.is_ascii_digit()) && l.contains("s  r1 ")
        })
        .map(|l| {
            l.split("  |  ")
                .filter_map(|cell| {
                    let mut words = cell.split_whitespace().skip_while(|w| !w.starts_with('r'));
                    Some((words.next()?, words.next()?))
                })
                .collect()
        })
        .collect()
}

/// The value after `label ` in `line`, up to the next space or colon.
fn figure(line: &str, label: &str) -> Option<f64> {
    line.split(&format!("{label} "))
        .nth(1)?
        .split([' ', ':'])
        .next()?
        .parse()
        .ok()
}

#[test]
fn demo_rollout_moves_a_good_change_wave_by_wave_and_rolls_a_bad_one_back() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rlc-demo"))
        .args(["--rollout", "--dir"])
        .arg(dir.path())
        .output()?;
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(
        took < Duration::from_secs(120),
        "the demo must finish in under 2 minutes: {took:?}"
    );

    // The good change: passed every wave, r1 first, then r2.
    let passed = stdout
        .lines()
        .find(|l| l.contains("passed every wave"))
        .with_context(|| format!("no passed rollout:\n{stdout}"))?;
    let good = passed
        .split(": ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .context("the good commit")?;
    let during_good = region_versions(&stdout, "== 4.", "== 5.");
    assert!(
        during_good
            .iter()
            .any(|l| l.contains(&("r1", good)) && !l.contains(&("r2", good))),
        "r1 ran the good change while r2 did not yet: {during_good:?}\n{stdout}"
    );
    assert!(
        during_good
            .last()
            .is_some_and(|l| l == &[("r1", good), ("r2", good)]),
        "both regions run the good change at its end: {during_good:?}"
    );

    // The bad change: wave 1 failed on r1, with the figures; r1 rolled back to the good one.
    let failed = stdout
        .lines()
        .find(|l| l.contains("wave 1 failed"))
        .with_context(|| format!("no failed wave:\n{stdout}"))?;
    assert!(
        failed.contains(
            "region r1 gate max_drop_over_prediction bucket payments/partner-acme predicted "
        ),
        "{failed}"
    );
    let predicted = figure(failed, "predicted").context("predicted share")?;
    let observed = figure(failed, "observed").context("observed share")?;
    assert!(
        predicted < 0.1 && observed > 0.7,
        "predicted {predicted}, observed {observed}: {failed}"
    );
    let stopped = stdout
        .lines()
        .find(|l| l.contains("stopped; rolled back:"))
        .with_context(|| format!("no rollback line:\n{stdout}"))?;
    assert!(
        stopped.ends_with(&format!("rolled back: r1 → {good}")),
        "r1 alone goes back to the good change: {stopped}"
    );
    let bad = stopped
        .split(": ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .context("the bad commit")?;
    assert_ne!(bad, good);
    let during_bad = region_versions(&stdout, "== 5.", "== verdict");
    assert!(
        during_bad.iter().any(|l| l.contains(&("r1", bad))),
        "r1 ran the bad change: {during_bad:?}\n{stdout}"
    );
    assert!(
        during_bad.len() >= 3 && during_bad.iter().all(|l| l.contains(&("r2", good))),
        "r2 never moved: {during_bad:?}\n{stdout}"
    );
    assert!(
        during_bad
            .last()
            .is_some_and(|l| l == &[("r1", good), ("r2", good)]),
        "r1 is back: {during_bad:?}"
    );
    let status = &stdout[stdout.find("== 5.").unwrap_or(0)..];
    for row in ["1     r1      rolled-back", "2     r2      pending"] {
        assert!(
            status.lines().any(|l| l.trim_start().starts_with(row)),
            "{row:?} in rlc rollout status:\n{status}"
        );
    }

    assert!(
        stdout.contains("the demo behaved as described") && !stdout.contains("[FAILED]"),
        "{stdout}"
    );
    for line in stdout.lines().chain(stderr.lines()) {
        assert!(
            !line.contains(" INFO ") && !line.contains(" WARN "),
            "a log line in the demo's output: {line:?}"
        );
    }
    let log = std::fs::read_to_string(dir.path().join("demo.log")).context("demo.log")?;
    assert!(
        log.contains("rollout gate failed"),
        "the log has it:\n{log}"
    );
    Ok(())
}
