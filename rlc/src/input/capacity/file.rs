//! `capacity/<service>.yaml` as written, and its validation into a [`CapacityFile`]: every
//! refusal names file, line and field, like every file of the config repo.

use std::collections::BTreeSet;

use grl_config::yaml::{self, LineIndex};
use grl_config::{ConfigError, Scope, Snapshot};
use serde::Deserialize;

/// The utilisation a capacity is planned at when the file gives none.
pub const DEFAULT_UTILIZATION: f64 = 0.8;

/// The directory of capacity files in the config repo.
pub const DIR: &str = "capacity";

/// `capacity/<service>.yaml` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    service: String,
    #[serde(default)]
    utilization: Option<f64>,
    #[serde(default)]
    capacity: Vec<RawEntry>,
}

/// One entry of `capacity:` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    scope: Scope,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    zone: Option<String>,
    #[serde(default)]
    rps: Option<f64>,
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    from: Option<String>,
}

/// Where a capacity holds: the whole service, one region, or one zone.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Area {
    /// Every region together.
    Global,
    /// One region.
    Region(String),
    /// One zone, with its region when the file says it.
    Zone {
        /// The zone.
        zone: String,
        /// Its region, if given.
        region: Option<String>,
    },
}

impl Area {
    /// `global`, `eu-1`, `eu-1a`: the name the pull request uses.
    pub fn name(&self) -> &str {
        match self {
            Area::Global => "global",
            Area::Region(r) => r,
            Area::Zone { zone, .. } => zone,
        }
    }

    /// The scope of the area.
    pub fn scope(&self) -> Scope {
        match self {
            Area::Global => Scope::Global,
            Area::Region(_) => Scope::Region,
            Area::Zone { .. } => Scope::Zone,
        }
    }
}

/// How much an entry says the area can serve.
#[derive(Debug, Clone, PartialEq)]
pub enum Amount {
    /// Requests per second.
    Rps(f64),
    /// A PromQL expression evaluated at the run's "now" (today's capacity).
    Query(String),
}

/// One validated entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Where it holds.
    pub area: Area,
    /// From when (unix seconds); `None`: the capacity before any step.
    pub from: Option<i64>,
    /// How much.
    pub amount: Amount,
    /// Its field path, e.g. `capacity[1]`, for errors.
    pub field: String,
    /// Its line in the file.
    pub line: Option<usize>,
    /// The line of its `rps` or `query`.
    pub amount_line: Option<usize>,
}

/// A validated `capacity/<service>.yaml`.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityFile {
    /// Its path in the config repo.
    pub path: String,
    /// The service it plans.
    pub service: String,
    /// The fraction of the capacity the service's limits may add up to, in (0, 1].
    pub utilization: f64,
    /// The entries, in file order.
    pub entries: Vec<Entry>,
}

/// The path of a service's capacity file.
pub fn path(service: &str) -> String {
    format!("{DIR}/{service}.yaml")
}

/// Parses and validates the capacity file `path` (`text`) against the services of
/// `snapshot`; every problem is returned, each naming its line and field.
pub fn parse(
    path: &str,
    text: &str,
    snapshot: &Snapshot,
) -> Result<CapacityFile, Vec<ConfigError>> {
    let raw: RawFile = yaml::parse(path, text).map_err(|e| vec![e])?;
    let index = LineIndex::new(text);
    let err =
        |field: String, message: String| ConfigError::new(path, index.line(&field), field, message);
    let mut errors = Vec::new();
    let stem = path
        .rsplit('/')
        .next()
        .and_then(|n| n.rsplit_once('.'))
        .map_or(path, |(s, _)| s);
    if raw.service != stem {
        errors.push(err(
            "service".into(),
            format!("must be `{stem}`, the name of its file ({path})"),
        ));
    } else if snapshot.service(&raw.service).is_none() {
        errors.push(err(
            "service".into(),
            format!("unknown service: no services/{stem}.yaml declares service `{stem}`"),
        ));
    }
    let utilization = raw.utilization.unwrap_or(DEFAULT_UTILIZATION);
    if !(utilization.is_finite() && utilization > 0.0 && utilization <= 1.0) {
        errors.push(err(
            "utilization".into(),
            format!("must be a fraction above 0 and at most 1 (got {utilization})"),
        ));
    }
    if raw.capacity.is_empty() {
        errors.push(err(
            "capacity".into(),
            "needs at least one entry (`scope` and `rps` or `query`)".into(),
        ));
    }
    let mut entries = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, e) in raw.capacity.into_iter().enumerate() {
        let at = |f: &str| format!("capacity[{i}].{f}");
        let before = errors.len();
        let area = match (e.scope, e.region, e.zone) {
            (Scope::Global, None, None) => Some(Area::Global),
            (Scope::Region, Some(r), None) if !r.is_empty() => Some(Area::Region(r)),
            (Scope::Zone, region, Some(z)) if !z.is_empty() && region.as_deref() != Some("") => {
                Some(Area::Zone { zone: z, region })
            }
            (Scope::Global, ..) => {
                errors.push(err(
                    at("scope"),
                    "a global capacity names no `region` or `zone`".into(),
                ));
                None
            }
            (Scope::Region, _, Some(_)) => {
                errors.push(err(
                    at("zone"),
                    "a region's capacity names no `zone`".into(),
                ));
                None
            }
            (Scope::Region, ..) => {
                errors.push(err(
                    at("region"),
                    "`scope: region` needs `region: NAME`".into(),
                ));
                None
            }
            (Scope::Zone, ..) => {
                errors.push(err(
                    at("zone"),
                    "`scope: zone` needs `zone: NAME` (and may say its `region`)".into(),
                ));
                None
            }
        };
        let from = match &e.from {
            None => None,
            Some(text) => match instant(text) {
                Ok(t) => Some(t),
                Err(m) => {
                    errors.push(err(at("from"), m));
                    None
                }
            },
        };
        let amount = match (e.rps, e.query) {
            (Some(rps), None) if rps.is_finite() && rps > 0.0 => Some(Amount::Rps(rps)),
            (Some(rps), None) => {
                errors.push(err(
                    at("rps"),
                    format!("a capacity must be a finite number of requests per second above 0 (got {rps})"),
                ));
                None
            }
            (None, Some(q)) if q.trim().is_empty() => {
                errors.push(err(at("query"), "is empty".into()));
                None
            }
            (None, Some(_)) if e.from.is_some() => {
                errors.push(err(
                    at("query"),
                    "a query gives today's capacity; a dated step (`from`) takes `rps`".into(),
                ));
                None
            }
            (None, Some(q)) => Some(Amount::Query(q)),
            (Some(_), Some(_)) => {
                errors.push(err(at("query"), "give `rps` or `query`, not both".into()));
                None
            }
            (None, None) => {
                errors.push(err(
                    format!("capacity[{i}]"),
                    "needs `rps` (requests per second) or `query` (PromQL)".into(),
                ));
                None
            }
        };
        if errors.len() > before {
            continue;
        }
        let (Some(area), Some(amount)) = (area, amount) else {
            continue;
        };
        if !seen.insert((area.clone(), from)) {
            errors.push(err(
                at(if from.is_some() { "from" } else { "scope" }),
                match from {
                    Some(_) => format!("a second step for {} at the same time", area.name()),
                    None => format!(
                        "a second capacity for {} without `from` (one is today's; the others are steps with `from`)",
                        area.name()
                    ),
                },
            ));
            continue;
        }
        let amount_line = index.line(&at(match amount {
            Amount::Rps(_) => "rps",
            Amount::Query(_) => "query",
        }));
        entries.push(Entry {
            area,
            from,
            amount,
            amount_line,
            line: index.line(&format!("capacity[{i}]")),
            field: format!("capacity[{i}]"),
        });
    }
    if errors.is_empty() {
        Ok(CapacityFile {
            path: path.to_string(),
            service: raw.service,
            utilization,
            entries,
        })
    } else {
        Err(errors)
    }
}

/// An RFC 3339 instant (`2026-12-20T00:00:00Z`) in unix seconds, or why it is not one.
pub(crate) fn instant(text: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp())
        .map_err(|e| {
            format!("`{text}` is not an RFC 3339 instant such as 2026-12-20T00:00:00Z ({e})")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> Snapshot {
        let svc = "service: orders\nbuckets:\n  - name: checkout\n    match: { caller: web }\n    scope: global\n    mode: deny\n    policy: { kind: historical-peak }\n";
        grl_config::from_files("v", [("services/orders.yaml".to_string(), svc.to_string())])
            .unwrap()
    }

    fn errors(text: &str) -> Vec<String> {
        parse("capacity/orders.yaml", text, &snapshot())
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn the_contract_example_parses() {
        let text = "service: orders\nutilization: 0.8\ncapacity:\n  - scope: global\n    rps: 1000\n  - scope: global\n    from: \"2026-12-20T00:00:00Z\"\n    rps: 4000\n  - scope: region\n    region: eu-1\n    query: sum(up)\n  - scope: zone\n    zone: eu-1a\n    rps: 300\n";
        let f = parse("capacity/orders.yaml", text, &snapshot()).unwrap();
        assert_eq!(f.utilization, 0.8);
        assert_eq!(f.entries.len(), 4);
        assert_eq!(f.entries[1].from, Some(1_797_724_800));
        assert_eq!(f.entries[1].line, Some(6));
        assert_eq!(f.entries[2].amount, Amount::Query("sum(up)".into()));
        assert_eq!(
            f.entries[3].area,
            Area::Zone {
                zone: "eu-1a".into(),
                region: None
            }
        );
        let f = parse(
            "capacity/orders.yaml",
            "service: orders\ncapacity:\n  - { scope: global, rps: 5 }\n",
            &snapshot(),
        )
        .unwrap();
        assert_eq!(f.utilization, DEFAULT_UTILIZATION);
    }

    #[test]
    fn zero_or_negative_capacity_is_refused_with_file_line_and_field() {
        let e = errors("service: orders\ncapacity:\n  - scope: global\n    rps: 0\n");
        assert_eq!(
            e,
            [
                "capacity/orders.yaml:4: capacity[0].rps: a capacity must be a finite number of requests per second above 0 (got 0)"
            ]
        );
        let e = errors("service: orders\ncapacity:\n  - scope: global\n    rps: -5\n");
        assert!(e[0].contains(":4: capacity[0].rps:"), "{e:?}");
    }

    #[test]
    fn an_unknown_service_is_refused() {
        let e = parse(
            "capacity/billing.yaml",
            "service: billing\ncapacity:\n  - { scope: global, rps: 5 }\n",
            &snapshot(),
        )
        .unwrap_err();
        assert_eq!(
            e[0].to_string(),
            "capacity/billing.yaml:1: service: unknown service: no services/billing.yaml declares service `billing`"
        );
    }

    #[test]
    fn scopes_names_amounts_and_times_are_checked() {
        let text = "service: orders\nutilization: 1.5\ncapacity:\n  - scope: region\n    rps: 5\n  - scope: global\n    from: tomorrow\n    rps: 5\n  - scope: global\n    from: \"2026-12-20T00:00:00Z\"\n    query: sum(up)\n";
        let e = errors(text);
        let joined = e.join("\n");
        for want in [
            ":2: utilization: must be a fraction above 0 and at most 1",
            ":4: capacity[0].region: `scope: region` needs `region: NAME`",
            ":7: capacity[1].from: `tomorrow` is not an RFC 3339 instant",
            ":11: capacity[2].query: a query gives today's capacity",
        ] {
            assert!(joined.contains(want), "{want} in\n{joined}");
        }
        let e = errors(
            "service: orders\ncapacity:\n  - { scope: global, rps: 5 }\n  - { scope: global, rps: 6 }\n",
        );
        assert!(
            e[0].contains(":4: capacity[1].scope: a second capacity for global without `from`"),
            "{e:?}"
        );
        let e = errors("service: orders\ncapacity:\n  - { scope: continent, rps: 5 }\n");
        assert!(e[0].starts_with("capacity/orders.yaml:3"), "{e:?}");
    }
}
