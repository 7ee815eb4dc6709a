//! Renders `limits/<service>.yaml`: deterministic formatting and order, limit plus evidence.
//!
//! The file is rewritten only when at least one of its limits changes, so a run that changes
//! nothing makes no commit even though its evidence (observed peak, coverage) moved.
//! Numbers are rounded for a reviewer ([`round`]: a tenth of a request per second, three
//! significant digits under one), times are RFC 3339.

use std::collections::BTreeMap;

use grl_config::raw::{LimitEntry, LimitsFile, ScheduledEntry};
use grl_config::yaml;

/// The header every generated file starts with.
pub fn header(service: &str) -> String {
    format!(
        "# Written by the Rate Limit Configurator (rlc). Do not edit by hand: change\n\
         # services/{service}.yaml instead and let the configurator recompute.\n"
    )
}

/// One bucket's line in the file: the limit and its evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitLine {
    /// Requests per second.
    pub rps: f64,
    /// Evidence fields, written in key order.
    pub evidence: BTreeMap<String, serde_json::Value>,
    /// Limits in force only for a while, by start (see config-repo/README.md, "Scheduled
    /// limits").
    pub scheduled: Vec<ScheduledEntry>,
}

/// The full text of `limits/<service>.yaml` for these limits (bucket order is by name).
pub fn render(service: &str, limits: &BTreeMap<String, LimitLine>) -> String {
    let file = LimitsFile {
        service: service.to_string(),
        limits: limits
            .iter()
            .map(|(name, line)| {
                let evidence = line
                    .evidence
                    .iter()
                    .filter_map(|(k, v)| {
                        Some((k.clone(), serde_json::from_value(rounded(v)).ok()?))
                    })
                    .collect();
                let mut scheduled = line.scheduled.clone();
                for s in &mut scheduled {
                    s.rps = round(s.rps);
                }
                (
                    name.clone(),
                    LimitEntry {
                        rps: round(line.rps),
                        scheduled,
                        evidence,
                    },
                )
            })
            .collect(),
        meta: BTreeMap::new(),
    };
    let body = yaml::to_string(&file).unwrap_or_else(|e| format!("# unrenderable: {e}\n"));
    format!("{}{body}", header(service))
}

/// `x` as a reviewer reads it: to a tenth from 1 up (`592.1347` → `592.1`), to three
/// significant digits under 1 (`0.012345` → `0.0123`), never under the config's smallest
/// limit (0.001).
pub fn round(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    if x.abs() >= 1.0 {
        return (x * 10.0).round() / 10.0;
    }
    let scale = 10f64.powi(2 - x.abs().log10().floor() as i32);
    let r = (x * scale).round() / scale;
    if x > 0.0 { r.max(0.001) } else { r }
}

/// An evidence value with its fractional numbers rounded (whole numbers and text as they
/// are).
fn rounded(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Number(n) if n.is_f64() => n
            .as_f64()
            .and_then(|x| serde_json::Number::from_f64(round(x)))
            .map_or_else(|| v.clone(), Value::Number),
        Value::Array(a) => Value::Array(a.iter().map(rounded).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), rounded(v))).collect()),
        _ => v.clone(),
    }
}

/// The path of a service's limits file inside the config repo.
pub fn path(service: &str) -> String {
    format!("limits/{service}.yaml")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(rps: f64, peak: f64) -> LimitLine {
        LimitLine {
            rps,
            evidence: [
                ("policy".to_string(), serde_json::json!("historical-peak")),
                ("observed_peak".to_string(), serde_json::json!(peak)),
                (
                    "guards".to_string(),
                    serde_json::json!(["max-increase: raised"]),
                ),
            ]
            .into(),
            scheduled: Vec::new(),
        }
    }

    #[test]
    fn scheduled_limits_are_written_beside_the_limit_and_reload() {
        let mut limits = BTreeMap::new();
        let mut l = line(1250.0, 1000.0);
        l.scheduled.push(ScheduledEntry {
            rps: 3750.0,
            effective: grl_config::raw::Effective {
                from: "2026-12-31T22:00:00Z".into(),
                until: "2027-01-01T02:00:00Z".into(),
            },
            reason: "events.yaml: new-years-eve".into(),
        });
        limits.insert("alpha".to_string(), l);
        let text = render("payments", &limits);
        assert!(
            text.contains("  alpha:\n    rps: 1250.0\n    scheduled:\n    - rps: 3750.0\n      effective:\n        from: 2026-12-31T22:00:00Z\n        until: 2027-01-01T02:00:00Z\n      reason: 'events.yaml: new-years-eve'\n"),
            "{text}"
        );
        let services = "service: payments\nbuckets:\n  - name: alpha\n    match: { caller: a }\n    scope: global\n    mode: deny\n    policy: { kind: historical-peak }\n";
        let snap = grl_config::from_files(
            "v",
            [
                ("services/payments.yaml".to_string(), services.to_string()),
                (path("payments"), text.clone()),
            ],
        )
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let b = snap.service("payments").unwrap().bucket("alpha").unwrap();
        assert_eq!(b.scheduled.len(), 1);
        assert_eq!(b.scheduled[0].rps, 3750.0);
        assert_eq!(b.scheduled[0].until - b.scheduled[0].from, 4 * 3_600);
        assert_eq!(b.limit, Some(1250.0));
    }

    #[test]
    fn limits_and_evidence_are_rounded() {
        assert_eq!(round(592.134_729), 592.1);
        assert_eq!(round(3416.66), 3416.7);
        assert_eq!(round(0.012_345), 0.0123);
        assert_eq!(round(0.000_2), 0.001);
        let mut limits = BTreeMap::new();
        let mut l = line(592.134_729_1, 106.487_211);
        l.evidence
            .insert("coverage".into(), serde_json::json!(0.974_326_1));
        l.evidence.insert("samples".into(), serde_json::json!(8065));
        limits.insert("alpha".to_string(), l);
        let text = render("payments", &limits);
        assert!(text.contains("rps: 592.1\n"), "{text}");
        assert!(text.contains("observed_peak: 106.5\n"), "{text}");
        assert!(text.contains("coverage: 0.974\n"), "{text}");
        assert!(text.contains("samples: 8065\n"), "{text}");
    }

    #[test]
    fn output_is_deterministic_and_reloads() {
        let mut limits = BTreeMap::new();
        limits.insert("zeta".to_string(), line(10.5, 8.4));
        limits.insert("alpha".to_string(), line(1250.0, 1000.0));
        let text = render("payments", &limits);
        assert_eq!(text, render("payments", &limits.clone()));
        assert!(text.starts_with("# Written by the Rate Limit Configurator"));
        let alpha = text.find("alpha:").unwrap();
        let zeta = text.find("zeta:").unwrap();
        assert!(alpha < zeta, "{text}");
        let services = "service: payments\nbuckets:\n  - name: alpha\n    match: { caller: a }\n    scope: global\n    mode: deny\n    policy: { kind: historical-peak }\n  - name: zeta\n    match: { caller: z }\n    scope: global\n    mode: deny\n    policy: { kind: historical-peak }\n";
        let snap = grl_config::from_files(
            "v",
            [
                ("services/payments.yaml".to_string(), services.to_string()),
                (path("payments"), text.clone()),
            ],
        )
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let svc = snap.service("payments").unwrap();
        assert_eq!(svc.bucket("alpha").unwrap().limit, Some(1250.0));
        assert_eq!(svc.bucket("zeta").unwrap().limit, Some(10.5));
        assert_eq!(
            svc.bucket("alpha").unwrap().evidence["observed_peak"],
            serde_json::json!(1000.0)
        );
    }
}
