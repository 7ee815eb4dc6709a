//! The validated, immutable config: a versioned [`Snapshot`] of services and their buckets.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::matcher::{Matcher, ProcedurePattern};

/// Over which traffic a bucket's limit holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The sum over all regions.
    Global,
    /// Each region's sum separately.
    Region,
    /// Each zone's sum separately.
    Zone,
}

/// Whether a bucket enforces its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Drop the excess.
    Deny,
    /// Decide, count virtual drops, let everything through.
    Shadow,
}

impl Scope {
    /// The name as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::Region => "region",
            Scope::Zone => "zone",
        }
    }
}

impl Mode {
    /// The name as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Deny => "deny",
            Mode::Shadow => "shadow",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which requests a bucket takes: a caller, a procedure pattern, or both.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MatchRule {
    /// Exact caller, or any caller when `None`.
    pub caller: Option<String>,
    /// Procedure pattern, or any procedure when `None`.
    pub procedure: Option<ProcedurePattern>,
}

impl MatchRule {
    /// Whether the rule takes this request.
    pub fn matches(&self, caller: &str, procedure: &str) -> bool {
        self.caller.as_deref().is_none_or(|c| c == caller)
            && self.procedure.as_ref().is_none_or(|p| p.matches(procedure))
    }
}

impl fmt::Display for MatchRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let caller = self.caller.as_deref().unwrap_or("*");
        let procedure = self
            .procedure
            .as_ref()
            .map_or_else(|| "*".into(), ProcedurePattern::as_written);
        write!(f, "caller={caller} procedure={procedure}")
    }
}

/// A bucket's policy as configured: its kind and raw parameters (interpreted by `policies`).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// A kind registered in the `policies` registry (`grl-config` checks it at load).
    pub kind: String,
    /// The parameters other than `kind`, as JSON.
    pub params: serde_json::Map<String, serde_json::Value>,
}

/// Where a bucket's effective limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSource {
    /// `policy: { kind: fixed, rps }`.
    Fixed,
    /// `limits/<service>.yaml`, written by the configurator.
    Computed,
    /// No limit yet: the bucket is not enforced.
    None,
}

/// One validated bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// Unique within its service.
    pub name: String,
    /// Which requests it takes.
    pub rule: MatchRule,
    /// Over which traffic the limit holds.
    pub scope: Scope,
    /// Enforce or shadow.
    pub mode: Mode,
    /// How the configurator computes its limit.
    pub policy: PolicyConfig,
    /// Per-bucket guard overrides for the configurator (JSON object, may be empty).
    pub guards: serde_json::Map<String, serde_json::Value>,
    /// The effective limit in requests per second; `None` means not enforced.
    pub limit: Option<f64>,
    /// Where `limit` comes from.
    pub limit_source: LimitSource,
    /// Evidence the configurator wrote beside the limit (JSON object, may be empty).
    pub evidence: serde_json::Map<String, serde_json::Value>,
    /// Applies in addition to a more specific bucket that takes the request (see
    /// [`Matcher::find_in_addition`]).
    pub in_addition: bool,
    /// Limits in force only for a while (an event's), by start, never overlapping: inside
    /// one, its limit replaces `limit`.
    pub scheduled: Vec<ScheduledLimit>,
    /// Its priority classes, highest first (none: one class, as before classes). When
    /// the bucket must shed, the lowest classes go first (see [`PriorityClass`]).
    pub priorities: Vec<PriorityClass>,
}

/// At most this many priority classes per bucket.
pub const MAX_PRIORITIES: usize = 8;

/// The class that requests without a class, or with one the bucket does not list, count
/// in when the bucket lists it (else its lowest class).
pub const DEFAULT_PRIORITY: &str = "default";

/// Between a bucket's name and a class's in the name the tiers and clients use for one
/// class of a bucket (`checkout#critical`); bucket names cannot hold it.
pub const CLASS_SEPARATOR: char = '#';

/// One priority class of a bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct PriorityClass {
    /// Its name, unique within the bucket.
    pub name: String,
    /// The share of the bucket's limit the class keeps whatever the classes above it
    /// offer (0 to 1; 0: it may be shed entirely).
    pub min_share: f64,
}

/// The name of class `class` of bucket `bucket` on the wire, in reports, metrics and
/// status: `bucket#class`.
pub fn class_bucket_name(bucket: &str, class: &str) -> String {
    format!("{bucket}{CLASS_SEPARATOR}{class}")
}

/// The bucket and class of a name made by [`class_bucket_name`]; the name and `None` for
/// a bucket without classes.
pub fn split_class(name: &str) -> (&str, Option<&str>) {
    match name.split_once(CLASS_SEPARATOR) {
        Some((bucket, class)) => (bucket, Some(class)),
        None => (name, None),
    }
}

/// A limit in force from `from` (included) until `until` (excluded), Unix seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledLimit {
    /// When it takes effect.
    pub from: i64,
    /// When it ends (the bucket's own limit is back).
    pub until: i64,
    /// The limit meanwhile, requests per second.
    pub rps: f64,
    /// Why (an event's name), for people.
    pub reason: String,
}

/// A change of a bucket's limit in force: when, and the limit from then on (`None`: not
/// enforced).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitChange {
    /// When, in Unix seconds.
    pub at: i64,
    /// The limit from then on.
    pub rps: Option<f64>,
}

impl Bucket {
    /// The position in [`Bucket::priorities`] of the class that requests without a class
    /// (or with an unknown one) count in: [`DEFAULT_PRIORITY`] if listed, else the lowest.
    /// `None` for a bucket without classes.
    pub fn default_class(&self) -> Option<usize> {
        let last = self.priorities.len().checked_sub(1)?;
        Some(
            self.priorities
                .iter()
                .position(|c| c.name == DEFAULT_PRIORITY)
                .unwrap_or(last),
        )
    }

    /// The limit in force at `unix`: a scheduled limit's inside its window, else `limit`.
    pub fn limit_at(&self, unix: i64) -> Option<f64> {
        self.scheduled
            .iter()
            .find(|w| w.from <= unix && unix < w.until)
            .map_or(self.limit, |w| Some(w.rps))
    }

    /// The next change of the limit in force after `unix`, if one is scheduled.
    pub fn next_change(&self, unix: i64) -> Option<LimitChange> {
        let at = self
            .scheduled
            .iter()
            .flat_map(|w| [w.from, w.until])
            .filter(|t| *t > unix)
            .min()?;
        Some(LimitChange {
            at,
            rps: self.limit_at(at),
        })
    }
}

/// One service's buckets, with a matcher over them.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The destination service.
    pub name: String,
    /// Its buckets, in file order.
    pub buckets: Vec<Bucket>,
    /// Which file declared it, relative to the config root.
    pub file: String,
    matcher: Matcher,
}

impl ServiceConfig {
    /// Builds a service and its matcher.
    pub fn new(name: String, file: String, buckets: Vec<Bucket>) -> Self {
        let matcher = Matcher::new(buckets.iter().map(|b| (&b.rule, false)));
        Self {
            name,
            buckets,
            file,
            matcher,
        }
    }

    /// The bucket a request belongs to.
    pub fn find(&self, caller: &str, procedure: &str) -> Option<&Bucket> {
        self.matcher
            .find(caller, procedure)
            .map(|i| &self.buckets[i])
    }

    /// The bucket that also applies to `caller` calling `procedure` beside the one
    /// [`find`](Self::find) gives (see [`Matcher::find_in_addition`]).
    pub fn find_in_addition(&self, caller: &str, procedure: &str) -> Option<&Bucket> {
        let own = self.matcher.find(caller, procedure);
        self.matcher
            .find_in_addition(caller, procedure, own, |i| self.buckets[i].in_addition)
            .map(|i| &self.buckets[i])
    }

    /// A bucket by name.
    pub fn bucket(&self, name: &str) -> Option<&Bucket> {
        self.buckets.iter().find(|b| b.name == name)
    }
}

/// An immutable, versioned view of the whole config repo.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// E.g. the git commit id it was read from, or a content hash.
    pub version: String,
    /// Services by name.
    pub services: BTreeMap<String, ServiceConfig>,
}

impl Snapshot {
    /// A service by name.
    pub fn service(&self, name: &str) -> Option<&ServiceConfig> {
        self.services.get(name)
    }

    /// Every bucket with its service name.
    pub fn buckets(&self) -> impl Iterator<Item = (&str, &Bucket)> {
        self.services
            .values()
            .flat_map(|s| s.buckets.iter().map(move |b| (s.name.as_str(), b)))
    }

    /// How many scheduled limit changes (window starts and ends, of every bucket) have
    /// happened by `unix`; `None` when no limit is scheduled. It changes exactly when some
    /// bucket's limit in force does.
    pub fn schedule_epoch(&self, unix: i64) -> Option<u64> {
        let mut any = false;
        let mut passed = 0;
        for (_, b) in self.buckets() {
            for w in &b.scheduled {
                any = true;
                passed += u64::from(w.from <= unix) + u64::from(w.until <= unix);
            }
        }
        any.then_some(passed)
    }

    /// Buckets that have no limit and so are not enforced (reported, not an error).
    pub fn unenforced(&self) -> impl Iterator<Item = (&str, &Bucket)> {
        self.buckets().filter(|(_, b)| b.limit.is_none())
    }
}
