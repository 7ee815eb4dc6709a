//! `rollout.yaml` at the config repo's root: the waves of regions a change goes through, the
//! bake time of each, and the gates read after it. Parsed in two stages, as every config
//! file here: the YAML as written ([`RawPlan`]), then a validated [`RolloutPlan`] whose
//! refusals name file, line and field (`rollout.yaml:4: waves[1].bake: …`).

use std::collections::BTreeMap;
use std::time::Duration;

use grl_config::yaml::{self, LineIndex};
use grl_config::{ConfigError, ConfigErrors};
use serde::{Deserialize, Serialize};

/// The file's path in the config repo.
pub const PLAN_FILE: &str = "rollout.yaml";

/// Default of `gates.max_drop_over_prediction`.
pub const DEFAULT_MAX_DROP_OVER_PREDICTION: f64 = 0.02;
/// Default of `gates.max_new_drop`.
pub const DEFAULT_MAX_NEW_DROP: f64 = 0.01;
/// Default of `apply_timeout`.
pub const DEFAULT_APPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// `rollout.yaml` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    waves: Vec<RawWave>,
    #[serde(default)]
    gates: RawGates,
    apply_timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWave {
    regions: Vec<String>,
    bake: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGates {
    max_drop_over_prediction: Option<f64>,
    max_new_drop: Option<f64>,
    #[serde(default)]
    prometheus: Vec<RawQueryGate>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQueryGate {
    name: String,
    query: String,
    max: f64,
}

/// A validated rollout plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutPlan {
    /// The waves, in order; each region is in exactly one.
    pub waves: Vec<Wave>,
    /// What a wave must show after its bake.
    pub gates: Gates,
    /// How long a moved region's controllers have to run the new version before the wave
    /// fails (gate `applied`).
    #[serde(with = "secs")]
    pub apply_timeout: Duration,
}

/// One wave: regions moved together, then baked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wave {
    /// The regions moved by this wave.
    pub regions: Vec<String>,
    /// How long the wave's regions run the new version before the gates are read.
    #[serde(with = "secs")]
    pub bake: Duration,
}

/// The gates of every wave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gates {
    /// A changed deny bucket's observed dropped share may exceed its predicted share by
    /// at most this.
    pub max_drop_over_prediction: f64,
    /// A deny bucket that dropped nothing before the wave and has no prediction may drop at
    /// most this share of its offered load.
    pub max_new_drop: f64,
    /// Named Prometheus queries whose value must stay at or below their `max`.
    pub prometheus: Vec<QueryGate>,
}

/// A gate on a Prometheus query, evaluated for each region of a wave after its bake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryGate {
    /// The gate's name, shown in reasons.
    pub name: String,
    /// PromQL; `{{region}}` is replaced by the region's name.
    pub query: String,
    /// The largest value that passes.
    pub max: f64,
}

impl RolloutPlan {
    /// Parses and validates `text`, the content of `rollout.yaml`.
    pub fn parse(text: &str) -> Result<RolloutPlan, ConfigErrors> {
        let raw: RawPlan = yaml::parse(PLAN_FILE, text).map_err(|e| ConfigErrors(vec![e]))?;
        let index = LineIndex::new(text);
        let mut errors = Vec::new();
        let mut err = |field: String, message: String| {
            errors.push(ConfigError::new(
                PLAN_FILE,
                index.line(&field),
                field,
                message,
            ));
        };
        if raw.waves.is_empty() {
            err("waves".into(), "needs at least one wave".into());
        }
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut waves = Vec::new();
        for (i, w) in raw.waves.into_iter().enumerate() {
            if w.regions.is_empty() {
                err(
                    format!("waves[{i}].regions"),
                    "needs at least one region".into(),
                );
            }
            for (j, r) in w.regions.iter().enumerate() {
                let field = format!("waves[{i}].regions[{j}]");
                if !valid_region(r) {
                    err(
                        field,
                        "is not a valid region name (letters, digits, - _ ., at most 64 bytes)"
                            .into(),
                    );
                } else if let Some(first) = seen.insert(r.clone(), i) {
                    err(field, format!("region is already in wave {}", first + 1));
                }
            }
            let bake = match policies::duration::parse(&w.bake) {
                Ok(d) => d,
                Err(e) => {
                    err(format!("waves[{i}].bake"), e.to_string());
                    Duration::ZERO
                }
            };
            waves.push(Wave {
                regions: w.regions,
                bake,
            });
        }
        let mut share = |field: &str, value: Option<f64>, default: f64| match value {
            None => default,
            Some(v) if v.is_finite() && (0.0..=1.0).contains(&v) => v,
            Some(_) => {
                err(
                    format!("gates.{field}"),
                    "must be a share between 0 and 1".into(),
                );
                default
            }
        };
        let max_drop_over_prediction = share(
            "max_drop_over_prediction",
            raw.gates.max_drop_over_prediction,
            DEFAULT_MAX_DROP_OVER_PREDICTION,
        );
        let max_new_drop = share("max_new_drop", raw.gates.max_new_drop, DEFAULT_MAX_NEW_DROP);
        let mut names = BTreeMap::new();
        for (i, q) in raw.gates.prometheus.iter().enumerate() {
            let at = |f: &str| format!("gates.prometheus[{i}].{f}");
            if !valid_region(&q.name) {
                err(
                    at("name"),
                    "is not a valid gate name (letters, digits, - _ .)".into(),
                );
            } else if names.insert(q.name.clone(), i).is_some() {
                err(at("name"), "another query gate has this name".into());
            }
            if q.query.trim().is_empty() {
                err(at("query"), "is empty".into());
            }
            if !q.max.is_finite() {
                err(at("max"), "must be a finite number".into());
            }
        }
        let apply_timeout = match raw.apply_timeout.as_deref().map(policies::duration::parse) {
            None => DEFAULT_APPLY_TIMEOUT,
            Some(Ok(d)) if d >= Duration::from_secs(1) => d,
            Some(Ok(_)) => {
                err("apply_timeout".into(), "must be at least 1s".into());
                DEFAULT_APPLY_TIMEOUT
            }
            Some(Err(e)) => {
                err("apply_timeout".into(), e.to_string());
                DEFAULT_APPLY_TIMEOUT
            }
        };
        if !errors.is_empty() {
            return Err(ConfigErrors(errors));
        }
        Ok(RolloutPlan {
            waves,
            gates: Gates {
                max_drop_over_prediction,
                max_new_drop,
                prometheus: raw
                    .gates
                    .prometheus
                    .into_iter()
                    .map(|q| QueryGate {
                        name: q.name,
                        query: q.query,
                        max: q.max,
                    })
                    .collect(),
            },
            apply_timeout,
        })
    }

    /// Every region of the plan, wave by wave.
    pub fn regions(&self) -> impl Iterator<Item = &str> {
        self.waves
            .iter()
            .flat_map(|w| w.regions.iter().map(String::as_str))
    }

    /// The index of the wave `region` is in.
    pub fn wave_of(&self, region: &str) -> Option<usize> {
        self.waves
            .iter()
            .position(|w| w.regions.iter().any(|r| r == region))
    }
}

/// A region (or gate) name: it becomes part of a branch name, `regions/<region>`.
fn valid_region(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && !s.starts_with(['.', '-'])
        && !s.ends_with(".lock")
        && !s.contains("..")
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Durations stored as whole seconds (the plan is kept in the run history as JSON).
mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTRACT: &str = "\
waves:
  - regions: [r1]
    bake: 30s
  - regions: [r2, r3]
    bake: 30s
gates:
  max_drop_over_prediction: 0.02   # observed dropped share minus predicted, per deny bucket
";

    fn errors(text: &str) -> Vec<String> {
        RolloutPlan::parse(text)
            .unwrap_err()
            .0
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn the_contracts_example_parses_with_defaults() {
        let p = RolloutPlan::parse(CONTRACT).unwrap();
        assert_eq!(p.waves.len(), 2);
        assert_eq!(p.waves[0].regions, ["r1"]);
        assert_eq!(p.waves[1].regions, ["r2", "r3"]);
        assert_eq!(p.waves[1].bake, Duration::from_secs(30));
        assert_eq!(p.gates.max_drop_over_prediction, 0.02);
        assert_eq!(p.gates.max_new_drop, DEFAULT_MAX_NEW_DROP);
        assert!(p.gates.prometheus.is_empty());
        assert_eq!(p.apply_timeout, DEFAULT_APPLY_TIMEOUT);
        assert_eq!(p.regions().collect::<Vec<_>>(), ["r1", "r2", "r3"]);
        assert_eq!(p.wave_of("r3"), Some(1));
        assert_eq!(p.wave_of("r9"), None);
    }

    #[test]
    fn every_field_can_be_set() {
        let p = RolloutPlan::parse(
            "waves:\n  - regions: [canary-1]\n    bake: 5m\ngates:\n  max_drop_over_prediction: 0.05\n  max_new_drop: 0.002\n  prometheus:\n    - name: error-rate\n      query: 'sum(rate(errors{region=\"{{region}}\"}[1m])) or vector(0)'\n      max: 0.01\napply_timeout: 2m\n",
        )
        .unwrap();
        assert_eq!(p.waves[0].bake, Duration::from_secs(300));
        assert_eq!(p.gates.max_new_drop, 0.002);
        assert_eq!(p.gates.prometheus[0].name, "error-rate");
        assert_eq!(p.gates.prometheus[0].max, 0.01);
        assert_eq!(p.apply_timeout, Duration::from_secs(120));
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<RolloutPlan>(&json).unwrap(), p);
    }

    #[test]
    fn refusals_name_file_line_and_field() {
        let text = "waves:\n  - regions: [r1]\n    bake: 30s\n  - regions: [r2, r1]\n    bake: soon\n  - regions: []\n    bake: 1s\ngates:\n  max_drop_over_prediction: 1.5\n";
        assert_eq!(
            errors(text),
            [
                "rollout.yaml:4: waves[1].regions[1]: region is already in wave 1",
                "rollout.yaml:5: waves[1].bake: expected a number at \"soon\"",
                "rollout.yaml:6: waves[2].regions: needs at least one region",
                "rollout.yaml:9: gates.max_drop_over_prediction: must be a share between 0 and 1",
            ]
        );
    }

    #[test]
    fn bad_names_and_query_gates_are_refused() {
        let text = "waves:\n  - regions: [\"eu 1\", ../x]\n    bake: 1s\ngates:\n  prometheus:\n    - name: err\n      query: ' '\n      max: .nan\n    - name: err\n      query: up\n      max: 1\napply_timeout: 0s\n";
        assert_eq!(
            errors(text),
            [
                "rollout.yaml:2: waves[0].regions[0]: is not a valid region name (letters, digits, - _ ., at most 64 bytes)",
                "rollout.yaml:2: waves[0].regions[1]: is not a valid region name (letters, digits, - _ ., at most 64 bytes)",
                "rollout.yaml:7: gates.prometheus[0].query: is empty",
                "rollout.yaml:8: gates.prometheus[0].max: must be a finite number",
                "rollout.yaml:9: gates.prometheus[1].name: another query gate has this name",
                "rollout.yaml:12: apply_timeout: must be at least 1s",
            ]
        );
    }

    #[test]
    fn yaml_errors_keep_their_line_and_no_wave_is_refused() {
        let e = errors("waves:\n  - regions: [r1]\n    bake: 1s\n    canary: yes\n");
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("rollout.yaml:4:"), "{e:?}");
        assert!(e[0].contains("unknown field"), "{e:?}");
        assert_eq!(
            errors("waves: []\n"),
            ["rollout.yaml:1: waves: needs at least one wave"]
        );
        let missing = errors("waves:\n  - regions: [r1]\n");
        assert!(missing[0].contains("missing field `bake`"), "{missing:?}");
    }
}
