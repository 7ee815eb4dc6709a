//! The GRL contract, shared by every tier, the client and the configurator: the wire
//! protocol ([`proto`], with conversions in [`wire`]), the metric names the configurator
//! reads ([`metric_names`]), and the validated config model with its request matcher
//! ([`config`]), the one jittered [`backoff`] every reconnect and retry uses, the keepalive and connect
//! timeouts of every stream between the layers ([`link`]), and (feature `tls`) the
//! client side of TLS on every link (`tls`). Loading YAML into that model lives in `grl-config`, so a service that links
//! only the client never compiles a YAML parser.

pub mod backoff;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod link;
pub mod metric_names;
pub mod packed;
pub mod proto;
#[cfg(feature = "tls")]
pub mod tls;
pub mod wire;
