//! The validated, immutable config model: a versioned [`Snapshot`] of services and their
//! buckets, the [`Matcher`] that finds a request's bucket, and why it found that one
//! ([`Matcher::explain`]). `grl-config` builds it from
//! YAML; the tiers build the client's view of it from the wire.

mod explain;
mod matcher;
mod model;

pub use explain::{Considered, Role};
pub use matcher::{Matcher, ProcedurePattern};
pub use model::{
    Bucket, LimitChange, LimitSource, MatchRule, Mode, PolicyConfig, ScheduledLimit, Scope,
    ServiceConfig, Snapshot,
};
