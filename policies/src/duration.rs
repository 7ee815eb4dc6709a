//! Human durations as written in policy specs: `28d`, `7d`, `12h`, `5m`, `30s`, `1w`,
//! and compounds such as `1h30m`; parsing to and formatting from [`std::time::Duration`].

use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The input was empty (or only whitespace).
    #[error("empty duration")]
    Empty,
    /// A number was not followed by a unit.
    #[error("missing unit after {0:?} (use w, d, h, m or s)")]
    MissingUnit(String),
    /// A unit was not one of `w`, `d`, `h`, `m`, `s`.
    #[error("unknown unit {0:?} (use w, d, h, m or s)")]
    UnknownUnit(String),
    /// A unit appeared without a number before it.
    #[error("expected a number at {0:?}")]
    MissingNumber(String),
    /// The value does not fit in 64-bit seconds.
    #[error("duration too large")]
    Overflow,
}

const UNITS: [(char, u64); 5] = [
    ('w', 7 * 86_400),
    ('d', 86_400),
    ('h', 3_600),
    ('m', 60),
    ('s', 1),
];

/// Parses `28d`, `12h`, `5m`, `30s`, `2w` or a compound such as `1d12h`.
///
/// Each part is a non-negative integer followed by one unit; surrounding whitespace is
/// ignored. A bare number is rejected, so that `300` is never silently read as seconds.
///
/// ```
/// use policies::duration::parse;
/// assert_eq!(parse("28d").unwrap().as_secs(), 28 * 86_400);
/// assert_eq!(parse("1h30m").unwrap().as_secs(), 5_400);
/// assert!(parse("5").is_err());
/// ```
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(DurationError::MissingNumber(rest.to_string()));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| DurationError::Overflow)?;
        let after = &rest[digits..];
        let unit = after
            .chars()
            .next()
            .ok_or_else(|| DurationError::MissingUnit(rest.to_string()))?;
        let secs = UNITS
            .iter()
            .find(|(u, _)| *u == unit)
            .map(|(_, s)| *s)
            .ok_or_else(|| DurationError::UnknownUnit(after.to_string()))?;
        total = number
            .checked_mul(secs)
            .and_then(|v| total.checked_add(v))
            .ok_or(DurationError::Overflow)?;
        rest = &after[unit.len_utf8()..];
    }
    Ok(Duration::from_secs(total))
}

/// Formats a duration in the same notation, largest units first, whole seconds only
/// (sub-second parts are dropped): 28 days gives `28d`, 90 minutes `1h30m`, zero `0s`.
/// Weeks are not used on output, so `format(parse("2w"))` is `14d`.
pub fn format(duration: Duration) -> String {
    let mut secs = duration.as_secs();
    if secs == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (unit, size) in UNITS.iter().skip(1) {
        if secs >= *size {
            out.push_str(&(secs / size).to_string());
            out.push(*unit);
            secs %= size;
        }
    }
    out
}

/// A duration as whole seconds in `i64` (unix-time arithmetic), saturating at `i64::MAX`.
pub fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_spec_examples() {
        assert_eq!(parse("28d"), Ok(Duration::from_secs(28 * 86_400)));
        assert_eq!(parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("12h"), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse(" 1d12h "), Ok(Duration::from_secs(36 * 3_600)));
    }

    #[test]
    fn rejects_malformed_input() {
        assert_eq!(parse(""), Err(DurationError::Empty));
        assert!(matches!(parse("5"), Err(DurationError::MissingUnit(_))));
        assert!(matches!(parse("5x"), Err(DurationError::UnknownUnit(_))));
        assert!(matches!(parse("d"), Err(DurationError::MissingNumber(_))));
        assert!(matches!(parse("-5m"), Err(DurationError::MissingNumber(_))));
        assert!(matches!(parse("1.5h"), Err(DurationError::UnknownUnit(_))));
        assert_eq!(parse("99999999999999999999d"), Err(DurationError::Overflow));
    }

    #[test]
    fn formats_largest_units_first() {
        assert_eq!(format(Duration::from_secs(28 * 86_400)), "28d");
        assert_eq!(format(Duration::from_secs(5_400)), "1h30m");
        assert_eq!(format(Duration::from_secs(90_061)), "1d1h1m1s");
        assert_eq!(format(Duration::ZERO), "0s");
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(secs in 0u64..10_000_000_000) {
            let d = Duration::from_secs(secs);
            prop_assert_eq!(parse(&format(d)), Ok(d));
        }

        #[test]
        fn parse_sums_its_parts(parts in proptest::collection::vec((0u64..100_000, 0usize..5), 1..6)) {
            let text: String = parts.iter().map(|(n, u)| format!("{n}{}", UNITS[*u].0)).collect();
            let expected: u64 = parts.iter().map(|(n, u)| n * UNITS[*u].1).sum();
            prop_assert_eq!(parse(&text), Ok(Duration::from_secs(expected)));
        }

        #[test]
        fn parse_never_panics(text in ".{0,20}") {
            let _ = parse(&text);
        }
    }
}
