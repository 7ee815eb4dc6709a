//! Start-up flag checks: a bad flag is refused before anything is bound or served, with a
//! message naming the flag and exit code 2 (clap's code for a usage error).
//!
//! Most checks are clap value parsers (`#[arg(value_parser = validate::interval_ms)]`), so
//! clap prints `error: invalid value '0' for '--interval-ms <MS>': …` and exits 2. Checks that
//! need a file's content (a loadgen profile) return [`Usage`], which `main` maps to exit 2.

use std::path::PathBuf;
use std::time::Duration;

/// Longest reporting interval accepted, in milliseconds (10 minutes).
pub(crate) const MAX_INTERVAL_MS: u64 = 600_000;
/// Shortest config poll period accepted, in milliseconds.
pub(crate) const MIN_POLL_MS: u64 = 10;
/// Longest config poll period accepted, in milliseconds (1 hour).
pub(crate) const MAX_POLL_MS: u64 = 3_600_000;
/// Longest incident override accepted (30 days).
pub(crate) const MAX_OVERRIDE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Highest rate one loadgen profile row may offer.
pub(crate) const MAX_LOADGEN_RPS: f64 = 1e7;
/// Most clients one loadgen may run.
pub(crate) const MAX_LOADGEN_CLIENTS: usize = 10_000;

/// A usage error found after parsing (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Usage(pub(crate) String);

/// The process exit code for `e`: 2 for a usage error, 1 for anything else.
pub(crate) fn exit_code(e: &anyhow::Error) -> i32 {
    if e.chain().any(<dyn std::error::Error>::is::<Usage>) {
        2
    } else {
        1
    }
}

fn ms_in(s: &str, min: u64, max: u64) -> Result<u64, String> {
    let v: u64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number of milliseconds"))?;
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be between {min} and {max} ms"))
    }
}

/// `--interval-ms`: 1 ms to 10 minutes (0 made a ticker panic).
pub(crate) fn interval_ms(s: &str) -> Result<u64, String> {
    ms_in(s, 1, MAX_INTERVAL_MS)
}

/// `--poll-ms`: 10 ms to 1 hour.
pub(crate) fn poll_ms(s: &str) -> Result<u64, String> {
    ms_in(s, MIN_POLL_MS, MAX_POLL_MS)
}

/// `--partition-hold-ms`: 0 (no hold) to 1 hour.
pub(crate) fn hold_ms(s: &str) -> Result<u64, String> {
    ms_in(s, 0, MAX_POLL_MS)
}

/// A timeout in milliseconds: 1 ms to 1 hour.
pub(crate) fn timeout_ms(s: &str) -> Result<u64, String> {
    ms_in(s, 1, MAX_POLL_MS)
}

/// `--config DIR`: an existing directory (a missing path or a plain file started a
/// controller with zero buckets).
pub(crate) fn config_dir(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    match std::fs::metadata(&p) {
        Ok(m) if m.is_dir() => Ok(p),
        Ok(_) => Err(
            "is not a directory (want the config repo's root, holding services/ and limits/)"
                .into(),
        ),
        Err(e) => Err(e.to_string()),
    }
}

fn count_in(s: &str, max: usize) -> Result<usize, String> {
    let v: usize = s
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number"))?;
    if (1..=max).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be between 1 and {max}"))
    }
}

/// `--tls-max-connections`: 1 to 1,000,000.
pub(crate) fn max_connections(s: &str) -> Result<usize, String> {
    count_in(s, 1_000_000)
}

/// `--tls-max-handshakes`: 1 to 100,000.
pub(crate) fn max_handshakes(s: &str) -> Result<usize, String> {
    count_in(s, 100_000)
}

/// `--ttl` of an override: a duration (`30m`, `2h`) of at most 30 days.
pub(crate) fn override_ttl(s: &str) -> Result<Duration, String> {
    let d = super::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err("must be longer than 0s".into());
    }
    if d > MAX_OVERRIDE_TTL {
        return Err("must be at most 30d".into());
    }
    Ok(d)
}

/// `--rps` of an override: a limit the config would accept.
pub(crate) fn limit_rps(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if grl_config::bounds::limit_in_range(v) {
        Ok(v)
    } else {
        Err(grl_config::bounds::limit_problem(v))
    }
}

/// `--clients` of loadgen: 1 to [`MAX_LOADGEN_CLIENTS`].
pub(crate) fn clients(s: &str) -> Result<usize, String> {
    let v: usize = s
        .parse()
        .map_err(|_| format!("`{s}` is not a whole number"))?;
    if (1..=MAX_LOADGEN_CLIENTS).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be between 1 and {MAX_LOADGEN_CLIENTS}"))
    }
}

/// `--max-client-rps`: a rate a limit could take (finite, 0.001 to 1e9).
pub(crate) fn max_client_rps(s: &str) -> Result<f64, String> {
    limit_rps(s)
}

/// `--max-child-rps`: finite, above 0, at most 1e12.
pub(crate) fn max_child_rps(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if v.is_finite() && v > 0.0 && v <= 1e12 {
        Ok(v)
    } else {
        Err("must be a finite number above 0 and at most 1e12".into())
    }
}

/// The report bounds for `--max-client-rps` and `--max-child-rps` (the other bounds at
/// their defaults).
pub(crate) fn report_limits(
    max_client_rps: f64,
    max_child_rps: Option<f64>,
) -> grl::tier::engine::admission::ReportLimits {
    let d = grl::tier::engine::admission::ReportLimits::default();
    grl::tier::engine::admission::ReportLimits {
        max_client_rps,
        max_child_rps: max_child_rps.unwrap_or(d.max_child_rps),
        ..d
    }
}

/// A loadgen profile rate: finite, at least 0 and at most [`MAX_LOADGEN_RPS`].
pub(crate) fn profile_rps(v: f64) -> Result<f64, String> {
    if v.is_finite() && (0.0..=MAX_LOADGEN_RPS).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "rps must be a finite number between 0 and {MAX_LOADGEN_RPS}, got {v}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_and_polls() {
        assert!(interval_ms("0").is_err());
        assert!(interval_ms("-1").is_err());
        assert_eq!(interval_ms("1000"), Ok(1000));
        assert!(interval_ms("600001").is_err());
        assert!(poll_ms("0").is_err());
        assert_eq!(poll_ms("200"), Ok(200));
        assert!(max_connections("0").is_err());
        assert_eq!(max_connections("4"), Ok(4));
        assert!(max_handshakes("100001").is_err());
    }

    #[test]
    fn config_dir_must_be_a_directory() {
        let d = tempfile::tempdir().unwrap();
        assert!(config_dir(d.path().to_str().unwrap()).is_ok());
        let f = d.path().join("f.yaml");
        std::fs::write(&f, "x").unwrap();
        assert!(
            config_dir(f.to_str().unwrap())
                .unwrap_err()
                .contains("not a directory")
        );
        assert!(config_dir(d.path().join("missing").to_str().unwrap()).is_err());
    }

    #[test]
    fn override_ttl_and_rps() {
        assert_eq!(override_ttl("30d"), Ok(MAX_OVERRIDE_TTL));
        assert!(override_ttl("31d").is_err());
        assert!(override_ttl("99999999999d").is_err());
        assert!(override_ttl("0s").is_err());
        assert!(limit_rps("inf").is_err());
        assert!(limit_rps("NaN").is_err());
        assert!(limit_rps("1e300").is_err());
        assert_eq!(limit_rps("50"), Ok(50.0));
    }

    #[test]
    fn loadgen_rates_and_clients() {
        for bad in [f64::INFINITY, f64::NAN, -1.0, 1.1e7] {
            assert!(profile_rps(bad).is_err(), "{bad}");
        }
        assert_eq!(profile_rps(1e7), Ok(1e7));
        assert!(clients("0").is_err());
        assert_eq!(clients("4"), Ok(4));
    }

    #[test]
    fn usage_errors_exit_2() {
        let e = anyhow::Error::new(Usage("x".into())).context("loadgen");
        assert_eq!(exit_code(&e), 2);
        assert_eq!(exit_code(&anyhow::anyhow!("io")), 1);
    }
}
