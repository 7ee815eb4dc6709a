//! Builds a policy from its spec (`kind` plus parameters). Adding a policy is adding its
//! file and one line to the `ENTRIES` table in this file.

use crate::params::Params;
pub use crate::params::SpecError;
use crate::policy::{FromSpec, Policy};
use crate::{
    auto::Auto, fixed::Fixed, forecast::Forecast, historical_peak::HistoricalPeak,
    peak_trend::PeakTrend,
};
use serde_json::{Map, Value};

/// One registered kind.
struct Entry {
    kind: &'static str,
    build: fn(&Params<'_>) -> Result<Box<dyn Policy>, SpecError>,
}

const fn entry<P: FromSpec>() -> Entry {
    Entry {
        kind: P::KIND,
        build: build::<P>,
    }
}

fn build<P: FromSpec>(params: &Params<'_>) -> Result<Box<dyn Policy>, SpecError> {
    Ok(Box::new(P::from_params(params)?))
}

/// Every known policy, in the order of [`KINDS`].
const ENTRIES: &[Entry] = &[
    entry::<Fixed>(),
    entry::<HistoricalPeak>(),
    entry::<Forecast>(),
    entry::<PeakTrend>(),
    entry::<Auto>(),
];

const KIND_ARRAY: [&str; ENTRIES.len()] = {
    let mut kinds = [""; ENTRIES.len()];
    let mut i = 0;
    while i < ENTRIES.len() {
        kinds[i] = ENTRIES[i].kind;
        i += 1;
    }
    kinds
};

/// The kind names [`from_spec`] accepts:
/// `["fixed", "historical-peak", "forecast", "peak-trend", "auto"]`.
pub const KINDS: &[&str] = &KIND_ARRAY;

/// Builds the policy `kind` from `params` (the spec's fields other than `kind`).
///
/// Errors name the field: `kind` for an unknown kind, or the parameter that is missing,
/// malformed, out of range or unknown.
///
/// ```
/// let params = serde_json::json!({ "window": "28d", "buffer": 0.25 });
/// let policy = policies::registry::from_spec("historical-peak", params.as_object().unwrap()).unwrap();
/// assert_eq!(policy.kind(), "historical-peak");
/// ```
pub fn from_spec(kind: &str, params: &Map<String, Value>) -> Result<Box<dyn Policy>, SpecError> {
    let entry = ENTRIES.iter().find(|e| e.kind == kind).ok_or_else(|| {
        SpecError::new(
            "kind",
            format!("unknown policy kind, expected one of {}", KINDS.join(", ")),
        )
    })?;
    let params = Params::new(params);
    let policy = (entry.build)(&params)?;
    params.finish()?;
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(kind: &str, params: Value) -> Result<Box<dyn Policy>, SpecError> {
        from_spec(kind, params.as_object().unwrap())
    }

    #[test]
    fn kinds_are_the_documented_ones() {
        assert_eq!(
            KINDS,
            &["fixed", "historical-peak", "forecast", "peak-trend", "auto"]
        );
        for kind in KINDS {
            let params = match *kind {
                "fixed" => json!({"rps": 10}),
                _ => json!({}),
            };
            assert_eq!(spec(kind, params).unwrap().kind(), *kind);
        }
    }

    #[test]
    fn unknown_kind_names_the_kind_field() {
        let err = spec("magic", json!({})).unwrap_err();
        assert_eq!(err.field, "kind");
        assert!(
            err.to_string().starts_with("kind: unknown policy kind"),
            "{err}"
        );
        assert!(
            !err.to_string().contains("magic"),
            "the value is not echoed: {err}"
        );
    }

    #[test]
    fn unknown_param_is_named() {
        let err = spec("historical-peak", json!({"window": "7d", "bufer": 0.1})).unwrap_err();
        assert_eq!(err, SpecError::new("bufer", "unknown field"));
        assert_eq!(err.to_string(), "bufer: unknown field");
    }

    #[test]
    fn bad_values_are_named() {
        assert_eq!(spec("fixed", json!({})).unwrap_err().field, "rps");
        assert_eq!(spec("fixed", json!({"rps": -1})).unwrap_err().field, "rps");
        assert_eq!(spec("fixed", json!({"rps": "x"})).unwrap_err().field, "rps");
        let err = spec("historical-peak", json!({"window": "28x"})).unwrap_err();
        assert_eq!(err.field, "window");
        let err = spec("historical-peak", json!({"window": "0s"})).unwrap_err();
        assert_eq!(err.field, "window");
        let err = spec("historical-peak", json!({"buffer": -0.5})).unwrap_err();
        assert_eq!(err.field, "buffer");
        let err = spec("forecast", json!({"level": 1.0})).unwrap_err();
        assert_eq!(err.field, "level");
        let err = spec("forecast", json!({"window": "2d"})).unwrap_err();
        assert_eq!(err.field, "window");
        let err = spec("peak-trend", json!({"max_growth": -0.1})).unwrap_err();
        assert_eq!(err.field, "max_growth");
        let err = spec("peak-trend", json!({"quantile": 1.5})).unwrap_err();
        assert_eq!(err.field, "quantile");
        let err = spec("auto", json!({"horizon": "0s"})).unwrap_err();
        assert_eq!(err.field, "horizon");
        let err = spec("auto", json!({"buffer": 0.25})).unwrap_err();
        assert_eq!(err, SpecError::new("buffer", "unknown field"));
    }

    #[test]
    fn windows_follow_the_spec() {
        let p = spec("historical-peak", json!({"window": "7d"})).unwrap();
        assert_eq!(p.window().as_secs(), 7 * 86_400);
        let p = spec("historical-peak", json!({})).unwrap();
        assert_eq!(p.window().as_secs(), 28 * 86_400);
        assert!(spec("fixed", json!({"rps": 5})).unwrap().window().is_zero());
        let p = spec("forecast", json!({"window": 604800})).unwrap();
        assert_eq!(p.window().as_secs(), 7 * 86_400);
        let p = spec("peak-trend", json!({"window": "14d"})).unwrap();
        assert_eq!(p.window().as_secs(), 14 * 86_400);
        let p = spec("auto", json!({})).unwrap();
        assert_eq!(p.window().as_secs(), 28 * 86_400);
    }
}
