//! The GRL contract, shared by every tier, the client and the configurator: the wire
//! protocol ([`proto`], with conversions in [`wire`]), the metric names the configurator
//! reads ([`metric_names`]), and the validated config model with its request matcher
//! ([`config`]), and the one jittered [`backoff`] every reconnect and retry uses. Loading YAML into that model lives in `grl-config`, so a service that links
//! only the client never compiles a YAML parser.

pub mod backoff;
pub mod config;
pub mod metric_names;
pub mod proto;
pub mod wire;
