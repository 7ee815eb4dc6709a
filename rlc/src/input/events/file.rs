//! `events.yaml` at the config repo's root as written, and its validation into [`Event`]s:
//! every refusal names file, line and field, like every file of the config repo.

use std::collections::{BTreeMap, BTreeSet};

use grl_config::yaml::{self, LineIndex};
use grl_config::{ConfigError, Snapshot};
use policies::event::Raise;
use serde::Deserialize;

use crate::input::capacity::file::instant;

/// Where the events file lives in the config repo.
pub const PATH: &str = "events.yaml";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    events: Vec<RawEvent>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    name: String,
    from: String,
    until: String,
    #[serde(default)]
    services: Option<Vec<String>>,
    #[serde(default)]
    buckets: Option<Vec<String>>,
    #[serde(default)]
    multiplier: Option<f64>,
    #[serde(default)]
    rps: Option<f64>,
    #[serde(default)]
    reason: Option<String>,
}

/// What an event affects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Targets {
    /// Every computed bucket of these services; an `rps` is the service's total.
    Services(Vec<String>),
    /// These `(service, bucket)` pairs; an `rps` is each bucket's.
    Buckets(Vec<(String, String)>),
}

/// One validated event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Its name (unique in the file).
    pub name: String,
    /// Its window's start (unix seconds, included).
    pub from: i64,
    /// Its window's end (unix seconds, excluded).
    pub until: i64,
    /// What it affects.
    pub targets: Targets,
    /// How it changes the expected traffic.
    pub raise: Raise,
    /// Why, for people.
    pub reason: Option<String>,
    /// Its field path (`events[2]`), for errors.
    pub field: String,
}

impl Event {
    /// Whether the event affects `service/bucket` (a computed bucket of the service).
    pub fn affects(&self, service: &str, bucket: &str) -> bool {
        match &self.targets {
            Targets::Services(s) => s.iter().any(|s| s == service),
            Targets::Buckets(b) => b.iter().any(|(s, n)| s == service && n == bucket),
        }
    }

    /// Whether it affects any bucket of `service`.
    pub fn touches(&self, service: &str) -> bool {
        match &self.targets {
            Targets::Services(s) => s.iter().any(|s| s == service),
            Targets::Buckets(b) => b.iter().any(|(s, _)| s == service),
        }
    }
}

/// The events of `text` (the content of `path`), checked on their own: names, instants,
/// windows, targets and raises. Without a snapshot the targets are not looked up (`rlc
/// backtest`); [`check`] does that for a run.
pub fn parse(path: &str, text: &str) -> Result<Vec<Event>, Vec<ConfigError>> {
    let raw: RawFile = yaml::parse(path, text).map_err(|e| vec![e])?;
    let index = LineIndex::new(text);
    let err =
        |field: String, message: String| ConfigError::new(path, index.line(&field), field, message);
    let mut errors = Vec::new();
    let mut events = Vec::new();
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for (i, e) in raw.events.into_iter().enumerate() {
        let at = |f: &str| format!("events[{i}].{f}");
        let before = errors.len();
        if e.name.is_empty() || grl_config::bounds::name_problem(&e.name).is_some() {
            errors.push(err(at("name"), "is not a usable event name".into()));
        } else if let Some(first) = names.insert(e.name.clone(), i) {
            errors.push(err(
                at("name"),
                format!(
                    "a second event `{}` (first at line {})",
                    e.name,
                    index
                        .line(&format!("events[{first}].name"))
                        .map_or("?".into(), |l| l.to_string())
                ),
            ));
        }
        let from = instant(&e.from).map_err(|m| errors.push(err(at("from"), m)));
        let until = instant(&e.until).map_err(|m| errors.push(err(at("until"), m)));
        if let (Ok(f), Ok(u)) = (from, until)
            && u <= f
        {
            errors.push(err(
                at("until"),
                format!("must be after `from` ({})", e.from),
            ));
        }
        let targets = match (e.services, e.buckets) {
            (Some(s), None) if !s.is_empty() => Some(Targets::Services(s)),
            (None, Some(b)) if !b.is_empty() => {
                let mut pairs = Vec::new();
                for (k, name) in b.iter().enumerate() {
                    match name.split_once('/') {
                        Some((s, n)) if !s.is_empty() && !n.is_empty() && !n.contains('/') => {
                            pairs.push((s.to_string(), n.to_string()));
                        }
                        _ => errors.push(err(
                            format!("events[{i}].buckets[{k}]"),
                            "name a bucket as SERVICE/BUCKET, e.g. orders/checkout".into(),
                        )),
                    }
                }
                Some(Targets::Buckets(pairs))
            }
            (Some(_), Some(_)) => {
                errors.push(err(
                    at("buckets"),
                    "give `services` or `buckets`, not both".into(),
                ));
                None
            }
            _ => {
                errors.push(err(
                    format!("events[{i}]"),
                    "needs `services: [..]` or `buckets: [SERVICE/BUCKET, ..]`, not empty".into(),
                ));
                None
            }
        };
        let raise = match (e.multiplier, e.rps) {
            (Some(m), None) if m.is_finite() && m > 0.0 => Some(Raise::Multiplier(m)),
            (None, Some(r)) if r.is_finite() && r > 0.0 => Some(Raise::Rps(r)),
            (Some(m), None) => {
                errors.push(err(
                    at("multiplier"),
                    format!("must be a finite number above 0 (got {m})"),
                ));
                None
            }
            (None, Some(r)) => {
                errors.push(err(
                    at("rps"),
                    format!("must be a finite number above 0 (got {r})"),
                ));
                None
            }
            (Some(_), Some(_)) => {
                errors.push(err(
                    at("rps"),
                    "give `multiplier` or `rps`, not both".into(),
                ));
                None
            }
            (None, None) => {
                errors.push(err(
                    format!("events[{i}]"),
                    "needs `multiplier` (of the usual traffic) or `rps` (the expected rate)".into(),
                ));
                None
            }
        };
        if errors.len() > before {
            continue;
        }
        let (Ok(from), Ok(until), Some(targets), Some(raise)) = (from, until, targets, raise)
        else {
            continue;
        };
        events.push(Event {
            name: e.name,
            from,
            until,
            targets,
            raise,
            reason: e.reason.filter(|r| !r.is_empty()),
            field: format!("events[{i}]"),
        });
    }
    if errors.is_empty() {
        Ok(events)
    } else {
        Err(errors)
    }
}

/// Checks `events` (parsed from `text`) against the services of `snapshot`: every service
/// and bucket named exists, a bucket named is computed (a `fixed` limit is a contract), and
/// no two events overlap on one bucket.
pub fn check(
    path: &str,
    text: &str,
    events: &[Event],
    snapshot: &Snapshot,
) -> Result<(), Vec<ConfigError>> {
    let index = LineIndex::new(text);
    let err =
        |field: String, message: String| ConfigError::new(path, index.line(&field), field, message);
    let mut errors = Vec::new();
    let mut windows: BTreeMap<(String, String), Vec<&Event>> = BTreeMap::new();
    for e in events {
        match &e.targets {
            Targets::Services(names) => {
                for (k, s) in names.iter().enumerate() {
                    match snapshot.service(s) {
                        None => errors.push(err(
                            format!("{}.services[{k}]", e.field),
                            format!("unknown service `{s}`: no services/{s}.yaml declares it"),
                        )),
                        Some(svc) => {
                            for b in svc.buckets.iter().filter(|b| crate::input::is_computed(b)) {
                                windows
                                    .entry((s.clone(), b.name.clone()))
                                    .or_default()
                                    .push(e);
                            }
                        }
                    }
                }
            }
            Targets::Buckets(pairs) => {
                for (k, (s, b)) in pairs.iter().enumerate() {
                    let field = format!("{}.buckets[{k}]", e.field);
                    match snapshot.service(s).map(|svc| svc.bucket(b)) {
                        None => errors.push(err(
                            field,
                            format!("unknown service `{s}`: no services/{s}.yaml declares it"),
                        )),
                        Some(None) => {
                            errors.push(err(field, format!("service `{s}` has no bucket `{b}`")));
                        }
                        Some(Some(bucket)) if !crate::input::is_computed(bucket) => errors.push(err(
                            field,
                            format!("`{s}/{b}` has a fixed limit (a contract): an event does not change it"),
                        )),
                        Some(Some(_)) => {
                            windows.entry((s.clone(), b.clone())).or_default().push(e);
                        }
                    }
                }
            }
        }
    }
    let mut reported = BTreeSet::new();
    for ((s, b), mut list) in windows {
        list.sort_by_key(|e| e.from);
        for pair in list.windows(2) {
            let (first, second) = (pair[0], pair[1]);
            if second.from < first.until && reported.insert((&first.name, &second.name)) {
                errors.push(err(
                    format!("{}.from", second.field),
                    format!(
                        "`{}` overlaps `{}` ({} until {}) on {s}/{b}: one bucket has one limit at a time",
                        second.name,
                        first.name,
                        crate::input::capacity::utc(first.from),
                        crate::input::capacity::utc(first.until)
                    ),
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> Snapshot {
        let svc = "service: orders\nbuckets:\n  - name: checkout\n    match: { caller: web }\n    scope: global\n    mode: deny\n    policy: { kind: historical-peak }\n  - name: partner\n    match: { caller: partner }\n    scope: global\n    mode: deny\n    policy: { kind: fixed, rps: 10 }\n";
        grl_config::from_files("v", [("services/orders.yaml".to_string(), svc.to_string())])
            .unwrap()
    }

    fn all_errors(text: &str) -> Vec<String> {
        let e = match parse(PATH, text) {
            Ok(events) => check(PATH, text, &events, &snapshot()).unwrap_err(),
            Err(e) => e,
        };
        e.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_contract_example_parses() {
        let text = "events:\n  - name: new-years-eve\n    from: \"2026-12-31T22:00:00Z\"\n    until: \"2027-01-01T02:00:00Z\"\n    services: [orders]\n    multiplier: 3\n  - name: launch\n    from: \"2027-02-01T10:00:00Z\"\n    until: \"2027-02-01T12:00:00Z\"\n    buckets: [orders/checkout]\n    rps: 5000\n    reason: the spring launch\n";
        let events = parse(PATH, text).unwrap();
        check(PATH, text, &events, &snapshot()).unwrap();
        assert_eq!(events[0].raise, Raise::Multiplier(3.0));
        assert_eq!(events[0].until - events[0].from, 4 * 3_600);
        assert!(events[0].affects("orders", "checkout"));
        assert_eq!(
            events[1].targets,
            Targets::Buckets(vec![("orders".into(), "checkout".into())])
        );
        assert_eq!(events[1].reason.as_deref(), Some("the spring launch"));
    }

    #[test]
    fn overlapping_windows_on_one_bucket_are_refused() {
        let text = "events:\n  - name: a\n    from: \"2026-12-31T22:00:00Z\"\n    until: \"2027-01-01T02:00:00Z\"\n    services: [orders]\n    multiplier: 3\n  - name: b\n    from: \"2027-01-01T01:00:00Z\"\n    until: \"2027-01-01T03:00:00Z\"\n    buckets: [orders/checkout]\n    multiplier: 2\n";
        assert_eq!(
            all_errors(text),
            [
                "events.yaml:8: events[1].from: `b` overlaps `a` (2026-12-31T22:00:00Z until 2027-01-01T02:00:00Z) on orders/checkout: one bucket has one limit at a time"
            ]
        );
    }

    #[test]
    fn unknown_services_and_buckets_and_fixed_buckets_are_refused() {
        let text = "events:\n  - name: a\n    from: \"2026-12-31T22:00:00Z\"\n    until: \"2027-01-01T02:00:00Z\"\n    services: [billing]\n    multiplier: 3\n  - name: b\n    from: \"2026-12-31T22:00:00Z\"\n    until: \"2027-01-01T02:00:00Z\"\n    buckets: [orders/nope, orders/partner]\n    multiplier: 3\n";
        let e = all_errors(text);
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(
            e[0].starts_with("events.yaml:5: events[0].services[0]: unknown service `billing`"),
            "{e:?}"
        );
        assert!(
            e[1].contains("events[1].buckets[0]: service `orders` has no bucket `nope`"),
            "{e:?}"
        );
        assert!(
            e[2].contains("events[1].buckets[1]: `orders/partner` has a fixed limit"),
            "{e:?}"
        );
    }

    #[test]
    fn windows_raises_and_names_are_checked() {
        let text = "events:\n  - name: a\n    from: \"2027-01-01T02:00:00Z\"\n    until: \"2027-01-01T02:00:00Z\"\n    services: [orders]\n    multiplier: 0\n  - name: a\n    from: noon\n    until: \"2027-01-01T02:00:00Z\"\n    services: [orders]\n    rps: 5\n    multiplier: 2\n";
        let e = all_errors(text).join("\n");
        for want in [
            "events.yaml:4: events[0].until: must be after `from`",
            "events.yaml:6: events[0].multiplier: must be a finite number above 0 (got 0)",
            "events.yaml:7: events[1].name: a second event `a` (first at line 2)",
            "events.yaml:8: events[1].from: `noon` is not an RFC 3339 instant",
            "events[1].rps: give `multiplier` or `rps`, not both",
        ] {
            assert!(e.contains(want), "{want} in\n{e}");
        }
    }
}
