//! The metric contract between the GRL (which exports) and the configurator (which reads).
//!
//! Defined once here; `rlc` builds its PromQL from these names. Every client exports
//! [`REQUESTS_TOTAL`] with labels [`LABELS`], counting every *offered* request with the
//! decision as a label, so the configurator can read offered load (all decisions) rather than
//! admitted load — reading admitted load only would make enforced limits ratchet down.

/// Counter of offered requests: `grl_requests_total{service, caller, procedure, bucket, decision}`.
pub const REQUESTS_TOTAL: &str = "grl_requests_total";

/// The labels of [`REQUESTS_TOTAL`], in order.
pub const LABELS: [&str; 5] = ["service", "caller", "procedure", "bucket", "decision"];

/// Counter of offered requests of each priority class of the buckets that have classes:
/// `grl_client_class_requests_total{service, bucket, class, decision}` (a request counts in
/// the class it was decided in; [`REQUESTS_TOTAL`] counts it too).
pub const CLASS_REQUESTS_TOTAL: &str = "grl_client_class_requests_total";

/// The label of [`CLASS_REQUESTS_TOTAL`] that names the class.
pub const LABEL_CLASS: &str = "class";

/// `decision` label: the request was let through.
pub const DECISION_ALLOWED: &str = "allowed";
/// `decision` label: the request was refused (deny mode).
pub const DECISION_DROPPED: &str = "dropped";
/// `decision` label: shadow mode would have refused it; it was let through.
pub const DECISION_SHADOW_DROPPED: &str = "shadow_dropped";

/// The `bucket` label of requests that matched no bucket.
pub const UNMATCHED_BUCKET: &str = "";

/// The `caller`/`procedure` label value that stands for all names past the client's bound.
pub const OVERFLOW_LABEL: &str = "__overflow__";
