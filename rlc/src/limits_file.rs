//! Renders `limits/<service>.yaml`: deterministic formatting and order, limit plus evidence.
//!
//! The file is rewritten only when at least one of its limits changes, so a run that changes
//! nothing makes no commit even though its evidence (observed peak, coverage) moved.

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
                    .filter_map(|(k, v)| Some((k.clone(), serde_json::from_value(v.clone()).ok()?)))
                    .collect();
                (
                    name.clone(),
                    LimitEntry {
                        rps: line.rps,
                        scheduled: line.scheduled.clone(),
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
