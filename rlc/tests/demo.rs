//! The README's first command, run as a process: the demo's own summary must hold.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

#[test]
fn demo_holds_the_surge_and_leaves_other_callers_alone() -> Result<()> {
    let rlc = std::path::PathBuf::from(env!("CARGO_BIN_EXE_rlc"));
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let out = std::process::Command::new(rlc)
        .args(["demo", "--json", "--dir"])
        .arg(dir.path())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "the demo must finish in under 2 minutes"
    );
    assert!(
        stdout.contains("| bucket | old | new | change |"),
        "the review table is shown:\n{stdout}"
    );
    let summary: serde_json::Value = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .context("no JSON summary line")
        .and_then(|l| Ok(serde_json::from_str(l)?))?;
    let error = summary["surge_error"].as_f64().context("surge_error")?;
    assert!(
        error.abs() <= 0.05,
        "surge admitted within ±5% of its limit: {summary}"
    );
    assert!(
        summary["surge_offered"].as_f64().unwrap()
            > 10.0 * summary["surge_limit"].as_f64().unwrap()
    );
    assert_eq!(summary["others_dropped"], 0, "{summary}");
    assert!(summary["others_offered"].as_u64().unwrap() > 0);

    // The demo reads as a demo: piped, the table is plain lines with no log line among them
    // and no terminal escapes; the logs went to demo.log in --dir.
    for line in stdout.lines().chain(stderr.lines()) {
        assert!(
            !line.contains(" INFO ") && !line.contains(" WARN ") && !line.contains('\x1b'),
            "a log line or escape code in the demo's output: {line:?}"
        );
    }
    let log = std::fs::read_to_string(dir.path().join("demo.log")).context("demo.log")?;
    assert!(log.contains(" INFO "), "the logs are in demo.log:\n{log}");
    Ok(())
}
