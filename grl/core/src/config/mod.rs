//! The validated, immutable config model: a versioned [`Snapshot`] of services and their
//! buckets, and the [`Matcher`] that finds a request's bucket. `grl-config` builds it from
//! YAML; the tiers build the client's view of it from the wire.

mod matcher;
mod model;

pub use matcher::{Matcher, ProcedurePattern};
pub use model::{
    Bucket, LimitSource, MatchRule, Mode, PolicyConfig, Scope, ServiceConfig, Snapshot,
};
