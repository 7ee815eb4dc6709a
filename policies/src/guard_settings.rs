//! The thresholds of the configurator's safety guards and their per-bucket overrides
//! (`guards:` in `services/<service>.yaml`). They live here, beside the policies, so that the
//! config loader refuses a bad override at load time with file, line and field; the guards
//! themselves act in `rlc`.

use serde::Serialize;

/// Guard thresholds; per-bucket `guards:` fields in `services/<service>.yaml` override them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuardSettings {
    /// Minimum fraction of expected points that must be present (default 0.8).
    pub min_coverage: f64,
    /// A run lowers a limit by at most this fraction (default 0.2).
    pub max_decrease: f64,
    /// A run raises a limit by at most this fraction (default 1.0, i.e. doubles).
    pub max_increase: f64,
    /// Changes smaller than this fraction are skipped (default 0.05).
    pub hysteresis: f64,
    /// No limit below this many rps.
    pub floor: Option<f64>,
    /// No limit above this many rps.
    pub cap: Option<f64>,
    /// No limit above this multiple of the window's observed peak (e.g. 3.0); at least 1.
    pub cap_peak_ratio: Option<f64>,
}

impl Default for GuardSettings {
    fn default() -> Self {
        Self {
            min_coverage: 0.8,
            max_decrease: 0.2,
            max_increase: 1.0,
            hysteresis: 0.05,
            floor: None,
            cap: None,
            cap_peak_ratio: None,
        }
    }
}

/// Why a per-bucket guard override was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("guards.{field}: {message}")]
pub struct GuardSpecError {
    /// The offending field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl GuardSettings {
    /// These settings with a bucket's `guards: { … }` fields applied on top.
    pub fn with_overrides(
        &self,
        overrides: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, GuardSpecError> {
        let mut s = self.clone();
        for (key, value) in overrides {
            let err = |message: &str| GuardSpecError {
                field: key.clone(),
                message: message.to_string(),
            };
            let n = value
                .as_f64()
                .filter(|n| n.is_finite() && *n >= 0.0)
                .ok_or_else(|| err("must be a finite number >= 0"))?;
            match key.as_str() {
                "min_coverage" if n <= 1.0 => s.min_coverage = n,
                "max_decrease" if n <= 1.0 => s.max_decrease = n,
                "max_increase" => s.max_increase = n,
                "hysteresis" => s.hysteresis = n,
                "floor" => s.floor = Some(n),
                "cap" => s.cap = Some(n),
                "cap_peak_ratio" if n >= 1.0 => s.cap_peak_ratio = Some(n),
                "cap_peak_ratio" => {
                    return Err(err(
                        "must be at least 1 (a cap below the observed peak throttles traffic already seen)",
                    ));
                }
                "min_coverage" | "max_decrease" => return Err(err("must be between 0 and 1")),
                _ => return Err(err("unknown guard")),
            }
        }
        if let (Some(f), Some(c)) = (s.floor, s.cap)
            && f > c
        {
            return Err(GuardSpecError {
                field: "floor".into(),
                message: "floor is above cap".into(),
            });
        }
        Ok(s)
    }
}
