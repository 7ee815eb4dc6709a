//! GRL, the global rate limiter: an in-process client decides each request locally by a
//! per-bucket drop ratio, zone aggregators sum what clients offer, and controllers compute
//! `drop_ratio = max(0, (offered - limit) / offered)` and send it back down.
//!
//! Modules: [`config`] (the validated config model shared with the configurator),
//! [`proto`] (the wire protocol).
#![forbid(unsafe_code)]

pub mod client;
pub mod config;
pub mod layer;
pub mod metric_names;
pub mod proto;
pub mod tier;
pub mod wire;
