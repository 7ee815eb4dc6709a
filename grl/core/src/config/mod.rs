//! The validated, immutable config model: a versioned [`Snapshot`] of services and their
//! buckets, the [`Matcher`] that finds a request's bucket, and why it found that one
//! ([`Matcher::explain`]). `grl-config` builds it from
//! YAML; the tiers build the client's view of it from the wire.

mod class_share;
mod explain;
mod matcher;
mod model;

pub use class_share::class_limit;
pub use explain::{Considered, Role};
pub use matcher::{Matcher, ProcedurePattern};
pub use model::{
    Bucket, CLASS_SEPARATOR, DEFAULT_PRIORITY, LimitChange, LimitSource, MAX_PRIORITIES, MatchRule,
    Mode, PolicyConfig, PriorityClass, ScheduledLimit, Scope, ServiceConfig, Snapshot,
    class_bucket_name, split_class,
};
