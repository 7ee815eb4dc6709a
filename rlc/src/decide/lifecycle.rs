//! Shadow → deny lifecycle: which shadow buckets are ready to enforce, and which enforced
//! buckets drop far more than their backtest predicted.
//!
//! How long a bucket has been in shadow is kept by the configurator itself, as the
//! `shadow_since` evidence field of its `limits/` entry (set by the first run that sees the
//! bucket in shadow mode, carried over while it stays there).

use serde::Serialize;

/// Readiness thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LifecycleSettings {
    /// Days in shadow before a bucket may be promoted (default 7).
    pub min_days: f64,
    /// Largest virtual-drop fraction of offered load for promotion (default 0.001 = 0.1%).
    pub max_virtual_drop_fraction: f64,
    /// A deny bucket is flagged when its drop fraction exceeds this many times the backtest's
    /// exceedance rate (and at least `max_virtual_drop_fraction`).
    pub unexpected_drop_factor: f64,
}

impl Default for LifecycleSettings {
    fn default() -> Self {
        Self {
            min_days: 7.0,
            max_virtual_drop_fraction: 0.001,
            unexpected_drop_factor: 10.0,
        }
    }
}

/// What the lifecycle says of one bucket.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LifecycleVerdict {
    /// `ready`, `not-ready`, `unexpected-drops` or `ok`.
    pub status: &'static str,
    /// Days the bucket has been in shadow (shadow buckets only).
    pub days_in_shadow: Option<f64>,
    /// (Virtual) drops as a fraction of offered load over the recent window.
    pub drop_fraction: f64,
    /// Why, in words.
    pub reason: String,
}

/// The fraction `drops / offered` from two rate series over the same window.
pub fn drop_fraction(offered: &[(i64, f64)], drops: &[(i64, f64)], since: i64) -> f64 {
    let sum = |s: &[(i64, f64)]| {
        s.iter()
            .filter(|(t, _)| *t >= since)
            .map(|(_, v)| v)
            .sum::<f64>()
    };
    let o = sum(offered);
    // `+ 0.0`: an empty f64 sum is -0.0, which would print as "-0.000%".
    if o > 0.0 { sum(drops) / o + 0.0 } else { 0.0 }
}

/// When a bucket went into shadow, from its `shadow_since` evidence: an RFC 3339 time, or
/// Unix seconds as files written before issue 40 hold.
pub fn shadow_since_of(v: &serde_json::Value) -> Option<i64> {
    match v {
        serde_json::Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.timestamp()),
        other => other.as_i64(),
    }
}

/// `shadow_since` evidence for Unix seconds `t`: an RFC 3339 time a reviewer reads.
pub fn shadow_since_value(t: i64) -> serde_json::Value {
    chrono::DateTime::from_timestamp(t, 0).map_or_else(
        || t.into(),
        |d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true).into(),
    )
}

/// Verdict for a shadow bucket.
pub fn shadow_verdict(
    settings: &LifecycleSettings,
    shadow_since: i64,
    now: i64,
    virtual_drop_fraction: f64,
) -> LifecycleVerdict {
    let days = (now - shadow_since).max(0) as f64 / 86_400.0;
    let (status, reason) = if days < settings.min_days {
        (
            "not-ready",
            format!("in shadow {days:.1} of {:.0} days", settings.min_days),
        )
    } else if virtual_drop_fraction > settings.max_virtual_drop_fraction {
        (
            "not-ready",
            format!(
                "virtual drops {:.3}% of offered > {:.3}%",
                virtual_drop_fraction * 100.0,
                settings.max_virtual_drop_fraction * 100.0
            ),
        )
    } else {
        (
            "ready",
            format!(
                "{days:.1} days in shadow, virtual drops {:.3}% of offered",
                virtual_drop_fraction * 100.0
            ),
        )
    };
    LifecycleVerdict {
        status,
        days_in_shadow: Some(days),
        drop_fraction: virtual_drop_fraction,
        reason,
    }
}

/// Verdict for an enforced bucket, given the exceedance rate its backtest predicted.
pub fn deny_verdict(
    settings: &LifecycleSettings,
    drop_fraction: f64,
    expected_exceedance: Option<f64>,
) -> LifecycleVerdict {
    let expected = expected_exceedance.unwrap_or(0.0);
    let threshold =
        (expected * settings.unexpected_drop_factor).max(settings.max_virtual_drop_fraction);
    let (status, reason) = if drop_fraction > threshold {
        (
            "unexpected-drops",
            format!(
                "drops {:.3}% of offered, backtest expected {:.3}%",
                drop_fraction * 100.0,
                expected * 100.0
            ),
        )
    } else {
        (
            "ok",
            format!("drops {:.3}% of offered", drop_fraction * 100.0),
        )
    };
    LifecycleVerdict {
        status,
        days_in_shadow: None,
        drop_fraction,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadow_bucket_needs_days_and_few_virtual_drops() {
        let s = LifecycleSettings::default();
        let now = 100 * 86_400;
        assert_eq!(
            shadow_verdict(&s, now - 3 * 86_400, now, 0.0).status,
            "not-ready"
        );
        assert_eq!(
            shadow_verdict(&s, now - 8 * 86_400, now, 0.01).status,
            "not-ready"
        );
        let v = shadow_verdict(&s, now - 8 * 86_400, now, 0.0005);
        assert_eq!(v.status, "ready");
        assert!(v.reason.contains("8.0 days"), "{}", v.reason);
    }

    #[test]
    fn deny_bucket_dropping_more_than_expected_is_flagged() {
        let s = LifecycleSettings::default();
        assert_eq!(
            deny_verdict(&s, 0.05, Some(0.001)).status,
            "unexpected-drops"
        );
        assert_eq!(deny_verdict(&s, 0.005, Some(0.001)).status, "ok");
        assert_eq!(deny_verdict(&s, 0.0, None).status, "ok");
    }

    #[test]
    fn drop_fraction_sums_the_window() {
        let offered = [(0, 100.0), (10, 100.0), (20, 100.0)];
        let drops = [(0, 50.0), (10, 1.0), (20, 1.0)];
        assert!((drop_fraction(&offered, &drops, 10) - 0.01).abs() < 1e-12);
    }
}

#[cfg(test)]
mod shadow_since_tests {
    use super::*;

    #[test]
    fn shadow_since_is_rfc3339_and_old_unix_seconds_still_read() {
        let v = shadow_since_value(1_780_000_000);
        assert_eq!(v, serde_json::json!("2026-05-28T20:26:40Z"));
        assert_eq!(shadow_since_of(&v), Some(1_780_000_000));
        assert_eq!(
            shadow_since_of(&serde_json::json!(1_780_000_000)),
            Some(1_780_000_000)
        );
        assert_eq!(shadow_since_of(&serde_json::json!("yesterday")), None);
    }
}
