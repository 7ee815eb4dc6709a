//! GRL's tiers: the zone aggregator and the regional/global controller, with the config
//! follower, incident overrides, their admin endpoints and metrics ([`tier`]); and the
//! [`sidecar`] (a reverse proxy and Envoy's rate limit service around one client) that
//! enforces for services in any language. The `grl` binary (in `main.rs`) runs them,
//! generates load through real clients and manages overrides. The client itself is
//! `grl-client`; the contract is `grl-core`.

pub mod net;
pub mod sidecar;
pub mod tier;
pub mod view;
