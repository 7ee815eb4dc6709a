//! Turns config files (a directory, a git tree, or an `ApplyConfig` request) into a
//! validated [`Snapshot`], or refuses it with errors naming file, line and field.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use policies::guard_settings::GuardSettings;

use crate::bounds;
use crate::dir::{is_yaml, read_config_files};
use crate::raw::{LimitsFile, ServiceFile};
use crate::yaml::{self, LineIndex};
use crate::{
    Bucket, ConfigError, ConfigErrors, LimitSource, MatchRule, PolicyConfig, PriorityClass,
    ProcedurePattern, ScheduledLimit, ServiceConfig, Snapshot,
};
use grl_core::config::MAX_PRIORITIES;

/// Reads `services/*.yaml` and `limits/*.yaml` below `root`. The version is `version` if
/// given, else a hash of the contents.
pub fn load_dir(root: &Path, version: Option<&str>) -> Result<Snapshot, ConfigErrors> {
    let files = read_config_files(root).map_err(|e| ConfigErrors(vec![e]))?;
    let version = version.map_or_else(|| content_version(&files), str::to_string);
    from_files(&version, files)
}

/// A stable version string for a set of files (FNV-1a over paths and contents).
pub fn content_version(files: &[(String, String)]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (path, content) in files {
        for b in path.bytes().chain([0]).chain(content.bytes()).chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("sha-fnv-{h:016x}")
}

/// Validates config files given as `(relative path, content)`. Paths outside `services/`
/// and `limits/`, and files that are not YAML, are ignored.
pub fn from_files(
    version: &str,
    files: impl IntoIterator<Item = (String, String)>,
) -> Result<Snapshot, ConfigErrors> {
    let mut errors = Vec::new();
    let mut services: BTreeMap<String, ServiceConfig> = BTreeMap::new();
    let mut limit_files = Vec::new();
    let mut files: Vec<_> = files
        .into_iter()
        .filter(|(path, _)| {
            is_yaml(Path::new(path))
                && (path.starts_with("services/") || path.starts_with("limits/"))
        })
        .collect();
    files.sort();
    if let Err(e) = check_sizes(&files) {
        return Err(ConfigErrors(vec![e]));
    }
    for (path, text) in files {
        if let Err(e) = bounds::prescan(&path, &text) {
            errors.push(e);
            continue;
        }
        if path.starts_with("services/") {
            match parse_service(&path, &text) {
                Ok(svc) => {
                    if let Some(prev) = services.get(&svc.name) {
                        errors.push(ConfigError::new(
                            &path,
                            LineIndex::new(&text).line("service"),
                            "service",
                            format!(
                                "service `{}` is already declared in {}",
                                svc.name, prev.file
                            ),
                        ));
                    } else {
                        services.insert(svc.name.clone(), svc);
                    }
                }
                Err(mut e) => errors.append(&mut e),
            }
        } else if path.starts_with("limits/") {
            limit_files.push((path, text));
        }
    }
    for (path, text) in limit_files {
        if let Err(mut e) = apply_limits(&path, &text, &mut services) {
            errors.append(&mut e);
        }
    }
    let total: usize = services.values().map(|s| s.buckets.len()).sum();
    if total > bounds::MAX_BUCKETS {
        errors.push(ConfigError::new(
            "services",
            None,
            "",
            format!(
                "{total} buckets in all services, more than the {} allowed",
                bounds::MAX_BUCKETS
            ),
        ));
    }
    if errors.is_empty() {
        Ok(Snapshot {
            version: version.to_string(),
            services,
        })
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Refuses too many files, a file too large, or too many bytes in all (before any parsing).
fn check_sizes(files: &[(String, String)]) -> Result<(), ConfigError> {
    if files.len() > bounds::MAX_FILES {
        return Err(ConfigError::new(
            "services",
            None,
            "",
            format!(
                "{} config files, more than the {} allowed",
                files.len(),
                bounds::MAX_FILES
            ),
        ));
    }
    let total: usize = files.iter().map(|(_, t)| t.len()).sum();
    if total > bounds::MAX_TOTAL_BYTES {
        return Err(ConfigError::new(
            "services",
            None,
            "",
            format!(
                "config files hold {total} bytes, more than the {} allowed",
                bounds::MAX_TOTAL_BYTES
            ),
        ));
    }
    Ok(())
}

fn file_stem(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.rsplit_once('.').map_or(name, |(stem, _)| stem)
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= bounds::MAX_NAME_BYTES
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
}

/// A bucket's priority classes from `list` (written at field `list_at`) and its floors
/// `min_share` (at `share_at`); or every problem, as (field, message).
fn priority_classes(
    list: &[String],
    list_at: &str,
    min_share: &BTreeMap<String, f64>,
    share_at: &str,
) -> Result<Vec<PriorityClass>, Vec<(String, String)>> {
    let mut problems = Vec::new();
    if list.len() > MAX_PRIORITIES {
        problems.push((
            list_at.to_string(),
            format!(
                "{} classes, more than the {MAX_PRIORITIES} allowed",
                list.len()
            ),
        ));
    }
    for (j, name) in list.iter().enumerate() {
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !valid {
            problems.push((
                format!("{list_at}[{j}]"),
                format!(
                    "`{name}` is not a valid class name (letters, digits, - _ ., at most 64 bytes)"
                ),
            ));
        } else if let Some(first) = list[..j].iter().position(|n| n == name) {
            problems.push((
                format!("{list_at}[{j}]"),
                format!("`{name}` is listed twice (first as priorities[{first}])"),
            ));
        }
    }
    if list.is_empty() && !min_share.is_empty() {
        problems.push((
            share_at.to_string(),
            "floors need priority classes: this bucket has none".into(),
        ));
    }
    for (class, share) in min_share {
        let at = format!("{share_at}.{class}");
        if !list.is_empty() && !list.contains(class) {
            problems.push((
                at.clone(),
                format!(
                    "`{class}` is not one of the bucket's classes ({})",
                    list.join(", ")
                ),
            ));
        }
        if !share.is_finite() || !(0.0..=1.0).contains(share) {
            problems.push((
                at,
                format!("{share} is not a share of the limit between 0 and 1"),
            ));
        }
    }
    let total: f64 = min_share
        .values()
        .filter(|v| (0.0..=1.0).contains(*v))
        .sum();
    if total > 1.0 + 1e-9 {
        problems.push((
            share_at.to_string(),
            format!("the floors add up to {total} of the limit, more than all of it (1)"),
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(list
        .iter()
        .map(|name| PriorityClass {
            name: name.clone(),
            min_share: min_share.get(name).copied().unwrap_or(0.0),
        })
        .collect())
}

fn parse_service(path: &str, text: &str) -> Result<ServiceConfig, Vec<ConfigError>> {
    let raw: ServiceFile = yaml::parse(path, text).map_err(|e| vec![e])?;
    let index = LineIndex::new(text);
    let err =
        |field: String, message: String| ConfigError::new(path, index.line(&field), field, message);
    let mut errors = Vec::new();
    if !valid_name(&raw.service) {
        errors.push(err(
            "service".into(),
            format!(
                "is not a valid service name (letters, digits, - _ . :, at most {} bytes)",
                bounds::MAX_NAME_BYTES
            ),
        ));
    } else if raw.service != file_stem(path) {
        errors.push(err(
            "service".into(),
            format!(
                "must be `{stem}`, the name of its file ({path})",
                stem = file_stem(path)
            ),
        ));
    }
    if raw.buckets.len() > bounds::MAX_BUCKETS_PER_SERVICE {
        return Err(vec![err(
            "buckets".into(),
            format!(
                "{} buckets, more than the {} allowed per service",
                raw.buckets.len(),
                bounds::MAX_BUCKETS_PER_SERVICE
            ),
        )]);
    }
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut rules: HashMap<MatchRule, usize> = HashMap::new();
    let mut buckets = Vec::new();
    for (i, b) in raw.buckets.into_iter().enumerate() {
        let at = |f: &str| format!("buckets[{i}].{f}");
        if !valid_name(&b.name) {
            errors.push(err(
                at("name"),
                format!(
                    "is not a valid bucket name (letters, digits, - _ . :, at most {} bytes)",
                    bounds::MAX_NAME_BYTES
                ),
            ));
        } else if let Some(first) = names.insert(b.name.clone(), i) {
            let first_line = index.line(&format!("buckets[{first}].name"));
            errors.push(err(
                at("name"),
                format!(
                    "duplicate bucket name (first declared at line {})",
                    first_line.map_or("?".into(), |l| l.to_string())
                ),
            ));
        }
        let rule = match (&b.matcher.caller, &b.matcher.procedure) {
            (None, None) => {
                errors.push(err(
                    at("match"),
                    "needs a caller, a procedure, or both".into(),
                ));
                continue;
            }
            (Some(c), _) if c.is_empty() => {
                errors.push(err(at("match.caller"), "must not be empty".into()));
                continue;
            }
            (_, Some(p)) if p.is_empty() => {
                errors.push(err(at("match.procedure"), "must not be empty".into()));
                continue;
            }
            (Some(c), _) if bounds::name_problem(c).is_some() => {
                let problem = bounds::name_problem(c).unwrap_or_default();
                errors.push(err(at("match.caller"), problem));
                continue;
            }
            (_, Some(p)) if bounds::name_problem(p).is_some() => {
                let problem = bounds::name_problem(p).unwrap_or_default();
                errors.push(err(at("match.procedure"), problem));
                continue;
            }
            (c, p) => MatchRule {
                caller: c.clone(),
                procedure: p.as_deref().map(ProcedurePattern::parse),
            },
        };
        if let Some(first) = rules.insert(rule.clone(), i) {
            let first_line = index.line(&format!("buckets[{first}].match"));
            errors.push(err(
                at("match"),
                format!(
                    "same match as the bucket at line {}",
                    first_line.map_or("?".into(), |l| l.to_string())
                ),
            ));
        }
        let params: serde_json::Map<_, _> = b
            .policy
            .params
            .iter()
            .map(|(k, v)| (k.clone(), yaml::to_json(v)))
            .collect();
        if let Err(e) = policies::registry::from_spec(&b.policy.kind, &params) {
            errors.push(err(at(&format!("policy.{}", e.field)), e.message));
            continue;
        }
        let guards: serde_json::Map<_, _> = b
            .guards
            .iter()
            .map(|(k, v)| (k.clone(), yaml::to_json(v)))
            .collect();
        if let Err(e) = GuardSettings::default().with_overrides(&guards) {
            errors.push(err(at(&format!("guards.{}", e.field)), e.message));
            continue;
        }
        let (limit, limit_source) = if b.policy.kind == "fixed" {
            match params.get("rps").and_then(serde_json::Value::as_f64) {
                Some(rps) if bounds::limit_in_range(rps) => (Some(rps), LimitSource::Fixed),
                Some(rps) => {
                    errors.push(err(at("policy.rps"), bounds::limit_problem(rps)));
                    continue;
                }
                None => {
                    errors.push(err(
                        at("policy.rps"),
                        "a fixed policy needs `rps`, a finite number > 0".into(),
                    ));
                    continue;
                }
            }
        } else {
            (None, LimitSource::None)
        };
        let (list, list_at) = match (&b.priorities, &raw.priorities) {
            (Some(own), _) => (own.as_slice(), at("priorities")),
            (None, Some(service)) => (service.as_slice(), "priorities".to_string()),
            (None, None) => (&[][..], at("priorities")),
        };
        let priorities = match priority_classes(list, &list_at, &b.min_share, &at("min_share")) {
            Ok(p) => p,
            Err(problems) => {
                errors.extend(problems.into_iter().map(|(f, m)| err(f, m)));
                continue;
            }
        };
        buckets.push(Bucket {
            name: b.name,
            rule,
            scope: b.scope,
            mode: b.mode,
            policy: PolicyConfig {
                kind: b.policy.kind,
                params,
            },
            guards,
            limit,
            limit_source,
            evidence: serde_json::Map::new(),
            in_addition: b.in_addition,
            scheduled: Vec::new(),
            priorities,
        });
    }
    if errors.is_empty() {
        Ok(ServiceConfig::new(raw.service, path.to_string(), buckets))
    } else {
        Err(errors)
    }
}

fn apply_limits(
    path: &str,
    text: &str,
    services: &mut BTreeMap<String, ServiceConfig>,
) -> Result<(), Vec<ConfigError>> {
    let raw: LimitsFile = yaml::parse(path, text).map_err(|e| vec![e])?;
    let index = LineIndex::new(text);
    let err =
        |field: String, message: String| ConfigError::new(path, index.line(&field), field, message);
    if raw.service != file_stem(path) {
        return Err(vec![err(
            "service".into(),
            format!(
                "must be `{stem}`, the name of its file ({path})",
                stem = file_stem(path)
            ),
        )]);
    }
    let Some(service) = services.get_mut(&raw.service) else {
        return Err(vec![err(
            "service".into(),
            format!(
                "no services/{}.yaml declares service `{}`",
                raw.service, raw.service
            ),
        )]);
    };
    let mut errors = Vec::new();
    let mut updates = Vec::new();
    for (name, entry) in raw.limits {
        let field = format!("limits.{name}");
        let Some(i) = service.buckets.iter().position(|b| b.name == name) else {
            errors.push(err(
                field,
                format!("bucket `{name}` does not exist in {}", service.file),
            ));
            continue;
        };
        if !bounds::limit_in_range(entry.rps) {
            errors.push(err(
                format!("{field}.rps"),
                bounds::limit_problem(entry.rps),
            ));
            continue;
        }
        let scheduled = match scheduled_limits(&field, &entry.scheduled) {
            Ok(s) => s,
            Err(problems) => {
                errors.extend(problems.into_iter().map(|(f, m)| err(f, m)));
                continue;
            }
        };
        let evidence = entry
            .evidence
            .iter()
            .map(|(k, v)| (k.clone(), yaml::to_json(v)))
            .collect();
        updates.push((i, entry.rps, evidence, scheduled));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    for (i, rps, evidence, scheduled) in updates {
        let bucket = &mut service.buckets[i];
        bucket.evidence = evidence;
        bucket.scheduled = scheduled;
        if bucket.limit_source != LimitSource::Fixed {
            bucket.limit = Some(rps);
            bucket.limit_source = LimitSource::Computed;
        }
    }
    Ok(())
}

/// The scheduled limits of the entry at `field`, sorted by start; or every problem, each
/// with its field: a limit out of range, an instant that is not RFC 3339, a window that
/// ends before it starts, two windows that overlap.
fn scheduled_limits(
    field: &str,
    entries: &[crate::raw::ScheduledEntry],
) -> Result<Vec<ScheduledLimit>, Vec<(String, String)>> {
    let mut problems = Vec::new();
    let mut windows = Vec::new();
    let instant = |f: String, text: &str, problems: &mut Vec<(String, String)>| {
        match chrono::DateTime::parse_from_rfc3339(text) {
            Ok(t) => Some(t.timestamp()),
            Err(e) => {
                problems.push((
                    f,
                    format!(
                        "`{text}` is not an RFC 3339 instant such as 2026-12-31T22:00:00Z ({e})"
                    ),
                ));
                None
            }
        }
    };
    for (n, e) in entries.iter().enumerate() {
        let at = format!("{field}.scheduled[{n}]");
        if !bounds::limit_in_range(e.rps) {
            problems.push((format!("{at}.rps"), bounds::limit_problem(e.rps)));
        }
        let from = instant(
            format!("{at}.effective.from"),
            &e.effective.from,
            &mut problems,
        );
        let until = instant(
            format!("{at}.effective.until"),
            &e.effective.until,
            &mut problems,
        );
        let (Some(from), Some(until)) = (from, until) else {
            continue;
        };
        if until <= from {
            problems.push((
                format!("{at}.effective.until"),
                format!("must be after `from` ({})", e.effective.from),
            ));
            continue;
        }
        windows.push((
            n,
            ScheduledLimit {
                from,
                until,
                rps: e.rps,
                reason: e.reason.clone(),
            },
        ));
    }
    windows.sort_by_key(|(_, w)| w.from);
    for pair in windows.windows(2) {
        let ((a, first), (b, second)) = (&pair[0], &pair[1]);
        if second.from < first.until {
            problems.push((
                format!("{field}.scheduled[{b}].effective.from"),
                format!(
                    "overlaps scheduled[{a}] ({} until {}): two limits cannot be in force at once",
                    entries[*a].effective.from, entries[*a].effective.until
                ),
            ));
        }
    }
    if problems.is_empty() {
        Ok(windows.into_iter().map(|(_, w)| w).collect())
    } else {
        Err(problems)
    }
}
